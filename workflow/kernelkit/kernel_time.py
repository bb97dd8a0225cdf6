"""Kernel time, the method: CUDA-event time around one replay of a CUDA graph holding
`launches` calls, divided by that count, after a host lead (HostLead); a call that cannot be
captured (cuBLAS under CuPy) is timed as `launches` back-to-back calls between two events.
Allocation, warm-up and graph construction all happen before the first event. The timing stage,
the ceilings and the tests all time through here, so every number is taken the same way.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping

import numpy as np

from kernelkit.config_file import schema_default

Call = Callable[[], Any]

@dataclass(frozen=True)
class GraphReplayMethod:
    """How samples are taken; every field but the fixed `untimed_replays` comes from the config."""

    warmup_launches: int
    launches_per_graph: int
    samples: int
    max_sample_ms: float
    # After `samples`, sample on until the median's relative half-width falls below this or a
    # limit is reached; None: exactly `samples`.
    stop_relative_spread: float | None
    stop_max_seconds: float
    stop_max_samples: int
    host_lead_us: float = 0.0  # see HostLead; 0: none
    # One untimed replay after upload, so the first sample does not carry the graph's first-launch cost.
    untimed_replays: int = 1
    context_switch: bool = True  # before the warm-up (device.OtherContext says why)

    @classmethod
    def from_timing(cls, timing: Mapping[str, Any]) -> "GraphReplayMethod":
        """From the config's (validated) `timing` section or a slice of it."""
        stop = timing.get("stop")
        limits = stop or {key: schema_default("timing", "stop", key) for key in ("max_seconds", "max_samples")}
        return cls(timing["warmup_launches"], timing["launches_per_graph"], timing["samples"],
                   float(timing["max_sample_ms"]), float(stop["relative_spread"]) if stop else None,
                   float(limits["max_seconds"]), int(limits["max_samples"]),
                   float(timing.get("host_lead_us", schema_default("timing", "host_lead_us"))),
                   context_switch=bool(timing.get("context_switch", schema_default("timing", "context_switch"))))

    def describe(self) -> dict[str, Any]:
        return {"name": "cuda_graph_replay", **asdict(self)}


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
# A sample counts only when its start event, calls and end event were enqueued within this
# fraction of the lead (the rest covers the GPU's launch latency); late ones are retaken up to
# HOST_LATE_RETAKES times the samples asked for, then kept and counted in `method_used`.
HOST_LEAD_MARGIN = 0.9
HOST_LATE_RETAKES = 3


class HostLead:
    """One thread spinning on the GPU clock for `lead_us` before each sample's start event, so
    that the host enqueues start, calls and end while the GPU still spins: otherwise the launch's
    host latency, and any descheduling of a busy host, fall inside the timed interval. (About 5%
    of samples were enqueued late and retaken on an H200 at 16 jobs.) Build it holding the lock.
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


def kernel_time_samples(
    call: Call,
    method: GraphReplayMethod,
    before_samples: Callable[[Call], dict[str, Any]] | None = None,
    flush: Call | None = None,
    lead: HostLead | None = None,
) -> tuple[list[float], dict[str, Any], list[tuple[float, float]]]:
    """Per-call microseconds, one value per timed sample; what was actually done; and each
    sample's host-side window (unix seconds), which the clock sampler's tags are matched to.

    `before_samples(keep_busy)` runs right before the first sample (the wait for the SM clock);
    what it returns is recorded as `clock_wait`. With `flush` (cold cache), each sample is one
    call, and `flush` is enqueued before the start event, outside the timed interval.
    """
    import cupy as cp

    from kernelkit import device
    from kernelkit.library import on_stream

    lead = lead if lead is not None else HostLead(method.host_lead_us)
    stream = device.measurement_stream()
    switched = device.switch_contexts() if method.context_switch else None
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

        used: dict[str, Any] = {"launches_per_sample": launches, "cache": "warm" if flush is None else "cold",
                                **({"context_switch": switched} if switched is not None else {})}
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
    """Evicts the L2 cache between cold samples on the current stream: writes a buffer of twice
    the L2 size, after resetting any persisting L2 lines an earlier process left."""

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


def measured_around(spec: Any, shape: tuple[int, ...], before: dict[str, Any],
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
