"""Measurement-quality logic on the CPU: clock-sampler tags, the wait for the clock, the
roofline against the run's own ceilings, the harness floor, the stopping rule and the noise
split. Real arithmetic on constructed traces and on synthetic runs' samples (tests/synthetic.py)."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest
from conftest import graph_method, sampler_settings

from kernelkit import ceilings, report, sampler, stats
from kernelkit.stats import median_relative_halfwidth
from kernelkit.span import rotation
from kernelkit.kernel_time import launches_per_sample, stop_reason

SETTINGS = sampler_settings(interval_ms=20, min_sm_clock_fraction=0.9)


def point(t, clock=1980, reasons=()):
    return {"t": t, "sm_clock_mhz": clock, "memory_clock_mhz": 3201, "power_w": 300.0, "temperature_c": 40,
            "reasons": list(reasons)}


def test_tags_mark_only_samples_near_a_throttle_or_a_low_clock():
    trace = [point(0.00), point(0.02), point(0.04, reasons=["sw_power_cap"]), point(0.06), point(0.08),
             point(0.10, clock=1500), point(0.12), point(0.14), point(0.16, reasons=["gpu_idle"])]
    windows = [(0.000, 0.005), (0.050, 0.052), (0.100, 0.101), (0.140, 0.141), (0.500, 0.501)]
    tags = sampler.tag_samples(windows, trace, SETTINGS, 1980)
    assert [t["throttled"] for t in tags] == [False, True, False, False, None]
    assert [t["low_clock"] for t in tags] == [False, False, True, False, None]
    assert tags[1]["reasons"] == ["sw_power_cap"] and tags[2]["min_sm_clock_mhz"] == 1500
    # gpu_idle is not a throttle of the timed work; a sample nobody read is unknown, not clean.
    assert sampler.disturbed(tags) == [1, 2]
    assert sampler.causes(tags) == ["sw_power_cap", "low SM clock"] and sampler.causes([tags[0]]) == []


def test_unreadable_clocks_leave_the_low_clock_tag_unknown():
    trace = [point(0.0, clock="unavailable: NVMLError_NotSupported")]
    tag = sampler.tag_samples([(0.0, 0.001)], trace, SETTINGS, "unavailable: no max")[0]
    assert tag["low_clock"] is None and tag["throttled"] is False


def test_wait_for_clock_keeps_the_gpu_busy_until_the_clock_is_up():
    readings = iter([500, 900, 1500, 1890])
    busy = []
    waited = sampler.wait_for_clock(lambda: next(readings), 1980, sampler_settings(wait_for_clock=True),
                                    lambda: busy.append(1))
    assert waited["ready"] is True and waited["checks"] == 4 and len(busy) == 3 and waited["last_sm_clock_mhz"] == 1890
    off = sampler.wait_for_clock(lambda: 100, 1980, SETTINGS, lambda: busy.append(1))
    assert off == {"enabled": False, "waited_s": 0.0, "checks": 0, "ready": None}


def test_wait_for_clock_gives_up_at_the_timeout():
    settings = sampler_settings(wait_for_clock=True, wait_timeout_s=0.05)
    waited = sampler.wait_for_clock(lambda: 345, 1980, settings, lambda: None)
    assert waited["ready"] is False and waited["waited_s"] >= 0.05


def test_sampler_thread_reads_until_stopped():
    class FakeNvml:
        error = None

        def snapshot(self):
            return {"sm_clock_mhz": 1980, "memory_clock_mhz": 3201, "power_draw_w": 1.0, "temperature_c": 30,
                    "clock_event_reasons": []}

    import time

    with sampler.ClockSampler(FakeNvml(), sampler_settings(interval_ms=10)) as clocks:
        time.sleep(0.1)
    assert 5 <= len(clocks.trace) <= 15
    assert all(a["t"] <= b["t"] for a, b in zip(clocks.trace, clocks.trace[1:]))
    with sampler.ClockSampler(FakeNvml(), sampler_settings(enabled=False)) as off:
        time.sleep(0.02)
    assert off.trace == []


CEILING = {"copy_gb_s": 4000.0, "gemm_gflop_s": 50_000.0, "floor_us": 2.0}


def test_a_time_within_three_times_the_harness_floor_is_near_it():
    assert stats.near_floor(5.9, 2.0) and not stats.near_floor(6.1, 2.0) and not stats.near_floor(1.0, None)


def test_ceiling_rates_come_from_the_sample_medians():
    records = {"copy": {"bytes": 2 * 2**31, "samples_us": [1100.0, 1000.0, 1020.0]},
               "gemm": {"flops": 2 * 4096**3, "samples_us": [2700.0]}, "floor": {"samples_us": [2.0, 2.5, 2.2]}}
    rates = stats.rates(records)
    assert rates["copy_gb_s"] == pytest.approx(2 * 2**31 / 1020e-6 / 1e9)
    assert rates["gemm_gflop_s"] == pytest.approx(2 * 4096**3 / 2700e-6 / 1e9) and rates["floor_us"] == 2.2


def test_median_halfwidth_shrinks_with_more_samples_and_the_stopping_rule_says_why_it_stopped():
    rng = np.random.default_rng(0)
    few, many = list(10 + rng.standard_normal(15)), list(10 + rng.standard_normal(1500))
    assert median_relative_halfwidth(many) < median_relative_halfwidth(few) < 0.2
    assert median_relative_halfwidth([5.0] * 20) == 0.0
    fixed = graph_method(samples=15)
    assert stop_reason(few[:14], fixed, 0.0) is None and stop_reason(few, fixed, 0.0) == "fixed_count"
    rule = graph_method(samples=15, stop_relative_spread=0.001, stop_max_seconds=1.0, stop_max_samples=100)
    assert stop_reason(few, rule, 0.0) is None
    assert stop_reason(few, rule, 1.0) == "time_limit"
    assert stop_reason(many[:100], rule, 0.0) == "sample_limit"
    assert stop_reason([7.0] * 15, rule, 0.0) == "spread"


def test_long_calls_get_fewer_per_sample_and_rounds_rotate():
    method = graph_method(launches_per_graph=64, max_sample_ms=20.0)
    assert launches_per_sample(2.0, method) == 64 and launches_per_sample(16_900.0, method) == 1
    assert launches_per_sample(2700.0, method) == 7 and launches_per_sample(0.0, method) == 64
    assert [rotation(["a", "b", "c"], r) for r in range(4)] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"],
                                                                ["a", "b", "c"]]


def test_noise_split_from_the_samples(tmp_path):
    """Recomputed from a synthetic run's raw samples on two configurations: rmsnorm 4096x4096 t32,
    whose second process is 3% slower (its repeats' medians differ more than the samples inside
    either), and every other, whose spread inside a process is the larger."""
    from synthetic import write_run

    run_dir = write_run(tmp_path, "noise", scale={("rmsnorm", "4096x4096", "t32", 2): 1.03})
    run = report.Run(run_dir)
    rows = {(r[0], r[1], r[2]): r for r in report.noise_rows(run)}
    assert len(rows) == len({(t["kernel"], t["shape"], t["layout"]) for t in run.timings}) == 9
    larger = set()
    for kernel, shape, layout in (("rmsnorm", "512x128", "t256"), ("rmsnorm", "4096x4096", "t32")):
        records = sorted((json.loads(p.read_text()) for p in (run_dir / "timing" / kernel / shape / layout).glob("rep*.json")),
                         key=lambda r: r["repeat"])
        assert [r["repeat"] for r in records] == [1, 2]
        medians = [statistics.median(r["samples_us"]) for r in records]
        within = statistics.median((max(r["samples_us"]) - min(r["samples_us"])) / statistics.median(r["samples_us"])
                                   for r in records)
        between = (max(medians) - min(medians)) / statistics.mean(medians)
        row = rows[(kernel, shape, layout)]
        assert row[3] == f"{100 * within:.2f}%" and row[4] == f"{100 * between:.2f}%"
        assert row[5] == ("between" if between > within else "within")
        larger.add(row[5])
    assert larger == {"within", "between"}


def test_sanitizer_and_ncu_output_are_read_from_the_tools_text():
    from kernelkit import sanitizer, tools

    assert sanitizer.sanitizer_errors("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == 0
    assert sanitizer.sanitizer_errors("========= Invalid __global__ read\n========= ERROR SUMMARY: 3 errors\n") == 3
    assert sanitizer.sanitizer_errors("no summary: the tool could not start") is None
    assert sanitizer.sanitizer_errors("========= RACECHECK SUMMARY: 2 hazards displayed (1 errors, 1 warnings)") == 2
    csv_text = (
        "==PROF== Connected to process 1\n"
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","1","python3","h","rmsnorm_rows","1","7","(256, 1, 1)","(512, 1, 1)","0","9.0","Command line profiler metrics",'
        '"dram__throughput.avg.pct_of_peak_sustained_elapsed","%","61.5"\n'
        '"0","1","python3","h","rmsnorm_rows","1","7","(256, 1, 1)","(512, 1, 1)","0","9.0","Command line profiler metrics",'
        '"smsp__inst_executed.sum","inst","1,234,567"\n'
        '"0","1","python3","h","rmsnorm_rows","1","7","(256, 1, 1)","(512, 1, 1)","0","9.0","Command line profiler metrics",'
        '"some__other.metric","","5"\n')
    launches = tools.ncu_metrics(csv_text)
    assert launches == [{"kernel": "rmsnorm_rows", "block": "(256, 1, 1)", "grid": "(512, 1, 1)",
                         "dram_throughput_pct_of_peak": 61.5, "instructions_executed": 1234567.0}]
    assert tools.ncu_metrics("==ERROR== ERR_NVGPUCTRPERM - no permission") == []


def test_the_limiter_is_the_unit_nearest_its_peak_in_the_longest_launch():
    from kernelkit.report.quality import limiter

    def launch(duration_ns: float, dram: float, l2: float, l1: float, sm: float, fma: float) -> dict:
        return {"duration_ns": duration_ns, "dram_throughput_pct_of_peak": dram, "l2_throughput_pct_of_peak": l2,
                "l1_throughput_pct_of_peak": l1, "sm_throughput_pct_of_peak": sm, "fma_pipe_pct_of_peak": fma}

    gemm = launch(3.0e6, 12.0, 30.0, 71.5, 82.0, 78.0)
    assert limiter([gemm]) == "SM (82%)"
    # A short helper launch beside it does not decide.
    assert limiter([launch(1.0e3, 95.0, 1.0, 1.0, 1.0, 1.0), gemm]) == "SM (82%)"
    assert limiter([launch(5.0e4, 41.0, 35.0, 20.0, 22.0, 3.0)]) == "latency (top: DRAM 41%)"
    # Records of older kits read DRAM only: no limiter is claimed from one unit.
    old = [{"kernel": "bias_gelu", "duration_ns": 179840.0, "dram_throughput_pct_of_peak": 88.8,
            "achieved_occupancy_pct": 83.3, "instructions_executed": 1.5e8, "shared_bank_conflicts": 0.0}]
    assert limiter(old) == "n/a"
    assert limiter([]) == "n/a"


def test_sanitizer_output_reads_as_clean_for_both_tools_whatever_the_record_says(tmp_path):
    """The report counts each tool's findings from the output kept in the record, so a record whose
    kit looked for memcheck's summary line only (racecheck "did not run to its summary", errors
    null) reads as clean when its kept output shows racecheck's summary line."""
    from synthetic import write_run

    from kernelkit import sanitizer
    from kernelkit.records import write_record

    run_dir = write_run(tmp_path, "tools", sanitizer=True)
    passed = "rmsnorm t32: all 24 cases passed, largest |error| 6.3322e-07\n"
    older = {"kernel": "rmsnorm", "layout": "t32", "source_sha256": "0" * 64, "tools": {
        "memcheck": {"errors": 0, "exit_code": 0, "status": "ran", "tail": passed + "========= ERROR SUMMARY: 0 errors"},
        "racecheck": {"errors": None, "exit_code": 0, "status": "did not run to its summary",
                      "tail": passed + "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"}}}
    (run_dir / "sanitizer" / "rmsnorm.json").unlink()
    for layout in ("t32", "t256"):  # a record per layout, as kits before the per-kernel record wrote them
        write_record(run_dir / "sanitizer" / "rmsnorm" / f"{layout}.json", {**older, "layout": layout})
    for path in sorted((run_dir / "sanitizer").glob("*/*.json")):
        record = json.loads(path.read_text())
        assert record["tools"]["racecheck"]["errors"] is None and "RACECHECK SUMMARY" in record["tools"]["racecheck"]["tail"]
        assert {tool: sanitizer.sanitizer_errors(record["tools"][tool]["tail"]) for tool in ("memcheck", "racecheck")} == {
            "memcheck": 0, "racecheck": 0}
    markdown = report.render_markdown(run_dir)
    assert "| rmsnorm | t32 | 0 | 0 |" in markdown and "| rmsnorm | t256 | 0 | 0 |" in markdown
    assert "ran together" not in markdown  # each layout's own run


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc is not on the PATH")
def test_ceiling_kernels_compile_for_sm90(tmp_path):
    import shutil
    import subprocess

    for name, source in (("copy", ceilings.COPY_KERNEL), ("empty", ceilings.EMPTY_KERNEL)):  # three copy kernels
        path = tmp_path / f"{name}.cu"
        path.write_text(source)
        done = subprocess.run([shutil.which("nvcc"), "-arch=sm_90", "-cubin", "-o", str(tmp_path / f"{name}.cubin"),
                               str(path)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr


def test_a_sample_counts_only_when_enqueued_within_90_percent_of_the_host_lead():
    """The rule that retakes late samples, without a GPU: a lead of 2000 us accepts an enqueueing
    of 1.79 ms and retakes one of 1.81 ms; no lead (0) accepts everything."""
    from kernelkit.kernel_time import HOST_LEAD_MARGIN, HostLead

    off = HostLead(0.0)
    assert off.kernel is None and off.in_time(10.0)
    on = object.__new__(HostLead)  # the spinning kernel needs a GPU; the rule does not
    on.lead_us, on.kernel = 2000.0, "a compiled kernel"
    assert HOST_LEAD_MARGIN == 0.9
    assert on.in_time(0.00179) and not on.in_time(0.00181)
