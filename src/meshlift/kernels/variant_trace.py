"""Which Triton kernel variants a CPU run would compile on a GPU: launches traced under the interpreter, keyed
as the CUDA JIT keys them (issue 29: recompiles during 3DGS training; the start-up warm-up's list).

Why. Triton compiles one binary per *variant* of a kernel: its ``constexpr`` values plus a specialisation of
every other argument (pointer 16-byte alignment, integer divisibility by 16 or value 1, unless the parameter
is in ``do_not_specialize``). A size that changes during training (the Gaussian count, the number of
tile intersections) and reaches a specialised argument, or an offset view whose alignment follows a size,
makes new variants mid-run (0.1-4 s of host compile each on the H200). The start-up warm-up
(:mod:`meshlift.kernels.precompile`) compiles the variants recorded for a job in background processes, but
its records came from GPU runs only. Here the same keys come from the CPU.

Design. :func:`trace` (a context manager, ``TRITON_INTERPRET=1`` only) wraps the interpreter's launch and keeps,
per launch, the kernel's ``module:qualname`` and a *descriptor* of each argument: for a tensor its dtype and
``data_ptr() % 16`` (all the JIT's pointer specialisation reads), for a scalar its value. :func:`variant_rows`
turns descriptors into the rows :func:`meshlift.kernels.precompile.record` writes (kernel, signature,
constexprs, attrs, non-default options), by running **the installed Triton's own binder** of a
``JITFunction`` for a CUDA target over stand-in CPU tensors of the same dtype and alignment: the same code
path ``JITFunction.run`` takes before it compiles, so the keys are Triton's, whatever its version. The trace
is written as JSON lines (:func:`save`), so rows can be made by another Triton than the one that traced: the
GPU machine's version (``python -m meshlift.kernels.variant_trace rows TRACE.jsonl --job J --out REC.jsonl``
with that Triton importable, no GPU needed), then ``benchmarks/record_kernel_variants.py --merge REC.jsonl``.

Limits: a run on the CPU must take the same host path as on the GPU (the caller forces the Triton backend
and the fused SSIM; fused Adam is torch's on both and compiles nothing); sizes read back from the device
(intersection counts) are the CPU run's own, which matters only to specialised integers (none of the splat
kernels' counts: ``tests/test_variant_trace.py`` checks the variant set does not change with the count).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional

__all__ = ["Launch", "trace", "variant_rows", "save", "load"]


@dataclass(frozen=True)
class Launch:
    """One traced launch: ``kernel`` (``module:qualname``), ``args`` / ``kwargs`` descriptors (JSON-able:
    ``["t", dtype, ptr % 16]`` for a tensor, ``["s", value]`` for a scalar or None)."""

    kernel: str
    args: tuple
    kwargs: tuple  # ((name, descriptor), ...)

    def to_row(self) -> dict:
        return {"kernel": self.kernel, "args": [list(a) for a in self.args],
                "kwargs": [[k, list(v)] for k, v in self.kwargs]}

    @classmethod
    def from_row(cls, r: dict) -> "Launch":
        return cls(r["kernel"], tuple(tuple(a) for a in r["args"]), tuple((k, tuple(v)) for k, v in r["kwargs"]))


def _describe(x):
    import torch

    if isinstance(x, torch.Tensor):
        return ("t", str(x.dtype).replace("torch.", ""), int(x.data_ptr()) % 16)
    if x is None or isinstance(x, (bool, int, float, str)):
        return ("s", x)
    raise TypeError(f"variant_trace: cannot describe a launch argument of type {type(x).__name__}")


def _kernel_name(fn) -> str:
    inner = getattr(fn, "fn", fn)
    return f"{inner.__module__}:{inner.__qualname__}"


@contextlib.contextmanager
def trace(out: Optional[list] = None):
    """Collect a :class:`Launch` per interpreted kernel launch into ``out`` (a list, also yielded). The
    kernels still run. Raises RuntimeError unless Triton interprets (``TRITON_INTERPRET=1``)."""
    from meshlift.kernels.choice import interpreting

    if not interpreting():
        raise RuntimeError("variant_trace.trace needs TRITON_INTERPRET=1 (it wraps the interpreter's launch)")
    from triton.runtime.interpreter import InterpretedFunction

    launches = [] if out is None else out
    orig = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        launches.append(Launch(_kernel_name(self.fn), tuple(_describe(a) for a in args),
                               tuple((k, _describe(v)) for k, v in sorted(kwargs.items()))))
        return orig(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    try:
        yield launches
    finally:
        InterpretedFunction.run = orig


def _stand_in(desc, keep: list):
    """A CPU value the binder specialises like the traced argument."""
    import torch

    if desc[0] == "s":
        return desc[1]
    dtype = getattr(torch, desc[1])
    size = torch.empty((), dtype=dtype).element_size()
    base = torch.empty(64, dtype=torch.uint8)
    shift = (-base.data_ptr() + int(desc[2])) % 16
    keep.append(base)
    if shift % size:
        raise ValueError(f"variant_trace: a {desc[1]} pointer at offset {shift} mod 16 is misaligned")
    return base[shift:shift + 32].view(dtype)


_BINDERS: dict = {}


def _jit_twin(name: str):
    """A compiled-mode ``JITFunction`` of the kernel ``name`` (the interpreter's wrapper unwrapped)."""
    from triton.runtime.jit import JITFunction

    from meshlift.kernels.precompile import resolve_kernel

    fn = resolve_kernel(name)
    if isinstance(fn, JITFunction):
        return fn
    return JITFunction(fn.fn, **getattr(fn, "kwargs", {}))


def variant_rows(launches: Iterable[Launch], job: str = "", arch: int = 90) -> List[dict]:
    """Distinct variant rows (first-use order; the format of :func:`meshlift.kernels.precompile.record`) that
    ``launches`` would compile with the installed Triton on a CUDA GPU of compute capability ``arch``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    defaults = backend.parse_options({}).__dict__
    rows, seen = [], set()
    for ln in launches:
        if ln.kernel not in _BINDERS:
            jf = _jit_twin(ln.kernel)
            _BINDERS[ln.kernel] = (jf, create_function_from_signature(jf.signature, jf.params, backend))
        jf, binder = _BINDERS[ln.kernel]
        keep: list = []
        args = [_stand_in(a, keep) for a in ln.args]
        kwargs = {k: _stand_in(v, keep) for k, v in ln.kwargs}
        kwargs.setdefault("debug", False)
        bound, spec, opts = binder(*args, **kwargs)
        options, signature, constexprs, attrs = jf._pack_args(backend, kwargs, bound, spec, opts)
        o = options.__dict__ if hasattr(options, "__dict__") else dict(options)
        extra = {k: v for k, v in o.items() if k in defaults and defaults[k] != v and k != "debug"
                 and isinstance(v, (bool, int, float, str))}
        row = {"kernel": ln.kernel, "signature": repr(signature), "constexprs": repr(constexprs),
               "attrs": repr(attrs), "options": extra, "job": job}
        key = (row["kernel"], row["signature"], row["constexprs"], row["attrs"], json.dumps(extra, sort_keys=True))
        if key not in seen:
            seen.add(key)
            rows.append(row)
    return rows


def save(launches: Iterable[Launch], path) -> int:
    """Write the distinct launches as JSON lines; returns how many."""
    seen, n = set(), 0
    with Path(path).open("w") as f:
        for ln in launches:
            if ln in seen:
                continue
            seen.add(ln)
            f.write(json.dumps(ln.to_row()) + "\n")
            n += 1
    return n


def load(path) -> List[Launch]:
    return [Launch.from_row(json.loads(s)) for s in Path(path).read_text().splitlines() if s.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="variant rows (precompile record format) from a launch trace")
    ap.add_argument("cmd", choices=["rows"])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--job", required=True)
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    rows = variant_rows(load(a.trace), a.job, a.arch)
    with a.out.open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    import triton

    print(f"{len(rows)} variants (Triton {triton.__version__}, sm_{a.arch}) -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
