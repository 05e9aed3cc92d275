"""Triton kernels of :mod:`meshlift.kernels.tangents_triton` (formulas and twin: its docstring).

Imported only by that module, on first use (``triton`` is imported here at module level, so set
``TRITON_INTERPRET=1`` before the first call to run them on the CPU interpreter). Constants: ``1e-20`` is
``mesh_ops.DEGENERATE_SQ_LENGTH`` (``safe_normalize``'s floor and the empty-group test), ``1e-14`` is
``mesh_ops.DEGENERATE_UV_AREA``.
"""

import triton
import triton.language as tl

from meshlift.kernels._normals_triton_kernels import _norm, _norm_bwd
from meshlift.kernels._rows_jit import ld3 as _ld3, ld3_index as _ld3_index, st3 as _st3, add3 as _add3


@triton.jit
def _atan01(r):
    """``atan(r)`` for ``r`` in ``[0, 1]`` (Cephes ``atanf``: reduction at tan(π/8), degree-9 odd polynomial;
    ~1e-7 relative error)."""
    big = r > 0.4142135623730950
    x = tl.where(big, (r - 1.0) / (r + 1.0), r)
    z = x * x
    p = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * x + x
    return tl.where(big, 0.7853981633974483 + p, p)


@triton.jit
def _atan2_pos(s, c):
    """``atan2(s, c)`` for ``s ≥ 0`` (result in ``[0, π]``; 0 when both are 0, as torch at ``(0, +0)``)."""
    ac = tl.abs(c)
    hi = tl.maximum(s, ac)
    lo = tl.minimum(s, ac)
    t = _atan01(lo / tl.where(hi > 0.0, hi, 1.0))
    t = tl.where(s > ac, 1.5707963267948966 - t, t)
    return tl.where(c < 0.0, 3.141592653589793 - t, t)


@triton.jit
def _cross(ax, ay, az, bx, by, bz):
    return ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx


@triton.jit
def _dot(ax, ay, az, bx, by, bz):
    return ax * bx + ay * by + az * bz


@triton.jit
def _angle_fwd(ax, ay, az, bx, by, bz):
    """``mesh_ops._corner_angles`` of one corner: ``atan2(|â × b̂|, â · b̂)`` of its two (raw) edges.

    ``â × b̂`` is evaluated as ``(â − b̂) × b̂``: the same vector, but exactly 0 when ``â = b̂`` or ``b̂ = 0`` (the
    corners of a collapsed triangle) even where the compiler fuses ``x y − z w`` into an FMA, which would leave
    a rounding-size angle there; with ``T_f = 0`` on such a face that angle meets ``safe_normalize``'s 1e10
    floor factor in the backward pass (the float32 twin's noise at collapsed UV-sphere poles)."""
    ux, uy, uz, _, _ = _norm(ax, ay, az)
    vx, vy, vz, _, _ = _norm(bx, by, bz)
    wx, wy, wz = _cross(ux - vx, uy - vy, uz - vz, vx, vy, vz)  # = â × b̂; exactly 0 for â = b̂ (see _angle_fwd)
    return _atan2_pos(tl.sqrt(_dot(wx, wy, wz, wx, wy, wz)), _dot(ux, uy, uz, vx, vy, vz))


@triton.jit
def _angle_bwd(ax, ay, az, bx, by, bz, dth):
    """Gradient of :func:`_angle_fwd` w.r.t. the two raw edges: ``dθ = (c ds − s dc) / (s² + c²)`` with
    ``s = |w|``, ``w = â × b̂``, ``c = â · b̂``; ``ds/dw = w / s`` (0 at ``s = 0``, as torch's norm);
    ``dâ = b̂ × dw + dc b̂``, ``db̂ = dw × â + dc â``; then through both normalisations."""
    ux, uy, uz, su, lu = _norm(ax, ay, az)
    vx, vy, vz, sv, lv = _norm(bx, by, bz)
    wx, wy, wz = _cross(ux - vx, uy - vy, uz - vz, vx, vy, vz)
    s = tl.sqrt(_dot(wx, wy, wz, wx, wy, wz))
    c = _dot(ux, uy, uz, vx, vy, vz)
    q = s * s + c * c
    q = tl.where(q > 0.0, q, 1.0)
    ds = dth * c / q
    dc = -dth * s / q
    k = tl.where(s > 0.0, ds / tl.where(s > 0.0, s, 1.0), 0.0)
    dwx, dwy, dwz = wx * k, wy * k, wz * k
    dux, duy, duz = _cross(vx, vy, vz, dwx, dwy, dwz)
    dvx, dvy, dvz = _cross(dwx, dwy, dwz, ux, uy, uz)
    dux, duy, duz = dux + dc * vx, duy + dc * vy, duz + dc * vz
    dvx, dvy, dvz = dvx + dc * ux, dvy + dc * uy, dvz + dc * uz
    dax, day, daz = _norm_bwd(ux, uy, uz, su, lu, dux, duy, duz)
    dbx, dby, dbz = _norm_bwd(vx, vy, vz, sv, lv, dvx, dvy, dvz)
    return dax, day, daz, dbx, dby, dbz


@triton.jit
def _uv_den(tex_ptr, ttri_ptr, f, m):
    """The face's UV derivatives: ``Δv₁, Δv₂`` (internal v) and ``den = Δu₁ Δv₂ − Δv₁ Δu₂``."""
    j0, j1, j2 = _ld3_index(ttri_ptr, f, m)
    u0 = tl.load(tex_ptr + j0 * 2, mask=m, other=0.0)
    w0 = tl.load(tex_ptr + j0 * 2 + 1, mask=m, other=0.0)
    du1 = tl.load(tex_ptr + j1 * 2, mask=m, other=0.0) - u0
    dv1 = tl.load(tex_ptr + j1 * 2 + 1, mask=m, other=0.0) - w0
    du2 = tl.load(tex_ptr + j2 * 2, mask=m, other=0.0) - u0
    dv2 = tl.load(tex_ptr + j2 * 2 + 1, mask=m, other=0.0) - w0
    return dv1, dv2, du1 * dv2 - dv1 * du2


@triton.jit
def _face(pos_ptr, tex_ptr, tri_ptr, ttri_ptr, f, m):
    """Corner positions, ``T_f = (Δp₁ Δv₂ − Δp₂ Δv₁) / den`` (den := 1 where unusable), the factors."""
    i0, i1, i2 = _ld3_index(tri_ptr, f, m)
    ax, ay, az = _ld3(pos_ptr, i0, m)
    bx, by, bz = _ld3(pos_ptr, i1, m)
    cx, cy, cz = _ld3(pos_ptr, i2, m)
    dv1, dv2, den = _uv_den(tex_ptr, ttri_ptr, f, m)
    usable = tl.abs(den) > 1e-14
    den = tl.where(usable, den, 1.0)
    tx = ((bx - ax) * dv2 - (cx - ax) * dv1) / den
    ty = ((by - ay) * dv2 - (cy - ay) * dv1) / den
    tz = ((bz - az) * dv2 - (cz - az) * dv1) / den
    return i0, i1, i2, ax, ay, az, bx, by, bz, cx, cy, cz, tx, ty, tz, usable, dv1, dv2, den


@triton.jit
def _corner_fwd(nrm_ptr, ntri_ptr, gi_ptr, acc_ptr, f, k, m, px, py, pz, qx, qy, qz, rx, ry, rz, tx, ty, tz,
                usable):
    """Corner ``k`` at ``p`` (next corners ``q``, ``r``): ``acc[gi] += normalize(T_f − (T_f·n̂) n̂) · θ``."""
    ni = tl.load(ntri_ptr + f * 3 + k, mask=m, other=0).to(tl.int64)
    g = tl.load(gi_ptr + f * 3 + k, mask=m, other=0).to(tl.int64)
    nx, ny, nz = _ld3(nrm_ptr, ni, m)
    nx, ny, nz, _, _ = _norm(nx, ny, nz)
    d = _dot(tx, ty, tz, nx, ny, nz)
    ux, uy, uz, _, _ = _norm(tx - d * nx, ty - d * ny, tz - d * nz)
    th = _angle_fwd(qx - px, qy - py, qz - pz, rx - px, ry - py, rz - pz)
    wgt = tl.where(usable, th, 0.0)
    _add3(acc_ptr, g, m, ux * wgt, uy * wgt, uz * wgt)


@triton.jit(do_not_specialize=["n"])
def tangents_face_fwd(pos_ptr, tex_ptr, nrm_ptr, tri_ptr, ttri_ptr, ntri_ptr, gi_ptr, acc_ptr, n,
                      BLOCK: tl.constexpr):
    f = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = f < n
    _, _, _, ax, ay, az, bx, by, bz, cx, cy, cz, tx, ty, tz, usable, _, _, _ = _face(
        pos_ptr, tex_ptr, tri_ptr, ttri_ptr, f, m)
    _corner_fwd(nrm_ptr, ntri_ptr, gi_ptr, acc_ptr, f, 0, m, ax, ay, az, bx, by, bz, cx, cy, cz, tx, ty, tz, usable)
    _corner_fwd(nrm_ptr, ntri_ptr, gi_ptr, acc_ptr, f, 1, m, bx, by, bz, cx, cy, cz, ax, ay, az, tx, ty, tz, usable)
    _corner_fwd(nrm_ptr, ntri_ptr, gi_ptr, acc_ptr, f, 2, m, cx, cy, cz, ax, ay, az, bx, by, bz, tx, ty, tz, usable)


@triton.jit
def _group(tex_ptr, nrm_ptr, ttri_ptr, ntri_ptr, first_ptr, acc_ptr, g, m):
    """Everything the group's output depends on: its normal (raw row, unit, factor, mask, index), ``acc``,
    ``ok``, the handedness (1 where not ok), the axis ``a = (ex, ey, 0)`` of the fallback, the unit fallback
    (with its factor and mask), and the tangent before the final Gram–Schmidt."""
    c = tl.load(first_ptr + g, mask=m, other=0).to(tl.int64)
    ni = tl.load(ntri_ptr + c, mask=m, other=0).to(tl.int64)
    nx, ny, nz = _ld3(nrm_ptr, ni, m)
    nx, ny, nz, sn, ln = _norm(nx, ny, nz)
    _, _, den = _uv_den(tex_ptr, ttri_ptr, c // 3, m)
    w = tl.where(den < 0.0, 1.0, -1.0)  # file-space v = 1 − v flips the orientation
    ax, ay, az = _ld3(acc_ptr, g, m)
    ok = _dot(ax, ay, az, ax, ay, az) > 1e-20
    alt = tl.abs(nx) > 0.9  # mesh_ops._axis_tangent: the x axis, the y axis near ±x
    ex = tl.where(alt, 0.0, 1.0)
    ey = tl.where(alt, 1.0, 0.0)
    d = ex * nx + ey * ny
    bx, by, bz, sb, lb = _norm(ex - d * nx, ey - d * ny, -d * nz)
    tx = tl.where(ok, ax, bx)
    ty = tl.where(ok, ay, by)
    tz = tl.where(ok, az, bz)
    return ni, nx, ny, nz, sn, ln, ok, tl.where(ok, w, 1.0), ex, ey, bx, by, bz, sb, lb, tx, ty, tz


@triton.jit(do_not_specialize=["n"])
def tangents_group_fwd(tex_ptr, nrm_ptr, ttri_ptr, ntri_ptr, first_ptr, acc_ptr, out_ptr, n, BLOCK: tl.constexpr):
    g = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = g < n
    _, nx, ny, nz, _, _, _, w, _, _, _, _, _, _, _, tx, ty, tz = _group(
        tex_ptr, nrm_ptr, ttri_ptr, ntri_ptr, first_ptr, acc_ptr, g, m)
    d = _dot(tx, ty, tz, nx, ny, nz)
    ux, uy, uz, _, _ = _norm(tx - d * nx, ty - d * ny, tz - d * nz)
    tl.store(out_ptr + g * 4, ux, mask=m)
    tl.store(out_ptr + g * 4 + 1, uy, mask=m)
    tl.store(out_ptr + g * 4 + 2, uz, mask=m)
    tl.store(out_ptr + g * 4 + 3, w, mask=m)


@triton.jit(do_not_specialize=["n"])
def tangents_group_bwd(tex_ptr, nrm_ptr, ttri_ptr, ntri_ptr, first_ptr, acc_ptr, g_out_ptr, g_acc_ptr, g_nrm_ptr, n,
                       BLOCK: tl.constexpr):
    g = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = g < n
    ni, nx, ny, nz, sn, ln, ok, _, ex, ey, bx, by, bz, sb, lb, tx, ty, tz = _group(
        tex_ptr, nrm_ptr, ttri_ptr, ntri_ptr, first_ptr, acc_ptr, g, m)
    d = _dot(tx, ty, tz, nx, ny, nz)
    ux, uy, uz, su, lu = _norm(tx - d * nx, ty - d * ny, tz - d * nz)
    gx = tl.load(g_out_ptr + g * 4, mask=m, other=0.0)
    gy = tl.load(g_out_ptr + g * 4 + 1, mask=m, other=0.0)
    gz = tl.load(g_out_ptr + g * 4 + 2, mask=m, other=0.0)
    # u = t − (t·n) n: dt = du − n (n·du), dn = −(t·n) du − (n·du) t
    dux, duy, duz = _norm_bwd(ux, uy, uz, su, lu, gx, gy, gz)
    e = _dot(dux, duy, duz, nx, ny, nz)
    dnx, dny, dnz = -d * dux - e * tx, -d * duy - e * ty, -d * duz - e * tz
    dtx, dty, dtz = dux - e * nx, duy - e * ny, duz - e * nz
    _st3(g_acc_ptr, g, m, tl.where(ok, dtx, 0.0), tl.where(ok, dty, 0.0), tl.where(ok, dtz, 0.0))
    # the fallback b = normalize(a − (a·n) n): dn += −(a·n) db' − (n·db') a
    dbx, dby, dbz = _norm_bwd(bx, by, bz, sb, lb, tl.where(ok, 0.0, dtx), tl.where(ok, 0.0, dty),
                              tl.where(ok, 0.0, dtz))
    an = ex * nx + ey * ny
    e = _dot(dbx, dby, dbz, nx, ny, nz)
    dnx, dny, dnz = dnx - an * dbx - e * ex, dny - an * dby - e * ey, dnz - an * dbz
    # n = normalize(v_nrm row)
    dnx, dny, dnz = _norm_bwd(nx, ny, nz, sn, ln, dnx, dny, dnz)
    _add3(g_nrm_ptr, ni, m, dnx, dny, dnz)


@triton.jit
def _corner_bwd(nrm_ptr, ntri_ptr, gi_ptr, g_acc_ptr, g_nrm_ptr, f, k, m, px, py, pz, qx, qy, qz, rx, ry, rz,
                tx, ty, tz, usable):
    """Backward of :func:`_corner_fwd`: returns ``d T_f`` and the gradients of the corner's two raw edges
    ``q − p``, ``r − p``; scatters the normal's gradient into ``g_nrm``."""
    ni = tl.load(ntri_ptr + f * 3 + k, mask=m, other=0).to(tl.int64)
    g = tl.load(gi_ptr + f * 3 + k, mask=m, other=0).to(tl.int64)
    gx, gy, gz = _ld3(g_acc_ptr, g, m)
    nx, ny, nz = _ld3(nrm_ptr, ni, m)
    nx, ny, nz, sn, ln = _norm(nx, ny, nz)
    d = _dot(tx, ty, tz, nx, ny, nz)
    ux, uy, uz, su, lu = _norm(tx - d * nx, ty - d * ny, tz - d * nz)
    ax, ay, az, bx, by, bz = qx - px, qy - py, qz - pz, rx - px, ry - py, rz - pz
    th = _angle_fwd(ax, ay, az, bx, by, bz)
    wgt = tl.where(usable, th, 0.0)
    dth = tl.where(usable, _dot(gx, gy, gz, ux, uy, uz), 0.0)
    dux, duy, duz = _norm_bwd(ux, uy, uz, su, lu, gx * wgt, gy * wgt, gz * wgt)
    e = _dot(dux, duy, duz, nx, ny, nz)
    dnx, dny, dnz = _norm_bwd(nx, ny, nz, sn, ln, -d * dux - e * tx, -d * duy - e * ty, -d * duz - e * tz)
    _add3(g_nrm_ptr, ni, m, dnx, dny, dnz)
    dax, day, daz, dbx, dby, dbz = _angle_bwd(ax, ay, az, bx, by, bz, dth)
    return dux - e * nx, duy - e * ny, duz - e * nz, dax, day, daz, dbx, dby, dbz


@triton.jit(do_not_specialize=["n"])
def tangents_face_bwd(pos_ptr, tex_ptr, nrm_ptr, tri_ptr, ttri_ptr, ntri_ptr, gi_ptr, g_acc_ptr, g_pos_ptr,
                      g_nrm_ptr, n, BLOCK: tl.constexpr):
    f = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = f < n
    i0, i1, i2, ax, ay, az, bx, by, bz, cx, cy, cz, tx, ty, tz, usable, dv1, dv2, den = _face(
        pos_ptr, tex_ptr, tri_ptr, ttri_ptr, f, m)
    # corner 0 (edges p1 − p0, p2 − p0), corner 1 (p2 − p1, p0 − p1), corner 2 (p0 − p2, p1 − p2)
    t0x, t0y, t0z, e01x, e01y, e01z, e02x, e02y, e02z = _corner_bwd(
        nrm_ptr, ntri_ptr, gi_ptr, g_acc_ptr, g_nrm_ptr, f, 0, m, ax, ay, az, bx, by, bz, cx, cy, cz, tx, ty, tz,
        usable)
    t1x, t1y, t1z, e12x, e12y, e12z, e10x, e10y, e10z = _corner_bwd(
        nrm_ptr, ntri_ptr, gi_ptr, g_acc_ptr, g_nrm_ptr, f, 1, m, bx, by, bz, cx, cy, cz, ax, ay, az, tx, ty, tz,
        usable)
    t2x, t2y, t2z, e20x, e20y, e20z, e21x, e21y, e21z = _corner_bwd(
        nrm_ptr, ntri_ptr, gi_ptr, g_acc_ptr, g_nrm_ptr, f, 2, m, cx, cy, cz, ax, ay, az, bx, by, bz, tx, ty, tz,
        usable)
    # T_f = (Δp₁ Δv₂ − Δp₂ Δv₁) / den: dΔp₁ = dT Δv₂ / den, dΔp₂ = −dT Δv₁ / den
    k1 = dv2 / den
    k2 = -dv1 / den
    dtx, dty, dtz = t0x + t1x + t2x, t0y + t1y + t2y, t0z + t1z + t2z
    g1x = dtx * k1 + e01x - e12x - e10x + e21x
    g1y = dty * k1 + e01y - e12y - e10y + e21y
    g1z = dtz * k1 + e01z - e12z - e10z + e21z
    g2x = dtx * k2 + e02x + e12x - e20x - e21x
    g2y = dty * k2 + e02y + e12y - e20y - e21y
    g2z = dtz * k2 + e02z + e12z - e20z - e21z
    g0x = -(dtx * k1 + dtx * k2) - e01x - e02x + e10x + e20x
    g0y = -(dty * k1 + dty * k2) - e01y - e02y + e10y + e20y
    g0z = -(dtz * k1 + dtz * k2) - e01z - e02z + e10z + e20z
    _add3(g_pos_ptr, i0, m, g0x, g0y, g0z)
    _add3(g_pos_ptr, i1, m, g1x, g1y, g1z)
    _add3(g_pos_ptr, i2, m, g2x, g2y, g2z)
