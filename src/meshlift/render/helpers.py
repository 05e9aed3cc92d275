"""Small helpers around the rendering ops: clip transforms, masks, depth, positions, normals.

Conventions: docs/conventions.md §3 (clip space, ``w`` = camera z) and §4 (depth = camera z, 0 empty).
"""

from __future__ import annotations

from typing import Tuple

import torch

from meshlift.errors import RenderError
from meshlift.render._checks import check_float, check_rast
from meshlift.render.interpolate import interpolate


def transform_pos(mtx: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Homogeneous transform of points to clip space.

    Args:
        mtx: ``[4, 4]`` or ``[B, 4, 4]`` (e.g. ``projection @ world_to_camera``), float.
        pos: ``[V, 3]`` or ``[V, 4]`` points (w = 1 appended to 3-vectors), or ``[B, V, 3|4]``.

    Returns:
        ``[B, V, 4]`` clip-space positions (``B = 1`` for a single matrix and unbatched points),
        ``p_clip = mtx @ [p, 1]``.
    """
    check_float("mtx", mtx)
    check_float("pos", pos)
    if mtx.shape[-2:] != (4, 4) or mtx.ndim not in (2, 3):
        raise RenderError(f"mtx must be [4, 4] or [B, 4, 4], got {tuple(mtx.shape)}")
    if pos.shape[-1] not in (3, 4) or pos.ndim not in (2, 3):
        raise RenderError(f"pos must be [V, 3|4] or [B, V, 3|4], got {tuple(pos.shape)}")
    if pos.shape[-1] == 3:
        pos = torch.cat([pos, torch.ones_like(pos[..., :1])], dim=-1)
    m = mtx if mtx.ndim == 3 else mtx.unsqueeze(0)
    p = pos if pos.ndim == 3 else pos.unsqueeze(0)
    m = m.to(torch.promote_types(m.dtype, p.dtype))
    return torch.matmul(p.to(m.dtype), m.transpose(-1, -2))


def triangle_id(rast: torch.Tensor) -> torch.Tensor:
    """``[B, H, W]`` int64 triangle index per pixel from ``rast``, −1 where empty."""
    check_rast(rast)
    return rast[..., 3].detach().round().to(torch.int64) - 1


def coverage_mask(rast: torch.Tensor) -> torch.Tensor:
    """``[B, H, W, 1]`` float mask (1 where a triangle covers the pixel centre); no gradient.

    For a mask whose outline moves with the vertices use ``antialias(coverage_mask(rast), rast, pos, tri)``.
    """
    check_rast(rast)
    return (rast[..., 3:4] > 0).to(rast.dtype)


def render_depth(rast: torch.Tensor, pos_clip: torch.Tensor, tri: torch.Tensor) -> torch.Tensor:
    """Per-pixel depth = camera-space z = clip ``w`` (docs/conventions.md §4), 0 where empty.

    Args:
        rast: ``[B, H, W, 4]`` from ``rasterize``.
        pos_clip: the ``pos`` given to ``rasterize`` (``[B, V, 4]`` or ``[V, 4]``).
        tri: ``[T, 3]``.

    Returns:
        ``[B, H, W, 1]``, differentiable w.r.t. ``pos_clip`` and ``rast``. Perspective-correct: the
        barycentric blend of the vertices' ``w`` is the true depth of the surface point.
    """
    out, _ = interpolate(pos_clip[..., 3:4].contiguous(), rast, tri)
    return out


def render_attribute(
    attr: torch.Tensor, rast: torch.Tensor, tri: torch.Tensor, normalize: bool = False, eps: float = 1e-12
) -> torch.Tensor:
    """Interpolate a per-vertex attribute (world positions ``[V, 3]``, vertex normals, colours).

    With ``normalize=True`` the result is rescaled to unit length (for normals), staying 0 where empty.
    """
    out, _ = interpolate(attr, rast, tri)
    if normalize:
        out = out / out.norm(dim=-1, keepdim=True).clamp_min(eps)
    return out


def render_face_normals(face_normals: torch.Tensor, rast: torch.Tensor) -> torch.Tensor:
    """Flat shading: the ``[T, 3]`` (or ``[B, T, 3]``) per-face vector of each pixel's triangle, 0 empty."""
    check_rast(rast)
    tid = triangle_id(rast)
    cov = (tid >= 0).unsqueeze(-1).to(face_normals.dtype)
    t = tid.clamp(min=0)
    if face_normals.ndim == 2:
        out = face_normals[t]
    else:
        b = torch.arange(rast.shape[0], device=rast.device).view(-1, 1, 1)
        out = face_normals[b if face_normals.shape[0] > 1 else 0 * b, t]
    return out * cov


def ndc_to_pixel(xy_ndc: torch.Tensor, resolution: Tuple[int, int]) -> torch.Tensor:
    """NDC ``(x, y)`` → pixel coordinates ``(X, Y)`` with pixel (i, j)'s centre at ``(j + 0.5, i + 0.5)``."""
    H, W = resolution
    X = (xy_ndc[..., 0] + 1) * (W * 0.5)
    Y = (xy_ndc[..., 1] + 1) * (H * 0.5)
    return torch.stack([X, Y], dim=-1)


__all__ = [
    "transform_pos",
    "triangle_id",
    "coverage_mask",
    "render_depth",
    "render_attribute",
    "render_face_normals",
    "ndc_to_pixel",
]
