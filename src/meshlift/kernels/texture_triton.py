"""Trilinear mip-mapped 2D texture lookup in Triton: forward and hand-written backward, one launch each.

The specification is the pure-PyTorch path of :func:`meshlift.render.texture.texture_rows` (itself the
same code as :func:`meshlift.render.texture.texture`'s ``'linear-mipmap-linear'`` mode with ``uv_da``:
nvdiffrast semantics, Laine et al. 2020, Sec. 3.3); tests/test_kernels_texture_triton.py compares the two,
forward and backward.

Why a kernel: the torch path forms the mip level, two levels × four taps of indices and weights, gathers
``[N·4, C]`` texels per level and blends them: ~110 kernel launches forward and as many backward per
lookup (CPU dispatcher count), four lookups per pass-2 step of the surface method (kd, ks, normal and the
jittered kd: ~700 of the step's ~3,600 kernel ops). Here, per lookup:

- forward (``tex_fwd``): one program per ``BLOCK`` rows, the ``C`` channels as the second tile axis
  (padded to a power of two ``CP``). Per row: the footprint ``J = ∂(u·W₀, v·H₀)/∂(X, Y)`` from ``uv_da``,
  ``λ_max`` of ``JᵀJ``, ``level = clamp(½·log2 λ_max, 0, L−1)``; for levels ``⌊level⌋`` and
  ``min(⌊level⌋+1, L−1)`` the four bilinear taps (texel centres at ``(i + ½)/size``; ``wrap`` or
  ``clamp`` addressing) are gathered from the flat mip stack ``[M, C_tot]`` (rows of level ``l`` start at
  ``offsets[l]``, ``h_l × w_l`` row-major) and blended with weights ``(1−f)`` / ``f``;
- backward (``tex_bwd``) recomputes everything from ``uv``, ``uv_da`` (nothing else is saved):
  ``dL/dflat[tap] += w_tap · g`` with ``tl.atomic_add`` (order-dependent in the last bits, like any float
  scatter-add), and, when the coordinates need gradients, ``dL/du = Σ_l fac_l · w_l · <g, ∂bilerp/∂fx>``
  (likewise ``v``), ``dL/dlevel = <g, val(l₁) − val(l₀)>`` through torch's clamp rule, then
  ``dL/dλ = dL/dlevel / (2 λ ln 2)`` and the chain rule through ``λ(A, B, C)`` and ``(a, b, c, d)``
  (formulas in the kernel).

``channels < C_tot`` samples the first ``channels`` columns only (the jittered albedo lookup of pass 2
reads the kd columns of the kd|ks|normal stack). float32 only; differentiable once. ``triton`` is imported
on first use, never at module import.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from meshlift.kernels._launch import on_device

__all__ = ["texture_rows_triton"]

_BLOCK = 128


def _kernels():
    from meshlift.kernels import _texture_triton_kernels as k

    return k


def _cp(c: int) -> int:
    return 1 << max(0, (int(c) - 1).bit_length())


class _TextureRowsFn(torch.autograd.Function):
    """``(flat [M, C_tot], uv [N, 2], uv_da [N, 4]) -> [N, channels]``; level tables non-differentiable."""

    @staticmethod
    def forward(ctx, flat, uv, uv_da, offsets, heights, widths, base_hw, channels, wrap):  # type: ignore[override]
        import triton

        k = _kernels()
        n = uv.shape[0]
        ct = flat.shape[1]
        h0, w0 = base_hw
        lmax = float(offsets.shape[0] - 1)
        out = torch.empty(n, channels, dtype=flat.dtype, device=flat.device)
        if n:
            with on_device(uv.device):
                k.tex_fwd[(triton.cdiv(n, _BLOCK),)](
                    flat, uv, uv_da, offsets, heights, widths, out, n, float(w0), float(h0), lmax, int(lmax), ct,
                    C=channels, CP=_cp(channels), WRAP=wrap, BLOCK=_BLOCK)
        ctx.save_for_backward(flat, uv, uv_da, offsets, heights, widths)
        ctx.meta = (base_hw, channels, wrap, lmax)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        import triton

        k = _kernels()
        flat, uv, uv_da, offsets, heights, widths = ctx.saved_tensors
        (h0, w0), channels, wrap, lmax = ctx.meta
        need_tex = ctx.needs_input_grad[0]
        need_uv = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        n = uv.shape[0]
        grad = grad.contiguous().to(flat.dtype)
        g_flat = torch.zeros_like(flat) if need_tex else flat.new_empty(1)
        g_uv = torch.empty_like(uv) if need_uv else uv.new_empty(1)
        g_da = torch.empty_like(uv_da) if need_uv else uv.new_empty(1)
        if n and (need_tex or need_uv):
            with on_device(uv.device):
                k.tex_bwd[(triton.cdiv(n, _BLOCK),)](
                    flat, uv, uv_da, offsets, heights, widths, grad, g_flat, g_uv, g_da, n, float(w0), float(h0),
                    lmax, int(lmax), flat.shape[1], C=channels, CP=_cp(channels), WRAP=wrap, NEED_TEX=need_tex,
                    NEED_UV=need_uv, BLOCK=_BLOCK)
        return (g_flat if need_tex else None, g_uv if ctx.needs_input_grad[1] else None,
                g_da if ctx.needs_input_grad[2] else None, None, None, None, None, None, None)


def texture_rows_triton(
    flat: torch.Tensor,
    uv: torch.Tensor,
    uv_da: torch.Tensor,
    offsets: torch.Tensor,
    heights: torch.Tensor,
    widths: torch.Tensor,
    base_hw: tuple[int, int],
    channels: int,
    wrap: bool,
) -> torch.Tensor:
    """Trilinear lookup with the Triton kernels (the caller, ``render.texture.texture_rows``, validates).

    Args:
        flat: ``[M, C_tot]`` float32 mip stack (levels' texels row-major, one after another).
        uv: ``[N, 2]`` float32 texture coordinates (docs/conventions.md §7).
        uv_da: ``[N, 4]`` float32 ``(du/dX, du/dY, dv/dX, dv/dY)`` per pixel.
        offsets, heights, widths: ``[L]`` int64 first row, height and width of each level in ``flat``.
        base_hw: ``(H₀, W₀)`` of level 0 (texels). channels: columns sampled (``<= C_tot``, the first ones).
        wrap: ``True`` wrap addressing, ``False`` clamp.

    Returns:
        ``[N, channels]`` float32, differentiable with respect to ``flat``, ``uv`` and ``uv_da``.
    """
    return _TextureRowsFn.apply(flat.contiguous(), uv.contiguous(), uv_da.contiguous(), offsets.contiguous(),
                                heights.contiguous(), widths.contiguous(), (int(base_hw[0]), int(base_hw[1])),
                                int(channels), bool(wrap))
