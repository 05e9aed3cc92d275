"""Every Triton kernel leaves its per-step counts unspecialised.

Triton compiles a new variant of a kernel whenever an integer argument changes its divisibility by 16 (or
becomes 1), unless the argument is listed in ``do_not_specialize``. Counts that change from step to step
(elements, vertices, triangles, Gaussians, intersections, strides over them) must be listed, or a training
run pays a compile (a second or more) at random steps: the H200 runs of 2026-12-01 measured it twice (the
rasterizer's pass 1, 770 ms/step; the antialias kernels' vertex count, 169 ms/step). This test reads the
decorators' arguments (plain or under ``TRITON_INTERPRET=1``)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

pytest.importorskip("triton")

import meshlift.kernels as kernels_pkg  # noqa: E402

#: Argument names that hold a count (or a stride over one) that varies between calls of one run.
VARYING = {"n", "N", "V", "T", "E", "M", "total", "n_isect", "n_tiles", "vstride", "astride", "t_lo", "t_hi"}
#: Kernels whose argument of such a name is fixed within a run, with the reason.
FIXED = {"_raster_triton_kernels._interp_fwd_kernel": {"N"}}  # N = pixels of the batch (B·H·W)
#: Helpers with a BLOCK constexpr that are only called from a launched kernel (inlined: the launched kernel's
#: arguments decide the specialisation), with that kernel.
INLINED = {"_adam_triton_kernels._adam_seg": "adam6 (n0..n5 unspecialised)"}


def _kernels():
    for info in pkgutil.iter_modules(kernels_pkg.__path__):
        if not (info.name.startswith("_") and (info.name.endswith("_kernels") or info.name.endswith("_jit"))):
            continue
        mod = importlib.import_module(f"meshlift.kernels.{info.name}")
        for name, obj in vars(mod).items():
            if hasattr(obj, "arg_names") and (hasattr(obj, "kwargs") or hasattr(obj, "params")):
                yield f"{info.name}.{name}", obj


def _unspecialised(fn) -> set:
    if hasattr(fn, "params"):  # triton.runtime.jit.JITFunction
        return {p.name for p in fn.params if p.do_not_specialize}
    names = (fn.kwargs or {}).get("do_not_specialize") or []  # InterpretedFunction keeps the decorator's kwargs
    return {fn.arg_names[i] if isinstance(i, int) else i for i in names}


def test_kernels_found():
    assert sum(1 for _ in _kernels()) > 30


def test_varying_counts_are_not_specialised():
    missing = []
    for qual, fn in _kernels():
        called_with = set(fn.arg_names) & VARYING
        if not called_with:
            continue
        # helpers (called from other kernels, never launched) are inlined: only launched kernels specialise,
        # and only launched kernels take a BLOCK-like constexpr here
        if not any(a.startswith("BLOCK") or a in ("TS", "TILE") for a in fn.arg_names):
            continue
        if qual in INLINED:
            continue
        lacking = called_with - _unspecialised(fn) - FIXED.get(qual, set())
        if lacking:
            missing.append(f"{qual}: {sorted(lacking)}")
    assert not missing, "add these to do_not_specialize: " + "; ".join(missing)
