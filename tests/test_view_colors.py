"""View-dependent vertex colours (meshlift.shading.view_colors) and their fit by the photometric refinement
(issue 33: the whole-scene mesh with the Gaussians' freedom to follow exposure and sheen along a capture)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from _milo_scene import render
from meshlift.errors import RenderError
from meshlift.methods.gaussians.views import STORE_DTYPE, SplatViews
from meshlift.render.splat_reference import SH_C1, spherical_harmonics
from meshlift.shading.view_colors import camera_centres, sh_rest_count, view_dependent_colors
from meshlift.structures.mesh import Mesh

CPU = torch.device("cpu")


def test_colors_by_hand_and_against_the_splat_sh():
    """Degree 1 seen along ±x: ``Y_3 = −C1·x`` (3DGS order); any degree equals the Gaussians' SH evaluation of the
    same coefficients with the constant term carried by ``base``."""
    base = torch.full((2, 3), 0.5)
    rest = torch.zeros(2, 3, 3)
    rest[:, 2] = torch.tensor([0.2, -0.2, 0.0])  # the x term, per channel
    v = torch.tensor([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    out = view_dependent_colors(base, rest, v, torch.zeros(3))
    k = SH_C1 * 0.2
    assert torch.allclose(out[0], torch.tensor([0.5 - k, 0.5 + k, 0.5]), atol=1e-6)
    assert torch.allclose(out[1], torch.tensor([0.5 + k, 0.5 - k, 0.5]), atol=1e-6)
    g = torch.Generator().manual_seed(0)
    for degree in (1, 2, 3):
        n = sh_rest_count(degree)
        base = 0.3 + 0.4 * torch.rand(50, 3, generator=g)
        rest = 0.05 * torch.randn(50, n, 3, generator=g)
        v = torch.randn(50, 3, generator=g)
        o = torch.tensor([0.3, -2.0, 0.5])
        coeffs = torch.cat([torch.zeros(50, 1, 3), rest], 1)
        want = (base + spherical_harmonics(degree, v - o, coeffs)).clamp(0, 1)
        assert torch.allclose(view_dependent_colors(base, rest, v, o), want, atol=1e-6)
    assert torch.equal(view_dependent_colors(base, torch.zeros(50, 0, 3), v, o), base.clamp(0, 1))
    at_centre = view_dependent_colors(base[:1], torch.ones(1, 8, 3), o[None], o)  # no direction: the base
    assert torch.allclose(at_centre, base[:1]) and torch.isfinite(at_centre).all()


def test_gradients_by_gradcheck():
    g = torch.Generator().manual_seed(1)
    base = (0.4 + 0.2 * torch.rand(6, 3, generator=g, dtype=torch.float64)).requires_grad_(True)
    rest = (0.05 * torch.randn(6, 8, 3, generator=g, dtype=torch.float64)).requires_grad_(True)
    v = torch.randn(6, 3, generator=g, dtype=torch.float64).requires_grad_(True)
    o = torch.tensor([0.0, 0.0, -3.0], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda b, r, p: view_dependent_colors(b, r, p, o), (base, rest, v))


def test_camera_centres_and_bad_input():
    from meshlift.cameras import look_at

    eye = torch.tensor([[1.0, 2.0, 3.0], [-2.0, 0.5, 1.0]])
    w2c = torch.stack([look_at(e, torch.zeros(3)) for e in eye]).float()
    assert torch.allclose(camera_centres(w2c), eye, atol=1e-5)
    with pytest.raises(RenderError, match="0..3"):
        sh_rest_count(4)
    with pytest.raises(RenderError, match="no SH degree|3, 8 or 15"):
        view_dependent_colors(torch.zeros(4, 3), torch.zeros(4, 5, 3), torch.zeros(4, 3), torch.zeros(3))
    with pytest.raises(RenderError, match=r"base \[V, 3\]"):
        view_dependent_colors(torch.zeros(4, 3), torch.zeros(3, 3, 3), torch.zeros(4, 3), torch.zeros(3))


def _truth(degree: int) -> Mesh:
    """A sphere whose colour changes with the view: a pattern plus SH terms of ``degree`` (up to 0.25 each)."""
    import trimesh

    tm = trimesh.creation.icosphere(subdivisions=3, radius=0.8)
    v = torch.tensor(tm.vertices, dtype=torch.float32)
    base = 0.45 + 0.25 * torch.sin(6 * v[:, :1] + torch.tensor([0.0, 1.0, 2.0])) * torch.cos(5 * v[:, 1:2])
    g = torch.Generator().manual_seed(3)
    rest = 0.5 * torch.rand(1, sh_rest_count(degree), 3, generator=g).expand(v.shape[0], -1, -1).clone()
    return Mesh(v, torch.tensor(tm.faces, dtype=torch.int64), v_color=base, extras={"v_sh_rest": rest})


def _views(truth: Mesh, n: int, size: int, seed: int) -> SplatViews:
    """Views of ``truth`` rendered with its view-dependent colours (the evaluation's render_mesh_views)."""
    from meshlift.methods.milo.extract import render_mesh_views

    cams, _, _ = render(truth, n, size, seed)
    blank = SplatViews(cams.world_to_camera.float(), cams.K.float(), torch.zeros(n, size, size, 3, dtype=STORE_DTYPE))
    img = render_mesh_views(truth, blank, CPU, torch.zeros(3))
    return dataclasses.replace(blank, images=img.to(STORE_DTYPE))


def _psnr(mesh: Mesh, views: SplatViews, *, view_dependent: bool = True) -> float:
    from meshlift.methods.milo.extract import render_mesh_views

    img = render_mesh_views(mesh, views, CPU, torch.zeros(3), view_dependent=view_dependent)
    return float(-10 * torch.log10(((img - views.images.float()) ** 2).mean()))


def test_refinement_fits_view_dependent_colours():
    """Views of a sphere whose colour follows the view (what a phone's exposure does along a capture): the refinement
    with SH degree 1 scores well above one colour per vertex at held-out views, the input mesh keeps no terms, and
    its view-independent part alone is no better than the diffuse fit (the terms carry what the views disagree on)."""
    from meshlift.methods.milo.photo_refine import PhotoRefineSettings, photometric_refine

    truth = _truth(1)
    assert _psnr(truth, _views(truth, 2, 32, 9)) > 60  # the evaluation renders what the views were made with
    train, test = _views(truth, 16, 40, 1), _views(truth, 4, 40, 2)
    init = dataclasses.replace(truth, v_color=torch.full_like(truth.v_color, 0.5), extras={})
    kw = dict(steps=120, lr_offset=0.0, consistency_weight=0.0, lr_color=0.02, lr_sh=0.02)
    flat, rep0 = photometric_refine(init, train, CPU, PhotoRefineSettings(**kw))
    sh, rep1 = photometric_refine(init, train, CPU, PhotoRefineSettings(sh_degree=1, **kw))
    assert "v_sh_rest" not in init.extras and "v_sh_rest" not in flat.extras and rep0["sh_degree"] == 0
    assert rep1["sh_degree"] == 1 and sh.extras["v_sh_rest"].shape == (init.v_pos.shape[0], 3, 3)
    assert sh.extras["v_sh_base"].shape == init.v_color.shape
    p_flat, p_sh = _psnr(flat, test), _psnr(sh, test)
    assert p_sh > p_flat + 3.0, (p_flat, p_sh)  # 2026-12-07: 26.28 -> 31.08 dB
    # v_color is the diffuse colour fitted beside the terms: as good as the one-colour fit, unlike the terms' base
    p_diffuse = _psnr(sh, test, view_dependent=False)
    p_base = _psnr(dataclasses.replace(sh, v_color=sh.extras["v_sh_base"], extras={}), test)
    assert p_diffuse < p_sh - 3.0 and abs(p_diffuse - p_flat) < 0.3 and p_diffuse > p_base, (p_diffuse, p_flat, p_base)
    # a refit continues from the terms it is given; a diffuse refit drops them
    again, _ = photometric_refine(sh, train, CPU, PhotoRefineSettings(sh_degree=1, **{**kw, "steps": 5}))
    assert _psnr(again, test) > p_flat + 2.0  # from zero terms, 5 steps would stay near the diffuse fit
    drop, _ = photometric_refine(sh, train, CPU, PhotoRefineSettings(**{**kw, "steps": 1}))
    assert "v_sh_rest" not in drop.extras and "v_sh_base" not in drop.extras
    kept, _ = photometric_refine(sh, train, CPU, PhotoRefineSettings(**{**kw, "steps": 1, "color_weight": 0.0}))
    assert "v_sh_rest" not in kept.extras  # colours re-fused by the caller: stale terms dropped
    none, rep = photometric_refine(init, train, CPU, PhotoRefineSettings(sh_degree=1, **kw), deadline=0.0)
    assert rep["steps"] == 0 and rep["sh_degree"] == 0 and "v_sh_rest" not in none.extras


def test_stale_terms_are_not_rendered():
    """Terms of another vertex count (an edit that re-indexed the vertices kept them): a warning, the diffuse render."""
    from meshlift.methods.milo.extract import render_mesh_views

    truth = _truth(1)
    views = _views(truth, 1, 24, 4)
    stale = dataclasses.replace(truth, extras={"v_sh_rest": truth.extras["v_sh_rest"][:-1]})
    with pytest.warns(UserWarning, match="view-dependent colour terms of"):
        img = render_mesh_views(stale, views, CPU, torch.zeros(3))
    assert torch.equal(img, render_mesh_views(truth, views, CPU, torch.zeros(3), view_dependent=False))
