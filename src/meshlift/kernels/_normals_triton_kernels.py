"""Triton kernels of :mod:`meshlift.kernels.normals_triton` (formulas and twin: its docstring).

Imported only by that module, on first use (``triton`` is imported here at module level, so set
``TRITON_INTERPRET=1`` before the first call to run them on the CPU interpreter).
"""

import triton
import triton.language as tl

from meshlift.kernels._rows_jit import ld3 as _ld3, ld3_index as _ld3_index, st3 as _st3, add3 as _add3


@triton.jit
def _norm(x, y, z):
    """``geometry.mesh_ops.safe_normalize``: ``x · rsqrt(max(x·x, 1e-20))``; unit vector, the factor, mask."""
    q = x * x + y * y + z * z
    s = 1.0 / tl.sqrt(tl.maximum(q, 1e-20))
    return x * s, y * s, z * s, s, q >= 1e-20


@triton.jit
def _norm_bwd(ux, uy, uz, s, live, gx, gy, gz):
    d = tl.where(live, gx * ux + gy * uy + gz * uz, 0.0)
    return (gx - ux * d) * s, (gy - uy * d) * s, (gz - uz * d) * s


@triton.jit
def _face(pos_ptr, tri_ptr, f, m):
    i0, i1, i2 = _ld3_index(tri_ptr, f, m)
    ax, ay, az = _ld3(pos_ptr, i0, m)
    bx, by, bz = _ld3(pos_ptr, i1, m)
    cx, cy, cz = _ld3(pos_ptr, i2, m)
    ex, ey, ez = bx - ax, by - ay, bz - az  # e1 = v1 − v0
    fx, fy, fz = cx - ax, cy - ay, cz - az  # e2 = v2 − v0
    return i0, i1, i2, ex, ey, ez, fx, fy, fz, ey * fz - ez * fy, ez * fx - ex * fz, ex * fy - ey * fx


@triton.jit(do_not_specialize=["n"])
def normals_face_fwd(pos_ptr, tri_ptr, face_n_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    f = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = f < n
    i0, i1, i2, ex, ey, ez, fx, fy, fz, cx, cy, cz = _face(pos_ptr, tri_ptr, f, m)
    ux, uy, uz, _, _ = _norm(cx, cy, cz)
    _st3(face_n_ptr, f, m, ux, uy, uz)
    _add3(acc_ptr, i0, m, cx, cy, cz)
    _add3(acc_ptr, i1, m, cx, cy, cz)
    _add3(acc_ptr, i2, m, cx, cy, cz)


@triton.jit(do_not_specialize=["n"])
def normals_vertex_fwd(acc_ptr, vn_ptr, n, BLOCK: tl.constexpr):
    v = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = v < n
    x, y, z = _ld3(acc_ptr, v, m)
    ok = (x * x + y * y + z * z) > 1e-20  # mesh_ops.DEGENERATE_SQ_LENGTH: an isolated vertex gets +z
    x = tl.where(ok, x, 0.0)
    y = tl.where(ok, y, 0.0)
    z = tl.where(ok, z, 1.0)
    ux, uy, uz, _, _ = _norm(x, y, z)
    _st3(vn_ptr, v, m, ux, uy, uz)


@triton.jit(do_not_specialize=["n"])
def normals_vertex_bwd(acc_ptr, g_vn_ptr, g_acc_ptr, n, BLOCK: tl.constexpr):
    v = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = v < n
    x, y, z = _ld3(acc_ptr, v, m)
    ok = (x * x + y * y + z * z) > 1e-20
    x = tl.where(ok, x, 0.0)
    y = tl.where(ok, y, 0.0)
    z = tl.where(ok, z, 1.0)
    ux, uy, uz, s, live = _norm(x, y, z)
    gx, gy, gz = _ld3(g_vn_ptr, v, m)
    dx, dy, dz = _norm_bwd(ux, uy, uz, s, live, gx, gy, gz)
    _st3(g_acc_ptr, v, m, tl.where(ok, dx, 0.0), tl.where(ok, dy, 0.0), tl.where(ok, dz, 0.0))


@triton.jit(do_not_specialize=["n"])
def normals_face_bwd(pos_ptr, tri_ptr, g_fn_ptr, g_acc_ptr, g_pos_ptr, n, FACE_GRAD: tl.constexpr,
                     BLOCK: tl.constexpr):
    f = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = f < n
    i0, i1, i2, ex, ey, ez, fx, fy, fz, cx, cy, cz = _face(pos_ptr, tri_ptr, f, m)
    # d L / d c: the three vertices' accumulators, plus the unit face normal's gradient
    dx, dy, dz = _ld3(g_acc_ptr, i0, m)
    ax, ay, az = _ld3(g_acc_ptr, i1, m)
    dx, dy, dz = dx + ax, dy + ay, dz + az
    ax, ay, az = _ld3(g_acc_ptr, i2, m)
    dx, dy, dz = dx + ax, dy + ay, dz + az
    if FACE_GRAD:
        ux, uy, uz, s, live = _norm(cx, cy, cz)
        gx, gy, gz = _ld3(g_fn_ptr, f, m)
        gx, gy, gz = _norm_bwd(ux, uy, uz, s, live, gx, gy, gz)
        dx, dy, dz = dx + gx, dy + gy, dz + gz
    # c = e1 × e2: d e1 = e2 × dc, d e2 = dc × e1
    d1x, d1y, d1z = fy * dz - fz * dy, fz * dx - fx * dz, fx * dy - fy * dx
    d2x, d2y, d2z = dy * ez - dz * ey, dz * ex - dx * ez, dx * ey - dy * ex
    _add3(g_pos_ptr, i1, m, d1x, d1y, d1z)
    _add3(g_pos_ptr, i2, m, d2x, d2y, d2z)
    _add3(g_pos_ptr, i0, m, -(d1x + d2x), -(d1y + d2y), -(d1z + d2z))
