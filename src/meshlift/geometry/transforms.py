"""Rigid and similarity transforms as 4x4 matrices (docs/conventions.md §1-2).

All functions are batched over leading dimensions and differentiable.
"""

from __future__ import annotations

import torch

from meshlift.errors import CameraError

__all__ = ["make_transform", "invert_rigid", "transform_points", "to_homogeneous", "similarity_transform",
           "up_axis_rotation", "UP_AXES"]


def make_transform(R: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """4x4 matrices ``[..., 4, 4]`` ``[R | t; 0 0 0 1]`` from ``R [..., 3, 3]`` and ``t [..., 3]``."""
    if R.shape[-2:] != (3, 3) or t.shape[-1] != 3 or R.shape[:-2] != t.shape[:-1]:
        raise CameraError(f"R must be [..., 3, 3] and t [..., 3] with the same batch, got {list(R.shape)}, {list(t.shape)}")
    top = torch.cat([R, t[..., None]], dim=-1)
    bottom = torch.zeros(R.shape[:-2] + (1, 4), dtype=R.dtype, device=R.device)
    bottom[..., 0, 3] = 1
    return torch.cat([top, bottom], dim=-2)


def invert_rigid(T: torch.Tensor) -> torch.Tensor:
    """Inverse ``[..., 4, 4]`` of rigid transforms ``[R | t]``: ``[Rᵀ | -Rᵀ t]`` (exact, no matrix solve)."""
    if T.shape[-2:] != (4, 4):
        raise CameraError(f"T must be [..., 4, 4], got {list(T.shape)}")
    R = T[..., :3, :3]
    t = T[..., :3, 3]
    Rt = R.transpose(-1, -2)
    return make_transform(Rt, -(Rt @ t[..., None])[..., 0])


def to_homogeneous(points: torch.Tensor) -> torch.Tensor:
    """Append a 1: ``[..., 3] -> [..., 4]``."""
    return torch.cat([points, torch.ones_like(points[..., :1])], dim=-1)


def transform_points(T: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Apply affine ``T [..., 4, 4]`` to ``points [..., 3]`` (broadcast over leading dims): ``R p + t``."""
    if T.shape[-2:] != (4, 4) or points.shape[-1] != 3:
        raise CameraError(f"T must be [..., 4, 4] and points [..., 3], got {list(T.shape)}, {list(points.shape)}")
    return (T[..., :3, :3] @ points[..., None])[..., 0] + T[..., :3, 3]


def similarity_transform(scale: float, translation: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    """4x4 ``[s I | s·translation]``: maps ``p -> s (p + translation)``."""
    T = torch.eye(4, dtype=dtype)
    T[:3, :3] *= scale
    T[:3, 3] = scale * torch.as_tensor(translation, dtype=dtype)
    return T


#: Up axes ``--up`` accepts: the input's up direction; outputs are turned so it becomes glTF's +Y.
UP_AXES = ("y", "z", "-y", "-z", "x", "-x")


def up_axis_rotation(up: str, dtype=torch.float64) -> torch.Tensor:
    """Proper rotation ``[3, 3]`` taking the input's up axis ``up`` to +Y (glTF 2.0 §3.4: +Y is up,
    +Z forward, right-handed), turning about the axis that keeps the frame right-handed:
    ``"z"`` → rotation of −90° about X (``(x, y, z) → (x, z, −y)``), the Blender/3ds Max Z-up case.

    Raises:
        CameraError: ``up`` not in :data:`UP_AXES`.
    """
    key = str(up).lower().lstrip("+")
    table = {
        "y": [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
        "z": [[1, 0, 0], [0, 0, 1], [0, -1, 0]],
        "-y": [[1, 0, 0], [0, -1, 0], [0, 0, -1]],
        "-z": [[1, 0, 0], [0, 0, -1], [0, 1, 0]],
        "x": [[0, 1, 0], [-1, 0, 0], [0, 0, 1]],
        "-x": [[0, -1, 0], [1, 0, 0], [0, 0, 1]],
    }
    if key not in table:
        raise CameraError(f"--up {up!r}: choose one of {', '.join(UP_AXES)} (the input's up axis)")
    return torch.tensor(table[key], dtype=dtype)
