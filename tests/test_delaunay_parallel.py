"""Partitioned parallel Delaunay (``delaunay_tets_parallel``) against one global scipy/Qhull call.

Small clouds with many blocks, so most tets sit near a block seam. General position: the same set of
tets as scipy. Co-spherical ties (lattices, box corners): a valid Delaunay tetrahedralisation (empty
spheres, manifold faces, volume of the hull) that may split the ties differently.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.spatial import ConvexHull, Delaunay, cKDTree

from meshlift.errors import MeshError
from meshlift.isosurface import delaunay as dl
from meshlift.isosurface import delaunay_parallel as dp
from meshlift.isosurface.delaunay import DelaunayRunner, delaunay_tets, delaunay_tets_parallel

_FACES = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])


def _uniform(n, seed=0):
    return np.random.default_rng(seed).random((n, 3))


def _clustered(n, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.random((12, 3))
    return centres[rng.integers(0, 12, n)] + 0.03 * rng.normal(size=(n, 3)) * rng.random((n, 1))


def _pivots(n, seed=0):
    """MILo-like pivots (centre + 8 corners of a rotated anisotropic 3-sigma box) on a noisy sphere shell,
    made in float32 like the Gaussians' pivots."""
    g = n // 9
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(g, 3))
    mu = d / np.linalg.norm(d, axis=1, keepdims=True) * (1 + 0.02 * rng.normal(size=(g, 1)))
    half = 3 * 0.02 * np.exp(0.5 * rng.normal(size=(g, 3)))
    q, _ = np.linalg.qr(rng.normal(size=(g, 3, 3)))
    s = np.array([[(c >> i & 1) * 2 - 1 for i in range(3)] for c in range(8)], dtype=float)
    corners = mu[:, None] + np.einsum("gij,gcj->gci", q, s[None] * half[:, None])
    return np.concatenate([mu[:, None], corners], axis=1).reshape(-1, 3).astype(np.float32).astype(np.float64)


def _as_set(tets) -> np.ndarray:
    t = tets.numpy() if isinstance(tets, torch.Tensor) else tets
    return np.unique(np.sort(t, axis=1), axis=0)


def _volumes(pts, tets):
    p = pts[tets]
    d = p[:, 1:] - p[:, :1]
    return np.einsum("bi,bi->b", d[:, 0], np.cross(d[:, 1], d[:, 2])) / 6


def _check_valid(pts, res, *, insphere_tol=1e-9, flat=1e-5):
    """Every tet positive (or flat), no duplicates, faces shared by <= 2 tets, the hull's volume and
    area covered, every tet's circumsphere empty of other points up to ``insphere_tol``, except near-flat
    tets (``|det| / L^3 <= flat``): Qhull's ``Qt`` makes those inside co-spherical cells (4 concyclic
    corners of a box face plus any 5th point), and their circumsphere is numerically arbitrary."""
    tets = res.tets.numpy()
    assert tets.dtype == np.int64 and tets.ndim == 2 and tets.shape[1] == 4
    assert _as_set(tets).shape[0] == tets.shape[0], "duplicate tets"
    vol = _volumes(pts, tets)
    scale = np.ptp(pts, axis=0).max() ** 3
    assert (vol > -1e-12 * scale).all(), "negatively oriented tet"
    hull = ConvexHull(pts)
    assert abs(vol.sum() - hull.volume) <= 1e-9 * hull.volume
    faces = np.sort(tets[:, _FACES].reshape(-1, 3), axis=1)
    uf, count = np.unique(faces, axis=0, return_counts=True)
    assert count.max() <= 2, "a face in 3+ tets"
    b = pts[uf[count == 1]]
    area = 0.5 * np.linalg.norm(np.cross(b[:, 1] - b[:, 0], b[:, 2] - b[:, 0]), axis=1).sum()
    assert abs(area - hull.area) <= 1e-7 * hull.area, "boundary faces are not the hull"
    centre, r2, rel = dp._circumspheres(pts, tets)
    ok = np.abs(rel) > flat
    dist, idx = cKDTree(pts).query(centre[ok], k=5)
    is_vertex = (idx[:, :, None] == tets[ok][:, None, :]).any(axis=2)
    d2 = np.where(is_vertex, np.inf, dist**2).min(axis=1)
    assert (d2 >= r2[ok] * (1 - insphere_tol)).all(), "a point inside a circumsphere"


def _ties(pts, tets, tol=1e-9):
    """Tets that are flat or have a 5th point on their circumsphere (within ``tol``)."""
    centre, r2, rel = dp._circumspheres(pts, tets)
    dist, idx = cKDTree(pts).query(np.nan_to_num(centre, nan=1e30, posinf=1e30, neginf=-1e30), k=5)
    is_vertex = (idx[:, :, None] == tets[:, None, :]).any(axis=2)
    d2 = np.where(is_vertex, np.inf, dist**2).min(axis=1)
    return (np.abs(rel) <= 1e-8) | (d2 <= r2 * (1 + tol))


@pytest.mark.parametrize("make, n", [(_uniform, 6000), (_clustered, 6000)])
def test_parallel_equals_global_general_position(make, n):
    pts = make(n)
    res = delaunay_tets_parallel(pts, workers=2, blocks=12)
    assert np.array_equal(_as_set(res.tets), _as_set(Delaunay(pts).simplices))
    _check_valid(pts, res)
    assert res.num_points == n and res.num_unused_points == 0 and res.num_degenerate == 0


def test_parallel_milo_pivots_match_up_to_ties():
    pts = _pivots(18000)
    res = delaunay_tets_parallel(pts, workers=2, blocks=16)
    _check_valid(pts, res)
    mine, ref = _as_set(res.tets), _as_set(Delaunay(pts).simplices)
    a = {tuple(t) for t in mine.tolist()}
    b = {tuple(t) for t in ref.tolist()}
    only = np.array(sorted((a - b) | (b - a)), dtype=np.int64).reshape(-1, 4)
    assert only.shape[0] <= 0.001 * ref.shape[0]
    assert _ties(pts, only).all(), "tets differ from scipy's beyond co-spherical ties"


def test_seams_are_exercised():
    pts = _uniform(6000, seed=3)
    eng = dp.partitioned_delaunay(pts, workers=2, blocks=12, margin=1.0)
    st = eng.stats
    assert st["blocks"] == 12 and st["kept_tets"] > 0 and st["open_faces"] > 0 and eng.fix_keep.sum() > 0
    assert not eng.fallback
    res = delaunay_tets_parallel(pts, workers=2, blocks=12, margin=1.0)
    assert np.array_equal(_as_set(res.tets), _as_set(Delaunay(pts).simplices))


def test_workers_1_and_2_agree():
    pts = _clustered(5000, seed=1)
    a = delaunay_tets_parallel(pts, workers=1, blocks=8)
    b = delaunay_tets_parallel(pts, workers=2, blocks=8)
    assert np.array_equal(_as_set(a.tets), _as_set(b.tets))


def test_forked_processes_agree_with_threads():
    pts = _uniform(4000, seed=10)
    a = delaunay_tets_parallel(pts, workers=2, blocks=6, executor="process")
    b = delaunay_tets_parallel(pts, workers=2, blocks=6)
    assert np.array_equal(_as_set(a.tets), _as_set(b.tets))
    assert np.array_equal(_as_set(a.tets), _as_set(Delaunay(pts).simplices))


def test_lattice_ties_give_valid_delaunay():
    g = np.stack(np.meshgrid(*[np.arange(7.0)] * 3, indexing="ij"), -1).reshape(-1, 3)
    pts = np.concatenate([g, 6.0 + 6.0 * _uniform(600, seed=2)])  # a co-spherical block beside random points
    res = delaunay_tets_parallel(pts, workers=2, blocks=8)
    _check_valid(pts, res)
    assert res.num_unused_points == 0
    pure = delaunay_tets_parallel(g, workers=2, blocks=8)
    _check_valid(g, pure)
    assert pure.num_degenerate > 0  # flat tets of the tied cells, kept and oriented


def test_duplicate_points():
    rng = np.random.default_rng(4)
    base = _uniform(4000, seed=4)
    dup = base[rng.choice(4000, 400, replace=False)]
    pts = np.concatenate([base, dup])
    res = delaunay_tets_parallel(pts, workers=2, blocks=8)
    assert res.num_unused_points == 400
    assert res.tets.max().item() < 4000  # the smallest id of each coordinate is the one used
    ref = Delaunay(base).simplices
    assert np.array_equal(_as_set(res.tets), _as_set(ref))


def test_nearly_coplanar_slab():
    pts = _uniform(5000, seed=5) * np.array([1.0, 1.0, 1e-3])
    res = delaunay_tets_parallel(pts, workers=2, blocks=8)
    _check_valid(pts, res)
    mine, ref = _as_set(res.tets), _as_set(Delaunay(pts).simplices)
    assert np.array_equal(mine, ref)


def test_coplanar_and_tiny_inputs():
    flat = np.concatenate([_uniform(3000)[:, :2], np.zeros((3000, 1))], axis=1)
    with pytest.raises(MeshError, match="coplanar"):
        delaunay_tets_parallel(flat, workers=2, blocks=8)
    four = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    res = delaunay_tets_parallel(four, workers=2, blocks=8)
    assert res.tets.shape == (1, 4) and _volumes(four, res.tets.numpy())[0] > 0
    with pytest.raises(MeshError, match="at least 4 points"):
        delaunay_tets_parallel(four[:3])


def test_bad_knobs():
    pts = _uniform(200)
    for kw, word in (({"workers": 0}, "workers"), ({"blocks": 0}, "blocks"), ({"margin": 0.0}, "margin"),
                     ({"executor": "gpu"}, "executor")):
        with pytest.raises(MeshError, match=word):
            delaunay_tets_parallel(pts, **kw)


def test_timeout_names_the_knob():
    pts = _uniform(30000, seed=6)
    with pytest.raises(MeshError, match="timeout_s"):
        delaunay_tets_parallel(pts, workers=1, blocks=4, timeout_s=1e-4)


def test_block_out_of_memory_names_blocks(monkeypatch):
    def oom(*a, **k):
        raise MemoryError

    monkeypatch.setattr(dp, "_block", oom)
    with pytest.raises(MeshError, match="raise blocks"):
        delaunay_tets_parallel(_uniform(2000), workers=2, blocks=4)


def test_inconsistent_blocks_fall_back_with_a_warning(monkeypatch):
    def broken(*a, **k):
        raise dp._Inconsistent("test")

    monkeypatch.setattr(dp, "_fixup", broken)
    pts = _uniform(3000, seed=7)
    with pytest.warns(RuntimeWarning, match="global Qhull"):
        res = delaunay_tets_parallel(pts, workers=2, blocks=8)
    assert np.array_equal(_as_set(res.tets), _as_set(Delaunay(pts).simplices))
    _check_valid(pts, res)


def test_routing_by_size(monkeypatch):
    calls = []
    real = dp.partitioned_delaunay

    def spy(*a, **k):
        calls.append(k.get("workers"))
        return real(*a, **k)

    monkeypatch.setattr(dp, "partitioned_delaunay", spy)
    pts = _uniform(3000, seed=8)
    small = delaunay_tets(pts, parallel_min_points=10_000, workers=2)
    assert calls == []
    big = delaunay_tets(pts, parallel_min_points=1000, workers=2)
    assert calls == [2]
    one_core = delaunay_tets(pts, parallel_min_points=1000, workers=1)
    assert calls == [2]
    assert np.array_equal(_as_set(small.tets), _as_set(big.tets))
    assert np.array_equal(_as_set(one_core.tets), _as_set(big.tets))
    with DelaunayRunner(parallel_min_points=1000, workers=2) as runner:
        r = runner.submit(torch.from_numpy(pts)).result(timeout=60)
    assert calls == [2, 2] and np.array_equal(_as_set(r.tets), _as_set(big.tets))
    assert dl.DEFAULT_PARALLEL_MIN_POINTS >= 100_000


def test_no_warning_on_clean_input():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        delaunay_tets_parallel(_uniform(3000, seed=9), workers=2, blocks=6)
