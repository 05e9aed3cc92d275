"""The console script's process: no collector traversals of the import-time heap, and no interpreter teardown
after the command has finished (issue 9: the wall time a user's stopwatch shows).

Why. After ``import torch`` (and Triton, rich, trimesh) the interpreter tracks ~240k container objects, nearly
all of them module-level and alive until exit. CPython's cyclic collector re-traverses all of them at every
full (generation-2) collection, and its finalization at exit tears every module down and collects several
times more. Measured on the 2-core development machine (``meshlift demo``, 2026-12-03): 5 full collections of
21-122 ms during the run (4 of them during the imports: 0.3 s together), then 0.9 s from the last ``atexit``
handler to the end of the process, after the summary line. Freezing the heap at exit cut that to 0.2 s, but
Triton's compiled bindings (nanobind) then print "leaked instance" warnings at teardown for the objects a
frozen heap never frees; ending the process after the ``atexit`` handlers does neither.

What. Acting only in the console script (:func:`meshlift.cli.main.main` with ``argv=None`` calls
:func:`enable_for_console_script` first); in-process callers (tests, notebooks, ``benchmarks/demo_phases.py``)
keep their collector and their interpreter's normal exit:

- :func:`pause_during_imports` (the ``demo`` command only, at the start): no collections while the command
  imports its modules;
- :func:`imports_done` (the ``demo`` and ``reconstruct`` commands, once their heavy imports are in):
  ``gc.freeze()`` moves every object alive now into the permanent generation (CPython's documented facility,
  Python 3.7+), so later full collections traverse only what the run itself creates; then collection resumes
  if it was paused;
- :func:`exit_now` (the console script, after a command returned normally): what the interpreter's exit does
  for the program, then ``os._exit``: threading's exit hooks and a join of the non-daemon threads (a
  checkpoint writer finishes its file; ``threading._shutdown``, as ``Py_FinalizeEx`` calls it), the
  ``atexit`` handlers (:class:`meshlift.kernels.precompile.Precompile` stops its workers, ``logging`` flushes
  its handlers, multiprocessing joins its children), a flush of stdout and stderr, and the exit status. What
  is skipped is the teardown of the modules and objects themselves, which the operating system does at once
  when the process ends (memory, file descriptors, the CUDA context). Files the commands write are closed
  before the command returns. A command that raised (a traceback) exits the interpreter's normal way.

Knob: ``MESHLIFT_FAST_EXIT=0`` keeps the interpreter's full teardown (the heap is then unfrozen first, so the
bindings' leak checks stay quiet). Stdlib only.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys

__all__ = ["ENV_FAST_EXIT", "enable_for_console_script", "pause_during_imports", "imports_done", "exit_now"]

#: Environment variable: ``0`` keeps the interpreter's normal teardown at the end of a command.
ENV_FAST_EXIT = "MESHLIFT_FAST_EXIT"

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


def fast_exit_wanted() -> bool:
    """True when :func:`exit_now` ends the process: the console script, ``MESHLIFT_FAST_EXIT`` not ``0``, and an
    interpreter with the hooks it calls (CPython's ``threading._shutdown`` and ``atexit._run_exitfuncs``)."""
    import threading

    return (_STATE["enabled"] and os.environ.get(ENV_FAST_EXIT, "1").strip() != "0"
            and callable(getattr(threading, "_shutdown", None)) and callable(getattr(atexit, "_run_exitfuncs", None)))


def exit_now(code: int) -> None:
    """End the process with status ``code`` after the program-level exit steps (module docstring); returns
    without doing anything when :func:`fast_exit_wanted` is False."""
    if not fast_exit_wanted():
        return
    import threading

    threading._shutdown()  # threading's exit hooks (concurrent.futures), then a join of non-daemon threads
    atexit._run_exitfuncs()  # the registered handlers, last registered first (_unfreeze last: harmless)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(int(code) & 0xFF)
