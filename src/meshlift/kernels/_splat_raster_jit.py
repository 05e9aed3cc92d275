"""Triton JIT kernels of Gaussian splatting, part 2: tile binning, compositing (forward, backward) and the
no-grad statistics pass. Imported only by :mod:`meshlift.kernels.splat_triton` (lazily, on first use);
see that module for the algorithms, launch wrappers and autograd Functions. Conventions:
docs/conventions.md §11.
"""

import triton
import triton.language as tl

# Integer arguments that follow the Gaussian or intersection counts are marked ``do_not_specialize``: Triton
# would otherwise compile a new variant whenever such a count changes its divisibility by 16 (or equals 1),
# i.e. after densification steps and as the intersection count changes: the likely source of the
# multi-second training steps of the H200 run of 2026-12-01 (median step 7.6 ms, mean 90.6 ms).

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

# ------------------------------------------------------------------ tile binning
@triton.jit
def _reach2(op):
    """float32 ``r²`` of the ellipse inside which a Gaussian of opacity ``op`` can pass the compositing cut, widened
    by the band culling's margin (the reference's ``ellipse_reach2``)."""
    e2 = 2.0 * tl.log(tl.maximum(op, 1.0 / 255.0) * 255.0)
    return (e2 + 0.04) / 0.99

@triton.jit
def _ellipse_shape(ca, cb, cc, op):
    """The row-independent terms of :func:`_row_span` for a Gaussian of conic ``(ca, cb, cc)`` and opacity ``op``:
    ``(pd, a, det, r2, ey, sx)`` — positive definite, the conic's ``a`` and determinant (1 where not ``pd``), the
    squared reach (:func:`_reach2`), the ellipse's half height and ``(b/c)·`` its half width (the reference's
    ``ellipse_row_spans``, same float32 steps)."""
    r2 = _reach2(op)
    pd = (ca > 0) & (cc > 0) & (ca * cc - cb * cb > 0)
    a = tl.where(pd, ca, 1.0)
    c = tl.where(pd, cc, 1.0)
    det = tl.where(pd, ca * cc - cb * cb, 1.0)
    ey = tl.sqrt_rn(tl.maximum(r2 * a / det, 0.0))
    ex = tl.sqrt_rn(tl.maximum(r2 * c / det, 0.0))
    return pd, a, det, r2, ey, (cb / c) * ex

@triton.jit
def _row_span(u, v, cb, pd, a, det, r2, ey, sx, ty, ts, x0, x1):
    """Tile columns ``[tx0, tx1)`` of tile row ``ty`` that a Gaussian's ellipse of reach touches (its
    :func:`_ellipse_shape` terms), clamped to its bounding box ``[x0, x1)`` (``tx1 <= tx0``: none); the reference's
    ``ellipse_row_spans``, same float32 steps."""
    tyf = ty.to(tl.float32)
    lo = tl.maximum(tyf * ts - v, -ey)
    hi = tl.minimum((tyf + 1.0) * ts - v, ey)
    dyr = tl.minimum(tl.maximum(-sx, lo), hi)
    dyl = tl.minimum(tl.maximum(sx, lo), hi)
    right = (-cb * dyr + tl.sqrt_rn(tl.maximum(a * r2 - det * dyr * dyr, 0.0))) / a
    left = (-cb * dyl - tl.sqrt_rn(tl.maximum(a * r2 - det * dyl * dyl, 0.0))) / a
    tx0 = tl.where(pd, tl.maximum(_floor_f(u + left, ts), x0), x0)
    tx1 = tl.where(pd, tl.minimum(_ceil_f(u + right, ts), x1), x1)
    tx1 = tl.where(pd & (lo > hi), tx0, tx1)
    return tx0, tx1

@triton.jit
def _ellipse_count(u, v, ca, cb, cc, op, x0, x1, y0, y1, vis, ts):
    """``[B]`` int32: the tiles of each Gaussian's bounding box (``vis``: has one) that its ellipse touches."""
    pd, a, det, r2, ey, sx = _ellipse_shape(ca, cb, cc, op)
    rows = tl.where(vis, y1 - y0, 0)
    cnt = tl.zeros_like(rows)
    for r in range(0, tl.max(rows, axis=0)):
        tx0, tx1 = _row_span(u, v, cb, pd, a, det, r2, ey, sx, y0 + r, ts, x0, x1)
        cnt += tl.where(r < rows, tl.maximum(tx1 - tx0, 0), 0)
    return cnt

@triton.jit
def _load_bin_rec(m2, pk, i, m, ELLIPSE: tl.constexpr):
    """``(u, v, a, b, c, opacity)`` float32 of pair ``i``: from the records ``pk`` with ``ELLIPSE``, else the centre
    from ``m2`` (the conic and opacity are then unused zeros)."""
    if ELLIPSE:
        u = tl.load(pk + i * 6 + 0, mask=m, other=0.0)
        v = tl.load(pk + i * 6 + 1, mask=m, other=0.0)
        ca = tl.load(pk + i * 6 + 2, mask=m, other=1.0)
        cb = tl.load(pk + i * 6 + 3, mask=m, other=0.0)
        cc = tl.load(pk + i * 6 + 4, mask=m, other=1.0)
        op = tl.load(pk + i * 6 + 5, mask=m, other=0.0)
    else:
        u = tl.load(m2 + i * 2, mask=m, other=0.0).to(tl.float32)
        v = tl.load(m2 + i * 2 + 1, mask=m, other=0.0).to(tl.float32)
        ca = tl.zeros_like(u)
        cb = ca
        cc = ca
        op = ca
    return u, v, ca, cb, cc, op

@triton.jit(do_not_specialize=["total"])
def tile_bounds(m2, pk, radii, out_cnt, total, tile_size, tiles_w, tiles_h, ELLIPSE: tl.constexpr,
                BLOCK: tl.constexpr):
    """Tiles each pair touches: its bounding box, or with ``ELLIPSE`` the box's tiles its ellipse reaches (records
    ``pk``)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < total
    u, v, ca, cb, cc, op = _load_bin_rec(m2, pk, i, m, ELLIPSE)
    rx = tl.load(radii + i * 2, mask=m, other=0).to(tl.float32)
    ry = tl.load(radii + i * 2 + 1, mask=m, other=0).to(tl.float32)
    vis = (rx > 0) & (ry > 0)
    ts = tile_size * 1.0
    x0 = tl.minimum(tl.maximum(_floor_f(u - rx, ts), 0), tiles_w)
    x1 = tl.minimum(tl.maximum(_ceil_f(u + rx, ts), 0), tiles_w)
    y0 = tl.minimum(tl.maximum(_floor_f(v - ry, ts), 0), tiles_h)
    y1 = tl.minimum(tl.maximum(_ceil_f(v + ry, ts), 0), tiles_h)
    if ELLIPSE:
        cnt = _ellipse_count(u, v, ca, cb, cc, op, x0, x1, y0, y1, vis, ts)
    else:
        cnt = tl.where(vis, (x1 - x0) * (y1 - y0), 0)
    tl.store(out_cnt + i, cnt, mask=m)

@triton.jit(do_not_specialize=["total", "N"])
def write_keys(order, ends, cnts, m2, pk, radii, out_tile, out_gid, total, N, tile_size, tiles_w, tiles_h,
               ELLIPSE: tl.constexpr, BLOCK: tl.constexpr):
    """Pair ``order[j]`` writes its ``cnts`` tile ids and Gaussian ids at ``ends[j] - cnts ...`` (``ends``:
    inclusive cumulative counts in depth order; ``cnts`` those of ``tile_bounds`` or the projection), row by row of
    its bounding box (with ``ELLIPSE`` each row's span of tiles its ellipse reaches)."""
    j = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = j < total
    g = tl.load(order + j, mask=m, other=0)
    end = tl.load(ends + j, mask=m, other=0)
    cnt = tl.load(cnts + g, mask=m, other=0)
    u, v, ca, cb, cc, op = _load_bin_rec(m2, pk, g, m, ELLIPSE)
    rx = tl.load(radii + g * 2, mask=m, other=0).to(tl.float32)
    ry = tl.load(radii + g * 2 + 1, mask=m, other=0).to(tl.float32)
    vis = m & (rx > 0) & (ry > 0)
    ts = tile_size * 1.0
    x0 = tl.minimum(tl.maximum(_floor_f(u - rx, ts), 0), tiles_w)
    x1 = tl.minimum(tl.maximum(_ceil_f(u + rx, ts), 0), tiles_w)
    y0 = tl.minimum(tl.maximum(_floor_f(v - ry, ts), 0), tiles_h)
    y1 = tl.minimum(tl.maximum(_ceil_f(v + ry, ts), 0), tiles_h)
    cam = g // N
    if ELLIPSE:
        pd, a, det, r2, ey, sx = _ellipse_shape(ca, cb, cc, op)
        rows = tl.where(vis, y1 - y0, 0)
        pos = end - cnt
        for r in range(0, tl.max(rows, axis=0)):
            ty = y0 + r
            tx0, tx1 = _row_span(u, v, cb, pd, a, det, r2, ey, sx, ty, ts, x0, x1)
            wd = tl.where(r < rows, tl.maximum(tx1 - tx0, 0), 0)
            for k in range(0, tl.max(wd, axis=0)):
                w = k < wd
                tile = (cam * tiles_h + ty) * tiles_w + tx0 + k
                tl.store(out_tile + pos + k, tile.to(out_tile.dtype.element_ty), mask=w)
                tl.store(out_gid + pos + k, g, mask=w)
            pos += wd
    else:
        bw = tl.maximum(x1 - x0, 1)
        st = end - cnt
        for k in range(0, tl.max(cnt, axis=0)):
            w = k < cnt
            tx = x0 + k % bw
            ty = y0 + k // bw
            tile = (cam * tiles_h + ty) * tiles_w + tx
            tl.store(out_tile + st + k, tile.to(out_tile.dtype.element_ty), mask=w)
            tl.store(out_gid + st + k, g, mask=w)

# ------------------------------------------------------------------ compositing: shared helpers
# Per-Gaussian screen record ``pk [C*N, 6]`` float32: (u, v, conic a, b, c, opacity), one gather region
# instead of three arrays; the backward accumulates into a gradient record of the same layout. Features
# ``feat [C*N, D]``; a program composites the channels ``grp*NC .. grp*NC+NC-1`` (``grp`` =
# program_id(1), NC <= 4 accumulators in registers, no [B, P, D] block).


@triton.jit
def _tile_pixels(tile, tiles_w, tiles_h, width, height, TS: tl.constexpr):
    per_cam = tiles_w * tiles_h
    cam = tile // per_cam
    loc = tile % per_cam
    p = tl.arange(0, TS * TS)
    pxi = (loc % tiles_w) * TS + p % TS
    pyi = (loc // tiles_w) * TS + p // TS
    inimg = (pxi < width) & (pyi < height)
    pix = (cam * height + pyi) * width + pxi
    return pix, inimg, pxi.to(tl.float32) + 0.5, pyi.to(tl.float32) + 0.5


@triton.jit
def _sub_tile_pixels(prog, tiles_w, tiles_h, width, height, TS: tl.constexpr, SPLIT: tl.constexpr):
    """The pixels of program ``prog`` when each tile is split into ``SPLIT`` bands of ``TS // SPLIT`` rows:
    ``(tile, pix, inimg, px + 0.5, py + 0.5)``, ``[TS * TS // SPLIT]`` vectors."""
    tile = prog // SPLIT
    band = prog % SPLIT
    per_cam = tiles_w * tiles_h
    cam = tile // per_cam
    loc = tile % per_cam
    p = tl.arange(0, TS * TS // SPLIT)
    pxi = (loc % tiles_w) * TS + p % TS
    pyi = (loc // tiles_w) * TS + band * (TS // SPLIT) + p // TS
    inimg = (pxi < width) & (pyi < height)
    pix = (cam * height + pyi) * width + pxi
    return tile, pix, inimg, pxi.to(tl.float32) + 0.5, pyi.to(tl.float32) + 0.5


@triton.jit
def _load_rec(pk, g, bm):
    gx = tl.load(pk + g * 6, mask=bm, other=0.0)
    gy = tl.load(pk + g * 6 + 1, mask=bm, other=0.0)
    ca = tl.load(pk + g * 6 + 2, mask=bm, other=0.0)
    cb = tl.load(pk + g * 6 + 3, mask=bm, other=0.0)
    cc = tl.load(pk + g * 6 + 4, mask=bm, other=0.0)
    go = tl.load(pk + g * 6 + 5, mask=bm, other=0.0)
    return gx, gy, ca, cb, cc, go


# ------------------------------------------------------------------ compositing backward


@triton.jit
def _bwd_batch(flat_ids, pk, feat, o_grec, o_gfeat, g, idx, bm, gx, gy, ca, cb, cc, go, dx, dy, raw, vis, inc,
               pxf, pyf, last, T, S, tgT, gi0, gi1, gi2, gi3, kB, k0, D, alpha_max, NC: tl.constexpr):
    """Gradients of one back-to-front batch ``[B, 256]`` of a tile (see composite_bwd); returns the
    transmittance in front of the batch and the colour sum behind it."""
    a = tl.where(inc, tl.minimum(raw, alpha_max), 0.0)
    om = 1.0 - a
    cp = tl.cumprod(om, axis=0)
    # T is the transmittance behind this batch; in front of it T / prod(1 - a) (>= T since only
    # included Gaussians count and T >= 1e-4, so the product cannot underflow); in front of
    # Gaussian i: T_start * prod_{j < i} (1 - a_j)
    T_start = tl.fdiv(T, tl.min(cp, axis=0), ieee_rounding=False)
    t_i = tl.fdiv(T_start[None, :] * cp, om, ieee_rounding=False)
    w = a * t_i
    f0 = tl.load(feat + g * D + k0, mask=bm & (kB < D), other=0.0)
    fg = f0[:, None] * gi0[None, :]
    if NC > 1:
        f1 = tl.load(feat + g * D + k0 + 1, mask=bm & (kB + 1 < D), other=0.0)
        fg += f1[:, None] * gi1[None, :]
    if NC > 2:
        f2 = tl.load(feat + g * D + k0 + 2, mask=bm & (kB + 2 < D), other=0.0)
        fg += f2[:, None] * gi2[None, :]
    if NC > 3:
        f3 = tl.load(feat + g * D + k0 + 3, mask=bm & (kB + 3 < D), other=0.0)
        fg += f3[:, None] * gi3[None, :]
    wfg = w * fg
    cw = tl.cumsum(wfg, axis=0)
    totw = tl.sum(wfg, axis=0)
    S_i = S[None, :] + (totw[None, :] - cw)  # contributions behind i
    ga = t_i * fg - tl.fdiv(S_i + tgT[None, :], om, ieee_rounding=False)
    ga = tl.where(inc & (raw < alpha_max), ga, 0.0)
    gsig = -ga * raw
    gsx = gsig * dx
    gsy = gsig * dy
    sx = tl.sum(gsx, axis=1)
    sy = tl.sum(gsy, axis=1)
    any_c = bm & (tl.max(inc.to(tl.int32), axis=1) > 0)
    tl.atomic_add(o_grec + g * 6 + 5, tl.sum(ga * vis, axis=1), mask=any_c)
    tl.atomic_add(o_grec + g * 6, ca * sx + cb * sy, mask=any_c)
    tl.atomic_add(o_grec + g * 6 + 1, cc * sy + cb * sx, mask=any_c)
    tl.atomic_add(o_grec + g * 6 + 2, 0.5 * tl.sum(gsx * dx, axis=1), mask=any_c)
    tl.atomic_add(o_grec + g * 6 + 3, tl.sum(gsx * dy, axis=1), mask=any_c)
    tl.atomic_add(o_grec + g * 6 + 4, 0.5 * tl.sum(gsy * dy, axis=1), mask=any_c)
    tl.atomic_add(o_gfeat + g * D + k0, tl.sum(w * gi0[None, :], axis=1), mask=any_c & (kB < D))
    if NC > 1:
        tl.atomic_add(o_gfeat + g * D + k0 + 1, tl.sum(w * gi1[None, :], axis=1), mask=any_c & (kB + 1 < D))
    if NC > 2:
        tl.atomic_add(o_gfeat + g * D + k0 + 2, tl.sum(w * gi2[None, :], axis=1), mask=any_c & (kB + 2 < D))
    if NC > 3:
        tl.atomic_add(o_gfeat + g * D + k0 + 3, tl.sum(w * gi3[None, :], axis=1), mask=any_c & (kB + 3 < D))
    return T_start, S + totw


@triton.jit
def _reaches_box(gx, gy, ca, cb, cc, go, bm, x0, x1, y0, y1):
    """``[B]`` bool: can a Gaussian pass the forward's cut (``sig >= 0`` and ``go * exp(-sig) >= 1/255``, the
    test of every compositing kernel) at some point of the box ``[x0, x1] × [y0, y1]`` (pixel centres)?

    The smallest ``sig = 0.5 (a dx² + c dy²) + b dx dy`` over the box (``dx = gx - x``, ``dy = gy - y``) is
    0 when the centre lies inside it, else on one of its four edges, where it is a parabola in one variable
    minimised at ``-b dx / c`` (or ``-b dy / a``) clamped to the edge. The cut passes somewhere only if that
    minimum is at most ``ln(255 go)``. Conservative: a margin of 1 % + 0.02 covers float32 rounding of the
    per-pixel test (the conic's terms can cancel for thin ellipses); a conic that is not positive definite,
    whose minimum this does not bound, always reaches. False where ``bm`` is False."""
    pd = (ca > 0) & (cc > 0) & (ca * cc - cb * cb > 0)
    sa = tl.where(pd, ca, 1.0)
    sc = tl.where(pd, cc, 1.0)
    lox = gx - x1
    hix = gx - x0
    loy = gy - y1
    hiy = gy - y0
    dy = tl.minimum(tl.maximum(-cb * lox / sc, loy), hiy)
    q = 0.5 * (ca * lox * lox + cc * dy * dy) + cb * lox * dy
    dy = tl.minimum(tl.maximum(-cb * hix / sc, loy), hiy)
    q = tl.minimum(q, 0.5 * (ca * hix * hix + cc * dy * dy) + cb * hix * dy)
    dx = tl.minimum(tl.maximum(-cb * loy / sa, lox), hix)
    q = tl.minimum(q, 0.5 * (ca * dx * dx + cc * loy * loy) + cb * dx * loy)
    dx = tl.minimum(tl.maximum(-cb * hiy / sa, lox), hix)
    q = tl.minimum(q, 0.5 * (ca * dx * dx + cc * hiy * hiy) + cb * dx * hiy)
    inside = (lox <= 0) & (hix >= 0) & (loy <= 0) & (hiy >= 0)
    q = tl.where(inside, 0.0, q)
    lim = tl.log(tl.maximum(go, 1e-30) * 255.0)
    return bm & (go * 255.0 >= 0.9999) & ((q * 0.99 - 0.02 <= lim) | ~pd)


@triton.jit
def _bwd_step(flat_ids, pk, feat, o_grec, o_gfeat, g, idx, bm, gx, gy, ca, cb, cc, go, pxf, pyf, last, T, S, tgT,
              gi0, gi1, gi2, gi3, kB, k0, D, alpha_max, NC: tl.constexpr, SKIP: tl.constexpr):
    """One back-to-front batch of a band: its ``[B, P]`` block, then :func:`_bwd_batch` (with ``SKIP`` only when
    some Gaussian of the batch reaches some pixel). Returns the new ``T, S``."""
    dx = gx[:, None] - pxf[None, :]
    dy = gy[:, None] - pyf[None, :]
    sig = 0.5 * (ca[:, None] * dx * dx + cc[:, None] * dy * dy) + cb[:, None] * dx * dy
    vis = tl.exp(-sig)
    raw = go[:, None] * vis
    inc = bm[:, None] & (sig >= 0) & (raw >= 1.0 / 255.0) & (idx[:, None] <= last[None, :])
    if SKIP:
        if tl.max(tl.max(inc.to(tl.int32), axis=1), axis=0) > 0:
            T, S = _bwd_batch(flat_ids, pk, feat, o_grec, o_gfeat, g, idx, bm, gx, gy, ca, cb, cc, go, dx, dy, raw,
                              vis, inc, pxf, pyf, last, T, S, tgT, gi0, gi1, gi2, gi3, kB, k0, D, alpha_max, NC)
    else:
        T, S = _bwd_batch(flat_ids, pk, feat, o_grec, o_gfeat, g, idx, bm, gx, gy, ca, cb, cc, go, dx, dy, raw, vis,
                          inc, pxf, pyf, last, T, S, tgT, gi0, gi1, gi2, gi3, kB, k0, D, alpha_max, NC)
    return T, S


@triton.jit
def composite_bwd(offsets, flat_ids, pk, feat, T_final, last_ids, g_feat, g_alpha, o_grec, o_gfeat, width,
                  height, tiles_w, tiles_h, alpha_max, D, NC: tl.constexpr, TS: tl.constexpr,
                  B: tl.constexpr, SKIP: tl.constexpr, SPLIT: tl.constexpr, CULL: tl.constexpr,
                  CH: tl.constexpr):
    """``SPLIT``: programs per tile, each walking the tile's list back to front for a band of ``TS // SPLIT``
    rows only, from its own pixels' last contributor (more, shorter programs: the slowest tiles' long lists
    are shared by ``SPLIT`` programs; one atomic per Gaussian per band instead of per tile). ``CULL``: leave
    out Gaussians that cannot reach the band's pixel box (:func:`_reaches_box`, from the records alone: a
    tile's list holds every Gaussian whose 3-sigma square overlaps the tile, most of which miss a given band):
    0 off; 1 skip a batch of ``B`` consecutive list entries none of which reaches; 2 compact: test ``CH``
    entries at a time and process only those that reach, ``B`` at a time in list order. ``SKIP``: test first
    whether any Gaussian of a batch contributes to any pixel of the band (from the ``[B, P]`` block), and
    skip the batch's reductions and atomics when none does. A Gaussian left out adds nothing to the
    transmittance, the colour sum or any gradient, so every combination gives the same result (up to the
    float32 order of the in-batch products when CULL is 2)."""
    tile, pix, inimg, pxf, pyf = _sub_tile_pixels(tl.program_id(0), tiles_w, tiles_h, width, height, TS, SPLIT)
    grp = tl.program_id(1)
    start = tl.load(offsets + tile).to(tl.int32)
    k0 = grp * NC
    # channel index as vectors (the interpreter rejects scalar & vector masks)
    kB = k0 + tl.zeros([B], dtype=tl.int32)
    kP = k0 + tl.zeros([TS * TS // SPLIT], dtype=tl.int32)
    Tf = tl.load(T_final + pix, mask=inimg, other=1.0)
    last = tl.load(last_ids + pix, mask=inimg, other=-1)
    gT = -tl.load(g_alpha + pix, mask=inimg, other=0.0)
    # the alpha-map gradient is not per channel: group 0 carries it
    tgT = tl.where(kP == 0, Tf * gT, 0.0)
    z = tl.zeros([TS * TS // SPLIT], dtype=tl.float32)
    gi0 = tl.load(g_feat + pix * D + k0, mask=inimg & (kP < D), other=0.0)
    gi1 = z
    gi2 = z
    gi3 = z
    if NC > 1:
        gi1 = tl.load(g_feat + pix * D + k0 + 1, mask=inimg & (kP + 1 < D), other=0.0)
    if NC > 2:
        gi2 = tl.load(g_feat + pix * D + k0 + 2, mask=inimg & (kP + 2 < D), other=0.0)
    if NC > 3:
        gi3 = tl.load(g_feat + pix * D + k0 + 3, mask=inimg & (kP + 3 < D), other=0.0)
    # the band's box of pixel centres inside the image (used by CULL; a band wholly outside has lmax = -1)
    bx0 = tl.min(pxf, axis=0)
    by0 = tl.min(pyf, axis=0)
    bx1 = tl.max(tl.where(inimg, pxf, bx0), axis=0)
    by1 = tl.max(tl.where(inimg, pyf, by0), axis=0)
    lmax = tl.max(last, axis=0)
    T = Tf
    S = z
    if CULL == 2:
        # compacted: chunks of CH list entries back to front; the entries of a chunk that reach the band, in
        # list order, are gathered B at a time (a [B, CH] one-hot select) and processed back to front
        nch = (lmax - start + CH) // CH
        nch = tl.where(lmax >= start, nch, 0)
        cr = tl.arange(0, CH)
        br = tl.arange(0, B)
        for kc in range(0, nch):
            cidx = start + (nch - 1 - kc) * CH + cr
            cm = cidx <= lmax
            cg = tl.load(flat_ids + cidx, mask=cm, other=0)
            hx, hy, ha, hb, hc, ho = _load_rec(pk, cg, cm)
            reach = _reaches_box(hx, hy, ha, hb, hc, ho, cm, bx0, bx1, by0, by1)
            ri = reach.to(tl.int32)
            pos = tl.cumsum(ri, axis=0) - 1  # compacted slot of a reaching entry
            cnt = tl.sum(ri, axis=0)
            for kb in range(0, (cnt + B - 1) // B):
                slot = cnt - (kb + 1) * B + br
                sel = reach[None, :] & (pos[None, :] == slot[:, None])
                idx = tl.sum(tl.where(sel, cidx[None, :], 0), axis=1)
                bm = slot >= 0
                g = tl.load(flat_ids + idx, mask=bm, other=0)
                gx, gy, ca, cb, cc, go = _load_rec(pk, g, bm)
                T, S = _bwd_step(flat_ids, pk, feat, o_grec, o_gfeat, g, idx, bm, gx, gy, ca, cb, cc, go, pxf, pyf,
                                 last, T, S, tgT, gi0, gi1, gi2, gi3, kB, k0, D, alpha_max, NC, SKIP)
    else:
        nb = (lmax - start + B) // B
        nb = tl.where(lmax >= start, nb, 0)
        for kb in range(0, nb):
            b0 = start + (nb - 1 - kb) * B
            idx = b0 + tl.arange(0, B)
            bm = idx <= lmax
            g = tl.load(flat_ids + idx, mask=bm, other=0)
            gx, gy, ca, cb, cc, go = _load_rec(pk, g, bm)
            if CULL == 1:
                reach = _reaches_box(gx, gy, ca, cb, cc, go, bm, bx0, bx1, by0, by1)
                if tl.max(reach.to(tl.int32), axis=0) > 0:
                    T, S = _bwd_step(flat_ids, pk, feat, o_grec, o_gfeat, g, idx, bm, gx, gy, ca, cb, cc, go, pxf,
                                     pyf, last, T, S, tgT, gi0, gi1, gi2, gi3, kB, k0, D, alpha_max, NC, SKIP)
            else:
                T, S = _bwd_step(flat_ids, pk, feat, o_grec, o_gfeat, g, idx, bm, gx, gy, ca, cb, cc, go, pxf, pyf,
                                 last, T, S, tgT, gi0, gi1, gi2, gi3, kB, k0, D, alpha_max, NC, SKIP)

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
        t_incl = T[None, :] * tl.cumprod(1.0 - a, axis=0)
        inc = (t_incl >= 1e-4) & ~done[None, :]
        a = tl.where(inc, a, 0.0)
        om = 1.0 - a
        cp = tl.cumprod(om, axis=0)
        w = a * T[None, :] * cp / om
        tl.atomic_add(o_acc + g, tl.sum(w, axis=1), mask=bm)
        tl.atomic_add(o_cnt + g, tl.sum((w > 0).to(tl.int32), axis=1), mask=bm)
        # largest weight in this block per pixel (first on ties), then against the running best
        wm = tl.max(w, axis=0)
        im = tl.min(tl.where(w == wm[None, :], idx[:, None], 2147483647), axis=0).to(tl.int32)
        better = wm > best_w
        best_w = tl.where(better, wm, best_w)
        best_i = tl.where(better, im, best_i)
        T = T * tl.min(cp, axis=0)
        done = done | (tl.min(t_incl, axis=0) < 1e-4)
        b0 += B
    pix = (cam * height + pyi) * width + pxi
    bg = tl.load(flat_ids + best_i, mask=inimg & (best_i >= 0), other=-1)
    tl.store(o_best + pix, tl.where(best_i >= 0, bg, -1), mask=inimg)





# ------------------------------------------------------------------ compositing forward
# The tile's list is walked one Gaussian per step, unrolled B at a time so the scalar loads of a batch
# issue together; [P] vectors only: no scans, no division. The whole tile stops once every pixel is done.


@triton.jit
def _load_feat4(feat, g, ok, k0, D, NC: tl.constexpr):
    f0 = tl.load(feat + g * D + k0, mask=ok & (k0 < D), other=0.0)
    f1 = 0.0
    f2 = 0.0
    f3 = 0.0
    if NC > 1:
        f1 = tl.load(feat + g * D + k0 + 1, mask=ok & (k0 + 1 < D), other=0.0)
    if NC > 2:
        f2 = tl.load(feat + g * D + k0 + 2, mask=ok & (k0 + 2 < D), other=0.0)
    if NC > 3:
        f3 = tl.load(feat + g * D + k0 + 3, mask=ok & (k0 + 3 < D), other=0.0)
    return f0, f1, f2, f3


@triton.jit
def _fwd_entry(feat, g, ok, j, k0, D, gx, gy, ca, cb, cc, go, pxf, pyf, alpha_max, acc0, acc1, acc2, acc3, medi, last,
               T, done, NC: tl.constexpr, WANT_MED: tl.constexpr):
    """One list entry ``j`` (Gaussian ``g``, its record loaded) composited over a program's pixels, front to back."""
    f0, f1, f2, f3 = _load_feat4(feat, g, ok, k0, D, NC)
    dx = gx - pxf
    dy = gy - pyf
    sig = 0.5 * (ca * dx * dx + cc * dy * dy) + cb * dx * dy
    raw = go * tl.exp(-sig)
    a = tl.minimum(raw, alpha_max)
    keep = (sig >= 0) & (raw >= 1.0 / 255.0) & ~done
    tn = T * (1.0 - a)
    cross = keep & (tn < 1e-4)
    inc = keep & ~cross
    w = tl.where(inc, a * T, 0.0)
    acc0 += w * f0
    if NC > 1:
        acc1 += w * f1
    if NC > 2:
        acc2 += w * f2
    if NC > 3:
        acc3 += w * f3
    if WANT_MED:
        medi = tl.where(inc & (T > 0.5), j, medi)
    last = tl.where(inc, j, last)
    T = tl.where(inc, tn, T)
    done = done | cross
    return acc0, acc1, acc2, acc3, medi, last, T, done


@triton.jit(do_not_specialize=["n_isect", "n_tiles"])
def composite_fwd(offsets, flat_ids, pk, feat, out_feat, out_T, out_last, out_med, width, height,
                  tiles_w, tiles_h, alpha_max, D, n_tiles, n_isect, NC: tl.constexpr, TS: tl.constexpr,
                  B: tl.constexpr, WANT_MED: tl.constexpr, SPLIT: tl.constexpr, CULL: tl.constexpr):
    """``SPLIT`` programs per tile, each compositing a band of ``TS // SPLIT`` rows (1: the whole tile); with
    ``CULL`` a band skips the list entries that cannot reach its pixel box (:func:`_reaches_box`, a scalar test
    per entry before its pixel work). A skipped entry passes the cut at none of the band's pixels, so every
    combination gives the same bits: the bands shorten the walk of the crowded tiles' long lists (issue 29;
    docs/benchmarks.md, "The late step profiled")."""
    tile, pix, inimg, pxf, pyf = _sub_tile_pixels(tl.program_id(0), tiles_w, tiles_h, width, height, TS, SPLIT)
    grp = tl.program_id(1)
    start = tl.load(offsets + tile).to(tl.int32)
    end = tl.where(tile + 1 < n_tiles, tl.load(offsets + tile + 1, mask=tile + 1 < n_tiles, other=0), n_isect)
    end = end.to(tl.int32)
    k0 = grp * NC
    P: tl.constexpr = TS * TS // SPLIT
    kP = k0 + tl.zeros([P], dtype=tl.int32)
    T = tl.zeros([P], dtype=tl.float32) + 1.0
    done = ~inimg
    acc0 = tl.zeros([P], dtype=tl.float32)
    acc1 = tl.zeros([P], dtype=tl.float32)
    acc2 = tl.zeros([P], dtype=tl.float32)
    acc3 = tl.zeros([P], dtype=tl.float32)
    last = tl.zeros([P], dtype=tl.int32) - 1
    medi = tl.zeros([P], dtype=tl.int32) - 1
    if CULL:  # the band's box of pixel centres inside the image (no work in the path without culling)
        bx0 = tl.min(pxf, axis=0)
        by0 = tl.min(pyf, axis=0)
        bx1 = tl.max(tl.where(inimg, pxf, bx0), axis=0)
        by1 = tl.max(tl.where(inimg, pyf, by0), axis=0)
    b0 = start
    while (b0 < end) & (tl.min(done.to(tl.int32), axis=0) == 0):
        for kk in tl.static_range(B):
            j = b0 + kk
            ok = j < end
            g = tl.load(flat_ids + j, mask=ok, other=0)
            gx, gy, ca, cb, cc, go = _load_rec(pk, g, ok)
            if CULL:
                if _reaches_box(gx, gy, ca, cb, cc, go, ok, bx0, bx1, by0, by1):
                    acc0, acc1, acc2, acc3, medi, last, T, done = _fwd_entry(
                        feat, g, ok, j, k0, D, gx, gy, ca, cb, cc, go, pxf, pyf, alpha_max, acc0, acc1, acc2, acc3,
                        medi, last, T, done, NC, WANT_MED)
            else:
                acc0, acc1, acc2, acc3, medi, last, T, done = _fwd_entry(
                    feat, g, ok, j, k0, D, gx, gy, ca, cb, cc, go, pxf, pyf, alpha_max, acc0, acc1, acc2, acc3, medi,
                    last, T, done, NC, WANT_MED)
        b0 += B
    tl.store(out_feat + pix * D + k0, acc0, mask=inimg & (kP < D))
    if NC > 1:
        tl.store(out_feat + pix * D + k0 + 1, acc1, mask=inimg & (kP + 1 < D))
    if NC > 2:
        tl.store(out_feat + pix * D + k0 + 2, acc2, mask=inimg & (kP + 2 < D))
    if NC > 3:
        tl.store(out_feat + pix * D + k0 + 3, acc3, mask=inimg & (kP + 3 < D))
    first = inimg & (kP == 0)
    tl.store(out_T + pix, T, mask=first)
    tl.store(out_last + pix, last, mask=first)
    if WANT_MED:
        mg = tl.load(flat_ids + medi, mask=first & (medi >= 0), other=-1)
        tl.store(out_med + pix, tl.where(medi >= 0, mg, -1), mask=first)
