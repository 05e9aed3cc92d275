"""meshlift.mesh.bake: UV rasterisation (texel centres), field baking, dilation and push-pull fill."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import trimesh

from meshlift.errors import MeshError, RenderError
from meshlift.mesh.bake import (
    bake_field_to_textures,
    dilate_texture,
    push_pull_fill,
    rasterize_uv,
    rasterize_uv_reference,
)
from meshlift.mesh.uv import unwrap
from meshlift.structures.mesh import Mesh


def _render_rasterize_available() -> bool:
    try:
        from meshlift.render import rasterize  # noqa: F401
    except ImportError:
        return False
    return True


RASTERIZERS = [
    "reference",
    pytest.param(
        "render",
        marks=pytest.mark.skipif(not _render_rasterize_available(), reason="meshlift.render.rasterize not built yet"),
    ),
]


def _plane_mesh() -> Mesh:
    """Two triangles whose positions equal their UVs (z = 0), covering part of the unit square."""
    uv = torch.tensor([[0.1, 0.05], [0.9, 0.1], [0.2, 0.8], [0.95, 0.9]])
    pos = torch.cat([uv, torch.zeros(4, 1)], 1)
    tri = torch.tensor([[0, 1, 2], [1, 3, 2]])
    return Mesh(v_pos=pos, t_pos_idx=tri, v_tex=uv.clone(), t_tex_idx=tri.clone())


def _naive_uv_raster(v_tex, t_tex_idx, R):
    """Per-texel, per-triangle loop: lowest covering triangle index and its barycentric weights."""
    tri_id = torch.full((R, R), -1, dtype=torch.long)
    bary = torch.zeros(R, R, 3, dtype=torch.float64)
    for r in range(R):
        for c in range(R):
            p = torch.tensor([(c + 0.5) / R, (r + 0.5) / R], dtype=torch.float64)
            for t in range(t_tex_idx.shape[0]):
                a, b, cc = (v_tex[int(i)].double() for i in t_tex_idx[t])
                m = torch.stack([b - a, cc - a], 1)
                if abs(float(torch.det(m))) < 1e-15:
                    continue
                l1, l2 = torch.linalg.solve(m, p - a)
                w = torch.stack([1 - l1 - l2, l1, l2])
                if bool((w >= 0).all()):
                    tri_id[r, c] = t
                    bary[r, c] = w
                    break
    return tri_id, bary


def test_reference_uv_raster_matches_naive_loop():
    g = torch.Generator().manual_seed(3)
    v_tex = torch.rand(9, 2, generator=g)
    t_tex_idx = torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 4, 8], [2, 1, 0]])  # overlapping, both windings
    tri_id, bary, count = rasterize_uv_reference(v_tex, t_tex_idx, 12)
    tri_ref, bary_ref = _naive_uv_raster(v_tex, t_tex_idx, 12)
    assert torch.equal(tri_id, tri_ref)
    torch.testing.assert_close(bary.double(), bary_ref, atol=1e-5, rtol=0)
    assert int(count.max()) >= 2 and torch.equal(count > 0, tri_ref >= 0)


@pytest.mark.parametrize("rasterizer", RASTERIZERS)
def test_texel_centre_convention(rasterizer):
    """Texel (r, c) samples uv ((c + .5)/R, (r + .5)/R): with positions = UVs the baked position says so."""
    mesh = _plane_mesh()
    R = 16
    tex = bake_field_to_textures(mesh, lambda x: {"p": x}, R, dilate=0, fill="none", rasterizer=rasterizer)
    tri_id, _ = rasterize_uv(mesh, R, rasterizer=rasterizer)
    cov = tri_id >= 0
    assert 0.3 < float(cov.float().mean()) < 0.9
    rr, cc = torch.meshgrid(torch.arange(R), torch.arange(R), indexing="ij")
    expect = torch.stack([(cc + 0.5) / R, (rr + 0.5) / R, torch.zeros(R, R)], -1)
    torch.testing.assert_close(tex["p"][cov], expect[cov], atol=1e-5, rtol=0)
    assert float(tex["p"][~cov].abs().max()) == 0.0  # fill="none" leaves empty texels at 0


@pytest.mark.skipif(not _render_rasterize_available(), reason="meshlift.render.rasterize not built yet")
def test_render_and_reference_uv_raster_agree():
    tm = trimesh.creation.torus(1.0, 0.35, major_sections=24, minor_sections=12)
    mesh = unwrap(Mesh(torch.tensor(tm.vertices).float(), torch.tensor(tm.faces)), resolution=64)
    a_id, a_w = rasterize_uv(mesh, 64, rasterizer="render")
    b_id, b_w = rasterize_uv(mesh, 64, rasterizer="reference")
    same = a_id == b_id
    # texel centres exactly on shared edges may go either way
    assert float(same.float().mean()) > 0.995
    torch.testing.assert_close(a_w[same], b_w[same], atol=1e-4, rtol=0)


def _unwrapped_torus() -> Mesh:
    tm = trimesh.creation.torus(1.0, 0.35, major_sections=40, minor_sections=20)
    return unwrap(Mesh(torch.tensor(tm.vertices).float(), torch.tensor(tm.faces)), resolution=256, padding=4)


def _field(x: torch.Tensor) -> dict:
    kd = 0.5 + 0.4 * torch.sin(1.5 * x)  # smooth, position-based colour
    rough = (0.3 + 0.1 * x[:, :1].abs()).clamp(0, 1)
    return {"kd": kd, "ks": torch.cat([torch.zeros_like(rough), rough, torch.zeros_like(rough)], 1)}


def _sample_bilinear(tex: torch.Tensor, uv: torch.Tensor) -> torch.Tensor:
    """Bilinear lookup of ``tex [R, R, C]`` at internal UVs ``[N, 2]`` (texel centre (c+.5)/R, conventions §7)."""
    grid = (uv * 2 - 1)[None, None]
    return F.grid_sample(tex.permute(2, 0, 1)[None], grid, mode="bilinear", align_corners=False)[0, :, 0].T


@pytest.mark.parametrize("rasterizer", RASTERIZERS)
def test_bake_analytic_field_roundtrip(rasterizer):
    mesh = _unwrapped_torus()
    R = 256
    tex = bake_field_to_textures(mesh, _field, R, dilate=4, rasterizer=rasterizer)
    assert set(tex) == {"kd", "ks"} and tex["kd"].shape == (R, R, 3) and tex["ks"].shape == (R, R, 3)
    assert tex["kd"].dtype == torch.float32
    # sample at random points inside every face: UV and position from the same barycentric weights
    g = torch.Generator().manual_seed(0)
    w = torch.rand(mesh.num_faces, 3, generator=g) + 0.05
    w = w / w.sum(1, keepdim=True)
    uv = (w[..., None] * mesh.v_tex[mesh.t_tex_idx]).sum(1)
    x = (w[..., None] * mesh.v_pos[mesh.t_pos_idx]).sum(1)
    err = (_sample_bilinear(tex["kd"], uv) - _field(x)["kd"]).abs()
    assert float(err.mean()) < 2e-3 and float(torch.quantile(err, 0.99)) < 1.5e-2
    # and at the vertices' UVs (chart borders: the dilated ring feeds the bilinear footprint)
    xv = mesh.v_pos[mesh.t_pos_idx].reshape(-1, 3)
    uvv = mesh.v_tex[mesh.t_tex_idx].reshape(-1, 2)
    err_v = (_sample_bilinear(tex["ks"], uvv) - _field(xv)["ks"]).abs()
    assert float(err_v.mean()) < 3e-3 and float(err_v.max()) < 0.05


def test_bake_chunking_and_no_grad():
    mesh = _plane_mesh()
    lin = torch.nn.Linear(3, 2)
    a = bake_field_to_textures(mesh, lambda x: {"f": lin(x)}, 24, rasterizer="reference")
    b = bake_field_to_textures(mesh, lambda x: {"f": lin(x)}, 24, chunk=7, rasterizer="reference")
    torch.testing.assert_close(a["f"], b["f"])
    assert not a["f"].requires_grad
    assert torch.isfinite(a["f"]).all()


def _naive_dilate(tex, mask, iters):
    tex, mask = tex.clone(), mask.clone()
    H, W, _ = tex.shape
    for _ in range(iters):
        new_t, new_m = tex.clone(), mask.clone()
        for r in range(H):
            for c in range(W):
                if mask[r, c]:
                    continue
                acc, n = 0, 0
                for dr in (-1, 0, 1):
                    for dc in (-1, 0, 1):
                        rr, cc = r + dr, c + dc
                        if 0 <= rr < H and 0 <= cc < W and mask[rr, cc]:
                            acc = acc + tex[rr, cc]
                            n += 1
                if n:
                    new_t[r, c] = acc / n
                    new_m[r, c] = True
        tex, mask = new_t, new_m
    return tex * mask[..., None], mask


def test_dilate_matches_naive_loop():
    g = torch.Generator().manual_seed(1)
    tex = torch.rand(9, 11, 2, generator=g)
    mask = torch.rand(9, 11, generator=g) < 0.15
    out, m = dilate_texture(tex, mask, 2)
    ref, mref = _naive_dilate(tex, mask, 2)
    assert torch.equal(m, mref)
    torch.testing.assert_close(out, ref)
    assert torch.equal(out[mask], tex[mask])  # data texels unchanged


def test_push_pull_fills_everything_and_keeps_data():
    g = torch.Generator().manual_seed(2)
    tex = torch.rand(13, 13, 3, generator=g)
    mask = torch.rand(13, 13, generator=g) < 0.1
    mask[0, 0] = True
    out = push_pull_fill(tex, mask)
    assert torch.isfinite(out).all()
    assert torch.equal(out[mask], tex[mask])
    lo, hi = tex[mask].min(0).values, tex[mask].max(0).values
    assert bool(((out >= lo - 1e-6) & (out <= hi + 1e-6)).all())  # convex combinations only
    const = push_pull_fill(torch.full((8, 8, 1), 0.7), torch.eye(8, dtype=torch.bool))
    torch.testing.assert_close(const, torch.full((8, 8, 1), 0.7))
    with pytest.raises(RenderError, match="empty"):
        push_pull_fill(tex, torch.zeros(13, 13, dtype=torch.bool))


def test_bake_errors():
    mesh = _plane_mesh()
    with pytest.raises(MeshError, match="no UVs"):
        bake_field_to_textures(Mesh(mesh.v_pos, mesh.t_pos_idx), _field, 8)
    with pytest.raises(RenderError, match="dict"):
        bake_field_to_textures(mesh, lambda x: x, 8, rasterizer="reference")
    with pytest.raises(RenderError, match=r"\[.*, C\]"):
        bake_field_to_textures(mesh, lambda x: {"kd": x[:, 0]}, 8, rasterizer="reference")
    with pytest.raises(RenderError, match="rasterizer"):
        bake_field_to_textures(mesh, _field, 8, rasterizer="nope")
    with pytest.raises(RenderError, match="dilate"):
        bake_field_to_textures(mesh, _field, 8, dilate=-1)
    tiny = Mesh(mesh.v_pos, mesh.t_pos_idx, v_tex=mesh.v_tex * 0.01, t_tex_idx=mesh.t_tex_idx)
    with pytest.raises(MeshError, match="no texel centre"):
        bake_field_to_textures(tiny, _field, 4, rasterizer="reference")


@pytest.mark.gpu
def test_bake_on_cuda_matches_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    mesh = _unwrapped_torus()
    cpu = bake_field_to_textures(mesh, _field, 512)
    gpu = bake_field_to_textures(mesh.to("cuda"), _field, 512)
    assert gpu["kd"].device.type == "cuda"
    diff = (gpu["kd"].cpu() - cpu["kd"]).abs()
    assert float((diff > 1e-3).float().mean()) < 1e-3  # texel centres on shared edges may differ


def _can_render() -> bool:
    try:
        from meshlift.renderers.mesh_pbr import render_mesh  # noqa: F401
        from meshlift.shading.light import EnvironmentLight  # noqa: F401
        from meshlift.shading.normals import prepare_shading_normal  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _can_render(), reason="renderer / shading not built yet")
def test_baked_textures_render_like_the_field():
    """Rendering the baked textures (meshlift.render.texture lookups) reproduces rendering the field itself."""
    import math

    from meshlift.cameras import look_at, projection_from_K
    from meshlift.renderers.mesh_pbr import render_mesh
    from meshlift.shading.light import EnvironmentLight
    from meshlift.structures.mesh import Material

    tm = trimesh.creation.torus(0.6, 0.25, major_sections=40, minor_sections=20)
    mesh = unwrap(Mesh(torch.tensor(tm.vertices).float(), torch.tensor(tm.faces)), resolution=256)
    tex = bake_field_to_textures(mesh, _field, 256)
    light = EnvironmentLight.constant(16, 0.8, trainable=False, lut_resolution=64)
    light.build_mips()
    eye = torch.tensor([[0.0, 1.5, 2.0], [2.0, -1.0, 0.5]], dtype=torch.float64)
    w2c = look_at(eye, torch.zeros_like(eye), torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64).expand_as(eye)).float()
    f = 0.5 * 64 / math.tan(math.radians(25))
    K = torch.tensor([[f, 0, 32.0], [0, f, 32.0], [0, 0, 1]])
    w2clip = projection_from_K(K.expand(2, 3, 3), 64, 64, 0.1, 10.0) @ w2c
    kw = dict(light=light)
    a = render_mesh(mesh, w2clip, eye.float(), (64, 64), material=_field, **kw)
    b = render_mesh(mesh, w2clip, eye.float(), (64, 64), material=Material(kd=tex["kd"], ks=tex["ks"]), **kw)
    m = a["alpha"][..., 0] > 0.999
    assert float(m.float().mean()) > 0.1
    err = (a["kd"] - b["kd"]).abs()[m]
    assert float(err.mean()) < 0.01 and float(torch.quantile(err, 0.99)) < 0.06
    # shaded colour too, except a few pixels on UV seams (mip footprints straddle charts there)
    err_s = (a["shaded"] - b["shaded"]).abs()[m]
    assert float(err_s.mean()) < 0.01 and float(torch.quantile(err_s, 0.99)) < 0.06


def test_bake_normal_map_inverts_perturb_normal_on_mirrored_charts():
    """Issue 15: a baked tangent-space map, applied with the renderer's frame (tangent_frames + handedness),
    gives back the target world normal at every texel — on xatlas charts of both orientations."""
    import trimesh

    from meshlift.geometry import mesh_ops
    from meshlift.mesh.bake import bake_normal_map, rasterize_uv
    from meshlift.mesh.uv import unwrap
    from meshlift.shading.normals import perturb_normal

    s = trimesh.creation.icosphere(subdivisions=2)
    m = unwrap(Mesh(v_pos=torch.tensor(s.vertices, dtype=torch.float32), t_pos_idx=torch.tensor(s.faces)), resolution=64)

    def target(x):
        return torch.nn.functional.normalize(x + 0.3 * torch.sin(6 * x), dim=-1)

    nm = bake_normal_map(m, target, 64)
    assert nm.shape == (64, 64, 3) and torch.allclose(nm.norm(dim=-1), torch.ones(64, 64), atol=1e-5)
    tri_id, bary = rasterize_uv(m, 64)
    cov = tri_id >= 0
    v_nrm, t_nrm = mesh_ops.smooth_vertex_normals(m.v_pos.double(), m.t_pos_idx)
    tg, ti = mesh_ops.tangent_frames(m.v_pos.double(), m.t_pos_idx, m.v_tex.double(), m.t_tex_idx, v_nrm, t_nrm)
    assert (tg[:, 3] < 0).any() and (tg[:, 3] > 0).any()  # both chart orientations are exercised
    tid, w = tri_id[cov], bary[cov].double()[..., None]
    p = (w * m.v_pos.double()[m.t_pos_idx[tid]]).sum(1)
    n = (w * v_nrm[t_nrm[tid]]).sum(1)
    t = (w * tg[ti[tid]]).sum(1)
    got = perturb_normal(nm[cov].double(), mesh_ops.safe_normalize(n), t)
    err = (got - target(p.float()).double()).norm(dim=-1)
    assert float(err.max()) < 0.02, float(err.max())
    # ignoring the handedness (the pre-issue-15 frame) would get the mirrored charts wrong
    bad = perturb_normal(nm[cov].double(), mesh_ops.safe_normalize(n), t[:, :3])
    assert float((bad - target(p.float()).double()).norm(dim=-1).max()) > 0.2


@pytest.mark.parametrize("rasterizer", RASTERIZERS)
def test_bake_through_the_per_face_atlas(rasterizer):
    """The unwrap's time-limit fallback (one cell per two faces) bakes a field as faithfully inside faces."""
    tm = trimesh.creation.torus(1.0, 0.35, major_sections=40, minor_sections=20)
    mesh = unwrap(Mesh(torch.tensor(tm.vertices).float(), torch.tensor(tm.faces)), resolution=512,
                  time_limit_s=0.0)
    assert mesh.extras["uv_unwrap"]["method"] == "face_atlas"
    R = 512
    tex = bake_field_to_textures(mesh, _field, R, dilate=4, rasterizer=rasterizer)
    g = torch.Generator().manual_seed(0)
    w = torch.rand(mesh.num_faces, 3, generator=g) + 0.2  # inside the faces (cells are ~16 texels)
    w = w / w.sum(1, keepdim=True)
    uv = (w[..., None] * mesh.v_tex[mesh.t_tex_idx]).sum(1)
    x = (w[..., None] * mesh.v_pos[mesh.t_pos_idx]).sum(1)
    err = (_sample_bilinear(tex["kd"], uv) - _field(x)["kd"]).abs()
    assert float(err.mean()) < 5e-4 and float(torch.quantile(err, 0.99)) < 5e-3  # measured 3e-5 / 6e-4
