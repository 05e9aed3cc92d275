"""Silhouette antialiasing (``render.antialias``) in Triton: three launches forward, four backward.

The specification is the torch code of :func:`meshlift.render.antialias` (nvdiffrast's analytic antialiasing,
Laine et al. 2020, Sec. 3.4), unchanged and the reference twin; tests/test_kernels_antialias_triton.py
compares forward and backward. Why: the torch path is ~100 elementwise / gather ops forward per call (two
directions of candidate pairs, silhouette tests on three edges, the crossing distance) and as many backward,
and two host syncs (the candidate counts); every training step calls it once.

Design (no candidate compaction, so no host sync; memory: two ``[B·H·W]`` float32 alpha buffers):

- ``aa_pairs`` (one launch per direction): one lane per pixel ``p``, the pair ``(p, p + step)``; where the
  triangle ids differ, the nearer triangle, its three edges' silhouette test and crossing distance, the first
  arg-max edge and the twin's acceptance rule; ``alpha[p] = ds · (0.5 − clamp(dcs, 0, 1))`` (0 for no usable
  crossing);
- ``aa_apply``: ``out[p] = c[p] + Σ α (c[p1] − c[p0])`` over the (up to four) pairs whose target is ``p``
  (the first pixel when ``α > 0``, else the second), summed in the twin's ``index_add`` order (left, right,
  up, down): a gather, so deterministic;
- backward: ``aa_bwd_color`` (``dL/dc`` by the same gather, and ``dL/dα = <g[target], c[p1] − c[p0]>`` per
  pair), then ``aa_bwd_pos`` per direction: with ``dcs = ds · (Xa Yb − Ya Xb) / (Yb − Ya)`` in the pair's
  frame, ``∂/∂Xa = Yb/den``, ``∂/∂Xb = −Ya/den``, ``∂/∂Ya = num/den² − Xb/den``,
  ``∂/∂Yb = Xa/den − num/den²``, and ``X = (x/w + 1) W/2 − rx`` → ``∂X/∂x = W/(2w)``,
  ``∂X/∂w = −x W/(2w²)``; scattered onto the clip positions with ``tl.atomic_add`` (the summation order differs from torch's in the last bits).

Float32 colour and positions; int32/int64 triangles. ``triton`` is imported on first use, never at module
import.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from meshlift.kernels._launch import on_device

__all__ = ["antialias_triton"]

_BLOCK = 128


def _cp(c: int) -> int:
    return 1 << max(0, (int(c) - 1).bit_length())


class _AntialiasFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, color, pos, rast, tri, topology, boost):  # type: ignore[override]
        from meshlift.kernels import _antialias_triton_kernels as k

        B, H, W, C = color.shape
        n = B * H * W
        V = pos.shape[-2]
        batched = pos.ndim == 3
        ah = torch.empty(n, dtype=torch.float32, device=color.device)
        av = torch.empty_like(ah)
        out = torch.empty_like(color)
        grid = ((n + _BLOCK - 1) // _BLOCK,)
        with on_device(color.device):
            for down, a in ((False, ah), (True, av)):
                k.aa_pairs[grid](rast, pos, tri, topology, a, n, H, W, V, BATCHED=batched, DOWN=down, BLOCK=_BLOCK)
            k.aa_apply[grid](color, ah, av, out, n, H, W, C=C, CP=_cp(C), BLOCK=_BLOCK)
        ctx.save_for_backward(color, pos, rast, tri, topology, ah, av)
        ctx.boost = float(boost)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        from meshlift.kernels import _antialias_triton_kernels as k

        color, pos, rast, tri, topology, ah, av = ctx.saved_tensors
        B, H, W, C = color.shape
        n = B * H * W
        V = pos.shape[-2]
        grad = grad.contiguous()
        g_color = torch.empty_like(color)
        g_ah, g_av = torch.empty_like(ah), torch.empty_like(av)
        need_pos = ctx.needs_input_grad[1]
        g_pos = torch.zeros_like(pos) if need_pos else None
        grid = ((n + _BLOCK - 1) // _BLOCK,)
        with on_device(color.device):
            k.aa_bwd_color[grid](grad, color, ah, av, g_color, g_ah, g_av, n, H, W, C=C, CP=_cp(C), BLOCK=_BLOCK)
            if need_pos:
                for down, ga in ((False, g_ah), (True, g_av)):
                    k.aa_bwd_pos[grid](rast, pos, tri, topology, ga, g_pos, n, H, W, V, ctx.boost,
                                       BATCHED=pos.ndim == 3, DOWN=down, BLOCK=_BLOCK)
        return (g_color if ctx.needs_input_grad[0] else None), g_pos, None, None, None, None


def antialias_triton(color: torch.Tensor, rast: torch.Tensor, pos: torch.Tensor, tri: torch.Tensor,
                     topology: torch.Tensor, pos_gradient_boost: float = 1.0) -> torch.Tensor:
    """:func:`meshlift.render.antialias` as Triton kernels (the caller, ``render.antialias``, validates).

    Args:
        color: ``[B, H, W, C]`` float32. rast: ``[B, H, W, 4]`` float32 (``rasterize``'s output).
        pos: ``[B, V, 4]`` or ``[V, 4]`` float32 clip-space positions. tri: ``[T, 3]`` int32/int64.
        topology: ``[T, 3]`` int64 from ``antialias_construct_topology(tri)``.
        pos_gradient_boost: multiplier on the gradient to ``pos``.

    Returns:
        ``[B, H, W, C]`` float32, differentiable with respect to ``color`` and ``pos``.
    """
    return _AntialiasFn.apply(color.contiguous(), pos.contiguous(), rast.detach().contiguous(), tri.contiguous(),
                              topology.to(torch.int64).contiguous(), float(pos_gradient_boost))
