"""CPU thread count for torch's intra-op pool, chosen from the cores that are actually free.

torch's OpenMP pool uses every core by default. On a machine where another job already keeps the cores
busy, its threads oversubscribe them and wait on each other at every parallel region: measured on the
2-core development machine, ``meshlift demo`` took 1,078 s beside a busy job instead of ~58 s idle (18×),
where halving the threads costs about 2× at most. So the CLI sets the pool size once, before torch starts:

1. ``MESHLIFT_NUM_THREADS`` (a positive integer) when set — the user's knob;
2. else ``OMP_NUM_THREADS`` when set (torch honours it; nothing is changed);
3. else the cores this process may use (``os.sched_getaffinity``) minus the 1-minute load average,
   rounded, at least 1 (``os.getloadavg``; where unavailable, all cores).

Stdlib only at import; torch is touched only if it is already imported.
"""

from __future__ import annotations

import os
import sys

from meshlift import _env

__all__ = ["free_cores", "choose_num_threads", "configure_cpu_threads"]


def free_cores() -> int:
    """Cores this process may run on, minus the 1-minute load average (rounded), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return max(1, min(cores, int(round(cores - load))))


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
    return free_cores(), "free cores (cores - load average)"


def configure_cpu_threads() -> tuple[int | None, str]:
    """Apply :func:`choose_num_threads`: set ``OMP_NUM_THREADS`` before torch is imported, or call
    ``torch.set_num_threads`` when it already is. Returns what was chosen."""
    n, why = choose_num_threads()
    if n is None:
        return n, why
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    else:
        os.environ["OMP_NUM_THREADS"] = str(n)
    return n, why
