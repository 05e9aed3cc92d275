"""The web app without a browser: upload limits and zip-slip refusals, input classification, session folders,
the method registry and the ZeroGPU boundary (plain values only, spaces.GPU applied when present)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from meshlift.app.uploads import (Limits, UploadError, check_member_name, delete_session, ingest, session_folder,
                                  sweep)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def limits(tmp_path):
    return Limits(max_files=10, max_file_mb=1, max_total_mb=2, max_age_s=60, root=tmp_path / "sessions")


def _zip(path: Path, members: dict) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


@pytest.mark.parametrize("name, word", [("../evil.png", "'..'"), ("a/../../evil.png", "'..'"),
                                        ("/etc/evil.png", "absolute"), ("C:/evil.png", "absolute"),
                                        ("..\\evil.png", "'..'")])
def test_zip_slip_names_are_refused(tmp_path, limits, name, word):
    with pytest.raises(UploadError, match=word):
        check_member_name(name)
    z = _zip(tmp_path / "bad.zip", {"ok.png": b"x", name: b"y"})
    session = session_folder(limits, "s1")
    with pytest.raises(UploadError, match="zip-slip"):
        ingest([z], session, limits)
    assert not (tmp_path / "evil.png").exists() and not list(tmp_path.rglob("evil.png"))
    assert not (session / "input").exists()  # nothing half-extracted is left


def test_symlink_member_is_refused(tmp_path, limits):
    z = tmp_path / "link.zip"
    with zipfile.ZipFile(z, "w") as zf:
        info = zipfile.ZipInfo("photos/link.png")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(UploadError, match="symbolic link"):
        ingest([z], session_folder(limits, "s"), limits)


def test_size_count_and_type_limits(tmp_path, limits):
    s = session_folder(limits, "s")
    big = tmp_path / "big.png"
    big.write_bytes(b"\0" * (limits.max_file_bytes + 1))
    with pytest.raises(UploadError, match="big.png is 1.0 MiB; the limit is 1 MiB per file"):
        ingest([big], s, limits)
    parts = []
    for k in range(3):
        p = tmp_path / f"p{k}.png"
        p.write_bytes(b"\0" * (900 * 1024))
        parts.append(p)
    with pytest.raises(UploadError, match="2 MiB in total"):
        ingest(parts, s, limits)
    bomb = _zip(tmp_path / "bomb.zip", {"a.png": b"\0" * (limits.max_file_bytes + 10)})
    with pytest.raises(UploadError, match="per file"):
        ingest([bomb], s, limits)
    many = _zip(tmp_path / "many.zip", {f"{k}.png": b"x" for k in range(11)})
    with pytest.raises(UploadError, match="too many files"):
        ingest([many], s, limits)
    exe = tmp_path / "run.sh"
    exe.write_text("echo")
    with pytest.raises(UploadError, match=r"file type \.sh is not accepted"):
        ingest([exe], s, limits)
    with pytest.raises(UploadError, match=r"has type \.py"):
        ingest([_zip(tmp_path / "py.zip", {"x.py": b"import os"})], s, limits)
    with pytest.raises(UploadError, match="nothing uploaded"):
        ingest([], s, limits)


def _blender_frames(names):
    return {"camera_angle_x": 0.69, "frames": [
        {"file_path": f"./train/{n}", "transform_matrix": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 4.0], [0, 0, 0, 1]]}
        for n in names]}


def test_classification_mesh_posed_unposed(tmp_path, limits):
    from PIL import Image

    s = session_folder(limits, "s")
    mesh = tmp_path / "m.ply"
    mesh.write_bytes(b"ply\n")
    got = ingest([mesh], s, limits)
    assert got.kind == "mesh" and got.path.endswith("m.ply")
    imgs = []
    for k in range(2):
        p = tmp_path / f"r_{k}.png"
        Image.new("RGBA", (8, 8)).save(p)
        imgs.append(p)
    got = ingest(imgs, s, limits)
    assert got.kind == "unposed" and got.n_images == 2
    # loose files with a transforms.json pointing into train/: images are placed where the frames say
    tj = tmp_path / "transforms.json"
    tj.write_text(json.dumps(_blender_frames(["r_0", "r_1"])))
    got = ingest(imgs + [tj], s, limits)
    assert got.kind == "posed" and got.format == "instant-ngp"
    assert (Path(got.path) / "train" / "r_0.png").is_file()
    # a zip with one top folder and a Blender layout
    members = {"scene/transforms_train.json": json.dumps(_blender_frames(["r_0"])),
               "scene/train/r_0.png": imgs[0].read_bytes()}
    got = ingest([_zip(tmp_path / "scene.zip", members)], s, limits)
    assert got.kind == "posed" and got.format == "blender" and Path(got.path).name == "scene"
    # loose COLMAP text files go to sparse/0, photos to images/
    cols = []
    for n in ("cameras.txt", "images.txt", "points3D.txt"):
        p = tmp_path / n
        p.write_text("# empty\n")
        cols.append(p)
    got = ingest(cols + imgs, s, limits)
    assert got.format == "colmap" and (Path(got.path) / "sparse" / "0" / "cameras.txt").is_file()
    assert (Path(got.path) / "images" / "r_0.png").is_file()
    with pytest.raises(UploadError, match="2 meshes"):
        two = tmp_path / "n.obj"
        two.write_text("v 0 0 0\n")
        ingest([mesh, two], s, limits)


def test_sessions_are_isolated_and_swept(limits):
    a = session_folder(limits, "aaa")
    b = session_folder(limits, "../b/b")  # sanitised: stays under the root
    assert a.parent == limits.root and b.parent == limits.root and a != b
    old = time.time() - 2 * limits.max_age_s
    os.utime(a, (old, old))
    assert sweep(limits) == [a] and not a.exists() and b.exists()
    delete_session(limits, "../b/b")
    assert not b.exists()


def test_method_registry_and_presets(tmp_path):
    from meshlift.app.methods import METHODS, MethodSpec, PresetSpec, describe_duration, get_method, register_method
    from meshlift.errors import ConfigError

    spec = get_method("surface")
    assert [p.name for p in spec.presets] == ["quick", "full", "tiny"]
    cfg = spec.configure("mesh", str(tmp_path / "m.glb"), "tiny", "cpu")
    assert cfg.train_res == 48 and cfg.data.endswith("m.glb") and cfg.preview_every > 0
    full = spec.configure("posed", str(tmp_path), "full", "cuda")
    assert full.time_budget_s > 0 and full.iter_pass1 == 5000
    assert spec.preset("full").gpu_only and describe_duration(spec.preset("full"), gpu=False) == "needs a GPU"
    with pytest.raises(ConfigError, match="no preset 'huge'"):
        spec.preset("huge")
    with pytest.raises(ConfigError, match="posed photos"):
        spec.configure("unposed", str(tmp_path), "quick", "cpu")
    extra = MethodSpec("gaussians-test", "test", ("posed",), (PresetSpec("quick", "q", 1, 1),),
                       configure=lambda *a: None, run=lambda *a: None)
    register_method(extra)
    try:
        assert list(METHODS)[-1] == "gaussians-test"
    finally:
        METHODS.pop("gaussians-test")


def test_job_boundary_is_plain_and_spaces_gpu_is_applied():
    """In a fresh process with a stub `spaces` module: the allocator variable is set before torch, the job is
    wrapped by spaces.GPU with the preset's duration, and a refused input yields plain dicts only."""
    stub = REPO / "tests" / "_stub_spaces"
    code = r"""
import os, sys, json
from meshlift.app import build_app  # noqa: F401  (nothing heavy yet)
import meshlift.app.jobs as jobs
assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
import spaces
assert jobs.reconstruct_job.__wrapped_by_stub__
dur = spaces.CALLS[0]
assert dur("x", "mesh", "surface", "full", "o") == 360.0
events = list(jobs.reconstruct_job("/nonexistent.glb", "mesh", "surface", "tiny", sys.argv[1]))
def plain(x):
    return isinstance(x, (str, int, float, bool, type(None))) or (isinstance(x, (list, tuple)) and all(map(plain, x))) \
        or (isinstance(x, dict) and all(isinstance(k, str) and plain(v) for k, v in x.items()))
assert all(plain(e) for e in events), events
assert events[-1]["type"] == "error" and "does not exist" in events[-1]["message"], events[-1]
print("OK")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(stub), str(REPO / "src")]))
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([sys.executable, "-c", code, str(Path(d) / "out")], capture_output=True, text=True,
                             env=env, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]


def test_cli_app_without_gradio_says_how_to_install(monkeypatch, capsys):
    from meshlift.cli.main import main

    monkeypatch.setitem(sys.modules, "gradio", None)  # import gradio -> ImportError
    assert main(["app", "--port", "1"]) == 2
    assert 'pip install "meshlift[app]"' in capsys.readouterr().err


def test_deploy_folder_is_what_the_hosting_guide_asks_for():
    """deploy/requirements.txt: torch pinned, no URLs, no source builds, every core dependency of meshlift and
    the app extra listed; deploy/app.py sets the allocator before importing meshlift and compiles."""
    import re

    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    reqs = [ln.split("#")[0].strip() for ln in (REPO / "deploy" / "requirements.txt").read_text().splitlines()]
    reqs = [r for r in reqs if r]
    assert not [r for r in reqs if "://" in r or r.startswith(("-e", "--", "git+")) or r.endswith(".whl")], reqs
    names = {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower(): r for r in reqs}
    assert re.fullmatch(r"torch==\d+\.\d+\.\d+", names["torch"]), names["torch"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["app"]
    for dep in wanted:
        name = re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0].lower()
        assert name in names, f"deploy/requirements.txt lacks {name} (pyproject: {dep})"
    src = (REPO / "deploy" / "app.py").read_text()
    assert src.index("PYTORCH_CUDA_ALLOC_CONF") < src.index("from meshlift")
    compile(src, "deploy/app.py", "exec")


def test_unposed_photos_go_through_a_registered_pose_step(tmp_path, monkeypatch):
    """With a pose step registered, the job runs it first (inside the GPU task) and hands its folder on."""
    from meshlift.app import jobs, methods
    from meshlift.errors import DatasetError

    seen = {}

    def fake_step(images, work, monitor):
        seen["args"] = (images, work)
        raise DatasetError(f"fake pose step ran on {Path(images).name}")

    monkeypatch.setattr(methods, "POSE_STEP", {})
    monkeypatch.setattr(jobs, "POSE_STEP", methods.POSE_STEP)
    methods.register_pose_step("fake", fake_step)
    (tmp_path / "photos").mkdir()
    events = list(jobs.reconstruct_job(str(tmp_path / "photos"), "unposed", "surface", "tiny", str(tmp_path / "out")))
    assert any(e["type"] == "log" and "estimating camera poses (fake)" in e["message"] for e in events)
    assert events[-1] == {"type": "error", "message": "fake pose step ran on photos"}
    assert seen["args"] == (str(tmp_path / "photos"), str(tmp_path / "out" / "poses"))
