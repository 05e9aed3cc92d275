"""Kind confusion (issue 31, class 2): a 3DGS point cloud, a plain point cloud or an empty file where a mesh
is needed (convert, eval mesh, a mesh render, a mesh input to reconstruct, an app upload) is one clear
error naming the file and what it holds, with nothing written; a mesh where Gaussians are needed likewise.
The input files are never written to."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from meshlift.cli.main import main
from meshlift.errors import MeshError
from meshlift.io.gaussian_ply import save_gaussian_ply

SPLATS = "a 3D Gaussian splatting point cloud (40 Gaussians, 0 faces), not a mesh with faces"


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def files(tmp_path):
    """A 3DGS PLY, a point-cloud PLY and OBJ, an empty PLY and a mesh PLY, with their digests."""
    import trimesh

    n = 40
    g = torch.Generator().manual_seed(1)
    save_gaussian_ply(tmp_path / "point_cloud.ply", {
        "means": torch.randn(n, 3, generator=g), "quats": torch.randn(n, 4, generator=g),
        "log_scales": torch.full((n, 3), -3.0), "opacity_logits": torch.randn(n, generator=g),
        "sh0": torch.randn(n, 1, 3, generator=g), "shN": torch.zeros(n, 3, 3)})
    (tmp_path / "scan.ply").write_text("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
                                       "property float z\nend_header\n0 0 0\n1 0 0\n0 1 0\n")
    (tmp_path / "scan.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\n")
    (tmp_path / "nothing.ply").write_text("ply\nformat ascii 1.0\nelement vertex 0\nproperty float x\n"
                                          "property float y\nproperty float z\nelement face 0\n"
                                          "property list uchar int vertex_indices\nend_header\n")
    trimesh.creation.icosphere(subdivisions=2).export(tmp_path / "sphere.ply")
    f = {k: tmp_path / k for k in ("point_cloud.ply", "scan.ply", "scan.obj", "nothing.ply", "sphere.ply")}
    return f, {k: _digest(p) for k, p in f.items()}


def _unchanged(files):
    f, digests = files
    assert {k: _digest(p) for k, p in f.items()} == digests


def test_convert_refuses_files_without_faces_and_writes_nothing(files, tmp_path, capsys):
    f, _ = files
    for name, what in (("point_cloud.ply", SPLATS), ("scan.ply", "a point cloud (3 points, 0 faces)"),
                       ("scan.obj", "a point cloud (3 points, 0 faces)"),
                       ("nothing.ply", "no vertices and no faces (an empty file)")):
        out = tmp_path / f"out_{name}"
        assert main(["convert", str(f[name]), "--out-dir", str(out)]) == 2, name
        err = capsys.readouterr().err
        assert f"{f[name]}: holds {what}" in err and "convert cleans and exports triangle meshes" in err, err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert not out.exists() or not any(out.iterdir())
    assert "--method milo" in _last_error(main, ["convert", str(f["point_cloud.ply"])], capsys)
    assert not any(p.suffix == ".glb" or p.stem.endswith("_meshlift") for p in tmp_path.iterdir())  # nor beside IN
    _unchanged(files)


def _last_error(run, args, capsys) -> str:
    assert run(args) == 2
    return capsys.readouterr().err


def test_convert_refuses_a_result_with_no_face_left(tmp_path, capsys):
    (tmp_path / "flat.obj").write_text("v 0 0 0\nv 1 0 0\nv 2 0 0\nf 1 2 3\n")  # one degenerate face
    err = _last_error(main, ["convert", str(tmp_path / "flat.obj"), "--out-dir", str(tmp_path / "o")], capsys)
    assert "flat.obj: cleaning left no face of its 1" in err and "--no-clean" in err
    assert not (tmp_path / "o" / "flat.glb").exists()


def test_eval_mesh_needs_a_surface_prediction_and_a_non_splat_ground_truth(files, capsys):
    f, _ = files
    err = _last_error(main, ["eval", "mesh", str(f["point_cloud.ply"]), str(f["sphere.ply"])], capsys)
    assert f"{f['point_cloud.ply']}: holds {SPLATS}; eval mesh samples the predicted surface" in err
    err = _last_error(main, ["eval", "mesh", str(f["scan.ply"]), str(f["sphere.ply"])], capsys)
    assert "scan.ply: holds a point cloud (3 points, 0 faces)" in err
    err = _last_error(main, ["eval", "mesh", str(f["sphere.ply"]), str(f["point_cloud.ply"])], capsys)
    assert f"{f['point_cloud.ply']}: holds {SPLATS}; the ground truth of eval mesh" in err
    err = _last_error(main, ["eval", "mesh", str(f["sphere.ply"]), str(f["nothing.ply"])], capsys)
    assert "nothing.ply: holds no vertices and no faces" in err
    # a scanned point cloud stays a valid ground truth
    assert main(["eval", "mesh", str(f["sphere.ply"]), str(f["scan.ply"]), "--samples", "500", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_gt_points"] == 3
    _unchanged(files)


def test_mesh_render_of_a_point_cloud_names_what_it_holds(files, tmp_path, capsys):
    f, _ = files
    err = _last_error(main, ["render", str(f["scan.ply"]), "--out", str(tmp_path / "r"), "--turntable"], capsys)
    assert "scan.ply: holds a point cloud (3 points, 0 faces), not a mesh with faces; render draws meshes" in err
    _unchanged(files)


def test_a_partial_splat_export_is_named_as_such(tmp_path):
    from meshlift.io.mesh import load_surface_mesh

    p = tmp_path / "partial.ply"
    p.write_text("ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\n"
                 "property float f_dc_0\nproperty float opacity\nend_header\n0 0 0 0.5 1\n")
    with pytest.raises(MeshError, match=r"carries some 3DGS properties but lacks \['scale_0', 'rot_0'\]"):
        load_surface_mesh(p, "a test needs a mesh")


def test_a_mesh_input_to_reconstruct_must_have_faces(files):
    from meshlift.data.synthetic import load_normalized_mesh
    from meshlift.methods.nvdiffrec.presets import get_preset
    from meshlift.methods.nvdiffrec.reconstruct import load_problem
    from meshlift.methods.nvdiffrec.config import apply_dict

    f, _ = files
    cfg = apply_dict(get_preset("spot", quick=True), {"data": str(f["point_cloud.ply"])})
    with pytest.raises(MeshError, match=r"point_cloud\.ply: holds a 3D Gaussian splatting point cloud"):
        load_problem(cfg, torch.device("cpu"))
    with pytest.raises(MeshError, match=r"scan\.obj: holds a point cloud \(3 points, 0 faces\)"):
        load_normalized_mesh(f["scan.obj"])


def test_app_uploads_of_splats_or_points_are_refused(files, tmp_path):
    from meshlift.app.uploads import Limits, UploadError, ingest, session_folder

    f, _ = files
    limits = Limits(root=tmp_path / "app")
    s = session_folder(limits, "s")
    with pytest.raises(UploadError, match=r"point_cloud\.ply holds a 3D Gaussian splatting point cloud \(40 "
                                          r"Gaussians, 0 faces\).*meshlift render point_cloud\.ply --turntable"):
        ingest([f["point_cloud.ply"]], s, limits)
    with pytest.raises(UploadError, match=r"scan\.ply holds a point cloud \(3 points, 0 faces\)"):
        ingest([f["scan.ply"]], s, limits)
    assert ingest([f["sphere.ply"]], s, limits).kind == "mesh"
    _unchanged(files)


def test_inspect_says_what_a_file_holds(files, capsys):
    f, _ = files
    assert main(["inspect", str(f["point_cloud.ply"])]) == 0
    out = capsys.readouterr().out
    assert "a 3D Gaussian splatting point cloud, 40 Gaussians, SH degree 1" in out
    assert "meshlift render" in out and "meshlift convert" not in out
    assert main(["inspect", str(f["point_cloud.ply"]), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "gaussians" and info["gaussians"] == 40 and info["warnings"] == []
    assert main(["inspect", str(f["scan.obj"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "point_cloud"
    assert main(["inspect", str(f["nothing.ply"])]) == 0  # was an IndexError in amin()
    out = capsys.readouterr().out
    assert "an empty file, 0 vertices" in out and "no vertices" in out
    _unchanged(files)


def test_every_method_refuses_a_ply_without_faces_as_its_mesh_input(files, tmp_path, capsys):
    """`data.views.sniff_input`, which every method asks whether DATA is a mesh, judges a .ply by its header."""
    from meshlift.data.views import sniff_input

    f, _ = files
    assert sniff_input(f["sphere.ply"]) == "mesh" and sniff_input(tmp_path / "not_written_yet.ply") == "mesh"
    for name in ("point_cloud.ply", "scan.ply", "nothing.ply"):
        with pytest.raises(MeshError, match=f"{name}: holds .*; reconstruct renders views of a mesh input"):
            sniff_input(f[name])
    for method in ("nvdiffrec", "milo"):
        err = _last_error(main, ["reconstruct", str(f["point_cloud.ply"]), "--method", method, "--quick",
                                 "--out", str(tmp_path / f"run_{method}")], capsys)
        assert f"{f['point_cloud.ply']}: holds {SPLATS}" in err and "Traceback" not in err, err
    _unchanged(files)
