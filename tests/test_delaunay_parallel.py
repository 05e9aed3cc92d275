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

from meshlift.errors import MeshError, MeshliftWarning, OutOfMemoryError
from meshlift.isosurface import delaunay as dl
from meshlift.isosurface import delaunay_certify as dc
from meshlift.isosurface import delaunay_fixup as df
from meshlift.isosurface import delaunay_rows as dr
from meshlift.isosurface import delaunay_parallel as dp
from meshlift.isosurface.delaunay import DelaunayRunner, delaunay_tets, delaunay_tets_parallel

from _delaunay_checks import pivots, ties as _ties

_FACES = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])


def _uniform(n, seed=0):
    return np.random.default_rng(seed).random((n, 3))


def _clustered(n, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.random((12, 3))
    return centres[rng.integers(0, 12, n)] + 0.03 * rng.normal(size=(n, 3)) * rng.random((n, 1))


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
    assert tets.dtype == np.int32 and tets.ndim == 2 and tets.shape[1] == 4
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


@pytest.mark.parametrize("make, n", [(_uniform, 6000), (_clustered, 6000)])
def test_parallel_equals_global_general_position(make, n):
    pts = make(n)
    res = delaunay_tets_parallel(pts, workers=2, blocks=12)
    assert np.array_equal(_as_set(res.tets), _as_set(Delaunay(pts).simplices))
    _check_valid(pts, res)
    assert res.num_points == n and res.num_unused_points == 0 and res.num_degenerate == 0


def test_parallel_milo_pivots_match_up_to_ties():
    pts = pivots(18000)
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
    with pytest.raises(OutOfMemoryError, match="raise blocks.*memory_gb"):
        delaunay_tets_parallel(_uniform(2000), workers=2, blocks=4)


def test_memory_budget_checked_up_front(monkeypatch):
    called = []
    monkeypatch.setattr(dp, "partition", lambda *a, **k: called.append(1))
    need = dp.estimate_memory_gb(5_400_000, 16, 48, dp.DEFAULT_MARGIN)
    assert 5 < need < 40  # the default preset's 5.4M pivots on 16 workers fit a 128 GB host
    with pytest.raises(OutOfMemoryError, match=r"blocks=8 .*memory_gb=0\.0.*raise blocks.*delaunay_memory_gb"):
        delaunay_tets_parallel(_uniform(3000), workers=2, blocks=8, memory_gb=1e-4)
    assert called == []
    with pytest.raises(MeshError, match="memory_gb"):
        delaunay_tets_parallel(_uniform(300), memory_gb=-1.0)
    # more blocks -> smaller blocks -> a lower estimate
    assert dp.estimate_memory_gb(10**7, 16, 192, 1.0) < dp.estimate_memory_gb(10**7, 16, 48, 1.0)


def test_inconsistent_blocks_fall_back_with_a_warning(monkeypatch):
    def broken(*a, **k):
        raise df._Inconsistent("test")

    monkeypatch.setattr(df, "fixup", broken)
    pts = _uniform(3000, seed=7)
    with pytest.warns(MeshliftWarning, match="global Qhull"):
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


def test_certify_tree_matches_brute_force():
    """The k-d tree certification against its brute-force twin, on random balls and on real tets (with
    ties: lattice points, and duplicates of vertices)."""
    rng = np.random.default_rng(11)
    pts = np.concatenate([_uniform(3000, seed=11), np.stack(np.meshgrid(*[np.arange(4.0) / 4] * 3), -1).reshape(-1, 3)])
    pts = np.concatenate([pts, pts[:50]])  # exact duplicates
    tets = Delaunay(pts[:3000]).simplices[:2000]
    centre, r2, _ = dp._circumspheres(pts, tets)
    tree = dc.build_tree(pts)
    for c, rr in ((centre, r2), (centre + 0.01 * rng.normal(size=centre.shape), r2 * rng.uniform(0.5, 2, r2.size))):
        for tol in (0.0, 1e-9 * rr):
            got = dc.empty_ball(tree, c, rr, tets, tol)
            ref = dc.empty_ball_reference(pts, c, rr, tets, tol)
            # compare away from rounding at the ball's edge (a lattice point exactly on a sphere)
            d2 = ((pts[None] - c[:, None]) ** 2).sum(-1)
            np.put_along_axis(d2, tets, np.inf, axis=1)
            clear = np.abs(d2.min(axis=1) - (rr + tol)) > 1e-12 * rr
            assert clear.mean() > 0.9 and np.array_equal(got[clear], ref[clear])
    # NaN balls (flat tets) are never certified
    assert not dc.empty_ball(tree, np.full((2, 3), np.nan), np.ones(2), tets[:2], 0.0).any()
    with pytest.raises(MeshError, match="shape"):
        dc.build_tree(pts[:, :2])


@pytest.mark.parametrize("margin", [0.3, 1.0, 3.0])
def test_thin_halo_is_exact(margin):
    pts = _clustered(6000, seed=12)
    eng = dp.partitioned_delaunay(pts, workers=2, blocks=12, margin=margin)
    assert not eng.fallback and eng.stats["kd_kept"] > 0
    tets = np.concatenate([eng.kept, eng.fix_tets[eng.fix_keep]])
    assert np.array_equal(_as_set(tets), _as_set(Delaunay(pts).simplices))
    assert tets.dtype == np.int32 and eng.kept.dtype == np.int32


def test_without_tree_or_groups_same_tets():
    pts = pivots(9000, seed=13)
    ref = dp.partitioned_delaunay(pts, workers=2, blocks=10, certify=False, grouped=False)
    eng = dp.partitioned_delaunay(pts, workers=2, blocks=10)
    assert not eng.fallback and not ref.fallback and eng.stats["fix_calls"] >= 1
    a = np.concatenate([eng.kept, eng.fix_tets[eng.fix_keep]])
    b = np.concatenate([ref.kept, ref.fix_tets[ref.fix_keep]])
    assert _as_set(a).shape[0] == a.shape[0]
    sa, sb = {tuple(t) for t in _as_set(a).tolist()}, {tuple(t) for t in _as_set(b).tolist()}
    only = np.array(sorted(sa ^ sb), dtype=np.int64).reshape(-1, 4)
    assert _ties(pts, only).all()


def test_grouped_fixup_check_falls_back_with_a_warning(monkeypatch):
    """A wrong grouping (every unused point and open face in its own call) is caught by the acceptance
    checks; the one-call fix-up then gives the exact result, with a warning."""
    def bad_groups(pts, walls, wall_far, unused, max_bins, hull_ids=None, reuse=None, join_tiny=True):
        half = walls.shape[0] // 2  # split the open faces arbitrarily: holes are cut in two
        out = []
        for rows in (np.arange(half), np.arange(half, walls.shape[0])):
            out.append((np.unique(walls[rows].reshape(-1)), rows))
        return out, 2

    monkeypatch.setattr(df, "groups", bad_groups)
    pts = _uniform(6000, seed=14)
    with pytest.warns(MeshliftWarning, match="one Qhull call|grew the fix-up region"):
        res = delaunay_tets_parallel(pts, workers=2, blocks=12)
    assert np.array_equal(_as_set(res.tets), _as_set(Delaunay(pts).simplices))


def test_accept_rejects_overlap_and_holes():
    pts = _uniform(4000, seed=15)
    eng = dp.partitioned_delaunay(pts, workers=2, blocks=8, margin=0.5)
    assert not eng.fallback
    walls, _ = df.open_faces(*_reported_faces(eng), pts.shape[0])
    kept_volume = np.abs(_volumes(pts, eng.kept)).sum()
    hull = ConvexHull(pts)
    df.accept(pts, hull, walls, eng.fix_tets, eng.fix_keep, kept_volume)  # the real one passes
    keep = eng.fix_keep.copy()
    keep[np.flatnonzero(keep)[0]] = False  # a hole
    with pytest.raises(df._Inconsistent):
        df.accept(pts, hull, walls, eng.fix_tets, keep, kept_volume)
    doubled = np.concatenate([eng.fix_tets, eng.fix_tets[eng.fix_keep][:1]])
    with pytest.raises(df._Inconsistent, match=r"repeated|3\+"):
        df.accept(pts, hull, walls, doubled, np.r_[eng.fix_keep, True], kept_volume)
    with pytest.raises(df._Inconsistent, match="volume"):
        df.accept(pts, hull, walls, eng.fix_tets, eng.fix_keep, kept_volume * 1.01)


def _reported_faces(eng):
    """Faces of the kept tets (each once per tet) with their far vertices, as the blocks report them."""
    k = eng.kept
    faces = np.sort(k[:, _FACES].reshape(-1, 3), axis=1)
    far = k.reshape(-1)
    return faces, far


@pytest.mark.parametrize("kind", ["grid", "duplicates", "clustered", "slab"])
def test_degenerate_sets_valid_and_positive(kind):
    rng = np.random.default_rng(16)
    if kind == "grid":
        pts = np.stack(np.meshgrid(*[np.arange(9.0)] * 3, indexing="ij"), -1).reshape(-1, 3)
        pts = np.concatenate([pts, 8.0 * rng.random((1500, 3))])
    elif kind == "duplicates":
        base = pivots(6000, seed=16)
        pts = np.concatenate([base, base[rng.choice(base.shape[0], 600, replace=False)]])
    elif kind == "clustered":
        pts = _clustered(8000, seed=16)
        pts[:500] = pts[0] + 1e-4 * rng.normal(size=(500, 3))  # a tight cluster (1e-7 defeats one Qhull too)
    else:
        pts = _uniform(6000, seed=16) * np.array([1.0, 1.0, 1e-4])
    res = delaunay_tets_parallel(pts, workers=2, blocks=10)
    _check_valid(pts, res)
    if kind in ("clustered", "slab"):  # general position: the same tets as scipy
        assert np.array_equal(_as_set(res.tets), _as_set(Delaunay(pts).simplices))


def test_milo_delaunay_errors_name_the_knobs():
    from types import SimpleNamespace

    from meshlift.methods.milo.mesh_in_loop import MeshInTheLoop
    from meshlift.methods.milo.presets import get_preset

    cfg = get_preset("default")
    assert cfg.delaunay_memory_gb == 0.0 and cfg.num_pivots == 5_400_000
    me = SimpleNamespace(cfg=cfg)
    pts = _uniform(3000)

    def over_budget():
        return delaunay_tets(pts, parallel_min_points=1000, workers=2, memory_gb=1e-4)

    with pytest.raises(OutOfMemoryError, match=r"num_pivots=5,400,000.*mesh_res_scale.*delaunay_memory_gb"):
        MeshInTheLoop._named(me, over_budget)
    flat = np.concatenate([pts[:, :2], np.zeros((3000, 1))], axis=1)
    with pytest.raises(MeshError, match=r"num_pivots=5,400,000.*coplanar.*extract=tsdf"):
        MeshInTheLoop._named(me, lambda: delaunay_tets(flat, parallel_min_points=1000, workers=2))


def test_fixup_disagreement_grows_the_region(monkeypatch):
    """A fix-up call that disagrees at some points (as Qhull's precision can at millions of points) makes the
    engine drop the kept tets around them and redo the fix-up: the same tets, with a warning, no global Qhull."""
    real = df.fixup
    calls = []

    def flaky(pts, s_ids, walls, *a, **k):
        calls.append(1)
        if len(calls) <= 3:  # the first fix-up calls disagree
            raise df._Inconsistent("test disagreement", walls[:3])
        return real(pts, s_ids, walls, *a, **k)

    monkeypatch.setattr(df, "fixup", flaky)
    pts = _clustered(6000, seed=17)
    with pytest.warns(MeshliftWarning, match="grew the fix-up region"):
        res = delaunay_tets_parallel(pts, workers=2, blocks=12)
    assert np.array_equal(_as_set(res.tets), _as_set(Delaunay(pts).simplices))
    _check_valid(pts, res)


def _one_failing_call(monkeypatch):
    """Make the first (largest) grouped call of the first round disagree at the vertices of 2 of its open
    faces; record every round's calls as ``(points, injected failure)``."""
    real_groups, real_fixup = df.groups, df.fixup
    rounds, state = [], {}

    def groups(*a, **k):
        out, ng = real_groups(*a, **k)
        rounds.append([])
        if len(rounds) == 1:
            state["fail"] = out[0][0]
        return out, ng

    def fixup(pts, s_ids, walls, *a, **k):
        fail = s_ids is state.get("fail")
        rounds[-1].append((s_ids.copy(), fail))
        if fail:
            raise df._Inconsistent("test disagreement", walls[:2])
        return real_fixup(pts, s_ids, walls, *a, **k)

    monkeypatch.setattr(df, "groups", groups)
    monkeypatch.setattr(df, "fixup", fixup)
    return rounds


def test_repair_round_reruns_only_failing_groups(monkeypatch):
    """After one grouped call disagrees, the repair round runs only the groups it failed on and those the
    grown region changed (fewer calls and points); the accepted groups' tets are reused, and the result is
    the same as re-running every group (``REUSE_GROUPS = False``, the reference) and as one scipy call."""
    # 4 small pivot shells side by side: 4 fix-up groups (3 inner skins, one outer group along the hull)
    pts = np.concatenate([pivots(3000, s) + np.array([3.0 * s, 0.5 * (s % 2), 0.0]) for s in range(4)])
    out = {}
    for reuse in (True, False):
        monkeypatch.setattr(df, "JOIN_TINY_GROUPS", True)  # the reference grouping: one group per skin
        monkeypatch.setattr(dp, "REUSE_GROUPS", reuse)
        rounds = _one_failing_call(monkeypatch)
        eng = dp.partitioned_delaunay(pts, workers=4, blocks=12)
        assert eng.fallback.startswith("grew the fix-up region") and "test disagreement" in eng.fallback
        out[reuse] = (eng, rounds)
        monkeypatch.undo()
    (eng, rounds), (ref, ref_rounds) = out[True], out[False]
    assert eng.stats["fix_rounds"] == ref.stats["fix_rounds"] == 2 and len(rounds) == len(ref_rounds) == 2
    first, second = rounds
    assert len(first) == 4 and sum(f for _, f in first) == 1
    failed = next(ids for ids, f in first if f)
    # round 2: fewer calls and points than round 1 (and than the reference's round 2, which re-runs all)
    assert 1 <= len(second) < len(first) and len(second) < len(ref_rounds[1])
    assert sum(ids.size for ids, _ in second) < sum(ids.size for ids, _ in ref_rounds[1])
    assert eng.stats["fix_reused_groups"] > 0 and eng.stats["fix_round_calls"][1][0] == len(second)
    # every group re-run touches the failed call's points (the grown region lies there)
    assert all(np.intersect1d(ids, failed).size for ids, _ in second)
    assert np.array_equal(_as_set(eng.kept), _as_set(ref.kept))
    assert np.array_equal(_as_set(eng.fix_tets[eng.fix_keep]), _as_set(ref.fix_tets[ref.fix_keep]))
    tets = np.concatenate([eng.kept, eng.fix_tets[eng.fix_keep]])
    assert _as_set(tets).shape[0] == len(tets)
    sa, sb = {tuple(t) for t in _as_set(tets).tolist()}, {tuple(t) for t in _as_set(Delaunay(pts).simplices).tolist()}
    only = np.array(sorted(sa ^ sb), dtype=np.int64).reshape(-1, 4)
    assert _ties(pts, only).all()  # the same tets as one scipy call up to co-spherical float32 ties


def _one_failing_classify(monkeypatch, where="first"):
    """Make the first round's largest grouped call disagree after its Qhull (at the vertices of 2 of its
    open faces), so that it can salvage its DT(S); record every round's calls as ``(points, failed)``."""
    real_groups, real_classify = df.groups, df._classify
    rounds, state = [], {}

    def groups(*a, **k):
        out, ng = real_groups(*a, **k)
        rounds.append([])
        if len(rounds) == 1:
            state["fail"] = max(out, key=lambda b: b[0].size)[0]
        return out, ng

    def classify(pts, s_ids, simp, nb, walls, *a, **k):
        fail = s_ids is state.get("fail")
        rounds[-1].append((s_ids.copy(), fail))
        if fail:
            raise df._Inconsistent("test disagreement", walls[:2] if where == "first" else walls[-2:])
        return real_classify(pts, s_ids, simp, nb, walls, *a, **k)

    monkeypatch.setattr(df, "groups", groups)
    monkeypatch.setattr(df, "_classify", classify)
    return rounds


@pytest.mark.parametrize("where", ["first", "last"])
def test_repair_salvages_the_failing_call(monkeypatch, where):
    """A grouped call that disagrees at a few points keeps its DT(S) tets away from them (promoted to kept
    tets): the repair round re-triangulates only a small region there, not the failing group again, and the
    result is the same as re-running the failing group whole (``SALVAGE = False``, the reference) and as one
    scipy call, up to co-spherical float32 ties."""
    pts = np.concatenate([pivots(4000, s) + np.array([3.0 * s, 0.5 * (s % 2), 0.0]) for s in range(3)])
    out = {}
    for salvage in (True, False):
        monkeypatch.setattr(dp, "SALVAGE", salvage)
        rounds = _one_failing_classify(monkeypatch, where)
        eng = dp.partitioned_delaunay(pts, workers=3, blocks=12)
        assert eng.fallback.startswith("grew the fix-up region") and "test disagreement" in eng.fallback
        out[salvage] = (eng, rounds)
        monkeypatch.undo()
    (eng, rounds), (ref, ref_rounds) = out[True], out[False]
    assert eng.stats["fix_rounds"] == 2 and len(rounds) == 2
    assert eng.stats["promoted_tets"] > 0 and ref.stats["promoted_tets"] == 0
    failed = next(ids for ids, f in rounds[0] if f)
    # round 2 re-runs less than the failing call (the region around the disagreement, and on this small set
    # the hull's vertices), and less than the reference, which re-runs the failing group grown
    big2 = max(ids.size for ids, _ in rounds[1])
    assert big2 < failed.size
    assert sum(ids.size for ids, _ in rounds[1]) < sum(ids.size for ids, _ in ref_rounds[1])
    for e in (eng, ref):
        tets = np.concatenate([e.kept, e.fix_tets[e.fix_keep]])
        assert _as_set(tets).shape[0] == len(tets)
        sa = {tuple(t) for t in _as_set(tets).tolist()}
        sb = {tuple(t) for t in _as_set(Delaunay(pts).simplices).tolist()}
        only = np.array(sorted(sa ^ sb), dtype=np.int64).reshape(-1, 4)
        assert _ties(pts, only).all()
    # the whole result through the public function: valid, every tet positive
    monkeypatch.setattr(dp, "SALVAGE", True)
    _one_failing_classify(monkeypatch, where)
    with pytest.warns(MeshliftWarning, match="grew the fix-up region"):
        res = delaunay_tets_parallel(pts, workers=3, blocks=12)
    _check_valid(pts, res)


def test_salvage_and_promote_reference():
    """salvage_tets on a correct DT(S) with no disagreement far from ``bad`` returns the missing tets outside
    the rings, and promote's open faces equal a brute-force recount of the kept + promoted tets' faces."""
    pts = pivots(3000, 5)
    eng = dp.partitioned_delaunay(pts, workers=2, blocks=6)
    assert eng.fix_keep.any()
    kept = eng.kept
    faces = np.sort(kept[:, df._FACE].reshape(-1, 3), axis=1)
    _, inv, cnt = np.unique(faces, axis=0, return_inverse=True, return_counts=True)
    rows = np.flatnonzero(cnt[inv.reshape(-1)] == 1)  # row 4 i + k: tet i's face opposite its corner k
    walls, far = faces[rows], kept.reshape(-1)[rows]
    sign = df.wall_signs(pts, walls, far)
    used = np.zeros(len(pts), bool)
    used[kept.reshape(-1)] = True
    s_ids = np.unique(np.concatenate([walls.reshape(-1), np.flatnonzero(~used)]))
    d = Delaunay(pts[s_ids])
    bad = walls[:1].reshape(-1)
    sal = df.salvage_tets(pts, s_ids, d.simplices, d.neighbors, walls, sign, bad)
    miss = {tuple(t) for t in _as_set(eng.fix_tets[eng.fix_keep]).tolist()}
    got = {tuple(t) for t in _as_set(sal).tolist()}
    assert 0 < len(got) < len(miss)
    extra = np.array(sorted(got - miss), dtype=np.int64).reshape(-1, 4)
    assert _ties(pts, extra).all()  # at most a co-spherical cell split another way
    assert (_volumes(pts, sal) > 0).all()
    assert not np.isin(sal, bad).any()
    k2, w2, s2, vol = df.promote(pts, kept, walls, sign, sal)
    f2 = np.sort(k2[:, df._FACE].reshape(-1, 3), axis=1)
    u2, c2 = np.unique(f2, axis=0, return_counts=True)
    assert np.array_equal(np.unique(w2, axis=0), u2[c2 == 1])
    assert vol == pytest.approx(_volumes(pts, sal).sum())


def _random_faces(rng, m, n):
    """``[m, 3]`` sorted id triples below ``n`` (distinct ids per row), with repeated rows."""
    f = np.sort(rng.choice(n, size=(m, 3)), axis=1)
    f = f[(f[:, 0] < f[:, 1]) & (f[:, 1] < f[:, 2])]
    return np.concatenate([f, f[rng.integers(0, f.shape[0], f.shape[0] // 3)]])[rng.permutation(
        f.shape[0] + f.shape[0] // 3)]


@pytest.mark.parametrize("n", [50, 1 << 21, 5_400_000, 2**31 - 1])
def test_int64_face_key_sorts_like_lexsort(n):
    """_sort_faces (one int64 key: packed ids, ranked first past 2^21) gives the same order and runs as the
    two-key lexsort reference, for ids below 2^21 and above it (few distinct ids)."""
    rng = np.random.default_rng(n % 1000)
    faces = _random_faces(rng, 20000, n).astype(np.int32 if n < 2**31 else np.int64)
    order, start = dr._sort_faces(faces, n)
    ref_order, ref_start = dr._sort_faces_lex(faces, n)
    assert np.array_equal(order, ref_order) and np.array_equal(start, ref_start)
    f = faces[order].astype(np.int64)
    assert (np.diff(f[:, 0]) >= 0).all()  # lexicographic
    key = dr._pack_faces(faces[faces.max(axis=1) < (1 << dr.FACE_KEY_BITS)])
    assert key.dtype == np.int64 and (key >= 0).all()


def test_int64_face_key_falls_back_past_2_21_distinct_ids(monkeypatch):
    """When the faces use more than 2^FACE_KEY_BITS distinct ids the two-key lexsort is used (shrunk to 6
    bits here), with the same result; and the whole engine gives the same tets with the shrunk key."""
    rng = np.random.default_rng(3)
    faces = _random_faces(rng, 3000, 100_000)
    calls = []
    real = dr._sort_faces_lex
    monkeypatch.setattr(dr, "_sort_faces_lex", lambda f, n: calls.append(n) or real(f, n))
    order, start = dr._sort_faces(faces, 100_000)
    assert not calls  # the ranked ids fit in 21 bits
    monkeypatch.setattr(dr, "FACE_KEY_BITS", 6)
    o2, s2 = dr._sort_faces(faces, 100_000)
    assert calls == [100_000]
    assert np.array_equal(order, o2) and np.array_equal(start, s2)
    small = np.sort(rng.choice(60, size=(500, 3)), axis=1)
    small = small[(small[:, 0] < small[:, 1]) & (small[:, 1] < small[:, 2])]
    o3, s3 = dr._sort_faces(small, 1000)  # ranked: < 64 distinct ids, packed in 6 bits
    r3, t3 = real(small, 1000)
    assert np.array_equal(o3, r3) and np.array_equal(s3, t3)
    pts = pivots(4000, 2)
    ref = dl.delaunay_tets_parallel(pts, workers=2, blocks=6)
    monkeypatch.setattr(dr, "FACE_KEY_BITS", 5)
    got = dl.delaunay_tets_parallel(pts, workers=2, blocks=6)
    assert np.array_equal(_as_set(ref.tets), _as_set(got.tets))


def test_threaded_row_passes_equal_numpy(monkeypatch):
    """mark_used, rows_touching, take_rows and concat_rows split into chunks over threads equal numpy."""
    monkeypatch.setattr(dr, "PAR_MIN_ROWS", 100)
    rng = np.random.default_rng(0)
    tets = rng.integers(0, 5000, size=(2345, 4)).astype(np.int32)
    ref = np.zeros(5000, bool)
    ref[tets.reshape(-1)] = True
    mark = rng.random(5000) < 0.01
    keep = rng.random(2345) < 0.7
    other = rng.integers(0, 5000, size=(777, 4)).astype(np.int32)
    for w in (1, 3, 16):
        assert np.array_equal(dr.mark_used(5000, tets, w), ref)
        assert np.array_equal(dr.rows_touching(mark, tets, w), mark[tets].any(axis=1))
        assert np.array_equal(dr.take_rows(tets, keep, w), tets[keep])
        assert np.array_equal(dr.concat_rows([tets, other, tets[:5]], w), np.concatenate([tets, other, tets[:5]]))
    assert dr.take_rows(tets, np.zeros(2345, bool), 3).shape == (0, 4)


def test_hull_once_in_a_thread_same_tets(monkeypatch):
    """The convex hull of all points computed once while the blocks run gives the same tets as each round's
    hull of the fix-up set (start_hull -> None), and a failing hull is raised as an inconsistency."""
    pts = pivots(4000, 7)
    ref = dp.partitioned_delaunay(pts, workers=2, blocks=6)
    monkeypatch.setattr(dp, "start_hull", lambda p, pool=None: None)
    got = dp.partitioned_delaunay(pts, workers=2, blocks=6)
    assert np.array_equal(_as_set(ref.kept), _as_set(got.kept))
    assert np.array_equal(_as_set(ref.fix_tets[ref.fix_keep]), _as_set(got.fix_tets[got.fix_keep]))
    hull, ids = df.convex_hull(pts)
    assert np.array_equal(np.sort(ids), np.sort(ConvexHull(pts).vertices))
    assert isinstance(df.convex_hull(np.zeros((10, 3))), df._Inconsistent)
