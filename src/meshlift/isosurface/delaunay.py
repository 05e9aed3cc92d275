"""Delaunay tetrahedralisation of scattered points (Qhull via scipy), oriented for marching tetrahedra.

MILo (Guédon et al. 2025, "MILo: Mesh-In-the-Loop Gaussian Splatting", Sec. 3) tetrahedralises the
Gaussians' pivots every 500 training steps and runs marching tetrahedra on the result. MILo calls CGAL
(GPL); meshlift calls ``scipy.spatial.Delaunay`` (Qhull, BSD-style licence), exact up to Qhull's
merging of nearly coincident points, and never CGAL.

**Orientation.** :func:`meshlift.isosurface.dmtet.marching_tets` needs positively oriented tets
(``det(p1 - p0, p2 - p0, p3 - p0) > 0``); Qhull returns either orientation (about half each). The signed
volume is computed in float64 and a negative tet gets its last two indices swapped. A tet is
*degenerate* when ``|det| <= degenerate_tol * L^3`` (``L`` its longest edge; a regular tet has
``det / L^3 = 1/sqrt(2)``): Qhull's triangulated output (option ``Qt``) makes flat tets wherever 5 or more
points are co-spherical (lattices, symmetric captures). Their sign is rounding noise, so by default they
are **kept and oriented from their neighbours**: two tets sharing a face are coherently oriented when
the face's induced orientations are opposite, which is propagated from the well-shaped tets across
Qhull's neighbour graph. Dropping them instead (``drop_degenerate=True``) leaves holes in the tet mesh
(the surface through them goes missing), so it is for callers that re-close the mesh themselves.

**Background work.** Qhull releases the GIL (measured, see the notes), so :class:`DelaunayRunner`
computes a triangulation in a worker thread (``concurrent.futures``) while the training loop keeps
stepping with the previous one; :meth:`DelaunayJob.status` is a one-line progress string with an
ETA from the measured throughput.

**Cost and what the presets need** (measured on one core of a 2-core shared machine, scipy 1.17.1;
MILo-like 9-pivot clouds on a noisy sphere shell; about 6.8 tets per point, int32 tets 16 B each):

============  =========  ==============  ===============  ==================================
preset        pivots     Qhull per call  run (21 calls)   memory
============  =========  ==============  ===============  ==================================
verylowres    270k       21 s            ~7.5 min         0.8 GB RSS
lowres        540k       ~45 s           ~16 min          ~1.6 GB
(1M pivots)   1M         97 s            ~34 min          2.8 GB RSS
default       5.4M       ~10 min [est.]  ~3.5 h           ~15 GB, tets 0.6 GB
highres       9M         ~17 min [est.]  ~6 h             ~25 GB
veryhighres   13.5M      ~25 min [est.]  ~9 h             ~38 GB
============  =========  ==============  ===============  ==================================

Measured once here on the shared, busy 2-core CPU (MILo-like pivots): 50k pivots 4.5 s, 100k 15.7 s
(contention; the notes' idle-core figure is 5.8 s), 6.5 tets per pivot. Rows marked [est.] scale the
notes' own extrapolation for 5.4M (~10 min) linearly; memory scales the 1M figure. In a background
thread, verylowres and lowres hide behind 500 GPU steps (MILo's interval) at a few steps per second;
``default`` and above need more cores: :func:`delaunay_tets_parallel` (engine in
:mod:`meshlift.isosurface.delaunay_parallel`) triangulates overlapping spatial blocks with Qhull in
several threads, keeps the tets whose empty circumsphere it can certify (a k-d tree over all points
checks the balls that poke out of a block's thin halo) and re-triangulates the rest in parallel groups,
giving the same tets as one global Qhull (up to ties among co-spherical points). Measured on the
H200 device machine's 16 cores with the earlier design (a 3-spacing halo, one serial fix-up; 2026-12-03,
MILo-like pivots, docs/benchmarks.md "Delaunay"): 270k pivots 11.4 s → 3.8 s, 1M 45.5 s → 11.6-16.1 s;
5.4M took over 90 s there. The current design (1-spacing halo with the k-d tree, grouped fix-up, a
fix-up region that grows where Qhull disagrees) measured 93.1 s (H200 host) and 100.4 s (H100 host) for
5.4M pivots on 16 cores, 57 s of it in 5 fix-up rounds; with the slivers along the seams demoted first
(:mod:`~meshlift.isosurface.delaunay_demote`) the fix-up is one round (CPU replay), predicted ~60 s in all.
:func:`delaunay_tets` and :class:`DelaunayRunner` take that path from ``parallel_min_points`` points on
(default 200k) when more than one core is available.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from meshlift.errors import MeshError, MeshliftWarning
from meshlift.isosurface import delaunay_parallel as _par
from meshlift.isosurface import delaunay_rows as _rows

#: Relative volume ``|det| / L^3`` at or below which a tet counts as degenerate (flat).
DEFAULT_DEGENERATE_TOL = 1e-10
#: Tets per block when computing signed volumes (bounds temporary float64 memory: ~650 B per tet, ~170 MB).
VOLUME_CHUNK = 1 << 18
#: Throughput assumed for an ETA before the first measured call (points per second, 1 core, pivots).
DEFAULT_POINTS_PER_SECOND = 12_700.0
#: Point count from which :func:`delaunay_tets` / :class:`DelaunayRunner` use :func:`delaunay_tets_parallel`.
DEFAULT_PARALLEL_MIN_POINTS = 200_000

_EDGE_A = np.array([0, 0, 0, 1, 1, 2])
_EDGE_B = np.array([1, 2, 3, 2, 3, 3])


@dataclass(frozen=True)
class DelaunayResult:
    """A Delaunay tetrahedralisation, positively oriented.

    Attributes:
        tets: ``[M, 4]`` int32 (CPU) point indices (int64 from 2^31 points on);
            ``det(p1 - p0, p2 - p0, p3 - p0) > 0`` for every well-shaped tet, degenerate ones oriented
            coherently with their neighbours (or dropped).
        num_points: number of input points N.
        num_flipped: tets whose orientation was reversed (two indices swapped).
        num_degenerate: tets with ``|det| <= degenerate_tol * L^3``.
        num_dropped: degenerate tets removed (``drop_degenerate=True``), else 0.
        num_unused_points: points in no tet (duplicates / points Qhull merged as coplanar).
        seconds: wall time of the Qhull call plus the orientation fix.
    """

    tets: torch.Tensor
    num_points: int
    num_flipped: int
    num_degenerate: int
    num_dropped: int
    num_unused_points: int
    seconds: float


def _as_points(points, fn: str) -> np.ndarray:
    """Copy the points to a C-contiguous float64 numpy array on the CPU (never modifies the input)."""
    if isinstance(points, torch.Tensor):
        arr = points.detach().to("cpu", torch.float64).numpy()
    elif isinstance(points, np.ndarray):
        arr = points.astype(np.float64)
    else:
        raise MeshError(f"{fn}: points must be a torch.Tensor or numpy array [N, 3], got {type(points).__name__}")
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise MeshError(f"{fn}: points must have shape [N, 3], got {list(arr.shape)}")
    if arr.shape[0] < 4:
        raise MeshError(f"{fn}: a tetrahedralisation needs at least 4 points, got {arr.shape[0]}")
    if not np.isfinite(arr).all():
        raise MeshError(f"{fn}: points contain NaN or inf; check the Gaussians' means and scales")
    return np.ascontiguousarray(arr).copy()


def _relative_volumes(points: np.ndarray, tets: np.ndarray) -> np.ndarray:
    """``det(p1 - p0, p2 - p0, p3 - p0) / L^3`` per tet (float64), in blocks of ``VOLUME_CHUNK``."""
    out = np.empty(tets.shape[0], dtype=np.float64)
    for s in range(0, tets.shape[0], VOLUME_CHUNK):
        p = points[tets[s : s + VOLUME_CHUNK]]  # [B, 4, 3]
        d = p[:, 1:] - p[:, :1]
        det = np.einsum("bi,bi->b", d[:, 0], np.cross(d[:, 1], d[:, 2]))
        length = np.linalg.norm(p[:, _EDGE_B] - p[:, _EDGE_A], axis=-1).max(axis=1)
        out[s : s + VOLUME_CHUNK] = det / np.maximum(length, np.finfo(np.float64).tiny) ** 3
    return out


def _face_parity(tets: np.ndarray, t_idx: np.ndarray, k: np.ndarray, n_idx: np.ndarray) -> np.ndarray:
    """+1 where tets ``t_idx`` and ``n_idx`` (sharing the face opposite corner ``k`` of ``t_idx``) are
    coherently oriented as stored, -1 where one must be flipped.

    The boundary of ``[v0, v1, v2, v3]`` is ``sum_k (-1)^k [.. v_k omitted ..]``; two tets are coherent
    when the shared face appears with opposite signs.
    """
    keep = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])
    t = tets[t_idx]
    nb = tets[n_idx]
    fa = np.take_along_axis(t, keep[k], axis=1)  # [P, 3] face of t in its stored order
    # corner of the neighbour not on the shared face
    on_face = (nb[:, :, None] == fa[:, None, :]).any(axis=2)  # [P, 4]
    m = np.argmin(on_face, axis=1)
    fb = np.take_along_axis(nb, keep[m], axis=1)
    even = ((fb[:, 0] == fa[:, 0]) & (fb[:, 1] == fa[:, 1])) | ((fb[:, 0] == fa[:, 1]) & (fb[:, 1] == fa[:, 2])) | (
        (fb[:, 0] == fa[:, 2]) & (fb[:, 1] == fa[:, 0])
    )
    sign = np.where(even, 1, -1) * np.where((k + m) % 2 == 0, 1, -1)
    return -sign  # induced orientations opposite <=> sign == -1 <=> coherent


def _orient(tets: np.ndarray, neighbors: np.ndarray, rel: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Orientation sign per tet (+1 keep, -1 swap) and the degenerate mask."""
    degenerate = np.abs(rel) <= tol
    orient = np.where(degenerate, 0, np.sign(rel)).astype(np.int8)
    todo = np.flatnonzero(degenerate)
    while todo.size:
        progressed = False
        for k in range(4):
            if not todo.size:
                break
            nb = neighbors[todo, k]
            ok = nb >= 0
            ok[ok] = orient[nb[ok]] != 0
            if not ok.any():
                continue
            t_idx, n_idx = todo[ok], nb[ok]
            coherent = _face_parity(tets, t_idx, np.full(t_idx.shape, k), n_idx)
            orient[t_idx] = (orient[n_idx] * coherent).astype(np.int8)
            todo = todo[orient[todo] == 0]
            progressed = True
        if todo.size and not progressed:
            orient[todo[0]] = 1  # a cluster of flat tets with no well-shaped neighbour: seed it
    return orient, degenerate


def delaunay_tets(
    points,
    *,
    degenerate_tol: float = DEFAULT_DEGENERATE_TOL,
    drop_degenerate: bool = False,
    qhull_options: str | None = None,
    parallel_min_points: int = DEFAULT_PARALLEL_MIN_POINTS,
    workers: int | None = None,
    memory_gb: float | None = None,
) -> DelaunayResult:
    """Delaunay tetrahedralisation of ``points`` with every tet positively oriented (see module docstring).

    Args:
        points: ``[N, 3]`` float tensor (any device; copied to the CPU in float64) or numpy array, N >= 4.
        degenerate_tol: relative volume ``|det| / L^3`` at or below which a tet is degenerate (>= 0).
        drop_degenerate: drop degenerate tets (leaves holes) instead of orienting them from neighbours.
        qhull_options: Qhull options for ``scipy.spatial.Delaunay`` (None: scipy's 3-D default
            ``"Qbb Qc Qz Q12"`` plus ``"Qt"``).
        parallel_min_points: from this many points on, and with ``workers`` (resolved) >= 2, use
            :func:`delaunay_tets_parallel` (same tets up to co-spherical ties).
        workers: threads for the parallel path (None: the cores this process may use).
        memory_gb: memory budget of the parallel path in GB (None: the host's available memory); its
            estimated peak is checked before any work.

    Returns:
        :class:`DelaunayResult` with ``tets`` ``[M, 4]`` int32 on the CPU (move it with ``.to(device)``).

    Raises:
        MeshError: bad shape, fewer than 4 points, non-finite values, negative tolerance, or Qhull
            failing (e.g. all points coplanar).
        OutOfMemoryError: the parallel path's estimated peak exceeds ``memory_gb`` (names ``blocks`` and
            ``memory_gb``).
    """
    if not degenerate_tol >= 0:
        raise MeshError(f"delaunay_tets: degenerate_tol must be >= 0, got {degenerate_tol!r}")
    pts = _as_points(points, "delaunay_tets")
    return _route(pts, degenerate_tol, drop_degenerate, qhull_options, parallel_min_points, workers, memory_gb)


def _route(pts, tol, drop, options, parallel_min_points, workers, memory_gb=None) -> DelaunayResult:
    """The parallel path for big inputs on several cores, else one Qhull call."""
    from scipy.spatial import Delaunay, QhullError

    w = _par.default_workers() if workers is None else int(workers)
    if pts.shape[0] >= parallel_min_points and w >= 2:
        return _parallel(pts, tol, drop, options, w, None, _par.DEFAULT_MARGIN, None, memory_gb=memory_gb)
    return _triangulate(pts, tol, drop, options, Delaunay, QhullError)


def delaunay_tets_parallel(
    points,
    *,
    workers: int | None = None,
    blocks: int | None = None,
    margin: float = _par.DEFAULT_MARGIN,
    timeout_s: float | None = None,
    executor: str = "thread",
    degenerate_tol: float = DEFAULT_DEGENERATE_TOL,
    drop_degenerate: bool = False,
    qhull_options: str | None = None,
    memory_gb: float | None = None,
) -> DelaunayResult:
    """:func:`delaunay_tets` by overlapping blocks in several threads (:mod:`meshlift.isosurface.delaunay_parallel`).

    The tets equal one global Qhull call's for points in general position; where points are co-spherical
    (lattices, symmetric boxes) the ties may be split differently, still a valid Delaunay tetrahedralisation
    of the convex hull. Kept tets are well shaped and oriented by their sign; the re-triangulated rest is
    oriented like :func:`delaunay_tets` (degenerate tets from their neighbours). If the blocks and the
    fix-up disagree (extreme ties), one global Qhull is used with a :class:`~meshlift.errors.MeshliftWarning`
    (as is the one-call fix-up when the grouped fix-up fails its checks).

    Args:
        points: ``[N, 3]`` float tensor (any device; copied to the CPU in float64) or numpy array, N >= 4.
        workers: threads (None: the cores this process may use).
        blocks: number of blocks (None: 3 per worker). Peak memory is about ``workers * 4 KB * 1.1 N /
            blocks`` beyond the result (:func:`meshlift.isosurface.delaunay_parallel.estimate_memory_gb`);
            raise ``blocks`` if the estimate exceeds ``memory_gb``.
        margin: halo width around a block in mean point spacings (> 0; 1). Balls poking out of the halo
            are certified by a k-d tree over all points; thinner halos copy fewer points.
        timeout_s: seconds to wait for the blocks (None: no limit); past it a MeshError names this knob.
        executor: ``"thread"`` (Qhull releases the GIL; nothing copied) or ``"process"`` (forked workers:
            avoids contention inside one process, but forking a process that runs CUDA / other threads is
            only as safe as PyTorch's forked DataLoader workers; results come back pickled).
        degenerate_tol, drop_degenerate, qhull_options: as for :func:`delaunay_tets`.
        memory_gb: memory budget in GB (None: the host's available memory), checked against the estimated
            peak before any work.

    Returns:
        :class:`DelaunayResult` (``seconds``: the whole call; ``tets`` int32).

    Raises:
        MeshError: bad input or knobs, Qhull failing on the whole set (all coplanar), blocks past
            ``timeout_s``.
        OutOfMemoryError: the estimated peak exceeds ``memory_gb`` or a block ran out of memory (the
            message names ``blocks``, ``workers`` and ``memory_gb``).
    """
    if not degenerate_tol >= 0:
        raise MeshError(f"delaunay_tets_parallel: degenerate_tol must be >= 0, got {degenerate_tol!r}")
    pts = _as_points(points, "delaunay_tets_parallel")
    return _parallel(pts, degenerate_tol, drop_degenerate, qhull_options, workers, blocks, margin, timeout_s,
                     executor, memory_gb)


def _parallel(pts, tol, drop, options, workers, blocks, margin, timeout_s, executor="thread",
              memory_gb=None) -> DelaunayResult:
    t0 = time.perf_counter()
    eng = _par.partitioned_delaunay(pts, workers=workers, blocks=blocks, margin=margin, options=options,
                                    timeout_s=timeout_s, min_rel=tol, executor=executor, memory_gb=memory_gb)
    if eng.fallback.startswith("blocks inconsistent"):
        warnings.warn(f"delaunay_tets_parallel: {eng.fallback}; used one global Qhull instead", MeshliftWarning,
                      stacklevel=3)
    elif eng.fallback.startswith("grew the fix-up region"):
        warnings.warn(f"delaunay_tets_parallel: {eng.fallback}", MeshliftWarning, stacklevel=3)
    elif eng.fallback.startswith("one fix-up group"):
        warnings.warn(f"delaunay_tets_parallel: {eng.fallback}; re-triangulated the uncertified region in one "
                      "Qhull call instead", MeshliftWarning, stacklevel=3)
    return _finish(pts, eng, tol, drop, t0, int(eng.stats.get("workers", 1)))


def _finish(pts, eng, tol, drop, t0, workers: int = 1) -> DelaunayResult:
    """The engine's result as a :class:`DelaunayResult`: the fix-up tets oriented and screened, joined to
    the kept tets (the copy and the used-point marks over all tets in ``workers`` threads)."""
    kept = eng.kept  # well shaped (|det| / L^3 > max(tol, CERT_MIN_REL)), oriented by the blocks
    # fix-up: orient over the whole DT(S) (its neighbour graph), then take the missing region's tets
    ft = eng.fix_tets
    orient, deg_f = _orient(ft, eng.fix_neighbors, _relative_volumes(pts, ft), tol)
    sel = eng.fix_keep
    ft, flip_f, deg_f = ft[sel], orient[sel] < 0, deg_f[sel]
    ft[flip_f] = ft[flip_f][:, [0, 1, 3, 2]]
    n_deg = int(deg_f.sum())
    n_drop = 0
    if drop and n_deg:
        n_drop = n_deg
        ft = ft[~deg_f]
    tets = _rows.concat_rows([kept, ft.astype(kept.dtype, copy=False)], workers) if ft.shape[0] else kept
    used = _rows.mark_used(pts.shape[0], tets, workers)
    return DelaunayResult(
        tets=torch.from_numpy(tets),
        num_points=int(pts.shape[0]),
        num_flipped=int(eng.stats.get("flipped", 0) + flip_f.sum()),
        num_degenerate=n_deg,
        num_dropped=n_drop,
        num_unused_points=int((~used).sum()),
        seconds=time.perf_counter() - t0,
    )


def _triangulate(pts, tol, drop, options, Delaunay, QhullError) -> DelaunayResult:
    t0 = time.perf_counter()
    try:
        d = Delaunay(pts, qhull_options=options)
    except QhullError as exc:  # pragma: no cover - message depends on Qhull
        raise MeshError(
            f"delaunay_tets: Qhull failed on {pts.shape[0]} points (all coplanar or duplicated?): "
            f"{str(exc).splitlines()[0] if str(exc) else exc}"
        ) from None
    tets = d.simplices.astype(np.int32 if pts.shape[0] < 2**31 else np.int64)
    rel = _relative_volumes(pts, tets)
    orient, degenerate = _orient(tets, d.neighbors, rel, tol)
    flip = orient < 0
    tets[flip] = tets[flip][:, [0, 1, 3, 2]]
    n_drop = 0
    if drop:
        n_drop = int(degenerate.sum())
        tets = tets[~degenerate]
    used = np.zeros(pts.shape[0], dtype=bool)
    used[tets.reshape(-1)] = True
    return DelaunayResult(
        tets=torch.from_numpy(tets),
        num_points=int(pts.shape[0]),
        num_flipped=int(flip.sum()),
        num_degenerate=int(degenerate.sum()),
        num_dropped=n_drop,
        num_unused_points=int((~used).sum()),
        seconds=time.perf_counter() - t0,
    )


def signed_volumes(points: torch.Tensor, tets: torch.Tensor) -> torch.Tensor:
    """Signed volumes ``det(p1 - p0, p2 - p0, p3 - p0) / 6`` of tets, ``[M]`` (dtype of ``points``).

    Args:
        points: ``[N, 3]`` float tensor.
        tets: ``[M, 4]`` integer tensor on the same device.

    Raises:
        MeshError: bad shapes.
    """
    if points.ndim != 2 or points.shape[1] != 3 or not points.dtype.is_floating_point:
        raise MeshError(f"signed_volumes: points must be a float [N, 3] tensor, got {tuple(points.shape)}")
    if tets.ndim != 2 or tets.shape[1] != 4 or tets.dtype.is_floating_point:
        raise MeshError(f"signed_volumes: tets must be an integer [M, 4] tensor, got {tuple(tets.shape)}")
    p = points[tets.to(torch.int64)]
    d = p[:, 1:] - p[:, :1]
    return (d[:, 0] * torch.linalg.cross(d[:, 1], d[:, 2])).sum(-1) / 6


class DelaunayJob:
    """A triangulation running in the background (future-like; from :meth:`DelaunayRunner.submit`).

    ``done()``, ``running()``, ``result(timeout=None)`` and ``exception(timeout=None)`` behave as for a
    ``concurrent.futures.Future``; ``status()`` is a progress line such as
    ``"delaunay: 270,000 points, running 12.3 s (ETA ~9 s)"`` or
    ``"delaunay: 270,000 points -> 1,846,012 tets in 21.0 s"``.
    """

    def __init__(self, future: cf.Future, num_points: int, expected_s: float, started: list):
        self._future = future
        self.num_points = num_points
        self.expected_s = expected_s
        self._started = started  # [t_start] once the worker picks the job up

    def done(self) -> bool:
        return self._future.done()

    def running(self) -> bool:
        return self._future.running()

    def result(self, timeout: float | None = None) -> DelaunayResult:
        """Block until the triangulation is ready (re-raises its MeshError)."""
        return self._future.result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._future.exception(timeout)

    def elapsed_s(self) -> float:
        """Seconds since the worker started this job (0 while queued)."""
        if not self._started:
            return 0.0
        if self._future.done() and len(self._started) > 1:
            return self._started[1] - self._started[0]
        return time.perf_counter() - self._started[0]

    def status(self) -> str:
        n = f"{self.num_points:,} points"
        if self._future.done():
            exc = self._future.exception()
            if exc is not None:
                return f"delaunay: {n}, failed: {exc}"
            r = self._future.result()
            return f"delaunay: {n} -> {r.tets.shape[0]:,} tets in {r.seconds:.1f} s"
        if not self._started:
            return f"delaunay: {n}, queued"
        el = self.elapsed_s()
        eta = max(self.expected_s - el, 0.0)
        return f"delaunay: {n}, running {el:.1f} s (ETA ~{eta:.0f} s)"


class DelaunayRunner:
    """Runs :func:`delaunay_tets` in one background thread, so training continues meanwhile.

    Usage (MILo re-triangulates every 500 steps and switches when the new tets are ready)::

        runner = DelaunayRunner()
        job = runner.submit(pivots)            # copies the points now (a GPU sync), returns at once
        ...                                    # keep training with the previous tets
        if job.done():
            tets = job.result().tets.to(device)
        monitor.note(runner.status())          # "delaunay: 270,000 points, running 12.3 s (ETA ~9 s)"
        runner.shutdown()

    Jobs run one at a time in submission order. From ``parallel_min_points`` points on a job runs
    :func:`delaunay_tets_parallel` with ``workers`` threads (the job's thread waits on them); below it, one
    Qhull call. The ETA uses the throughput of the last finished job (points per second), starting from
    ``DEFAULT_POINTS_PER_SECOND`` (measured on one core).

    Args:
        degenerate_tol, drop_degenerate, qhull_options, parallel_min_points, workers, memory_gb: passed to
            :func:`delaunay_tets`.
    """

    def __init__(
        self,
        *,
        degenerate_tol: float = DEFAULT_DEGENERATE_TOL,
        drop_degenerate: bool = False,
        qhull_options: str | None = None,
        parallel_min_points: int = DEFAULT_PARALLEL_MIN_POINTS,
        workers: int | None = None,
        memory_gb: float | None = None,
    ):
        if not degenerate_tol >= 0:
            raise MeshError(f"DelaunayRunner: degenerate_tol must be >= 0, got {degenerate_tol!r}")
        self._kw = dict(tol=degenerate_tol, drop=drop_degenerate, options=qhull_options,
                        parallel_min_points=parallel_min_points, workers=workers, memory_gb=memory_gb)
        self._pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="meshlift-delaunay")
        self._rate = DEFAULT_POINTS_PER_SECOND
        self._lock = threading.Lock()
        self._last: DelaunayJob | None = None

    def submit(self, points) -> DelaunayJob:
        """Start a triangulation of ``points`` (``[N, 3]`` tensor or array; copied before returning).

        Raises:
            MeshError: bad points (checked here, in the caller's thread) or a shut-down runner.
        """
        pts = _as_points(points, "DelaunayRunner.submit")
        started: list = []

        def work() -> DelaunayResult:
            started.append(time.perf_counter())
            try:
                r = _route(pts, **self._kw)
            finally:
                started.append(time.perf_counter())
            with self._lock:
                self._rate = r.num_points / max(r.seconds, 1e-6)
            return r

        with self._lock:
            expected = pts.shape[0] / self._rate
        try:
            fut = self._pool.submit(work)
        except RuntimeError:
            raise MeshError("DelaunayRunner.submit: the runner was shut down; create a new DelaunayRunner") from None
        job = DelaunayJob(fut, pts.shape[0], expected, started)
        self._last = job
        return job

    def busy(self) -> bool:
        """True while the most recent job is queued or running (a loop can skip a re-triangulation then)."""
        return self._last is not None and not self._last.done()

    def status(self) -> str:
        """Progress line of the most recent job (``"delaunay: idle"`` before the first)."""
        return self._last.status() if self._last is not None else "delaunay: idle"

    def shutdown(self, wait: bool = True) -> None:
        """Stop accepting jobs; with ``wait`` block until the running one ends (queued ones are cancelled)."""
        self._pool.shutdown(wait=wait, cancel_futures=True)

    def __enter__(self) -> "DelaunayRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown(wait=True)
