"""Partitioned, parallel Delaunay tetrahedralisation on top of Qhull: overlapping blocks, tets certified
by an empty-sphere test against all points, the rest re-triangulated exactly in parallel groups. The
engine behind :func:`meshlift.isosurface.delaunay.delaunay_tets_parallel`.

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
* its ball is empty of all points: either it lies in ``E_b`` (with a relative slack; every point that
  could be in it is in ``P_b``, where the local Delaunay property holds), or, for a ball that pokes out
  of ``E_b`` and has ``r <= KD_MAX_RADIUS * h_b``, a k-d tree over all points finds no point but the 4
  vertices in the ball grown by the tie margin below (:mod:`meshlift.isosurface.delaunay_certify`). The
  tree is what lets the halo be thin (``DEFAULT_MARGIN`` = 1 spacing);
* it is well shaped (``|det| / L^3 > CERT_MIN_REL``) and robustly Delaunay: the far vertex of each of its
  4 local neighbours (and, for tree-certified tets, every point) is outside the ball by
  ``max(CERT_INSPHERE * r^2, CERT_INSPHERE_ABS * D^2)`` (no 5th point on or near the sphere, at Qhull's
  precision for the whole box of diagonal ``D``). Robust tets belong to *every* Delaunay triangulation,
  so all ties (co-spherical points: lattices, box corners) are left to step 3.

The kept set ``A`` is therefore a set of distinct global Delaunay tets.

**3. Fix-up (exact).** Faces of kept tets whose local neighbour was not kept are collected from all
blocks; a face reported twice is interior to ``A``; a face reported once is *open* (a hull face, or a
face next to a missing tet). Let ``S`` = the vertices of the open faces and every point used by no kept
tet (exact duplicates excepted). Every vertex of a missing tet is in ``S``: a vertex used by some kept
tet and some missing tet has an open face through it, since the tets around a vertex are
face-connected. So Qhull on ``S`` contains every missing tet (its ball is empty of all points, hence of
``S``), and every open face that is not on the hull of all points is a face of a missing tet, hence of
``DT(S)``. Cutting ``DT(S)``'s neighbour graph at the open faces leaves components that lie either in
``A``'s region or in the missing region. At each open face the side is decided by orientation: the kept
tet's far vertex (not in ``S``) lies on the kept side, so the ``DT(S)`` tet across the face whose far
vertex lies on the other side (``|det| / L^3 > SIDE_MIN_REL``; if it is a flat tie tet, its well-shaped
neighbour across the face decides) marks its component "missing", the other one "kept". The result is
``A`` plus the missing components. First, the *slivers* along the seams are demoted
(:mod:`delaunay_demote`): kept tets with ``|det| / L^3 < 1e-3`` and 3+ vertices on open faces go back to
the fix-up, up to ``SLIVER_PASSES`` passes (``A`` minus some of its tets is still a set of Delaunay tets, so
the proof holds; the new open faces' sides are by orientation). They were where the skins' Qhull merged
ties and disagreed with the blocks (5.4M pivots: 4 repair rounds before).

The same holds for any union of whole *holes* (connected pieces of the missing region): its tets are in
Qhull of the open faces around it and the unused points inside it. So ``S`` is split into *groups*: the
open faces connected through shared vertices (a hole's boundary); each unused point linked to its
``UNUSED_LINKS`` nearest fix-up points; every group with a point on the convex hull (a Qhull vertex or
coplanar point) joined into one (a hole along the hull may have an open-face boundary in pieces joined only
by hull faces). The small holes stay groups of their own (``delaunay_fixup.JOIN_TINY_GROUPS = False``: a
hollow shell of 5.4M pivots has ~100k groups, ~124k tiny holes along its two skins and one big hole per
skin), packed into at most ``2 * workers`` Qhull calls run in threads. Grouping can still be wrong where
a hole's boundary is disconnected otherwise (a kept island inside a hole), so the grouped result is
*accepted* only if (a) no face lies in 3+ fix-up tets and no fix-up tet is repeated, (b) the faces lying in
one fix-up tet are exactly the open faces, except faces on the convex hull of the points, and (c) the
fix-up tets' volume plus the kept tets' volume is the hull's volume (relative ``ACCEPT_VOLUME_REL``: no
overlap). If a check fails (or a call fails without naming points), the round is redone with the
reference grouping, each tiny group (``< MIN_GROUP_POINTS``) joined to the one big group nearest to it (a
shell: two calls, its inside and its hull layer); if that fails a check too, the engine redoes the fix-up
as one Qhull call on ``S`` (the proof above). Where a fix-up call disagrees with the kept tets at known points (an open
face missing from ``DT(S)``: Qhull merges near-co-spherical facets of a big, nearly spherical ``S``, as at
5.4M pivots on a shell) the engine *grows* the missing region instead: it drops the kept tets within 2
vertex rings of those points (their faces become open faces, the kept side opposite their 4th vertex) and
redoes the grouped fix-up, up to ``REPAIR_ROUNDS`` times, re-running only the groups that failed or that the
grown region changed (``REUSE_GROUPS``: a group with the same points, open faces and sides as in a call
that succeeded keeps that call's tets; checks (a)-(c) are made on the union, and a union that fails them
empties the store so the next round re-runs all groups); the result is still ``A`` minus the dropped tets
plus the missing components of the bigger region. A failing call's ``DT(S)`` is not thrown away
(``SALVAGE``): its well-shaped tets outside 2 vertex rings of the points where it disagreed, in the
components (cut at the open faces and at the tets left out) that touch open faces only on their missing
side, are the missing tets there by the proof above; they are *promoted* to kept tets (the open faces are
updated by face parity, each new open face's kept side is its promoted tet's), so the next round
re-triangulates only the region around the disagreement, not the failing group (on a hollow shell: a few
thousand points instead of a ~310k-point skin). The last round's checks (a)-(c) cover the promoted tets
(they count in the kept volume and bound the open faces); a promotion that does not fit (a face in 3+
tets, a promoted tet on an open face's kept side) is skipped and the round grows as before. Only when that
fails too (a face kept 3 times, no points named) does it fall back to one global Qhull; either fallback is
named in ``fallback`` and warned about by the caller (:class:`~meshlift.errors.MeshliftWarning`): the
result is never silently wrong. A block whose Qhull call fails (a flat piece) keeps nothing, so its region
goes to ``S``. If no tet is certified at all (a lattice: every cell is a tie) the fix-up is one global call.

**Ties.** Where 5+ points are co-spherical (float32 box corners: the 4 corners of a box face are
concyclic, so with any 5th point they are co-spherical) the fix-up's Qhull may split a cell differently
from a global call, including ``Qt``'s flat tets; the result is still a Delaunay tetrahedralisation of
the hull (270k MILo-like pivots: a few of 1.79M tets differ).

**Threads or processes.** Blocks run in a thread pool by default: scipy runs Qhull, its triangulation,
the k-d tree's build and queries without the GIL and the numpy work here releases it too, and threads
share the points without copies. The tree is built in its own thread while the first blocks run.
``executor="process"`` forks workers instead (points and tree shared copy-on-write, results pickled
back); forking a process that runs CUDA or other threads is only as safe as PyTorch's forked DataLoader.

**Cost and memory.** Work is ``N * (1 + halo overhead)`` in the blocks plus the tree (~``N log N``,
built once, queried for the poking balls only) plus Qhull on ``S`` in groups (on a hollow shell ``S``
is its inner and outer skins: ~5% of the points of MILo-like pivots, two big groups). Indices are int32
throughout (int64 only for ``N >= 2^31``). :func:`estimate_memory_gb` gives the peak: the points and the
tree, ``workers`` blocks of ``N (1 + overhead) / blocks`` points at ~4 KB each inside Qhull, the tets
(~6.7 per point, 16 B each, three copies at the merge) and the fix-up; ``memory_gb`` is checked against it
up front (:class:`~meshlift.errors.OutOfMemoryError` naming ``blocks`` and ``memory_gb``).

**Serial work.** Passes over all kept tets run in ``workers`` threads (:mod:`delaunay_rows`); the hull of
all points (= the hull of ``S``) is computed once, in a thread while the blocks run (:func:`start_hull`);
faces match by one int64 key (``delaunay_rows.FACE_KEY_BITS``); the kd-split and the halo gather run level
by level in the thread pool (:mod:`delaunay_partition`). The output is unchanged.

numpy/scipy only (no torch); the orientation of the fix-up tets is done by the caller.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
from concurrent.futures.process import BrokenProcessPool
import time
from dataclasses import dataclass, field

import numpy as np

from meshlift.errors import MeshError, OutOfMemoryError
from meshlift.isosurface import delaunay_certify as _cert
from meshlift.isosurface import delaunay_demote as _dem
from meshlift.isosurface import delaunay_fixup as _fix
from meshlift.isosurface import delaunay_rows as _rows
from meshlift.isosurface.delaunay_partition import partition  # noqa: F401 (re-exported)
from meshlift.isosurface.delaunay_fixup import _FACE, _far_vertex, _idx_dtype, _Inconsistent

#: Kept tets need ``|det| / L^3`` above this (near-flat tets have ill-conditioned circumspheres).
CERT_MIN_REL = 1e-6
#: A kept tet's neighbours' far vertices (tree-certified: all points) must lie outside its ball by
#: ``CERT_INSPHERE * r^2`` and by ``CERT_INSPHERE_ABS * D^2`` (``D`` the diagonal of all points' box):
#: Qhull's own tolerance for co-sphericality scales with the box of its input, so the fix-up's Qhull
#: (points spread over the whole box) merges as ties some cells a small block resolved (seen at 5.4M
#: pivots: a margin of 3e-14 D^2 made the fix-up disagree; 1e-12 leaves 30x headroom).
CERT_INSPHERE = 1e-9
CERT_INSPHERE_ABS = 1e-12
#: Relative slack on the radius in the ball-in-box test.
BALL_SLACK = 1e-7
#: Default halo width in units of a block's mean point spacing (thin: poking balls go to the k-d tree).
DEFAULT_MARGIN = 1.0
#: Balls poking out of the halo box are checked with the k-d tree up to this radius (in mean spacings
#: ``h_b``); bigger ones (tets across empty space) go to the fix-up.
KD_MAX_RADIUS = 6.0
#: Qhull options of the blocks and of the grouped fix-up when the caller gives none: scipy's 3-D default
#: plus ``Q5`` (skip Qhull's final check of all points against the outer planes: the same simplices, ~13%
#: less Qhull time on 50k-point blocks; kept tets are certified here anyway, the grouped fix-up checked).
FAST_OPTIONS = "Qbb Qc Qz Q12 Q5"
#: Rounds of growing the fix-up region around points where a fix-up disagreed before one global Qhull.
REPAIR_ROUNDS = 8
#: A repair round re-runs only the fix-up groups that failed or changed (the others' tets are kept from
#: their round and the union is checked); False: every round re-runs all groups (the reference).
REUSE_GROUPS = True
#: A repair round keeps the failing calls' ``DT(S)`` tets away from the points where they disagreed
#: (``delaunay_fixup.salvage_tets``, promoted to kept tets) and re-triangulates only the region around those
#: points; False: the failing groups are re-run whole (the reference).
SALVAGE = True
#: Vertex rings of kept tets dropped around the points where a fix-up call disagreed, per repair round.
DEMOTE_RINGS = 2
#: Default number of blocks per worker (load balance vs halo overhead).
BLOCKS_PER_WORKER = 3
#: Memory model of :func:`estimate_memory_gb`: bytes per point inside one Qhull call (scipy's Qhull plus
#: the arrays here), tets per point, halo overhead per unit margin and per cube root of the block count,
#: fraction of points in the fix-up.
QHULL_BYTES_PER_POINT = 4096
TETS_PER_POINT = 6.8
HALO_PER_MARGIN = 0.07
FIX_FRACTION = 0.12



def default_workers() -> int:
    """Cores this process may use (``os.sched_getaffinity``), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available_memory_gb() -> float:
    """The host's available memory in GB (``MemAvailable`` of /proc/meminfo, else physical memory; inf
    when neither can be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (AttributeError, ValueError, OSError):
        return float("inf")


def estimate_memory_gb(n: int, workers: int, blocks: int, margin: float) -> float:
    """Estimated peak memory (GB) of :func:`partitioned_delaunay` on ``n`` points (module docstring):
    points + tree (~56 B per point), halo ids, ``min(workers, blocks)`` Qhull calls on blocks of
    ``n (1 + overhead) / blocks`` points at ``QHULL_BYTES_PER_POINT`` each, ``TETS_PER_POINT`` int32 tets
    per point in three copies, and the fix-up's Qhull on ``FIX_FRACTION * n`` points."""
    overhead = min(HALO_PER_MARGIN * margin * max(blocks, 1) ** (1.0 / 3.0), 8.0)
    per_block = n * (1.0 + overhead) / max(blocks, 1)
    idx = 4 if n < 2**31 else 8
    total = (56.0 * n + 8.0 * n * (1.0 + overhead)
             + min(workers, blocks) * per_block * QHULL_BYTES_PER_POINT
             + 3 * TETS_PER_POINT * n * 4 * idx
             + FIX_FRACTION * n * QHULL_BYTES_PER_POINT)
    return total / 2**30


@dataclass
class Partitioned:
    """What the engine returns (global point ids throughout; int32 when ``N < 2^31``, else int64).

    Attributes:
        kept: ``[MA, 4]`` certified tets, positively oriented and well shaped (``|det| / L^3 > min_rel``).
        fix_tets, fix_neighbors: the fix-up Qhull calls' tets (global ids) and neighbours (indices into
            ``fix_tets``, -1 on a call's hull), the calls concatenated.
        fix_keep: ``[MS]`` bool, the tets of ``fix_tets`` that complete ``kept``.
        duplicates: ids of exact duplicate points (not the smallest id of their coordinates: unused).
        stats: counts and seconds per stage (for benchmarks and tests).
        fallback: which fallback was taken and why ("" if none): ``"one fix-up group (...)"`` when the
            grouped fix-up failed a check, ``"blocks inconsistent (...)"`` when one global Qhull was used.
    """

    kept: np.ndarray
    fix_tets: np.ndarray
    fix_neighbors: np.ndarray
    fix_keep: np.ndarray
    duplicates: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    stats: dict = field(default_factory=dict)
    fallback: str = ""


# ----------------------------------------------------------------------------------------------- blocks


def _circumspheres(xyz: np.ndarray, tets: np.ndarray, with_det: bool = False):
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
    return (centre, r2, rel, det) if with_det else (centre, r2, rel)


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


def _block(pts, ids, lo, hi, margin_abs, options, min_rel, tie_abs, tree=None, spacing=0.0):
    """Triangulate one halo set. Returns ``(kept, faces, far, duplicates, stats)``: the kept tets
    (global ids, positively oriented), the candidate open faces (sorted id triples) with the far vertex
    of their kept tet, and the exact duplicates dropped here. ``tree`` (a :func:`delaunay_certify.build_tree`
    or a future of one) certifies balls poking out of the halo box up to ``KD_MAX_RADIUS * spacing``."""
    from scipy.spatial import Delaunay, QhullError

    t0 = time.perf_counter()
    idt = _idx_dtype(pts.shape[0])
    xyz = pts[ids]
    keep, dups = _dedup(xyz, ids)
    if not keep.all():
        xyz, ids = xyz[keep], ids[keep]
    st = {"qhull_error": 0, "local_tets": 0, "flipped": 0, "kd_queries": 0, "kd_kept": 0, "kept_volume": 0.0}
    empty = (np.zeros((0, 4), idt), np.zeros((0, 3), idt), np.zeros(0, idt), dups)
    if ids.size < 5:
        return empty + (dict(st, seconds=time.perf_counter() - t0),)
    try:
        d = Delaunay(xyz, qhull_options=options)
    except QhullError:  # a flat or tiny block: its region goes to the fix-up
        return empty + (dict(st, qhull_error=1, seconds=time.perf_counter() - t0),)
    simp = d.simplices
    nb = d.neighbors
    del d
    order = np.argsort(ids[simp], axis=1)
    ls = np.take_along_axis(simp, order, axis=1)
    centre, r2, rel, det = _circumspheres(xyz, ls, with_det=True)
    # ownership: the circumcentre lies in this half-open cell (NaN centres belong to nobody)
    own = np.all((centre >= lo) & (centre < hi), axis=1)
    ok = own & (np.abs(rel) > min_rel)
    r = np.sqrt(r2) * (1.0 + BALL_SLACK)
    with np.errstate(invalid="ignore"):
        inbox = np.all(
            (centre - r[:, None] >= lo - margin_abs) & (centre + r[:, None] <= hi + margin_abs), axis=1)
        poke = np.flatnonzero(ok & ~inbox & (r <= KD_MAX_RADIUS * spacing)) if tree is not None else []
    if len(poke):  # balls poking out of the halo box: ask the k-d tree over all points
        t = tree.result() if isinstance(tree, cf.Future) else tree
        empty_ball = _cert.empty_ball(t, centre[poke], r2[poke], ids[ls[poke]],
                                      np.maximum(CERT_INSPHERE * r2[poke], tie_abs))
        inbox[poke] = empty_ball
        st["kd_queries"], st["kd_kept"] = int(poke.size), int(empty_ball.sum())
    ok &= inbox
    cand = np.flatnonzero(ok)
    for k in range(4):  # robustness: no 5th point on or near the sphere
        n = nb[cand, k]
        has = n >= 0
        t_idx, n_idx = cand[has], n[has]
        q = xyz[_far_vertex(simp, t_idx, n_idx, k)]
        dq = q - centre[t_idx]
        bad = (dq * dq).sum(axis=1) - r2[t_idx] <= np.maximum(CERT_INSPHERE * r2[t_idx], tie_abs)
        ok[t_idx[bad]] = False
        cand = np.flatnonzero(ok)
    kept = ids[ls[cand]].astype(idt)
    neg = rel[cand] < 0  # orient: swap the last two ids of negative tets
    kept[neg, 2:] = kept[neg][:, [3, 2]]
    # candidate open faces: faces of kept tets whose local neighbour is not kept
    faces, far = [], []
    for k in range(4):
        n = nb[cand, k]
        open_ = n < 0
        open_[~open_] = ~ok[n[~open_]]
        t = cand[open_]
        faces.append(ids[simp[t][:, _FACE[k]]].astype(idt))
        far.append(ids[simp[t, k]].astype(idt))
    faces = np.sort(np.concatenate(faces), axis=1)
    far = np.concatenate(far)
    st.update(local_tets=int(simp.shape[0]), flipped=int(neg.sum()),
              kept_volume=float(np.abs(det[cand]).sum() / 6.0), seconds=time.perf_counter() - t0)
    return kept, faces, far, dups, st


_PTS = None  # the points of the running call, for forked worker processes (copy-on-write)
_TREE = None  # and their k-d tree


def _block_forked(ids, lo, hi, margin_abs, options, min_rel, tie_abs, spacing):
    return _block(_PTS, ids, lo, hi, margin_abs, options, min_rel, tie_abs, _TREE, spacing)


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
    simp = d.simplices.astype(_idx_dtype(pts.shape[0]))
    stats.update(fix_points=pts.shape[0], fix_tets=simp.shape[0], seconds=time.perf_counter() - t0)
    return Partitioned(
        kept=np.zeros((0, 4), simp.dtype), fix_tets=simp, fix_neighbors=d.neighbors,
        fix_keep=np.ones(simp.shape[0], dtype=bool), stats=stats, fallback=why,
    )


def _oom(n, workers, blocks, need, memory_gb) -> OutOfMemoryError:
    return OutOfMemoryError(
        f"delaunay_tets_parallel: {n:,} points with workers={workers} and blocks={blocks} need about "
        f"{need:.1f} GB, over memory_gb={memory_gb:.1f} GB; raise blocks (smaller blocks, e.g. "
        f"blocks={2 * blocks}), lower workers, or raise memory_gb (MILo: --set delaunay_memory_gb=...; "
        "fewer pivots: --set mesh_res_scale=0.5 or a smaller preset)"
    )


def _run_blocks(pts, parts, workers, options, min_rel, timeout_s, executor, tree, margin, memory_gb) -> list:
    """Run :func:`_block` on every part in ``workers`` threads (or forked processes); biggest first."""
    global _PTS, _TREE
    tie_abs = CERT_INSPHERE_ABS * float((np.ptp(pts, axis=0) ** 2).sum())
    order = sorted(range(len(parts)), key=lambda i: -parts[i][2].size)
    if executor == "process":
        import multiprocessing as mp

        _PTS = pts  # inherited by the forked workers
        _TREE = tree.result() if isinstance(tree, cf.Future) else tree
        pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork"))
        submit = lambda p: pool.submit(_block_forked, p[2], p[0], p[1], p[3], options, min_rel, tie_abs,  # noqa: E731
                                       p[3] / margin)
    else:
        pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="meshlift-delaunay-block")
        submit = lambda p: pool.submit(_block, pts, p[2], p[0], p[1], p[3], options, min_rel, tie_abs,  # noqa: E731
                                       tree, p[3] / margin)
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
    except (MemoryError, BrokenProcessPool):
        big = max(p[2].size for p in parts)
        raise OutOfMemoryError(
            f"delaunay_tets_parallel: a block of ~{big:,} points ran out of memory with workers={workers} "
            f"and blocks={len(parts)} (memory_gb={memory_gb:.1f}); raise blocks (e.g. blocks={2 * len(parts)}) "
            "or lower workers, or lower memory_gb to what this host really has"
        ) from None
    finally:  # never wait for blocks after a failure (running Qhull calls end on their own)
        pool.shutdown(wait=done, cancel_futures=True)
        _PTS = _TREE = None
    return results


def start_hull(pts, pool=None):
    """The convex hull of all points for the grouped fix-up (:func:`delaunay_fixup.convex_hull`), submitted
    to ``pool`` (a future: the engine computes it in a thread while the blocks run) or computed now."""
    if pool is None:
        return _fix.convex_hull(pts)
    return pool.submit(_fix.convex_hull, pts)


def _grouped_round(pts, walls, wall_sign, unused, fast, workers, kept_volume, stats, cache, salvage, hull, join_tiny):
    """One grouped fix-up round (:func:`delaunay_fixup.grouped_fixup`), its calls recorded in
    ``stats["fix_round_calls"]`` (calls run, failed, groups reused, the largest call's points)."""
    stats.update(fix_calls=0, fix_failed_calls=0, fix_reused_groups=0, fix_call_points=[])
    try:
        return _fix.grouped_fixup(pts, walls, wall_sign, unused, fast, workers, kept_volume, stats, cache,
                                  salvage=salvage, hull=hull, join_tiny=join_tiny)
    finally:
        stats["fix_round_calls"].append([stats.get(k, 0) for k in ("fix_calls", "fix_failed_calls",
                                         "fix_reused_groups")] + [max(stats.get("fix_call_points") or [0])])


def fix_loop(pts, kept, dups, walls, wall_far, kept_volume, workers, fast, options, grouped, stats, hull=None):
    """Step 3 of the module docstring with its repair rounds: the slivers along the seams demoted
    (:mod:`delaunay_demote`), the grouped fix-up (or one call), the missing region grown around the points
    where a call disagreed, what a failing call salvaged promoted.

    Args: ``pts`` ``[N, 3]`` float64; ``kept`` ``[MA, 4]`` certified tets; ``dups`` ids of exact duplicates;
    ``walls``, ``wall_far``: the open faces ``[W, 3]`` and their kept tets' 4th vertices ``[W]``;
    ``kept_volume``; ``workers``: threads (also for the passes over the kept tets); ``fast``, ``options``:
    the Qhull options of the grouped calls and of the one call (None: scipy's); ``grouped``; ``stats``
    (filled in); ``hull``: :func:`start_hull`'s (None: each grouped round computes the fix-up set's).

    Returns ``(kept, (fix_tets, fix_neighbors, fix_keep), fallback)`` (kept: fewer when demoted or grown, more
    when promoted; the fix-up as :func:`delaunay_fixup.fixup`). Raises ``_Inconsistent`` when every round
    failed (the caller falls back to one global Qhull).
    """
    n, t2 = pts.shape[0], time.perf_counter()
    wall_sign = _fix.wall_signs(pts, walls, wall_far)
    # slivers along the seams go to the fix-up first (delaunay_demote: where the skins' Qhull disagreed)
    kept, walls, wall_sign, vol, stats["demoted_slivers"], stats["sliver_passes"] = _dem.demote_slivers(
        pts, kept, walls, wall_sign, workers, _dem.SLIVER_PASSES)
    kept_volume -= vol
    fixed, notes, grown, promoted, fallback = None, [], 0, 0, ""
    cache = _fix.GroupCache() if REUSE_GROUPS else None
    join_tiny = _fix.JOIN_TINY_GROUPS  # True after the split grouping failed once (the reference grouping)
    stats["fix_round_calls"] = []  # per grouped round: [calls run, failed, groups reused, largest call's points]
    for attempt in range(REPAIR_ROUNDS + 1):
        used = _rows.mark_used(n, kept, workers)
        used[dups] = True
        unused = np.flatnonzero(~used).astype(kept.dtype)
        s_ids = _rows.unique_ids([walls, unused], n)
        stats["fix_points"], stats["unused_points"] = int(s_ids.size), int(unused.size)
        bad, salvaged = [], None
        if grouped and walls.shape[0] and workers > 1:
            try:
                fixed = _grouped_round(pts, walls, wall_sign, unused, fast, workers, kept_volume, stats, cache,
                                       SALVAGE and attempt < REPAIR_ROUNDS, hull, join_tiny)
                break
            except _Inconsistent as exc:
                if not join_tiny and (getattr(exc, "from_checks", False) or exc.bad is None):
                    # the small holes in calls of their own failed a check: redo the round as the reference
                    # grouping (tiny groups joined to the big ones); the result is exact either way (no warning;
                    # a call that disagrees at known points is repaired as before, the grouping kept)
                    stats["fix_regrouped"] = str(exc)[:300]
                    join_tiny = True
                    if cache is not None:
                        cache.done.clear()
                    try:
                        fixed = _grouped_round(pts, walls, wall_sign, unused, fast, workers, kept_volume, stats,
                                               cache, SALVAGE and attempt < REPAIR_ROUNDS, hull, join_tiny)
                        break
                    except _Inconsistent as exc2:
                        exc = exc2
                notes.append(f"grouped fix-up: {exc}")
                bad.append(exc.bad)
                salvaged = getattr(exc, "salvage", None)
        # one call over all of S (with the far vertices while they are known); skipped while the grouped
        # calls say where they disagreed (growing the region there is cheaper than a call over all of S)
        if not (bad and bad[0] is not None and attempt < REPAIR_ROUNDS):
            try:
                if attempt == 0 and not stats["demoted_slivers"]:  # (a demoted sliver's faces: no far vertex)
                    s_far = np.unique(np.concatenate([s_ids, wall_far]))
                    stats["fix_points"] = int(s_far.size)
                    fixed = _fix.fixup(pts, s_far, walls, wall_far, options, with_far=True)
                else:
                    fixed = _fix.fixup(pts, s_ids, walls, None, options, wall_sign=wall_sign)
                break
            except _Inconsistent as exc:
                notes.append(f"one fix-up call: {exc}")
                bad.append(exc.bad)
        bad = [b_ for b_ in bad if b_ is not None]
        if not bad or attempt == REPAIR_ROUNDS:
            raise _Inconsistent("; ".join(notes))
        # grow the missing region around the points where the fix-up disagreed, and try again
        kept, walls, wall_sign, vol, dropped = _dem.demote(pts, kept, walls, wall_sign, np.concatenate(bad),
                                                           rings=DEMOTE_RINGS, workers=workers)
        kept_volume -= vol
        grown += dropped
        if salvaged is not None and salvaged.shape[0]:
            # the failing calls' tets away from the disagreement become kept tets: the next round
            # re-triangulates only the region around it (a promotion that does not fit is skipped)
            try:
                kept, walls, wall_sign, vol = _fix.promote(pts, kept, walls, wall_sign, salvaged, workers)
                kept_volume += vol
                promoted += int(salvaged.shape[0])
            except _Inconsistent as exc:
                notes.append(f"salvage skipped: {exc}")
    if grown:
        fallback = f"grew the fix-up region by {grown} kept tets ({'; '.join(notes)})"
    elif notes:
        fallback = f"one fix-up group ({'; '.join(notes)})"
    stats["grown_tets"], stats["fix_rounds"], stats["promoted_tets"] = grown, attempt + 1, promoted
    stats["fix_s"] = time.perf_counter() - t2
    return kept, fixed, fallback


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
    memory_gb: float | None = None,
    certify: bool = True,
    grouped: bool = True,
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
        memory_gb: memory budget in GB checked against :func:`estimate_memory_gb` before any work (None:
            the host's available memory, :func:`available_memory_gb`).
        certify: certify balls poking out of the halo with a k-d tree (False: they go to the fix-up).
        grouped: run the fix-up in parallel groups (False: one Qhull call on all of ``S``).

    Raises:
        MeshError: bad knobs, blocks past ``timeout_s``, or Qhull failing on the whole set.
        OutOfMemoryError: the estimate exceeds ``memory_gb``, or a block ran out of memory (names
            ``blocks`` and ``memory_gb``).
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
    if memory_gb is not None and not memory_gb > 0:
        raise MeshError(f"delaunay_tets_parallel: memory_gb must be > 0 (GB) or None, got {memory_gb!r}")
    n = pts.shape[0]
    budget = available_memory_gb() if memory_gb is None else float(memory_gb)
    need = estimate_memory_gb(n, workers, blocks, margin)
    if need > budget:
        raise _oom(n, workers, blocks, need, budget)
    stats: dict = {"points": n, "workers": workers, "blocks": 0, "executor": executor, "memory_gb_estimate": need}
    if blocks == 1 or n < 64:
        return _global(pts, options, "one block", stats, t0)
    tree_pool = cf.ThreadPoolExecutor(max_workers=2, thread_name_prefix="meshlift-delaunay-tree")
    try:
        tree = tree_pool.submit(_cert.build_tree, pts) if certify else None
        hull = start_hull(pts, tree_pool) if grouped and workers > 1 else None
        with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="meshlift-delaunay-split") as pool:
            parts = partition(pts, blocks, margin, pool if workers > 1 else None, workers)
        stats["blocks"] = len(parts)
        stats["halo_points"] = int(sum(p[2].size for p in parts))
        stats["partition_s"] = time.perf_counter() - t0
        fast = FAST_OPTIONS if options is None else options
        results = _run_blocks(pts, parts, workers, fast, max(min_rel, CERT_MIN_REL), timeout_s, executor, tree,
                              margin, budget)
    finally:
        tree_pool.shutdown(wait=True)
    del tree
    stats["blocks_s"] = time.perf_counter() - t0 - stats["partition_s"]
    t1 = time.perf_counter()
    kept = _rows.concat_rows([r[0] for r in results], workers)
    dups = np.unique(np.concatenate([r[3] for r in results]))
    for key in ("qhull_error", "local_tets", "flipped", "kd_queries", "kd_kept"):
        stats[key] = int(sum(r[4][key] for r in results))
    kept_volume = float(sum(r[4]["kept_volume"] for r in results))
    stats["kept_tets"] = int(kept.shape[0])
    stats["block_seconds"] = [round(r[4]["seconds"], 3) for r in results]
    if kept.shape[0] == 0:
        return _global(pts, options, "no block certified a tet", stats, t0)
    fallback = ""
    try:
        walls, wall_far = _fix.open_faces(np.concatenate([r[1] for r in results]),
                                          np.concatenate([r[2] for r in results]), n)
        del results
        stats["open_faces"] = int(walls.shape[0])
        stats["merge_s"] = time.perf_counter() - t1
        kept, fixed, fallback = fix_loop(pts, kept, dups, walls, wall_far, kept_volume, workers, fast, options,
                                         grouped, stats, hull)
        fix_tets, fix_nb, fix_keep = fixed
    except _Inconsistent as exc:
        return _global(pts, options, f"blocks inconsistent ({exc})", stats, t0)
    stats["fix_tets"] = int(fix_keep.sum())
    stats["seconds"] = time.perf_counter() - t0
    return Partitioned(kept=kept, fix_tets=fix_tets, fix_neighbors=fix_nb, fix_keep=fix_keep, duplicates=dups,
                       stats=stats, fallback=fallback)
