"""Named configurations of 3DGS training, each with a CPU-sized ``--quick`` variant.

- ``gaussians``: the 3DGS recipe (Kerbl et al. 2023; gsplat's ``DefaultStrategy``): 30k steps, batch 1,
  SH degree 3, densification from step 500 to 15k every 100 steps, opacity reset every 3000, images at
  their stored size. NeRF-synthetic scenes start from 100k random points, COLMAP scenes from their SfM
  points.
- ``gaussians`` + ``--quick`` (:data:`QUICK_CHANGES`): 64 px images, 2000 initial Gaussians (at most 5000),
  200 steps with the schedules compressed to match — a recognisable lego on two CPU cores; the PyTorch
  rasterizer costs seconds per step at 100 px × 3000 Gaussians on a CPU, so the brief's 100 px would take
  far longer than two minutes (docs/results.md has the measured numbers).
- ``gaussians_tiny``: the CI preset (32 px, a few hundred Gaussians, 20 steps; seconds on one core).
"""

from __future__ import annotations

import dataclasses

from meshlift.errors import ConfigError
from meshlift.methods.gaussians.config import GaussiansConfig, validate

PRESETS: dict[str, GaussiansConfig] = {"gaussians": GaussiansConfig()}

#: What ``--quick`` changes: CPU-sized images (64 px), Gaussian counts (2000, half-size initial Gaussians)
#: and steps (200); the schedules are compressed to the shorter run (SH degree 1 from step 100,
#: densification every 40 steps from 60 to 160, no opacity reset); the position step is 10x and the colour
#: step 4x 3DGS's (they must converge in 200 steps instead of 30k); a cache-sized compositing chunk.
QUICK_CHANGES = dict(
    train_res=64,
    steps=200,
    num_random=2000,
    max_init_points=2000,
    max_test_views=4,
    sh_degree=1,
    sh_degree_interval=100,
    lr_means=1.6e-3,
    lr_means_final=1.6e-5,
    lr_scales=1e-2,
    lr_sh0=1e-2,
    init_scale=0.5,
    chunk_elements=1 << 18,
    densify_refine_start=60,
    densify_refine_stop=160,
    densify_refine_every=40,
    densify_reset_every=0,
    densify_max_gaussians=5000,
    checkpoint_every=100,
    checkpoint_every_s=30.0,
    preview_every=50,
)

PRESETS["gaussians_tiny"] = dataclasses.replace(
    GaussiansConfig(), train_res=32, steps=20, num_random=300, max_init_points=300, max_test_views=2,
    sh_degree=1, sh_degree_interval=10, lr_means=4e-3, lr_means_final=4e-4, lr_sh0=2e-2, lr_opacity=0.1,
    lr_scales=2e-2, densify_refine_start=5,
    densify_refine_stop=16, densify_refine_every=5, densify_reset_every=0, densify_max_gaussians=2000,
    checkpoint_every=10, checkpoint_every_s=0.0, preview_every=10, lpips=False, device="cpu")


def preset_names() -> list[str]:
    """Names accepted by :func:`get_preset` (each also with ``quick=True``)."""
    return sorted(PRESETS)


def get_preset(name: str, *, quick: bool = False) -> GaussiansConfig:
    """The preset ``name`` (a copy), CPU-sized when ``quick``; raises ConfigError for an unknown name."""
    if name not in PRESETS:
        raise ConfigError(f"unknown gaussians preset {name!r}; choose one of {', '.join(preset_names())}")
    cfg = dataclasses.replace(PRESETS[name])
    if quick and name == "gaussians":
        cfg = dataclasses.replace(cfg, **QUICK_CHANGES)
    return validate(cfg)


__all__ = ["PRESETS", "QUICK_CHANGES", "get_preset", "preset_names"]
