"""COLMAP text/binary models and the COLMAP scene reader."""

from __future__ import annotations

import shutil
import struct

import numpy as np
import pytest
import torch
from PIL import Image

from meshlift.cameras import Cameras, cameras_on_sphere
from meshlift.data import load_scene
from meshlift.data.colmap import ColmapCamera, ColmapImage, ColmapModel, cameras_to_colmap, read_model, write_model
from _camera_params import MODEL_PARAMS
from meshlift.errors import DatasetError
from meshlift.geometry.distortion import CAMERA_MODELS



def _write_images(folder, names, size):
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        Image.fromarray(np.full((size[1], size[0], 3), 128, np.uint8)).save(folder / n)


def _dataset(root, n=4, size=(40, 30), model="PINHOLE", folder="images", kind="bin", sub="sparse/0"):
    cams = cameras_on_sphere(n, 3.0, 0.8, size, seed=0)
    if model != "PINHOLE":
        cams = Cameras(cams.K, cams.world_to_camera, cams.width, cams.height, model=model,
                       distortion=torch.tensor([MODEL_PARAMS[model]] * n))
    names = [f"img_{i:02d}.png" for i in range(n)]
    pts = np.random.default_rng(0).normal(size=(50, 3)) * 0.3
    write_model(cameras_to_colmap(cams, names, points=pts), root / sub, kind=kind)
    if folder:
        f = int(folder.split("_")[1]) if "_" in folder else 1
        _write_images(root / folder, names, (size[0] // f, size[1] // f))
    return cams, names


# -- shared data ------------------------------------------------------------------------------------


@pytest.mark.shared_data
def test_statue_binary_model_from_images_2(dataset):
    root = dataset("statue_of_liberty_colmap")
    scene = load_scene(root)
    assert scene.format == "colmap"
    assert (len(scene), scene.width, scene.height) == (40, 400, 600)
    assert scene.metadata["images_folder"] == "images_2" and scene.metadata["model_kind"] == "bin"
    # the model's full-resolution camera (f=2544.43, cx=400, cy=600) is halved
    torch.testing.assert_close(scene.cameras.fx, torch.full((40,), 2544.43 / 2), atol=0.01, rtol=0)
    torch.testing.assert_close(scene.cameras.cx, torch.full((40,), 200.0), atol=1e-3, rtol=0)
    torch.testing.assert_close(scene.cameras.cy, torch.full((40,), 300.0), atol=1e-3, rtol=0)
    assert scene.metadata["source_camera_model"] == "SIMPLE_RADIAL"
    assert scene.cameras.model == "PINHOLE"
    assert float(scene.source_cameras.distortion[0, 0]) == pytest.approx(-0.705, abs=1e-3)
    assert scene.has_masks and scene.metadata["masks_folder"] == "masks_2"
    assert scene.warnings == []
    assert scene.metadata["normalization"]["method"].startswith("points3D")
    m = scene.mask(0)
    assert m.shape == (600, 400, 1) and 0.05 < float(m.mean()) < 0.9
    # the statue's points lie in front of the cameras
    center = torch.tensor(scene.metadata["normalization"]["center"], dtype=torch.float32)
    _, depth = scene.cameras.project(center)
    assert bool((depth > 0).all())
    with pytest.raises(DatasetError, match="SIMPLE_RADIAL"):
        load_scene(root, undistort=False)
    # the model's 3D points project onto the (undistorted) statue mask: poses, intrinsics halving and
    # undistortion agree with the images
    pts = torch.from_numpy(read_model(root / "sparse" / "0").points3D).float()
    pix, depth = scene.cameras[0].project(pts)
    pix = pix[0]
    inside = (depth[0] > 0) & (pix[:, 0] >= 0) & (pix[:, 0] < 400) & (pix[:, 1] >= 0) & (pix[:, 1] < 600)
    p = pix[inside].long()
    assert int(inside.sum()) > 1000
    assert float((m[p[:, 1], p[:, 0], 0] > 0.5).float().mean()) > 0.75


@pytest.mark.shared_data
def test_statue_text_model_readable(dataset):
    root = dataset("statue_of_liberty_colmap")
    model = read_model(root / "sparse_alt_txt" / "0")
    assert model.kind == "txt" and len(model.images) == 40 and model.points3D.shape == (1816, 3)
    cam = next(iter(model.cameras.values()))
    assert cam.model == "SIMPLE_RADIAL" and cam.params[0] == pytest.approx(2395.65)
    for scene in (load_scene(root, colmap_model="sparse_alt_txt/0"), load_scene(root / "sparse_alt_txt" / "0")):
        assert scene.root == root and len(scene) == 40 and (scene.width, scene.height) == (400, 600)
        torch.testing.assert_close(scene.cameras.fx, torch.full((40,), 2395.65 / 2), atol=0.01, rtol=0)


# -- round trips --------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", list(CAMERA_MODELS))
def test_text_and_binary_read_back_identically(tmp_path, model):
    cams = cameras_on_sphere(3, 2.0, 0.9, (40, 30), seed=1)
    cams = Cameras(cams.K.double(), cams.world_to_camera, 40, 30, model=model,
                   distortion=torch.tensor([MODEL_PARAMS[model]] * 3) if MODEL_PARAMS[model] else None)
    names = ["a b.png", "b.png", "c.png"]  # a space in a name survives the text format
    pts = np.random.default_rng(1).normal(size=(5, 3))
    src = cameras_to_colmap(cams, names, points=pts)
    models = {k: read_model(write_model(src, tmp_path / k, kind=k)) for k in ("txt", "bin")}
    for m in models.values():
        assert m.cameras == src.cameras
        assert [(i.qvec, i.tvec, i.name, i.camera_id) for i in m.images.values()] == \
               [(i.qvec, i.tvec, i.name, i.camera_id) for i in src.images.values()]
        np.testing.assert_array_equal(m.points3D, pts)


def test_round_trip_through_scene(tmp_path):
    cams, names = _dataset(tmp_path, model="OPENCV", kind="txt")
    scene = load_scene(tmp_path, undistort=False, keep_distortion=True)
    torch.testing.assert_close(scene.cameras.world_to_camera, cams.world_to_camera, atol=1e-6, rtol=0)
    torch.testing.assert_close(scene.cameras.K, cams.K)
    torch.testing.assert_close(scene.cameras.distortion, cams.distortion)
    assert [p.name for p in scene.image_paths] == names


# -- reader policies ------------------------------------------------------------------------------------


def test_images_n_folder_scales_intrinsics_and_downscale_picks_it(tmp_path):
    cams, names = _dataset(tmp_path, size=(40, 30), folder="images_2")
    scene = load_scene(tmp_path)
    assert (scene.width, scene.height) == (20, 15)
    torch.testing.assert_close(scene.cameras.K[:, :2], cams.K[:, :2] * 0.5)
    _write_images(tmp_path / "images", names, (40, 30))
    assert load_scene(tmp_path).width == 40
    s2 = load_scene(tmp_path, downscale=2)
    assert s2.metadata["images_folder"] == "images_2" and s2.width == 20
    s4 = load_scene(tmp_path, downscale=4)  # no images_4: resized on load from images/
    assert (s4.width, s4.height) == (10, 8) and s4.image(0).shape == (8, 10, 3)


def test_size_matching_neither_intrinsics_nor_factor_raises(tmp_path):
    _dataset(tmp_path, size=(40, 30), folder=None)
    _write_images(tmp_path / "images", [f"img_{i:02d}.png" for i in range(4)], (30, 30))
    with pytest.raises(DatasetError, match="matches neither"):
        load_scene(tmp_path)


def test_several_models_pick_most_images_with_warning(tmp_path):
    _dataset(tmp_path, n=4, sub="sparse/0")
    _dataset(tmp_path, n=6, sub="sparse/1")
    scene = load_scene(tmp_path)
    assert len(scene) == 6
    assert len(scene.warnings) == 1 and "sparse/1" in scene.warnings[0] and "most registered" in scene.warnings[0]


def test_missing_listed_images_are_skipped_with_warning(tmp_path):
    _dataset(tmp_path, n=5)
    (tmp_path / "images" / "img_03.png").unlink()
    scene = load_scene(tmp_path)
    assert len(scene) == 4
    assert len(scene.warnings) == 1 and "1 image files are missing" in scene.warnings[0]


def test_masks_folder_and_mixed_models(tmp_path):
    cams, names = _dataset(tmp_path, n=3)
    mdir = tmp_path / "masks"
    mdir.mkdir()
    for n in names:
        Image.fromarray(np.full((30, 40), 255, np.uint8)).save(mdir / n.replace(".png", ".jpg"))
    scene = load_scene(tmp_path)
    assert scene.has_masks and float(scene.mask(1).min()) == 1.0
    # mixed SIMPLE_RADIAL + PINHOLE cameras are read as one OPENCV model and undistorted
    m = read_model(tmp_path / "sparse" / "0")
    m.cameras[1] = ColmapCamera(1, "SIMPLE_RADIAL", 40, 30, [m.cameras[1].params[0], 20.0, 15.0, -0.1])
    write_model(m, tmp_path / "sparse" / "0", kind="bin")
    scene = load_scene(tmp_path, undistort=False, keep_distortion=True)
    assert scene.cameras.model == "OPENCV"
    torch.testing.assert_close(scene.cameras.distortion[:, 0], torch.tensor([-0.1, 0.0, 0.0]))


# -- bad input --------------------------------------------------------------------------------------------


def test_truncated_binary_raises(tmp_path):
    _dataset(tmp_path)
    f = tmp_path / "sparse" / "0" / "images.bin"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 30])
    with pytest.raises(DatasetError, match="images.bin is truncated"):
        load_scene(tmp_path)


def test_unknown_camera_model_raises(tmp_path):
    _dataset(tmp_path, kind="bin")
    f = tmp_path / "sparse" / "0" / "cameras.bin"
    data = bytearray(f.read_bytes())
    data[8 + 4: 8 + 8] = struct.pack("<i", 42)  # model id of the first camera
    f.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="unknown camera model 42"):
        load_scene(tmp_path)
    shutil.rmtree(tmp_path / "sparse")
    _dataset(tmp_path, kind="txt")
    f = tmp_path / "sparse" / "0" / "cameras.txt"
    f.write_text(f.read_text().replace("PINHOLE", "PANORAMA"))
    with pytest.raises(DatasetError, match="cameras.txt:4: unknown camera model 'PANORAMA'"):
        load_scene(tmp_path)


def test_wrong_parameter_count_in_text_raises(tmp_path):
    _dataset(tmp_path, kind="txt")
    f = tmp_path / "sparse" / "0" / "cameras.txt"
    f.write_text(f.read_text().replace("PINHOLE", "RADIAL"))
    with pytest.raises(DatasetError, match="RADIAL takes 5 parameters"):
        load_scene(tmp_path)


def test_image_with_undefined_camera_raises(tmp_path):
    model = ColmapModel({1: ColmapCamera(1, "PINHOLE", 40, 30, [30.0, 30.0, 20.0, 15.0])},
                        {1: ColmapImage(1, [1.0, 0, 0, 0], [0.0, 0, 0], 7, "a.png")})
    write_model(model, tmp_path / "sparse", kind="txt")
    with pytest.raises(DatasetError, match="uses camera 7"):
        load_scene(tmp_path)
