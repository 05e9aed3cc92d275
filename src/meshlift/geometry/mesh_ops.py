"""Differentiable per-mesh quantities: face/vertex normals, tangents, edges, uniform Laplacian.

Conventions: faces counter-clockwise seen from outside, so ``(v1 − v0) × (v2 − v0)`` is the outward
normal (docs/conventions.md §3); UVs use the internal glTF origin (§7). The normals and tangent frames
that meshlift writes into files and shades with are :func:`smooth_vertex_normals` and
:func:`tangent_frames` (docs/conventions.md §13).
"""

from __future__ import annotations

import math
from typing import Literal, Optional

import numpy as np
import torch

from meshlift.errors import MeshError
from meshlift.structures.index_check import index_range_ok

#: Squared length below which a normal/tangent counts as degenerate.
DEGENERATE_SQ_LENGTH = 1e-20

#: Dihedral angle (degrees between adjacent face normals) above which :func:`smooth_vertex_normals`
#: keeps an edge hard (splits the normal). 60° keeps the 90° edges of boxes and machined parts hard
#: while the small facet-to-facet angles of smooth scanned or reconstructed surfaces stay smooth.
CREASE_ANGLE_DEG = 60.0

#: |UV-space area| (in UV units²) below which a face has no usable UV derivatives for tangents.
DEGENERATE_UV_AREA = 1e-14


def _check(v_pos: torch.Tensor, t_pos_idx: torch.Tensor) -> torch.Tensor:
    if v_pos.ndim not in (2, 3) or v_pos.shape[-1] != 3:
        raise MeshError(f"v_pos must be [V, 3] or [B, V, 3], got {tuple(v_pos.shape)}")
    if t_pos_idx.ndim != 2 or t_pos_idx.shape[1] != 3:
        raise MeshError(f"t_pos_idx must be [T, 3], got {tuple(t_pos_idx.shape)}")
    t = t_pos_idx.to(torch.int64)
    n_v = v_pos.shape[-2]
    ok, lo, hi = index_range_ok(t_pos_idx, n_v)  # read back once per face list (a host sync on CUDA)
    if not ok:
        lo, hi = (int(v) for v in torch.stack([t.min(), t.max()]).tolist())
        raise MeshError(f"t_pos_idx indexes vertex {hi if hi >= n_v else lo} but there are {n_v} vertices")
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

    No handedness and averaged per *normal* index (so across UV seams): kept for nvdiffrec parity. The
    renderer and the writers use :func:`tangent_frames` (glTF/MikkTSpace frame, docs/conventions.md §13).

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


def _corner_angles(v_pos: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``[T, 3]`` interior angle of every triangle corner (radians; 0 for degenerate corners)."""
    p = [v_pos[t[:, k]] for k in range(3)]
    out = []
    for k in range(3):
        a = safe_normalize(p[(k + 1) % 3] - p[k])
        b = safe_normalize(p[(k + 2) % 3] - p[k])
        # atan2(|a x b|, a.b) is accurate near 0 and pi, unlike acos
        out.append(torch.atan2(torch.linalg.cross(a, b, dim=-1).norm(dim=-1), (a * b).sum(-1)))
    return torch.stack(out, 1)


def _components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected-component label of each of ``n`` nodes linked by the pairs ``(a[i], b[i])``."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    g = coo_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n, n))
    return connected_components(g, directed=False)[1].astype(np.int64)


def smooth_vertex_normals(
    v_pos: torch.Tensor,
    t_pos_idx: torch.Tensor,
    t_tex_idx: Optional[torch.Tensor] = None,
    *,
    crease_angle_deg: float = CREASE_ANGLE_DEG,
    weighting: Literal["area", "angle"] = "area",
    split_at_uv_seams: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Smooth per-corner vertex normals that keep hard edges hard: the normals meshlift writes to files.

    Around every vertex, the corners of its faces are grouped into *smoothing fans*: two faces sharing an
    edge at the vertex are in the same fan when the angle between their face normals is at most
    ``crease_angle_deg`` (and, with ``split_at_uv_seams``, when they also share the edge's UVs). Each fan
    gets one normal, the normalised weighted sum of its faces' normals (``weighting="area"``: weight =
    face area, i.e. the sum of raw cross products, as :func:`vertex_normals` and nvdiffrec's
    ``auto_normals``, so a smooth mesh gets exactly those normals; ``"angle"``: weight = the corner's
    interior angle, Thürmer & Wüthrich 1998, "Computing Vertex Normals from Polygonal Meshes").
    This is the auto-smooth rule of Blender and three.js' ``toCreasedNormals``.

    The fan grouping is discrete (numpy/scipy, computed on the CPU); the normals are differentiable in
    ``v_pos``.

    Args:
        v_pos: ``[V, 3]`` float positions.
        t_pos_idx: ``[T, 3]`` int triangles (counter-clockwise from outside, conventions §3).
        t_tex_idx: ``[T, 3]`` int UV indices (only used with ``split_at_uv_seams``).
        crease_angle_deg: dihedral angle in degrees above which an edge stays hard; 180 smooths everything
            (one normal per vertex), 0 gives flat shading.
        weighting: ``"area"`` or ``"angle"`` (see above).
        split_at_uv_seams: also split normals where the UVs are discontinuous. Off by default: a UV seam
            is not a crease, and splitting there shows every chart border as a lighting seam.

    Returns:
        ``(v_nrm [N, 3], t_nrm_idx [T, 3] int64)``: unit normals (dtype/device of ``v_pos``) and per-corner
        indices into them. A fan whose faces are all degenerate gets +z (as :func:`vertex_normals`).

    Raises:
        MeshError: bad shapes or indices, unknown ``weighting``, or ``t_tex_idx`` missing / of another
            shape with ``split_at_uv_seams``.
    """
    t = _check(v_pos, t_pos_idx)
    if v_pos.ndim != 2:
        raise MeshError("smooth_vertex_normals takes one mesh: v_pos [V, 3]")
    if weighting not in ("area", "angle"):
        raise MeshError(f"smooth_vertex_normals: weighting must be 'area' or 'angle', got {weighting!r}")
    if split_at_uv_seams and (t_tex_idx is None or tuple(t_tex_idx.shape) != tuple(t.shape)):
        raise MeshError("smooth_vertex_normals: split_at_uv_seams needs t_tex_idx [T, 3] matching t_pos_idx")
    T = t.shape[0]
    if T == 0:
        return v_pos.new_zeros(0, 3), t.new_zeros(0, 3)
    fn_raw = face_normals(v_pos, t, normalize=False)  # [T, 3], |.| = 2 area
    fn_unit = safe_normalize(fn_raw.detach()).cpu().double().numpy()
    tn = t.cpu().numpy()
    tt = None if t_tex_idx is None else t_tex_idx.to(torch.int64).cpu().numpy()

    # Half-edges (face f, corner k): edge from tn[f, k] to tn[f, k+1]. Opposite half-edges pair faces.
    f_idx = np.repeat(np.arange(T), 3)
    k_idx = np.tile(np.arange(3), T)
    a = tn[f_idx, k_idx]
    b = tn[f_idx, (k_idx + 1) % 3]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    order = np.lexsort((hi, lo))
    lo_s, hi_s = lo[order], hi[order]
    same = (lo_s[1:] == lo_s[:-1]) & (hi_s[1:] == hi_s[:-1])
    # every pair of half-edges of one undirected edge (consecutive after sorting; non-manifold edges
    # with more than two faces link each face to the next one around the sorted list)
    i1, i2 = order[:-1][same], order[1:][same]
    f1, k1, f2 = f_idx[i1], k_idx[i1], f_idx[i2]
    cos_thr = math.cos(math.radians(min(max(float(crease_angle_deg), 0.0), 180.0)))
    cosang = (fn_unit[f1] * fn_unit[f2]).sum(1)
    smooth = cosang >= cos_thr - 1e-12
    if crease_angle_deg >= 180.0:
        smooth[:] = True
    # corners of face f1 at the edge's two ends, and the matching corners of face f2
    c1a, c1b = f1 * 3 + k1, f1 * 3 + (k1 + 1) % 3
    va = tn[f1, k1]
    # in f2 find which corner holds va / the other end
    f2_rows = tn[f2]  # [P, 3]
    j_a = np.argmax(f2_rows == va[:, None], axis=1)
    j_b = np.argmax(f2_rows == tn[f1, (k1 + 1) % 3][:, None], axis=1)
    c2a, c2b = f2 * 3 + j_a, f2 * 3 + j_b
    if split_at_uv_seams:
        smooth_a = smooth & (tt.reshape(-1)[c1a] == tt.reshape(-1)[c2a])
        smooth_b = smooth & (tt.reshape(-1)[c1b] == tt.reshape(-1)[c2b])
    else:
        smooth_a = smooth_b = smooth
    link_a = np.concatenate([c1a[smooth_a], c1b[smooth_b]])
    link_b = np.concatenate([c2a[smooth_a], c2b[smooth_b]])
    labels = _components(3 * T, link_a, link_b)
    # a fan never spans two vertices: key = (vertex, component)
    _, group = np.unique(np.stack([tn.reshape(-1), labels], 1), axis=0, return_inverse=True)
    group = group.reshape(-1)
    n_groups = int(group.max()) + 1

    if weighting == "area":
        w_fn = fn_raw[:, None, :].expand(T, 3, 3)
    else:
        w_fn = safe_normalize(fn_raw)[:, None, :] * _corner_angles(v_pos, t)[..., None]
    gi = torch.from_numpy(group).to(v_pos.device)
    acc = torch.zeros(n_groups, 3, dtype=v_pos.dtype, device=v_pos.device).index_add(0, gi, w_fn.reshape(-1, 3))
    ok = (acc * acc).sum(-1, keepdim=True) > DEGENERATE_SQ_LENGTH
    z = torch.zeros_like(acc)
    z[:, 2] = 1
    v_nrm = safe_normalize(torch.where(ok, acc, z))
    return v_nrm, gi.reshape(T, 3)


def tangent_frames(
    v_pos: torch.Tensor,
    t_pos_idx: torch.Tensor,
    v_tex: torch.Tensor,
    t_tex_idx: torch.Tensor,
    v_nrm: torch.Tensor,
    t_nrm_idx: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-corner MikkTSpace-style tangents with handedness, as glTF's ``TANGENT`` attribute stores them.

    glTF 2.0 (§3.7.2.1 and the normal-texture definition): ``TANGENT`` is ``(x, y, z, w)`` with ``w = ±1``
    and bitangent ``B = w · (N × T)``; the normal map's +X runs along increasing u and its +Y towards the
    top of the image, i.e. along increasing *file-space* v (docs/conventions.md §7, §13). The same frame is
    what MikkTSpace (Mikkelsen 2008, "Simulation of Wrinkled Surfaces Revisited"; Blender, Unity, Unreal)
    computes from bottom-left-origin UVs, and what three.js uses when TANGENT is present.

    Per face: ``T_f = ∂p/∂u`` (Lengyel 2001) and the handedness ``w_f = +1`` when the face's UV triangle has
    the same orientation as the face in (u, v_file) space (signed UV area > 0 with ``v_file = 1 − v``),
    else −1 (a mirrored chart). Corners are grouped by ``(position, uv, normal, w)`` — so mirrored and
    unmirrored faces never share a tangent — and in each group the face tangents, projected onto the
    corner normal's tangent plane and normalised, are summed with the corner angle as weight (MikkTSpace's
    weighting), then normalised and Gram–Schmidt orthogonalised against the normal. Faces with a
    degenerate UV triangle contribute nothing; a group with no usable face gets a tangent orthogonal to the
    normal built from a fixed axis, ``w = +1``.

    Differentiable in ``v_pos``, ``v_tex`` and ``v_nrm`` (the grouping is discrete).

    Args:
        v_pos: ``[V, 3]``; t_pos_idx: ``[T, 3]``.
        v_tex: ``[Vt, 2]`` UVs (internal glTF origin, conventions §7); t_tex_idx: ``[T, 3]``.
        v_nrm: ``[Vn, 3]`` unit normals; t_nrm_idx: ``[T, 3]`` (default ``t_pos_idx``).

    Returns:
        ``(v_tng [K, 4], t_tng_idx [T, 3] int64)``: unit tangents in xyz, handedness ±1 in w, and
        per-corner indices into them. Interpolating ``v_tng`` over a face keeps ``w`` exactly ±1 (the
        three corners of a face share its handedness).

    Raises:
        MeshError: bad shapes or indices.
    """
    t = _check(v_pos, t_pos_idx)
    if v_pos.ndim != 2:
        raise MeshError("tangent_frames takes one mesh: v_pos [V, 3]")
    if t_tex_idx is None or tuple(t_tex_idx.shape) != tuple(t.shape) or v_tex.ndim != 2 or v_tex.shape[1] != 2:
        raise MeshError("tangent_frames needs v_tex [Vt, 2] and t_tex_idx [T, 3] matching t_pos_idx")
    tn = t if t_nrm_idx is None else t_nrm_idx.to(torch.int64)
    if v_nrm.ndim != 2 or v_nrm.shape[1] != 3 or tuple(tn.shape) != tuple(t.shape):
        raise MeshError("tangent_frames needs v_nrm [Vn, 3] and t_nrm_idx [T, 3] matching t_pos_idx")
    tt = t_tex_idx.to(torch.int64)
    T = t.shape[0]
    if T == 0:
        return v_pos.new_zeros(0, 4), t.new_zeros(0, 3)
    v_tex_in = v_tex
    v_tex = v_tex.to(v_pos.dtype)
    v_nrm = v_nrm.to(v_pos.dtype)
    p = [v_pos[t[:, k]] for k in range(3)]
    uv = [v_tex[tt[:, k]] for k in range(3)]
    duv1, duv2 = uv[1] - uv[0], uv[2] - uv[0]
    dp1, dp2 = p[1] - p[0], p[2] - p[0]
    den = duv1[:, 0:1] * duv2[:, 1:2] - duv1[:, 1:2] * duv2[:, 0:1]  # signed UV area x2, internal v (down)
    usable = den.abs() > DEGENERATE_UV_AREA
    den_safe = torch.where(usable, den, torch.ones_like(den))
    tang_f = (dp1 * duv2[:, 1:2] - dp2 * duv1[:, 1:2]) / den_safe  # dp/du
    # file-space v = 1 - v flips the orientation: signed area in (u, v_file) = -den
    w_f = torch.where(den.detach() < 0, 1.0, -1.0).to(v_pos.dtype)[:, 0]  # [T]

    gi, n_groups, first, gi_t = _grouping((t_pos_idx, t_tex_idx, t_nrm_idx, v_tex_in), lambda: (t, tt, tn, w_f))

    n_c = safe_normalize(v_nrm[tn.reshape(-1)])  # [3T, 3] corner normals
    t_c = tang_f[:, None, :].expand(T, 3, 3).reshape(-1, 3)
    t_c = safe_normalize(t_c - (t_c * n_c).sum(-1, keepdim=True) * n_c)
    wgt = (_corner_angles(v_pos, t) * usable.to(v_pos.dtype)).reshape(-1, 1)
    acc = torch.zeros(n_groups, 3, dtype=v_pos.dtype, device=v_pos.device).index_add(0, gi, t_c * wgt)
    # the group's normal (all corners of a group share one normal index, so any corner of it will do)
    n_g = n_c[first]
    w_g = w_f.repeat_interleave(3)[first]
    ok = (acc * acc).sum(-1, keepdim=True) > DEGENERATE_SQ_LENGTH
    fallback = _axis_tangent(n_g)
    tan = torch.where(ok, acc, fallback)
    tan = safe_normalize(tan - (tan * n_g).sum(-1, keepdim=True) * n_g)
    w_g = torch.where(ok[:, 0], w_g, torch.ones_like(w_g))
    # the same index tensor while the grouping is cached (so its range check and int32 copy are reused)
    return torch.cat([tan, w_g[:, None]], -1), gi_t


def _grouping(keys, cols):
    """The corner grouping of :func:`tangent_frames`, cached by ``keys`` (see :class:`_IdentityCache`).

    ``cols()`` gives ``(t, tt, tn, w_f)``: the ``[T, 3]`` int64 position, UV and normal indices and the ``[T]``
    face handedness ``±1`` (called only when the grouping is not cached). Returns ``(gi [3T] int64,
    n_groups, first [K] int64, gi_t [T, 3] int64)``: the group of each corner (corner ``3 f + k``), the
    number of groups, one corner of each group, and ``gi`` as ``[T, 3]``.
    """
    grouping = _GROUPINGS.get(keys)
    if grouping is None:
        t, tt, tn, w_f = cols()
        T = t.shape[0]
        sign = (w_f.detach() > 0).to(torch.int64).repeat_interleave(3)
        gi = _group_ids([t.reshape(-1), tt.reshape(-1), tn.reshape(-1), sign])
        n_groups = int(gi.max()) + 1
        first = torch.zeros(n_groups, dtype=torch.int64, device=t.device)
        first[gi] = torch.arange(3 * T, device=t.device)
        gi_t = gi.reshape(T, 3)
        grouping = (gi, n_groups, first, gi_t)
        _GROUPINGS.put(keys, grouping)
    return grouping


def tangent_grouping(
    v_pos: torch.Tensor,
    t_pos_idx: torch.Tensor,
    v_tex: torch.Tensor,
    t_tex_idx: torch.Tensor,
    v_nrm: torch.Tensor,
    t_nrm_idx: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, int, torch.Tensor, torch.Tensor]:
    """The discrete corner grouping of :func:`tangent_frames`, for fused implementations of it.

    Validates the arguments as :func:`tangent_frames` does and returns the same (cached) grouping it uses:
    corners are grouped by ``(position index, uv index, normal index, handedness)``.

    Args: as :func:`tangent_frames` (``T ≥ 1`` faces).

    Returns:
        ``(gi [3T] int64, n_groups K, first [K] int64, gi_t [T, 3] int64)``: the group of corner
        ``3 f + k``, the number of groups, one corner of each group, and ``gi`` as ``[T, 3]`` (the
        ``t_tng_idx`` that :func:`tangent_frames` returns).

    Raises:
        MeshError: bad shapes or indices, or no faces.
    """
    t = _check(v_pos, t_pos_idx)
    if v_pos.ndim != 2:
        raise MeshError("tangent_frames takes one mesh: v_pos [V, 3]")
    if t_tex_idx is None or tuple(t_tex_idx.shape) != tuple(t.shape) or v_tex.ndim != 2 or v_tex.shape[1] != 2:
        raise MeshError("tangent_frames needs v_tex [Vt, 2] and t_tex_idx [T, 3] matching t_pos_idx")
    tn = t if t_nrm_idx is None else t_nrm_idx
    if v_nrm.ndim != 2 or v_nrm.shape[1] != 3 or tuple(tn.shape) != tuple(t.shape):
        raise MeshError("tangent_frames needs v_nrm [Vn, 3] and t_nrm_idx [T, 3] matching t_pos_idx")
    if t.shape[0] == 0:
        raise MeshError("tangent_grouping: the mesh has no faces (tangent_frames returns empty tensors for it)")

    def cols():  # only on a cache miss; w_f as in tangent_frames (same dtype, same rule)
        tt = t_tex_idx.to(torch.int64)
        uv = v_tex.detach().to(v_pos.dtype)
        duv1, duv2 = uv[tt[:, 1]] - uv[tt[:, 0]], uv[tt[:, 2]] - uv[tt[:, 0]]
        den = duv1[:, 0] * duv2[:, 1] - duv1[:, 1] * duv2[:, 0]
        return t, tt, tn.to(torch.int64), torch.where(den < 0, 1.0, -1.0)

    return _grouping((t_pos_idx, t_tex_idx, t_nrm_idx, v_tex), cols)


class _IdentityCache:
    """Values computed from a tuple of tensors, valid while each is alive and unmodified (same object, same
    in-place version). Used for the discrete corner grouping of :func:`tangent_frames`: it depends only on
    the index lists and the UV orientation, fixed over pass 2 of a reconstruction, and computing it reads
    sizes back from the device (host syncs) every call."""

    def __init__(self, max_entries: int = 8) -> None:
        self.max_entries = max_entries
        self.entries: list[tuple[list, list, object]] = []

    @staticmethod
    def _sig(keys):
        import weakref

        refs = [None if k is None else weakref.ref(k) for k in keys]
        vers = [None if k is None else k._version for k in keys]
        return refs, vers

    def get(self, keys):
        for refs, vers, value in self.entries:
            if all((r is None and k is None) or (r is not None and k is not None and r() is k and v == k._version)
                   for r, v, k in zip(refs, vers, keys)):
                return value
        return None

    def put(self, keys, value) -> None:
        if any(k is not None and k.requires_grad for k in keys):
            return  # a trained UV / index tensor changes every step: nothing to reuse
        try:
            refs, vers = self._sig(keys)
        except TypeError:
            return
        self.entries = [e for e in self.entries if all(r is None or r() is not None for r in e[0])]
        self.entries.append((refs, vers, value))
        del self.entries[: max(0, len(self.entries) - self.max_entries)]


_GROUPINGS = _IdentityCache()


def _group_ids(cols: list[torch.Tensor]) -> torch.Tensor:
    """Dense id (0..K-1) of each row of the non-negative int64 columns ``cols`` (equal rows, equal ids).

    Packs the columns into one int64 key when that cannot overflow (a 1-D ``torch.unique``, fast on GPU),
    else falls back to ``torch.unique(dim=0)``.
    """
    key = torch.zeros_like(cols[0])
    bits = 0
    for c in cols:
        span = int(c.max()) + 1 if c.numel() else 1
        b = max(1, span - 1).bit_length()
        bits += b
        if bits > 62:
            return torch.unique(torch.stack(cols, 1), dim=0, return_inverse=True)[1]
        key = key * (1 << b) + c
    return torch.unique(key, return_inverse=True)[1]


def _axis_tangent(normal: torch.Tensor) -> torch.Tensor:
    """A unit tangent orthogonal to ``normal [..., 3]`` from the x axis (the y axis near ±x)."""
    ax = torch.zeros_like(normal)
    ax[..., 0] = 1.0
    alt = torch.zeros_like(normal)
    alt[..., 1] = 1.0
    a = torch.where(normal[..., 0:1].abs() > 0.9, alt, ax)
    return safe_normalize(a - (a * normal).sum(-1, keepdim=True) * normal)


def edges(t_pos_idx: torch.Tensor) -> torch.Tensor:
    """Unique undirected edges ``[E, 2]`` int64 (``i < j``, sorted lexicographically)."""
    t = t_pos_idx.to(torch.int64)
    e = torch.cat([t[:, [0, 1]], t[:, [1, 2]], t[:, [2, 0]]])
    e = torch.sort(e, dim=1).values
    e = e[e[:, 0] != e[:, 1]]
    return torch.unique(e, dim=0)


def face_edges(t_pos_idx: torch.Tensor, num_vertices: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(edges [E, 2] int64, face_edge [T, 3] int64)``: the unique undirected edges of the faces (``i <= j``, sorted
    lexicographically like :func:`edges`, degenerate ones kept) and, for each face, the id of its edge ``k`` =
    ``(v_k, v_(k+1) mod 3)``."""
    t = t_pos_idx.to(torch.int64)
    b = t.roll(-1, dims=1)
    key = torch.minimum(t, b) * int(num_vertices) + torch.maximum(t, b)
    uniq, inv = torch.unique(key.reshape(-1), return_inverse=True)
    return torch.stack([uniq // int(num_vertices), uniq % int(num_vertices)], 1), inv.reshape(-1, 3)


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


def neighbour_mean(x: torch.Tensor, edge_idx: torch.Tensor, degree: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean of a per-vertex field over each vertex's neighbours along the edges (0 for a vertex without any).

    Args:
        x: ``[..., V, C]`` or ``[V]`` values (float).
        edge_idx: ``[E, 2]`` unique undirected edges (:func:`edges`; precompute it when called every step).
        degree: ``[V]`` the vertices' edge counts (computed from ``edge_idx`` when None).

    Returns:
        The same shape as ``x``; differentiable w.r.t. ``x``.
    """
    dim = -1 if x.ndim == 1 else -2
    V = x.shape[dim]
    i, j = edge_idx[:, 0], edge_idx[:, 1]
    acc = torch.zeros_like(x).index_add(dim, i, x.index_select(dim, j)).index_add(dim, j, x.index_select(dim, i))
    if degree is None:
        degree = torch.bincount(torch.cat([i, j]), minlength=V)
    d = degree.to(x.dtype).clamp_min(1)
    return acc / (d if x.ndim == 1 else d.unsqueeze(-1))


def laplacian_smoothness_loss(v_pos: torch.Tensor, t_pos_idx: torch.Tensor) -> torch.Tensor:
    """Uniform Laplacian smoothness: ``mean over vertices and xyz of (mean of neighbours − v)²``.

    On a closed manifold this equals nvdiffrec's ``laplace_regularizer_const``. Vertices without
    neighbours contribute 0. Differentiable w.r.t. ``v_pos`` (``[V, 3]`` or ``[B, V, 3]``); scalar.
    """
    t = _check(v_pos, t_pos_idx)
    e = edges(t)
    deg = torch.bincount(e.reshape(-1), minlength=v_pos.shape[-2])
    lap = neighbour_mean(v_pos, e, deg) - v_pos
    return (torch.where(deg.unsqueeze(-1) > 0, lap, torch.zeros_like(lap)) ** 2).mean()


__all__ = [
    "safe_normalize",
    "face_normals",
    "vertex_normals",
    "vertex_tangents",
    "smooth_vertex_normals",
    "tangent_frames",
    "tangent_grouping",
    "CREASE_ANGLE_DEG",
    "edges",
    "edge_lengths",
    "laplacian_uniform",
    "laplacian_smoothness_loss",
    "neighbour_mean",
    "DEGENERATE_SQ_LENGTH",
]
