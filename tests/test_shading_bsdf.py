"""meshlift.shading.bsdf: GGX pieces against their defining integrals and closed forms."""

import math

import torch

from meshlift.shading import bsdf


def _hemisphere_grid(n_theta=400, n_phi=800, dtype=torch.float64):
    """Midpoint quadrature of the upper hemisphere (z up): directions [N, 3] and solid angles [N, 1]."""
    th = (torch.arange(n_theta, dtype=dtype) + 0.5) * (math.pi / 2) / n_theta
    ph = (torch.arange(n_phi, dtype=dtype) + 0.5) * (2 * math.pi) / n_phi
    t, p = torch.meshgrid(th, ph, indexing="ij")
    d = torch.stack([torch.sin(t) * torch.cos(p), torch.sin(t) * torch.sin(p), torch.cos(t)], -1).reshape(-1, 3)
    w = (torch.sin(t) * (math.pi / 2 / n_theta) * (2 * math.pi / n_phi)).reshape(-1, 1)
    return d, w


def test_ndf_ggx_is_normalised():
    # ∫ D(h) (n·h) dω_h = 1 over the hemisphere (Walter et al. 2007, Eq. 4).
    h, w = _hemisphere_grid()
    for alpha in (0.1, 0.3, 0.7, 1.0):
        d = bsdf.ndf_ggx(torch.tensor(alpha ** 2, dtype=torch.float64), h[:, 2:3])
        assert abs(float((d * h[:, 2:3] * w).sum()) - 1.0) < 2e-3, alpha


def test_lambda_and_masking_closed_forms():
    a2 = torch.tensor(1.0, dtype=torch.float64)
    c = torch.tensor([[0.5]], dtype=torch.float64)
    # alpha = 1, cos = 0.5: tan^2 = 3, Λ = (sqrt(4) - 1) / 2 = 0.5.
    assert abs(float(bsdf.lambda_ggx(a2, c)) - 0.5) < 1e-9
    g = bsdf.masking_smith_ggx_correlated(a2, c, c)
    assert abs(float(g) - 0.5) < 1e-9
    # Smooth limit: G2 -> 1 for alpha -> 0; G2 symmetric.
    cs = torch.rand(100, 1, dtype=torch.float64) * 0.9 + 0.05
    assert float((1 - bsdf.masking_smith_ggx_correlated(1e-10, cs, cs.flip(0))).abs().max()) < 1e-4
    ar = torch.rand(100, 1, dtype=torch.float64)
    torch.testing.assert_close(bsdf.masking_smith_ggx_correlated(ar, cs, cs.flip(0)),
                               bsdf.masking_smith_ggx_correlated(ar, cs.flip(0), cs))


def test_fresnel_schlick():
    f = bsdf.fresnel_schlick(torch.tensor([0.04, 0.5, 1.0]), 1.0, torch.tensor([1.0]))
    torch.testing.assert_close(f, torch.tensor([0.04, 0.5, 1.0]), atol=1e-6, rtol=0)
    f0 = bsdf.fresnel_schlick(0.04, 1.0, torch.tensor([0.0]))
    assert abs(float(f0) - 1.0) < 1e-3


def _random_dirs(n, gen):
    v = torch.randn(n, 3, dtype=torch.float64, generator=gen)
    v = v / v.norm(dim=-1, keepdim=True)
    v[:, 2] = v[:, 2].abs() + 0.05
    return v / v.norm(dim=-1, keepdim=True)


def test_pbr_specular_reciprocity_and_energy():
    gen = torch.Generator().manual_seed(1)
    n = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    wo, wi = _random_dirs(64, gen), _random_dirs(64, gen)
    alpha = torch.rand(64, 1, dtype=torch.float64, generator=gen) * 0.9 + 0.05
    col = torch.rand(64, 3, dtype=torch.float64, generator=gen)
    # BRDF reciprocity: f(wo, wi) = f(wi, wo); pbr_specular returns f (n·wi).
    a = bsdf.pbr_specular(col, n, wo, wi, alpha) / wi[:, 2:3]
    b = bsdf.pbr_specular(col, n, wi, wo, alpha) / wo[:, 2:3]
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    # Energy: the directional albedo with F0 = 1 is <= 1, and -> 1 for smooth surfaces at normal view.
    ls, w = _hemisphere_grid(300, 600)
    for r, lo in ((0.3, 0.9), (0.6, 0.6), (1.0, 0.28)):
        v = torch.tensor([[math.sin(0.4), 0.0, math.cos(0.4)]], dtype=torch.float64)
        e = (bsdf.pbr_specular(torch.ones(1, 1, dtype=torch.float64), n, v, ls,
                               torch.tensor([[r * r]], dtype=torch.float64)) * w).sum()
        assert lo < float(e) <= 1.0, (r, float(e))


def test_pbr_specular_below_horizon_is_zero():
    n = torch.tensor([[0.0, 0.0, 1.0]])
    wo = torch.tensor([[0.0, 0.6, 0.8]])
    wi = torch.tensor([[0.0, 0.6, -0.8]])
    assert float(bsdf.pbr_specular(torch.ones(1, 3), n, wo, wi, torch.tensor([[0.25]])).abs().max()) == 0.0


def test_pbr_bsdf_composition_matches_hand_computation():
    kd = torch.tensor([[0.8, 0.4, 0.2]], dtype=torch.float64)
    arm = torch.tensor([[0.25, 0.5, 0.3]], dtype=torch.float64)
    pos = torch.zeros(1, 3, dtype=torch.float64)
    n = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    view = torch.tensor([[0.0, 1.0, 2.0]], dtype=torch.float64)
    light = torch.tensor([[1.0, -0.5, 1.5]], dtype=torch.float64)
    out = bsdf.pbr_bsdf(kd, arm, pos, n, view, light)
    wo = view / view.norm()
    wi = light / light.norm()
    h = (wo + wi) / (wo + wi).norm()
    a2 = 0.25 ** 2
    nh, no, ni, oh = float(h[0, 2]), float(wo[0, 2]), float(wi[0, 2]), float((wo * h).sum())
    d = a2 / (math.pi * (nh * nh * (a2 - 1) + 1) ** 2)
    lam = lambda c: 0.5 * (math.sqrt(1 + a2 * (1 - c * c) / (c * c)) - 1)  # noqa: E731
    g = 1 / (1 + lam(no) + lam(ni))
    f0 = (0.04 * 0.7 + kd * 0.3) * 0.75
    f = f0 + (1 - f0) * (1 - oh) ** 5
    expected = kd * 0.7 * ni / math.pi + f * d * g / (4 * no)
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-12)


def test_pbr_bsdf_gradcheck():
    gen = torch.Generator().manual_seed(3)
    kd = torch.rand(4, 3, dtype=torch.float64, generator=gen).requires_grad_()
    arm = (torch.rand(4, 3, dtype=torch.float64, generator=gen) * 0.8 + 0.15).requires_grad_()
    pos = (torch.randn(4, 3, dtype=torch.float64, generator=gen) * 0.1).requires_grad_()
    n = _random_dirs(4, gen).requires_grad_()
    view = torch.tensor([[0.3, 0.2, 3.0]], dtype=torch.float64)
    light = torch.tensor([[-1.0, 0.5, 2.0]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda *a: bsdf.pbr_bsdf(*a, view, light), (kd, arm, pos, n))


def test_lambert_and_reflect():
    n = torch.tensor([0.0, 0.0, 1.0])
    assert abs(float(bsdf.lambert(n, torch.tensor([0.0, 0.6, 0.8]))) - 0.8 / math.pi) < 1e-7
    assert float(bsdf.lambert(n, torch.tensor([0.0, 0.6, -0.8]))) == 0.0
    torch.testing.assert_close(bsdf.reflect(torch.tensor([0.6, 0.0, 0.8]), n), torch.tensor([-0.6, 0.0, 0.8]))
    z = torch.zeros(1, 3, requires_grad=True)
    bsdf.safe_normalize(z).sum().backward()
    assert bool(torch.isfinite(z.grad).all())
