"""`meshlift render`: renders of an asset from a dataset's cameras reproduce that dataset's images
(round trip through a Blender-format dataset written here), turntable outputs, errors."""

from __future__ import annotations

import json
import math

import pytest
import torch

from meshlift.cli.main import main


def _write_blender_dataset(mesh_path, root, n=3, size=48):
    from meshlift.cameras import world_to_camera_to_opengl_c2w
    from meshlift.renderers.mesh_pbr import render_views as _render_views, turntable_cameras as _orbit_cameras
    from meshlift.io.images import write_image
    from meshlift.io.mesh import load_mesh

    mesh = load_mesh(mesh_path)
    cams = _orbit_cameras(mesh, n, size, "y", 20.0)
    (root / "test").mkdir(parents=True)
    frames = []
    with torch.no_grad():
        for k, img in enumerate(_render_views(mesh, cams, None, 1.0, "unlit", 1)):
            write_image(root / "test" / f"r_{k}.png", img)
            c2w = world_to_camera_to_opengl_c2w(cams.world_to_camera[k].double())
            frames.append({"file_path": f"./test/r_{k}", "transform_matrix": c2w.tolist()})
    fov = 2 * math.atan(0.5 * size / float(cams.K[0, 0, 0]))
    for s in ("train", "val", "test"):
        (root / f"transforms_{s}.json").write_text(json.dumps({"camera_angle_x": fov, "frames": frames}))


@pytest.mark.shared_data
def test_render_reproduces_dataset_images(dataset, tmp_path, capsys):
    spot = dataset("spot") / "spot.obj"
    _write_blender_dataset(spot, tmp_path / "ds")
    rc = main(["render", str(spot), "--data", str(tmp_path / "ds"), "--out", str(tmp_path / "out"), "--no-lpips", "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert res["mode"] == "unlit" and res["num_views"] == 3
    assert res["psnr"] > 40 and res["ssim"] > 0.99  # only 8-bit quantisation differs
    assert sorted(p.name for p in (tmp_path / "out" / "renders").iterdir()) == ["r_0.png", "r_1.png", "r_2.png"]
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["psnr"] == pytest.approx(res["psnr"])
    # the renders pair with the dataset images in `meshlift eval images`
    assert main(["eval", "images", str(tmp_path / "out" / "renders"), str(tmp_path / "ds" / "test"), "--no-lpips", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_images"] == 3


def test_turntable_and_errors(tmp_path, capsys):
    import trimesh

    trimesh.creation.icosphere(subdivisions=2).export(tmp_path / "s.ply")
    rc = main(["render", str(tmp_path / "s.ply"), "--out", str(tmp_path / "t"), "--turntable", "--frames", "4", "--size", "32"])
    assert rc == 0
    import imageio.v2 as imageio

    gif = imageio.mimread(tmp_path / "t" / "turntable.gif")
    assert len(gif) == 4 and gif[0].shape[:2] == (32, 32)
    sheet = imageio.imread(tmp_path / "t" / "contact_sheet.png")
    assert sheet.shape[:2] == (32, 128)
    # geometry-only mesh: grey shading, white background in the corners
    assert sheet[0, 0].tolist()[:3] == [255, 255, 255] and sheet[16, 16, 0] < 250
    assert main(["render", str(tmp_path / "s.ply"), "--out", str(tmp_path / "x")]) == 2  # neither --data nor --turntable
    assert main(["render", str(tmp_path / "s.ply"), "--out", str(tmp_path / "x"), "--turntable", "--mode", "pbr"]) == 2
    assert "light" in capsys.readouterr().err
    assert main(["render", str(tmp_path / "nope.glb"), "--out", str(tmp_path / "x")]) == 2  # missing: said first
    assert "nope.glb does not exist" in capsys.readouterr().err
    for flag, value in (("--size", "-5"), ("--frames", "0"), ("--spp", "0")):
        assert main(["render", str(tmp_path / "s.ply"), "--out", str(tmp_path / "x"), "--turntable", flag, value]) == 2
        assert flag in capsys.readouterr().err
    # a mesh given as --data (a run made from a mesh has no photos to compare with): said as such
    assert main(["render", str(tmp_path / "s.ply"), "--data", str(tmp_path / "s.ply"), "--out", str(tmp_path / "x")]) == 2
    assert "is a mesh file; --data takes a photo dataset" in capsys.readouterr().err


def test_a_mesh_file_in_a_run_folder_gets_the_runs_probe(tmp_path):
    """``RUN/mesh.glb`` and ``RUN/mesh/mesh.obj`` find ``RUN/probe.hdr`` (a lone mesh file finds none)."""
    import trimesh

    from meshlift.io.hdr import write_hdr
    from meshlift.io.mesh import find_asset

    run = tmp_path / "run"
    (run / "mesh").mkdir(parents=True)
    sphere = trimesh.creation.icosphere(subdivisions=1)
    sphere.export(run / "mesh.glb")
    sphere.export(run / "mesh" / "mesh.obj")
    assert find_asset(run / "mesh.glb") == (run / "mesh.glb", None)
    write_hdr(run / "probe.hdr", torch.ones(8, 16, 3))
    assert find_asset(run / "mesh.glb") == (run / "mesh.glb", run / "probe.hdr")
    assert find_asset(run / "mesh" / "mesh.obj") == (run / "mesh" / "mesh.obj", run / "probe.hdr")
    assert find_asset(run) == (run / "mesh" / "mesh.obj", run / "probe.hdr")


@pytest.mark.slow
@pytest.mark.shared_data
def test_pbr_under_uniform_white_light_matches_albedo(dataset):
    """Split-sum shading under a constant radiance-1 environment ≈ albedo (+ a little specular)."""
    from meshlift.renderers.mesh_pbr import render_views as _render_views, turntable_cameras as _orbit_cameras
    from meshlift.io.mesh import load_mesh
    from meshlift.shading.light import EnvironmentLight

    m = load_mesh(dataset("spot") / "spot.obj")
    cams = _orbit_cameras(m, 2, 48, "y", 20.0)
    env = EnvironmentLight.constant(16, 1.0, trainable=False)
    env.build_mips()
    with torch.no_grad():
        pbr = list(_render_views(m, cams, env, 1.0, "pbr", 1))
        unlit = list(_render_views(m, cams, None, 1.0, "unlit", 1))
    for a, b in zip(pbr, unlit):
        cov = (b < 0.99).any(-1)
        assert cov.sum() > 100 and float((a - b).abs()[cov].mean()) < 0.06


def test_missing_asset_path_is_named_as_missing(tmp_path):
    """A path that does not exist is reported as missing (not as 'not a mesh file or a folder')."""
    from meshlift.errors import MeshError
    from meshlift.io.mesh import find_asset

    with pytest.raises(MeshError, match="does not exist"):
        find_asset(tmp_path / "no_such_run")


def test_auto_up_follows_the_runs_dataset(tmp_path):
    """``--up auto``: z for an asset whose run trained on a Blender scene and kept its frame, else y."""
    from meshlift.cli.render_cmd import _auto_up

    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "transforms_train.json").write_text('{"frames": []}')
    run = tmp_path / "run"
    (run / "mesh").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"data": str(ds), "up_axis": "keep"}))
    up, note = _auto_up(run / "mesh" / "mesh.obj")
    assert up == "z" and "Blender" in note and "--up y" in note
    assert _auto_up(run)[0] == "z"
    (run / "config.json").write_text(json.dumps({"data": str(ds), "up_axis": "z"}))  # exports turned to +Y
    assert _auto_up(run) == ("y", None)
    (run / "config.json").write_text(json.dumps({"data": str(tmp_path / "missing")}))
    assert _auto_up(run) == ("y", None)
    (run / "config.json").write_text("{not json")
    assert _auto_up(run) == ("y", None)
    assert _auto_up(tmp_path / "elsewhere.ply") == ("y", None)
