"""Differentiable per-mesh quantities: face/vertex normals, tangents, edges, uniform Laplacian.

Conventions: faces counter-clockwise seen from outside, so ``(v1 − v0) × (v2 − v0)`` is the outward
normal (docs/conventions.md §3); UVs use the internal glTF origin (§7).
"""

from __future__ import annotations

from typing import Optional

import torch

from meshlift.errors import MeshError

#: Squared length below which a normal/tangent counts as degenerate.
DEGENERATE_SQ_LENGTH = 1e-20


def _check(v_pos: torch.Tensor, t_pos_idx: torch.Tensor) -> torch.Tensor:
    if v_pos.ndim not in (2, 3) or v_pos.shape[-1] != 3:
        raise MeshError(f"v_pos must be [V, 3] or [B, V, 3], got {tuple(v_pos.shape)}")
    if t_pos_idx.ndim != 2 or t_pos_idx.shape[1] != 3:
        raise MeshError(f"t_pos_idx must be [T, 3], got {tuple(t_pos_idx.shape)}")
    t = t_pos_idx.to(torch.int64)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= v_pos.shape[-2]):
        raise MeshError(f"t_pos_idx indexes vertex {int(t.max())} but there are {v_pos.shape[-2]} vertices")
    return t


def safe_normalize(x: torch.Tensor, eps: float = DEGENERATE_SQ_LENGTH) -> torch.Tensor:
    """``x / |x|`` over the last axis, with ``|x|²`` floored at ``eps`` (no NaN for zero vectors)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True).clamp_min(eps))


def face_normals(v_pos: torch.Tensor, t_pos_idx: torch.Tensor, normalize: bool = True) -> torch.Tensor:
    """Per-face normals.

    Args:
        v_pos: ``[V, 3]`` or ``[B, V, 3]`` positions.
        t_pos_idx: ``[T, 3]`` int triangles (counter-clockwise from outside).
        normalize: unit length if True, else the raw cross product (length = 2 × triangle area).

    Returns:
        ``[T, 3]`` (or ``[B, T, 3]``) ``(v1 − v0) × (v2 − v0)``, optionally normalised (0-area faces give 0).
    """
    t = _check(v_pos, t_pos_idx)
    v0, v1, v2 = (v_pos[..., t[:, k], :] for k in range(3))
    n = torch.linalg.cross(v1 - v0, v2 - v0, dim=-1)
    return safe_normalize(n) if normalize else n


def vertex_normals(v_pos: torch.Tensor, t_pos_idx: torch.Tensor) -> torch.Tensor:
    """Area-weighted vertex normals (sum of adjacent faces' cross products, normalised).

    Args:
        v_pos: ``[V, 3]`` or ``[B, V, 3]``; t_pos_idx: ``[T, 3]``.

    Returns:
        ``[V, 3]`` (or ``[B, V, 3]``) unit normals; a vertex with no (non-degenerate) face gets +z, as
        nvdiffrec does (``Mesh.auto_normals``).
    """
    t = _check(v_pos, t_pos_idx)
    fn = face_normals(v_pos, t, normalize=False)  # area-weighted
    acc = torch.zeros_like(v_pos)
    for k in range(3):
        acc = acc.index_add(-2, t[:, k], fn)
    ok = (acc * acc).sum(-1, keepdim=True) > DEGENERATE_SQ_LENGTH
    z = torch.zeros_like(acc)
    z[..., 2] = 1
    return safe_normalize(torch.where(ok, acc, z))


def vertex_tangents(
    v_pos: torch.Tensor,
    t_pos_idx: torch.Tensor,
    v_tex: torch.Tensor,
    t_tex_idx: torch.Tensor,
    v_nrm: torch.Tensor,
    t_nrm_idx: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Per-vertex tangents from UVs (nvdiffrec ``compute_tangents``; Lengyel 2001, "Computing Tangent
    Space Basis Vectors for an Arbitrary Mesh").

    Per face, the tangent is the object-space direction of increasing ``u``:
    ``T = (Δp₁ Δv₂ − Δp₂ Δv₁) / (Δu₁ Δv₂ − Δu₂ Δv₁)`` (denominator kept away from 0 with its sign); the
    face tangents are averaged at each normal index, normalised, and made orthogonal to the normal
    (Gram–Schmidt).

    Args:
        v_pos: ``[V, 3]``; t_pos_idx: ``[T, 3]``.
        v_tex: ``[Vt, 2]`` UVs (docs/conventions.md §7); t_tex_idx: ``[T, 3]``.
        v_nrm: ``[Vn, 3]`` unit normals; t_nrm_idx: ``[T, 3]`` (default ``t_pos_idx``).

    Returns:
        ``[Vn, 3]`` unit tangents, indexed like ``v_nrm``.
    """
    t = _check(v_pos, t_pos_idx)
    if v_pos.ndim != 2:
        raise MeshError("vertex_tangents takes one mesh: v_pos [V, 3]")
    if t_tex_idx.shape != t.shape or v_tex.ndim != 2 or v_tex.shape[1] != 2:
        raise MeshError("vertex_tangents needs v_tex [Vt, 2] and t_tex_idx [T, 3] matching t_pos_idx")
    tn = t if t_nrm_idx is None else t_nrm_idx.to(torch.int64)
    tt = t_tex_idx.to(torch.int64)
    p = [v_pos[t[:, k]] for k in range(3)]
    uv = [v_tex[tt[:, k]] for k in range(3)]
    duv1, duv2 = uv[1] - uv[0], uv[2] - uv[0]
    dp1, dp2 = p[1] - p[0], p[2] - p[0]
    nom = dp1 * duv2[:, 1:2] - dp2 * duv1[:, 1:2]
    den = duv1[:, 0:1] * duv2[:, 1:2] - duv1[:, 1:2] * duv2[:, 0:1]
    den = torch.where(den > 0, den.clamp(min=1e-6), den.clamp(max=-1e-6))
    tang = nom / den
    acc = torch.zeros_like(v_nrm)
    cnt = torch.zeros_like(v_nrm[:, :1])
    for k in range(3):
        acc = acc.index_add(0, tn[:, k], tang)
        cnt = cnt.index_add(0, tn[:, k], torch.ones_like(tang[:, :1]))
    tan = safe_normalize(acc / cnt.clamp_min(1))
    return safe_normalize(tan - (tan * v_nrm).sum(-1, keepdim=True) * v_nrm)


def edges(t_pos_idx: torch.Tensor) -> torch.Tensor:
    """Unique undirected edges ``[E, 2]`` int64 (``i < j``, sorted lexicographically)."""
    t = t_pos_idx.to(torch.int64)
    e = torch.cat([t[:, [0, 1]], t[:, [1, 2]], t[:, [2, 0]]])
    e = torch.sort(e, dim=1).values
    e = e[e[:, 0] != e[:, 1]]
    return torch.unique(e, dim=0)


def edge_lengths(v_pos: torch.Tensor, edge_idx: torch.Tensor) -> torch.Tensor:
    """``[E]`` (or ``[B, E]``) lengths of edges ``[E, 2]``."""
    return (v_pos[..., edge_idx[:, 0], :] - v_pos[..., edge_idx[:, 1], :]).norm(dim=-1)


def laplacian_uniform(num_vertices: int, t_pos_idx: torch.Tensor) -> torch.Tensor:
    """Uniform graph Laplacian ``L = D − A`` as a sparse COO ``[V, V]`` float32 tensor.

    ``A`` is the vertex adjacency of the unique edges and ``D`` its degree diagonal (Sorkine 2005,
    "Laplacian Mesh Processing"; the form used by "Large Steps in Inverse Rendering", Nicolet et al. 2021).
    """
    e = edges(t_pos_idx)
    dev = t_pos_idx.device
    ii = torch.cat([e[:, 0], e[:, 1]])
    jj = torch.cat([e[:, 1], e[:, 0]])
    deg = torch.bincount(ii, minlength=num_vertices).to(torch.float32)
    diag = torch.arange(num_vertices, device=dev)
    idx = torch.cat([torch.stack([ii, jj]), torch.stack([diag, diag])], 1)
    val = torch.cat([-torch.ones(ii.numel(), device=dev), deg])
    return torch.sparse_coo_tensor(idx, val, (num_vertices, num_vertices), check_invariants=False).coalesce()


def laplacian_smoothness_loss(v_pos: torch.Tensor, t_pos_idx: torch.Tensor) -> torch.Tensor:
    """Uniform Laplacian smoothness: ``mean over vertices and xyz of (mean of neighbours − v)²``.

    On a closed manifold this equals nvdiffrec's ``laplace_regularizer_const``. Vertices without
    neighbours contribute 0. Differentiable w.r.t. ``v_pos`` (``[V, 3]`` or ``[B, V, 3]``); scalar.
    """
    t = _check(v_pos, t_pos_idx)
    e = edges(t)
    V = v_pos.shape[-2]
    ii = torch.cat([e[:, 0], e[:, 1]])
    jj = torch.cat([e[:, 1], e[:, 0]])
    diff = v_pos[..., jj, :] - v_pos[..., ii, :]
    acc = torch.zeros_like(v_pos).index_add(-2, ii, diff)
    deg = torch.bincount(ii, minlength=V).to(v_pos.dtype).clamp_min(1).unsqueeze(-1)
    return ((acc / deg) ** 2).mean()


__all__ = [
    "safe_normalize",
    "face_normals",
    "vertex_normals",
    "vertex_tangents",
    "edges",
    "edge_lengths",
    "laplacian_uniform",
    "laplacian_smoothness_loss",
    "DEGENERATE_SQ_LENGTH",
]
