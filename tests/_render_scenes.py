"""Small synthetic scenes shared by the render tests (clip-space triangles)."""

from __future__ import annotations

import math

import torch


def perspective(fov_y: float = 1.0, aspect: float = 1.0, near: float = 0.1, far: float = 10.0) -> torch.Tensor:
    """OpenCV-style projection (docs/conventions.md §3) for a centred principal point: ``w = z_camera``."""
    f = 1.0 / math.tan(fov_y / 2)
    return torch.tensor(
        [
            [f / aspect, 0, 0, 0],
            [0, f, 0, 0],
            [0, 0, (far + near) / (far - near), -2 * far * near / (far - near)],
            [0, 0, 1, 0],
        ],
        dtype=torch.float64,
    )


def random_scene(B: int, T: int, seed: int = 0, dtype=torch.float32, spread: float = 1.2):
    """``T`` independent triangles per image at random depths in front of a perspective camera."""
    g = torch.Generator().manual_seed(seed)
    centres = (torch.rand(B, T, 1, 3, generator=g, dtype=torch.float64) - 0.5) * torch.tensor(
        [2 * spread, 2 * spread, 0.0], dtype=torch.float64
    )
    centres[..., 2] = 1.5 + 3 * torch.rand(B, T, 1, generator=g, dtype=torch.float64)
    offs = (torch.rand(B, T, 3, 3, generator=g, dtype=torch.float64) - 0.5) * 1.2
    world = (centres + offs).reshape(B, T * 3, 3)
    P = perspective()
    clip = torch.cat([world, torch.ones_like(world[..., :1])], -1) @ P.T
    tri = torch.arange(T * 3, dtype=torch.int32).view(T, 3)
    return clip.to(dtype), tri


def camera_points_to_clip(pts: torch.Tensor, **kw) -> torch.Tensor:
    """``[..., 3]`` camera-space points → ``[..., 4]`` clip (float64)."""
    P = perspective(**kw)
    return torch.cat([pts, torch.ones_like(pts[..., :1])], -1).to(torch.float64) @ P.T
