"""Remove the plane an object stands on (the table of a capture) from a mesh, closing the cut.

RANSAC (Fischler & Bolles 1981) finds the lowest near-horizontal plane, a least-squares refit places it, and
the mesh is cut just above it with :func:`meshlift.mesh.crop.clip_mesh` (caps as there), small leftover
pieces of the table dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from meshlift.errors import MeshError
from meshlift.mesh.clean import compact, drop_small_components, face_areas
from meshlift.mesh.crop import clip_mesh
from meshlift.structures.mesh import Mesh

__all__ = ["remove_support_plane", "SupportPlaneReport"]


# -- support plane ----------------------------------------------------------------------------------------------
@dataclass
class SupportPlaneReport:
    """What :func:`remove_support_plane` found and removed."""

    found: bool = False
    normal: list = field(default_factory=list)
    """Unit plane normal (world, oriented along ``up``)."""
    offset: float = 0.0
    """Plane offset along ``normal`` (world units): the plane is ``normal · p = offset``."""
    tilt_deg: float = 0.0
    """Angle between the plane normal and ``up``."""
    inlier_area_frac: float = 0.0
    """Fraction of the mesh area within ``distance`` of the plane."""
    cut_offset: float = 0.0
    """The mesh was cut at ``normal · p = offset + cut_offset``."""
    faces_removed: int = 0
    """Input faces dropped (below the cut, or in small pieces left of the plane)."""
    crop: dict = field(default_factory=dict)
    """The cut's :class:`CropReport` as a dict."""
    notes: list = field(default_factory=list)


def remove_support_plane(mesh: Mesh, up, *, distance: Optional[float] = None, cut_offset: Optional[float] = None,
                         max_tilt_deg: float = 15.0, bottom_fraction: float = 0.35, min_area_frac: float = 0.05,
                         iterations: int = 256, seed: int = 0, cap: bool = True,
                         keep_components: float = 0.01, plane=None) -> tuple[Mesh, SupportPlaneReport]:
    """Find the table the object stands on and cut it away (RANSAC plane fit, Fischler & Bolles 1981).

    Candidates are the faces whose normal is within ``max_tilt_deg`` of ``±up`` and whose centroid is in
    the lowest ``bottom_fraction`` of the mesh's extent along ``up``. RANSAC draws three candidate
    centroids (area-weighted), keeps planes tilted at most ``max_tilt_deg`` from ``up``, and scores a
    plane by the area of the faces whose centroids lie within ``distance``; the best plane is refitted by
    least squares on its inliers. If its inlier area is at least ``min_area_frac`` of the mesh's, the
    mesh is cut at ``normal · p = offset + cut_offset`` keeping the side along ``up`` (capped with
    ``cap``), and components smaller than ``keep_components`` × the largest (bits of table left above
    the cut) are dropped. Otherwise the mesh is returned unchanged with ``found=False``.

    A known ``plane = (normal [3], offset)`` (e.g. the floor the depth maps were flattened onto,
    :mod:`meshlift.methods.milo.floor_depth`) replaces the search: the mesh is cut at
    ``normal · p = offset + cut_offset`` whatever its inlier area (which is still reported).

    Args:
        mesh: triangle mesh (ideally already cropped to the ROI); not modified.
        up: ``[3]`` world up direction (e.g. ``RegionOfInterest.up``); normalised here.
        distance: inlier distance (world units); default 0.5 % of the bbox diagonal.
        cut_offset: height of the cut above the plane; default 2 × ``distance``.
        max_tilt_deg, bottom_fraction, min_area_frac, iterations, seed, cap, keep_components: see above.
        plane: optional known plane ``(normal, offset)`` (world; the normal is normalised and turned along ``up``).

    Returns:
        ``(mesh, SupportPlaneReport)``.

    Raises:
        MeshError: ``up`` not 3 finite numbers of non-zero length.
    """
    up = torch.as_tensor(up, dtype=torch.float64).cpu().reshape(-1).numpy()
    if up.shape != (3,) or not np.isfinite(up).all() or np.linalg.norm(up) < 1e-12:
        raise MeshError(f"remove_support_plane: up must be 3 finite numbers, not all zero; got {up}")
    up = up / np.linalg.norm(up)
    rep = SupportPlaneReport()
    if mesh.num_faces == 0:
        rep.notes.append("empty mesh")
        return mesh, rep
    P = mesh.v_pos.detach().cpu().double().numpy()
    F = mesh.t_pos_idx.detach().cpu().numpy()
    diag = float(np.linalg.norm(P.max(0) - P.min(0)))
    dist = 0.005 * diag if distance is None else float(distance)
    cut = 2.0 * dist if cut_offset is None else float(cut_offset)
    cen = P[F].mean(1)
    area = face_areas(P, F)
    if plane is not None:
        raw = torch.as_tensor(plane[0], dtype=torch.float64).detach().cpu().reshape(-1).numpy()
        if raw.shape != (3,) or not np.isfinite(raw).all() or np.linalg.norm(raw) < 1e-12:
            raise MeshError(f"remove_support_plane(plane): the normal must be 3 finite numbers, not all zero; got {raw}")
        scale = (1.0 if raw @ up >= 0 else -1.0) / float(np.linalg.norm(raw))
        nn, off = raw * scale, float(plane[1]) * scale
        rep.notes.append("known plane (not searched)")
        _describe(rep, nn, off, up, _inlier_area_frac(cen, area, nn, off, dist))
        return _cut_at(mesh, rep, nn, off, cut, cap, keep_components)
    fn = np.cross(P[F[:, 1]] - P[F[:, 0]], P[F[:, 2]] - P[F[:, 0]])
    fnu = fn / np.maximum(np.linalg.norm(fn, axis=1, keepdims=True), 1e-30)
    h = cen @ up
    cos_t = math.cos(math.radians(max_tilt_deg))
    cand = np.flatnonzero((np.abs(fnu @ up) >= cos_t) & (h <= h.min() + bottom_fraction * (h.max() - h.min()))
                          & (area > 0))
    if len(cand) < 3:
        rep.notes.append("no horizontal faces at the bottom: no support plane")
        return mesh, rep
    rng = np.random.default_rng(seed)
    prob = area[cand] / area[cand].sum()
    best = (-1.0, None, None)
    for _ in range(iterations):
        tri = cen[rng.choice(cand, 3, replace=False, p=prob)]
        nn = np.cross(tri[1] - tri[0], tri[2] - tri[0])
        if np.linalg.norm(nn) < 1e-20:
            continue
        nn /= np.linalg.norm(nn)
        nn *= np.sign(nn @ up) or 1.0
        if nn @ up < cos_t:
            continue
        off = float(nn @ tri[0])
        inl = np.abs(cen @ nn - off) <= dist
        score = float(area[inl].sum())
        if score > best[0]:
            best = (score, nn, off)
    if best[1] is None:
        rep.notes.append("RANSAC found no plane within the tilt limit")
        return mesh, rep
    nn, off = best[1], best[2]
    inl = np.abs(cen @ nn - off) <= dist
    q = cen[inl]
    w = area[inl] / area[inl].sum()
    mu = (w[:, None] * q).sum(0)
    _, _, vt = np.linalg.svd((q - mu) * np.sqrt(w)[:, None], full_matrices=False)
    n2 = vt[2] * (np.sign(vt[2] @ up) or 1.0)
    if n2 @ up >= cos_t:
        nn, off = n2, float(n2 @ mu)
    _describe(rep, nn, off, up, _inlier_area_frac(cen, area, nn, off, dist))
    if rep.inlier_area_frac < min_area_frac:
        rep.notes.append(f"the best plane holds {rep.inlier_area_frac:.1%} of the area (< {min_area_frac:.0%}): "
                         "no support plane removed")
        return mesh, rep
    return _cut_at(mesh, rep, nn, off, cut, cap, keep_components)


def _inlier_area_frac(cen, area, nn, off: float, dist: float) -> float:
    """Share of the area in faces whose centroid lies within ``dist`` of the plane ``nn · p = off``."""
    return float(area[np.abs(cen @ nn - off) <= dist].sum() / max(area.sum(), 1e-30))


def _describe(rep: SupportPlaneReport, nn, off: float, up, frac: float) -> None:
    rep.normal = [float(x) for x in nn]
    rep.offset = float(off)
    rep.tilt_deg = float(np.degrees(np.arccos(np.clip(nn @ up, -1, 1))))
    rep.inlier_area_frac = frac


def _cut_at(mesh: Mesh, rep: SupportPlaneReport, nn, off: float, cut: float, cap: bool,
            keep_components: float) -> tuple[Mesh, SupportPlaneReport]:
    """Cut ``mesh`` at ``nn · p = off + cut`` keeping the side along ``nn`` (the plane found or given,
    already described in ``rep``)."""
    rep.found = True
    rep.cut_offset = cut
    out, crep = clip_mesh(mesh, -nn[None], np.array([-(off + cut)]), cap=cap)
    rep.crop = crep.to_dict()
    dropped = 0
    if keep_components > 0 and out.num_faces:
        out, dropped = drop_small_components(out, keep_components)
        out = compact(out)
    rep.faces_removed = crep.faces_out + dropped
    if dropped:
        rep.notes.append(f"dropped {dropped} faces in small pieces left above the cut (< {keep_components:.0%} "
                         "of the largest component)")
    return out, rep
