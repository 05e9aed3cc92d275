"""The colour solve on a frozen geometry (meshlift.methods.milo.colour_solve; issue 33)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from meshlift.errors import MeshError
from meshlift.methods.milo.colour_solve import ColourSolveSettings, _split, solve_colours
from meshlift.methods.milo.photo_refine import PhotoRefineSettings, photometric_refine
from meshlift.shading.color import srgb_to_linear
from meshlift.structures.mesh import Mesh
from test_milo_photo_refine import CPU, R0, _pattern, _psnr, _sphere, _views


def _psnr_vd(mesh: Mesh, views) -> float:
    """PSNR of the evaluation's render (view-dependent colours when the mesh has them) over ``views``."""
    from meshlift.methods.milo.extract import render_mesh_views

    img = render_mesh_views(mesh, views, CPU, torch.zeros(3))
    return float(-10 * torch.log10(((img - views.images.float()) ** 2).mean()))


@pytest.fixture(scope="module")
def truth() -> Mesh:
    m = _sphere(3, lambda d: torch.full((d.shape[0],), R0))
    return dataclasses.replace(m, v_color=srgb_to_linear(_pattern(m.v_pos)))


def test_split_holds_out_evenly_spaced_views():
    assert _split(3, 0.1) == ([0, 1, 2], [])  # too few views: none held out
    assert _split(10, 0.0) == (list(range(10)), [])
    fit, held = _split(10, 0.1)
    assert held == [5] and len(fit) == 9
    fit, held = _split(40, 0.1)
    assert len(held) == 4 and sorted(fit + held) == list(range(40)) and held == [5, 15, 25, 35]
    assert len(_split(6, 0.9)[1]) == 3  # at most half


def test_solve_recovers_the_colours_of_the_true_geometry(truth):
    """On the true geometry, grey colours are solved back to the pattern: the held-out views and unseen test views
    close to the truth's own render (the photos are the truth's render: an exact fit exists); the input is kept."""
    train, test = _views(truth, 12, 40, 1, masked=False), _views(truth, 3, 40, 2, masked=False)
    grey = dataclasses.replace(truth, v_color=torch.full((truth.num_vertices, 3), 0.5))
    before = grey.v_color.clone()
    out, rep = solve_colours(grey, train, CPU, ColourSolveSettings(iters=60, check_every=10))
    assert torch.equal(grey.v_color, before) and torch.equal(out.v_pos, grey.v_pos)
    assert rep["held_views"] == 1 and rep["fit_views"] == 11 and rep["cached_views"] == 12
    assert rep["held_psnr_best"] > rep["held_psnr_first"] + 10
    assert rep["fit_mse_last"] < rep["fit_mse_first"]
    assert _psnr(out, test) > 35 and _psnr(grey, test) < 20
    assert 0 < rep["iters_kept"] <= rep["iters_run"] <= 60 and rep["held_psnr_last"] <= rep["held_psnr_best"]


def test_solve_fits_view_dependent_terms_and_keeps_the_diffuse(truth):
    """With SH terms (extras), the solve fits the terms and their base, leaves the diffuse v_color and improves on
    what the Adam refinement left; a raster cache of 0 bytes gives the same result (views rasterised again)."""
    train = _views(truth, 8, 32, 3, masked=False)
    start = dataclasses.replace(truth, v_color=torch.full((truth.num_vertices, 3), 0.4))
    s = PhotoRefineSettings(steps=10, color_weight=1.0, consistency_weight=0.0, lr_offset=0.0, sh_degree=1)
    refined, rep = photometric_refine(start, train, CPU, s)
    assert rep["sh_degree"] == 1 and "colour_solve" not in rep
    cfg = ColourSolveSettings(iters=20, check_every=10, holdout=0.0)
    out, srep = solve_colours(refined, train, CPU, cfg)
    assert srep["view_dependent"] and srep["held_views"] == 0 and srep["iters_kept"] == 20
    assert torch.equal(out.v_color, refined.v_color)
    assert not torch.equal(out.extras["v_sh_rest"], refined.extras["v_sh_rest"])
    assert _psnr_vd(out, train) > _psnr_vd(refined, train) + 3
    again, rep0 = solve_colours(refined, train, CPU, dataclasses.replace(cfg, max_cache_bytes=0))
    assert rep0["cached_views"] == 0
    torch.testing.assert_close(again.extras["v_sh_base"], out.extras["v_sh_base"], atol=1e-5, rtol=0)


def test_refinement_runs_the_solve_and_reports_it(truth):
    """``PhotoRefineSettings.solve_iters`` runs the solve after the steps (report ``colour_solve``); a deadline that
    stopped the steps skips it; the asset's settings (one colour, colours discarded) never solve."""
    from meshlift.methods.milo.config import MiloConfig

    train = _views(truth, 6, 32, 4, masked=True)
    start = dataclasses.replace(truth, v_color=torch.full((truth.num_vertices, 3), 0.5))
    s = PhotoRefineSettings(steps=3, color_weight=1.0, consistency_weight=0.0, solve_iters=10)
    out, rep = photometric_refine(start, train, CPU, s)
    assert rep["colour_solve"]["iters_run"] >= 1 and rep["colour_solve"]["held_views"] == 1
    _, rep = photometric_refine(start, train, CPU, s, deadline=0.0)
    assert "colour_solve" not in rep and rep["stopped"] == "time budget"
    cfg = MiloConfig(photo_refine_solve_iters=50)
    assert PhotoRefineSettings.from_config(cfg).solve_iters == 50
    assert PhotoRefineSettings.from_config(cfg, view_dependent=False).solve_iters == 0


def test_bad_input_and_a_deadline(truth):
    train = _views(truth, 4, 24, 5, masked=False)
    with pytest.raises(MeshError, match="no vertex colours"):
        solve_colours(dataclasses.replace(truth, v_color=None), train, CPU, ColourSolveSettings())
    with pytest.raises(MeshError, match="empty"):
        solve_colours(Mesh(torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.int64), v_color=torch.zeros(0, 3)),
                      train, CPU, ColourSolveSettings())
    out, rep = solve_colours(truth, train, CPU, ColourSolveSettings(iters=10), deadline=0.0)
    assert rep["stopped"] == "time budget" and rep["iters_run"] == 0 and torch.equal(out.v_color, truth.v_color)
    assert math.isnan(rep["fit_mse_first"])


def test_config_checks_the_solve_settings():
    """The hold-out is a share of at most half the views; negative iterations are refused; changing the solve under
    --quick (refinement off) is an inert setting, said at the start of the run too."""
    from meshlift.errors import ConfigError
    from meshlift.methods.milo.config import apply_dict, inert_settings
    from meshlift.methods.milo.presets import get_preset

    for bad in ({"photo_refine_solve_holdout": 0.75}, {"photo_refine_solve_holdout": -0.1},
                {"photo_refine_solve_iters": -1}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            apply_dict(get_preset("verylowres", quick=True), bad)
    quiet = apply_dict(get_preset("verylowres", quick=True), {"photo_refine_solve_iters": 50})  # --quick: refinement off
    assert any("photo_refine_solve_iters=50" in w for w in inert_settings(quiet))


def test_solve_from_colours_past_the_range(truth):
    """Colours started far past [0, 1] (half at 1.6, half at −0.6): the clamp's gradient passed straight through
    stalls (the fitting MSE does not move: the loss does not follow the gradient of a colour held past the clamp;
    the H100 fox of session 34 stalled so); the default solve sees its first chunk stall and starts again with the
    clamp's own gradient and the pull back into range, which fits the pattern; the held-out PSNR either reports is
    the evaluation's render (per-vertex clamp), the same for both."""
    train, test = _views(truth, 12, 40, 1, masked=False), _views(truth, 3, 40, 2, masked=False)
    far = torch.where(torch.arange(truth.num_vertices)[:, None] % 2 == 0, 1.6, -0.6).expand(-1, 3).contiguous()
    start = dataclasses.replace(truth, v_color=far)
    out, rep = solve_colours(start, train, CPU, ColourSolveSettings(iters=60, check_every=10))
    st, rep_st = solve_colours(start, train, CPU, ColourSolveSettings(iters=20, check_every=10, range_penalty=0.0))
    assert rep_st["fit_mse_last"] == pytest.approx(rep_st["fit_mse_first"], rel=1e-4)
    assert rep["range_penalty_from"] == 10 and rep_st["range_penalty_from"] is None
    assert rep_st["held_psnr_first"] == pytest.approx(rep["held_psnr_first"], abs=1e-9)
    assert rep["held_psnr_best"] > rep["held_psnr_first"] + 10 and _psnr(out, test) > 35 > _psnr(st, test) + 10
    clamped = dataclasses.replace(start, v_color=far.clamp(0, 1))
    _, rep_in = solve_colours(clamped, train, CPU, ColourSolveSettings(iters=0))
    assert rep_in["held_psnr_first"] == pytest.approx(rep["held_psnr_first"], abs=1e-6)  # what the evaluation sees
