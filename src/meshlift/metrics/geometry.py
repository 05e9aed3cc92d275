"""Geometry metrics from uniform surface samples: Chamfer (L1 / L2), precision, recall, F-score,
normal consistency.

Definitions (what ``meshlift eval mesh`` reports; distances in ground-truth units, conventions §1):

* Points come from uniform area-weighted sampling of each surface (:func:`sample_surface`), never from
  vertices (vertex-based Chamfer changes with tessellation). A ground truth without faces is a point
  cloud and is used as is (randomly subsampled to ``n_samples`` when larger).
* ``d(P→G)``: for each PRED sample, the Euclidean distance to the nearest GT sample (scipy cKDTree);
  ``d(G→P)`` the reverse.
* ``chamfer_l1 = ½ (mean d(P→G) + mean d(G→P))``; ``chamfer_l2`` the same with squared distances
  (the "L1"/"L2" name says whether distances are squared, as in Occupancy Networks / nvdiffrec).
* ``precision = mean[d(P→G) < τ]``, ``recall = mean[d(G→P) < τ]``, ``fscore = 2PR / (P + R)`` (0 when
  both are 0) — Tanks and Temples (Knapitsch et al. 2017, §4). τ is ``threshold`` (absolute) or
  ``threshold_frac`` × GT bounding-box diagonal.
* ``normal_consistency = ½ (mean |n_p · n_G(nn)| + mean |n_g · n_P(nn)|)`` with face normals of the
  sampled triangles (absolute value: orientation-free, Occupancy Networks, Mescheder et al. 2019 §4);
  ``None`` when either side has no normals.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np
import torch

from meshlift.errors import MeshError
from meshlift.structures.mesh import Mesh

MeshLike = Union[Mesh, tuple]


def _vf(mesh: MeshLike, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(vertices [V, 3] float64, faces [T, 3] int64) from a Mesh or a (vertices, faces) pair."""
    if isinstance(mesh, Mesh):
        v, f = mesh.v_pos, mesh.t_pos_idx
    elif isinstance(mesh, (tuple, list)) and len(mesh) == 2:
        v, f = mesh
    else:
        raise MeshError(f"{name}: expected a Mesh or a (vertices [V, 3], faces [T, 3]) pair, got {type(mesh).__name__}")
    v = (v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)).astype(np.float64)
    f = (f.detach().cpu().numpy() if isinstance(f, torch.Tensor) else np.asarray(f)).astype(np.int64)
    v, f = v.reshape(-1, 3), f.reshape(-1, 3)
    if f.size and (f.min() < 0 or f.max() >= len(v)):
        raise MeshError(f"{name}: faces index vertex {int(f.max())} but there are {len(v)} vertices")
    return v, f


def _sample(v: np.ndarray, f: np.ndarray, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    cross = np.cross(b - a, c - a)
    dbl_area = np.linalg.norm(cross, axis=1)
    valid = np.isfinite(dbl_area)
    dbl_area = np.where(valid, dbl_area, 0.0)
    total = dbl_area.sum()
    if n <= 0 or total <= 0.0:
        return np.zeros((0, 3)), np.zeros((0, 3))
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(dbl_area)
    fi = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right").clip(0, len(f) - 1)
    r1 = np.sqrt(rng.random(n))[:, None]
    r2 = rng.random(n)[:, None]
    pts = (1.0 - r1) * a[fi] + r1 * (1.0 - r2) * b[fi] + r1 * r2 * c[fi]
    nrm = cross[fi] / np.maximum(dbl_area[fi], 1e-300)[:, None]
    return pts, nrm


def sample_surface(mesh: MeshLike, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Uniform area-weighted samples on a triangle surface.

    A face is drawn with probability proportional to its area, then a point uniformly inside it with
    ``p = (1 − √r₁) a + √r₁ (1 − r₂) b + √r₁ r₂ c`` (Osada et al. 2002, "Shape distributions", eq. 1).
    Degenerate and non-finite faces get zero weight.

    Args:
        mesh: a :class:`Mesh` or ``(vertices [V, 3], faces [T, 3])`` (tensors or arrays).
        n: number of samples.
        seed: seed of the numpy ``default_rng`` stream (same seed → same samples).

    Returns:
        ``points [n, 3]`` and unit face ``normals [n, 3]``, float64 tensors; both ``[0, 3]`` when the
        surface has zero area or no faces.

    Raises:
        MeshError: bad input type or faces past the vertex list.
    """
    v, f = _vf(mesh, "sample_surface")
    p, nrm = _sample(v, f, int(n), seed)
    return torch.from_numpy(p), torch.from_numpy(nrm)


def _points_and_normals(mesh: MeshLike, n: int, seed: int, name: str,
                        transform: Optional[np.ndarray]) -> tuple[np.ndarray, Optional[np.ndarray], np.ndarray]:
    """Samples (or the point cloud), normals or None, and the (transformed) vertices."""
    v, f = _vf(mesh, name)
    if transform is not None and len(v):
        v = v @ transform[:3, :3].T + transform[:3, 3]
    if len(f):
        p, nrm = _sample(v, f, n, seed)
        return p, nrm, v
    # point cloud: all points (subsampled to n), normals when the mesh carries per-point normals
    nrm = None
    if isinstance(mesh, Mesh) and mesh.v_nrm is not None and mesh.v_nrm.shape[0] == len(v):
        nrm = mesh.v_nrm.detach().cpu().numpy().astype(np.float64)
        if transform is not None:
            nrm = nrm @ np.linalg.inv(transform[:3, :3])
        nrm /= np.maximum(np.linalg.norm(nrm, axis=1, keepdims=True), 1e-300)
    keep = np.isfinite(v).all(axis=1)
    if len(v) > n:
        keep_idx = np.random.default_rng(seed).choice(np.flatnonzero(keep), size=min(n, int(keep.sum())), replace=False)
    else:
        keep_idx = np.flatnonzero(keep)
    return v[keep_idx], (None if nrm is None else nrm[keep_idx]), v


def mesh_metrics(
    pred: MeshLike,
    gt: MeshLike,
    *,
    threshold: Optional[float] = None,
    threshold_frac: float = 0.01,
    n_samples: int = 200_000,
    seed: int = 0,
    alignment: Optional[Union[np.ndarray, torch.Tensor, Sequence]] = None,
    crop_box: Optional[tuple[Sequence[float], Sequence[float]]] = None,
) -> dict:
    """Chamfer, precision/recall/F-score and normal consistency of ``pred`` against ``gt``.

    Definitions in the module docstring. PRED is sampled with ``seed``, GT with ``seed + 1``.

    Args:
        pred: predicted surface (Mesh or ``(vertices, faces)``).
        gt: ground truth surface, or a point cloud (a Mesh / pair with zero faces).
        threshold: absolute F-score distance τ in GT units; overrides ``threshold_frac``.
        threshold_frac: τ as a fraction of GT's bounding-box diagonal (default 0.01).
        n_samples: samples per surface (default 200,000).
        seed: sampling seed.
        alignment: optional ``[4, 4]`` matrix applied to PRED (maps PRED into GT's frame).
        crop_box: optional ``(min [3], max [3])`` in GT's frame; samples of both sides outside it
            are discarded before the distances (DTU-style evaluation region).

    Returns:
        dict with ``chamfer_l1``, ``chamfer_l2``, ``precision``, ``recall``, ``fscore``,
        ``normal_consistency`` (float or None), ``threshold`` (τ used), ``threshold_frac`` (None when
        absolute), ``gt_bbox_diagonal``, ``n_samples`` (requested), ``n_pred_points``,
        ``n_gt_points``, ``seed``, and ``message`` (None, or why values are degenerate). An empty
        (or zero-area, or fully cropped) PRED gives ``chamfer_* = None``, ``precision = recall =
        fscore = 0`` and a message, never an exception.

    Raises:
        MeshError: GT is empty, bad alignment/crop/threshold arguments, faces past the vertex list.
    """
    if threshold is not None and not (threshold > 0 and np.isfinite(threshold)):
        raise MeshError(f"mesh_metrics: threshold must be a positive number, got {threshold}")
    if threshold is None and not (threshold_frac > 0 and np.isfinite(threshold_frac)):
        raise MeshError(f"mesh_metrics: threshold_frac must be a positive number, got {threshold_frac}")
    if n_samples <= 0:
        raise MeshError(f"mesh_metrics: n_samples must be positive, got {n_samples}")
    T = None
    if alignment is not None:
        T = np.asarray(alignment.detach().cpu() if isinstance(alignment, torch.Tensor) else alignment, dtype=np.float64)
        if T.shape != (4, 4) or not np.isfinite(T).all():
            raise MeshError(f"mesh_metrics: alignment must be a finite 4x4 matrix, got shape {T.shape}")
    gt_pts, gt_nrm, gt_v = _points_and_normals(gt, n_samples, seed + 1, "gt", None)
    if len(gt_pts) == 0:
        raise MeshError("mesh_metrics: the ground truth is empty (no faces with area and no points); nothing to compare with")
    finite_gt = gt_v[np.isfinite(gt_v).all(axis=1)]
    diag = float(np.linalg.norm(finite_gt.max(0) - finite_gt.min(0)))
    tau = float(threshold) if threshold is not None else threshold_frac * diag
    pred_pts, pred_nrm, _ = _points_and_normals(pred, n_samples, seed, "pred", T)

    if crop_box is not None:
        lo, hi = (np.asarray(b, dtype=np.float64).reshape(3) for b in crop_box)
        if np.any(hi < lo):
            raise MeshError(f"mesh_metrics: crop_box max {hi} is below min {lo}")
        def inside(p):
            return np.all((p >= lo) & (p <= hi), axis=1)
        kp, kg = inside(pred_pts), inside(gt_pts)
        pred_pts, gt_pts = pred_pts[kp], gt_pts[kg]
        pred_nrm = None if pred_nrm is None else pred_nrm[kp]
        gt_nrm = None if gt_nrm is None else gt_nrm[kg]
        if len(gt_pts) == 0:
            raise MeshError("mesh_metrics: no ground-truth sample lies inside crop_box; check the box")

    out = {
        "chamfer_l1": None, "chamfer_l2": None, "precision": 0.0, "recall": 0.0, "fscore": 0.0,
        "normal_consistency": None, "threshold": tau,
        "threshold_frac": None if threshold is not None else float(threshold_frac),
        "gt_bbox_diagonal": diag, "n_samples": int(n_samples),
        "n_pred_points": int(len(pred_pts)), "n_gt_points": int(len(gt_pts)), "seed": int(seed), "message": None,
    }
    if len(pred_pts) == 0:
        out["message"] = "prediction is empty (no faces with area" + (" inside crop_box)" if crop_box is not None else ")")
        return out
    from scipy.spatial import cKDTree

    d_pg, i_pg = cKDTree(gt_pts).query(pred_pts, k=1, workers=-1)
    d_gp, i_gp = cKDTree(pred_pts).query(gt_pts, k=1, workers=-1)
    out["chamfer_l1"] = float(0.5 * (d_pg.mean() + d_gp.mean()))
    out["chamfer_l2"] = float(0.5 * ((d_pg**2).mean() + (d_gp**2).mean()))
    prec, rec = float((d_pg < tau).mean()), float((d_gp < tau).mean())
    out["precision"], out["recall"] = prec, rec
    out["fscore"] = 0.0 if prec + rec == 0 else 2.0 * prec * rec / (prec + rec)
    if pred_nrm is not None and gt_nrm is not None:
        nc_p = np.abs(np.sum(pred_nrm * gt_nrm[i_pg], axis=1)).mean()
        nc_g = np.abs(np.sum(gt_nrm * pred_nrm[i_gp], axis=1)).mean()
        out["normal_consistency"] = float(0.5 * (nc_p + nc_g))
    return out
