"""Initial Gaussians: from SfM points when the dataset has them, else random points in the scene bounds.

3DGS (Kerbl et al. 2023, Sec. 5.1 and 7.1): one Gaussian per COLMAP ``points3D`` point with its colour,
or, for synthetic scenes (NeRF-synthetic protocol), 100k points uniform in the scene box with random
colours; isotropic scales = the mean distance to the 3 nearest neighbours (scipy's cKDTree instead of
the CUDA ``simple-knn``), identity rotations, opacity 0.1, SH degree-0 coefficient from the colour and
higher coefficients zero.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from meshlift.errors import DatasetError

__all__ = ["knn_mean_distance", "init_gaussians", "SH_C0", "rgb_to_sh0"]

#: Degree-0 real SH constant (3DGS): colour = SH_C0 · f_dc + 0.5.
SH_C0 = 0.28209479177387814


def rgb_to_sh0(rgb: torch.Tensor) -> torch.Tensor:
    """Degree-0 SH coefficients ``[N, 1, 3]`` whose colour is ``rgb [N, 3]`` (in [0, 1])."""
    return ((rgb - 0.5) / SH_C0)[:, None, :]


def knn_mean_distance(points: torch.Tensor, k: int = 3) -> torch.Tensor:
    """Mean Euclidean distance from each point to its ``k`` nearest other points.

    Args:
        points: ``[N, 3]`` float, N ≥ 2.
        k: neighbours (3 as in 3DGS).

    Returns:
        ``[N]`` float32 on ``points.device``, floored at 1e-7 (duplicate points).
    """
    from scipy.spatial import cKDTree

    p = points.detach().to("cpu", torch.float64).numpy()
    if len(p) < 2:
        return torch.full((len(p),), 0.01, dtype=torch.float32, device=points.device)
    kk = min(k, len(p) - 1)
    d, _ = cKDTree(p).query(p, k=kk + 1, workers=1)
    mean = d[:, 1:].mean(axis=1)
    return torch.from_numpy(np.maximum(mean, 1e-7)).float().to(points.device)


def init_gaussians(points: Optional[torch.Tensor], colors: Optional[torch.Tensor], bounds: torch.Tensor, *,
                   num_random: int = 100_000, sh_degree: int = 3, init_opacity: float = 0.1,
                   init_scale: float = 1.0, generator: Optional[torch.Generator] = None) -> dict:
    """The initial stored tensors (field names of :class:`~meshlift.structures.gaussians.Gaussians`).

    Args:
        points: ``[P, 3]`` SfM points in the training frame, or None/empty → random init.
        colors: ``[P, 3]`` colours in [0, 1] for ``points`` (None → 0.5 grey).
        bounds: ``[2, 3]`` (min, max) box of the random init, in the training frame.
        num_random: number of random points when ``points`` is empty.
        sh_degree: largest SH degree the model will use (``shN`` has ``(d+1)² − 1`` rows).
        init_opacity: initial opacity in (0, 1).
        init_scale: multiplier on the kNN scale.
        generator: RNG for the random init.

    Returns:
        dict of float32 CPU tensors ``means, quats, log_scales, opacity_logits, sh0, shN``.

    Raises:
        DatasetError: non-finite points or an empty/inverted box for the random init.
    """
    if points is not None and len(points):
        means = torch.as_tensor(points, dtype=torch.float32).cpu()
        if not torch.isfinite(means).all():
            raise DatasetError("init_gaussians: SfM points contain NaN/inf; clean points3D or use random init")
        rgb = (torch.as_tensor(colors, dtype=torch.float32).cpu().clamp(0, 1) if colors is not None
               else torch.full_like(means, 0.5))
    else:
        b = torch.as_tensor(bounds, dtype=torch.float32).cpu()
        if b.shape != (2, 3) or not torch.isfinite(b).all() or not bool((b[1] > b[0]).all()):
            raise DatasetError(f"init_gaussians: bounds must be a finite [2, 3] (min, max) box, got {b.tolist()}")
        u = torch.rand((num_random, 3), generator=generator)
        means = b[0] + u * (b[1] - b[0])
        rgb = torch.rand((num_random, 3), generator=generator)
    n = means.shape[0]
    dist = knn_mean_distance(means) * float(init_scale)
    op = float(init_opacity)
    k = (sh_degree + 1) ** 2
    return {
        "means": means.contiguous(),
        "quats": torch.tensor([1.0, 0.0, 0.0, 0.0]).repeat(n, 1),
        "log_scales": torch.log(dist)[:, None].repeat(1, 3),
        "opacity_logits": torch.full((n,), float(np.log(op) - np.log1p(-op))),
        "sh0": rgb_to_sh0(rgb),
        "shN": torch.zeros(n, k - 1, 3),
    }
