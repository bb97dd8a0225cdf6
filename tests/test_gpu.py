"""On a real GPU: correctness, both negative controls, a short timing, the environment.

Run with `pytest -m gpu`; on a machine without a GPU every test here is skipped with the reason.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import REPO, default_config, graph_method, kit_env

from kernelkit import spec as specs
from kernelkit.cli import main
from kernelkit.records import read_json, write_json_atomic

pytestmark = pytest.mark.gpu

RMSNORM = specs.load("rmsnorm")


def test_all_48_correctness_cases_pass():
    from kernelkit.cases import run_suite

    cases = run_suite(RMSNORM, ["t32", "t256"])  # the seed's two layouts
    assert len(cases) == 48
    failed = [case for case in cases if not case.passed]
    assert not failed, failed[:3]
    assert max(case.max_abs_error for case in cases) < 1e-5
    assert all(case.sentinel_left == 0 and case.guard_overwritten == 0 for case in cases)


@pytest.mark.parametrize("control, symptom", [("epsilon", "NaN in"), ("tail", "sentinel left")])
def test_negative_controls_are_caught_for_the_seed_reason(control, symptom):
    from kernelkit.cases import run_suite

    cases = run_suite(RMSNORM, list(RMSNORM.layouts), control)
    failed = [case for case in cases if not case.passed]
    assert failed, f"negative control {control} passed every case"
    assert any(case.symptom.startswith(symptom) for case in failed)
    if control == "epsilon":
        assert {case.pattern for case in failed} >= {"zeros"}


@pytest.mark.parametrize("control", sorted(RMSNORM.mutations))
def test_cli_negative_control_exits_zero_when_caught(control, capsys):
    # Over every hand-written layout, as the workflow's negative_controls rule runs them, since a
    # control may aim at a layout other than the seed's (vec_head mutates only the vec layout).
    assert main(["control", "--kernel", "rmsnorm", "--control", control, *_every_layout(RMSNORM)]) == 0
    assert f"negative control '{control}' caught " in capsys.readouterr().out  # in N cases, or by racecheck


def test_cli_negative_controls_default_to_every_control_a_record_each(tmp_path, capsys):
    """The workflow's one job per kernel: every control of the spec in one process, a record each."""
    folder = tmp_path / "controls"
    assert main(["control", "--kernel", "rmsnorm", *_every_layout(RMSNORM), "--output-dir", str(folder)]) == 0
    assert sorted(path.name for path in folder.iterdir()) == sorted(f"{name}.json" for name in RMSNORM.mutations)
    processes = set()
    for name in RMSNORM.mutations:
        record = read_json(folder / f"{name}.json")
        assert record["control"] == name and record["caught"] is True and record["layouts"] == list(RMSNORM.layouts)
        assert record["caught_by"]["check"] in {"correctness", "determinism", "racecheck"}
        processes.add(json.dumps(record["job"]["process"], sort_keys=True))
    assert len(processes) == 1
    out = capsys.readouterr().out
    assert all(f"negative control '{name}' caught " in out for name in RMSNORM.mutations)


def test_short_graph_replay_timing():
    from kernelkit import device
    from kernelkit.inputs import rng_for
    from kernelkit.kernel_time import kernel_time_samples

    cp = device.cupy()
    shape = (512, 128)
    kernel = device.compile_kernel(RMSNORM)
    buffers = device.upload(RMSNORM.make_inputs(shape, "normal", rng_for("gpu-test")))
    out = cp.empty(shape, dtype=cp.float32)
    launch_once, _ = device.launcher(RMSNORM, kernel, RMSNORM.layouts["t32"], shape, buffers, out)
    samples, used, _ = kernel_time_samples(launch_once, graph_method(warmup_launches=3, launches_per_graph=8, samples=5))
    assert used["name"] == "cuda_graph_replay"
    assert len(samples) == 5
    assert all(math.isfinite(s) and 0.5 < s < 1000 for s in samples)
    assert kernel.attributes["num_regs"] > 0


def test_successive_measurements_in_one_process_agree_on_a_small_kernel():
    """A timing job measures every layout of its kernel/shape in one process: every measurement must
    take the time a fresh process would. On an H200 a new stream per measurement made every one after
    the first ~10% slower on this 1.7 us kernel (1.685 then 1.86 us); the kit keeps one stream."""
    from kernelkit import device
    from kernelkit.inputs import timing_inputs
    from kernelkit.kernel_time import kernel_time_samples

    cp = device.cupy()
    shape = RMSNORM.parse_shape("512x128")
    buffers = device.upload(timing_inputs(RMSNORM, "512x128"))
    out = cp.empty(RMSNORM.output_shape(shape), dtype=cp.float32)
    implementation = device.implementation(RMSNORM, "vec", shape, buffers, out)
    method = graph_method(samples=15)
    medians = [statistics.median(kernel_time_samples(implementation.call, method)[0]) for _ in range(4)]
    assert device.measurement_stream() is device.measurement_stream()
    assert max(medians) / min(medians) < 1.04, medians


def test_environment_capture_reads_the_device():
    from kernelkit.environment import capture

    record = capture({"run": "gpu-test"})
    assert record["cuda"]["sm_count"] > 0
    assert record["cuda"]["compute_capability"].count(".") == 1
    assert isinstance(record["gpu"]["driver_version"], str)
    assert isinstance(record["snapshot"]["sm_clock_mhz"], (int, str))
    # Read from package metadata, without importing Torch or Triton: the same version CuPy reports.
    assert record["baseline_packages"]["cupy"] == record["cuda"]["cupy_version"]


def test_time_command_refuses_a_kernel_whose_correctness_did_not_pass(tmp_path, capsys):
    passed, failed = tmp_path / "vec.json", tmp_path / "t32.json"
    write_json_atomic(passed, {"passed": True, "layouts": ["vec"], "skipped": {}, "source_sha256": RMSNORM.source_sha256()})
    write_json_atomic(failed, {"passed": False, "layouts": ["t32"], "source_sha256": RMSNORM.source_sha256()})
    controls = [str(tmp_path / f"{name}.json") for name in RMSNORM.mutations]
    for name, path in zip(RMSNORM.mutations, controls):
        write_json_atomic(path, {"control": name, "caught": True})
    output = tmp_path / "timing"
    # Every layout's checks are read before any is timed: the one that did not pass stops them all.
    code = _time("rmsnorm", "512x128", ["vec", "t32"], [str(passed), str(failed)], controls, output)
    assert code == 2 and not output.exists()
    assert "does not record a pass" in capsys.readouterr().err


def test_stages_chain_through_the_command_line(tmp_path):
    """correctness and control write a record per layout and per control; one `time` process times
    both layouts in its seeded order and writes each layout's record, which names that order."""
    from kernelkit.plan import layout_order

    correctness, controls = _checked(tmp_path, "rmsnorm", ["t32", "vec"])
    assert [Path(name).name for name in correctness] == ["t32.json", "vec.json"]
    output = tmp_path / "timing"
    assert _time("rmsnorm", "512x128", ["t32", "vec"], correctness, controls, output, samples=4) == 0
    assert sorted(path.name for path in output.iterdir()) == ["t32", "vec"]
    order = layout_order(0, "rmsnorm", "512x128", 1, "warm", ["t32", "vec"])
    records = {layout: read_json(output / layout / "rep1.json") for layout in ("t32", "vec")}
    for layout, record in records.items():
        assert record["layout"] == layout and len(record["samples_us"]) == 4
        assert record["method"]["launches_per_graph"] == 64
        assert record["nvml_before"]["time_utc"] <= record["nvml_after"]["time_utc"]
        assert record["order"] == {"seed": 0, "key": order.index(layout), "layouts": order,
                                   "position": order.index(layout)}
    # One process timed both, in that order; its clock grew from one record to the next.
    first, second = (records[layout] for layout in order)
    assert first["job"]["process"] == second["job"]["process"] and first["job"]["process"]["pid"] > 0
    assert first["ended_utc"] <= second["started_utc"]
    assert first["job"]["ended_unix_s"] <= second["job"]["ended_unix_s"]
    assert [w["nested"] for w in second["job"]["gpu_work"]][:1] == [False]


@pytest.mark.parametrize("kernel", specs.available())
def test_every_kernel_folder_passes_and_catches_its_controls(kernel):
    from kernelkit.cases import run_suite

    spec = specs.load(kernel)
    cases = run_suite(spec, list(spec.layouts), runs=3)
    assert all(case.passed for case in cases), [c for c in cases if not c.passed][:3]
    assert all(case.deterministic or case.nondeterministic_reason for case in cases)
    layouts = [arg for layout in spec.layouts for arg in ("--layout", layout)]
    for control in spec.mutations:  # caught by correctness, determinism or racecheck, as the workflow runs it
        assert main(["control", "--kernel", kernel, "--control", control, *layouts]) == 0, control


BASELINES = [(kernel, layout) for kernel in specs.available() for layout in specs.load(kernel).baselines]


@pytest.mark.parametrize("kernel,layout", BASELINES)
def test_every_library_baseline_passes_the_same_correctness_cases(kernel, layout):
    from kernelkit import library
    from kernelkit.cases import run_suite

    spec = specs.load(kernel)
    reason = library.missing_reason(spec.baselines[layout].package)
    if reason:
        pytest.skip(f"baseline skipped: {reason}")
    cases = run_suite(spec, [layout], runs=3)
    assert cases and all(case.passed for case in cases), [c for c in cases if not c.passed][:3]


def _matmul_call(layout):
    from kernelkit import device
    from kernelkit.inputs import rng_for

    spec = specs.load("matmul")
    shape = (256, 256, 256)
    buffers = device.upload(spec.make_inputs(shape, "normal", rng_for("gpu-test")))
    out = device.cupy().empty((256, 256), dtype="float32")
    return device.implementation(spec, layout, shape, buffers, out)


def test_kernel_time_falls_back_to_events_where_capture_is_refused():
    from kernelkit.kernel_time import kernel_time_samples

    method = graph_method(warmup_launches=2, launches_per_graph=8, samples=4)
    samples, used, _ = kernel_time_samples(_matmul_call("cupy").call, method)  # CuPy refuses to capture cuBLAS
    assert used["name"] == "back_to_back_events" and "cuBLAS" in used["capture_error"]
    assert len(samples) == 4 and all(0 < s < 10_000 for s in samples)
    samples, used, _ = kernel_time_samples(_matmul_call("reg4x4").call, method)
    assert (used["name"], used["launches_per_sample"], used["cache"], used["stopped_by"]) == (
        "cuda_graph_replay", 8, "warm", "fixed_count")


def test_span_rounds_rotate_the_order_and_keep_every_sample():
    from kernelkit.span import SpanMethod, span_samples

    calls = {layout: _matmul_call(layout).call for layout in ("tile16", "reg4x4", "cupy")}
    samples = span_samples(calls, SpanMethod(warmup_calls=1, rounds=3, samples_per_round=5))
    assert set(samples) == set(calls)
    for layout, values in samples.items():
        assert [s["round"] for s in values] == [0] * 5 + [1] * 5 + [2] * 5
        assert all(0 < s["us"] < 100_000 for s in values)


def test_time_and_span_commands_record_a_baseline(tmp_path):
    correctness, controls = _checked(tmp_path, "matmul", ["reg4x4", "cupy"])
    paths = {Path(name).stem: name for name in correctness}
    timing = tmp_path / "timing"
    assert _time("matmul", "512x512x512", "cupy", correctness, controls, timing, samples=3) == 0
    record = read_json(timing / "cupy" / "rep1.json")
    assert record["method_used"]["name"] == "back_to_back_events"
    assert record["library"]["package"] == "cupy" and record["kernel_attributes"] == {}
    span = tmp_path / "span.json"
    from kernelkit.span import SpanSettings

    config = default_config()
    config["span"].update(rounds=2, samples_per_round=3)
    assert main(["span", "--kernel", "matmul", "--shape", "512x512x512", "--layout", "reg4x4", "--correctness",
                 paths["reg4x4"], "--layout", "cupy", "--correctness", paths["cupy"], "--controls", *controls,
                 "--repeat", "1", "--settings", SpanSettings.json_from_config(config), "--output", str(span)]) == 0
    record = read_json(span)
    assert set(record["layouts"]) == {"reg4x4", "cupy"} and len(record["layouts"]["cupy"]["samples"]) == 6
    assert record["layouts"]["reg4x4"]["kernel_attributes"]["num_regs"] > 0


def test_cold_samples_are_single_calls_after_an_l2_flush():
    from kernelkit.kernel_time import L2Flush, kernel_time_samples

    flush = L2Flush()
    implementation = _matmul_call("reg4x4")
    method = graph_method(warmup_launches=2, launches_per_graph=8, samples=5)
    cold, used, windows = kernel_time_samples(implementation.call, method, flush=flush)
    warm, _, _ = kernel_time_samples(implementation.call, method)
    assert used["cache"] == "cold" and used["launches_per_sample"] == 1 and flush.flushes == 5
    assert flush.describe()["flush_bytes"] >= 2 * flush.describe()["l2_bytes"] > 0
    assert len(windows) == 5 and all(a <= b for a, b in windows)
    # A 256^3 product reads 512 KiB: evicted, every sample pays at least as much as a warm one.
    assert min(cold) >= 0.9 * min(warm)


def test_ceilings_and_floor_are_measured_with_the_timing_method():
    from kernelkit import ceilings, stats

    method = graph_method(warmup_launches=2, launches_per_graph=8, samples=5)
    records = {kind: ceilings.measure(kind, method, copy_bytes=2**26, gemm_n=1024) for kind in ceilings.KINDS}
    rates = stats.rates(records)
    assert 100 < rates["copy_gb_s"] < 10_000 and 1_000 < rates["gemm_gflop_s"] < 1_000_000
    assert 0 < rates["floor_us"] < 20
    # Both buffers of the L2 copy fit in the L2 (a quarter of it each): it must beat the DRAM copy of 64 MiB.
    import cupy as cp

    assert records["l2"]["bytes"] <= cp.cuda.Device().attributes["L2CacheSize"] // 2
    assert rates["l2_gb_s"] > rates["copy_gb_s"]
    assert records["gemm"]["variants"]["cupy"]["method_used"]["name"] == "back_to_back_events"
    variants = sorted(records["copy"]["variants"])
    assert len(variants) == 4 and variants[0] == "four_quads_per_thread" and variants[1].startswith("grid_stride_")
    assert records["copy"]["best"] == min(records["copy"]["variants"],
                                          key=lambda name: statistics.median(records["copy"]["variants"][name]["samples_us"]))


def _every_layout(spec):
    """`--layout` arguments for every hand-written layout of `spec`, as the workflow runs controls."""
    return [arg for name in spec.layouts for arg in ("--layout", name)]


def _checked(tmp_path, kernel, layouts):
    """The correctness files of `layouts` (<layout>.json, from one `correctness` process) and the
    negative-control files that `time` requires (every control of the spec, from one `control`
    process over every hand-written layout, since a control may aim at any one of them), as the
    workflow's check jobs write them."""
    layouts = [layouts] if isinstance(layouts, str) else list(layouts)
    spec = specs.load(kernel)
    assert main(["correctness", "--kernel", kernel, *[a for name in layouts for a in ("--layout", name)],
                 "--output-dir", str(tmp_path / "correctness")]) == 0
    assert main(["control", "--kernel", kernel, *_every_layout(spec), "--output-dir", str(tmp_path / "controls")]) == 0
    return ([str(tmp_path / "correctness" / f"{name}.json") for name in layouts],
            [str(tmp_path / "controls" / f"{name}.json") for name in spec.mutations])


def _time(kernel, shape, layouts, correctness, controls, output_dir, cache="warm", sampler=None, **timing):
    """`kernelkit time` of `layouts` (one or a list) with the default config's settings, changed by
    `timing` and `sampler`; each layout's record goes to output_dir/<layout>/rep1.json."""
    from kernelkit.timing import TimingSettings

    config = default_config()
    config["timing"].update(timing)
    config["sampler"].update(sampler or {})
    layouts = [layouts] if isinstance(layouts, str) else list(layouts)
    correctness = [correctness] if isinstance(correctness, str) else list(correctness)
    return main(["time", "--kernel", kernel, "--shape", shape, *[a for name in layouts for a in ("--layout", name)],
                 "--repeat", "1", "--order-seed", "0", "--order-key", "0", "--cache", cache,
                 "--settings", TimingSettings.json_from_config(config), "--correctness", *correctness,
                 "--controls", *controls, "--output-dir", str(output_dir)])


def test_time_command_keeps_the_clock_trace_and_tags_every_sample(tmp_path):
    correctness, controls = _checked(tmp_path, "rmsnorm", "t256")
    output = tmp_path / "timing"
    assert _time("rmsnorm", "16384x8193", "t256", correctness, controls, output, cache="cold", samples=20,
                 sampler={"interval_ms": 10, "wait_for_clock": True}) == 0
    record = read_json(output / "t256" / "rep1.json")
    assert len(record["sample_tags"]) == len(record["samples_us"]) == 20
    assert len(record["clock_trace"]) >= 2 and record["sampler"]["interval_ms"] == 10
    # The record states the settings it ran with: the settings param's, schema defaults included.
    assert record["method"]["samples"] == 20 and record["method"]["max_sample_ms"] == default_config()["timing"]["max_sample_ms"]
    assert record["format_version"] == 2
    assert record["method_used"]["clock_wait"]["enabled"] is True and record["method_used"]["cache"] == "cold"
    # A 1 ms sample gets the trace points within one 10 ms interval of it; a sampler thread late by
    # more than that (one sample of 20 in an H200 run of 2026-11-30) leaves it uncovered, which the
    # tag must then call unknown, never clean.
    tags = record["sample_tags"]
    assert sum(tag["points"] >= 1 for tag in tags) >= 0.8 * len(tags)
    assert all(tag["throttled"] is None and tag["foreign"] is None for tag in tags if tag["points"] == 0)


def test_stopping_rule_ends_on_spread_or_on_its_limit_and_says_which():
    from kernelkit.stats import median_relative_halfwidth
    from kernelkit.kernel_time import kernel_time_samples

    call = _matmul_call("reg4x4").call
    loose = graph_method(warmup_launches=2, launches_per_graph=8, samples=5, stop_relative_spread=1.0)
    samples, used, _ = kernel_time_samples(call, loose)
    assert used["stopped_by"] == "spread" and len(samples) == 5
    assert used["relative_halfwidth"] == median_relative_halfwidth(samples) <= 1.0
    # No real timing reaches a zero half-width: the sample limit has to end it.
    unreachable = graph_method(warmup_launches=2, launches_per_graph=8, samples=5, stop_relative_spread=0.0,
                               stop_max_seconds=60.0, stop_max_samples=12)
    samples, used, windows = kernel_time_samples(call, unreachable)
    assert used["stopped_by"] == "sample_limit" and len(samples) == len(windows) == 12
    assert used["relative_halfwidth"] > 0.0


def test_placements_time_fresh_buffers_at_other_addresses_and_keep_every_sample(tmp_path):
    correctness, controls = _checked(tmp_path, "rmsnorm", "t32")
    output = tmp_path / "timing"
    assert _time("rmsnorm", "512x8193", "t32", correctness, controls, output, samples=10, placements=3) == 0
    record = read_json(output / "t32" / "rep1.json")
    assert record["method"]["placements"] == 3 and len(record["samples_us"]) == 30
    assert record["sample_placement"] == [0] * 10 + [1] * 10 + [2] * 10
    assert [p["pad_bytes"] for p in record["placements"]] == [0, 2**20, 3 * 2**20]
    assert len({p["addresses"]["x"] for p in record["placements"]}) == 3
    assert len(record["sample_tags"]) == 30


@pytest.mark.parametrize("layout", ["torch", "triton"])
def test_placements_rebind_a_library_baseline_to_each_fresh_copy(tmp_path, layout):
    from kernelkit import library

    package = specs.load("bias_gelu").baselines[layout].package
    if library.missing_reason(package):
        pytest.skip(library.missing_reason(package))
    correctness, controls = _checked(tmp_path, "bias_gelu", layout)
    output = tmp_path / "timing"
    assert _time("bias_gelu", "1024x1024", layout, correctness, controls, output, samples=4, placements=2) == 0
    record = read_json(output / layout / "rep1.json")
    assert record["sample_placement"] == [0] * 4 + [1] * 4 and record["library"]["package"] == package
    assert record["placements"][0]["addresses"]["x"] != record["placements"][1]["addresses"]["x"]
    assert all(p["method_used"]["name"] == "cuda_graph_replay" for p in record["placements"])


def test_device_comparer_agrees_with_the_numpy_judgement():
    """The one-kernel comparison used under the lock gives what `compare` gives on the host:
    mismatches, NaN/Inf, the largest finite error, with and without an error scale."""
    import cupy as cp
    import numpy as np

    from kernelkit.spec import Tolerance
    from kernelkit.verify import DeviceComparer, compare

    rng = np.random.default_rng(7)
    reference = rng.standard_normal(100_003)
    out = (reference + rng.standard_normal(reference.size) * 1e-6).astype(np.float32)
    out[[5, 77, 40_000]] = [np.nan, np.inf, 3.0]
    scale = np.abs(reference) + 1.0
    comparer = DeviceComparer()
    for tolerance in (Tolerance(abs=1e-5, rel=1e-4), Tolerance(abs=0.0, rel=0.0)):
        for host_scale in (None, scale):
            expected = compare(out, reference, tolerance, host_scale)
            got = comparer(cp.asarray(out), cp.asarray(reference), tolerance,
                           None if host_scale is None else cp.asarray(host_scale))
            assert got == expected
    clean = reference.astype(np.float32)
    assert comparer(cp.asarray(clean), cp.asarray(reference), Tolerance(abs=1e-5, rel=1e-4))["passed"] is True


def test_host_lead_keeps_the_graph_launch_latency_out_of_the_samples():
    """With the lead, the start event waits behind a spinning thread while the host enqueues the
    sample: an empty kernel's per-call time is no higher than without it (where the graph launch's
    host latency falls inside every sample), and on an idle host no late sample is kept."""
    import cupy as cp

    from kernelkit.kernel_time import kernel_time_samples

    empty = cp.RawKernel('extern "C" __global__ void empty() {}', "empty")
    call = lambda: empty((1,), (1,), ())  # noqa: E731
    with_lead, used, _ = kernel_time_samples(call, graph_method(host_lead_us=2000.0))
    without, used_without, _ = kernel_time_samples(call, graph_method(host_lead_us=0.0))
    assert used["host_late"]["kept"] == 0 and used["host_late"]["retaken"] <= len(with_lead)
    assert "host_late" not in used_without
    assert statistics.median(with_lead) <= statistics.median(without) * 1.02


@pytest.mark.parametrize("y_offset", [0, 1])
def test_layernorm_vec_holds_three_columns_past_its_registers_on_both_paths(y_offset):
    """layernorm_vec's launch gives a row of 4 * vec * threads + 3 columns no more threads: the
    vector path keeps the last columns as its tail, and the scalar path (y misaligned against x,
    which the kit's own buffers never are) keeps them as one scalar each of the first threads."""
    import cupy as cp
    import numpy as np

    from kernelkit import device

    spec = specs.load("layernorm")
    layout = spec.layout("vec")
    shape = (6, 4 * int(layout["vec"]) * 32 + 3)
    assert spec.launch(layout, shape).block[0] == 32  # one warp holds the row and three more columns
    rng = np.random.default_rng(7)
    host = spec.make_inputs(shape, "normal", rng)
    buffers = device.upload(host)
    backing = cp.full(shape[0] * shape[1] + 1, cp.nan, dtype=cp.float32)
    out = backing[y_offset:y_offset + shape[0] * shape[1]].reshape(shape)
    device.launcher(spec, device.compile_layout(spec, "vec"), layout, shape, buffers, out)[0]()
    got = cp.asnumpy(out)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, spec.reference(host), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("switch", [True, False])
def test_a_measurement_switches_to_the_other_context_and_back_only_when_asked(switch):
    """The other context does its memset and hands the thread back CuPy's context: the samples
    and the CuPy work after them run where they ran before."""
    from kernelkit import device
    from kernelkit.inputs import rng_for
    from kernelkit.kernel_time import kernel_time_samples

    cp = device.cupy()
    shape = (512, 128)
    buffers = device.upload(RMSNORM.make_inputs(shape, "normal", rng_for("gpu-test")))
    out = cp.empty(shape, dtype=cp.float32)
    launch_once, _ = device.launcher(RMSNORM, device.compile_kernel(RMSNORM), RMSNORM.layouts["t32"], shape, buffers, out)
    context = cp.cuda.driver.ctxGetCurrent()
    samples, used, _ = kernel_time_samples(launch_once, graph_method(warmup_launches=3, launches_per_graph=8, samples=5,
                                                                     context_switch=switch))
    assert cp.cuda.driver.ctxGetCurrent() == context
    assert len(samples) == 5 and all(math.isfinite(s) and s > 0 for s in samples)
    assert used.get("context_switch") == ("other context" if switch else None)
    assert float((out * 0 + 1).sum()) == out.size  # CuPy still works in its own context


def test_one_timing_target_from_scratch_runs_as_four_plain_processes(tmp_path):
    """The workflow builds one rmsnorm timing target with its kernel's three check jobs and one timing
    job, each a process of its own that holds the GPU lock from its first GPU work until it exits;
    the sanitizer's compute-sanitizer children run under their parent's hold, and no kit process is
    foreign work to another."""
    from kernelkit.records import run_time

    run = f"pytest-plain-{uuid.uuid4().hex[:8]}"
    target = f"results/{run}/timing/rmsnorm/512x128/t32/rep1.json"
    env = kit_env(KERNELKIT_LOCK_DIR=str(tmp_path / "locks"))
    snakemake = shutil.which("snakemake") or str(Path(sys.executable).with_name("snakemake"))
    try:
        # A session of its own, so that a run stuck past the limit is ended with every job it started.
        workflow = subprocess.Popen([snakemake, "--cores", "8", "--config", f"run={run}", "--", target], cwd=REPO,
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
        try:
            output, _ = workflow.communicate(timeout=500)
        except subprocess.TimeoutExpired:
            os.killpg(workflow.pid, signal.SIGKILL)
            output, _ = workflow.communicate()
            pytest.fail(f"one timing target took more than 500 s: {output[-3000:]}")
        assert workflow.returncode == 0, output[-3000:]
        run_dir = REPO / "results" / run
        records = {path.relative_to(run_dir).as_posix(): json.loads(path.read_text())
                   for path in run_dir.rglob("*.json") if "logs" not in path.relative_to(run_dir).parts}
        layouts = default_config()["kernels"]["rmsnorm"]["layouts"]
        assert len(records) == 2 * len(layouts) + len(RMSNORM.mutations) + 1
        processes = {(r["job"]["process"]["pid"], r["job"]["process"]["started_unix_s"]) for r in records.values()}
        assert len(processes) == 4 and all("worker" not in r["job"] for r in records.values())
        assert run_time(list(records.values()))["jobs"] == 4
        timing = [records[f"timing/rmsnorm/512x128/{layout}/rep1.json"] for layout in layouts]
        assert len({json.dumps(r["job"]["process"], sort_keys=True) for r in timing}) == 1
        assert sorted(r["order"]["position"] for r in timing) == list(range(len(layouts)))
        for record in timing:
            if "skipped" in record:
                continue
            if isinstance(record["foreign_work"]["processes"], list):
                assert record["foreign_work"]["processes"] == [], json.dumps(record["foreign_work"])
        if shutil.which("compute-sanitizer"):
            sanitizer = records["sanitizer/rmsnorm.json"]
            assert {tool: result["errors"] for tool, result in sanitizer["tools"].items()} == {"memcheck": 0, "racecheck": 0}
            barrier = records["controls/rmsnorm/barrier.json"]["racecheck"]
            assert barrier["status"] == "ran" and barrier["hazards"] > 0
            # Under the parent's hold, the children never wait for it (no 900 s timeout).
            assert all(result["wall_s"] < 120 for result in sanitizer["tools"].values()), sanitizer["tools"]
    finally:
        for folder in ("results", "reports"):
            shutil.rmtree(REPO / folder / run, ignore_errors=True)


def test_the_workflow_check_finds_nothing_wrong_where_cupy_runs():
    """device.gpu_problem, asked through the driver without CuPy, agrees with CuPy's own start."""
    from kernelkit import device

    assert device.gpu_problem() is None
    assert device.cupy().cuda.runtime.getDeviceCount() >= 1


def test_the_compute_capability_from_the_driver_is_cupys():
    """device.compute_capability (the driver's query) names the binaries' target as CuPy's query does."""
    from kernelkit import device

    cupy = device.cupy()
    for device_id in range(cupy.cuda.runtime.getDeviceCount()):
        assert device.compute_capability(device_id) == str(cupy.cuda.Device(device_id).compute_capability)
