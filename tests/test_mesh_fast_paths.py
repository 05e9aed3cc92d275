"""The fast paths of the mesh post-processing (packed-key uniques, sorted-key watertightness) against their
simple reference twins: the same faces, vertices and reports on random meshes with holes, floaters and
non-manifold edges (benchmarks/extract_stages.py measures the speed; no timing here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

trimesh = pytest.importorskip("trimesh")

import meshlift.mesh.clean as clean_mod  # noqa: E402
import meshlift.mesh.crop as crop_mod  # noqa: E402
from meshlift.mesh.clean import clean_mesh  # noqa: E402
from meshlift.mesh.rows import pack_rows, unique_rows  # noqa: E402
from meshlift.mesh.crop import _is_watertight_reference, crop_mesh, is_watertight  # noqa: E402
from meshlift.mesh.fill import boundary_loops, fill_holes  # noqa: E402
from meshlift.mesh.support_plane import remove_support_plane  # noqa: E402
from meshlift.structures.mesh import Mesh  # noqa: E402

KWARGS = [{}, {"return_index": True}, {"return_inverse": True}, {"return_counts": True},
          {"return_inverse": True, "return_counts": True},
          {"return_index": True, "return_inverse": True, "return_counts": True}]


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _unique_rows_reference(a, **kwargs):
    """``np.unique(axis=0)`` for integer rows (the old code's call), the float path unchanged."""
    a = np.ascontiguousarray(a)
    if a.ndim == 2 and np.issubdtype(a.dtype, np.integer):
        return np.unique(a, axis=0, **kwargs)
    return _ORIGINAL_UNIQUE_ROWS(a, **kwargs)


_ORIGINAL_UNIQUE_ROWS = unique_rows


def _random_mesh(seed: int) -> Mesh:
    """A welded sphere + torus + floaters with holes (faces removed), a non-manifold fin and jitter."""
    rng = np.random.default_rng(seed)
    parts = [trimesh.creation.icosphere(subdivisions=3, radius=1.0),
             trimesh.creation.torus(1.2, 0.3, major_sections=24, minor_sections=12)]
    for _ in range(4):
        s = trimesh.creation.icosphere(subdivisions=1, radius=0.05)
        s.apply_translation(rng.uniform(-1.5, 1.5, 3))
        parts.append(s)
    t = trimesh.util.concatenate(parts)
    v = np.asarray(t.vertices) * (1 + 0.02 * rng.standard_normal((len(t.vertices), 1)))
    f = np.asarray(t.faces)
    keep = rng.random(len(f)) > 0.03  # holes
    f = f[keep]
    fin = np.array([[f[0, 0], f[0, 1], len(v)]])  # a third face on an edge: non-manifold
    v = np.concatenate([v, v[f[0, 0]][None] + 0.1])
    f = np.concatenate([f, fin, f[5:8, ::-1]])  # and duplicated faces, reversed
    return Mesh(torch.tensor(v, dtype=torch.float32), torch.tensor(f, dtype=torch.int64))


@pytest.mark.parametrize("shape,hi", [((500, 2), 30), ((400, 3), 6), ((7, 2), 1), ((300, 3), 2**20)])
def test_unique_rows_matches_numpy_axis0(shape, hi):
    a = np.random.default_rng(0).integers(0, hi, shape)
    for kw in KWARGS:
        got, want = _as_tuple(unique_rows(a, **kw)), _as_tuple(np.unique(a, axis=0, **kw))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.reshape(-1), w.reshape(-1))
    assert pack_rows(a.astype(np.float32)) is None


def test_unique_rows_unpackable_rows_are_consistent():
    """Rows too wide to pack (and float rows) are compared as bytes: the same set, a consistent inverse."""
    for a in (np.random.default_rng(1).integers(0, 2**20, (60, 4)) // 3,
              np.random.default_rng(2).integers(0, 4, (80, 3)).astype(np.float32)):
        assert pack_rows(a) is None
        rows, first, inv, cnt = unique_rows(a, return_index=True, return_inverse=True, return_counts=True)
        np.testing.assert_array_equal(rows[inv.reshape(-1)], a)
        np.testing.assert_array_equal(a[first], rows)
        assert len(rows) == len(np.unique(a, axis=0)) and cnt.sum() == len(a)


@pytest.mark.parametrize("seed", range(4))
def test_is_watertight_matches_reference(seed):
    closed = np.asarray(trimesh.creation.icosphere(subdivisions=2).faces)
    rng = np.random.default_rng(seed)
    cases = [closed, closed[rng.random(len(closed)) > 0.01], np.concatenate([closed, closed[:1]]),
             np.concatenate([closed[1:], closed[:1, ::-1]]), closed[:1], _random_mesh(seed).t_pos_idx.numpy()]
    for f in cases:
        assert is_watertight(f) == _is_watertight_reference(f)
    assert is_watertight(closed)


@pytest.fixture
def reference(monkeypatch):
    """Run the code under test with the reference twins patched in."""
    def use():
        monkeypatch.setattr(clean_mod, "unique_rows", _unique_rows_reference)
        monkeypatch.setattr(crop_mod, "unique_rows", _unique_rows_reference)
        monkeypatch.setattr(crop_mod, "is_watertight", _is_watertight_reference)
    return use


def _same(a: Mesh, b: Mesh):
    np.testing.assert_array_equal(a.t_pos_idx.numpy(), b.t_pos_idx.numpy())
    np.testing.assert_array_equal(a.v_pos.numpy(), b.v_pos.numpy())


@pytest.mark.parametrize("seed", range(3))
def test_clean_fill_crop_support_match_reference(seed, reference):
    mesh = _random_mesh(seed)
    rot = trimesh.transformations.rotation_matrix(0.3, [0.2, 0.3, 1.0])[:3, :3]

    def pipeline():
        m, crep = clean_mesh(mesh, keep_components=0.0)
        m, frep = fill_holes(m, max_edges=16)
        loops = boundary_loops(m.t_pos_idx.numpy())
        cut, rep = crop_mesh(m, [-0.9, -1.4, -0.5], [1.1, 0.8, 2.0], cap=True, rotation=rot)
        low, srep = remove_support_plane(cut, rot[2], distance=0.02, min_area_frac=0.0, max_tilt_deg=90)
        return m, crep, frep, loops, cut, rep, low, srep

    fast = pipeline()
    reference()
    ref = pipeline()
    for i in (0, 4, 6):
        _same(fast[i], ref[i])
    assert vars(fast[1]) == vars(ref[1]) and vars(fast[2]) == vars(ref[2])
    assert fast[3] == ref[3]
    assert fast[5].to_dict() == ref[5].to_dict() and fast[5].faces_split > 0
    assert vars(fast[7]) == vars(ref[7])


def _manifold_pairs_reference(f):
    """The old two-sort :func:`meshlift.mesh.orient._manifold_pairs` (np.unique, then a stable argsort)."""
    d = np.stack([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]], axis=1).reshape(-1, 2)
    fid = np.repeat(np.arange(len(f)), 3)
    key = np.minimum(d[:, 0], d[:, 1]).astype(np.int64) * (int(f.max()) + 1) + np.maximum(d[:, 0], d[:, 1])
    _, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
    inv = inv.reshape(-1)
    sel = np.flatnonzero(counts[inv] == 2)
    order = sel[np.argsort(inv[sel], kind="stable")]
    a, b = order[0::2], order[1::2]
    keep = fid[a] != fid[b]
    return fid[a][keep], fid[b][keep], (d[a, 0] == d[b, 0])[keep].astype(np.int8), counts, inv


@pytest.mark.parametrize("seed", range(3))
def test_manifold_pairs_match_reference(seed):
    from meshlift.mesh.orient import _manifold_pairs

    f = _random_mesh(seed).t_pos_idx.numpy()
    flip = np.random.default_rng(seed).random(len(f)) < 0.2
    f[flip] = f[flip][:, ::-1]
    for got, want in zip(_manifold_pairs(f), _manifold_pairs_reference(f)):
        np.testing.assert_array_equal(got, want)


def test_merge_duplicate_vertices_matches_the_byte_compare():
    """float32 positions grouped by packed bits (x, y then rank, z) merge exactly as the 12-byte compare did."""
    from meshlift.mesh.clean import _float32_xyz_groups, merge_duplicate_vertices

    rng = np.random.default_rng(3)
    v = rng.integers(-3, 4, (2000, 3)).astype(np.float32) * np.float32(0.5)
    v[:5] = [0.0, -0.0, 1.0]  # -0.0 equals 0.0
    v[5, 1] = -0.0
    v[6] = np.float32(3.4e38)
    f = rng.integers(0, len(v), (3000, 3))
    first, inv = _float32_xyz_groups(v)
    _, rfirst, rinv = unique_rows(v, return_index=True, return_inverse=True)
    # the same partition into groups, with the same first members
    assert sorted(first.tolist()) == sorted(rfirst.tolist())
    np.testing.assert_array_equal(first[inv], rfirst[rinv.reshape(-1)])
    out, n = merge_duplicate_vertices(Mesh(torch.from_numpy(v), torch.from_numpy(f)))
    assert n == len(v) - len(rfirst)
    np.testing.assert_array_equal(out.v_pos.numpy(), v[np.sort(rfirst)])
