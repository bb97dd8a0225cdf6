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
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            after_name = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime_s = float(handle.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    age_s = uptime_s - int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
    return time.time() - age_s
