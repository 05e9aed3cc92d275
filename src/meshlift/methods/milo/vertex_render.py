"""Unlit renders of a vertex-coloured mesh at training views, shared by the photometric refinement
(:mod:`meshlift.methods.milo.photo_refine`) and the colour solve (:mod:`meshlift.methods.milo.colour_solve`): the
world-to-clip matrices of a whole-scene mesh, the shading of a rasterised batch exactly as the evaluation renders it,
and the straight (un-premultiplied) photos it is compared with."""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["box_downsample", "mesh_world_to_clip", "render_vertex_colors", "shade_vertex_colors", "straight_images"]


def mesh_world_to_clip(w2c: torch.Tensor, K: torch.Tensor, W: int, H: int, v_pos: torch.Tensor) -> torch.Tensor:
    """``[C, 4, 4]`` world-to-clip matrices of ``C`` cameras (``w2c [C, 4, 4]``, ``K [C, 3, 3]``, image ``W × H``
    pixels) with the near/far range of :func:`meshlift.methods.milo.occupancy_labels.clip_range` for the
    vertices ``v_pos [V, 3]`` (near from the vertices in the view: a whole-scene mesh around the camera put
    it at ``1e-3 far`` and the float32 depth cracked; see there)."""
    from meshlift.cameras import projection_from_K
    from meshlift.methods.milo.occupancy_labels import clip_range

    near, far = clip_range(v_pos.detach(), w2c, K, (H, W), far_scale=1.05)
    return projection_from_K(K, W, H, near, far.clamp(min=1e-3)) @ w2c


def render_vertex_colors(v_pos: torch.Tensor, tri: torch.Tensor, v_color: torch.Tensor, world_to_clip: torch.Tensor,
                         resolution: tuple[int, int], background: torch.Tensor,
                         topology: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Differentiable unlit render of a vertex-coloured mesh, the same image as
    :func:`meshlift.renderers.mesh_pbr.render_unlit` gives for a mesh with ``v_color`` and no texture.

    Args:
        v_pos: ``[V, 3]`` float32 world positions; tri: ``[T, 3]`` int32; v_color: ``[V, 3]`` linear RGB.
        world_to_clip: ``[B, 4, 4]``; resolution: ``(H, W)``; background: ``[3]`` sRGB.
        topology: :func:`meshlift.render.antialias.antialias_construct_topology` of ``tri`` (reused across calls).

    Returns:
        ``(image [B, H, W, 3] sRGB in [0, 1], coverage [B, H, W, 1] 0/1, antialiased coverage [B, H, W, 1])``;
        gradients reach ``v_pos`` (barycentrics and silhouettes) and ``v_color``.
    """
    from meshlift import render as R

    pos = R.transform_pos(world_to_clip.float(), v_pos)
    rast, _ = R.rasterize(pos, tri, tuple(resolution), precise=True)
    both = shade_vertex_colors(v_color, rast, pos, tri, background, topology, with_coverage=True)
    return both[..., :3], (rast[..., 3:4] > 0).float(), both[..., 3:4]


def shade_vertex_colors(v_color, rast, clip_pos, tri, background, topology, *,
                        with_coverage: bool = False) -> torch.Tensor:
    """``[B, H, W, 3 (+1)]`` the unlit, antialiased sRGB image of vertex colours on a rasterized batch (and the
    antialiased coverage as a fourth channel with ``with_coverage``); :func:`render_vertex_colors`' shading."""
    from meshlift import render as R
    from meshlift.shading.color import linear_to_srgb

    cov = (rast[..., 3:4] > 0).float()
    c, _ = R.interpolate(v_color, rast, tri)
    img = linear_to_srgb(c.clamp(0, 1)) * cov + background * (1.0 - cov)
    if with_coverage:
        img = torch.cat([img, cov], -1)
    out = R.antialias(img.contiguous(), rast, clip_pos, tri, topology=topology)
    return torch.cat([out[..., :3].clamp(0, 1), out[..., 3:]], -1) if with_coverage else out.clamp(0, 1)


def box_downsample(x: torch.Tensor, s: int) -> torch.Tensor:
    """``[B, H, W, C]`` the means of the ``s × s`` blocks of ``x [B, H·s, W·s, C]``: a render at ``s`` samples per
    pixel side (the same world-to-clip matrices rasterised at ``(H·s, W·s)``: pixel centres at ``j + 0.5``,
    docs/conventions.md) averaged over each pixel's area, the box filter a camera's pixel integrates (supersampling
    anti-aliasing). ``s = 1`` returns ``x`` itself.

    Raises:
        ValueError: the height or width of ``x`` is not a multiple of ``s``, or ``s < 1``.
    """
    s = int(s)
    if s == 1:
        return x
    B, Hs, Ws, C = x.shape
    if s < 1 or Hs % s or Ws % s:
        raise ValueError(f"box_downsample: a {Hs} x {Ws} image is not made of {s} x {s} blocks")
    return x.reshape(B, Hs // s, s, Ws // s, s, C).mean(dim=(2, 4))


def straight_images(b) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``(straight sRGB [B, H, W, 3], alpha [B, H, W, 1] or None)`` of a batch of premultiplied views."""
    if b.alpha is None:
        return b.images.float(), None
    a = b.alpha.float()
    return b.images.float() / a.clamp(min=1e-3), a
