"""Triton kernels of :mod:`meshlift.kernels.antialias_triton` (design, formulas and twin: its docstring).

Imported only by that module, on first use (``triton`` is imported here at module level, so set
``TRITON_INTERPRET=1`` before the first call to run them on the CPU interpreter).
"""

import triton
import triton.language as tl

from meshlift.kernels._rows_jit import ld3_index as _ld3_index


@triton.jit
def _signbit(x):
    return x.to(tl.int32, bitcast=True) < 0


@triton.jit
def _px(pos_ptr, vi, m, half_w, half_h, rx, ry, DOWN: tl.constexpr):
    """Clip-space vertex ``vi`` → pixel offsets from the reference pixel centre, flipped so the pair is +x."""
    x = tl.load(pos_ptr + vi * 4, mask=m, other=0.0)
    y = tl.load(pos_ptr + vi * 4 + 1, mask=m, other=0.0)
    w = tl.load(pos_ptr + vi * 4 + 3, mask=m, other=1.0)
    X = (x / w + 1.0) * half_w - rx
    Y = (y / w + 1.0) * half_h - ry
    if DOWN:  # (no early return: one return per jit function)
        X, Y = Y, X
    return X, Y, x, y, w


@triton.jit
def _edge(xa, ya, xb, yb, ox, oy, bb, ds):
    """Silhouette test and crossing distance of one edge (``render.antialias``'s no-grad block)."""
    area_o = (xa - ox) * (yb - oy) - (xb - ox) * (ya - oy)
    sil = _signbit(area_o) == _signbit(bb)
    dx = xb - xa
    dy = yb - ya
    crosses = (_signbit(ya) != _signbit(yb)) & (dy != 0)
    dnum = ds * (xa * dy - ya * dx)
    dc = tl.where(crosses, dnum / tl.where(crosses, dy, 1.0), float("-inf"))
    return dc, sil & (tl.abs(dy) >= tl.abs(dx))


@triton.jit
def _pair(rast_ptr, pos_ptr, tri_ptr, topo_ptr, p, valid, H, W, V,
          BATCHED: tl.constexpr, DOWN: tl.constexpr):
    """The pair ``(p, p + step)``: whether it has a usable silhouette crossing, the crossing ``dcs`` and the
    quantities its backward needs (the chosen edge's vertex rows and clip coordinates)."""
    step = W if DOWN else 1
    q = p + step
    id0 = tl.floor(tl.load(rast_ptr + p * 4 + 3, mask=valid, other=0.0) + 0.5).to(tl.int64) - 1
    id1 = tl.floor(tl.load(rast_ptr + q * 4 + 3, mask=valid, other=0.0) + 0.5).to(tl.int64) - 1
    cand = valid & (id0 != id1)
    z0 = tl.load(rast_ptr + p * 4 + 2, mask=cand, other=0.0)
    z1 = tl.load(rast_ptr + q * 4 + 2, mask=cand, other=0.0)
    use1 = (id0 < 0) | ((id1 >= 0) & ~(z0 < z1))
    t = tl.maximum(tl.where(use1, id1, id0), 0)
    ref = tl.where(use1, q, p)
    ds = tl.where(use1, -1.0, 1.0)
    v0, v1, v2 = _ld3_index(tri_ptr, t, cand)
    o0 = tl.load(topo_ptr + t * 3, mask=cand, other=-1)
    o1 = tl.load(topo_ptr + t * 3 + 1, mask=cand, other=-1)
    o2 = tl.load(topo_ptr + t * 3 + 2, mask=cand, other=-1)
    o0 = tl.where(o0 >= 0, o0, v0)
    o1 = tl.where(o1 >= 0, o1, v1)
    o2 = tl.where(o2 >= 0, o2, v2)
    if BATCHED:
        vb = ref // (H * W) * V
    else:
        vb = ref * 0
    v0 += vb
    v1 += vb
    v2 += vb
    o0 += vb
    o1 += vb
    o2 += vb
    half_w = W * 0.5
    half_h = H * 0.5
    rx = (ref % W).to(tl.float32) + 0.5
    ry = ((ref // W) % H).to(tl.float32) + 0.5
    x0, y0, cx0, cy0, w0 = _px(pos_ptr, v0, cand, half_w, half_h, rx, ry, DOWN)
    x1, y1, cx1, cy1, w1 = _px(pos_ptr, v1, cand, half_w, half_h, rx, ry, DOWN)
    x2, y2, cx2, cy2, w2 = _px(pos_ptr, v2, cand, half_w, half_h, rx, ry, DOWN)
    ox0, oy0, _, _, _ = _px(pos_ptr, o0, cand, half_w, half_h, rx, ry, DOWN)
    ox1, oy1, _, _, _ = _px(pos_ptr, o1, cand, half_w, half_h, rx, ry, DOWN)
    ox2, oy2, _, _, _ = _px(pos_ptr, o2, cand, half_w, half_h, rx, ry, DOWN)
    bb = (x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0)
    # edge k runs from v_{k+1} to v_{k+2}, opposite vertex o_k
    dc0, ok0 = _edge(x1, y1, x2, y2, ox0, oy0, bb, ds)
    dc1, ok1 = _edge(x2, y2, x0, y0, ox1, oy1, bb, ds)
    dc2, ok2 = _edge(x0, y0, x1, y1, ox2, oy2, bb, ds)
    # argmax, first index on ties (torch's)
    k1 = dc1 > dc0
    best = tl.where(k1, dc1, dc0)
    k2 = dc2 > best
    dck = tl.where(k2, dc2, best)
    okk = tl.where(k2, ok2, tl.where(k1, ok1, ok0))
    front = (w0 > 0) & (w1 > 0) & (w2 > 0)
    good = (cand & (dck > float("-inf")) & (dck < float("inf")) & okk & (dck > -0.0625) & (dck < 1.0625)
            & front)
    # the chosen edge's endpoints a = v_{k+1}, b = v_{k+2}: row index and clip coordinates
    ia = tl.where(k2, v0, tl.where(k1, v2, v1))
    ib = tl.where(k2, v1, tl.where(k1, v0, v2))
    ax = tl.where(k2, cx0, tl.where(k1, cx2, cx1))
    ay = tl.where(k2, cy0, tl.where(k1, cy2, cy1))
    aw = tl.where(good, tl.where(k2, w0, tl.where(k1, w2, w1)), 1.0)
    bx = tl.where(k2, cx1, tl.where(k1, cx0, cx2))
    by = tl.where(k2, cy1, tl.where(k1, cy0, cy2))
    bw = tl.where(good, tl.where(k2, w1, tl.where(k1, w0, w2)), 1.0)
    return good, ds, rx, ry, ia, ib, ax, ay, aw, bx, by, bw


@triton.jit
def _dcs(ax, ay, aw, bx, by, bw, rx, ry, half_w, half_h, ds, good, DOWN: tl.constexpr):
    """The differentiable crossing distance of the chosen edge (flipped frame) and its pieces."""
    Xa = (ax / aw + 1.0) * half_w - rx
    Ya = (ay / aw + 1.0) * half_h - ry
    Xb = (bx / bw + 1.0) * half_w - rx
    Yb = (by / bw + 1.0) * half_h - ry
    if DOWN:
        Xa, Ya, Xb, Yb = Ya, Xa, Yb, Xb
    den = tl.where(good, Yb - Ya, 1.0)
    num = Xa * (Yb - Ya) - Ya * (Xb - Xa)
    return ds * num / den, Xa, Ya, Xb, Yb, num, den


@triton.jit(do_not_specialize=["n", "V"])
def aa_pairs(rast_ptr, pos_ptr, tri_ptr, topo_ptr, alpha_ptr, n, H, W, V,
             BATCHED: tl.constexpr, DOWN: tl.constexpr, BLOCK: tl.constexpr):
    p = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = p < n
    valid = inside & ((((p // W) % H) < H - 1) if DOWN else ((p % W) < W - 1))
    good, ds, rx, ry, ia, ib, ax, ay, aw, bx, by, bw = _pair(rast_ptr, pos_ptr, tri_ptr, topo_ptr, p, valid, H, W,
                                                             V, BATCHED, DOWN)
    dcs, _, _, _, _, _, _ = _dcs(ax, ay, aw, bx, by, bw, rx, ry, W * 0.5, H * 0.5, ds, good, DOWN)
    alpha = tl.where(good, ds * (0.5 - tl.minimum(tl.maximum(dcs, 0.0), 1.0)), 0.0)
    tl.store(alpha_ptr + p, alpha, mask=inside)


@triton.jit
def _ld(ptr, rows, ch, m2, C: tl.constexpr):
    return tl.load(ptr + rows[:, None] * C + ch[None, :], mask=m2, other=0.0)


@triton.jit(do_not_specialize=["n"])
def aa_apply(color_ptr, ah_ptr, av_ptr, out_ptr, n, H, W, C: tl.constexpr, CP: tl.constexpr, BLOCK: tl.constexpr):
    """``out[p] = c[p] + Σ`` over the (up to four) pairs that target ``p`` of ``alpha · (c[p1] − c[p0])``."""
    p = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = p < n
    ch = tl.arange(0, CP)
    m2 = m[:, None] & (ch[None, :] < C)
    col = p % W
    row = (p // W) % H
    c = _ld(color_ptr, p, ch, m2, C)
    out = c
    # horizontal: the left pair (p − 1, p) targets p when alpha < 0, the right pair (p, p + 1) when alpha > 0
    ml = m & (col > 0)
    a = tl.load(ah_ptr + p - 1, mask=ml, other=0.0)
    a = tl.where(a < 0, a, 0.0)
    out += a[:, None] * (c - _ld(color_ptr, p - 1, ch, m2 & ml[:, None], C))
    a = tl.load(ah_ptr + p, mask=m, other=0.0)
    a = tl.where(a > 0, a, 0.0)
    out += a[:, None] * (_ld(color_ptr, p + 1, ch, m2 & (a > 0)[:, None], C) - c)
    mu = m & (row > 0)
    a = tl.load(av_ptr + p - W, mask=mu, other=0.0)
    a = tl.where(a < 0, a, 0.0)
    out += a[:, None] * (c - _ld(color_ptr, p - W, ch, m2 & mu[:, None], C))
    a = tl.load(av_ptr + p, mask=m, other=0.0)
    a = tl.where(a > 0, a, 0.0)
    out += a[:, None] * (_ld(color_ptr, p + W, ch, m2 & (a > 0)[:, None], C) - c)
    tl.store(out_ptr + p[:, None] * C + ch[None, :], out, mask=m2)


@triton.jit(do_not_specialize=["n"])
def aa_bwd_color(g_ptr, color_ptr, ah_ptr, av_ptr, g_color_ptr, g_ah_ptr, g_av_ptr, n, H, W,
                 C: tl.constexpr, CP: tl.constexpr, BLOCK: tl.constexpr):
    """``dL/dc[p] = g[p] − α g[tgt]`` (p the first pixel of a pair) ``+ α g[tgt]`` (the second);
    ``dL/dα`` of the pairs starting at p (``<g[tgt], c[p1] − c[p0]>``; also for α = 0 of a usable pair,
    where the target is p1 as in the twin)."""
    p = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = p < n
    ch = tl.arange(0, CP)
    m2 = m[:, None] & (ch[None, :] < C)
    col = p % W
    row = (p // W) % H
    gc = _ld(g_ptr, p, ch, m2, C)
    # pairs starting at p: d alpha for every valid pair (alpha may be exactly 0 on a usable crossing)
    mh = m & (col < W - 1)
    a = tl.load(ah_ptr + p, mask=mh, other=0.0)
    tgt = tl.where(a > 0, p, p + 1)
    gt = _ld(g_ptr, tgt, ch, m2 & mh[:, None], C)
    diff = _ld(color_ptr, p + 1, ch, m2 & mh[:, None], C) - _ld(color_ptr, p, ch, m2 & mh[:, None], C)
    tl.store(g_ah_ptr + p, tl.sum(gt * diff, axis=1), mask=m)
    gc -= a[:, None] * gt
    mv = m & (row < H - 1)
    a = tl.load(av_ptr + p, mask=mv, other=0.0)
    tgt = tl.where(a > 0, p, p + W)
    gt = _ld(g_ptr, tgt, ch, m2 & mv[:, None], C)
    diff = _ld(color_ptr, p + W, ch, m2 & mv[:, None], C) - _ld(color_ptr, p, ch, m2 & mv[:, None], C)
    tl.store(g_av_ptr + p, tl.sum(gt * diff, axis=1), mask=m)
    gc -= a[:, None] * gt
    # pairs ending at p
    ml = m & (col > 0)
    a = tl.load(ah_ptr + p - 1, mask=ml, other=0.0)
    gt = _ld(g_ptr, tl.where(a > 0, p - 1, p), ch, m2 & ml[:, None], C)
    gc += a[:, None] * gt
    mu = m & (row > 0)
    a = tl.load(av_ptr + p - W, mask=mu, other=0.0)
    gt = _ld(g_ptr, tl.where(a > 0, p - W, p), ch, m2 & mu[:, None], C)
    gc += a[:, None] * gt
    tl.store(g_color_ptr + p[:, None] * C + ch[None, :], gc, mask=m2)


@triton.jit
def _add_vertex(g_pos_ptr, vi, gX, gY, x, y, w, half_w, half_h, m, DOWN: tl.constexpr):
    """Scatter d L / d (X, Y) of a vertex (flipped frame) into its clip-space x, y, w gradient."""
    if DOWN:
        gX, gY = gY, gX
    # X = (x / w + 1) · W/2 − rx
    gx = gX * half_w / w
    gy = gY * half_h / w
    gw = -(gx * x + gy * y) / w
    tl.atomic_add(g_pos_ptr + vi * 4, gx, mask=m)
    tl.atomic_add(g_pos_ptr + vi * 4 + 1, gy, mask=m)
    tl.atomic_add(g_pos_ptr + vi * 4 + 3, gw, mask=m)


@triton.jit(do_not_specialize=["n", "V"])
def aa_bwd_pos(rast_ptr, pos_ptr, tri_ptr, topo_ptr, g_alpha_ptr, g_pos_ptr, n, H, W, V, boost,
               BATCHED: tl.constexpr, DOWN: tl.constexpr, BLOCK: tl.constexpr):
    p = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = p < n
    valid = inside & ((((p // W) % H) < H - 1) if DOWN else ((p % W) < W - 1))
    good, ds, rx, ry, ia, ib, ax, ay, aw, bx, by, bw = _pair(rast_ptr, pos_ptr, tri_ptr, topo_ptr, p, valid, H, W,
                                                             V, BATCHED, DOWN)
    half_w = W * 0.5
    half_h = H * 0.5
    dcs, Xa, Ya, Xb, Yb, num, den = _dcs(ax, ay, aw, bx, by, bw, rx, ry, half_w, half_h, ds, good, DOWN)
    ga = tl.load(g_alpha_ptr + p, mask=inside, other=0.0)
    # alpha = ds (0.5 − clamp(dcs, 0, 1)); dcs = ds · num / den, num = Xa Yb − Ya Xb, den = Yb − Ya
    G = tl.where(good & (dcs >= 0.0) & (dcs <= 1.0), -ds * ga, 0.0) * ds * boost
    inv = 1.0 / den
    r = num * inv * inv
    m = good & (G != 0)
    _add_vertex(g_pos_ptr, ia, G * Yb * inv, G * (r - Xb * inv), ax, ay, aw, half_w, half_h, m, DOWN)
    _add_vertex(g_pos_ptr, ib, -G * Ya * inv, G * (Xa * inv - r), bx, by, bw, half_w, half_h, m, DOWN)
