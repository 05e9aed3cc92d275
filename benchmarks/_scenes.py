"""Benchmark scenes: a closed bumpy sphere (icosphere-free UV sphere) seen by a perspective camera."""

from __future__ import annotations

import math

import torch


def bumpy_sphere(n_tri: int, device="cpu", dtype=torch.float32):
    """Closed UV sphere with about ``n_tri`` triangles and a radial bump; returns ``(v [V,3], tri [T,3] int32)``."""
    # T = 2 * nu * (nv - 1) with nu = 2 nv  ->  nv ~ sqrt(T / 4)
    nv = max(3, int(round(math.sqrt(n_tri / 4))))
    nu = 2 * nv
    th = torch.linspace(0, math.pi, nv + 1, dtype=torch.float64)[1:-1]
    ph = torch.arange(nu, dtype=torch.float64) * (2 * math.pi / nu)
    T_, P_ = torch.meshgrid(th, ph, indexing="ij")
    r = 1 + 0.05 * torch.sin(8 * T_) * torch.cos(6 * P_)
    ring = torch.stack([r * torch.sin(T_) * torch.cos(P_), r * torch.cos(T_), r * torch.sin(T_) * torch.sin(P_)], -1)
    v = torch.cat([torch.tensor([[0, 1.0, 0]], dtype=torch.float64), ring.reshape(-1, 3), torch.tensor([[0, -1.0, 0]], dtype=torch.float64)])
    nr = nv - 1
    idx = lambda i, j: 1 + i * nu + (j % nu)  # noqa: E731
    tris = []
    j = torch.arange(nu)
    tris.append(torch.stack([torch.zeros_like(j), idx(0, j + 1), idx(0, j)], -1))
    for i in range(nr - 1):
        a, b, c, d = idx(i, j), idx(i, j + 1), idx(i + 1, j), idx(i + 1, j + 1)
        tris.append(torch.stack([a, b, d], -1))
        tris.append(torch.stack([a, d, c], -1))
    last = v.shape[0] - 1
    tris.append(torch.stack([idx(nr - 1, j), idx(nr - 1, j + 1), torch.full_like(j, last)], -1))
    tri = torch.cat(tris).to(torch.int32)
    return v.to(device=device, dtype=dtype), tri.to(device)


def camera_mvp(distance: float, batch: int = 1, fov_y: float = 0.9, device="cpu", dtype=torch.float32):
    """``[B, 4, 4]`` projection @ world_to_camera, cameras on a circle looking at the origin (OpenCV axes)."""
    near, far = 0.05, 10.0
    f = 1 / math.tan(fov_y / 2)
    P = torch.tensor(
        [[f, 0, 0, 0], [0, f, 0, 0], [0, 0, (far + near) / (far - near), -2 * far * near / (far - near)], [0, 0, 1, 0]],
        dtype=torch.float64,
    )
    mats = []
    for b in range(batch):
        a = 2 * math.pi * b / max(batch, 1)
        eye = torch.tensor([distance * math.sin(a), 0.3, -distance * math.cos(a)], dtype=torch.float64)
        fwd = -eye / eye.norm()
        right = torch.linalg.cross(torch.tensor([0, -1.0, 0], dtype=torch.float64), fwd)
        right = right / right.norm()
        down = torch.linalg.cross(fwd, right)
        R = torch.stack([right, down, fwd])
        w2c = torch.eye(4, dtype=torch.float64)
        w2c[:3, :3] = R
        w2c[:3, 3] = -R @ eye
        mats.append(P @ w2c)
    return torch.stack(mats).to(device=device, dtype=dtype)
