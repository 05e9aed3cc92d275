"""Camera sanity check: correct captures pass; flipped conventions and outward rings are named, with the fix."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from _run_helpers import blender_copy_with_opencv_axes
from meshlift.cameras import look_at
from meshlift.data import load_scene
from meshlift.data.camera_check import check_cameras


def _flip_axes(cams):
    """The cameras a reader produces when the file's axes are the other convention: y and z reversed."""
    flip = torch.diag(torch.tensor([1.0, -1.0, -1.0, 1.0]))
    return replace(cams, world_to_camera=flip @ cams.world_to_camera)


def _outward(cams):
    """Each camera turned 180° about its up axis at its own centre (an inside-out ring)."""
    turn = torch.diag(torch.tensor([-1.0, 1.0, -1.0, 1.0]))
    return replace(cams, world_to_camera=turn @ cams.world_to_camera)


@pytest.mark.shared_data
def test_shared_datasets_pass(dataset):
    for name in ("nerf_synthetic_lego_half", "fox", "statue_of_liberty_colmap", "nerd_ethiopian_head"):
        s = load_scene(dataset(name))
        chk = s.metadata["camera_check"]
        assert chk["verdict"] == "ok", (name, chk)
        assert not [w for w in s.warnings if "camera" in w and "look" in w]


@pytest.mark.shared_data
def test_lego_flipped_and_outward(dataset):
    cams = load_scene(dataset("nerf_synthetic_lego_half")).cameras
    for bad in (_flip_axes(cams), _outward(cams)):
        chk = check_cameras(bad)
        assert chk.verdict == "outward" and chk.facing_fraction < 0.2 and chk.facing_fraction_reversed > 0.8
        assert "camera_convention='opencv'" in chk.warnings[0] and "outward" in chk.warnings[0]


@pytest.mark.shared_data
def test_statue_flipped_is_told_apart_by_points(dataset):
    s = load_scene(dataset("statue_of_liberty_colmap"))
    chk = check_cameras(_flip_axes(s.cameras), s.points)
    assert chk.verdict == "flipped" and chk.points_in_front < 0.25
    # an outward ring whose points are still in front: a room scan, not a convention error
    ring = torch.stack([look_at(torch.tensor([2 * torch.cos(a), 2 * torch.sin(a), 0.0]),
                                torch.tensor([4 * torch.cos(a), 4 * torch.sin(a), 0.0]))
                        for a in torch.linspace(0, 6.0, 12)])
    pts = torch.randn(500, 3)
    pts = pts / pts.norm(dim=1, keepdim=True) * 6.0
    pts[:, 2] *= 0.2
    cams = replace(s.cameras[:12], world_to_camera=ring.float())
    chk = check_cameras(cams, pts)
    assert chk.verdict == "outward" and "Gaussian" in chk.warnings[0]


@pytest.mark.shared_data
def test_transforms_json_written_with_opencv_axes(dataset, tmp_path):
    """A lego copy whose transform_matrix holds OpenCV axes: warned on load, right with the override."""
    src = dataset("nerf_synthetic_lego_half")
    blender_copy_with_opencv_axes(src, tmp_path)
    s = load_scene(tmp_path)
    assert s.metadata["camera_check"]["verdict"] == "outward"
    assert any("--camera-convention opencv" in w for w in s.warnings)
    s2 = load_scene(tmp_path, camera_convention="opencv")
    assert s2.metadata["camera_check"]["verdict"] == "ok"
    ref = load_scene(src)
    torch.testing.assert_close(s2.cameras.world_to_camera, ref.cameras.world_to_camera, atol=1e-5, rtol=0)


def test_forward_facing_and_too_few():
    eye = torch.tensor([[x, 0.0, 0.0] for x in (-0.2, -0.1, 0.0, 0.1, 0.2)])
    w2c = torch.stack([look_at(e, e + torch.tensor([0.0, 1.0, 0.0])) for e in eye]).float()
    from meshlift.cameras import Cameras

    K = torch.tensor([[100.0, 0, 50], [0, 100.0, 50], [0, 0, 1]]).repeat(5, 1, 1)
    cams = Cameras(K=K, world_to_camera=w2c, width=100, height=100)
    assert check_cameras(cams).verdict == "forward"
    assert check_cameras(cams[:2]).verdict == "too few cameras"
