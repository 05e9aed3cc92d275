"""Grouping of the exact fix-up of :mod:`meshlift.isosurface.delaunay_parallel` into parallel Qhull calls
(:func:`groups`), and the store of the groups accepted by earlier repair rounds (:class:`GroupCache`,
:func:`group_key`, :func:`_split_by_group`). Used by :mod:`meshlift.isosurface.delaunay_fixup` (which
re-exports these names). numpy/scipy only.
"""

from __future__ import annotations

import numpy as np

from meshlift.isosurface.delaunay_rows import unique_ids

#: Each point used by no kept tet links its group to the groups of this many nearest fix-up points.
UNUSED_LINKS = 8
#: Groups of fewer fix-up points are linked to the groups of their points' nearest fix-up points (only when
#: :func:`groups` is asked to join them: ``join_tiny``).
MIN_GROUP_POINTS = 64


class GroupCache:
    """The fix-up groups accepted by earlier repair rounds, so that a round re-runs only the groups that
    failed or changed. ``done``: group key (:func:`group_key`) -> ``(tets [M, 4] global ids, neighbours
    [M, 4] (rows of tets, -1 outside), keep [M] bool)``, the group's share of its call's ``DT(S)``;
    ``hits``: the keys :func:`groups` found in ``done`` this round (their groups are not re-run)."""

    def __init__(self):
        self.done: dict = {}
        self.hits: list = []


def group_key(ids, walls, wall_far) -> bytes:
    """Digest of one group: its sorted point ids ``[G]``, its open faces ``[W, 3]`` (any row order) and
    their ``wall_far`` values ``[W]``; equal keys = the same holes, so the same missing tets."""
    import hashlib

    order = np.lexsort((walls[:, 2], walls[:, 1], walls[:, 0]))
    h = hashlib.blake2b(digest_size=20)
    h.update(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(walls[order], dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(np.asarray(wall_far)[order], dtype=np.float64).tobytes())
    return h.digest()


class _GroupKeys:
    """The :func:`group_key` of every group of one :func:`groups` split, made on first use (a list)."""

    def __init__(self, s_ids, label, walls, wall_far, wl, ng):
        self._args, self._keys = (s_ids, label, walls, wall_far, wl, ng), None

    def _make(self) -> list:
        if self._keys is None:
            s_ids, label, walls, wall_far, wl, ng = self._args
            p_ord, w_ord = np.argsort(label, kind="stable"), np.argsort(wl, kind="stable")
            p_cut = np.r_[0, np.cumsum(np.bincount(label, minlength=ng))]
            w_cut = np.r_[0, np.cumsum(np.bincount(wl, minlength=ng))]
            self._keys = [group_key(s_ids[p_ord[p_cut[g] : p_cut[g + 1]]], walls[w_ord[w_cut[g] : w_cut[g + 1]]],
                                    wall_far[w_ord[w_cut[g] : w_cut[g + 1]]]) for g in range(ng)]
        return self._keys

    def __len__(self) -> int:
        return self._args[5]

    def __getitem__(self, g):
        return self._make()[g]

    def __iter__(self):
        return iter(self._make())


def groups(pts, walls, wall_far, unused, max_bins: int, hull_ids=None, reuse: GroupCache | None = None,
           join_tiny: bool = True):
    """Split the fix-up into Qhull calls: ``([(s_ids, wall_rows)], number of groups)`` with at most
    ``max_bins`` calls (``s_ids`` sorted global ids, ``wall_rows`` rows of ``walls``). ``pts`` ``[N, 3]``,
    ``walls`` ``[W, 3]``, ``unused`` ``[U]`` ids of points in no kept tet.

    With ``reuse`` (a :class:`GroupCache`), the groups whose :func:`group_key` is in ``reuse.done`` are
    left out of the calls (their keys go to ``reuse.hits``), and each call is ``(s_ids, wall_rows,
    group_of_point [len(s_ids)] int, keys)``: the group (index into ``keys``, a list-like :class:`_GroupKeys`
    whose digests are made on first use) of each of its points.

    Groups: the open faces connected through shared vertices, with their far vertices; each unused point
    linked to its ``UNUSED_LINKS`` nearest fix-up points (its Delaunay neighbours are vertices of the same
    hole); the groups with a vertex on the convex hull (``hull_ids``, global ids) joined into one (a hole
    along the hull can have an open-face boundary in several pieces joined only by hull faces); with
    ``join_tiny``, each group of fewer than ``MIN_GROUP_POINTS`` points joined to the big group nearest to it
    (without: the small holes stay groups of their own, and are packed beside the big ones). Groups are
    packed into bins by size (largest first, into the lightest bin).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    s_ids = unique_ids([walls, unused], pts.shape[0])
    ns = s_ids.size
    loc = np.searchsorted(s_ids, walls)
    a = [loc[:, 0], loc[:, 1]]
    b = [loc[:, 1], loc[:, 2]]
    if unused.size and ns > 1:
        k = min(UNUSED_LINKS + 1, ns)
        _, j = cKDTree(pts[s_ids]).query(pts[unused], k=k)
        a.append(np.repeat(np.searchsorted(s_ids, unused), k))
        b.append(j.reshape(-1))
    if hull_ids is not None and hull_ids.size:
        h = np.searchsorted(s_ids, hull_ids)
        h = h[(h < ns) & (s_ids[np.minimum(h, ns - 1)] == hull_ids)]
        a.append(np.full(h.size, h[0] if h.size else 0))
        b.append(h)
    a, b = np.concatenate(a), np.concatenate(b)
    g = coo_matrix((np.ones(a.size, dtype=np.int8), (a, b)), shape=(ns, ns))
    ng, label = connected_components(g, directed=False)
    size = np.bincount(label, minlength=ng)
    small = size[label] < MIN_GROUP_POINTS
    if join_tiny and small.any() and not small.all():
        # a tiny group (a face at the edge of a hole whose boundary continues through hull faces) joins
        # the one big group nearest to it (one, so that tiny groups never bridge two big ones)
        sm, big = np.flatnonzero(small), np.flatnonzero(~small)
        d, j = cKDTree(pts[s_ids[big]]).query(pts[s_ids[sm]], k=1)
        ls = label[sm]
        order = np.lexsort((d, ls))
        first = order[np.r_[True, ls[order][1:] != ls[order][:-1]]]  # per tiny group: its nearest point
        target = np.arange(ng)
        target[ls[first]] = label[big[j[first]]]
        label = target[label]
        ng, label = np.unique(label, return_inverse=True)
        ng = ng.size
        size = np.bincount(label, minlength=ng)
    wl = label[loc[:, 0]]
    todo = np.ones(ng, dtype=bool)
    keys = None
    if reuse is not None:
        # per group its key (points, open faces, sides): the groups seen before are skipped; with nothing
        # stored yet (the first round) the keys are only made if a call fails (:class:`_GroupKeys`)
        keys = _GroupKeys(s_ids, label, walls, wall_far, wl, ng)
        if reuse.done:
            reuse.hits = [k_ for k_ in keys if k_ in reuse.done]
            todo = np.array([k_ not in reuse.done for k_ in keys], dtype=bool)
    nbins = max(1, min(int(todo.sum()), max_bins))
    load = np.zeros(nbins)
    bin_of = np.full(ng, -1, dtype=np.int64)
    for grp in np.argsort(-size, kind="stable"):
        if not todo[grp]:
            continue
        k = int(np.argmin(load))
        bin_of[grp] = k
        load[k] += size[grp]
    pb = bin_of[label]
    wb = pb[loc[:, 0]]
    out = []
    for k in range(nbins):
        in_k = pb == k
        ids_k = s_ids[in_k]
        if ids_k.size:
            rows = np.flatnonzero(wb == k)
            out.append((ids_k, rows) if keys is None else (ids_k, rows, label[in_k], keys))
    return out, ng


def _split_by_group(result, ids_k, glab_k, keys, into: dict) -> None:
    """Store one accepted call's ``DT(S)`` (``result`` of :func:`fixup` on ``ids_k``) per group in ``into``
    (key -> tets, neighbours, keep): a tet goes to the group of its first vertex, neighbours outside the
    group become -1. Nothing is stored when a taken tet spans two groups (a grouping the final checks
    would judge as a whole; the call is then simply re-run)."""
    tets, nb, keep = result
    lab = glab_k[np.searchsorted(ids_k, tets)]  # [M, 4] group of each vertex
    if np.any(lab[keep] != lab[keep][:, :1]):
        return
    t_lab = lab[:, 0]
    order = np.argsort(t_lab, kind="stable")
    cut = np.r_[0, np.cumsum(np.bincount(t_lab, minlength=len(keys)))]
    new_row = np.empty(tets.shape[0], dtype=np.int64)
    for g in np.unique(t_lab):
        rows = order[cut[g] : cut[g + 1]]
        new_row[rows] = np.arange(rows.size)
        nb_g = nb[rows].astype(np.int64)
        inside = nb_g >= 0
        inside[inside] = t_lab[nb_g[inside]] == g
        into[keys[g]] = (tets[rows], np.where(inside, new_row[np.maximum(nb_g, 0)], -1), keep[rows])
