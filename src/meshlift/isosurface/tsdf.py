"""Truncated signed distance (TSDF) fusion of depth maps, evaluated at arbitrary 3D points, and the
mip-NeRF 360 scene contraction.

Sources: Curless & Levoy 1996, "A Volumetric Method for Building Complex Models from Range Images"
(weighted running average of truncated signed distances); Huang et al. 2024, "2D Gaussian Splatting for
Geometrically Accurate Radiance Fields", Sec. 6, and Yu et al. 2024, "Gaussian Opacity Fields" (fusing the
depth maps rendered from Gaussians into a TSDF to get a mesh of a real, unmasked capture); Barron et al.
2022, "Mip-NeRF 360", Eq. 10 (the contraction of unbounded scenes).

**Design.** The fusion is a pure function of a point set: :func:`tsdf_at_points` takes ``[P, 3]`` world
points and a stream of depth-map chunks and returns the fused TSDF and weight at each point. It is the
only place depth maps are read; :func:`meshlift.isosurface.sparse_grid.extract_tsdf_mesh` calls it on the
corners of a sparse coarse-to-fine grid, so no dense volume is ever stored.

Per view ``v`` and point ``p`` (OpenCV camera, docs/conventions.md Sec. 2 and 4):

1. ``p_c = R_v p + t_v``; the point is seen when ``z = p_c.z > 0`` and its projection
   ``(u, w) = (K p_c)_{xy} / z`` falls inside the image. The depth is read at the **nearest pixel**:
   pixel (row i, col j) covers ``[j, j + 1) x [i, i + 1)`` (its centre is ``j + 0.5``), so
   ``j = floor(u)``, ``i = floor(w)``. Nearest, not bilinear: interpolating depth across an occlusion
   edge invents surfaces between foreground and background (the standard choice, as in Open3D's
   ``ScalableTSDFVolume`` used by 2DGS and GOF).
2. A pixel with depth ``<= 0`` or non-finite has no depth; the view says nothing about the point.
3. The projective signed distance is ``d = D(i, j) - z`` (camera z, not ray distance): positive in
   front of the observed surface (outside), negative behind it (inside).
4. ``d < -trunc``: the point is far behind the surface this view saw, which hides it; the view says
   nothing ("unknown", **not** inside). Otherwise ``tsdf_v = min(d, trunc) / trunc`` in ``[-1, 1]``.
5. Fusion: ``tsdf = sum_v w_v tsdf_v / sum_v w_v``, ``weight = sum_v w_v``, with ``w_v = 1`` or the
   caller's per-pixel confidence (e.g. the rendered alpha) at the pixel read.

6. **Carving with a mask** (``free_depth``, ``carve_fraction``). A pixel whose depth is at least ``free_depth``
   is *free all along its ray* (outside the object's mask: the caller writes a huge depth there). With
   ``carve_fraction = 0`` it votes like any pixel (``+1`` for every point in front of it, averaged with the
   rest). With ``carve_fraction = f > 0`` such votes are counted apart (``n_free``, against ``n_depth`` views
   voting with a depth): a point is free (``+1``) when ``n_free >= f (n_free + n_depth)`` and ``n_free > 0``
   — with ``f = 0.5``, when at least half of the views that say anything about it see it outside their
   mask —, else it takes the average of its depth votes alone. Why: a saturated ``+1`` from a view whose
   mask or pose is a few pixels off outweighs the small negative votes of all the views that see the point
   just inside the surface, so plain averaging shrinks every silhouette and removes thin parts. Measured on
   a CPU statue checkpoint (internet photos sharing one set of intrinsics: the masks disagree by pixels), a
   test view's mesh lacked 2,634 of its 24,649 mask pixels (the Gaussians' alpha > 0.5 lacked 1,685) and
   showed 186 outside it; a hard carve by one view lacked 4,836, by three 3,446; ``f = 0.3 / 0.5 / 0.7``
   lacked 2,514 / 1,908 / 1,505 and added 186 / 399 / 937 (no carving: 916 and 2,214).

A point with ``weight == 0`` is **unknown**: no view saw it in front of, or just behind, a surface (outside
every frustum, seen only through empty pixels, or hidden behind a surface in every view). Its returned tsdf
is ``+1`` (a neutral filler); callers must test the weight, never the tsdf, to tell unknown apart.

**Memory.** Depth maps arrive as a stream of chunks (``depth [B, H, W]``, ``world_to_camera [B, 4, 4]``,
``K [B, 3, 3]``, optional confidence ``[B, H, W]``); one chunk is held at a time. Inside a chunk the
views are taken ``vb`` at a time and the points ``pc`` at a time with ``vb * pc <= chunk_elements``, so
the transient memory is about 100 bytes x ``chunk_elements`` whatever P and the number of views; what
is kept is two ``[P]`` accumulators. The per-view terms are added view by view in stream order, so each
point's result depends only on the order of the views, never on how points or views are chunked: results
are bitwise identical for every ``chunk_elements`` and every split of the views into chunks.

**Contraction** (:func:`contract`, :func:`uncontract`): ``contract(x) = x`` for ``|x| <= 1``, else
``(2 - 1 / |x|) x / |x|`` (Barron et al. 2022, Eq. 10), on coordinates normalised so that the region of
interest is ``[-1, 1]^3``. We use the **L-inf norm** by default (the Eq. 10 form with ``|x|_inf``, as
Zip-NeRF and nerfstudio's ``SceneContraction(order=inf)`` offer): its inner region is the whole cube
``[-1, 1]^3``, i.e. the caller's box keeps its shape and full resolution, and everything out to infinity
maps into the cube ``[-2, 2]^3``. The L2 form (``norm="l2"``, the paper's) keeps only the inscribed ball.

**Logarithmic contraction** (:func:`contract_log`, :func:`uncontract_log`): ``y = x`` for ``|x| <= 1``, else
``(1 + ln |x|) x / |x|`` (L-inf), out to ``|x| = exp(LOG_CONTRACTION_SPAN)`` (``|y| = 1 +`` the span); beyond
is at infinity. Its stretch is ``|x|``: a voxel of the uniform grid over the contracted cube spans a world
length proportional to the distance from the box, as a training pixel's footprint does for a camera near the
box, so the shell keeps about the same voxels per pixel as the box — where mip-NeRF 360's stretch
``|x|^2`` gives a wall at 3 box half-sizes 9x the box's voxel (measured on the fox: meshlift.methods.milo.tsdf_mesh).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from meshlift.errors import MeshError

#: Default memory budget of :func:`tsdf_at_points`: points x views evaluated at once (~100 B each).
DEFAULT_CHUNK_ELEMENTS = 1 << 22

#: Camera-space depth below which a point counts as behind the camera (world units).
_MIN_Z = 1e-8

#: One chunk of views: ``(depth [B, H, W], world_to_camera [B, 4, 4], K [B, 3, 3], weight [B, H, W] | None)``.
DepthChunk = tuple
#: What :func:`tsdf_at_points` accepts: an iterable of chunks, a zero-argument callable returning one,
#: or a single chunk tuple.
DepthSource = Any


# --------------------------------------------------------------------------------------------------
# Depth-chunk stream
# --------------------------------------------------------------------------------------------------


def _is_single_chunk(source: Any) -> bool:
    return isinstance(source, tuple) and len(source) in (3, 4) and isinstance(source[0], torch.Tensor)


def _check_chunk(item: Any, index: int, fn: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
    """Validate one chunk; returns ``(depth, world_to_camera, K, weight_or_None)``."""
    if not isinstance(item, (tuple, list)) or len(item) not in (3, 4):
        raise MeshError(
            f"{fn}: depth_chunks item {index} must be a tuple (depth [B,H,W], world_to_camera [B,4,4], "
            f"K [B,3,3][, weight [B,H,W]]), got {type(item).__name__}"
            + (f" of length {len(item)}" if isinstance(item, (tuple, list)) else "")
        )
    depth, w2c, k = item[0], item[1], item[2]
    weight = item[3] if len(item) == 4 else None
    for name, t in (("depth", depth), ("world_to_camera", w2c), ("K", k)):
        if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point:
            got = f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise MeshError(f"{fn}: {name} of depth_chunks item {index} must be a float tensor, got {got}")
    if depth.ndim != 3:
        raise MeshError(
            f"{fn}: depth of depth_chunks item {index} must be [B, H, W] (camera z, 0 = no depth), got "
            f"{tuple(depth.shape)}; add a batch axis with depth[None] for a single view"
        )
    b = depth.shape[0]
    if tuple(w2c.shape) != (b, 4, 4):
        raise MeshError(
            f"{fn}: world_to_camera of depth_chunks item {index} must be [{b}, 4, 4] (one OpenCV "
            f"world-to-camera matrix per depth map), got {tuple(w2c.shape)}"
        )
    if tuple(k.shape) != (b, 3, 3):
        raise MeshError(
            f"{fn}: K of depth_chunks item {index} must be [{b}, 3, 3] (pixel intrinsics per depth map), "
            f"got {tuple(k.shape)}"
        )
    if weight is not None:
        if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != tuple(depth.shape):
            got = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
            raise MeshError(
                f"{fn}: weight of depth_chunks item {index} must be None or a float tensor shaped like "
                f"depth {tuple(depth.shape)}, got {got}"
            )
    return depth, w2c, k, weight


def iter_depth_chunks(source: DepthSource, fn: str = "tsdf_at_points") -> Iterator[tuple]:
    """Validated chunks of ``source`` (an iterable, a callable returning one, or a single chunk tuple)."""
    if _is_single_chunk(source):
        it: Iterable = (source,)
    elif callable(source):
        it = source()
    else:
        it = source
    try:
        iterator = iter(it)
    except TypeError:
        raise MeshError(
            f"{fn}: depth_chunks must be an iterable of (depth, world_to_camera, K[, weight]) tuples or a "
            f"zero-argument callable returning one, got {type(it).__name__}"
        ) from None
    for index, item in enumerate(iterator):
        yield _check_chunk(item, index, fn)


def reiterable_depth_source(source: DepthSource, fn: str) -> Callable[[], Iterator[tuple]]:
    """A callable giving a fresh validated chunk iterator per call (for algorithms that read views several
    times). Raises MeshError for a one-shot iterator (a generator object), which the second pass would find
    empty."""
    if _is_single_chunk(source) or callable(source):
        return lambda: iter_depth_chunks(source, fn)
    try:
        one_shot = iter(source) is source
    except TypeError:
        one_shot = False  # iter_depth_chunks raises the clear error
    if one_shot:
        raise MeshError(
            f"{fn}: depth_source is a one-shot iterator ({type(source).__name__}) but the views are read once "
            "per grid level; pass a list of chunks or a zero-argument callable returning a fresh iterator "
            "(e.g. lambda: render_depth_chunks(views, batch=8))"
        )
    return lambda: iter_depth_chunks(source, fn)


# --------------------------------------------------------------------------------------------------
# Fusion
# --------------------------------------------------------------------------------------------------


def _check_chunk_elements(chunk_elements: Any, fn: str) -> int:
    if isinstance(chunk_elements, bool) or not isinstance(chunk_elements, int) or chunk_elements < 1:
        raise MeshError(
            f"{fn}: chunk_elements must be an int >= 1 (points x views evaluated at once, ~100 bytes each), "
            f"got {chunk_elements!r}; the default is {DEFAULT_CHUNK_ELEMENTS}"
        )
    return chunk_elements


def _check_points_trunc(points: Any, trunc: Any, fn: str) -> torch.Tensor:
    """Validate ``points`` and ``trunc``; returns ``trunc`` as a ``[P]`` tensor on the points' device."""
    if not isinstance(points, torch.Tensor) or points.ndim != 2 or points.shape[1] != 3:
        got = tuple(points.shape) if isinstance(points, torch.Tensor) else type(points).__name__
        raise MeshError(f"{fn}: points must be a [P, 3] tensor of world positions, got {got}")
    if not points.dtype.is_floating_point:
        raise MeshError(f"{fn}: points must be float (float32 or float64), got {points.dtype}")
    if not bool(torch.isfinite(points).all()):
        raise MeshError(f"{fn}: points contains non-finite values; drop them (their tsdf is unknown) first")
    p = points.shape[0]
    if isinstance(trunc, torch.Tensor):
        if trunc.ndim == 0:
            tr = trunc.to(points.device, points.dtype).expand(p)
        elif tuple(trunc.shape) == (p,):
            tr = trunc.to(points.device, points.dtype)
        else:
            raise MeshError(
                f"{fn}: trunc must be a float or a [P] = [{p}] tensor (one truncation per point, world units), "
                f"got shape {tuple(trunc.shape)}"
            )
    elif isinstance(trunc, (int, float)) and not isinstance(trunc, bool):
        tr = torch.full((p,), float(trunc), dtype=points.dtype, device=points.device)
    else:
        raise MeshError(f"{fn}: trunc must be a positive float or a [P] tensor, got {type(trunc).__name__}")
    if p and not bool(((tr > 0) & torch.isfinite(tr)).all()):
        raise MeshError(
            f"{fn}: trunc must be positive and finite (world units; typically 3-4 voxel sizes), "
            f"got min {float(tr.min()):.4g}"
        )
    return tr


def _project_to_pixels(pts: torch.Tensor, rot: torch.Tensor, tra: torch.Tensor, kk: torch.Tensor,
                       base: torch.Tensor, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step 1 of the module docstring for ``pts [n, 3]`` and ``nv`` views (``rot [nv, 3, 3]``, ``tra [nv, 3]``,
    ``kk [nv, 3, 3]``): ``(camera z [nv, n], seen [nv, n] bool, flat pixel index [nv, n])`` where ``seen`` =
    in front of the camera and inside the image, and the index is ``base [nv, 1]`` + row * w + column of the
    nearest pixel (clamped into the image where not seen). Element-wise (no matmul): the same rounding for
    every chunking."""
    px, py, pz = pts[:, 0], pts[:, 1], pts[:, 2]
    x, y, z = (rot[:, r, 0, None] * px + rot[:, r, 1, None] * py + rot[:, r, 2, None] * pz + tra[:, r, None]
               for r in range(3))
    fx, sk, cx = kk[:, 0, 0, None], kk[:, 0, 1, None], kk[:, 0, 2, None]  # [nv, 1]
    fy, cy = kk[:, 1, 1, None], kk[:, 1, 2, None]
    front = z > _MIN_Z
    zs = torch.where(front, z, 1)
    u = torch.floor((fx * x + sk * y) / zs + cx)  # pixel column j
    v = torch.floor(fy * y / zs + cy)  # pixel row i
    ok = front & (u >= 0) & (u < w) & (v >= 0) & (v < h)
    return z, ok, base + v.clamp(0, h - 1).long() * w + u.clamp(0, w - 1).long()


def tsdf_at_points(
    points: torch.Tensor,
    depth_chunks: DepthSource,
    trunc: float | torch.Tensor,
    *,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
    stats: dict | None = None,
    free_depth: float | None = None,
    carve_fraction: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fuse a stream of depth maps into a truncated signed distance at arbitrary points (Curless & Levoy 1996).

    The algorithm (projective distance, nearest pixel, truncation, weighted average) and the meaning of
    weight 0 ("unknown") are in the module docstring. Runs on the device of ``points``; each chunk is moved
    there as it arrives. Views are read once, in order, so a one-shot generator is fine.

    Args:
        points: ``[P, 3]`` float world positions (finite). The computation uses their dtype and device.
        depth_chunks: the views, as an iterable of chunks ``(depth [B, H, W], world_to_camera [B, 4, 4],
            K [B, 3, 3])`` or ``(..., weight [B, H, W])``, a zero-argument callable returning such an
            iterable, or one chunk tuple. ``depth`` is camera z in world units (docs/conventions.md Sec. 4),
            ``0`` or non-finite where there is none; ``world_to_camera`` is OpenCV (x right, y down,
            z forward); ``K`` in pixels, pixel centres at ``j + 0.5``; ``weight`` is an optional per-pixel
            confidence ``>= 0`` (e.g. rendered alpha), 1 when absent. Chunk sizes may differ.
        trunc: truncation distance in world units, a float or a ``[P]`` tensor (one per point; > 0).
        chunk_elements: memory budget, points x views evaluated at once (about 100 bytes each).
        stats: optional dict; receives ``views`` (total views read) and ``peak_elements`` (largest
            points x views block evaluated).
        free_depth: depth (world units) from which a pixel is free all along its ray (a mask's background;
            module docstring, step 6); None: no such pixels.
        carve_fraction: with ``free_depth``: the fraction of a point's voting views that must see it on a
            free pixel to make it free (step 6); 0 = free pixels vote ``+1`` in the average like any other.

    Returns:
        tsdf: ``[P]`` normalised truncated signed distance in ``[-1, 1]`` (dtype of ``points``): positive in
            front of the observed surface (outside), negative behind it (inside), ``+1`` where unknown.
        weight: ``[P]`` summed view weights (the number of views for unit weights); 0 = unknown.

    Raises:
        MeshError: ``points`` not a finite float ``[P, 3]`` tensor, bad ``trunc`` or ``chunk_elements``, a
            malformed chunk (message names the item and tensor), or no views at all.
    """
    fn = "tsdf_at_points"
    tr_all = _check_points_trunc(points, trunc, fn)
    budget = _check_chunk_elements(chunk_elements, fn)
    carve = _check_carve(free_depth, carve_fraction, fn)
    dev, dt = points.device, points.dtype
    n_pts = points.shape[0]
    sum_wd = torch.zeros(n_pts, dtype=dt, device=dev)
    sum_w = torch.zeros(n_pts, dtype=dt, device=dev)
    n_free = torch.zeros(n_pts, dtype=torch.int32, device=dev) if carve else None
    n_depth = torch.zeros(n_pts, dtype=dt, device=dev) if carve else None
    n_views, peak = 0, 0
    for depth, w2c, k, wmap in iter_depth_chunks(depth_chunks, fn):
        b, h, w = depth.shape
        if b == 0:
            continue
        n_views += b
        if n_pts == 0:
            continue
        depth = depth.to(dev, dt)
        has = torch.isfinite(depth) & (depth > 0)
        pix_w = has.to(dt) if wmap is None else torch.where(has, wmap.to(dev, dt).nan_to_num(0.0).clamp_min(0), 0)
        d_flat = torch.where(has, depth, 0).reshape(-1)
        w_flat = pix_w.reshape(-1)
        free_flat = (has & (depth >= free_depth)).reshape(-1) if carve else None
        w2c = w2c.to(dev, dt)
        k = k.to(dev, dt)
        vb = min(b, budget)
        pc = max(1, budget // vb)
        for v0 in range(0, b, vb):
            v1 = min(b, v0 + vb)
            rot, tra = w2c[v0:v1, :3, :3], w2c[v0:v1, :3, 3]
            kk = k[v0:v1]
            base = (torch.arange(v0, v1, device=dev) * (h * w))[:, None]  # [nv, 1]
            for s in range(0, n_pts, pc):
                e = min(n_pts, s + pc)
                z, ok, idx = _project_to_pixels(points[s:e], rot, tra, kk, base, h, w)
                d = d_flat[idx] - z
                tr = tr_all[s:e][None, :]
                if carve:  # step 6: free pixels are counted apart
                    on_free = ok & free_flat[idx]
                    n_free[s:e] += on_free.sum(0, dtype=torch.int32)
                    ok = ok & ~on_free
                ok = ok & (w_flat[idx] > 0) & (d >= -tr)
                wv = torch.where(ok, w_flat[idx], 0)
                val = torch.where(ok, torch.minimum(d, tr) / tr, 0)
                wd = wv * val
                for i in range(v1 - v0):  # view by view: the same summation order for every chunking
                    sum_wd[s:e] += wd[i]
                    sum_w[s:e] += wv[i]
                if carve:
                    n_depth[s:e] += ok.sum(0).to(dt)
                peak = max(peak, (v1 - v0) * (e - s))
    if n_views == 0:
        raise MeshError(
            f"{fn}: depth_chunks yielded no views (empty iterable or only [0, H, W] chunks); pass at least one "
            "depth map (a used-up generator yields nothing: pass a list or a callable instead)"
        )
    if stats is not None:
        stats["views"] = n_views
        stats["peak_elements"] = max(int(stats.get("peak_elements", 0)), peak)
    seen = sum_w > 0
    tsdf = torch.where(seen, sum_wd / torch.where(seen, sum_w, 1), 1)
    if carve:  # step 6: a large enough share of free views makes a point free
        nf = n_free.to(dt)
        free = (n_free > 0) & (nf >= carve_fraction * (nf + n_depth))
        tsdf = torch.where(free, torch.ones_like(tsdf), tsdf)
        sum_w = torch.where(free, sum_w + n_free.to(dt), sum_w)
        if stats is not None:
            stats["carved_points"] = int(stats.get("carved_points", 0)) + int(free.sum())
    return tsdf.clamp(-1, 1), sum_w


def _check_carve(free_depth: Any, carve_fraction: Any, fn: str) -> bool:
    """Validate step 6's options; True when free pixels are counted apart (``carve_fraction > 0``)."""
    ok = isinstance(carve_fraction, (int, float)) and not isinstance(carve_fraction, bool)
    if not ok or not 0 <= carve_fraction <= 1:
        raise MeshError(f"{fn}: carve_fraction must be a number in [0, 1] (the share of a point's views that must "
                        f"see it outside their mask; 0 = those views vote like any other), got {carve_fraction!r}")
    if free_depth is not None and not (isinstance(free_depth, (int, float)) and not isinstance(free_depth, bool)
                                       and free_depth > 0):
        raise MeshError(f"{fn}: free_depth must be None or a depth > 0 (world units) from which a pixel is free "
                        f"space, got {free_depth!r}")
    if carve_fraction > 0 and free_depth is None:
        raise MeshError(f"{fn}: carve_fraction={carve_fraction} needs free_depth (which pixels are free space)")
    return carve_fraction > 0


def empty_pixel_views(
    points: torch.Tensor, depth_chunks: DepthSource, *, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS
) -> torch.Tensor:
    """``[P]`` int64: in how many views each point is in front of the camera and projects (nearest pixel, as
    :func:`tsdf_at_points`) onto a pixel **without depth** (``<= 0``, non-finite, or a confidence ``<= 0``).

    Such a view looked through the point and saw no surface at all (an empty pixel of a render: sky, or
    nothing opaque), which is different from not seeing the point:
    :func:`meshlift.isosurface.sparse_grid.extract_tsdf_mesh` with ``unseen="inside"`` counts an unseen
    point as inside only where this is 0.

    Args:
        points: ``[P, 3]`` float world positions (finite).
        depth_chunks: the views, as for :func:`tsdf_at_points`.
        chunk_elements: memory budget, points x views evaluated at once.

    Raises:
        MeshError: bad ``points``, ``chunk_elements`` or chunks (as :func:`tsdf_at_points`), or no views at all.
    """
    fn = "empty_pixel_views"
    _check_points_trunc(points, 1.0, fn)
    budget = _check_chunk_elements(chunk_elements, fn)
    dev, dt = points.device, points.dtype
    n_pts = points.shape[0]
    count = torch.zeros(n_pts, dtype=torch.int64, device=dev)
    n_views = 0
    for depth, w2c, k, wmap in iter_depth_chunks(depth_chunks, fn):
        b, h, w = depth.shape
        n_views += b
        if b == 0 or n_pts == 0:
            continue
        depth = depth.to(dev, dt)
        has = torch.isfinite(depth) & (depth > 0)
        if wmap is not None:
            has &= wmap.to(dev, dt).nan_to_num(0.0) > 0
        empty = (~has).reshape(-1)
        w2c, k = w2c.to(dev, dt), k.to(dev, dt)
        vb = min(b, budget)
        pc = max(1, budget // vb)
        for v0 in range(0, b, vb):
            v1 = min(b, v0 + vb)
            base = (torch.arange(v0, v1, device=dev) * (h * w))[:, None]
            for s in range(0, n_pts, pc):
                e = min(n_pts, s + pc)
                _, ok, idx = _project_to_pixels(points[s:e], w2c[v0:v1, :3, :3], w2c[v0:v1, :3, 3], k[v0:v1],
                                                base, h, w)
                count[s:e] += (ok & empty[idx]).sum(0)
    if n_views == 0:
        raise MeshError(f"{fn}: depth_chunks yielded no views; pass at least one depth map")
    return count


# --------------------------------------------------------------------------------------------------
# Contraction (mip-NeRF 360, Eq. 10)
# --------------------------------------------------------------------------------------------------


#: The logarithmic contraction reaches ``|x| = exp(LOG_CONTRACTION_SPAN)`` box half-sizes (e^3 ~ 20): its grid
#: spans ``[-(1 + span), 1 + span]^3`` = ``[-4, 4]^3``, twice the mip-NeRF 360 cube per axis.
LOG_CONTRACTION_SPAN = 3.0


def _norm(x: torch.Tensor, norm: str, fn: str) -> torch.Tensor:
    if norm == "inf":
        return x.abs().amax(dim=-1, keepdim=True)
    if norm == "l2":
        return x.norm(dim=-1, keepdim=True)
    raise MeshError(f"{fn}: norm must be 'inf' (keeps the box shape) or 'l2' (the paper's ball), got {norm!r}")


def _check_xyz(x: Any, fn: str) -> None:
    if not isinstance(x, torch.Tensor) or x.ndim < 1 or x.shape[-1] != 3 or not x.dtype.is_floating_point:
        got = f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise MeshError(f"{fn}: x must be a float [..., 3] tensor, got {got}")


def contract(x: torch.Tensor, *, norm: str = "inf") -> torch.Tensor:
    """Mip-NeRF 360 contraction (Barron et al. 2022, Eq. 10) of normalised coordinates.

    ``contract(x) = x`` where ``|x| <= 1``, else ``(2 - 1 / |x|) x / |x|``; continuous, monotone along
    rays from the origin, maps all of R^3 into the open ``|y| < 2`` (``+-inf`` maps onto the boundary).

    Args:
        x: ``[..., 3]`` float points, normalised so the region of interest is ``|x| <= 1``.
        norm: ``"inf"`` (default: the region of interest and its image are cubes, so a box keeps its
            shape) or ``"l2"`` (the paper's ball).

    Returns:
        ``[..., 3]`` contracted points, ``|y| < 2`` (dtype of ``x``).

    Raises:
        MeshError: ``x`` not a float ``[..., 3]`` tensor, or an unknown ``norm``.
    """
    _check_xyz(x, "contract")
    n = _norm(x, norm, "contract")
    big = n > 1
    ns = torch.where(big, n, 1)
    return torch.where(big, (2 - 1 / ns) * x / ns, x)


def uncontract(y: torch.Tensor, *, norm: str = "inf") -> torch.Tensor:
    """Inverse of :func:`contract`: ``x = y`` where ``|y| <= 1``, else ``y / (|y| (2 - |y|))``.

    Args:
        y: ``[..., 3]`` float contracted points, ``|y| <= 2``; points with ``|y| >= 2`` map to infinity
            (``inf`` components; callers treat them as unknown).
        norm: the norm used by :func:`contract` (``"inf"`` or ``"l2"``).

    Returns:
        ``[..., 3]`` normalised points (dtype of ``y``).

    Raises:
        MeshError: ``y`` not a float ``[..., 3]`` tensor, or an unknown ``norm``.
    """
    _check_xyz(y, "uncontract")
    m = _norm(y, norm, "uncontract")
    big = m > 1
    ms = torch.where(big, m, 1)
    return y * torch.where(big, 1 / (ms * (2 - ms)), 1)


def uncontract_scale(y: torch.Tensor, *, norm: str = "inf") -> torch.Tensor:
    """Largest local stretch of :func:`uncontract` at ``y``: how many normalised units one contracted unit
    spans there (1 inside ``|y| <= 1``, else the radial derivative ``1 / (2 - |y|)^2``, which exceeds the
    tangential one ``1 / (|y| (2 - |y|))`` for ``|y| >= 1``).

    Args:
        y: ``[..., 3]`` float contracted points.
        norm: ``"inf"`` or ``"l2"``.

    Returns:
        ``[...]`` stretch factors ``>= 1`` (``inf`` at ``|y| >= 2``).

    Raises:
        MeshError: ``y`` not a float ``[..., 3]`` tensor, or an unknown ``norm``.
    """
    _check_xyz(y, "uncontract_scale")
    m = _norm(y, norm, "uncontract_scale").squeeze(-1)
    return torch.where(m > 1, 1 / (2 - m.clamp(max=2)) ** 2, torch.ones_like(m))


def contract_log(x: torch.Tensor) -> torch.Tensor:
    """Logarithmic contraction (module docstring) of normalised coordinates, L-inf norm.

    ``y = x`` where ``|x| <= 1``, else ``(1 + ln |x|) x / |x|``; continuous with a continuous radial slope at
    ``|x| = 1``, monotone along rays from the origin. Points beyond ``exp(LOG_CONTRACTION_SPAN)`` map beyond
    ``|y| = 1 + LOG_CONTRACTION_SPAN`` (outside the grid that uses it).

    Args:
        x: ``[..., 3]`` float points, normalised so the region of interest is ``|x|_inf <= 1``.

    Returns:
        ``[..., 3]`` contracted points (dtype of ``x``).

    Raises:
        MeshError: ``x`` not a float ``[..., 3]`` tensor.
    """
    _check_xyz(x, "contract_log")
    n = _norm(x, "inf", "contract_log")
    big = n > 1
    ns = torch.where(big, n, 1)
    return torch.where(big, (1 + torch.log(ns)) * x / ns, x)


def uncontract_log(y: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`contract_log`: ``x = y`` where ``|y| <= 1``, else ``exp(|y| - 1) y / |y|`` (L-inf).

    Args:
        y: ``[..., 3]`` float contracted points.

    Returns:
        ``[..., 3]`` normalised points (dtype of ``y``).

    Raises:
        MeshError: ``y`` not a float ``[..., 3]`` tensor.
    """
    _check_xyz(y, "uncontract_log")
    m = _norm(y, "inf", "uncontract_log")
    big = m > 1
    ms = torch.where(big, m, 1)
    return y * torch.where(big, torch.exp(ms - 1) / ms, 1)


def uncontract_log_scale(y: torch.Tensor) -> torch.Tensor:
    """Largest local stretch of :func:`uncontract_log` at ``y``: 1 inside ``|y| <= 1``, else the radial
    derivative ``exp(|y| - 1) = |x|`` (the tangential one, ``exp(|y| - 1) / |y|``, is smaller).

    Args:
        y: ``[..., 3]`` float contracted points.

    Returns:
        ``[...]`` stretch factors ``>= 1``.

    Raises:
        MeshError: ``y`` not a float ``[..., 3]`` tensor.
    """
    _check_xyz(y, "uncontract_log_scale")
    m = _norm(y, "inf", "uncontract_log_scale").squeeze(-1)
    return torch.where(m > 1, torch.exp(m - 1), torch.ones_like(m))
