"""Compare estimated cameras with known ones up to a similarity (structure from motion fixes no gauge).

The estimated camera centres are aligned to the reference centres by Umeyama's least-squares similarity
(:func:`meshlift.geometry.similarity.umeyama`), fitted once on all cameras and once more on the cameras
whose centre error is at most 3x the median (so a few failed cameras do not drag the fit). Reported:

- centre error: ``|| s R c_est + t - c_ref ||``, also as a percentage of the *extent*, the diagonal of the
  axis-aligned box of the reference camera centres;
- rotation error: the angle of ``R_est Rᵀ R_refᵀ`` (est world-to-camera rotation brought into the
  reference world, against the reference's), in degrees;
- the constant part of that error: the mean camera-side rotation ``D = mean_i R_ref,i (R_est,i Rᵀ)ᵀ``
  (sign-aligned quaternion mean, normalised: the chordal L2 mean, good for small spreads) and the errors
  left once it is removed. A constant ``D`` is what a different principal point does (a shift of ``Δc``
  pixels tilts every camera by ``atan(Δc / f)``), i.e. a calibration difference, not pose noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from meshlift.errors import CameraError
from meshlift.geometry.rotations import matrix_to_quaternion, quaternion_to_matrix
from meshlift.geometry.similarity import rotation_angle, similarity_matrix, umeyama

__all__ = ["PoseComparison", "compare_cameras"]


@dataclass
class PoseComparison:
    """Errors of estimated cameras against reference cameras after a similarity alignment."""

    num_cameras: int
    extent: float
    """Diagonal of the reference camera centres' bounding box (reference units)."""
    centre_errors: torch.Tensor
    """``[N]`` float64 centre errors in reference units."""
    rotation_errors_deg: torch.Tensor
    """``[N]`` float64 rotation errors in degrees."""
    est_to_ref: torch.Tensor
    """``[4, 4]`` float64 similarity from the estimated world into the reference world."""
    scale: float
    camera_offset_deg: float = float("nan")
    """Angle of the constant camera-side rotation ``D`` (see the module docstring), degrees."""
    rotation_errors_deg_offset_removed: torch.Tensor | None = None
    """``[N]`` rotation errors once ``D`` is removed, degrees."""

    @property
    def median_centre_error_pct(self) -> float:
        return 100.0 * float(self.centre_errors.median()) / self.extent

    @property
    def median_rotation_error_deg(self) -> float:
        return float(self.rotation_errors_deg.median())

    def summary(self) -> dict:
        ce = self.centre_errors
        return {
            "cameras": self.num_cameras,
            "extent": self.extent,
            "median_centre_error": float(ce.median()),
            "median_centre_error_pct_extent": self.median_centre_error_pct,
            "max_centre_error_pct_extent": 100.0 * float(ce.max()) / self.extent,
            "median_rotation_error_deg": self.median_rotation_error_deg,
            "max_rotation_error_deg": float(self.rotation_errors_deg.max()),
            "camera_offset_deg": self.camera_offset_deg,
            "median_rotation_error_offset_removed_deg": float(self.rotation_errors_deg_offset_removed.median())
            if self.rotation_errors_deg_offset_removed is not None else float("nan"),
            "scale": self.scale,
        }


def compare_cameras(est_world_to_camera: torch.Tensor, ref_world_to_camera: torch.Tensor) -> PoseComparison:
    """Align ``est`` cameras to ``ref`` cameras (same order) by a similarity and measure the errors.

    Args:
        est_world_to_camera: ``[N, 4, 4]`` estimated world-to-camera (OpenCV axes, docs/conventions.md §2).
        ref_world_to_camera: ``[N, 4, 4]`` reference world-to-camera, same cameras in the same order.

    Returns:
        :class:`PoseComparison`.

    Raises:
        CameraError: shapes differ, fewer than 3 cameras, or the reference centres all coincide.
    """
    est = torch.as_tensor(est_world_to_camera, dtype=torch.float64)
    ref = torch.as_tensor(ref_world_to_camera, dtype=torch.float64)
    if est.shape != ref.shape or est.ndim != 3 or est.shape[-2:] != (4, 4):
        raise CameraError(f"compare_cameras: need two [N, 4, 4] batches of equal N, got {list(est.shape)}, "
                          f"{list(ref.shape)}")
    n = est.shape[0]
    if n < 3:
        raise CameraError(f"compare_cameras: needs at least 3 cameras for a similarity, got {n}")

    def centres(T):
        R, t = T[:, :3, :3], T[:, :3, 3]
        return -(R.transpose(1, 2) @ t[..., None])[..., 0]

    c_est, c_ref = centres(est), centres(ref)
    extent = float((c_ref.max(0).values - c_ref.min(0).values).norm())
    if not extent > 0 or not math.isfinite(extent):
        raise CameraError("compare_cameras: the reference camera centres all coincide; there is no extent")
    s, R, t = umeyama(c_est, c_ref)
    err = (s * c_est @ R.T + t - c_ref).norm(dim=-1)
    inl = err <= 3.0 * err.median() + 1e-12
    if int(inl.sum()) >= 3 and int(inl.sum()) < n:
        s, R, t = umeyama(c_est[inl], c_ref[inl])
        err = (s * c_est @ R.T + t - c_ref).norm(dim=-1)
    R_est_in_ref = est[:, :3, :3] @ R.T
    rot = torch.rad2deg(rotation_angle(R_est_in_ref, ref[:, :3, :3]))
    D = ref[:, :3, :3] @ R_est_in_ref.transpose(1, 2)
    q = matrix_to_quaternion(D)
    q = q * torch.where(q[:, :1] < 0, -1.0, 1.0)
    q_mean = q.mean(0)
    D_mean = quaternion_to_matrix(q_mean / q_mean.norm())
    eye = torch.eye(3, dtype=torch.float64)
    offset = math.degrees(float(rotation_angle(D_mean, eye)))
    rot_rest = torch.rad2deg(rotation_angle(D_mean.T @ D, eye.expand(n, 3, 3)))
    return PoseComparison(num_cameras=n, extent=extent, centre_errors=err, rotation_errors_deg=rot,
                          est_to_ref=similarity_matrix(s, R, t), scale=s, camera_offset_deg=offset,
                          rotation_errors_deg_offset_removed=rot_rest)
