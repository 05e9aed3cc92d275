"""Wall time of the whole command: seconds since this process started (the interpreter's start-up and the
imports included), as a user's stopwatch would show it.

Linux: ``/proc/uptime`` minus the process's start time (field 22 of ``/proc/self/stat``, in clock ticks
since boot). Elsewhere: since this module was first imported (``cli/reconstruct_cmd.py`` imports it, and the
CLI imports every command module at start-up).
"""

from __future__ import annotations

import os
import time

_T_IMPORT = time.perf_counter()


def process_seconds() -> float:
    """Seconds since the process started (float, ≥ 0)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
        start_ticks = int(fields[19])  # field 22 of the whole line
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return time.perf_counter() - _T_IMPORT
