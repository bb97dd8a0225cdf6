"""Summary and report rebuilt from the committed H200 run, checked against its raw samples."""

from __future__ import annotations

import json
import re
import shutil
import statistics
import sys

import pandas as pd
import pytest
from conftest import REPO

from kernelkit import report
from kernelkit.cli import main
from kernelkit.environment import Nvml

RUN = REPO / "results" / "h200-a"


@pytest.fixture(scope="module")
def timing_files():
    files = sorted(RUN.glob("timing/*/*/*/rep*.json"))
    assert len(files) == 36
    return files


@pytest.fixture(scope="module")
def markdown():
    return report.render_markdown(RUN)


def test_summary_rows_are_the_medians_of_the_raw_samples(tmp_path, timing_files):
    output = tmp_path / "summary.csv"
    assert main(["summary", "--output", str(output), *map(str, timing_files)]) == 0
    table = pd.read_csv(output)
    assert len(table) == 36 and table["n"].eq(15).all()
    for path in timing_files:
        record = json.loads(path.read_text())
        row = table[(table["shape"] == record["shape"]) & (table["layout"] == record["layout"])
                    & (table["repeat"] == record["repeat"])].iloc[0]
        assert row["median_us"] == pytest.approx(statistics.median(record["samples_us"]), abs=1e-6)
        assert row["min_us"] == pytest.approx(min(record["samples_us"]), abs=1e-6)
    # Each repeat ran its 18 targets in its own order, positions 0..17.
    for _, group in table.groupby("repeat"):
        assert sorted(group["order_position"]) == list(range(18))


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
        assert f"{statistics.median(record['samples_us']):.3f} [" in markdown
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
        row = (f"| \"256 threads are faster on every shape\" (rmsnorm: t256 faster than t32) | rep{verdict['repeat']} | "
               f"{'holds' if verdict['holds'] else 'fails'} |")
        assert row in markdown


def test_faster_layout_table_covers_every_shape(markdown):
    section = markdown.split("Faster layout per shape")[1].split("## Hypotheses")[0]
    assert len([line for line in section.splitlines() if line.startswith("| ") and "x" in line.split("|")[1]]) == 9


def test_report_says_when_nvml_was_missing(tmp_path, monkeypatch):
    # The environment as recorded, with its NVML part replaced by what the kit records
    # when nvidia-ml-py cannot be imported: every NVML field "unavailable: ...".
    copy = tmp_path / "h200-a"
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
    copy = tmp_path / "h200-a"
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
    assert page.count("<svg") == 1 and "<img" not in page and "<link" not in page
    assert not re.search(r"""(src|href)=["']https?:""", page)
    assert html.stat().st_size < 5 * 2**20
    # The Markdown carries the same sections and links the figure instead of inlining it.
    sections = re.findall(r"^## (.+)$", md.read_text(), re.MULTILINE)
    assert sections == re.findall(r"<h2>(.+?)</h2>", page)
    assert "![rmsnorm: every sample per shape, layout and repeat](figures/rmsnorm.svg)" in md.read_text()


def test_method_is_written_from_config_and_files(markdown):
    method = markdown.split("## Method")[1].split("##")[0]
    for fragment in ("20 warm-up launches", "64 launches", "time 15 replays", "in 2 separate processes",
                     "seed 2026", "Inside the timed interval: the graph replay only"):
        assert fragment in method


def test_caveats_are_derived_from_the_files(tmp_path, markdown):
    run = report.Run(RUN)
    found = report.caveats(run)
    assert found[0] == "Clocks were not locked"
    expected = []
    for (_, shape, layout), group in run.table.groupby(["kernel", "shape", "layout"]):
        if group["median_us"].max() - group["median_us"].min() > (group["max_us"] - group["min_us"]).max():
            expected.append(f"rmsnorm {shape} {layout}")
    assert sorted(c.split(" differ")[0].removeprefix("Repeats of ") for c in found if c.startswith("Repeats")) == sorted(expected)

    copy = tmp_path / "h200-a"
    shutil.copytree(RUN, copy)
    target = copy / "timing/rmsnorm/512x128/t32/rep1.json"
    record = json.loads(target.read_text())
    record["samples_us"] = record["samples_us"][:9]
    record["nvml_after"].update(sm_clock_mhz=1500, clock_event_reasons=["sw_power_cap"])
    target.write_text(json.dumps(record))
    found = report.caveats(report.Run(copy))
    assert "Fewer samples than the config asked (15): rmsnorm 512x128 t32 rep1 (9)" in found
    assert any(c.startswith("SM clock differed before and after 1 timed targets: rmsnorm 512x128 t32 rep1") for c in found)
    assert "Clock-event reason sw_power_cap seen in 1 snapshots: rmsnorm 512x128 t32 rep1 (after)" in found


def test_snakemakes_own_report_lists_the_marked_results(tmp_path):
    from conftest import snakemake

    target = tmp_path / "snakemake-report.html"
    # The run's own recorded config names exactly the targets it holds; this run has every kind.
    done = snakemake("--report", str(target), "--configfile", "results/h200-q-extras/config.json",
                     "--replace-workflow-config")
    assert done.returncode == 0, done.stderr
    page = target.read_text()
    for fragment in ("Timing samples", "Timings", "Report", "Environment", "rep1.json", "rmsnorm.svg", "summary.csv",
                     "clocks.svg", "Optional tools", "floor.json"):
        assert fragment in page


def test_throughput_and_resources_trace_to_the_timing_files():
    run = report.Run(RUN)
    rows = {(r[0], r[1]): r for r in report.throughput_rows(run, "rmsnorm")}
    assert len(rows) == 18
    records = [r for r in run.timings if (r["shape"], r["layout"]) == ("16384x8193", "t256")]
    median_us = statistics.median(s for r in records for s in r["samples_us"])
    shape, layout, median, gbps, gflops, fits_in_l2 = rows[("16384x8193", "t256")]
    assert fits_in_l2 == "no"  # 1.07 GB against 60 MiB
    assert float(median) == pytest.approx(median_us, abs=5e-4)
    assert float(gbps) == pytest.approx(records[0]["bytes_moved"] / (median_us * 1e-6) / 1e9, abs=0.05)
    assert float(gflops) == pytest.approx(records[0]["flops"] / (median_us * 1e-6) / 1e9, abs=0.05)
    resources = {row[0]: row for row in report.resource_rows(run, "rmsnorm")}
    assert set(resources) == {"t32", "t256"}
    assert resources["t256"][3] == 1024 and resources["t32"][3] == 128  # dynamic shared = threads * 4 bytes
    assert resources["t256"][6] == "256" and resources["t32"][1] == records[0]["kernel_attributes"]["num_regs"]
