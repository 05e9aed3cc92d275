"""A tiny synthetic MILo scene: unlit views of a vertex-coloured sphere rendered by meshlift's rasterizer.

Used in memory by the MILo tests (:func:`sphere_problem`) and written as a NeRF-synthetic folder for the CLI
smoke test (:func:`write_sphere_dataset`). Images are sRGB, premultiplied, with the antialiased coverage as
alpha (the layout of :class:`meshlift.methods.gaussians.views.SplatViews`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from meshlift.cameras import cameras_on_sphere, projection_from_K, world_to_camera_to_opengl_c2w
from meshlift.methods.gaussians.views import STORE_DTYPE, SplatProblem, SplatViews
from meshlift.structures.mesh import Mesh

FOV = math.radians(45.0)
CAM_RADIUS = 3.2
SPHERE_RADIUS = 0.8


def sphere_mesh(radius: float = SPHERE_RADIUS, subdivisions: int = 3) -> Mesh:
    """An icosphere with smooth linear vertex colours (a gradient along x, y, z)."""
    import trimesh

    tm = trimesh.creation.icosphere(subdivisions=subdivisions, radius=radius)
    v = torch.tensor(tm.vertices, dtype=torch.float32)
    col = (0.25 + 0.5 * (v / radius + 1) / 2).clamp(0, 1)
    return Mesh(v, torch.tensor(tm.faces, dtype=torch.int64), v_color=col)


def render(mesh: Mesh, n: int, size: int, seed: int):
    """``(cams, premultiplied sRGB [n, S, S, 3], alpha [n, S, S, 1])``."""
    from meshlift.renderers.mesh_pbr import render_unlit

    cams = cameras_on_sphere(n, CAM_RADIUS, FOV, size, seed=seed, up=(0.0, 0.0, 1.0))
    w2c, K = cams.world_to_camera.float(), cams.K.float()
    clip = projection_from_K(K, size, size, 0.5, 10.0) @ w2c
    fwd = w2c[:, 2, :3]
    with torch.no_grad():
        black = render_unlit(mesh, clip, fwd, (size, size), torch.zeros(3))
        white = render_unlit(mesh, clip, fwd, (size, size), torch.ones(3))
    alpha = (1.0 - (white - black).mean(-1, keepdim=True)).clamp(0, 1)
    return cams, black.clamp(0, 1), alpha


def sphere_problem(size: int = 32, n_train: int = 12, n_test: int = 2, seed: int = 0):
    """``(SplatProblem, gt Mesh)`` of the sphere, world frame = the mesh's."""
    mesh = sphere_mesh()

    def views(n, s, prefix):
        cams, img, alpha = render(mesh, n, size, s)
        return SplatViews(cams.world_to_camera.float(), cams.K.float(), img.to(STORE_DTYPE), alpha.to(STORE_DTYPE),
                          [f"{prefix}{i:02d}" for i in range(n)])

    box = torch.tensor([[-1.0] * 3, [1.0] * 3])
    return SplatProblem(train=views(n_train, seed + 1, "t"), test=views(n_test, seed + 2, "v"), bounds=box,
                        name="sphere"), mesh


def write_sphere_dataset(root: Path, size: int = 32, n_train: int = 10, n_test: int = 2, seed: int = 0) -> Path:
    """The sphere's views as a NeRF-synthetic folder (RGBA PNGs + transforms_{train,test}.json)."""
    from meshlift.io.images import write_image

    mesh = sphere_mesh()
    root = Path(root)
    for split, n, s in (("train", n_train, seed + 1), ("test", n_test, seed + 2)):
        cams, img, alpha = render(mesh, n, size, s)
        frames = []
        for i in range(n):
            straight = img[i] / alpha[i].clamp_min(1e-6)
            write_image(root / split / f"r_{i}.png", torch.cat([straight.clamp(0, 1), alpha[i]], dim=-1))
            c2w = world_to_camera_to_opengl_c2w(cams.world_to_camera[i:i + 1])[0]
            frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": c2w.tolist()})
        (root / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": FOV, "frames": frames}))
    return root
