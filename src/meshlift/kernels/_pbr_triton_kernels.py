"""Triton kernels of :mod:`meshlift.kernels.pbr_triton` (design, formulas and twins: its docstring).

Imported only by that module, on first use (``triton`` is imported here at module level, so set
``TRITON_INTERPRET=1`` before the first call to run them on the CPU interpreter). Every kernel works on
``[N, 3]`` rows (row-major, contiguous), one program per ``BLOCK`` rows, each component as its own vector.
"""

import triton
import triton.language as tl

from meshlift.kernels._rows_jit import ld3 as _ld3, st3 as _st3


@triton.jit
def _norm(x, y, z):
    """``safe_normalize``: ``x / sqrt(max(x·x, eps))``; returns the unit vector, 1/r and the clamp mask."""
    q = x * x + y * y + z * z
    r = tl.sqrt(tl.maximum(q, 1e-20))  # shading.bsdf.safe_normalize's clamp of |x|^2
    # correctly rounded divisions, as torch's (float32 ``/`` compiles to an approximate division on the GPU)
    return tl.div_rn(x, r), tl.div_rn(y, r), tl.div_rn(z, r), r, q >= 1e-20


@triton.jit
def _norm_bwd(ux, uy, uz, r, live, gx, gy, gz):
    """Gradient of ``safe_normalize`` at its output ``u``: ``(g − u (g·u)[|x|² ≥ eps]) / r``."""
    d = tl.where(live, gx * ux + gy * uy + gz * uz, 0.0)
    return (gx - ux * d) / r, (gy - uy * d) / r, (gz - uz * d) / r


# ---------------------------------------------------------------------------------------------------------
# shading normal (shading.normals.prepare_shading_normal)


@triton.jit
def _sn_terms(pos_ptr, view_ptr, pert_ptr, nrm_ptr, tng_ptr, geom_ptr, rows, m,
              TNG4: tl.constexpr, TS: tl.constexpr, PERT: tl.constexpr, TWO_SIDED: tl.constexpr,
              OPENGL: tl.constexpr):
    """The forward's intermediates (the backward reuses them): view ``v`` and normal ``n`` (unit, 1/r, mask),
    tangent ``t``, handedness ``w``, bitangent ``b``, the perturbation's ``qx, qz, yy, zp``, the shading
    normal ``s`` (unit, 1/r, mask; ``n`` without a perturbation), the geometric normal ``g`` and the
    two-sided sign. Without ``PERT`` the tangent-frame terms are unused placeholders."""
    px, py, pz = _ld3(pos_ptr, rows, m)
    cx, cy, cz = _ld3(view_ptr, rows, m)
    vx, vy, vz, vr, vl = _norm(cx - px, cy - py, cz - pz)
    a, b, c = _ld3(nrm_ptr, rows, m)
    nx, ny, nz, nr, nl = _norm(a, b, c)
    if PERT:
        tx = tl.load(tng_ptr + rows * TS, mask=m, other=1.0)
        ty = tl.load(tng_ptr + rows * TS + 1, mask=m, other=0.0)
        tz = tl.load(tng_ptr + rows * TS + 2, mask=m, other=0.0)
        tx, ty, tz, tr, tlv = _norm(tx, ty, tz)
        if TNG4:
            w = tl.where(tl.load(tng_ptr + rows * 4 + 3, mask=m, other=1.0) < 0, -1.0, 1.0)
        else:
            w = tl.zeros_like(tx) + 1.0
        # bitangent = w · normalize(n × t)
        bx, by, bz, br, bl = _norm(ny * tz - nz * ty, nz * tx - nx * tz, nx * ty - ny * tx)
        qx, qy, qz = _ld3(pert_ptr, rows, m)
        yy = qy if OPENGL else -qy
        zp = tl.maximum(qz, 0.0)
        s0x = tx * qx + (bx * w) * yy + nx * zp
        s0y = ty * qx + (by * w) * yy + ny * zp
        s0z = tz * qx + (bz * w) * yy + nz * zp
        sx, sy, sz, sr, sl = _norm(s0x, s0y, s0z)
    else:
        tx, ty, tz, tr, tlv = nx, ny, nz, nr, nl
        w = tl.zeros_like(nx) + 1.0
        bx, by, bz, br, bl = nx, ny, nz, nr, nl
        qx, qz, yy, zp = nx, nx, nx, nx
        sx, sy, sz, sr, sl = nx, ny, nz, nr, nl
    gx, gy, gz = _ld3(geom_ptr, rows, m)
    if TWO_SIDED:
        sgn = tl.where((gx * vx + gy * vy + gz * vz) > 0, 1.0, -1.0)
    else:
        sgn = tl.zeros_like(gx) + 1.0
    return (vx, vy, vz, vr, vl, nx, ny, nz, nr, nl, tx, ty, tz, tr, tlv, w, bx, by, bz, br, bl,
            qx, qz, yy, zp, sx, sy, sz, sr, sl, gx, gy, gz, sgn)


@triton.jit
def _sn_lerp_t(vx, vy, vz, fsx, fsy, fsz):
    """The bent-normal weight ``clamp(<v, s'> / 0.1, 0, 1)`` and its unclamped argument."""
    qv = (vx * fsx + vy * fsy + vz * fsz) / 0.1
    return tl.minimum(tl.maximum(qv, 0.0), 1.0), qv


@triton.jit(do_not_specialize=["n"])
def shading_normal_fwd(pos_ptr, view_ptr, pert_ptr, nrm_ptr, tng_ptr, geom_ptr, out_ptr, n,
                       TNG4: tl.constexpr, TS: tl.constexpr, PERT: tl.constexpr, TWO_SIDED: tl.constexpr,
                       OPENGL: tl.constexpr, BLOCK: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    m = rows < n
    (vx, vy, vz, vr, vl, nx, ny, nz, nr, nl, tx, ty, tz, tr, tlv, w, bx, by, bz, br, bl,
     qx, qz, yy, zp, sx, sy, sz, sr, sl, gx, gy, gz, sgn) = _sn_terms(
        pos_ptr, view_ptr, pert_ptr, nrm_ptr, tng_ptr, geom_ptr, rows, m, TNG4, TS, PERT, TWO_SIDED, OPENGL)
    sx, sy, sz, gx, gy, gz = sx * sgn, sy * sgn, sz * sgn, gx * sgn, gy * sgn, gz * sgn
    t, _ = _sn_lerp_t(vx, vy, vz, sx, sy, sz)
    _st3(out_ptr, rows, m, gx + t * (sx - gx), gy + t * (sy - gy), gz + t * (sz - gz))


@triton.jit(do_not_specialize=["n"])
def shading_normal_bwd(pos_ptr, view_ptr, pert_ptr, nrm_ptr, tng_ptr, geom_ptr, g_ptr,
                       g_pos_ptr, g_view_ptr, g_pert_ptr, g_nrm_ptr, g_tng_ptr, g_geom_ptr, n,
                       TNG4: tl.constexpr, TS: tl.constexpr, PERT: tl.constexpr, TWO_SIDED: tl.constexpr,
                       OPENGL: tl.constexpr, BLOCK: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    m = rows < n
    # ---- forward, keeping the intermediates
    (vx, vy, vz, vr, vl, nx, ny, nz, nr, nl, tx, ty, tz, tr, tlv, w, bx, by, bz, br, bl,
     qx, qz, yy, zp, sx, sy, sz, sr, sl, gx, gy, gz, sgn) = _sn_terms(
        pos_ptr, view_ptr, pert_ptr, nrm_ptr, tng_ptr, geom_ptr, rows, m, TNG4, TS, PERT, TWO_SIDED, OPENGL)
    fsx, fsy, fsz = sx * sgn, sy * sgn, sz * sgn
    fgx, fgy, fgz = gx * sgn, gy * sgn, gz * sgn
    t, qv = _sn_lerp_t(vx, vy, vz, fsx, fsy, fsz)
    # ---- backward of the bent-normal lerp: out = g' + t (s' − g')
    ox, oy, oz = _ld3(g_ptr, rows, m)
    dt = ox * (fsx - fgx) + oy * (fsy - fgy) + oz * (fsz - fgz)
    dgx, dgy, dgz = ox * (1.0 - t), oy * (1.0 - t), oz * (1.0 - t)
    dsx, dsy, dsz = ox * t, oy * t, oz * t
    dq = tl.where((qv >= 0.0) & (qv <= 1.0), dt, 0.0) / 0.1  # torch's clamp passes the gradient on [min, max]
    dsx, dsy, dsz = dsx + dq * vx, dsy + dq * vy, dsz + dq * vz
    dvx, dvy, dvz = dq * fsx, dq * fsy, dq * fsz
    # the two-sided flip (its selector is piecewise constant)
    dsx, dsy, dsz = dsx * sgn, dsy * sgn, dsz * sgn
    _st3(g_geom_ptr, rows, m, dgx * sgn, dgy * sgn, dgz * sgn)
    if PERT:
        d0x, d0y, d0z = _norm_bwd(sx, sy, sz, sr, sl, dsx, dsy, dsz)
        dpx = d0x * tx + d0y * ty + d0z * tz
        dyy = (d0x * bx + d0y * by + d0z * bz) * w
        dpz = tl.where(qz >= 0.0, d0x * nx + d0y * ny + d0z * nz, 0.0)
        _st3(g_pert_ptr, rows, m, dpx, dyy if OPENGL else -dyy, dpz)
        dnx, dny, dnz = d0x * zp, d0y * zp, d0z * zp
        dtx, dty, dtz = d0x * qx, d0y * qx, d0z * qx
        # b = w · normalize(n × t)
        dcx, dcy, dcz = _norm_bwd(bx, by, bz, br, bl, d0x * yy * w, d0y * yy * w, d0z * yy * w)
        # d(n × t)/dn: t × dc ; d(n × t)/dt: dc × n
        dnx += ty * dcz - tz * dcy
        dny += tz * dcx - tx * dcz
        dnz += tx * dcy - ty * dcx
        dtx += dcy * nz - dcz * ny
        dty += dcz * nx - dcx * nz
        dtz += dcx * ny - dcy * nx
        dtx, dty, dtz = _norm_bwd(tx, ty, tz, tr, tlv, dtx, dty, dtz)
        tl.store(g_tng_ptr + rows * TS, dtx, mask=m)
        tl.store(g_tng_ptr + rows * TS + 1, dty, mask=m)
        tl.store(g_tng_ptr + rows * TS + 2, dtz, mask=m)
        if TNG4:
            tl.store(g_tng_ptr + rows * 4 + 3, tl.zeros_like(dtx), mask=m)
    else:
        dnx, dny, dnz = dsx, dsy, dsz
    dnx, dny, dnz = _norm_bwd(nx, ny, nz, nr, nl, dnx, dny, dnz)
    _st3(g_nrm_ptr, rows, m, dnx, dny, dnz)
    dvx, dvy, dvz = _norm_bwd(vx, vy, vz, vr, vl, dvx, dvy, dvz)
    _st3(g_view_ptr, rows, m, dvx, dvy, dvz)
    _st3(g_pos_ptr, rows, m, -dvx, -dvy, -dvz)


# ---------------------------------------------------------------------------------------------------------
# split-sum shading (shading.light.EnvironmentLight.shade): the reflection vector and mip level before the
# two cube lookups, and the combination after them


@triton.jit
def _mip_level(r, lo, hi, nm2, SINGLE: tl.constexpr):
    """``EnvironmentLight.get_mip`` and its derivative d level / d roughness."""
    low = (tl.minimum(tl.maximum(r, lo), hi) - lo) / (hi - lo) * nm2
    high = (tl.minimum(tl.maximum(r, hi), 1.0) - hi) / (1.0 - hi) + nm2
    dlow = tl.where((r >= lo) & (r <= hi), nm2 / (hi - lo), 0.0)
    dhigh = tl.where((r >= hi) & (r <= 1.0), 1.0 / (1.0 - hi), 0.0)
    below = r < hi
    level = tl.where(below, low, high)
    dlevel = tl.where(below, dlow, dhigh)
    if SINGLE:  # one level: always 0 (no early return: one return per jit function)
        level = tl.zeros_like(r)
        dlevel = tl.zeros_like(r)
    return level, dlevel


@triton.jit(do_not_specialize=["n"])
def shade_prep_fwd(pos_ptr, nrm_ptr, view_ptr, ks_ptr, refl_ptr, level_ptr, n, lo, hi, nm2,
                   SINGLE: tl.constexpr, BLOCK: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    m = rows < n
    px, py, pz = _ld3(pos_ptr, rows, m)
    cx, cy, cz = _ld3(view_ptr, rows, m)
    wx, wy, wz, wr, wl = _norm(cx - px, cy - py, cz - pz)
    nx, ny, nz = _ld3(nrm_ptr, rows, m)
    d2 = 2.0 * (wx * nx + wy * ny + wz * nz)
    rx, ry, rz, rr, rl = _norm(d2 * nx - wx, d2 * ny - wy, d2 * nz - wz)
    _st3(refl_ptr, rows, m, rx, ry, rz)
    lv, _ = _mip_level(tl.load(ks_ptr + rows * 3 + 1, mask=m, other=0.5), lo, hi, nm2, SINGLE)
    tl.store(level_ptr + rows, lv, mask=m)


@triton.jit(do_not_specialize=["n"])
def shade_prep_bwd(pos_ptr, nrm_ptr, view_ptr, ks_ptr, g_refl_ptr, g_level_ptr,
                   g_pos_ptr, g_nrm_ptr, g_view_ptr, g_ks_ptr, n, lo, hi, nm2,
                   SINGLE: tl.constexpr, BLOCK: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    m = rows < n
    px, py, pz = _ld3(pos_ptr, rows, m)
    cx, cy, cz = _ld3(view_ptr, rows, m)
    wx, wy, wz, wr, wl = _norm(cx - px, cy - py, cz - pz)
    nx, ny, nz = _ld3(nrm_ptr, rows, m)
    d2 = 2.0 * (wx * nx + wy * ny + wz * nz)
    rx, ry, rz, rr, rl = _norm(d2 * nx - wx, d2 * ny - wy, d2 * nz - wz)
    gx, gy, gz = _ld3(g_refl_ptr, rows, m)
    dx, dy, dz = _norm_bwd(rx, ry, rz, rr, rl, gx, gy, gz)
    # r = 2 (w·n) n − w
    e = 2.0 * (dx * nx + dy * ny + dz * nz)
    dnx, dny, dnz = d2 * dx + e * wx, d2 * dy + e * wy, d2 * dz + e * wz
    dwx, dwy, dwz = e * nx - dx, e * ny - dy, e * nz - dz
    _st3(g_nrm_ptr, rows, m, dnx, dny, dnz)
    dwx, dwy, dwz = _norm_bwd(wx, wy, wz, wr, wl, dwx, dwy, dwz)
    _st3(g_view_ptr, rows, m, dwx, dwy, dwz)
    _st3(g_pos_ptr, rows, m, -dwx, -dwy, -dwz)
    _, dlv = _mip_level(tl.load(ks_ptr + rows * 3 + 1, mask=m, other=0.5), lo, hi, nm2, SINGLE)
    g_lv = tl.load(g_level_ptr + rows, mask=m, other=0.0)
    _st3(g_ks_ptr, rows, m, tl.zeros_like(dlv), g_lv * dlv, tl.zeros_like(dlv))


@triton.jit
def _lut_taps(lut_ptr, ndv, rough, m, LH, LW):
    """``shading.brdf_lut.lookup_brdf_lut``: bilinear, clamp-to-edge; the (A, B) pair and d/d(x, y)."""
    xr = ndv * LW - 0.5
    yr = rough * LH - 0.5
    x = tl.minimum(tl.maximum(xr, 0.0), LW - 1.0)
    y = tl.minimum(tl.maximum(yr, 0.0), LH - 1.0)
    x0 = tl.minimum(tl.maximum(tl.floor(x).to(tl.int32), 0), tl.maximum(LW - 2, 0))
    y0 = tl.minimum(tl.maximum(tl.floor(y).to(tl.int32), 0), tl.maximum(LH - 2, 0))
    fx = x - x0.to(tl.float32)
    fy = y - y0.to(tl.float32)
    x1 = tl.minimum(x0 + 1, LW - 1)
    y1 = tl.minimum(y0 + 1, LH - 1)
    i00 = (y0 * LW + x0) * 2
    i01 = (y0 * LW + x1) * 2
    i10 = (y1 * LW + x0) * 2
    i11 = (y1 * LW + x1) * 2
    a00 = tl.load(lut_ptr + i00, mask=m, other=0.0)
    a01 = tl.load(lut_ptr + i01, mask=m, other=0.0)
    a10 = tl.load(lut_ptr + i10, mask=m, other=0.0)
    a11 = tl.load(lut_ptr + i11, mask=m, other=0.0)
    b00 = tl.load(lut_ptr + i00 + 1, mask=m, other=0.0)
    b01 = tl.load(lut_ptr + i01 + 1, mask=m, other=0.0)
    b10 = tl.load(lut_ptr + i10 + 1, mask=m, other=0.0)
    b11 = tl.load(lut_ptr + i11 + 1, mask=m, other=0.0)
    a_top = a00 * (1.0 - fx) + a01 * fx
    a_bot = a10 * (1.0 - fx) + a11 * fx
    b_top = b00 * (1.0 - fx) + b01 * fx
    b_bot = b10 * (1.0 - fx) + b11 * fx
    fa = a_top * (1.0 - fy) + a_bot * fy
    fb = b_top * (1.0 - fy) + b_bot * fy
    # d/dx of the blend (through fx = x − x0, x0 piecewise constant) and through the clamp of x, times d x/d ndv
    kx = tl.where((xr >= 0.0) & (xr <= LW - 1.0), LW * 1.0, 0.0)
    ky = tl.where((yr >= 0.0) & (yr <= LH - 1.0), LH * 1.0, 0.0)
    dfa_dn = ((a01 - a00) * (1.0 - fy) + (a11 - a10) * fy) * kx
    dfb_dn = ((b01 - b00) * (1.0 - fy) + (b11 - b10) * fy) * kx
    dfa_dr = (a_bot - a_top) * ky
    dfb_dr = (b_bot - b_top) * ky
    return fa, fb, dfa_dn, dfb_dn, dfa_dr, dfb_dr


@triton.jit(do_not_specialize=["n"])
def shade_combine_fwd(pos_ptr, nrm_ptr, view_ptr, kd_ptr, ks_ptr, diff_ptr, spec_ptr, lut_ptr, out_ptr, n,
                      LH, LW, BLOCK: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    m = rows < n
    px, py, pz = _ld3(pos_ptr, rows, m)
    cx, cy, cz = _ld3(view_ptr, rows, m)
    wx, wy, wz, wr, wl = _norm(cx - px, cy - py, cz - pz)
    nx, ny, nz = _ld3(nrm_ptr, rows, m)
    ndv = tl.maximum(wx * nx + wy * ny + wz * nz, 1e-4)
    occ, rough, metal = _ld3(ks_ptr, rows, m)
    fa, fb, _, _, _, _ = _lut_taps(lut_ptr, ndv, rough, m, LH, LW)
    k0, k1, k2 = _ld3(kd_ptr, rows, m)
    e0, e1, e2 = _ld3(diff_ptr, rows, m)
    s0, s1, s2 = _ld3(spec_ptr, rows, m)
    base = (1.0 - metal) * 0.04
    keep = 1.0 - occ
    o0 = (e0 * (k0 * (1.0 - metal)) + s0 * ((base + k0 * metal) * fa + fb)) * keep
    o1 = (e1 * (k1 * (1.0 - metal)) + s1 * ((base + k1 * metal) * fa + fb)) * keep
    o2 = (e2 * (k2 * (1.0 - metal)) + s2 * ((base + k2 * metal) * fa + fb)) * keep
    _st3(out_ptr, rows, m, o0, o1, o2)


@triton.jit
def _combine_channel_bwd(g, keep, k, e, s, metal, base, fa, fb):
    """One colour channel of the combination's backward: (d kd, d diffuse, d spec, d metal, d fa, d fb, a)."""
    dcol = k * (1.0 - metal)
    scol = base + k * metal
    a = e * dcol + s * (scol * fa + fb)
    da = g * keep
    d_dcol = da * e
    d_scol = da * s * fa
    dk = d_dcol * (1.0 - metal) + d_scol * metal
    dm = -d_dcol * k + d_scol * (k - 0.04)
    return dk, da * dcol, da * (scol * fa + fb), dm, da * s * scol, da * s, a


@triton.jit(do_not_specialize=["n"])
def shade_combine_bwd(pos_ptr, nrm_ptr, view_ptr, kd_ptr, ks_ptr, diff_ptr, spec_ptr, lut_ptr, g_ptr,
                      g_pos_ptr, g_nrm_ptr, g_view_ptr, g_kd_ptr, g_ks_ptr, g_diff_ptr, g_spec_ptr, n,
                      LH, LW, BLOCK: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    m = rows < n
    px, py, pz = _ld3(pos_ptr, rows, m)
    cx, cy, cz = _ld3(view_ptr, rows, m)
    wx, wy, wz, wr, wl = _norm(cx - px, cy - py, cz - pz)
    nx, ny, nz = _ld3(nrm_ptr, rows, m)
    dot_wn = wx * nx + wy * ny + wz * nz
    ndv = tl.maximum(dot_wn, 1e-4)
    occ, rough, metal = _ld3(ks_ptr, rows, m)
    fa, fb, dfa_dn, dfb_dn, dfa_dr, dfb_dr = _lut_taps(lut_ptr, ndv, rough, m, LH, LW)
    k0, k1, k2 = _ld3(kd_ptr, rows, m)
    e0, e1, e2 = _ld3(diff_ptr, rows, m)
    s0, s1, s2 = _ld3(spec_ptr, rows, m)
    g0, g1, g2 = _ld3(g_ptr, rows, m)
    base = (1.0 - metal) * 0.04
    keep = 1.0 - occ
    dk0, de0, ds0, dm0, dfa0, dfb0, a0 = _combine_channel_bwd(g0, keep, k0, e0, s0, metal, base, fa, fb)
    dk1, de1, ds1, dm1, dfa1, dfb1, a1 = _combine_channel_bwd(g1, keep, k1, e1, s1, metal, base, fa, fb)
    dk2, de2, ds2, dm2, dfa2, dfb2, a2 = _combine_channel_bwd(g2, keep, k2, e2, s2, metal, base, fa, fb)
    _st3(g_kd_ptr, rows, m, dk0, dk1, dk2)
    _st3(g_diff_ptr, rows, m, de0, de1, de2)
    _st3(g_spec_ptr, rows, m, ds0, ds1, ds2)
    dfa = dfa0 + dfa1 + dfa2
    dfb = dfb0 + dfb1 + dfb2
    d_occ = -(g0 * a0 + g1 * a1 + g2 * a2)
    d_rough = dfa * dfa_dr + dfb * dfb_dr
    _st3(g_ks_ptr, rows, m, d_occ, d_rough, dm0 + dm1 + dm2)
    d_dot = tl.where(dot_wn >= 1e-4, dfa * dfa_dn + dfb * dfb_dn, 0.0)
    _st3(g_nrm_ptr, rows, m, d_dot * wx, d_dot * wy, d_dot * wz)
    dwx, dwy, dwz = _norm_bwd(wx, wy, wz, wr, wl, d_dot * nx, d_dot * ny, d_dot * nz)
    _st3(g_view_ptr, rows, m, dwx, dwy, dwz)
    _st3(g_pos_ptr, rows, m, -dwx, -dwy, -dwz)
