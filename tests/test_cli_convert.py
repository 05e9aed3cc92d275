"""`meshlift convert` on the shared classic meshes: budget, no duplicate faces, equal reloads, valid GLB."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from _gltf import validate
from meshlift.cli.main import main
from meshlift.io.mesh import load_mesh

BUDGET = {"stanford-bunny": 5000, "teapot": 2000, "cow": 2000, "fandisk": 4000, "suzanne": 500}


@pytest.mark.shared_data
@pytest.mark.parametrize("name", sorted(BUDGET))
def test_convert_classic(dataset, tmp_path, capsys, name):
    src = dataset("classic_meshes") / f"{name}.obj"
    rc = main(["convert", str(src), "--out-dir", str(tmp_path), "--simplify", str(BUDGET[name]), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["after"]["faces"] <= BUDGET[name] and out["after"]["faces"] > 0.8 * BUDGET[name]
    assert out["after"]["nonmanifold_edges"] == 0
    meshes = {fmt: load_mesh(tmp_path / f"{name}.{fmt}") for fmt in ("ply", "obj", "glb")}
    ref = meshes["ply"]
    assert ref.num_faces == out["after"]["faces"]
    f = np.sort(ref.t_pos_idx.numpy(), axis=1)
    assert len(np.unique(f, axis=0)) == len(f), "duplicate faces"
    for fmt in ("obj", "glb"):
        assert torch.equal(meshes[fmt].v_pos, ref.v_pos), fmt
        assert torch.equal(meshes[fmt].t_pos_idx, ref.t_pos_idx), fmt
    rep = validate(tmp_path / f"{name}.glb")
    assert rep["numErrors"] == 0, rep["messages"]


@pytest.mark.shared_data
def test_convert_textured_table_and_no_overwrite(dataset, tmp_path, capsys):
    import shutil

    spot = dataset("spot")
    for f in ("spot.obj", "spot.mtl", "spot_texture.png"):
        shutil.copy(spot / f, tmp_path / f)
    rc = main(["convert", str(tmp_path / "spot.obj"), "--formats", "obj,glb"])
    assert rc == 0
    text = capsys.readouterr().out
    for word in ("vertices", "faces", "components", "watertight", "manifold", "bbox", "before", "after"):
        assert word in text
    # the input is never overwritten: outputs get a suffix
    assert (tmp_path / "spot_meshlift.obj").is_file() and (tmp_path / "spot_meshlift.glb").is_file()
    assert (tmp_path / "spot.obj").read_bytes() == (spot / "spot.obj").read_bytes()
    r = load_mesh(tmp_path / "spot_meshlift.glb")
    assert r.material is not None and r.material.kd.shape == (1024, 1024, 3) and r.v_tex is not None
    assert validate(tmp_path / "spot_meshlift.glb")["numErrors"] == 0


def test_convert_vertex_colours_note_and_errors(tmp_path, capsys):
    from meshlift.io.ply import save_ply
    from meshlift.structures.mesh import Mesh

    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    m = Mesh(v_pos=v, t_pos_idx=torch.tensor([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]]), v_color=torch.rand(4, 3))
    save_ply(tmp_path / "c.ply", m)
    assert main(["convert", str(tmp_path / "c.ply"), "--stem", "out", "--formats", "obj,glb,ply"]) == 0
    assert "non-standard" in capsys.readouterr().out.replace("\n", " ")
    assert load_mesh(tmp_path / "out.glb").v_color is not None
    assert main(["convert", str(tmp_path / "c.ply"), "--formats", "fbx"]) == 2
    assert "fbx" in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "missing.ply")]) == 2
    assert main(["convert", str(tmp_path / "c.ply"), "--stem", "c", "--formats", "ply"]) == 2
    (tmp_path / "bad.obj").write_text("v 0 0 0\nf 1 2 3\n")
    assert main(["convert", str(tmp_path / "bad.obj")]) == 2
    assert "vertices" in capsys.readouterr().err


def test_usage_errors_are_one_message_exit_2(capsys):
    from meshlift.cli.main import main

    assert main(["convert"]) == 2
    assert main(["nosuchcommand"]) == 2
    assert main(["convert", "x.ply", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "No such option" in err


def test_out_dir_that_is_a_file_names_the_right_option(tmp_path, capsys):
    import trimesh

    trimesh.creation.icosphere(subdivisions=1).export(tmp_path / "s.ply")
    (tmp_path / "afile").write_text("x")
    assert main(["convert", str(tmp_path / "s.ply"), "--out-dir", str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err
    assert "--out-dir" in err and "choose another --out-dir" in err
