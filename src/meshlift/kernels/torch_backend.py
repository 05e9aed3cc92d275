"""Pure-PyTorch visibility backend: bucketed fixed-size stamps + packed-key scatter-min z-buffer.

Algorithm (per chunk of at most ``max_fragments / 4`` triangles, everything vectorised, one host sync
per chunk):

1. gather the clip-space vertices; triangles wholly in front of the near plane get their pixel bounding
   box from the projected vertices; the few crossing the near plane go to a separate bucket whose box
   comes from the clipped polygon (:func:`~meshlift.kernels._common.screen_bbox`); boxes off
   screen, behind the eye or beyond the far plane are culled here;
2. every triangle falls into one bucket by box size: ≤ 2 px a side (a 2×2 *stamp*), ≤ 4 px (4×4 stamp),
   larger (its box's tiles, each a stamp: 8×8 on CUDA, 4×4 on the CPU), near-plane crossing (tiles too), culled. The
   bucket sizes and the tile count are read back in **one** host sync; an argsort groups the buckets;
   the edge and depth planes are computed for the surviving triangles only;
3. per stamp batch (at most ``max_fragments`` candidate pixels): the three edge functions and ``z/w``
   at each pixel centre of the fixed-size stamp by broadcasting (the edges of the snapped triangle exactly, in
   float64, for the triangles in front of the eye and inside the guard band; homogeneously for the near-plane
   bucket; see ``_common``), a fragment survives iff all edges ≥ 0 and ``−1 ≤ z/w ≤ 1``; ``(z/w, triangle index)``
   is packed into one int64 key (rejected candidates get an "empty" key) and merged with **one**
   ``scatter_reduce(amin)`` into a per-pixel key buffer. Stamps may reach past a box (or, through padded
   pixel tables whose extra entries are NaN, past the image): the exact per-pixel test decides, the box
   only bounds the work. On CUDA every candidate is scattered (no data-dependent shapes, no syncs); on
   CPU the rejected ones are masked out first (cheaper there). Everything merges through the key
   buffer, so the result does not depend on the chunking or the bucket order, and ties go
   deterministically to the lower triangle index.

Peak memory (float32; measured before the watertight test, whose float64 edge values add ~12 bytes a candidate
and are not re-measured): at most ~170 bytes per live candidate fragment, i.e. up to ~170 B ×
``max_fragments`` (2.7 GiB at the default 2^24, reached only by scenes with that many candidates), plus
~300 bytes per triangle of the current triangle chunk (``max_fragments / 4`` triangles), plus ~24 bytes
per output pixel. No tensor of size triangles × pixels is ever formed. Lower ``max_fragments`` to trade
speed for memory. (Measured on an H200: 1M triangles at 2048², default budget, rasterize + interpolate
forward+backward peaked at 2.2 GiB including inputs and the per-pixel barycentric pass.)

Speed notes (H200, docs/benchmarks.md): eager PyTorch on the GPU is bound by kernel launches (~25 µs
each there), so this backend keeps the launch count low (~130 for a forward visibility pass), uses no
data-dependent shapes on CUDA and reads back one small tensor per chunk. Row gathers go through
:func:`~meshlift.kernels._common.gather_rows` (PyTorch's row-gather kernel was most of the GPU
time).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from meshlift.kernels._common import (  # noqa: I001
    BBOX_SLACK_PX,
    EMPTY_DEPTH_BITS,
    INT64_MAX,
    SUBPIXEL,
    dense_path,
    fixed_edge_planes,
    gather_rows,
    pixel_centre_tables,
    key_to_index,
    screen_bbox,
    snap_to_subpixels,
    triangle_planes,
)

#: Tile side (pixels) for triangles whose box exceeds 4 pixels on the dense (GPU) path, where launches cost
#: more than wasted candidates; also the padding of the pixel tables and key buffer (the largest stamp).
_TILE = 8
#: Tile side on the compacted (CPU) path, where every candidate pixel costs: 4x4 tiles cover a box of 5-16 px
#: with about half the candidates of 8x8 ones (the result is the same; the tile only bounds the work).
_TILE_COMPACT = 4
#: Bucket ids: 2x2 stamp, 4x4 stamp, tiles, near-plane crossing (tiles of the clipped box), culled.
_B2, _B4, _BT, _BX, _BE = 0, 1, 2, 3, 4
#: Small-triangle buckets are folded into a larger stamp when that adds at most this many candidates
#: (dense GPU path: launches dominate; compacted CPU path: candidates dominate).
_FOLD_DENSE, _FOLD_COMPACT = 2**20, 2**12


class TorchBackend:
    """Reference visibility backend, pure PyTorch, runs on any device torch supports."""

    name = "torch"

    def is_available(self, device: torch.device) -> bool:
        return True

    @torch.no_grad()
    def visibility(
        self,
        pos: torch.Tensor,
        tri: torch.Tensor,
        resolution: Tuple[int, int],
        ranges: Optional[torch.Tensor],
        max_fragments: int,
    ) -> torch.Tensor:
        H, W = int(resolution[0]), int(resolution[1])
        dev = pos.device
        T = tri.shape[0]
        if ranges is None:
            B, V = pos.shape[0], pos.shape[1]
            pos_flat = pos.reshape(-1, 4)
            n_inst = B * T
        else:
            B = ranges.shape[0]
            pos_flat = pos
            r = ranges.to(device=dev, dtype=torch.int64)
            counts = r[:, 1]
            ends = torch.cumsum(counts, 0)
            n_inst = int(ends[-1]) if B else 0
        # key buffer padded by (TILE rows + TILE) so stamps reaching past the last image stay in bounds
        pad = _TILE * W + _TILE
        keys = torch.full((B * H * W + pad,), INT64_MAX, dtype=torch.int64, device=dev)
        # NDC of pixel-centre columns / rows (docs/conventions.md §3), padded with NaN (never covered)
        xtab, ytab = pixel_centre_tables(H, W, pos.dtype, dev, _TILE)
        budget = max(int(max_fragments), 2 * W, 64)
        tri_chunk = max(budget // 4, 1024)
        ctx = _Ctx(keys, H, W, budget, xtab, ytab, compact=not dense_path(dev))
        for s in range(0, n_inst, tri_chunk):
            e = min(n_inst, s + tri_chunk)
            if ranges is None:
                if B == 1:
                    t = torch.arange(s, e, device=dev)
                    b = None
                    vidx = tri if (s == 0 and e == T) else tri[s:e]
                else:
                    k = torch.arange(s, e, device=dev)
                    b = k // T
                    t = k - b * T
                    vidx = gather_rows(tri, t) + (b * V).unsqueeze(1)
            else:
                k = torch.arange(s, e, device=dev)
                b = torch.searchsorted(ends, k, right=True)
                t = r[b, 0] + (k - (ends[b] - counts[b]))
                vidx = gather_rows(tri, t)
            v = gather_rows(pos_flat, vidx.reshape(-1)).view(-1, 3, 4)
            _chunk(ctx, v, b, t)
        return key_to_index(keys[: B * H * W]).view(B, H, W)


_CONSTS: dict = {}


class _Ctx:
    """Per-call constants shared by the chunk, stamp and tile passes."""

    def __init__(self, keys, H, W, budget, xtab, ytab, compact):
        self.keys, self.H, self.W, self.budget = keys, H, W, budget
        self.xtab, self.ytab, self.compact = xtab, ytab, compact
        self.tile = _TILE_COMPACT if compact else _TILE
        self.ar = {}
        dev = keys.device
        k = (H, W, xtab.dtype, str(dev))
        if k not in _CONSTS:
            # small constants built on the device (a host tensor copied over would sync), cached
            if len(_CONSTS) >= 32:
                _CONSTS.clear()
            half = torch.full((2,), W * 0.5, dtype=xtab.dtype, device=dev)
            half[1] = H * 0.5
            lim = torch.full((2,), W - 1, dtype=torch.int64, device=dev)
            lim[1] = H - 1
            # (ndc + 1) * half - 0.5 = ndc * half + (half - 0.5)
            _CONSTS[k] = (half, half - 0.5, lim, {n: torch.arange(n, device=dev) for n in (2, 4, _BE + 1, _TILE)})
        self.half, self.half_m, self.lim, self.ar = _CONSTS[k]


    def arange(self, n: int) -> torch.Tensor:
        return self.ar[n]


def _chunk(ctx: _Ctx, v: torch.Tensor, b: Optional[torch.Tensor], t: torch.Tensor) -> None:
    """Rasterize triangles ``v [n, 3, 4]`` (image ``b [n]`` or None for image 0, index ``t [n]``)."""
    H, W = ctx.H, ctx.W
    z, w = v[..., 2], v[..., 3]
    inside = (z + w) >= 0  # in front of the near plane z = -w
    simple = (inside & (w > torch.finfo(v.dtype).tiny)).all(1)
    culled = ~inside.any(1) | (w < z).all(1)  # wholly behind the near plane / beyond the far plane
    # pixel-centre coordinates of the projected vertices (meaningful where `simple`)
    # (x/w) * half + (half - 0.5) as two rounded ops (torch.addcmul fuses them into one multiply-add on the
    # CPU and CUDA): the same box as the Triton binning kernel's
    xy = (v[..., :2] / torch.where(simple.unsqueeze(1), w, 1.0).unsqueeze(-1)) * ctx.half + ctx.half_m
    snapped, in_guard = snap_to_subpixels(xy)  # the watertight test's vertices ([n, 3, 2] float64)
    simple = simple & in_guard.all(1)  # the rest: the near-plane bucket (homogeneous test, clipped box)
    mn, mx = torch.aminmax(xy, dim=1)  # [n, 2] = (x, y)
    big = float(max(H, W) + 2)
    lo = torch.ceil((mn - BBOX_SLACK_PX).clamp(-1, big)).to(torch.int64).clamp(min=0)
    hi = torch.minimum(torch.floor((mx + BBOX_SLACK_PX).clamp(-big, big)).to(torch.int64), ctx.lim)
    ext = hi - lo + 1  # [n, 2] = (cols, rows); <= 0 when the box misses the image
    side, size = torch.aminmax(ext, dim=1)
    bucket = (size > 2).to(torch.int64) + (size > 4).to(torch.int64)
    bucket = torch.where(simple, torch.where(side > 0, bucket, _BE), _BX)
    bucket = torch.where(culled, _BE, bucket)
    # tiles per box (1 for the stamp buckets, whose boxes fit one tile), 0 for the rest
    T_ = ctx.tile
    ntiles = torch.where(bucket <= _BT, ((ext.clamp(min=0) + (T_ - 1)) // T_).prod(1), 0)
    # bucket sizes (boundaries in the sorted buckets; a bincount / index_add would sync or contend on 5
    # atomics) and the tile count, read back in the chunk's one host sync
    sorted_b, order = torch.sort(bucket)
    stats = torch.cat([torch.searchsorted(sorted_b, ctx.arange(_BE + 1)), ntiles.sum().view(1)]).tolist()
    stats = [stats[i + 1] - stats[i] for i in range(_BE)] + [stats[-1]]
    n2, n4, nt, nx = stats[:4]
    total_tiles = stats[4]
    live = n2 + n4 + nt + nx
    if live == 0:
        return
    sel = order[:live]
    vs = gather_rows(v, sel)
    P, flat = _planes(vs)
    sn = gather_rows(snapped, sel)
    Q = fixed_edge_planes(sn[..., 0], sn[..., 1])  # exact edges of the snapped triangles (all but the last nx)
    Q[:, 0, 2] = torch.where(flat, -1.0, Q[:, 0, 2])  # no z/w plane (homogeneous det 0): covers nothing
    lo_s, ext_s = gather_rows(lo, sel), gather_rows(ext, sel)
    tid = t.index_select(0, sel)
    base = None if b is None else b.index_select(0, sel) * (H * W)
    # rows of `ints`: (row0, col0, rows, cols); `base` pixel offset of the image; `tid` triangle index
    ints = torch.stack([lo_s[:, 1], lo_s[:, 0], ext_s[:, 1], ext_s[:, 0]], 1)
    # Few small triangles: fold their buckets into the next larger stamp (more candidates, but one
    # launch sequence less — on a GPU each costs ~25 launches, worth ~2^20 wasted candidates).
    fold = _FOLD_DENSE if not ctx.compact else _FOLD_COMPACT
    if (n2 + n4) * T_ * T_ <= fold:
        classes, nt, total_tiles = (), n2 + n4 + nt, total_tiles
    elif n2 * 16 <= fold:
        classes, total_tiles = ((4, n2 + n4),), total_tiles - n2 - n4
    else:
        classes, total_tiles = ((2, n2), (4, n4)), total_tiles - n2 - n4
    s0 = 0
    for sz, n in classes:
        per = max(ctx.budget // (sz * sz), 1)
        for a in range(s0, s0 + n, per):
            e = min(s0 + n, a + per)
            _stamps(ctx, sz, ints[a:e, 0], ints[a:e, 1], None if base is None else base[a:e], tid[a:e], P[a:e],
                    Q[a:e])
        s0 += n
    if nt:
        sl = slice(s0, s0 + nt)
        _tiles(ctx, ints[sl], None if base is None else base[sl], tid[sl], P[sl], ntiles.index_select(0, sel[sl]),
               total_tiles, Q[sl])
        s0 += nt
    if nx:
        sl = slice(s0, s0 + nx)
        i0, i1, j0, j1 = screen_bbox(vs[sl], H, W)
        rows, cols = (i1 - i0 + 1).clamp(min=0), (j1 - j0 + 1).clamp(min=0)
        cnt = ((rows + T_ - 1) // T_) * ((cols + T_ - 1) // T_)
        total = int(cnt.sum())
        if total:
            xi = torch.stack([i0, j0, rows, cols], 1)
            _tiles(ctx, xi, None if base is None else base[sl], tid[sl], P[sl], cnt, total)


def _planes(v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``([n, 4, 3], flat [n])``: rows 0-2 the sign-normalised edge planes (covered iff all ≥ 0; edge-on triangles,
    ``flat``, get an edge negative everywhere), row 3 the z/w plane, all over ``(px, py, 1)``."""
    edges, zplane, det = triangle_planes(v)
    flat = det == 0
    ep = edges * torch.sign(det)[:, None, None]
    ep[:, 0, 2] = torch.where(flat, -1.0, ep[:, 0, 2])
    zp = zplane / torch.where(flat, 1.0, det)[:, None]
    return torch.cat([ep, zp.unsqueeze(1)], 1), flat


def _stamps(ctx: _Ctx, sz: int, row0, col0, base, tid, P, Q=None) -> None:
    """Evaluate ``n`` stamps of ``sz × sz`` pixels with top-left ``(row0, col0) [n]`` and merge them.

    ``base [n]`` pixel offset of each stamp's image (None: image 0); ``tid [n]`` triangle index;
    ``P [n, 4, 3]`` edge planes and z/w plane of the stamp's triangle (:func:`_planes`); ``Q [n, 3, 3]`` the
    exact edge planes of its snapped vertices (:func:`~meshlift.kernels._common.fixed_edge_planes`), which decide
    coverage when given (else ``P``'s edges).
    """
    n = row0.shape[0]
    if n == 0:
        return
    W = ctx.W
    ar = ctx.arange(sz)
    rows = row0.unsqueeze(1) + ar  # [n, sz]
    cols = col0.unsqueeze(1) + ar
    px = ctx.xtab.index_select(0, cols.view(-1)).view(n, 1, sz)  # NaN past the image
    py = ctx.ytab.index_select(0, rows.view(-1)).view(n, 1, sz)
    # e_k = (a px + c) + b py: the same evaluation order as every other path (exact ties)
    if Q is None:
        ex = P[:, :, 0:1] * px + P[:, :, 2:3]  # [n, 4, sz] over columns
        ey = P[:, :, 1:2] * py  # [n, 4, sz] over rows
        e = ex.unsqueeze(2) + ey.unsqueeze(3)  # [n, 4, rows, cols]
        zw = e[:, 3]
        cov = (e[:, :3] >= 0).all(1)
    else:  # the snapped triangle's edges at the centres in sub-pixel units, exact in float64
        qx = (cols * SUBPIXEL).to(torch.float64).view(n, 1, sz)
        qy = (rows * SUBPIXEL).to(torch.float64).view(n, 1, sz)
        e = (Q[:, :, 0:1] * qx + Q[:, :, 2:3]).unsqueeze(2) + (Q[:, :, 1:2] * qy).unsqueeze(3)  # [n, 3, rows, cols]
        cov = (e >= 0).all(1)
        zw = (P[:, 3, 0:1] * px[:, 0] + P[:, 3, 2:3]).unsqueeze(1) + (P[:, 3, 1:2] * py[:, 0]).unsqueeze(2)
    ok = cov & (zw.abs() <= 1)  # coverage and near/far clipping (NaN past the image: never)
    bits = zw.to(torch.float32).view(torch.int32)
    bits = torch.where(ok, bits ^ ((bits >> 31) & 0x7FFFFFFF), EMPTY_DEPTH_BITS)  # ordered depth bits
    pix = rows * W if base is None else rows * W + base.unsqueeze(1)
    idx = (pix.unsqueeze(2) + cols.unsqueeze(1)).view(-1)
    key = ((bits.to(torch.int64) << 31) + tid.view(n, 1, 1)).view(-1)
    if ctx.compact:
        m = ok.view(-1)
        idx, key = idx[m], key[m]
    ctx.keys.scatter_reduce_(0, idx, key, reduce="amin", include_self=True)


def _tiles(ctx: _Ctx, ints, base, tid, P, cnt, total: int, Q=None) -> None:
    """Stamp the ``ctx.tile``-sided tiles of large boxes, ``budget / tile²`` tiles at a time.

    ``ints [m, 4]`` = (row0, col0, rows, cols) of each box, ``cnt [m]`` its tile count (``total`` in all);
    ``Q`` the snapped triangles' exact edge planes, or None (the homogeneous ones of ``P``) as in :func:`_stamps`.
    """
    T_ = ctx.tile
    start = torch.cumsum(cnt, 0)
    tw = (ints[:, 3] + T_ - 1) // T_
    per = max(ctx.budget // (T_ * T_), 1)
    for s0 in range(0, total, per):
        g = torch.arange(s0, min(total, s0 + per), device=ctx.keys.device)
        t = torch.searchsorted(start, g, right=True)
        local = g - (start.index_select(0, t) - cnt.index_select(0, t))
        twt = tw.index_select(0, t)
        ty = local // twt
        it = gather_rows(ints, t)
        row0 = it[:, 0] + ty * T_
        col0 = it[:, 1] + (local - ty * twt) * T_
        _stamps(
            ctx,
            T_,
            row0,
            col0,
            None if base is None else base.index_select(0, t),
            tid.index_select(0, t),
            gather_rows(P, t),
            None if Q is None else gather_rows(Q, t),
        )
