"""Kernel time by CUDA-graph replay, the seed's method.

One sample = CUDA-event time around one replay of a graph holding `launches_per_graph`
launches, divided by that count. Compilation, allocation, host-device copies, warm-up
launches and graph construction all happen before the first event is recorded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class GraphReplayMethod:
    warmup_launches: int = 20
    launches_per_graph: int = 64
    samples: int = 15
    # One untimed replay after upload, so the first sample does not carry the graph's first-launch cost.
    untimed_replays: int = 1

    def describe(self) -> dict[str, Any]:
        return {"name": "cuda_graph_replay", **asdict(self)}


def graph_replay_samples(launch_once: Callable[[], None], method: GraphReplayMethod) -> list[float]:
    """Per-launch microseconds, one value per timed graph replay."""
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        for _ in range(method.warmup_launches):
            launch_once()
        stream.synchronize()

        stream.begin_capture()
        try:
            for _ in range(method.launches_per_graph):
                launch_once()
        finally:
            graph = stream.end_capture()
        graph.upload(stream)
        for _ in range(method.untimed_replays):
            graph.launch(stream)
        stream.synchronize()

        start, end = cp.cuda.Event(), cp.cuda.Event()
        samples_us = []
        for _ in range(method.samples):
            start.record(stream)
            graph.launch(stream)
            end.record(stream)
            end.synchronize()
            samples_us.append(cp.cuda.get_elapsed_time(start, end) * 1000.0 / method.launches_per_graph)
    return samples_us
