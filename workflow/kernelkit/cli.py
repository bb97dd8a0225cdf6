"""`kernelkit <stage>`: one process per workflow job, each writing one result file.

Every stage validates its arguments before touching the GPU, writes its result atomically,
and on failure prints one sentence and exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from kernelkit import KitError, spec as specs
from kernelkit.stats import DIFF_CONFIDENCE, DIFF_THRESHOLD
from kernelkit.results import read_json, split_skipped, write_json_atomic, write_text_atomic


def cmd_check_config(args: argparse.Namespace) -> int:
    from kernelkit import config

    config.load(args.config)
    print(f"{args.config}: valid")
    return 0


def cmd_write_config(args: argparse.Namespace) -> int:
    from kernelkit import config

    payload = config.validate(json.loads(args.json))
    write_json_atomic(args.output, payload)
    return 0


def cmd_environment(args: argparse.Namespace) -> int:
    from kernelkit import environment

    run_config = read_json(args.config) if args.config else {}
    record = environment.capture(run_config)
    write_json_atomic(args.output, record)
    gpu = record["gpu"]
    print(f"environment: {record['cuda']['device_name']}, driver {gpu['driver_version']}, CuPy {record['cuda']['cupy_version']}")
    if not record["nvml_available"]:
        print(f"warning: {record['nvml_error']}; clock fields are unavailable", file=sys.stderr)
    return 0


def _print_cases(cases: list[Any]) -> None:
    for case in cases:
        mark = "ok  " if case.passed else "FAIL"
        print(
            f"{mark} {case.layout:>6} {case.shape:>8} {case.pattern:<12} max|err| {case.max_abs_error:.3e}"
            f"  worst {case.worst_index}  {'' if case.passed else case.symptom}"
        )


def _skipped_baselines(spec: specs.KernelSpec, layouts: list[str]) -> dict[str, str]:
    """Baseline layouts whose package cannot run here, with the reason; nothing else is skipped."""
    from kernelkit import library

    skipped = {}
    for layout in layouts:
        if spec.is_baseline(layout):
            reason = library.missing_reason(spec.baselines[layout].package)
            if reason:
                skipped[layout] = reason
    return skipped


def cmd_correctness(args: argparse.Namespace) -> int:
    from kernelkit import correctness

    spec = specs.load(args.kernel)
    # A negative control mutates the CUDA source, so by default it runs the hand-written layouts.
    layouts = args.layout or list(spec.layouts if args.negative_control else spec.all_layouts)
    for layout in layouts:
        spec.layout(layout)
    if args.negative_control:
        spec.mutation(args.negative_control)
        baselines = [layout for layout in layouts if spec.is_baseline(layout)]
        if baselines:
            raise KitError(f"negative controls mutate the CUDA source; the library layouts {', '.join(baselines)} have none")
    skipped = _skipped_baselines(spec, layouts)
    for layout, reason in skipped.items():
        print(f"skipped {layout}: {reason}")
    layouts = [layout for layout in layouts if layout not in skipped]
    cases = correctness.run_suite(spec, layouts, args.negative_control) if layouts else []
    _print_cases(cases)
    record = correctness.suite_record(spec, cases, args.negative_control)
    record["layouts"] = layouts
    record["skipped"] = skipped
    record["negative_control"] = args.negative_control
    failed = record["failed_count"]
    if args.negative_control:
        # As in the seed: the mutated build must fail the comparison, so this exits non-zero;
        # a zero exit here means the checks missed the bug.
        verdict = ", as they must" if failed else "; the checks did NOT catch it"
        print(f"negative control '{args.negative_control}' ({spec.mutation(args.negative_control).why}): "
              f"{failed} of {len(cases)} cases failed{verdict}")
        return 1 if failed else 0
    if failed:
        raise KitError(f"{spec.name}: {failed} of {len(cases)} correctness cases failed; nothing will be timed")
    if args.output:
        write_json_atomic(args.output, {**record, "passed": bool(layouts)})
    if layouts:
        print(f"{spec.name} {', '.join(layouts)}: all {len(cases)} cases passed, largest |error| {record['max_abs_error']:.4e}")
    return 0


def cmd_control(args: argparse.Namespace) -> int:
    from kernelkit import correctness

    spec = specs.load(args.kernel)
    mutation = spec.mutation(args.control)
    for layout in args.layout:
        if spec.is_baseline(layout):
            raise KitError(f"negative controls mutate the CUDA source; the library layout '{layout}' has none")
    cases = correctness.run_suite(spec, args.layout, args.control)
    record = correctness.suite_record(spec, cases, args.control)
    caught = [case for case in record["cases"] if not case["passed"]]
    if not caught:
        raise KitError(
            f"negative control '{args.control}' of {spec.name} ({mutation.why}) passed all {len(cases)} correctness "
            "cases: the checks cannot see this bug, so no timing will run"
        )
    first = caught[0]
    write_json_atomic(
        args.output,
        {
            **record,
            "control": args.control,
            "mutation": {"find": mutation.find, "replace": mutation.replace, "why": mutation.why},
            "layouts": args.layout,
            "caught": True,
            "caught_by": {key: first[key] for key in ("layout", "shape", "pattern", "symptom", "worst_index")},
        },
    )
    print(f"negative control '{args.control}' caught in {len(caught)} of {len(cases)} cases; first: {first['layout']} "
          f"{first['shape']} {first['pattern']}: {first['symptom']}")
    return 0


def _require_checked(spec: specs.KernelSpec, layout: str, correctness_file: str, control_files: list[str]) -> str | None:
    """Refuse to time a kernel whose correctness and controls did not pass in this run, on this source.

    Returns the reason when the layout was skipped (its library is missing here), else None.
    """
    record = read_json(correctness_file)
    if layout in record.get("skipped", {}):
        return record["skipped"][layout]
    if not record.get("passed") or layout not in record.get("layouts", []):
        raise KitError(f"{correctness_file} does not record a pass for layout '{layout}'; nothing will be timed")
    if record["source_sha256"] != spec.source_sha256():
        raise KitError(f"{correctness_file} was made from another version of {spec.source_path}; rerun correctness first")
    checked = set()
    for path in control_files:
        control = read_json(path)
        if not control.get("caught"):
            raise KitError(f"{path} does not record the negative control as caught; nothing will be timed")
        checked.add(control["control"])
    missing = set(spec.mutations) - checked
    if missing:
        raise KitError(f"negative controls {', '.join(sorted(missing))} of {spec.name} have no result; nothing will be timed")
    return None


# Placement i > 0 allocates i MiB more before its buffers, and every placement's buffers stay
# allocated until the end: MAX_PLACEMENTS bounds that memory (16 copies of the working set).
PLACEMENT_SHIFT_BYTES = 1 << 20
MAX_PLACEMENTS = 16


def _measured_around(spec: specs.KernelSpec, shape: tuple[int, ...], before: dict[str, Any],
                     after: dict[str, Any]) -> dict[str, Any]:
    """What every timing and span file records about the work and the device around the samples."""
    from kernelkit import device

    return {
        "input_pattern": spec.timing_pattern,
        "bytes_moved": spec.bytes_moved(shape),
        "flops": spec.flops(shape),
        "device_name": device.device_name(),
        "started_utc": before["time_utc"],
        "ended_utc": after["time_utc"],
        "nvml_before": before,
        "nvml_after": after,
    }


def _timing_inputs(spec: specs.KernelSpec, shape_text: str) -> dict[str, Any]:
    """The timing pattern's host inputs for one shape: the same arrays for every layout and process."""
    from kernelkit.inputs import rng_for

    shape = spec.parse_shape(shape_text)
    return spec.make_inputs(shape, spec.timing_pattern, rng_for(spec.name, shape_text, spec.timing_pattern))


def _inputs_on_device(spec: specs.KernelSpec, shape_text: str) -> tuple[Any, dict[str, Any]]:
    """The timing pattern's inputs for one shape, uploaded."""
    from kernelkit import device

    return spec.parse_shape(shape_text), device.upload(_timing_inputs(spec, shape_text))


def _sampler_settings(args: argparse.Namespace) -> Any:
    from kernelkit.sampler import SamplerSettings

    if not 10 <= args.sampler_interval_ms <= 1000:
        raise KitError(f"--sampler-interval-ms must be between 10 and 1000, not {args.sampler_interval_ms}")
    if not 0 < args.min_sm_clock_fraction <= 1:
        raise KitError(f"--min-sm-clock-fraction must be in (0, 1], not {args.min_sm_clock_fraction}")
    return SamplerSettings(not args.no_sampler, args.sampler_interval_ms, args.min_sm_clock_fraction,
                           args.wait_for_clock, args.wait_timeout_s)


def _add_sampler_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-sampler", action="store_true", help="do not sample NVML during the timed samples")
    p.add_argument("--sampler-interval-ms", type=float, default=20.0)
    p.add_argument("--min-sm-clock-fraction", type=float, default=0.9,
                   help="a sample whose window saw an SM clock below this fraction of the maximum is tagged low_clock")
    p.add_argument("--wait-for-clock", action="store_true",
                   help="keep the GPU busy before timing until the SM clock reaches that fraction (never changes settings)")
    p.add_argument("--wait-timeout-s", type=float, default=10.0)


def cmd_time(args: argparse.Namespace) -> int:
    from kernelkit import device, environment, sampler, timing
    from kernelkit.stats import summarize

    if not 1 <= args.placements <= MAX_PLACEMENTS:
        raise KitError(f"--placements must be an integer from 1 to {MAX_PLACEMENTS}, not {args.placements}")

    spec = specs.load(args.kernel)
    layout = spec.layout(args.layout)
    shape = spec.parse_shape(args.shape)
    method = timing.GraphReplayMethod(args.warmup, args.launches, args.samples, max_sample_ms=args.max_sample_ms,
                                      stop_relative_spread=args.stop_relative_spread,
                                      stop_max_seconds=args.stop_max_seconds, stop_max_samples=args.stop_max_samples)
    settings = _sampler_settings(args)
    identity = {
        "kernel": spec.name,
        "shape": args.shape,
        "dims": dict(zip(spec.dims, shape)),
        "layout": args.layout,
        "layout_parameters": dict(layout),
        "repeat": args.repeat,
        # Within a repeat, targets run in ascending order key (see kernelkit.config.order_key).
        "order": {"seed": args.order_seed, "key": args.order_key},
        # Only when above 1, so that runs with one placement compare equal to files written before the option.
        "method": {**method.describe(), **({"placements": args.placements} if args.placements > 1 else {})},
    }
    skipped = _require_checked(spec, args.layout, args.correctness, args.controls)
    if skipped:
        write_json_atomic(args.output, {**identity, "skipped": skipped})
        print(f"{spec.name} {args.shape} {args.layout} rep{args.repeat}: skipped ({skipped})")
        return 0

    cp = device.cupy()
    host_inputs = _timing_inputs(spec, args.shape)
    pads: list[Any] = []
    # Earlier placements stay allocated, so that a later one cannot reuse their addresses.
    held: list[Any] = []

    def placed(index: int) -> tuple[Any, dict[str, Any]]:
        """The implementation on a fresh copy of the inputs; placement i > 0 first takes i MiB more
        of the pool, so its buffers land elsewhere (where they land can change a time by 20%)."""
        if index:
            pads.append(device.pad(index * PLACEMENT_SHIFT_BYTES))
        buffers = device.upload(host_inputs)
        out = cp.empty(spec.output_shape(shape), dtype=cp.float32)
        implementation = device.implementation(spec, args.layout, shape, buffers, out)
        cp.cuda.Device().synchronize()
        return implementation, {"index": index, "pad_bytes": sum(p.nbytes for p in pads),
                                "addresses": device.addresses({**buffers, "out": out})}

    implementation, placement = placed(0)
    nvml = environment.Nvml(cp.cuda.Device().pci_bus_id)
    sm_clock_max = nvml.read(lambda n, h: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))
    flush = timing.L2Flush() if args.cache == "cold" else None

    def wait(keep_busy: Any) -> dict[str, Any]:
        read_clock = lambda: nvml.read(lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))  # noqa: E731
        return sampler.wait_for_clock(read_clock, sm_clock_max, settings, keep_busy)

    samples: list[float] = []
    windows: list[tuple[float, float]] = []
    sample_placement: list[int] = []
    placements = []
    before = nvml.snapshot()
    with sampler.ClockSampler(nvml, settings) as clocks:
        for index in range(args.placements):
            if index:
                held.append(implementation)
                implementation, placement = placed(index)
            got, placement["method_used"], got_windows = timing.kernel_time_samples(implementation.call, method,
                                                                                      wait, flush)
            placement["samples"] = len(got)
            placements.append(placement)
            samples += got
            windows += got_windows
            sample_placement += [index] * len(got)
    after = nvml.snapshot()
    used = dict(placements[0]["method_used"])
    if flush is not None:
        used["flush"] = flush.describe()
    tags = sampler.tag_samples(windows, clocks.trace, settings, sm_clock_max)

    write_json_atomic(
        args.output,
        {
            **identity,
            "method_used": used,
            "unit": "microseconds per launch",
            "samples_us": samples,
            "placements": placements,
            "sample_placement": sample_placement,
            "sampler": settings.describe(),
            "sample_tags": tags,
            "disturbed_samples": sampler.disturbed(tags),
            "clock_trace": clocks.trace,
            **implementation.record,
            **_measured_around(spec, shape, before, after),
        },
    )
    print(f"{spec.name} {args.shape} {args.layout} rep{args.repeat} ({args.cache} cache): median "
          f"{summarize(samples).median:.3f} us over {len(samples)} samples ({used['name']}, "
          f"{used['launches_per_sample']} calls per sample); {len(clocks.trace)} clock readings, "
          f"{len(sampler.disturbed(tags))} samples disturbed")
    return 0


def cmd_span(args: argparse.Namespace) -> int:
    from kernelkit import device, environment, sampler, timing
    from kernelkit.stats import summarize

    spec = specs.load(args.kernel)
    shape = spec.parse_shape(args.shape)
    for layout in args.layout:
        spec.layout(layout)
    if len(args.correctness) != len(args.layout):
        raise KitError("give one --correctness file per --layout, in the same order")
    method = timing.SpanMethod(args.warmup, args.rounds, args.samples)
    settings = _sampler_settings(args)
    skipped = {}
    for layout, correctness_file in zip(args.layout, args.correctness):
        reason = _require_checked(spec, layout, correctness_file, args.controls)
        if reason:
            skipped[layout] = reason
    layouts = [layout for layout in args.layout if layout not in skipped]

    cp = device.cupy()
    shape, buffers = _inputs_on_device(spec, args.shape)
    out = cp.empty(spec.output_shape(shape), dtype=cp.float32)
    implementations = {layout: device.implementation(spec, layout, shape, buffers, out) for layout in layouts}
    cp.cuda.Device().synchronize()

    nvml = environment.Nvml(cp.cuda.Device().pci_bus_id)
    sm_clock_max = nvml.read(lambda n, h: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))
    before = nvml.snapshot()
    with sampler.ClockSampler(nvml, settings) as clocks:
        samples = timing.span_samples({layout: impl.call for layout, impl in implementations.items()}, method) if layouts else {}
    after = nvml.snapshot()
    for layout_samples in samples.values():
        tags = sampler.tag_samples([(s["t0"], s["t1"]) for s in layout_samples], clocks.trace, settings, sm_clock_max)
        for sample, tag in zip(layout_samples, tags):
            sample["disturbed"] = bool(tag["throttled"] or tag["low_clock"])
    write_json_atomic(
        args.output,
        {
            "kernel": spec.name,
            "shape": args.shape,
            "dims": dict(zip(spec.dims, shape)),
            "repeat": args.repeat,
            "method": method.describe(),
            "unit": "microseconds per call",
            "layouts": {
                layout: {"samples": samples[layout], "layout_parameters": dict(spec.layout(layout)), **impl.record}
                for layout, impl in implementations.items()
            },
            "skipped": skipped,
            "sampler": settings.describe(),
            "clock_trace": clocks.trace,
            **_measured_around(spec, shape, before, after),
        },
    )
    for layout in layouts:
        print(f"{spec.name} {args.shape} {layout} span rep{args.repeat}: median "
              f"{summarize([s['us'] for s in samples[layout]]).median:.3f} us over {len(samples[layout])} calls")
    for layout, reason in skipped.items():
        print(f"{spec.name} {args.shape} {layout} span: skipped ({reason})")
    return 0


def cmd_ceiling(args: argparse.Namespace) -> int:
    from kernelkit import ceilings, device, environment, timing

    if args.kind not in ceilings.KINDS:
        raise KitError(f"ceiling '{args.kind}' is not defined; allowed: {', '.join(ceilings.KINDS)}")
    method = timing.GraphReplayMethod(args.warmup, args.launches, args.samples, max_sample_ms=args.max_sample_ms)
    cp = device.cupy()
    nvml = environment.Nvml(cp.cuda.Device().pci_bus_id)
    before = nvml.snapshot()
    record = ceilings.measure(args.kind, method, args.copy_bytes, args.gemm_n)
    after = nvml.snapshot()
    write_json_atomic(args.output, {**record, "device_name": device.device_name(), "unit": "microseconds per call",
                                    "nvml_before": before, "nvml_after": after})
    rate = ceilings.rates({args.kind: record})
    print(f"ceiling {args.kind}: " + ", ".join(f"{key} {value:.3f}" for key, value in rate.items()))
    return 0


def cmd_sanitize(args: argparse.Namespace) -> int:
    from kernelkit import tools

    spec = specs.load(args.kernel)
    if spec.is_baseline(args.layout):
        raise KitError(f"the sanitizer checks hand-written kernels; '{args.layout}' is a library baseline")
    record = {"kernel": spec.name, "layout": args.layout, "source_sha256": spec.source_sha256(),
              **tools.sanitize(spec.name, args.layout)}
    write_json_atomic(args.output, record)
    if "skipped" in record:
        print(f"sanitizer skipped: {record['skipped']}")
    else:
        print("; ".join(f"{tool}: {r['errors']} errors ({r['status']})" for tool, r in record["tools"].items()))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from kernelkit import tools

    spec = specs.load(args.kernel)
    spec.layout(args.layout)
    spec.parse_shape(args.shape)
    record = {"kernel": spec.name, "shape": args.shape, "layout": args.layout, **tools.profile(spec.name, args.shape,
                                                                                                 args.layout)}
    write_json_atomic(args.output, record)
    print(f"profile skipped: {record['skipped']}" if "skipped" in record else
          f"profiled {len(record['launches'])} kernel launches in one call")
    return 0


def cmd_profile_call(args: argparse.Namespace) -> int:
    """The program ncu runs: warm up, then one call between cudaProfilerStart and Stop."""
    from kernelkit import device, library

    spec = specs.load(args.kernel)
    spec.layout(args.layout)
    cp = device.cupy()
    shape, buffers = _inputs_on_device(spec, args.shape)
    out = cp.empty(spec.output_shape(shape), dtype=cp.float32)
    implementation = device.implementation(spec, args.layout, shape, buffers, out)
    stream = cp.cuda.Stream(non_blocking=True)
    with library.on_stream(stream):
        for _ in range(5):
            implementation.call()
        stream.synchronize()
        cp.cuda.profiler.start()
        implementation.call()
        stream.synchronize()
        cp.cuda.profiler.stop()
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    from kernelkit import summary

    timed, _ = split_skipped([read_json(path) for path in args.timing])
    table = summary.summarize_records(timed)
    write_text_atomic(args.output, table.to_csv(index=False, float_format="%.6f"))
    return 0


def cmd_figure(args: argparse.Namespace) -> int:
    from kernelkit import figures

    timed, _ = split_skipped([read_json(path) for path in args.timing])
    write_text_atomic(args.output, figures.timing_figure(timed, args.kernel))
    return 0


def cmd_clock_figure(args: argparse.Namespace) -> int:
    from kernelkit import figures

    timed, _ = split_skipped([read_json(path) for path in args.timing])
    write_text_atomic(args.output, figures.clock_figure(timed))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from kernelkit import document, report

    title, sections = report.build(Path(args.run_dir), Path(args.figures) if args.figures else None)
    write_text_atomic(args.markdown, document.render_markdown(title, sections))
    if args.html:
        write_text_atomic(args.html, document.render_html(title, sections))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from kernelkit import diff, document

    result = diff.compare(diff.load_run(args.run_a), diff.load_run(args.run_b), args.threshold, args.confidence)
    title, sections = diff.build(result)
    markdown = document.render_markdown(title, sections)
    if args.markdown:
        write_text_atomic(args.markdown, markdown)
    else:
        print(markdown, end="")
    if args.html:
        write_text_atomic(args.html, document.render_html(title, sections))
    slower = result.count("SLOWER")
    print(f"{len(result.comparisons)} configurations: " + ", ".join(
        f"{result.count(v)} {v}" for v in ("SAME", "FASTER", "SLOWER", "AMBIGUOUS")), file=sys.stderr)
    return 1 if slower and args.fail_on_slower else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelkit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("check-config", help="validate a config file and exit")
    p.add_argument("config", nargs="?", default="config/config.yaml")
    p.set_defaults(func=cmd_check_config)

    p = sub.add_parser("write-config", help="validate a config given as JSON and store it with the run")
    p.add_argument("--json", required=True)
    p.add_argument("--output", required=True)
    p.set_defaults(func=cmd_write_config)

    p = sub.add_parser("environment", help="record driver, device, clocks and host")
    p.add_argument("--config", help="the run's config.json, hashed into the record")
    p.add_argument("--output", required=True)
    p.set_defaults(func=cmd_environment)

    p = sub.add_parser("correctness", help="run the correctness suite; exits non-zero when a case fails")
    p.add_argument("--kernel", required=True)
    p.add_argument("--layout", action="append",
                   help="repeatable; default: every layout of the kernel (with --negative-control, every hand-written one)")
    p.add_argument("--negative-control", help="run a mutated build instead; it must fail, so this exits non-zero")
    p.add_argument("--output")
    p.set_defaults(func=cmd_correctness)

    p = sub.add_parser("control", help="run a negative control; exits non-zero when the checks do NOT catch it")
    p.add_argument("--kernel", required=True)
    p.add_argument("--control", required=True)
    p.add_argument("--layout", action="append", required=True)
    p.add_argument("--output", required=True)
    p.set_defaults(func=cmd_control)

    p = sub.add_parser("time", help="kernel time of one kernel/shape/layout (CUDA-graph replay, else back-to-back events)")
    for name in ("--kernel", "--shape", "--layout", "--correctness", "--output"):
        p.add_argument(name, required=True)
    p.add_argument("--controls", nargs="*", default=[])
    for name, default in (("--repeat", 1), ("--order-seed", 0), ("--order-key", 0),
                          ("--warmup", 20), ("--launches", 64), ("--samples", 15)):
        p.add_argument(name, type=int, default=default)
    p.add_argument("--max-sample-ms", type=float, default=20.0, help="fewer calls per sample when one call is long")
    p.add_argument("--stop-relative-spread", type=float,
                   help="keep sampling until the median's relative half-width is at most this (default: fixed count)")
    p.add_argument("--stop-max-seconds", type=float, default=10.0)
    p.add_argument("--stop-max-samples", type=int, default=200)
    p.add_argument("--cache", choices=("warm", "cold"), default="warm",
                   help="cold: evict L2 before every sample, which is then a single call")
    p.add_argument("--placements", type=int, default=1,
                   help="time the samples again on this many fresh copies of the buffers, each placed elsewhere")
    _add_sampler_arguments(p)
    p.set_defaults(func=cmd_time)

    p = sub.add_parser("span", help="time single warmed calls of every layout of one shape, in rotating rounds")
    for name in ("--kernel", "--shape", "--output"):
        p.add_argument(name, required=True)
    p.add_argument("--layout", action="append", required=True)
    p.add_argument("--correctness", action="append", required=True, help="one per --layout, same order")
    p.add_argument("--controls", nargs="*", default=[])
    for name, default in (("--repeat", 1), ("--warmup", 10), ("--rounds", 3), ("--samples", 100)):
        p.add_argument(name, type=int, default=default)
    _add_sampler_arguments(p)
    p.set_defaults(func=cmd_span)

    p = sub.add_parser("ceiling", help="measure the copy or GEMM ceiling, or the harness floor (an empty kernel)")
    p.add_argument("--kind", required=True, help="copy, gemm or floor")
    p.add_argument("--output", required=True)
    for name, default in (("--warmup", 20), ("--launches", 64), ("--samples", 15), ("--copy-bytes", 2**31),
                          ("--gemm-n", 4096)):
        p.add_argument(name, type=int, default=default)
    p.add_argument("--max-sample-ms", type=float, default=20.0)
    p.set_defaults(func=cmd_ceiling)

    p = sub.add_parser("sanitize", help="compute-sanitizer memcheck and racecheck over a layout's correctness cases")
    for name in ("--kernel", "--layout", "--output"):
        p.add_argument(name, required=True)
    p.set_defaults(func=cmd_sanitize)

    p = sub.add_parser("profile", help="Nsight Compute counters of one warmed call (clocks not controlled)")
    for name in ("--kernel", "--shape", "--layout", "--output"):
        p.add_argument(name, required=True)
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("profile-call", help="(run under ncu) one warmed call between cudaProfilerStart and Stop")
    for name in ("--kernel", "--shape", "--layout"):
        p.add_argument(name, required=True)
    p.set_defaults(func=cmd_profile_call)

    p = sub.add_parser("summary", help="one tidy row per timed target")
    p.add_argument("--output", required=True)
    p.add_argument("timing", nargs="+")
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("figure", help="the timing figure (SVG) of one kernel")
    p.add_argument("--kernel", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("timing", nargs="+")
    p.set_defaults(func=cmd_figure)

    p = sub.add_parser("clock-figure", help="the SVG of every NVML reading taken during the timed samples")
    p.add_argument("--output", required=True)
    p.add_argument("timing", nargs="+")
    p.set_defaults(func=cmd_clock_figure)

    p = sub.add_parser("report", help="the report of one run directory, as Markdown and optionally HTML")
    p.add_argument("run_dir")
    p.add_argument("--markdown", required=True)
    p.add_argument("--html")
    p.add_argument("--figures", help="folder holding <kernel>.svg figures to include")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("diff", help="compare two run directories; exit 2 on unusable input")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--threshold", type=float, default=DIFF_THRESHOLD,
                   help=f"SAME when B/A lies within 1 +- this (default {DIFF_THRESHOLD})")
    p.add_argument("--confidence", type=float, default=DIFF_CONFIDENCE,
                   help=f"family-wise confidence of the intervals (default {DIFF_CONFIDENCE})")
    p.add_argument("--fail-on-slower", action="store_true", help="exit 1 when any configuration is SLOWER")
    p.add_argument("--markdown", help="write the Markdown here instead of standard output")
    p.add_argument("--html", help="also write a self-contained HTML page")
    p.set_defaults(func=cmd_diff)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KitError as error:
        print(f"kernelkit {args.command}: {error}", file=sys.stderr)
        return 2
