"""Blender / NeRF-synthetic and instant-ngp / nerfstudio transforms readers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from PIL import Image

from meshlift.cameras import cameras_on_sphere, world_to_camera_to_opengl_c2w
from meshlift.data import load_scene
from meshlift.errors import DatasetError


def _write_images(folder, names, size=(16, 12), mode="RGB"):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for n in names:
        c = 4 if mode == "RGBA" else 3
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], c), dtype=np.uint8), mode).save(folder / n)


def _frames(n, names):
    cams = cameras_on_sphere(n, 3.0, 0.8, 16, seed=0, up=(0, 0, 1))
    c2w = world_to_camera_to_opengl_c2w(cams.world_to_camera.double())
    return [{"file_path": name, "transform_matrix": c2w[i].tolist()} for i, name in enumerate(names)], cams


# -- shared data ------------------------------------------------------------------------------------


@pytest.mark.shared_data
def test_lego_blender(dataset):
    scene = load_scene(dataset("nerf_synthetic_lego_half"))
    assert scene.format == "blender"
    assert (len(scene), scene.width, scene.height) == (70, 400, 400)
    assert {k: len(v) for k, v in scene.splits.items()} == {"train": 50, "val": 10, "test": 10}
    assert scene.warnings == []
    torch.testing.assert_close(scene.cameras.fx, torch.full((70,), 555.5555), atol=1e-3, rtol=0)
    torch.testing.assert_close(scene.cameras.cx, torch.full((70,), 200.0))
    # cameras sit 4.031 from the origin and look at it: the origin projects to the image centre
    torch.testing.assert_close(scene.cameras.camera_centers().norm(dim=-1), torch.full((70,), 4.0311), atol=1e-3, rtol=0)
    pix, _ = scene.cameras.project(torch.zeros(3))
    assert float((pix - 200).abs().max()) < 1.0
    assert scene.has_masks
    i = int(scene.splits["test"][0])
    assert scene.image_paths[i].name == "r_0.png" and scene.image_paths[i].parent.name == "test"
    rgb, mask = scene.image(0), scene.mask(0)
    assert rgb.shape == (400, 400, 3) and mask.shape == (400, 400, 1)
    # corners are transparent: white on a white background, black on black
    assert float(mask[0, 0]) == 0.0 and float(rgb[0, 0].min()) == 1.0
    black = load_scene(dataset("nerf_synthetic_lego_half"), background="black")
    assert float(black.image(0)[0, 0].max()) == 0.0 and black.background == "black"
    # the scene of interest fits in the normalised cube
    n = scene.world_to_normalized
    assert torch.allclose(n[:3, :3], n[0, 0] * torch.eye(3, dtype=torch.float64))
    lo, hi = scene.bounds
    assert float((hi - lo).min()) > 2.0 and float(lo.abs().max()) < 2.0


@pytest.mark.shared_data
def test_fox_instant_ngp(dataset):
    scene = load_scene(dataset("fox"))
    assert scene.format == "instant-ngp"
    # the undistorted photos are cut to the window every pixel of which comes from inside the photo
    assert (len(scene), scene.width, scene.height) == (50, 532, 950)
    assert scene.metadata["undistort_crop"] == [4, 6, 536, 956]
    img = scene.image(0)
    for border in (img[0], img[-1], img[:, 0], img[:, -1]):  # no black frame left
        assert float(border.amax(-1).min()) > 0.02
    full = load_scene(dataset("fox"), undistort_crop=False)
    assert (full.width, full.height) == (540, 960) and float(full.image(0)[0].amax(-1).min()) == 0.0
    torch.testing.assert_close(full.image(0)[6:956, 4:536], img)
    assert len(scene.warnings) == 1 and "17" in scene.warnings[0] and "67" in scene.warnings[0]
    assert scene.metadata["source_camera_model"] == "OPENCV"
    assert scene.cameras.model == "PINHOLE" and scene.source_cameras.model == "OPENCV"
    torch.testing.assert_close(scene.source_cameras.distortion[0],
                               torch.tensor([0.0578421, -0.0805099, -0.000980296, 0.00015575]))
    assert float(scene.cameras.fx[0]) == pytest.approx(687.76, abs=1e-3)
    assert scene.metadata["aabb_scale"] == 4
    assert {k: len(v) for k, v in scene.splits.items()} == {"train": 43, "val": 0, "test": 7}
    assert not scene.has_masks
    # refusing distortion is the caller's choice, and keep_distortion keeps it
    with pytest.raises(DatasetError, match="OPENCV"):
        load_scene(dataset("fox"), undistort=False)
    kept = load_scene(dataset("fox"), undistort=False, keep_distortion=True)
    assert kept.cameras.model == "OPENCV" and kept.cameras.distortion.shape == (50, 4)


@pytest.mark.shared_data
def test_fox_image_is_undistorted(dataset):
    scene = load_scene(dataset("fox"), downscale=4)  # 135 x 240, cut to the valid window
    assert (scene.width, scene.height) == (133, 237) and scene.metadata["undistort_crop"] == [1, 2, 134, 239]
    img = scene.image(3)
    assert img.shape == (237, 133, 3) and 0.0 <= float(img.min()) and float(img.max()) <= 1.0
    from meshlift.io.images import read_image, resize_image

    raw = resize_image(read_image(scene.image_paths[3]), 135, 240)[2:239, 1:134]
    diff = (img - raw).abs().mean(-1)
    # the distortion is mild: centre unchanged, the periphery moved
    assert float(diff[100:140, 50:85].mean()) < 0.02
    assert float(diff.mean()) > 1e-4


# -- written by the tests ---------------------------------------------------------------------------


def test_three_intrinsics_variants_give_the_same_K(tmp_path):
    names = [f"images/{i:03d}.png" for i in range(4)]
    frames, _ = _frames(4, names)
    W, H = 16, 12
    fx = 20.0
    fov_x = 2 * math.atan(0.5 * W / fx)
    variants = {
        "top": {"fl_x": fx, "fl_y": fx, "cx": W / 2, "cy": H / 2, "w": W, "h": H, "frames": frames},
        "per_frame": {"frames": [{**f, "fl_x": fx, "fl_y": fx, "cx": W / 2, "cy": H / 2, "w": W, "h": H} for f in frames]},
        "fov": {"camera_angle_x": fov_x, "frames": frames},
    }
    Ks = []
    for name, data in variants.items():
        root = tmp_path / name
        _write_images(root / "images", [n.split("/")[1] for n in names])
        (root / "transforms.json").write_text(json.dumps(data))
        scene = load_scene(root)
        assert scene.format == "instant-ngp" and scene.warnings == []
        Ks.append(scene.cameras.K)
    torch.testing.assert_close(Ks[0], Ks[1])
    torch.testing.assert_close(Ks[0], Ks[2], atol=1e-4, rtol=0)


def test_poses_round_trip_through_transform_matrix(tmp_path):
    names = [f"{i}.png" for i in range(3)]
    frames, cams = _frames(3, names)
    _write_images(tmp_path, names)
    (tmp_path / "transforms.json").write_text(json.dumps({"camera_angle_x": 0.8, "frames": frames}))
    scene = load_scene(tmp_path)
    torch.testing.assert_close(scene.cameras.world_to_camera, cams.world_to_camera, atol=1e-5, rtol=0)


def test_image_size_differing_from_wh_scales_intrinsics(tmp_path):
    names = ["a.png", "b.png"]
    frames, _ = _frames(2, names)
    _write_images(tmp_path, names, size=(16, 12))
    data = {"fl_x": 40.0, "fl_y": 41.0, "cx": 15.0, "cy": 12.5, "w": 32, "h": 24, "frames": frames}
    (tmp_path / "transforms.json").write_text(json.dumps(data))
    scene = load_scene(tmp_path)
    torch.testing.assert_close(scene.cameras.K[0], torch.tensor([[20.0, 0, 7.5], [0, 20.5, 6.25], [0, 0, 1]]))
    data["w"] = 40  # a different aspect ratio cannot be rescaled
    (tmp_path / "transforms.json").write_text(json.dumps(data))
    with pytest.raises(DatasetError, match="aspect ratio"):
        load_scene(tmp_path)


def test_blender_paths_without_extension_and_missing_frames(tmp_path):
    for split in ("train", "test"):
        names = [f"./{split}/r_{i}" for i in range(3)]
        frames, _ = _frames(3, names)
        _write_images(tmp_path / split, [f"r_{i}.png" for i in range(2)], mode="RGBA")  # r_2 missing
        (tmp_path / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": 0.7, "frames": frames}))
    scene = load_scene(tmp_path)
    assert scene.format == "blender" and len(scene) == 4
    assert {k: len(v) for k, v in scene.splits.items()} == {"train": 2, "val": 0, "test": 2}
    assert len(scene.warnings) == 2 and all("1 image files are missing" in w for w in scene.warnings)
    batch = scene.load_batch([0, 3])
    assert batch["rgb"].shape == (2, 12, 16, 3) and batch["mask"].shape == (2, 12, 16, 1)


def test_distortion_keys_and_fisheye(tmp_path):
    names = ["a.png"]
    frames, _ = _frames(1, names)
    _write_images(tmp_path, names)
    base = {"fl_x": 20.0, "w": 16, "h": 12, "frames": frames}
    for extra, model in (({"k1": 0.1}, "OPENCV"), ({"k1": 0.1, "k3": 0.01}, "FULL_OPENCV"),
                         ({"k1": 0.1, "is_fisheye": True}, "OPENCV_FISHEYE"),
                         ({"camera_model": "OPENCV_FISHEYE", "k2": 0.01}, "OPENCV_FISHEYE")):
        (tmp_path / "transforms.json").write_text(json.dumps({**base, **extra}))
        scene = load_scene(tmp_path)
        assert scene.metadata["source_camera_model"] == model and scene.cameras.model == "PINHOLE"
        # the image is cut to its valid window (none to cut where the lens moves the borders < half a pixel)
        x0, y0, x1, y1 = scene.metadata.get("undistort_crop", [0, 0, 16, 12])
        assert scene.image(0).shape == (scene.height, scene.width, 3) == (y1 - y0, x1 - x0, 3)
        assert load_scene(tmp_path, undistort_crop=False).image(0).shape == (12, 16, 3)


@pytest.mark.parametrize(
    "data, match",
    [
        ({"camera_angle_x": 0.7}, "missing key 'frames'"),
        ({"camera_angle_x": 0.7, "frames": []}, "'frames' is empty"),
        ({"camera_angle_x": 0.7, "frames": 3}, "'frames' must be a list"),
        ({"camera_angle_x": 0.7, "frames": [{"file_path": "a.png"}]}, "no 'transform_matrix'"),
        ({"camera_angle_x": 0.7, "frames": [{"transform_matrix": np.eye(4).tolist()}]}, "no 'file_path'"),
        ({"frames": [{"file_path": "a.png", "transform_matrix": np.eye(4).tolist()}]}, "no intrinsics"),
        ({"camera_angle_x": 0.7, "frames": [{"file_path": "zzz.png", "transform_matrix": np.eye(4).tolist()}]},
         "none of the 1 listed images"),
        ({"camera_angle_x": 0.7, "frames": [{"file_path": "a.png", "transform_matrix": [[1, 0], [0, 1]]}]}, "4x4"),
    ],
)
def test_bad_transforms_raise(tmp_path, data, match):
    _write_images(tmp_path, ["a.png"])
    (tmp_path / "transforms.json").write_text(json.dumps(data))
    with pytest.raises(DatasetError, match=match):
        load_scene(tmp_path)


def test_bad_json_and_unknown_folder(tmp_path):
    (tmp_path / "transforms.json").write_text("{not json")
    with pytest.raises(DatasetError, match="not valid JSON"):
        load_scene(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError, match="no dataset found"):
        load_scene(empty)


def test_nerfstudio_images_n_folder_used_for_downscale(tmp_path):
    names = [f"images/{i}.png" for i in range(3)]
    frames, _ = _frames(3, names)
    _write_images(tmp_path / "images", [f"{i}.png" for i in range(3)], size=(32, 24))
    _write_images(tmp_path / "images_2", [f"{i}.png" for i in range(3)], size=(16, 12))
    (tmp_path / "transforms.json").write_text(json.dumps({"fl_x": 40.0, "w": 32, "h": 24, "frames": frames}))
    scene = load_scene(tmp_path, downscale=2)
    assert scene.metadata["images_folder"] == "images_2" and (scene.width, scene.height) == (16, 12)
    assert scene.image_paths[0].parent.name == "images_2"
    assert float(scene.cameras.fx[0]) == pytest.approx(20.0)
    s3 = load_scene(tmp_path, downscale=4)  # no images_4: resized from images/
    assert (s3.width, s3.height) == (8, 6) and float(s3.cameras.fx[0]) == pytest.approx(10.0)


def test_scaled_rotation_is_orthonormalised_with_warning(tmp_path):
    names = ["a.png", "b.png"]
    frames, cams = _frames(2, names)
    m = np.array(frames[1]["transform_matrix"])
    m[:3, :3] *= 2.0
    frames[1]["transform_matrix"] = m.tolist()
    _write_images(tmp_path, names)
    (tmp_path / "transforms.json").write_text(json.dumps({"camera_angle_x": 0.8, "frames": frames}))
    scene = load_scene(tmp_path)
    assert len(scene.warnings) == 1 and "not orthonormal" in scene.warnings[0]
    torch.testing.assert_close(scene.cameras.world_to_camera, cams.world_to_camera, atol=1e-5, rtol=0)


def test_an_unknown_split_name_is_refused():
    from meshlift.data.views import split_indices

    scene = type("S", (), {"splits": {"train": torch.arange(4), "val": torch.arange(0), "test": torch.arange(4, 6)},
                           "cameras": list(range(6))})()
    assert split_indices(scene, "train", "test") == ([0, 1, 2, 3], [4, 5])
    with pytest.raises(DatasetError, match="split 'trian' is not one of the dataset's splits"):
        split_indices(scene, "trian", "test")


def test_the_undistortion_crop_does_not_move_the_normalised_frame(tmp_path):
    """No SfM points, no aabb: the frame comes from the cameras' fields of view, which the crop narrows; it is
    estimated before the crop, so cropped and uncropped loads share it (a run resumed across the change keeps
    its frame)."""
    from meshlift.cameras import cameras_on_sphere, world_to_camera_to_opengl_c2w

    cams = cameras_on_sphere(6, 3.0, 0.8, 64, seed=0, up=(0.0, 0.0, 1.0))
    frames = []
    for i in range(6):
        _write_images(tmp_path, [f"{i}.png"])
        frames.append({"file_path": f"{i}.png",
                       "transform_matrix": world_to_camera_to_opengl_c2w(cams.world_to_camera[i:i + 1])[0].tolist()})
    from meshlift.io.images import image_info

    w, h = image_info(tmp_path / "0.png")[:2]
    (tmp_path / "transforms.json").write_text(json.dumps({"fl_x": 0.8 * w, "w": w, "h": h, "k1": 0.2, "frames": frames}))
    cut, whole = load_scene(tmp_path), load_scene(tmp_path, undistort_crop=False)
    assert "undistort_crop" in cut.metadata and (cut.width, cut.height) != (whole.width, whole.height)
    torch.testing.assert_close(cut.world_to_normalized, whole.world_to_normalized)
    torch.testing.assert_close(cut.bounds, whole.bounds)


@pytest.mark.shared_data
def test_the_methods_load_the_fox_cut_and_undistort_crop_false_keeps_the_frame(dataset):
    """`--set undistort_crop=false` reaches the readers of all three methods (and MILo now passes the camera
    convention too: it shares the Gaussians' reader)."""
    from meshlift.data.views import scene_problem
    from meshlift.methods.gaussians.config import GaussiansConfig
    from meshlift.methods.gaussians.reconstruct import load_problem
    from meshlift.methods.milo.config import MiloConfig
    from meshlift.methods.milo.reconstruct import load_problem as milo_load

    for keep, size in ((True, (532, 950)), (False, (540, 960))):
        pb = load_problem(GaussiansConfig(data=str(dataset("fox")), undistort_crop=keep, max_test_views=1))
        assert (pb.train.width, pb.train.height) == size
        mp, _ = milo_load(MiloConfig(data=str(dataset("fox")), undistort_crop=keep, max_test_views=1))
        assert (mp.train.width, mp.train.height) == size
        sp = scene_problem(dataset("fox"), undistort_crop=keep, max_test_views=1)
        assert tuple(sp.train.images.shape[2:0:-1]) == size
