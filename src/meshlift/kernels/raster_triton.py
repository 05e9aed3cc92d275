"""Triton rasterizer: ``rasterize`` + ``interpolate`` forward and backward in a handful of launches.

Same semantics as the pure-PyTorch path (docs/conventions.md §3; nvdiffrast's ``rasterize`` /
``interpolate``, Laine et al. 2020, Sec. 3.1-3.2): ``rast = (u, v, z/w, triangle_id + 1)`` at pixel
centres ``(2(j + 0.5)/W − 1, 2(i + 0.5)/H − 1)``, the smallest ``z/w`` wins, ties go to the lower
triangle index, fragments outside ``−1 ≤ z/w ≤ 1`` are clipped (so near-plane crossings are exact),
edge-on triangles cover nothing; range mode (``pos [V, 4]`` + ``ranges [B, 2]``) and instanced mode
(``pos [B, V, 4]``). Coverage is watertight (``kernels._common``): a triangle in front of the eye and inside the
guard band is tested with its vertices snapped to 1/4096 px and exact int64 edge functions (the torch backend's
exact float64 ones give the same integers); the others use homogeneous rasterization (Olano & Greer 1997) with the
same edge and depth planes, and the same evaluation order ``(a·px + c) + b·py``, as the torch backend
(:mod:`meshlift.kernels.torch_backend`); barycentrics and ``z/w`` of the winner use the same
formula as ``meshlift.render.rasterize._uvz_lean`` (the torch path with ``grad_db=True`` uses
``barycentrics_at``, which multiplies by ``1/Σe`` instead of dividing: equal to rounding). The binning and raster kernels
are compiled without multiply-add contraction (``enable_fp_fusion=False``) and divide with correct
rounding, so every edge function, ``z/w`` and box bound is rounded op by op exactly as the torch backend
computes it (whose planes, boxes and pixel-centre tables are themselves written as separate rounded ops,
see ``kernels._common.triangle_planes``: ``torch.linalg.cross`` and ``torch.addcmul`` are compiled with
fused multiply-adds on the CPU and on CUDA, and CUDA's ``tensor / scalar`` multiplies by a rounded
reciprocal, which made 0.7 % of the ids differ between the two backends on CUDA at 1M triangles, 1024²,
and one pixel against the CPU). Under ``TRITON_INTERPRET=1`` the results are bit-identical to the torch
backend (tested); on a GPU they should be too. One stated exception remains possible on any device: a
pixel centre that the rounded edge test accepts although it lies outside the triangle's bounding box
plus its 1e-3 px slack (within rounding of a vertex) is tested by whichever backend's candidate set
(tile / stamp) happens to reach it; the ``gpu`` tests therefore check ids exactly against the CPU torch
backend at moderate sizes and allow 1e-3 of the pixels to differ at 1M triangles.

Design (all kernels below; ``triton`` is imported only here, on first use):

1. **Bin count** (``_bin_kernel``, ``EMIT=False``): one lane per triangle instance (grid: triangle blocks
   × images). Gathers the three clip-space vertices, culls triangles wholly behind the near plane or
   beyond the far plane (edge-on ones, ``det = 0``, are rejected by the raster kernel), computes the pixel bounding box of the projected
   vertices (with the torch backend's 1e-3 px slack and arithmetic; triangles reaching ``w ≤ 0`` or behind the near plane get the whole
   image — always conservative, the per-pixel test decides) and adds 1 to the counter of every
   ``TILE_H × TILE_W`` screen tile the box touches (atomics).
2. ``torch.cumsum`` of the per-tile counts (in int64, :func:`tile_offsets`: the total of a call can pass
   2^31) gives each tile's slice of one flat list; **one host sync** reads the total to allocate it (4
   bytes per (triangle, tile) pair); the offsets go to the kernels as int32 (a binned list holds at most
   :data:`MAX_PAIRS` = 2^30 pairs).
3. **Bin emit** (same kernel, ``EMIT=True``): the same boxes again, each pair claims a slot of its tile's
   slice with an atomic cursor and stores the triangle index. The order inside a slice is arbitrary:
   the depth test compares the packed key ``(z/w at float32, triangle index)`` of the torch backend
   (``backends._common.depth_key``), so the result does not depend on it (deterministic). **Small
   triangles** (box within ``STAMP × STAMP`` pixels, default 4; most of 1M triangles at 512²) are not
   binned: this pass tests their stamp's pixel centres itself, one lane per triangle, and merges the
   keys into a per-pixel int64 key buffer with ``atomic_min`` (the torch backend's scatter-min), so a
   tile with a thousand sub-pixel triangles does not loop over them one by one.
4. **Raster** (``_raster_kernel``): one program per (tile, image) with the tile's pixels in registers,
   starting from the key buffer; loops over its triangles (two per step, both loaded before either is tested, ``UNROLL=2``), builds
   the sign-normalised edge planes and the ``z/w`` plane from the vertices (``_planes``), tests every
   pixel centre and keeps the nearest (then lowest-index) one (``_depth_test``). Afterwards the
   winner's vertices are gathered per pixel and ``u, v, z/w`` (and, with ``grad_db``, the screen
   derivatives) are computed and stored as ``rast`` directly.
5. **Backward** (``_raster_bwd_kernel``): one program per 16 × 16 pixel tile of an image, one lane per
   pixel; recomputes the edge functions of the pixel's triangle from its vertices and forms ``d rast / d
   pos`` of its three vertices (formula: ``meshlift.render.rasterize._Barycentrics.backward``); a
   gradient through ``rast_db`` (mip-level selection) is the analytic derivative of
   ``barycentrics_at``'s screen derivatives, in the same kernel (twin: autograd through
   ``barycentrics_at``). **Pre-reduction** (``_scatter_vertices``): large triangles put hundreds of
   pixels' atomics on the same 12 addresses (the first H200 run: backward-bound, 3× nvdiffrast), so up
   to ``RasterTuning.bwd_ids`` (default 8) times per tile the triangle of the first remaining pixel is
   picked, its pixels' 12 values are summed in registers (one multi-operand ``tl.reduce``) and added
   with 12 scalar atomics; the loop stops when a picked triangle covers fewer than 8 of the tile's
   pixels (small triangles: per-pixel atomics lose nothing) and the pixels left add their own values.
   All atomics use ``sem="relaxed"`` (Triton's default ``acq_rel`` orders each one; nothing reads the
   gradient in the launch). The sums are reassociated: equal to the twin to float32 rounding (tests:
   1e-5 abs / 1e-4 rel in float32, 1e-10 / 1e-9 in float64).
6. **Interpolate** (``_interp_fwd_kernel`` / ``_interp_bwd_kernel``): per pixel gather of the three
   vertices' attributes weighted by ``(u, v, 1 − u − v)``; backward (16 × 16 tiles, the same per-triangle
   pre-reduction of the ``3 · C`` attribute gradients) adds into the attribute gradient and writes
   ``d/du, d/dv`` into the gradient of ``rast``.

Forward = 8 launches + 1 sync (key buffer fill, zero counters, count, cumsum, int32 cast, cursor copy,
emit, raster) within the budget, + 1 for interpolate; backward = 2 launches per op (zeroed gradient + kernel). Memory: 4 bytes per tile counter and per (triangle, tile)
pair, 8 per pixel (key buffer), plus the outputs; no per-triangle or per-fragment buffers. Pure-PyTorch twins: the torch backend
+ the torch formulas of :mod:`meshlift.render.rasterize` / :mod:`meshlift.render.interpolate` (and the
brute-force :mod:`meshlift.render.reference`); tests/test_kernels_raster_triton.py compares them
forward and backward.

Tile size: ``TILE_H × TILE_W`` pixels per raster program (default by frame size, :func:`default_tile`:
8 × 8 below 2^21 pixels per call, 16 × 16 from there (2048², 512² × 8), as the first H200 sweep found;
``num_warps`` 4, unroll 2, stamp 4); ``kernels.use_kernels(raster_tuning=RasterTuning(...))`` overrides them
(``benchmarks/raster_triton_tune.py`` sweeps them; :func:`describe_config` says what a call runs with).
Small tiles bin more pairs for large triangles (100k triangles filling a 1024² frame: ~330 px each, 2-4
tiles of 16²); large tiles test more uncovered pixels per small triangle (1M triangles: a few px each).
Batches (instanced ``[B, V, 4]`` or range mode) are the second grid axis of every per-triangle and
per-tile kernel.

Memory bound: the pair list holds at most ``max_fragments`` pairs (the rasterizer's fragment budget,
default 2^24 → 64 MiB; capped at :data:`MAX_PAIRS`); when the first count says more, the triangles are
binned and rastered in chunks of about that many pairs, a chunk that counts more halved until it fits
(only a single triangle's pairs, at most ``B ×`` tiles, can exceed it), the per-pixel winner carried
between chunks in the key buffer (same result). Integer widths: per-(image, tile) counts, pair slots and
offsets are int32 (each bounded by ``T`` or :data:`MAX_PAIRS`), their sum over a call int64; every
pointer offset that scales with the mesh or the batch (``t · 3`` into ``tri``, vertex rows ``(b · V + v) ·
4``, pixels ``(b · H + i) · W + j``, attribute rows) is formed in int64 in the kernels, since Triton
types ``program_id``, ``tl.arange`` and loaded int32 values as int32 and a product of them wraps before it
is added to the pointer. Limits: triangles reaching ``w ≤ 0`` or crossing the near plane are binned to
every tile (exact, but slow if there are many; the torch backend clips their boxes).

Cost of the first call: Triton compiles the kernels at run time (no nvcc; its bundled ptxas) and caches
them on disk (``~/.triton/cache``, env ``TRITON_CACHE_DIR``); ``benchmarks/raster.py`` prints the first
call's time as "first call s".
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from meshlift.errors import OutOfMemoryError, RenderError
from meshlift.kernels._common import BBOX_SLACK_PX

#: Default launch settings (the measured best; :class:`~meshlift.kernels.choice.RasterTuning` documents them).
from meshlift.kernels.choice import (  # noqa: E402
    DEFAULT_BWD_IDS,
    DEFAULT_STAMP,
    DEFAULT_TILE,
    DEFAULT_UNROLL,
    DEFAULT_WARPS,
    LARGE_FRAME_PIXELS,
    SMALL_FRAME_TILE,
    kernel_choice,
    triton_runs_on,
)

#: Key of an empty pixel (int64 max; every key ≥ backends._common.EMPTY_KEY means empty).
_EMPTY = 2**63 - 1
#: Block sizes of the per-triangle and per-pixel kernels.
_TRI_BLOCK = 128
_PIX_BLOCK = 256
#: Pixel tile (rows, cols) of one backward program (rasterize and interpolate): its gradients are summed
#: per triangle in registers before the atomics (kernels' ``_scatter_vertices``).
_BWD_TILE = (16, 16)
#: The pre-reduction of a tile stops once a picked triangle covers fewer pixels of it than this.
_BWD_MIN_PIX = 8
#: Largest total of (triangle, tile) pairs one call may bin before it refuses (4 bytes each).
MAX_PAIRS = 2**30

_K = None

#: Launch option of the binning and raster kernels: no fused multiply-add contraction, so that every
#: edge function, depth and barycentric is rounded op by op exactly as in the PyTorch twin (bit-identical
#: ids and values to the torch backend on the CPU; shared edges stay watertight, since the edge planes of
#: two triangles sharing an edge are then exact negatives of each other).
_EXACT = {"enable_fp_fusion": False}


def available(device: torch.device) -> bool:
    """Whether the Triton kernels can run on ``device``: CUDA with triton, or CPU under the interpreter."""
    return triton_runs_on(device)


def default_tile(H: int = 0, W: int = 0, B: int = 1) -> Tuple[int, int]:
    """The raster tile for a ``B × H × W`` call: :data:`DEFAULT_TILE` (16x16) from
    :data:`LARGE_FRAME_PIXELS` pixels in all (2048², 512² × 8), :data:`SMALL_FRAME_TILE` (8x8) below
    (1024² and less: the sweep's best there); 16x16 when the size is not given."""
    if H and W and H * W * max(B, 1) < LARGE_FRAME_PIXELS:
        return SMALL_FRAME_TILE
    return DEFAULT_TILE


def tile_config(H: int = 0, W: int = 0, B: int = 1) -> Tuple[int, int, int, int, int]:
    """``(TILE_H, TILE_W, num_warps, unroll, stamp)`` of the raster kernels for a ``B × H × W`` call: the
    current :class:`~meshlift.kernels.choice.RasterTuning` (``kernels.use_kernels(raster_tuning=...)``),
    its tile, when None, from :func:`default_tile`."""
    t = kernel_choice().raster_tuning
    th, tw = t.tile if t.tile is not None else default_tile(H, W, B)
    return int(th), int(tw), t.warps, t.unroll, t.stamp


def describe_config(H: int = 0, W: int = 0, B: int = 1) -> str:
    """What a ``B × H × W`` call runs with, e.g. ``"tile 8x8, warps 4, unroll 2, stamp 4, bwd ids 8"``
    (printed by the benchmarks)."""
    th, tw, warps, unroll, stamp = tile_config(H, W, B)
    return f"tile {th}x{tw}, warps {warps}, unroll {unroll}, stamp {stamp}, bwd ids {bwd_ids()}"


def bwd_ids() -> int:
    """Most triangles whose gradients one backward tile sums in registers before its atomics (the current
    ``RasterTuning.bwd_ids``, default :data:`DEFAULT_BWD_IDS`; 0 = one atomic per pixel and value)."""
    return kernel_choice().raster_tuning.bwd_ids


def _kernels():
    """The Triton kernels, imported on first use (so that ``TRITON_INTERPRET`` set by a test is honoured)."""
    global _K
    if _K is not None:
        return _K
    import triton

    from meshlift.kernels import _raster_triton_kernels as k

    _K = {
        "bin": k._bin_kernel,
        "raster": k._raster_kernel,
        "raster_bwd": k._raster_bwd_kernel,
        "interp_fwd": k._interp_fwd_kernel,
        "interp_bwd": k._interp_bwd_kernel,
        "cdiv": triton.cdiv,
        "next_pow2": triton.next_power_of_2,
    }
    return _K


_SCALES: dict = {}


def _db_scale(H: int, W: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``(2/W, 2/H)`` in ``dtype`` on ``device`` (NDC → pixel units of ``rast_db``), cached."""
    k = (H, W, dtype, str(device))
    if k not in _SCALES:
        if len(_SCALES) >= 32:
            _SCALES.clear()
        _SCALES[k] = torch.tensor([2.0 / W, 2.0 / H], dtype=dtype, device=device)
    return _SCALES[k]


def _tables(H: int, W: int, dtype: torch.dtype, device: torch.device):
    from meshlift.kernels._common import pixel_centre_tables

    return pixel_centre_tables(H, W, dtype, device)


def tile_offsets(cnt: torch.Tensor) -> Tuple[torch.Tensor, int]:
    """``(offs, total)``: exclusive prefix sums of the per-(image, tile) pair counts ``cnt`` (int32, a
    leading 0) as **int64**, and their total (one host sync).

    The sum runs in int64 because the pair total of one call can pass 2^31 − 1 although every count fits
    int32: ``B × T`` triangle instances times the tiles each box touches (a triangle crossing the near plane
    or reaching ``w ≤ 0`` touches every tile, e.g. 1024 at 512² with 16 × 16 tiles): 8 views × 9M faces at
    ~30 tiles each is 2.15e9. An int32 ``cumsum`` wrapped there to a negative or small total, which passed
    the budget checks and sized the pair list (``max(total, 1)``) far too small: the emit kernel then wrote
    past it (``CUDA error: an illegal memory access``, 8,970,259 faces × 8 views at 512² on an H200). The
    kernels still take int32 offsets (cast after the check: a binned chunk holds at most
    :data:`MAX_PAIRS` = 2^30 pairs)."""
    offs = torch.cumsum(cnt, 0, dtype=torch.int64)
    return offs, int(offs[-1])


def _bin_and_raster(
    pos: torch.Tensor, tri: torch.Tensor, H: int, W: int, ranges: Optional[torch.Tensor], grad_db: bool, max_pairs: int
):
    """Forward visibility + barycentrics: ``(rast [B, H, W, 4], rast_db [B, H, W, 4 or 0])`` (no autograd).

    ``pos`` contiguous float32/float64, ``[B, V, 4]`` or ``[V, 4]`` with ``ranges [B, 2]`` int64 (validated);
    ``tri`` ``[T, 3]`` int32 contiguous; ``max_pairs``: budget of (triangle, tile) pairs binned at once
    (above it the triangles are processed in chunks, the per-pixel winner kept in a z-buffer).
    """
    K = _kernels()
    dev, dtype = pos.device, pos.dtype
    T = tri.shape[0]
    th, tw, warps, unroll, stamp = tile_config(H, W, pos.shape[0] if ranges is None else ranges.shape[0])
    if ranges is None:
        B, V = pos.shape[0], pos.shape[1]
        rng = False
        first = count = tri  # unused placeholders (pointer arguments)
        max_count = T
    else:
        B, V = ranges.shape[0], pos.shape[0]
        rng = True
        first = ranges[:, 0].to(torch.int32).contiguous()
        count = ranges[:, 1].to(torch.int32).contiguous()
        max_count = int(ranges[:, 1].max()) if B else 0  # host sync (range mode only)
    n_tx, n_ty = -(-W // tw), -(-H // th)
    n_tiles = n_tx * n_ty
    rast = torch.empty(B, H, W, 4, dtype=dtype, device=dev)
    rast_db = torch.empty(B, H, W, 4, dtype=dtype, device=dev) if grad_db else pos.new_zeros(B, H, W, 0)
    if B == 0:
        return rast, rast_db
    xtab, ytab = _tables(H, W, dtype, dev)
    args = (pos, tri, first, count)
    scal = (T, V, H, W, n_tx, n_ty, W * 0.5, H * 0.5, float(max(H, W) + 2), BBOX_SLACK_PX)
    bkw = dict(RANGE=rng, TILE_H=th, TILE_W=tw, STAMP=stamp, BLOCK=_TRI_BLOCK, num_warps=4, **_EXACT)
    # packed (z/w, index) key per pixel: stamped small triangles and earlier chunks meet the tiles here
    keys = torch.full((B * H * W,), _EMPTY, dtype=torch.int64, device=dev)
    targs = (keys, xtab, ytab)

    def count(lo: int, hi: int):
        """Pairs of the triangles with local index in [lo, hi) of every image: ``(offs int64, total)``."""
        grid = (max(K["cdiv"](hi - lo, _TRI_BLOCK), 1), B)
        cnt = torch.zeros(B * n_tiles + 1, dtype=torch.int32, device=dev)  # per (image, tile): <= T < 2^31
        K["bin"][grid](*args, cnt, cnt, *targs, *scal, lo, hi, EMIT=False, **bkw)
        return tile_offsets(cnt)  # the host sync: size of the pair list

    def emit_and_raster(lo: int, hi: int, offs64: torch.Tensor, total: int, final: bool):
        """Bin the triangles [lo, hi) into their tiles' slices (``total`` pairs) and raster them."""
        if total > MAX_PAIRS:  # the emit kernel's slots and the raster kernel's offsets are int32
            raise OutOfMemoryError(
                f"rasterize (triton) would bin {total} (triangle, tile) pairs in one chunk of {hi - lo} triangles "
                f"at {H}x{W}, batch {B} (at most {MAX_PAIRS}, the int32 pair list's limit): lower the resolution "
                "or the batch size"
            )
        offs = offs64.to(torch.int32)
        cursor = offs[:-1].clone()
        pairs = torch.empty(max(total, 1), dtype=torch.int32, device=dev)
        grid = (max(K["cdiv"](hi - lo, _TRI_BLOCK), 1), B)
        K["bin"][grid](*args, cursor, pairs, *targs, *scal, lo, hi, EMIT=True, **bkw)
        K["raster"][(n_tiles, B)](
            pos, tri, offs, pairs, xtab, ytab, _db_scale(H, W, dtype, dev), rast, rast_db if grad_db else rast, keys,
            V, H, W, n_tx, n_tiles, RANGE=rng, GRAD_DB=grad_db, TILE_H=th, TILE_W=tw, UNROLL=unroll,
            FINAL=final, num_warps=warps, **_EXACT,
        )

    budget = min(max_pairs, MAX_PAIRS)
    # count everything first; within the budget (the usual case) that is the only pass
    offs, total = count(0, max_count)
    if total <= budget:
        emit_and_raster(0, max_count, offs, total, True)
        return rast, rast_db
    # over the budget: triangle chunks of about `budget` pairs each, the winner carried in the key buffer;
    # a chunk that counts more (pair-heavy triangles are rarely spread evenly) is halved until it fits
    n_chunks = -(-total // budget)
    step = max(-(-max_count // n_chunks), 1)
    del offs
    lo = 0
    while lo < max_count:
        hi = min(lo + step, max_count)
        offs, total = count(lo, hi)
        while total > budget and hi - lo > 1:
            hi = lo + (hi - lo) // 2
            offs, total = count(lo, hi)
        emit_and_raster(lo, hi, offs, total, hi >= max_count)
        del offs
        lo = hi
    return rast, rast_db


class _RasterizeTriton(torch.autograd.Function):
    """``rast, rast_db`` from clip-space ``pos``; backward scatters into ``pos`` (kernel 5 of the module
    docstring). Twin: the torch path of :func:`meshlift.render.rasterize` (tests compare)."""

    @staticmethod
    def forward(ctx, pos, tri, H, W, ranges, grad_db, max_pairs):
        ctx.set_materialize_grads(False)
        rast, rast_db = _bin_and_raster(pos, tri, H, W, ranges, grad_db, max_pairs)
        ctx.save_for_backward(pos, tri, rast)
        ctx.dims = (H, W, ranges is not None, grad_db)
        if not grad_db:
            ctx.mark_non_differentiable(rast_db)
        return rast, rast_db

    @staticmethod
    def backward(ctx, g_rast, g_db):
        pos, tri, rast = ctx.saved_tensors
        H, W, rng, grad_db = ctx.dims
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None, None, None
        gpos = torch.zeros_like(pos)
        has_db = g_db is not None and grad_db
        if g_rast is not None or has_db:
            K = _kernels()
            xtab, ytab = _tables(H, W, pos.dtype, pos.device)
            V = pos.shape[-2]
            g = g_rast.to(pos.dtype) if g_rast is not None else None
            d = g_db.to(pos.dtype) if has_db else None
            bh, bw = _BWD_TILE
            n_tx = -(-W // bw)
            K["raster_bwd"][(n_tx * -(-H // bh), rast.shape[0])](
                pos, tri, rast, rast if g is None else g, rast if d is None else d, xtab, ytab, _db_scale(H, W, pos.dtype, pos.device), gpos,
                V, H, W, n_tx, *(g.stride() if g is not None else (0, 0, 0, 0)), *(d.stride() if d is not None else (0, 0, 0, 0)),
                RANGE=rng, HAS_G=g is not None, HAS_DB=has_db, BH=bh, BW=bw, MAX_IDS=bwd_ids(), MIN_PIX=_BWD_MIN_PIX, num_warps=4,
            )
        return gpos, None, None, None, None, None, None


class _InterpolateTriton(torch.autograd.Function):
    """Fused ``interpolate`` (no ``diff_attrs``); twin: the torch path of :func:`meshlift.render.interpolate`."""

    @staticmethod
    def forward(ctx, attr, rast, tri, astride):
        K = _kernels()
        B, H, W, _ = rast.shape
        C = attr.shape[-1]
        N = B * H * W
        out = torch.empty(B, H, W, C, dtype=attr.dtype, device=attr.device)
        bc = min(K["next_pow2"](max(C, 1)), 32)
        if N and C:
            K["interp_fwd"][(K["cdiv"](N, _PIX_BLOCK),)](attr, rast, tri, out, N, C, H * W, astride, BLOCK=_PIX_BLOCK, BLOCK_C=bc, num_warps=4)
        ctx.save_for_backward(attr, rast, tri)
        ctx.astride = astride
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_out):
        attr, rast, tri = ctx.saved_tensors
        need_a, need_r = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if g_out is None or not (need_a or need_r):
            return None, None, None, None
        K = _kernels()
        B, H, W, _ = rast.shape
        C = attr.shape[-1]
        N = B * H * W
        gattr = torch.zeros_like(attr) if need_a else attr
        grast = torch.empty_like(rast) if need_r else rast  # every element is written by the kernel
        bc = min(K["next_pow2"](max(C, 1)), 32)
        if need_r and not (N and C):
            grast.zero_()
        if N and C:
            g = g_out.to(attr.dtype)
            bh, bw = _BWD_TILE
            n_tx = -(-W // bw)
            K["interp_bwd"][(n_tx * -(-H // bh), B)](
                attr, rast, tri, g, gattr, grast, C, H, W, n_tx, ctx.astride, *g.stride(),
                NEED_ATTR=need_a, NEED_RAST=need_r, BH=bh, BW=bw, BLOCK_C=bc, MAX_IDS=bwd_ids(), MIN_PIX=_BWD_MIN_PIX, num_warps=4,
            )
        return (gattr if need_a else None), (grast if need_r else None), None, None


def rasterize_triton(
    pos: torch.Tensor,
    tri: torch.Tensor,
    resolution: Tuple[int, int],
    ranges: Optional[torch.Tensor] = None,
    grad_db: bool = False,
    max_fragments: int = 2**24,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Triton ``rasterize`` (arguments and outputs as :func:`meshlift.render.rasterize`, already validated:
    ``pos`` float ``[B, V, 4]`` or ``[V, 4]`` + ``ranges [B, 2]`` int64, ``tri [T, 3]`` int). Differentiable
    w.r.t. ``pos``. Half-precision ``pos`` is computed in float32. ``max_fragments`` bounds the (triangle,
    tile) pairs binned at once (4 bytes each); above it the triangles run in chunks (same result)."""
    H, W = int(resolution[0]), int(resolution[1])
    if pos.dtype in (torch.float16, torch.bfloat16):
        pos = pos.float()
    pos = pos.contiguous()
    tri32 = tri.to(torch.int32).contiguous()
    if ranges is not None:
        ranges = ranges.to(device=pos.device, dtype=torch.int64)
    if tri32.shape[0] == 0:
        B = pos.shape[0] if ranges is None else ranges.shape[0]
        return pos.new_zeros(B, H, W, 4), pos.new_zeros(B, H, W, 4 if grad_db else 0)
    return _RasterizeTriton.apply(pos, tri32, H, W, ranges, bool(grad_db), max(int(max_fragments), 1))


def interpolate_triton(attr: torch.Tensor, rast: torch.Tensor, tri: torch.Tensor) -> torch.Tensor:
    """Fused Triton ``interpolate`` without ``diff_attrs`` (arguments validated by
    :func:`meshlift.render.interpolate`): ``out [B, H, W, C]`` in the promoted dtype of ``attr`` and ``rast``."""
    B = rast.shape[0]
    V = attr.shape[-2]
    dtype = torch.promote_types(attr.dtype, rast.dtype)
    if dtype in (torch.float16, torch.bfloat16):
        dtype = torch.float32
    per_image = attr.ndim == 3 and attr.shape[0] == B and B > 1
    a = (attr if per_image else attr.reshape(V, attr.shape[-1])).to(dtype).contiguous()
    return _InterpolateTriton.apply(a, rast.to(dtype).contiguous(), tri.to(torch.int32).contiguous(), V if per_image else 0)


class TritonBackend:
    """The ``"triton"`` rasterizer backend: visibility, and the whole differentiable ``rasterize``."""

    name = "triton"

    def is_available(self, device: torch.device) -> bool:
        return available(device)

    @torch.no_grad()
    def visibility(self, pos, tri, resolution, ranges, max_fragments) -> torch.Tensor:
        """``[B, H, W]`` int64 nearest triangle (−1 empty); see the VisibilityBackend protocol."""
        rast, _ = rasterize_triton(pos.detach(), tri, resolution, ranges, grad_db=False, max_fragments=max_fragments)
        return rast[..., 3].to(torch.int64) - 1

    def rasterize(self, pos, tri, resolution, ranges, grad_db, max_fragments):
        """Differentiable ``(rast, rast_db)`` as :func:`meshlift.render.rasterize` (validated inputs)."""
        return rasterize_triton(pos, tri, resolution, ranges, grad_db, max_fragments)


__all__ = ["TritonBackend", "rasterize_triton", "interpolate_triton", "available", "tile_config", "describe_config", "bwd_ids"]
