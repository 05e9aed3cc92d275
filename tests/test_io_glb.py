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
    assert rep["numErrors"] == 0 and rep["numWarnings"] == 0, rep["messages"]


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
    assert rep["numErrors"] == 0 and rep["numWarnings"] == 0, rep["messages"]


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


# ---- issue 15: normals, tangents, the assumed material, occlusion --------------------------------------


def _decode_texture(js, path, tex_index):
    from meshlift.io import _textures as tex

    data = path.read_bytes()
    n = struct.unpack_from("<I", data, 12)[0]
    bin_start = 20 + n + 8
    img = js["images"][js["textures"][tex_index]["source"]]
    view = js["bufferViews"][img["bufferView"]]
    off = bin_start + view.get("byteOffset", 0)
    return tex.decode_image_bytes(data[off: off + view["byteLength"]], "test")


def _mirrored_quads():
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [2, 0, 0], [3, 0, 0], [3, 1, 0], [2, 1, 0]])
    f = torch.tensor([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]])
    uv = torch.tensor([[0, 1], [1, 1], [1, 0], [0, 0], [1, 1], [0, 1], [0, 0], [1, 0]], dtype=torch.float32)
    normal = torch.tensor([0.0, 0.6, 0.8]).expand(4, 4, 3).contiguous()
    mat = Material(kd=torch.rand(4, 4, 3), ks=torch.tensor([[[0.0, 0.5, 0.0]]]), normal=normal)
    return Mesh(v_pos=v, t_pos_idx=f, v_tex=uv, t_tex_idx=f.clone(), material=mat)


def test_normal_mapped_glb_has_normal_and_tangent_and_no_validator_warnings(tmp_path):
    from meshlift.data.demo_object import make_demo_object

    m = make_demo_object(resolution=24, texture_resolution=32)
    m.material.normal = torch.nn.functional.normalize(torch.randn(32, 32, 3) * 0.2 + torch.tensor([0, 0, 1.0]), dim=-1)
    save_glb(tmp_path / "n.glb", m)
    js = _json_chunk(tmp_path / "n.glb")
    attrs = js["meshes"][0]["primitives"][0]["attributes"]
    assert {"POSITION", "NORMAL", "TANGENT", "TEXCOORD_0"} <= set(attrs)
    assert js["accessors"][attrs["TANGENT"]]["type"] == "VEC4"
    rep = validate(tmp_path / "n.glb")
    assert rep["numErrors"] == 0 and rep["numWarnings"] == 0, rep["messages"]


def test_mirrored_chart_gets_negative_handedness_in_the_file(tmp_path):
    save_glb(tmp_path / "q.glb", _mirrored_quads())
    js = _json_chunk(tmp_path / "q.glb")
    attrs = js["meshes"][0]["primitives"][0]["attributes"]
    data = (tmp_path / "q.glb").read_bytes()
    n = struct.unpack_from("<I", data, 12)[0]
    bin_chunk = data[20 + n + 8:]
    def read(acc_i, k):
        acc = js["accessors"][acc_i]
        view = js["bufferViews"][acc["bufferView"]]
        return np.frombuffer(bin_chunk, np.float32, acc["count"] * k, view.get("byteOffset", 0)).reshape(-1, k)
    pos, tng = read(attrs["POSITION"], 3), read(attrs["TANGENT"], 4)
    left = pos[:, 0] < 1.5
    assert np.allclose(tng[left], [1, 0, 0, 1]) and np.allclose(tng[~left], [-1, 0, 0, -1])
    assert validate(tmp_path / "q.glb")["numWarnings"] == 0


def test_mesh_without_material_gets_the_assumed_one(tmp_path):
    import trimesh

    s = trimesh.creation.icosphere(subdivisions=1)
    plain = Mesh(v_pos=torch.tensor(s.vertices, dtype=torch.float32), t_pos_idx=torch.tensor(s.faces))
    save_glb(tmp_path / "p.glb", plain)
    js = _json_chunk(tmp_path / "p.glb")
    mat = js["materials"][0]
    assert js["meshes"][0]["primitives"][0]["material"] == 0 and mat["doubleSided"] is True
    assert mat["pbrMetallicRoughness"] == {"baseColorFactor": [0.5, 0.5, 0.5, 1.0], "roughnessFactor": 0.5,
                                           "metallicFactor": 0.0}
    assert "NORMAL" in js["meshes"][0]["primitives"][0]["attributes"]
    r = load_glb(tmp_path / "p.glb")
    assert r.v_nrm is not None and torch.allclose(r.material.ks.reshape(3), torch.tensor([0.0, 0.5, 0.0]))
    rep = validate(tmp_path / "p.glb")
    assert rep["numErrors"] == 0 and rep["numWarnings"] == 0, rep["messages"]
    # with vertex colours the colours are the albedo: white base colour (glTF multiplies COLOR_0 by it)
    save_glb(tmp_path / "c.glb", Mesh(v_pos=plain.v_pos, t_pos_idx=plain.t_pos_idx, v_color=torch.rand(len(s.vertices), 3)))
    pbr = _json_chunk(tmp_path / "c.glb")["materials"][0]["pbrMetallicRoughness"]
    assert pbr["baseColorFactor"] == [1.0, 1.0, 1.0, 1.0]


def test_occlusion_is_gltf_visibility_in_the_file(tmp_path):
    m = _textured_quad()
    ks = m.material.ks.clone()
    ks[..., 0] = torch.linspace(0, 0.8, 8)[:, None]  # internal: amount occluded
    m.material.ks = ks
    save_glb(tmp_path / "o.glb", m)  # occlusion=None: written because some texel is occluded
    js = _json_chunk(tmp_path / "o.glb")
    mat = js["materials"][0]
    assert mat["occlusionTexture"]["index"] == mat["pbrMetallicRoughness"]["metallicRoughnessTexture"]["index"]
    orm = _decode_texture(js, tmp_path / "o.glb", mat["occlusionTexture"]["index"])
    assert np.allclose(orm[..., 0], 1.0 - ks[..., 0].numpy(), atol=0.6 / 255)  # glTF: 1 = unoccluded
    assert np.allclose(orm[..., 1:], ks[..., 1:].numpy(), atol=0.6 / 255)
    r = load_glb(tmp_path / "o.glb")
    assert torch.allclose(r.material.ks, ks, atol=0.6 / 255)
    # nothing occluded: no occlusionTexture, and the file's R channel is 1 (open) for clients that read ORM
    ks0 = ks.clone()
    ks0[..., 0] = 0
    m.material.ks = ks0
    save_glb(tmp_path / "open.glb", m)
    js = _json_chunk(tmp_path / "open.glb")
    assert "occlusionTexture" not in js["materials"][0]
    orm = _decode_texture(js, tmp_path / "open.glb", js["materials"][0]["pbrMetallicRoughness"]["metallicRoughnessTexture"]["index"])
    assert np.all(orm[..., 0] == 1.0)
    assert torch.all(load_glb(tmp_path / "open.glb").material.ks[..., 0] == 0)
    save_glb(tmp_path / "never.glb", _textured_quad(), occlusion=False)
    assert "occlusionTexture" not in _json_chunk(tmp_path / "never.glb")["materials"][0]


def test_reading_factors_only_and_occlusion_strength():
    from meshlift.io.materials import ks_from_gltf

    ks = ks_from_gltf(None, None, 0.3, 0.7)
    assert torch.allclose(ks.reshape(3), torch.tensor([0.0, 0.3, 0.7]))  # unoccluded, not R = 1 (black)
    mr = torch.rand(4, 4, 3)
    occ = torch.full((2, 2, 1), 0.2)  # visibility 0.2, other resolution
    ks = ks_from_gltf(mr, occ, 1.0, 1.0, occlusion_strength=0.5)
    assert ks.shape == (4, 4, 3)
    assert torch.allclose(ks[..., 0], torch.full((4, 4), 0.5 * 0.8))  # 1 - (1 + 0.5 (0.2 - 1))
    assert torch.allclose(ks[..., 1:], mr[..., 1:])


def _factor_only_glb(path):
    import trimesh

    ball = trimesh.creation.icosphere(subdivisions=2)
    ball.visual = trimesh.visual.TextureVisuals(material=trimesh.visual.material.PBRMaterial(
        baseColorFactor=[200, 200, 200, 255], roughnessFactor=0.6, metallicFactor=0.0))
    ball.export(path)
    assert "metallicRoughnessTexture" not in _json_chunk(path)["materials"][0]["pbrMetallicRoughness"]
    return path


def test_render_of_a_factor_only_glb_is_not_black(tmp_path):
    """What `meshlift render` runs (load_mesh + render_mesh) on a GLB with only factors shows the object."""
    from meshlift.cameras import look_at
    from meshlift.io.mesh import load_mesh
    from meshlift.renderers.mesh_pbr import render_mesh
    from meshlift.shading.light import EnvironmentLight

    m = load_mesh(_factor_only_glb(tmp_path / "f.glb"))
    assert m.v_tex is None and float(m.material.ks[..., 0].max()) == 0.0
    light = EnvironmentLight.constant(16, 0.8, trainable=False)
    light.build_mips()
    w2c = look_at(torch.tensor([0.0, 0.0, 4.0]), torch.zeros(3), up=(0.0, 1.0, 0.0)).float()
    P = torch.tensor([[2.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 1.0, -0.2], [0, 0, 1.0, 0]])  # fx = W, centred
    out = render_mesh(m, (P @ w2c)[None], torch.tensor([[0.0, 0.0, 4.0]]), (32, 32), light=light)
    centre = out["shaded"][0, 12:20, 12:20]
    assert float(centre.mean()) > 0.3, float(centre.mean())  # ~0.5 (grey 0.58 under 0.8); 0 before issue 15


@pytest.mark.slow
def test_cli_render_of_a_factor_only_glb_is_not_black(tmp_path):
    import imageio.v2 as imageio

    from meshlift.cli.main import main
    from meshlift.io.hdr import write_hdr

    _factor_only_glb(tmp_path / "f.glb")
    write_hdr(tmp_path / "env.hdr", np.full((16, 32, 3), 0.8, np.float32))
    assert main(["render", str(tmp_path / "f.glb"), "--out", str(tmp_path / "r"), "--turntable", "--frames", "1",
                 "--size", "48", "--light", str(tmp_path / "env.hdr"), "--background", "black"]) == 0
    img = imageio.imread(tmp_path / "r" / "contact_sheet.png").astype(np.float64) / 255
    assert img[18:30, 18:30, :3].mean() > 0.4
