"""What a GPU stage wraps its work in: the job's clock and the hold on its GPU (kernelkit.gpulock
is the mechanism), with, while it holds the GPU, a watcher of other processes and the optional
wait for them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from kernelkit import KitError
from kernelkit.gpulock import GpuWork, LockSettings, gpu_work


def gpu_key(nvml: Any, pci_bus_id: str | None = None) -> str:
    """The GPU's UUID from NVML; without NVML, its PCI bus id, which is as unique on one host."""
    uuid = nvml.read(lambda n, h: n.nvmlDeviceGetUUID(h)) if not getattr(nvml, "error", None) else None
    if isinstance(uuid, str) and uuid and not uuid.startswith("unavailable"):
        return uuid
    if pci_bus_id:
        return f"pci-{pci_bus_id.lower()}"
    raise KitError("the GPU has neither a readable UUID (NVML) nor a PCI bus id, so it cannot be locked")


def process_started_unix_s() -> float | None:
    """When this process started, from /proc (None elsewhere): a job's cost is mostly start-up and
    imports, which a clock started in Python would miss."""
    return _started_unix_s(os.getpid())


@functools.lru_cache(maxsize=None)
def _started_unix_s(pid: int) -> float | None:
    """Read once per process: /proc/uptime moves in 10 ms steps, and the start names the process."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime_s = float(handle.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return time.time() - (uptime_s - ticks / os.sysconf("SC_CLK_TCK"))


class JobClock:
    """A job's whole wall time (from process start), its wait for the GPU and where its seconds went."""

    def __init__(self) -> None:
        self.started_unix_s = process_started_unix_s() or time.time()
        self.stretches: list[GpuWork] = []
        self.phases_s: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Adds the body's wall time to `phases_s[name]`: where a job's seconds go."""
        began = time.monotonic()
        try:
            yield
        finally:
            self.phases_s[name] = round(self.phases_s.get(name, 0.0) + time.monotonic() - began, 6)

    def add(self, work: GpuWork) -> GpuWork:
        self.stretches.append(work)
        return work

    def describe(self) -> dict[str, Any]:
        ended = time.time()
        started = process_started_unix_s()
        return {
            "started_unix_s": self.started_unix_s,
            "ended_unix_s": ended,
            "wall_s": round(ended - self.started_unix_s, 6),
            "lock_waited_s": round(sum(w.waited_s for w in self.stretches), 6),
            "lock_held_s": round(sum(w.held_s for w in self.stretches if not w.nested), 6),
            "gpu_keys": sorted({w.key for w in self.stretches}),
            "gpu_work": [w.describe() for w in self.stretches],
            "phases_s": dict(self.phases_s),
            # Which process wrote the record: its pid and start, which no later process shares.
            "process": {"pid": os.getpid(), "started_unix_s": None if started is None else round(started, 3)},
        }


# With `gpu_lock.wait_for_idle`, how many times a sampled stretch that foreign work touched is
# taken again, each after waiting for the GPU to be idle.
FOREIGN_RETIMES = 2


@dataclass
class Exclusive:
    """What a stage gets while it holds the GPU: the lock's record, a process watcher, the device
    utilisation before this process launched anything, the optional wait for foreign work to end,
    and the stretches foreign work touched and that were taken again."""

    work: GpuWork
    watcher: Any
    busy_before_pct: Any
    idle_wait: dict[str, Any] | None
    settings: LockSettings | None = None
    retimed: list[dict[str, Any]] = field(default_factory=list)

    def sample(self, nvml: Any, sampler_settings: Any, measure: Callable[[], Any]) -> "Stretch":
        """`measure` run under the clock sampler between NVML snapshots, then the look after it."""
        from kernelkit import quiet_gpu, sampler

        before = nvml.snapshot()
        with sampler.ClockSampler(nvml, sampler_settings, self.watcher) as clocks:
            result = measure()
        ended = time.time()
        after = nvml.snapshot()
        return Stretch(result, clocks.trace, before, after, quiet_gpu.look_after(self.watcher, ended))

    def again_after_foreign(self, tags: list[dict[str, Any]], discarded: Callable[[], dict[str, Any]]) -> bool:
        """Whether to sample the stretch again (with waiting enabled, foreign work touched a sample,
        at most FOREIGN_RETIMES times); then `discarded()` is kept in `retimed` with the wait."""
        from kernelkit import quiet_gpu

        if self.idle_wait is None or self.settings is None or len(self.retimed) >= FOREIGN_RETIMES:
            return False
        if not any(tag.get("foreign") for tag in tags):
            return False
        wait = quiet_gpu.wait_for_idle(self.watcher, self.settings.idle_timeout_s, self.settings.idle_poll_s)
        self.watcher.begin(time.time())
        self.retimed.append({**discarded(), "then_waited": wait})
        return True


@dataclass
class Stretch:
    """One sampled stretch (Exclusive.sample)."""

    result: Any
    trace: list[dict[str, Any]]
    before: dict[str, Any]
    after: dict[str, Any]
    look: dict[str, Any]


@contextlib.contextmanager
def shared_gpu(nvml: Any, pci_bus_id: str | None, settings: LockSettings, clock: JobClock) -> Iterator[GpuWork]:
    """Hold the GPU for untimed work (context, modules, uploads, correctness launches): the same
    lock as a timing, so nothing of the kit's ever runs beside one."""
    with gpu_work(gpu_key(nvml, pci_bus_id), settings) as work:
        clock.add(work)
        yield work


@contextlib.contextmanager
def exclusive_gpu(nvml: Any, pci_bus_id: str | None, settings: LockSettings, clock: JobClock) -> Iterator[Exclusive]:
    """Hold the GPU, then look at who else computes on it: the watcher starts at the lock's
    acquisition and excuses the previous holder, so the kit's own trailing work is never foreign."""
    from kernelkit import foreign, quiet_gpu

    with gpu_work(gpu_key(nvml, pci_bus_id), settings) as work:
        clock.add(work)
        watcher = foreign.ProcessWatcher(nvml, kit_pids=foreign.previous_holder_pids(work.previous_holder),
                                         since_unix_s=work.acquired_unix_s or time.time(),
                                         members=(lambda: set()) if work.enabled else None)
        busy_before = foreign.device_util(nvml)
        idle_wait = (quiet_gpu.wait_for_idle(watcher, settings.idle_timeout_s, settings.idle_poll_s)
                     if settings.wait_for_idle else None)
        if idle_wait is not None:
            watcher.begin(time.time())  # work before this, waited out, is not in the samples
        yield Exclusive(work, watcher, busy_before, idle_wait, settings)
