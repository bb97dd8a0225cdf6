"""Summary and report rebuilt from a committed H200 run, checked against its raw samples.

The run is h200-ref2 (kit commit a0749b4): the RMSNorm experiment, t32 against t256 over
config/planted-check.yaml's four shapes in two repeats, the reference of the planted-slowdown
pair. Like h200-a, which these tests read before it was retired, it predates the summary's method
columns and the kit's ceilings.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
import statistics
import sys

import pandas as pd
import pytest
from conftest import REPO

from kernelkit import report
from kernelkit.cli import main
from kernelkit.environment import Nvml

RUN = REPO / "results" / "h200-ref2"
CONFIG = json.loads((RUN / "config.json").read_text())
SHAPES = CONFIG["kernels"]["rmsnorm"]["shapes"]
CONFIGURATIONS = len(SHAPES) * len(CONFIG["kernels"]["rmsnorm"]["layouts"])


@pytest.fixture(scope="module")
def timing_files():
    files = sorted(RUN.glob("timing/*/*/*/rep*.json"))
    assert set(CONFIG["kernels"]) == {"rmsnorm"} and len(files) == CONFIGURATIONS * CONFIG["timing"]["repeats"] == 16
    return files


@pytest.fixture(scope="module")
def markdown():
    return report.render_markdown(RUN)


def test_summary_rows_are_the_medians_of_the_raw_samples(tmp_path, timing_files):
    output = tmp_path / "summary.csv"
    assert main(["summary", "--output", str(output), *map(str, timing_files)]) == 0
    table = pd.read_csv(output)
    assert len(table) == len(timing_files) and table["n"].eq(15).all()
    for path in timing_files:
        record = json.loads(path.read_text())
        row = table[(table["shape"] == record["shape"]) & (table["layout"] == record["layout"])
                    & (table["repeat"] == record["repeat"])].iloc[0]
        assert row["median_us"] == pytest.approx(statistics.median(record["samples_us"]), abs=1e-6)
        assert row["min_us"] == pytest.approx(min(record["samples_us"]), abs=1e-6)
    # Each repeat ran its targets (one per configuration) in its own order, positions 0, 1, ...
    for _, group in table.groupby("repeat"):
        assert sorted(group["order_position"]) == list(range(CONFIGURATIONS))


def test_committed_summary_matches_a_rebuild(tmp_path, timing_files):
    output = tmp_path / "summary.csv"
    main(["summary", "--output", str(output), *map(str, timing_files)])
    rebuilt, committed = pd.read_csv(output, dtype=str), pd.read_csv(RUN / "summary.csv", dtype=str)
    # Columns added since this run was made (how each sample was taken) are new; every old one is identical.
    assert set(rebuilt.columns) - set(committed.columns) == {"method", "calls_per_sample", "cache", "disturbed_samples",
                                                              "stopped_by", "placements", "placement_spread"}
    assert rebuilt[committed.columns].equals(committed)
    # One placement per process before the option existed: nothing to compare, left empty.
    assert rebuilt["placements"].eq("1").all() and rebuilt["placement_spread"].isna().all()
    assert rebuilt["method"].eq("cuda_graph_replay").all() and rebuilt["calls_per_sample"].eq("64").all()


def test_report_tables_trace_to_samples(markdown, timing_files):
    for path in timing_files[:6]:
        record = json.loads(path.read_text())
        assert f"rep{record['repeat']}: {statistics.median(record['samples_us']):.3f} \\[" in markdown
    assert "48 cases in all" in markdown
    assert "| rmsnorm | t32 | 24/24 |" in markdown and "| rmsnorm | t256 | 24/24 |" in markdown


def test_report_shows_controls_and_what_caught_them(markdown):
    epsilon = next(line for line in markdown.splitlines() if line.startswith("| rmsnorm | epsilon |"))
    assert "NaN (12 cases; patterns zeros)" in epsilon
    tail = next(line for line in markdown.splitlines() if line.startswith("| rmsnorm | tail |"))
    assert "48/48" in tail and "sentinel left" in tail


def test_hypothesis_is_checked_against_each_repeat(markdown):
    table = report.Run(RUN).table
    hypothesis = {"kernel": "rmsnorm", "statement": "s", "faster": "t256", "slower": "t32"}
    verdicts = report.hypothesis_verdicts(table, hypothesis)
    assert [v["repeat"] for v in verdicts] == [1, 2]
    for verdict in verdicts:
        medians = table[table["repeat"] == verdict["repeat"]].pivot(index="shape", columns="layout", values="median_us")
        losing = sorted(medians.index[~(medians["t256"] < medians["t32"])])
        assert verdict["holds"] == (not losing)
        assert sorted(c.split(" ")[0] for c in verdict["counter_examples"]) == losing
        assert f"rep{verdict['repeat']} {'holds' if verdict['holds'] else 'fails'}" in markdown.split("## Answers")[1]


def test_faster_layout_table_covers_every_shape(markdown):
    section = markdown.split("Faster layout per shape")[1].split("Resources of the compiled kernel")[0]
    assert len([line for line in section.splitlines() if line.startswith("| ") and "x" in line.split("|")[1]]) == len(SHAPES)


def test_report_says_when_nvml_was_missing(tmp_path, monkeypatch):
    # The environment as recorded, with its NVML part replaced by what the kit records
    # when nvidia-ml-py cannot be imported: every NVML field "unavailable: ...".
    copy = tmp_path / "h200-ref2"
    shutil.copytree(RUN, copy)
    environment = json.loads((copy / "environment.json").read_text())
    monkeypatch.setitem(sys.modules, "pynvml", None)
    nvml = Nvml()
    assert nvml.error.startswith("unavailable: NVML could not be used (ModuleNotFoundError")
    environment.update(nvml_available=False, nvml_error=nvml.error, gpu=nvml.static_fields(), snapshot=nvml.snapshot())
    (copy / "environment.json").write_text(json.dumps(environment))
    text = report.render_markdown(copy)
    assert "NVML was not usable (unavailable: NVML could not be used (ModuleNotFoundError" in text
    assert "SM clock at capture: now / max / application | unavailable: NVML could not be used" in text


def test_html_is_self_contained_escaped_and_small(tmp_path):
    copy = tmp_path / "h200-ref2"
    shutil.copytree(RUN, copy)
    config = json.loads((copy / "config.json").read_text())
    config["hypotheses"][0]["statement"] = "<script>alert('x')</script> & more"
    (copy / "config.json").write_text(json.dumps(config))
    figures = tmp_path / "figures"
    timing = sorted(str(p) for p in copy.glob("timing/*/*/*/rep*.json"))
    assert main(["figure", "--kernel", "rmsnorm", "--output", str(figures / "rmsnorm.svg"), *timing]) == 0
    md, html = tmp_path / "report.md", tmp_path / "report.html"
    assert main(["report", str(copy), "--figures", str(figures), "--markdown", str(md), "--html", str(html)]) == 0
    page = html.read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in page
    # The Markdown shows the markup as text too: escaped, never raw.
    assert "<script>" not in md.read_text() and "&lt;script>alert('x')&lt;/script> &amp; more" in md.read_text()
    # One timing figure and the answers chart of the one hypothesis; nothing fetched from elsewhere.
    assert page.count("<svg") == 2 and "<img" not in page and "<link" not in page
    assert not re.search(r"""(src|href)=["']https?:""", page)
    assert html.stat().st_size < 5 * 2**20
    # The Markdown carries the same sections and links the figure instead of inlining it.
    sections = re.findall(r"^## (.+)$", md.read_text(), re.MULTILINE)
    assert sections == re.findall(r"<h2 id=\"[^\"]+\">(.+?)</h2>", page) and sections[0] == "Answers"
    # The HTML names the Markdown it was rendered with: a pair left out of step by an interruption shows.
    digest = re.search(r'<meta name="kernelkit-markdown-sha256" content="([0-9a-f]{64})">', page).group(1)
    assert digest == hashlib.sha256(md.read_bytes()).hexdigest()
    assert "![rmsnorm: every sample per shape, layout and repeat](figures/rmsnorm.svg)" in md.read_text()


def test_method_is_written_from_config_and_files(markdown):
    method = markdown.split("## Method")[1].split("## ")[0]
    for fragment in ("20 warm-up launches", "64 launches", "time 15 replays", "in 2 separate processes",
                     "seed 2026", "Inside the timed interval: the graph replay only"):
        assert fragment in method


def test_caveats_are_derived_from_the_files(tmp_path, markdown):
    # Repeats whose medians lie further apart than the spread inside either: none in this run, some
    # in h200-s5a (the whole default config), so both are derived here.
    for run_dir, any_expected in ((RUN, False), (REPO / "results" / "h200-s5a", True)):
        run = report.Run(run_dir)
        found = report.caveats(run)
        assert found[0] == "Clocks were not locked"
        expected = []
        for (kernel, shape, layout), group in run.table.groupby(["kernel", "shape", "layout"]):
            if group["median_us"].max() - group["median_us"].min() > (group["max_us"] - group["min_us"]).max():
                expected.append(f"{kernel} {shape} {layout}")
        assert bool(expected) == any_expected
        assert sorted(c.split(" differ")[0].removeprefix("Repeats of ") for c in found if c.startswith("Repeats")) == sorted(expected)

    copy = tmp_path / "h200-ref2"
    shutil.copytree(RUN, copy)
    target = copy / "timing/rmsnorm/512x128/t32/rep1.json"
    record = json.loads(target.read_text())
    record["samples_us"] = record["samples_us"][:9]
    record["nvml_after"].update(sm_clock_mhz=1500, clock_event_reasons=["sw_power_cap"])
    target.write_text(json.dumps(record))
    found = report.caveats(report.Run(copy))
    assert "Fewer samples than the timing files asked (15): rmsnorm 512x128 t32 rep1 (9)" in found
    assert any(c.startswith("SM clock differed before and after 1 timed targets: rmsnorm 512x128 t32 rep1") for c in found)
    assert "Clock-event reason sw_power_cap seen in 1 snapshots: rmsnorm 512x128 t32 rep1 (after)" in found


def test_a_repeat_with_untagged_outlying_samples_is_named():
    """h200-fq2-wait: a CuPy loop in another process started during two timings before NVML had
    sampled it, so no sample carries a tag; their spread, against their other repeat's, shows it."""
    found = [c for c in report.caveats(report.Run(REPO / "results" / "h200-fq2-wait")) if c.startswith("Samples of")]
    assert found == [
        "Samples of rmsnorm 16384x8193 t32 rep1 spread 96.0% of their median (964.424-1890.651 us) against 0.09% in "
        "rep2, and none is tagged disturbed: what changed them is not in the records",
        "Samples of rmsnorm 4096x4096 t32 rep1 spread 93.7% of their median (122.193-278.817 us) against 0.25% in "
        "rep2, and none is tagged disturbed: what changed them is not in the records"]
    # The tagged timings of the run without waiting are explained by their tags; its untagged outliers are named.
    nowait = report.Run(REPO / "results" / "h200-fq2-nowait")
    named = [c.split(" spread")[0] for c in report.caveats(nowait) if c.startswith("Samples of")]
    assert named == ["Samples of rmsnorm 16384x128 t256 rep1", "Samples of rmsnorm 512x128 t256 rep2",
                     "Samples of rmsnorm 512x128 t32 rep2"]
    assert all(row.disturbed_samples == 0 for row in nowait.table.itertuples()
               if f"Samples of {row.kernel} {row.shape} {row.layout} rep{row.repeat}" in named)
    # A quiet run names none.
    assert not [c for c in report.caveats(report.Run(REPO / "results" / "h200-p13")) if c.startswith("Samples of")]


def test_a_timing_the_foreign_loop_touched_unseen_was_taken_again_once_the_loop_had_ended():
    """h200-fq4-wait: the timing found the GPU idle while a CuPy loop set up, then sampled beside the
    loop's first work before NVML had sampled the loop (21x slower); the look after the stretch found
    the device busy, and the stretch was taken again once the loop had ended. Its other repeat
    differs by 2.7%: this 1.9 us L2-resident kernel takes one of two times per process in quiet runs
    too (1.846 and 1.887 us in h200-fq2-wait's repeats, 1.883 and 1.928 in an earlier two-run check)."""
    from statistics import median

    run = REPO / "results" / "h200-fq4-wait" / "timing" / "rmsnorm" / "512x128" / "t256"
    record, other = (json.loads((run / f"rep{n}.json").read_text()) for n in (1, 2))
    (set_aside,) = record["retimed_after_foreign_work"]
    assert set_aside["foreign_work"]["after"]["busy"] is True
    assert [p["readings"] for p in set_aside["foreign_work"]["processes"]] == [0]  # no per-process sample saw it
    assert all(tag["foreign"] and tag["foreign_right_after"] for tag in set_aside["sample_tags"])
    assert set_aside["then_waited"]["idle"] is True and set_aside["then_waited"]["waited_s"] > 1
    assert median(set_aside["samples_us"]) > 10 * median(record["samples_us"])
    assert abs(median(record["samples_us"]) / median(other["samples_us"]) - 1) < 0.03
    assert record["disturbed_samples"] == [] and "after" in record["foreign_work"]
    found = report.caveats(report.Run(REPO / "results" / "h200-fq4-wait"))
    assert ("1 timed targets or spans were taken again after foreign work touched their samples; their numbers come "
            "from the stretch after the wait") in found
    # Without waiting, every timing that saw the loop has every sample tagged, one of them by the look alone.
    nowait = report.Run(REPO / "results" / "h200-fq4-nowait")
    touched = [r for r in nowait.timings if r["foreign_work"]["processes"]]
    assert len(touched) == 18 and all(len(r["disturbed_samples"]) == len(r["samples_us"]) for r in touched)
    assert sum(all(p.get("right_after") for p in r["foreign_work"]["processes"]) for r in touched) == 1
    assert any(c.startswith("Another process computed on the GPU during or right after 18 timed targets")
               for c in report.caveats(nowait))
    # The first screen says so before its answers; a quiet run's does not.
    from kernelkit.report.answers import foreign_work_warning

    assert foreign_work_warning(nowait) == (
        "Another process computed on the GPU during or right after 18 of 20 timed targets, whose samples are tagged "
        "disturbed (Caveats names them): the answers below include their numbers.")
    assert foreign_work_warning(report.Run(REPO / "results" / "h200-fq4-wait")) is None


def test_snakemakes_own_report_lists_the_marked_results(tmp_path):
    from conftest import snakemake

    target = tmp_path / "snakemake-report.html"
    # The run's own recorded config names exactly the targets it holds; this run has every kind.
    # The run predates the L2 ceiling: its config, saying so, names exactly what it holds.
    recorded = json.loads((REPO / "results/h200-q-extras/config.json").read_text())
    recorded["ceilings"] = {**recorded.get("ceilings", {}), "l2": False}
    configfile = tmp_path / "config.json"
    configfile.write_text(json.dumps(recorded))
    done = snakemake("--report", str(target), "--configfile", str(configfile), "--replace-workflow-config")
    assert done.returncode == 0, done.stderr
    page = target.read_text()
    for fragment in ("Timing samples", "Timings", "Report", "Environment", "rep1.json", "rmsnorm.svg", "summary.csv",
                     "clocks.svg", "Optional tools", "floor.json"):
        assert fragment in page


def test_throughput_and_resources_trace_to_the_timing_files(markdown):
    run = report.Run(RUN)
    rows = {(r.shape, r.layout): r for r in report.target_rows(run, "rmsnorm")}
    assert len(rows) == CONFIGURATIONS
    records = [r for r in run.timings if (r["shape"], r["layout"]) == ("16384x8193", "t256")]
    median_us = statistics.median(s for r in records for s in r["samples_us"])
    row = rows[("16384x8193", "t256")]
    assert row.judgement.memory == "DRAM"  # 1.07 GB against 60 MiB
    assert row.median_us == median_us and row.compulsory_bytes == records[0]["bytes_moved"]
    noise = max(statistics.stdev(r["samples_us"]) / statistics.mean(r["samples_us"]) for r in records)
    assert row.noise == pytest.approx(noise)
    # The rendered row: scaled, right-aligned numbers (nvbench style).
    rate = records[0]["bytes_moved"] / (median_us * 1e-6)
    expected = f"| 16384x8193 | t256 | {median_us:.2f} us | {100 * noise:.2f}% | 1.00 GiB | {rate / 1e12:.2f} TB/s |"
    assert expected in markdown
    resources = {row[0]: row for row in report.resource_rows(run, "rmsnorm")}
    assert set(resources) == {"t32", "t256"}
    assert resources["t256"][3] == 1024 and resources["t32"][3] == 128  # dynamic shared = threads * 4 bytes
    assert resources["t256"][6] == "256" and resources["t32"][1] == records[0]["kernel_attributes"]["num_regs"]


@pytest.mark.parametrize("samples, kind", [
    (["1.0", "2.0"], "strings"), ({"a": 1.0}, "a dict"), ([float("nan"), 1.0], "NaN"), (None, "missing key")])
def test_malformed_samples_are_one_sentence_naming_the_file(tmp_path, capsys, samples, kind):
    copy = tmp_path / "h200-ref2"
    shutil.copytree(RUN, copy)
    target = copy / "timing/rmsnorm/512x128/t32/rep1.json"
    record = json.loads(target.read_text())
    if samples is None:
        del record["samples_us"]
    else:
        record["samples_us"] = samples
    target.write_text(json.dumps(record))  # NaN is written as the bare token NaN, which Python's reader accepts
    assert main(["report", str(copy), "--markdown", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kernelkit report: result file ") and str(target) in err and "\n" not in err
    assert "Traceback" not in err and not (tmp_path / "r.md").exists()


def test_answers_open_the_report_and_count_shapes_from_the_samples(markdown):
    assert markdown.split("\n## ")[1].startswith("Answers")
    run = report.Run(RUN)
    holds = 0
    shapes = sorted({r["shape"] for r in run.timings})
    for shape in shapes:
        ratios = [statistics.median(run.records("rmsnorm", shape, "t32")[i]["samples_us"])
                  / statistics.median(run.records("rmsnorm", shape, "t256")[i]["samples_us"]) for i in range(2)]
        holds += all(r > 1 for r in ratios)
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


def test_claims_say_when_the_gpu_and_shape_differ():
    from kernelkit.report import claims

    run = report.Run(RUN)
    results = claims.all_claims(run)
    short_row = next(r for r in results if r.statement.startswith("256 threads lose"))
    assert list(short_row.measured) == ["512x128"]
    assert short_row.differences == ["the claim was measured on RTX 5070, this run on NVIDIA H200"]
    t32, t256 = (run.pooled_median("rmsnorm", "512x128", layout) for layout in ("t32", "t256"))
    assert short_row.reproduced["512x128"] == (t32 < t256)


def test_a_claim_about_a_shape_the_run_did_not_time_is_not_judged_on_other_shapes():
    """h200-limits1 times rmsnorm at 16384x8193 only; the seed's claim is about 512x128."""
    from kernelkit.report import claims

    results = claims.all_claims(report.Run(REPO / "results" / "h200-limits1"))
    short_row = next(r for r in results if r.statement.startswith("256 threads lose"))
    assert short_row.measured == {} and claims.verdict_text(short_row) == "not measurable here"
    assert "the claim's shape 512x128 was not run here, so it is not judged" in short_row.differences
    # A claim that names no shape is still compared on every shape the run has.
    unnamed = next(r for r in results if r.kernel == "matmul" and "58.8%" in r.statement)
    assert list(unnamed.measured) == ["4096x4096x4096"] and claims.verdict_text(unnamed) == "reproduced"


def test_explanations_come_from_byte_counts_and_declared_vector_widths():
    from kernelkit.report import explain

    run = report.Run(REPO / "results" / "h200-s5a")
    reasons = explain.explanations(run, "layernorm")
    assert any(r.startswith("layernorm 16384x4097 warp: the width 4097 is not a multiple of 4") for r in reasons)
    assert not any("4096x1024 warp: the width" in r for r in reasons)
    assert reasons[0].startswith("layernorm 4096x1024: the working set (32.0 MiB) fits in the 60.0 MiB L2")
    assert any("issues 548.7 MiB for 68.3 MiB" in r for r in explain.explanations(run, "neighbor"))
    # A matmul is bound by arithmetic, not by the memory that serves it: no L2 sentence there.
    assert not any("L2" in r for r in explain.explanations(run, "matmul"))


def test_an_l2_resident_target_is_judged_against_the_l2_ceiling_when_one_was_measured(tmp_path):
    # h200-s5a predates the L2 ceiling: plant one in a copy, built from the run's own copy ceiling
    # record with its byte count cut to a quarter (a faster rate than DRAM, as an L2 copy would be).
    copy = tmp_path / "h200-s5a"
    shutil.copytree(REPO / "results" / "h200-s5a", copy)
    dram = json.loads((copy / "ceilings" / "copy.json").read_text())
    (copy / "ceilings" / "l2.json").write_text(json.dumps({**dram, "kind": "l2", "bytes": dram["bytes"] * 4}))
    run = report.Run(copy)
    assert run.ceiling["l2_gb_s"] == pytest.approx(4 * run.ceiling["copy_gb_s"])
    judged = report.judge(run, "layernorm", "4096x1024", "triton")
    median_us = run.pooled_median("layernorm", "4096x1024", "triton")
    compulsory = run.records("layernorm", "4096x1024", "triton")[0]["bytes_moved"]
    assert judged.memory == "L2" and judged.ceiling.startswith("L2 copy")
    assert judged.fraction == pytest.approx(compulsory / (median_us * 1e-6) / 1e9 / run.ceiling["l2_gb_s"])
    # A working set beyond the L2 keeps the DRAM copy ceiling.
    assert report.judge(run, "layernorm", "16384x4097", "triton").ceiling.startswith("DRAM copy")


def test_the_copy_ceiling_is_checked_against_the_rated_bandwidth_when_recorded(tmp_path):
    from kernelkit.report import limits

    run = report.Run(REPO / "results" / "h200-s5a")
    assert limits.rated_bandwidth_gb_s(run) is None  # recorded before the bus width was
    assert any("holds no memory bus width" in line for line in limits.cross_checks(run))
    run.environment["cuda"]["memory_bus_width_bits"] = 6144
    rated = 2 * run.environment["gpu"]["memory_clock_max_mhz"] * 1e6 * 6144 / 8 / 1e9
    assert limits.rated_bandwidth_gb_s(run) == pytest.approx(rated)
    assert (f"The DRAM copy ceiling ({run.ceiling['copy_gb_s']:.0f} GB/s) is "
            f"{run.ceiling['copy_gb_s'] / rated:.0%} of the rated bandwidth ({rated:.0f} GB/s") in limits.cross_checks(run)[0]


def test_a_correctness_case_without_its_verdict_is_named(tmp_path, capsys):
    copy = tmp_path / "h200-ref2"
    shutil.copytree(RUN, copy)
    target = copy / "correctness/rmsnorm/t32.json"
    target = target if target.exists() else sorted(copy.glob("correctness/*/*.json"))[0]
    record = json.loads(target.read_text())
    del record["cases"][1]["passed"]
    target.write_text(json.dumps(record))
    assert main(["report", str(copy), "--markdown", str(tmp_path / "r.md")]) == 2
    assert capsys.readouterr().err == f"kernelkit report: result file {target} has a case (number 1) without passed\n"


def test_an_interrupted_write_leaves_both_old_files_and_no_temporary(tmp_path, monkeypatch):
    import os

    from kernelkit.report import commands

    md, html = tmp_path / "report.md", tmp_path / "report.html"
    md.write_text("old md")
    html.write_text("old html")
    real_fdopen, calls = os.fdopen, []

    def failing_fdopen(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:  # the HTML's temporary file, after the Markdown's was written
            raise OSError("disk full")
        return real_fdopen(*args, **kwargs)

    monkeypatch.setattr(commands.os, "fdopen", failing_fdopen)
    with pytest.raises(OSError):
        commands.write_pair(md, "new md", html, "new html")
    assert md.read_text() == "old md" and html.read_text() == "old html"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.md"]


def test_the_noise_split_counts_repeats_one_worker_ran_as_one_process():
    """h200-s9 (`--cores 1`) timed both repeats of every target in its one worker: no configuration
    has a spread between processes. h200-p13's pool did so for some configurations only. A run
    whose repeats were processes of their own (h200-s5a) keeps the range of its repeats' medians."""
    from kernelkit.report.quality import noise_rows

    serial = noise_rows(report.Run(REPO / "results" / "h200-s9"))
    assert len(serial) == 87 and {row[4] for row in serial} == {"n/a: one process"} and {row[5] for row in serial} == {"n/a"}
    solo = report.Run(REPO / "results" / "h200-p13")
    rows = {tuple(row[:3]): row for row in noise_rows(solo)}
    shared = {key for key, row in rows.items() if row[4] == "n/a: one process"}
    workers = {}
    for record in solo.timings:
        workers.setdefault((record["kernel"], record["shape"], record["layout"]), set()).add(record["job"]["worker"]["pid"])
    assert shared == {key for key, pids in workers.items() if len(pids) == 1} and 0 < len(shared) < len(rows)
    own = report.Run(REPO / "results" / "h200-s5a")
    own_rows = {tuple(row[:3]): row for row in noise_rows(own)}
    for (kernel, shape, layout), group in own.table.groupby(["kernel", "shape", "layout"]):
        medians = group["median_us"]
        assert own_rows[(kernel, shape, layout)][4] == f"{100 * (medians.max() - medians.min()) / medians.mean():.2f}%"
