"""Sliver demotion of the parallel Delaunay (``isosurface/delaunay_demote.py``): which kept tets go back to
the fix-up, the open faces after a demotion, the passes limit, and the whole engine against scipy's Qhull
on a near-co-circular lattice (slivers at every block seam)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import ConvexHull, Delaunay

from meshlift.isosurface import delaunay_demote as dd
from meshlift.isosurface import delaunay_fixup as df
from meshlift.isosurface import delaunay_parallel as dp
from meshlift.isosurface.delaunay import delaunay_tets_parallel

from _delaunay_checks import ties as _ties

_FACES = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])


def _lattice(n=10, jitter=1e-4, seed=0):
    """An ``n^3`` unit lattice jittered by ``jitter``: in general position (the same tets in every Delaunay
    tetrahedralisation) but full of near-co-circular quadruples, i.e. slivers."""
    g = np.stack(np.meshgrid(*[np.arange(float(n))] * 3, indexing="ij"), -1).reshape(-1, 3)
    return g + jitter * np.random.default_rng(seed).normal(size=g.shape)


def _as_set(t) -> set:
    return {tuple(r) for r in np.sort(np.asarray(t), axis=1).tolist()}


def _open(kept):
    """Open faces of ``kept`` (faces in one tet) with their kept sides."""
    faces = np.sort(kept[:, _FACES].reshape(-1, 3), axis=1)
    _, inv, cnt = np.unique(faces, axis=0, return_inverse=True, return_counts=True)
    rows = np.flatnonzero(cnt[inv.reshape(-1)] == 1)
    return faces[rows], kept.reshape(-1)[rows]


# a flat square (z = 0) lifted by 1e-5 at one corner: a sliver (|det| / L^3 ~ 1e-5)
_SQUARE = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 1e-5]], dtype=float)


def _bipyramid():
    """The sliver with a tet on one face on each side of it: below its face (0, 1, 2) and above its face
    (1, 2, 3) (no overlap). Returns ``(pts, the sliver [1, 4], the 3 kept tets)``."""
    pts = np.concatenate([_SQUARE, np.array([[0.7, 0.3, -1.0], [0.7, 0.7, 1.0]])])
    kept = np.array([[0, 1, 2, 3], [0, 1, 2, 4], [1, 2, 3, 5]])
    neg = np.linalg.det(pts[kept[:, 1:]] - pts[kept[:, :1]]) < 0
    kept[neg, 2:] = kept[neg][:, [3, 2]]
    return pts, kept[:1], kept


def test_a_sliver_on_open_faces_is_demoted():
    pts, sliver, kept = _bipyramid()
    assert 0 < dd._rel(pts, sliver)[0] < dd.SLIVER_REL
    walls, far = _open(kept)
    sign = df.wall_signs(pts, np.sort(walls, axis=1), far)
    rows = dd.sliver_rows(pts, kept, walls)
    assert rows.tolist() == [True, False, False]
    assert np.array_equal(rows, dd.sliver_rows_reference(pts, kept, walls))
    k2, w2, s2, vol, cnt = dd.demote_rows(pts, kept, np.sort(walls, axis=1), sign, rows)
    assert cnt == 1 and _as_set(k2) == _as_set(kept[1:])
    assert vol == pytest.approx(abs(np.linalg.det(pts[[1, 2, 3]] - pts[0])) / 6)
    # the open faces after the demotion are the faces of the tets left, and their kept sides are theirs
    w_ref, far_ref = _open(k2)
    assert _as_set(w2) == _as_set(w_ref)
    key = {tuple(f): s for f, s in zip(np.sort(w2, axis=1).tolist(), s2)}
    for f, s in zip(np.sort(w_ref, axis=1).tolist(), df.wall_signs(pts, np.sort(w_ref, axis=1), far_ref)):
        assert key[tuple(f)] == s != 0


def test_a_non_sliver_and_a_sliver_off_the_seams_are_kept():
    pts = np.concatenate([np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1.0]]), _SQUARE + 3.0])
    regular, flat = np.array([[0, 1, 2, 3]]), np.array([[4, 5, 6, 7]])
    kept = np.concatenate([regular, flat])
    # every vertex of the regular tet on open faces: kept (well shaped)
    walls = np.array([[0, 1, 2], [1, 2, 3]])
    assert not dd.sliver_rows(pts, kept, walls).any()
    # the sliver with only 2 vertices on open faces: kept (not on a seam)
    walls2 = np.concatenate([walls, np.array([[4, 5, 0]])])
    assert not dd.sliver_rows(pts, kept, walls2).any()
    assert np.array_equal(dd.sliver_rows_reference(pts, kept, walls2), dd.sliver_rows(pts, kept, walls2))
    walls3 = np.concatenate([walls, np.array([[4, 5, 6]])])
    assert dd.sliver_rows(pts, kept, walls3).tolist() == [False, True]


def test_threaded_sliver_rows_equal_the_reference(monkeypatch):
    from meshlift.isosurface import delaunay_rows as dr

    monkeypatch.setattr(dr, "PAR_MIN_ROWS", 256)
    pts = _lattice(9, 1e-4, seed=3)
    d = Delaunay(pts)
    kept = d.simplices[: d.simplices.shape[0] * 2 // 3].astype(np.int32)
    walls, _ = _open(kept)
    fast = dd.sliver_rows(pts, kept, walls, workers=4)
    assert fast.any() and np.array_equal(fast, dd.sliver_rows_reference(pts, kept, walls))


@pytest.mark.parametrize("jitter", [1e-3, 1e-5])
def test_lattice_with_seam_slivers_equals_scipy(jitter):
    pts = _lattice(11, jitter, seed=1)
    eng = dp.partitioned_delaunay(pts, workers=2, blocks=8)
    assert eng.stats["demoted_slivers"] > 0 and not eng.fallback and eng.stats["fix_rounds"] == 1
    res = delaunay_tets_parallel(pts, workers=2, blocks=8)
    tets = res.tets.numpy()
    assert len(_as_set(tets)) == tets.shape[0]
    p = pts[tets]
    e = p[:, 1:] - p[:, :1]
    vol = np.einsum("bi,bi->b", e[:, 0], np.cross(e[:, 1], e[:, 2])) / 6
    assert (vol > -1e-12).all() and vol.sum() == pytest.approx(ConvexHull(pts).volume, rel=1e-9)
    mine, ref = _as_set(tets), _as_set(Delaunay(pts).simplices)
    only = np.array(sorted(mine ^ ref), dtype=np.int64).reshape(-1, 4)
    assert only.shape[0] == 0 or _ties(pts, only).all(), "tets differ from scipy's beyond co-spherical ties"


def test_passes_limit_respected(monkeypatch):
    pts = _lattice(10, 1e-4)
    eng = dp.partitioned_delaunay(pts, workers=2, blocks=8)
    st = eng.stats
    assert st["sliver_passes"] == dd.SLIVER_PASSES == 4  # this lattice would go on: the limit stops it
    monkeypatch.setattr(dd, "SLIVER_PASSES", 1)
    one = dp.partitioned_delaunay(pts, workers=2, blocks=8)
    assert one.stats["sliver_passes"] == 1 and 0 < one.stats["demoted_slivers"] < st["demoted_slivers"]
    monkeypatch.setattr(dd, "SLIVER_PASSES", 0)  # the reference: no demotion
    ref = dp.partitioned_delaunay(pts, workers=2, blocks=8)
    assert ref.stats["demoted_slivers"] == 0 and ref.stats["kept_tets"] == ref.kept.shape[0]
    # kept + fix-up: the same tets whatever the passes (general position)
    whole = [_as_set(np.concatenate([e.kept, e.fix_tets[e.fix_keep]])) for e in (eng, one, ref)]
    assert whole[0] == whole[1] == whole[2]
    assert eng.kept.shape[0] == ref.kept.shape[0] - st["demoted_slivers"]


def test_demote_slivers_equals_pass_by_pass_reference():
    """demote_slivers (one copy of the kept tets at the end) against the plain loop: find the slivers with
    the numpy twin, demote them, repeat."""
    pts = _lattice(9, 1e-4, seed=4)
    d = Delaunay(pts)
    kept = d.simplices[: d.simplices.shape[0] * 3 // 4].astype(np.int32)
    kept[dd._rel(pts, kept) < 0, 2:] = kept[dd._rel(pts, kept) < 0][:, [3, 2]]
    walls, far = _open(kept)
    walls = np.sort(walls, axis=1)
    sign = df.wall_signs(pts, walls, far)
    for passes in (1, 2, dd.SLIVER_PASSES):
        k, w, s, vol, cnt, done = dd.demote_slivers(pts, kept, walls, sign, workers=2, passes=passes)
        rk, rw, rs, rvol = kept, walls, sign, 0.0
        for _ in range(passes):
            drop = dd.sliver_rows_reference(pts, rk, rw)
            if not drop.any():
                break
            rk, rw, rs, v, _ = dd.demote_rows(pts, rk, rw, rs, drop)
            rvol += v
        assert cnt > 0 and done <= passes and cnt == kept.shape[0] - rk.shape[0]
        assert np.array_equal(k, rk) and vol == pytest.approx(rvol)
        assert {tuple(f): x for f, x in zip(w.tolist(), s)} == {tuple(f): x for f, x in zip(rw.tolist(), rs)}


@pytest.mark.parametrize("n", [50, 100_000])
def test_unique_ids_equals_np_unique(n):
    """delaunay_rows.unique_ids (a bool mark, or np.unique when the ids are sparse) against np.unique."""
    from meshlift.isosurface import delaunay_rows as dr

    rng = np.random.default_rng(n)
    a = rng.integers(0, n, size=(300, 3)).astype(np.int32)
    b = rng.integers(0, n, size=40).astype(np.int32)
    got = dr.unique_ids([a, b], n)
    assert got.dtype == np.int32 and np.array_equal(got, np.unique(np.concatenate([a.reshape(-1), b])))
    assert dr.unique_ids([a[:0], b[:0]], n).size == 0
