"""Trained 3D Gaussians + cameras → images: the splat renderer behind ``meshlift render`` of a 3DGS PLY.

:func:`render_gaussian_views` renders a :class:`meshlift.structures.gaussians.Gaussians` (the stored
3DGS parameters, e.g. from :func:`meshlift.io.gaussian_ply.load_gaussian_ply`) from
:class:`meshlift.cameras.Cameras` (pinhole, OpenCV, same world frame as the PLY) with
:func:`meshlift.render.splat.rasterize_gaussians` at the stored SH degree, one view at a time, over a
grey-level background, with no far plane and a near plane from the Gaussians' own extent (never the
cameras' ``near``/``far``, which readers guess from the camera layout when a dataset gives none);
:func:`gaussian_turntable_cameras` frames the Gaussians for a turntable.
Colours are what 3DGS fits: sRGB values, so no tone mapping is applied.
"""

from __future__ import annotations

import math
from typing import Iterator, Optional

import torch

from meshlift.errors import RenderError

__all__ = ["NO_FAR_PLANE", "default_near", "gaussian_turntable_cameras", "render_gaussian_views"]


def default_near(gaussians) -> float:
    """The near plane :func:`render_gaussian_views` uses by default: 1e-3 × the extent of the Gaussians'
    centres (the norm of their 5-95% quantile box; world units), at least 1e-6. Like the training's
    ``near_frac × scene_scale``, it culls only Gaussians almost at the camera."""
    means = gaussians.means.detach().double().cpu()
    means = means[torch.isfinite(means).all(dim=1)]
    if len(means) < 2:
        return 1e-6
    extent = float((means.quantile(0.95, dim=0) - means.quantile(0.05, dim=0)).norm())
    return max(1e-3 * extent, 1e-6) if math.isfinite(extent) else 1e-6


#: The far plane of splat renders: none in effect (gsplat's default; the training renders use it too).
NO_FAR_PLANE = 1e10


@torch.no_grad()
def render_gaussian_views(gaussians, cams, background: float = 1.0, *, near: Optional[float] = None,
                          far: float = NO_FAR_PLANE, sh_degree: Optional[int] = None,
                          device: Optional[torch.device] = None, backend: Optional[str] = None,
                          ) -> Iterator[torch.Tensor]:
    """Yield ``[H, W, 3]`` float32 sRGB images in [0, 1] (CPU) of ``gaussians`` seen by each camera of ``cams``.

    Args:
        gaussians: :class:`~meshlift.structures.gaussians.Gaussians` (world frame of ``cams``).
        cams: pinhole :class:`~meshlift.cameras.Cameras`. Their ``near``/``far`` are **not** used: readers
            estimate them from the camera layout when a dataset has none, and such a guess must not cull.
        background: grey level behind the Gaussians (1 white, 0 black).
        near: Gaussians whose centre is nearer to the camera (camera-space depth, world units) are not
            drawn; default :func:`default_near`.
        far: likewise beyond this depth; default :data:`NO_FAR_PLANE` (no far plane, as gsplat).
        sh_degree: SH degree to evaluate (default: the highest stored).
        device: where to render (default: CUDA when available); backend: as ``rasterize_gaussians``.

    Raises:
        RenderError: distorted cameras, an empty set of Gaussians, or ``0 < near < far`` violated.
    """
    from meshlift.render.splat import SplatSettings, rasterize_gaussians

    if not cams.is_pinhole:
        raise RenderError(f"render_gaussian_views needs pinhole cameras, got {cams.model}; undistort first")
    if gaussians.num == 0:
        raise RenderError("render_gaussian_views: the point cloud has no Gaussians; nothing to render")
    near = default_near(gaussians) if near is None else float(near)
    if not 0 < near < far:
        raise RenderError(f"render_gaussian_views: need 0 < near < far, got near={near}, far={far}")
    dev = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = gaussians.to(dev)
    deg = g.sh_degree if sh_degree is None else int(sh_degree)
    bg = torch.full((3,), float(background), device=dev)
    settings = SplatSettings(check_inputs=True)
    for i in range(len(cams)):
        c = cams[i].to(dev)
        img, _, _ = rasterize_gaussians(g.means, g.rotations, g.scales, g.opacities, g.sh, c.world_to_camera,
                                        c.K, cams.width, cams.height, near=near, far=float(far),
                                        sh_degree=deg, background=bg, settings=settings, backend=backend)
        yield img[0].clamp(0, 1).cpu()


def gaussian_turntable_cameras(gaussians, n: int, size: int, up: str, elevation_deg: float):
    """``n`` square cameras (``size`` px, 40° field of view) orbiting the Gaussians around the ``up`` axis
    (``"y"`` or ``"z"``), framing the sphere around the median centre that holds 95% of the centres of the
    Gaussians with opacity ≥ 0.5 (all of them when fewer than 10 are): robust to far floaters. Centres
    with NaN/Inf are ignored.

    Raises:
        RenderError: no Gaussians (or none with a finite centre): nothing to frame.
    """
    from meshlift.cameras import look_at_cameras, orbit_directions

    means = gaussians.means.detach().double().cpu()
    finite = torch.isfinite(means).all(dim=1)
    if not bool(finite.any()):
        what = "no Gaussians" if len(means) == 0 else "no Gaussian with a finite centre"
        raise RenderError(f"gaussian_turntable_cameras: {what}; nothing to frame")
    opaque = (gaussians.opacities.detach().cpu() >= 0.5) & finite
    pts = means[opaque] if int(opaque.sum()) >= 10 else means[finite]
    center = pts.median(dim=0).values
    radius = float(torch.quantile((pts - center).norm(dim=-1), 0.95)) if len(pts) > 1 else 1.0
    radius = radius if radius > 0 and math.isfinite(radius) else 1.0
    fov = math.radians(40.0)
    dist = radius / math.sin(fov / 2) * 1.05
    up_v = (0.0, 1.0, 0.0) if up == "y" else (0.0, 0.0, 1.0)
    eyes = center + dist * orbit_directions(n, math.radians(elevation_deg), up_v)
    return look_at_cameras(eyes, center, up_v, fov, size, near=dist * 0.01, far=dist + radius * 4)
