"""The exact fix-up of :mod:`meshlift.isosurface.delaunay_parallel` (step 3 of its docstring): the open
faces of the certified tets, Qhull on the fix-up set (in parallel groups, or one call), the side of each
open face, the components of the missing region and the acceptance checks of the grouped result.

numpy/scipy only. Raises :class:`_Inconsistent` (internal) where the blocks and a fix-up disagree; the
engine then falls back (one call with the far vertices, then one global Qhull) and says so.
"""

from __future__ import annotations

import concurrent.futures as cf
import time

import numpy as np

from meshlift.isosurface.delaunay_groups import (  # noqa: F401 (re-exported)
    MIN_GROUP_POINTS, UNUSED_LINKS, GroupCache, _GroupKeys, _split_by_group, group_key, groups)
from meshlift.isosurface.delaunay_rows import _face_keys, _sort_faces, concat_rows, unique_ids, unmatched_keys

#: A fix-up tet decides which side of an open face it is on when ``|det| / L^3`` of the face and its far
#: vertex exceeds this (Qhull's flat ``Qt`` tets in ties do not; their neighbour across the face then decides).
SIDE_MIN_REL = 1e-10
#: The grouped fix-up's first try keeps the tiny groups as groups of their own (False), so that the many
#: small holes along the seams run in ``2 * workers`` calls side by side instead of joining the one or two big
#: groups (a hollow shell's skins: 2 calls of ~320k points at 5.4M pivots, 2 of 16 cores busy). If that
#: grouping fails a check, the engine redoes the round with the tiny groups joined (True: the reference).
JOIN_TINY_GROUPS = False
#: A repair round salvages a failing call's ``DT(S)`` tets outside this many vertex rings of the points where
#: it disagreed (:func:`salvage_tets`); the region inside is re-triangulated as a small group of its own.
SALVAGE_RINGS = 2
#: Salvaged tets must be this well shaped (``|det| / L^3``; as the blocks' ``CERT_MIN_REL``): flat tie tets
#: stay in the fix-up, whose tets the caller orients and screens.
SALVAGE_MIN_REL = 1e-6
#: Relative tolerance of the volume check on the grouped fix-up (kept + fix-up = convex hull).
ACCEPT_VOLUME_REL = 1e-7

# local index of the 3 vertices of the face opposite corner k
_FACE = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])


class _Inconsistent(Exception):
    """The merged blocks and the fix-up disagree (ties beyond the tolerances, Qhull merging points).
    ``bad``: global ids of the points where (None: unknown), for the engine to grow the fix-up there."""

    def __init__(self, msg: str, bad=None):
        super().__init__(msg)
        self.bad = None if bad is None else np.unique(np.asarray(bad, dtype=np.int64).reshape(-1))


def _idx_dtype(n: int):
    """Index dtype for ``n`` points: int32 below 2^31, else int64."""
    return np.int32 if n < 2**31 else np.int64


def _far_vertex(simp: np.ndarray, t: np.ndarray, n: np.ndarray, k=None) -> np.ndarray:
    """Local index of the vertex of tet ``n`` that is not in tet ``t`` (they share a face; with ``k``, the
    face opposite corner ``k`` of ``t``: then by index sums, no comparisons)."""
    if k is not None:
        sn = simp[n].sum(axis=1, dtype=np.int64)
        return sn - (simp[t].sum(axis=1, dtype=np.int64) - simp[t, k])
    sn = simp[n]
    shared = (sn[:, :, None] == simp[t][:, None, :]).any(axis=2)
    return sn[np.arange(n.size), np.argmin(shared, axis=1)]


def _face_runs(faces: np.ndarray, n: int, what: str):
    """``(order, start, run, count)``: :func:`_sort_faces` of ``faces``, each sorted row's run number and each
    run's length. Raises ``_Inconsistent("a face lies in 3+ " + what)`` when a run is longer than 2."""
    order, start = _sort_faces(faces, n)
    run = np.cumsum(start) - 1
    count = np.bincount(run) if run.size else np.zeros(0, np.int64)
    if count.size and count.max() > 2:
        raise _Inconsistent(f"a face lies in 3+ {what}")
    return order, start, run, count


def _abs_volume(pts: np.ndarray, tets: np.ndarray) -> float:
    """Total unsigned volume of the tets ``[T, 4]`` (ids into ``pts [N, 3]``)."""
    if tets.shape[0] == 0:
        return 0.0
    p = pts[tets]
    e = p[:, 1:] - p[:, :1]
    return float(np.abs(np.einsum("bi,bi->b", e[:, 0], np.cross(e[:, 1], e[:, 2]))).sum() / 6.0)


def open_faces(faces: np.ndarray, far: np.ndarray, n: int):
    """The open faces: those reported once.

    Args:
        faces: ``[F, 3]`` int32/int64 sorted id triples (faces of kept tets whose local neighbour was not kept).
        far: ``[F]`` the id of each face's kept tet's 4th vertex.
        n: number of points (ids < n).

    Returns:
        ``(walls [W, 3], wall_far [W])``, rows of the inputs.

    Raises:
        _Inconsistent: a face reported 3+ times, or a tet kept by two blocks.
    """
    if faces.shape[0] == 0:
        return faces, far
    order, start, run, count = _face_runs(faces, n, "kept tets")
    pair = np.flatnonzero(count == 2)
    first = order[np.flatnonzero(start)[pair]]
    if np.any(far[first] == far[order[np.flatnonzero(start)[pair] + 1]]):
        raise _Inconsistent("a tet was kept by two blocks")
    single = order[count[run] == 1]
    return faces[single], far[single]


def _side(tri: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``det(b - a, c - a, x - a) / L^3`` for triangles ``tri`` ``[W, 3, 3]`` (rows a, b, c) and points
    ``x`` ``[W, 3]`` (``L`` the longest of the 6 edges): the side of the plane ``x`` is on, scale-free."""
    a = tri[:, 0]
    u, v, w = tri[:, 1] - a, tri[:, 2] - a, x - a
    det = np.einsum("bi,bi->b", u, np.cross(v, w))
    e2 = [(d * d).sum(axis=1) for d in (u, v, w, tri[:, 2] - tri[:, 1], x - tri[:, 1], x - tri[:, 2])]
    l2 = np.maximum.reduce(e2)
    return det / np.maximum(l2 * np.sqrt(l2), np.finfo(np.float64).tiny)


def wall_signs(pts, walls, wall_far) -> np.ndarray:
    """``[W]`` float64 in {-1, 0, 1}: the side of each open face (sorted id triple) its kept tet lies on,
    from the kept tet's 4th vertex ``wall_far``."""
    return np.sign(_side(pts[walls], pts[wall_far]))


def _sides_by_orientation(pts, s_ids, simp, walls, s_kept, t_side, n_side, k_t):
    """Per open face: is the ``DT(S)`` tet ``t_side`` on the kept side, and the missing / kept side tets
    (-1: outside ``DT(S)``). ``s_kept``: :func:`wall_signs` (the kept side of each open face)."""
    tri = pts[walls]  # [W, 3, 3]
    o_t = _side(tri, pts[s_ids[simp[t_side, k_t]]])
    has_n = n_side >= 0
    o_n = np.zeros_like(o_t)
    if has_n.any():
        o_n[has_n] = _side(tri[has_n], pts[s_ids[_far_vertex(simp, t_side[has_n], n_side[has_n])]])
    rob_t, rob_n = np.abs(o_t) > SIDE_MIN_REL, np.abs(o_n) > SIDE_MIN_REL
    bad = (~rob_t & ~rob_n) | (s_kept == 0)
    if bad.any():
        raise _Inconsistent("an open face lies between two flat tets of the fix-up triangulation", walls[bad])
    bad = rob_t & rob_n & (np.sign(o_t) == np.sign(o_n))
    if bad.any():
        raise _Inconsistent("two fix-up tets on the same side of an open face", walls[bad])
    kept_is_t = np.where(rob_t, np.sign(o_t) == s_kept, np.sign(o_n) != s_kept)
    return kept_is_t, np.where(kept_is_t, n_side, t_side), np.where(kept_is_t, t_side, n_side)


def _sides_by_far(simp, s_ids, wall_far, t_side, n_side, k_t):
    """As :func:`_sides_by_orientation`, with the far vertices in S: the kept tet is the one through them."""
    loc_far = np.searchsorted(s_ids, wall_far)
    kept_is_t = simp[t_side, k_t] == loc_far
    far_n = np.where(n_side >= 0, _far_vertex(simp, t_side, np.maximum(n_side, 0)), -1)
    bad = ~(kept_is_t | (far_n == loc_far))
    if bad.any():
        raise _Inconsistent("a kept tet next to an open face is missing from the fix-up triangulation",
                            s_ids[simp[t_side[bad]]])
    return kept_is_t, np.where(kept_is_t, n_side, t_side), np.where(kept_is_t, t_side, n_side)


def fixup(pts, s_ids, walls, wall_far, options, with_far: bool = False, wall_sign=None, salvage: bool = False):
    """Qhull on ``pts[s_ids]`` and the mask of its tets that fill the missing region next to ``walls``.

    Args:
        pts: ``[N, 3]`` float64 points; s_ids: ``[S]`` sorted ids of the fix-up set; walls: ``[W, 3]``
            sorted id triples (open faces; vertices in ``s_ids``); wall_far: ``[W]`` their kept tets' 4th
            vertices; options: Qhull options (None: scipy's).

    Returns:
        ``(tets [M, 4] int32 global ids, neighbours [M, 4] (rows of tets, -1 on the hull), keep [M] bool)``.

    Raises:
        _Inconsistent: Qhull fails, an open face is not in ``DT(S)``, its sides cannot be told, or a
            component lies on both sides.

    ``with_far``: ``s_ids`` also holds the far vertices ``wall_far`` of the kept tets, and the kept side of
    an open face is the ``DT(S)`` tet whose 4th vertex is that far vertex (no orientation test: robust to
    flat tie tets on both sides; the fallback).

    ``salvage`` (the grouped fix-up's repair rounds): when the call disagrees at known points, the
    exception carries ``salvage``: the tets of ``DT(S)`` that :func:`salvage_tets` can still place on the
    missing side away from those points (``[P, 4]`` global ids, positively oriented), for :func:`promote`."""
    from scipy.spatial import Delaunay, QhullError

    idt = _idx_dtype(pts.shape[0])
    try:
        d = Delaunay(pts[s_ids], qhull_options=options)
    except QhullError as exc:
        raise _Inconsistent(f"Qhull failed on the {s_ids.size} fix-up points: {str(exc).splitlines()[0]}") from None
    simp = d.simplices
    nb = d.neighbors
    del d
    m = simp.shape[0]
    if walls.shape[0] == 0:
        return s_ids[simp].astype(idt), nb, np.ones(m, dtype=bool)
    try:
        return _classify(pts, s_ids, simp, nb, walls, wall_far, with_far, wall_sign)
    except _Inconsistent as exc:
        if salvage and not with_far and exc.bad is not None:
            sign = wall_signs(pts, walls, wall_far) if wall_sign is None else wall_sign
            exc.salvage = salvage_tets(pts, s_ids, simp, nb, walls, sign, exc.bad)
        raise


def _classify(pts, s_ids, simp, nb, walls, wall_far, with_far, wall_sign):
    """The sides of the open faces in ``DT(S)`` (``simp``, ``nb``: local rows) and the missing components
    (the body of :func:`fixup` after Qhull; same returns and raises)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    idt = _idx_dtype(pts.shape[0])
    m = simp.shape[0]
    # walls in local indices of S (all their vertices are in S by construction)
    loc = np.searchsorted(s_ids, walls)
    # every face of DT(S) once: (tet, corner) with tet < neighbour or on the hull
    t_all = np.repeat(np.arange(m), 4)
    k_all = np.tile(np.arange(4), m)
    n_all = nb.reshape(-1).astype(np.int64)
    once = (n_all < 0) | (t_all < n_all)
    t_f, k_f, n_f = t_all[once], k_all[once], n_all[once]
    f_loc = np.sort(simp[t_f[:, None], _FACE[k_f]], axis=1)
    ns = s_ids.size
    fkey = _face_keys(f_loc, ns)
    order = np.argsort(fkey)
    fkey = fkey[order]
    wkey = _face_keys(np.sort(loc, axis=1), ns)
    pos = np.searchsorted(fkey, wkey)
    pos = np.minimum(pos, fkey.size - 1)
    if not np.all(fkey[pos] == wkey):
        raise _Inconsistent("an open face of the kept tets is not a face of the fix-up triangulation",
                            walls[fkey[pos] != wkey])
    fi = order[pos]
    t_side, n_side = t_f[fi], n_f[fi]
    if with_far:
        kept_is_t, miss_side, kept_side = _sides_by_far(simp, s_ids, wall_far, t_side, n_side, k_f[fi])
    else:
        sign = wall_signs(pts, walls, wall_far) if wall_sign is None else wall_sign
        kept_is_t, miss_side, kept_side = _sides_by_orientation(pts, s_ids, simp, walls, sign, t_side,
                                                                n_side, k_f[fi])
    # components of DT(S) with the open faces cut
    is_wall = np.zeros(t_f.size, dtype=bool)
    is_wall[fi] = True
    e = (~is_wall) & (n_f >= 0)
    g = coo_matrix((np.ones(int(e.sum()), dtype=np.int8), (t_f[e], n_f[e])), shape=(m, m))
    _, label = connected_components(g, directed=False)
    kept_lab = np.zeros(label.max() + 1, dtype=bool)
    kept_lab[label[kept_side[kept_side >= 0]]] = True
    miss_lab = np.zeros_like(kept_lab)
    miss_lab[label[miss_side[miss_side >= 0]]] = True
    if (kept_lab & miss_lab).any():
        both = (kept_lab & miss_lab)[label[np.maximum(miss_side, 0)]] & (miss_side >= 0)
        raise _Inconsistent("a fix-up component lies on both sides of the kept tets", walls[both])
    if not (kept_lab | miss_lab).all():
        raise _Inconsistent("a fix-up component touches no open face")
    if not miss_lab.any() and walls.shape[0]:
        raise _Inconsistent("no fix-up tet lies on the missing side of an open face")
    return s_ids[simp].astype(idt), nb, miss_lab[label]


def _dt_faces(simp, nb):
    """Every face of a ``DT(S)`` once: ``(t, k, n)`` (tet, corner opposite, neighbour or -1) with ``t < n``
    or on the hull."""
    m = simp.shape[0]
    t_all = np.repeat(np.arange(m), 4)
    k_all = np.tile(np.arange(4), m)
    n_all = nb.reshape(-1).astype(np.int64)
    once = (n_all < 0) | (t_all < n_all)
    return t_all[once], k_all[once], n_all[once]


def salvage_tets(pts, s_ids, simp, nb, walls, wall_sign, bad, rings: int = SALVAGE_RINGS):
    """The tets of a fix-up call's ``DT(S)`` that are still known to fill the missing region although the
    call disagreed with the kept tets at the points ``bad`` (the repair rounds of the engine: the failing
    call is not re-run whole; only the region around ``bad`` is).

    Args:
        pts: ``[N, 3]`` float64; s_ids: ``[S]`` sorted ids of the call's points; simp, nb: ``[M, 4]`` its
            ``DT(S)`` (local rows, neighbours -1 on the hull); walls: ``[W, 3]`` its open faces (sorted id
            triples) and wall_sign ``[W]`` their kept sides (:func:`wall_signs`); bad: global ids where the
            call disagreed; rings: vertex rings of ``DT(S)`` around ``bad`` whose tets are not salvaged.

    Returns:
        ``[P, 4]`` global ids (the index dtype of :func:`fixup`), positively oriented, well shaped
        (``|det| / L^3 > SALVAGE_MIN_REL``): the tets of the components of ``DT(S)`` (cut at the open faces
        and at the tets left out: those within ``rings`` of ``bad`` or near-flat) that touch an open face
        on its missing side and none on its kept side, with no open face left unmatched or undecided
        outside the rings (such faces' vertices join ``bad`` and the rings are redone, up to 4 times).
        Empty when nothing can be salvaged.

    The same reasoning as the fix-up's proof: away from ``bad`` the open faces bound the missing region,
    which ``DT(S)`` tiles with the missing tets; the checks of the grouped result are made later on the
    union of the kept, promoted and fix-up tets (:func:`accept`).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    idt = _idx_dtype(pts.shape[0])
    none = np.zeros((0, 4), idt)
    ns, m = s_ids.size, simp.shape[0]
    p = pts[s_ids][simp]  # [M, 4, 3]
    e = p[:, 1:] - p[:, :1]
    det = np.einsum("bi,bi->b", e[:, 0], np.cross(e[:, 1], e[:, 2]))
    l2 = np.maximum.reduce([(d * d).sum(axis=1) for d in
                            (e[:, 0], e[:, 1], e[:, 2], p[:, 2] - p[:, 1], p[:, 3] - p[:, 1], p[:, 3] - p[:, 2])])
    rel = det / np.maximum(l2 * np.sqrt(l2), np.finfo(np.float64).tiny)
    del p, e
    t_f, k_f, n_f = _dt_faces(simp, nb)
    fkey = _face_keys(np.sort(simp[t_f[:, None], _FACE[k_f]], axis=1), ns)
    order = np.argsort(fkey)
    fkey = fkey[order]
    loc = np.searchsorted(s_ids, walls)
    if not np.array_equal(s_ids[np.minimum(loc, ns - 1)], walls):
        return none
    wkey = _face_keys(np.sort(loc, axis=1), ns)
    mark = np.zeros(ns, dtype=bool)
    b = np.searchsorted(s_ids, bad)
    mark[b[(b < ns) & (s_ids[np.minimum(b, ns - 1)] == bad)]] = True
    for _ in range(4):
        grow = mark.copy()
        for _ in range(rings):
            grow[simp[grow[simp].any(axis=1)].reshape(-1)] = True
        out = grow[simp].any(axis=1) | (np.abs(rel) <= SALVAGE_MIN_REL)  # tets not salvaged
        w_ok = ~grow[loc].any(axis=1)
        pos = np.minimum(np.searchsorted(fkey, wkey), max(fkey.size - 1, 0))
        found = fkey[pos] == wkey
        fi = order[pos]
        t_side, n_side = t_f[fi], n_f[fi]
        # side of each open face: the DT(S) tet across it whose 4th vertex is robustly on one side
        tri = pts[walls]
        o_t = _side(tri, pts[s_ids[simp[t_side, k_f[fi]]]])
        o_n = np.zeros_like(o_t)
        has = n_side >= 0
        o_n[has] = _side(tri[has], pts[s_ids[_far_vertex(simp, t_side[has], n_side[has])]])
        rob_t, rob_n = np.abs(o_t) > SIDE_MIN_REL, np.abs(o_n) > SIDE_MIN_REL
        undecided = ~found | (~rob_t & ~rob_n) | (rob_t & rob_n & (np.sign(o_t) == np.sign(o_n))) | (wall_sign == 0)
        redo = undecided & ~mark[loc].all(axis=1)  # every undecided open face: its vertices join bad
        if not redo.any():
            break
        mark[loc[redo].reshape(-1)] = True
    else:
        return none
    use = w_ok & ~undecided
    kept_is_t = np.where(rob_t, np.sign(o_t) == wall_sign, np.sign(o_n) != wall_sign)
    miss_side = np.where(kept_is_t, n_side, t_side)[use]
    # conservative: a component next to any decided open face on its kept side (near bad too), or next to
    # an undecided one on either side, is not salvaged
    seen = ~undecided
    kept_side = np.concatenate([np.where(kept_is_t, t_side, n_side)[seen],
                                t_side[found & undecided], n_side[found & undecided]])
    # components of DT(S) without the left-out tets, cut at the open faces
    is_wall = np.zeros(t_f.size, dtype=bool)
    is_wall[fi[found]] = True
    ed = (~is_wall) & (n_f >= 0)
    ed[ed] = ~out[t_f[ed]] & ~out[n_f[ed]]
    g = coo_matrix((np.ones(int(ed.sum()), dtype=np.int8), (t_f[ed], n_f[ed])), shape=(m, m))
    _, label = connected_components(g, directed=False)
    nl = label.max() + 1
    miss_lab = np.zeros(nl, dtype=bool)
    kept_lab = np.zeros(nl, dtype=bool)
    ms = miss_side[miss_side >= 0]
    ks = kept_side[kept_side >= 0]
    miss_lab[label[ms[~out[ms]]]] = True
    kept_lab[label[ks[~out[ks]]]] = True
    take = (miss_lab & ~kept_lab)[label] & ~out
    tets = s_ids[simp[take]].astype(idt)
    neg = rel[take] < 0
    tets[neg, 2:] = tets[neg][:, [3, 2]]
    return tets


def promote(pts, kept, walls, wall_sign, tets, workers: int = 1):
    """Add salvaged fix-up tets (:func:`salvage_tets`, ``[P, 4]`` positively oriented) to the kept tets and
    update the open faces: a face of a new tet that is an open face closes it (the open face's kept side
    must be the other side), two new tets' shared face is interior, any other face is a new open face
    with the new tet on its kept side. Returns ``(kept, walls, wall_sign, added volume)``; raises
    ``_Inconsistent`` when a face would lie in 3+ tets or a new tet lies on an open face's kept side. The
    copy of ``kept`` runs in ``workers`` threads."""
    if tets.shape[0] == 0:
        return kept, walls, wall_sign, 0.0
    vol = _abs_volume(pts, tets)
    tf = np.sort(tets[:, _FACE].reshape(-1, 3), axis=1)
    ts = np.sign(_side(pts[tf], pts[tets.reshape(-1)]))
    faces = np.concatenate([walls, tf.astype(walls.dtype)])
    signs = np.concatenate([wall_sign, ts])
    order, start, run, count = _face_runs(faces, pts.shape[0], "tets while promoting salvaged fix-up tets")
    first = order[np.flatnonzero(start)[count == 2]]
    second = order[np.flatnonzero(start)[count == 2] + 1]
    if np.any(signs[first] == signs[second]) or np.any(signs[first] == 0) or np.any(signs[second] == 0):
        raise _Inconsistent("a salvaged fix-up tet lies on the kept side of an open face")
    single = order[count[run] == 1]
    return concat_rows([kept, tets.astype(kept.dtype)], workers), faces[single], signs[single], vol


def _on_hull(hull, pts, faces, tol) -> np.ndarray:
    """``[F]`` bool: faces (global id triples) whose centroid lies on a facet plane of ``hull`` (a
    ``scipy.spatial.ConvexHull``) within ``tol`` (robust to coplanar facets triangulated differently)."""
    eq = hull.equations  # [H, 4]: n . x + d <= 0 inside
    c = pts[faces].mean(axis=1)
    on = np.zeros(faces.shape[0], dtype=bool)
    for s in range(0, c.shape[0], 4096):
        on[s : s + 4096] = (c[s : s + 4096] @ eq[:, :3].T + eq[:, 3]).max(axis=1) >= -tol
    return on


def accept(pts, hull, walls, fix_tets, fix_keep, kept_volume):
    """Acceptance checks of the grouped fix-up (checks (a)-(c) of the engine's docstring).

    Args:
        pts: ``[N, 3]`` float64; hull: ``scipy.spatial.ConvexHull`` of all points; walls: ``[W, 3]`` open
            faces; fix_tets: ``[M, 4]`` and fix_keep: ``[M]`` bool, the fix-up tets and those taken;
            kept_volume: volume of the kept tets (units of ``pts`` cubed).

    Raises:
        _Inconsistent: a face in 3+ fix-up tets, a repeated tet, a boundary face that is neither open nor
            on the hull, or a volume off the hull's by more than ``ACCEPT_VOLUME_REL``.
    """
    f = np.sort(fix_tets[fix_keep].astype(np.int64), axis=1)
    # compact ids (the vertices of the fix-up tets and the open faces), so that face keys fit in int64
    ids = unique_ids([f, walls], pts.shape[0])
    rank = np.zeros(pts.shape[0], dtype=np.int64)
    rank[ids] = np.arange(ids.size)
    n = ids.size
    pts = pts[ids]
    f = rank[f]
    walls = rank[walls]
    faces = f[:, _FACE].reshape(-1, 3)  # sorted rows stay sorted; row 4 i + k is tet i's face opposite k
    order, start, _, count = _face_runs(faces, n, "fix-up tets")
    first = np.flatnonzero(start)
    r1, r2 = order[first[count == 2]], order[first[count == 2] + 1]
    if np.any(f[r1 // 4, r1 % 4] == f[r2 // 4, r2 % 4]):  # two tets on one face with the same 4th vertex
        raise _Inconsistent("a fix-up tet is repeated")
    single = order[first[count == 1]]
    bkey = _face_keys(faces[single], n)
    wkey = _face_keys(walls, n)
    b_odd, w_odd = unmatched_keys(bkey, wkey)
    odd = np.concatenate([faces[single][b_odd], walls[w_odd]])
    d = float(np.sqrt((np.ptp(pts, axis=0) ** 2).sum()))
    on = _on_hull(hull, pts, odd, 1e-9 * d)
    if not on.all():
        raise _Inconsistent(f"{int((~on).sum())} boundary faces of the grouped fix-up are neither open faces "
                            "nor on the hull", ids[odd[~on]])
    fix_volume = _abs_volume(pts, f)
    if abs(kept_volume + fix_volume - hull.volume) > ACCEPT_VOLUME_REL * hull.volume:
        raise _Inconsistent(f"kept + fix-up volume {kept_volume + fix_volume:.9g} != hull volume {hull.volume:.9g}")


def convex_hull(pts, ids=None):
    """``(scipy ConvexHull, its vertices and the points Qhull finds coplanar with its facets (``Qc``) as sorted
    global ids)`` of ``pts[ids]`` (all of ``pts`` when ``ids`` is None), or an :class:`_Inconsistent`
    *returned* (not raised: the engine runs this in a thread before the fix-up needs it) when Qhull fails."""
    from scipy.spatial import ConvexHull, QhullError

    try:
        hull = ConvexHull(pts if ids is None else pts[ids], qhull_options="Qc")
    except QhullError as exc:
        return _Inconsistent(f"the convex hull of the fix-up points failed: {str(exc).splitlines()[0]}")
    on = np.union1d(hull.vertices, hull.coplanar[:, 0]) if hull.coplanar.size else hull.vertices
    return hull, (on if ids is None else ids[on])


def grouped_fixup(pts, walls, wall_sign, unused, options, workers, kept_volume, stats, cache=None, salvage=False,
                  hull=None, join_tiny: bool = True):
    """The fix-up in parallel groups (:func:`groups`, :func:`fixup` in ``workers`` threads), checked by
    :func:`accept`; ``wall_sign``: :func:`wall_signs`. Returns ``(fix_tets, fix_neighbors, fix_keep)`` as
    :func:`fixup`, the calls concatenated (neighbours offset). Adds ``fix_groups``, ``fix_calls``,
    ``fix_call_points``, ``fix_call_s`` (the 4 biggest calls' points, wall and thread CPU seconds),
    ``fix_reused_groups``, ``accept_s`` to ``stats``. Raises ``_Inconsistent`` as
    :func:`fixup` (the ``bad`` points of every failing call) and :func:`accept`.

    ``cache`` (a :class:`GroupCache`, kept by the caller across repair rounds): groups unchanged since a
    round whose call on them succeeded are not re-run; their stored tets join the new calls' tets, and
    :func:`accept` checks the union. The groups of the calls that succeed are stored when another call
    fails (only then: a round whose calls all pass never needs the store); the store is emptied when the
    union fails :func:`accept` (the next round re-runs all).

    ``salvage``: each failing call that names its points salvages its ``DT(S)`` away from them
    (:func:`salvage_tets`); the raised exception's ``salvage`` holds them all (``[P, 4]``), for the engine to
    :func:`promote` before the next round.

    ``hull``: the convex hull of all points (:func:`convex_hull`, or a future of it), computed once by the
    engine while the blocks run; None: the hull of the fix-up set, computed here (the same hull: every hull
    vertex is on an open face or in a missing tet)."""
    if hull is None:
        s_all = np.unique(np.concatenate([walls.reshape(-1), unused]))
        hull = convex_hull(pts, s_all)
    elif isinstance(hull, cf.Future):
        hull = hull.result()
    if isinstance(hull, _Inconsistent):
        raise hull
    hull, hull_ids = hull
    if cache is not None:
        cache.hits = []
        bins, ngroups = groups(pts, walls, wall_sign, unused, 2 * workers, hull_ids, reuse=cache, join_tiny=join_tiny)
    else:
        bins, ngroups = groups(pts, walls, wall_sign, unused, 2 * workers, hull_ids, join_tiny=join_tiny)
    reused = list(cache.hits) if cache is not None else []
    stats["fix_groups"] = int(ngroups)
    stats["fix_calls"] = len(bins)
    stats["fix_reused_groups"] = len(reused)
    stats["fix_call_points"] = sorted((int(b[0].size) for b in bins), reverse=True)[:8]
    with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="meshlift-delaunay-fix") as pool:
        secs = []  # (points, wall s, thread CPU s) per call

        def timed(b):
            t, c = time.perf_counter(), time.thread_time()
            try:
                return fixup(pts, b[0], walls[b[1]], None, options, wall_sign=wall_sign[b[1]], salvage=salvage)
            finally:
                secs.append((int(b[0].size), round(time.perf_counter() - t, 2), round(time.thread_time() - c, 2)))

        futs = [pool.submit(timed, b) for b in bins]
        res, errors, ok_bins = [], [], []
        for b, f_ in zip(bins, futs):
            try:
                res.append(f_.result())
                ok_bins.append(b)
            except _Inconsistent as exc:
                errors.append(exc)
    stats["fix_failed_calls"] = len(errors)
    stats["fix_call_s"] = sorted(secs, reverse=True)[:4]
    if errors:
        # the group store is built only now: a round whose calls all pass never needs it
        for b, r in zip(ok_bins, res):
            if cache is not None and len(b) == 4:  # (a grouping without group labels is not stored)
                _split_by_group(r, b[0], b[2], b[3], cache.done)
        bad = [e.bad for e in errors if e.bad is not None]
        exc = _Inconsistent(f"{len(errors)} of {len(bins)} fix-up calls: {errors[0]}",
                            np.concatenate(bad) if bad else None)
        got = [e.salvage for e in errors if getattr(e, "salvage", None) is not None and e.salvage.shape[0]]
        exc.salvage = np.concatenate(got) if got else None
        raise exc
    parts = res + [cache.done[k_] for k_ in reused]
    tets = [r[0] for r in parts]
    off = np.cumsum([0] + [t.shape[0] for t in tets[:-1]])
    nbs = [np.where(r[1] >= 0, r[1].astype(np.int64) + o, -1) for r, o in zip(parts, off)]
    keep = np.concatenate([r[2] for r in parts])
    tets = np.concatenate(tets)
    t1 = time.perf_counter()
    try:
        accept(pts, hull, walls, tets, keep, kept_volume)
    except _Inconsistent as exc:
        if cache is not None:
            cache.done.clear()
        exc.from_checks = True  # (the grouping may be wrong: the engine then redoes the round as the reference)
        raise
    finally:
        stats["accept_s"] = time.perf_counter() - t1
    return tets, np.concatenate(nbs), keep

