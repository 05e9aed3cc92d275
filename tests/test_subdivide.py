"""Conforming subdivision of long edges (meshlift.mesh.subdivide)."""

import pytest
import torch
import trimesh

from meshlift.errors import MeshError
from meshlift.geometry.mesh_ops import face_normals
from meshlift.geometry.mesh_ops import face_edges
from meshlift.mesh.subdivide import split_edges, subdivide_long_edges
from meshlift.structures.mesh import Mesh


def _sphere(sub=2):
    s = trimesh.creation.icosphere(subdivisions=sub)
    return Mesh(v_pos=torch.tensor(s.vertices, dtype=torch.float32), t_pos_idx=torch.tensor(s.faces))


def _tri(m: Mesh) -> trimesh.Trimesh:
    return trimesh.Trimesh(m.v_pos.numpy(), m.t_pos_idx.numpy(), process=False)


def test_one_triangle_every_pattern():
    m = Mesh(v_pos=torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]), t_pos_idx=torch.tensor([[0, 1, 2]]),
             v_color=torch.tensor([[1.0, 0, 0], [0, 1, 0], [0, 0, 1]]))
    edges, fe = face_edges(m.t_pos_idx, 3)
    n0 = face_normals(m.v_pos, m.t_pos_idx)[0]
    for bits in range(8):
        split = torch.tensor([(bits >> k) & 1 for k in range(3)], dtype=torch.bool)
        out = split_edges(m, split, edges=edges, face_edge=fe)
        k = int(split.sum())
        assert out.num_faces == 1 + k and out.num_vertices == 3 + k
        n = face_normals(out.v_pos, out.t_pos_idx)
        assert torch.allclose(n, n0.expand_as(n), atol=1e-6)  # same orientation, all in the plane
        assert abs(_tri(out).area - 0.5) < 1e-6  # the triangle tiled exactly
        for j, e in enumerate(edges[split]):  # midpoints carry interpolated attributes
            assert torch.allclose(out.v_pos[3 + j], 0.5 * (m.v_pos[e[0]] + m.v_pos[e[1]]))
            assert torch.allclose(out.v_color[3 + j], 0.5 * (m.v_color[e[0]] + m.v_color[e[1]]))
    assert m.num_faces == 1 and m.num_vertices == 3  # input untouched


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_splits_stay_conforming(seed):
    m = _sphere()
    m.extras["v_sh_rest"] = torch.randn(m.num_vertices, 8, 3)
    m.extras["note"] = "kept"
    edges, fe = face_edges(m.t_pos_idx, m.num_vertices)
    split = torch.rand(edges.shape[0], generator=torch.Generator().manual_seed(seed)) < 0.3
    out = split_edges(m, split)
    t = _tri(out)
    assert t.is_watertight and t.is_winding_consistent  # no T-junction: every edge has two faces
    assert out.num_faces == m.num_faces + 2 * int(split.sum())
    assert abs(t.area - _tri(m).area) < 1e-4 and abs(t.volume - _tri(m).volume) < 1e-4  # flat splits
    assert t.euler_number == 2
    assert out.extras["v_sh_rest"].shape == (out.num_vertices, 8, 3) and out.extras["note"] == "kept"
    e0 = edges[split][0]
    assert torch.allclose(out.extras["v_sh_rest"][m.num_vertices],
                          0.5 * (m.extras["v_sh_rest"][e0[0]] + m.extras["v_sh_rest"][e0[1]]))


def test_subdivide_long_edges_to_a_length_and_a_budget():
    m = _sphere(1)
    lengths = _tri(m).edges_unique_length
    scale = torch.ones(m.num_vertices)
    out, rep = subdivide_long_edges(m, scale, float(lengths.max()) / 3, max_faces=10**7)
    assert not rep["capped"] and rep["passes"] >= 2
    assert _tri(out).edges_unique_length.max() <= lengths.max() / 3 + 1e-6
    assert _tri(out).is_watertight and rep["faces_after"] == out.num_faces
    capped, crep = subdivide_long_edges(m, scale, float(lengths.max()) / 3, max_faces=m.num_faces + 41)
    assert crep["capped"] and m.num_faces < capped.num_faces <= m.num_faces + 41 and _tri(capped).is_watertight
    # an infinite scale (unseen vertices) never splits; a large max_length splits nothing
    none, nrep = subdivide_long_edges(m, torch.full((m.num_vertices,), float("inf")), 1e-6, max_faces=10**7)
    assert nrep["split_edges"] == 0 and none.num_faces == m.num_faces
    # the scale is per vertex: only the half where it is small gets finer
    half = torch.where(m.v_pos[:, 2] > 0, 1.0, float("inf"))
    part, _ = subdivide_long_edges(m, half, float(lengths.min()) / 2, max_faces=10**7, max_passes=1)
    new = part.v_pos[m.num_vertices:]
    assert new.shape[0] > 0 and bool((new[:, 2] > 0).all())


def test_bad_input():
    m = _sphere(0)
    with pytest.raises(MeshError, match="scale must be"):
        subdivide_long_edges(m, torch.ones(3), 1.0, max_faces=100)
    with pytest.raises(MeshError, match="max_length"):
        subdivide_long_edges(m, torch.ones(m.num_vertices), 0.0, max_faces=100)
    uv = Mesh(v_pos=m.v_pos, t_pos_idx=m.t_pos_idx, v_tex=torch.zeros(m.num_vertices, 2), t_tex_idx=m.t_pos_idx)
    with pytest.raises(MeshError, match="UVs"):
        split_edges(uv, torch.ones(30, dtype=torch.bool))
    with pytest.raises(MeshError, match="one flag per edge"):
        split_edges(m, torch.ones(3, dtype=torch.bool))
