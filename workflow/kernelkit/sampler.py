"""What the clocks did while a target was timed: a background NVML sampler and per-sample tags.

Snapshots before and after a target cannot see a clock drop in between; the sampler reads clocks,
power, temperature, clock-event reasons and (with a kernelkit.foreign watcher) other processes'
work every `interval_ms` on its own thread, and each timing sample is tagged from the points
within one interval of its host-side window. The tagging is plain Python, tested on the CPU.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping

# Reasons that lower the clock under load. gpu_idle, applications_clocks_setting and
# display_clock_setting describe a setting or an idle GPU, not a throttle of the timed work.
THROTTLE_REASONS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)


@dataclass(frozen=True)
class SamplerSettings:
    """The config's `sampler` section; every timing and span record stores it under "sampler"."""

    enabled: bool
    interval_ms: float
    min_sm_clock_fraction: float
    wait_for_clock: bool
    wait_timeout_s: float

    @classmethod
    def from_config(cls, sampler: Mapping[str, Any]) -> "SamplerSettings":
        """From the validated `sampler` section; numbers as floats, as records have always held them."""
        return cls(bool(sampler["enabled"]), float(sampler["interval_ms"]), float(sampler["min_sm_clock_fraction"]),
                   bool(sampler["wait_for_clock"]), float(sampler["wait_timeout_s"]))

    def describe(self) -> dict[str, Any]:
        return asdict(self)


SAMPLER_KEYS = tuple(SamplerSettings.__dataclass_fields__)


class ClockSampler:
    """Context manager: reads NVML every interval on a daemon thread; `trace` holds the points."""

    def __init__(self, nvml: Any, settings: SamplerSettings, watcher: Any = None) -> None:
        self.nvml = nvml
        self.settings = settings
        self.watcher = watcher  # a kernelkit.foreign.ProcessWatcher, or None: clocks only
        self.trace: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kernelkit-nvml-sampler", daemon=True)

    def point(self) -> dict[str, Any]:
        snap = self.nvml.snapshot()
        point = {
            "t": time.time(),
            "sm_clock_mhz": snap["sm_clock_mhz"],
            "memory_clock_mhz": snap["memory_clock_mhz"],
            "power_w": snap["power_draw_w"],
            "temperature_c": snap["temperature_c"],
            "reasons": snap["clock_event_reasons"],
        }
        if self.watcher is not None:
            point.update(self.watcher.read())
        return point

    def _run(self) -> None:
        interval = self.settings.interval_ms / 1000.0
        while True:
            self.trace.append(self.point())
            if self._stop.wait(interval):
                break

    def __enter__(self) -> "ClockSampler":
        if self.settings.enabled and not getattr(self.nvml, "error", None):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self.trace.append(self.point())


def tag_samples(
    windows: list[tuple[float, float]],
    trace: list[dict[str, Any]],
    settings: SamplerSettings,
    sm_clock_max_mhz: Any,
    busy_right_after: list[int] = (),
) -> list[dict[str, Any]]:
    """Per sample: the trace points within one interval of its window, and whether any of them
    showed a throttle reason, an SM clock below `min_sm_clock_fraction` of the maximum, or
    foreign work; None (unknown, not clean) where no point covers it or no reading could judge.

    `busy_right_after`: outsiders found computing right after the stretch (quiet_gpu.look_after);
    NVML cannot say when they began, so every sample is tagged foreign (`foreign_right_after`).
    """
    margin = settings.interval_ms / 1000.0
    floor = settings.min_sm_clock_fraction * sm_clock_max_mhz if isinstance(sm_clock_max_mhz, (int, float)) else None
    tags = []
    for start, end in windows:
        near = [p for p in trace if start - margin <= p["t"] <= end + margin]
        if not near:
            tags.append({"points": 0, "throttled": None, "low_clock": None,
                         **_after_tag({"foreign": None}, busy_right_after)})
            continue
        throttled = sorted({r for p in near if isinstance(p["reasons"], list) for r in p["reasons"] if r in THROTTLE_REASONS})
        clocks = [p["sm_clock_mhz"] for p in near if isinstance(p["sm_clock_mhz"], (int, float))]
        tags.append({
            "points": len(near),
            "throttled": bool(throttled),
            "reasons": throttled,
            "low_clock": (min(clocks) < floor) if clocks and floor is not None else None,
            "min_sm_clock_mhz": min(clocks) if clocks else None,
            **_after_tag(_foreign_tag(near), busy_right_after),
        })
    return tags


def _after_tag(tag: dict[str, Any], busy_right_after: list[int]) -> dict[str, Any]:
    """A tag with the outsiders found computing right after the stretch that its readings did not
    already see during it (`foreign_right_after`); `foreign_pids` stays what the readings saw."""
    during = tag.get("foreign_pids", [])
    after_only = sorted(set(busy_right_after) - set(during))
    if not after_only:
        return tag
    return {**tag, "foreign": True, "foreign_pids": during, "foreign_right_after": after_only}


def _foreign_tag(near: list[dict[str, Any]]) -> dict[str, Any]:
    judged = [p["foreign_pids"] for p in near if isinstance(p.get("foreign_pids"), list)]
    if not judged:
        return {"foreign": None}
    pids = sorted({pid for found in judged for pid in found})
    return {"foreign": bool(pids), "foreign_pids": pids}


def is_disturbed(tag: dict[str, Any]) -> bool:
    """Whether a throttle reason, a low SM clock or foreign work touched the sample."""
    return bool(tag["throttled"] or tag["low_clock"] or tag.get("foreign"))


def disturbed(tags: list[dict[str, Any]]) -> list[int]:
    """Indices of the samples a throttle reason, a low SM clock or foreign work touched."""
    return [i for i, tag in enumerate(tags) if is_disturbed(tag)]


def causes(tags: list[dict[str, Any]]) -> list[str]:
    """What disturbed the tagged samples, in words a report can print: the throttle reasons,
    'low SM clock' and 'foreign work (pids ...)', each only where a tag shows it."""
    found = sorted({reason for tag in tags for reason in tag.get("reasons") or []})
    if any(tag["low_clock"] for tag in tags):
        found.append("low SM clock")
    pids = sorted({pid for tag in tags if tag.get("foreign") for pid in tag.get("foreign_pids", [])})
    after = sorted({pid for tag in tags if tag.get("foreign") for pid in tag.get("foreign_right_after", [])} - set(pids))
    if pids:
        found.append(f"foreign work (pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids))})")
    if after:
        found.append(f"foreign work right after the timing, perhaps begun during it "
                     f"(pid{'s' if len(after) > 1 else ''} {', '.join(map(str, after))})")
    return found


def wait_for_clock(
    read_sm_clock: Callable[[], Any], sm_clock_max_mhz: Any, settings: SamplerSettings, keep_busy: Callable[[], None]
) -> dict[str, Any]:
    """Before timing, keep the GPU busy until its SM clock reaches the configured fraction of the
    maximum, or the timeout passes. Reads clocks only; never changes a setting of the card."""
    if not settings.wait_for_clock or not isinstance(sm_clock_max_mhz, (int, float)):
        return {"enabled": settings.wait_for_clock, "waited_s": 0.0, "checks": 0, "ready": None}
    floor = settings.min_sm_clock_fraction * sm_clock_max_mhz
    begin, checks = time.monotonic(), 0
    while True:
        clock = read_sm_clock()
        checks += 1
        ready = isinstance(clock, (int, float)) and clock >= floor
        if ready or time.monotonic() - begin >= settings.wait_timeout_s:
            return {"enabled": True, "waited_s": round(time.monotonic() - begin, 6), "checks": checks, "ready": ready,
                    "last_sm_clock_mhz": clock}
        keep_busy()
