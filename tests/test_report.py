"""Summary and report built from synthetic runs (tests/synthetic.py), checked against their raw samples.

The default synthetic run is RMSNorm t32 and t256 with torch beside them, on an L2-resident, a
mid-size and a DRAM-sized shape, two repeats, with the kit's ceilings; the seed run adds seed
000's operations and the span view. Every expected number is recomputed here from the records.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import statistics
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO
from synthetic import Disturbance, ceiling_record, copy_run, edit, timing_files, write_run

from kernelkit import diff, report
from kernelkit.cli import main
from kernelkit.nvml import Nvml
from kernelkit.records import read_json, write_record
from kernelkit import units


@pytest.fixture(scope="module")
def run_dir(synthetic_run):
    return synthetic_run


@pytest.fixture(scope="module")
def config(run_dir):
    return read_json(run_dir / "config.json")


@pytest.fixture(scope="module")
def markdown(run_dir):
    return report.render_markdown(run_dir)


@pytest.fixture(scope="module")
def seed_markdown(seed_run):
    return report.render_markdown(seed_run)


def configurations(config):
    return sum(len(e["shapes"]) * len(e["layouts"]) for e in config["kernels"].values())


def test_summary_rows_are_the_medians_of_the_raw_samples(tmp_path, run_dir, config):
    files = timing_files(run_dir)
    assert len(files) == configurations(config) * config["timing"]["repeats"]
    output = tmp_path / "summary.csv"
    assert main(["summary", "--output", str(output), *map(str, files)]) == 0
    table = pd.read_csv(output)
    assert len(table) == len(files) and table["n"].eq(config["timing"]["samples"]).all()
    for path in files:
        record = json.loads(path.read_text())
        row = table[(table["shape"] == record["shape"]) & (table["layout"] == record["layout"])
                    & (table["repeat"] == record["repeat"])].iloc[0]
        assert row["median_us"] == pytest.approx(statistics.median(record["samples_us"]), abs=1e-6)
        assert row["min_us"] == pytest.approx(min(record["samples_us"]), abs=1e-6)
    # Each repeat ran its targets in its own order, positions 0, 1, ...
    for _, group in table.groupby("repeat"):
        assert sorted(group["order_position"]) == list(range(configurations(config)))


def test_summary_says_how_each_sample_was_taken_also_for_records_of_older_kits(tmp_path, run_dir):
    """The method columns come from each record; records of a kit before them (format version 1:
    no method_used, sampler or placements) get what those kits did, and "not measured" stays empty."""
    legacy = write_run(tmp_path, "legacy", legacy=True)
    tables = {}
    for name, run in (("current", run_dir), ("legacy", legacy)):
        output = tmp_path / f"{name}.csv"
        assert main(["summary", "--output", str(output), *map(str, timing_files(run))]) == 0
        tables[name] = pd.read_csv(output, dtype=str)
    for table in tables.values():
        assert table["method"].eq("cuda_graph_replay").all() and table["cache"].eq("warm").all()
        assert table["stopped_by"].eq("fixed_count").all()
        # One placement per process: nothing to compare, left empty.
        assert table["placements"].eq("1").all() and table["placement_spread"].isna().all()
    assert tables["legacy"]["calls_per_sample"].eq("64").all()
    assert tables["legacy"]["disturbed_samples"].isna().all() and tables["current"]["disturbed_samples"].eq("0").all()
    current = {(r["kernel"], r["shape"], r["layout"], r["repeat"]): r for r in map(read_json, timing_files(run_dir))}
    for row in tables["current"].itertuples():
        record = current[(row.kernel, row.shape, row.layout, int(row.repeat))]
        assert int(row.calls_per_sample) == record["method_used"]["launches_per_sample"]


def test_report_tables_trace_to_samples(markdown, run_dir):
    for path in timing_files(run_dir)[:6]:
        record = json.loads(path.read_text())
        assert f"rep{record['repeat']}: {statistics.median(record['samples_us']):.3f} \\[" in markdown
    run = report.Run(run_dir)
    cases = [case for record in run.correctness for case in record["cases"]]
    assert f"{len(cases)} cases in all" in markdown
    for record in run.correctness:
        layout = record["layouts"][0]
        assert f"| rmsnorm | {layout} | {len(record['cases'])}/{len(record['cases'])} |" in markdown


def test_report_shows_controls_and_what_caught_them(markdown, run_dir):
    """The controls are the kit's checks of the emulated mutations: removing epsilon turns the
    all-zero rows into NaN; the tail control leaves every row's last element unwritten."""
    run = report.Run(run_dir)
    epsilon = next(line for line in markdown.splitlines() if line.startswith("| rmsnorm | epsilon |"))
    zeros = [c for c in next(r for r in run.controls if r["control"] == "epsilon")["cases"] if c["pattern"] == "zeros"]
    assert f"NaN ({len(zeros)} cases; patterns zeros)" in epsilon
    tail = next(line for line in markdown.splitlines() if line.startswith("| rmsnorm | tail |"))
    cases = len(next(r for r in run.controls if r["control"] == "tail")["cases"])
    assert f"{cases}/{cases}" in tail and "sentinel left" in tail
    assert "Negative controls: 2 of 2 mutated builds were caught by the checks" in markdown


def test_hypothesis_is_checked_against_each_repeat(markdown, run_dir):
    table = report.Run(run_dir).table
    hypothesis = {"kernel": "rmsnorm", "statement": "s", "faster": "t256", "slower": "t32"}
    verdicts = report.hypothesis_verdicts(table, hypothesis)
    assert [v["repeat"] for v in verdicts] == [1, 2]
    for verdict in verdicts:
        medians = table[table["repeat"] == verdict["repeat"]].pivot(index="shape", columns="layout", values="median_us")
        losing = sorted(medians.index[~(medians["t256"] < medians["t32"])])
        assert verdict["holds"] == (not losing)
        assert f"rep{verdict['repeat']} {'holds' if verdict['holds'] else 'fails'}" in markdown.split("## Answers")[1]


def test_faster_layout_table_covers_every_shape(markdown, config):
    section = markdown.split("Faster layout per shape")[1].split("Resources of the compiled kernel")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "x" in line.split("|")[1]]
    assert len(rows) == len(config["kernels"]["rmsnorm"]["shapes"])


def test_report_says_when_nvml_was_missing(tmp_path, monkeypatch, run_dir):
    # The environment as recorded, with its NVML part replaced by what the kit records
    # when nvidia-ml-py cannot be imported: every NVML field "unavailable: ...".
    copy = copy_run(run_dir, tmp_path)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    nvml = Nvml()
    assert nvml.error.startswith("unavailable: NVML could not be used (ModuleNotFoundError")
    edit(copy / "environment.json", lambda r: r.update(nvml_available=False, nvml_error=nvml.error,
                                                        gpu=nvml.static_fields(), snapshot=nvml.snapshot()))
    text = report.render_markdown(copy)
    assert "NVML was not usable (unavailable: NVML could not be used (ModuleNotFoundError" in text
    assert "SM clock at capture: now / max / application | unavailable: NVML could not be used" in text


def test_html_is_self_contained_escaped_and_small(tmp_path, run_dir):
    copy = copy_run(run_dir, tmp_path)
    edit(copy / "config.json", lambda c: c["hypotheses"][0].update(statement="<script>alert('x')</script> & more"))
    figures = tmp_path / "figures"
    timing = [str(p) for p in timing_files(copy)]
    assert main(["figure", "--kernel", "rmsnorm", "--output", str(figures / "rmsnorm.svg"), *timing]) == 0
    md, html = tmp_path / "report.md", tmp_path / "report.html"
    assert main(["report", str(copy), "--figures", str(figures), "--markdown", str(md), "--html", str(html)]) == 0
    page = html.read_text()
    assert md.read_text().startswith("# ")
    assert "<script>" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in page
    # The Markdown shows the markup as text too: escaped, never raw.
    assert "<script>" not in md.read_text() and "&lt;script>alert('x')&lt;/script> &amp; more" in md.read_text()
    # One timing figure and the answers chart of the one hypothesis; nothing fetched from elsewhere.
    assert page.count("<svg") == 3 and "<img" not in page and "<link" not in page
    assert not re.search(r"""(src|href)=["']https?:""", page)
    assert html.stat().st_size < 5 * 2**20
    # The Markdown carries the same sections and links the figure instead of inlining it.
    sections = re.findall(r"^## (.+)$", md.read_text(), re.MULTILINE)
    assert sections == re.findall(r"<h2 id=\"[^\"]+\">(.+?)</h2>", page) and sections[0] == "Answers"
    # The HTML names the Markdown it was rendered with: a pair left out of step by an interruption shows.
    digest = re.search(r'<meta name="kernelkit-markdown-sha256" content="([0-9a-f]{64})">', page).group(1)
    assert digest == hashlib.sha256(md.read_bytes()).hexdigest()
    assert "![rmsnorm: every sample per shape, layout and repeat](figures/rmsnorm.svg)" in md.read_text()


def test_a_run_written_by_an_older_kit_still_reports_and_diffs(tmp_path, run_dir):
    """Records of a kit before format versions, job clocks, cards, the sampler and placements (what
    the committed runs of early kits hold): the report and the diff read them through the same
    readers, and say nothing about what those records do not hold."""
    legacy = write_run(tmp_path, "legacy", legacy=True)
    assert not any("format_version" in read_json(p) for p in timing_files(legacy))
    md, html = tmp_path / "report.md", tmp_path / "report.html"
    assert main(["report", str(legacy), "--markdown", str(md), "--html", str(html)]) == 0
    text = md.read_text()
    assert text.startswith("# kernelkit report: run legacy") and html.stat().st_size > 0
    assert "## Correctness" in text and "## Clocks during timing" not in text  # no sampler trace to show
    from kernelkit.report.setup import context_switch_paragraph

    assert context_switch_paragraph(report.Run(legacy)) is None
    compared = diff.compare(diff.load_run(legacy), diff.load_run(run_dir))
    assert len(compared.comparisons) == len(read_json(run_dir / "config.json")["kernels"]["rmsnorm"]["shapes"]) * 3


def test_method_is_written_from_config_and_files(markdown, tmp_path, run_dir):
    method = markdown.split("## Method")[1].split("## ")[0]
    for fragment in ("20 warm-up launches", "64 launches", "time 15 replays", "seed 2026",
                     "Inside the timed interval: the graph replay only"):
        assert fragment in method
    assert re.search(r"Every configuration was timed (in )?2 ", method)  # the repeats
    # Calls too long for 64 to a sample, and calls timed as back-to-back events, are named from their files.
    run = report.Run(run_dir)
    fewer = [r for r in run.timings if r["method_used"]["launches_per_sample"] < 64]
    assert fewer and f"each file recording the count: {len(fewer)} timed targets" in method
    copy = copy_run(run_dir, tmp_path)
    error = "NotImplementedError: calling cuBLAS API during stream capture is currently unsupported"
    for path in copy.glob("timing/rmsnorm/*/torch/rep*.json"):
        edit(path, lambda r: r["method_used"].update(name="back_to_back_events", capture_error=error))
    from kernelkit.report.setup import section_method

    text = " ".join(block.text for block in section_method(report.Run(copy)).blocks)
    events = len(list(copy.glob("timing/rmsnorm/*/torch/rep*.json")))
    assert f"{events} timed targets could not be captured in a CUDA graph" in text and f"{error} (rmsnorm torch)" in text


def test_method_says_how_many_targets_switched_contexts_and_older_records_say_nothing(run_dir, tmp_path):
    from kernelkit.report.setup import context_switch_paragraph

    run = report.Run(run_dir)
    paragraph = context_switch_paragraph(run)
    assert paragraph is not None and paragraph.text.startswith(f"Before its warm-up, each of {len(run.timings)} timed targets")
    assert "could not switch" not in paragraph.text
    copy = copy_run(run_dir, tmp_path)
    first = timing_files(copy)[0]
    edit(first, lambda r: r["method_used"].update(context_switch="no second context: a test said so"))
    assert "1 timed targets could not switch: no second context: a test said so." in context_switch_paragraph(
        report.Run(copy)).text
    assert context_switch_paragraph(report.Run(write_run(tmp_path, "legacy", legacy=True))) is None


def test_method_says_whether_repeats_ran_in_processes_of_their_own(tmp_path, run_dir):
    """Counted from the timing records' job clocks: the default run times each kernel/shape/repeat
    in a process of its own; a run whose repeats shared one process says so."""
    from kernelkit.report.setup import section_method

    own = section_method(report.Run(run_dir)).blocks[0].text
    shared_run = write_run(tmp_path, "shared", process=lambda key: (key[0], key[1]))
    shared = section_method(report.Run(shared_run)).blocks[0].text
    assert own != shared
    assert "shared a process" in shared and "shared a process" not in own


def test_caveats_are_derived_from_the_files(tmp_path, run_dir):
    # Repeats whose medians lie further apart than the spread inside either: none in the default
    # run, one planted in another (its second repeat 5% slower), so both are derived here.
    planted = write_run(tmp_path, "planted", scale={("rmsnorm", "4096x4096", "t32", 2): 1.05})
    for directory, any_expected in ((run_dir, False), (planted, True)):
        run = report.Run(directory)
        found = report.caveats(run)
        assert found[0] == "Clocks were not locked"
        expected = []
        for (kernel, shape, layout), group in run.table.groupby(["kernel", "shape", "layout"]):
            if group["median_us"].max() - group["median_us"].min() > (group["max_us"] - group["min_us"]).max():
                expected.append(f"{kernel} {shape} {layout}")
        assert bool(expected) == any_expected
        assert sorted(c.split(" differ")[0].removeprefix("Repeats of ") for c in found if c.startswith("Repeats")) == sorted(expected)
    assert expected == ["rmsnorm 4096x4096 t32"]

    copy = copy_run(run_dir, tmp_path)
    target = copy / "timing/rmsnorm/512x128/t32/rep1.json"
    record = read_json(target)
    for key in ("samples_us", "sample_placement", "sample_tags"):  # a stretch cut short after 9 samples
        record[key] = record[key][:9]
    record["nvml_after"].update(sm_clock_mhz=1500, clock_event_reasons=["sw_power_cap"])
    target.write_text(json.dumps(record))
    found = report.caveats(report.Run(copy))
    assert "Fewer samples than the timing files asked (15): rmsnorm 512x128 t32 rep1 (9)" in found
    assert any(c.startswith("SM clock differed before and after 1 timed targets: rmsnorm 512x128 t32 rep1") for c in found)
    assert "Clock-event reason sw_power_cap seen in 1 snapshots: rmsnorm 512x128 t32 rep1 (after)" in found


def test_a_repeat_with_untagged_outlying_samples_is_named(tmp_path, run_dir):
    """A repeat whose samples spread far wider than its other repeat's while none is tagged
    disturbed: something the records do not name changed them. The same spread with its samples
    tagged is explained by the tags; a quiet run names none."""
    copy = copy_run(run_dir, tmp_path)

    def widen(record):
        record["samples_us"] = [s * (2.0 if i >= 10 else 1.0) for i, s in enumerate(record["samples_us"])]

    edit(copy / "timing/rmsnorm/4096x4096/t32/rep1.json", widen)
    tagged = edit(copy / "timing/rmsnorm/16384x8193/t256/rep2.json", widen)
    edit(copy / "timing/rmsnorm/16384x8193/t256/rep2.json", lambda r: r.update(disturbed_samples=list(range(10, 15))))
    assert tagged["samples_us"][14] > 1.9 * tagged["samples_us"][0]
    found = [c for c in report.caveats(report.Run(copy)) if c.startswith("Samples of")]
    wide, steady = (read_json(copy / f"timing/rmsnorm/4096x4096/t32/rep{n}.json")["samples_us"] for n in (1, 2))
    spread = lambda s: (max(s) - min(s)) / statistics.median(s)  # noqa: E731
    assert found == [
        f"Samples of rmsnorm 4096x4096 t32 rep1 spread {100 * spread(wide):.1f}% of their median "
        f"({min(wide):.3f}-{max(wide):.3f} us) against {100 * spread(steady):.2f}% in rep2, and none is tagged "
        "disturbed: what changed them is not in the records"]
    assert not [c for c in report.caveats(report.Run(run_dir)) if c.startswith("Samples of")]


def test_foreign_work_is_named_in_the_caveats_and_on_the_first_screen(tmp_path, run_dir):
    """Another process's work in the NVML trace of two timed targets, and one found only by the look
    after a stretch: the kit's sampler tags every sample it touched, the caveats and the first screen
    say so; a stretch taken again after foreign work is named; a quiet run warns of nothing."""
    from kernelkit.report.answers import foreign_work_warning

    seen = {("rmsnorm", "4096x4096", "t32", 1): Disturbance(foreign_pids=[4242]),
            ("rmsnorm", "512x128", "t256", 2): Disturbance(foreign_pids=[4242]),
            ("rmsnorm", "16384x8193", "torch", 1): Disturbance(right_after=[4343])}
    touched_dir = write_run(tmp_path, "touched", disturb=seen.get)
    touched = report.Run(touched_dir)
    flagged = [r for r in touched.timings if r["foreign_work"]["processes"]]
    assert {(r["kernel"], r["shape"], r["layout"], r["repeat"]) for r in flagged} == set(seen)
    assert all(len(r["disturbed_samples"]) == len(r["samples_us"]) for r in flagged)
    assert sum(all(p.get("right_after") for p in r["foreign_work"]["processes"]) for r in flagged) == 1
    assert any(c.startswith("Another process computed on the GPU during or right after 3 timed targets")
               for c in report.caveats(touched))
    assert foreign_work_warning(touched) == (
        f"Another process computed on the GPU during or right after 3 of {len(touched.timings)} timed targets, whose "
        "samples are tagged disturbed (Caveats names them): the answers below include their numbers.")
    assert foreign_work_warning(report.Run(run_dir)) is None
    markdown = report.render_markdown(touched_dir)
    assert markdown.split("## Answers")[1].lstrip().startswith("Another process computed on the GPU")

    edit(touched_dir / "timing/rmsnorm/512x128/t32/rep1.json", lambda r: r.update(retimed_after_foreign_work=[
        {"samples_us": [s * 21 for s in r["samples_us"]], "then_waited": {"idle": True, "waited_s": 1.5}}]))
    assert ("1 timed targets or spans were taken again after foreign work touched their samples; their numbers come "
            "from the stretch after the wait") in report.caveats(report.Run(touched_dir))


def test_snakemakes_own_report_lists_the_marked_results(tmp_path):
    """`snakemake --report` over a synthetic run with its summary, figures and report in place, the
    workflow run from the checkout in the temporary directory with the run's own recorded config."""
    from conftest import snakemake

    run = write_run(tmp_path, "marked", sanitizer=True, profile=True)
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    files = [str(p) for p in timing_files(run)]
    figures = tmp_path / "reports" / "marked" / "figures"
    assert main(["summary", "--output", str(run / "summary.csv"), *files]) == 0
    assert main(["figure", "--kernel", "rmsnorm", "--output", str(figures / "rmsnorm.svg"), *files]) == 0
    assert main(["clock-figure", "--output", str(figures / "clocks.svg"), *files]) == 0
    assert main(["report", str(run), "--figures", str(figures), "--markdown", str(figures.parent / "report.md"),
                 "--html", str(figures.parent / "report.html")]) == 0
    target = tmp_path / "snakemake-report.html"
    done = snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--report", str(target),
                     "--configfile", str(run / "config.json"), "--replace-workflow-config")
    assert done.returncode == 0, done.stderr[-3000:]
    page = target.read_text()
    for fragment in ("Timings", "Report", "Environment", "rmsnorm.svg", "summary.csv", "clocks.svg", "floor.json"):
        assert fragment in page


def test_throughput_and_resources_trace_to_the_timing_files(markdown, run_dir):
    run = report.Run(run_dir)
    rows = {(r.shape, r.layout): r for r in report.target_rows(run, "rmsnorm")}
    assert len(rows) == configurations(read_json(run_dir / "config.json"))
    records = [r for r in run.timings if (r["shape"], r["layout"]) == ("16384x8193", "t256")]
    median_us = statistics.median(s for r in records for s in r["samples_us"])
    row = rows[("16384x8193", "t256")]
    assert row.judgement.memory == "DRAM"  # 1.07 GB against 60 MiB
    assert row.median_us == median_us and row.compulsory_bytes == records[0]["bytes_moved"]
    noise = max(statistics.stdev(r["samples_us"]) / statistics.mean(r["samples_us"]) for r in records)
    assert row.noise == pytest.approx(noise)
    # The rendered row: scaled, right-aligned numbers (nvbench style).
    rate = records[0]["bytes_moved"] / (median_us * 1e-6)
    expected = (f"| 16384x8193 | t256 | {units.duration(median_us)} | {100 * noise:.2f}% | 1.00 GiB | "
                f"{rate / 1e12:.2f} TB/s |")
    assert expected in markdown
    resources = {row[0]: row for row in report.resource_rows(run, "rmsnorm")}
    assert set(resources) == {"t32", "t256"}  # torch is a library: no resources are read
    assert resources["t256"][3] == 1024 and resources["t32"][3] == 128  # dynamic shared = threads * 4 bytes
    assert resources["t256"][6] == "256" and resources["t32"][1] == next(
        r for r in run.timings if r["layout"] == "t32")["kernel_attributes"]["num_regs"]
    libraries = report.library_rows(run, "rmsnorm")
    assert [row[:2] for row in libraries] == [["torch", "torch"]] and libraries[0][4] == "graph replay, 64 per sample"


@pytest.mark.parametrize("samples, kind", [
    (["1.0", "2.0"], "strings"), ({"a": 1.0}, "a dict"), ([float("nan"), 1.0], "NaN"), (None, "missing key")])
def test_malformed_samples_are_one_sentence_naming_the_file(tmp_path, capsys, run_dir, samples, kind):
    copy = copy_run(run_dir, tmp_path)
    target = copy / "timing/rmsnorm/512x128/t32/rep1.json"
    record = json.loads(target.read_text())
    if samples is None:
        del record["samples_us"]
    else:
        record["samples_us"] = samples
    target.write_text(json.dumps(record))  # NaN is written as the bare token NaN, which Python's reader accepts
    assert main(["report", str(copy), "--markdown", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kernelkit report: ") and str(target) in err and "samples_us" in err and "\n" not in err
    assert "Traceback" not in err and not (tmp_path / "r.md").exists()


def test_answers_open_the_report_and_count_shapes_from_the_samples(markdown, run_dir):
    assert markdown.split("\n## ")[1].startswith("Answers")
    run = report.Run(run_dir)
    holds = 0
    shapes = sorted({r["shape"] for r in run.timings})
    for shape in shapes:
        ratios = [statistics.median(run.records("rmsnorm", shape, "t32")[i]["samples_us"])
                  / statistics.median(run.records("rmsnorm", shape, "t256")[i]["samples_us"]) for i in range(2)]
        holds += all(r > 1 for r in ratios)
    assert 0 < holds < len(shapes)
    answers = markdown.split("## Answers")[1].split("\n## ")[0]
    assert f"holds on {holds} of {len(shapes)} shapes in both repeats" in answers
    # The change the claims file declares (t32 -> t256), as a signed percentage of the pooled medians.
    before, after = (run.pooled_median("rmsnorm", "512x128", layout) for layout in ("t32", "t256"))
    assert f"| rmsnorm | 512x128 | t32 {before:.3f} us -> t256 {after:.3f} us | {100 * (after / before - 1):+.1f}% |" in answers


def test_claims_are_copied_from_the_seeds_with_their_quotes():
    import yaml

    seeds = REPO.parent.parent / "shared" / "seeds"
    seeds = seeds if seeds.is_dir() else Path("/work/shared/seeds")
    files = sorted((REPO / "kernels").glob("*/claims.yaml"))
    assert len(files) == 6
    for path in files:
        for claim in yaml.safe_load(path.read_text())["claims"]:
            quote = claim["source"]["quote"]
            # Every published number stands in the quote it was copied from.
            for value in claim["published_us"].values():
                assert f"{value:.3f}".rstrip("0").rstrip(".") in quote.replace(",", "") or f"{value:.1f}" in quote
            assert set(claim["published_us"]) <= set(claim["faster_to_slower"]) | set(claim["published_us"])
            if seeds.is_dir():
                assert quote in (seeds / claim["source"]["file"]).read_text(encoding="utf-8"), (path, quote)


def test_claims_say_when_the_gpu_and_shape_differ(run_dir):
    from kernelkit.report import claims

    run = report.Run(run_dir)
    results = claims.all_claims(run)
    short_row = next(r for r in results if r.statement.startswith("256 threads lose"))
    assert list(short_row.measured) == ["512x128"]
    assert short_row.differences == ["the claim was measured on RTX 5070, this run on NVIDIA H200"]
    t32, t256 = (run.pooled_median("rmsnorm", "512x128", layout) for layout in ("t32", "t256"))
    assert short_row.reproduced["512x128"] == (t32 < t256)


def test_a_claim_about_a_shape_the_run_did_not_time_is_not_judged_on_other_shapes(tmp_path):
    """A run of rmsnorm at 16384x8193 only; the seed's claim is about 512x128."""
    from kernelkit.report import claims

    run_dir = write_run(tmp_path, "limits", kernels={
        "rmsnorm": {"layouts": ["t32", "t256"], "shapes": ["16384x8193"]},
        "matmul": {"layouts": ["tile16", "reg4x4"], "shapes": ["4096x4096x4096"]}}, controls={})
    results = claims.all_claims(report.Run(run_dir))
    short_row = next(r for r in results if r.statement.startswith("256 threads lose"))
    assert short_row.measured == {} and claims.claim_rows([short_row])[0][-1] == "not measurable here"
    assert "the claim's shape 512x128 was not run here, so it is not judged" in short_row.differences
    # A claim that names no shape is still compared on every shape the run has.
    unnamed = next(r for r in results if r.kernel == "matmul" and "58.8%" in r.statement)
    assert list(unnamed.measured) == ["4096x4096x4096"] and unnamed.reproduced == {"4096x4096x4096": True}


def test_explanations_come_from_byte_counts_and_declared_vector_widths(seed_run):
    from kernelkit.report import explain

    run = report.Run(seed_run)
    reasons = explain.explanations(run, "layernorm")
    assert any(r.startswith("layernorm 16384x4097 warp: the width 4097 is not a multiple of 4") for r in reasons)
    assert not any("4096x1024 warp: the width" in r for r in reasons)
    assert reasons[0].startswith("layernorm 4096x1024: the working set (32.0 MiB) fits in the 60.0 MiB L2")
    assert any("issues 548.7 MiB for 68.3 MiB" in r for r in explain.explanations(run, "neighbor"))
    # A matmul is bound by arithmetic, not by the memory that serves it: no L2 sentence there.
    assert not any("L2" in r for r in explain.explanations(run, "matmul"))


def test_working_sets_that_fit_in_l2_are_marked(seed_run):
    run = report.Run(seed_run)
    rows = {(r.shape, r.layout): r for r in report.target_rows(run, "layernorm")}
    l2 = run.environment["cuda"]["l2_cache_bytes"]
    assert rows[("4096x1024", "triton")].judgement.memory == "L2" and 4 * (2 * 4096 * 1024 + 2 * 1024) <= l2
    assert rows[("16384x4097", "triton")].judgement.memory == "DRAM"
    # This run measured no L2 ceiling: the L2-resident target is not judged against DRAM.
    assert rows[("4096x1024", "triton")].judgement.fraction is None
    assert rows[("4096x1024", "triton")].judgement.note.startswith("DRAM roofline n/a")


def test_an_l2_resident_target_is_judged_against_the_l2_ceiling_when_one_was_measured(tmp_path, seed_run):
    copy = copy_run(seed_run, tmp_path)
    dram = read_json(copy / "ceilings" / "copy.json")
    write_record(copy / "ceilings" / "l2.json", ceiling_record("l2", dram["method"]))
    run = report.Run(copy)
    l2 = read_json(copy / "ceilings" / "l2.json")
    assert run.ceiling["l2_gb_s"] == pytest.approx(l2["bytes"] / (statistics.median(l2["samples_us"]) * 1e-6) / 1e9)
    assert run.ceiling["l2_gb_s"] > run.ceiling["copy_gb_s"]
    judged = report.judge(run, "layernorm", "4096x1024", "triton")
    median_us = run.pooled_median("layernorm", "4096x1024", "triton")
    compulsory = run.records("layernorm", "4096x1024", "triton")[0]["bytes_moved"]
    assert judged.memory == "L2" and judged.ceiling.startswith("L2 copy")
    assert judged.fraction == pytest.approx(compulsory / (median_us * 1e-6) / 1e9 / run.ceiling["l2_gb_s"])
    # A working set beyond the L2 keeps the DRAM copy ceiling.
    assert report.judge(run, "layernorm", "16384x4097", "triton").ceiling.startswith("DRAM copy")


def test_ceilings_and_their_variants_come_from_the_run(markdown, run_dir):
    """Each ceiling is the fastest of its variants, each variant's rate named; the floor is the
    median of the empty kernel's samples."""
    run = report.Run(run_dir)
    assert set(run.ceilings) == {"copy", "gemm", "floor"}
    assert run.ceiling["floor_us"] == statistics.median(run.ceilings["floor"]["samples_us"])
    for kind, label, work, unit in (("copy", "Copy", "bytes", "GB/s"), ("gemm", "GEMM", "flops", "GFLOP/s")):
        record = run.ceilings[kind]
        rates = {name: record[work] / (statistics.median(v["samples_us"]) * 1e-6) / 1e9
                 for name, v in record["variants"].items()}
        assert record["best"] == max(rates, key=rates.get)
        assert (f"{label} variants: " + "; ".join(f"{name} {rates[name]:.1f} {unit}" for name in sorted(rates))
                + f" (the ceiling is the fastest, {record['best']}).") in markdown
    ridge = run.ceiling["gemm_gflop_s"] / run.ceiling["copy_gb_s"]
    assert f"Ridge point: {ridge:.2f} FLOPs per byte." in markdown


def test_a_correct_result_above_its_ceiling_doubts_the_ceiling_not_the_kernel(tmp_path, run_dir):
    """A copy ceiling measured too low (a third of the run's): every correct, consistent DRAM-sized
    target lies above it, and the report names both numbers, as evidence against the ceiling."""
    copy = copy_run(run_dir, tmp_path)
    edit(copy / "ceilings" / "copy.json", lambda r: r.update(samples_us=[3 * s for s in r["samples_us"]]))
    run = report.Run(copy)
    judged = report.judge(run, "rmsnorm", "16384x8193", "t256")
    records = run.records("rmsnorm", "16384x8193", "t256")
    achieved = records[0]["bytes_moved"] / (statistics.median(s for r in records for s in r["samples_us"]) * 1e-6) / 1e9
    assert judged.above and judged.consistent and judged.memory == "DRAM"
    assert judged.note == (f"ceiling suspect: this correct result reaches {achieved:.0f} GB/s, above the measured "
                           f"DRAM copy {run.ceiling['copy_gb_s']:.0f} GB/s")
    assert f"rmsnorm 16384x8193 t256: {judged.note}" in report.render_markdown(copy)
    # Without a passed correctness record the same result is not called correct.
    edit(copy / "correctness/rmsnorm/t256.json", lambda r: r["cases"][0].update(passed=False))
    assert "without a passed correctness record" in report.judge(report.Run(copy), "rmsnorm", "16384x8193", "t256").note


def test_the_copy_ceiling_is_checked_against_the_rated_bandwidth_when_recorded(tmp_path):
    from kernelkit.report import limits
    from kernelkit.report import run as report_run

    run = report.Run(write_run(tmp_path, "nobus", bus_width=None))
    assert report_run.rated_bandwidth_gb_s(run) is None
    assert any("holds no memory bus width" in line for line in limits.cross_checks(run))
    run.environment["cuda"]["memory_bus_width_bits"] = 6144
    rated = 2 * run.environment["gpu"]["memory_clock_max_mhz"] * 1e6 * 6144 / 8 / 1e9
    assert report_run.rated_bandwidth_gb_s(run) == pytest.approx(rated)
    assert (f"The DRAM copy ceiling ({run.ceiling['copy_gb_s']:.0f} GB/s) is "
            f"{run.ceiling['copy_gb_s'] / rated:.0%} of the rated bandwidth ({rated:.0f} GB/s") in limits.cross_checks(run)[0]


def test_a_correctness_case_without_its_verdict_is_named(tmp_path, capsys, run_dir):
    copy = copy_run(run_dir, tmp_path)
    target = copy / "correctness/rmsnorm/t32.json"
    record = json.loads(target.read_text())
    del record["cases"][1]["passed"]
    target.write_text(json.dumps(record))
    assert main(["report", str(copy), "--markdown", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernelkit report: ") and err.count("\n") == 1 and str(target) in err
    assert re.search(r"case \(?(number )?1\)? (lacks|without) passed", err), err


def test_an_interrupted_write_leaves_both_old_files_and_no_temporary(tmp_path, monkeypatch):
    """report.md and report.html are replaced together (kernelkit.outputs.write_outputs): a failure
    while writing the second leaves both old files and no temporary file, in one sentence."""
    import os

    from kernelkit import KitError, outputs

    md, html = tmp_path / "report.md", tmp_path / "report.html"
    md.write_text("old md")
    html.write_text("old html")
    real_fdopen, calls = os.fdopen, []

    def failing_fdopen(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:  # the HTML's temporary file, after the Markdown's was written
            raise OSError("disk full")
        return real_fdopen(*args, **kwargs)

    monkeypatch.setattr(outputs.os, "fdopen", failing_fdopen)
    with pytest.raises((OSError, KitError)):
        outputs.write_outputs([(md, "new md"), (html, "new html")])
    assert md.read_text() == "old md" and html.read_text() == "old html"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.md"]


def test_the_noise_split_counts_repeats_one_process_ran_as_one_process(tmp_path, run_dir):
    """A run whose one process timed both repeats of everything has no spread between processes; one
    where that happened for 512x128 only says so for those rows; a run whose repeats were processes
    of their own keeps the range of its repeats' medians."""
    from kernelkit.report.quality import noise_rows

    serial = noise_rows(report.Run(write_run(tmp_path, "serial", process=lambda key: "one process")))
    assert len(serial) == 9 and {row[4] for row in serial} == {"n/a: one process"} and {row[5] for row in serial} == {"n/a"}
    mixed = report.Run(write_run(tmp_path, "mixed", process=lambda key: key[:2] if key[1] == "512x128" else key))
    rows = {tuple(row[:3]): row for row in noise_rows(mixed)}
    shared = {key for key, row in rows.items() if row[4] == "n/a: one process"}
    assert shared == {key for key in rows if key[1] == "512x128"} and 0 < len(shared) < len(rows)
    own = report.Run(run_dir)
    own_rows = {tuple(row[:3]): row for row in noise_rows(own)}
    for (kernel, shape, layout), group in own.table.groupby(["kernel", "shape", "layout"]):
        medians = group["median_us"]
        assert own_rows[(kernel, shape, layout)][4] == f"{100 * (medians.max() - medians.min()) / medians.mean():.2f}%"


def test_placements_are_shown_and_the_placement_dependent_configurations_marked(tmp_path):
    """Four buffer placements per timed process; one configuration's time depends on where its
    buffers lie (a fifth slower at two placements): it alone is marked."""
    from kernelkit.stats import DIFF_THRESHOLD, placement_medians, relative_range

    depends = lambda key: [1.0, 1.2, 1.2, 1.0] if key[:3] == ("rmsnorm", "512x128", "t256") else [1.0] * 4  # noqa: E731
    run_dir = write_run(tmp_path, "placed", placements=4, placement_factors=depends)
    run = report.Run(run_dir)
    for record in run.timings:
        assert record["method"]["placements"] == 4 and len(record["samples_us"]) == 60
        assert record["sample_placement"] == [i for i in range(4) for _ in range(15)]
    marked = {(r["kernel"], r["shape"], r["layout"]) for r in run.timings
              if relative_range(placement_medians(r["samples_us"], r["sample_placement"])) > DIFF_THRESHOLD}
    assert marked == {("rmsnorm", "512x128", "t256")}
    markdown = report.render_markdown(run_dir)
    assert "## Buffer placement" in markdown and "Every timed target sampled 4 placements" in markdown
    assert "Marked: 1 of 9 configurations (rmsnorm 512x128 t256)." in markdown
    assert "## Buffer placement" not in report.render_markdown(write_run(tmp_path, "one-placement"))


def test_cold_cache_timings_are_set_beside_the_warm_ones(tmp_path):
    run_dir = write_run(tmp_path, "cold", cold=True)
    run = report.Run(run_dir)
    assert len(run.cold) == len(run.timings) and all(r["method_used"]["launches_per_sample"] == 1 for r in run.cold)
    flush = run.cold[0]["method_used"]["flush"]
    from kernelkit.report.quality import section_cold

    section = section_cold(run)
    assert f"a buffer of {flush['flush_bytes']} bytes (twice the L2 size the device reports, {flush['l2_bytes']} bytes)" in \
        section.blocks[0].text
    rows = {tuple(row[:3]): row for row in section.blocks[1].rows}
    for (kernel, shape, layout), row in rows.items():
        warm = statistics.median(s for r in run.timings if (r["shape"], r["layout"]) == (shape, layout) for s in r["samples_us"])
        cold = statistics.median(s for r in run.cold if (r["shape"], r["layout"]) == (shape, layout) for s in r["samples_us"])
        assert row[3:] == [f"{warm:.3f}", f"{cold:.3f}", f"{cold / warm:.2f}"]
    assert "## Cold and warm cache" in report.render_markdown(run_dir)


def test_sanitizer_and_counters_sections_read_the_tools_records(tmp_path):
    from kernelkit.report.quality import limiter

    run_dir = write_run(tmp_path, "tools", sanitizer=True, profile=True)
    run = report.Run(run_dir)
    markdown = report.render_markdown(run_dir)
    # One record per kernel covers its hand-written layouts, run together: a row each.
    assert "| rmsnorm | t32 | 0 | 0 |" in markdown and "| rmsnorm | t256 | 0 | 0 |" in markdown
    assert "The hand-written layouts of rmsnorm ran together" in markdown
    assert "## Counters (Nsight Compute)" in markdown
    profile = next(p for p in run.profiles if (p["shape"], p["layout"]) == ("512x128", "t32"))
    timed = statistics.median(s for r in run.records("rmsnorm", "512x128", "t32") for s in r["samples_us"])
    assert f"| rmsnorm | 512x128 | t32 | {timed:.3f} | 72.5 | 40.0 |" in markdown
    assert limiter(profile["launches"]) == "DRAM (72%)" and "| DRAM (72%) | 1 kernel launch(es) |" in markdown
    # Without sanitizer records the report says the tool did not run.
    assert "compute-sanitizer did not run in this run" in report.render_markdown(write_run(tmp_path, "no-tools"))


def test_seed_tables_trace_to_the_raw_samples(seed_run, seed_markdown):
    run = report.Run(seed_run)
    for kernel, shape, layout in (("matmul", "1024x1024x1024", "torch"), ("layernorm", "4096x1024", "warp"),
                                  ("neighbor", "65536x128", "cupy")):
        kernel_samples = [s for r in run.timings if (r["kernel"], r["shape"], r["layout"]) == (kernel, shape, layout)
                          for s in r["samples_us"]]
        span = read_json(seed_run / "span" / kernel / shape / "rep1.json")
        rounds: dict[int, list[float]] = {}
        for sample in span["layouts"][layout]["samples"]:
            rounds.setdefault(sample["round"], []).append(sample["us"])
        round_medians = [statistics.median(v) for v in rounds.values()]
        # One statistic for centre and range: the median of the round medians, and their range.
        assert (f"| {kernel} | {shape} | {layout} | {units.duration(statistics.median(kernel_samples))} | "
                f"{units.duration(statistics.median(round_medians))} | {units.duration(min(round_medians))} to "
                f"{units.duration(max(round_medians))} |").replace("_", "\\_") in seed_markdown.replace("_", "\\_")
    tables = seed_markdown.split("Kernel time (median), as the seed tabulates it:")[1]
    assert "| matmul 1024x1024x1024 |" in tables and "tile16 " in tables and "reg4x4 " in tables


def test_a_missing_library_is_skipped_with_its_reason_everywhere(tmp_path, seed_run):
    copy = copy_run(seed_run, tmp_path)
    reason = "torch cannot be imported (ModuleNotFoundError: No module named 'torch')"
    edit(copy / "correctness/matmul/torch.json",
         lambda r: r.update(cases=[], layouts=[], passed=False, skipped={"torch": reason}))
    for timing in sorted(copy.glob("timing/matmul/*/torch/rep*.json")):
        record = read_json(timing)
        timing.write_text(json.dumps({key: record[key] for key in ("kernel", "shape", "dims", "layout", "layout_parameters",
                                                                   "repeat", "order", "method")} | {"skipped": reason}))
    skipped_run = report.Run(copy)
    skipped = len(list(copy.glob("timing/matmul/*/torch/rep*.json")))
    assert len(skipped_run.skipped) == skipped and all(r["layout"] != "torch" or r["kernel"] != "matmul"
                                                        for r in skipped_run.timings)
    assert any(c.startswith("Layouts skipped because their library is missing here: matmul torch")
               for c in report.caveats(skipped_run))
    assert f"matmul torch: {reason}" in report.render_markdown(copy)
    output = tmp_path / "summary.csv"
    assert main(["summary", "--output", str(output), *map(str, timing_files(copy))]) == 0
    assert len(pd.read_csv(output)) == len(timing_files(seed_run)) - skipped
    compared = diff.compare(diff.load_run(seed_run), diff.load_run(copy), 0.02, 0.95)
    assert len(compared.comparisons) == len({p.parent for p in timing_files(seed_run)}) - skipped // 2
    assert "matmul 1024x1024x1024 torch rep1" in compared.only_in_a
