"""Shared inputs and checks of the Delaunay tests (test_delaunay_parallel.py, _demote.py, _groups.py)."""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from meshlift.isosurface import delaunay_parallel as dp


def ties(pts, tets, tol=1e-9):
    """Tets that are flat or have a 5th point on their circumsphere (within ``tol``)."""
    centre, r2, rel = dp._circumspheres(pts, tets)
    dist, idx = cKDTree(pts).query(np.nan_to_num(centre, nan=1e30, posinf=1e30, neginf=-1e30), k=5)
    is_vertex = (idx[:, :, None] == tets[:, None, :]).any(axis=2)
    d2 = np.where(is_vertex, np.inf, dist**2).min(axis=1)
    return (np.abs(rel) <= 1e-8) | (d2 <= r2 * (1 + tol))


def pivots(n, seed=0):
    """MILo-like pivots (centre + 8 corners of a rotated anisotropic 3-sigma box) on a noisy unit-sphere shell,
    ``float64`` ``[9 (n // 9), 3]`` rounded through float32 like the Gaussians' pivots."""
    g = n // 9
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(g, 3))
    mu = d / np.linalg.norm(d, axis=1, keepdims=True) * (1 + 0.02 * rng.normal(size=(g, 1)))
    half = 3 * 0.02 * np.exp(0.5 * rng.normal(size=(g, 3)))
    q, _ = np.linalg.qr(rng.normal(size=(g, 3, 3)))
    s = np.array([[(c >> i & 1) * 2 - 1 for i in range(3)] for c in range(8)], dtype=float)
    corners = mu[:, None] + np.einsum("gij,gcj->gci", q, s[None] * half[:, None])
    return np.concatenate([mu[:, None], corners], axis=1).reshape(-1, 3).astype(np.float32).astype(np.float64)
