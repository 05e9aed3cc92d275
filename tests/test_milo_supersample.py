"""Supersampled renders of MILo's whole-scene mesh (``mesh_supersample``; meshlift.methods.milo.vertex_render's
box_downsample, the colour solve, the photometric refinement and the evaluation render; issue 33)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from _milo_scene import CAM_RADIUS, FOV
from meshlift.cameras import cameras_on_sphere
from meshlift.errors import ConfigError
from meshlift.methods.gaussians.views import STORE_DTYPE, SplatViews
from meshlift.methods.milo.colour_solve import ColourSolveSettings, solve_colours
from meshlift.methods.milo.extract import render_mesh_views
from meshlift.methods.milo.photo_refine import PhotoRefineSettings, photometric_refine
from meshlift.methods.milo.vertex_render import box_downsample
from meshlift.shading.color import srgb_to_linear
from test_milo_photo_refine import CPU, R0, _sphere

SIZE = 20  # small views: the sphere's colour pattern varies within a pixel


def test_box_downsample_means_blocks_and_checks_its_input():
    x = torch.arange(2 * 4 * 6 * 3, dtype=torch.float32).reshape(2, 4, 6, 3)
    y = box_downsample(x, 2)
    assert y.shape == (2, 2, 3, 3)
    torch.testing.assert_close(y[1, 1, 2], x[1, 2:4, 4:6].mean(dim=(0, 1)))
    assert box_downsample(x, 1) is x
    with pytest.raises(ValueError, match="not made of 4 x 4 blocks"):
        box_downsample(x, 4)


@pytest.fixture(scope="module")
def fine() -> object:
    """A sphere with a colour pattern finer than the views' pixels."""
    m = _sphere(4, lambda d: torch.full((d.shape[0],), R0))
    v = m.v_pos
    phase = torch.tensor([0.0, 1.3, 2.6])
    srgb = (0.5 + 0.45 * torch.sin(23 * v[:, 0:1] + phase) * torch.cos(19 * v[:, 1:2] + 0.5 * phase)).clamp(0, 1)
    return dataclasses.replace(m, v_color=srgb_to_linear(srgb))


def _photos(mesh, n: int, seed: int) -> SplatViews:
    """Views whose pixels integrate their area (the mesh rendered at 4 x 4 samples a pixel), as a camera's do."""
    cams = cameras_on_sphere(n, CAM_RADIUS, FOV, SIZE, seed=seed, up=(0.0, 0.0, 1.0))
    views = SplatViews(cams.world_to_camera.float(), cams.K.float(), torch.zeros(n, SIZE, SIZE, 3).to(STORE_DTYPE),
                       None, [str(i) for i in range(n)])
    img = render_mesh_views(mesh, views, CPU, torch.zeros(3), supersample=4)
    return dataclasses.replace(views, images=img.to(STORE_DTYPE))


def _psnr(mesh, views, ss: int) -> float:
    img = render_mesh_views(mesh, views, CPU, torch.zeros(3), supersample=ss)
    return float(-10 * torch.log10(((img - views.images.float()) ** 2).mean()))


def test_evaluation_render_averages_the_samples(fine):
    """supersample=s is the mean of the s x s samples: the sub-pixel pattern averages out (a smaller spread of the
    rendered values than one sample a pixel gives), the image's mean stays, flat colours stay flat."""
    views = _photos(fine, 2, 5)
    one = render_mesh_views(fine, views, CPU, torch.zeros(3))
    four = views.images.float()
    assert one.shape == four.shape == (2, SIZE, SIZE, 3)
    inside = four.amax(-1) > 0.02
    assert float(four[inside].std()) < 0.9 * float(one[inside].std())
    assert abs(float(four.mean()) - float(one.mean())) < 0.02
    grey = dataclasses.replace(fine, v_color=torch.full_like(fine.v_color, 0.2))
    g4 = render_mesh_views(grey, views, CPU, torch.zeros(3), supersample=4)
    g1 = render_mesh_views(grey, views, CPU, torch.zeros(3))
    centre = g1[:, SIZE // 2 - 3:SIZE // 2 + 3, SIZE // 2 - 3:SIZE // 2 + 3]
    torch.testing.assert_close(g4[:, SIZE // 2 - 3:SIZE // 2 + 3, SIZE // 2 - 3:SIZE // 2 + 3], centre, atol=1e-5, rtol=0)


def test_solve_at_the_cameras_sampling_fits_what_one_sample_cannot(fine):
    """Photos that integrate each pixel (4 x 4 samples) of a pattern finer than a pixel: solved from grey on the
    true geometry, colours fitted through the same supersampled render reach the held-out test views far better
    than colours fitted at one sample a pixel (whose render aliases the pattern)."""
    train, test = _photos(fine, 12, 1), _photos(fine, 3, 2)
    grey = dataclasses.replace(fine, v_color=torch.full_like(fine.v_color, 0.5))
    cfg = ColourSolveSettings(iters=40, check_every=10, holdout=0.0)
    one, _ = solve_colours(grey, train, CPU, cfg)
    four, rep = solve_colours(grey, train, CPU, dataclasses.replace(cfg, supersample=4))
    assert rep["cached_views"] == 12
    p1, p4 = _psnr(one, test, 1), _psnr(four, test, 4)
    assert p4 > p1 + 4, (p1, p4)
    assert p4 > 25, p4  # measured 27.0 (one sample: 20.2)


def test_refinement_colour_term_supersampled(fine):
    """photometric_refine with supersample fits its colour term through the supersampled render (the geometry
    terms at one sample) and hands the setting to its solve; better than one sample on supersampled photos."""
    train, test = _photos(fine, 10, 3), _photos(fine, 3, 4)
    start = dataclasses.replace(fine, v_color=torch.full_like(fine.v_color, 0.4))
    s = PhotoRefineSettings(steps=40, color_weight=1.0, consistency_weight=0.0, lr_offset=0.0, lr_color=0.02)
    one, _ = photometric_refine(start, train, CPU, s)
    four, rep = photometric_refine(start, train, CPU, dataclasses.replace(s, supersample=4, solve_iters=10,
                                                                          solve_holdout=0.0))
    assert rep["steps"] == 40 and rep["colour_solve"]["iters_run"] == 10
    assert _psnr(four, test, 4) > _psnr(one, test, 1) + 1


def test_config_field_is_validated_and_reaches_the_settings():
    from meshlift.methods.milo.config import apply_dict, validate
    from meshlift.methods.milo.presets import get_preset

    cfg = get_preset("verylowres", quick=True)
    assert cfg.mesh_supersample == 2
    c2 = apply_dict(cfg, {"mesh_supersample": "2"})
    assert PhotoRefineSettings.from_config(c2).supersample == 2
    assert PhotoRefineSettings.from_config(c2, view_dependent=False).supersample == 1  # the asset: one sample
    for bad in ("0", "5"):
        with pytest.raises(ConfigError, match="mesh_supersample"):
            validate(apply_dict(cfg, {"mesh_supersample": bad}))
