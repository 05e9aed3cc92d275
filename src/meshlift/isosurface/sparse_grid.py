"""Mesh from fused depth maps: a sparse coarse-to-fine grid of TSDF samples and marching tetrahedra.

Sources: Curless & Levoy 1996 (TSDF fusion, :mod:`meshlift.isosurface.tsdf`); Huang et al. 2024, "2D
Gaussian Splatting", Sec. 6, and Yu et al. 2024, "Gaussian Opacity Fields" (meshing the depth maps
rendered from Gaussians of a real, unmasked capture this way); Barron et al. 2022, "Mip-NeRF 360", Eq. 10
(contraction of unbounded scenes); Shen et al. 2021 (marching tetrahedra, :mod:`meshlift.isosurface.dmtet`).

**Algorithm** (:func:`extract_tsdf_mesh`). The grid has ``N`` cells per axis at the finest level
(``N = resolution`` over the box, or ``N = 2 resolution`` over the contracted cube ``[-2, 2]^3``, so the
box keeps ``resolution`` cells per axis). Every finest-lattice corner ``(i, j, k)`` has the global int64
key ``(i (N + 1) + j) (N + 1) + k``; coarser corners are finest corners with indices multiple of the
level's step, so keys are shared by all levels.

1. Level 0 is the dense grid of ``N / 2^(L-1)`` cells per axis (16..31 by default).
2. At each level, the corners of the level's cells are deduplicated by key (``torch.unique``) and the
   TSDF is evaluated once per corner with that level's truncation, ``trunc_voxels`` x the level's local
   voxel size (coarse levels need a wide band to see the surface at all; they use at least 3 voxels).
3. Below the finest level a cell is **kept** when at least one corner is observed (weight > 0) and
   among its observed corners the tsdf changes sign, or one of them is within about 1.5 cell diagonals
   of the surface (``|tsdf| trunc < 1.5 diag``, at most the whole band). A surface through the cell
   is within one diagonal of every corner, so the 1.5 margin absorbs the projective distance's
   overestimate at grazing views and thin surfaces are not lost. Kept cells are split in 8.
4. At the finest level the cells whose corners change sign are split into the 6 Kuhn tetrahedra
   (:mod:`meshlift.isosurface.tetgrid`, positively oriented, conforming across cells because every cell
   is split along the same diagonal of the global lattice). A tetrahedron is dropped when a corner is
   **unknown** (weight < ``min_weight``: unobserved space must not create surfaces), or when it has both
   a saturated positive (``>= 0.999``) and a saturated negative (``<= -0.999``) corner: a real surface
   cannot move the signed distance by two truncations across one tet edge (edges are at most
   ``sqrt(3)`` voxels, the band is ``2 trunc_voxels``), so that jump is the classic TSDF artefact
   behind occlusion edges. :func:`meshlift.isosurface.dmtet.marching_tets` then extracts the zero set on
   world-space corner positions with the world-unit signed distance ``tsdf x trunc``. Shared corners
   and shared edges make the mesh watertight wherever the surface is observed; faces are
   counter-clockwise seen from outside (``sdf >= 0``), i.e. outward normals.
5. **Unseen corners** (``unseen="inside"``; the default ``"unknown"`` is step 4's rule). A finest corner
   that no view saw (weight 0: hidden behind a surface in every view that looks its way, or outside every
   frustum) counts as solid, tsdf ``-1`` — Curless & Levoy 1996, Sec. 5 ("hole filling": unseen space is
   inside, so the surface is closed where free space meets it). It stays unknown when some view looked
   through it onto an **empty** pixel (no depth: sky, or nothing opaque;
   :func:`meshlift.isosurface.tsdf.empty_pixel_views`), and at infinity. The saturation test of step 4
   counts observed corners only, so an observed free corner (+1) next to a filled one (-1) makes a face
   half-way between them. Only the cells the coarse levels kept (near an observed surface) are meshed, so
   the boundary of the seen free space is closed next to surfaces — pinholes where one view's depth
   carved through, the rim of a surface at the edge of the views — and not across empty space. Measured
   on the CPU fox (docs/results.md, "Holes of the whole-scene mesh"): 68 % of its hole pixels were tets
   with such a corner; with this rule alone the holes fell from 1.6 % to 0.46 % of the test pixels (17.67
   -> 19.23 dB). The dense reference (``levels=1``) meshes every cell, so there the rule also closes free
   space far from any surface (on the carved sphere of the tests both give the same mesh).

**Memory** is proportional to the surface, not the volume: the cells evaluated at a level are the
children of the cells kept at the level above (a band a few voxels thick around the surface), about
``8 x 8`` bytes of keys per cell plus ``[corners]`` tsdf/weight/position arrays; the depth maps stream
through :func:`meshlift.isosurface.tsdf.tsdf_at_points` once per level with its ``chunk_elements`` bound.
Only level 0 is dense (at most ``MAX_LEVEL0_CELLS`` cells); ``levels=1`` evaluates every finest cell,
the dense reference twin the tests compare against.

**Unbounded scenes** (``contract=True``): the box is mapped to ``[-1, 1]^3`` (per axis), contracted with the
L-inf form of Eq. 10 (the box is the cube's inner region and keeps its shape and full resolution; all of
space maps into ``[-2, 2]^3``), the grid is uniform over ``[-2, 2]^3``, and each corner is uncontracted to
world space to read the depth maps. Its truncation is ``trunc_voxels`` x the local world voxel size, the
grid voxel times the largest stretch of the uncontraction there
(:func:`meshlift.isosurface.tsdf.uncontract_scale`). Corners on the outer boundary (at infinity) are unknown.
``contraction="log"`` uses :func:`meshlift.isosurface.tsdf.contract_log` instead: the grid is uniform over
``[-4, 4]^3`` (``N = 4 resolution``), out to ``e^3`` box half-sizes, and a voxel at ``r`` half-sizes spans ``r``
(not ``r^2``) box voxels, as a camera pixel's footprint grows.
Vertices are interpolated between world-space corners, so the output is in world units.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from meshlift.errors import MeshError
from meshlift.isosurface.dmtet import marching_tets
from meshlift.isosurface.tetgrid import _kuhn_offsets
from meshlift.isosurface.tsdf import (
    DEFAULT_CHUNK_ELEMENTS,
    LOG_CONTRACTION_SPAN,
    DepthSource,
    _check_carve,
    _check_chunk_elements,
    empty_pixel_views,
    reiterable_depth_source,
    tsdf_at_points,
    uncontract,
    uncontract_log,
    uncontract_log_scale,
    uncontract_scale,
)

#: Default truncation at every level, in voxels of that level.
DEFAULT_TRUNC_VOXELS = 3.0
#: Default minimum fused weight of a corner to be "known" at the finest level (observed at all).
DEFAULT_MIN_WEIGHT = 1e-6
MIN_RESOLUTION = 4
#: Largest finest-lattice size per axis (2 x resolution when contracting, 4 x with the log contraction); keeps the int64 keys exact.
MAX_CELLS_PER_AXIS = 1 << 16
#: Level 0 is dense: at most this many cells (raise ``levels`` for a larger ``resolution``).
MAX_LEVEL0_CELLS = 1 << 24
#: Automatic ``levels`` stop halving once the coarse grid would go below this many cells per axis.
_AUTO_MIN_COARSE = 16
#: Keep a coarse cell whose nearest observed corner is within this many cell diagonals of the surface.
_BAND_DIAGONALS = 1.5
#: Coarse levels (not the finest) use at least this truncation, in their voxels, so that the band
#: ``1.5 x sqrt(3)`` voxels of the keep test fits inside it whatever ``trunc_voxels`` the caller picks.
_COARSE_MIN_TRUNC_VOXELS = 3.0
#: |tsdf| at or above this is saturated (at the truncation).
_SATURATED = 0.999
#: What ``unseen`` may be: ``unknown`` (Curless & Levoy's plain rule) or ``inside`` (their hole filling, Sec. 5).
UNSEEN_RULES = ("unknown", "inside")

#: The 8 corners of a unit cell, slot ``4 ox + 2 oy + oz``.
_CORNERS = [(ox, oy, oz) for ox in (0, 1) for oy in (0, 1) for oz in (0, 1)]


def _kuhn_slots() -> torch.Tensor:
    """``[6, 4]`` corner slots (``4 ox + 2 oy + oz``) of the 6 positively oriented Kuhn tets of a cell."""
    off = _kuhn_offsets()
    return off[..., 0] * 4 + off[..., 1] * 2 + off[..., 2]


def _check_int(value: Any, name: str, lo: int, hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise MeshError(f"extract_tsdf_mesh: {name} must be an int >= {lo}, got {value!r}; {hint}")
    return value


def _check_positive(value: Any, name: str, hint: str, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise MeshError(f"extract_tsdf_mesh: {name} must be a finite number {bound}, got {value!r}; {hint}")
    return float(value)


def _check_bounds(bounds_min: Any, bounds_max: Any) -> tuple[torch.Tensor, torch.Tensor]:
    out = []
    for name, b in (("bounds_min", bounds_min), ("bounds_max", bounds_max)):
        try:
            t = torch.as_tensor(b, dtype=torch.float64).detach().cpu()
        except (TypeError, ValueError, RuntimeError):
            raise MeshError(
                f"extract_tsdf_mesh: {name} must be 3 numbers (x, y, z) in world units, got {b!r}"
            ) from None
        if tuple(t.shape) != (3,) or not bool(torch.isfinite(t).all()):
            raise MeshError(
                f"extract_tsdf_mesh: {name} must be 3 finite numbers (x, y, z) in world units, got "
                f"{t.tolist() if t.numel() < 10 else tuple(t.shape)}"
            )
        out.append(t)
    if not bool((out[1] > out[0]).all()):
        raise MeshError(
            f"extract_tsdf_mesh: bounds_max {out[1].tolist()} must exceed bounds_min {out[0].tolist()} on every "
            "axis; swap them or enlarge the box"
        )
    return out[0], out[1]


def _auto_levels(n: int) -> int:
    levels = 1
    while n % (1 << levels) == 0 and n >> levels >= _AUTO_MIN_COARSE:
        levels += 1
    return levels


class _Grid:
    """Lattice -> world mapping and per-corner truncation of one extraction (no state beyond the knobs)."""

    def __init__(self, lo: torch.Tensor, hi: torch.Tensor, n: int, contract: bool, dev: torch.device,
                 contraction: str = "inverse"):
        self.n, self.n1, self.contract, self.dev = n, n + 1, contract, dev
        self.centre = ((lo + hi) / 2).to(dev)
        self.half = ((hi - lo) / 2).to(dev)
        self.contraction = contraction
        self.extent = 2.0 * _contracted_half(contraction) if contract else 2.0  # normalised size of the grid cube

    def voxel_world(self, cells_per_axis: int) -> float:
        """World size of a voxel of a level inside the box (the largest axis)."""
        return self.extent / cells_per_axis * float(self.half.max())

    def corners(
        self, keys: torch.Tensor, cells_per_axis: int, trunc_voxels: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """World positions ``[C, 3]`` float64, truncation ``[C]`` and validity ``[C]`` of corner keys."""
        n1 = self.n1
        ijk = torch.stack([keys // (n1 * n1), (keys // n1) % n1, keys % n1], dim=1).to(torch.float64)
        y = self.extent * (ijk / self.n - 0.5)  # normalised (or contracted) coordinates
        vox = self.voxel_world(cells_per_axis)
        if not self.contract:
            valid = torch.ones(keys.shape[0], dtype=torch.bool, device=keys.device)
            trunc = torch.full((keys.shape[0],), trunc_voxels * vox, dtype=torch.float64, device=keys.device)
            return self.centre + self.half * y, trunc, valid
        valid = y.abs().amax(dim=1) < self.extent / 2 - 1e-9
        y = torch.where(valid[:, None], y, 0)
        if self.contraction == "log":
            return self.centre + self.half * uncontract_log(y), trunc_voxels * vox * uncontract_log_scale(y), valid
        trunc = trunc_voxels * vox * uncontract_scale(y)
        return self.centre + self.half * uncontract(y), trunc, valid


#: The contractions ``extract_tsdf_mesh`` offers (``contraction``).
CONTRACTIONS = ("inverse", "log")


def _contracted_half(contraction: str) -> float:
    """Half the side of the contracted cube: 2 (mip-NeRF 360) or ``1 + LOG_CONTRACTION_SPAN`` (log)."""
    return 1.0 + LOG_CONTRACTION_SPAN if contraction == "log" else 2.0


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _evaluate_level(cells, step, level_res, trunc_voxels, grid, source, chunk_elements, stats, carve):
    """Per-cell corner indices ``[C, 8]`` and the corners' tsdf, weight, world positions, trunc and validity
    (False at infinity) of a level."""
    off = torch.tensor(_CORNERS, dtype=torch.int64, device=cells.device)
    lat = (cells[:, None, :] + off) * step  # [C, 8, 3] finest-lattice indices
    n1 = grid.n1
    keys = (lat[..., 0] * n1 + lat[..., 1]) * n1 + lat[..., 2]
    ukeys, inv = torch.unique(keys.reshape(-1), return_inverse=True)
    pos, trunc, valid = grid.corners(ukeys, level_res, trunc_voxels)
    tsdf = torch.ones(ukeys.shape[0], dtype=torch.float32, device=cells.device)
    weight = torch.zeros_like(tsdf)
    if bool(valid.any()):
        pts = pos[valid].to(torch.float32)
        t_v, w_v = tsdf_at_points(
            pts, source(), trunc[valid].to(torch.float32), chunk_elements=chunk_elements, stats=stats, **carve
        )
        tsdf[valid], weight[valid] = t_v, w_v
    stats["peak_points"] = max(int(stats.get("peak_points", 0)), int(valid.sum()))
    return inv.reshape(-1, 8), tsdf, weight, torch.where(valid[:, None], pos, 0), trunc, valid


def _keep_cells(ct: torch.Tensor, cw: torch.Tensor, trunc_voxels: float) -> torch.Tensor:
    """Cells (``[C, 8]`` corner tsdf and weight) that may contain the surface (module docstring, step 3)."""
    ratio = min(_BAND_DIAGONALS * math.sqrt(3.0) / trunc_voxels, _SATURATED)
    obs = cw > 0
    pos = (obs & (ct >= 0)).any(1)
    neg = (obs & (ct < 0)).any(1)
    near = (obs & (ct.abs() < ratio)).any(1)
    return (pos & neg) | near


def _unseen_rule(unseen, tsdf, weight, observed, pos, valid, source, chunk_elements):
    """``(tsdf, known)`` of the finest level's corners under the ``unseen`` rule (module docstring, step 5)."""
    if unseen == "unknown":
        return tsdf, observed
    cand = (weight <= 0) & valid
    if bool(cand.any()):
        idx = torch.nonzero(cand).squeeze(1)
        looked_through = empty_pixel_views(pos[idx].to(torch.float32), source(), chunk_elements=chunk_elements) > 0
        cand[idx[looked_through]] = False
    return torch.where(cand, torch.full_like(tsdf, -1.0), tsdf), observed | cand


def extract_tsdf_mesh(
    depth_source: DepthSource,
    bounds_min: Any,
    bounds_max: Any,
    resolution: int,
    *,
    trunc_voxels: float = DEFAULT_TRUNC_VOXELS,
    levels: int | None = None,
    contract: bool = False,
    contraction: str = "inverse",
    min_weight: float = DEFAULT_MIN_WEIGHT,
    unseen: str = "unknown",
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
    device: torch.device | str | None = None,
    free_depth: float | None = None,
    carve_fraction: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Mesh the zero level set of the TSDF fused from depth maps, on a sparse coarse-to-fine grid.

    The robust Gaussian-to-mesh extraction of 2DGS (Huang et al. 2024, Sec. 6) and GOF (Yu et al. 2024)
    for real, unmasked captures: TSDF fusion (Curless & Levoy 1996) of the depth maps rendered at the
    training views, then marching tetrahedra. Algorithm, memory bound and the meaning of "unknown" are in
    the module docstring; the fusion itself is :func:`meshlift.isosurface.tsdf.tsdf_at_points`.

    Args:
        depth_source: the views, read once per level: a list of chunks ``(depth [B, H, W],
            world_to_camera [B, 4, 4], K [B, 3, 3][, weight [B, H, W]])`` or a zero-argument callable
            returning a fresh iterable of them (to stream images from disk or a renderer). Conventions as in
            ``tsdf_at_points`` (OpenCV cameras, pixel K, camera-z depth, 0 = none). A one-shot generator is
            refused.
        bounds_min, bounds_max: ``[3]`` world corners of the box to mesh (with ``contract``: the inner
            region, meshed at full resolution, with everything outside it at decreasing resolution).
        resolution: finest cells per axis across the box (>= 4; voxels are ``(max - min) / resolution``).
        trunc_voxels: truncation distance in finest-level voxels (> 0; 3-4 is usual: larger smooths and
            closes thin gaps, smaller keeps thin parts apart). Below about 2 the mesh gets holes: a corner of
            a crossing tetrahedron can lie ``sqrt(3)`` voxels inside, and one deeper than the truncation in
            every view is unknown. Coarse levels use ``max(trunc_voxels, 3)`` of their own voxels.
        levels: number of grid levels, coarse to fine; ``resolution`` (twice it with ``contract``) must be
            divisible by ``2^(levels - 1)``. None picks the most levels with a coarse grid of >= 16 cells per
            axis; 1 evaluates every finest cell (dense; the reference path).
        contract: mesh the unbounded scene with a contraction (L-inf form) around the box.
        contraction: with ``contract``: ``"inverse"`` (mip-NeRF 360, the grid over ``[-2, 2]^3``, ``2 x resolution``
            cells per axis; a voxel at ``r`` box half-sizes spans ``r^2`` box voxels) or ``"log"``
            (:func:`meshlift.isosurface.tsdf.contract_log`, the grid over ``[-4, 4]^3``, ``4 x resolution``
            cells per axis, out to ``e^3`` half-sizes; a voxel at ``r`` spans ``r`` box voxels, as a pixel's
            footprint grows: finer walls and more faces in the shell).
        min_weight: corners with a fused weight below this are unknown and create no faces (> 0; the weight
            counts views, times the confidence maps when given; the default keeps every observed corner).
        unseen: what a finest-level corner **no view saw** (weight 0) is: ``"unknown"`` (creates no faces) or
            ``"inside"`` (solid, tsdf -1: Curless & Levoy 1996, Sec. 5 "hole filling"), unless some view looked
            through it onto an empty pixel (:func:`meshlift.isosurface.tsdf.empty_pixel_views`; it stays
            unknown) or it lies at infinity (``contract``). Module docstring, step 5.
        chunk_elements: memory budget of the fusion, points x views evaluated at once (~100 bytes each).
        device: where to compute (each chunk is moved there); None: the device of ``bounds_min`` if it is a
            tensor, else CPU.
        free_depth, carve_fraction: carving with a mask (:func:`meshlift.isosurface.tsdf.tsdf_at_points`,
            its module docstring step 6): pixels at least ``free_depth`` deep are free space; with
            ``carve_fraction > 0`` a corner is free when that share of its voting views see it on one, else
            its depth votes decide.

    Returns:
        v_pos: ``[V, 3]`` float32 vertices, world units.
        faces: ``[F, 3]`` int64 triangles, counter-clockwise seen from outside (outward normals).
        report: dict with ``levels`` (per level: ``cells_per_axis``, ``evaluated_cells``, ``active_cells``,
            ``corners``, ``trunc`` in world units inside the box, ``seconds``), ``corners_evaluated``,
            ``views``, ``vertices``, ``faces``, ``seconds`` (``levels``, ``mesh``, ``total``),
            ``peak_points_in_flight`` (most corners passed to one fusion call), ``peak_elements_in_flight``
            (largest points x views block), ``empty`` and ``empty_reason`` (why no surface came out).
            Views that see nothing in the box give an empty mesh and say so here; that is not an error.

    Raises:
        MeshError: a bad argument (the message names it and the fix): resolution below 4 or too large,
            ``levels`` not dividing the resolution, bad bounds, non-positive ``trunc_voxels``, a one-shot
            iterator, malformed chunks, or no views at all.
    """
    t_start = time.perf_counter()
    fn_hint = "e.g. 128 (voxel = box size / resolution)"
    resolution = _check_int(resolution, "resolution", MIN_RESOLUTION, fn_hint)
    trunc_voxels = _check_positive(trunc_voxels, "trunc_voxels", "3-4 voxels is usual")
    min_weight = _check_positive(min_weight, "min_weight", "the weight counts views; 1e-6 = seen at all")
    if unseen not in UNSEEN_RULES:
        raise MeshError(f"extract_tsdf_mesh: unseen must be one of {UNSEEN_RULES}, got {unseen!r}; 'inside' closes "
                        "the holes that unseen corners leave (module docstring, step 5)")
    _check_chunk_elements(chunk_elements, "extract_tsdf_mesh")
    _check_carve(free_depth, carve_fraction, "extract_tsdf_mesh")
    carve = {"free_depth": free_depth, "carve_fraction": carve_fraction}
    if not isinstance(contract, bool):
        raise MeshError(f"extract_tsdf_mesh: contract must be True or False, got {contract!r}")
    if contraction not in CONTRACTIONS:
        raise MeshError(f"extract_tsdf_mesh: contraction must be one of {CONTRACTIONS}, got {contraction!r} "
                        "(log: shell voxels that grow like a pixel's footprint)")
    lo, hi = _check_bounds(bounds_min, bounds_max)
    n = int(resolution * _contracted_half(contraction)) if contract else resolution
    if n > MAX_CELLS_PER_AXIS:
        raise MeshError(
            f"extract_tsdf_mesh: resolution {resolution} gives {n} cells per axis, above {MAX_CELLS_PER_AXIS}; "
            "lower resolution"
        )
    if levels is None:
        levels = _auto_levels(n)
    levels = _check_int(levels, "levels", 1, "None picks it from the resolution")
    if n % (1 << (levels - 1)):
        raise MeshError(
            f"extract_tsdf_mesh: levels={levels} needs the finest grid ({n} cells per axis) to be divisible by "
            f"2^{levels - 1} = {1 << (levels - 1)}; use levels=None or a resolution that is a multiple of it"
        )
    res0 = n >> (levels - 1)
    if res0**3 > MAX_LEVEL0_CELLS:
        raise MeshError(
            f"extract_tsdf_mesh: the coarsest level would be dense with {res0}^3 cells (levels={levels}); "
            "raise levels (or use levels=None) so the coarse grid has at most "
            f"{round(MAX_LEVEL0_CELLS ** (1 / 3))} cells per axis"
        )
    source = reiterable_depth_source(depth_source, "extract_tsdf_mesh")
    if device is None:
        device = bounds_min.device if isinstance(bounds_min, torch.Tensor) else "cpu"
    dev = torch.device(device)
    grid = _Grid(lo, hi, n, contract, dev, contraction)
    stats: dict = {}
    report: dict = {
        "resolution": resolution,
        "cells_per_axis": n,
        "contract": contract,
        "contraction": contraction if contract else None,
        "trunc_voxels": trunc_voxels,
        "unseen": unseen,
        "unseen_inside_corners": 0,
        "carve_fraction": carve_fraction,
        "levels": [],
        "corners_evaluated": 0,
        "empty": True,
        "empty_reason": None,
    }

    ar = torch.arange(res0, device=dev)
    cells = torch.stack(torch.meshgrid(ar, ar, ar, indexing="ij"), dim=-1).reshape(-1, 3)
    off = torch.tensor(_CORNERS, dtype=torch.int64, device=dev)
    v_pos = torch.zeros((0, 3), dtype=torch.float32, device=dev)
    faces = torch.zeros((0, 3), dtype=torch.int64, device=dev)
    t_levels = 0.0
    for level in range(levels):
        t0 = time.perf_counter()
        step = 1 << (levels - 1 - level)
        level_res = n // step
        last = level == levels - 1
        tv = trunc_voxels if last else max(trunc_voxels, _COARSE_MIN_TRUNC_VOXELS)
        inv, tsdf, weight, pos, trunc, valid = _evaluate_level(cells, step, level_res, tv, grid, source,
                                                               chunk_elements, stats, carve)
        if last:
            observed = weight >= min_weight
            tsdf, known = _unseen_rule(unseen, tsdf, weight, observed, pos, valid, source, chunk_elements)
            report["unseen_inside_corners"] = int((known & ~observed).sum())
        ct, cw = tsdf[inv], weight[inv]
        if last:
            active = known[inv].any(1) & (ct.amin(1) < 0) & (ct.amax(1) >= 0)
        else:
            active = _keep_cells(ct, cw, tv)
        _sync(dev)
        dt = time.perf_counter() - t0
        t_levels += dt
        report["levels"].append({
            "cells_per_axis": level_res,
            "evaluated_cells": int(cells.shape[0]),
            "active_cells": int(active.sum()),
            "corners": int(tsdf.shape[0]),
            "observed_corners": int((weight > 0).sum()),
            "trunc": tv * grid.voxel_world(level_res),
            "seconds": dt,
        })
        report["corners_evaluated"] += int(tsdf.shape[0])
        if not bool((weight > 0).any()):
            report["empty_reason"] = (
                f"no grid corner at level {level} is observed by any view: the depth maps are empty where they "
                "see the box, or the box is outside every frustum; check bounds_min/bounds_max against the "
                "cameras (or use contract=True for surfaces outside the box)"
            )
            break
        if not bool(active.any()):
            report["empty_reason"] = (
                f"no cell at level {level} contains the fused surface (observed corners all far in front of "
                "or behind it); check bounds_min/bounds_max, or raise trunc_voxels"
            )
            break
        if not last:
            cells = (cells[active][:, None, :] * 2 + off).reshape(-1, 3)
            continue
        t1 = time.perf_counter()
        tets = inv[active][:, _kuhn_slots().to(dev)].reshape(-1, 4)  # [6 C, 4]
        tt, obs = tsdf[tets], observed[tets]
        ok = known[tets].all(1)
        jump = ((tt >= _SATURATED) & obs).any(1) & ((tt <= -_SATURATED) & obs).any(1)
        crossing = (tt.amin(1) < 0) & (tt.amax(1) >= 0)  # tets that would make faces
        report["crossing_tets"] = int(crossing.sum())
        report["dropped_unknown_tets"] = int((crossing & ~ok).sum())  # a corner unknown (holes: step 4)
        report["dropped_jump_tets"] = int((crossing & ok & jump).sum())  # the truncation-artefact rule
        ok &= ~jump
        sdf = tsdf.to(torch.float64) * trunc  # world-unit signed distance
        v64, faces = marching_tets(pos, sdf, tets[ok])
        v_pos = v64.to(torch.float32)
        _sync(dev)
        t_levels_mesh = time.perf_counter() - t1
        report["seconds_mesh"] = t_levels_mesh
        if faces.shape[0] == 0:
            report["empty_reason"] = (
                "the cells around the surface touch unknown corners only (weight < min_weight) or hold "
                "truncation artefacts; lower min_weight or add views"
            )
    report["views"] = int(stats.get("views", 0))
    report["vertices"] = int(v_pos.shape[0])
    report["faces"] = int(faces.shape[0])
    report["empty"] = faces.shape[0] == 0
    report["peak_points_in_flight"] = int(stats.get("peak_points", 0))
    report["peak_elements_in_flight"] = int(stats.get("peak_elements", 0))
    mesh_s = report.pop("seconds_mesh", 0.0)
    report["seconds"] = {"levels": t_levels, "mesh": mesh_s, "total": time.perf_counter() - t_start}
    return v_pos, faces, report
