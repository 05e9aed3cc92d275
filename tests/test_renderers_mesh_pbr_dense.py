"""The dense (every-pixel, fixed-shape) field render of ``renderers.mesh_pbr_dense`` against ``render_mesh``'s
covered-pixel path: images, coverage and gradients to the vertices, the field and the light, with one and with
two samples per axis, mesh normals computed or given, and a background. On a GPU the same comparison runs with
the fused kernels (the test is device-agnostic); the CUDA-graph replay of it is tested in
``tests/test_pixel_graphs_gpu.py``."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the fused variant below, on the CPU
trimesh = pytest.importorskip("trimesh")

from _surface_scenes import two_view_torus_scene, uv_torus  # noqa: E402
from meshlift.errors import RenderError  # noqa: E402
from meshlift.renderers.mesh_pbr import render_mesh  # noqa: E402
from meshlift.renderers.mesh_pbr_dense import gbuffer_rows, render_dense  # noqa: E402
from meshlift.shading.light import EnvironmentLight  # noqa: E402
from meshlift.structures.mesh import Mesh  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _scene(own_normals: bool, textured: bool = False):
    tm, uv, material = uv_torus(DEV, (16, 8), 16)  # UVs from the torus angles; random kd / ks / normal maps
    v = torch.tensor(tm.vertices, dtype=torch.float32, device=DEV).requires_grad_()
    faces = torch.tensor(tm.faces, device=DEV)
    extra = {}
    if own_normals:
        extra.update(v_nrm=torch.tensor(tm.vertex_normals, dtype=torch.float32, device=DEV), t_nrm_idx=faces)
    textures = [material.kd, material.ks, material.normal]
    if textured:
        extra.update(v_tex=uv, t_tex_idx=faces, material=material)
    mesh = Mesh(v, faces, **extra)
    light = EnvironmentLight.random(8, seed=2, min_res=4, lut_resolution=32)
    light.build_mips()
    w2clip, eye, field, scale = two_view_torus_scene(DEV, light)
    bg = torch.rand(2, 24, 24, 3, generator=torch.Generator().manual_seed(3)).to(DEV)
    leaves = [v, light.diffuse, *light.specular] + (textures if textured else [scale])
    return mesh, light, mesh.material if textured else field, w2clip, eye, bg, leaves


@pytest.mark.parametrize("spp,own_normals,textured,backend", [
    (1, False, False, None), (2, False, False, None), (1, True, False, None), (1, False, False, "triton"),
    (1, False, True, None), (2, True, True, None), (1, False, True, "triton")])
def test_dense_render_equals_the_covered_pixel_render(spp, own_normals, textured, backend, kernels):
    if backend is not None:  # the fused shading kernels (what a CUDA step runs; the interpreter on the CPU)
        pytest.importorskip("triton")
        kernels(shading=backend)
    mesh, light, field, w2clip, eye, bg, leaves = _scene(own_normals, textured)
    target = torch.rand(2, 24, 24, 3, generator=torch.Generator().manual_seed(4)).to(DEV)
    results = []
    for fn in (render_mesh, render_dense):
        out = fn(mesh, w2clip, eye, (24, 24), light=light, material=field, background=bg, spp=spp)
        loss = (out["shaded"] - target).abs().mean() + out["alpha"].pow(2).mean()
        results.append((out, torch.autograd.grad(loss, leaves)))
    (ref, g_ref), (dense, g_dense) = results
    assert 0.2 < float(ref["alpha"].detach().mean()) < 0.9  # both covered and empty pixels
    for k in ("shaded", "alpha"):
        torch.testing.assert_close(dense[k], ref[k], rtol=1e-5, atol=1e-6)
    for a, b in zip(g_dense, g_ref):
        assert bool(torch.isfinite(a).all())
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()) + 1e-9)


def test_dense_rows_are_finite_where_nothing_covers_and_jitter_gives_kd_grad():
    from meshlift.renderers import mesh_pbr_dense

    mesh, light, mat, w2clip, eye, bg, _ = _scene(False, textured=True)
    rows, _ = gbuffer_rows(mesh, w2clip, eye, (24, 24), background=bg, material=mat)
    made = dict(mesh_pbr_dense._STAND_INS)
    gbuffer_rows(mesh, w2clip, eye, (24, 24), background=bg, material=mat)  # a later step makes no new stand-ins
    assert mesh_pbr_dense._STAND_INS.keys() == made.keys()
    assert all(mesh_pbr_dense._STAND_INS[k] is made[k] for k in made)
    assert rows.uv.shape == (2 * 24 * 24, 2) and rows.uv_da.shape == (2 * 24 * 24, 4)
    assert rows.tangent.shape == (2 * 24 * 24, 4)
    out = render_dense(mesh, w2clip, eye, (24, 24), light=light, material=mat, background=bg, field_jitter=0.01)
    assert out["kd_grad"].shape == (2, 24, 24, 1) and bool(torch.isfinite(out["kd_grad"]).all())
    with pytest.raises(RenderError, match="no UVs"):
        gbuffer_rows(Mesh(mesh.v_pos, mesh.t_pos_idx), w2clip, eye, (24, 24), material=mat)

    mesh, light, field, w2clip, eye, bg, _ = _scene(False)
    rows, raster = gbuffer_rows(mesh, w2clip, eye, (24, 24), background=bg)
    P = 2 * 24 * 24
    assert rows.pos.shape == (P, 3) and rows.coverage.shape == (P, 1) and raster.rast.shape == (2, 24, 24, 4)
    empty = rows.coverage[:, 0] == 0
    assert bool(empty.any()) and bool((rows.pos[empty] == 0).all())
    assert bool((rows.geom_nrm[empty] == torch.tensor([0.0, 0.0, 1.0], device=DEV)).all())
    out = render_dense(mesh, w2clip, eye, (24, 24), light=light, material=field, background=bg,
                             field_jitter=0.01)
    assert out["kd_grad"].shape == (2, 24, 24, 1)
    assert bool((out["kd_grad"][0][rows.coverage.reshape(2, 24, 24, 1)[0] == 0] == 0).all())
    with pytest.raises(RenderError, match="callable field"):
        render_dense(mesh, w2clip, eye, (24, 24), light=light, material=None)
    with pytest.raises(RenderError, match="vertex colours"):
        gbuffer_rows(Mesh(mesh.v_pos, mesh.t_pos_idx, v_color=torch.ones_like(mesh.v_pos.detach())), w2clip, eye,
                     (24, 24))
    with pytest.raises(RenderError, match="background"):
        gbuffer_rows(mesh, w2clip, eye, (24, 24), background=bg[:, :8])
