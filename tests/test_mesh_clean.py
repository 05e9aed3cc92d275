"""clean_mesh steps and the remap primitive (attributes follow every edit)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from meshlift.mesh.clean import clean_mesh, nonmanifold_face_mask, remap
from meshlift.mesh.rows import unique_rows
from meshlift.mesh.stats import mesh_stats
from meshlift.structures.mesh import Mesh


def _two_tris_duplicated_vertices():
    # a quad whose two triangles do not share vertex indices (4 + 2 duplicate vertices)
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0], [1, 1, 0], [0, 1, 0]])
    f = torch.tensor([[0, 1, 2], [3, 4, 5]])
    col = torch.arange(6, dtype=torch.float32)[:, None].expand(6, 3).contiguous() / 10
    return Mesh(v_pos=v, t_pos_idx=f, v_color=col)


def test_merge_keeps_first_colour_and_topology():
    m = _two_tris_duplicated_vertices()
    c, rep = clean_mesh(m, keep_components=0)
    assert rep.merged_vertices == 2 and c.num_vertices == 4
    assert mesh_stats(c)["components"] == 1
    assert torch.equal(c.v_pos[c.t_pos_idx], m.v_pos[m.t_pos_idx])  # same triangles
    assert torch.allclose(c.v_color[:, 0], torch.tensor([0.0, 0.1, 0.2, 0.5]))


def test_degenerate_duplicate_nonmanifold_small_components_nan():
    v = [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, -1], [0.5, 0.5, 0],
         [10, 10, 10], [10.001, 10, 10], [10, 10.001, 10], [np.nan, 0, 0]]
    f = [[0, 1, 2],   # base
         [1, 0, 3],   # edge (0,1) second face
         [0, 1, 4],   # edge (0,1) third face (smaller? no: same area) -> one face goes
         [2, 1, 0],   # duplicate of the base, other orientation
         [0, 1, 5],   # degenerate (collinear? no) -> keep; checked below by count
         [0, 0, 2],   # repeated index
         [6, 7, 8],   # tiny far component
         [0, 2, 9]]   # uses the NaN vertex
    m = Mesh(v_pos=torch.tensor(v, dtype=torch.float32), t_pos_idx=torch.tensor(f))
    with pytest.warns(UserWarning, match="NaN"):
        c, rep = clean_mesh(m, keep_components=0.02)
    assert rep.nonfinite_vertices == 1
    assert rep.degenerate_faces == 1 and rep.duplicate_faces == 1
    assert rep.small_components == 1 and rep.small_component_faces == 1
    s = mesh_stats(c)
    assert s["manifold"] and s["nonmanifold_edges"] == 0
    assert torch.isfinite(c.v_pos).all()
    assert not unique_rows(np.sort(c.t_pos_idx.numpy(), 1), return_counts=True)[1].max() > 1


def test_nonmanifold_keeps_two_largest():
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 2], [0, -3, 0]])
    f = torch.tensor([[0, 1, 2], [0, 1, 3], [0, 1, 4]])  # areas 0.5, 1, 1.5
    drop = nonmanifold_face_mask(Mesh(v_pos=v, t_pos_idx=f))
    assert drop.tolist() == [True, False, False]


def test_remap_follows_corner_indices():
    m = _two_tris_duplicated_vertices()
    m.v_tex = torch.rand(6, 2)
    m.t_tex_idx = torch.tensor([[0, 1, 2], [3, 4, 5]])
    m.extras["face_material"] = torch.tensor([0, 1])
    r = remap(m, keep_faces=np.array([False, True]))
    assert r.t_tex_idx.tolist() == [[3, 4, 5]] and r.extras["face_material"].tolist() == [1]
    assert m.t_tex_idx.shape == (2, 3)  # input untouched


def test_empty_mesh():
    e = Mesh(v_pos=torch.zeros(0, 3), t_pos_idx=torch.zeros(0, 3, dtype=torch.int64))
    c, rep = clean_mesh(e)
    assert c.num_faces == 0 and mesh_stats(c)["bbox_min"] is None and not mesh_stats(c)["watertight"]


@pytest.mark.parametrize("dtype", [np.int64, np.float32])
def test_unique_rows_matches_numpy(dtype):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 5, size=(400, 3)).astype(dtype)
    got = unique_rows(a, return_index=True, return_inverse=True, return_counts=True)
    ref = np.unique(a, axis=0, return_index=True, return_inverse=True, return_counts=True)
    # same groups (the order of the unique rows may differ): compare through the inverse
    assert len(got[0]) == len(ref[0])
    assert np.array_equal(got[0][got[2].reshape(-1)], a) and np.array_equal(ref[0][ref[2].reshape(-1)], a)
    assert sorted(got[3].tolist()) == sorted(ref[3].tolist())
    assert np.array_equal(a[got[1]], got[0])


def test_drop_small_components_by_face_count():
    import trimesh

    from meshlift.mesh.clean import drop_small_components

    big = trimesh.creation.icosphere(subdivisions=3)  # 1280 faces
    small = trimesh.creation.icosphere(subdivisions=1)  # 80 faces
    small.vertices = small.vertices * 0.1 + 3.0
    v = np.concatenate([big.vertices, small.vertices])
    f = np.concatenate([big.faces, small.faces + len(big.vertices)])
    mesh = Mesh(torch.tensor(v, dtype=torch.float32), torch.tensor(f, dtype=torch.long))
    kept, dropped = drop_small_components(mesh, 0.1)  # 80 < 0.1 * 1280
    assert dropped == 80 and kept.num_faces == 1280 and kept.num_vertices == len(big.vertices)
    assert torch.equal(kept.v_pos, mesh.v_pos[: len(big.vertices)])
    same, none = drop_small_components(mesh, 0.05)  # 80 >= 0.05 * 1280: both stay
    assert none == 0 and same is mesh
    assert drop_small_components(mesh, 0.0) == (mesh, 0)
    assert mesh.num_faces == 1360  # the input is not modified
