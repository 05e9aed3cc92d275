"""The density-control statistics of one training step in one Triton launch (issue 29: launches per step).

:class:`meshlift.methods.gaussians.strategy.DefaultStrategy` accumulates, per Gaussian, the norm of its
screen-space mean gradient (scaled to NDC units: ``x · W/2 · C``, ``y · H/2 · C``) summed over the cameras
that see it (radius > 0), and how many saw it. In torch that is ~10 launches per step (hypot, amax, compare,
where, two reductions over cameras, two in-place adds); here one elementwise launch over the Gaussians reads
the gradient and radii in place (any strides) and adds into both running sums. Reference twin: the strategy's
torch code (``DefaultStrategy._update_state`` with ``fused=False``; ``tests/test_kernels_densify_triton.py``
compares both under ``TRITON_INTERPRET=1``). ``sqrt(x² + y²)`` where torch uses ``hypot``: a few ulp apart.
"""

from __future__ import annotations

import functools

import torch

from meshlift.kernels._launch import grid_1d, on_device
from meshlift.kernels.choice import triton_runs_on

__all__ = ["is_available", "accumulate_grad2d"]

_BLOCK = 512


def is_available(device: torch.device) -> bool:
    return triton_runs_on(device)


@functools.lru_cache(maxsize=1)
def _k():
    from meshlift.kernels import _densify_triton_kernels

    return _densify_triton_kernels


@torch.no_grad()
def accumulate_grad2d(grad: torch.Tensor, radii: torch.Tensor, grad2d: torch.Tensor, count: torch.Tensor,
                      scale_x: float, scale_y: float) -> None:
    """``grad2d[n] += Σ_c [r_cn > 0] ‖(g_cn,x · scale_x, g_cn,y · scale_y)‖`` and ``count[n] += Σ_c [r_cn > 0]``.

    Args:
        grad: ``[C, N, 2]`` float32 (any strides): the gradient of the projected means (pixels).
        radii: ``[C, N, 2]`` (or ``[C, N, 1]``) int32 screen radii; visible where the largest is > 0.
        grad2d, count: ``[N]`` float32, contiguous: the running sums, updated in place.
        scale_x, scale_y: the NDC scale of each axis (``W / 2 · C``, ``H / 2 · C``).
    """
    C, N = grad.shape[0], grad.shape[1]
    if radii.ndim == 2:
        radii = radii[..., None]
    if N == 0:
        return
    rk = radii.stride(2) if radii.shape[2] > 1 else 0
    with on_device(grad.device):
        _k().grad2d_stats[grid_1d(N, _BLOCK)](grad, radii, grad2d, count, N, C, grad.stride(0), grad.stride(1),
                                              grad.stride(2), radii.stride(0), radii.stride(1), rk, float(scale_x),
                                              float(scale_y), BLOCK=_BLOCK)
