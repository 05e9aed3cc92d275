"""Triton JIT kernels of Gaussian splatting, part 1: EWA projection (forward, backward) and spherical
harmonics (forward, backward). Imported only by :mod:`meshlift.kernels.splat_triton` (lazily, on first
use); see that module for the algorithms, launch wrappers and autograd Functions. Every kernel works on
flat, contiguous tensors; conventions: docs/conventions.md §11.
"""

import triton
import triton.language as tl

# Integer arguments that follow the Gaussian or intersection counts are marked ``do_not_specialize``: Triton
# would otherwise compile a new variant whenever such a count changes its divisibility by 16 (or equals 1),
# i.e. after densification steps and as the intersection count changes: the likely source of the
# multi-second training steps of the H200 run of 2026-12-01 (median step 7.6 ms, mean 90.6 ms).

from meshlift.kernels._splat_raster_jit import _ceil_f, _ellipse_count, _floor_f

@triton.jit
def _ceil_pos(x):
    t = x.to(tl.int32)
    return t + (t.to(x.dtype) < x).to(tl.int32)


# ------------------------------------------------------------------ projection forward
@triton.jit(do_not_specialize=["C", "N"])
def project_fwd(means, quats, scales, opac, w2c, Ks, out_m2, out_con, out_dep, out_rad, out_op, out_comp,
                out_cnt, out_pk, C, N, width, height, near, far, eps2d, radius_clip, tile_size, tiles_w, tiles_h,
                ANTIALIASED: tl.constexpr, BIN: tl.constexpr, ELLIPSE: tl.constexpr, BLOCK: tl.constexpr):
    """Projection; with ``BIN`` also each pair's tile count (as ``tile_bounds``, with ``ELLIPSE`` the tiles its
    ellipse reaches) into ``out_cnt`` and its float32 screen record (u, v, conic, opacity; as ``_pack_records``)
    into ``out_pk [C*N, 6]``."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < C * N
    c = i // N
    n = i % N
    mx = tl.load(means + n * 3 + 0, mask=m, other=0.0)
    my = tl.load(means + n * 3 + 1, mask=m, other=0.0)
    mz = tl.load(means + n * 3 + 2, mask=m, other=1.0)
    qw = tl.load(quats + n * 4 + 0, mask=m, other=1.0)
    qx = tl.load(quats + n * 4 + 1, mask=m, other=0.0)
    qy = tl.load(quats + n * 4 + 2, mask=m, other=0.0)
    qz = tl.load(quats + n * 4 + 3, mask=m, other=0.0)
    s0 = tl.load(scales + n * 3 + 0, mask=m, other=1.0)
    s1 = tl.load(scales + n * 3 + 1, mask=m, other=1.0)
    s2 = tl.load(scales + n * 3 + 2, mask=m, other=1.0)
    o = tl.load(opac + n, mask=m, other=0.0)
    wb = w2c + c * 16
    w00 = tl.load(wb + 0, mask=m, other=1.0)
    w01 = tl.load(wb + 1, mask=m, other=0.0)
    w02 = tl.load(wb + 2, mask=m, other=0.0)
    t0 = tl.load(wb + 3, mask=m, other=0.0)
    w10 = tl.load(wb + 4, mask=m, other=0.0)
    w11 = tl.load(wb + 5, mask=m, other=1.0)
    w12 = tl.load(wb + 6, mask=m, other=0.0)
    t1 = tl.load(wb + 7, mask=m, other=0.0)
    w20 = tl.load(wb + 8, mask=m, other=0.0)
    w21 = tl.load(wb + 9, mask=m, other=0.0)
    w22 = tl.load(wb + 10, mask=m, other=1.0)
    t2 = tl.load(wb + 11, mask=m, other=0.0)
    kb = Ks + c * 9
    fx = tl.load(kb + 0, mask=m, other=1.0)
    cx = tl.load(kb + 2, mask=m, other=0.0)
    fy = tl.load(kb + 4, mask=m, other=1.0)
    cy = tl.load(kb + 5, mask=m, other=0.0)
    # rotation of the normalised quaternion
    qn = tl.maximum(tl.sqrt(qw * qw + qx * qx + qy * qy + qz * qz), 1e-12)
    qw = qw / qn
    qx = qx / qn
    qy = qy / qn
    qz = qz / qn
    r00 = 1 - 2 * (qy * qy + qz * qz)
    r01 = 2 * (qx * qy - qw * qz)
    r02 = 2 * (qx * qz + qw * qy)
    r10 = 2 * (qx * qy + qw * qz)
    r11 = 1 - 2 * (qx * qx + qz * qz)
    r12 = 2 * (qy * qz - qw * qx)
    r20 = 2 * (qx * qz - qw * qy)
    r21 = 2 * (qy * qz + qw * qx)
    r22 = 1 - 2 * (qx * qx + qy * qy)
    # M = R diag(s); world covariance = M M^T
    a00 = r00 * s0
    a01 = r01 * s1
    a02 = r02 * s2
    a10 = r10 * s0
    a11 = r11 * s1
    a12 = r12 * s2
    a20 = r20 * s0
    a21 = r21 * s1
    a22 = r22 * s2
    # B = W M; camera covariance = B B^T
    b00 = w00 * a00 + w01 * a10 + w02 * a20
    b01 = w00 * a01 + w01 * a11 + w02 * a21
    b02 = w00 * a02 + w01 * a12 + w02 * a22
    b10 = w10 * a00 + w11 * a10 + w12 * a20
    b11 = w10 * a01 + w11 * a11 + w12 * a21
    b12 = w10 * a02 + w11 * a12 + w12 * a22
    b20 = w20 * a00 + w21 * a10 + w22 * a20
    b21 = w20 * a01 + w21 * a11 + w22 * a21
    b22 = w20 * a02 + w21 * a12 + w22 * a22
    c00 = b00 * b00 + b01 * b01 + b02 * b02
    c01 = b00 * b10 + b01 * b11 + b02 * b12
    c02 = b00 * b20 + b01 * b21 + b02 * b22
    c11 = b10 * b10 + b11 * b11 + b12 * b12
    c12 = b10 * b20 + b11 * b21 + b12 * b22
    c22 = b20 * b20 + b21 * b21 + b22 * b22
    px = w00 * mx + w01 * my + w02 * mz + t0
    py = w10 * mx + w11 * my + w12 * mz + t1
    pz = w20 * mx + w21 * my + w22 * mz + t2
    in_depth = (pz >= near) & (pz <= far)
    zs = tl.where(in_depth, pz, 1.0)
    rz = 1.0 / zs
    tanx = 0.5 * width / fx
    tany = 0.5 * height / fy
    limxp = (width - cx) / fx + 0.3 * tanx
    limxn = cx / fx + 0.3 * tanx
    limyp = (height - cy) / fy + 0.3 * tany
    limyn = cy / fy + 0.3 * tany
    tx = zs * tl.minimum(tl.maximum(px * rz, -limxn), limxp)
    ty = zs * tl.minimum(tl.maximum(py * rz, -limyn), limyp)
    j00 = fx * rz
    j02 = -fx * tx * rz * rz
    j11 = fy * rz
    j12 = -fy * ty * rz * rz
    v00 = j00 * j00 * c00 + 2 * j00 * j02 * c02 + j02 * j02 * c22
    v01 = j00 * j11 * c01 + j00 * j12 * c02 + j02 * j11 * c12 + j02 * j12 * c22
    v11 = j11 * j11 * c11 + 2 * j11 * j12 * c12 + j12 * j12 * c22
    det0 = v00 * v11 - v01 * v01
    va = v00 + eps2d
    vc = v11 + eps2d
    det = va * vc - v01 * v01
    ok = in_depth & (det > 0)
    det_s = tl.where(ok, det, 1.0)
    comp = tl.sqrt(tl.maximum(det0 / det_s, 0.0))
    u = fx * px * rz + cx
    v = fy * py * rz + cy
    op = o
    if ANTIALIASED:
        op = o * comp
    ok = ok & (op >= 1.0 / 255.0)
    ext = tl.minimum(tl.sqrt(2.0 * tl.log(tl.maximum(op, 1.0 / 255.0) * 255.0)), 3.33)
    rxf = ext * tl.sqrt(tl.maximum(va, 0.0))
    ryf = ext * tl.sqrt(tl.maximum(vc, 0.0))
    ok = ok & (rxf < 1e30) & (ryf < 1e30) & (u == u) & (v == v)  # finite checks (NaN != NaN)
    rxf = tl.where(ok, rxf, 0.0)
    ryf = tl.where(ok, ryf, 0.0)
    rx = _ceil_pos(rxf)
    ry = _ceil_pos(ryf)
    ok = ok & ~((rx <= radius_clip) & (ry <= radius_clip))
    ok = ok & ~((u + rx <= 0) | (u - rx >= width) | (v + ry <= 0) | (v - ry >= height))
    tl.store(out_m2 + i * 2 + 0, u, mask=m)
    tl.store(out_m2 + i * 2 + 1, v, mask=m)
    tl.store(out_con + i * 3 + 0, vc / det_s, mask=m)
    tl.store(out_con + i * 3 + 1, -v01 / det_s, mask=m)
    tl.store(out_con + i * 3 + 2, va / det_s, mask=m)
    tl.store(out_dep + i, pz, mask=m)
    tl.store(out_rad + i * 2 + 0, tl.where(ok, rx, 0), mask=m)
    tl.store(out_rad + i * 2 + 1, tl.where(ok, ry, 0), mask=m)
    tl.store(out_op + i, op, mask=m)
    tl.store(out_comp + i, comp, mask=m)
    if BIN:
        # the same float32 arithmetic as tile_bounds / write_keys on the stored values
        ca = vc / det_s
        cb = -v01 / det_s
        cc = va / det_s
        rxs = tl.where(ok, rx, 0)
        rys = tl.where(ok, ry, 0)
        uf = u.to(tl.float32)
        vf = v.to(tl.float32)
        rxf2 = rxs.to(tl.float32)
        ryf2 = rys.to(tl.float32)
        ts = tile_size * 1.0
        x0 = tl.minimum(tl.maximum(_floor_f(uf - rxf2, ts), 0), tiles_w)
        x1 = tl.minimum(tl.maximum(_ceil_f(uf + rxf2, ts), 0), tiles_w)
        y0 = tl.minimum(tl.maximum(_floor_f(vf - ryf2, ts), 0), tiles_h)
        y1 = tl.minimum(tl.maximum(_ceil_f(vf + ryf2, ts), 0), tiles_h)
        vis = (rxs > 0) & (rys > 0)
        if ELLIPSE:  # the records' float32 values, as tile_bounds reads them
            cnt = _ellipse_count(uf, vf, ca.to(tl.float32), cb.to(tl.float32), cc.to(tl.float32),
                                 op.to(tl.float32), x0, x1, y0, y1, vis, ts)
        else:
            cnt = tl.where(vis, (x1 - x0) * (y1 - y0), 0)
        tl.store(out_cnt + i, cnt, mask=m)
        tl.store(out_pk + i * 6 + 0, uf, mask=m)
        tl.store(out_pk + i * 6 + 1, vf, mask=m)
        tl.store(out_pk + i * 6 + 2, ca.to(tl.float32), mask=m)
        tl.store(out_pk + i * 6 + 3, cb.to(tl.float32), mask=m)
        tl.store(out_pk + i * 6 + 4, cc.to(tl.float32), mask=m)
        tl.store(out_pk + i * 6 + 5, op.to(tl.float32), mask=m)

# ------------------------------------------------------------------ projection backward
@triton.jit(do_not_specialize=["C", "N"])
def project_bwd(means, quats, scales, opac, w2c, Ks, radii, g_m2, g_con, g_dep, g_op,
                o_gm, o_gq, o_gs, o_go, C, N, width, height, near, far, eps2d, S_M2, S_CON, S_OP,
                ANTIALIASED: tl.constexpr, BLOCK: tl.constexpr):
    """``S_M2``, ``S_CON``, ``S_OP``: row strides (elements) of the incoming gradients, so the slices of
    the compositing's gradient record are read in place."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < C * N
    c = i // N
    n = i % N
    valid = (tl.load(radii + i * 2, mask=m, other=0) > 0) & (tl.load(radii + i * 2 + 1, mask=m, other=0) > 0)
    mx = tl.load(means + n * 3 + 0, mask=m, other=0.0)
    my = tl.load(means + n * 3 + 1, mask=m, other=0.0)
    mz = tl.load(means + n * 3 + 2, mask=m, other=1.0)
    qw0 = tl.load(quats + n * 4 + 0, mask=m, other=1.0)
    qx0 = tl.load(quats + n * 4 + 1, mask=m, other=0.0)
    qy0 = tl.load(quats + n * 4 + 2, mask=m, other=0.0)
    qz0 = tl.load(quats + n * 4 + 3, mask=m, other=0.0)
    s0 = tl.load(scales + n * 3 + 0, mask=m, other=1.0)
    s1 = tl.load(scales + n * 3 + 1, mask=m, other=1.0)
    s2 = tl.load(scales + n * 3 + 2, mask=m, other=1.0)
    o = tl.load(opac + n, mask=m, other=0.0)
    wb = w2c + c * 16
    w00 = tl.load(wb + 0, mask=m, other=1.0)
    w01 = tl.load(wb + 1, mask=m, other=0.0)
    w02 = tl.load(wb + 2, mask=m, other=0.0)
    t0 = tl.load(wb + 3, mask=m, other=0.0)
    w10 = tl.load(wb + 4, mask=m, other=0.0)
    w11 = tl.load(wb + 5, mask=m, other=1.0)
    w12 = tl.load(wb + 6, mask=m, other=0.0)
    t1 = tl.load(wb + 7, mask=m, other=0.0)
    w20 = tl.load(wb + 8, mask=m, other=0.0)
    w21 = tl.load(wb + 9, mask=m, other=0.0)
    w22 = tl.load(wb + 10, mask=m, other=1.0)
    t2 = tl.load(wb + 11, mask=m, other=0.0)
    kb = Ks + c * 9
    fx = tl.load(kb + 0, mask=m, other=1.0)
    cx = tl.load(kb + 2, mask=m, other=0.0)
    fy = tl.load(kb + 4, mask=m, other=1.0)
    cy = tl.load(kb + 5, mask=m, other=0.0)
    gu = tl.load(g_m2 + i * S_M2 + 0, mask=m, other=0.0)
    gv = tl.load(g_m2 + i * S_M2 + 1, mask=m, other=0.0)
    gA = tl.load(g_con + i * S_CON + 0, mask=m, other=0.0)
    gB = tl.load(g_con + i * S_CON + 1, mask=m, other=0.0)
    gC = tl.load(g_con + i * S_CON + 2, mask=m, other=0.0)
    gdep = tl.load(g_dep + i, mask=m, other=0.0)
    gop = tl.load(g_op + i * S_OP, mask=m, other=0.0)
    # ---- recompute the forward
    qn = tl.maximum(tl.sqrt(qw0 * qw0 + qx0 * qx0 + qy0 * qy0 + qz0 * qz0), 1e-12)
    qw = qw0 / qn
    qx = qx0 / qn
    qy = qy0 / qn
    qz = qz0 / qn
    r00 = 1 - 2 * (qy * qy + qz * qz)
    r01 = 2 * (qx * qy - qw * qz)
    r02 = 2 * (qx * qz + qw * qy)
    r10 = 2 * (qx * qy + qw * qz)
    r11 = 1 - 2 * (qx * qx + qz * qz)
    r12 = 2 * (qy * qz - qw * qx)
    r20 = 2 * (qx * qz - qw * qy)
    r21 = 2 * (qy * qz + qw * qx)
    r22 = 1 - 2 * (qx * qx + qy * qy)
    a00 = r00 * s0
    a01 = r01 * s1
    a02 = r02 * s2
    a10 = r10 * s0
    a11 = r11 * s1
    a12 = r12 * s2
    a20 = r20 * s0
    a21 = r21 * s1
    a22 = r22 * s2
    b00 = w00 * a00 + w01 * a10 + w02 * a20
    b01 = w00 * a01 + w01 * a11 + w02 * a21
    b02 = w00 * a02 + w01 * a12 + w02 * a22
    b10 = w10 * a00 + w11 * a10 + w12 * a20
    b11 = w10 * a01 + w11 * a11 + w12 * a21
    b12 = w10 * a02 + w11 * a12 + w12 * a22
    b20 = w20 * a00 + w21 * a10 + w22 * a20
    b21 = w20 * a01 + w21 * a11 + w22 * a21
    b22 = w20 * a02 + w21 * a12 + w22 * a22
    c00 = b00 * b00 + b01 * b01 + b02 * b02
    c01 = b00 * b10 + b01 * b11 + b02 * b12
    c02 = b00 * b20 + b01 * b21 + b02 * b22
    c11 = b10 * b10 + b11 * b11 + b12 * b12
    c12 = b10 * b20 + b11 * b21 + b12 * b22
    c22 = b20 * b20 + b21 * b21 + b22 * b22
    px = w00 * mx + w01 * my + w02 * mz + t0
    py = w10 * mx + w11 * my + w12 * mz + t1
    pz = w20 * mx + w21 * my + w22 * mz + t2
    zs = tl.where(valid, pz, 1.0)
    rz = 1.0 / zs
    rz2 = rz * rz
    tanx = 0.5 * width / fx
    tany = 0.5 * height / fy
    limxp = (width - cx) / fx + 0.3 * tanx
    limxn = cx / fx + 0.3 * tanx
    limyp = (height - cy) / fy + 0.3 * tany
    limyn = cy / fy + 0.3 * tany
    xr = px * rz
    yr = py * rz
    inx = (xr >= -limxn) & (xr <= limxp)
    iny = (yr >= -limyn) & (yr <= limyp)
    tx = zs * tl.minimum(tl.maximum(xr, -limxn), limxp)
    ty = zs * tl.minimum(tl.maximum(yr, -limyn), limyp)
    j00 = fx * rz
    j02 = -fx * tx * rz2
    j11 = fy * rz
    j12 = -fy * ty * rz2
    v00 = j00 * j00 * c00 + 2 * j00 * j02 * c02 + j02 * j02 * c22
    v01 = j00 * j11 * c01 + j00 * j12 * c02 + j02 * j11 * c12 + j02 * j12 * c22
    v11 = j11 * j11 * c11 + 2 * j11 * j12 * c12 + j12 * j12 * c22
    va = v00 + eps2d
    vc = v11 + eps2d
    det = va * vc - v01 * v01
    det = tl.where(valid, det, 1.0)
    cA = vc / det
    cB = -v01 / det
    cC = va / det
    # ---- opacity / compensation
    go = gop
    ga = 0.0 * gop
    gb = 0.0 * gop
    gc = 0.0 * gop
    if ANTIALIASED:
        det0 = v00 * v11 - v01 * v01
        comp = tl.sqrt(tl.maximum(det0 / det, 0.0))
        go = gop * comp
        gcomp = gop * o
        gsc = tl.where(comp > 0, gcomp * 0.5 / tl.where(comp > 0, comp, 1.0), 0.0)
        omc = 1.0 - comp * comp
        ga = gsc * (omc * cA - eps2d / det)
        gc = gsc * (omc * cC - eps2d / det)
        gb = gsc * 2.0 * omc * cB
    # ---- conic = inverse(cov2d): V = -Ci G Ci, G = [[gA, gB/2], [gB/2, gC]]
    hB = 0.5 * gB
    p00 = cA * gA + cB * hB
    p01 = cA * hB + cB * gC
    p10 = cB * gA + cC * hB
    p11 = cB * hB + cC * gC
    ga += -(p00 * cA + p01 * cB)
    V01 = -(p00 * cB + p01 * cC)
    gc += -(p10 * cB + p11 * cC)
    V01 = V01 + 0.5 * gb
    # ---- cov2d = J Sc J^T
    U00 = j00 * j00 * ga
    U01 = j00 * j11 * V01
    U02 = j00 * (ga * j02 + V01 * j12)
    U11 = j11 * j11 * gc
    U12 = j11 * (V01 * j02 + gc * j12)
    U22 = ga * j02 * j02 + 2 * V01 * j02 * j12 + gc * j12 * j12
    e0 = ga * j00
    e1 = V01 * j11
    e2 = ga * j02 + V01 * j12
    f0 = V01 * j00
    f1 = gc * j11
    f2 = V01 * j02 + gc * j12
    gJ00 = 2 * (e0 * c00 + e1 * c01 + e2 * c02)
    gJ02 = 2 * (e0 * c02 + e1 * c12 + e2 * c22)
    gJ11 = 2 * (f0 * c01 + f1 * c11 + f2 * c12)
    gJ12 = 2 * (f0 * c02 + f1 * c12 + f2 * c22)
    rz3 = rz2 * rz
    gx = gu * fx * rz + tl.where(inx, -fx * rz2 * gJ02, 0.0)
    gy = gv * fy * rz + tl.where(iny, -fy * rz2 * gJ12, 0.0)
    gz = (-(gu * fx * px + gv * fy * py) * rz2 - fx * rz2 * gJ00 - fy * rz2 * gJ11
          + tl.where(inx, 2.0, 1.0) * fx * tx * rz3 * gJ02 + tl.where(iny, 2.0, 1.0) * fy * ty * rz3 * gJ12 + gdep)
    # means: W^T g_p
    gmx = w00 * gx + w10 * gy + w20 * gz
    gmy = w01 * gx + w11 * gy + w21 * gz
    gmz = w02 * gx + w12 * gy + w22 * gz
    # world covariance grad  Gs = W^T U W  (U symmetric)
    h00 = U00 * w00 + U01 * w10 + U02 * w20
    h01 = U00 * w01 + U01 * w11 + U02 * w21
    h02 = U00 * w02 + U01 * w12 + U02 * w22
    h10 = U01 * w00 + U11 * w10 + U12 * w20
    h11 = U01 * w01 + U11 * w11 + U12 * w21
    h12 = U01 * w02 + U11 * w12 + U12 * w22
    h20 = U02 * w00 + U12 * w10 + U22 * w20
    h21 = U02 * w01 + U12 * w11 + U22 * w21
    h22 = U02 * w02 + U12 * w12 + U22 * w22
    G00 = w00 * h00 + w10 * h10 + w20 * h20
    G01 = w00 * h01 + w10 * h11 + w20 * h21
    G02 = w00 * h02 + w10 * h12 + w20 * h22
    G11 = w01 * h01 + w11 * h11 + w21 * h21
    G12 = w01 * h02 + w11 * h12 + w21 * h22
    G22 = w02 * h02 + w12 * h12 + w22 * h22
    # Sigma = A A^T  ->  gA = 2 Gs A
    m00 = 2 * (G00 * a00 + G01 * a10 + G02 * a20)
    m01 = 2 * (G00 * a01 + G01 * a11 + G02 * a21)
    m02 = 2 * (G00 * a02 + G01 * a12 + G02 * a22)
    m10 = 2 * (G01 * a00 + G11 * a10 + G12 * a20)
    m11 = 2 * (G01 * a01 + G11 * a11 + G12 * a21)
    m12 = 2 * (G01 * a02 + G11 * a12 + G12 * a22)
    m20 = 2 * (G02 * a00 + G12 * a10 + G22 * a20)
    m21 = 2 * (G02 * a01 + G12 * a11 + G22 * a21)
    m22 = 2 * (G02 * a02 + G12 * a12 + G22 * a22)
    gs0 = r00 * m00 + r10 * m10 + r20 * m20
    gs1 = r01 * m01 + r11 * m11 + r21 * m21
    gs2 = r02 * m02 + r12 * m12 + r22 * m22
    R00 = m00 * s0
    R01 = m01 * s1
    R02 = m02 * s2
    R10 = m10 * s0
    R11 = m11 * s1
    R12 = m12 * s2
    R20 = m20 * s0
    R21 = m21 * s1
    R22 = m22 * s2
    gqw = 2 * (-qz * R01 + qy * R02 + qz * R10 - qx * R12 - qy * R20 + qx * R21)
    gqx = 2 * (qy * R01 + qz * R02 + qy * R10 - 2 * qx * R11 - qw * R12 + qz * R20 + qw * R21 - 2 * qx * R22)
    gqy = 2 * (-2 * qy * R00 + qx * R01 + qw * R02 + qx * R10 + qz * R12 - qw * R20 + qz * R21 - 2 * qy * R22)
    gqz = 2 * (-2 * qz * R00 - qw * R01 + qx * R02 + qw * R10 - 2 * qz * R11 + qy * R12 + qx * R20 + qy * R21)
    dot = gqw * qw + gqx * qx + gqy * qy + gqz * qz
    gqw = (gqw - dot * qw) / qn
    gqx = (gqx - dot * qx) / qn
    gqy = (gqy - dot * qy) / qn
    gqz = (gqz - dot * qz) / qn
    z = 0.0 * gop
    tl.store(o_gm + i * 3 + 0, tl.where(valid, gmx, z), mask=m)
    tl.store(o_gm + i * 3 + 1, tl.where(valid, gmy, z), mask=m)
    tl.store(o_gm + i * 3 + 2, tl.where(valid, gmz, z), mask=m)
    tl.store(o_gq + i * 4 + 0, tl.where(valid, gqw, z), mask=m)
    tl.store(o_gq + i * 4 + 1, tl.where(valid, gqx, z), mask=m)
    tl.store(o_gq + i * 4 + 2, tl.where(valid, gqy, z), mask=m)
    tl.store(o_gq + i * 4 + 3, tl.where(valid, gqz, z), mask=m)
    tl.store(o_gs + i * 3 + 0, tl.where(valid, gs0, z), mask=m)
    tl.store(o_gs + i * 3 + 1, tl.where(valid, gs1, z), mask=m)
    tl.store(o_gs + i * 3 + 2, tl.where(valid, gs2, z), mask=m)
    tl.store(o_go + i, tl.where(valid, go, z), mask=m)


# ------------------------------------------------------------------ spherical harmonics (3DGS basis)
@triton.jit
def _sh_basis(x, y, z, DEG: tl.constexpr):
    """The 16 basis values (unused ones 0) at unit direction (x, y, z); order of docs/conventions.md §11."""
    zero = 0.0 * x
    b0 = zero + 0.28209479177387814
    b1 = zero
    b2 = zero
    b3 = zero
    b4 = zero
    b5 = zero
    b6 = zero
    b7 = zero
    b8 = zero
    b9 = zero
    b10 = zero
    b11 = zero
    b12 = zero
    b13 = zero
    b14 = zero
    b15 = zero
    if DEG >= 1:
        b1 = -0.4886025119029199 * y
        b2 = 0.4886025119029199 * z
        b3 = -0.4886025119029199 * x
    if DEG >= 2:
        b4 = 1.0925484305920792 * x * y
        b5 = -1.0925484305920792 * y * z
        b6 = 0.31539156525252005 * (2 * z * z - x * x - y * y)
        b7 = -1.0925484305920792 * x * z
        b8 = 0.5462742152960396 * (x * x - y * y)
    if DEG >= 3:
        b9 = -0.5900435899266435 * y * (3 * x * x - y * y)
        b10 = 2.890611442640554 * x * y * z
        b11 = -0.4570457994644658 * y * (4 * z * z - x * x - y * y)
        b12 = 0.3731763325901154 * z * (2 * z * z - 3 * x * x - 3 * y * y)
        b13 = -0.4570457994644658 * x * (4 * z * z - x * x - y * y)
        b14 = 1.445305721320277 * z * (x * x - y * y)
        b15 = -0.5900435899266435 * x * (x * x - 3 * y * y)
    return b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15


@triton.jit
def _sh_dirs(means, campos, i, m, N):
    c = i // N
    n = i % N
    dx = tl.load(means + n * 3 + 0, mask=m, other=0.0) - tl.load(campos + c * 3 + 0, mask=m, other=0.0)
    dy = tl.load(means + n * 3 + 1, mask=m, other=0.0) - tl.load(campos + c * 3 + 1, mask=m, other=0.0)
    dz = tl.load(means + n * 3 + 2, mask=m, other=1.0) - tl.load(campos + c * 3 + 2, mask=m, other=0.0)
    nrm = tl.maximum(tl.sqrt(dx * dx + dy * dy + dz * dz), 1e-12)
    return dx / nrm, dy / nrm, dz / nrm, nrm, n


@triton.jit
def _sh_dot(coef, base, k, bk, m, r, g, b):
    r += bk * tl.load(coef + base + k * 3 + 0, mask=m, other=0.0)
    g += bk * tl.load(coef + base + k * 3 + 1, mask=m, other=0.0)
    b += bk * tl.load(coef + base + k * 3 + 2, mask=m, other=0.0)
    return r, g, b


@triton.jit(do_not_specialize=["C", "N"])
def sh_fwd(means, campos, coef, out, C, N, KS, DEG: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < C * N
    x, y, z, nrm, n = _sh_dirs(means, campos, i, m, N)
    b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15 = _sh_basis(x, y, z, DEG)
    base = n * KS * 3
    r = 0.0 * x
    g = 0.0 * x
    b = 0.0 * x
    r, g, b = _sh_dot(coef, base, 0, b0, m, r, g, b)
    if DEG >= 1:
        r, g, b = _sh_dot(coef, base, 1, b1, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 2, b2, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 3, b3, m, r, g, b)
    if DEG >= 2:
        r, g, b = _sh_dot(coef, base, 4, b4, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 5, b5, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 6, b6, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 7, b7, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 8, b8, m, r, g, b)
    if DEG >= 3:
        r, g, b = _sh_dot(coef, base, 9, b9, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 10, b10, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 11, b11, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 12, b12, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 13, b13, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 14, b14, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 15, b15, m, r, g, b)
    tl.store(out + i * 3 + 0, tl.maximum(r + 0.5, 0.0), mask=m)
    tl.store(out + i * 3 + 1, tl.maximum(g + 0.5, 0.0), mask=m)
    tl.store(out + i * 3 + 2, tl.maximum(b + 0.5, 0.0), mask=m)


@triton.jit
def _sh_bwd_term(coef, gcoef, base, obase, k, bk, m, gr, gg, gb, ddx, ddy, ddz, vx, vy, vz):
    """Store the coefficient gradient of basis k; accumulate (g . c_k) * d b_k / d dir into (vx, vy, vz)."""
    tl.store(gcoef + obase + k * 3 + 0, bk * gr, mask=m)
    tl.store(gcoef + obase + k * 3 + 1, bk * gg, mask=m)
    tl.store(gcoef + obase + k * 3 + 2, bk * gb, mask=m)
    s = (gr * tl.load(coef + base + k * 3 + 0, mask=m, other=0.0) + gg * tl.load(coef + base + k * 3 + 1, mask=m,
                                                                                  other=0.0)
         + gb * tl.load(coef + base + k * 3 + 2, mask=m, other=0.0))
    return vx + s * ddx, vy + s * ddy, vz + s * ddz


@triton.jit(do_not_specialize=["C", "N"])
def sh_bwd(means, campos, coef, g_out, o_gcoef, o_gmeans, C, N, KS, DEG: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < C * N
    x, y, z, nrm, n = _sh_dirs(means, campos, i, m, N)
    b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15 = _sh_basis(x, y, z, DEG)
    base = n * KS * 3
    r = 0.0 * x
    g = 0.0 * x
    b = 0.0 * x
    r, g, b = _sh_dot(coef, base, 0, b0, m, r, g, b)
    if DEG >= 1:
        r, g, b = _sh_dot(coef, base, 1, b1, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 2, b2, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 3, b3, m, r, g, b)
    if DEG >= 2:
        r, g, b = _sh_dot(coef, base, 4, b4, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 5, b5, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 6, b6, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 7, b7, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 8, b8, m, r, g, b)
    if DEG >= 3:
        r, g, b = _sh_dot(coef, base, 9, b9, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 10, b10, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 11, b11, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 12, b12, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 13, b13, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 14, b14, m, r, g, b)
        r, g, b = _sh_dot(coef, base, 15, b15, m, r, g, b)
    # clamp_min(rgb + 0.5, 0) passes the gradient where rgb + 0.5 >= 0 (torch.clamp_min semantics)
    gr = tl.where(r + 0.5 >= 0, tl.load(g_out + i * 3 + 0, mask=m, other=0.0), 0.0)
    gg = tl.where(g + 0.5 >= 0, tl.load(g_out + i * 3 + 1, mask=m, other=0.0), 0.0)
    gb = tl.where(b + 0.5 >= 0, tl.load(g_out + i * 3 + 2, mask=m, other=0.0), 0.0)
    obase = i * KS * 3
    zero = 0.0 * x
    vx = zero
    vy = zero
    vz = zero
    vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 0, b0, m, gr, gg, gb, zero, zero, zero, vx, vy, vz)
    # d b_k / d(x, y, z) of the basis in _sh_basis (constants folded)
    if DEG >= 1:
        qx = zero
        qy = zero - 0.4886025119029199
        qz = zero
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 1, b1, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
        qx = zero
        qy = zero
        qz = zero + 0.4886025119029199
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 2, b2, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
        qx = zero - 0.4886025119029199
        qy = zero
        qz = zero
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 3, b3, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
    if DEG >= 2:
        qx = 1.0925484305920792 * y
        qy = 1.0925484305920792 * x
        qz = zero
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 4, b4, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
        qx = zero
        qy = -1.0925484305920792 * z
        qz = -1.0925484305920792 * y
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 5, b5, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
        qx = -0.6307831305050401 * x
        qy = -0.6307831305050401 * y
        qz = 1.2615662610100802 * z
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 6, b6, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
        qx = -1.0925484305920792 * z
        qy = zero
        qz = -1.0925484305920792 * x
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 7, b7, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
        qx = 1.0925484305920792 * x
        qy = -1.0925484305920792 * y
        qz = zero
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 8, b8, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
    if DEG >= 3:
        xx = x * x
        yy = y * y
        zz = z * z
        qx = -3.540261539559861 * x * y
        qy = -0.5900435899266435 * (3 * xx - 3 * yy)
        qz = zero
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 9, b9, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
        qx = 2.890611442640554 * y * z
        qy = 2.890611442640554 * x * z
        qz = 2.890611442640554 * x * y
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 10, b10, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
        qx = 0.9140915989289316 * x * y
        qy = -0.4570457994644658 * (4 * zz - xx - 3 * yy)
        qz = -3.6563663957157264 * y * z
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 11, b11, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
        qx = -2.2390579955406924 * x * z
        qy = -2.2390579955406924 * y * z
        qz = 0.3731763325901154 * (6 * zz - 3 * xx - 3 * yy)
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 12, b12, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
        qx = -0.4570457994644658 * (4 * zz - 3 * xx - yy)
        qy = 0.9140915989289316 * x * y
        qz = -3.6563663957157264 * x * z
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 13, b13, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
        qx = 2.890611442640554 * x * z
        qy = -2.890611442640554 * y * z
        qz = 1.445305721320277 * (xx - yy)
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 14, b14, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
        qx = -0.5900435899266435 * (3 * xx - 3 * yy)
        qy = 3.540261539559861 * x * y
        qz = zero
        vx, vy, vz = _sh_bwd_term(coef, o_gcoef, base, obase, 15, b15, m, gr, gg, gb, qx, qy, qz, vx, vy, vz)
    # through the normalisation d = v / |v|:  g_v = (g_d - (g_d . d) d) / |v|
    dot = vx * x + vy * y + vz * z
    tl.store(o_gmeans + i * 3 + 0, (vx - dot * x) / nrm, mask=m)
    tl.store(o_gmeans + i * 3 + 1, (vy - dot * y) / nrm, mask=m)
    tl.store(o_gmeans + i * 3 + 2, (vz - dot * z) / nrm, mask=m)


# ------------------------------------------------------------------ input checks (one pass, 4 counters)
@triton.jit
def _bad(x):
    return (x - x) != 0  # NaN or +-Inf


@triton.jit(do_not_specialize=["N", "E"])
def count_bad_gaussians(means, quats, scales, opac, colors, out, N, E, HAS_COLORS: tl.constexpr,
                        BLOCK: tl.constexpr):
    """out[0..3] += rows of means (non-finite), quats (non-finite or zero), scales (non-finite or < 0),
    opacities (non-finite or outside [0, 1]); with ``HAS_COLORS`` out[4] += non-finite entries of the
    flat ``colors [E]`` (the grid covers max(N, E) / BLOCK programs)."""
    if HAS_COLORS:
        e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        me = e < E
        bc = me & _bad(tl.load(colors + e, mask=me, other=0.0))
        tl.atomic_add(out + 4, tl.sum(bc.to(tl.int32), axis=0))
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    bm = m & (_bad(tl.load(means + i * 3, mask=m, other=0.0)) | _bad(tl.load(means + i * 3 + 1, mask=m, other=0.0))
              | _bad(tl.load(means + i * 3 + 2, mask=m, other=0.0)))
    q0 = tl.load(quats + i * 4, mask=m, other=1.0)
    q1 = tl.load(quats + i * 4 + 1, mask=m, other=0.0)
    q2 = tl.load(quats + i * 4 + 2, mask=m, other=0.0)
    q3 = tl.load(quats + i * 4 + 3, mask=m, other=0.0)
    bq = m & (_bad(q0) | _bad(q1) | _bad(q2) | _bad(q3) | ((q0 == 0) & (q1 == 0) & (q2 == 0) & (q3 == 0)))
    s0 = tl.load(scales + i * 3, mask=m, other=1.0)
    s1 = tl.load(scales + i * 3 + 1, mask=m, other=1.0)
    s2 = tl.load(scales + i * 3 + 2, mask=m, other=1.0)
    bs = m & (_bad(s0) | _bad(s1) | _bad(s2) | (s0 < 0) | (s1 < 0) | (s2 < 0))
    o = tl.load(opac + i, mask=m, other=0.5)
    bo = m & (_bad(o) | (o < 0) | (o > 1))
    tl.atomic_add(out, tl.sum(bm.to(tl.int32), axis=0))
    tl.atomic_add(out + 1, tl.sum(bq.to(tl.int32), axis=0))
    tl.atomic_add(out + 2, tl.sum(bs.to(tl.int32), axis=0))
    tl.atomic_add(out + 3, tl.sum(bo.to(tl.int32), axis=0))
