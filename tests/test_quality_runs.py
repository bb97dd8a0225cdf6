"""The committed quality runs (config/quality-check.yaml on the H200): what the sampler, the
cold cache, the ceilings and the optional tools recorded, read back from their files."""

from __future__ import annotations

import json
import statistics

import pytest
from conftest import REPO

from kernelkit import ceilings, diff, report
from kernelkit import config as kit_config

RUNS = ("h200-q-extras", "h200-q-on", "h200-q-off")


def records(run: str, folder: str = "timing") -> list[dict]:
    return [json.loads(p.read_text()) for p in (REPO / "results" / run).glob(f"{folder}/*/*/*/rep*.json")]


@pytest.mark.parametrize("run", RUNS)
def test_timed_targets_ran_in_the_planned_order_across_kernels(run):
    """With the checks outranking every timed target, two kernels' targets interleave as planned."""
    found = records(run) + records(run, "cold")
    config = json.loads((REPO / "results" / run / "config.json").read_text())
    executed = [(r["kernel"], r["shape"], r["layout"], r["repeat"], r["method_used"]["cache"])
                for r in sorted(found, key=lambda r: r["started_utc"])]
    assert executed == [t.key for t in kit_config.timing_plan(config)]
    assert len({k[0] for k in executed[:6]}) == 2


def test_sampler_on_kept_a_trace_and_tagged_every_sample_and_off_kept_none():
    for record in records("h200-q-on"):
        assert record["sampler"]["enabled"] and len(record["sample_tags"]) == len(record["samples_us"])
        assert record["clock_trace"] and all(tag["points"] >= 1 for tag in record["sample_tags"])
        assert record["disturbed_samples"] == []
    for record in records("h200-q-off"):
        assert not record["sampler"]["enabled"] and record["clock_trace"] == []
        assert all(tag["throttled"] is None for tag in record["sample_tags"])


def test_sampler_on_and_off_agree_within_the_diff_threshold():
    result = diff.compare(diff.load_run(REPO / "results/h200-q-on"), diff.load_run(REPO / "results/h200-q-off"),
                          0.02, 0.95)
    assert result.count("SAME") == len(result.comparisons) == 10


def test_identical_code_twice_agrees_within_one_percent_above_5_us():
    def medians(run):
        return {(r["kernel"], r["shape"], r["layout"], r["repeat"]): statistics.median(r["samples_us"])
                for r in records(run)}

    a, b = medians("h200-q-on"), medians("h200-q-extras")
    above = [k for k in a if a[k] > 5]
    assert len(above) == 16 and all(abs(b[k] / a[k] - 1) <= 0.01 for k in above)
    result = diff.compare(diff.load_run(REPO / "results/h200-q-on"), diff.load_run(REPO / "results/h200-q-extras"),
                          0.02, 0.95)
    assert result.count("FASTER") == result.count("SLOWER") == 0


def test_cold_samples_are_single_calls_after_a_flush_of_twice_the_l2():
    cold = records("h200-q-extras", "cold")
    assert len(cold) == 20
    for record in cold:
        used = record["method_used"]
        assert used["cache"] == "cold" and used["launches_per_sample"] == 1
        assert used["flush"]["flush_bytes"] == 2 * used["flush"]["l2_bytes"] and used["flush"]["persisting_l2_reset"] == "done"


def test_ceilings_floor_and_the_impossible_flag_come_from_the_run():
    run = report.Run(REPO / "results/h200-q-extras")
    assert set(run.ceilings) == {"copy", "gemm", "floor"}
    assert run.ceiling["floor_us"] == statistics.median(run.ceilings["floor"]["samples_us"]) < 1.0
    # The memcpy copy ceiling of this run is below what the Triton bias_gelu reaches: flagged, never a win.
    triton = [r for r in run.timings if r["layout"] == "triton"]
    verdicts = [ceilings.roofline(r["bytes_moved"], r["flops"], statistics.median(r["samples_us"]), run.ceiling)
                for r in triton]
    assert all(v["bound"] == "memory" and v["impossible"] for v in verdicts)
    # Correct and consistent across repeats: the report doubts the ceiling, names both numbers, never the kernel.
    judged = report.judge(run, "bias_gelu", "8192x4096", "triton")
    assert judged.above and judged.consistent and judged.memory == "DRAM"
    achieved = triton[0]["bytes_moved"] / (statistics.median(s for r in triton for s in r["samples_us"]) * 1e-6) / 1e9
    assert judged.note == (f"ceiling suspect: this correct result reaches {achieved:.0f} GB/s, above the measured "
                           f"DRAM copy {run.ceiling['copy_gb_s']:.0f} GB/s")
    markdown = report.render_markdown(REPO / "results/h200-q-extras")
    assert f"bias\\_gelu 8192x4096 triton: {judged.note}" in markdown.replace("bias_gelu", "bias\\_gelu")


def test_ncu_counters_were_recorded_for_every_configuration():
    profiles = [json.loads(p.read_text()) for p in (REPO / "results/h200-q-extras/profile").glob("*/*/*.json")]
    assert len(profiles) == 10
    for record in profiles:
        assert "skipped" not in record and record["ncu_arguments"][:2] == ["--clock-control", "none"]
        launch = record["launches"][0]
        assert 0 < launch["dram_throughput_pct_of_peak"] <= 100 and launch["instructions_executed"] > 0

