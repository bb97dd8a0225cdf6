"""A committed full run (rmsnorm + the five seed-000 operations with library baselines), checked
from its raw files: what was timed, how, after which checks, and the report built from it.

The run is h200-s5a: the whole default config of its kit (ba75cb3), seed 000's five operations
included, on one H200 (it took over from h200-full, the same config, now retired)."""

from __future__ import annotations

import json
import shutil
import statistics

import pandas as pd
import pytest
from conftest import REPO

from kernelkit import diff, report
from kernelkit.report import units
from kernelkit.cli import main
from kernelkit.records import read_json

RUN = REPO / "results" / "h200-s5a"
SEED_OPERATIONS = ("matmul", "layernorm", "bias_gelu", "triangle", "neighbor")


@pytest.fixture(scope="module")
def run():
    return report.Run(RUN)


@pytest.fixture(scope="module")
def markdown():
    return report.render_markdown(RUN)


def test_every_configured_target_was_timed_after_its_checks_passed(run):
    config = read_json(RUN / "config.json")
    expected = {(k, s, l, r) for k, e in config["kernels"].items() for s in e["shapes"] for l in e["layouts"]
                for r in range(1, config["timing"]["repeats"] + 1)}
    assert {(t["kernel"], t["shape"], t["layout"], t["repeat"]) for t in run.timings} == expected
    assert run.skipped == []
    passed = {(r["kernel"], layout) for r in run.correctness if r["passed"] for layout in r["layouts"]}
    assert {(t["kernel"], t["layout"]) for t in run.timings} <= passed
    # The kernel folders have gained controls since this run; every control it ran was caught,
    # and every timed kernel had at least the two each folder had then.
    caught = {(c["kernel"], c["control"]) for c in run.controls if c["caught"]}
    assert caught == {(c["kernel"], c["control"]) for c in run.controls}
    from kernelkit import spec as specs

    for record in run.timings:
        made = {control for kernel, control in caught if kernel == record["kernel"]}
        assert len(made) >= 2 and made <= set(specs.load(record["kernel"]).mutations)


def test_the_method_each_file_records_is_the_one_expected(run):
    for record in run.timings:
        used = record["method_used"]
        if record["layout"] == "cupy" and record["kernel"] in ("matmul", "triangle", "neighbor"):
            # CuPy refuses to capture cuBLAS (and cuSPARSE, which it reaches through the same check).
            assert used["name"] == "back_to_back_events" and "cuBLAS" in used["capture_error"], record["layout"]
        else:
            assert used["name"] == "cuda_graph_replay", (record["kernel"], record["layout"])
        # No sample lasts longer than max_sample_ms, unless one call alone does.
        per_sample_ms = statistics.median(record["samples_us"]) * used["launches_per_sample"] / 1000
        assert per_sample_ms <= record["method"]["max_sample_ms"] or used["launches_per_sample"] == 1
        assert used["launches_per_sample"] <= record["method"]["launches_per_graph"]


def test_baselines_record_their_library_and_hand_written_layouts_their_resources(run):
    for record in run.timings:
        if record["layout"] in ("cupy", "torch", "triton"):
            assert record["library"]["package"] == record["layout"] and record["kernel_attributes"] == {}
        else:
            assert record["kernel_attributes"]["num_regs"] > 0 and "launch" in record


def test_spans_hold_every_round_of_every_layout(run):
    config = read_json(RUN / "config.json")["span"]
    assert {(r["kernel"], r["shape"]) for r in run.spans} == {
        (k, s) for k in SEED_OPERATIONS for s in read_json(RUN / "config.json")["kernels"][k]["shapes"]}
    for record in run.spans:
        assert set(record["layouts"]) == set(read_json(RUN / "config.json")["kernels"][record["kernel"]]["layouts"])
        for entry in record["layouts"].values():
            rounds = [s["round"] for s in entry["samples"]]
            assert rounds == sorted(rounds) and len(rounds) == config["rounds"] * config["samples_per_round"]


def test_seed_tables_trace_to_the_raw_samples(run, markdown):
    for kernel, shape, layout in (("matmul", "1024x1024x1024", "torch"), ("layernorm", "4096x1024", "warp"),
                                  ("neighbor", "65536x128", "cupy")):
        kernel_samples = [s for r in run.timings if (r["kernel"], r["shape"], r["layout"]) == (kernel, shape, layout)
                          for s in r["samples_us"]]
        span = read_json(RUN / "span" / kernel / shape / "rep1.json")
        rounds: dict[int, list[float]] = {}
        for sample in span["layouts"][layout]["samples"]:
            rounds.setdefault(sample["round"], []).append(sample["us"])
        round_medians = [statistics.median(v) for v in rounds.values()]
        # One statistic for centre and range: the median of the round medians, and their range.
        assert (f"| {kernel} | {shape} | {layout} | {units.duration(statistics.median(kernel_samples))} | "
                f"{units.duration(statistics.median(round_medians))} | {units.duration(min(round_medians))} to "
                f"{units.duration(max(round_medians))} |").replace("_", "\\_") in markdown.replace("_", "\\_")
    tables = markdown.split("Kernel time (median), as the seed tabulates it:")[1]
    assert "| matmul 1024x1024x1024 |" in tables and "tile16 " in tables and "reg4x4 " in tables


def test_working_sets_that_fit_in_l2_are_marked(run):
    rows = {(r.shape, r.layout): r for r in report.target_rows(run, "layernorm")}
    l2 = run.environment["cuda"]["l2_cache_bytes"]
    assert rows[("4096x1024", "triton")].judgement.memory == "L2" and 4 * (2 * 4096 * 1024 + 2 * 1024) <= l2
    assert rows[("16384x4097", "triton")].judgement.memory == "DRAM"
    # This run measured no L2 ceiling: the L2-resident target is not judged against DRAM.
    assert rows[("4096x1024", "triton")].judgement.fraction is None
    assert rows[("4096x1024", "triton")].judgement.note.startswith("DRAM roofline n/a")


def test_a_missing_library_is_skipped_with_its_reason_everywhere(tmp_path):
    copy = tmp_path / "h200-s5a"
    shutil.copytree(RUN, copy, ignore=shutil.ignore_patterns("logs"))
    reason = "torch cannot be imported (ModuleNotFoundError: No module named 'torch')"
    correctness = copy / "correctness/matmul/torch.json"
    correctness.write_text(json.dumps({**read_json(correctness), "cases": [], "layouts": [], "passed": False,
                                       "skipped": {"torch": reason}}))
    for repeat in (1, 2):
        timing = copy / f"timing/matmul/1024x1024x1024/torch/rep{repeat}.json"
        record = read_json(timing)
        timing.write_text(json.dumps({key: record[key] for key in ("kernel", "shape", "dims", "layout", "layout_parameters",
                                                                   "repeat", "order", "method")} | {"skipped": reason}))
    skipped_run = report.Run(copy)
    assert len(skipped_run.skipped) == 2 and all(r["layout"] != "torch" or r["shape"] != "1024x1024x1024"
                                                 for r in skipped_run.timings)
    assert any(c.startswith("Layouts skipped because their library is missing here: matmul torch")
               for c in report.caveats(skipped_run))
    assert f"matmul torch: {reason}" in report.render_markdown(copy)
    output = tmp_path / "summary.csv"
    assert main(["summary", "--output", str(output), *map(str, sorted(copy.glob("timing/*/*/*/rep*.json")))]) == 0
    assert len(pd.read_csv(output)) == len(run_timings := list(RUN.glob("timing/*/*/*/rep*.json"))) - 2
    compared = diff.compare(diff.load_run(RUN), diff.load_run(copy), 0.02, 0.95)
    assert len(compared.comparisons) == len(run_timings) // 2 - 1
    assert "matmul 1024x1024x1024 torch rep1" in compared.only_in_a

