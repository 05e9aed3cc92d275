"""Scene record: lazy loading, batches, preload, backgrounds, splits, normalisation, read-only datasets."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import meshlift.io.images as images_mod
from meshlift.cameras import cameras_on_sphere, world_to_camera_to_opengl_c2w
from meshlift.data import estimate_normalization, every_nth_splits, load_scene
from meshlift.errors import DatasetError


def _blender(root, n=6, size=(16, 12)):
    cams = cameras_on_sphere(n, 4.0, 0.7, size, seed=0, up=(0, 0, 1))
    c2w = world_to_camera_to_opengl_c2w(cams.world_to_camera.double())
    (root / "train").mkdir(parents=True)
    rng = np.random.default_rng(0)
    frames = []
    for i in range(n):
        a = rng.integers(0, 256, (size[1], size[0], 4), dtype=np.uint8)
        a[..., 3] = 0
        a[4:8, 4:12, 3] = 255
        Image.fromarray(a, "RGBA").save(root / "train" / f"r_{i}.png")
        frames.append({"file_path": f"./train/r_{i}", "transform_matrix": c2w[i].tolist()})
    (root / "transforms_train.json").write_text(json.dumps({"camera_angle_x": 0.7, "frames": frames}))
    return cams


def _snapshot(root):
    return sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*"))


def test_lazy_loading_and_read_only(tmp_path, monkeypatch):
    _blender(tmp_path)
    before = _snapshot(tmp_path)
    calls = []
    real = images_mod.read_image
    monkeypatch.setattr(images_mod, "read_image", lambda p: calls.append(p) or real(p))
    scene = load_scene(tmp_path)
    assert calls == []  # nothing decoded at load time
    scene.image(2)
    scene.mask(2)
    assert len(calls) == 2
    scene.load_batch([0, 1])
    assert _snapshot(tmp_path) == before  # the dataset folder is never written to


def test_backgrounds_and_masks_from_alpha(tmp_path):
    _blender(tmp_path)
    white = load_scene(tmp_path, background="white")
    black = load_scene(tmp_path, background="black")
    rnd = load_scene(tmp_path, background="random")
    assert white.has_masks and white.background == "white"
    m = white.mask(0)
    assert float(m[0, 0]) == 0 and float(m[5, 5]) == 1
    torch.testing.assert_close(white.image(0)[0, 0], torch.ones(3))
    torch.testing.assert_close(black.image(0)[0, 0], torch.zeros(3))
    torch.testing.assert_close(white.image(0)[5, 5], black.image(0)[5, 5])  # opaque pixels unchanged
    r = rnd.image(0)
    assert float((r[0, 0] - r[0, 1]).abs().max()) == 0  # one colour per image
    with pytest.raises(DatasetError, match="background"):
        load_scene(tmp_path, background="green")


def test_load_batch_preload_and_devices(tmp_path):
    _blender(tmp_path)
    lazy = load_scene(tmp_path)
    pre = load_scene(tmp_path, preload=True)
    a = lazy.load_batch(torch.tensor([1, 4]), device="cpu")
    b = pre.load_batch([1, 4])
    assert a["rgb"].shape == (2, 12, 16, 3) and a["mask"].shape == (2, 12, 16, 1)
    torch.testing.assert_close(a["rgb"], b["rgb"])
    torch.testing.assert_close(a["mask"], b["mask"])
    with pytest.raises(IndexError):
        lazy.image(6)


def test_downscale_and_split_every(tmp_path):
    _blender(tmp_path, n=10, size=(32, 24))
    s = load_scene(tmp_path, downscale=2)
    assert (s.width, s.height) == (16, 12) and s.image(0).shape == (12, 16, 3)
    assert float(s.cameras.fx[0]) == pytest.approx(0.5 * 0.5 * 32 / np.tan(0.35), rel=1e-5)
    sp = every_nth_splits(10, 4)
    assert sp["test"].tolist() == [0, 4, 8] and len(sp["train"]) == 7 and len(sp["val"]) == 0
    assert len(every_nth_splits(10, 0)["test"]) == 0
    with pytest.raises(DatasetError, match="downscale"):
        load_scene(tmp_path, downscale=0.5)


def test_normalization_from_cameras_points_and_aabb():
    cams = cameras_on_sphere(20, 5.0, 0.6, 64, seed=3, target=(1.0, 2.0, 3.0))
    T, box, info = estimate_normalization(cams)
    torch.testing.assert_close(box.mean(0), torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), atol=1e-5, rtol=0)
    assert "optical axes" in info["method"]
    # the target maps to the origin and the box to [-1, 1]^3
    pn = T @ torch.tensor([1.0, 2.0, 3.0, 1.0], dtype=torch.float64)
    torch.testing.assert_close(pn[:3], torch.zeros(3, dtype=torch.float64), atol=1e-5, rtol=0)
    corner = T @ torch.cat([box[1], torch.ones(1, dtype=torch.float64)])
    assert float(corner[:3].max()) == pytest.approx(1.0)
    pts = torch.randn(1000, 3, dtype=torch.float64) * 0.1
    pts[:5] = 100.0  # outliers are ignored by the quantiles
    _, box, info = estimate_normalization(cams, points=pts)
    assert float(box.abs().max()) < 1.0 and info["method"].startswith("points3D")
    _, box, info = estimate_normalization(cams, aabb=torch.tensor([[-2.0, -1, 0], [2, 1, 1]]))
    assert info["method"].startswith("aabb")


@pytest.mark.gpu
def test_cuda_data_device_and_cameras(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    _blender(tmp_path)
    pre = load_scene(tmp_path, preload=True, data_device="cuda")
    batch = pre.load_batch([0, 2])
    assert batch["rgb"].device.type == "cuda" and batch["mask"].device.type == "cuda"
    cpu = load_scene(tmp_path).load_batch([0, 2], device="cuda")  # streamed from the CPU per batch
    torch.testing.assert_close(batch["rgb"], cpu["rgb"])
    cams = pre.cameras.to("cuda")
    pts = torch.randn(50, 3, device="cuda")
    torch.testing.assert_close(cams.project(pts)[0].cpu(), pre.cameras.project(pts.cpu())[0], atol=1e-3, rtol=0)
    origins, dirs = cams.pixel_rays(0)
    assert dirs.device.type == "cuda" and dirs.shape == (1, 12, 16, 3)


def test_near_far_enclose_the_scene_box_at_any_scale(tmp_path):
    from meshlift.data._common import near_far_from_bounds

    cams = cameras_on_sphere(8, 4.0, 0.7, 32, seed=1)
    for scale in (1.0, 1000.0):
        c = cams.rescale(1.0)
        c.world_to_camera[:, :3, 3] *= scale  # the same rig in other units
        _, box, _ = estimate_normalization(c)
        near, far = near_far_from_bounds(c, box)
        corners = torch.stack(torch.meshgrid(*[box[:, k] for k in range(3)], indexing="ij"), -1).reshape(-1, 3)
        _, depth = c.project(corners.float())
        assert bool((depth > near[:, None]).all() & (depth < far[:, None]).all())
        assert float((far / near).max()) <= 100.0 + 1e-3
    _blender(tmp_path)
    scene = load_scene(tmp_path)
    assert isinstance(scene.cameras.near, torch.Tensor) and scene.cameras.near.shape == (len(scene),)


def test_corrupt_image_after_loading_raises_dataset_error(tmp_path):
    _blender(tmp_path)
    scene = load_scene(tmp_path)
    (tmp_path / "train" / "r_1.png").write_bytes(b"broken")
    with pytest.raises(DatasetError, match="r_1.png"):
        scene.image(1)
    Image.fromarray(np.zeros((30, 16, 3), np.uint8)).save(tmp_path / "train" / "r_2.png")
    with pytest.raises(DatasetError, match="different aspect ratio"):
        scene.image(2)


def test_normalized_cameras(tmp_path):
    _blender(tmp_path)
    scene = load_scene(tmp_path)
    ncams = scene.normalized_cameras()
    s = float(scene.world_to_normalized[0, 0])
    torch.testing.assert_close(ncams.camera_centers().norm(dim=-1), torch.full((6,), 4.0 * s), atol=1e-4, rtol=0)
    pix, _ = ncams.project(torch.zeros(3))  # the world origin is the normalised origin here
    torch.testing.assert_close(pix, torch.tensor([[8.0, 6.0]]).expand(6, 2), atol=1e-3, rtol=0)
