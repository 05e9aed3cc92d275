"""meshlift.shading.light: prefilter operators vs naive twins, split-sum shading vs brute-force integrals."""

import math

import pytest
import torch

from meshlift.errors import RenderError
from meshlift.io.hdr import read_light, write_light
from meshlift.shading import bsdf
from meshlift.shading import cubemap as cm
from meshlift.shading.brdf_lut import brdf_lut, lookup_brdf_lut
from meshlift.shading.light import (
    EnvironmentLight,
    diffuse_prefilter,
    diffuse_prefilter_reference,
    ggx_cutoff_cos,
    specular_prefilter,
    specular_prefilter_reference,
)


LUT_RES = 64  # a small DFG table keeps the tests fast (bilinear lookups; error ~1e-3)


@pytest.mark.parametrize("src,out,rough", [(4, 4, 0.5), (8, 8, 0.3), (4, 8, 0.3), (8, 8, 1.0), (8, 16, 0.08)])
def test_specular_prefilter_matches_reference_forward_backward(src, out, rough):
    cube = torch.rand(6, src, src, 3, dtype=torch.float64, requires_grad=True)
    a = specular_prefilter(cube, rough, out_res=out)
    b = specular_prefilter_reference(cube, rough, out_res=out)
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    g = torch.rand_like(a)
    ga, = torch.autograd.grad((a * g).sum(), cube)
    gb, = torch.autograd.grad((b * g).sum(), cube)
    torch.testing.assert_close(ga, gb, rtol=1e-10, atol=1e-12)


def test_specular_prefilter_gradcheck_and_constant():
    cube = torch.rand(6, 2, 2, 1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda c: specular_prefilter(c, 0.6), (cube,))
    const = torch.full((6, 8, 8, 3), 2.5)
    torch.testing.assert_close(specular_prefilter(const, 0.3), const)  # rows are normalised


def test_cutoff_cos_is_monotone():
    c = [ggx_cutoff_cos(r) for r in (0.08, 0.2, 0.5, 1.0)]
    assert all(a > b for a, b in zip(c, c[1:]))
    assert c[-1] < 0.05 and c[0] > 0.999


def test_diffuse_prefilter_matches_reference_and_closed_form():
    cube = torch.rand(6, 4, 4, 3, dtype=torch.float64)
    torch.testing.assert_close(diffuse_prefilter(cube), diffuse_prefilter_reference(cube))
    # L(w) = a + b·w has irradiance / pi = a + (2/3) b·n (cosine lobe: ∫ cos (b·w) dw = (2 pi / 3) b·n).
    res = 16
    d = cm.cube_texel_directions(res, torch.float64)
    b = torch.tensor([0.3, -0.5, 0.2], dtype=torch.float64)
    env = (1.0 + d @ b)[..., None]
    expected = (1.0 + (2.0 / 3.0) * (d @ b))[..., None]
    torch.testing.assert_close(diffuse_prefilter(env), expected, atol=5e-3, rtol=0)


def _sphere_quadrature(n_theta=200, n_phi=400):
    th = (torch.arange(n_theta, dtype=torch.float64) + 0.5) * math.pi / n_theta
    ph = (torch.arange(n_phi, dtype=torch.float64) + 0.5) * 2 * math.pi / n_phi
    t, p = torch.meshgrid(th, ph, indexing="ij")
    d = torch.stack([torch.sin(t) * torch.cos(p), torch.cos(t), torch.sin(t) * torch.sin(p)], -1).reshape(-1, 3)
    w = (torch.sin(t) * (math.pi / n_theta) * (2 * math.pi / n_phi)).reshape(-1, 1)
    return d, w


def _env_fn(d):
    """A smooth HDR environment: sky gradient plus a broad warm lobe."""
    a = torch.tensor([0.6, 0.5, -0.62], dtype=d.dtype)
    a = a / a.norm()
    lobe = torch.exp(4.0 * (d @ a - 1.0))[..., None]
    sky = (1.0 + 0.6 * d[..., 1:2])
    return sky * torch.tensor([0.4, 0.5, 0.7], dtype=d.dtype) + 3.0 * lobe * torch.tensor([1.0, 0.8, 0.5], dtype=d.dtype)


def _brute_force_shade(n, v, kd, ks, env):
    """∫ [kd(1-m)/pi max(n·l,0) + f_spec(v,l)(n·l)] L(l) dl (1 - o) by quadrature over the sphere."""
    ls, w = _sphere_quadrature()
    radiance = env(ls)
    o, r, m = ks[0], ks[1], ks[2]
    f0 = (0.04 * (1 - m) + kd * m)[None]
    spec = bsdf.pbr_specular(f0, n[None], v[None], ls, torch.tensor([[r * r]], dtype=torch.float64), min_roughness=0)
    diff = (kd * (1 - m))[None] * bsdf.lambert(n[None], ls)
    return ((diff + spec) * radiance * w).sum(0) * (1 - o)


def _light_for(env, res=32, min_res=8):
    base = env(cm.cube_texel_directions(res, torch.float64)).float()
    light = EnvironmentLight(base, min_res=min_res, lut_resolution=LUT_RES)
    light.build_mips()
    return light


def test_split_sum_exact_for_constant_environment():
    light = EnvironmentLight.constant(16, (0.7, 1.0, 1.3), min_res=4, lut_resolution=LUT_RES)
    light.build_mips()
    n = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    for theta_v, ks in ((0.2, (0.0, 0.5, 0.0)), (0.9, (0.3, 0.3, 0.8)), (0.5, (0.0, 0.9, 0.2))):
        v = torch.tensor([math.sin(theta_v), 0.0, math.cos(theta_v)], dtype=torch.float64)
        kd = torch.tensor([0.8, 0.3, 0.2], dtype=torch.float64)
        ks_t = torch.tensor(ks, dtype=torch.float64)
        const = lambda d: torch.ones(d.shape[0], 3, dtype=d.dtype) * torch.tensor([0.7, 1.0, 1.3], dtype=d.dtype)  # noqa: E731
        ref = _brute_force_shade(n, v, kd, ks_t, const)
        got = light.shade(torch.zeros(1, 3), n[None].float(), kd[None].float(), ks_t[None].float(), v[None].float())[0]
        torch.testing.assert_close(got.double(), ref, rtol=1.5e-2, atol=2e-3)


def test_split_sum_diffuse_matches_brute_force():
    # The diffuse cube is filtered from the coarsest mip (16 here, nvdiffrec's LIGHT_MIN_RES).
    light = _light_for(_env_fn, res=32, min_res=16)
    g = torch.Generator().manual_seed(0)
    n = torch.randn(6, 3, dtype=torch.float64, generator=g)
    n = n / n.norm(dim=-1, keepdim=True)
    kd = torch.tensor([0.6, 0.5, 0.4], dtype=torch.float64)
    ks = torch.tensor([0.2, 0.5, 0.0], dtype=torch.float64)
    ls, w = _sphere_quadrature()
    radiance = _env_fn(ls)
    for i in range(n.shape[0]):
        ref = (torch.clamp(ls @ n[i], min=0)[:, None] / math.pi * radiance * w).sum(0) * kd * (1 - ks[0])
        got = light.shade(torch.zeros(1, 3), n[i : i + 1].float(), kd[None].float(), ks[None].float(),
                          n[i : i + 1].float(), specular=False)[0]
        torch.testing.assert_close(got.double(), ref, rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("rough", [0.5, 1.0])
def test_split_sum_specular_close_to_brute_force(rough):
    # The split sum is an approximation (Karis 2013): for this smooth environment at normal incidence it
    # is within ~8% of the full integral at roughness 0.5 (5% without nvdiffrec's lobe cutoff; the same
    # at face size 64, so it is the approximation, not the discretisation) and ~6% at roughness 1.
    # Roughness 0.5 and 1.0 are exact mip levels here.
    light = _light_for(_env_fn)
    g = torch.Generator().manual_seed(1)
    n = torch.randn(5, 3, dtype=torch.float64, generator=g)
    n = n / n.norm(dim=-1, keepdim=True)
    kd = torch.tensor([0.9, 0.6, 0.3], dtype=torch.float64)
    ks = torch.tensor([0.0, rough, 1.0], dtype=torch.float64)  # metal: specular only
    for i in range(n.shape[0]):
        ref = _brute_force_shade(n[i], n[i], kd, ks, _env_fn)
        got = light.shade(torch.zeros(1, 3), n[i : i + 1].float(), kd[None].float(), ks[None].float(),
                          n[i : i + 1].float())[0]
        rel = float(((got.detach().double() - ref).abs() / ref).max())
        assert rel < 0.1, (i, rel, got, ref)


@pytest.mark.parametrize("level,rough", [(1, 0.5), (2, 1.0)])
def test_prefiltered_level_matches_continuous_lobe_integral(level, rough):
    # specular[level](N) = ∫ L(l) D(h)(N·l) dl / ∫ D(h)(N·l) dl over N·l >= cos_cut (N = V), by quadrature.
    light = _light_for(_env_fn)
    res = light.specular[level].shape[1]
    dirs = cm.cube_texel_directions(res, torch.float64).reshape(-1, 3)
    ls, w = _sphere_quadrature()
    radiance = _env_fn(ls)
    cos_cut = ggx_cutoff_cos(rough)
    a2 = rough ** 4
    for t in (0, 37, 101, 250, 383):
        nl = ls @ dirs[t]
        nh = torch.sqrt(torch.clamp((1 + nl) / 2, 0, 1))
        d = a2 / (math.pi * (nh * nh * (a2 - 1) + 1) ** 2)
        wt = torch.where(nl >= cos_cut, d * nl, torch.zeros_like(nl))[:, None] * w
        ref = (wt * radiance).sum(0) / wt.sum()
        got = light.specular[level].reshape(-1, 3)[t].double()
        torch.testing.assert_close(got, ref, rtol=2e-2, atol=0)


def test_mip_chain_and_roughness_mapping():
    light = EnvironmentLight.random(32, min_res=4)
    light.build_mips()
    assert [s.shape[1] for s in light.specular] == [32, 16, 8, 4]
    assert light.diffuse.shape == (6, 4, 4, 3)
    rough = light.level_roughness(4)
    assert rough[0] == 0.08 and rough[2] == 0.5 and rough[3] == 1.0
    r = torch.tensor([0.0, 0.08, 0.29, 0.5, 0.75, 1.0])
    torch.testing.assert_close(light.get_mip(r), torch.tensor([0.0, 0.0, 1.0, 2.0, 2.5, 3.0]))


def test_shade_gradients_reach_the_light_and_materials():
    light = EnvironmentLight.random(16, min_res=4, lut_resolution=LUT_RES)
    light.build_mips()
    pos = torch.zeros(2, 4, 4, 3)
    n = torch.nn.functional.normalize(torch.randn(2, 4, 4, 3), dim=-1)
    kd = torch.rand(2, 4, 4, 3, requires_grad=True)
    ks = (torch.rand(2, 4, 4, 3) * 0.8 + 0.1).requires_grad_()
    view = torch.tensor([0.0, 0.0, 3.0]).reshape(1, 1, 1, 3)
    out = light.shade(pos, n, kd, ks, view)
    assert out.shape == (2, 4, 4, 3)
    (out.sum() + light.regularizer()).backward()
    for t in (light.base.grad, kd.grad, ks.grad):
        assert t is not None and bool(torch.isfinite(t).all()) and float(t.abs().sum()) > 0
    assert float(ks.grad[..., 1].abs().sum()) > 0  # roughness gets a gradient through mip level + LUT


def test_bounded_memory_coarsening_is_close():
    env = _env_fn(cm.cube_texel_directions(32, torch.float64)).float()
    exact = EnvironmentLight(env, min_res=8)
    # 200k entries: the roughness-0.5 level (16^2 per face, ~650k entries) is gathered from the 8^2 mip.
    coarse = EnvironmentLight(env, min_res=8, max_nnz_per_level=200_000)
    exact.build_mips()
    coarse.build_mips()
    a, b = exact.specular[1].detach(), coarse.specular[1].detach()
    assert float((a - b).abs().max()) > 0
    assert float(((a - b).abs() / a.abs()).max()) < 0.05
    torch.testing.assert_close(exact.specular[0], coarse.specular[0])
    # A budget that cannot be met without blurring narrow lobes is exceeded with a warning.
    with pytest.warns(UserWarning, match="max_nnz_per_level"):
        EnvironmentLight(env, min_res=8, max_nnz_per_level=1000).build_mips()


def test_regularizer_clamp_and_validation():
    light = EnvironmentLight.constant(8, 0.5, min_res=4)
    assert float(light.regularizer().detach()) == 0.0
    light.base.data[0, 0, 0] = torch.tensor([-1.0, 5.0, 0.2])
    light.clamp_(min=0.0, max=2.0)
    torch.testing.assert_close(light.base[0, 0, 0], torch.tensor([0.0, 2.0, 0.2]))
    with pytest.raises(RenderError, match="build_mips"):
        light.shade(torch.zeros(1, 3), torch.zeros(1, 3), torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1, 3))
    with pytest.raises(RenderError, match=r"\[6, R, R, 3\]"):
        EnvironmentLight(torch.zeros(6, 8, 4, 3))
    with pytest.raises(RenderError, match="halved"):
        EnvironmentLight(torch.zeros(6, 20, 20, 3), min_res=4)


def test_latlong_roundtrip_through_light():
    img = _env_fn(cm.latlong_directions(32, dtype=torch.float64)).float()
    light = EnvironmentLight.from_latlong(img, 16)
    back = light.to_latlong(32)
    assert back.shape == (32, 64, 3)
    assert float((back - img).abs().max()) < 0.1 * float(img.max())


def test_save_load_roundtrip(tmp_path):
    img = _env_fn(cm.latlong_directions(32, dtype=torch.float64)).float()
    light = EnvironmentLight.from_latlong(img, 16, min_res=4)
    path = write_light(tmp_path / "probe.hdr", light, height=32)
    again = read_light(path, res=16, trainable=False, min_res=4)
    assert not again.base.requires_grad
    torch.testing.assert_close(again.base, light.base.detach(), rtol=2e-2, atol=1e-2)


@pytest.mark.gpu
def test_cuda_matches_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    base = _env_fn(cm.cube_texel_directions(32, torch.float64)).float()
    outs, grads = [], []
    for device in ("cpu", "cuda"):
        light = EnvironmentLight(base.to(device), min_res=8, lut_resolution=LUT_RES)
        light.build_mips()
        g = torch.Generator().manual_seed(0)
        n = torch.nn.functional.normalize(torch.randn(64, 3, generator=g), dim=-1).to(device)
        kd = torch.rand(64, 3, generator=g).to(device)
        ks = torch.rand(64, 3, generator=g).to(device)
        out = light.shade(torch.zeros(64, 3, device=device), n, kd, ks, 3 * n + 0.1)
        out.sum().backward()
        outs.append(out.detach().cpu())
        grads.append(light.base.grad.cpu())
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)
