"""remove_hidden_faces: interior sheets go, the visible surface stays closed."""

from __future__ import annotations

import torch
import trimesh

from meshlift.cameras import fibonacci_directions
from meshlift.mesh.visibility import orthographic_clip, remove_hidden_faces, seen_faces
from meshlift.structures.mesh import Mesh


def _mesh(tm: trimesh.Trimesh) -> Mesh:
    return Mesh(v_pos=torch.tensor(tm.vertices, dtype=torch.float32),
                t_pos_idx=torch.tensor(tm.faces, dtype=torch.int64))


def _shell_with_interior():
    outer = trimesh.creation.icosphere(subdivisions=3, radius=1.0)
    inner = trimesh.creation.icosphere(subdivisions=2, radius=0.5)
    sheet = trimesh.creation.box(extents=(0.8, 0.8, 0.02))  # a thin interior sheet, as DMTet leaves
    return outer, trimesh.util.concatenate([outer, inner, sheet])


def test_fibonacci_directions_are_unit_and_spread():
    d = fibonacci_directions(64)
    assert torch.allclose(d.norm(dim=-1), torch.ones(64), atol=1e-6)
    assert d.mean(0).norm() < 0.05  # evenly spread: no preferred side


def test_orthographic_nearest_has_smallest_depth():
    v = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
    pos = orthographic_clip(v, torch.tensor([[0.0, 0.0, 1.0]]))  # viewer on +z
    assert pos.shape == (1, 2, 4)
    assert pos[0, 0, 2] < pos[0, 1, 2]


def test_interior_removed_outer_kept_closed():
    outer, both = _shell_with_interior()
    mesh = _mesh(both)
    before = mesh.t_pos_idx.clone()
    cleaned, info = remove_hidden_faces(mesh, n_views=32, resolution=192)
    assert torch.equal(mesh.t_pos_idx, before)  # input untouched
    assert info["faces_after"] == len(outer.faces)
    tm = trimesh.Trimesh(cleaned.v_pos.numpy(), cleaned.t_pos_idx.numpy(), process=False)
    assert tm.is_watertight
    assert abs(tm.area - outer.area) < 1e-4


def test_open_surface_all_seen():
    plane = trimesh.creation.box(extents=(1.0, 1.0, 0.3))
    assert bool(seen_faces(_mesh(plane), n_views=16, resolution=128).all())
