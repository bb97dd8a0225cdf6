"""The committed pair h200-s5a / h200-s5b: the default config twice, identical code, same H200
(issue 5's first goal), read back from their files."""

from __future__ import annotations

import json
import statistics

import pytest
from conftest import REPO

from kernelkit import diff
from kernelkit import config as kit_config

RUNS = ("h200-s5a", "h200-s5b")


def records(run: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in (REPO / "results" / run).glob("timing/*/*/*/rep*.json")]


def medians(run: str) -> dict[tuple, float]:
    return {(r["kernel"], r["shape"], r["layout"], r["repeat"]): statistics.median(r["samples_us"])
            for r in records(run)}


def test_both_runs_are_the_whole_default_config_on_one_gpu_with_identical_sources():
    configs = [json.loads((REPO / "results" / run / "config.json").read_text()) for run in RUNS]
    without_name = [{k: v for k, v in c.items() if k != "run"} for c in configs]
    assert without_name[0] == without_name[1]
    assert set(configs[0]["kernels"]) == {"rmsnorm", "matmul", "layernorm", "bias_gelu", "triangle", "neighbor"}
    runs = [diff.load_run(REPO / "results" / run) for run in RUNS]
    result = diff.compare(*runs)
    # No difference in GPU UUID, driver, CUDA, CuPy, clocks seen, ...; no source or outcome change.
    assert result.environment == [] and result.source_changes == [] and result.outcome_changes == []
    assert len(records(RUNS[0])) == len(records(RUNS[1])) == len(kit_config.timing_plan(configs[0])) == 100


@pytest.mark.parametrize("run", RUNS)
def test_each_run_timed_in_the_planned_order(run):
    config = json.loads((REPO / "results" / run / "config.json").read_text())
    executed = [(r["kernel"], r["shape"], r["layout"], r["repeat"], r["method_used"]["cache"])
                for r in sorted(records(run), key=lambda r: r["started_utc"])]
    assert executed == [t.key for t in kit_config.timing_plan(config)]


def test_at_least_90_percent_of_targets_above_5_us_agree_within_1_percent():
    a, b = (medians(run) for run in RUNS)
    above = [k for k in a if a[k] > 5 and b[k] > 5]
    outside = {k for k in above if abs(b[k] / a[k] - 1) > 0.01}
    assert len(above) == 94 and len(outside) == 8 and 1 - len(outside) / len(above) >= 0.9
    # Pooled over both repeats, per configuration, as the diff compares them.
    result = diff.compare(*(diff.load_run(REPO / "results" / run) for run in RUNS))
    pooled = [c for c in result.comparisons if c.median_a > 5 and c.median_b > 5]
    pooled_outside = {(c.kernel, c.shape, c.layout) for c in pooled if abs(c.median_b / c.median_a - 1) > 0.01}
    assert len(pooled) == 47 and pooled_outside == {("layernorm", "4096x1024", "warp"),
                                                    ("rmsnorm", "512x8193", "t32"), ("triangle", "256x128", "cupy")}


def test_the_diff_calls_nothing_faster_or_slower_and_the_worst_target_ambiguous():
    result = diff.compare(*(diff.load_run(REPO / "results" / run) for run in RUNS))
    assert result.count("FASTER") == result.count("SLOWER") == 0 and result.count("SAME") == 46
    worst = min(result.comparisons, key=lambda c: c.median_b / c.median_a)
    assert (worst.kernel, worst.shape, worst.layout, worst.verdict) == ("rmsnorm", "512x8193", "t32", "AMBIGUOUS")
    # The interval excludes 1 and both B processes beat both A processes: only the rule that a
    # claimed change must exceed the 2% that SAME tolerates keeps this identical code from FASTER.
    assert worst.interval.high < 1.0 and worst.interval.high > 0.98

