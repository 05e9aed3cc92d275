"""Per-corner tangent frames (glTF ``TANGENT``, MikkTSpace-style) in Triton: two launches forward, two backward.

Specification (the reference twin, unchanged): :func:`meshlift.geometry.mesh_ops.tangent_frames` (glTF 2.0
§3.7.2.1; Mikkelsen 2008, "Simulation of Wrinkled Surfaces Revisited"; Lengyel 2001), with the same corner
grouping (:func:`~meshlift.geometry.mesh_ops.tangent_grouping`, cached while the index lists are fixed, as in
pass 2 of the surface method) and ``safe_normalize(x) = x · rsqrt(max(|x|², 1e-20))``:

- ``tangents_face_fwd`` (one lane per face): ``T_f = ∂p/∂u``, ``usable = |den| > DEGENERATE_UV_AREA``; per
  corner the unit normal ``n̂``, ``t_c = normalize(T_f − (T_f·n̂) n̂)``, the corner angle
  ``θ = atan2(|â × b̂|, â · b̂)`` of its normalised edges (a Cephes-style ``atan``, ~1e-7 relative), and
  ``acc[group] += t_c · θ · usable`` (``tl.atomic_add``);
- ``tangents_group_fwd`` (per group): the group normal, the handedness ``w = +1`` where the UV area
  ``den < 0`` (``−1`` else; ``+1`` for an empty group), the fixed-axis fallback where ``|acc|² ≤ 1e-20``, the
  final Gram–Schmidt + normalisation, and the ``[K, 4]`` row;
- backward: ``tangents_group_bwd`` (per group: the Gram–Schmidt and the normalisations, the fallback's
  gradient as a function of the normal, ``d acc``) then ``tangents_face_bwd`` (per face: through ``t_c``,
  the corner normals, ``T_f`` and the corner angles, ``dθ = (c ds − s dc)/(s² + c²)``), scattered into
  ``d v_pos`` and ``d v_nrm`` by atomic adds (summation order differs from torch's in the last bits).

No gradient reaches ``v_tex`` here: callers use this path only when ``v_tex`` does not require grad (pass 2's
case) and the reference otherwise. Counted on a 10k-face torus under the interpreter (one call, forward +
backward, the grouping cached; tests/test_kernels_tangents_triton.py ``test_tangent_frames_triton_op_counts``):
the reference records 108 autograd nodes and dispatches 181 aten ops forward and 317 backward; this path
1 autograd node, 4 ops forward (2 allocations + 2 kernels) and 5 backward (3 allocations + 2 kernels), the
grouping look-up included (int64 index lists; an int32 face list adds its int64 copy in the range check).
``triton`` is imported on first use, never at module import.
"""

from __future__ import annotations

import functools

import torch
from torch.autograd.function import once_differentiable

from meshlift.errors import MeshError
from meshlift.kernels._launch import grid_1d, on_device

__all__ = ["tangent_frames_triton"]

_BLOCK = 128
_grid = functools.partial(grid_1d, block=_BLOCK)  # one program per _BLOCK elements


class _TangentsFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v_pos, v_nrm, v_tex, tri, ttri, ntri, gi_t, first):  # type: ignore[override]
        from meshlift.kernels import _tangents_triton_kernels as k

        T, K = tri.shape[0], first.shape[0]
        acc = torch.zeros(K, 3, dtype=v_pos.dtype, device=v_pos.device)
        out = torch.empty(K, 4, dtype=v_pos.dtype, device=v_pos.device)
        with on_device(v_pos.device):
            k.tangents_face_fwd[_grid(T)](v_pos, v_tex, v_nrm, tri, ttri, ntri, gi_t, acc, T, BLOCK=_BLOCK)
            k.tangents_group_fwd[_grid(K)](v_tex, v_nrm, ttri, ntri, first, acc, out, K, BLOCK=_BLOCK)
        ctx.save_for_backward(v_pos, v_nrm, v_tex, tri, ttri, ntri, gi_t, first, acc)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g_out):  # type: ignore[override]
        from meshlift.kernels import _tangents_triton_kernels as k

        v_pos, v_nrm, v_tex, tri, ttri, ntri, gi_t, first, acc = ctx.saved_tensors
        T, K = tri.shape[0], first.shape[0]
        g_acc = torch.empty_like(acc)
        g_pos = torch.zeros_like(v_pos)
        g_nrm = torch.zeros_like(v_nrm)
        with on_device(v_pos.device):
            k.tangents_group_bwd[_grid(K)](v_tex, v_nrm, ttri, ntri, first, acc, g_out.contiguous(), g_acc, g_nrm, K,
                                           BLOCK=_BLOCK)
            k.tangents_face_bwd[_grid(T)](v_pos, v_tex, v_nrm, tri, ttri, ntri, gi_t, g_acc, g_pos, g_nrm, T,
                                          BLOCK=_BLOCK)
        return g_pos, g_nrm, None, None, None, None, None, None


def _index(name: str, idx: torch.Tensor, n: int, what: str) -> torch.Tensor:
    from meshlift.structures.index_check import index_range_ok

    ok, _, _ = index_range_ok(idx, n)  # cached per tensor: one read-back while the list is fixed
    if not ok:
        raise MeshError(f"tangent_frames_triton: {name} has entries outside [0, {n}) ({what}); fix the index list")
    return idx.contiguous()


def tangent_frames_triton(
    v_pos: torch.Tensor,
    t_pos_idx: torch.Tensor,
    v_tex: torch.Tensor,
    t_tex_idx: torch.Tensor,
    v_nrm: torch.Tensor,
    t_nrm_idx: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`meshlift.geometry.mesh_ops.tangent_frames` in two kernels forward and two backward.

    Args:
        v_pos: ``[V, 3]`` float32 positions (differentiable).
        t_pos_idx: ``[T, 3]`` int32/int64 faces.
        v_tex: ``[Vt, 2]`` float32 UVs (internal glTF origin, docs/conventions.md §7); must not require grad.
        t_tex_idx: ``[T, 3]`` int32/int64 UV indices.
        v_nrm: ``[Vn, 3]`` float32 normals (differentiable; normalised here as in the reference).
        t_nrm_idx: ``[T, 3]`` int32/int64 normal indices (default ``t_pos_idx``).

    Returns:
        ``(v_tng [K, 4] float32, t_tng_idx [T, 3] int64)``: unit tangents in xyz, handedness ±1 in w (no
        gradient), and per-corner indices into them: the same values and the same index tensor as the
        reference (whose cached grouping this reuses).

    Raises:
        MeshError: bad shapes or indices (as the reference), a dtype other than float32, or ``v_tex``
            requiring grad (use the reference, which differentiates in ``v_tex``).
    """
    from meshlift.geometry import mesh_ops

    if v_pos.dtype != torch.float32 or v_nrm.dtype != torch.float32 or v_tex.dtype != torch.float32:
        raise MeshError("tangent_frames_triton: v_pos, v_nrm and v_tex must be float32; use mesh_ops.tangent_frames")
    if v_tex.requires_grad:
        raise MeshError("tangent_frames_triton: v_tex requires grad, which this path does not give; use "
                        "mesh_ops.tangent_frames")
    if t_pos_idx.ndim == 2 and t_pos_idx.shape[0] == 0:
        return mesh_ops.tangent_frames(v_pos, t_pos_idx, v_tex, t_tex_idx, v_nrm, t_nrm_idx)
    ttri = _index("t_tex_idx", t_tex_idx, v_tex.shape[0], "UV indices")  # the kernels read them unchecked
    ntri = None if t_nrm_idx is None else _index("t_nrm_idx", t_nrm_idx, v_nrm.shape[0], "normal indices")
    _, _, first, gi_t = mesh_ops.tangent_grouping(v_pos, t_pos_idx, v_tex, t_tex_idx, v_nrm, t_nrm_idx)
    tri = t_pos_idx.contiguous()  # its range was checked by tangent_grouping
    ntri = tri if ntri is None else ntri
    out = _TangentsFn.apply(v_pos.contiguous(), v_nrm.contiguous(), v_tex.contiguous(), tri, ttri, ntri, gi_t, first)
    return out, gi_t
