"""Rotations: quaternions (w, x, y, z) and 3x3 matrices (docs/conventions.md §5).

Quaternions are scalar first, Hamilton product, unit length, rotating vectors actively
(``v' = q v q*``), the order COLMAP and 3DGS use. All functions are batched over leading dimensions
and differentiable.
"""

from __future__ import annotations

import torch

from meshlift.errors import CameraError

__all__ = [
    "quaternion_to_matrix",
    "matrix_to_quaternion",
    "quaternion_multiply",
    "quaternion_conjugate",
    "normalize_quaternion",
    "axis_angle_to_matrix",
]


def _check_last(x: torch.Tensor, size: int | tuple[int, ...], name: str) -> None:
    shape = (size,) if isinstance(size, int) else size
    if not isinstance(x, torch.Tensor):
        raise CameraError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if tuple(x.shape[-len(shape):]) != tuple(shape):
        raise CameraError(f"{name} must have shape [..., {', '.join(map(str, shape))}], got {list(x.shape)}")


def normalize_quaternion(q: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Scale quaternions ``q [..., 4]`` (w, x, y, z) to unit length."""
    _check_last(q, 4, "q")
    return q / q.norm(dim=-1, keepdim=True).clamp_min(eps)


def quaternion_conjugate(q: torch.Tensor) -> torch.Tensor:
    """Conjugate ``(w, -x, -y, -z)`` of ``q [..., 4]``; the inverse rotation for unit quaternions."""
    _check_last(q, 4, "q")
    return q * q.new_tensor([1.0, -1.0, -1.0, -1.0])


def quaternion_multiply(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product ``a ⊗ b`` of ``[..., 4]`` quaternions (w, x, y, z); rotation ``b`` then ``a``."""
    _check_last(a, 4, "a")
    _check_last(b, 4, "b")
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        dim=-1,
    )


def quaternion_to_matrix(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``[..., 3, 3]`` of quaternions ``q [..., 4]`` (w, x, y, z).

    ``q`` is normalised first, so any non-zero quaternion is accepted (COLMAP files hold unit
    quaternions up to print precision). Formula: the standard Hamilton quaternion-to-matrix map
    (e.g. Shoemake 1985, "Animating rotation with quaternion curves", eq. in §"Quaternions to matrices").
    """
    q = normalize_quaternion(q)
    w, x, y, z = q.unbind(-1)
    m = torch.stack(
        [
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ],
        dim=-1,
    )
    return m.reshape(q.shape[:-1] + (3, 3))


def matrix_to_quaternion(R: torch.Tensor) -> torch.Tensor:
    """Unit quaternions ``[..., 4]`` (w, x, y, z), ``w >= 0``, of rotation matrices ``R [..., 3, 3]``.

    Uses the numerically stable branch on the largest of (w, x, y, z) (Shepperd 1978, "Quaternion from
    rotation matrix", J. Guidance Control). The sign is fixed so that ``w >= 0`` (q and -q are the same
    rotation), which makes the result unique except for 180° rotations.
    """
    _check_last(R, (3, 3), "R")
    m = R
    m00, m01, m02 = m[..., 0, 0], m[..., 0, 1], m[..., 0, 2]
    m10, m11, m12 = m[..., 1, 0], m[..., 1, 1], m[..., 1, 2]
    m20, m21, m22 = m[..., 2, 0], m[..., 2, 1], m[..., 2, 2]
    # 4 q_i^2 for i in (w, x, y, z)
    sq = torch.stack(
        [1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], dim=-1
    )
    # Each candidate row is 4 q_i * q (one per branch); pick the branch with the largest q_i.
    cand = torch.stack(
        [
            torch.stack([sq[..., 0], m21 - m12, m02 - m20, m10 - m01], dim=-1),
            torch.stack([m21 - m12, sq[..., 1], m10 + m01, m02 + m20], dim=-1),
            torch.stack([m02 - m20, m10 + m01, sq[..., 2], m12 + m21], dim=-1),
            torch.stack([m10 - m01, m20 + m02, m21 + m12, sq[..., 3]], dim=-1),
        ],
        dim=-2,
    )  # [..., 4, 4]
    denom = 2.0 * sq.clamp_min(1e-12).sqrt()  # 4 q_i / (2 sqrt(4 q_i^2)) ... = q
    best = sq.argmax(dim=-1)
    idx = best[..., None, None].expand(best.shape + (1, 4))
    q = torch.gather(cand, -2, idx).squeeze(-2) / torch.gather(denom, -1, best[..., None])
    q = torch.where(q[..., :1] < 0, -q, q)
    return normalize_quaternion(q)


def axis_angle_to_matrix(axis_angle: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``[..., 3, 3]`` from axis-angle vectors ``[..., 3]`` (angle = norm, radians).

    Rodrigues' formula; exact at angle 0 (returns the identity).
    """
    _check_last(axis_angle, 3, "axis_angle")
    angle = axis_angle.norm(dim=-1, keepdim=True)
    half = 0.5 * angle
    # sin(half)/angle with a series near 0 so the gradient stays finite
    small = angle < 1e-6
    safe = torch.where(small, torch.ones_like(angle), angle)
    s = torch.where(small, 0.5 - angle * angle / 48.0, torch.sin(half) / safe)
    q = torch.cat([torch.cos(half), axis_angle * s], dim=-1)
    return quaternion_to_matrix(q)
