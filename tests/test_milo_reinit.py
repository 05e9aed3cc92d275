"""MILo's depth re-initialisation (back-projection, surface points of a toy scene, the strategy event), the
depth-fusion truncation rule, the opaque-only pivot candidates and the refinement's time budget."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from _milo_scene import CAM_RADIUS, SPHERE_RADIUS, sphere_problem
from meshlift.errors import CameraError, ConfigError
from meshlift.methods.milo.depth_fusion import (TRUNC_FACTOR, camera_extent_radius, fusion_truncation,
                                                pixel_footprint, project_points)
from meshlift.methods.milo.depth_reinit import backproject, depth_points
from meshlift.methods.milo.strategy import MiloStrategy
from meshlift.render.splat import SplatSettings

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def scene():
    return sphere_problem(size=24, n_train=6, n_test=1)


def _sphere_gaussians(n=400, radius=SPHERE_RADIUS, opacity_logit=6.0, scale=0.06):
    g = torch.Generator().manual_seed(5)
    d = torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1) * radius
    t = {"means": d, "quats": torch.tensor([[1.0, 0, 0, 0]]).repeat(n, 1),
         "log_scales": torch.full((n, 3), math.log(scale)), "opacity_logits": torch.full((n,), opacity_logit),
         "sh0": torch.zeros(n, 1, 3), "shN": torch.zeros(n, 3, 3)}
    params = {k: torch.nn.Parameter(v.clone()) for k, v in t.items()}
    opts = {k: torch.optim.Adam([p], lr=1e-3) for k, p in params.items()}
    for k, p in params.items():  # non-zero Adam moments, which the re-init must reset
        p.grad = torch.ones_like(p)
        opts[k].step()
    return params, opts


def test_backproject_inverts_project_points(scene):
    problem, _ = scene
    v = problem.train
    g = torch.Generator().manual_seed(0)
    pts = (torch.rand(50, 3, generator=g) - 0.5) * 1.5
    xy, z = project_points(pts, v.world_to_camera[:2], v.K[:2])
    for c in range(2):
        back = backproject(xy[c], z[c], v.world_to_camera[c], v.K[c])
        assert torch.allclose(back, pts, atol=1e-4)


def test_depth_points_lie_on_the_rendered_surface(scene):
    """Points drawn from opaque Gaussians on a sphere lie near the sphere (within the Gaussians' size and
    one pixel), carry the target colours, and are never drawn from empty pixels."""
    problem, _ = scene
    params, _ = _sphere_gaussians()
    pts, rgb = depth_points(params, problem.train, 500, near=0.05, device=CPU, settings=SplatSettings(),
                            generator=torch.Generator().manual_seed(1))
    assert pts.shape == (500, 3) and rgb.shape == (500, 3)
    r = pts.norm(dim=1)
    assert (r - SPHERE_RADIUS).abs().median() < 0.05 and (r - SPHERE_RADIUS).abs().max() < 0.25
    assert float(rgb.min()) >= 0 and float(rgb.max()) <= 1 and float(rgb.mean()) > 0.2  # the sphere's colours
    # a small draw keeps at most 4 × 50 / 6 candidates per view (memory bound) and still lies on the surface
    small, _ = depth_points(params, problem.train, 50, near=0.05, device=CPU, settings=SplatSettings())
    assert small.shape == (50, 3) and (small.norm(dim=1) - SPHERE_RADIUS).abs().median() < 0.05
    # fewer candidates than asked: every candidate once; transparent Gaussians give none
    few, _ = depth_points(params, problem.train, 10**7, near=0.05, device=CPU, settings=SplatSettings())
    assert 500 < few.shape[0] < 6 * 24 * 24
    params["opacity_logits"].data.fill_(-12.0)
    none, _ = depth_points(params, problem.train, 100, near=0.05, device=CPU, settings=SplatSettings())
    assert none.shape == (0, 3)
    with pytest.raises(ConfigError, match="reinit_points"):
        depth_points(params, problem.train, 0, near=0.05, device=CPU, settings=SplatSettings())


def test_strategy_reinit_replaces_gaussians_and_resets_moments():
    params, opts = _sphere_gaussians(n=50)
    g = torch.Generator().manual_seed(2)
    new_pts = torch.randn(80, 3, generator=g)
    new_rgb = torch.rand(80, 3, generator=g)
    s = MiloStrategy(refine_stop=0, reset_every=0, reinit_step=7, reinit_opacity=0.2,
                     reinit_fn=lambda p: (new_pts, new_rgb))
    state = s.initialize_state()
    info = {"means2d": torch.zeros(1, 50, 2), "radii": torch.zeros(1, 50, 2), "width": 24, "height": 24}
    s.step_post_backward(params, opts, state, 6, info)
    assert params["means"].shape[0] == 50
    s.step_post_backward(params, opts, state, 7, info)
    assert params["means"].shape[0] == 80 and torch.equal(params["means"].detach(), new_pts)
    assert params["shN"].shape == (80, 3, 3) and torch.allclose(torch.sigmoid(params["opacity_logits"]),
                                                                torch.tensor(0.2))
    for name, p in params.items():
        assert opts[name].param_groups[0]["params"][0] is p
        st = opts[name].state[p]
        assert st["exp_avg"].shape == p.shape and not st["exp_avg"].any() and not st["exp_avg_sq"].any()
    assert state["grad2d"] is None and s.events == [(7, "reinit", 50, 80)]
    # fewer than 4 points: keep the Gaussians
    s2 = MiloStrategy(refine_stop=0, reset_every=0, reinit_step=1, reinit_fn=lambda p: (new_pts[:2], new_rgb[:2]))
    s2.step_post_backward(params, opts, s2.initialize_state(), 1, {**info, "means2d": torch.zeros(1, 80, 2),
                                                                    "radii": torch.zeros(1, 80, 2)})
    assert params["means"].shape[0] == 80 and s2.events[0][1] == "reinit skipped"
    with pytest.raises(ConfigError, match="reinit_fn"):
        MiloStrategy(refine_stop=0, reset_every=0, reinit_step=1).step_post_backward(
            params, opts, {"grad2d": None, "count": None, "radii": None}, 1,
            {**info, "means2d": torch.zeros(1, 80, 2), "radii": torch.zeros(1, 80, 2)})


def test_pixel_footprint_and_truncation_rule(scene):
    """One pixel at the scene centre is distance / focal length; the truncation is MILo's 2e-3 × radius
    or trunc_pixels pixels, whichever is larger."""
    problem, _ = scene
    v = problem.train
    fp = pixel_footprint(v.world_to_camera, v.K, torch.zeros(3))
    f = float(v.K[0, 0, 0])
    assert fp == pytest.approx(CAM_RADIUS / f, rel=1e-4)
    r = camera_extent_radius(v.world_to_camera)
    assert fusion_truncation(v.world_to_camera, v.K, torch.zeros(3), trunc_pixels=2.0) == pytest.approx(2 * fp)
    assert fusion_truncation(v.world_to_camera, v.K, torch.zeros(3), trunc_pixels=0.0) == pytest.approx(
        TRUNC_FACTOR * r)
    assert fusion_truncation(v.world_to_camera, v.K, torch.zeros(3), trunc_pixels=0.0, scene_scale=10.0) == \
        pytest.approx(TRUNC_FACTOR * 10.0)
    # a centre behind the camera falls back to the camera's distance to it
    eye = -v.world_to_camera[0, :3, :3].T @ v.world_to_camera[0, :3, 3]
    assert pixel_footprint(v.world_to_camera[:1], v.K[:1], 2 * eye) == pytest.approx(CAM_RADIUS / f, rel=1e-4)
    with pytest.raises(CameraError, match="pixel_footprint"):
        pixel_footprint(v.world_to_camera, v.K[:1], torch.zeros(3))


class _Reached:
    """A deadline that has passed (what TimeBudget gives when the budget is spent)."""

    def reached(self) -> bool:
        return True


def test_pivots_only_from_opaque_gaussians_and_refinement_deadline(scene):
    """MeshInTheLoop.start draws pivot Gaussians only among those at least pivot_min_opacity opaque; the
    occupancy refinement stops at its (PassDeadline-like) deadline after one step."""
    import dataclasses

    from meshlift.methods.engine import Monitor, ViewSampler
    from meshlift.methods.milo.extract import refine_occupancy
    from meshlift.methods.milo.mesh_in_loop import MeshInTheLoop
    from meshlift.methods.milo.presets import get_preset

    problem, _ = scene
    params, _ = _sphere_gaussians(n=300)
    faint = torch.arange(300) % 3 == 0
    with torch.no_grad():
        params["opacity_logits"][faint] = math.log(0.05 / 0.95)  # 5% opaque floaters, the strongest where they are
        params["means"][faint] *= 1.6
    cfg = dataclasses.replace(get_preset("milo_tiny"), num_pivots=9 * 1000, pivot_min_opacity=0.1)
    reg = MeshInTheLoop(cfg, problem, CPU, monitor=Monitor(), settings=SplatSettings(), near=0.05)
    reg.start(0, params)
    assert reg.idx.numel() > 0 and not faint[reg.idx].any()
    assert 0.5 * int((~faint).sum()) < reg.idx.numel() <= int((~faint).sum())  # budget above the candidates
    out = refine_occupancy(reg, params, 5, 2, sampler=ViewSampler(len(problem.train), 1, 0), monitor=Monitor(),
                           deadline=_Reached())
    assert out["steps"] == 1
    reg.close()
    cfg0 = dataclasses.replace(cfg, pivot_min_opacity=0.0)
    reg0 = MeshInTheLoop(cfg0, problem, CPU, monitor=Monitor(), settings=SplatSettings(), near=0.05)
    reg0.start(0, params)
    assert faint[reg0.idx].any()
    reg0.close()


def test_scale_schedule_keeps_the_order_and_never():
    from meshlift.methods.milo.config import validate
    from meshlift.methods.milo.presets import STEP_FIELDS, get_preset, scale_schedule

    cfg = get_preset("verylowres")
    half = scale_schedule(cfg, 0.5)
    assert set(half) == set(STEP_FIELDS) and half["steps"] == 9000 and half["mesh_start"] == 4001
    assert half["reinit_step"] == 1000 and half["delaunay_every"] == 250
    validate(dataclasses.replace(cfg, **half))
    assert scale_schedule(dataclasses.replace(cfg, prune_step=0), 0.3)["prune_step"] == 0
    with pytest.raises(ConfigError, match="factor"):
        scale_schedule(cfg, 0.0)
