"""Partitioned, parallel Delaunay tetrahedralisation on top of Qhull: overlapping blocks, certified tets,
one exact fix-up. The engine behind :func:`meshlift.isosurface.delaunay.delaunay_tets_parallel`.

The approach is the classic "triangulate overlapping blocks, keep what an empty-sphere test certifies,
re-triangulate the rest" scheme of parallel Delaunay (Kohout, Kolingerová and Žára 2005, "Parallel
Delaunay triangulation in E2 and E3 for computers with shared memory"; Blelloch et al. 1999, "Design and
implementation of a practical parallel Delaunay algorithm"), with a fix-up step whose completeness is
proved below. Every triangulation is a call to scipy's Qhull (BSD); CGAL (GPL) is never used.

**1. Blocks.** A kd-split at point-count quantiles (always halving the longest side of the points' box)
cuts space into ``blocks`` half-open cells that tile R^3 (outer cells reach to infinity). Each cell ``b``
gets a margin ``m_b = margin * h_b``, ``h_b = (cell volume / core points)^(1/3)`` (the mean spacing,
cell clipped to the points' box), and its *halo set* ``P_b``: every point in the closed box ``E_b`` = cell
grown by ``m_b`` (on the outer sides ``E_b`` is unbounded: no point lies there).

**2. Certified tets.** Qhull triangulates each ``P_b`` (in a thread: Qhull releases the GIL). A local tet
``T`` (vertices sorted by global id, circumcentre ``c`` and radius ``r`` computed from them by one fixed
formula, so every block gets bit-identical values) is *kept* by block ``b`` when

* ``c`` lies in cell ``b`` (ownership: the cells tile space, so a tet is kept by one block at most);
* its ball lies in ``E_b`` (with a relative slack): every point that could be in the ball is in ``P_b``,
  and ``T`` has an empty ball in ``P_b``, so ``T``'s ball is empty of *all* points;
* it is well shaped (``|det| / L^3 > CERT_MIN_REL``) and robustly Delaunay: the far vertex of each of its
  4 local neighbours is outside the ball by ``max(CERT_INSPHERE * r^2, CERT_INSPHERE_ABS * D^2)`` (no
  5th point on or near the sphere, at Qhull's precision for the whole box of diagonal ``D``;
  any such point would be a vertex of a neighbour in the same Delaunay cell). Robust tets belong to
  *every* Delaunay triangulation, so all ties (co-spherical points: lattices, box corners) are left to
  step 3, where one Qhull call resolves them consistently.

The kept set ``A`` is therefore a set of distinct global Delaunay tets.

**3. Fix-up (exact, one step).** Faces of kept tets whose local neighbour was not kept are collected
from all blocks; a face reported twice is interior to ``A``; a face reported once is *open* (a hull face,
or a face next to a missing tet). Let ``S`` = the vertices of the open faces, the far vertices of their
kept tets and every point used by no kept tet (exact duplicates excepted). Every vertex of a missing
tet is in ``S``: a vertex used by some kept tet and some missing tet has an open face through it, since
the tets around a vertex are face-connected. So Qhull on ``S`` contains every missing tet (its ball is
empty of all points, hence of ``S``) and every kept tet next to an open face. Cutting ``DT(S)``'s
neighbour graph at the open faces leaves components that lie either in ``A``'s region or in the missing
region; at each open face the side whose far vertex is the kept tet's marks its component "kept", the
other side "missing". The result is ``A`` plus the missing components. A block whose Qhull call fails
(a flat piece) keeps nothing, so its region goes to ``S``. Any disagreement (a face not found in
``DT(S)``, a component marked both ways, a face kept 3 times) makes the engine fall back to one global
Qhull and say so in ``fallback``: the result is never silently wrong. If no tet is certified at all (a
lattice: every cell is a tie) the fix-up is that global call.

**Ties.** Where 5+ points are co-spherical (float32 box corners: the 4 corners of a box face are
concyclic, so with any 5th point they are co-spherical) the fix-up's Qhull may split a cell differently
from a global call, including ``Qt``'s flat tets; the result is still a Delaunay tetrahedralisation of
the hull (270k MILo-like pivots: 4 of 1.79M tets differ).

**Threads or processes.** Blocks run in a thread pool by default: scipy runs Qhull, its triangulation and
its output arrays without the GIL and the numpy work here releases it too, and threads share the
points without copies. ``executor="process"`` forks workers instead (points shared copy-on-write,
results pickled back, ~16 B per kept tet); it avoids in-process contention (allocator, page faults) but
forking a process that runs CUDA or other threads is only as safe as PyTorch's forked DataLoader.

**Cost and memory.** Work is ``N * (1 + halo overhead)`` in the blocks (overhead ~25-45% at the default
margin) plus Qhull on ``S`` (a few % of the points for volumetric clouds; the empty inside of a surface
and the convex hull's layer end up there). A block of ``n`` points (halo included) needs about 3 KB per
point inside Qhull plus ~1 KB per point here, so the peak is about ``workers * 4 KB * N * (1 + overhead)
/ blocks`` on top of the result (~7 tets per point, 32 B each in int64).

Measured on the 16-core H200 host (Intel Xeon, scipy 1.18.1; MILo-like pivots, ``benchmarks/delaunay_scale.py``,
48 blocks, 16 threads; before the ``CERT_INSPHERE_ABS`` guard): 270k points 3.8 s (one Qhull: 11.4 s), 1M
points 11.6 s (45.5 s), 86k points/s; the fix-up is ~6.5% of the points on a hollow shell (its inside and
its hull) and runs on one core (2.6 s at 1M). Forked processes were no faster (11.9 s at 1M). 5.4M was not
measured: that run hit a tie the guard now prevents and fell back to a global Qhull.

numpy/scipy only (no torch); the orientation of the result is done by the caller.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import time
from dataclasses import dataclass, field

import numpy as np

from meshlift.errors import MeshError

#: Kept tets need ``|det| / L^3`` above this (near-flat tets have ill-conditioned circumspheres).
CERT_MIN_REL = 1e-6
#: A kept tet's neighbours' far vertices must lie outside its ball by ``CERT_INSPHERE * r^2`` and by
#: ``CERT_INSPHERE_ABS * D^2`` (``D`` the diagonal of all points' box): Qhull's own tolerance for
#: co-sphericality scales with the box of its input, so the fix-up's Qhull (points spread over the whole
#: box) merges as ties some cells a small block resolved (seen at 5.4M pivots: a margin of 3e-14 D^2, which
#: made the fix-up disagree and fall back to one global Qhull; 1e-12 leaves 30x headroom, 1e-11 doubled
#: the fix-up there).
CERT_INSPHERE = 1e-9
CERT_INSPHERE_ABS = 1e-12
#: Relative slack on the radius in the ball-in-box test.
BALL_SLACK = 1e-7
#: Default halo width in units of a block's mean point spacing.
DEFAULT_MARGIN = 3.0
#: Default number of blocks per worker (load balance vs halo overhead).
BLOCKS_PER_WORKER = 3

# local index of the 3 vertices of the face opposite corner k
_FACE = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])


def default_workers() -> int:
    """Cores this process may use (``os.sched_getaffinity``), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass
class Partitioned:
    """What the engine returns (global point ids throughout).

    Attributes:
        kept: ``[MA, 4]`` int64 certified tets, positively oriented and well shaped (``|det| / L^3 >
            min_rel``).
        fix_tets, fix_neighbors: Qhull's ``DT(S)`` (global ids; neighbours index ``fix_tets``, -1 hull).
        fix_keep: ``[MS]`` bool, the tets of ``DT(S)`` that complete ``kept``.
        duplicates: ids of exact duplicate points (not the smallest id of their coordinates: unused).
        stats: counts and seconds per stage (for benchmarks and tests).
        fallback: why the engine fell back to one global Qhull ("" if it did not).
    """

    kept: np.ndarray
    fix_tets: np.ndarray
    fix_neighbors: np.ndarray
    fix_keep: np.ndarray
    duplicates: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    stats: dict = field(default_factory=dict)
    fallback: str = ""


class _Inconsistent(Exception):
    """The merged blocks and the fix-up disagree (ties beyond the tolerances, Qhull merging points)."""


# ----------------------------------------------------------------------------------------------- blocks


def _kd_split(pts: np.ndarray, ids: np.ndarray, lo, hi, k: int, pool=None, serial_k: int = 0):
    """Split ``ids`` into ``k`` cells at point-count quantiles. Returns a tree: a leaf ``[lo, hi, core_ids]``
    or ``(axis, s, left, right)`` (left: ``x[axis] < s``); subtrees of at most ``serial_k`` cells are split
    in ``pool`` (their place holds a future until :func:`_resolve`)."""
    if pool is not None and k <= serial_k:
        return pool.submit(_kd_split, pts, ids, lo, hi, k)
    if k <= 1 or ids.size < 64:
        return [lo, hi, ids]
    x = pts[ids]
    axis = int(np.argmax(x.max(axis=0) - x.min(axis=0)))
    kl = k // 2
    q = min(int(round(ids.size * kl / k)), ids.size - 1)
    s = float(np.partition(x[:, axis], q)[q])
    left = x[:, axis] < s
    if left.all() or not left.any():
        return [lo, hi, ids]
    lhi, rlo = hi.copy(), lo.copy()
    lhi[axis] = s
    rlo[axis] = s
    left_tree = _kd_split(pts, ids[left], lo, lhi, kl, pool, serial_k)
    return (axis, s, left_tree, _kd_split(pts, ids[~left], rlo, hi, k - kl, pool, serial_k))


def _resolve(tree):
    if isinstance(tree, cf.Future):
        return tree.result()
    if isinstance(tree, tuple):
        return (tree[0], tree[1], _resolve(tree[2]), _resolve(tree[3]))
    return tree


def _leaves(tree) -> list:
    return [tree] if isinstance(tree, list) else _leaves(tree[2]) + _leaves(tree[3])


def _gather(pts, ids, tree, pool=None, serial_n: int = 0) -> list:
    """Append to every leaf the points of ``ids`` in its cell grown by its margin ``leaf[3]`` (closed box);
    returns futures of the subtrees of at most ``serial_n`` candidate points sent to ``pool``."""
    if pool is not None and ids.size <= serial_n:
        return [pool.submit(_gather, pts, ids, tree)]
    if isinstance(tree, list):
        lo, hi, _, m = tree[:4]
        inside = np.all((pts[ids] >= lo - m) & (pts[ids] <= hi + m), axis=1)
        tree.append(ids[inside])
        return []
    axis, s, left, right = tree
    x = pts[ids, axis]
    ml = max(leaf[3] for leaf in _leaves(left))
    mr = max(leaf[3] for leaf in _leaves(right))
    return (_gather(pts, ids[x <= s + ml], left, pool, serial_n)
            + _gather(pts, ids[x >= s - mr], right, pool, serial_n))


def partition(pts: np.ndarray, blocks: int, margin: float, pool=None, workers: int = 1):
    """``(lo, hi, halo_ids, m)`` per block: the cell (±inf outside), its halo set and margin (absolute).
    With a ``pool``, subtrees are split and gathered in its threads."""
    n = pts.shape[0]
    serial_k = max(1, blocks // max(2 * workers, 1)) if pool is not None else 0
    tree = _resolve(_kd_split(pts, np.arange(n), np.full(3, -np.inf), np.full(3, np.inf), blocks, pool, serial_k))
    leaves = _leaves(tree)
    pmin, pmax = pts.min(axis=0), pts.max(axis=0)
    tiny = 1e-9 * max(float((pmax - pmin).max()), 1e-300)
    for leaf in leaves:
        lo, hi, core = leaf
        side = np.maximum(np.minimum(hi, pmax) - np.maximum(lo, pmin), tiny)
        leaf.append(margin * (float(np.prod(side)) / max(core.size, 1)) ** (1.0 / 3.0))
    for f in _gather(pts, np.arange(n), tree, pool, max(1, n // max(2 * workers, 1)) if pool is not None else 0):
        f.result()
    return [(leaf[0], leaf[1], leaf[4], float(leaf[3])) for leaf in leaves]


def _circumspheres(xyz: np.ndarray, tets: np.ndarray):
    """Centres ``[B, 3]``, squared radii ``[B]`` and ``det / L^3`` ``[B]`` of ``tets`` ``[B, 4]`` (rows into
    ``xyz`` ``[n, 3]``; ``det = det(p1 - p0, p2 - p0, p3 - p0)``, ``L`` the longest edge).

    Elementwise float64 arithmetic in a fixed order on per-coordinate columns, so equal vertex rows give
    bit-identical centres in every block. NaN / inf for flat tets.
    """
    cols = [np.ascontiguousarray(xyz[:, j])[tets] for j in range(3)]  # 3 x [B, 4]
    a = [c[:, 1] - c[:, 0] for c in cols]
    b = [c[:, 2] - c[:, 0] for c in cols]
    c = [c[:, 3] - c[:, 0] for c in cols]

    def cross(u, v):
        return (u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0])

    def dot(u, v):
        return u[0] * v[0] + u[1] * v[1] + u[2] * v[2]

    bc, ca, ab = cross(b, c), cross(c, a), cross(a, b)
    det = dot(a, bc)
    aa, bb, cc = dot(a, a), dot(b, b), dot(c, c)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 0.5 / det
        off = [(aa * bc[j] + bb * ca[j] + cc * ab[j]) * inv for j in range(3)]
    centre = np.stack([cols[j][:, 0] + off[j] for j in range(3)], axis=1)
    r2 = dot(off, off)
    e = [[v[j] - u[j] for j in range(3)] for u, v in ((a, b), (a, c), (b, c))]
    l2 = np.maximum.reduce([aa, bb, cc] + [dot(x, x) for x in e])
    rel = det / np.maximum(l2 * np.sqrt(l2), np.finfo(np.float64).tiny)
    return centre, r2, rel


def _dedup(xyz: np.ndarray, ids: np.ndarray):
    """Drop exact duplicate points, keeping the smallest global id of each coordinate (the same choice in
    every block, since duplicates share their blocks). Returns ``(keep_mask, duplicate_ids)``."""
    order = np.lexsort((xyz[:, 2], xyz[:, 1], xyz[:, 0]))
    s = xyz[order]
    same = np.all(s[1:] == s[:-1], axis=1)
    keep = np.ones(ids.size, dtype=bool)
    if not same.any():
        return keep, ids[:0]
    start = np.r_[True, ~same]
    gid = ids[order]
    canon = np.minimum.reduceat(gid, np.flatnonzero(start))[np.cumsum(start) - 1]
    dup = gid != canon
    keep[order[dup]] = False
    return keep, gid[dup]


def _far_vertex(simp: np.ndarray, t: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Local index of the vertex of tet ``n`` that is not in tet ``t`` (they share a face)."""
    sn = simp[n]
    shared = (sn[:, :, None] == simp[t][:, None, :]).any(axis=2)
    return sn[np.arange(n.size), np.argmin(shared, axis=1)]


def _block(pts, ids, lo, hi, margin_abs, options, min_rel, tie_abs):
    """Triangulate one halo set. Returns ``(kept, faces, far, duplicates, stats)``: the kept tets
    (global ids, positively oriented, int32 when the ids fit), the candidate open faces (sorted id
    triples) with the far vertex of their kept tet, and the exact duplicates dropped here."""
    from scipy.spatial import Delaunay, QhullError

    t0 = time.perf_counter()
    xyz = pts[ids]
    keep, dups = _dedup(xyz, ids)
    if not keep.all():
        xyz, ids = xyz[keep], ids[keep]
    empty = (np.zeros((0, 4), np.int64), np.zeros((0, 3), np.int64), np.zeros(0, np.int64), dups)
    if ids.size < 5:
        return empty + ({"qhull_error": 0, "local_tets": 0, "flipped": 0, "seconds": 0.0},)
    try:
        d = Delaunay(xyz, qhull_options=options)
    except QhullError:  # a flat or tiny block: its region goes to the fix-up
        return empty + ({"qhull_error": 1, "local_tets": 0, "flipped": 0, "seconds": time.perf_counter() - t0},)
    simp = d.simplices.astype(np.int64)
    nb = d.neighbors.astype(np.int64)
    del d
    order = np.argsort(ids[simp], axis=1)
    ls = np.take_along_axis(simp, order, axis=1)
    centre, r2, rel = _circumspheres(xyz, ls)
    # ownership: the circumcentre lies in this half-open cell (NaN centres belong to nobody)
    own = np.all((centre >= lo) & (centre < hi), axis=1)
    ok = own & (np.abs(rel) > min_rel)
    r = np.sqrt(r2) * (1.0 + BALL_SLACK)
    with np.errstate(invalid="ignore"):
        ok &= np.all(
            (centre - r[:, None] >= lo - margin_abs) & (centre + r[:, None] <= hi + margin_abs), axis=1)
    cand = np.flatnonzero(ok)
    for k in range(4):  # robustness: no 5th point on or near the sphere
        n = nb[cand, k]
        has = n >= 0
        t_idx, n_idx = cand[has], n[has]
        q = xyz[_far_vertex(simp, t_idx, n_idx)]
        dq = q - centre[t_idx]
        bad = (dq * dq).sum(axis=1) - r2[t_idx] <= np.maximum(CERT_INSPHERE * r2[t_idx], tie_abs)
        ok[t_idx[bad]] = False
        cand = np.flatnonzero(ok)
    kept = ids[ls[cand]].astype(np.int32 if pts.shape[0] < 2**31 else np.int64)
    neg = rel[cand] < 0  # orient: swap the last two ids of negative tets
    kept[neg, 2:] = kept[neg][:, [3, 2]]
    # candidate open faces: faces of kept tets whose local neighbour is not kept
    faces, far = [], []
    for k in range(4):
        n = nb[cand, k]
        open_ = n < 0
        open_[~open_] = ~ok[n[~open_]]
        t = cand[open_]
        faces.append(ids[simp[t][:, _FACE[k]]])
        far.append(ids[simp[t, k]])
    faces = np.sort(np.concatenate(faces), axis=1)
    far = np.concatenate(far)
    st = {"qhull_error": 0, "local_tets": int(simp.shape[0]), "flipped": int(neg.sum()),
          "seconds": time.perf_counter() - t0}
    return kept, faces, far, dups, st


_PTS = None  # the points of the running call, for forked worker processes (copy-on-write)


def _block_forked(ids, lo, hi, margin_abs, options, min_rel, tie_abs):
    return _block(_PTS, ids, lo, hi, margin_abs, options, min_rel, tie_abs)


# ------------------------------------------------------------------------------------------------ fix-up


def _face_keys(faces: np.ndarray, n: int) -> np.ndarray:
    """Keys of sorted index triples (``faces < n``): int64 when ``n^3 < 2^62``, else (hi, lo) records."""
    faces = faces.astype(np.int64)
    if n < (1 << 20):
        return (faces[:, 0] * n + faces[:, 1]) * n + faces[:, 2]
    key = np.empty(faces.shape[0], dtype=[("h", "<i8"), ("l", "<i8")])
    key["h"] = faces[:, 0] * n + faces[:, 1]
    key["l"] = faces[:, 2]
    return key


def _open_faces(faces: np.ndarray, far: np.ndarray, n: int):
    """Faces reported once (open) with their far vertex; raises on a face reported 3+ times."""
    if faces.shape[0] == 0:
        return faces, far
    key = _face_keys(faces, n)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    start = np.r_[True, ks[1:] != ks[:-1]]
    run = np.cumsum(start) - 1
    count = np.bincount(run)
    if count.max() > 2:
        raise _Inconsistent("a face is shared by 3+ kept tets")
    pair = np.flatnonzero(count == 2)
    first = order[np.flatnonzero(start)[pair]]
    if np.any(far[first] == far[order[np.flatnonzero(start)[pair] + 1]]):
        raise _Inconsistent("a tet was kept by two blocks")
    single = order[count[run] == 1]
    return faces[single], far[single]


def _fixup(pts, s_ids, walls, wall_far, options):
    """Qhull on ``pts[s_ids]`` and the mask of its tets that fill the missing region (module docstring)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import Delaunay, QhullError

    try:
        d = Delaunay(pts[s_ids], qhull_options=options)
    except QhullError as exc:
        raise _Inconsistent(f"Qhull failed on the {s_ids.size} fix-up points: {str(exc).splitlines()[0]}") from None
    simp = d.simplices.astype(np.int64)
    nb = d.neighbors.astype(np.int64)
    del d
    m = simp.shape[0]
    if walls.shape[0] == 0:
        return s_ids[simp], nb, np.ones(m, dtype=bool)
    # walls in local indices of S (all their vertices are in S by construction)
    loc = np.searchsorted(s_ids, walls)
    loc_far = np.searchsorted(s_ids, wall_far)
    # every face of DT(S) once: (tet, corner) with tet < neighbour or on the hull
    t_all = np.repeat(np.arange(m), 4)
    k_all = np.tile(np.arange(4), m)
    n_all = nb.reshape(-1)
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
        raise _Inconsistent("an open face of the kept tets is not a face of the fix-up triangulation")
    fi = order[pos]
    t_side, n_side = t_f[fi], n_f[fi]
    far_t = simp[t_side, k_f[fi]]
    kept_is_t = far_t == loc_far
    far_n = np.where(n_side >= 0, _far_vertex(simp, t_side, np.maximum(n_side, 0)), -1)
    if not np.all(kept_is_t | (far_n == loc_far)):
        raise _Inconsistent("a kept tet next to an open face is missing from the fix-up triangulation")
    kept_side = np.where(kept_is_t, t_side, n_side)
    miss_side = np.where(kept_is_t, n_side, t_side)
    # components of DT(S) with the open faces cut
    is_wall = np.zeros(t_f.size, dtype=bool)
    is_wall[fi] = True
    e = (~is_wall) & (n_f >= 0)
    g = coo_matrix((np.ones(int(e.sum()), dtype=np.int8), (t_f[e], n_f[e])), shape=(m, m))
    _, label = connected_components(g, directed=False)
    kept_lab = np.zeros(label.max() + 1, dtype=bool)
    kept_lab[label[kept_side]] = True
    miss_lab = np.zeros_like(kept_lab)
    miss_lab[label[miss_side[miss_side >= 0]]] = True
    if (kept_lab & miss_lab).any():
        raise _Inconsistent("a fix-up component lies on both sides of the kept tets")
    if not (kept_lab | miss_lab).all():
        raise _Inconsistent("a fix-up component touches no open face")
    return s_ids[simp], nb, miss_lab[label]


# -------------------------------------------------------------------------------------------------- main


def _global(pts, options, why: str, stats: dict, t0: float) -> Partitioned:
    from scipy.spatial import Delaunay, QhullError

    try:
        d = Delaunay(pts, qhull_options=options)
    except QhullError as exc:
        raise MeshError(
            f"delaunay_tets_parallel: Qhull failed on {pts.shape[0]} points (all coplanar or duplicated?): "
            f"{str(exc).splitlines()[0] if str(exc) else exc}"
        ) from None
    simp = d.simplices.astype(np.int64)
    stats.update(fix_points=pts.shape[0], fix_tets=simp.shape[0], seconds=time.perf_counter() - t0)
    return Partitioned(
        kept=np.zeros((0, 4), np.int64), fix_tets=simp, fix_neighbors=d.neighbors.astype(np.int64),
        fix_keep=np.ones(simp.shape[0], dtype=bool), stats=stats, fallback=why,
    )


def _run_blocks(pts, parts, workers, options, min_rel, timeout_s, executor) -> list:
    """Run :func:`_block` on every part in ``workers`` threads (or forked processes); biggest first."""
    global _PTS
    tie_abs = CERT_INSPHERE_ABS * float((np.ptp(pts, axis=0) ** 2).sum())
    order = sorted(range(len(parts)), key=lambda i: -parts[i][2].size)
    if executor == "process":
        import multiprocessing as mp

        _PTS = pts  # inherited by the forked workers
        pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork"))
        submit = lambda p: pool.submit(_block_forked, p[2], p[0], p[1], p[3], options, min_rel, tie_abs)  # noqa: E731
    else:
        pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="meshlift-delaunay-block")
        submit = lambda p: pool.submit(_block, pts, p[2], p[0], p[1], p[3], options, min_rel, tie_abs)  # noqa: E731
    results = [None] * len(parts)
    done = False
    try:
        futs = {submit(parts[i]): i for i in order}
        for f in cf.as_completed(futs, timeout=timeout_s):
            results[futs[f]] = f.result()
        done = True
    except cf.TimeoutError:
        raise MeshError(
            f"delaunay_tets_parallel: the {len(parts)} blocks did not finish within timeout_s={timeout_s} s; "
            "raise timeout_s or use more workers"
        ) from None
    except (MemoryError, cf.process.BrokenProcessPool):
        raise MeshError(
            f"delaunay_tets_parallel: a block of ~{max(p[2].size for p in parts):,} points ran out of memory "
            f"with workers={workers}; raise blocks (now {len(parts)}) or lower workers"
        ) from None
    finally:  # never wait for blocks after a failure (running Qhull calls end on their own)
        pool.shutdown(wait=done, cancel_futures=True)
        _PTS = None
    return results


def partitioned_delaunay(
    pts: np.ndarray,
    *,
    workers: int | None = None,
    blocks: int | None = None,
    margin: float = DEFAULT_MARGIN,
    options: str | None = None,
    timeout_s: float | None = None,
    min_rel: float = CERT_MIN_REL,
    executor: str = "thread",
) -> Partitioned:
    """Delaunay tets of ``pts`` (``[N, 3]`` float64, finite) by overlapping blocks (module docstring).

    Args:
        pts: ``[N, 3]`` float64 C-contiguous points.
        workers: threads (or processes) running Qhull on the blocks (None: the cores this process may use).
        blocks: number of blocks (None: ``BLOCKS_PER_WORKER * workers``, at least 2).
        margin: halo width in units of a block's mean point spacing (> 0).
        options: Qhull options (None: scipy's default).
        timeout_s: seconds to wait for all blocks (None: no limit).
        min_rel: kept tets have ``|det| / L^3`` above this (``CERT_MIN_REL`` at least).
        executor: ``"thread"`` (default; Qhull releases the GIL, nothing is copied) or ``"process"``
            (forked workers: the points are shared copy-on-write, results come back pickled).

    Raises:
        MeshError: bad knobs, blocks past ``timeout_s`` or out of memory, or Qhull failing on the whole set.
    """
    t0 = time.perf_counter()
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise MeshError(f"delaunay_tets_parallel: workers must be >= 1, got {workers}")
    blocks = max(2, BLOCKS_PER_WORKER * workers) if blocks is None else int(blocks)
    if blocks < 1:
        raise MeshError(f"delaunay_tets_parallel: blocks must be >= 1, got {blocks}")
    if not margin > 0:
        raise MeshError(f"delaunay_tets_parallel: margin must be > 0 (halo width in point spacings), got {margin!r}")
    if executor not in ("thread", "process"):
        raise MeshError(f"delaunay_tets_parallel: executor must be 'thread' or 'process', got {executor!r}")
    n = pts.shape[0]
    stats: dict = {"points": n, "workers": workers, "blocks": 0, "executor": executor}
    if blocks == 1 or n < 64:
        return _global(pts, options, "one block", stats, t0)
    with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="meshlift-delaunay-split") as pool:
        parts = partition(pts, blocks, margin, pool if workers > 1 else None, workers)
    stats["blocks"] = len(parts)
    stats["halo_points"] = int(sum(p[2].size for p in parts))
    stats["partition_s"] = time.perf_counter() - t0
    results = _run_blocks(pts, parts, workers, options, max(min_rel, CERT_MIN_REL), timeout_s, executor)
    stats["blocks_s"] = time.perf_counter() - t0 - stats["partition_s"]
    t1 = time.perf_counter()
    kept = np.concatenate([r[0] for r in results]).astype(np.int64)
    dups = np.unique(np.concatenate([r[3] for r in results]))
    for key in ("qhull_error", "local_tets", "flipped"):
        stats[key] = int(sum(r[4][key] for r in results))
    stats["kept_tets"] = int(kept.shape[0])
    stats["block_seconds"] = [round(r[4]["seconds"], 3) for r in results]
    if kept.shape[0] == 0:
        return _global(pts, options, "no block certified a tet", stats, t0)
    try:
        walls, wall_far = _open_faces(np.concatenate([r[1] for r in results]),
                                      np.concatenate([r[2] for r in results]), n)
        del results
        used = np.zeros(n, dtype=bool)
        used[kept.reshape(-1)] = True
        used[dups] = True
        s_ids = np.unique(np.concatenate([walls.reshape(-1), wall_far, np.flatnonzero(~used)]))
        stats["open_faces"] = int(walls.shape[0])
        stats["fix_points"] = int(s_ids.size)
        stats["merge_s"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        fix_tets, fix_nb, fix_keep = _fixup(pts, s_ids, walls, wall_far, options)
        stats["fix_s"] = time.perf_counter() - t2
    except _Inconsistent as exc:
        return _global(pts, options, f"blocks inconsistent ({exc})", stats, t0)
    stats["fix_tets"] = int(fix_keep.sum())
    stats["seconds"] = time.perf_counter() - t0
    return Partitioned(kept=kept, fix_tets=fix_tets, fix_neighbors=fix_nb, fix_keep=fix_keep, duplicates=dups,
                       stats=stats)
