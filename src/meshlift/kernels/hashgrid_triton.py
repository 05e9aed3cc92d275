"""Fused multiresolution hash-grid encoding (instant-ngp) in Triton: forward and hand-written backward.

Source: Müller, Evans, Schied, Keller 2022, "Instant Neural Graphics Primitives with a Multiresolution Hash
Encoding", Sec. 3 (Eq. 2-4). The specification is :class:`meshlift.shading.encoding.HashGridEncoding`'s
pure-PyTorch path (and its naive loop twin :func:`~meshlift.shading.encoding.hash_grid_reference`); this
module must agree with it, forward and backward (tests/test_kernels_shading_triton.py).

Design (why a kernel): the torch path builds ``[N, L, 2^d]`` index and weight tensors axis by axis, gathers
``[N·L, 2^d, F]`` features and contracts them with a batched ``[1, 2^d] x [2^d, F]`` product. On CUDA that is
~60 kernel launches forward and ~65 backward per call (dispatcher count, 16 levels), and the product runs
as ``N·L`` tiny gemv problems (54% of the device time of a ``spot`` step on an H200 in the profile of issue
9, 2026-12-01). Here one launch does
the forward and one the backward (plus the zero-fill of the gradients), with no temporaries besides the
output:

- grid ``cdiv(N, BLOCK)``; a program owns ``BLOCK`` points and loops over the L levels (runtime loop) and
  the ``2^d`` corners (unrolled); per corner it forms the dense index ``Σ c_i (N_l+1)^i`` or the spatial
  hash ``XOR_i c_i π_i mod T`` (int64, so the products do not wrap), the d-linear weight, and accumulates
  the F features (F unrolled) in float32 registers; the output is stored level-major ``[N, L·F]``;
- backward recomputes indices and weights from the saved ``x`` (nothing else is saved):
  ``dL/dtable[idx] += w · g`` with ``tl.atomic_add`` (order-dependent in the last bits, like any float
  scatter-add), and, when ``x`` needs a gradient, ``dL/dx_i = Σ_l N_l Σ_corners (∂w/∂frac_i) <table[idx], g>``
  accumulated in registers across levels (no atomics: a program owns its points);
- ``x`` arrives clamped to [0, 1] (the clamp stays a torch op in the caller, so its gradient rule is
  torch's); the cell is ``min(floor(x N_l), N_l - 1)`` as in the torch path, so ``x = 1`` interpolates
  the last cell with weight 1 on its far vertex.

float32 only (table and points); the caller routes other dtypes to torch. Differentiable once (no double
backward; nothing in meshlift needs it). ``triton`` is imported on first
use, never at module import.
"""

from __future__ import annotations

import functools

import torch
from torch.autograd.function import once_differentiable

from meshlift.kernels._launch import on_device

__all__ = ["hash_grid_encode_triton"]

_BLOCK = 128
# Spatial-hash primes pi_1, pi_2 (pi_0 = 1), Eq. 4; products are taken mod 2^32 (T <= 2^30).
_P1, _P2 = 2654435761, 805459861


@functools.lru_cache(maxsize=1)
def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def _fwd(
        x_ptr, emb_ptr, out_ptr, res_ptr, stride_ptr, off_ptr, dense_ptr, n, n_levels, mask_t, prime1, prime2,
        D: tl.constexpr, F: tl.constexpr, BLOCK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK + tl.arange(0, BLOCK)
        m = rows < n
        rows64 = rows.to(tl.int64)
        PRIME1 = prime1.to(tl.uint32)
        PRIME2 = prime2.to(tl.uint32)
        mask_u = mask_t.to(tl.uint32)
        x0 = tl.load(x_ptr + rows64 * D, mask=m, other=0.0)
        if D > 1:
            x1 = tl.load(x_ptr + rows64 * D + 1, mask=m, other=0.0)
        else:
            x1 = x0
        if D > 2:
            x2 = tl.load(x_ptr + rows64 * D + 2, mask=m, other=0.0)
        else:
            x2 = x0
        for lvl in range(n_levels):
            res = tl.load(res_ptr + lvl)
            off = tl.load(off_ptr + lvl)
            dense = tl.load(dense_ptr + lvl) != 0
            s1 = tl.load(stride_ptr + lvl * D + (1 % D)).to(tl.int64)
            s2 = tl.load(stride_ptr + lvl * D + (2 % D)).to(tl.int64)
            p0 = x0 * res
            b0 = tl.minimum(tl.floor(p0), res - 1.0)
            f0 = p0 - b0
            c0 = b0.to(tl.int64)
            p1 = x1 * res
            b1 = tl.minimum(tl.floor(p1), res - 1.0)
            f1 = p1 - b1
            c1 = b1.to(tl.int64)
            p2 = x2 * res
            b2 = tl.minimum(tl.floor(p2), res - 1.0)
            f2 = p2 - b2
            c2 = b2.to(tl.int64)
            acc0 = tl.zeros([BLOCK], dtype=tl.float32)
            acc1 = tl.zeros([BLOCK], dtype=tl.float32)
            acc2 = tl.zeros([BLOCK], dtype=tl.float32)
            acc3 = tl.zeros([BLOCK], dtype=tl.float32)
            for corner in tl.static_range(1 << D):
                k0 = c0 + (corner & 1)
                w = f0 if (corner & 1) else 1.0 - f0
                di = k0
                hi = k0.to(tl.uint32)
                if D > 1:
                    k1 = c1 + ((corner >> 1) & 1)
                    w = w * (f1 if ((corner >> 1) & 1) else 1.0 - f1)
                    di = di + k1 * s1
                    hi = hi ^ (k1.to(tl.uint32) * PRIME1)
                if D > 2:
                    k2 = c2 + ((corner >> 2) & 1)
                    w = w * (f2 if ((corner >> 2) & 1) else 1.0 - f2)
                    di = di + k2 * s2
                    hi = hi ^ (k2.to(tl.uint32) * PRIME2)
                idx = tl.where(dense, di, (hi & mask_u).to(tl.int64)) + off
                base = emb_ptr + idx * F
                acc0 += w * tl.load(base, mask=m, other=0.0)
                if F > 1:
                    acc1 += w * tl.load(base + 1, mask=m, other=0.0)
                if F > 2:
                    acc2 += w * tl.load(base + 2, mask=m, other=0.0)
                if F > 3:
                    acc3 += w * tl.load(base + 3, mask=m, other=0.0)
            obase = out_ptr + rows64 * (n_levels * F) + lvl * F
            tl.store(obase, acc0, mask=m)
            if F > 1:
                tl.store(obase + 1, acc1, mask=m)
            if F > 2:
                tl.store(obase + 2, acc2, mask=m)
            if F > 3:
                tl.store(obase + 3, acc3, mask=m)

    @triton.jit
    def _bwd(
        x_ptr, emb_ptr, g_ptr, gemb_ptr, gx_ptr, res_ptr, stride_ptr, off_ptr, dense_ptr, n, n_levels, mask_t,
        prime1, prime2, D: tl.constexpr, F: tl.constexpr, NEED_X: tl.constexpr, BLOCK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK + tl.arange(0, BLOCK)
        m = rows < n
        rows64 = rows.to(tl.int64)
        PRIME1 = prime1.to(tl.uint32)
        PRIME2 = prime2.to(tl.uint32)
        mask_u = mask_t.to(tl.uint32)
        x0 = tl.load(x_ptr + rows64 * D, mask=m, other=0.0)
        if D > 1:
            x1 = tl.load(x_ptr + rows64 * D + 1, mask=m, other=0.0)
        else:
            x1 = x0
        if D > 2:
            x2 = tl.load(x_ptr + rows64 * D + 2, mask=m, other=0.0)
        else:
            x2 = x0
        gx0 = tl.zeros([BLOCK], dtype=tl.float32)
        gx1 = tl.zeros([BLOCK], dtype=tl.float32)
        gx2 = tl.zeros([BLOCK], dtype=tl.float32)
        for lvl in range(n_levels):
            res = tl.load(res_ptr + lvl)
            off = tl.load(off_ptr + lvl)
            dense = tl.load(dense_ptr + lvl) != 0
            s1 = tl.load(stride_ptr + lvl * D + (1 % D)).to(tl.int64)
            s2 = tl.load(stride_ptr + lvl * D + (2 % D)).to(tl.int64)
            p0 = x0 * res
            b0 = tl.minimum(tl.floor(p0), res - 1.0)
            f0 = p0 - b0
            c0 = b0.to(tl.int64)
            p1 = x1 * res
            b1 = tl.minimum(tl.floor(p1), res - 1.0)
            f1 = p1 - b1
            c1 = b1.to(tl.int64)
            p2 = x2 * res
            b2 = tl.minimum(tl.floor(p2), res - 1.0)
            f2 = p2 - b2
            c2 = b2.to(tl.int64)
            gbase = g_ptr + rows64 * (n_levels * F) + lvl * F
            g0 = tl.load(gbase, mask=m, other=0.0)
            if F > 1:
                g1 = tl.load(gbase + 1, mask=m, other=0.0)
            if F > 2:
                g2 = tl.load(gbase + 2, mask=m, other=0.0)
            if F > 3:
                g3 = tl.load(gbase + 3, mask=m, other=0.0)
            for corner in tl.static_range(1 << D):
                bit0 = corner & 1
                bit1 = (corner >> 1) & 1
                bit2 = (corner >> 2) & 1
                k0 = c0 + bit0
                w0 = f0 if bit0 else 1.0 - f0
                di = k0
                hi = k0.to(tl.uint32)
                w1 = 1.0
                w2 = 1.0
                if D > 1:
                    k1 = c1 + bit1
                    w1 = f1 if bit1 else 1.0 - f1
                    di = di + k1 * s1
                    hi = hi ^ (k1.to(tl.uint32) * PRIME1)
                if D > 2:
                    k2 = c2 + bit2
                    w2 = f2 if bit2 else 1.0 - f2
                    di = di + k2 * s2
                    hi = hi ^ (k2.to(tl.uint32) * PRIME2)
                w = w0 * w1 * w2
                idx = tl.where(dense, di, (hi & mask_u).to(tl.int64)) + off
                ebase = emb_ptr + idx * F
                gebase = gemb_ptr + idx * F
                tl.atomic_add(gebase, w * g0, mask=m)
                if NEED_X:
                    dot = g0 * tl.load(ebase, mask=m, other=0.0)
                if F > 1:
                    tl.atomic_add(gebase + 1, w * g1, mask=m)
                    if NEED_X:
                        dot += g1 * tl.load(ebase + 1, mask=m, other=0.0)
                if F > 2:
                    tl.atomic_add(gebase + 2, w * g2, mask=m)
                    if NEED_X:
                        dot += g2 * tl.load(ebase + 2, mask=m, other=0.0)
                if F > 3:
                    tl.atomic_add(gebase + 3, w * g3, mask=m)
                    if NEED_X:
                        dot += g3 * tl.load(ebase + 3, mask=m, other=0.0)
                if NEED_X:
                    rd = dot * res
                    gx0 += (w1 * w2 * rd) if bit0 else -(w1 * w2 * rd)
                    if D > 1:
                        gx1 += (w0 * w2 * rd) if bit1 else -(w0 * w2 * rd)
                    if D > 2:
                        gx2 += (w0 * w1 * rd) if bit2 else -(w0 * w1 * rd)
        if NEED_X:
            tl.store(gx_ptr + rows64 * D, gx0, mask=m)
            if D > 1:
                tl.store(gx_ptr + rows64 * D + 1, gx1, mask=m)
            if D > 2:
                tl.store(gx_ptr + rows64 * D + 2, gx2, mask=m)

    return triton, _fwd, _bwd


class _HashGridFn(torch.autograd.Function):
    """``(x [N, d] in [0,1], table [T_all, F]) -> [N, L·F]``; level metadata as non-differentiable tensors."""

    @staticmethod
    def forward(ctx, x, table, res, strides, offsets, dense, log2_t):  # type: ignore[override]
        triton, fwd, _ = _kernels()
        n, d = x.shape
        f = table.shape[1]
        n_levels = res.shape[0]
        out = torch.empty(n, n_levels * f, dtype=table.dtype, device=table.device)
        if n:
            grid = (triton.cdiv(n, _BLOCK),)
            with on_device(x.device):
                fwd[grid](x, table, out, res, strides, offsets, dense, n, n_levels, (1 << log2_t) - 1, _P1, _P2,
                          D=d, F=f, BLOCK=_BLOCK)
        ctx.save_for_backward(x, table, res, strides, offsets, dense)
        ctx.log2_t = log2_t
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        triton, _, bwd = _kernels()
        x, table, res, strides, offsets, dense = ctx.saved_tensors
        need_x = ctx.needs_input_grad[0]
        n, d = x.shape
        f = table.shape[1]
        grad = grad.contiguous().to(table.dtype)
        g_table = torch.zeros_like(table)
        g_x = torch.empty_like(x) if need_x else x.new_empty(1)
        if n:
            grid = (triton.cdiv(n, _BLOCK),)
            with on_device(x.device):
                bwd[grid](x, table, grad, g_table, g_x, res, strides, offsets, dense, n, res.shape[0],
                          (1 << ctx.log2_t) - 1, _P1, _P2, D=d, F=f, NEED_X=need_x, BLOCK=_BLOCK)
        return (g_x if need_x else None), g_table, None, None, None, None, None


def hash_grid_encode_triton(
    x: torch.Tensor,
    table: torch.Tensor,
    resolutions: torch.Tensor,
    strides: torch.Tensor,
    offsets: torch.Tensor,
    dense: torch.Tensor,
    log2_hashmap_size: int,
) -> torch.Tensor:
    """Encode ``x`` with the Triton kernels (the caller, ``HashGridEncoding``, validates and clamps).

    Args:
        x: ``[N, d]`` float32 in [0, 1], d in 1..3.
        table: ``[sum_l T_l, F]`` float32 embedding table (all levels concatenated), F in 1..4.
        resolutions: ``[L]`` float32 N_l. strides: ``[L, d]`` int64 dense strides ``(N_l + 1)^i``.
        offsets: ``[L]`` int64 first row of each level in ``table``. dense: ``[L]`` int32, 1 = dense level.
        log2_hashmap_size: log2 T of the hashed levels.

    Returns:
        ``[N, L·F]`` float32, differentiable with respect to ``x`` and ``table``.
    """
    return _HashGridFn.apply(x.contiguous(), table.contiguous(), resolutions.contiguous(), strides.contiguous(),
                             offsets.contiguous(), dense.contiguous(), int(log2_hashmap_size))
