"""Demoting kept tets of :mod:`meshlift.isosurface.delaunay_parallel` to the fix-up: the slivers along the
open faces before the first fix-up call, and the vertex rings around the points where a fix-up call
disagreed (its repair rounds).

**Why slivers.** A kept tet is certified robustly Delaunay, but a *sliver* (four nearly co-circular
vertices: ``|det| / L^3 < SLIVER_REL``, ``det`` the orientation determinant of its vertices, ``L`` its
longest edge) next to the open faces is where the fix-up's Qhull, run on the nearly co-spherical skins of a
hollow shell of millions of pivots, merges facets as ties and splits the cell differently from the block
that kept it: an open face of the sliver is then missing from ``DT(S)`` and the call fails (5.4M MILo-like
pivots: 4 repair rounds, 13,695 kept tets grown). A demoted sliver is simply a Delaunay tet handed back to
the fix-up: the kept set minus any of its tets is still a set of Delaunay tets, so step 3's proof holds as
is; the demoted tet's faces join the open faces by parity and each new open face's kept side is opposite
the demoted tet's 4th vertex (by orientation, :func:`delaunay_fixup.wall_signs`'s convention).

**Which slivers.** Kept tets with at least ``SLIVER_MIN_OPEN`` (3) vertices on open faces (a vertex set,
not a face: a tet touching the seam at three corners) and ``|det| / L^3 < SLIVER_REL``. Demoting them puts
their 4th vertices on open faces too, so a next pass may find more; at most ``SLIVER_PASSES`` passes.

The passes over the kept tets run in ``workers`` threads (:mod:`delaunay_rows`); each mask equals its
one-line numpy twin (:func:`sliver_rows_reference`). numpy only.
"""

from __future__ import annotations

import numpy as np

from meshlift.isosurface.delaunay_fixup import _FACE, _abs_volume, _face_runs, _side
from meshlift.isosurface.delaunay_rows import _pmap, _spans, rows_touching, take_rows

#: A kept tet is a sliver when ``|det| / L^3`` is below this (a regular tet: ~0.118; the blocks keep
#: nothing below ``delaunay_parallel.CERT_MIN_REL`` = 1e-6).
SLIVER_REL = 1e-3
#: Slivers are demoted only where at least this many of their vertices lie on open faces (the seams).
SLIVER_MIN_OPEN = 3
#: At most this many passes of sliver demotion (each pass's demoted tets put new vertices on open faces).
SLIVER_PASSES = 4


def _rel(pts: np.ndarray, tets: np.ndarray) -> np.ndarray:
    """``[T]`` float64 ``det / L^3`` of ``tets`` ``[T, 4]`` (``det = det(p1 - p0, p2 - p0, p3 - p0)``, ``L``
    the longest of the 6 edges; 0 for a point-like tet)."""
    p = pts[tets]
    e = p[:, 1:] - p[:, :1]
    det = np.einsum("bi,bi->b", e[:, 0], np.cross(e[:, 1], e[:, 2]))
    l2 = np.maximum.reduce([(d * d).sum(axis=1) for d in
                            (e[:, 0], e[:, 1], e[:, 2], p[:, 2] - p[:, 1], p[:, 3] - p[:, 1], p[:, 3] - p[:, 2])])
    return det / np.maximum(l2 * np.sqrt(l2), np.finfo(np.float64).tiny)


def sliver_rows(pts: np.ndarray, kept: np.ndarray, walls: np.ndarray, workers: int = 1, seen=None) -> np.ndarray:
    """``[M]`` bool: the kept tets to demote (module docstring).

    Args:
        pts: ``[N, 3]`` float64 points; kept: ``[M, 4]`` int32/int64 kept tets (ids into ``pts``);
            walls: ``[W, 3]`` the open faces (id triples); workers: threads for the pass over ``kept``.
        seen: ``[M]`` bool or None: rows already tested (skipped: False in the result); the rows tested
            here (``>= SLIVER_MIN_OPEN`` vertices on open faces) are set True in it.

    Returns:
        ``[M]`` bool, True for tets with ``>= SLIVER_MIN_OPEN`` vertices on open faces and
        ``|det| / L^3 < SLIVER_REL``.
    """
    out = np.zeros(kept.shape[0], dtype=bool)
    if kept.shape[0] == 0 or walls.shape[0] == 0:
        return out
    mark = np.zeros(pts.shape[0], dtype=np.uint8)
    mark[walls.reshape(-1)] = 1

    def run(a, b):
        k = kept[a:b]
        c = mark[k[:, 0]] + mark[k[:, 1]]  # uint8 column gathers: ~3x a 2-D gather + count_nonzero
        c += mark[k[:, 2]]
        c += mark[k[:, 3]]
        on = c >= SLIVER_MIN_OPEN
        if seen is not None:
            on &= ~seen[a:b]
            seen[a:b] |= on
        cand = np.flatnonzero(on)
        if cand.size:
            out[a + cand] = np.abs(_rel(pts, k[cand])) < SLIVER_REL

    _pmap(run, _spans(kept.shape[0], workers))
    return out


def sliver_rows_reference(pts: np.ndarray, kept: np.ndarray, walls: np.ndarray) -> np.ndarray:
    """Twin of :func:`sliver_rows` in whole-array numpy (for tests, small inputs)."""
    on = np.isin(kept, walls.reshape(-1)).sum(axis=1) >= SLIVER_MIN_OPEN
    return on & (np.abs(_rel(pts, kept)) < SLIVER_REL) if kept.shape[0] else on


def demote(pts, kept, walls, wall_sign, bad, rings: int = 2, workers: int = 1):
    """Grow the missing region: drop the kept tets within ``rings`` vertex rings of ``bad`` (global ids; 1: the
    tets with a vertex in ``bad``; the repair rounds, around the points where a fix-up call disagreed) with
    :func:`demote_rows`.

    Args:
        pts: ``[N, 3]`` float64; kept: ``[M, 4]`` kept tets; walls: ``[W, 3]`` sorted id triples (the open
            faces) and wall_sign ``[W]`` their kept sides (:func:`delaunay_fixup.wall_signs`); bad: global ids;
            rings: vertex rings; workers: threads for the passes over ``kept``.

    Returns and raises: as :func:`demote_rows`.
    """
    mark = np.zeros(pts.shape[0], dtype=bool)
    mark[bad] = True
    drop = rows_touching(mark, kept, workers)
    for _ in range(rings - 1):  # and the tets around the dropped ones' vertices
        mark[kept[drop].reshape(-1)] = True
        drop = rows_touching(mark, kept, workers)
    return demote_rows(pts, kept, walls, wall_sign, drop, workers)


def demote_rows(pts, kept, walls, wall_sign, drop, workers: int = 1):
    """Drop the kept tets ``drop`` (``[M]`` bool) and update the open faces.

    Returns:
        ``(kept, walls, wall_sign, dropped volume, dropped count)``. A dropped tet's faces join the open
        faces; a face now between two dropped tets (or a dropped tet and the old missing region) leaves them;
        a new open face's kept side is opposite the dropped tet's 4th vertex.

    Raises:
        delaunay_fixup._Inconsistent: a face in 3+ places.
    """
    r = kept[drop]
    walls, wall_sign = _open_after(pts, r, walls, wall_sign)
    return take_rows(kept, ~drop, workers), walls, wall_sign, _abs_volume(pts, r), int(r.shape[0])


def _open_after(pts, r, walls, wall_sign):
    """The open faces ``(walls, wall_sign)`` once the kept tets ``r`` ``[D, 4]`` are dropped (face parity;
    a new open face's kept side is opposite its dropped tet's 4th vertex)."""
    rf = np.sort(r[:, _FACE].reshape(-1, 3), axis=1)
    rs = -np.sign(_side(pts[rf], pts[r.reshape(-1)]))
    faces = np.concatenate([walls, rf.astype(walls.dtype)])
    signs = np.concatenate([wall_sign, rs])
    order, start, run, count = _face_runs(faces, pts.shape[0], "tets while growing the fix-up region")
    single = order[count[run] == 1]
    return faces[single], signs[single]


def demote_slivers(pts, kept, walls, wall_sign, workers: int = 1, passes: int = SLIVER_PASSES):
    """Demote the slivers along the open faces (module docstring), at most ``passes`` passes.

    Args:
        pts, kept, walls, wall_sign, workers: as :func:`demote`; passes: the most passes (0: none). Each pass
        is :func:`demote_rows` of :func:`sliver_rows`, with the kept tets copied once, at the end.

    Returns:
        ``(kept, walls, wall_sign, demoted volume, demoted count, passes run)``; a pass that finds no sliver
        ends the loop (and counts as run).

    Raises:
        delaunay_fixup._Inconsistent: as :func:`demote_rows`.
    """
    gone = np.zeros(kept.shape[0], dtype=bool)  # demoted so far (one copy of the kept tets, at the end)
    seen = np.zeros(kept.shape[0], dtype=bool)  # tested so far: demoted, or well shaped for good
    vol, done = 0.0, 0
    for _ in range(passes):
        done += 1
        drop = sliver_rows(pts, kept, walls, workers, seen)
        if not drop.any():
            break
        r = kept[drop]
        walls, wall_sign = _open_after(pts, r, walls, wall_sign)
        vol += _abs_volume(pts, r)
        gone |= drop
    count = int(np.count_nonzero(gone))
    return (take_rows(kept, ~gone, workers) if count else kept), walls, wall_sign, vol, count, done
