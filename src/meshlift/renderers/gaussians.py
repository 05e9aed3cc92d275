"""Trained 3D Gaussians + cameras → images: the splat renderer behind ``meshlift render`` of a 3DGS PLY.

:func:`render_gaussian_views` renders a :class:`meshlift.structures.gaussians.Gaussians` (the stored
3DGS parameters, e.g. from :func:`meshlift.io.gaussian_ply.load_gaussian_ply`) from
:class:`meshlift.cameras.Cameras` (pinhole, OpenCV, same world frame as the PLY) with
:func:`meshlift.render.splat.rasterize_gaussians` at the stored SH degree, one view at a time, over a
grey-level background; :func:`gaussian_turntable_cameras` frames the Gaussians for a turntable.
Colours are what 3DGS fits: sRGB values, so no tone mapping is applied.
"""

from __future__ import annotations

import math
from typing import Iterator, Optional

import torch

from meshlift.errors import RenderError

__all__ = ["gaussian_turntable_cameras", "render_gaussian_views"]


@torch.no_grad()
def render_gaussian_views(gaussians, cams, background: float = 1.0, *, sh_degree: Optional[int] = None,
                          device: Optional[torch.device] = None, backend: Optional[str] = None,
                          ) -> Iterator[torch.Tensor]:
    """Yield ``[H, W, 3]`` float32 sRGB images in [0, 1] (CPU) of ``gaussians`` seen by each camera of ``cams``.

    Args:
        gaussians: :class:`~meshlift.structures.gaussians.Gaussians` (world frame of ``cams``).
        cams: pinhole :class:`~meshlift.cameras.Cameras`; their ``near``/``far`` cull Gaussian centres.
        background: grey level behind the Gaussians (1 white, 0 black).
        sh_degree: SH degree to evaluate (default: the highest stored).
        device: where to render (default: CUDA when available); backend: as ``rasterize_gaussians``.

    Raises:
        RenderError: distorted cameras or an empty set of Gaussians.
    """
    from meshlift.render.splat import SplatSettings, rasterize_gaussians

    if not cams.is_pinhole:
        raise RenderError(f"render_gaussian_views needs pinhole cameras, got {cams.model}; undistort first")
    if gaussians.num == 0:
        raise RenderError("render_gaussian_views: the point cloud has no Gaussians; nothing to render")
    dev = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = gaussians.to(dev)
    deg = g.sh_degree if sh_degree is None else int(sh_degree)
    bg = torch.full((3,), float(background), device=dev)
    near = cams.near if isinstance(cams.near, float) else float(cams.near.min())
    far = cams.far if isinstance(cams.far, float) else float(cams.far.max())
    settings = SplatSettings(check_inputs=True)
    for i in range(len(cams)):
        c = cams[i].to(dev)
        img, _, _ = rasterize_gaussians(g.means, g.rotations, g.scales, g.opacities, g.sh, c.world_to_camera,
                                        c.K, cams.width, cams.height, near=max(near, 1e-6), far=far,
                                        sh_degree=deg, background=bg, settings=settings, backend=backend)
        yield img[0].clamp(0, 1).cpu()


def gaussian_turntable_cameras(gaussians, n: int, size: int, up: str, elevation_deg: float):
    """``n`` square cameras (``size`` px, 40° field of view) orbiting the Gaussians around the ``up`` axis
    (``"y"`` or ``"z"``), framing the sphere around the median centre that holds 95% of the centres of the
    Gaussians with opacity ≥ 0.5 (all of them when fewer than 10 are): robust to far floaters."""
    from meshlift.cameras import look_at_cameras, orbit_directions

    means = gaussians.means.detach().double().cpu()
    opaque = gaussians.opacities.detach().cpu() >= 0.5
    pts = means[opaque] if int(opaque.sum()) >= 10 else means
    center = pts.median(dim=0).values
    radius = float(torch.quantile((pts - center).norm(dim=-1), 0.95)) if len(pts) > 1 else 1.0
    radius = radius if radius > 0 and math.isfinite(radius) else 1.0
    fov = math.radians(40.0)
    dist = radius / math.sin(fov / 2) * 1.05
    up_v = (0.0, 1.0, 0.0) if up == "y" else (0.0, 0.0, 1.0)
    eyes = center + dist * orbit_directions(n, math.radians(elevation_deg), up_v)
    return look_at_cameras(eyes, center, up_v, fov, size, near=dist * 0.01, far=dist + radius * 4)
