"""The timing stage: kernel time of one kernel / shape / layout / repeat in its own process.

Kernel time: CUDA-event time around one replay of a CUDA graph holding `launches` calls,
divided by that count (seed 003's method). A call that cannot be captured (CuPy refuses to
capture cuBLAS) is timed instead as `launches` back-to-back calls between two events, and
the record says which method ran and why. `launches` is `launches_per_graph`, lowered for
long calls so that one sample lasts at most `max_sample_ms`. (The span view is span.py.)

Compilation, allocation, host-device copies, warm-up calls and graph construction all
happen before the first event is recorded. Nothing is timed whose correctness and negative
controls did not pass on the same source (checks.require_checked).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from kernelkit import spec as specs
from kernelkit import config as kit_config
from kernelkit.gpulock import LOCK_KEYS, LockSettings
from kernelkit.shape_bounds import check_fits
from kernelkit.gpulock import add_arguments as add_lock_argument
from kernelkit.sampler import SAMPLER_KEYS, SamplerSettings

Call = Callable[[], Any]


@dataclass(frozen=True)
class GraphReplayMethod:
    """How samples are taken; every field but the fixed `untimed_replays` comes from the config."""

    warmup_launches: int
    launches_per_graph: int
    samples: int
    max_sample_ms: float
    # Optional stopping rule: after `samples`, keep sampling until the median's relative
    # half-width falls below this, or a limit is reached. None: exactly `samples`.
    stop_relative_spread: float | None
    stop_max_seconds: float
    stop_max_samples: int
    # Microseconds the GPU spins before each sample's start event (see HostLead); 0: none.
    host_lead_us: float = 0.0
    # One untimed replay after upload, so the first sample does not carry the graph's first-launch cost.
    untimed_replays: int = 1

    @classmethod
    def from_timing(cls, timing: Mapping[str, Any]) -> "GraphReplayMethod":
        """From the config's (validated) `timing` section or a slice of it."""
        stop = timing.get("stop")
        limits = stop or {key: kit_config.schema_default("timing", "stop", key) for key in ("max_seconds", "max_samples")}
        return cls(timing["warmup_launches"], timing["launches_per_graph"], timing["samples"],
                   float(timing["max_sample_ms"]), float(stop["relative_spread"]) if stop else None,
                   float(limits["max_seconds"]), int(limits["max_samples"]),
                   float(timing.get("host_lead_us", kit_config.schema_default("timing", "host_lead_us"))))

    def describe(self) -> dict[str, Any]:
        return {"name": "cuda_graph_replay", **asdict(self)}


# The keys of the config each timed target depends on; `repeats`, `order_seed` and `cache` shape
# the plan (which targets exist, in which order), not how one target is timed.
TIMING_KEYS = ("warmup_launches", "launches_per_graph", "samples", "max_sample_ms", "stop", "placements", "host_lead_us")
# Placement i > 0 allocates i MiB more before its buffers, and every placement's buffers stay
# allocated until the end: the schema's maximum of timing.placements bounds that memory.
PLACEMENT_SHIFT_BYTES = 1 << 20


@dataclass(frozen=True)
class TimingSettings(kit_config.StageSettings):
    """Everything the config says about how one timed target is sampled."""

    SECTIONS: ClassVar[Mapping[str, Sequence[str]]] = {"timing": TIMING_KEYS, "sampler": SAMPLER_KEYS,
                                                       "gpu_lock": LOCK_KEYS}
    method: GraphReplayMethod
    placements: int
    sampler: SamplerSettings
    lock: LockSettings

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "TimingSettings":
        return cls(GraphReplayMethod.from_timing(config["timing"]), config["timing"]["placements"],
                   SamplerSettings.from_config(config["sampler"]), LockSettings.from_config(config["gpu_lock"]))


def stop_reason(samples: list[float], method: GraphReplayMethod, elapsed_s: float) -> str | None:
    """Why sampling ends now ('fixed_count', 'spread', 'time_limit', 'sample_limit'), or None to go on."""
    from kernelkit.stats import median_relative_halfwidth

    if len(samples) < method.samples:
        return None
    if method.stop_relative_spread is None:
        return "fixed_count"
    if median_relative_halfwidth(samples) <= method.stop_relative_spread:
        return "spread"
    if elapsed_s >= method.stop_max_seconds:
        return "time_limit"
    if len(samples) >= method.stop_max_samples:
        return "sample_limit"
    return None


def launches_per_sample(per_call_us: float, method: GraphReplayMethod) -> int:
    """As many calls per sample as the method allows, but no sample longer than max_sample_ms."""
    if per_call_us <= 0:
        return method.launches_per_graph
    return max(1, min(method.launches_per_graph, math.floor(method.max_sample_ms * 1000.0 / per_call_us)))


HOLD_SOURCE = r"""
extern "C" __global__ void kernelkit_hold(unsigned long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < nanoseconds);
}
"""
# A sample counts only when its start event, calls and end event were all enqueued within this
# fraction of the lead: the rest of the lead covers the GPU's own launch latency.
HOST_LEAD_MARGIN = 0.9
# Samples retaken for a late host, at most this many times the samples asked for; beyond, the
# late samples are kept and counted in `method_used`.
HOST_LATE_RETAKES = 3


class HostLead:
    """One thread spinning on the GPU clock for `lead_us` before each sample's start event.

    Without it the start event is recorded on an idle GPU and the calls reach it only when the
    host has enqueued them: the graph launch's host latency, and on a busy host any time the
    process is descheduled, fall inside the timed interval (up to 75% of a 20 ms sample on a
    host running 16 jobs). With it the host enqueues start, calls and end while the GPU still
    spins; a sample whose enqueueing took longer than the lead may hold idle time and is retaken.
    Build it holding the GPU lock: loading its module puts code on the GPU.
    """

    def __init__(self, lead_us: float) -> None:
        from kernelkit import device

        self.lead_us = float(lead_us)
        self.kernel = None
        if self.lead_us > 0:
            cp = device.cupy()
            self.kernel = cp.RawKernel(HOLD_SOURCE, "kernelkit_hold")
            self.kernel.attributes  # noqa: B018 - compiles and loads the module now
        self.nanoseconds = np.uint64(round(self.lead_us * 1000.0))

    def launch(self) -> None:
        if self.kernel is not None:
            self.kernel((1,), (1,), (self.nanoseconds,))

    def in_time(self, enqueue_s: float) -> bool:
        return self.kernel is None or enqueue_s * 1e6 < HOST_LEAD_MARGIN * self.lead_us


def elapsed_us(start: Any, end: Any) -> float:
    import cupy as cp

    return cp.cuda.get_elapsed_time(start, end) * 1000.0


Window = tuple[float, float]


def kernel_time_samples(
    call: Call,
    method: GraphReplayMethod,
    before_samples: Callable[[Call], dict[str, Any]] | None = None,
    flush: Call | None = None,
    lead: HostLead | None = None,
) -> tuple[list[float], dict[str, Any], list[Window]]:
    """Per-call microseconds, one value per timed sample; what was actually done; and each
    sample's host-side window (unix seconds), which the clock sampler's tags are matched to.

    `before_samples(keep_busy)` runs after the graph is built, right before the first sample
    (the optional wait for the SM clock); what it returns is recorded as `clock_wait`.

    With `flush` (cold cache), each sample is one call, and `flush` is enqueued on the same
    stream before the start event: the caches are evicted outside the timed interval.
    """
    import cupy as cp

    from kernelkit.library import on_stream

    lead = lead if lead is not None else HostLead(method.host_lead_us)
    stream = cp.cuda.Stream(non_blocking=True)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    with on_stream(stream):
        for _ in range(method.warmup_launches):
            call()
        start.record(stream)
        for _ in range(3):
            call()
        end.record(stream)
        end.synchronize()
        launches = 1 if flush is not None else launches_per_sample(elapsed_us(start, end) / 3, method)

        used: dict[str, Any] = {"launches_per_sample": launches, "cache": "warm" if flush is None else "cold"}
        try:
            graph = _capture(call, launches, stream)
        except Exception as error:  # cuBLAS under CuPy, or any call the driver will not capture
            stream.synchronize()
            used.update(name="back_to_back_events", capture_error=f"{type(error).__name__}: {error}"[:300])
            graph = None
        else:
            used["name"] = "cuda_graph_replay"
            graph.upload(stream)
            for _ in range(method.untimed_replays):
                graph.launch(stream)
            stream.synchronize()

        def run_sample() -> None:
            if graph is not None:
                graph.launch(stream)
            else:
                for _ in range(launches):
                    call()

        if before_samples is not None:
            used["clock_wait"] = before_samples(lambda: (run_sample(), stream.synchronize()))

        samples_us, windows = [], []
        retaken = kept_late = 0
        began = time.monotonic()
        while (stopped_by := stop_reason(samples_us, method, time.monotonic() - began)) is None:
            if flush is not None:
                flush()
            opened = time.time()
            enqueue_began = time.perf_counter()
            lead.launch()
            start.record(stream)
            run_sample()
            end.record(stream)
            enqueue_s = time.perf_counter() - enqueue_began
            end.synchronize()
            if not lead.in_time(enqueue_s):
                if retaken < HOST_LATE_RETAKES * method.samples:
                    retaken += 1
                    continue
                kept_late += 1
            windows.append((opened, time.time()))
            samples_us.append(elapsed_us(start, end) / launches)
        used["stopped_by"] = stopped_by
        if lead.kernel is not None:
            used["host_late"] = {"retaken": retaken, "kept": kept_late}
        if method.stop_relative_spread is not None:
            from kernelkit.stats import median_relative_halfwidth

            used["relative_halfwidth"] = median_relative_halfwidth(samples_us)
    return samples_us, used, windows


class L2Flush:
    """Evicts the L2 cache between cold samples: writes a buffer of twice the L2 size read from
    the device, and resets persisting L2 lines through the driver (the kit sets none; this makes
    sure no earlier process left any). Enqueued on the current stream; nothing waits on the host."""

    def __init__(self) -> None:
        import ctypes

        import cupy as cp

        device = cp.cuda.Device()
        self.l2_bytes = int(cp.cuda.runtime.getDeviceProperties(device.id)["l2CacheSize"])
        self.buffer = cp.empty(max(2 * self.l2_bytes, 1 << 20) // 4, dtype=cp.float32)
        self.flushes = 0
        try:
            driver = ctypes.CDLL("libcuda.so.1")
            result = driver.cuCtxResetPersistingL2Cache()
            self.persisting_reset = "done" if result == 0 else f"unavailable: cuCtxResetPersistingL2Cache returned {result}"
        except (OSError, AttributeError) as error:
            self.persisting_reset = f"unavailable: {error}"

    def __call__(self) -> None:
        self.flushes += 1
        self.buffer.fill(float(self.flushes % 2))

    def describe(self) -> dict[str, Any]:
        return {"l2_bytes": self.l2_bytes, "flush_bytes": int(self.buffer.nbytes), "persisting_l2_reset": self.persisting_reset}


def _capture(call: Call, launches: int, stream: Any) -> Any:
    stream.begin_capture()
    try:
        for _ in range(launches):
            call()
    finally:
        graph = stream.end_capture()
    return graph


def graph_replay_samples(call: Call, method: GraphReplayMethod) -> list[float]:
    """Kernel time of a call that must be capturable (raw kernels); fails loudly otherwise."""
    samples, used, _ = kernel_time_samples(call, method)
    if used["name"] != "cuda_graph_replay":
        raise RuntimeError(f"the call could not be captured in a CUDA graph: {used['capture_error']}")
    return samples


def measured_around(spec: specs.KernelSpec, shape: tuple[int, ...], before: dict[str, Any],
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


def timing_inputs(spec: specs.KernelSpec, shape_text: str) -> dict[str, Any]:
    """The timing pattern's host inputs for one shape: the same arrays for every layout and process."""
    from kernelkit.inputs import rng_for

    shape = spec.parse_shape(shape_text)
    return spec.make_inputs(shape, spec.timing_pattern, rng_for(spec.name, shape_text, spec.timing_pattern))


def cmd_time(args: argparse.Namespace) -> int:
    from kernelkit import checks, device, environment, foreign, gpulock, sampler, verify
    from kernelkit.records import write_record
    from kernelkit.stats import summarize

    clock = gpulock.JobClock()
    settings = TimingSettings.from_json(args.settings)
    method = settings.method
    spec = specs.load(args.kernel)
    layout = spec.layout(args.layout)
    shape = spec.parse_shape(args.shape)
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
        "method": {**method.describe(), **({"placements": settings.placements} if settings.placements > 1 else {})},
    }
    skipped = checks.require_checked(spec, args.layout, args.correctness, args.controls,
                                     args.sanitizer[0] if args.sanitizer else None)
    if skipped:
        write_record(args.output, {**identity, "skipped": skipped, "job": clock.describe()})
        print(f"{spec.name} {args.shape} {args.layout} rep{args.repeat}: skipped ({skipped})")
        return 0

    # Before the lock, the CPU's share: imports, NVML's handle, host inputs. Nothing here creates
    # the CUDA context (device queries do not), which is GPU work (see kernelkit.gpulock).
    with clock.phase("start_cuda_nvml"):
        cp = device.cupy()
        bus_id = cp.cuda.Device().pci_bus_id
        nvml = environment.Nvml(bus_id)
        sm_clock_max = nvml.read(lambda n, h: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))
        # A shape that cannot fit stops here with one sentence, before any input is made.
        memory = nvml.read(lambda n, h: n.nvmlDeviceGetMemoryInfo(h).total)
        if isinstance(memory, int):
            check_fits(spec, shape, memory, copies=settings.placements)
    with clock.phase("import_library"):
        if spec.is_baseline(args.layout):
            device.compile_layout(spec, args.layout)  # imports the baseline's package; nothing to compile
    with clock.phase("host_inputs"):
        host_inputs = timing_inputs(spec, args.shape)
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
        implementation = device.implementation(spec, args.layout, shape, buffers, out, kernel=kernel)
        cp.cuda.Device().synchronize()
        return implementation, buffers, {"index": index, "pad_bytes": sum(p.nbytes for p in pads),
                                         "addresses": device.addresses({**buffers, "out": out})}

    def wait(keep_busy: Any) -> dict[str, Any]:
        read_clock = lambda: nvml.read(lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))  # noqa: E731
        return sampler.wait_for_clock(read_clock, sm_clock_max, settings.sampler, keep_busy)

    samples: list[float] = []
    windows: list[tuple[float, float]] = []
    sample_placement: list[int] = []
    placements = []
    with gpulock.exclusive_gpu(nvml, bus_id, settings.lock.with_dir(args.lock_dir), clock, until_exit=True) as gpu:
        with clock.phase("load_modules"):
            # The context is created here, and modules are loaded (the layout's correctness job
            # left its binary in CuPy's disk cache, so NVRTC does not run again).
            kernel = device.compile_layout(spec, args.layout)
            comparer = verify.DeviceComparer()
            lead = HostLead(method.host_lead_us)
        with clock.phase("upload"):
            implementation, buffers, placement = placed(0)
        with clock.phase("verify_reference"):
            reference = verify.reference_for(spec, shape, host_inputs, buffers)
            cp.cuda.Device().synchronize()
        with clock.phase("verify_call_and_compare"):
            verified = verify.verify_timed_output(spec, args.layout, args.shape, host_inputs, implementation,
                                                  reference, comparer)
            del reference, buffers
            cp.get_default_memory_pool().free_all_blocks()  # later allocations land as they would without this check
        flush = L2Flush() if args.cache == "cold" else None
        before = nvml.snapshot()
        with sampler.ClockSampler(nvml, settings.sampler, gpu.watcher) as clocks:
            for index in range(settings.placements):
                if index:
                    held.append(implementation)
                    implementation, _, placement = placed(index)
                with clock.phase("warmup_and_samples"):
                    got, placement["method_used"], got_windows = kernel_time_samples(implementation.call, method, wait, flush, lead)
                placement["samples"] = len(got)
                placements.append(placement)
                samples += got
                windows += got_windows
                sample_placement += [index] * len(got)
        after = nvml.snapshot()
    used = dict(placements[0]["method_used"])
    if flush is not None:
        used["flush"] = flush.describe()
    tags = sampler.tag_samples(windows, clocks.trace, settings.sampler, sm_clock_max)

    write_record(
        args.output,
        {
            **identity,
            **device.card(),
            "method_used": used,
            "unit": "microseconds per launch",
            "samples_us": samples,
            "placements": placements,
            "sample_placement": sample_placement,
            "sampler": settings.sampler.describe(),
            "sample_tags": tags,
            "disturbed_samples": sampler.disturbed(tags),
            "clock_trace": clocks.trace,
            "verified": verified,
            **implementation.record,
            **measured_around(spec, shape, before, after),
            "foreign_work": foreign.foreign_work(clocks.trace, tags, gpu.busy_before_pct),
            "idle_wait": gpu.idle_wait,
            "job": clock.describe(),
        },
    )
    print(f"{spec.name} {args.shape} {args.layout} rep{args.repeat} ({args.cache} cache): median "
          f"{summarize(samples).median:.3f} us over {len(samples)} samples ({used['name']}, "
          f"{used['launches_per_sample']} calls per sample); {len(clocks.trace)} clock readings, "
          f"{len(sampler.disturbed(tags))} samples disturbed")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "time", help="kernel time of one kernel/shape/layout (CUDA-graph replay, else back-to-back events)")
    p.add_argument("--kernel", required=True, help="a kernel folder under kernels/")
    p.add_argument("--shape", required=True, help="one shape of the kernel, e.g. 512x128")
    p.add_argument("--layout", required=True, help="one layout of the kernel")
    p.add_argument("--correctness", required=True, help="the layout's correctness record from this run")
    p.add_argument("--controls", nargs="*", default=[], help="the kernel's negative-control records from this run")
    p.add_argument("--sanitizer", nargs="*", default=[],
                   help="the layout's sanitizer record from this run (none: races were not checked)")
    p.add_argument("--output", required=True, help="where to write the timing record (JSON)")
    kit_config.add_settings_argument(p, TimingSettings.SECTIONS)
    add_lock_argument(p)
    p.add_argument("--repeat", type=int, required=True, help="which repeat of the run this process is (from 1)")
    p.add_argument("--order-seed", type=int, required=True, help="timing.order_seed, recorded with the order key")
    p.add_argument("--order-key", type=int, required=True,
                   help="this target's key in the seeded order of its repeat (kernelkit.config.order_key)")
    p.add_argument("--cache", choices=("warm", "cold"), required=True,
                   help="cold: evict L2 before every sample, which is then a single call")
    p.set_defaults(func=cmd_time)
