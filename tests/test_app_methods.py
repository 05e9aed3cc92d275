"""The web app's methods come from the registry (all of them, with their run sizes), and unposed photos go
through the registered pose step (``meshlift poses``, mocked here: pycolmap's SfM is tested in test_poses.py)
before the method runs. No gradio needed; the one training run is the Gaussian ``tiny`` size (seconds)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from meshlift.app import jobs, methods
from meshlift.errors import ConfigError
from meshlift.methods import registry

from _gaussian_problem import write_blender_dataset


def test_the_app_offers_every_registry_method_with_its_sizes():
    assert list(methods.METHODS) == list(registry.METHODS)
    for name, m in registry.METHODS.items():
        spec = methods.get_method(name)
        assert spec.label == m.label and spec.inputs == m.inputs and spec.presets == m.presets.sizes
        assert {p.name for p in spec.presets} == {"tiny", "quick", "full"}
    assert methods.get_method("surface") is methods.METHODS["nvdiffrec"]
    with pytest.raises(ConfigError, match="unknown method 'nope'; choose one of nvdiffrec, gaussians, milo"):
        methods.get_method("nope")


@pytest.mark.parametrize("name", list(registry.METHODS))
def test_configure_every_method_and_size(name, tmp_path):
    m, spec = registry.METHODS[name], methods.get_method(name)
    for kind in m.inputs:
        data = str(tmp_path / ("m.glb" if kind == "mesh" else "scene"))
        for size in ("tiny", "quick", "full"):
            cfg = spec.configure(kind, data, size, "cpu")
            assert isinstance(cfg, m.config_cls) and cfg.data == data and cfg.device == "cpu"
            assert cfg.checkpoint_every == 0 and cfg.preview_every == max(5, m.steps(cfg) // 8)
        assert cfg.time_budget_s == pytest.approx(spec.preset("full").gpu_s * methods.FULL_BUDGET_SHARE)
    for kind in set(("mesh", "posed", "unposed")) - set(m.inputs):
        with pytest.raises(ConfigError, match=f"{m.title} needs .*, not '{kind}'"):
            spec.configure(kind, str(tmp_path), "tiny", "cpu")


def test_unposed_verdict_names_the_pose_step_or_what_it_lacks(monkeypatch):
    from meshlift import _deps

    assert list(methods.POSE_STEP) == ["meshlift poses"]
    monkeypatch.setattr(_deps, "is_available", lambda module: True)
    ok, text = methods.unposed_verdict("12 photos without camera poses", 12)
    assert ok and text == "**Ready:** 12 photos without camera poses; poses will be estimated first (meshlift poses)."
    monkeypatch.setattr(_deps, "is_available", lambda module: module != "pycolmap")
    ok, text = methods.unposed_verdict("12 photos without camera poses", 12)
    assert not ok and "needs pycolmap" in text and "pip install 'meshlift[poses]'" in text and "colmap" in text
    monkeypatch.setattr(methods, "POSE_STEP", {})
    ok, text = methods.unposed_verdict("x", 3)
    assert not ok and "These 3 photos have no camera poses" in text and "no pose step" in text


def test_unposed_photos_are_posed_by_meshlift_poses_then_reconstructed(tmp_path, monkeypatch):
    """The job runs the registered ``meshlift poses`` step (its ``ensure_posed`` mocked: it reports stages and
    writes a posed dataset), then the Gaussian method's tiny size on the posed folder; the page gets the pose
    stages as passes, the Gaussians for the viewer and the run's summary without server paths."""
    import meshlift.poses

    photos = tmp_path / "photos"
    photos.mkdir()
    seen = {}

    def fake_ensure_posed(path, out_dir, options=None, *, progress=None, log=None):
        seen["args"] = (str(path), str(out_dir))
        progress.start("matching", 2)
        progress.advance()
        progress.advance()
        progress.end()
        log("6/6 images registered")
        return write_blender_dataset(Path(out_dir), size=16, n_train=6, n_test=2)

    monkeypatch.setattr(meshlift.poses, "ensure_posed", fake_ensure_posed)
    out = tmp_path / "out"
    events = list(jobs.reconstruct_job(str(photos), "unposed", "gaussians", "tiny", str(out)))
    assert seen["args"] == (str(photos), str(out / "poses"))
    logs = [e["message"] for e in events if e["type"] == "log"]
    assert "estimating camera poses (meshlift poses)" in logs and "6/6 images registered" in logs
    passes = [e["name"] for e in events if e["type"] == "pass"]
    assert passes[0] == "poses: matching" and len(passes) > 1
    done = events[-1]
    assert done["type"] == "done", done
    f = done["files"]
    assert f["splat"] == str(out / "point_cloud.ply") and "glb" not in f  # the Gaussian viewer only
    assert done["metrics"]["method"] == "gaussians"
    assert any("test PSNR" in line for line in done["summary"]) and not any("[bold]" in x for x in done["summary"])
    assert not any(str(out) in line for line in done["summary"])


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_unposed_photos_through_the_real_pose_step(tmp_path):
    """The same with pycolmap (when installed): 16 rendered photos without cameras (the poses tests' scene)
    are posed by ``meshlift poses`` inside the job, then the Gaussians' tiny run trains on them (~15 s)."""
    import shutil

    pytest.importorskip("pycolmap", reason="the [poses] extra (pycolmap) is not installed")
    from _poses_scene import cached_scene

    folder, names, _ = cached_scene()
    photos = tmp_path / "photos"
    photos.mkdir()
    for n in names:
        shutil.copyfile(folder / n, photos / n)
    ok, _ = methods.unposed_verdict("16 photos", 16)
    assert ok
    out = tmp_path / "out"
    events = list(jobs.reconstruct_job(str(photos), "unposed", "gaussians", "tiny", str(out)))
    assert events[-1]["type"] == "done", events[-1]
    logs = [e["message"] for e in events if e["type"] == "log"]
    assert any(m.startswith("registered 16 / 16 images") for m in logs), logs
    assert (out / "poses" / "sparse" / "0").is_dir() and events[-1]["metrics"]["test_views"] > 0


def test_outputs_of_a_mesh_run_that_wrote_its_own_ply_and_obj(tmp_path):
    """A MILo-like folder: ``mesh.obj`` + ``mesh.mtl`` + texture zipped, its own ``mesh.ply`` kept (not
    rewritten from the result's training-frame mesh), the GLB for the mesh viewer and the Gaussians for theirs."""
    out = tmp_path / "run"
    out.mkdir()
    for name, text in {"mesh.obj": "mtllib mesh.mtl\nv 0 0 0\n", "mesh.mtl": "newmtl m\nmap_Kd texture_kd.png\n",
                       "texture_kd.png": "png", "mesh.ply": "own ply", "mesh.glb": "glb", "point_cloud.ply": "g",
                       "metrics.json": json.dumps({"mesh_psnr": 20.0})}.items():
        (out / name).write_text(text)
    result = type("R", (), {"mesh": object()})()
    files = jobs._collect_outputs(out, result)
    assert files["glb"] == str(out / "mesh.glb") and files["splat"] == str(out / "point_cloud.ply")
    assert (out / "mesh.ply").read_text() == "own ply" and files["ply"] == str(out / "mesh.ply")
    with zipfile.ZipFile(files["obj_zip"]) as zf:
        assert sorted(zf.namelist()) == ["mesh/mesh.mtl", "mesh/mesh.obj", "mesh/texture_kd.png"]


def test_the_page_has_a_mesh_and_a_gaussian_viewer_each_shown_when_the_run_wrote_its_file():
    gr = pytest.importorskip("gradio", reason="the [app] extra (gradio) is not installed")
    from meshlift.app import ui

    page = ui.build()
    viewers = {c.elem_id: c for c in page.blocks.values() if isinstance(c, gr.Model3D)}
    assert set(viewers) == {"viewer", "splat-viewer"}
    mesh, splat = ui._fill_viewers({"glb": "/o/mesh.glb", "splat": None})  # the surface method
    assert mesh["value"] == "/o/mesh.glb" and mesh["visible"] and splat["visible"] is False
    mesh, splat = ui._fill_viewers({"glb": None, "splat": "/o/point_cloud.ply"})  # Gaussians
    assert mesh["visible"] is False and splat["value"] == "/o/point_cloud.ply" and splat["visible"]
    mesh, splat = ui._fill_viewers({"glb": "/o/mesh.glb", "splat": "/o/point_cloud.ply"})  # MILo
    assert mesh["visible"] and splat["visible"]
    assert all(u["visible"] and u["value"] is None for u in ui._fill_viewers(None))  # no result (yet)


def test_the_browser_test_runs_a_tiny_job_of_every_registry_method():
    import re

    text = (Path(__file__).parent / "test_app_browser.py").read_text(encoding="utf-8")
    run = set(re.findall(r'_run_tiny\([^)]*?"(\w+)",', text, flags=re.S))
    assert run == set(registry.METHODS), f"tests/test_app_browser.py runs {sorted(run)}; add the others"
