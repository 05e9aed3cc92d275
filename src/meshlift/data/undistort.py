"""Image undistortion: resample photos of a distorted camera into pinhole images (data-layer image op).

Used by :class:`meshlift.data.Scene` when a dataset's cameras have lens distortion (COLMAP OPENCV, ...).
Conventions: docs/conventions.md §2 (pixel centres at ``j + 0.5``; COLMAP distortion models).
"""

from __future__ import annotations

import torch

from meshlift.cameras import Cameras
from meshlift.errors import CameraError
from meshlift.geometry.distortion import distort

__all__ = ["undistort_image", "undistortion_grid", "valid_crop"]


def undistortion_grid(camera: Cameras, pinhole: Cameras | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampling grid that undistorts images of ``camera`` into ``pinhole`` (default: same K and size).

    For every pixel centre of the pinhole image: normalised coordinates -> :func:`distort` -> pixel in
    the distorted image. Returns ``grid [H, W, 2]`` in ``torch.nn.functional.grid_sample`` units
    (``align_corners=False``: -1/+1 at the image borders, matching pixel centres at ``j + 0.5``) and
    ``valid [H, W, 1]`` (1 where the source pixel lies inside the distorted image).

    Raises:
        CameraError: ``camera`` holds more than one camera.
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


def valid_crop(cameras: Cameras, pinhole: Cameras | None = None) -> tuple[int, int, int, int]:
    """The window ``(x0, y0, x1, y1)`` (pixels, ``x1``/``y1`` exclusive) of the undistorted pinhole images in
    which every pixel of every camera is sampled from inside its photo.

    Undistorting to the same ``K`` and size leaves pixels near the borders whose source lies outside the
    distorted photo (a pincushion lens: the corners and edges); a bilinear sample within half a pixel of the
    photo's border mixes in the zero padding too. Those pixels are black in the images, not the scene: a
    method trained on them fits a black frame, and a metric scored on them rewards nothing real (the
    instant-ngp fox: 1.9 % of its pixels, a 4-6 px frame). COLMAP's ``image_undistorter`` and nerfstudio
    (``cv2.getOptimalNewCameraMatrix`` with ``alpha=0``) cut the images to a window of valid pixels; so does
    this. A pixel is valid when its source position ``(u, v)`` lies in ``[0.5, W - 0.5] x [0.5, H - 0.5]`` of
    the photo (pixel centres at ``j + 0.5``). The window is found by peeling, from the full image, the border
    row or column with the most invalid pixels (over all cameras) until its four borders are valid; only
    border lines are evaluated, one new line a peel (``O(W + H)`` distortion evaluations per camera and peeled
    line, not one per pixel). The valid region of a lens distortion that grows monotonically with the radius is star-shaped
    around the principal point, so a window whose borders are valid is valid inside.

    Args:
        cameras: the distorted cameras (any COLMAP model), all one image size.
        pinhole: their undistorted cameras (default: ``cameras.with_pinhole()``, same ``K`` and size).

    Returns:
        ``(x0, y0, x1, y1)`` ints; the full image when every pixel is valid.

    Raises:
        CameraError: no valid pixel is left (the distortion parameters cannot describe these images).
    """
    pin = cameras.with_pinhole() if pinhole is None else pinhole
    H, W = pin.height, pin.width
    rows = torch.cat([cameras.K.reshape(len(cameras), -1), cameras.distortion, pin.K.reshape(len(pin), -1)], 1)
    rows = torch.unique(rows.double().cpu(), dim=0)  # shared intrinsics: evaluated once
    Ks, D, Kp = rows[:, :9].reshape(-1, 3, 3), rows[:, 9:-9], rows[:, -9:].reshape(-1, 3, 3)
    Ws, Hs = cameras.width, cameras.height
    lo = 0.5 - 1e-3  # a pixel centre maps to a pixel centre without distortion: float round-off

    def ok(px: torch.Tensor, py: torch.Tensor) -> torch.Tensor:
        """``[L]`` bool: the line's pixels (centres ``px, py``) every camera samples from inside its photo."""
        y = (py[None] - Kp[:, 1, 2, None]) / Kp[:, 1, 1, None]  # [M, L] normalised pinhole coordinates
        x = (px[None] - Kp[:, 0, 2, None] - Kp[:, 0, 1, None] * y) / Kp[:, 0, 0, None]
        xy = distort(cameras.model, D[:, None, :], torch.stack([x, y], -1))
        u = Ks[:, 0, 0, None] * xy[..., 0] + Ks[:, 0, 1, None] * xy[..., 1] + Ks[:, 0, 2, None]
        v = Ks[:, 1, 1, None] * xy[..., 1] + Ks[:, 1, 2, None]
        return ((u >= lo) & (u <= Ws - lo) & (v >= lo) & (v <= Hs - lo)).all(0)

    def row(y: int, a: int, b: int) -> torch.Tensor:
        xs = torch.arange(a, b, dtype=torch.float64) + 0.5
        return ok(xs, torch.full_like(xs, y + 0.5))

    def col(x: int, a: int, b: int) -> torch.Tensor:
        ys = torch.arange(a, b, dtype=torch.float64) + 0.5
        return ok(torch.full_like(ys, x + 0.5), ys)

    y0, y1, x0, x1 = 0, H, 0, W
    # the four border lines' validity, kept up to date: a peel evaluates the one new line and trims the others
    top, bottom, left, right = row(0, 0, W), row(H - 1, 0, W), col(0, 0, H), col(W - 1, 0, H)
    while y1 > y0 and x1 > x0:
        counts = [int((~t).sum()) for t in (top, bottom, left, right)]
        if max(counts) == 0:
            return x0, y0, x1, y1
        side = max(range(4), key=lambda k: counts[k])
        if side == 0:
            y0 += 1
            left, right = left[1:], right[1:]
            top = row(y0, x0, x1) if y1 > y0 else top[:0]
        elif side == 1:
            y1 -= 1
            left, right = left[:-1], right[:-1]
            bottom = row(y1 - 1, x0, x1) if y1 > y0 else bottom[:0]
        elif side == 2:
            x0 += 1
            top, bottom = top[1:], bottom[1:]
            left = col(x0, y0, y1) if x1 > x0 else left[:0]
        else:
            x1 -= 1
            top, bottom = top[:-1], bottom[:-1]
            right = col(x1 - 1, y0, y1) if x1 > x0 else right[:0]
    raise CameraError(f"undistortion leaves no valid pixel in the {W}x{H} images (model {cameras.model}, "
                      f"distortion {cameras.distortion[0].tolist()}); check the distortion parameters")
