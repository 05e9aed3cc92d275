"""Umeyama similarity fit, rotation angle, and the camera comparison built on them."""

from __future__ import annotations

import math

import pytest
import torch

from meshlift.errors import CameraError
from meshlift.geometry.rotations import axis_angle_to_matrix
from meshlift.geometry.similarity import rotation_angle, similarity_matrix, umeyama
from meshlift.poses.evaluate import compare_cameras


def _random_similarity(seed: int):
    g = torch.Generator().manual_seed(seed)
    R = axis_angle_to_matrix(torch.randn(3, generator=g, dtype=torch.float64))
    s = float(torch.empty(1).uniform_(0.2, 5.0, generator=g))
    t = torch.randn(3, generator=g, dtype=torch.float64) * 3
    return s, R, t


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_umeyama_recovers_a_known_similarity(seed):
    s, R, t = _random_similarity(seed)
    x = torch.randn(20, 3, dtype=torch.float64)
    y = s * x @ R.T + t
    s2, R2, t2 = umeyama(x, y)
    assert s2 == pytest.approx(s, rel=1e-10)
    assert torch.allclose(R2, R, atol=1e-10) and torch.allclose(t2, t, atol=1e-9)
    assert float(torch.linalg.det(R2)) == pytest.approx(1.0)


def test_umeyama_least_squares_under_noise_and_rigid_mode():
    s, R, t = _random_similarity(3)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(200, 3, generator=g, dtype=torch.float64)
    y = s * x @ R.T + t + 0.01 * torch.randn(200, 3, generator=g, dtype=torch.float64)
    s2, R2, t2 = umeyama(x, y)
    assert abs(s2 - s) < 0.01 * s and math.degrees(float(rotation_angle(R2, R))) < 0.5
    # the rigid fit keeps s = 1
    s3, R3, _ = umeyama(x, x @ R.T + t, with_scale=False)
    assert s3 == 1.0 and torch.allclose(R3, R, atol=1e-10)


def test_umeyama_never_returns_a_reflection():
    x = torch.randn(10, 3, dtype=torch.float64)
    y = x * torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)  # a mirror image: best rotation, not reflection
    _, R, _ = umeyama(x, y)
    assert float(torch.linalg.det(R)) == pytest.approx(1.0)


def test_umeyama_bad_input():
    with pytest.raises(CameraError, match="at least 3"):
        umeyama(torch.zeros(2, 3), torch.zeros(2, 3))
    with pytest.raises(CameraError, match="coincide"):
        umeyama(torch.ones(5, 3), torch.randn(5, 3))
    with pytest.raises(CameraError, match="equal in shape"):
        umeyama(torch.zeros(5, 3), torch.zeros(4, 3))


def test_rotation_angle_matches_axis_angle():
    for ang in (1e-6, 0.3, 2.0, math.pi - 1e-4):
        R = axis_angle_to_matrix(torch.tensor([0.0, ang, 0.0], dtype=torch.float64))
        assert float(rotation_angle(R, torch.eye(3, dtype=torch.float64))) == pytest.approx(ang, rel=1e-6, abs=1e-9)


def test_compare_cameras_is_invariant_to_a_similarity_of_the_world():
    from meshlift.cameras import look_at

    g = torch.Generator().manual_seed(0)
    eye = torch.randn(12, 3, generator=g, dtype=torch.float64) * 2 + torch.tensor([0, 0, 5.0], dtype=torch.float64)
    ref = look_at(eye, torch.zeros(12, 3, dtype=torch.float64), torch.tensor([0, 1.0, 0], dtype=torch.float64).expand(12, 3))
    s, R, t = _random_similarity(5)
    S = similarity_matrix(s, R, t)  # est world = S(ref world); est cameras see the same images
    est = ref.clone()
    est[:, :3, :3] = ref[:, :3, :3] @ R.T
    est[:, :3, 3] = s * ref[:, :3, 3] - (est[:, :3, :3] @ t[:, None])[..., 0]
    cmp = compare_cameras(est, ref)
    assert cmp.camera_offset_deg < 1e-6
    assert cmp.median_centre_error_pct < 1e-8 and float(cmp.rotation_errors_deg.max()) < 1e-6
    assert cmp.scale == pytest.approx(1 / s)
    assert torch.allclose(cmp.est_to_ref @ S, torch.eye(4, dtype=torch.float64), atol=1e-9)
    # a perturbed camera shows up, the others stay exact (trimmed re-fit)
    bad = est.clone()
    bad[0, :3, 3] += 1.0
    cmp2 = compare_cameras(bad, ref)
    assert float(cmp2.centre_errors[0]) > 0.1 and float(cmp2.centre_errors[1:].median()) < 1e-6


def test_compare_cameras_separates_a_constant_camera_side_rotation():
    """A principal-point-like constant tilt of every camera shows as camera_offset_deg, not as residual."""
    from meshlift.cameras import look_at

    g = torch.Generator().manual_seed(1)
    eye = torch.randn(15, 3, generator=g, dtype=torch.float64) * 2 + torch.tensor([0, 0, 6.0], dtype=torch.float64)
    ref = look_at(eye, torch.zeros(15, 3, dtype=torch.float64), torch.tensor([0, 1.0, 0], dtype=torch.float64).expand(15, 3))
    tilt = axis_angle_to_matrix(torch.tensor([0.0, math.radians(0.6), 0.0], dtype=torch.float64))
    est = ref.clone()
    est[:, :3, :3] = tilt @ ref[:, :3, :3]
    est[:, :3, 3] = (tilt @ ref[:, :3, 3:])[..., 0]  # same centres, every camera turned by 0.6 deg
    cmp = compare_cameras(est, ref)
    assert cmp.median_centre_error_pct < 1e-8
    assert cmp.median_rotation_error_deg == pytest.approx(0.6, abs=1e-6)
    assert cmp.camera_offset_deg == pytest.approx(0.6, abs=1e-6)
    assert float(cmp.rotation_errors_deg_offset_removed.max()) < 1e-6
