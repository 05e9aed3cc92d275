"""Triton JIT kernels of Gaussian splatting. Imported only by :mod:`meshlift.kernels.splat_triton`
(lazily, on first use); see that module for the algorithms, the launch wrappers and the autograd
Functions. Every kernel works on flat, contiguous tensors; conventions: docs/conventions.md §11.
"""

import triton
import triton.language as tl

@triton.jit
def _ceil_pos(x):
    t = x.to(tl.int32)
    return t + (t.to(x.dtype) < x).to(tl.int32)

@triton.jit
def _floor_f(x, ts):
    q = x / ts
    t = q.to(tl.int32)
    return t - (t.to(tl.float32) > q).to(tl.int32)

@triton.jit
def _ceil_f(x, ts):
    q = x / ts
    t = q.to(tl.int32)
    return t + (t.to(tl.float32) < q).to(tl.int32)

# ------------------------------------------------------------------ projection forward
@triton.jit
def project_fwd(means, quats, scales, opac, w2c, Ks, out_m2, out_con, out_dep, out_rad, out_op, out_comp,
                C, N, width, height, near, far, eps2d, radius_clip,
                ANTIALIASED: tl.constexpr, BLOCK: tl.constexpr):
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

# ------------------------------------------------------------------ projection backward
@triton.jit
def project_bwd(means, quats, scales, opac, w2c, Ks, radii, g_m2, g_con, g_dep, g_op,
                o_gm, o_gq, o_gs, o_go, C, N, width, height, near, far, eps2d,
                ANTIALIASED: tl.constexpr, BLOCK: tl.constexpr):
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
    gu = tl.load(g_m2 + i * 2 + 0, mask=m, other=0.0)
    gv = tl.load(g_m2 + i * 2 + 1, mask=m, other=0.0)
    gA = tl.load(g_con + i * 3 + 0, mask=m, other=0.0)
    gB = tl.load(g_con + i * 3 + 1, mask=m, other=0.0)
    gC = tl.load(g_con + i * 3 + 2, mask=m, other=0.0)
    gdep = tl.load(g_dep + i, mask=m, other=0.0)
    gop = tl.load(g_op + i, mask=m, other=0.0)
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

# ------------------------------------------------------------------ tile binning
@triton.jit
def tile_bounds(m2, radii, out_cnt, total, tile_size, tiles_w, tiles_h, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < total
    u = tl.load(m2 + i * 2, mask=m, other=0.0).to(tl.float32)
    v = tl.load(m2 + i * 2 + 1, mask=m, other=0.0).to(tl.float32)
    rx = tl.load(radii + i * 2, mask=m, other=0).to(tl.float32)
    ry = tl.load(radii + i * 2 + 1, mask=m, other=0).to(tl.float32)
    vis = (rx > 0) & (ry > 0)
    ts = tile_size * 1.0
    x0 = tl.minimum(tl.maximum(_floor_f(u - rx, ts), 0), tiles_w)
    x1 = tl.minimum(tl.maximum(_ceil_f(u + rx, ts), 0), tiles_w)
    y0 = tl.minimum(tl.maximum(_floor_f(v - ry, ts), 0), tiles_h)
    y1 = tl.minimum(tl.maximum(_ceil_f(v + ry, ts), 0), tiles_h)
    cnt = tl.where(vis, (x1 - x0) * (y1 - y0), 0)
    tl.store(out_cnt + i, cnt, mask=m)

@triton.jit
def write_keys(order, starts, m2, radii, out_tile, out_gid, total, N, tile_size, tiles_w, tiles_h,
               BLOCK: tl.constexpr):
    j = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = j < total
    g = tl.load(order + j, mask=m, other=0)
    st = tl.load(starts + j, mask=m, other=0)
    u = tl.load(m2 + g * 2, mask=m, other=0.0).to(tl.float32)
    v = tl.load(m2 + g * 2 + 1, mask=m, other=0.0).to(tl.float32)
    rx = tl.load(radii + g * 2, mask=m, other=0).to(tl.float32)
    ry = tl.load(radii + g * 2 + 1, mask=m, other=0).to(tl.float32)
    vis = m & (rx > 0) & (ry > 0)
    ts = tile_size * 1.0
    x0 = tl.minimum(tl.maximum(_floor_f(u - rx, ts), 0), tiles_w)
    x1 = tl.minimum(tl.maximum(_ceil_f(u + rx, ts), 0), tiles_w)
    y0 = tl.minimum(tl.maximum(_floor_f(v - ry, ts), 0), tiles_h)
    y1 = tl.minimum(tl.maximum(_ceil_f(v + ry, ts), 0), tiles_h)
    bw = tl.maximum(x1 - x0, 1)
    cnt = tl.where(vis, (x1 - x0) * (y1 - y0), 0)
    cam = g // N
    kmax = tl.max(cnt, axis=0)
    for k in range(0, kmax):
        w = k < cnt
        tx = x0 + k % bw
        ty = y0 + k // bw
        tile = (cam * tiles_h + ty) * tiles_w + tx
        tl.store(out_tile + st + k, tile.to(tl.int32), mask=w)
        tl.store(out_gid + st + k, g, mask=w)

# ------------------------------------------------------------------ compositing forward
@triton.jit
def composite_fwd(offsets, flat_ids, n_isect, m2, con, opac, feat, dep, out_feat, out_T, out_last,
                  out_med, width, height, tiles_w, tiles_h, alpha_max,
                  D: tl.constexpr, DP: tl.constexpr, TS: tl.constexpr, B: tl.constexpr,
                  WANT_MED: tl.constexpr):
    tile = tl.program_id(0)
    per_cam = tiles_w * tiles_h
    cam = tile // per_cam
    loc = tile % per_cam
    tyi = loc // tiles_w
    txi = loc % tiles_w
    p = tl.arange(0, TS * TS)
    pxi = txi * TS + p % TS
    pyi = tyi * TS + p // TS
    inimg = (pxi < width) & (pyi < height)
    pxf = pxi.to(tl.float32) + 0.5
    pyf = pyi.to(tl.float32) + 0.5
    start = tl.load(offsets + tile)
    end = tl.load(offsets + tile + 1)
    dd = tl.arange(0, DP)
    dmask = dd < D
    T = tl.zeros([TS * TS], dtype=tl.float32) + 1.0
    done = ~inimg
    acc = tl.zeros([TS * TS, DP], dtype=tl.float32)
    last = tl.zeros([TS * TS], dtype=tl.int32) - 1
    medi = tl.zeros([TS * TS], dtype=tl.int32) - 1
    b0 = start
    while (b0 < end) & (tl.min(done.to(tl.int32), axis=0) == 0):
        idx = b0 + tl.arange(0, B)
        bm = idx < end
        g = tl.load(flat_ids + idx, mask=bm, other=0)
        gx = tl.load(m2 + g * 2, mask=bm, other=0.0).to(tl.float32)
        gy = tl.load(m2 + g * 2 + 1, mask=bm, other=0.0).to(tl.float32)
        ca = tl.load(con + g * 3, mask=bm, other=0.0).to(tl.float32)
        cb = tl.load(con + g * 3 + 1, mask=bm, other=0.0).to(tl.float32)
        cc = tl.load(con + g * 3 + 2, mask=bm, other=0.0).to(tl.float32)
        go = tl.load(opac + g, mask=bm, other=0.0).to(tl.float32)
        dx = gx[:, None] - pxf[None, :]
        dy = gy[:, None] - pyf[None, :]
        sig = 0.5 * (ca[:, None] * dx * dx + cc[:, None] * dy * dy) + cb[:, None] * dx * dy
        raw = go[:, None] * tl.exp(-sig)
        keep = bm[:, None] & inimg[None, :] & (sig >= 0) & (raw >= 1.0 / 255.0)
        a = tl.where(keep, tl.minimum(raw, alpha_max), 0.0)
        l = tl.log(1.0 - a)
        t_incl = T[None, :] * tl.exp(tl.cumsum(l, axis=0))
        inc = (t_incl >= 1e-4) & ~done[None, :]
        a = tl.where(inc, a, 0.0)
        l = tl.where(inc, l, 0.0)
        cs = tl.cumsum(l, axis=0)
        t_excl = T[None, :] * tl.exp(cs - l)
        w = a * t_excl
        f = tl.load(feat + g[:, None] * D + dd[None, :], mask=bm[:, None] & dmask[None, :], other=0.0)
        acc += tl.sum(w[:, :, None] * f.to(tl.float32)[:, None, :], axis=0)
        contrib = w > 0
        last = tl.maximum(last, tl.max(tl.where(contrib, idx[:, None], -1), axis=0).to(tl.int32))
        if WANT_MED:
            medi = tl.maximum(medi, tl.max(tl.where(contrib & (t_excl > 0.5), idx[:, None], -1), axis=0).to(tl.int32))
        T = T * tl.exp(tl.sum(l, axis=0))
        done = done | (tl.min(t_incl, axis=0) < 1e-4)
        b0 += B
    pix = (cam * height + pyi) * width + pxi
    tl.store(out_feat + pix[:, None] * D + dd[None, :], acc, mask=inimg[:, None] & dmask[None, :])
    tl.store(out_T + pix, T, mask=inimg)
    tl.store(out_last + pix, last, mask=inimg)
    if WANT_MED:
        mg = tl.load(flat_ids + medi, mask=inimg & (medi >= 0), other=-1)
        tl.store(out_med + pix, tl.where(medi >= 0, mg, -1), mask=inimg)

# ------------------------------------------------------------------ compositing backward
@triton.jit
def composite_bwd(offsets, flat_ids, m2, con, opac, feat, T_final, last_ids, g_feat, g_alpha,
                  o_gm2, o_gcon, o_gop, o_gfeat, width, height, tiles_w, tiles_h, alpha_max,
                  D: tl.constexpr, DP: tl.constexpr, TS: tl.constexpr, B: tl.constexpr):
    tile = tl.program_id(0)
    per_cam = tiles_w * tiles_h
    cam = tile // per_cam
    loc = tile % per_cam
    tyi = loc // tiles_w
    txi = loc % tiles_w
    p = tl.arange(0, TS * TS)
    pxi = txi * TS + p % TS
    pyi = tyi * TS + p // TS
    inimg = (pxi < width) & (pyi < height)
    pxf = pxi.to(tl.float32) + 0.5
    pyf = pyi.to(tl.float32) + 0.5
    pix = (cam * height + pyi) * width + pxi
    start = tl.load(offsets + tile)
    dd = tl.arange(0, DP)
    dmask = dd < D
    Tf = tl.load(T_final + pix, mask=inimg, other=1.0)
    last = tl.load(last_ids + pix, mask=inimg, other=-1)
    gimg = tl.load(g_feat + pix[:, None] * D + dd[None, :], mask=inimg[:, None] & dmask[None, :],
                   other=0.0).to(tl.float32)
    gT = -tl.load(g_alpha + pix, mask=inimg, other=0.0).to(tl.float32)
    tgT = Tf * gT
    lmax = tl.max(last, axis=0)
    T = Tf
    S = tl.zeros([TS * TS], dtype=tl.float32)
    nb = (lmax - start + B) // B
    nb = tl.where(lmax >= start, nb, 0)
    for kb in range(0, nb):
        b0 = start + (nb - 1 - kb) * B
        idx = b0 + tl.arange(0, B)
        bm = idx <= lmax
        g = tl.load(flat_ids + idx, mask=bm, other=0)
        gx = tl.load(m2 + g * 2, mask=bm, other=0.0).to(tl.float32)
        gy = tl.load(m2 + g * 2 + 1, mask=bm, other=0.0).to(tl.float32)
        ca = tl.load(con + g * 3, mask=bm, other=0.0).to(tl.float32)
        cb = tl.load(con + g * 3 + 1, mask=bm, other=0.0).to(tl.float32)
        cc = tl.load(con + g * 3 + 2, mask=bm, other=0.0).to(tl.float32)
        go = tl.load(opac + g, mask=bm, other=0.0).to(tl.float32)
        dx = gx[:, None] - pxf[None, :]
        dy = gy[:, None] - pyf[None, :]
        sig = 0.5 * (ca[:, None] * dx * dx + cc[:, None] * dy * dy) + cb[:, None] * dx * dy
        vis = tl.exp(-sig)
        raw = go[:, None] * vis
        inc = bm[:, None] & inimg[None, :] & (sig >= 0) & (raw >= 1.0 / 255.0) & (idx[:, None] <= last[None, :])
        a = tl.where(inc, tl.minimum(raw, alpha_max), 0.0)
        l = tl.log(1.0 - a)
        cs = tl.cumsum(l, axis=0)
        tot = tl.sum(l, axis=0)
        # transmittance in front of each Gaussian: T_end / prod_{j >= i} (1 - a_j)
        t_i = T[None, :] * tl.exp(-(tot[None, :] - cs + l))
        w = a * t_i
        f = tl.load(feat + g[:, None] * D + dd[None, :], mask=bm[:, None] & dmask[None, :], other=0.0).to(tl.float32)
        fg = tl.sum(f[:, None, :] * gimg[None, :, :], axis=2)  # [B, P]
        wfg = w * fg
        cw = tl.cumsum(wfg, axis=0)
        totw = tl.sum(wfg, axis=0)
        S_i = S[None, :] + (totw[None, :] - cw)  # contributions behind i
        ga = t_i * fg - (S_i + tgT[None, :]) / (1.0 - a)
        ga = tl.where(inc & (raw < alpha_max), ga, 0.0)
        gsig = -ga * raw
        gdx = gsig * (ca[:, None] * dx + cb[:, None] * dy)
        gdy = gsig * (cc[:, None] * dy + cb[:, None] * dx)
        gop_ = tl.sum(ga * vis, axis=1)
        any_c = bm & (tl.max(inc.to(tl.int32), axis=1) > 0)
        tl.atomic_add(o_gop + g, gop_, mask=any_c)
        tl.atomic_add(o_gm2 + g * 2, tl.sum(gdx, axis=1), mask=any_c)
        tl.atomic_add(o_gm2 + g * 2 + 1, tl.sum(gdy, axis=1), mask=any_c)
        tl.atomic_add(o_gcon + g * 3, tl.sum(0.5 * gsig * dx * dx, axis=1), mask=any_c)
        tl.atomic_add(o_gcon + g * 3 + 1, tl.sum(gsig * dx * dy, axis=1), mask=any_c)
        tl.atomic_add(o_gcon + g * 3 + 2, tl.sum(0.5 * gsig * dy * dy, axis=1), mask=any_c)
        gf = tl.sum(w[:, :, None] * gimg[None, :, :], axis=1)  # [B, DP]
        tl.atomic_add(o_gfeat + g[:, None] * D + dd[None, :], gf, mask=any_c[:, None] & dmask[None, :])
        T = T * tl.exp(-tot)
        S = S + totw

# ------------------------------------------------------------------ statistics
@triton.jit
def stats_fwd(offsets, flat_ids, m2, con, opac, o_acc, o_cnt, o_best, width, height, tiles_w, tiles_h,
              alpha_max, TS: tl.constexpr, B: tl.constexpr):
    tile = tl.program_id(0)
    per_cam = tiles_w * tiles_h
    cam = tile // per_cam
    loc = tile % per_cam
    tyi = loc // tiles_w
    txi = loc % tiles_w
    p = tl.arange(0, TS * TS)
    pxi = txi * TS + p % TS
    pyi = tyi * TS + p // TS
    inimg = (pxi < width) & (pyi < height)
    pxf = pxi.to(tl.float32) + 0.5
    pyf = pyi.to(tl.float32) + 0.5
    start = tl.load(offsets + tile)
    end = tl.load(offsets + tile + 1)
    T = tl.zeros([TS * TS], dtype=tl.float32) + 1.0
    done = ~inimg
    best_w = tl.zeros([TS * TS], dtype=tl.float32)
    best_i = tl.zeros([TS * TS], dtype=tl.int32) - 1
    b0 = start
    while (b0 < end) & (tl.min(done.to(tl.int32), axis=0) == 0):
        idx = b0 + tl.arange(0, B)
        bm = idx < end
        g = tl.load(flat_ids + idx, mask=bm, other=0)
        gx = tl.load(m2 + g * 2, mask=bm, other=0.0).to(tl.float32)
        gy = tl.load(m2 + g * 2 + 1, mask=bm, other=0.0).to(tl.float32)
        ca = tl.load(con + g * 3, mask=bm, other=0.0).to(tl.float32)
        cb = tl.load(con + g * 3 + 1, mask=bm, other=0.0).to(tl.float32)
        cc = tl.load(con + g * 3 + 2, mask=bm, other=0.0).to(tl.float32)
        go = tl.load(opac + g, mask=bm, other=0.0).to(tl.float32)
        dx = gx[:, None] - pxf[None, :]
        dy = gy[:, None] - pyf[None, :]
        sig = 0.5 * (ca[:, None] * dx * dx + cc[:, None] * dy * dy) + cb[:, None] * dx * dy
        raw = go[:, None] * tl.exp(-sig)
        keep = bm[:, None] & inimg[None, :] & (sig >= 0) & (raw >= 1.0 / 255.0)
        a = tl.where(keep, tl.minimum(raw, alpha_max), 0.0)
        l = tl.log(1.0 - a)
        t_incl = T[None, :] * tl.exp(tl.cumsum(l, axis=0))
        inc = (t_incl >= 1e-4) & ~done[None, :]
        a = tl.where(inc, a, 0.0)
        l = tl.where(inc, l, 0.0)
        cs = tl.cumsum(l, axis=0)
        w = a * T[None, :] * tl.exp(cs - l)
        tl.atomic_add(o_acc + g, tl.sum(w, axis=1), mask=bm)
        tl.atomic_add(o_cnt + g, tl.sum((w > 0).to(tl.int32), axis=1), mask=bm)
        # largest weight in this block per pixel (first on ties), then against the running best
        wm = tl.max(w, axis=0)
        im = tl.min(tl.where(w == wm[None, :], idx[:, None], 2147483647), axis=0).to(tl.int32)
        better = wm > best_w
        best_w = tl.where(better, wm, best_w)
        best_i = tl.where(better, im, best_i)
        T = T * tl.exp(tl.sum(l, axis=0))
        done = done | (tl.min(t_incl, axis=0) < 1e-4)
        b0 += B
    pix = (cam * height + pyi) * width + pxi
    bg = tl.load(flat_ids + best_i, mask=inimg & (best_i >= 0), other=-1)
    tl.store(o_best + pix, tl.where(best_i >= 0, bg, -1), mask=inimg)

