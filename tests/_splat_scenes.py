"""Small Gaussian scenes and a brute-force compositing oracle shared by the splatting tests."""

from __future__ import annotations

import math

import torch

from meshlift.render.splat_reference import ALPHA_THRESHOLD, T_THRESHOLD


def camera(width=40, height=36, f=40.0, dtype=torch.float64, C=1):
    """Identity-pose pinhole cameras (OpenCV) looking down +z, principal point centred."""
    K = torch.tensor([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]], dtype=dtype)
    w2c = torch.eye(4, dtype=dtype)
    if C > 1:  # a second camera slightly rotated about y and shifted
        a = 0.2
        R = torch.tensor([[math.cos(a), 0, math.sin(a)], [0, 1, 0], [-math.sin(a), 0, math.cos(a)]], dtype=dtype)
        w2 = torch.eye(4, dtype=dtype)
        w2[:3, :3] = R
        w2[:3, 3] = torch.tensor([0.1, -0.05, 0.2], dtype=dtype)
        return torch.stack([w2c, w2][:C]), torch.stack([K, K * torch.tensor([[1.1], [1.1], [1.0]], dtype=dtype)][:C])
    return w2c[None], K[None]


def random_scene(n, seed=0, dtype=torch.float64, spread=0.6, depth=3.0, scale=(0.03, 0.25), D=3):
    g = torch.Generator().manual_seed(seed)
    means = (torch.rand(n, 3, generator=g, dtype=dtype) * 2 - 1) * spread
    means[:, 2] = means[:, 2] + depth
    quats = torch.randn(n, 4, generator=g, dtype=dtype)
    lo, hi = scale
    scales = lo + (hi - lo) * torch.rand(n, 3, generator=g, dtype=dtype)
    opac = 0.1 + 0.85 * torch.rand(n, generator=g, dtype=dtype)
    colors = torch.rand(n, D, generator=g, dtype=dtype)
    return means, quats, scales, opac, colors


def brute_force(proj, features, width, height, alpha_max=0.99, cam=0):
    """Per-pixel sequential compositing over *all* visible Gaussians in (depth, index) order.

    Vectorised over pixels only; independent of tiles and chunking. Returns a dict with ``image
    [H,W,D]``, ``alpha [H,W,1]``, ``median [H,W,1]``, ``weights [N, H*W]`` (the blending weight of each
    Gaussian at each pixel). Differentiable through torch ops.
    """
    m2, con, op = proj["means2d"][cam], proj["conics"][cam], proj["opacities"][cam]
    dep, radii = proj["depths"][cam], proj["radii"][cam]
    feats = features[cam]
    N = op.shape[0]
    vis = (radii > 0).all(-1)
    idx = [i for i in range(N) if bool(vis[i])]
    idx.sort(key=lambda i: (float(dep[i].detach().float()), i))
    dt = m2.dtype
    jj, ii = torch.meshgrid(torch.arange(width, dtype=dt) + 0.5, torch.arange(height, dtype=dt) + 0.5,
                            indexing="xy")
    px, py = jj.reshape(-1), ii.reshape(-1)
    P = px.numel()
    T = torch.ones(P, dtype=dt)
    done = torch.zeros(P, dtype=torch.bool)
    out = torch.zeros(P, feats.shape[-1], dtype=dt)
    med = torch.zeros(P, dtype=dt)
    weights = torch.zeros(N, P, dtype=dt)
    for g in idx:
        dx, dy = m2[g, 0] - px, m2[g, 1] - py
        sigma = 0.5 * (con[g, 0] * dx * dx + con[g, 2] * dy * dy) + con[g, 1] * dx * dy
        a = op[g] * torch.exp(-sigma)
        ok = (sigma >= 0) & (a >= ALPHA_THRESHOLD) & ~done
        a = torch.clamp(a, max=alpha_max)
        nt = T * (1 - a)
        stop = ok & (nt < T_THRESHOLD)
        done = done | stop
        ok = ok & ~stop
        w = torch.where(ok, a * T, torch.zeros_like(a))
        med = torch.where(ok & (T > 0.5), dep[g].expand(P), med)
        out = out + w[:, None] * feats[g]
        weights[g] = w.detach()
        T = torch.where(ok, nt, T)
    return {"image": out.reshape(height, width, -1), "alpha": (1 - T).reshape(height, width, 1),
            "median": med.reshape(height, width, 1), "weights": weights}


def assert_same_bits(a: torch.Tensor, b: torch.Tensor, what="") -> None:
    """``a`` and ``b`` equal bit for bit under Triton's interpreter (tensors on the CPU: numpy's IEEE arithmetic,
    atomics applied in program order); on a GPU equal to float32 rounding (1e-5 of the larger magnitude, at least
    1): there float atomics add in a different order at each launch, and separately compiled kernel variants fuse
    multiply-adds differently. Integer and bool tensors are compared exactly everywhere."""
    if a.device.type == "cpu" or not a.is_floating_point():
        assert torch.equal(a, b), (what, (a.double() - b.double()).abs().max())
        return
    scale = float(a.abs().max().clamp_min(1.0))
    err = float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
    assert a.shape == b.shape and err <= 1e-5 * scale, (what, err, scale)
