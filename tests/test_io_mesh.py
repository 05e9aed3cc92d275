"""load_mesh / save_mesh dispatch, OFF and STL through trimesh, bad paths."""

from __future__ import annotations

import pytest
import torch

from meshlift.errors import MeshError
from meshlift.io.mesh import load_mesh, save_mesh
from meshlift.structures.mesh import Mesh


def _tet():
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    return Mesh(v_pos=v, t_pos_idx=torch.tensor([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]]))


@pytest.mark.parametrize("suffix", [".obj", ".ply", ".glb"])
def test_dispatch_roundtrip(tmp_path, suffix):
    m = _tet()
    paths = save_mesh(tmp_path / f"t{suffix}", m)
    assert paths[0].suffix == suffix
    r = load_mesh(paths[0])
    assert torch.equal(r.v_pos, m.v_pos) and torch.equal(r.t_pos_idx, m.t_pos_idx)


@pytest.mark.parametrize("suffix", [".off", ".stl"])
def test_off_stl(tmp_path, suffix):
    import trimesh

    m = _tet()
    trimesh.Trimesh(m.v_pos.numpy(), m.t_pos_idx.numpy(), process=False).export(tmp_path / f"t{suffix}")
    r = load_mesh(tmp_path / f"t{suffix}")
    assert r.num_faces == 4 and r.num_vertices == 4  # STL triangle soup welded back
    got = r.v_pos[r.t_pos_idx].reshape(-1, 3)
    assert torch.allclose(got.sort(0).values, m.v_pos[m.t_pos_idx].reshape(-1, 3).sort(0).values)


def test_bad_paths(tmp_path):
    with pytest.raises(MeshError, match="does not exist"):
        load_mesh(tmp_path / "none.obj")
    (tmp_path / "a.xyz").write_text("1 2 3\n")
    with pytest.raises(MeshError, match="unknown mesh format"):
        load_mesh(tmp_path / "a.xyz")
    with pytest.raises(MeshError, match="cannot write"):
        save_mesh(tmp_path / "a.stl", _tet())
    with pytest.raises(MeshError, match="folder"):
        load_mesh(tmp_path)
