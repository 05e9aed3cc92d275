"""Split-sum cube-map prefilter in Triton: one CSR gather-weighted-sum kernel, forward and backward.

Source of the filter: Karis 2013 ("Real Shading in Unreal Engine 4", split sum, N = V = R) as used by
nvdiffrec (Munkberg et al. 2022, Sec. 5); the weights are built by
:func:`meshlift.shading.light.specular_prefilter` (the specification; its sparse-matmul torch path is the
reference twin, tested forward and backward against this module in tests/test_kernels_shading_triton.py).

Design. Prefiltering level i of the learned light is a *fixed* linear map ``y = W x`` of the source mip
(``W``: ``[6 R_out², 6 R_src²]``, rows normalised, int32 CSR, cached per process together with its
transpose). What varies per step is only ``x`` (``[6 R_src², C]``, C = 3). So the work is a sparse x
skinny-dense product; there is no dense reformulation with a good shape (``W`` is 0.1-10% full and the
dense side has 3 columns, so a dense GEMM would read 10-1000x more weights), and no atomics are needed:

- forward: grid = one program per output row (texel); it walks the row's ``nnz`` in blocks of ``BLOCK_K``
  (runtime trip count), gathers ``x[col, 0:C]`` as a ``[BLOCK_K, BLOCK_C]`` tile, weights it and reduces
  in float32; one launch per level (the ``spot`` light, R = 128: rows of 11 to ~1,700 entries);
- backward: ``dL/dx = W^T g``, the *same* kernel on the cached transposed CSR (deterministic, no
  scatter); ``W`` itself is constant, so it gets no gradient.

Measured op counts (CPU dispatcher, one level forward + backward): torch path 1 ``sparse_csr @ dense``
each way (cuSPARSE SpMM on CUDA: a buffer-size query, an allocation and the SpMM kernel(s)); this path 1
Triton launch each way plus the output allocation. The win is the cuSPARSE overheads and a kernel shaped
for C = 3, not a lower op count; the lead's H200 benchmark (benchmarks/shading_kernels.py) says by how much.

A second kernel, ``_csr_short_rows``, takes 128 rows a program and one entry of each per step (as many
steps as the block's longest row): for operators whose rows all have a few entries, such as the cube-map
border padding of :func:`meshlift.shading.cubemap.sample_cube_mip` (1 or 4 entries a row, its transpose up
to ~10), applied with :func:`csr_apply_cat_triton` to a whole mip chain as one autograd node.

float32 only; ``triton`` is imported on first use, never at module import.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch.autograd.function import once_differentiable

__all__ = ["csr_apply_triton", "csr_apply_cat_triton"]

_BLOCK_K = 64


@functools.lru_cache(maxsize=1)
def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def _csr_rows(crow_ptr, col_ptr, val_ptr, x_ptr, y_ptr, C: tl.constexpr, BLOCK_K: tl.constexpr,
                  BLOCK_C: tl.constexpr):
        row = tl.program_id(0)
        start = tl.load(crow_ptr + row)  # int32 (the operator's CSR indices are int32)
        end = tl.load(crow_ptr + row + 1)
        ks = tl.arange(0, BLOCK_K)
        cs = tl.arange(0, BLOCK_C)
        cmask = cs < C
        acc = tl.zeros([BLOCK_K, BLOCK_C], dtype=tl.float32)
        for k0 in range(start, end, BLOCK_K):
            k = k0 + ks
            km = k < end
            col = tl.load(col_ptr + k, mask=km, other=0).to(tl.int64)
            w = tl.load(val_ptr + k, mask=km, other=0.0)
            xv = tl.load(x_ptr + col[:, None] * C + cs[None, :], mask=km[:, None] & cmask[None, :], other=0.0)
            acc += w[:, None] * xv
        out = tl.sum(acc, axis=0)
        tl.store(y_ptr + row.to(tl.int64) * C + cs, out, mask=cmask)

    @triton.jit
    def _csr_short_rows(crow_ptr, col_ptr, val_ptr, x_ptr, y_ptr, n_rows, C: tl.constexpr,
                        BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
        # BLOCK_R rows per program, one entry of every row per step, for as many steps as the block's
        # longest row: for operators whose rows all have a few entries (the cube padding: 1 or 4, its
        # transpose up to ~10), where one program per row would leave the lanes idle.
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        rmask = rows < n_rows
        start = tl.load(crow_ptr + rows, mask=rmask, other=0)
        length = tl.load(crow_ptr + rows + 1, mask=rmask, other=0) - start
        cs = tl.arange(0, BLOCK_C)
        cmask = cs < C
        acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
        for k in range(0, tl.max(length, axis=0)):
            km = k < length
            col = tl.load(col_ptr + start + k, mask=km, other=0).to(tl.int64)
            w = tl.load(val_ptr + start + k, mask=km, other=0.0)
            xv = tl.load(x_ptr + col[:, None] * C + cs[None, :], mask=km[:, None] & cmask[None, :], other=0.0)
            acc += w[:, None] * xv
        tl.store(y_ptr + rows.to(tl.int64)[:, None] * C + cs[None, :], acc, mask=rmask[:, None] & cmask[None, :])

    return triton, _csr_rows, _csr_short_rows


_BLOCK_R = 128


def _apply(m: torch.Tensor, x: torch.Tensor, short_rows: bool = False) -> torch.Tensor:
    """``m @ x`` for an int32 CSR ``m`` [R, S] and a contiguous ``x`` [S, C] (float32).

    ``short_rows``: the row-blocked kernel (``_BLOCK_R`` rows a program; for rows of a few entries each).
    """
    triton, kern, kern_short = _kernels()
    n_rows, ch = m.shape[0], x.shape[1]
    y = torch.empty(n_rows, ch, dtype=x.dtype, device=x.device)
    ctx = torch.cuda.device(x.device) if x.device.type == "cuda" else contextlib.nullcontext()
    if n_rows:
        with ctx:
            if short_rows:
                kern_short[(triton.cdiv(n_rows, _BLOCK_R),)](
                    m.crow_indices(), m.col_indices(), m.values(), x, y, n_rows, C=ch, BLOCK_R=_BLOCK_R,
                    BLOCK_C=triton.next_power_of_2(ch), num_warps=4)
            else:
                kern[(n_rows,)](m.crow_indices(), m.col_indices(), m.values(), x, y, C=ch, BLOCK_K=_BLOCK_K,
                                BLOCK_C=triton.next_power_of_2(ch), num_warps=2)
    return y


class _CsrApplyFn(torch.autograd.Function):
    """``y = W x`` with the fixed CSR ``W`` and its transpose ``W^T`` (for the backward)."""

    @staticmethod
    def forward(ctx, x, fwd, bwd):  # type: ignore[override]
        ctx.bwd = bwd
        return _apply(fwd, x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        return _apply(ctx.bwd, grad.contiguous()), None, None


def csr_apply_triton(x: torch.Tensor, fwd: torch.Tensor, bwd: torch.Tensor) -> torch.Tensor:
    """Differentiable ``fwd @ x`` through the Triton kernel.

    Args:
        x: ``[S, C]`` float32 (the flattened source cube map, texels x channels).
        fwd: ``[R, S]`` sparse CSR float32 (int32 indices), the filter matrix ``W``.
        bwd: ``[S, R]`` sparse CSR, ``W^T`` (used by the backward pass).

    Returns:
        ``[R, C]`` float32; its gradient flows to ``x`` only.
    """
    return _CsrApplyFn.apply(x.contiguous(), fwd, bwd)


class _CsrApplyCatFn(torch.autograd.Function):
    """``y = W cat(x_i.reshape(S_i, C))`` for fixed ``W``/``W^T``: one autograd node for all the ``x_i``."""

    @staticmethod
    def forward(ctx, fwd, bwd, *xs):  # type: ignore[override]
        ch = xs[0].shape[-1]
        ctx.bwd = bwd
        ctx.shapes = [x.shape for x in xs]
        return _apply(fwd, torch.cat([x.reshape(-1, ch) for x in xs]), short_rows=True)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        if not any(ctx.needs_input_grad[2:]):
            return (None, None) + (None,) * len(ctx.shapes)
        gx = _apply(ctx.bwd, grad.contiguous(), short_rows=True)
        parts = gx.split([s.numel() // s[-1] for s in ctx.shapes])
        return (None, None) + tuple(
            p.view(s) if need else None for p, s, need in zip(parts, ctx.shapes, ctx.needs_input_grad[2:])
        )


def csr_apply_cat_triton(xs: list[torch.Tensor], fwd: torch.Tensor, bwd: torch.Tensor) -> torch.Tensor:
    """Differentiable ``fwd @ cat([x.reshape(-1, C) for x in xs])`` through the Triton kernel, as one op.

    The concatenation happens inside the autograd node (its backward splits ``W^T g`` into views shaped
    like the inputs), so a chain of L tensors costs one node and one ``cat`` instead of L reshapes, a cat
    and the apply (:func:`meshlift.shading.cubemap.sample_cube_mip` pads its mip chain this way). Both
    directions run the row-blocked kernel (128 rows a program, one entry of each per step, as many steps
    as the block's longest row): meant for operators with a few entries in every row of ``W`` and ``W^T``.

    Args:
        xs: tensors ``[..., C]`` float32 (e.g. cube-map levels ``[6, R_l, R_l, C]``), same ``C``;
            ``sum_i numel(x_i) / C = S``.
        fwd: ``[R, S]`` sparse CSR float32 (int32 indices).
        bwd: ``[S, R]`` sparse CSR, ``W^T``.

    Returns:
        ``[R, C]`` float32; its gradient flows to each ``x_i`` (shaped like it).
    """
    return _CsrApplyCatFn.apply(fwd, bwd, *xs)
