"""Face and area-weighted vertex normals of a triangle mesh in Triton: two launches forward, two backward.

Specification (the reference twins, unchanged): :func:`meshlift.geometry.mesh_ops.face_normals` (unit
``(v1 − v0) × (v2 − v0)``) and :func:`~meshlift.geometry.mesh_ops.vertex_normals` (the sum of the adjacent
faces' unnormalised cross products, normalised; +z where that sum is below ``DEGENERATE_SQ_LENGTH``), with
``safe_normalize(x) = x · rsqrt(max(|x|², 1e-20))``. The render step needs both every step (pass 1's mesh changes
every step; pass 2's vertices move): the torch pair is 26 ops forward and ~48 backward; here

- ``normals_face_fwd`` (one lane per face): the cross product ``c``, the unit face normal, and ``c`` added to
  its three vertices' accumulators (``tl.atomic_add``); ``normals_vertex_fwd`` (per vertex): the +z rule and
  the normalisation;
- backward: ``normals_vertex_bwd`` (per vertex, the normalisation's gradient ``(g − u (g·u)) · s``, 0 at a
  +z vertex), then ``normals_face_bwd`` (per face): ``dc`` = the three accumulator gradients + the unit face
  normal's, ``d e1 = e2 × dc``, ``d e2 = dc × e1``, scattered onto ``v1``, ``v2`` and ``−(d e1 + d e2)`` onto
  ``v0`` (atomic adds: the summation order differs from torch's ``index_add`` in the last bits).

``[V, 3]`` float32 positions only (no batch axis); int32/int64 faces. Tested against the twins in
tests/test_kernels_normals_triton.py. ``triton`` is imported on first use, never at module import.
"""

from __future__ import annotations

import functools

import torch
from torch.autograd.function import once_differentiable

from meshlift.kernels._launch import grid_1d, on_device

__all__ = ["mesh_normals_triton"]

_BLOCK = 128
_grid = functools.partial(grid_1d, block=_BLOCK)  # one program per _BLOCK elements


class _NormalsFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v_pos, tri):  # type: ignore[override]
        from meshlift.kernels import _normals_triton_kernels as k

        T, V = tri.shape[0], v_pos.shape[0]
        face_n = torch.empty(T, 3, dtype=v_pos.dtype, device=v_pos.device)
        acc = torch.zeros_like(v_pos)
        vn = torch.empty_like(v_pos)
        with on_device(v_pos.device):
            if T:
                k.normals_face_fwd[_grid(T)](v_pos, tri, face_n, acc, T, BLOCK=_BLOCK)
            if V:
                k.normals_vertex_fwd[_grid(V)](acc, vn, V, BLOCK=_BLOCK)
        ctx.save_for_backward(v_pos, tri, acc)
        return face_n, vn

    @staticmethod
    @once_differentiable
    def backward(ctx, g_fn, g_vn):  # type: ignore[override]
        from meshlift.kernels import _normals_triton_kernels as k

        v_pos, tri, acc = ctx.saved_tensors
        T, V = tri.shape[0], v_pos.shape[0]
        g_pos = torch.zeros_like(v_pos)
        g_acc = torch.zeros_like(v_pos)
        with on_device(v_pos.device):
            if g_vn is not None and V:
                k.normals_vertex_bwd[_grid(V)](acc, g_vn.contiguous(), g_acc, V, BLOCK=_BLOCK)
            if T:
                k.normals_face_bwd[_grid(T)](v_pos, tri, g_fn.contiguous() if g_fn is not None else g_acc, g_acc,
                                             g_pos, T, FACE_GRAD=g_fn is not None, BLOCK=_BLOCK)
        return g_pos, None


def mesh_normals_triton(v_pos: torch.Tensor, t_pos_idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(face_normals(v_pos, t), vertex_normals(v_pos, t))`` of ``geometry.mesh_ops`` in two kernels.

    Args:
        v_pos: ``[V, 3]`` float32 positions (differentiable).
        t_pos_idx: ``[T, 3]`` int32/int64 faces with indices in ``[0, V)`` (the caller checks the range).

    Returns:
        ``face_n [T, 3]`` unit face normals (0 for zero-area faces) and ``v_nrm [V, 3]`` unit area-weighted
        vertex normals (+z for a vertex without a non-degenerate face), float32.
    """
    return _NormalsFn.apply(v_pos.contiguous(), t_pos_idx.contiguous())
