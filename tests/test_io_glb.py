"""GLB writer/reader: PBR material mapping, seams, COLOR_0, node transforms, validator, bad input."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch

from _gltf import validate
from meshlift.errors import MeshError
from meshlift.io.glb import load_glb, save_glb
from meshlift.structures.mesh import Material, Mesh


def _json_chunk(path):
    data = path.read_bytes()
    n = struct.unpack_from("<I", data, 12)[0]
    return json.loads(data[20: 20 + n])


def _textured_quad():
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]])
    f = torch.tensor([[0, 1, 2], [0, 2, 3]])
    # a UV seam: vertex 0 and 2 carry different UVs in the two triangles
    uv = torch.tensor([[0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.1, 0.9], [0.9, 0.1], [0.0, 0.0]])
    ft = torch.tensor([[0, 1, 2], [3, 4, 5]])
    mat = Material(kd=torch.rand(8, 8, 3), ks=torch.rand(8, 8, 3), normal=torch.nn.functional.normalize(torch.randn(4, 4, 3), dim=-1))
    return Mesh(v_pos=v, t_pos_idx=f, v_tex=uv, t_tex_idx=ft, v_color=torch.rand(4, 4), material=mat)


def test_roundtrip_and_material_mapping(tmp_path):
    m = _textured_quad()
    save_glb(tmp_path / "q.glb", m, occlusion=True)
    js = _json_chunk(tmp_path / "q.glb")
    mat = js["materials"][0]
    pbr = mat["pbrMetallicRoughness"]
    assert {"baseColorTexture", "metallicRoughnessTexture"} <= set(pbr) and "normalTexture" in mat
    assert mat["occlusionTexture"]["index"] == pbr["metallicRoughnessTexture"]["index"]
    prim = js["meshes"][0]["primitives"][0]
    assert js["accessors"][prim["attributes"]["POSITION"]]["count"] == 6  # split per (pos, uv) corner
    assert "COLOR_0" in prim["attributes"]
    r = load_glb(tmp_path / "q.glb")
    assert torch.equal(r.v_pos, m.v_pos) and torch.equal(r.t_pos_idx, m.t_pos_idx)
    assert torch.allclose(r.v_tex[r.t_tex_idx], m.v_tex[m.t_tex_idx])
    assert torch.allclose(r.v_color, m.v_color)
    from meshlift.shading.color import linear_to_srgb

    assert torch.allclose(linear_to_srgb(r.material.kd), linear_to_srgb(m.material.kd), atol=0.5 / 255 + 1e-5)
    assert torch.allclose(r.material.ks, m.material.ks, atol=0.5 / 255 + 1e-6)
    assert torch.allclose(r.material.normal, m.material.normal, atol=1 / 255 + 1e-6)
    rep = validate(tmp_path / "q.glb")
    assert rep["numErrors"] == 0, rep["messages"]


def test_constant_material_factors(tmp_path):
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]])
    m = Mesh(v_pos=v, t_pos_idx=torch.tensor([[0, 1, 2]]),
             material=Material(kd=torch.tensor([[[0.2, 0.3, 0.4]]]), ks=torch.tensor([[[0.0, 0.25, 1.0]]])))
    save_glb(tmp_path / "c.glb", m)
    pbr = _json_chunk(tmp_path / "c.glb")["materials"][0]["pbrMetallicRoughness"]
    assert pbr["baseColorFactor"] == pytest.approx([0.2, 0.3, 0.4, 1.0])  # linear, as glTF wants
    assert pbr["roughnessFactor"] == pytest.approx(0.25) and pbr["metallicFactor"] == pytest.approx(1.0)
    r = load_glb(tmp_path / "c.glb")
    assert torch.allclose(r.material.kd, m.material.kd) and torch.allclose(r.material.ks[..., 1:], m.material.ks[..., 1:])
    assert validate(tmp_path / "c.glb")["numErrors"] == 0


@pytest.mark.shared_data
def test_spot_validates(dataset, tmp_path):
    from meshlift.io.obj import load_obj

    m = load_obj(dataset("spot") / "spot.obj")
    save_glb(tmp_path / "spot.glb", m)
    r = load_glb(tmp_path / "spot.glb")
    assert torch.equal(r.v_pos, m.v_pos) and torch.equal(r.t_pos_idx, m.t_pos_idx)
    assert torch.allclose(r.v_nrm[r.t_nrm_idx], m.v_nrm[m.t_nrm_idx], atol=1e-6)
    rep = validate(tmp_path / "spot.glb")
    assert rep["numErrors"] == 0, rep["messages"]


def test_reads_node_transforms_from_trimesh_export(tmp_path):
    import trimesh

    box = trimesh.creation.box(extents=(1, 2, 3))
    scene = trimesh.Scene()
    T = trimesh.transformations.rotation_matrix(0.3, [0, 1, 0])
    T[:3, 3] = [5, 0, 0]
    scene.add_geometry(box, transform=T)
    scene.export(tmp_path / "box.glb")
    r = load_glb(tmp_path / "box.glb")
    want = trimesh.transform_points(box.vertices, T)
    got = r.v_pos.double().numpy()
    assert r.num_faces == 12
    d = np.linalg.norm(got[:, None] - want[None], axis=-1).min(1)
    assert d.max() < 1e-5


def test_empty_and_bad(tmp_path):
    empty = Mesh(v_pos=torch.zeros(0, 3), t_pos_idx=torch.zeros(0, 3, dtype=torch.int64))
    save_glb(tmp_path / "e.glb", empty)
    assert load_glb(tmp_path / "e.glb").num_faces == 0
    assert validate(tmp_path / "e.glb")["numErrors"] == 0
    save_glb(tmp_path / "q.glb", _textured_quad())
    data = (tmp_path / "q.glb").read_bytes()
    (tmp_path / "trunc.glb").write_bytes(data[: len(data) // 2])
    with pytest.raises(MeshError, match="trunc.glb"):
        load_glb(tmp_path / "trunc.glb")
    (tmp_path / "junk.glb").write_bytes(b"\x00\x01garbage")
    with pytest.raises(MeshError, match="junk.glb"):
        load_glb(tmp_path / "junk.glb")
