"""The fused shading paths inside ``render_mesh`` + the image loss (what a training step runs on CUDA) against the
torch paths: forward images, loss and gradients to the vertices, the material and the light. On the CPU the
Triton kernels run under the interpreter (``TRITON_INTERPRET=1``, set before triton is imported) and are chosen
with ``use_kernels(shading="triton")`` (face/vertex normals, shading normal, split-sum shade, cube lookups,
tone-mapped loss; antialias follows the rasterizer backend, torch here). Tolerances: float32 rounding of the
fused kernels (FMA, atomic-add order), ``rtol 1e-4`` scaled to the largest gradient.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")
trimesh = pytest.importorskip("trimesh")

from _surface_scenes import two_view_torus_scene  # noqa: E402
from meshlift.renderers.mesh_pbr import render_mesh  # noqa: E402
from meshlift.shading.color import tonemapped_l1  # noqa: E402
from meshlift.shading.light import EnvironmentLight  # noqa: E402
from meshlift.structures.mesh import Mesh  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _step(backend, kernels):
    kernels(shading=backend)
    tm = trimesh.creation.torus(0.6, 0.25, major_sections=16, minor_sections=8)
    v = torch.tensor(tm.vertices, dtype=torch.float32, device=DEV).requires_grad_()
    mesh = Mesh(v, torch.tensor(tm.faces, device=DEV))
    light = EnvironmentLight.random(8, seed=2, min_res=4, lut_resolution=32)
    kernels(shading="torch")
    light.build_mips()  # the same light for both paths
    kernels(shading=backend)
    w2clip, eye, field, scale = two_view_torus_scene(DEV, light)
    out = render_mesh(mesh, w2clip, eye, (24, 24), light=light, material=field)
    g = torch.Generator().manual_seed(0)
    target = torch.rand(2, 24, 24, 3, generator=g).to(DEV)
    mask = (torch.rand(2, 24, 24, 1, generator=g) > 0.2).float().to(DEV)
    loss = tonemapped_l1(out["shaded"], target, mask) + (out["alpha"] - mask).pow(2).mean()
    grads = torch.autograd.grad(loss, [v, scale, light.diffuse, *light.specular])
    return out, loss.detach(), grads


def test_fused_render_step_matches_torch(kernels):
    a_out, a_loss, a_g = _step("torch", kernels)
    b_out, b_loss, b_g = _step("triton", kernels)
    assert float(a_out["alpha"].detach().sum()) > 50  # the torus is in view
    for k in ("shaded", "alpha", "normal", "kd", "ks"):
        torch.testing.assert_close(b_out[k], a_out[k], rtol=1e-4, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")
    torch.testing.assert_close(b_loss, a_loss, rtol=1e-5, atol=1e-7)
    for i, (x, y) in enumerate(zip(b_g, a_g)):
        assert float(y.abs().sum()) > 0
        torch.testing.assert_close(x, y, rtol=1e-3, atol=1e-4 * float(y.abs().max()),
                                   msg=lambda m, i=i: f"gradient {i}: {m}")
