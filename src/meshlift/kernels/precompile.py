"""Compile a run's Triton kernel variants in parallel worker processes at start-up (issue 9: first-run cost).

Why. Triton compiles a kernel variant (one kernel at one set of argument types, ``constexpr`` values and
integer/pointer specialisations) the first time a process launches it, in that process, one after the other:
0.1-3 s of host CPU each. On an empty Triton cache a ``spot`` run meets 52 variants in its first ~70 s, 33 s
of compiles on the H200's host (measured 2026-12-02, main at ac07aa4; docs/benchmarks.md), and the demo 52 too (32 s of its 58 s); 63 across the
two (the list below). A warm cache makes all of it a file read.

Design. The variants the shipped methods launch are known in advance: ``kernels/variants.json`` lists each
one as the Triton JIT handed it to ``triton.compile`` (kernel ``module:qualname``, signature, ``constexprs``,
specialisation ``attrs`` — kept as the Python literals Triton builds, because its cache key hashes their
``str`` — and the launch options that differ from the backend's defaults), in the order a run first meets
them, with the jobs that use them. The list is recorded on a GPU by :func:`record` (``python
benchmarks/record_kernel_variants.py``), not written by hand. At the start of a CUDA run on the Triton
backend, :func:`start` spawns ``W`` worker processes (``python -m meshlift.kernels.precompile``) that build
the same ``ASTSource`` and call ``triton.compile`` into the same on-disk cache: the key Triton computes is
the one the run's own launch will look up, so the launch then only loads the binary. Triton <= 3.6 also
builds a small C launcher per kernel signature with the host compiler at the first launch (0.2-0.3 s each,
~11 s of a cold demo on the H200); the workers build those too. The workers create no CUDA context (the
parent passes the target), run at lower priority, and take the variants round robin so the early ones come
first. Measured (H200, 2026-12-02, 00ae803): the ``spot`` full preset on an empty cache 342.7 s with the warm-up, its
main process compiling 3 of its 52 variants itself (the first ones, needed before the workers had started);
405 s and 361 s in earlier empty-cache runs without it, 330 s with a warm cache.

Nothing depends on it. A variant not compiled yet when the run reaches it, or missing from the list, is
compiled by the launching process as before (a duplicate compile at worst); a record that no longer fits its
kernel (parameters changed since it was recorded: ``tests/test_precompile.py`` checks every record against
the code) fails in the worker and is skipped. When every worker has finished, a marker file in the Triton
cache dir (keyed by the Triton version, the target, this list and each kernel's own cache key) tells later runs not
to start workers at all.

Warm caches still pay one cost per process: the first ``triton.compile`` call (a cache hit too) hashes Triton's
own install (``triton_key``: its compiler sources and the ``libtriton`` shared library, ~0.4 s on the H200's
host, measured 2026-12-02). :func:`prime_in_background` computes it on a daemon thread at the start of a CUDA command
(the demo starts it first thing, once this package and torch are imported), where it overlaps the rest of the
imports and the set-up: SHA-256 and file reads release the GIL. Triton keeps the result (``functools.lru_cache``), so the run's own first launch finds it.

Knobs: ``MESHLIFT_PRECOMPILE_WORKERS`` (``0`` disables; default ``min(12, cores - 4)``, at least 1); the
cache location is Triton's (``TRITON_CACHE_DIR``, default ``~/.triton/cache``).
"""

from __future__ import annotations

import argparse
import ast
import atexit
import contextlib
import hashlib
import importlib
import inspect
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, List, Optional

from meshlift import _env

__all__ = ["Variant", "load_variants", "prime_in_background", "start", "record", "Precompile", "warm_state", "VARIANTS_PATH", "ENV_WORKERS"]

#: The recorded variant list shipped with the package.
VARIANTS_PATH = Path(__file__).with_name("variants.json")

#: Environment variable: number of worker processes (0 disables the warm-up).
ENV_WORKERS = "MESHLIFT_PRECOMPILE_WORKERS"


@dataclass(frozen=True)
class Variant:
    """One kernel variant as the Triton JIT passed it to ``triton.compile``.

    Attributes:
        kernel: ``"module:qualname"`` of the ``@triton.jit`` function (a kernel built inside a module's
            ``_kernels()`` factory has ``"_kernels.<locals>.name"``).
        signature: ``repr`` of the ``{param name: type}`` dict (``"*fp32"``, ``"i32"``, ``"constexpr"``).
        constexprs: ``repr`` of the ``{(index,): value}`` dict of constexpr values.
        attrs: ``repr`` of the ``{(index,): [[attr, value]]}`` specialisation dict (pointer alignment,
            integer divisibility), exactly as Triton hashes it.
        options: launch options that differ from the backend's defaults (``num_warps``, ``num_stages``).
        jobs: the runs that were recorded launching it (``"nvdiffrec"``, ``"milo"``, ``"demo"``...).
    """

    kernel: str
    signature: str
    constexprs: str
    attrs: str
    options: dict = field(default_factory=dict)
    jobs: tuple = ()

    def key(self) -> tuple:
        return (self.kernel, self.signature, self.constexprs, self.attrs, json.dumps(self.options, sort_keys=True))

    @classmethod
    def from_row(cls, r: dict) -> "Variant":
        """From a row of variants.json (``jobs``) or of :func:`record` (one ``job``)."""
        jobs = r["jobs"] if "jobs" in r else ([r["job"]] if r.get("job") else [])
        return cls(r["kernel"], r["signature"], r["constexprs"], r["attrs"], dict(r.get("options", {})), tuple(jobs))

    def to_row(self) -> dict:
        return {"kernel": self.kernel, "signature": self.signature, "constexprs": self.constexprs,
                "attrs": self.attrs, "options": self.options, "jobs": list(self.jobs)}


def load_variants(job: Optional[str] = None, path: Path = VARIANTS_PATH) -> List[Variant]:
    """The recorded variants (all, or those of ``job``), in first-use order. A missing file gives []."""
    try:
        rows = json.loads(Path(path).read_text())["variants"]
    except FileNotFoundError:
        return []
    out = [Variant.from_row(r) for r in rows]
    return [v for v in out if job is None or job in v.jobs]


def resolve_kernel(name: str):
    """The ``@triton.jit`` function named ``"module:qualname"`` (a ``_kernels.<locals>.x`` name is looked up
    in what the module's cached ``_kernels()`` factory returns; under ``TRITON_INTERPRET=1`` that is Triton's
    interpreted function). Raises LookupError if it is gone."""
    module_name, qualname = name.split(":", 1)
    module = importlib.import_module(module_name)
    if ".<locals>." in qualname:
        factory, _, leaf = qualname.partition(".<locals>.")
        made = getattr(module, factory)()
        made = made.values() if isinstance(made, dict) else made
        for obj in made:
            if getattr(obj, "__name__", None) == leaf and hasattr(obj, "arg_names"):
                return obj
        raise LookupError(f"{name}: {module_name}.{factory}() returns no kernel {leaf!r}")
    obj = getattr(module, qualname, None)
    if obj is None or not hasattr(obj, "arg_names"):
        raise LookupError(f"{name}: no @triton.jit function {qualname!r} in {module_name}")
    return obj


def compile_variant(v: Variant, target, build_launcher: bool = False) -> None:
    """Compile ``v`` for ``target`` (a ``triton.backends.compiler.GPUTarget``) into Triton's on-disk cache;
    with ``build_launcher`` also its host-side launcher (needs the CUDA driver library, not a GPU context)."""
    import triton
    from triton.compiler import ASTSource, make_backend

    fn = resolve_kernel(v.kernel)
    src = ASTSource(fn, ast.literal_eval(v.signature), ast.literal_eval(v.constexprs), ast.literal_eval(v.attrs))
    options = make_backend(target).parse_options(dict(v.options))
    kernel = triton.compile(src, target=target, options=options.__dict__)
    if build_launcher:
        # Triton <= 3.6 builds a C launcher per kernel signature with the host compiler at the first launch
        # (~0.2-0.3 s each, cached beside the binaries): build it here too. Newer Triton's launcher is generic.
        from triton.runtime import driver

        driver.active.launcher_cls(kernel.src, kernel.metadata)


def _arch(capability: tuple) -> int:
    return int(capability[0]) * 10 + int(capability[1])


def _marker(variants: List[Variant], arch: int) -> Path:
    """The file a completed warm-up leaves in the Triton cache dir, keyed by the Triton version, the target,
    the list and each kernel's own cache key (its source and the ``@triton.jit`` helpers it calls: an edited
    kernel needs a new warm-up). The keys are computed once per process; the run's first launches reuse them."""
    import triton

    from meshlift.kernels.triton_probe import triton_cache_dir

    h = hashlib.sha256(f"{triton.__version__}|cuda:{arch}:{_WARP}".encode())
    for v in variants:
        h.update(repr(v.key()).encode())
    for name in sorted({v.kernel for v in variants}):
        fn = resolve_kernel(name)  # under the interpreter (tests) there is no cache key: its source stands in
        h.update(str(getattr(fn, "cache_key", None) or inspect.getsource(fn.fn)).encode())

    return triton_cache_dir() / f"meshlift-precompiled-{h.hexdigest()[:20]}"


#: Warp size of the CUDA targets (part of Triton's ``GPUTarget``).
_WARP = 32

#: The handle started in this process, by job (a second ``start`` while its workers run returns None).
_RUNNING: dict = {}


def _part(marker: Path, worker: int, of: int) -> Path:
    """The file worker ``worker`` of ``of`` writes when it has finished its share."""
    return marker.with_name(f"{marker.name}.part{worker}of{of}")


def warm_state(job: str, capability: tuple) -> tuple:
    """``(number of recorded variants of job, whether this Triton cache holds them for a GPU of compute
    capability (major, minor))`` (the marker of a completed warm-up). For ``meshlift doctor``."""
    variants = load_variants(job)
    if not variants:
        return 0, False
    return len(variants), _marker(variants, _arch(capability)).exists()


def _default_workers() -> int:
    return max(1, min(12, (os.cpu_count() or 2) - 4))


class Precompile:
    """Handle of the running workers (from :func:`start`). :meth:`close` (also at interpreter exit) stops
    unfinished workers and writes the marker when all of them finished."""

    def __init__(self, procs: list, marker: Path):
        self.procs, self.marker = procs, marker
        atexit.register(self.close)

    @property
    def workers(self) -> int:
        return len(self.procs)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until every worker exited (or ``timeout`` s); True if all did."""
        end = None if timeout is None else time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(None if end is None else max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                return False
        return True

    def close(self) -> None:
        parts = [_part(self.marker, i, len(self.procs)) for i in range(len(self.procs))]
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        if parts and all(q.exists() for q in parts):
            try:
                summary = [json.loads(q.read_text()) for q in parts]
                self.marker.write_text(json.dumps({"workers": summary}) + "\n")
                for q in parts:
                    q.unlink()
            except OSError:
                pass
        self.procs = []


_PRIMER: list = []  # the priming thread of this process, once started


def _triton_key_function():
    """Triton's per-process install hash function (``triton.runtime.cache.triton_key`` from Triton 3.3;
    ``triton.compiler.compiler.triton_key`` before), or None."""
    for mod in ("triton.runtime.cache", "triton.compiler.compiler"):
        try:
            fn = getattr(importlib.import_module(mod), "triton_key", None)
        except Exception:  # noqa: BLE001 - no (usable) Triton: nothing to prime
            return None
        if callable(fn):
            return fn
    return None


def _prime() -> None:
    try:
        fn = _triton_key_function()
        if fn is not None:
            fn()
    except Exception:  # noqa: BLE001 - priming is an optimisation: the run computes it itself
        pass


def prime_in_background():
    """Start computing Triton's install hash (module docstring) on a daemon thread; returns the thread, or
    None when Triton is interpreted (``TRITON_INTERPRET=1``) or this process already started one. Never raises."""
    if _PRIMER or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return None
    import threading

    t = threading.Thread(target=_prime, name="meshlift-triton-key", daemon=True)
    _PRIMER.append(t)
    t.start()
    return t


def start(job: str, device, workers: Optional[int] = None, log=None) -> Optional[Precompile]:
    """Start compiling ``job``'s recorded kernel variants in background processes, if it can help; on CUDA
    also :func:`prime_in_background` (warm caches included).

    Args:
        job: the recorded job name (``"nvdiffrec"``, ``"milo"``).
        device: the run's ``torch.device``; anything but CUDA returns None.
        workers: worker processes (default env ``MESHLIFT_PRECOMPILE_WORKERS``, else ``min(12, cores - 4)``);
            0 returns None.
        log: optional ``callable(str)`` told how many variants are being compiled.

    Returns:
        A :class:`Precompile` handle, or None when nothing is started: not CUDA, Triton missing or
        interpreting, no recorded variants, workers = 0, or this cache already holds the variants (marker).
        Never raises for an environment reason: the run then compiles on first use as without it.
    """
    if getattr(device, "type", str(device)) != "cuda" or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return None
    prime_in_background()  # a warm cache too: the first launch need not hash Triton's install
    if workers is None:
        env = _env.get(ENV_WORKERS) or ""
        workers = int(env) if env.isdigit() else _default_workers()
        if env and not env.isdigit() and log is not None:
            log(f"{ENV_WORKERS}={env!r} is not a whole number >= 0 (0 = off); using {workers} workers")
    variants = load_variants(job)
    running = _RUNNING.get(job)
    if workers <= 0 or not variants or (running is not None and running.procs):
        return None  # nothing to do, or this process already warms this job's variants
    try:
        import torch

        from meshlift.kernels.choice import triton_importable

        if not triton_importable():
            return None
        arch = _arch(torch.cuda.get_device_capability(device))
        marker = _marker(variants, arch)
        if marker.exists():
            return None
        marker.parent.mkdir(parents=True, exist_ok=True)
    except Exception:
        return None
    workers = min(workers, len(variants))
    # the workers import this package from where this process did (also when it came from sys.path, not PYTHONPATH)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p]))
    procs = []
    for i in range(workers):
        cmd = [sys.executable, "-m", "meshlift.kernels.precompile", "--job", job, "--worker", str(i),
               "--of", str(workers), "--arch", str(arch), "--marker", str(marker)]
        try:
            procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, close_fds=True, env=env))
        except OSError:
            break
    if not procs:
        return None
    if log is not None:
        log(f"first run on this Triton cache: compiling {len(variants)} GPU kernel variants in {len(procs)} "
            f"background processes (later runs reuse {marker.parent})")
    handle = _RUNNING[job] = Precompile(procs, marker)
    return handle


def _worker(args) -> int:
    from triton.backends.compiler import GPUTarget

    try:
        os.nice(5)  # the run's own (host-bound) loop keeps its core
    except (OSError, AttributeError):
        pass
    target = GPUTarget("cuda", args.arch, _WARP)
    mine = load_variants(args.job)[args.worker::args.of]
    t0, ok, failed = time.perf_counter(), 0, []
    for v in mine:
        try:
            compile_variant(v, target, build_launcher=args.launchers)
            ok += 1
        except Exception as e:  # a stale record or a compiler problem: the run compiles it itself
            failed.append(f"{v.kernel}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
    if args.marker:
        summary = {"compiled": ok, "failed": failed, "s": round(time.perf_counter() - t0, 2)}
        _part(Path(args.marker), args.worker, args.of).write_text(json.dumps(summary))
    return 0


@contextlib.contextmanager
def record(path, job: str):
    """Context manager: record every ``triton.compile`` the JIT makes in this process as :class:`Variant` rows
    (JSON lines appended to ``path``, with ``job`` and the seconds it took). Used on a GPU by
    ``benchmarks/record_kernel_variants.py`` to (re)build ``variants.json``."""
    import triton
    import triton.compiler
    import triton.compiler.compiler as cc
    from triton.compiler import make_backend

    saved = (cc.compile, getattr(triton.compiler, "compile", None), getattr(triton, "compile", None))
    orig = cc.compile
    with Path(path).open("a") as out:

        def compile_and_record(src, target=None, options=None, **kw):
            t0 = time.perf_counter()
            kernel = orig(src, target=target, options=options, **kw)
            fn = getattr(src, "fn", None)
            if fn is None or not hasattr(fn, "cache_key"):
                return kernel
            defaults = make_backend(target).parse_options({}).__dict__
            opts = {k: v for k, v in (options or {}).items() if k in defaults and defaults[k] != v
                    and isinstance(v, (bool, int, float, str))}
            inner = getattr(fn, "fn", fn)
            row = {"kernel": f"{inner.__module__}:{inner.__qualname__}", "signature": repr(src.signature),
                   "constexprs": repr(getattr(src, "constants", {})), "attrs": repr(src.attrs), "options": opts,
                   "job": job, "s": round(time.perf_counter() - t0, 4)}
            out.write(json.dumps(row) + "\n")
            out.flush()
            return kernel

        cc.compile = compile_and_record
        triton.compiler.compile = compile_and_record
        if saved[2] is not None:
            triton.compile = compile_and_record
        try:
            yield
        finally:
            cc.compile = saved[0]
            if saved[1] is not None:
                triton.compiler.compile = saved[1]
            if saved[2] is not None:
                triton.compile = saved[2]


def merge_records(lines: Iterator[dict], path: Path = VARIANTS_PATH) -> int:
    """Merge recorded rows (from :class:`record`) into ``path``: keep the existing order, add new variants at
    the end, union the jobs. Returns the number of variants written."""
    try:
        existing = load_variants(path=path)
    except (json.JSONDecodeError, KeyError):
        existing = []
    by_key = {v.key(): v for v in existing}
    order = [v.key() for v in existing]
    for r in lines:
        v = Variant.from_row(r)
        k = v.key()
        if k in by_key:
            old = by_key[k]
            by_key[k] = Variant(*k[:4], old.options, tuple(sorted(set(old.jobs) | set(v.jobs))))
        else:
            by_key[k] = v
            order.append(k)
    rows = [by_key[k].to_row() for k in order]
    doc = {"about": "Triton kernel variants the shipped methods launch, in first-use order; recorded on a GPU "
                    "by benchmarks/record_kernel_variants.py, compiled at start-up by meshlift.kernels.precompile",
           "variants": rows}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    return len(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="meshlift's Triton warm-up worker (started by precompile.start)")
    ap.add_argument("--job", required=True)
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--of", type=int, default=1)
    ap.add_argument("--arch", type=int, required=True)
    ap.add_argument("--marker", default="")
    ap.add_argument("--no-launchers", dest="launchers", action="store_false",
                    help="compile the kernels only (no CUDA driver needed; the tests use it)")
    return _worker(ap.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
