"""Triton JIT helpers of the watertight coverage test (``meshlift.kernels._common``: vertices snapped to 1/4096 px,
exact int64 edge functions), inlined by the raster kernels of :mod:`meshlift.kernels._raster_triton_kernels`.
Twins: ``_common.snap_to_subpixels`` and ``_common.fixed_edge_planes``.
"""

import triton
import triton.language as tl


@triton.jit
def _snap(X, Y):
    """``(SX, SY, ok)``: pixel-centre coordinates snapped to the watertight test's grid (int64, 1/4096 px:
    ``_common.snap_to_subpixels`` with its SUBPIXEL and GUARD_PX, the same rounded float ops) and whether both lie
    in its guard band."""
    ok = (tl.abs(X) <= 8192.0) & (tl.abs(Y) <= 8192.0)
    SX = tl.where(ok, tl.math.floor(X * 4096.0 + 0.5), 0.0).to(tl.int64)
    SY = tl.where(ok, tl.math.floor(Y * 4096.0 + 0.5), 0.0).to(tl.int64)
    return SX, SY, ok


@triton.jit
def _fixed_planes(X0, Y0, X1, Y1, X2, Y2):
    """Exact sign-normalised edge planes of a snapped triangle (int64), as ``_common.fixed_edge_planes``:
    ``(a0, b0, c0, a1, b1, c1, a2, b2, c2)`` over ``(PX, PY, 1)`` in 1/4096 px; zero area: ``c0 = -1``."""
    a0 = Y1 - Y2
    b0 = X2 - X1
    c0 = X1 * Y2 - Y1 * X2
    a1 = Y2 - Y0
    b1 = X0 - X2
    c1 = X2 * Y0 - Y2 * X0
    a2 = Y0 - Y1
    b2 = X1 - X0
    c2 = X0 * Y1 - Y0 * X1
    area = (a0 * X0 + c0) + b0 * Y0
    sg = tl.where(area > 0, 1, tl.where(area < 0, -1, 0)).to(tl.int64)
    c0s = tl.where(area == 0, -1, c0 * sg)
    return a0 * sg, b0 * sg, c0s, a1 * sg, b1 * sg, c1 * sg, a2 * sg, b2 * sg, c2 * sg


@triton.jit
def _fixed_cover(f0, f1, f2, f3, f4, f5, f6, f7, f8, qx, qy):
    """Coverage of the pixel centres ``(qx, qy)`` (int64, 1/4096 px) by the exact planes of :func:`_fixed_planes`."""
    return (((f0 * qx + f2) + f1 * qy) >= 0) & (((f3 * qx + f5) + f4 * qy) >= 0) & (((f6 * qx + f8) + f7 * qy) >= 0)
