"""`meshlift inspect PATH [--json]` on the shared datasets."""

from __future__ import annotations

import json

import pytest

from meshlift.cli.main import main

KEYS = {"format", "num_images", "width", "height", "camera_model", "splits", "has_masks", "warnings", "bounds"}

EXPECTED = {
    "fox": dict(format="instant-ngp", num_images=50, width=532, height=950, camera_model="OPENCV", has_masks=False,
                splits={"train": 43, "val": 0, "test": 7}, n_warnings=1),
    "nerf_synthetic_lego_half": dict(format="blender", num_images=70, width=400, height=400, camera_model="PINHOLE",
                                     has_masks=True, splits={"train": 50, "val": 10, "test": 10}, n_warnings=0),
    "nerd_ethiopian_head": dict(format="llff", num_images=66, width=512, height=512, camera_model="PINHOLE",
                                has_masks=True, splits={"train": 57, "val": 0, "test": 9}, n_warnings=0),
    "statue_of_liberty_colmap": dict(format="colmap", num_images=40, width=400, height=600,
                                     camera_model="SIMPLE_RADIAL", has_masks=True,
                                     splits={"train": 35, "val": 0, "test": 5}, n_warnings=0),
}


def _run(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.shared_data
@pytest.mark.parametrize("name", list(EXPECTED))
def test_inspect_json(dataset, capsys, name):
    rc, out, _ = _run(capsys, "inspect", str(dataset(name)), "--json")
    assert rc == 0
    info = json.loads(out)
    assert KEYS <= set(info)
    exp = dict(EXPECTED[name])
    n_warn = exp.pop("n_warnings")
    for k, v in exp.items():
        assert info[k] == v, k
    assert len(info["warnings"]) == n_warn
    assert all(isinstance(w, str) for w in info["warnings"])
    lo, hi = info["bounds"]["min"], info["bounds"]["max"]
    assert all(a < b for a, b in zip(lo, hi))
    if name == "fox":
        assert "17" in info["warnings"][0]
    if name == "statue_of_liberty_colmap":
        assert info["undistorted"] and info["loaded_camera_model"] == "PINHOLE"


@pytest.mark.shared_data
def test_inspect_table_and_alt_model(dataset, capsys):
    rc, out, _ = _run(capsys, "inspect", str(dataset("fox")))
    assert rc == 0 and "instant-ngp" in out and "532 x 950" in out and "valid window" in out and "warning" in out
    rc, out, _ = _run(capsys, "inspect", str(dataset("statue_of_liberty_colmap")), "--colmap-model",
                      "sparse_alt_txt/0", "--json")
    assert rc == 0 and json.loads(out)["focal"][0] == pytest.approx(2395.65 / 2, abs=0.01)


def test_inspect_bad_path_exits_2(tmp_path, capsys):
    rc, _, err = _run(capsys, "inspect", str(tmp_path))
    assert rc == 2 and "no dataset found" in err
    rc, _, err = _run(capsys, "inspect", str(tmp_path / "missing"))
    assert rc == 2 and "does not exist" in err


def test_inspect_a_mesh_file_says_what_to_run(tmp_path, capsys):
    import trimesh

    p = tmp_path / "ico.ply"
    trimesh.creation.icosphere(subdivisions=1).export(p)
    rc, out, _ = _run(capsys, "inspect", str(p))
    assert rc == 0 and "80 faces" in out and "meshlift reconstruct" in out and "meshlift convert" in out
    rc, out, _ = _run(capsys, "inspect", str(p), "--json")
    info = json.loads(out)
    assert rc == 0 and info["format"] == "mesh" and info["faces"] == 80 and info["vertices"] == 42


def test_inspect_of_a_run_folder_summarises_the_run(tmp_path, capsys):
    """A run folder is not a dataset: inspect names the method and data, the headline metrics and warnings of
    metrics.json, the outputs present and the images to look at (exit 0); an unfinished run says so."""
    import json

    from meshlift.cli.main import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"method": "milo", "data": "x"}))
    (run / "mesh.glb").write_bytes(b"")
    assert main(["inspect", str(run)]) == 0
    out = capsys.readouterr().out
    assert "a meshlift run (--method milo, data x)" in out and "mesh.glb" in out and "no metrics.json" in out
    (run / "metrics.json").write_text(json.dumps({"mesh_psnr": 21.5, "fscore": 0.9, "steps": 400,
                                                  "warnings": ["the mesh renders 3 dB below"]}))
    (run / "images").mkdir()
    (run / "images" / "preview_000400.png").write_bytes(b"")
    assert main(["inspect", str(run)]) == 0
    out = capsys.readouterr().out
    assert "mesh_psnr 21.5" in out and "fscore 0.9" in out and "steps 400" in out
    assert "warning: the mesh renders 3 dB below" in out and "preview_000400.png" in out
    assert main(["inspect", str(run), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "meshlift_run" and info["method"] == "milo" and info["metrics"]["steps"] == 400
    # the mesh's test view: the side-by-side the run's summary names (compare/) where it exists
    (run / "mesh_renders").mkdir()
    (run / "mesh_renders" / "0110.png").write_bytes(b"")
    assert main(["inspect", str(run)]) == 0
    assert "mesh_renders/0110.png (mesh at a test view)" in capsys.readouterr().out
    (run / "compare").mkdir()
    (run / "compare" / "0110.png").write_bytes(b"")
    assert main(["inspect", str(run)]) == 0
    out = capsys.readouterr().out
    assert "compare/0110.png (mesh | Gaussians | target" in out and "mesh_renders" not in out
