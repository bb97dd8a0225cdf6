"""When this process started: the start of a job's clock (kernelkit.gpujob).

Apart, and on the standard library only, so that a job's own short process (kernelkit.worker's
client) reads it before, and without, the kit's imports.
"""

from __future__ import annotations

import os
import time


def process_started_unix_s() -> float | None:
    """When this process started (before the interpreter loaded anything), from /proc; None elsewhere.

    A job's cost is mostly start-up and imports, which a clock started in Python would miss.
    """
    ticks = start_ticks()
    if ticks is None:
        return None
    try:
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime_s = float(handle.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    age_s = uptime_s - ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - age_s


def start_ticks(pid: int | str = "self") -> int | None:
    """When process `pid` started, in clock ticks since boot (/proc's field 22), or None where it
    is not there: with the pid, it names one process, which a later one reusing the pid is not."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None
