"""The span stage: single warmed calls of every layout of one shape, in rotating rounds (seed 000).

CUDA events around one warmed call, synchronised after each sample, so a span also holds the
launch latency and any gap while the host submits the call's work. Implementations take turns
in rounds with a rotating order, so slow drift is spread over all of them.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Mapping, Sequence

from kernelkit import KitError, spec as specs
from kernelkit import config as kit_config
from kernelkit.gpulock import LOCK_KEYS, LockSettings
from kernelkit.gpulock import add_arguments as add_lock_argument
from kernelkit.sampler import SAMPLER_KEYS, SamplerSettings
from kernelkit.kernel_time import Call, elapsed_us, measured_around


@dataclass(frozen=True)
class SpanMethod:
    warmup_calls: int
    rounds: int
    samples_per_round: int

    def describe(self) -> dict[str, Any]:
        return {"name": "event_span_rotating_rounds", **asdict(self)}


@dataclass(frozen=True)
class SpanSettings(kit_config.StageSettings):
    """The config's `span` section (how spans are taken) and its `sampler` section."""

    SECTIONS: ClassVar[Mapping[str, Sequence[str]]] = {"span": ("warmup_calls", "rounds", "samples_per_round"),
                                                       "sampler": SAMPLER_KEYS, "gpu_lock": LOCK_KEYS}
    method: SpanMethod
    sampler: SamplerSettings
    lock: LockSettings

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "SpanSettings":
        span = config["span"]
        return cls(SpanMethod(span["warmup_calls"], span["rounds"], span["samples_per_round"]),
                   SamplerSettings.from_config(config["sampler"]), LockSettings.from_config(config["gpu_lock"]))

    @classmethod
    def json_from_config(cls, config: Mapping[str, Any]) -> str:
        """The span rule's one settings param; none without a `span` key (there are no span targets then)."""
        return super().json_from_config(config) if "span" in config else ""


def rotation(names: list[str], round_index: int) -> list[str]:
    """Round r starts at the r-th implementation, so each one is first (and last) in turn."""
    shift = round_index % len(names) if names else 0
    return names[shift:] + names[:shift]


def span_samples(calls: Mapping[str, Call], method: SpanMethod) -> dict[str, list[dict[str, float]]]:
    """Per implementation: {round, us, t0, t1} for every warmed single-call span (t0, t1: its host window)."""
    import cupy as cp

    from kernelkit import device
    from kernelkit.library import on_stream

    stream = device.measurement_stream()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    names = list(calls)
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with on_stream(stream):
        for name in names:
            for _ in range(method.warmup_calls):
                calls[name]()
        stream.synchronize()
        for round_index in range(method.rounds):
            for name in rotation(names, round_index):
                call = calls[name]
                call()  # untimed: the turn starts after another implementation has used the caches
                stream.synchronize()
                for _ in range(method.samples_per_round):
                    opened = time.time()
                    start.record(stream)
                    call()
                    end.record(stream)
                    end.synchronize()
                    samples[name].append({"round": round_index, "us": elapsed_us(start, end), "t0": opened,
                                          "t1": time.time()})
    return samples


def cmd_span(args: argparse.Namespace) -> int:
    from kernelkit import cases, device, foreign, gpujob, sampler, sanitizer, verify
    from kernelkit.nvml import Nvml
    from kernelkit.records import write_record
    from kernelkit.stats import summarize
    from kernelkit.inputs import timing_inputs

    clock = gpujob.JobClock()
    settings = SpanSettings.from_json(args.settings)
    spec = specs.load(args.kernel)
    spec.parse_shape(args.shape)
    for layout in args.layout:
        spec.layout(layout)
    if len(args.correctness) != len(args.layout):
        raise KitError("give one --correctness file per --layout, in the same order")
    reasons = {layout: cases.require_checked(spec, layout, correctness_file, args.controls,
                                             None if spec.is_baseline(layout) else sanitizer.record_for(args.sanitizer, layout))
               for layout, correctness_file in zip(args.layout, args.correctness)}
    skipped = {layout: reason for layout, reason in reasons.items() if reason}
    layouts = [layout for layout in args.layout if layout not in skipped]

    # Before the lock: imports, host inputs, NVML's handle; the context and modules holding it.
    cp = device.cupy()
    bus_id = cp.cuda.Device().pci_bus_id
    nvml = Nvml(bus_id)
    sm_clock_max = nvml.read(lambda n, h: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))
    for layout in layouts:
        if spec.is_baseline(layout):
            device.compile_layout(spec, layout)  # imports the package
    shape = spec.parse_shape(args.shape)
    host_inputs = timing_inputs(spec, args.shape)
    small = verify.small_reference(spec, shape, host_inputs)
    lock = settings.lock.with_dir(args.lock_dir)
    with gpujob.shared_gpu(nvml, bus_id, lock, clock):
        kernels = {layout: device.compile_layout(spec, layout) for layout in layouts}
        device.prepare_measurement()  # the span switches contexts like every kernel-time measurement
        buffers = device.upload(host_inputs)
        out = cp.empty(spec.output_shape(shape), dtype=cp.float32)
        implementations = {layout: device.implementation(spec, layout, shape, buffers, out, kernel=kernels[layout])
                           for layout in layouts}
        cp.cuda.Device().synchronize()
        # Each layout's output once at this shape, each judged right after its own call (they share `out`).
        comparer = verify.DeviceComparer()
        reference = verify.reference_for(spec, shape, host_inputs, buffers, small)
        verified = {layout: verify.verify_timed_output(spec, layout, args.shape, impl, reference, comparer)
                    for layout, impl in implementations.items()}
        del reference
        cp.get_default_memory_pool().free_all_blocks()
        cp.cuda.Device().synchronize()
        with gpujob.exclusive_gpu(nvml, bus_id, lock, clock) as gpu:
            calls = {layout: impl.call for layout, impl in implementations.items()}

            def measure() -> tuple[str, dict[str, Any]]:
                switched = device.switch_contexts()  # as before every kernel-time measurement (device.OtherContext)
                return switched, (span_samples(calls, settings.method) if layouts else {})

            while True:
                stretch = gpu.sample(nvml, settings.sampler, measure)
                switched, samples = stretch.result
                all_tags = []
                for layout_samples in samples.values():
                    windows = [(s["t0"], s["t1"]) for s in layout_samples]
                    tags = sampler.tag_samples(windows, stretch.trace, settings.sampler, sm_clock_max,
                                               foreign.busy_after(stretch.look))
                    all_tags += tags
                    for sample, tag in zip(layout_samples, tags):
                        sample["disturbed"] = sampler.is_disturbed(tag)
                if not gpu.again_after_foreign(all_tags, lambda: {
                        "samples": samples, "clock_trace": stretch.trace,
                        "foreign_work": foreign.foreign_work(stretch.trace, all_tags, gpu.busy_before_pct, stretch.look)}):
                    break
    write_record(
        args.output,
        {
            **device.card(),
            "kernel": spec.name,
            "shape": args.shape,
            "dims": dict(zip(spec.dims, shape)),
            "repeat": args.repeat,
            "method": {**settings.method.describe(), "context_switch": switched},
            "unit": "microseconds per call",
            "layouts": {
                layout: {"samples": samples[layout], "layout_parameters": dict(spec.layout(layout)),
                         "verified": verified[layout], **impl.record}
                for layout, impl in implementations.items()
            },
            "skipped": skipped,
            "sampler": settings.sampler.describe(),
            "clock_trace": stretch.trace,
            **measured_around(spec, shape, stretch.before, stretch.after),
            "foreign_work": foreign.foreign_work(stretch.trace, all_tags, gpu.busy_before_pct, stretch.look),
            "idle_wait": gpu.idle_wait,
            **({"retimed_after_foreign_work": gpu.retimed} if gpu.retimed else {}),
            "job": clock.describe(),
        },
    )
    for layout in layouts:
        print(f"{spec.name} {args.shape} {layout} span rep{args.repeat}: median "
              f"{summarize([s['us'] for s in samples[layout]]).median:.3f} us over {len(samples[layout])} calls")
    for layout, reason in skipped.items():
        print(f"{spec.name} {args.shape} {layout} span: skipped ({reason})")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("span", help="time single warmed calls of every layout of one shape, in rotating rounds")
    p.add_argument("--kernel", required=True, help="a kernel folder under kernels/")
    p.add_argument("--shape", required=True, help="one shape of the kernel, e.g. 512x128")
    p.add_argument("--layout", action="append", required=True, help="a layout to take spans of, repeatable")
    p.add_argument("--correctness", action="append", required=True,
                   help="the correctness record of each --layout, one per --layout in the same order")
    p.add_argument("--controls", nargs="*", default=[], help="the kernel's negative-control records from this run")
    p.add_argument("--sanitizer", nargs="*", default=[],
                   help="the kernel's sanitizer record, over its hand-written layouts, or (runs of earlier kits) one "
                        "record per layout named <layout>.json (none: races not checked)")
    p.add_argument("--repeat", type=int, required=True, help="which span repeat of the run this process is (from 1)")
    p.add_argument("--output", required=True, help="where to write the span record (JSON)")
    kit_config.add_settings_argument(p, SpanSettings.SECTIONS)
    add_lock_argument(p)
    p.set_defaults(func=cmd_span)
