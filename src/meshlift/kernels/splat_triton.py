"""Triton kernels of Gaussian splatting (compiled at run time; no nvcc). ``triton`` is imported lazily
(inside :func:`_k`, which loads the JIT kernels of :mod:`meshlift.kernels._splat_project_jit` and
:mod:`meshlift.kernels._splat_raster_jit`), so
importing this module never needs it.

Each differentiable stage is a private ``torch.autograd.Function`` with a hand-written backward; its
specification is the readable twin in :mod:`meshlift.render.splat_reference` (same arguments, same
outputs), and tests compare forward and backward against it (under ``TRITON_INTERPRET=1`` on CPU):

- :func:`project_gaussians` — ``_ProjectFn``: EWA projection, one program per ``BLOCK`` (camera,
  Gaussian) pairs; backward per pair, summed over cameras with ``torch.sum``.
- :func:`isect_tiles` — a Triton tile-count kernel and key writer: Gaussians are argsorted by depth once,
  each writes its tile ids in depth order, then a *stable* ``torch.sort`` of int32 tile ids (32-bit radix
  passes instead of 64) gives per-tile lists already in depth order (notes, "Recommended Triton design").
- :func:`composite_tiles` — ``_CompositeFn``: one program per 16×16 tile (and per group of <= 4
  feature channels), reading packed per-Gaussian screen records. Forward: the tile's depth-ordered list
  one Gaussian per step (``_BATCH`` unrolled), [256]-pixel vectors, the T < 1e-4 stop exactly as in the
  reference (a Gaussian that would cross it is not added and ends the pixel), early exit when every pixel
  of the tile is done; with ``_SPLIT_FWD`` > 1 a program per band of rows, skipping (``_CULL_FWD``) the entries
  that cannot reach it (the same bits in the interpreter; on the H100 up to ~2e-4 apart, FMA
  contraction; 4 bands without culling by default: timed below). Backward: ``_SPLIT_BWD`` programs per tile, each for a
  band of rows; a band walks the tile's list back to front from its own pixels' last contributor, tests ``_CULL_CHUNK`` entries at a
  time against its pixel box (``_CULL_BWD``: the forward's opacity cut at the conic's minimum over the box)
  and takes those that can reach it ``_BATCH_BWD`` at a time as a ``[B, P]`` block: transmittance
  recovered by division, the colour "behind" each Gaussian from a running sum plus an in-batch
  ``tl.cumsum``, reduced over the band's pixels, then one ``atomic_add`` per Gaussian per band per
  parameter.
- :func:`tile_statistics` — the no-grad statistics pass (Σ αT, pixels touched, largest contributor).

Camera gradients (``world_to_camera``, ``K``) are not produced here; the torch backend has them.
"""

from __future__ import annotations

import functools
import types
from typing import Optional, Tuple

import torch

from meshlift.errors import DependencyError, RenderError
from meshlift.kernels.choice import triton_runs_on

__all__ = ["is_available", "count_bad_gaussians", "project_gaussians", "isect_tiles", "composite_tiles",
           "tile_statistics"]

# Same constants as meshlift.render.splat_reference (docs/conventions.md §11); a test checks equality.
ALPHA_THRESHOLD = 1.0 / 255.0
T_THRESHOLD = 1e-4
MAX_EXTEND = 3.33

_BLOCK = 256  # elementwise kernels
# Tile-program shapes, measured on an H200 (benchmarks/notes_splat.md): few warps per 256-pixel tile win
# (the backward's reductions over the tile's pixels stay within one or two warps; more tiles per SM).
_BATCH = 8  # Gaussians per forward step (unrolled, one Gaussian at a time)
_WARPS = 2  # warps per forward tile program
# Forward programs per tile (bands of TS / _SPLIT_FWD rows) and, with bands, whether a band skips the list entries
# that cannot reach it (the backward's culling test): the late lego step is bound by the crowded tiles' long lists
# (session 32: longest 7,102 entries against a mean of ~840; docs/benchmarks.md "The late step profiled"). Timed side
# by side on one training render's inputs (H100, session 33, benchmarks/gaussians_loop_profile.py --kernel-ab; lego
# step 12k, ms a launch): 1 band 2.02, 4 bands 0.86, 4 bands with culling 3.27 (the per-entry test costs more than
# it saves), 8 bands 0.98 and 16 bands 2.09 at step 6k against 0.74 for 4.
_SPLIT_FWD = 4
_CULL_FWD = 0
# Backward: Gaussians per step (a [B, P] block, P the band's pixels) and warps per band program. With 8 bands of 32
# pixels, 8 Gaussians on 2 warps (H100, session 34, --kernel-ab on one lego training render's inputs, composite_bwd
# ms a launch at steps 6k / 12k): 4 on 1 warp (the earlier default, chosen at 1 band a tile) 3.47 / 4.13, 2 on 1 5.57,
# 8 on 1 2.61 / 2.92, **8 on 2 2.53 / 2.92**, 16 on 2 – / 2.77, 16 on 4 – / 2.70; the whole render forward+backward
# 8 on 2 4.90 / 5.56 ms against 6.07 / 6.65 (the 16-Gaussian blocks' kernels are a little faster, their renders not).
_BATCH_BWD = 8
_WARPS_BWD = 2
# Backward: skip batches none of whose Gaussians reaches a pixel of the tile (same result). Not yet timed
# on a GPU (benchmarks/splat_stages.py sweeps "4:1s" = skip on against "4:1"): off until measured.
_SKIP_EMPTY_BWD = False
# Backward programs per 16-px tile (bands of 16 / _SPLIT_BWD rows): a 400² view has 625 tiles, under 5 one-warp
# programs per SM of an H200 at 1 (latency-bound); more bands keep more in flight, and with culling each band
# processes only the Gaussians of the tile's list that can reach it (a third to a half of the list at 4 bands:
# benchmarks/splat_bwd_bands_model.py), so the slowest (longest-list) tiles no longer bound the kernel.
# Split alone (no culling) measured slower on random scenes (2026-12-04: 2.39 vs 1.7 ms at 150k@400²). With culling,
# timed on one lego training render's inputs (H100, session 33, --kernel-ab, ms a launch at steps 6k / 12k):
# 2 bands 7.17 / 7.94, 4 bands 4.73 / 5.20, 8 bands 3.90 / 3.85, 16 bands 3.83 / 4.17.
_SPLIT_BWD = 8
# Backward: leave out Gaussians that cannot reach the band's pixel box (the forward's opacity cut against the
# conic's minimum over the box, from the screen records alone, before the [B, P] block; same result): 0 off,
# 1 skip a batch of _BATCH_BWD consecutive entries none of which reaches, 2 test _CULL_CHUNK entries at a time and
# process only those that reach (compacted batches). The previous path, for A/B: _SPLIT_BWD = 1, _CULL_BWD = 0
# (benchmarks/splat_stages.py --split 1 --cull 0); the defaults 8 / 2 were timed above.
_CULL_BWD = 2
_CULL_CHUNK = 32
_BATCH_STATS = 16  # the statistics pass ([B, 256] blocks)
_WARPS_STATS = 4
_TILE_KEY16 = True  # sort 16-bit tile ids when C * tiles < 32768


def is_available(device: torch.device) -> bool:
    """Triton can run these kernels on ``device``: CUDA with triton installed, or CPU tensors under
    ``TRITON_INTERPRET=1`` (the interpreter, for tests): :func:`meshlift.kernels.choice.triton_runs_on`."""
    return triton_runs_on(device)


@functools.lru_cache(maxsize=1)
def _k():
    """The jitted kernels (modules :mod:`meshlift.kernels._splat_project_jit` and
    :mod:`meshlift.kernels._splat_raster_jit`, one namespace); imports triton on first use."""
    try:
        from meshlift.kernels import _splat_project_jit, _splat_raster_jit
    except ImportError as e:  # pragma: no cover - probed by is_available first
        raise DependencyError("the triton splat backend needs the 'triton' package: pip install triton "
                              "(or use backend='torch')") from e
    names = {}
    for mod in (_splat_project_jit, _splat_raster_jit):
        names.update({n: getattr(mod, n) for n in dir(mod) if not n.startswith("_")})
    return types.SimpleNamespace(**names)


def _grid(n: int, block: int) -> Tuple[int]:
    return (max(1, (n + block - 1) // block),)


def _next_pow2(x: int) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


def count_bad_gaussians(means, quats, scales, opacities, colors=None) -> torch.Tensor:
    """``int32 [4]`` on the device: rows of ``means`` with NaN/Inf, of ``quats`` with NaN/Inf or all zero, of
    ``scales`` with NaN/Inf or a negative value, and ``opacities`` NaN/Inf or outside [0, 1]: the checks of
    :func:`meshlift.render.splat.rasterize_gaussians` in one pass (the torch twin there takes ~20 launches).
    With ``colors`` (any shape) ``int32 [5]``: the fifth counts its NaN/Inf entries, in the same launch."""
    N = means.shape[0]
    E = 0 if colors is None else colors.numel()
    out = torch.zeros(4 if colors is None else 5, device=means.device, dtype=torch.int32)
    if N or E:
        col = means if colors is None else colors.contiguous().reshape(-1)
        _k().count_bad_gaussians[_grid(max(N, E), 1024)](means.contiguous(), quats.contiguous(), scales.contiguous(),
                                                         opacities.contiguous(), col, out, N, E,
                                                         HAS_COLORS=colors is not None, BLOCK=1024)
    return out


# ------------------------------------------------------------------------------------------------
# Projection
# ------------------------------------------------------------------------------------------------


class _ProjectFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, means, quats, scales, opacities, w2c, K, width, height, near, far, eps2d, antialiased,
                radius_clip, binning):
        k = _k()
        ctx.set_materialize_grads(False)
        C, N = w2c.shape[0], means.shape[0]
        dev, dt = means.device, means.dtype
        means, quats, scales, opacities = (t.contiguous() for t in (means, quats, scales, opacities))
        w2c, K = w2c.to(dt).contiguous(), K.to(dt).contiguous()
        m2 = torch.empty(C, N, 2, device=dev, dtype=dt)
        con = torch.empty(C, N, 3, device=dev, dtype=dt)
        dep = torch.empty(C, N, device=dev, dtype=dt)
        rad = torch.empty(C, N, 2, device=dev, dtype=torch.int32)
        op = torch.empty(C, N, device=dev, dtype=dt)
        comp = torch.empty(C, N, device=dev, dtype=dt)
        # binning = (tile counts [C*N] int32, records [C*N, 6] float32, tile_size, tiles_w, tiles_h) to fill
        cnt, pk, ts, tw, th, ell = binning if binning is not None else (comp, comp, 16, 0, 0, False)
        if C * N:
            k.project_fwd[_grid(C * N, _BLOCK)](means, quats, scales, opacities, w2c, K, m2, con, dep, rad, op, comp,
                                               cnt, pk, C, N, width, height, near, far, eps2d, radius_clip, ts, tw,
                                               th, ANTIALIASED=bool(antialiased), BIN=binning is not None, ELLIPSE=ell,
                                               BLOCK=_BLOCK)
        ctx.save_for_backward(means, quats, scales, opacities, w2c, K, rad)
        ctx.cfg = (width, height, near, far, eps2d, bool(antialiased))
        ctx.mark_non_differentiable(rad)
        return m2, con, dep, rad, op, comp

    @staticmethod
    def backward(ctx, g_m2, g_con, g_dep, g_rad, g_op, g_comp):
        means, quats, scales, opacities, w2c, K, rad = ctx.saved_tensors
        width, height, near, far, eps2d, aa = ctx.cfg
        C, N = w2c.shape[0], means.shape[0]
        dev, dt = means.device, means.dtype
        z = lambda g, shape: torch.zeros(shape, device=dev, dtype=dt) if g is None else _rows(g.to(dt), C, N)  # noqa: E731
        g_m2, g_con = z(g_m2, (C, N, 2)), z(g_con, (C, N, 3))
        g_op = z(g_op, (C, N))
        # the kernel reads the depth gradient with unit stride (a slice of a feature gradient is strided)
        g_dep = torch.zeros((C, N), device=dev, dtype=dt) if g_dep is None else g_dep.to(dt).contiguous()
        srow = [t.stride(1) for t in (g_m2, g_con, g_op)]  # element stride from pair i to i + 1
        if g_comp is not None and bool((g_comp != 0).any()):
            raise RenderError("gradients through 'compensations' are not supported by the triton backend")
        # every element is written by the kernel (culled pairs get 0)
        gm = torch.empty(C, N, 3, device=dev, dtype=dt)
        gq = torch.empty(C, N, 4, device=dev, dtype=dt)
        gs = torch.empty(C, N, 3, device=dev, dtype=dt)
        go = torch.empty(C, N, device=dev, dtype=dt)
        if C * N:
            _k().project_bwd[_grid(C * N, _BLOCK)](means, quats, scales, opacities, w2c, K, rad, g_m2, g_con, g_dep,
                                                   g_op, gm, gq, gs, go, C, N, width, height, near, far, eps2d,
                                                   *srow, ANTIALIASED=aa, BLOCK=_BLOCK)
        red = (lambda t: t[0]) if C == 1 else (lambda t: t.sum(0))  # noqa: E731
        return red(gm), red(gq), red(gs), red(go), None, None, None, None, None, None, None, None, None, None


def _rows(g: torch.Tensor, C: int, N: int) -> torch.Tensor:
    """``g`` (``[C, N, k]`` or ``[C, N]``) itself when pair ``i = c·N + n`` starts at ``i · stride`` with
    unit-stride channels (e.g. a slice of the ``[C, N, 6]`` gradient record), else a contiguous copy."""
    if g.ndim == 3:
        ok = g.stride(2) == 1 and (C == 1 or g.stride(0) == N * g.stride(1))
    else:
        ok = C == 1 or g.stride(0) == N * g.stride(1)
    return g if ok else g.contiguous()


def project_gaussians(means, quats, scales, opacities, world_to_camera, K, width, height, near, far,
                      eps2d=0.3, antialiased=False, radius_clip=0.0, tile_size: Optional[int] = None,
                      tiles_w: int = 0, tiles_h: int = 0, ellipse_tiles: bool = False) -> dict:
    """Triton twin of :func:`meshlift.render.splat_reference.project_gaussians` (same arguments and
    outputs; no gradient to the cameras).

    With ``tile_size`` (and the grid ``tiles_w × tiles_h``) the same launch also writes what binning and
    compositing read, returned as ``tile_counts [C*N]`` int32 (tiles each pair touches, as
    :func:`isect_tiles` counts them) and ``records [C*N, 6]`` float32 (u, v, conic, opacity: the screen
    records of :func:`composite_tiles`); pass them on as ``isect_tiles(..., counts=)`` and
    ``composite_tiles(..., records=)`` to skip two launches and a copy. ``ellipse_tiles``: the counts are those of
    ellipse binning (``isect_tiles(..., conics=, opacities=)``; pass the same to it)."""
    C, N = world_to_camera.shape[0], means.shape[0]
    binning = None
    if tile_size is not None:
        cnt = torch.empty(C * N, device=means.device, dtype=torch.int32)
        pk = torch.empty(C * N, 6, device=means.device, dtype=torch.float32)
        binning = (cnt, pk, int(tile_size), int(tiles_w), int(tiles_h), bool(ellipse_tiles))
    m2, con, dep, rad, op, comp = _ProjectFn.apply(means, quats, scales, opacities, world_to_camera, K,
                                                   int(width), int(height), float(near), float(far),
                                                   float(eps2d), bool(antialiased), float(radius_clip), binning)
    out = {"means2d": m2, "conics": con, "depths": dep, "opacities": op, "radii": rad, "compensations": comp}
    if binning is not None:
        out["tile_counts"], out["records"] = binning[0], binning[1]
    return out


# ------------------------------------------------------------------------------------------------
# Tile binning
# ------------------------------------------------------------------------------------------------


def isect_tiles(means2d, radii, depths, tile_size, tiles_w, tiles_h, with_keys: bool = True,
                conics: Optional[torch.Tensor] = None, opacities: Optional[torch.Tensor] = None, *,
                records: Optional[torch.Tensor] = None, counts: Optional[torch.Tensor] = None,
                readback_extra: Optional[torch.Tensor] = None, on_readback=None, capacity: Optional[int] = None,
                count_out: Optional[dict] = None):
    """Triton twin of :func:`meshlift.render.splat_reference.isect_tiles`: same outputs (``isect_ids``
    are the same int64 keys, rebuilt from the sorted lists; None when ``with_keys`` is False, which
    saves three passes over the intersections when only the lists are needed). ``conics`` and ``opacities`` (both or
    neither): ellipse binning, as the reference's; ``records`` (the ``[C*N, 6]`` float32 records of
    :func:`project_gaussians` with a tile size) saves packing them again.

    ``counts``: the ``tile_counts`` of :func:`project_gaussians` (skips the count kernel). The one host
    read-back here (the number of intersections, to allocate the lists) can carry other device values:
    ``readback_extra`` (an integer tensor) comes back in the same transfer and is handed to
    ``on_readback(list of ints)`` before anything is allocated (e.g. deferred input checks that raise).

    ``capacity`` (an int): no read-back at all. The lists get ``capacity`` slots; the pairs that fit are written
    (a pair past the end is clamped into the last slots instead of written out of bounds, so an overflowing
    call leaves wrong but in-bounds lists), the unused slots carry a tile id past the last tile so the sort puts
    them at the end, and ``count_out`` (a dict) receives ``"n_isect"`` (``[1]`` int64 device tensor, the pairs
    in the lists: ``min(needed, capacity)``) and ``"needed"`` (``[1]`` int64, the true count). The lists are
    right exactly when ``needed <= capacity``; the caller checks that later (a host wait once the count is
    computed, not in this call) and redoes the render otherwise. ``isect_ids`` and the offsets are as without a
    capacity; ``flatten_ids`` has ``capacity`` entries, the last ``capacity - n_isect`` unused. Callers then
    pass ``n_isect`` to :func:`composite_tiles`. ``readback_extra`` is refused with a capacity."""
    if (conics is None) != (opacities is None):
        raise RenderError("isect_tiles: pass both conics and opacities (ellipse binning) or neither (bounding boxes)")
    k = _k()
    C, N = depths.shape
    if conics is not None and (tuple(conics.shape) != (C, N, 3) or tuple(opacities.shape) != (C, N)):
        raise RenderError(f"isect_tiles: conics {tuple(conics.shape)} and opacities {tuple(opacities.shape)} must be "
                          f"[C, N, 3] and [C, N] as depths [C, N] = {(C, N)} (project_gaussians' outputs)")
    dev = depths.device
    total = C * N
    n_tiles = C * tiles_h * tiles_w
    ell = conics is not None
    with torch.no_grad():
        m2 = means2d.detach().contiguous()
        rad = radii.contiguous()
        pk = m2  # unread without ellipse binning
        if ell:
            pk = records if records is not None else _pack_records(means2d, conics, opacities)
        if counts is not None:
            cnt = counts
        else:
            cnt = torch.zeros(total, device=dev, dtype=torch.int32)
            if total:
                k.tile_bounds[_grid(total, _BLOCK)](m2, pk, rad, cnt, total, tile_size, tiles_w, tiles_h,
                                                    ELLIPSE=ell, BLOCK=_BLOCK)
        d32 = depths.detach().reshape(-1).to(torch.float32)
        order = torch.sort(d32, stable=True)[1]
        ends = torch.cumsum(cnt[order], 0, dtype=torch.int64)
        # 16-bit tile ids when they fit: the stable radix sort then makes 2 passes instead of 4
        kdt = torch.int16 if (_TILE_KEY16 and n_tiles <= 32767) else torch.int32
        head = ends[-1:] if total else ends.new_zeros(1)  # [1] the number of pairs, on the device
        write_ends = ends
        if capacity is not None:  # no read-back: `capacity` slots, the unused ones past the last tile
            if readback_extra is not None or count_out is None:
                raise RenderError("isect_tiles: a capacity needs count_out and no readback_extra")
            M = max(int(capacity), tiles_w * tiles_h)  # one Gaussian's pairs always fit: clamped slots stay >= 0
            count_out["needed"], count_out["n_isect"] = head, head.clamp(max=M)
            write_ends = ends.clamp(max=M)  # a pair past the end is written into the list (wrong, in bounds)
            tiles = torch.full((M,), n_tiles, device=dev, dtype=kdt)  # sorted after every tile's range
            gids = torch.zeros(M, device=dev, dtype=torch.int64)
        else:
            if readback_extra is not None:
                vals = torch.cat([head, readback_extra.reshape(-1).to(torch.int64)]).tolist()
                M = int(vals[0])
                if on_readback is not None:
                    on_readback(vals[1:])
            else:
                M = int(ends[-1]) if total else 0
            tiles = torch.empty(M, device=dev, dtype=kdt)
            gids = torch.empty(M, device=dev, dtype=torch.int64)
        if M and total:
            k.write_keys[_grid(total, _BLOCK)](order, write_ends, cnt, m2, pk, rad, tiles, gids, total, N, tile_size,
                                               tiles_w, tiles_h, ELLIPSE=ell, BLOCK=_BLOCK)
        tiles_sorted, perm = torch.sort(tiles, stable=True)
        flatten_ids = gids[perm]
        offsets = torch.searchsorted(tiles_sorted, torch.arange(n_tiles, device=dev, dtype=kdt))
        isect_ids = None
        if with_keys:
            dbits = d32.contiguous().view(torch.int32).to(torch.int64)
            isect_ids = (tiles_sorted.to(torch.int64) << 32) | (dbits[flatten_ids] & 0xFFFFFFFF)
    return isect_ids, flatten_ids, offsets.to(torch.int64).reshape(C, tiles_h, tiles_w)


# ------------------------------------------------------------------------------------------------
# Compositing
# ------------------------------------------------------------------------------------------------


def _offsets_ext(isect_offsets: torch.Tensor, n_isect: int) -> torch.Tensor:
    off = isect_offsets.reshape(-1).to(torch.int64)
    # the end marker is filled on the device (new_tensor([n]) would be a blocking host-to-device copy)
    return torch.cat([off, torch.full((1,), n_isect, device=off.device, dtype=torch.int64)]).contiguous()


def _pack_records(means2d, conics, opacities) -> torch.Tensor:
    """``[C*N, 6]`` float32 screen records (u, v, conic a, b, c, opacity) read by the tile programs."""
    C, N = opacities.shape
    pk = torch.cat([means2d.detach(), conics.detach(), opacities.detach()[..., None]], dim=-1)
    return pk.reshape(C * N, 6).to(torch.float32).contiguous()


def _channel_groups(D: int) -> Tuple[int, int]:
    """(channels per tile program, programs per tile): at most 4 accumulators per program."""
    nc = min(4, max(1, D))
    return nc, (D + nc - 1) // nc


class _CompositeFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, means2d, conics, opacities, features, depths, flatten_ids, isect_offsets, width, height,
                tile_size, alpha_max, want_median, records, n_isect):
        k = _k()
        ctx.set_materialize_grads(False)
        C, N = opacities.shape
        D = features.shape[-1]
        dev, dt = means2d.device, means2d.dtype
        tiles_h, tiles_w = isect_offsets.shape[1:]
        n_tiles = C * tiles_h * tiles_w
        off = isect_offsets.reshape(-1).contiguous()
        fid = flatten_ids.contiguous()
        pk = records if records is not None else _pack_records(means2d, conics, opacities)
        ft = features.detach().to(torch.float32).contiguous()
        # every pixel lies in one tile and every channel in one group: the kernel writes all of them
        out = torch.empty(C, height, width, D, device=dev, dtype=torch.float32)
        T = torch.empty(C, height, width, device=dev, dtype=torch.float32)
        last = torch.empty((C, height, width), device=dev, dtype=torch.int32)
        med = (torch.empty((C, height, width), device=dev, dtype=torch.int64) if want_median
               else torch.empty(0, device=dev, dtype=torch.int64))
        if n_tiles and D:
            nc, ng = _channel_groups(D)
            off_k, n_off, n_end = off, n_tiles, fid.numel()
            if n_isect is not None:  # lists with unused slots (isect_tiles' capacity): the end is on the device;
                # with n_tiles + 1 offsets every tile, the last too, reads its end from them (n_end unused)
                off_k, n_off, n_end = torch.cat([off, n_isect.reshape(1).to(off.dtype)]), n_tiles + 1, 0
            split = max(1, min(int(_SPLIT_FWD), tile_size))
            k.composite_fwd[(n_tiles * split, ng)](off_k, fid, pk, ft, out, T, last, med, width, height, tiles_w,
                                                   tiles_h, float(alpha_max), D, n_off, n_end, NC=nc, TS=tile_size,
                                                   B=_BATCH, WANT_MED=bool(want_median), SPLIT=split,
                                                   CULL=int(_CULL_FWD) if split > 1 else 0, num_warps=_WARPS)
        else:
            out.zero_()
            T.fill_(1.0)
            last.fill_(-1)
            med.fill_(-1)
        ctx.save_for_backward(pk, ft, fid, off, T, last)
        ctx.cfg = (width, height, tile_size, tiles_w, tiles_h, float(alpha_max), C, N, dt)
        ctx.mark_non_differentiable(med)
        return out.to(dt), (1.0 - T).to(dt)[..., None], med

    @staticmethod
    def backward(ctx, g_out, g_alpha, g_med):
        pk, ft, fid, off, T, last = ctx.saved_tensors
        width, height, ts, tiles_w, tiles_h, alpha_max, C, N, dt = ctx.cfg
        D = ft.shape[-1]
        dev = pk.device
        g_out = torch.zeros(C, height, width, D, device=dev) if g_out is None else g_out.float().contiguous()
        g_alpha = torch.zeros(C, height, width, device=dev) if g_alpha is None else g_alpha[..., 0].float().contiguous()
        grec = torch.zeros(C, N, 6, device=dev, dtype=torch.float32)  # (means2d, conics, opacity) like pk
        gft = torch.zeros(C, N, D, device=dev, dtype=torch.float32)
        n_tiles = C * tiles_h * tiles_w
        if n_tiles and D and fid.numel():
            nc, ng = _channel_groups(D)
            split = max(1, min(int(_SPLIT_BWD), ts))
            _k().composite_bwd[(n_tiles * split, ng)](off, fid, pk, ft, T, last, g_out, g_alpha, grec, gft, width,
                                                      height, tiles_w, tiles_h, alpha_max, D, NC=nc, TS=ts,
                                                      B=_BATCH_BWD, SKIP=bool(_SKIP_EMPTY_BWD), SPLIT=split,
                                                      CULL=int(_CULL_BWD), CH=int(_CULL_CHUNK),
                                                      num_warps=_WARPS_BWD)
        grec = grec.to(dt)
        return (grec[..., 0:2], grec[..., 2:5], grec[..., 5], gft.to(dt), None, None, None, None, None, None, None,
                None, None, None)


def composite_tiles(means2d, conics, opacities, features, depths, flatten_ids, isect_offsets, width, height,
                    tile_size=16, alpha_max=0.99, chunk_elements=None, *, records: Optional[torch.Tensor] = None,
                    n_isect: Optional[torch.Tensor] = None):
    """Triton twin of :func:`meshlift.render.splat_reference.composite_tiles` (same arguments and outputs;
    ``chunk_elements`` is unused: a tile program holds one ``[16, 256]`` block at a time). Compositing runs
    in float32 whatever the input dtype. The median depth is gathered in torch from the per-pixel
    Gaussian id, so its gradient reaches ``depths``. ``records``: the ``records`` of
    :func:`project_gaussians` for these ``means2d``, ``conics``, ``opacities`` (skips packing them).
    ``n_isect``: the ``[1]`` device count of used entries of ``flatten_ids`` when the lists have unused slots
    (:func:`isect_tiles` with a ``capacity``); None: all of them are used."""
    C, N = opacities.shape
    if tile_size * tile_size > 4096 or tile_size & (tile_size - 1):
        raise RenderError(f"triton backend needs a power-of-two tile_size <= 64, got {tile_size}")
    want_median = depths is not None
    out, alpha, med = _CompositeFn.apply(means2d, conics, opacities, features, depths, flatten_ids, isect_offsets,
                                        int(width), int(height), int(tile_size), float(alpha_max), want_median,
                                        records, n_isect)
    median = None
    if want_median:  # [C,N] -> [C,H,W,1]; [C,N,k] -> [C,H,W,k]
        flat = depths.reshape(C * N, depths.shape[2] if depths.ndim == 3 else 1)  # -1 fails for N = 0
        if flat.numel():
            # index_select, not flat[idx]: its backward is one index_add_ (atomics), where advanced
            # indexing's backward sorts the 2.6M pixel ids of a 1600² view and walks the runs of each
            # Gaussian's pixels serially (10-48 ms per MILo step on an H200, growing with the splats' size)
            rows = flat.index_select(0, med.clamp_min(0).reshape(-1)).reshape(*med.shape, flat.shape[-1])
            median = torch.where(med[..., None] >= 0, rows, torch.zeros((), dtype=flat.dtype, device=flat.device))
        else:
            median = torch.zeros((*med.shape, flat.shape[-1]), dtype=depths.dtype, device=depths.device)
    return out, alpha, median


@torch.no_grad()
def tile_statistics(means2d, conics, opacities, flatten_ids, isect_offsets, width, height, tile_size=16,
                    alpha_max=0.99, chunk_elements=None) -> dict:
    """Triton twin of :func:`meshlift.render.splat_reference.tile_statistics`."""
    k = _k()
    C, N = opacities.shape
    dev = means2d.device
    tiles_h, tiles_w = isect_offsets.shape[1:]
    n_tiles = C * tiles_h * tiles_w
    off = _offsets_ext(isect_offsets, flatten_ids.numel())
    acc = torch.zeros(C * N, device=dev, dtype=torch.float32)
    cnt = torch.zeros(C * N, device=dev, dtype=torch.int32)
    best = torch.full((C, height, width), -1, device=dev, dtype=torch.int64)
    if n_tiles and flatten_ids.numel():
        k.stats_fwd[(n_tiles,)](off, flatten_ids.contiguous(), means2d.contiguous(), conics.contiguous(),
                                opacities.contiguous(), acc, cnt, best, width, height, tiles_w, tiles_h,
                                float(alpha_max), TS=tile_size, B=_BATCH_STATS, num_warps=_WARPS_STATS)
    sel = best >= 0
    area_max = torch.bincount(best[sel], minlength=C * N)
    return {"accum_weights": acc.to(means2d.dtype).reshape(C, N), "area_proj": cnt.to(torch.int64).reshape(C, N),
            "area_max": area_max.reshape(C, N)}


# ------------------------------------------------------------------------------------------------
# Spherical harmonics
# ------------------------------------------------------------------------------------------------


class _SHFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, means, campos, coeffs, degree):
        C, N, KS = campos.shape[0], means.shape[0], coeffs.shape[1]
        means, campos, coeffs = means.contiguous(), campos.to(means.dtype).contiguous(), coeffs.contiguous()
        out = torch.empty(C, N, 3, device=means.device, dtype=coeffs.dtype)
        if C * N:
            _k().sh_fwd[_grid(C * N, _BLOCK)](means, campos, coeffs, out, C, N, KS, DEG=int(degree), BLOCK=_BLOCK)
        ctx.save_for_backward(means, campos, coeffs)
        ctx.degree = int(degree)
        return out

    @staticmethod
    def backward(ctx, g_out):
        means, campos, coeffs = ctx.saved_tensors
        C, N, KS = campos.shape[0], means.shape[0], coeffs.shape[1]
        # the kernel writes every gradient of the active coefficients and every means row
        full = (ctx.degree + 1) ** 2 == KS
        gc = (torch.empty if full else torch.zeros)(C, N, KS, 3, device=means.device, dtype=coeffs.dtype)
        gm = torch.empty(C, N, 3, device=means.device, dtype=means.dtype)
        if C * N:
            _k().sh_bwd[_grid(C * N, _BLOCK)](means, campos, coeffs, g_out.contiguous(), gc, gm, C, N, KS,
                                               DEG=ctx.degree, BLOCK=_BLOCK)
        if C == 1:
            return gm[0], None, gc[0], None
        return gm.sum(0), None, gc.sum(0), None


def sh_colors(degree: int, means: torch.Tensor, camera_centres: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """Triton twin of the SH colour rule of :func:`meshlift.render.splat.rasterize_gaussians`:
    ``max(SH(normalize(means - centre)) + 0.5, 0)`` per camera, ``[C, N, 3]`` (gradients to ``means``
    through the view direction and to ``coeffs [N, K, 3]``)."""
    return _SHFn.apply(means, camera_centres, coeffs, int(degree))
