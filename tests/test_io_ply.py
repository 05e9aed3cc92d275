"""PLY reader/writer: colours (sRGB uint8), UVs per vertex and per face, point clouds, bad input."""

from __future__ import annotations

import pytest
import torch

from meshlift.errors import MeshError
from meshlift.io.ply import load_ply, save_ply
from meshlift.structures.mesh import Mesh


def _tet(**kw):
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    f = torch.tensor([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    return Mesh(v_pos=v, t_pos_idx=f, **kw)


def test_roundtrip_colours_and_vertex_uv(tmp_path):
    col = torch.rand(4, 4)
    uv = torch.rand(4, 2)
    m = _tet(v_color=col, v_tex=uv, t_tex_idx=torch.tensor([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]]))
    save_ply(tmp_path / "a.ply", m)
    header = (tmp_path / "a.ply").read_bytes().split(b"end_header")[0].decode()
    assert "property uchar red" in header and "property uchar alpha" in header and "texture_u" in header
    r = load_ply(tmp_path / "a.ply")
    assert torch.equal(r.v_pos, m.v_pos) and torch.equal(r.t_pos_idx, m.t_pos_idx)
    assert torch.allclose(r.v_tex, uv, atol=1e-6)
    # colours are stored as 8-bit sRGB: compare in the encoded domain
    from meshlift.shading.color import linear_to_srgb

    assert torch.allclose(linear_to_srgb(r.v_color[:, :3]), linear_to_srgb(col[:, :3]), atol=0.5 / 255 + 1e-5)
    assert torch.allclose(r.v_color[:, 3], col[:, 3], atol=0.5 / 255 + 1e-6)


def test_uv_seams_as_face_texcoord(tmp_path):
    uv = torch.rand(12, 2)
    m = _tet(v_tex=uv, t_tex_idx=torch.arange(12).reshape(4, 3))
    save_ply(tmp_path / "s.ply", m)
    assert b"list uchar float texcoord" in (tmp_path / "s.ply").read_bytes()[:400]
    r = load_ply(tmp_path / "s.ply")
    assert torch.allclose(r.v_tex[r.t_tex_idx], uv[m.t_tex_idx], atol=1e-6)


def test_ascii_quads_and_point_cloud(tmp_path):
    (tmp_path / "q.ply").write_text(
        "ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\nproperty float z\n"
        "element face 1\nproperty list uchar int vertex_indices\nend_header\n0 0 0\n1 0 0\n1 1 0\n0 1 0\n4 0 1 2 3\n"
    )
    m = load_ply(tmp_path / "q.ply")
    assert m.t_pos_idx.tolist() == [[0, 1, 2], [0, 2, 3]]
    pc = Mesh(v_pos=torch.rand(50, 3), t_pos_idx=torch.zeros(0, 3, dtype=torch.int64))
    save_ply(tmp_path / "pc.ply", pc)
    r = load_ply(tmp_path / "pc.ply")
    assert r.num_faces == 0 and torch.equal(r.v_pos, pc.v_pos)


def test_bad_inputs(tmp_path):
    (tmp_path / "bad.ply").write_text(
        "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
        "element face 1\nproperty list uchar int vertex_indices\nend_header\n0 0 0\n1 0 0\n1 1 0\n3 0 1 7\n"
    )
    with pytest.raises(MeshError, match="vertex 7"):
        load_ply(tmp_path / "bad.ply")
    (tmp_path / "junk.ply").write_bytes(b"not a ply at all")
    with pytest.raises(MeshError, match="junk.ply"):
        load_ply(tmp_path / "junk.ply")
    with pytest.raises(MeshError, match="must end in .ply"):
        save_ply(tmp_path / "x.obj", _tet())
