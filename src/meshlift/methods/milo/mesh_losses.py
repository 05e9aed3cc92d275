"""The two image-space losses tying MILo's mesh to its Gaussians (Guédon et al. 2025; project notes §1).

Both compare the mesh rendered at a training view
(:func:`meshlift.methods.milo.occupancy_labels.render_mesh_maps`) with the Gaussian render of the same
view, over the pixels the mesh covers (mesh depth > 0):

* depth: ``mean log(1 + |D_mesh - D_gauss| / scene_scale)`` with ``D_gauss`` the Gaussians' median depth and
  ``scene_scale`` MILo's ``spatial_lr_scale`` (the camera-extent radius,
  :func:`meshlift.methods.milo.depth_fusion.camera_extent_radius`);
* normal: ``mean (1 - |n_mesh . n_gauss|)``; the absolute value makes it blind to the sign of the normals.

MILo weights both by 0.05 (applied by the caller). Gradients flow to both sides (MILo does not detach
the Gaussian render). Pixels where either input is not finite are left out (before the arithmetic, so no
NaN reaches the gradient of the other side through ``0 · NaN``).
"""

from __future__ import annotations

import torch

from meshlift.errors import RenderError


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over ``mask`` (0 with a gradient path when empty), without boolean indexing (no host
    sync). Values of ``x`` outside ``mask`` are ignored in the forward; their gradient is 0."""
    return torch.where(mask, x, torch.zeros_like(x)).sum() / mask.sum().clamp(min=1)


def mesh_depth_loss(mesh_depth: torch.Tensor, gauss_depth: torch.Tensor, scene_scale: float) -> torch.Tensor:
    """``mean over mesh pixels of log(1 + |D_mesh - D_gauss| / scene_scale)``.

    Args:
        mesh_depth: ``[C, H, W]`` mesh depth (camera z, 0 where empty).
        gauss_depth: ``[C, H, W]`` Gaussian median depth of the same views.
        scene_scale: > 0, scene units.

    Returns:
        Scalar (0 with a gradient path when the mesh covers no pixel).

    Raises:
        RenderError: shapes differ or ``scene_scale <= 0``.
    """
    if mesh_depth.shape != gauss_depth.shape or mesh_depth.ndim != 3:
        raise RenderError(
            f"mesh_depth_loss: mesh_depth and gauss_depth must both be [C, H, W], got "
            f"{tuple(mesh_depth.shape)} and {tuple(gauss_depth.shape)}"
        )
    if not float(scene_scale) > 0:
        raise RenderError(
            f"mesh_depth_loss: scene_scale must be > 0 (e.g. camera_extent_radius), got {scene_scale!r}"
        )
    # pixels where either depth is not finite (a Gaussian depth of inf/NaN) are left out *before* the
    # arithmetic: a masked-out NaN would still send 0 · NaN = NaN back through the backward of log1p/abs
    ok = (mesh_depth.detach() > 0) & torch.isfinite(mesh_depth.detach()) & torch.isfinite(gauss_depth.detach())
    zero = torch.zeros_like(mesh_depth)
    diff = torch.where(ok, mesh_depth, zero) - torch.where(ok, gauss_depth, zero)
    err = torch.log1p(diff.abs() / float(scene_scale))
    return _masked_mean(err, ok)


def mesh_normal_loss(mesh_normals: torch.Tensor, gauss_normals: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``mean over mask of 1 - |n_mesh . n_gauss|`` (both normalised here, so any length works).

    Args:
        mesh_normals: ``[C, H, W, 3]`` mesh normals (``render_mesh_maps``).
        gauss_normals: ``[C, H, W, 3]`` Gaussian normals of the same views (any frame shared with the mesh's).
        mask: ``[C, H, W]`` bool pixels to use (the mesh's coverage, ``mesh_depth > 0``).

    Raises:
        RenderError: shapes differ or ``mask`` is not bool.
    """
    if mesh_normals.shape != gauss_normals.shape or mesh_normals.ndim != 4 or mesh_normals.shape[-1] != 3:
        raise RenderError(
            f"mesh_normal_loss: normals must both be [C, H, W, 3], got {tuple(mesh_normals.shape)} and "
            f"{tuple(gauss_normals.shape)}"
        )
    if mask.dtype != torch.bool or mask.shape != mesh_normals.shape[:-1]:
        raise RenderError(
            f"mesh_normal_loss: mask must be bool {tuple(mesh_normals.shape[:-1])}, got {tuple(mask.shape)} {mask.dtype}"
        )
    # non-finite normals (either side) are masked out before the product: at a masked-out pixel a NaN
    # Gaussian normal would otherwise give the mesh normal a gradient of 0 · NaN = NaN
    ok = mask & torch.isfinite(mesh_normals.detach()).all(-1) & torch.isfinite(gauss_normals.detach()).all(-1)
    zero = torch.zeros_like(mesh_normals)
    a = torch.nn.functional.normalize(torch.where(ok[..., None], mesh_normals, zero), dim=-1, eps=1e-12)
    b = torch.nn.functional.normalize(torch.where(ok[..., None], gauss_normals, zero), dim=-1, eps=1e-12)
    return _masked_mean(1.0 - (a * b).sum(-1).abs(), ok)
