"""The console script's process: no collector traversals of the import-time heap, and no interpreter teardown
after the command has finished (issue 9: the wall time a user's stopwatch shows).

Why. After ``import torch`` (and Triton, rich, trimesh) the interpreter tracks ~240k container objects, nearly
all of them module-level and alive until exit. CPython's cyclic collector re-traverses all of them at every
full (generation-2) collection, and its finalization at exit tears every module down and collects several
times more. Measured on the 2-core development machine (``meshlift demo``, 2026-12-03): 5 full collections of
21-122 ms during the run (4 of them in its first ~3 s, the imports and set-up: 0.3 s together), then
0.9 s from the last ``atexit`` handler to the end of the process, after the summary line. Freezing the heap
at exit cut that to 0.2 s, but Triton's compiled bindings (nanobind) then print "leaked instance" warnings at
teardown for the objects a frozen heap never frees; ending the process after the ``atexit`` handlers does
neither.

What. Acting only in the console script (:func:`meshlift.cli.main.main` with ``argv=None`` calls
:func:`enable_for_console_script` first); in-process callers (tests, notebooks) keep their collector and
their interpreter's normal exit (``benchmarks/demo_phases.py`` and ``benchmarks/record_kernel_variants.py`` run
the console script's path in-process and set ``MESHLIFT_FAST_EXIT=0``); so does a process under a tracer,
profiler or coverage tool:

- :func:`pause_during_imports` (the ``demo`` command, first thing in its body): no collections while the
  command imports its modules;
- :func:`imports_done` (the ``demo`` command, once its heavy imports are in): ``gc.freeze()`` moves every
  object alive now into the permanent generation (CPython's documented facility, Python 3.7+), so later full
  collections traverse only what the run itself creates; then collection resumes. The cycles made during the
  paused imports are frozen with the rest and never collected (a few dozen objects, until the process ends).
  ``reconstruct`` runs minutes to hours, where a full collection's ~0.1 s does not count: it keeps the
  collector as it is;
- :func:`exit_now` (the console script, after a command returned, also with an error status; not after an
  uncaught exception, which exits the interpreter's normal way): what the interpreter's exit does for the
  program, then ``os._exit``. That is threading's exit hooks and a join of the non-daemon threads (a
  checkpoint writer finishes its file; ``threading._shutdown``, as ``Py_FinalizeEx`` calls it), the
  ``atexit`` handlers (:class:`meshlift.kernels.precompile.Precompile` stops its workers, ``logging``
  flushes its handlers, multiprocessing joins its children), a flush of stdout and stderr (Python's and the
  C library's buffers; a failed flush exits with 120, as CPython does, except for a pipe whose reader has
  gone, ``meshlift ... | head``, which keeps the command's status quietly), and the exit status. What is
  skipped is the teardown of the modules and objects themselves, which the operating system does at once
  when the process ends (memory, file descriptors, the CUDA context). Files the commands write are closed
  before the command returns.

Knob: ``MESHLIFT_FAST_EXIT=0`` (or ``false``, ``no``, ``off``) keeps the interpreter's full teardown (the heap
is then unfrozen first, so the bindings' leak checks stay quiet). Stdlib only.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys

from meshlift import _env

__all__ = ["ENV_FAST_EXIT", "enable_for_console_script", "pause_during_imports", "imports_done", "exit_now"]

#: Environment variable: ``0`` keeps the interpreter's normal teardown at the end of a command.
ENV_FAST_EXIT = "MESHLIFT_FAST_EXIT"

#: The exit status after a closed output pipe (``meshlift ... | head``): a process ended by SIGPIPE, as the
#: shell reports it (128 + 13), what ``yes | head`` leaves in ``PIPESTATUS``.
BROKEN_PIPE_STATUS = 128 + 13

_STATE = {"enabled": False, "paused": False}


def _unfreeze() -> None:
    gc.unfreeze()  # the normal teardown then frees (and leak-checks) the import-time heap as it would have


def enable_for_console_script() -> None:
    """Mark this process as the console script: the other calls act only after this one. Registers, once, the
    ``atexit`` handler that unfreezes the heap before a normal teardown (it runs after every handler
    registered later, which is all of the run's)."""
    if not _STATE["enabled"]:
        _STATE["enabled"] = True
        atexit.register(_unfreeze)


def pause_during_imports() -> None:
    """Disable the cyclic collector until :func:`imports_done` (console script only; a no-op otherwise)."""
    if _STATE["enabled"] and gc.isenabled():
        gc.disable()
        _STATE["paused"] = True


def imports_done() -> None:
    """Freeze the heap alive now (the imported modules) and resume collection if it was paused (console
    script only; a no-op otherwise)."""
    if not _STATE["enabled"]:
        return
    gc.freeze()
    if _STATE["paused"]:
        _STATE["paused"] = False
        gc.enable()


def _observed() -> bool:
    """True while a tracer, profiler or coverage tool watches this process (``python -m cProfile -o F``,
    ``coverage run``, ``pdb``, ``trace``): they write their results after the program returns, which
    ``os._exit`` would skip."""
    if sys.gettrace() is not None or sys.getprofile() is not None:
        return True
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+: cProfile and coverage register a tool here
    if monitoring is not None:  # the debugger, coverage and profiler tool ids (0, 1, 2)
        return any(monitoring.get_tool(i) is not None for i in (monitoring.DEBUGGER_ID, monitoring.COVERAGE_ID,
                                                                 monitoring.PROFILER_ID))
    return False


def fast_exit_wanted() -> bool:
    """True when :func:`exit_now` ends the process: the console script, ``MESHLIFT_FAST_EXIT`` not ``0``, and an
    interpreter with the hooks it calls (CPython's ``threading._shutdown`` and ``atexit._run_exitfuncs``)."""
    import threading

    off = (_env.get(ENV_FAST_EXIT) or "1").lower() in ("0", "false", "no", "off")
    return (_STATE["enabled"] and not off and not _observed()
            and callable(getattr(threading, "_shutdown", None)) and callable(getattr(atexit, "_run_exitfuncs", None)))


def exit_now(code: int) -> None:
    """End the process with status ``code`` after the program-level exit steps (module docstring); returns
    without doing anything when :func:`fast_exit_wanted` is False."""
    if not fast_exit_wanted():
        return
    import threading

    try:
        threading._shutdown()  # threading's exit hooks (concurrent.futures), then a join of non-daemon threads
    except KeyboardInterrupt:  # as the interpreter's exit does: report it, keep the status, go on
        sys.stderr.write("interrupted while waiting for the remaining threads\n")
    atexit._run_exitfuncs()  # the registered handlers, last registered first (_unfreeze last: harmless)
    failed = broken = False
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, ValueError):
            pass
        except BrokenPipeError:  # the reader of a pipe has gone (`meshlift ... | head`): quiet
            broken = True
        except OSError:
            failed = True
    try:  # C-level stdio buffers (printf / std::cout of extensions): exit() flushes them, os._exit does not
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001 - no libc through ctypes (e.g. Windows): nothing more to flush
        pass
    code = int(code)
    if broken and code == 0:
        code = BROKEN_PIPE_STATUS
    elif failed and code == 0:
        code = 120  # CPython's status when flushing the standard streams at exit fails
    os._exit(code & 0xFF)
