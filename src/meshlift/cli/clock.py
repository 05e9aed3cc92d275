"""Wall time of the whole command: seconds since this process started (the interpreter's start-up and the
imports included), as a user's stopwatch would show it.

Linux: ``/proc/uptime`` minus the process's start time (field 22 of ``/proc/self/stat``, in clock ticks
since boot). Elsewhere: since this module was first imported (``cli/reconstruct_cmd.py`` imports it, and the
CLI imports every command module at start-up).

A shell that ends ``sh -c "pip install ... && meshlift demo"`` *execs* meshlift in its own process, so the
process start time is the shell's and the install was counted too (a fresh-user run, 2026-12-06: 60.5 s
reported for a 43.6 s demo; session 27: 57.3 s for a 47 s demo after a 5 s install, under the first 10 s guard).
The interpreter's start-up and the CLI's light imports before this module take 0.2-0.3 s on the 2-core
development machine (no torch yet), well under ``EXEC_GUARD_S``; when the process is older than that at this
module's import, it was started for something else first, and the time counts from the import instead.
"""

from __future__ import annotations

import os
import time

_T_IMPORT = time.perf_counter()
#: Seconds of process age at this module's import beyond which the process was started by a shell that ran
#: other commands first (exec): then :func:`process_seconds` counts from the import.
EXEC_GUARD_S = 3.0


def _proc_age() -> float | None:
    """Seconds since this process started by ``/proc`` (None where that is unavailable)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
        start_ticks = int(fields[19])  # field 22 of the whole line
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


_AGE_AT_IMPORT = _proc_age()


def process_seconds() -> float:
    """Seconds since the process started (float, ≥ 0), or since this module's import when the process is
    older than ``EXEC_GUARD_S`` at that import or ``/proc`` is unavailable (module docstring)."""
    since_import = time.perf_counter() - _T_IMPORT
    if _AGE_AT_IMPORT is None or _AGE_AT_IMPORT > EXEC_GUARD_S:
        return since_import
    age = _proc_age()
    return since_import if age is None else age
