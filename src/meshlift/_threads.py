"""CPU thread count for torch's intra-op pool, chosen from the cores that are actually free.

torch's OpenMP pool uses every core by default. On a machine where another job already keeps the cores
busy, its threads oversubscribe them and wait on each other at every parallel region: measured on the
2-core development machine, ``meshlift demo`` took 1,078 s beside a busy job instead of ~58 s idle (18×),
where halving the threads costs about 2× at most. So the CLI sets the pool size once, before torch starts:

1. ``MESHLIFT_NUM_THREADS`` (a positive integer) when set — the user's knob;
2. else ``OMP_NUM_THREADS`` when set (torch honours it; nothing is changed);
3. else the cores this process may use (``os.sched_getaffinity``) minus the whole part of the 1-minute load
   average, at least 1 (``os.getloadavg``; where unavailable, all cores). The whole part, not the rounded
   value: the average decays slowly, and right after a run of one's own on an idle 2-core machine it reads
   0.75-1.0, which rounding turned into one free core (a fresh user's `--quick` runs then took 1.27× longer on
   1 thread, 2026-12-06); a job that really keeps a core busy holds the average at or above 1. The average lags
   by minutes, so where Linux gives the scheduler's count of entities running *now* (``/proc/loadavg``, its
   fourth field, the largest of three reads 20 ms apart, minus this process) and it is lower, that count is the
   load: a fresh user's demo right after a 2-core run read an average of 1.9, got 1 thread and ran 1.7× slower
   (session 25).

The choice is printed at the start of ``meshlift reconstruct`` and ``meshlift demo`` (:func:`thread_note`).

Stdlib only at import; torch is touched only if it is already imported.
"""

from __future__ import annotations

import os
import sys

from meshlift import _env

__all__ = ["free_cores", "choose_num_threads", "configure_cpu_threads", "thread_note"]

#: ``(threads, reason)`` of the last :func:`configure_cpu_threads` (None before it ran).
_CHOSEN: tuple[int | None, str] | None = None


def _running_elsewhere() -> int | None:
    """Entities the scheduler runs now besides this process (``/proc/loadavg``'s ``running/total``: the largest
    of three reads 20 ms apart, minus one), or None where the file is not there or not readable."""
    import time

    best = None
    for i in range(3):
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return None
        best = running if best is None else max(best, running)
        if i < 2:
            time.sleep(0.02)
    return None if best < 1 else best - 1  # the reader itself runs: a count of 0 is not a real scheduler's


def free_cores() -> int:
    """Cores this process may run on, minus the load (module docstring, rule 3: the whole part of the 1-minute
    load average, or what runs now when that is lower), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        load = int(os.getloadavg()[0])
    except (AttributeError, OSError):
        load = 0
    now = _running_elsewhere()
    if now is not None:
        load = min(load, now)
    return max(1, min(cores, cores - load))


def choose_num_threads(environ=None) -> tuple[int | None, str]:
    """``(threads, reason)``: the pool size the rules of the module docstring give (None = leave torch's)."""
    env = os.environ if environ is None else environ
    raw = _env.get("MESHLIFT_NUM_THREADS", env)
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            from meshlift.errors import ConfigError

            raise ConfigError(f"MESHLIFT_NUM_THREADS={raw!r} must be a positive integer (CPU threads for torch)")
        return n, "MESHLIFT_NUM_THREADS"
    if env.get("OMP_NUM_THREADS"):
        return None, "OMP_NUM_THREADS"
    return free_cores(), "free cores: cores - whole load average"


def configure_cpu_threads() -> tuple[int | None, str]:
    """Apply :func:`choose_num_threads`: set ``OMP_NUM_THREADS`` before torch is imported, or call
    ``torch.set_num_threads`` when it already is. Returns what was chosen."""
    global _CHOSEN
    n, why = choose_num_threads()
    _CHOSEN = (n, why)
    if n is None:
        return n, why
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    else:
        os.environ["OMP_NUM_THREADS"] = str(n)
    return n, why


def thread_note() -> str | None:
    """One line naming the CPU thread count :func:`configure_cpu_threads` chose and why (None when it did not
    run, e.g. inside a test, or left torch's own choice under ``OMP_NUM_THREADS``)."""
    if _CHOSEN is None or _CHOSEN[0] is None:
        return None
    n, why = _CHOSEN
    return f"CPU threads: {n} ({why}; MESHLIFT_NUM_THREADS=N sets it)"
