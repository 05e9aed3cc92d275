"""Face orientation (consistent winding, outward closed components), --up conversion, strict JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from meshlift.cli.main import main
from meshlift.mesh.clean import clean_mesh
from meshlift.mesh.orient import orient_faces, signed_volume, to_y_up, winding_consistent
from meshlift.structures.mesh import Mesh


def _sphere(subdiv=3, radius=1.0, center=(0, 0, 0)):
    import trimesh

    s = trimesh.creation.icosphere(subdivisions=subdiv, radius=radius)
    return Mesh(v_pos=torch.tensor(s.vertices + np.asarray(center), dtype=torch.float32),
                t_pos_idx=torch.tensor(s.faces, dtype=torch.int64))


def _vol(m: Mesh) -> float:
    return signed_volume(m.v_pos.numpy(), m.t_pos_idx.numpy())


def test_inverted_sphere_turned_outward():
    s = _sphere()
    inv = Mesh(v_pos=s.v_pos, t_pos_idx=s.t_pos_idx[:, [0, 2, 1]].clone())
    assert _vol(inv) < 0 and winding_consistent(inv)
    out, rep = orient_faces(inv)
    assert rep.inverted_components == 1 and rep.winding_flipped_faces == 0
    assert _vol(out) == pytest.approx(-_vol(inv))
    assert torch.equal(inv.t_pos_idx, s.t_pos_idx[:, [0, 2, 1]]), "input modified"


@pytest.mark.parametrize("frac", [0.1, 0.45])
def test_mixed_winding_made_consistent(frac):
    s = _sphere()
    rng = np.random.default_rng(0)
    flip = rng.random(s.num_faces) < frac
    f = s.t_pos_idx.clone()
    f[torch.from_numpy(flip)] = f[torch.from_numpy(flip)][:, [0, 2, 1]]
    mixed = Mesh(v_pos=s.v_pos, t_pos_idx=f)
    assert not winding_consistent(mixed)
    out, rep = orient_faces(mixed)
    assert winding_consistent(out)
    assert _vol(out) > 0
    assert rep.winding_flipped_faces == int(flip.sum())  # the minority side is the one reversed
    # same face set, every face now in the sphere's outward order
    key = lambda a: np.sort(a, axis=1)  # noqa: E731
    assert np.array_equal(key(out.t_pos_idx.numpy()), key(s.t_pos_idx.numpy()))
    assert torch.equal(out.t_pos_idx, s.t_pos_idx)


def test_two_components_one_inverted_and_uv_corners_follow():
    a, b = _sphere(2), _sphere(2, 0.5, (3, 0, 0))
    nb = b.t_pos_idx[:, [0, 2, 1]] + a.num_vertices
    f = torch.cat([a.t_pos_idx, nb])
    uv_idx = f.clone()  # per-corner UV indices identical to positions: they must flip alike
    m = Mesh(v_pos=torch.cat([a.v_pos, b.v_pos]), t_pos_idx=f, v_tex=torch.rand(f.max() + 1, 2),
             t_tex_idx=uv_idx)
    out, rep = orient_faces(m)
    assert rep.inverted_components == 1
    assert torch.equal(out.t_tex_idx, out.t_pos_idx)
    assert _vol(out) > 0


def test_mobius_strip_reported_nonorientable():
    n = 24
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    verts = []
    for s_ in (-0.3, 0.3):
        verts.append(np.stack([(1 + s_ * np.cos(t / 2)) * np.cos(t), (1 + s_ * np.cos(t / 2)) * np.sin(t),
                               s_ * np.sin(t / 2)], 1))
    v = np.concatenate(verts)  # [2n, 3]: row 0..n-1 inner edge, n..2n-1 outer edge
    faces = []
    for i in range(n):
        j = (i + 1) % n
        a, b = i, n + i
        if j == 0:  # the half twist: inner meets outer
            c, d = n + j, j
        else:
            c, d = j, n + j
        faces += [[a, b, d], [a, d, c]]
    m = Mesh(v_pos=torch.tensor(v, dtype=torch.float32), t_pos_idx=torch.tensor(faces))
    _, rep = orient_faces(m)
    assert rep.nonorientable_components == 1


def test_open_hemisphere_made_consistent_not_flipped():
    s = _sphere()
    c = s.v_pos[s.t_pos_idx].mean(1)
    keep = c[:, 2] > 0
    f = s.t_pos_idx[keep].clone()
    f[::3] = f[::3][:, [0, 2, 1]]
    m = Mesh(v_pos=s.v_pos, t_pos_idx=f)
    out, rep = orient_faces(m)
    assert winding_consistent(out) and rep.inverted_components == 0
    assert torch.equal(out.t_pos_idx, s.t_pos_idx[keep])


def test_clean_mesh_reports_orientation():
    s = _sphere()
    m = Mesh(v_pos=s.v_pos, t_pos_idx=s.t_pos_idx[:, [0, 2, 1]].clone())
    out, rep = clean_mesh(m)
    assert rep.inverted_components == 1 and _vol(out) > 0


def test_to_y_up_rotates_and_records():
    s = _sphere(1)
    v = s.v_pos.clone()
    v[:, 2] += 5.0  # a Z-up object standing on z = 4
    m = to_y_up(Mesh(v_pos=v, t_pos_idx=s.t_pos_idx), "z")
    assert float(m.v_pos[:, 1].min()) == pytest.approx(4.0, abs=1e-5)
    assert m.extras["up_axis_conversion"]["from"] == "+z"
    assert _vol(m) == pytest.approx(_vol(Mesh(v_pos=v, t_pos_idx=s.t_pos_idx)), rel=1e-5)  # proper rotation


def test_convert_inside_out_zup_to_yup(tmp_path, capsys):
    import trimesh

    box = trimesh.creation.box(extents=(1, 1, 2))
    box.vertices[:, 2] += 1.0  # z in [0, 2]
    box.faces = box.faces[:, ::-1]  # inside out
    src = tmp_path / "box.obj"
    box.export(src)
    rc = main(["convert", str(src), "--out-dir", str(tmp_path / "o"), "--up", "z", "--formats", "glb,obj",
               "--json"])
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["clean"]["inverted_components"] == 1
    assert rep["before"]["signed_volume"] < 0 < rep["after"]["signed_volume"]
    assert rep["after"]["winding_consistent"]
    from meshlift.io.mesh import load_mesh

    g = load_mesh(tmp_path / "o" / "box.glb")
    assert float(g.v_pos[:, 1].min()) == pytest.approx(0.0, abs=1e-5)
    assert float(g.v_pos[:, 1].max()) == pytest.approx(2.0, abs=1e-5)
    raw = (tmp_path / "o" / "box.glb").read_bytes()
    n = int.from_bytes(raw[12:16], "little")
    js = json.loads(raw[20:20 + n])
    assert js["asset"]["extras"]["meshlift"]["up_axis_conversion"]["from"] == "+z"
    assert main(["convert", str(src), "--out-dir", str(tmp_path / "o"), "--up", "w"]) == 2


def _strict(text):
    def bad(c):
        raise ValueError(f"non-standard JSON constant {c}")

    return json.loads(text, parse_constant=bad)


def test_eval_images_identical_is_strict_json(tmp_path, capsys):
    from meshlift.io.images import write_image

    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        write_image(tmp_path / d / "x.png", torch.full((16, 16, 3), 0.5))
    assert main(["eval", "images", str(tmp_path / "a"), str(tmp_path / "b"), "--no-lpips", "--json"]) == 0
    res = _strict(capsys.readouterr().out)
    assert res["psnr"] is None and res["per_image"][0]["psnr"] is None and res["ssim"] == pytest.approx(1.0)


def test_eval_mesh_empty_ply(tmp_path, capsys):
    import trimesh

    e = tmp_path / "empty.ply"
    e.write_text("ply\nformat ascii 1.0\nelement vertex 0\nproperty float x\nproperty float y\n"
                 "property float z\nend_header\n")
    trimesh.creation.icosphere(subdivisions=2).export(tmp_path / "gt.ply")
    assert main(["eval", "mesh", str(e), str(tmp_path / "gt.ply"), "--samples", "2000", "--json"]) == 0
    res = _strict(capsys.readouterr().out)
    assert res["fscore"] == 0.0 and res["chamfer_l1"] is None and "empty" in res["message"]


def test_convert_out_dir_that_is_a_file(tmp_path, capsys):
    import trimesh

    src = tmp_path / "box.obj"
    trimesh.creation.box().export(src)
    f = tmp_path / "taken"
    f.write_text("x")
    assert main(["convert", str(src), "--out-dir", str(f)]) == 2
    assert "is an existing file" in capsys.readouterr().err and f.read_text() == "x"
