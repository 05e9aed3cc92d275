"""OBJ + MTL reader/writer: nvdiffrec PBR materials, UV flip, quads, colours, bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from meshlift.errors import ImageError, MeshError
from meshlift.io.obj import load_obj, save_obj
from meshlift.structures.mesh import Material, Mesh


def _raw_lines(path, key):
    return [ln.split() for ln in path.read_text().splitlines() if ln.startswith(key + " ")]


@pytest.mark.shared_data
def test_spot_material_and_uv_flip(dataset):
    spot = dataset("spot")
    m = load_obj(spot / "spot.obj")
    assert (m.num_vertices, m.num_faces) == (2930, 5856)
    assert m.v_tex.shape == (3225, 2) and m.v_nrm.shape == (2930, 3)
    vt = _raw_lines(spot / "spot.obj", "vt")
    assert m.v_tex[0, 1].item() == pytest.approx(1.0 - float(vt[0][2]), abs=1e-7)  # v flipped to top-left origin
    mat = m.material
    assert mat.kd.shape == (1024, 1024, 3)
    # Ks = (occlusion, roughness, metallic) = (0, 0.25, 0) under `bsdf pbr`
    assert torch.allclose(mat.ks.reshape(3), torch.tensor([0.0, 0.25, 0.0]))
    # kd is linear: the sRGB decode of the file value
    from PIL import Image

    px = np.asarray(Image.open(spot / "spot_texture.png").convert("RGB"))[10, 20] / 255.0
    lin = np.where(px <= 0.04045, px / 12.92, ((px + 0.055) / 1.055) ** 2.4)
    assert np.allclose(mat.kd[10, 20].numpy(), lin, atol=1e-6)


@pytest.mark.shared_data
def test_quads_triangulated(dataset):
    m = load_obj(dataset("classic_meshes") / "suzanne.obj")
    # 500 faces, 468 of them quads -> 32 + 2 * 468 triangles
    assert m.num_faces == 32 + 2 * 468
    assert m.v_nrm is not None and m.t_nrm_idx.shape == m.t_pos_idx.shape


@pytest.mark.shared_data
def test_roundtrip_textured(dataset, tmp_path):
    m = load_obj(dataset("spot") / "spot.obj")
    m.material.normal = torch.nn.functional.normalize(torch.randn(8, 8, 3), dim=-1)
    m.material.ks = torch.rand(4, 4, 3)
    written = save_obj(tmp_path / "mesh.obj", m)
    names = {p.name for p in written}
    assert names == {"mesh.obj", "mesh.mtl", "texture_kd.png", "texture_ks.png", "texture_n.png"}
    mtl = (tmp_path / "mesh.mtl").read_text()
    assert "bsdf pbr" in mtl and "map_Kd texture_kd.png" in mtl and "/" not in mtl.split("map_Kd")[1].split()[0]
    r = load_obj(tmp_path / "mesh.obj")
    assert torch.equal(r.v_pos, m.v_pos) and torch.equal(r.t_pos_idx, m.t_pos_idx)
    assert torch.equal(r.t_tex_idx, m.t_tex_idx) and torch.allclose(r.v_tex, m.v_tex, atol=1e-7)
    assert torch.allclose(r.v_nrm, m.v_nrm, atol=1e-6)
    assert torch.allclose(r.material.kd, m.material.kd, atol=1e-6)  # 8-bit sRGB texture survives exactly
    assert torch.allclose(r.material.ks, m.material.ks, atol=0.5 / 255 + 1e-6)
    assert torch.allclose(r.material.normal, m.material.normal, atol=1.0 / 255 + 1e-6)
    # a mesh written elsewhere gets prefixed texture names
    save_obj(tmp_path / "asset.obj", m)
    assert (tmp_path / "asset_texture_kd.png").is_file()


def test_constant_material_exact_and_colours(tmp_path):
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    f = torch.tensor([[0, 1, 2], [0, 3, 1]])
    mat = Material(kd=torch.tensor([[[0.2, 0.4, 0.6]]]), ks=torch.tensor([[[1.0, 0.3, 0.7]]]))
    col = torch.rand(4, 3)
    m = Mesh(v_pos=v, t_pos_idx=f, v_color=col, material=mat)
    with pytest.warns(UserWarning, match="not standard|non-standard"):
        save_obj(tmp_path / "c.obj", m)
    r = load_obj(tmp_path / "c.obj")
    assert torch.allclose(r.material.kd, mat.kd, atol=1e-6)
    assert torch.allclose(r.material.ks, mat.ks, atol=1e-7)
    assert torch.allclose(r.v_color, col, atol=1e-5)
    assert r.v_tex is None


def test_classic_mtl_and_pbr_extension(tmp_path):
    (tmp_path / "a.mtl").write_text("newmtl phong\nKd 0.5 0.5 0.5\nKs 0.9 0.9 0.9\nnewmtl pbr\nKd 1 1 1\nPr 0.7\nPm 0.2\n")
    (tmp_path / "a.obj").write_text("mtllib a.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nusemtl phong\nf 1 2 3\n")
    m = load_obj(tmp_path / "a.obj")
    assert m.material.ks is None  # classic Ks is a specular colour, not ORM
    assert m.material.kd.reshape(3)[0].item() == pytest.approx(((0.5 + 0.055) / 1.055) ** 2.4, abs=1e-6)
    (tmp_path / "b.obj").write_text("mtllib a.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nusemtl pbr\nf 1 2 3\n")
    m = load_obj(tmp_path / "b.obj")
    # occlusion 0 = unoccluded (internal / nvdiffrec layout); 1 would render black (issue 15)
    assert torch.allclose(m.material.ks.reshape(3), torch.tensor([0.0, 0.7, 0.2]))


def test_negative_indices_and_ngon(tmp_path):
    (tmp_path / "p.obj").write_text("v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0.5 1.5 0\nv 0 1 0\nf -5 -4 -3 -2 -1\n")
    m = load_obj(tmp_path / "p.obj")
    assert m.t_pos_idx.tolist() == [[0, 1, 2], [0, 2, 3], [0, 3, 4]]


def test_bad_inputs(tmp_path):
    (tmp_path / "bad.obj").write_text("v 0 0 0\nv 1 0 0\nf 1 2 3\n")
    with pytest.raises(MeshError, match="vertices"):
        load_obj(tmp_path / "bad.obj")
    (tmp_path / "nan.obj").write_text("v 0 0 x\n")
    with pytest.raises(MeshError, match="nan.obj:1"):
        load_obj(tmp_path / "nan.obj")
    with pytest.raises(MeshError, match="does not exist"):
        load_obj(tmp_path / "missing.obj")
    (tmp_path / "t.mtl").write_text("newmtl m\nmap_Kd nothere.png\n")
    (tmp_path / "t.obj").write_text("mtllib t.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nusemtl m\nf 1 2 3\n")
    with pytest.raises(ImageError, match="nothere.png"):
        load_obj(tmp_path / "t.obj")
    (tmp_path / "nomtl.obj").write_text("mtllib gone.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        m = load_obj(tmp_path / "nomtl.obj")
    assert m.material is None and any("not found" in str(x.message) for x in w)


@pytest.mark.parametrize("body", [
    "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 2 3\nf 1 3 4\n",
    "v 0 0 0 1 0 0\nv 1 0 0 0 1 0\nv 0 1 0 0 0 1\nvt 0 0\nvt 1 0\nvt 0 1\nf 1/1 2/2 3/3\n",
    "v 0 0 0\nv 1 0 0\nv 0 1 0\nvn 0 0 1\nf 1//1 2//1 3//1\n",
    "v 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 1 0 0\nvt 0 1\nvn 0 0 1\nf 1/1/1 2/2/1 3/3/1\n",  # mixed vt sizes
    "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 1 1 0\nf 1 2\nf 1 2 3 4\n",  # 2 + 4 corners
    "v 0 0 0\nv 1 0 0\nv 0 1 0\nf -3 -2 -1\nf 1 2 3 # comment\n",
])
def test_fast_parser_matches_reference(tmp_path, body):
    """The vectorised parser either declines (None) or returns exactly what the line-by-line one does."""
    from meshlift.io import obj as objmod

    fast = objmod._parse_fast(body)
    if "f 1 2\n" in body:
        assert fast is None
        with pytest.raises(MeshError, match="corners"):
            objmod._parse_general(body, tmp_path / "x.obj")
        return
    ref = objmod._parse_general(body, tmp_path / "x.obj")
    if fast is not None:
        for k in ("pos", "col", "uvs", "nrms", "f_pos", "f_tex", "f_nrm", "f_mat"):
            assert np.array_equal(fast[k], ref[k]), k


@pytest.mark.parametrize("content", ["", "hello world\n", "# only a comment\n"])
def test_not_an_obj_is_a_clear_error(tmp_path, content):
    p = tmp_path / "bad.obj"
    p.write_text(content)
    with pytest.raises(MeshError, match="not an OBJ mesh"):
        load_obj(p)
    assert p.read_text() == content  # input untouched


def test_obj_always_has_normals_and_a_material(tmp_path):
    """Issue 15: `vn` for every mesh (smooth, hard above the crease angle) and the assumed material in the MTL."""
    import trimesh

    from meshlift.geometry.mesh_ops import smooth_vertex_normals

    b = trimesh.creation.box()
    m = Mesh(v_pos=torch.tensor(b.vertices, dtype=torch.float32), t_pos_idx=torch.tensor(b.faces))
    save_obj(tmp_path / "b.obj", m)
    text = (tmp_path / "b.obj").read_text()
    assert text.count("\nvn ") == 24  # the box's 90-degree edges stay hard: 3 normals per corner
    mtl = (tmp_path / "b.mtl").read_text()
    assert "bsdf pbr" in mtl and "Ks 0 0.5 0" in mtl
    r = load_obj(tmp_path / "b.obj")
    n, ti = smooth_vertex_normals(m.v_pos, m.t_pos_idx)
    assert torch.allclose(r.v_nrm[r.t_nrm_idx], n[ti], atol=1e-6)
    assert torch.allclose(r.material.kd.reshape(3), torch.full((3,), 0.5), atol=1e-6)
    assert torch.allclose(r.material.ks.reshape(3), torch.tensor([0.0, 0.5, 0.0]))


def test_corrupt_line_names_the_line_and_the_fix(tmp_path):
    from meshlift.errors import MeshError
    from meshlift.io.obj import load_obj

    p = tmp_path / "bad.obj"
    p.write_text("v 0 0 0\nv 1 0 0\nv 0 1 x\nf 1 2 3\n")
    with pytest.raises(MeshError, match=r"bad\.obj:3: cannot parse .*re-export the mesh"):
        load_obj(p)
