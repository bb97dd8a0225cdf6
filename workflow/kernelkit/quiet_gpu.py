"""What the GPU does while the kit holds it and launches nothing: after a timed stretch, and
while waiting for it to be idle. Then any work on it is another process's.

Why apart from kernelkit.foreign's per-process readings: those cannot show work that began
inside a short stretch (H200, driver 580: one per-process sample every 0.2 s, naming one process;
a CuPy loop begun inside a 40-60 ms timing was sampled only after it). So after a stretch during
which an outsider held a context, the kit keeps the lock, launches nothing and reads the device's
utilisation samples until one covers a period wholly after the stretch (`look_after`): busy then
means that process computes, perhaps during the timing too. Plain Python, tested on the CPU.
"""

from __future__ import annotations

import time
from typing import Any

from kernelkit.foreign import LOOKBACK_S, ProcessWatcher, ask


def device_samples(nvml: Any, since_us: int) -> list[tuple[int, int]] | str:
    """The device's SM utilisation samples newer than `since_us`: (NVML timestamp in us, percent),
    in time order; or why they cannot be read."""
    values = ask(nvml, lambda n, h: n.nvmlDeviceGetSamples(h, n.NVML_GPU_UTILIZATION_SAMPLES, since_us)[1],
                 samples=True)
    return values if isinstance(values, str) else sorted((int(v.timeStamp), int(v.sampleValue.uiVal)) for v in values)


# NVML stores some device samples twice, a millisecond apart (H200, driver 580); a sample's
# period begins at the previous sample at least this much earlier.
SAMPLE_REPEAT_US = 20_000


def periods(samples: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Device samples as (period start, end, percent): each period begins at the previous sample,
    a repeat of a sample less than SAMPLE_REPEAT_US later left out; the first sample has none."""
    found, previous = [], None
    for t_us, pct in samples:
        if previous is None:
            previous = t_us
        elif t_us - previous >= SAMPLE_REPEAT_US:
            found.append((previous, t_us, pct))
            previous = t_us
    return found


def first_period_after(samples: list[tuple[int, int]], after_us: int) -> tuple[int, int, int] | None:
    """The first device sample whose whole period lies after `after_us`: (period start, end, percent)."""
    return next((period for period in periods(samples) if period[0] >= after_us), None)


# How long the look after a stretch waits for a device sample wholly after it: NVML samples the
# device every 0.2 s on an H200, so the second sample after the stretch ends comes within 0.4 s.
LOOK_AFTER_TIMEOUT_S = 1.0
LOOK_AFTER_POLL_S = 0.05


def look_after(watcher: ProcessWatcher, ended_unix_s: float, timeout_s: float = LOOK_AFTER_TIMEOUT_S,
               poll_s: float = LOOK_AFTER_POLL_S, sleep: Any = time.sleep,
               clock: Any = time.monotonic) -> dict[str, Any]:
    """After a stretch that ended at `ended_unix_s`, while this process still holds the GPU alone and
    launches nothing: is anyone computing? Asked only where an outsider held a context during the
    stretch; busy when the first device sample whose period lies wholly after it is above zero.
    """
    outsiders = watcher.outsiders
    if outsiders is None:
        return {"looked": False, "reason": "no reading listed the kit's processes on this GPU, so no outsider can be named"}
    if not outsiders:
        return {"looked": False, "reason": "no process but the kit's held a context"}
    ended_us = int(ended_unix_s * 1e6)
    since_us = ended_us - int(LOOKBACK_S * 1e6)
    began = clock()
    seen: list[tuple[int, int]] = []
    while True:
        samples = device_samples(watcher.nvml, since_us)
        if isinstance(samples, str):
            return {"looked": False, "reason": samples, "outsiders": sorted(outsiders)}
        seen = sorted(set(seen) | set(samples))
        found = first_period_after(seen, ended_us)
        if found is not None:
            start_us, end_us, pct = found
            return {"looked": True, "busy": pct > 0, "device_util_pct": pct, "outsiders": sorted(outsiders),
                    "period_unix_s": [start_us / 1e6, end_us / 1e6], "waited_s": round(clock() - began, 6)}
        if clock() - began >= timeout_s:
            return {"looked": False, "reason": f"no device sample after the stretch within {timeout_s} s",
                    "outsiders": sorted(outsiders), "waited_s": round(clock() - began, 6)}
        sleep(poll_s)


def wait_for_idle(watcher: ProcessWatcher, timeout_s: float, poll_s: float = 0.2,
                  sleep: Any = time.sleep, clock: Any = time.monotonic) -> dict[str, Any]:
    """Poll, holding the lock and launching nothing, until no foreign process computes, or the timeout.

    Where the kit's processes can be listed: idle when no other process holds a context, or when a
    device utilisation sample whose whole period lies within the wait reads 0 (per-process samples
    may miss a process that has just begun). Elsewhere: idle on a reading with no foreign busy pid
    or a device utilisation of 0. With neither readable: at once, idle None, saying why.
    """
    watcher.self_busy = False
    began, polls, last = clock(), 0, {}
    quiet_from_us = int(time.time() * 1e6)  # this process launches nothing from here on
    while True:
        last = watcher.read()
        polls += 1
        util = last["device_util_pct"]
        outsiders = watcher.outsiders
        samples = device_samples(watcher.nvml, quiet_from_us - int(LOOKBACK_S * 1e6)) if outsiders else []
        if outsiders is not None and not outsiders:
            idle, reason = True, "no process but the kit's held a context"
            break
        if outsiders and isinstance(samples, list):
            quiet = [period for period in periods(samples) if period[0] >= quiet_from_us]
            if quiet and quiet[-1][2] == 0:
                idle, reason = True, "the device was idle over a sampling period with only other processes' contexts on it"
                break
        else:
            seen_processes = isinstance(last["processes"], list) and any(s["judged"] for s in last["processes"])
            if last["foreign_pids"] is None and isinstance(util, str):
                idle, reason = None, f"neither process nor device utilisation is readable ({util})"
                break
            # The members' rule judges the last WINDOW_S seconds at the first look; the other needs a
            # sample that began after the lock was taken before it can say no one else works.
            decided = seen_processes or last["foreign_rule"] == "by_pid_and_members"
            if util == 0 or (decided and last["foreign_pids"] == []):
                idle, reason = True, "no foreign work seen"
                break
        if clock() - began >= timeout_s:
            idle, reason = False, f"still busy after {timeout_s} s"
            break
        watcher.begin(time.time())  # the next look asks about the work since this one
        sleep(poll_s)
    watcher.self_busy = True
    return {"waited_s": round(clock() - began, 6), "polls": polls, "idle": idle, "reason": reason,
            "last_foreign_pids": last.get("foreign_pids"), "last_device_util_pct": last.get("device_util_pct")}
