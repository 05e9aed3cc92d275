"""A tiny synthetic Gaussian-splatting problem: views of known Gaussians rendered by the splat renderer.

Used by the training tests (in memory) and the CLI smoke test (written as a Blender/NeRF-synthetic folder).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from meshlift.cameras import cameras_on_sphere, world_to_camera_to_opengl_c2w
from meshlift.methods.gaussians.views import STORE_DTYPE, SplatProblem, SplatViews
from meshlift.render.splat import rasterize_gaussians

FOV = math.radians(45.0)
RADIUS = 3.0


def gt_gaussians(n: int = 60, seed: int = 0) -> dict:
    """Activated Gaussians of a coloured blob in [-0.6, 0.6]³."""
    g = torch.Generator().manual_seed(seed)
    means = (torch.rand(n, 3, generator=g) * 2 - 1) * 0.6
    return {"means": means, "quats": torch.randn(n, 4, generator=g), "scales": 0.08 + 0.12 * torch.rand(n, 3, generator=g),
            "opacities": 0.6 + 0.35 * torch.rand(n, generator=g), "colors": torch.rand(n, 3, generator=g)}


def render_views(g: dict, n_views: int, size: int, seed: int):
    cams = cameras_on_sphere(n_views, RADIUS, FOV, size, seed=seed, up=(0.0, 0.0, 1.0))
    img, alpha, _ = rasterize_gaussians(g["means"], g["quats"], g["scales"], g["opacities"], g["colors"],
                                        cams.world_to_camera, cams.K, size, size, backend="torch")
    return cams, img.clamp(0, 1), alpha.clamp(0, 1)  # premultiplied: no background


def tiny_problem(size: int = 32, n_train: int = 12, n_test: int = 2, seed: int = 0) -> SplatProblem:
    """Train/test views of :func:`gt_gaussians` at ``size`` px (premultiplied images with alpha)."""
    g = gt_gaussians(seed=seed)

    def views(n, s):
        cams, img, alpha = render_views(g, n, size, s)
        return SplatViews(cams.world_to_camera.float(), cams.K.float(), img.to(STORE_DTYPE), alpha.to(STORE_DTYPE),
                          [f"v{i:02d}" for i in range(n)])

    box = torch.tensor([[-0.8] * 3, [0.8] * 3])
    return SplatProblem(train=views(n_train, seed + 1), test=views(n_test, seed + 2), bounds=box, name="tiny")


def write_blender_dataset(root: Path, size: int = 32, n_train: int = 12, n_test: int = 2, seed: int = 0) -> Path:
    """Write :func:`gt_gaussians`' views as a NeRF-synthetic folder (RGBA PNGs + transforms_*.json)."""
    from meshlift.io.images import write_image

    g = gt_gaussians(seed=seed)
    root = Path(root)
    for split, n, s in (("train", n_train, seed + 1), ("test", n_test, seed + 2)):
        cams, img, alpha = render_views(g, n, size, s)
        frames = []
        for i in range(n):
            straight = img[i] / alpha[i].clamp_min(1e-6)
            write_image(root / split / f"r_{i}.png", torch.cat([straight.clamp(0, 1), alpha[i]], dim=-1))
            c2w = world_to_camera_to_opengl_c2w(cams.world_to_camera[i:i + 1])[0]
            frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": c2w.tolist()})
        (root / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": FOV, "frames": frames}))
    return root
