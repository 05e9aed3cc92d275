"""Image undistortion: resample photos of a distorted camera into pinhole images (data-layer image op).

Used by :class:`meshlift.data.Scene` when a dataset's cameras have lens distortion (COLMAP OPENCV, ...).
Conventions: docs/conventions.md §2 (pixel centres at ``j + 0.5``; COLMAP distortion models).
"""

from __future__ import annotations

import torch

from meshlift.cameras import Cameras
from meshlift.errors import CameraError
from meshlift.geometry.distortion import distort

__all__ = ["undistort_image", "undistortion_grid"]


def undistortion_grid(camera: Cameras, pinhole: Cameras | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampling grid that undistorts images of ``camera`` into ``pinhole`` (default: same K and size).

    For every pixel centre of the pinhole image: normalised coordinates -> :func:`distort` -> pixel in
    the distorted image. Returns ``grid [H, W, 2]`` in ``torch.nn.functional.grid_sample`` units
    (``align_corners=False``: -1/+1 at the image borders, matching pixel centres at ``j + 0.5``) and
    ``valid [H, W, 1]`` (1 where the source pixel lies inside the distorted image).
    """
    if len(camera) != 1:
        raise CameraError(f"undistortion_grid takes one camera, got {len(camera)}")
    pin = camera.with_pinhole() if pinhole is None else pinhole
    H, W = pin.height, pin.width
    jj = torch.arange(W, dtype=torch.float64) + 0.5
    ii = torch.arange(H, dtype=torch.float64) + 0.5
    gx, gy = torch.meshgrid(jj, ii, indexing="xy")
    Kp = pin.K[0].double().cpu()
    y = (gy - Kp[1, 2]) / Kp[1, 1]
    x = (gx - Kp[0, 2] - Kp[0, 1] * y) / Kp[0, 0]
    xy = distort(camera.model, camera.distortion[0].double().cpu(), torch.stack([x, y], dim=-1))
    K = camera.K[0].double().cpu()
    u = K[0, 0] * xy[..., 0] + K[0, 1] * xy[..., 1] + K[0, 2]
    v = K[1, 1] * xy[..., 1] + K[1, 2]
    Ws, Hs = camera.width, camera.height
    grid = torch.stack([2 * u / Ws - 1, 2 * v / Hs - 1], dim=-1)
    valid = ((u >= 0) & (u <= Ws) & (v >= 0) & (v <= Hs)).to(torch.float32)[..., None]
    return grid.to(torch.float32), valid


def undistort_image(image: torch.Tensor, camera: Cameras, *, grid: torch.Tensor | None = None,
                    mode: str = "bilinear") -> tuple[torch.Tensor, Cameras]:
    """Resample a distorted image into a pinhole image with the same ``K`` and size.

    Args:
        image: ``[H, W, C]`` float image of ``camera`` (one camera, any distortion model).
        camera: ``Cameras`` of length 1 with the image's size.
        grid: optional precomputed :func:`undistortion_grid` (reuse it for many images of one camera).
        mode: ``"bilinear"`` or ``"nearest"`` (use nearest for label masks).

    Returns:
        ``(image [H, W, C], camera)`` where the camera is PINHOLE. Pixels whose source falls outside the
        distorted image are 0 (border-clamped sampling would smear edges). Bilinear remap with
        ``grid_sample`` (align_corners=False, consistent with pixel centres at ``j + 0.5``).
    """
    if image.ndim != 3 or image.shape[0] != camera.height or image.shape[1] != camera.width:
        raise CameraError(
            f"undistort_image: image {list(image.shape)} does not match the camera size "
            f"{camera.height}x{camera.width} (expected [H, W, C])"
        )
    pin = camera.with_pinhole()
    if camera.is_pinhole:
        return image.clone(), pin
    if grid is None:
        grid, _ = undistortion_grid(camera)
    src = image.permute(2, 0, 1)[None].to(torch.float32)
    out = torch.nn.functional.grid_sample(src, grid[None].to(src.device), mode=mode, padding_mode="zeros",
                                          align_corners=False)
    return out[0].permute(1, 2, 0).to(image.dtype).contiguous(), pin
