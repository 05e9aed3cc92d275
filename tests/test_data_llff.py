"""LLFF / NeRD reader (poses_bounds.npy + images/ + masks/)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from meshlift.cameras import cameras_on_sphere, world_to_camera_to_opengl_c2w
from meshlift.data import load_scene
from meshlift.errors import DatasetError


def _llff_rows(cams, hwf, near=1.0, far=6.0):
    c2w = world_to_camera_to_opengl_c2w(cams.world_to_camera.double())  # (right, up, back)
    rows = []
    for m in c2w:
        R = torch.stack([-m[:3, 1], m[:3, 0], m[:3, 2]], dim=1)  # LLFF (down, right, back)
        pose = torch.cat([R, m[:3, 3:4], torch.tensor(hwf, dtype=torch.float64)[:, None]], dim=1)
        rows.append(torch.cat([pose.reshape(-1), torch.tensor([near, far], dtype=torch.float64)]))
    return torch.stack(rows).numpy()


def _write(root, n=5, size=(24, 24), hwf=(96.0, 96.0, 120.0), masks=True):
    cams = cameras_on_sphere(n, 3.0, 0.8, size, seed=0)
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / "poses_bounds.npy", _llff_rows(cams, hwf))
    (root / "images").mkdir()
    for i in range(n):
        Image.fromarray(np.full((size[1], size[0], 3), 100, np.uint8)).save(root / "images" / f"IMG_{i:02d}.jpg")
    if masks:
        (root / "masks").mkdir()
        for i in range(n):
            Image.fromarray(np.full((size[1], size[0]), 255, np.uint8)).save(root / "masks" / f"IMG_{i:02d}.png")
    return cams


@pytest.mark.shared_data
def test_nerd_ethiopian_head(dataset):
    scene = load_scene(dataset("nerd_ethiopian_head"))
    assert scene.format == "llff"
    assert (len(scene), scene.width, scene.height) == (66, 512, 512)
    assert scene.has_masks and scene.warnings == []
    torch.testing.assert_close(scene.cameras.fx, torch.full((66,), 7543.57 * 512 / 4000), atol=0.01, rtol=0)
    torch.testing.assert_close(scene.cameras.cx, torch.full((66,), 256.0))
    assert scene.image_paths[0].name == "DSC_0007.jpg" and scene.mask_paths[0].name == "DSC_0007.png"
    # the dataset's near/far bounds (3.3-5.1) are kept in the metadata and enclosed by the clip planes
    lo, hi = scene.metadata["depth_bounds"]
    assert 3.0 < lo < 3.5 and 4.5 < hi < 5.5
    assert float(scene.cameras.near.max()) < 0.9 * lo + 1e-4 and float(scene.cameras.far.min()) > hi
    # the object (focus of the optical axes) projects inside the mask of image 0
    center = torch.tensor(scene.metadata["normalization"]["center"], dtype=torch.float32)
    (x, y), = scene.cameras[0].project(center)[0][0:1].reshape(1, 2).tolist()
    mask = scene.mask(0)
    assert mask.shape == (512, 512, 1) and float(mask[int(y), int(x), 0]) > 0.5
    batch = scene.load_batch([0, 1, 2])
    assert batch["rgb"].shape == (3, 512, 512, 3) and batch["mask"].shape == (3, 512, 512, 1)


def test_llff_axis_order_and_focal_rescale(tmp_path):
    cams = _write(tmp_path, size=(24, 24), hwf=(96.0, 96.0, 120.0))
    scene = load_scene(tmp_path)
    torch.testing.assert_close(scene.cameras.world_to_camera, cams.world_to_camera, atol=1e-5, rtol=0)
    torch.testing.assert_close(scene.cameras.fx, torch.full((5,), 30.0))  # 120 * 24 / 96
    assert scene.metadata["depth_bounds"] == [1.0, 6.0]
    assert float(scene.cameras.near.max()) <= 0.9 and float(scene.cameras.far.min()) >= 6.6
    assert scene.has_masks


def test_llff_bad_inputs(tmp_path):
    _write(tmp_path / "a", masks=False)
    (tmp_path / "a" / "images" / "IMG_00.jpg").unlink()
    with pytest.raises(DatasetError, match="5 poses but .* 4 images"):
        load_scene(tmp_path / "a")
    _write(tmp_path / "b", size=(24, 12), masks=False)
    with pytest.raises(DatasetError, match="aspect ratio"):
        load_scene(tmp_path / "b")
    _write(tmp_path / "c", masks=False)
    np.save(tmp_path / "c" / "poses_bounds.npy", np.zeros((5, 9)))
    with pytest.raises(DatasetError, match=r"expected a \[N, 17\] array"):
        load_scene(tmp_path / "c")
    (tmp_path / "c" / "poses_bounds.npy").write_bytes(b"garbage")
    with pytest.raises(DatasetError, match="not a readable .npy"):
        load_scene(tmp_path / "c")
