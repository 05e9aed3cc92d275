"""Shared checks of the Delaunay tests (test_delaunay_parallel.py, test_delaunay_demote.py)."""

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
