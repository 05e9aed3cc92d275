"""Empty-circumsphere certification of candidate Delaunay tets against all points, by a k-d tree.

Used by :mod:`meshlift.isosurface.delaunay_parallel`: a block triangulates its cell plus a thin halo, so a
tet whose circumsphere pokes out of the halo box may have a point of another block inside its ball. Rather
than sending all such tets to the fix-up (which forced a wide halo), the block asks a k-d tree over *all*
points (``scipy.spatial.cKDTree``, BSD) whether any point other than the tet's own 4 vertices lies in the
ball grown by a tie tolerance; if none does, the tet is a Delaunay tet of the whole set (its ball is
empty) and robustly so (no 5th point on or near its sphere), so it belongs to every Delaunay
tetrahedralisation of the points.

**The query.** For a ball of centre ``c`` and squared radius ``r2`` the 5 nearest points of ``c`` within
``sqrt(r2 + tol)`` are asked for (``cKDTree.query(k=5, distance_upper_bound=...)``): the 4 vertices lie
on the sphere, so a non-vertex point in the grown ball, if any, is among the 5 nearest. The search is
bounded by the ball, so it visits only tree nodes that meet it; huge balls (tets across an empty
region) are not sent (``max_radius``): they are almost never empty of other points, and a search in a
huge ball visits many nodes.

:func:`empty_ball_reference` is the brute-force twin (every point against every ball) the tests compare
with. numpy/scipy only.
"""

from __future__ import annotations

import numpy as np

from meshlift.errors import MeshError

#: Query balls in chunks of this many (bounds the ``[B, 5]`` result arrays: ~1 MB per chunk).
QUERY_CHUNK = 1 << 14


def build_tree(pts: np.ndarray):
    """A ``scipy.spatial.cKDTree`` over ``pts`` ``[N, 3]`` float64 (built without copying the data;
    unbalanced sliding-midpoint splits: faster to build, as fast to query for these point sets).

    Raises:
        MeshError: ``pts`` is not ``[N, 3]``.
    """
    from scipy.spatial import cKDTree

    if pts.ndim != 2 or pts.shape[1] != 3:
        raise MeshError(f"build_tree: pts must have shape [N, 3], got {list(pts.shape)}")
    return cKDTree(pts, leafsize=16, balanced_tree=False, compact_nodes=False, copy_data=False)


def empty_ball(tree, centre: np.ndarray, r2: np.ndarray, tets: np.ndarray, tol) -> np.ndarray:
    """Which balls hold no point but their tet's vertices, with a tie margin.

    Args:
        tree: :func:`build_tree` over all points (ids = rows of the tree's data).
        centre: ``[B, 3]`` float64 circumcentres.
        r2: ``[B]`` float64 squared circumradii.
        tets: ``[B, 4]`` integer vertex ids (into the tree's points).
        tol: scalar or ``[B]`` float64 margin in squared length units: a point ``q`` other than the
            vertices with ``|q - c|^2 <= r2 + tol`` makes the ball not empty.

    Returns:
        ``[B]`` bool, True where the grown ball is empty of other points (False for NaN / inf balls).
    """
    b = centre.shape[0]
    out = np.zeros(b, dtype=bool)
    if b == 0:
        return out
    tol = np.broadcast_to(np.asarray(tol, dtype=np.float64), (b,))
    for s in range(0, b, QUERY_CHUNK):
        c = centre[s : s + QUERY_CHUNK]
        bound = np.sqrt(r2[s : s + QUERY_CHUNK] + tol[s : s + QUERY_CHUNK])
        fin = np.isfinite(bound) & np.isfinite(c).all(axis=1)
        if not fin.any():
            continue
        idx = np.flatnonzero(fin)
        # cKDTree takes one upper bound per call: query the chunk at its largest bound, then compare
        # each ball's distances with its own bound
        dist, nb = tree.query(c[idx], k=5, distance_upper_bound=float(bound[idx].max()) * (1 + 1e-12))
        t = tets[s : s + QUERY_CHUNK][idx]
        inside = dist * dist <= r2[s : s + QUERY_CHUNK][idx, None] + tol[s : s + QUERY_CHUNK][idx, None]
        is_vertex = (nb[:, :, None] == t[:, None, :]).any(axis=2)
        out[s + idx] = ~(inside & ~is_vertex).any(axis=1)
    return out


def empty_ball_reference(pts: np.ndarray, centre: np.ndarray, r2: np.ndarray, tets: np.ndarray, tol) -> np.ndarray:
    """Brute-force twin of :func:`empty_ball` (every point against every ball; for tests, small inputs)."""
    b = centre.shape[0]
    tol = np.broadcast_to(np.asarray(tol, dtype=np.float64), (b,))
    out = np.zeros(b, dtype=bool)
    for i in range(b):
        if not (np.isfinite(r2[i]) and np.isfinite(centre[i]).all()):
            continue
        d2 = ((pts - centre[i]) ** 2).sum(axis=1)
        d2[tets[i]] = np.inf
        out[i] = not (d2 <= r2[i] + tol[i]).any()
    return out
