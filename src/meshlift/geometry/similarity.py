"""Similarity transforms ``p' = s R p + t`` applied to points, normals, meshes and cameras: the one place.

A *similarity* is a ``[4, 4]`` matrix ``[[s R, t], [0, 1]]`` with ``s > 0`` and ``R`` a rotation (or, when
mirroring is allowed, an orthogonal matrix). meshlift uses them for the normalised frame of
docs/conventions.md §1 (``world_to_normalized``, e.g. ``Scene.world_to_normalized`` or the bounding-box
normalisation of a synthetic scene) and for going back to world units after a reconstruction.

- :func:`decompose_similarity`: ``(s, R)`` of a similarity, validated;
- :func:`apply_to_points`, :func:`apply_to_normals`: ``[N, 3]`` points / unit normals;
- :func:`transform_mesh`: positions and normals of a mesh (faces re-wound when the transform mirrors);
- cameras: ``meshlift.cameras.Cameras.transform_world`` (built on :func:`decompose_similarity`);
- :func:`umeyama`: the least-squares similarity between two point sets (Umeyama, "Least-squares estimation
  of transformation parameters between two point patterns", IEEE TPAMI 13(4), 1991, eqs. 34-43), with
  :func:`similarity_matrix` and :func:`rotation_angle` (comparing recovered cameras with known ones).

Arithmetic is float64; results take the input's dtype. Inputs are never modified.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from meshlift.errors import CameraError, MeshError

__all__ = ["decompose_similarity", "apply_to_points", "apply_to_normals", "transform_mesh", "umeyama",
           "similarity_matrix", "rotation_angle"]


def decompose_similarity(S, *, error: type = CameraError, allow_mirror: bool = False) -> tuple[float, torch.Tensor]:
    """``(s, R)`` of a similarity ``S [4, 4]``: ``S[:3, :3] = s R``, ``s = |det|^(1/3)``, ``R R^T = I``.

    Raises:
        ``error`` (CameraError by default): ``S`` is not ``[4, 4]``, collapses space, mirrors it (unless
        ``allow_mirror``), or its linear part is not a uniform scale times a rotation.
    """
    S = torch.as_tensor(S, dtype=torch.float64).cpu()
    if S.shape != (4, 4):
        raise error(f"similarity must be [4, 4], got {list(S.shape)}")
    A = S[:3, :3]
    det = float(torch.linalg.det(A))
    if det == 0 or (det < 0 and not allow_mirror) or det != det:
        raise error(f"similarity must have a positive determinant (no reflection, no collapse), got {det:g}")
    scale = abs(det) ** (1.0 / 3.0)
    R = A / scale
    if not torch.allclose(R @ R.T, torch.eye(3, dtype=torch.float64), atol=1e-6):
        raise error("need a similarity (uniform scale x rotation + translation), got a general affine map")
    return scale, R


def apply_to_points(S: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """``points [..., 3] @ A^T + t`` computed in float64, returned in ``points``' dtype and device."""
    S = torch.as_tensor(S, dtype=torch.float64).to(points.device)
    return (points.double() @ S[:3, :3].T + S[:3, 3]).to(points.dtype)


def apply_to_normals(S: torch.Tensor, normals: torch.Tensor) -> torch.Tensor:
    """Unit normals ``[..., 3]`` after ``S``: ``normalize(n A^{-1})`` (inverse transpose), float64 inside."""
    S = torch.as_tensor(S, dtype=torch.float64).to(normals.device)
    return F.normalize(normals.double() @ torch.linalg.inv(S[:3, :3]), dim=-1).to(normals.dtype)


def transform_mesh(mesh, S, *, allow_mirror: bool = False):
    """Apply a similarity ``S [4, 4]`` to a :class:`meshlift.structures.mesh.Mesh` (a new mesh is returned).

    Positions are transformed in float64 and stored in their dtype (detached); normals are mapped by the
    inverse transpose and renormalised; UVs, colours, material and extras are shared with the input (never
    modified). A mirroring ``S`` (negative determinant) is refused unless ``allow_mirror``; then the faces
    are re-wound so they still face outwards.

    Raises:
        MeshError: ``S`` is not ``[4, 4]``, collapses space, or mirrors it without ``allow_mirror``.
    """
    T = torch.as_tensor(S, dtype=torch.float64).cpu()
    if T.shape != (4, 4):
        raise MeshError(f"transform_mesh: transform must be [4, 4], got {tuple(T.shape)}")
    det = float(torch.det(T[:3, :3]))
    if det == 0.0 or (det < 0.0 and not allow_mirror):
        raise MeshError("transform_mesh: the transform mirrors or collapses space (det <= 0); give a similarity")
    v = apply_to_points(T, mesh.v_pos.detach())
    v_nrm = None if mesh.v_nrm is None else apply_to_normals(T, mesh.v_nrm)
    faces = mesh.t_pos_idx if det > 0 else mesh.t_pos_idx[:, [0, 2, 1]]
    return dataclasses.replace(mesh, v_pos=v, v_nrm=v_nrm, t_pos_idx=faces)


def umeyama(src: torch.Tensor, dst: torch.Tensor, *, with_scale: bool = True) -> tuple[float, torch.Tensor, torch.Tensor]:
    """The similarity ``dst ≈ s R src + t`` in the least-squares sense (Umeyama 1991, eqs. 40-42).

    Args:
        src: ``[N, D]`` points (any float dtype; computed in float64), ``N >= D`` and not all collinear
            for ``D = 3`` (a unique rotation needs at least 3 non-collinear points).
        dst: ``[N, D]`` corresponding points.
        with_scale: fit the scale ``s`` (else ``s = 1``, a rigid fit).

    Returns:
        ``(s, R [D, D], t [D])``: float, float64 tensors.

    Raises:
        CameraError: shapes differ, fewer than ``D`` points, or the source points are all at one place.
    """
    x = torch.as_tensor(src, dtype=torch.float64)
    y = torch.as_tensor(dst, dtype=torch.float64)
    if x.ndim != 2 or x.shape != y.shape:
        raise CameraError(f"umeyama: src and dst must both be [N, D] and equal in shape, got {list(x.shape)}, "
                          f"{list(y.shape)}")
    n, d = x.shape
    if n < d:
        raise CameraError(f"umeyama: needs at least {d} point pairs for a {d}-D similarity, got {n}")
    if not (torch.isfinite(x).all() and torch.isfinite(y).all()):
        raise CameraError("umeyama: the points hold NaN or inf")
    mx, my = x.mean(0), y.mean(0)
    xc, yc = x - mx, y - my
    var_x = float((xc * xc).sum() / n)
    if var_x <= 1e-300:
        raise CameraError("umeyama: all source points coincide; the similarity is undetermined")
    cov = yc.T @ xc / n
    U, D, Vh = torch.linalg.svd(cov)
    S = torch.ones(d, dtype=torch.float64)
    if float(torch.linalg.det(U) * torch.linalg.det(Vh)) < 0:
        S[-1] = -1.0
    R = U @ torch.diag(S) @ Vh
    s = float((D * S).sum() / var_x) if with_scale else 1.0
    t = my - s * (R @ mx)
    return s, R, t


def similarity_matrix(s: float, R: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``[4, 4]`` float64 matrix ``[s R | t; 0 0 0 1]`` (maps ``p -> s R p + t``)."""
    T = torch.eye(4, dtype=torch.float64)
    T[:3, :3] = float(s) * torch.as_tensor(R, dtype=torch.float64)
    T[:3, 3] = torch.as_tensor(t, dtype=torch.float64)
    return T


def rotation_angle(R_a: torch.Tensor, R_b: torch.Tensor) -> torch.Tensor:
    """Angle in radians ``[...]`` of the relative rotation ``R_a R_bᵀ`` (geodesic distance on SO(3)).

    Computed as ``atan2(||vee(M - Mᵀ)|| / 2, (tr M - 1) / 2)``, accurate near 0 and π alike.
    """
    M = torch.as_tensor(R_a, dtype=torch.float64) @ torch.as_tensor(R_b, dtype=torch.float64).transpose(-1, -2)
    tr = M[..., 0, 0] + M[..., 1, 1] + M[..., 2, 2]
    w = torch.stack([M[..., 2, 1] - M[..., 1, 2], M[..., 0, 2] - M[..., 2, 0], M[..., 1, 0] - M[..., 0, 1]], -1)
    return torch.atan2(0.5 * w.norm(dim=-1), 0.5 * (tr - 1.0))
