"""View-dependent vertex colours: spherical harmonics of the view direction stored per vertex of a mesh.

Why (issue 33; benchmarks/results/2026-12-06_session28_device.md): on a phone capture the appearance of a point
changes along the camera path (automatic exposure and white balance, sheen), and the Gaussians follow it with
their SH terms (fox: 30.74 dB with SH degree 3, 25.36 at degree 0). One colour per vertex cannot: even colours
fitted to the test photographs themselves scored 24.36 dB on the fox's whole-scene mesh. The mesh-based
novel-view-synthesis protocol of MILo (Guédon et al. 2025, §5, "mesh-based NVS": a view-dependent colour field of
SH degree 2 fitted to the training images on the fixed mesh, then rendered at the test views) gives the mesh the
same freedom; this module is the per-vertex form of that field (a surface light field, Wood et al. 2000, in the
3DGS SH basis).

The colour of vertex ``i`` seen from a camera centre ``o`` (linear RGB, clamped to [0, 1])::

    c_i(o) = clamp(base_i + Σ_{k=1}^{K-1} Y_k(d̂_i) · rest_i[k-1], 0, 1),   d̂_i = (v_i − o) / |v_i − o|

``Y_k`` the real SH basis of :func:`meshlift.render.splat_reference.sh_basis` (3DGS order, degree ≤ 3,
``K = (degree + 1)²``), ``base_i`` the view-independent colour (what a GLB's vertex colours or baked albedo hold),
``rest_i`` ``[K − 1, 3]`` the view-dependent terms. The direction is taken per vertex, as the Gaussians take it
per Gaussian; the interpolation across a triangle is the rasterizer's, of the evaluated colours.
"""

from __future__ import annotations

import torch

from meshlift.errors import RenderError

__all__ = ["camera_centres", "sh_degree_of", "sh_rest_count", "view_dependent_colors"]


def sh_rest_count(degree: int) -> int:
    """``(degree + 1)² − 1``: the view-dependent coefficients per channel of SH degree ``degree`` (0..3).

    Raises:
        RenderError: ``degree`` outside 0..3.
    """
    if not 0 <= int(degree) <= 3:
        raise RenderError(f"view-dependent colours: SH degree must be in 0..3, got {degree!r}")
    return (int(degree) + 1) ** 2 - 1


def sh_degree_of(rest: torch.Tensor) -> int:
    """The SH degree (0..3) of view-dependent terms ``rest [V, K − 1, 3]`` (``K − 1`` of 0, 3, 8 or 15).

    Raises:
        RenderError: a coefficient count that is no SH degree.
    """
    degree = {0: 0, 3: 1, 8: 2, 15: 3}.get(int(rest.shape[1]) if rest.ndim == 3 else -1)
    if degree is None:
        raise RenderError(f"view_dependent_colors: rest has shape {tuple(rest.shape)}; [V, K-1, 3] with K-1 one of "
                          "3, 8 or 15 (SH degree 1..3; 0 for none) expected: no SH degree")
    return degree


def camera_centres(world_to_camera: torch.Tensor) -> torch.Tensor:
    """``[B, 3]`` world positions of the camera centres of rigid ``world_to_camera [B, 4, 4]`` (any axis
    convention whose matrix maps world points to the camera frame: ``o = −Rᵀ t``)."""
    R = world_to_camera[..., :3, :3]
    t = world_to_camera[..., :3, 3]
    return -(R.transpose(-1, -2) @ t[..., None])[..., 0]


def view_dependent_colors(base: torch.Tensor, rest: torch.Tensor, v_pos: torch.Tensor,
                          centre: torch.Tensor, *, clamp: bool = True) -> torch.Tensor:
    """``[V, 3]`` linear RGB in [0, 1] of every vertex seen from ``centre`` (module docstring's equation).

    Args:
        base: ``[V, 3]`` float, the view-independent colour (linear RGB).
        rest: ``[V, K − 1, 3]`` float, the view-dependent SH terms (``K − 1`` of 0, 3, 8 or 15: degree 0..3).
        v_pos: ``[V, 3]`` world positions.
        centre: ``[3]`` the camera centre (world; :func:`camera_centres`).

    Differentiable in ``base``, ``rest`` and ``v_pos``. A vertex at the centre takes its base colour. ``clamp=False``
    returns the colours before the clamp to [0, 1] (a solver that clamps with a gradient of its own).

    Raises:
        RenderError: shapes that do not match, or a coefficient count that is no SH degree.
    """
    from meshlift.render.splat_reference import sh_basis

    if base.ndim != 2 or base.shape[-1] != 3 or rest.ndim != 3 or rest.shape[0] != base.shape[0] \
            or rest.shape[-1] != 3 or v_pos.shape != base.shape:
        raise RenderError(f"view_dependent_colors: base [V, 3], rest [V, K-1, 3], v_pos [V, 3] expected, got "
                          f"{tuple(base.shape)}, {tuple(rest.shape)}, {tuple(v_pos.shape)}")
    degree = sh_degree_of(rest)
    if degree == 0:
        return base.clamp(0, 1) if clamp else base
    d = v_pos - centre.to(v_pos).reshape(1, 3)
    d = d / d.norm(dim=-1, keepdim=True).clamp_min(1e-12)  # a vertex at the centre: d = 0, every term 0
    basis = sh_basis(degree, d)[:, 1:]  # [V, K-1]; the constant term is ``base``
    out = base + (basis[..., None] * rest).sum(1)
    return out.clamp(0, 1) if clamp else out
