"""Where the wall time of one ``meshlift demo`` goes: a timeline of its phases, from process start to exit.

Usage (from the repository root)::

    python benchmarks/demo_phases.py --device cuda            # prints the timeline, writes nothing else
    python benchmarks/demo_phases.py --device cuda --json phases.json -- --out /tmp/demo

It runs ``meshlift demo`` in this process with named functions wrapped by wall-clock timers (inclusive
times; on CUDA a ``torch.cuda.synchronize()`` closes each phase, so a phase's queued GPU work is charged to
it, not to the next). The wrapped functions are replaced wherever a loaded ``meshlift`` module holds them
(``from X import f`` bindings included). ``imports`` is the time from the interpreter's start
(``/proc/self/stat``) to entering the demo command; ``teardown`` (interpreter exit) is not seen here: time the
whole command in the shell for it. Triton's ``compile`` (a cache hit still loads the kernel) and
``triton_key`` (Triton hashes its own install once per process) are listed where they fall; a phase run on
another thread (the priming of ``triton_key``, ``meshlift.kernels.precompile``) is marked ``[thread]``.
Collections of the cyclic garbage collector are counted by generation (``gc gen N``; ``meshlift/cli/process.py``
keeps the import-time heap out of them), a long one listed where it falls.

Timing on a shared CPU is unreliable; on the GPU run it alone.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import threading
import time
from pathlib import Path

T_SCRIPT = time.perf_counter()

if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def process_age_s() -> float:
    """Seconds since this process started (Linux ``/proc``; 0.0 elsewhere)."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks
        return float(Path("/proc/uptime").read_text().split()[0]) - start
    except (OSError, ValueError, IndexError):
        return 0.0


T0 = T_SCRIPT - process_age_s()  # perf_counter value at the interpreter's start

#: (label, "module:qualname") of the functions timed.
PHASES = [
    ("precompile.start", "meshlift.kernels.precompile:start"),
    ("make_demo_object", "meshlift.data.demo_object:make_demo_object"),
    ("synthetic_problem", "meshlift.methods.nvdiffrec.reconstruct:synthetic_problem"),
    ("gt light + prefilter", "meshlift.data.synthetic:make_synthetic_light"),
    ("procedural_environment", "meshlift.shading.procedural:procedural_environment"),
    ("latlong_to_cube", "meshlift.shading.cubemap:latlong_to_cube"),
    ("build_mips", "meshlift.shading.light:EnvironmentLight.build_mips"),
    ("specular operator", "meshlift.shading.light:_specular_operator"),
    ("render target views", "meshlift.data.synthetic:SyntheticDataset._render"),
    ("reconstruct", "meshlift.methods.nvdiffrec.reconstruct:reconstruct"),
    ("init_sdf", "meshlift.methods.nvdiffrec.geometry:init_sdf"),
    ("pass 1", "meshlift.methods.nvdiffrec.passes:run_pass1"),
    ("pass-1 output (hidden faces)", "meshlift.methods.nvdiffrec.passes:_pass1_output"),
    ("unwrap + bake", "meshlift.methods.nvdiffrec.passes:prepare_pass2_mesh"),
    ("pass 2", "meshlift.methods.nvdiffrec.passes:run_pass2"),
    ("render test views", "meshlift.methods.nvdiffrec.evaluate:render_views"),
    ("image metrics", "meshlift.methods.nvdiffrec.evaluate:image_metrics"),
    ("geometry metrics", "meshlift.methods.nvdiffrec.evaluate:geometry_metrics"),
    ("write outputs", "meshlift.methods.nvdiffrec.outputs:write_outputs"),
    ("checkpoint flush", "meshlift.methods.checkpoints:Checkpointer.flush"),
    ("print_summary", "meshlift.cli.reconstruct_cmd:print_summary"),
    ("triton compile()", "triton.compiler.compiler:compile"),
    ("triton_key", "triton.runtime.cache:triton_key"),
]

EVENTS: list = []  # (label, depth, t0, t1); depth -1: on another thread than the main one
_LOCAL = threading.local()


def _sync():
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        if torch.cuda.is_current_stream_capturing():  # a phase inside a CUDA-graph capture (pass 1's light
            return  # prefilter): a synchronize there would break the capture; the graph's replay is timed whole
        torch.cuda.synchronize()


def _timed(label, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        main = threading.current_thread() is threading.main_thread()
        d = getattr(_LOCAL, "depth", 0)
        _LOCAL.depth = d + 1
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            if label not in ("triton compile()", "triton_key") and main:
                _sync()
            EVENTS.append((label, d if main else -1, t, time.perf_counter()))
            _LOCAL.depth = d

    return wrapper


def _resolve(path):
    import importlib

    mod, qual = path.split(":")
    try:
        obj = importlib.import_module(mod)
    except ImportError:
        return None, None, None
    owner = obj
    for part in qual.split("."):
        owner, obj = obj, getattr(obj, part, None)
        if obj is None:
            return None, None, None
    return owner, qual.split(".")[-1], obj


_GC_START: list = []


def _gc_callback(phase, info):
    """Record each cyclic-GC collection as an event ``gc gen N`` (summed in the report; a long one listed)."""
    if phase == "start":
        _GC_START[:] = [time.perf_counter()]
    elif _GC_START:
        main = threading.current_thread() is threading.main_thread()
        EVENTS.append((f"gc gen {info['generation']}", 0 if main else -1, _GC_START[0], time.perf_counter()))


def install() -> list:
    """Wrap every phase function wherever a loaded meshlift (or triton) module binds it; returns the labels found."""
    import meshlift.cli.demo_cmd  # noqa: F401 - loads what the command imports at call time
    import meshlift.cli.reconstruct_cmd  # noqa: F401
    import meshlift.methods.nvdiffrec.reconstruct  # noqa: F401
    import meshlift.methods.nvdiffrec.outputs  # noqa: F401

    found = []
    for label, path in PHASES:
        owner, name, fn = _resolve(path)
        if fn is None:
            continue
        wrapped = _timed(label, fn)
        setattr(owner, name, wrapped)
        if isinstance(owner, type):
            found.append(label)
            continue
        for mname, m in list(sys.modules.items()):
            if not (mname.startswith("meshlift") or mname.startswith("triton")) or m is None:
                continue
            for attr, val in list(vars(m).items()):
                if val is fn:
                    setattr(m, attr, wrapped)
        found.append(label)
    return found


def report(t_cmd0: float, t_cmd1: float) -> str:
    lines = [f"{'phase':<34} {'start s':>8} {'wall s':>8}"]
    lines.append(f"{'imports (interpreter start -> demo)':<34} {0.0:>8.2f} {t_cmd0 - T0:>8.2f}")
    agg: dict = {}
    counts: dict = {}
    for label, *_ in EVENTS:
        counts[label] = counts.get(label, 0) + 1
    for label, d, a, b in sorted(EVENTS, key=lambda e: e[2]):
        many = counts[label] > 3 or label in ("triton compile()", "triton_key") or label.startswith("gc gen")
        if many:  # frequent calls: summed below, listed only when one is long
            s = agg.setdefault(label, [0, 0.0])
            s[0] += 1
            s[1] += b - a
            if b - a < 0.05:
                continue
        name = "  " * (d + 1) + label if d >= 0 else f"  [thread] {label}"
        lines.append(f"{name:<34} {a - T0:>8.2f} {b - a:>8.3f}")
    lines.append(f"{'demo command (inclusive)':<34} {t_cmd0 - T0:>8.2f} {t_cmd1 - t_cmd0:>8.2f}")
    lines.append(f"{'process so far':<34} {'':>8} {t_cmd1 - T0:>8.2f}")
    for label, (n, s) in agg.items():
        lines.append(f"{label}: {n} calls, {s:.3f} s in all (inclusive)")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=Path, default=None, help="also write the events here")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    install()
    import gc

    gc.callbacks.append(_gc_callback)
    # the console script ends its process after the command (cli/process.py): this one goes on to report
    from meshlift.cli.process import ENV_FAST_EXIT

    os.environ[ENV_FAST_EXIT] = "0"
    from meshlift.cli.main import main as cli_main

    sys.argv = ["meshlift", "demo", "--device", args.device, *extra]
    t0 = time.perf_counter()
    try:
        cli_main(None)  # as the console script runs it (thread-pool sizing included)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    t1 = time.perf_counter()
    text = report(t0, t1)
    print(text, flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"t0_offset": t0 - T0, "events": [(l, d, a - T0, b - T0) for l, d, a, b
                                                                           in EVENTS]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
