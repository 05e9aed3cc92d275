"""Similarity transforms between point sets: Umeyama's closed-form least-squares fit.

Umeyama, "Least-squares estimation of transformation parameters between two point patterns",
IEEE TPAMI 13(4), 1991, eqs. (34)-(43): for points ``x_i -> y_i`` the ``s, R, t`` minimising
``Σ ||y_i - (s R x_i + t)||²`` are, with ``Σ_xy = (1/n) Σ (y_i - μ_y)(x_i - μ_x)ᵀ = U D Vᵀ``,
``R = U S Vᵀ`` (``S = diag(1, 1, det(U)det(V))`` so that ``R`` is a rotation, not a reflection),
``s = tr(D S) / σ_x²`` and ``t = μ_y - s R μ_x``.
"""

from __future__ import annotations

import torch

from meshlift.errors import CameraError

__all__ = ["umeyama", "similarity_matrix", "rotation_angle"]


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
