"""Seamless cube-map lookups (bilinear, and trilinear over a mip chain) in Triton, forward and backward.

The specification is the torch path of :func:`meshlift.shading.cubemap.sample_cube` and
:func:`~meshlift.shading.cubemap.sample_cube_mip` (faces padded by one texel resampled from their
neighbours, OpenGL face selection, docs/conventions.md §8); tests/test_kernels_cube_triton.py compares
them forward and backward. The padded table itself is built by one fixed sparse map of all levels
(``cubemap._padded_table``: ``prefilter_triton.csr_apply_cat_triton``, one autograd node); this module
replaces what follows it.

Why a kernel: per lookup the torch path selects the face with ~30 elementwise ops, forms tap indices and
weights for two levels, gathers ``[8N, C]`` texels and blends them; its backward is as long again, and the
texel gradient is an ``index_add_`` onto a few thousand texels (the H200 profile of issue 9: the
scatter-adds were pass 2's largest kernel). The split-sum shading of every step does two lookups (the
diffuse cube at the normal, the specular chain at the reflected direction). Here each is one launch
forward and one backward:

- ``cube_fwd``: one program per ``BLOCK`` rows, the channels as the second tile axis. Per row the face
  and face coordinates ``(x, y) = (sc, tc) / |ma|`` of the direction, then per level (``⌊lv⌋`` and
  ``⌊lv⌋ + 1``, clamped to the last pair) ``px = min(max((x + 1)·R/2 + ½, 0), R + 1)`` in the padded face,
  the four taps and their bilinear blend; ``lo + (hi − lo)·t`` between levels;
- ``cube_bwd`` recomputes all of it: ``dL/dtable[tap] += w_tap · fac · g`` (``tl.atomic_add``: the
  summation order differs from torch's in the last bits), ``dL/dlevel = <g, hi − lo>`` (through the clamp
  rule of torch: 0 outside ``[0, L − 1]``), and ``dL/d(x, y)`` from the bilinear weights times ``R/2``,
  carried to the direction through ``x = sc/ma``: ``∂x/∂sc = 1/ma``, ``∂x/∂ma = −x/ma``,
  ``∂ma/∂d_major = sign(d_major)`` (face selection is piecewise constant).

float32 only; differentiable once. ``triton`` is imported on first use, never at module import.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from meshlift.kernels._launch import on_device

__all__ = ["sample_cube_table_triton"]

_BLOCK = 128


def _cp(c: int) -> int:
    return 1 << max(0, (int(c) - 1).bit_length())


class _CubeFn(torch.autograd.Function):
    """``(table [M, C], dirs [N, 3], level [N] or None) -> [N, C]``; strides / offsets non-differentiable."""

    @staticmethod
    def forward(ctx, table, dirs, level, strides, offsets):  # type: ignore[override]
        import triton

        from meshlift.kernels import _cube_triton_kernels as k

        n, c = dirs.shape[0], table.shape[1]
        mip = level is not None
        lmax = float(strides.shape[0] - 1)
        out = torch.empty(n, c, dtype=table.dtype, device=table.device)
        if n:
            with on_device(dirs.device):
                k.cube_fwd[(triton.cdiv(n, _BLOCK),)](table, strides, offsets, dirs, level if mip else dirs, out, n,
                                                      lmax, C=c, CP=_cp(c), MIP=mip, BLOCK=_BLOCK)
        ctx.save_for_backward(table, dirs, level if mip else None, strides, offsets)
        ctx.mip = mip
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        import triton

        from meshlift.kernels import _cube_triton_kernels as k

        table, dirs, level, strides, offsets = ctx.saved_tensors
        need_tab = ctx.needs_input_grad[0]
        need_dir = ctx.needs_input_grad[1] or (ctx.mip and ctx.needs_input_grad[2])
        n, c = dirs.shape[0], table.shape[1]
        grad = grad.contiguous().to(table.dtype)
        g_tab = torch.zeros_like(table) if need_tab else table.new_empty(1)
        g_dir = torch.empty_like(dirs) if need_dir else dirs.new_empty(1)
        g_lvl = torch.empty(n, dtype=dirs.dtype, device=dirs.device) if (need_dir and ctx.mip) else dirs.new_empty(1)
        if n and (need_tab or need_dir):
            with on_device(dirs.device):
                k.cube_bwd[(triton.cdiv(n, _BLOCK),)](
                    table, strides, offsets, dirs, level if ctx.mip else dirs, grad, g_tab, g_dir, g_lvl, n,
                    float(strides.shape[0] - 1), C=c, CP=_cp(c), MIP=ctx.mip, NEED_TAB=need_tab, NEED_DIR=need_dir,
                    BLOCK=_BLOCK)
        return (g_tab if need_tab else None, g_dir if ctx.needs_input_grad[1] else None,
                g_lvl if (ctx.mip and ctx.needs_input_grad[2]) else None, None, None)


def sample_cube_table_triton(
    table: torch.Tensor,
    strides: torch.Tensor,
    offsets: torch.Tensor,
    dirs: torch.Tensor,
    level: torch.Tensor | None,
) -> torch.Tensor:
    """Look up padded cube-map levels stored back to back (the caller, ``shading.cubemap``, validates).

    Args:
        table: ``[M, C]`` float32, level ``l``'s padded faces ``[6, R_l + 2, R_l + 2]`` row-major from row
            ``offsets[l]``.
        strides: ``[L]`` int64 ``R_l + 2``. offsets: ``[L]`` int64 first row of each level.
        dirs: ``[N, 3]`` float32 directions (any length > 0).
        level: ``[N]`` float32 fractional level (clamped to ``[0, L − 1]``; ``L >= 2``), or None for a
            bilinear lookup of level 0 only.

    Returns:
        ``[N, C]`` float32, differentiable with respect to ``table``, ``dirs`` and ``level``.
    """
    return _CubeFn.apply(table.contiguous(), dirs.contiguous(), None if level is None else level.contiguous(),
                         strides.contiguous(), offsets.contiguous())
