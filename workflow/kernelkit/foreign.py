"""Foreign work on the GPU: another process computing while the kit times.

The per-GPU lock (kernelkit.gpulock) keeps kit processes from timing each other, but not a
training job, another user's benchmark or a kit with another lock directory. NVML lists every
context on the device and gives each process's SM utilisation in timestamped samples. Presence
is not work (kit processes waiting for the lock hold idle contexts), so a process is foreign
only when it did something and is not the kit.

While this process holds the lock no other kit process of its lock directory has a context, and
the previous holder (whose context may outlive its lock a moment) is named in the lock file and
excused. So a process is foreign when it has a context now and showed SM utilisation since the
kit's work began, or, with no sample since, was busy in its latest sample of the last WINDOW_S
(rule `by_pid_and_members`): the driver samples each process more seldom than most stretches
last. With the lock disabled, only samples whose whole period lies after the stretch began
count (`by_pid`). In a container with its own pid namespace no pid can be told apart, and the
judgement counts busy processes instead (`by_count`). Plain Python, tested on the CPU.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from kernelkit.nvml import UNAVAILABLE, unavailable

# How far before the lock's acquisition the first reading looks, to find where each process's
# first sample period after it begins; and how far back the members' rule looks for a foreign
# process's work (longer than the driver's per-process sampling period).
LOOKBACK_S = 2.0
WINDOW_S = 2.0


def ask(nvml: Any, call: Callable[[Any, Any], Any], samples: bool = False) -> Any:
    """NVML's answer to `call(pynvml, handle)`, or why there is none. For `samples`, NotFound (no
    sample is newer) and pynvml's error for code 0 (no sample to count) are an empty list."""
    if getattr(nvml, "error", None):
        return nvml.error
    try:
        return call(nvml.nvml, nvml.handle)
    except Exception as error:  # NotSupported, NoPermission, an old binding
        if samples and ("NotFound" in type(error).__name__ or getattr(error, "value", None) == 0):
            return []
        return unavailable(error)


def compute_pids(nvml: Any) -> list[int] | str:
    """Pids with a compute context on the device, or why they cannot be read."""
    return ask(nvml, lambda n, h: sorted(int(p.pid) for p in n.nvmlDeviceGetComputeRunningProcesses(h)))


def process_samples(nvml: Any, since_us: int) -> list[dict[str, Any]] | str:
    """Per-process utilisation samples newer than `since_us` (NVML's microsecond timestamps)."""
    raw = ask(nvml, lambda n, h: n.nvmlDeviceGetProcessUtilization(h, since_us), samples=True)
    return raw if isinstance(raw, str) else [
        {"pid": int(s.pid), "t_us": int(s.timeStamp), "sm_util": int(s.smUtil), "mem_util": int(s.memUtil)} for s in raw]


def device_util(nvml: Any) -> int | str:
    """The device's SM utilisation in percent over NVML's last sampling period."""
    return ask(nvml, lambda n, h: int(n.nvmlDeviceGetUtilizationRates(h).gpu))


def judge(samples: list[dict[str, Any]] | str, self_pid: int, self_visible: bool, self_busy: bool,
          kit_pids: Iterable[int] = ()) -> tuple[list[int] | None, str]:
    """The foreign busy pids among `samples`, and the rule used; None when it cannot be told.
    `self_busy`: whether this process computed over the samples' period; `kit_pids`: the kit's."""
    if isinstance(samples, str):
        return None, samples
    busy = {s["pid"] for s in samples if s["sm_util"] > 0 and s.get("judged", True)}
    if self_visible:
        return sorted(busy - {self_pid} - set(kit_pids)), "by_pid"
    needed = 2 if self_busy else 1
    return (sorted(busy) if len(busy) >= needed else []), "by_count"


@dataclass
class ProcessWatcher:
    """Reads what other processes do on the GPU, one reading per clock-sampler point, from
    `since_unix_s` (the lock's acquisition) on."""

    nvml: Any
    self_pid: int = field(default_factory=os.getpid)
    kit_pids: tuple[int, ...] = ()
    since_unix_s: float | None = None
    self_busy: bool = True
    # The kit's other processes with a context on this GPU now, or None where they cannot be known.
    members: Callable[[], set[int] | None] | None = None

    def __post_init__(self) -> None:
        self._since_us = int((self.since_unix_s if self.since_unix_s is not None else time.time()) * 1e6)
        self._last_us = self._since_us - int(LOOKBACK_S * 1e6)
        self._last_by_pid: dict[int, int] = {}
        self._start_us = self._since_us
        self._latest: dict[int, dict[str, Any]] = {}
        self._seen_since_start: set[int] = set()
        self._busy_since_start: dict[int, list[dict[str, Any]]] = {}
        self.self_visible: bool | None = None
        # Processes that held a context in a reading since `begin` and are not the kit; None
        # while the kit's processes cannot be listed (then no one can be called an outsider).
        self.outsiders: set[int] | None = None

    def begin(self, at_unix_s: float) -> None:
        """Judge only work from `at_unix_s` on, where the kit's own work (or a wait's look) begins."""
        self._start_us = int(at_unix_s * 1e6)
        self._seen_since_start.clear()
        self._busy_since_start.clear()
        self.outsiders = None

    def _note(self, samples: list[dict[str, Any]]) -> None:
        for sample in samples:
            pid = sample["pid"]
            if pid not in self._latest or sample["t_us"] > self._latest[pid]["t_us"]:
                self._latest[pid] = sample
            if sample["t_us"] > self._start_us:
                self._seen_since_start.add(pid)
                if sample["sm_util"] > 0:
                    self._busy_since_start.setdefault(pid, []).append(sample)

    def _judge_outsiders(self, pids: list[int], members: set[int]) -> tuple[list[int], list[dict[str, Any]]]:
        """The members' rule: outsiders with a context that worked since the start, or, with no
        sample since, whose latest recent sample was busy."""
        recent_us = int((time.time() - WINDOW_S) * 1e6)
        foreign, evidence = [], []
        for pid in sorted(set(pids) - {self.self_pid} - members - set(self.kit_pids)):
            if pid in self._seen_since_start:
                busy = self._busy_since_start.get(pid, [])
            else:
                latest = self._latest.get(pid)
                busy = [latest] if latest and latest["sm_util"] > 0 and latest["t_us"] >= recent_us else []
            if busy:
                foreign.append(pid)
                evidence += busy[-3:]
        return foreign, evidence

    def _mark_periods(self, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each sample with the start of its period, and whether that period lies wholly after the acquisition."""
        marked = []
        for sample in sorted(samples, key=lambda s: s["t_us"]):
            start = self._last_by_pid.get(sample["pid"])
            if start is not None and sample["t_us"] <= start:
                continue  # a sample already read: its period would look like one after the acquisition
            self._last_by_pid[sample["pid"]] = sample["t_us"]
            if sample["t_us"] > self._since_us:
                marked.append({**sample, "from_us": start, "judged": start is not None and start >= self._since_us})
        return marked

    def read(self) -> dict[str, Any]:
        pids = compute_pids(self.nvml)
        if isinstance(pids, list) and self.self_visible is None and pids:
            self.self_visible = self.self_pid in pids
        samples = process_samples(self.nvml, self._last_us)
        if isinstance(samples, list) and samples:
            self._last_us = max(s["t_us"] for s in samples)
            self._note(samples)
            samples = self._mark_periods(samples)
        reading = {"compute_pids": pids, "processes": samples, "device_util_pct": device_util(self.nvml)}
        members = self.members() if self.members is not None and self.self_visible else None
        if members is not None and isinstance(pids, list) and isinstance(samples, list):
            outsiders = set(pids) - {self.self_pid} - members - set(self.kit_pids)
            self.outsiders = (self.outsiders or set()) | outsiders
            foreign, evidence = self._judge_outsiders(pids, members)
            reading.update(foreign_pids=foreign, foreign_rule="by_pid_and_members")
            if evidence:
                reading["foreign_samples"] = evidence  # the samples judged, perhaps from before the start
            return reading
        foreign, rule = judge(samples, self.self_pid, bool(self.self_visible), self.self_busy, self.kit_pids)
        return {**reading, "foreign_pids": foreign, "foreign_rule": rule}


def busy_after(look: dict[str, Any] | None) -> list[int]:
    """The outsiders a look after a stretch found computing right after it (empty: none, or no look)."""
    return list(look["outsiders"]) if look and look.get("looked") and look.get("busy") else []


def previous_holder_pids(previous_holder: dict[str, str]) -> tuple[int, ...]:
    """The pid the lock file names as its last holder, when it was on this host's pid space."""
    pid = previous_holder.get("pid", "")
    return (int(pid),) if pid.isdigit() else ()


def foreign_work(trace: list[dict[str, Any]], tags: list[dict[str, Any]], busy_before_pct: Any,
                 after: dict[str, Any] | None = None) -> dict[str, Any]:
    """The record-level summary: which processes worked beside the timing, and how many samples they touched.
    `busy_before_pct` (read when the lock was taken) may hold the previous holder's work: shown,
    not judged. A process only `after` (the look after the stretch) found is `"right_after": true`.
    """
    looked = {"after": after} if after is not None else {}
    readable = [p for p in trace if "foreign_pids" in p]
    if not readable:
        return {"processes": f"{UNAVAILABLE}no process readings were taken", "busy_before_pct": busy_before_pct,
                "samples_disturbed": None, **looked}
    if all(p["foreign_pids"] is None for p in readable):
        return {"processes": readable[0]["foreign_rule"], "busy_before_pct": busy_before_pct, "samples_disturbed": None,
                **looked}
    peak: dict[int, dict[str, Any]] = {}
    for point in readable:
        for pid in point["foreign_pids"] or []:
            judged = [s for s in point["processes"] if s["judged"]] + point.get("foreign_samples", [])
            utils = [s["sm_util"] for s in judged if s["pid"] == pid]
            entry = peak.setdefault(pid, {"pid": pid, "max_sm_util": 0, "readings": 0})
            entry["max_sm_util"] = max([entry["max_sm_util"], *utils])
            entry["readings"] += 1
    for pid in busy_after(after):
        if pid not in peak:  # seen only by the look after the stretch
            peak[pid] = {"pid": pid, "max_sm_util": 0, "readings": 0, "right_after": True}
    return {
        "processes": [peak[pid] for pid in sorted(peak)],
        "rule": readable[-1]["foreign_rule"],
        "busy_before_pct": busy_before_pct,
        "samples_disturbed": sum(1 for tag in tags if tag.get("foreign")),
        **looked,
    }


def saw_foreign_work(record: dict[str, Any]) -> bool | None:
    """Whether a timing or span record saw another process compute on its GPU; None when it
    could not tell (older records, or NVML without per-process utilisation)."""
    summary = record.get("foreign_work")
    if not isinstance(summary, dict) or not isinstance(summary.get("processes"), list):
        return None
    return bool(summary["processes"])
