"""Gaussian splatting renderer (torch reference): closed forms, a brute-force oracle, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from meshlift.errors import RenderError
from meshlift.render import splat_reference as ref
from meshlift.render.splat import (
    SplatSettings,
    apply_filter_3d,
    depth_to_normals,
    filter_3d_variance,
    gaussian_statistics,
    rasterize_gaussians,
    rgb_to_sh,
    sh_to_rgb,
)
from meshlift.structures.gaussians import Gaussians

from _splat_scenes import brute_force, camera, random_scene

TORCH = dict(backend="torch")


def _render(scene, w2c, K, W, H, settings=None, **kw):
    means, quats, scales, opac, colors = scene
    return rasterize_gaussians(means, quats, scales, opac, colors, w2c, K, W, H,
                               settings=settings or SplatSettings(), backend="torch", **kw)


# ---------------------------------------------------------------- SH ---------------------------


def test_sh_basis_is_orthonormal_on_the_sphere():
    # Gauss-Legendre in cos(theta) x uniform phi integrates polynomials of degree <= 6 exactly.
    import numpy as np

    ct, wt = np.polynomial.legendre.leggauss(12)
    phi = torch.arange(24, dtype=torch.float64) * (2 * math.pi / 24)
    ct = torch.tensor(ct)
    st = torch.sqrt(1 - ct * ct)
    d = torch.stack([st[:, None] * torch.cos(phi), st[:, None] * torch.sin(phi), ct[:, None].expand(-1, 24)], -1)
    Y = ref.sh_basis(3, d.reshape(-1, 3))  # [M,16]
    wq = (torch.tensor(wt)[:, None] * (2 * math.pi / 24)).expand(-1, 24).reshape(-1)
    gram = (Y * wq[:, None]).T @ Y
    assert torch.allclose(gram, torch.eye(16, dtype=torch.float64), atol=1e-12)


def test_sh_basis_matches_scipy_real_sh_with_condon_shortley_phase():
    special = pytest.importorskip("scipy.special")
    g = torch.Generator().manual_seed(1)
    d = torch.nn.functional.normalize(torch.randn(50, 3, generator=g, dtype=torch.float64), dim=-1)
    theta = torch.acos(d[:, 2]).numpy()
    phi = torch.atan2(d[:, 1], d[:, 0]).numpy()
    Y = ref.sh_basis(3, d)
    k = 0
    for l in range(4):
        for m in range(-l, l + 1):
            c = special.sph_harm_y(l, abs(m), theta, phi)
            if m < 0:
                expect = math.sqrt(2) * c.imag
            elif m == 0:
                expect = c.real
            else:
                expect = math.sqrt(2) * c.real
            assert torch.allclose(Y[:, k], torch.tensor(expect), atol=1e-12), (l, m)
            k += 1


def test_sh_colors_follow_view_direction_from_camera_centre():
    # One Gaussian straight ahead; coefficient 2 (Y_1,0 = C1 z) only: colour = C1 * 1 * c + 0.5.
    w2c, K = camera(16, 16, 20.0)
    means = torch.tensor([[0.0, 0.0, 2.0]], dtype=torch.float64)
    sh = torch.zeros(1, 4, 3, dtype=torch.float64)
    sh[0, 2] = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    sh[0, 0] = rgb_to_sh(torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    q = torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64)
    s = torch.full((1, 3), 2.0, dtype=torch.float64)
    o = torch.tensor([0.9], dtype=torch.float64)
    img, alpha, _ = rasterize_gaussians(means, q, s, o, sh, w2c, K, 16, 16, sh_degree=1, backend="torch")
    expect = torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64) + ref.SH_C1 * sh[0, 2]
    assert torch.allclose(img[0, 8, 8] / alpha[0, 8, 8], expect, atol=1e-9)
    assert torch.allclose(sh_to_rgb(rgb_to_sh(expect)), expect)


# ---------------------------------------------------------------- projection -------------------


def test_projection_matches_the_ewa_closed_form():
    torch.manual_seed(3)
    w2c, K = camera(64, 48, 55.0, C=2)
    means, quats, scales, opac, _ = random_scene(7, seed=3, spread=0.3)
    proj = ref.project_gaussians(means, quats, scales, opac, w2c, K, 64, 48, 0.01, 100.0, eps2d=0.3)
    for c in range(2):
        for n in range(7):
            R, t = w2c[c, :3, :3], w2c[c, :3, 3]

            def pi(p):
                q = R @ p + t
                return torch.stack([K[c, 0, 0] * q[0] / q[2] + K[c, 0, 2], K[c, 1, 1] * q[1] / q[2] + K[c, 1, 2]])

            J = torch.autograd.functional.jacobian(pi, means[n])  # d pixel / d world  [2,3]
            Rg = ref.quat_to_rotmat(quats[n:n + 1])[0]
            Sigma = Rg @ torch.diag(scales[n] ** 2) @ Rg.T
            cov2d = J @ Sigma @ J.T + 0.3 * torch.eye(2, dtype=torch.float64)
            inv = torch.linalg.inv(cov2d)
            assert torch.allclose(proj["means2d"][c, n], pi(means[n]), atol=1e-10)
            assert torch.allclose(proj["conics"][c, n], torch.stack([inv[0, 0], inv[0, 1], inv[1, 1]]), rtol=1e-9)
            assert torch.allclose(proj["depths"][c, n], (R @ means[n] + t)[2])
            # opacity-aware radius: ceil(min(3.33, sqrt(2 ln(255 o))) sqrt(cov_xx))
            ext = min(3.33, math.sqrt(2 * math.log(255 * float(opac[n]))))
            assert int(proj["radii"][c, n, 0]) == math.ceil(ext * math.sqrt(float(cov2d[0, 0])))
            assert int(proj["radii"][c, n, 1]) == math.ceil(ext * math.sqrt(float(cov2d[1, 1])))


def test_projection_culls_behind_camera_outside_near_far_and_offscreen():
    w2c, K = camera(32, 32, 30.0)
    means = torch.tensor([[0, 0, -2.0], [0, 0, 0.005], [0, 0, 2.0], [0, 0, 200.0], [50.0, 0, 2.0]],
                         dtype=torch.float64)
    q = torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64).expand(5, 4)
    s = torch.full((5, 3), 0.05, dtype=torch.float64)
    o = torch.full((5,), 0.8, dtype=torch.float64)
    proj = ref.project_gaussians(means, q, s, o, w2c, K, 32, 32, 0.01, 100.0)
    vis = (proj["radii"] > 0).all(-1)[0].tolist()
    assert vis == [False, False, True, False, False]
    for k in ("means2d", "conics", "opacities"):
        assert torch.isfinite(proj[k]).all()


def test_antialiased_compensation_and_filter_3d():
    w2c, K = camera(32, 32, 30.0)
    means = torch.tensor([[0.0, 0.0, 2.0]], dtype=torch.float64)
    q = torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64)
    s = torch.full((1, 3), 0.02, dtype=torch.float64)
    o = torch.tensor([0.8], dtype=torch.float64)
    p0 = ref.project_gaussians(means, q, s, o, w2c, K, 32, 32, 0.01, 100.0, antialiased=True)
    var2d = (30.0 * 0.02 / 2.0) ** 2
    assert torch.allclose(p0["opacities"], o * (var2d / (var2d + 0.3)), rtol=1e-9)  # sqrt(det ratio), isotropic
    v = filter_3d_variance(means, w2c, K, 32, 32)
    assert torch.allclose(v, torch.tensor([0.2 * (2.0 / 30.0) ** 2], dtype=torch.float64))
    s2, o2 = apply_filter_3d(s, o, v)
    assert torch.allclose(s2, torch.sqrt(s ** 2 + v[:, None]))
    assert torch.allclose(o2, o * torch.sqrt((s ** 2 / (s ** 2 + v[:, None])).prod(-1)))


# ---------------------------------------------------------------- compositing vs brute force ---


def _compare_to_brute_force(scene, W, H, C=1, settings=None, atol=1e-10):
    settings = settings or SplatSettings(outputs=("median_depth",))
    w2c, K = camera(W, H, 40.0, C=C)
    img, alpha, info = _render(scene, w2c, K, W, H, settings)
    means, quats, scales, opac, colors = scene
    proj = ref.project_gaussians(means, quats, scales, opac, w2c, K, W, H, 0.01, 1e10)
    feats = colors[None].expand(C, -1, -1)
    for c in range(C):
        bf = brute_force(proj, feats, W, H, cam=c)
        assert torch.allclose(img[c], bf["image"], atol=atol), (img[c] - bf["image"]).abs().max()
        assert torch.allclose(alpha[c], bf["alpha"], atol=atol)
        assert torch.allclose(info["median_depth"][c], bf["median"], atol=atol)
    return img, alpha, info


def test_overlapping_gaussians_match_brute_force_two_cameras_odd_size():
    _compare_to_brute_force(random_scene(40, seed=1), 45, 37, C=2)


def test_gaussian_behind_camera_and_one_covering_the_frame():
    means, quats, scales, opac, colors = random_scene(12, seed=2)
    means = torch.cat([means, torch.tensor([[0.0, 0.0, -1.0], [0.0, 0.0, 5.0]], dtype=torch.float64)])
    quats = torch.cat([quats, torch.tensor([[1.0, 0, 0, 0]] * 2, dtype=torch.float64)])
    scales = torch.cat([scales, torch.tensor([[0.5, 0.5, 0.5], [20.0, 20.0, 1.0]], dtype=torch.float64)])
    opac = torch.cat([opac, torch.tensor([0.9, 0.7], dtype=torch.float64)])
    colors = torch.cat([colors, torch.tensor([[1.0, 0, 0], [0, 0, 1.0]], dtype=torch.float64)])
    img, alpha, info = _compare_to_brute_force((means, quats, scales, opac, colors), 40, 36)
    assert not bool(info["visible"][0, -2])  # behind the camera
    assert bool(info["visible"][0, -1])
    assert float(alpha.min()) > 0.68  # the big one (o = 0.7, 160 px std dev) covers every pixel


def test_opaque_stack_hits_the_transmittance_stop_exactly():
    # 12 nearly opaque full-frame layers: T falls below 1e-4 after two layers of alpha 0.99.
    n = 12
    means = torch.zeros(n, 3, dtype=torch.float64)
    means[:, 2] = torch.linspace(2, 4, n, dtype=torch.float64)
    quats = torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64).expand(n, 4)
    scales = torch.tensor([[10.0, 10.0, 0.1]], dtype=torch.float64).expand(n, 3).clone()
    opac = torch.full((n,), 0.995, dtype=torch.float64)
    colors = torch.rand(n, 3, dtype=torch.float64)
    scene = (means, quats, scales, opac, colors)
    img, alpha, _ = _compare_to_brute_force(scene, 20, 18)
    # layers 0 and 1 contribute (T: 1 -> 0.01 -> 1e-4 would be reached by layer 2: 1e-4 < 1e-4 is false)
    assert torch.allclose(alpha[0, 9, 10], torch.tensor([1 - 0.01 * 0.01], dtype=torch.float64), atol=1e-9) or \
        float(alpha[0, 9, 10]) > 0.99
    # tiny chunks: the stop state is carried across chunks
    _compare_to_brute_force(scene, 20, 18, settings=SplatSettings(outputs=("median_depth",), chunk_elements=256))


def test_thousands_of_tiny_gaussians_match_brute_force():
    _compare_to_brute_force(random_scene(2000, seed=4, scale=(0.002, 0.01), spread=0.9), 64, 48,
                            settings=SplatSettings(outputs=("median_depth",), chunk_elements=1 << 14))


def test_empty_image_and_zero_gaussians():
    w2c, K = camera(20, 20, 20.0)
    means, quats, scales, opac, colors = random_scene(5, seed=5)
    means = means.clone()
    means[:, 2] = -3.0  # all behind the camera
    bg = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    img, alpha, info = rasterize_gaussians(means, quats, scales, opac, colors, w2c, K, 20, 20, background=bg,
                                           **TORCH)
    assert torch.equal(alpha, torch.zeros_like(alpha))
    assert torch.allclose(img, bg.expand_as(img))
    assert info["flatten_ids"].numel() == 0
    z = torch.zeros(0, 3, dtype=torch.float64)
    img, alpha, info = rasterize_gaussians(z, torch.zeros(0, 4, dtype=torch.float64), z,
                                           torch.zeros(0, dtype=torch.float64), z, w2c, K, 20, 20,
                                           background=bg, render_mode="RGB+ED", **TORCH)
    assert img.shape == (1, 20, 20, 4) and torch.allclose(img[..., :3], bg.expand(1, 20, 20, 3))
    assert torch.equal(img[..., 3], torch.zeros(1, 20, 20, dtype=torch.float64))
    assert info["means2d"].shape == (1, 0, 2)


def test_chunking_does_not_change_forward_or_backward(monkeypatch):
    scene = [t.clone().requires_grad_(True) for t in random_scene(20, seed=6)]
    w2c, K = camera(36, 20, 40.0)  # 3x2 tiles
    calls = []
    real = ref.checkpoint
    monkeypatch.setattr(ref, "checkpoint", lambda *a, **k: calls.append(1) or real(*a, **k))
    outs = []
    for budget in (1 << 22, 256 * 8):  # > 32 intersections (4 x 8 pairs a pixel) -> checkpointed
        assert not calls
        st = SplatSettings(outputs=("median_depth", "normal"), chunk_elements=budget)
        img, alpha, info = _render(scene, w2c, K, 36, 20, st, render_mode="RGB+ED")
        loss = (img ** 2).sum() + alpha.sum() + info["median_depth"].sum() + info["normal"].pow(2).sum()
        grads = torch.autograd.grad(loss, scene)
        outs.append((img.detach(), info["median_depth"].detach(), grads))
    assert calls and info["flatten_ids"].numel() > 32  # the small budget went through activation checkpointing
    assert torch.allclose(outs[0][0], outs[1][0], atol=1e-12)
    assert torch.allclose(outs[0][1], outs[1][1], atol=1e-12)
    for a, b in zip(outs[0][2], outs[1][2]):
        assert torch.allclose(a, b, atol=1e-10)


def test_gradients_match_brute_force_oracle():
    scene = [t.clone().requires_grad_(True) for t in random_scene(15, seed=7)]
    W, H = 36, 20
    w2c, K = camera(W, H, 40.0)
    img, alpha, info = _render(scene, w2c, K, W, H)
    wimg = torch.rand_like(img)
    g1 = torch.autograd.grad((img * wimg).sum() + alpha.sum(), scene)
    proj = ref.project_gaussians(*scene[:4], w2c, K, W, H, 0.01, 1e10)
    bf = brute_force(proj, scene[4][None], W, H)
    g2 = torch.autograd.grad((bf["image"] * wimg[0]).sum() + bf["alpha"].sum(), scene)
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, atol=1e-9)


def test_means2d_keeps_its_grad_after_backward():
    scene = [t.clone().requires_grad_(True) for t in random_scene(10, seed=8)]
    w2c, K = camera(32, 32, 40.0)
    img, alpha, info = _render(scene, w2c, K, 32, 32)
    img.sum().backward()
    g = info["means2d"].grad
    assert g is not None and g.shape == (1, 10, 2) and float(g.abs().sum()) > 0


@pytest.mark.parametrize("fast_mode", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_float64_gradcheck_tiny_scene(fast_mode):
    # Large, semi-transparent Gaussians: alpha >= 1/255 everywhere and T stays above 1e-4, so the
    # function is smooth in every parameter (the skip/stop rules are piecewise constant elsewhere).
    W, H = 10, 9
    w2c, K = camera(W, H, 12.0)
    means = torch.tensor([[0.1, -0.05, 2.0], [-0.15, 0.1, 2.6], [0.05, 0.12, 3.1]], dtype=torch.float64)
    quats = torch.tensor([[0.9, 0.1, -0.2, 0.3], [0.7, -0.3, 0.2, 0.1], [1.0, 0.2, 0.1, -0.4]], dtype=torch.float64)
    scales = torch.tensor([[0.8, 0.6, 0.3], [0.7, 0.9, 0.4], [0.9, 0.5, 0.6]], dtype=torch.float64)
    opac = torch.tensor([0.5, 0.6, 0.4], dtype=torch.float64)
    sh = torch.randn(3, 4, 3, dtype=torch.float64) * 0.2
    st = SplatSettings(tile_size=4, outputs=("normal",))

    def f(m, q, s, o, c):
        img, alpha, info = rasterize_gaussians(m, q, s, o, c, w2c, K, W, H, sh_degree=1, settings=st,
                                               render_mode="RGB+ED", **TORCH)
        return img, alpha, info["normal"]

    inputs = tuple(t.clone().requires_grad_(True) for t in (means, quats, scales, opac, sh))
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=fast_mode)


# ---------------------------------------------------------------- bad input --------------------


def test_non_unit_quaternions_are_normalised():
    scene = random_scene(20, seed=9)
    w2c, K = camera(30, 30, 40.0)
    a = _render(scene, w2c, K, 30, 30)[0]
    m, q, s, o, c = scene
    b = _render((m, q * 3.7, s, o, c), w2c, K, 30, 30)[0]
    assert torch.allclose(a, b, atol=1e-12)


@pytest.mark.parametrize("field,value,match", [
    ("means", float("nan"), "means has 1 entries"),
    ("scales", -0.1, "scales has 1 entries"),
    ("quats", 0.0, "quats has 1 entries"),
    ("opacities", 1.5, "opacities has 1 entries"),
])
def test_bad_values_raise_a_clear_error(field, value, match):
    m, q, s, o, c = (t.clone() for t in random_scene(6, seed=10))
    d = {"means": m, "quats": q, "scales": s, "opacities": o}
    if field == "quats":
        q[2] = 0.0
    elif field == "opacities":
        o[2] = value
    else:
        d[field][2, 1] = value
    w2c, K = camera(16, 16, 20.0)
    with pytest.raises(RenderError, match=match):
        rasterize_gaussians(m, q, s, o, c, w2c, K, 16, 16, **TORCH)
    inputs = (m, q, s, o, c)
    if field == "means":  # with the checks off, a NaN Gaussian is culled, the image stays finite
        img, alpha, info = rasterize_gaussians(*inputs, w2c, K, 16, 16, settings=SplatSettings(check_inputs=False),
                                               **TORCH)
        assert torch.isfinite(img).all() and not bool(info["visible"][0, 2])


def test_bad_shapes_and_modes_raise():
    m, q, s, o, c = random_scene(4, seed=11)
    w2c, K = camera(16, 16, 20.0)
    with pytest.raises(RenderError, match="quats must have shape"):
        rasterize_gaussians(m, q[:, :3], s, o, c, w2c, K, 16, 16, **TORCH)
    with pytest.raises(RenderError, match="K must have shape"):
        rasterize_gaussians(m, q, s, o, c, w2c, K[0], 16, 16, **TORCH)
    with pytest.raises(RenderError, match="render_mode"):
        rasterize_gaussians(m, q, s, o, c, w2c, K, 16, 16, render_mode="RGBD", **TORCH)
    with pytest.raises(RenderError, match="sh_degree"):
        rasterize_gaussians(m, q, s, o, torch.zeros(4, 4, 3, dtype=torch.float64), w2c, K, 16, 16, sh_degree=2,
                            **TORCH)
    with pytest.raises(RenderError, match="unknown splat backend"):
        rasterize_gaussians(m, q, s, o, c, w2c, K, 16, 16, backend="cuda")


# ---------------------------------------------------------------- depth / normal outputs -------


def _two_sheets(o1, o2, quat=(1.0, 0, 0, 0)):
    """Two large thin Gaussians facing the camera at depths 2 and 4, centred on pixel (8, 8)."""
    W = H = 17
    w2c, K = camera(W, H, 20.0)
    # pixel (8, 8) centre is x = 8.5 = cx: put the means on the optical axis
    means = torch.tensor([[0.0, 0.0, 2.0], [0.0, 0.0, 4.0]], dtype=torch.float64)
    quats = torch.tensor([quat, (1.0, 0, 0, 0)], dtype=torch.float64)
    scales = torch.tensor([[3.0, 3.0, 0.01], [6.0, 6.0, 0.01]], dtype=torch.float64)
    opac = torch.tensor([o1, o2], dtype=torch.float64)
    colors = torch.tensor([[1.0, 0, 0], [0, 1.0, 0]], dtype=torch.float64)
    st = SplatSettings(outputs=("expected_depth", "median_depth", "normal"))
    img, alpha, info = rasterize_gaussians(means, quats, scales, opac, colors, w2c, K, W, H, settings=st,
                                           render_mode="RGB+D", **TORCH)
    return img, alpha, info


def test_expected_and_median_depth_on_two_sheets():
    img, alpha, info = _two_sheets(0.9, 0.9)
    a1, a2 = 0.9, 0.9 * 0.1
    assert math.isclose(float(alpha[0, 8, 8]), a1 + a2, rel_tol=1e-9)
    assert math.isclose(float(info["expected_depth"][0, 8, 8]), (a1 * 2 + a2 * 4) / (a1 + a2), rel_tol=1e-9)
    assert math.isclose(float(img[0, 8, 8, 3]), a1 * 2 + a2 * 4, rel_tol=1e-9)  # "D" = accumulated depth
    assert float(info["median_depth"][0, 8, 8]) == 2.0  # T: 1 -> 0.1 crosses 0.5 at the first sheet
    img, alpha, info = _two_sheets(0.3, 0.3)
    assert float(info["median_depth"][0, 8, 8]) == 4.0  # T: 1 -> 0.7 -> 0.49 crosses at the second
    img, alpha, info = _two_sheets(0.1, 0.1)
    assert float(info["median_depth"][0, 8, 8]) == 4.0  # never crosses: the last contributor


def test_normal_map_is_the_shortest_axis_towards_the_camera():
    img, alpha, info = _two_sheets(0.9, 0.9)
    n = info["normal"][0, 8, 8]
    assert torch.allclose(n, torch.tensor([0, 0, -float(alpha[0, 8, 8])], dtype=torch.float64), atol=1e-9)
    # front sheet tilted 30° about x: its normal (0,0,1) rotated, then flipped to face the camera
    h = math.radians(30) / 2
    img, alpha, info = _two_sheets(0.99, 0.9, quat=(math.cos(h), math.sin(h), 0, 0))
    n = info["normal"][0, 8, 8]
    rot = torch.tensor([0.0, -math.sin(2 * h), math.cos(2 * h)], dtype=torch.float64)
    w1 = 0.99
    w2 = float(alpha[0, 8, 8]) - w1
    expect = -w1 * rot + w2 * torch.tensor([0, 0, -1.0], dtype=torch.float64)
    assert torch.allclose(n, expect, atol=1e-9)


def test_depth_to_normals_of_a_tilted_plane():
    W, H = 24, 20
    w2c, K = camera(W, H, 25.0)
    # plane Z = 2 + 0.5 X  ->  for pixel ray (u, v, 1): Z = 2 / (1 - 0.5 u)
    jj = (torch.arange(W, dtype=torch.float64) + 0.5 - W / 2) / 25.0
    depth = (2.0 / (1 - 0.5 * jj))[None, None, :, None].expand(1, H, W, 1).contiguous()
    n = depth_to_normals(depth, K)
    expect = torch.nn.functional.normalize(torch.tensor([0.5, 0.0, -1.0], dtype=torch.float64), dim=0)
    assert torch.allclose(n[0, 1:-1, 1:-1], expect.expand(H - 2, W - 2, 3), atol=1e-9)
    assert torch.equal(n[0, 0], torch.zeros(W, 3, dtype=torch.float64))
    # world frame: rotate the camera, normals rotate back by R^T
    w2 = w2c.clone()
    w2[0, :3, :3] = ref.quat_to_rotmat(torch.tensor([[0.9, 0.1, 0.3, -0.2]], dtype=torch.float64))[0]
    nw = depth_to_normals(depth, K, w2)
    assert torch.allclose(nw[0, 5, 5], w2[0, :3, :3].T @ expect, atol=1e-9)


# ---------------------------------------------------------------- statistics -------------------


def test_statistics_match_the_brute_force_weights():
    scene = random_scene(25, seed=12)
    W, H = 40, 36
    w2c, K = camera(W, H, 40.0, C=2)
    stats = gaussian_statistics(*scene[:4], w2c, K, W, H, settings=SplatSettings(chunk_elements=2048),
                                backend="torch")
    proj = ref.project_gaussians(*scene[:4], w2c, K, W, H, 0.01, 1e10)
    for c in range(2):
        bf = brute_force(proj, scene[4][None].expand(2, -1, -1), W, H, cam=c)
        w = bf["weights"]
        assert torch.allclose(stats["accum_weights"][c], w.sum(1), atol=1e-10)
        assert torch.equal(stats["area_proj"][c], (w > 0).sum(1))
        best = w.argmax(0)
        covered = w.amax(0) > 0
        assert torch.equal(stats["area_max"][c], torch.bincount(best[covered], minlength=25))


def test_statistics_on_a_toy_scene():
    # the front sheet covers everything with weight 0.9, the back one gets 0.09: front wins every pixel
    W = H = 17
    w2c, K = camera(W, H, 20.0)
    means = torch.tensor([[0.0, 0.0, 2.0], [0.0, 0.0, 4.0], [0.0, 0.0, -1.0]], dtype=torch.float64)
    quats = torch.tensor([[1.0, 0, 0, 0]] * 3, dtype=torch.float64)
    scales = torch.tensor([[30.0, 30.0, 0.01], [60.0, 60.0, 0.01], [1.0, 1.0, 1.0]], dtype=torch.float64)
    opac = torch.tensor([0.9, 0.9, 0.9], dtype=torch.float64)
    st = gaussian_statistics(means, quats, scales, opac, w2c, K, W, H, backend="torch")
    assert st["area_proj"][0].tolist() == [W * H, W * H, 0]
    assert st["area_max"][0].tolist() == [W * H, 0, 0]
    assert torch.allclose(st["accum_weights"][0, :2], torch.tensor([0.9, 0.09], dtype=torch.float64) * W * H,
                          rtol=5e-3)  # the front sheet falls off by < 0.1 % at the corners


def test_gaussians_container_activations():
    n = 5
    g = Gaussians(means=torch.zeros(n, 3), quats=torch.tensor([[2.0, 0, 0, 0]]).expand(n, 4),
                  log_scales=torch.full((n, 3), math.log(0.1)), opacity_logits=torch.zeros(n),
                  sh0=torch.zeros(n, 1, 3), shN=torch.zeros(n, 15, 3))
    assert g.sh_degree == 3 and g.num == 5 and g.sh.shape == (5, 16, 3)
    assert torch.allclose(g.scales, torch.full((n, 3), 0.1))
    assert torch.allclose(g.opacities, torch.full((n,), 0.5))
    assert torch.allclose(g.rotations, torch.tensor([[1.0, 0, 0, 0]]).expand(n, 4))
    h = Gaussians.from_activated(g.means, g.quats, g.scales, g.opacities, g.sh)
    assert torch.allclose(h.log_scales, g.log_scales) and torch.allclose(h.opacity_logits, g.opacity_logits, atol=1e-6)
    assert g.index(torch.tensor([0, 2])).num == 2
    with pytest.raises(RenderError, match="SH coefficient count"):
        Gaussians(means=torch.zeros(n, 3), quats=torch.zeros(n, 4), log_scales=torch.zeros(n, 3),
                  opacity_logits=torch.zeros(n), sh0=torch.zeros(n, 1, 3), shN=torch.zeros(n, 5, 3))


def test_depth_only_render_modes_and_background_per_camera():
    scene = random_scene(20, seed=13)
    W, H = 24, 20
    w2c, K = camera(W, H, 30.0, C=2)
    st = SplatSettings(outputs=("expected_depth",))
    d, alpha, info = _render(scene, w2c, K, W, H, st, render_mode="D")
    ed, _, _ = _render(scene, w2c, K, W, H, st, render_mode="ED")
    assert d.shape == (2, H, W, 1) and ed.shape == (2, H, W, 1)
    assert torch.allclose(ed, info["expected_depth"])
    assert torch.allclose(ed * alpha, d, atol=1e-12)
    seen = alpha[..., 0] > 0.05
    assert float(ed[..., 0][seen].min()) > 2.3 and float(ed[..., 0][seen].max()) < 3.7  # depths of the scene
    bg = torch.tensor([[1.0, 0, 0], [0, 0, 1.0]], dtype=torch.float64)
    img, alpha, _ = _render(scene, w2c, K, W, H, background=bg)
    plain, _, _ = _render(scene, w2c, K, W, H)
    assert torch.allclose(img, plain + (1 - alpha) * bg[:, None, None, :])


def _tilted_sheet(camera_pose: bool, backend: str = "torch"):
    """One large flat Gaussian on the plane through (0.1, -0.2, 3) tilted 25° about x and 15° about y;
    optionally a rotated and shifted camera."""
    W, H = 24, 20
    w2c, K = camera(W, H, 22.0)
    if camera_pose:
        w2c = w2c.clone()
        w2c[0, :3, :3] = ref.quat_to_rotmat(torch.tensor([[0.99, 0.05, -0.08, 0.03]], dtype=torch.float64))[0]
        w2c[0, :3, 3] = torch.tensor([0.1, 0.05, -0.2], dtype=torch.float64)
    mean = torch.tensor([[0.1, -0.2, 3.0]], dtype=torch.float64)
    a, b = math.radians(25) / 2, math.radians(15) / 2
    qa = torch.tensor([math.cos(a), math.sin(a), 0, 0], dtype=torch.float64)
    qb = torch.tensor([math.cos(b), 0, math.sin(b), 0], dtype=torch.float64)
    w1, x1, y1, z1 = qb
    w2, x2, y2, z2 = qa  # qb * qa
    quat = torch.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])[None]
    scales = torch.tensor([[8.0, 8.0, 1e-4]], dtype=torch.float64)
    st = SplatSettings(outputs=("plane_depth", "median_depth", "median_plane_depth"))
    dt = torch.float64 if backend == "torch" else torch.float32
    _, alpha, info = rasterize_gaussians(mean.to(dt), quat.to(dt), scales.to(dt), torch.tensor([0.95], dtype=dt),
                                         torch.ones(1, 3, dtype=dt), w2c.to(dt), K.to(dt), W, H, settings=st,
                                         backend=backend)
    n = ref.quat_to_rotmat(quat)[0][:, 2]
    # analytic ray-plane depth per pixel: c + z ray on the plane n.(x - mean) = 0
    from meshlift.render.splat import unit_depth_rays

    ray = unit_depth_rays(K, w2c, W, H)[0]
    R, t = w2c[0, :3, :3], w2c[0, :3, 3]
    c = -(R.T @ t)
    z = ((mean[0] - c) @ n) / (ray @ n)
    return info, alpha, z


@pytest.mark.parametrize("camera_pose", [False, True])
def test_plane_depth_is_the_ray_plane_intersection(camera_pose):
    info, alpha, z = _tilted_sheet(camera_pose)
    assert float(alpha.min()) > 0.9
    assert torch.allclose(info["plane_depth"][0, ..., 0], z, rtol=1e-9, atol=1e-9)
    assert torch.allclose(info["median_plane_depth"][0, ..., 0], z, rtol=1e-9, atol=1e-9)
    # the median depth is the centre's depth everywhere: biased off-centre, the plane depth is not
    assert float((info["median_depth"][0, ..., 0] - z).abs().max()) > 0.1


def test_plane_depth_gradient_reaches_means_and_quats():
    W, H = 12, 10
    w2c, K = camera(W, H, 12.0)
    means = torch.tensor([[0.0, 0.0, 2.0], [0.1, 0.05, 2.5]], dtype=torch.float64, requires_grad=True)
    quats = torch.tensor([[0.98, 0.1, 0.1, 0.0], [1.0, 0.0, 0.2, 0.1]], dtype=torch.float64, requires_grad=True)
    scales = torch.tensor([[2.0, 2.0, 1e-3], [3.0, 2.0, 1e-3]], dtype=torch.float64)

    def f(m, q):
        _, _, info = rasterize_gaussians(m, q, scales, torch.tensor([0.6, 0.8], dtype=torch.float64),
                                         torch.ones(2, 3, dtype=torch.float64), w2c, K, W, H,
                                         settings=SplatSettings(outputs=("plane_depth",)), **TORCH)
        return info["plane_depth"][..., 0].sum()

    assert torch.autograd.gradcheck(f, (means, quats), eps=1e-6, atol=1e-5)


def test_median_plane_depth_ignores_the_gaussians_behind():
    """Two parallel sheets at z = 2 and 4: the blended plane depth mixes them, the median plane is the front
    one while T crosses 0.5 there, and the back one when the front is too faint."""
    W = H = 17
    w2c, K = camera(W, H, 20.0)
    means = torch.tensor([[0.0, 0.0, 2.0], [0.0, 0.0, 4.0]], dtype=torch.float64)
    quats = torch.tensor([(1.0, 0, 0, 0), (1.0, 0, 0, 0)], dtype=torch.float64)
    scales = torch.tensor([[3.0, 3.0, 1e-4], [6.0, 6.0, 1e-4]], dtype=torch.float64)
    st = SplatSettings(outputs=("plane_depth", "median_plane_depth", "median_depth"))
    for o1, expect in ((0.8, 2.0), (0.3, 4.0)):
        _, _, info = rasterize_gaussians(means, quats, scales, torch.tensor([o1, 0.9], dtype=torch.float64),
                                         torch.ones(2, 3, dtype=torch.float64), w2c, K, W, H, settings=st, **TORCH)
        assert math.isclose(float(info["median_plane_depth"][0, 8, 8]), expect, rel_tol=1e-9)
        assert float(info["median_depth"][0, 8, 8]) == expect
        blended = float(info["plane_depth"][0, 8, 8])
        assert 2.0 < blended < 4.0  # the PGSR blend lies between the two sheets
