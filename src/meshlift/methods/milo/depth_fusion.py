"""Truncated SDF at the pivots from depth maps (MILo's depth-fusion SDF initialisation and resets).

MILo (Guédon et al. 2025) initialises, and until a set step periodically resets, the fixed base of
the pivots' occupancy (:class:`meshlift.methods.milo.pivots.PivotSDF`) by fusing the rendered median
depth maps of all training views at the pivots. Per view ``c`` a pivot ``p`` projects (OpenCV pinhole,
docs/conventions.md §2) to camera depth ``z_c`` and pixel ``(row, col) = (floor(y), floor(x))`` (nearest
pixel: its centre is within half a pixel); with the depth ``D_c`` there (docs/conventions.md §4)::

    t_c = min((D_c - z_c) / trunc, 1)           # > 0 in front of the surface (outside), < 0 behind
    sdf = mean of t_c over the views that see p and have t_c >= -1   (far behind a surface: no vote)
    sdf = -1 where no view votes                                      (unseen pivots start occupied)
    sdf = sdf / max |sdf|                                             (over all pivots)
    occ = (1 - 0.99 sdf) / 2  in [0.005, 0.995]                       (pivots.sdf_to_occupancy)

``trunc`` is ``TRUNC_FACTOR = 2e-3`` times the camera-extent radius in MILo
(:func:`default_truncation`); the method uses at least ``trunc_pixels`` pixel footprints
(:func:`fusion_truncation`), which is MILo's value at MILo's image sizes. A view *sees* a pivot when it lies in front of the camera (``z > 0``) and
projects inside the image. A pixel with depth ``<= 0`` holds no surface (empty background); by default
(``empty_is_free``) it votes ``t_c = +1`` (free space), the natural reading for masked captures, where
MILo's median depth of empty pixels is whatever its rasterizer leaves there [our choice; MILo's
behaviour for empty pixels is not in the notes].

The work is chunked over pivots so that at most ``chunk_pairs`` (pivot, view) pairs are in memory at
once (about 40 bytes each). No gradients: the result is a fixed target.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from meshlift.errors import CameraError, MeshError
from meshlift.methods.milo.pivots import sdf_to_occupancy

#: MILo's truncation distance as a fraction of the camera-extent radius.
TRUNC_FACTOR = 2e-3
#: Default (pivot, view) pairs per chunk.
DEFAULT_CHUNK_PAIRS = 1 << 23


@dataclass(frozen=True)
class FusedSDF:
    """Depth fusion at points (shapes ``[...]`` = the leading shape of the points, e.g. ``[G, 9]``).

    Attributes:
        sdf: normalised truncated SDF in [-1, 1], negative inside (meshlift's sign convention).
        occupancy: ``(1 - 0.99 sdf) / 2`` in [0.005, 0.995], 1 = inside.
        num_views: int64 number of views that voted for each point (0 = unseen, sdf = -1).
    """

    sdf: torch.Tensor
    occupancy: torch.Tensor
    num_views: torch.Tensor


def check_cameras(depth: torch.Tensor, world_to_camera: torch.Tensor, K: torch.Tensor, fn: str, name="depth") -> None:
    """Validate ``depth [C, H, W]``, ``world_to_camera [C, 4, 4]``, ``K [C, 3, 3]`` (one device, float)."""
    if not isinstance(depth, torch.Tensor) or depth.ndim != 3 or not depth.dtype.is_floating_point:
        got = f"{tuple(depth.shape)} {depth.dtype}" if isinstance(depth, torch.Tensor) else type(depth).__name__
        raise CameraError(f"{fn}: {name} must be a float [C, H, W] tensor (camera z, 0 where empty), got {got}")
    c = depth.shape[0]
    for nm, x, shp in (("world_to_camera", world_to_camera, (4, 4)), ("K", K, (3, 3))):
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != (c,) + shp or not x.dtype.is_floating_point:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise CameraError(
                f"{fn}: {nm} must be a float [{c}, {shp[0]}, {shp[1]}] tensor (one per {name} map), got {got}"
            )
        if x.device != depth.device:
            raise CameraError(f"{fn}: {nm} ({x.device}) must be on the device of {name} ({depth.device})")


def project_points(
    points: torch.Tensor, world_to_camera: torch.Tensor, K: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pinhole projection of ``points [P, 3]`` into ``C`` cameras (OpenCV, docs/conventions.md §2).

    Returns:
        xy: ``[C, P, 2]`` pixel coordinates ``(x, y)`` (pixel (i, j)'s centre is ``(j + 0.5, i + 0.5)``);
            meaningless where ``z <= 0``.
        z: ``[C, P]`` camera-space depth.
    """
    R = world_to_camera[:, :3, :3].to(points.dtype)
    t = world_to_camera[:, :3, 3].to(points.dtype)
    pc = torch.einsum("cij,pj->cpi", R, points) + t[:, None, :]  # [C, P, 3]
    z = pc[..., 2]
    zs = torch.where(z.abs() > 1e-12, z, torch.full_like(z, 1e-12))
    Kp = K.to(points.dtype)
    x = Kp[:, None, 0, 0] * pc[..., 0] / zs + Kp[:, None, 0, 1] * pc[..., 1] / zs + Kp[:, None, 0, 2]
    y = Kp[:, None, 1, 1] * pc[..., 1] / zs + Kp[:, None, 1, 2]
    return torch.stack([x, y], dim=-1), z


def sample_depth(depth: torch.Tensor, xy: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Nearest-pixel depth lookup: ``(D [C, P], seen [C, P] bool)``; ``seen`` = in front and inside the image."""
    C, H, W = depth.shape
    col = torch.floor(xy[..., 0])
    row = torch.floor(xy[..., 1])
    seen = (z > 0) & (col >= 0) & (col < W) & (row >= 0) & (row < H)
    idx = (row.clamp(0, H - 1) * W + col.clamp(0, W - 1)).to(torch.int64)
    d = torch.gather(depth.reshape(C, H * W), 1, idx).to(z.dtype)
    return d, seen


def _check_points(points: torch.Tensor, fn: str) -> None:
    ok = isinstance(points, torch.Tensor) and points.ndim >= 2 and points.shape[-1] == 3
    if not ok or not points.dtype.is_floating_point:
        got = tuple(points.shape) if isinstance(points, torch.Tensor) else type(points).__name__
        raise MeshError(f"{fn}: points must be a float [..., 3] tensor (e.g. pivots [G, 9, 3]), got {got}")


def _chunk_size(chunk_pairs: int, num_views: int, fn: str) -> int:
    if isinstance(chunk_pairs, bool) or not isinstance(chunk_pairs, int) or chunk_pairs < 1:
        raise MeshError(f"{fn}: chunk_pairs must be an int >= 1 ((point, view) pairs per chunk), got {chunk_pairs!r}")
    return max(1, chunk_pairs // max(num_views, 1))


def camera_extent_radius(world_to_camera: torch.Tensor) -> float:
    """3DGS's scene radius: 1.1 x the largest distance of a camera centre from their mean (float).

    Raises:
        CameraError: not ``[C, 4, 4]``.
    """
    if world_to_camera.ndim != 3 or world_to_camera.shape[1:] != (4, 4):
        raise CameraError(
            f"camera_extent_radius: world_to_camera must be [C, 4, 4], got {tuple(world_to_camera.shape)}"
        )
    w2c = world_to_camera.to(torch.float64)
    centres = -torch.einsum("cji,cj->ci", w2c[:, :3, :3], w2c[:, :3, 3])  # -R^T t
    return 1.1 * float((centres - centres.mean(0)).norm(dim=1).max())


def default_truncation(world_to_camera: torch.Tensor) -> float:
    """MILo's truncation distance, ``TRUNC_FACTOR * camera_extent_radius`` (scene units)."""
    return TRUNC_FACTOR * camera_extent_radius(world_to_camera)


def pixel_footprint(world_to_camera: torch.Tensor, K: torch.Tensor, centre: torch.Tensor) -> float:
    """Median over the views of the size of one pixel at the depth of ``centre [3]`` (scene units, float):
    ``z_c(centre) / f_c`` with ``f_c`` the mean focal length (pixels). Views that have ``centre`` behind them
    use the median distance of the camera centres to ``centre`` instead.

    Raises:
        CameraError: not ``[C, 4, 4]`` / ``[C, 3, 3]``.
    """
    C = world_to_camera.shape[0]
    if world_to_camera.ndim != 3 or world_to_camera.shape[1:] != (4, 4) or tuple(K.shape) != (C, 3, 3):
        raise CameraError(f"pixel_footprint: world_to_camera must be [C, 4, 4] and K [C, 3, 3], got "
                          f"{tuple(world_to_camera.shape)} and {tuple(K.shape)}")
    w2c = world_to_camera.to(torch.float64)
    c = torch.as_tensor(centre, dtype=torch.float64).reshape(3)
    z = w2c[:, 2, :3] @ c + w2c[:, 2, 3]
    eyes = -torch.einsum("cji,cj->ci", w2c[:, :3, :3], w2c[:, :3, 3])
    z = torch.where(z > 0, z, (eyes - c).norm(dim=1).median())
    f = 0.5 * (K[:, 0, 0] + K[:, 1, 1]).to(torch.float64).abs().clamp(min=1e-12)
    return float((z / f).median())


def fusion_truncation(world_to_camera: torch.Tensor, K: torch.Tensor, centre: torch.Tensor, *,
                      trunc_pixels: float = 2.0, scene_scale: float | None = None) -> float:
    """Truncation of the depth fusion: ``max(TRUNC_FACTOR · scene_scale, trunc_pixels · pixel_footprint)``.

    MILo's ``2e-3 ×`` the camera-extent radius is about two pixels at MILo's image sizes (~1000 px); at the
    small images of a quick run it is a fraction of a pixel, so almost every pivot's TSDF saturates at ±1
    and the zero crossing falls at tet-edge midpoints. Measured on spot (16 views, 64 px) with the true
    depth fused at the same pivots: F-score at 1% 0.86 at 0.17 px, 0.94 at 1 px, 0.96 at 2 px, 0.95 at 4 px.
    ``scene_scale`` None: :func:`camera_extent_radius`.
    """
    r = camera_extent_radius(world_to_camera) if scene_scale is None else float(scene_scale)
    return max(TRUNC_FACTOR * r, float(trunc_pixels) * pixel_footprint(world_to_camera, K, centre))


@torch.no_grad()
def fuse_depth_at_pivots(
    points: torch.Tensor,
    depth: torch.Tensor,
    world_to_camera: torch.Tensor,
    K: torch.Tensor,
    *,
    truncation: float,
    empty_is_free: bool = True,
    chunk_pairs: int = DEFAULT_CHUNK_PAIRS,
) -> FusedSDF:
    """Fuse depth maps into a normalised truncated SDF and an occupancy at ``points`` (module docstring).

    Args:
        points: ``[..., 3]`` float points (pivots ``[G, 9, 3]`` or ``[P, 3]``), world units of the cameras.
        depth: ``[C, H, W]`` float depth maps, camera z (docs/conventions.md §4), <= 0 where empty
            (any renderer's median depth, or a mesh's).
        world_to_camera: ``[C, 4, 4]`` float (OpenCV).
        K: ``[C, 3, 3]`` float intrinsics in pixels of the depth maps.
        truncation: truncation distance in scene units, > 0 (MILo: :func:`default_truncation`).
        empty_is_free: a pixel with depth <= 0 votes +1 (free); False: it does not vote.
        chunk_pairs: (point, view) pairs processed at once (memory knob).

    Returns:
        :class:`FusedSDF` with tensors of shape ``points.shape[:-1]`` on the points' device.

    Raises:
        MeshError / CameraError: bad shapes, devices, truncation or chunk size.
    """
    fn = "fuse_depth_at_pivots"
    _check_points(points, fn)
    check_cameras(depth, world_to_camera, K, fn)
    if not float(truncation) > 0:
        raise MeshError(
            f"{fn}: truncation must be > 0 (scene units; MILo uses default_truncation(world_to_camera)), "
            f"got {truncation!r}"
        )
    if points.device != depth.device:
        raise MeshError(f"{fn}: points ({points.device}) and depth ({depth.device}) must be on one device")
    lead = points.shape[:-1]
    pts = points.reshape(-1, 3)
    chunk = _chunk_size(chunk_pairs, depth.shape[0], fn)
    sdf = torch.empty(pts.shape[0], dtype=pts.dtype, device=pts.device)
    count = torch.empty(pts.shape[0], dtype=torch.int64, device=pts.device)
    for s in range(0, pts.shape[0], chunk):
        xy, z = project_points(pts[s : s + chunk], world_to_camera, K)
        d, seen = sample_depth(depth, xy, z)
        empty = d <= 0
        t = ((d - z) / truncation).clamp(max=1.0)
        t = torch.where(empty, torch.ones_like(t), t)
        vote = seen & (t >= -1.0)
        if not empty_is_free:
            vote = vote & ~empty
        n = vote.sum(0)
        total = torch.where(vote, t, torch.zeros_like(t)).sum(0)
        sdf[s : s + chunk] = torch.where(n > 0, total / n.clamp(min=1), torch.full_like(total, -1.0))
        count[s : s + chunk] = n
    peak = sdf.abs().max() if sdf.numel() else sdf.new_tensor(1.0)
    if float(peak) > 0:
        sdf = sdf / peak
    return FusedSDF(
        sdf=sdf.reshape(lead), occupancy=sdf_to_occupancy(sdf).reshape(lead), num_views=count.reshape(lead)
    )
