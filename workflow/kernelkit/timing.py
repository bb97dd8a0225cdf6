"""The two timing views of the seeds: kernel time and span.

Kernel time: CUDA-event time around one replay of a CUDA graph holding `launches` calls,
divided by that count (seed 003's method). A call that cannot be captured (CuPy refuses to
capture cuBLAS) is timed instead as `launches` back-to-back calls between two events, and
the record says which method ran and why. `launches` is `launches_per_graph`, lowered for
long calls so that one sample lasts at most `max_sample_ms`.

Span: CUDA events around one warmed call, synchronised after each sample, so a span also
holds the launch latency and any gap while the host submits the call's work (seed 000).
Implementations take turns in rounds with a rotating order, so slow drift is spread.

Compilation, allocation, host-device copies, warm-up calls and graph construction all
happen before the first event is recorded.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping

Call = Callable[[], Any]


@dataclass(frozen=True)
class GraphReplayMethod:
    warmup_launches: int = 20
    launches_per_graph: int = 64
    samples: int = 15
    # One untimed replay after upload, so the first sample does not carry the graph's first-launch cost.
    untimed_replays: int = 1
    max_sample_ms: float = 20.0
    # Optional stopping rule: after `samples`, keep sampling until the median's relative
    # half-width falls below this, or a limit is reached. None: exactly `samples`.
    stop_relative_spread: float | None = None
    stop_max_seconds: float = 10.0
    stop_max_samples: int = 200

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


@dataclass(frozen=True)
class SpanMethod:
    warmup_calls: int = 10
    rounds: int = 3
    samples_per_round: int = 100

    def describe(self) -> dict[str, Any]:
        return {"name": "event_span_rotating_rounds", **asdict(self)}


def launches_per_sample(per_call_us: float, method: GraphReplayMethod) -> int:
    """As many calls per sample as the method allows, but no sample longer than max_sample_ms."""
    if per_call_us <= 0:
        return method.launches_per_graph
    return max(1, min(method.launches_per_graph, math.floor(method.max_sample_ms * 1000.0 / per_call_us)))


def _elapsed_us(start: Any, end: Any) -> float:
    import cupy as cp

    return cp.cuda.get_elapsed_time(start, end) * 1000.0


Window = tuple[float, float]


def kernel_time_samples(
    call: Call,
    method: GraphReplayMethod,
    before_samples: Callable[[Call], dict[str, Any]] | None = None,
    flush: Call | None = None,
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
        launches = 1 if flush is not None else launches_per_sample(_elapsed_us(start, end) / 3, method)

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
        began = time.monotonic()
        while (stopped_by := stop_reason(samples_us, method, time.monotonic() - began)) is None:
            if flush is not None:
                flush()
            opened = time.time()
            start.record(stream)
            run_sample()
            end.record(stream)
            end.synchronize()
            windows.append((opened, time.time()))
            samples_us.append(_elapsed_us(start, end) / launches)
        used["stopped_by"] = stopped_by
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


def rotation(names: list[str], round_index: int) -> list[str]:
    """Round r starts at the r-th implementation, so each one is first (and last) in turn."""
    shift = round_index % len(names) if names else 0
    return names[shift:] + names[:shift]


def span_samples(calls: Mapping[str, Call], method: SpanMethod) -> dict[str, list[dict[str, float]]]:
    """Per implementation: {round, us, t0, t1} for every warmed single-call span (t0, t1: its host window)."""
    import cupy as cp

    from kernelkit.library import on_stream

    stream = cp.cuda.Stream(non_blocking=True)
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
                    samples[name].append({"round": round_index, "us": _elapsed_us(start, end), "t0": opened,
                                          "t1": time.time()})
    return samples
