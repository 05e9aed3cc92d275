"""Triton kernels of :mod:`meshlift.kernels.raster_triton` (design, formulas and twins: its docstring).

Imported only by that module, on first use (``triton`` is imported here at module level, so set
``TRITON_INTERPRET=1`` before the first rasterize call to run them on the CPU interpreter).
"""

import triton
import triton.language as tl

from meshlift.kernels._raster_snap_jit import _fixed_cover, _fixed_planes, _snap

# Integer arguments that follow the mesh (triangle and vertex counts, strides over vertices) are marked
# ``do_not_specialize``: Triton would otherwise compile a new variant whenever such a count changes its
# divisibility by 16, which happens on most steps of the surface method's pass 1 (marching tets).


@triton.jit
def _div(a, b):
    """Correctly rounded division (float32 ``/`` compiles to an approximate one), as torch's."""
    if a.dtype.is_fp64():
        q = a / b
    else:
        q = tl.div_rn(a, b)
    return q


@triton.jit
def _tri_off(t, k):
    """Element offset ``3 t + k`` of vertex ``k`` of triangle ``t`` in the ``[T, 3]`` index buffer, formed in
    int64: ``t`` is int32 (a lane index or a loaded id) and ``t * 3`` wraps from t = 715,827,883 (2^31 / 3)
    before it is added to the pointer."""
    return t.to(tl.int64) * 3 + k


@triton.jit
def _vert(pos_ptr, tri_ptr, t, k: tl.constexpr, vbase, mask):
    """Clip-space vertex k of triangle t (vector or scalar)."""
    row = (tl.load(tri_ptr + _tri_off(t, k), mask=mask, other=0).to(tl.int64) + vbase) * 4
    x = tl.load(pos_ptr + row + 0, mask=mask, other=0.0)
    y = tl.load(pos_ptr + row + 1, mask=mask, other=0.0)
    z = tl.load(pos_ptr + row + 2, mask=mask, other=0.0)
    w = tl.load(pos_ptr + row + 3, mask=mask, other=1.0)
    return x, y, z, w

@triton.jit
def _vert_s(pos_ptr, tri_ptr, t, k: tl.constexpr, vbase):
    """Clip-space vertex k of triangle t (scalar)."""
    row = (tl.load(tri_ptr + _tri_off(t, k)).to(tl.int64) + vbase) * 4
    return tl.load(pos_ptr + row + 0), tl.load(pos_ptr + row + 1), tl.load(pos_ptr + row + 2), tl.load(pos_ptr + row + 3)


@triton.jit
def _screen_xy(x0, y0, z0, w0, x1, y1, z1, w1, x2, y2, z2, w2, hw, hh):
    """``(simple, X0, Y0, X1, Y1, X2, Y2)``: whether every vertex is in front of the eye and of the near plane, and
    the vertices in pixel-centre units, the torch backend's ``(x / w) * half + (half - 0.5)`` with each op rounded
    (correctly rounded divide; ``w`` taken as 1 where not ``simple``)."""
    tiny = 1.1754943508222875e-38
    simple = (z0 + w0 >= 0) & (z1 + w1 >= 0) & (z2 + w2 >= 0) & (w0 > tiny) & (w1 > tiny) & (w2 > tiny)
    s0 = tl.where(simple, w0, 1.0)
    s1 = tl.where(simple, w1, 1.0)
    s2 = tl.where(simple, w2, 1.0)
    return (simple, _div(x0, s0) * hw + (hw - 0.5), _div(y0, s0) * hh + (hh - 0.5), _div(x1, s1) * hw + (hw - 0.5),
            _div(y1, s1) * hh + (hh - 0.5), _div(x2, s2) * hw + (hw - 0.5), _div(y2, s2) * hh + (hh - 0.5))


@triton.jit(do_not_specialize=["T", "vstride", "t_lo", "t_hi"])
def _bin_kernel(
    pos_ptr, tri_ptr, first_ptr, count_ptr, cnt_ptr, list_ptr, key_ptr, xtab_ptr, ytab_ptr,
    T, vstride, H, W, n_tx, n_ty, hw, hh, big, slack, t_lo, t_hi,
    RANGE: tl.constexpr, EMIT: tl.constexpr, TILE_H: tl.constexpr, TILE_W: tl.constexpr,
    STAMP: tl.constexpr, BLOCK: tl.constexpr,
):
    """Per triangle instance: the tiles its box touches (count, or emit into the tile lists); with
    ``STAMP`` > 0, triangles whose box fits ``STAMP × STAMP`` pixels are instead rasterized right here
    in the emit pass (their stamp's pixel centres, atomic min of the packed depth key) and not binned."""
    b = tl.program_id(1)
    local = t_lo + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # this chunk: local indices [t_lo, t_hi)
    if RANGE:
        first = tl.load(first_ptr + b).to(tl.int32)
        count = tl.load(count_ptr + b).to(tl.int32)
        vbase = 0
    else:
        first = 0
        count = T
        vbase = b.to(tl.int64) * vstride
    m = (local < count) & (local < t_hi)
    t = first + local
    x0, y0, z0, w0 = _vert(pos_ptr, tri_ptr, t, 0, vbase, m)
    x1, y1, z1, w1 = _vert(pos_ptr, tri_ptr, t, 1, vbase, m)
    x2, y2, z2, w2 = _vert(pos_ptr, tri_ptr, t, 2, vbase, m)
    any_in = (z0 + w0 >= 0) | (z1 + w1 >= 0) | (z2 + w2 >= 0)
    all_far = (w0 < z0) & (w1 < z1) & (w2 < z2)
    live = m & any_in & (~all_far)  # edge-on triangles are skipped by the raster kernel
    # the torch backend's box and the watertight test's vertices
    simple, X0, Y0, X1, Y1, X2, Y2 = _screen_xy(x0, y0, z0, w0, x1, y1, z1, w1, x2, y2, z2, w2, hw, hh)
    xmn = tl.minimum(tl.maximum(tl.minimum(tl.minimum(X0, X1), X2) - slack, -1.0), big)
    xmx = tl.minimum(tl.maximum(tl.maximum(tl.maximum(X0, X1), X2) + slack, -big), big)
    ymn = tl.minimum(tl.maximum(tl.minimum(tl.minimum(Y0, Y1), Y2) - slack, -1.0), big)
    ymx = tl.minimum(tl.maximum(tl.maximum(tl.maximum(Y0, Y1), Y2) + slack, -big), big)
    j0 = tl.maximum(tl.math.ceil(xmn.to(tl.float32)).to(tl.int32), 0)
    j1 = tl.minimum(tl.math.floor(xmx.to(tl.float32)).to(tl.int32), W - 1)
    i0 = tl.maximum(tl.math.ceil(ymn.to(tl.float32)).to(tl.int32), 0)
    i1 = tl.minimum(tl.math.floor(ymx.to(tl.float32)).to(tl.int32), H - 1)
    j0 = tl.where(simple, j0, 0)
    j1 = tl.where(simple, j1, W - 1)
    i0 = tl.where(simple, i0, 0)
    i1 = tl.where(simple, i1, H - 1)
    live = live & (j1 >= j0) & (i1 >= i0)
    if STAMP > 0:
        SX0, SY0, g0 = _snap(X0, Y0)
        SX1, SY1, g1 = _snap(X1, Y1)
        SX2, SY2, g2 = _snap(X2, Y2)
        small = live & simple & g0 & g1 & g2 & (j1 - j0 < STAMP) & (i1 - i0 < STAMP)
        live = live & (~small)
        if EMIT:
            a0, b0, c0, a1, b1, c1, a2, b2, c2, za, zb, zc, flat = _planes_of(x0, y0, z0, w0, x1, y1, z1, w1, x2, y2,
                                                                               z2, w2)
            f0, f1, f2, f3, f4, f5, f6, f7, f8 = _fixed_planes(SX0, SY0, SX1, SY1, SX2, SY2)
            pbase = b.to(tl.int64) * H * W
            for dy in tl.static_range(STAMP):
                ii = i0 + dy
                py = tl.load(ytab_ptr + ii, mask=small & (ii <= i1), other=0.0)
                for dx in tl.static_range(STAMP):
                    jj = j0 + dx
                    mp = small & (ii <= i1) & (jj <= j1)
                    px = tl.load(xtab_ptr + jj, mask=mp, other=0.0)
                    z = (za * px + zc) + zb * py
                    cov = _fixed_cover(f0, f1, f2, f3, f4, f5, f6, f7, f8, jj.to(tl.int64) * 4096,
                                       ii.to(tl.int64) * 4096)
                    ok = mp & cov & (flat == 0) & (z >= -1.0) & (z <= 1.0)
                    tl.atomic_min(key_ptr + pbase + ii * W + jj, _key(z, t), mask=ok, sem="relaxed")
    tx0 = j0 // TILE_W
    tx1 = j1 // TILE_W
    ty0 = i0 // TILE_H
    ty1 = i1 // TILE_H
    ntx = tl.where(live, tx1 - tx0 + 1, 1)
    n = tl.where(live, ntx * (ty1 - ty0 + 1), 0)
    nmax = tl.max(n, axis=0)
    gbase = b * (n_tx * n_ty)
    for k in range(0, nmax):
        mk = k < n
        ty = ty0 + k // ntx
        tx = tx0 + k % ntx
        g = gbase + ty * n_tx + tx
        if EMIT:
            slot = tl.atomic_add(cnt_ptr + g, 1, mask=mk, sem="relaxed")
            tl.store(list_ptr + slot, t, mask=mk)
        else:
            tl.atomic_add(cnt_ptr + g + 1, 1, mask=mk, sem="relaxed")

@triton.jit
def _key(z, t):
    """Packed depth key (as ``backends._common.depth_key``): the order-preserving int of ``z`` at float32
    precision × 2^31 + triangle index; smaller key = nearer, then lower index."""
    bits = z.to(tl.float32).to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return ordered.to(tl.int64) * 2147483648 + t.to(tl.int64)


@triton.jit
def _planes(pos_ptr, tri_ptr, t, vbase, H, W):
    """Sign-normalised edge planes and the z/w plane of triangle t (scalars), as the torch backend's
    ``_planes`` (``triangle_planes`` + sign), then its coverage planes: ``(a0, b0, c0, a1, b1, c1, a2, b2, c2, za,
    zb, zc, flat, fixed, f0 .. f8)`` — ``flat``: edge-on (``det = 0``, covers nothing); ``fixed``: in front of the
    eye and inside the guard band, coverage by the exact planes ``f0 .. f8`` of its snapped vertices
    (:func:`_fixed_planes`; ``_common``'s watertight test), else by the homogeneous ones. ``hw, hh``: half the
    image's width and height (pixels)."""
    x0, y0, z0, w0 = _vert_s(pos_ptr, tri_ptr, t, 0, vbase)
    x1, y1, z1, w1 = _vert_s(pos_ptr, tri_ptr, t, 1, vbase)
    x2, y2, z2, w2 = _vert_s(pos_ptr, tri_ptr, t, 2, vbase)
    a0, b0, c0, a1, b1, c1, a2, b2, c2, za, zb, zc, flat = _planes_of(x0, y0, z0, w0, x1, y1, z1, w1, x2, y2, z2, w2)
    hw = tl.full((), 0.5, x0.dtype) * W  # W / 2 in the positions' dtype (exact), as torch's half
    hh = tl.full((), 0.5, x0.dtype) * H
    simple, X0, Y0, X1, Y1, X2, Y2 = _screen_xy(x0, y0, z0, w0, x1, y1, z1, w1, x2, y2, z2, w2, hw, hh)
    SX0, SY0, g0 = _snap(X0, Y0)
    SX1, SY1, g1 = _snap(X1, Y1)
    SX2, SY2, g2 = _snap(X2, Y2)
    f0, f1, f2, f3, f4, f5, f6, f7, f8 = _fixed_planes(SX0, SY0, SX1, SY1, SX2, SY2)
    fixed = simple & g0 & g1 & g2
    return a0, b0, c0, a1, b1, c1, a2, b2, c2, za, zb, zc, flat, fixed, f0, f1, f2, f3, f4, f5, f6, f7, f8


@triton.jit
def _planes_of(x0, y0, z0, w0, x1, y1, z1, w1, x2, y2, z2, w2):
    """The planes of :func:`_planes` from the vertices (scalars or vectors)."""
    # e_k = h_{k+1} x h_{k+2}, h = (x, y, w) (torch.linalg.cross order)
    a0 = y1 * w2 - w1 * y2
    b0 = w1 * x2 - x1 * w2
    c0 = x1 * y2 - y1 * x2
    a1 = y2 * w0 - w2 * y0
    b1 = w2 * x0 - x2 * w0
    c1 = x2 * y0 - y2 * x0
    a2 = y0 * w1 - w0 * y1
    b2 = w0 * x1 - x0 * w1
    c2 = x0 * y1 - y0 * x1
    za = (z0 * a0 + z1 * a1) + z2 * a2
    zb = (z0 * b0 + z1 * b1) + z2 * b2
    zc = (z0 * c0 + z1 * c1) + z2 * c2
    det = (x0 * a0 + y0 * b0) + w0 * c0
    flat = det == 0
    sg = tl.where(det > 0, 1.0, tl.where(flat, 0.0, -1.0)).to(x0.dtype)  # torch.sign
    c0s = tl.where(flat, -1.0, c0 * sg).to(x0.dtype)  # edge-on: e0 = -1 everywhere (as torch's _planes)
    d = tl.where(flat, 1.0, det).to(x0.dtype)
    return (a0 * sg, b0 * sg, c0s, a1 * sg, b1 * sg, c1 * sg, a2 * sg, b2 * sg, c2 * sg,
            _div(za, d), _div(zb, d), _div(zc, d), flat)


@triton.jit
def _depth_test(a0, b0, c0, a1, b1, c1, a2, b2, c2, za, zb, zc, flat, fixed, f0, f1, f2, f3, f4, f5, f6, f7, f8, t,
                px, py, qx, qy, best):
    """Coverage (edges ≥ 0: the snapped triangle's exact edges at ``(qx, qy)`` where ``fixed``, else the
    homogeneous ones at ``(px, py)``; −1 ≤ z/w ≤ 1) of triangle t with planes p at the pixel centres, then the depth
    test on the packed key (z/w at float32 precision, then the index, as the torch backend). Evaluation
    order (a px + c) + b py as torch."""
    z = (za * px + zc) + zb * py
    # one test per triangle (a scalar branch): an edge-on triangle (flat) takes the homogeneous one, whose e0 is
    # then -1 everywhere: never covered
    if fixed & (flat == 0):
        cov = _fixed_cover(f0, f1, f2, f3, f4, f5, f6, f7, f8, qx, qy)
    else:
        cov = (((a0 * px + c0) + b0 * py) >= 0) & (((a1 * px + c1) + b1 * py) >= 0) & (((a2 * px + c2) + b2 * py) >= 0)
    ok = cov & (z >= -1.0) & (z <= 1.0)
    key = _key(z, t)
    return tl.where(ok & (key < best), key, best)


@triton.jit(do_not_specialize=["vstride"])
def _raster_kernel(
    pos_ptr, tri_ptr, offs_ptr, list_ptr, xtab_ptr, ytab_ptr, scale_ptr, rast_ptr, db_ptr, key_ptr,
    vstride, H, W, n_tx, n_tiles,
    RANGE: tl.constexpr, GRAD_DB: tl.constexpr, TILE_H: tl.constexpr, TILE_W: tl.constexpr, UNROLL: tl.constexpr,
    FINAL: tl.constexpr,
):
    """One tile of one image: starts from the packed-key z-buffer (stamped small triangles, earlier budget
    chunks), depth test over the tile's binned triangles, then rast (and rast_db), or (not ``FINAL``)
    the key back into the z-buffer for the next chunk."""
    tile = tl.program_id(0)
    b = tl.program_id(1)
    ty = tile // n_tx
    tx = tile - ty * n_tx
    r = tl.arange(0, TILE_H * TILE_W)
    i = ty * TILE_H + r // TILE_W
    j = tx * TILE_W + r % TILE_W
    inimg = (i < H) & (j < W)
    px = tl.load(xtab_ptr + j, mask=j < W, other=0.0)
    py = tl.load(ytab_ptr + i, mask=i < H, other=0.0)
    qx = j.to(tl.int64) * 4096  # the watertight test's pixel centres (1/4096 px: _common.SUBPIXEL)
    qy = i.to(tl.int64) * 4096
    if RANGE:
        vbase = 0
    else:
        vbase = b.to(tl.int64) * vstride
    g = b * n_tiles + tile
    start = tl.load(offs_ptr + g)
    end = tl.load(offs_ptr + g + 1)
    big_t = 2147483647
    pix = (b.to(tl.int64) * H + i) * W + j
    best = tl.load(key_ptr + pix, mask=inimg, other=9223372036854775807)
    if UNROLL == 2:
        # two triangles per iteration, both loaded before either is tested (more loads in flight); an odd
        # tail tests the last triangle twice, which changes nothing (ties need a strictly lower index)
        for s in range(start, end, 2):
            ta = tl.load(list_ptr + s)
            tb = tl.load(list_ptr + tl.minimum(s + 1, end - 1))
            (a0, b0, c0, a1, b1, c1, a2, b2, c2, za, zb, zc, fl, fx, f0, f1, f2, f3, f4, f5, f6, f7, f8) = \
                _planes(pos_ptr, tri_ptr, ta, vbase, H, W)
            (a0_, b0_, c0_, a1_, b1_, c1_, a2_, b2_, c2_, za_, zb_, zc_, fl_, fx_,
             f0_, f1_, f2_, f3_, f4_, f5_, f6_, f7_, f8_) = \
                _planes(pos_ptr, tri_ptr, tb, vbase, H, W)
            best = _depth_test(a0, b0, c0, a1, b1, c1, a2, b2, c2, za, zb, zc, fl, fx, f0, f1, f2, f3, f4, f5, f6, f7,
                               f8, ta, px, py, qx, qy, best)
            best = _depth_test(a0_, b0_, c0_, a1_, b1_, c1_, a2_, b2_, c2_, za_, zb_, zc_, fl_, fx_, f0_, f1_, f2_,
                               f3_, f4_, f5_, f6_, f7_, f8_, tb, px, py, qx, qy, best)
    else:
        for s in range(start, end):
            t = tl.load(list_ptr + s)
            (a0, b0, c0, a1, b1, c1, a2, b2, c2, za, zb, zc, fl, fx, f0, f1, f2, f3, f4, f5, f6, f7, f8) = \
                _planes(pos_ptr, tri_ptr, t, vbase, H, W)
            best = _depth_test(a0, b0, c0, a1, b1, c1, a2, b2, c2, za, zb, zc, fl, fx, f0, f1, f2, f3, f4, f5, f6, f7,
                               f8, t, px, py, qx, qy, best)
    if FINAL:
        empty = best >= 2305843009213693952  # backends._common.EMPTY_KEY (z/w >= 2: never a fragment)
        best_t = tl.where(empty, big_t, (best & 2147483647).to(tl.int32))
        _write_rast(pos_ptr, tri_ptr, scale_ptr, rast_ptr, db_ptr, best_t, px, py, pix, inimg, vbase, big_t, GRAD_DB)
    else:
        tl.store(key_ptr + pix, best, mask=inimg)


@triton.jit
def _well_conditioned(e0, e1, e2, w0, w1, w2, cov):
    """``(good, S, D, sg)`` as ``rasterize.well_conditioned``: covered pixels whose ``Σe ≠ 0``, ``Σ e w ≠ 0``
    and whose edge values all have the sign ``sg`` of ``Σe`` (docs/conventions.md §3); ``S, D`` are 1
    elsewhere."""
    S = (e0 + e1) + e2
    D = (e0 * w0 + e1 * w1) + e2 * w2
    sg = tl.where(S < 0, -1.0, 1.0).to(e0.dtype)
    good = cov & (S != 0) & (D != 0) & (e0 * sg >= 0) & (e1 * sg >= 0) & (e2 * sg >= 0)
    return good, tl.where(good, S, 1.0), tl.where(good, D, 1.0), sg


@triton.jit
def _clamped_uvz(e0, e1, e2, sg, z0, z1, z2, w0, w1, w2):
    """``(u, v, z/w)`` of the clamped edge values ``max(sg·e_k, 0)``, as ``rasterize.clamped_barycentrics``."""
    h0 = tl.maximum(e0 * sg, 0.0)
    h1 = tl.maximum(e1 * sg, 0.0)
    h2 = tl.maximum(e2 * sg, 0.0)
    zero = (h0 + h1 + h2) <= 0
    h0 = tl.where(zero, 1.0, h0).to(e0.dtype)
    h1 = tl.where(zero, 1.0, h1).to(e0.dtype)
    h2 = tl.where(zero, 1.0, h2).to(e0.dtype)
    Sh = (h0 + h1) + h2
    num = (h0 * z0 + h1 * z1) + h2 * z2
    den = (h0 * w0 + h1 * w1) + h2 * w2
    zw = tl.where(den != 0, _div(num, tl.where(den != 0, den, 1.0)), 0.0)
    return _div(h0, Sh), _div(h1, Sh), zw


@triton.jit
def _write_rast(pos_ptr, tri_ptr, scale_ptr, rast_ptr, db_ptr, best_t, px, py, pix, inimg, vbase, big_t, GRAD_DB: tl.constexpr):
    """rast (u, v, z/w, id + 1) and, with GRAD_DB, rast_db of the winners (0 where empty)."""
    cov = inimg & (best_t != big_t)
    tw = tl.where(cov, best_t, 0)
    x0, y0, z0, w0 = _vert(pos_ptr, tri_ptr, tw, 0, vbase, cov)
    x1, y1, z1, w1 = _vert(pos_ptr, tri_ptr, tw, 1, vbase, cov)
    x2, y2, z2, w2 = _vert(pos_ptr, tri_ptr, tw, 2, vbase, cov)
    # (u, v, z/w) as rasterize._uvz_lean: a_k = x_k - px w_k, c_k = y_k - py w_k
    qa0 = x0 - px * w0
    qa1 = x1 - px * w1
    qa2 = x2 - px * w2
    qc0 = y0 - py * w0
    qc1 = y1 - py * w1
    qc2 = y2 - py * w2
    e0 = qa1 * qc2 - qa2 * qc1
    e1 = qa2 * qc0 - qa0 * qc2
    e2 = qa0 * qc1 - qa1 * qc0
    good, S, D, sg = _well_conditioned(e0, e1, e2, w0, w1, w2, cov)
    hu, hv, hzw = _clamped_uvz(e0, e1, e2, sg, z0, z1, z2, w0, w1, w2)
    u = tl.where(good, _div(e0, S), tl.where(cov, hu, 0.0))
    v = tl.where(good, _div(e1, S), tl.where(cov, hv, 0.0))
    zw = tl.where(good, _div((e0 * z0 + e1 * z1) + e2 * z2, D), tl.where(cov, hzw, 0.0))
    idf = tl.where(cov, (tw + 1).to(px.dtype), 0.0)
    ch = tl.arange(0, 4)
    c2d = ch[None, :]
    val = tl.where(c2d == 0, u[:, None], tl.where(c2d == 1, v[:, None], tl.where(c2d == 2, zw[:, None], idf[:, None])))
    tl.store(rast_ptr + pix[:, None] * 4 + c2d, val, mask=inimg[:, None])
    if GRAD_DB:
        # barycentrics_at: d a_k / d px = -w_k, d c_k / d py = -w_k (NDC units), then pixel units
        iS = 1.0 / S
        de0x = -w1 * qc2 + w2 * qc1
        de1x = -w2 * qc0 + w0 * qc2
        de2x = -w0 * qc1 + w1 * qc0
        de0y = -qa1 * w2 + qa2 * w1
        de1y = -qa2 * w0 + qa0 * w2
        de2y = -qa0 * w1 + qa1 * w0
        dSx = de0x + de1x + de2x
        dSy = de0y + de1y + de2y
        sx = tl.load(scale_ptr + 0)  # (2/W, 2/H) in the dtype, as torch's scale tensor
        sy = tl.load(scale_ptr + 1)
        dudx = tl.where(good, (de0x - u * dSx) * iS * sx, 0.0)
        dudy = tl.where(good, (de0y - u * dSy) * iS * sy, 0.0)
        dvdx = tl.where(good, (de1x - v * dSx) * iS * sx, 0.0)
        dvdy = tl.where(good, (de1y - v * dSy) * iS * sy, 0.0)
        dval = tl.where(c2d == 0, dudx[:, None], tl.where(c2d == 1, dudy[:, None], tl.where(c2d == 2, dvdx[:, None], dvdy[:, None])))
        tl.store(db_ptr + pix[:, None] * 4 + c2d, dval, mask=inimg[:, None])

@triton.jit(do_not_specialize=["vstride"])
def _raster_bwd_kernel(
    pos_ptr, tri_ptr, rast_ptr, grast_ptr, gdb_ptr, xtab_ptr, ytab_ptr, scale_ptr, gpos_ptr,
    vstride, H, W, n_tx, gsb, gsh, gsw, gsc, dsb, dsh, dsw, dsc,
    RANGE: tl.constexpr, HAS_G: tl.constexpr, HAS_DB: tl.constexpr, BH: tl.constexpr, BW: tl.constexpr,
    MAX_IDS: tl.constexpr, MIN_PIX: tl.constexpr,
):
    """d(rast, rast_db)/d pos per pixel of one ``BH × BW`` tile of one image, pre-reduced per triangle in
    the tile (:func:`_scatter_vertices`) and added into the 3 vertices (formulas: module docstring of
    raster_triton, item 5; the rast_db part differentiates barycentrics_at's derivative formulas)."""
    tile = tl.program_id(0)
    b = tl.program_id(1)
    ty = tile // n_tx
    tx = tile - ty * n_tx
    r = tl.arange(0, BH * BW)
    iy = ty * BH + r // BW
    jx = tx * BW + r % BW
    m = (iy < H) & (jx < W)
    bimg = b.to(tl.int64)
    n = (bimg * H + iy) * W + jx
    idf = tl.load(rast_ptr + n * 4 + 3, mask=m, other=0.0)
    tid = (idf + 0.5).to(tl.int32) - 1
    cov = m & (tid >= 0)
    t = tl.where(cov, tid, 0)
    if RANGE:
        vbase = bimg * 0
    else:
        vbase = bimg * vstride
    px = tl.load(xtab_ptr + jx, mask=cov, other=0.0)
    py = tl.load(ytab_ptr + iy, mask=cov, other=0.0)
    r0 = (tl.load(tri_ptr + _tri_off(t, 0), mask=cov, other=0).to(tl.int64) + vbase) * 4
    r1 = (tl.load(tri_ptr + _tri_off(t, 1), mask=cov, other=0).to(tl.int64) + vbase) * 4
    r2 = (tl.load(tri_ptr + _tri_off(t, 2), mask=cov, other=0).to(tl.int64) + vbase) * 4
    x0 = tl.load(pos_ptr + r0 + 0, mask=cov, other=0.0)
    y0 = tl.load(pos_ptr + r0 + 1, mask=cov, other=0.0)
    z0 = tl.load(pos_ptr + r0 + 2, mask=cov, other=0.0)
    w0 = tl.load(pos_ptr + r0 + 3, mask=cov, other=1.0)
    x1 = tl.load(pos_ptr + r1 + 0, mask=cov, other=1.0)
    y1 = tl.load(pos_ptr + r1 + 1, mask=cov, other=0.0)
    z1 = tl.load(pos_ptr + r1 + 2, mask=cov, other=0.0)
    w1 = tl.load(pos_ptr + r1 + 3, mask=cov, other=1.0)
    x2 = tl.load(pos_ptr + r2 + 0, mask=cov, other=0.0)
    y2 = tl.load(pos_ptr + r2 + 1, mask=cov, other=1.0)
    z2 = tl.load(pos_ptr + r2 + 2, mask=cov, other=0.0)
    w2 = tl.load(pos_ptr + r2 + 3, mask=cov, other=1.0)
    u = tl.load(rast_ptr + n * 4 + 0, mask=cov, other=0.0)
    v = tl.load(rast_ptr + n * 4 + 1, mask=cov, other=0.0)
    zw = tl.load(rast_ptr + n * 4 + 2, mask=cov, other=0.0)
    if HAS_G:
        goff = bimg * gsb + iy.to(tl.int64) * gsh + jx.to(tl.int64) * gsw  # g_rast may be strided (e.g. expanded)
        gu = tl.load(grast_ptr + goff, mask=cov, other=0.0)
        gv = tl.load(grast_ptr + goff + gsc, mask=cov, other=0.0)
        gzw = tl.load(grast_ptr + goff + 2 * gsc, mask=cov, other=0.0)
    else:
        gu = tl.zeros([BH * BW], dtype=u.dtype)
        gv = tl.zeros([BH * BW], dtype=u.dtype)
        gzw = tl.zeros([BH * BW], dtype=u.dtype)
    qa0 = x0 - px * w0
    qa1 = x1 - px * w1
    qa2 = x2 - px * w2
    qc0 = y0 - py * w0
    qc1 = y1 - py * w1
    qc2 = y2 - py * w2
    e0 = qa1 * qc2 - qa2 * qc1
    e1 = qa2 * qc0 - qa0 * qc2
    e2 = qa0 * qc1 - qa1 * qc0
    cov, S, D, _ = _well_conditioned(e0, e1, e2, w0, w1, w2, cov)  # ill-conditioned pixels: no gradient
    iS = 1.0 / S
    iD = 1.0 / D
    gu = tl.where(cov, gu, 0.0)
    gv = tl.where(cov, gv, 0.0)
    gzw = tl.where(cov, gzw, 0.0)
    gz = gzw * iD
    gS = tl.zeros([BH * BW], dtype=u.dtype)
    if HAS_DB:
        # rast_db = (dudx, dudy, dvdx, dvdy) · (2/W, 2/H): dudx = (dex_0 − u dSx)/S, ... with
        # dex_k = d e_k/d px = −w_{k+1} c_{k+2} + w_{k+2} c_{k+1}, dey_k = −a_{k+1} w_{k+2} + a_{k+2} w_{k+1}
        doff = bimg * dsb + iy.to(tl.int64) * dsh + jx.to(tl.int64) * dsw
        gux = tl.load(gdb_ptr + doff, mask=cov, other=0.0) * tl.load(scale_ptr + 0)
        guy = tl.load(gdb_ptr + doff + dsc, mask=cov, other=0.0) * tl.load(scale_ptr + 1)
        gvx = tl.load(gdb_ptr + doff + 2 * dsc, mask=cov, other=0.0) * tl.load(scale_ptr + 0)
        gvy = tl.load(gdb_ptr + doff + 3 * dsc, mask=cov, other=0.0) * tl.load(scale_ptr + 1)
        dex0 = -w1 * qc2 + w2 * qc1
        dex1 = -w2 * qc0 + w0 * qc2
        dex2 = -w0 * qc1 + w1 * qc0
        dey0 = -qa1 * w2 + qa2 * w1
        dey1 = -qa2 * w0 + qa0 * w2
        dey2 = -qa0 * w1 + qa1 * w0
        dSx = dex0 + dex1 + dex2
        dSy = dey0 + dey1 + dey2
        dudx = (dex0 - u * dSx) * iS
        dudy = (dey0 - u * dSy) * iS
        dvdx = (dex1 - v * dSx) * iS
        dvdy = (dey1 - v * dSy) * iS
        # gradients w.r.t. dex_k, dey_k; then u, v and S directly
        bx = -(gux * u + gvx * v) * iS
        by = -(guy * u + gvy * v) * iS
        Dx0 = gux * iS + bx
        Dx1 = gvx * iS + bx
        Dx2 = bx
        Dy0 = guy * iS + by
        Dy1 = gvy * iS + by
        Dy2 = by
        gu = gu - (gux * dSx + guy * dSy) * iS
        gv = gv - (gvx * dSx + gvy * dSy) * iS
        gS = -(gux * dudx + guy * dudy + gvx * dvdx + gvy * dvdy) * iS
    base = -(gu * u + gv * v)
    ge0 = (gu + base) * iS + gz * (z0 - zw * w0) + gS
    ge1 = (gv + base) * iS + gz * (z1 - zw * w1) + gS
    ge2 = base * iS + gz * (z2 - zw * w2) + gS
    # e_k = a_{k+1} c_{k+2} - a_{k+2} c_{k+1}
    ga0 = ge2 * qc1 - ge1 * qc2
    ga1 = ge0 * qc2 - ge2 * qc0
    ga2 = ge1 * qc0 - ge0 * qc1
    gc0 = ge1 * qa2 - ge2 * qa1
    gc1 = ge2 * qa0 - ge0 * qa2
    gc2 = ge0 * qa1 - ge1 * qa0
    gz0 = gz * e0
    gz1 = gz * e1
    gz2 = gz * e2
    if HAS_DB:
        # through dex_k, dey_k into a_j, c_j and w_j directly
        ga0 += -w1 * Dy2 + w2 * Dy1
        ga1 += -w2 * Dy0 + w0 * Dy2
        ga2 += -w0 * Dy1 + w1 * Dy0
        gc0 += -w2 * Dx1 + w1 * Dx2
        gc1 += -w0 * Dx2 + w2 * Dx0
        gc2 += -w1 * Dx0 + w0 * Dx1
        gw0 = -(px * ga0 + py * gc0 + zw * gz0) + (-qc1 * Dx2 + qc2 * Dx1 - qa2 * Dy1 + qa1 * Dy2)
        gw1 = -(px * ga1 + py * gc1 + zw * gz1) + (-qc2 * Dx0 + qc0 * Dx2 - qa0 * Dy2 + qa2 * Dy0)
        gw2 = -(px * ga2 + py * gc2 + zw * gz2) + (-qc0 * Dx1 + qc1 * Dx0 - qa1 * Dy0 + qa0 * Dy1)
    else:
        gw0 = -(px * ga0 + py * gc0 + zw * gz0)
        gw1 = -(px * ga1 + py * gc1 + zw * gz1)
        gw2 = -(px * ga2 + py * gc2 + zw * gz2)
    _scatter_vertices(gpos_ptr, tri_ptr, vbase, t, cov, r, r0, r1, r2,
                      ga0, gc0, gz0, gw0, ga1, gc1, gz1, gw1, ga2, gc2, gz2, gw2, MAX_IDS, MIN_PIX)


@triton.jit
def _add13(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12,
           b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12):
    return (a0 + b0, a1 + b1, a2 + b2, a3 + b3, a4 + b4, a5 + b5, a6 + b6, a7 + b7, a8 + b8, a9 + b9,
            a10 + b10, a11 + b11, a12 + b12)


@triton.jit
def _pick(todo, r, t):
    """``(triangle id, selection)``: the triangle of the first pixel still to do (raster order in the tile;
    a pixel-weighted choice, so slivers are rarely picked) and the pixels still to do that carry it."""
    pick = tl.min(tl.where(todo, r.to(tl.int64) * 2147483648 + t.to(tl.int64), 4611686018427387904), axis=0)
    cur = (pick & 2147483647).to(tl.int32)
    return cur, todo & (t == cur)


@triton.jit
def _scatter_vertices(gpos_ptr, tri_ptr, vbase, t, cov, r, r0, r1, r2,
                      g0, g1, g2, g3, g4, g5, g6, g7, g8, g9, g10, g11, MAX_IDS: tl.constexpr, MIN_PIX: tl.constexpr):
    """Add the per-pixel gradients ``g0..g11`` (vertex k, component c at ``g[4k + c]``) into ``gpos``.

    Pre-reduction against atomic contention: up to ``MAX_IDS`` times, the triangle of the first pixel still
    to do is picked, its pixels' gradients are summed in registers (one multi-operand ``tl.reduce``) and
    added with 12 scalar atomics; it stops early when a picked triangle had fewer than ``MIN_PIX`` pixels
    in the tile (small triangles: nothing to gain) or fewer than ``MIN_PIX`` pixels are left. The pixels
    left over add their own values (per-pixel atomics, as without pre-reduction). Sums are reassociated
    (float32 rounding differs from the one-by-one order at the ~1e-7 relative level). All atomics relaxed:
    nothing reads ``gpos`` in this launch."""
    todo = cov
    left = tl.sum(cov.to(tl.int32), axis=0)
    k = 0
    go = (left >= MIN_PIX) & (MAX_IDS > 0)
    while go:
        cur, sel = _pick(todo, r, t)
        z = tl.zeros_like(g0)
        s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, cnt = tl.reduce(
            (tl.where(sel, g0, z), tl.where(sel, g1, z), tl.where(sel, g2, z), tl.where(sel, g3, z),
             tl.where(sel, g4, z), tl.where(sel, g5, z), tl.where(sel, g6, z), tl.where(sel, g7, z),
             tl.where(sel, g8, z), tl.where(sel, g9, z), tl.where(sel, g10, z), tl.where(sel, g11, z),
             sel.to(tl.int32)), 0, _add13)
        q0 = (tl.load(tri_ptr + _tri_off(cur, 0)).to(tl.int64) + vbase) * 4
        q1 = (tl.load(tri_ptr + _tri_off(cur, 1)).to(tl.int64) + vbase) * 4
        q2 = (tl.load(tri_ptr + _tri_off(cur, 2)).to(tl.int64) + vbase) * 4
        tl.atomic_add(gpos_ptr + q0 + 0, s0, sem="relaxed")
        tl.atomic_add(gpos_ptr + q0 + 1, s1, sem="relaxed")
        tl.atomic_add(gpos_ptr + q0 + 2, s2, sem="relaxed")
        tl.atomic_add(gpos_ptr + q0 + 3, s3, sem="relaxed")
        tl.atomic_add(gpos_ptr + q1 + 0, s4, sem="relaxed")
        tl.atomic_add(gpos_ptr + q1 + 1, s5, sem="relaxed")
        tl.atomic_add(gpos_ptr + q1 + 2, s6, sem="relaxed")
        tl.atomic_add(gpos_ptr + q1 + 3, s7, sem="relaxed")
        tl.atomic_add(gpos_ptr + q2 + 0, s8, sem="relaxed")
        tl.atomic_add(gpos_ptr + q2 + 1, s9, sem="relaxed")
        tl.atomic_add(gpos_ptr + q2 + 2, s10, sem="relaxed")
        tl.atomic_add(gpos_ptr + q2 + 3, s11, sem="relaxed")
        todo = todo & (~sel)
        left = left - cnt
        k += 1
        go = (k < MAX_IDS) & (cnt >= MIN_PIX) & (left >= MIN_PIX)
    tl.atomic_add(gpos_ptr + r0 + 0, g0, mask=todo, sem="relaxed")
    tl.atomic_add(gpos_ptr + r0 + 1, g1, mask=todo, sem="relaxed")
    tl.atomic_add(gpos_ptr + r0 + 2, g2, mask=todo, sem="relaxed")
    tl.atomic_add(gpos_ptr + r0 + 3, g3, mask=todo, sem="relaxed")
    tl.atomic_add(gpos_ptr + r1 + 0, g4, mask=todo, sem="relaxed")
    tl.atomic_add(gpos_ptr + r1 + 1, g5, mask=todo, sem="relaxed")
    tl.atomic_add(gpos_ptr + r1 + 2, g6, mask=todo, sem="relaxed")
    tl.atomic_add(gpos_ptr + r1 + 3, g7, mask=todo, sem="relaxed")
    tl.atomic_add(gpos_ptr + r2 + 0, g8, mask=todo, sem="relaxed")
    tl.atomic_add(gpos_ptr + r2 + 1, g9, mask=todo, sem="relaxed")
    tl.atomic_add(gpos_ptr + r2 + 2, g10, mask=todo, sem="relaxed")
    tl.atomic_add(gpos_ptr + r2 + 3, g11, mask=todo, sem="relaxed")


@triton.jit
def _interp_rows(rast_ptr, tri_ptr, n, m, HW, astride):
    idf = tl.load(rast_ptr + n * 4 + 3, mask=m, other=0.0)
    tid = (idf + 0.5).to(tl.int32) - 1
    cov = m & (tid >= 0)
    t = tl.where(cov, tid, 0)
    abase = (n // HW) * astride
    r0 = tl.load(tri_ptr + _tri_off(t, 0), mask=cov, other=0).to(tl.int64) + abase
    r1 = tl.load(tri_ptr + _tri_off(t, 1), mask=cov, other=0).to(tl.int64) + abase
    r2 = tl.load(tri_ptr + _tri_off(t, 2), mask=cov, other=0).to(tl.int64) + abase
    u = tl.load(rast_ptr + n * 4 + 0, mask=cov, other=0.0)
    v = tl.load(rast_ptr + n * 4 + 1, mask=cov, other=0.0)
    return cov, t, r0, r1, r2, u, v

@triton.jit(do_not_specialize=["astride"])
def _interp_fwd_kernel(
    attr_ptr, rast_ptr, tri_ptr, out_ptr, N, C, HW, astride, BLOCK: tl.constexpr, BLOCK_C: tl.constexpr
):
    n = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = n < N
    cov, t, r0, r1, r2, u, v = _interp_rows(rast_ptr, tri_ptr, n, m, HW, astride)
    u2 = u[:, None]
    v2 = v[:, None]
    for c0 in range(0, C, BLOCK_C):
        c = c0 + tl.arange(0, BLOCK_C)
        mc = cov[:, None] & (c[None, :] < C)
        a0 = tl.load(attr_ptr + r0[:, None] * C + c[None, :], mask=mc, other=0.0)
        a1 = tl.load(attr_ptr + r1[:, None] * C + c[None, :], mask=mc, other=0.0)
        a2 = tl.load(attr_ptr + r2[:, None] * C + c[None, :], mask=mc, other=0.0)
        o = (a2 + u2 * (a0 - a2)) + v2 * (a1 - a2)
        o = tl.where(mc, o, 0.0)
        tl.store(out_ptr + n[:, None] * C + c[None, :], o, mask=m[:, None] & (c[None, :] < C))

@triton.jit(do_not_specialize=["astride"])
def _interp_bwd_kernel(
    attr_ptr, rast_ptr, tri_ptr, gout_ptr, gattr_ptr, grast_ptr, C, H, W, n_tx, astride, gsb, gsh, gsw, gsc,
    NEED_ATTR: tl.constexpr, NEED_RAST: tl.constexpr, BH: tl.constexpr, BW: tl.constexpr, BLOCK_C: tl.constexpr,
    MAX_IDS: tl.constexpr, MIN_PIX: tl.constexpr,
):
    """One ``BH × BW`` tile of one image: ``d/d attr`` (pre-reduced per triangle as in
    :func:`_scatter_vertices`, then per-pixel atomics for the rest) and ``d/d (u, v)`` into ``grast``."""
    tile = tl.program_id(0)
    b = tl.program_id(1)
    ty = tile // n_tx
    tx = tile - ty * n_tx
    r = tl.arange(0, BH * BW)
    iy = ty * BH + r // BW
    jx = tx * BW + r % BW
    m = (iy < H) & (jx < W)
    bimg = b.to(tl.int64)
    n = (bimg * H + iy) * W + jx
    cov, t, r0, r1, r2, u, v = _interp_rows(rast_ptr, tri_ptr, n, m, H * W, astride)
    u2 = u[:, None]
    v2 = v[:, None]
    # int64: a per-image stride times a row index passes 2^31 once H·W·C does (e.g. 4096² × 128 channels)
    goff = bimg * gsb + iy.to(tl.int64) * gsh + jx.to(tl.int64) * gsw  # g_out may be strided (e.g. expanded)
    gu = tl.zeros([BH * BW], dtype=u.dtype)
    gv = tl.zeros([BH * BW], dtype=u.dtype)
    n_cov = tl.sum(cov.to(tl.int32), axis=0)
    abase = bimg * astride
    for c0 in range(0, C, BLOCK_C):
        c = c0 + tl.arange(0, BLOCK_C)
        cm = c[None, :] < C
        mc = cov[:, None] & cm
        g = tl.load(gout_ptr + goff[:, None] + c[None, :].to(tl.int64) * gsc, mask=mc, other=0.0)
        if NEED_ATTR:
            wa = g * u2
            wb = g * v2
            wc = g * ((1.0 - u2) - v2)
            # pre-reduction per triangle (see _scatter_vertices), the same picks for every channel block
            todo = cov
            left = n_cov
            k = 0
            go = (left >= MIN_PIX) & (MAX_IDS > 0)
            while go:
                cur, sel = _pick(todo, r, t)
                s2 = sel[:, None]
                sa = tl.sum(tl.where(s2, wa, 0.0), axis=0)
                sb = tl.sum(tl.where(s2, wb, 0.0), axis=0)
                sc = tl.sum(tl.where(s2, wc, 0.0), axis=0)
                cnt = tl.sum(sel.to(tl.int32), axis=0)
                q0 = tl.load(tri_ptr + _tri_off(cur, 0)).to(tl.int64) + abase
                q1 = tl.load(tri_ptr + _tri_off(cur, 1)).to(tl.int64) + abase
                q2 = tl.load(tri_ptr + _tri_off(cur, 2)).to(tl.int64) + abase
                cc = c < C
                tl.atomic_add(gattr_ptr + q0 * C + c, sa, mask=cc, sem="relaxed")
                tl.atomic_add(gattr_ptr + q1 * C + c, sb, mask=cc, sem="relaxed")
                tl.atomic_add(gattr_ptr + q2 * C + c, sc, mask=cc, sem="relaxed")
                todo = todo & (~sel)
                left = left - cnt
                k += 1
                go = (k < MAX_IDS) & (cnt >= MIN_PIX) & (left >= MIN_PIX)
            mt = todo[:, None] & cm
            tl.atomic_add(gattr_ptr + r0[:, None] * C + c[None, :], wa, mask=mt, sem="relaxed")
            tl.atomic_add(gattr_ptr + r1[:, None] * C + c[None, :], wb, mask=mt, sem="relaxed")
            tl.atomic_add(gattr_ptr + r2[:, None] * C + c[None, :], wc, mask=mt, sem="relaxed")
        if NEED_RAST:
            a0 = tl.load(attr_ptr + r0[:, None] * C + c[None, :], mask=mc, other=0.0)
            a1 = tl.load(attr_ptr + r1[:, None] * C + c[None, :], mask=mc, other=0.0)
            a2 = tl.load(attr_ptr + r2[:, None] * C + c[None, :], mask=mc, other=0.0)
            gu += tl.sum(g * (a0 - a2), axis=1)
            gv += tl.sum(g * (a1 - a2), axis=1)
    if NEED_RAST:
        # every channel of every pixel is written (d/dz and d/d id are 0): the buffer needs no zeroing
        ch = tl.arange(0, 4)[None, :]
        val = tl.where(ch == 0, gu[:, None], tl.where(ch == 1, gv[:, None], 0.0))
        tl.store(grast_ptr + n[:, None] * 4 + ch, val, mask=m[:, None])
