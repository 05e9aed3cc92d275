"""The grouping of the parallel Delaunay's fix-up (``delaunay_groups.groups``): the small holes in calls of
their own (``JOIN_TINY_GROUPS = False``) against the reference grouping that joins them to the big groups,
the round redone with the reference grouping when a check fails, and the hull points with Qhull's
coplanar points."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.spatial import Delaunay

from meshlift.errors import MeshliftWarning
from meshlift.isosurface import delaunay_fixup as df
from meshlift.isosurface import delaunay_groups as dg
from meshlift.isosurface import delaunay_parallel as dp
from meshlift.isosurface import delaunay_rows as dr

from _delaunay_checks import pivots, ties as _ties


def _shells(n_each=3000, k=4):
    """``k`` small MILo-like pivot shells side by side (each: an inner skin, the outer ones along the hull)."""
    out = [pivots(n_each, s) + np.array([3.0 * s, 0.5 * (s % 2), 0.0]) for s in range(k)]
    return np.concatenate(out).astype(np.float32).astype(np.float64)


def _tets(eng) -> np.ndarray:
    return np.unique(np.sort(np.concatenate([eng.kept, eng.fix_tets[eng.fix_keep]]), axis=1), axis=0)


def _differ(pts, a, b) -> np.ndarray:
    sa, sb = {tuple(t) for t in a.tolist()}, {tuple(t) for t in b.tolist()}
    return np.array(sorted(sa ^ sb), dtype=np.int64).reshape(-1, 4)


def test_tiny_groups_stay_apart_or_join_the_big_one():
    """A fan of triangles (one big group, > MIN_GROUP_POINTS points) and two lone triangles far away: three
    groups without joining, one with it (the lone ones join the big group nearest to them)."""
    m = dg.MIN_GROUP_POINTS + 10
    ang = np.linspace(0, 2 * np.pi, m, endpoint=False)
    fan = np.c_[np.cos(ang), np.sin(ang), np.zeros(m)]
    far = [[5, 0, 0], [5, 1, 0], [5, 0, 1], [-5, 0, 0], [-5, 1, 0], [-5, 0, 1]]
    pts = np.concatenate([[[0.0, 0.0, 0.0]], fan, far])
    walls = np.array([[0, 1 + i, 1 + (i + 1) % m] for i in range(m)] + [[m + 1, m + 2, m + 3], [m + 4, m + 5, m + 6]])
    walls = np.sort(walls, axis=1).astype(np.int32)
    unused = np.zeros(0, np.int32)
    apart, ng_apart = dg.groups(pts, walls, None, unused, 8, join_tiny=False)
    joined, ng_joined = dg.groups(pts, walls, None, unused, 8, join_tiny=True)
    assert (ng_apart, ng_joined) == (3, 1)
    assert len(apart) == 3 and len(joined) == 1
    assert sorted(b[0].size for b in apart) == [3, 3, m + 1]
    assert np.array_equal(joined[0][0], np.arange(pts.shape[0]))
    # every open face goes to exactly one call
    assert np.array_equal(np.sort(np.concatenate([b[1] for b in apart])), np.arange(walls.shape[0]))


def test_split_grouping_equals_the_reference_grouping(monkeypatch):
    """4 pivot shells: the small holes in calls of their own give more groups and calls than the reference
    grouping (tiny groups joined: one group per skin), the same tets up to co-spherical ties, and those of one
    scipy call up to ties; no check fails, no warning."""
    pts = _shells()
    out = {}
    for join in (False, True):
        monkeypatch.setattr(df, "JOIN_TINY_GROUPS", join)
        with warnings.catch_warnings():
            warnings.simplefilter("error", MeshliftWarning)
            out[join] = dp.partitioned_delaunay(pts, workers=4, blocks=12)
    eng, ref = out[False], out[True]
    assert not eng.fallback and not ref.fallback and "fix_regrouped" not in eng.stats
    assert eng.stats["fix_groups"] > ref.stats["fix_groups"] and eng.stats["fix_calls"] >= ref.stats["fix_calls"]
    assert max(eng.stats["fix_call_points"]) < max(ref.stats["fix_call_points"])
    a, b = _tets(eng), _tets(ref)
    assert _ties(pts, _differ(pts, a, b)).all()
    scipy_tets = np.unique(np.sort(Delaunay(pts).simplices, axis=1), axis=0)
    assert _ties(pts, _differ(pts, a, scipy_tets)).all()


@pytest.mark.parametrize("how", ["check", "no points"])
def test_failed_split_grouping_is_redone_as_the_reference(monkeypatch, how):
    """When the split grouping fails a check (or a call fails without naming points), the round is redone
    with the reference grouping: no warning, ``fix_regrouped`` in the stats, the reference's tets."""
    pts = _shells(2700, 3)
    monkeypatch.setattr(df, "JOIN_TINY_GROUPS", True)
    ref = dp.partitioned_delaunay(pts, workers=4, blocks=12)
    monkeypatch.setattr(df, "JOIN_TINY_GROUPS", False)
    real_accept, real_fixup, seen = df.accept, df.fixup, []

    def accept(*a, **k):
        seen.append("accept")
        if len(seen) == 1:
            raise df._Inconsistent("test: a check failed")
        return real_accept(*a, **k)

    def fixup(*a, **k):
        seen.append("call")
        if len(seen) == 1:
            raise df._Inconsistent("test: a call failed")
        return real_fixup(*a, **k)

    monkeypatch.setattr(df, "accept" if how == "check" else "fixup", accept if how == "check" else fixup)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MeshliftWarning)
        eng = dp.partitioned_delaunay(pts, workers=4, blocks=12)
    assert not eng.fallback and "test:" in eng.stats["fix_regrouped"]
    assert eng.stats["fix_rounds"] == 1 and len(eng.stats["fix_round_calls"]) == 2
    assert eng.stats["fix_groups"] == ref.stats["fix_groups"]
    assert _ties(pts, _differ(pts, _tets(eng), _tets(ref))).all()


def test_hull_ids_include_coplanar_points():
    """A point in the middle of a hull facet (not a Qhull vertex) is a hull point; interior points are not."""
    rng = np.random.default_rng(3)
    cube = np.array([[x, y, z] for x in (0.0, 1.0) for y in (0.0, 1.0) for z in (0.0, 1.0)])
    pts = np.concatenate([cube, [[0.5, 0.5, 0.0], [0.25, 0.75, 1.0]], 0.1 + 0.8 * rng.random((50, 3))])
    hull, ids = df.convex_hull(pts)
    assert set(ids.tolist()) == set(range(10))
    assert np.isclose(hull.volume, 1.0)


@pytest.mark.parametrize("case", ["distinct", "repeat in a", "repeat in b", "empty"])
def test_unmatched_keys_equal_isin(case):
    """The one-sort match of the acceptance check equals its ``np.isin`` twin (with its fallback for keys
    repeated within one array)."""
    rng = np.random.default_rng(7)
    a = rng.choice(1 << 40, 3000, replace=False).astype(np.int64)
    b = np.concatenate([a[:1800], rng.choice(1 << 40, 50, replace=False).astype(np.int64)])
    rng.shuffle(b)
    if case == "repeat in a":
        a = np.concatenate([a, a[:5]])
    elif case == "repeat in b":
        b = np.concatenate([b, b[:5], b[:1]])
    elif case == "empty":
        b = b[:0]
    x, y = dr.unmatched_keys(a, b)
    assert np.array_equal(x, ~np.isin(a, b)) and np.array_equal(y, ~np.isin(b, a))


@pytest.mark.parametrize("blocks", [1, 5, 12, 48])
def test_level_parallel_partition_equals_the_recursive_one(blocks):
    """The kd-split and the gather level by level in a thread pool give the recursive reference's blocks:
    the same cells, halo sets (same order) and margins (also where a cell cannot be split: many duplicates)."""
    import concurrent.futures as cf

    from meshlift.isosurface import delaunay_partition as dpp

    rng = np.random.default_rng(blocks)
    pts = np.concatenate([_shells(1800, 2), np.repeat(rng.random((1, 3)), 300, axis=0)])
    ref = dpp.partition(pts, blocks, 1.0)
    with cf.ThreadPoolExecutor(4) as pool:
        got = dpp.partition(pts, blocks, 1.0, pool, 4)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert np.array_equal(g[0], r[0]) and np.array_equal(g[1], r[1]) and g[3] == r[3]
        assert np.array_equal(g[2], r[2])
    assert np.array_equal(np.unique(np.concatenate([r[2] for r in ref])), np.arange(pts.shape[0]))
