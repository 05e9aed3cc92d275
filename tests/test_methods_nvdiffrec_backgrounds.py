"""Random training backgrounds (``train_background``) and the occlusion regulariser (``occlusion_reg_weight``) of
the surface method (issue 30: lego's floaters and its learned occlusion channel)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from _surface_scenes import views_on_a_ring
from meshlift.errors import ConfigError
from meshlift.methods.nvdiffrec.backgrounds import TRAIN_BACKGROUNDS, draw_background, targets_on
from meshlift.methods.nvdiffrec.config import SurfaceConfig, apply_dict, validate
from meshlift.methods.nvdiffrec.losses import (OCCLUSION_REG_KEY, image_loss, occlusion_reg_active,
                                               occlusion_regularizer)


def _cfg(**kw) -> SurfaceConfig:
    base = dict(grid_res=8, hash_levels=4, hash_log2_size=10, hash_max_res=64, env_res=8, batch=2, iter_pass1=3,
                sdf_init="sphere", device="cpu", checkpoint_every=0, checkpoint_every_s=0.0, kd_smooth_weight=0.0)
    base.update(kw)
    return validate(SurfaceConfig(**base))


def _light():
    from meshlift.methods.nvdiffrec.materials import make_light

    light, _ = make_light(_cfg(), torch.device("cpu"))
    return light


def _sphere(radius: float, subdivisions: int = 2):
    import trimesh

    from meshlift.structures.mesh import Mesh

    tm = trimesh.creation.icosphere(subdivisions, radius)
    return Mesh(v_pos=torch.tensor(tm.vertices, dtype=torch.float32), t_pos_idx=torch.tensor(tm.faces))


# ---- compositing ---------------------------------------------------------------------------------------------


def _over(color, alpha, background):
    """Straight colour over a background (conventions §6): the reference of the re-composited targets."""
    return color * alpha + background * (1.0 - alpha)


def test_a_fully_opaque_render_ignores_the_background_and_an_empty_one_is_the_background():
    """``render_batch`` over a random background: the camera inside a sphere sees it in every pixel (the render
    equals the render over the views' own white), a sphere behind the cameras leaves every pixel empty (the
    render is the random background itself)."""
    from meshlift.methods.nvdiffrec.evaluate import render_batch

    torch.set_grad_enabled(False)
    try:
        _opaque_and_empty(render_batch)
    finally:
        torch.set_grad_enabled(True)


def _opaque_and_empty(render_batch):
    cfg, light = _cfg(), _light()
    views = views_on_a_ring(2, 16)
    bg = draw_background(views, "random", torch.Generator().manual_seed(3))
    inside = _sphere(5.0)
    on_white = render_batch(inside, views, light, None, cfg)
    on_noise = render_batch(inside, views, light, None, cfg, background=bg)
    assert float(on_white["alpha"].min()) == 1.0
    torch.testing.assert_close(on_noise["shaded"], on_white["shaded"], rtol=0, atol=0)
    away = dataclasses.replace(_sphere(0.1), v_pos=_sphere(0.1).v_pos + torch.tensor([0.0, 50.0, 0.0]))
    empty = render_batch(away, views, light, None, cfg, background=bg)
    assert float(empty["alpha"].max()) == 0.0
    torch.testing.assert_close(empty["shaded"], bg, rtol=0, atol=0)


def test_targets_are_recomposited_with_their_mask():
    views = views_on_a_ring(3, 8)
    g = torch.Generator().manual_seed(2)
    views.masks = torch.rand(views.masks.shape, generator=g)  # fractional coverage too
    views.masks[0] = 1.0
    views.masks[1] = 0.0
    bg = torch.rand(3, 8, 8, 3, generator=g)
    t = targets_on(views, bg)
    torch.testing.assert_close(t[0], views.targets()[0])  # opaque: the object, whatever the background
    torch.testing.assert_close(t[1], bg[1])  # empty: the new background
    # straight views (synthetic renders): exactly the composite of the straight colour on the new background
    torch.testing.assert_close(t, _over(views.images, views.masks, bg))
    with pytest.raises(ConfigError, match="train_background=fixed"):
        targets_on(dataclasses.replace(views, masks=None), bg)


def test_draw_background_modes():
    views = views_on_a_ring(3, 8)
    g = torch.Generator().manual_seed(0)
    assert draw_background(views, "fixed") is None
    assert draw_background(dataclasses.replace(views, masks=None), "random") is None  # nothing to re-composite
    px = draw_background(views, "random", g)
    assert px.shape == (3, 8, 8, 3) and px.dtype == torch.float32
    assert 0.0 <= float(px.min()) and float(px.max()) <= 1.0 and float(px.std()) > 0.1
    per_view = draw_background(views, "random_view", g)
    assert per_view.shape == (3, 8, 8, 3)
    assert torch.equal(per_view, per_view[:, :1, :1].expand_as(per_view))  # one colour per view
    assert not torch.equal(per_view[0, 0, 0], per_view[1, 0, 0])
    with pytest.raises(ConfigError, match="random_view"):
        draw_background(views, "checker")
    assert set(TRAIN_BACKGROUNDS) == {"fixed", "random", "random_view"}


# ---- the loss with random backgrounds -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["random", "random_view"])
def test_loss_on_random_backgrounds_is_finite_and_reaches_geometry_and_material(mode):
    from meshlift.methods.nvdiffrec.evaluate import render_batch
    from meshlift.methods.nvdiffrec.materials import BoundedMaterialField

    torch.manual_seed(0)
    cfg, light = _cfg(train_background=mode), _light()
    views = views_on_a_ring(2, 24)
    mesh = _sphere(0.8)
    mesh.v_pos.requires_grad_()
    field = BoundedMaterialField(cfg, torch.device("cpu"))
    bg = draw_background(views, mode)
    out = render_batch(mesh, views, light, field, cfg, background=bg)
    loss, mse = image_loss(out, views, cfg, bg)
    assert torch.isfinite(loss) and torch.isfinite(mse)
    loss.backward()
    assert mesh.v_pos.grad is not None and torch.isfinite(mesh.v_pos.grad).all()
    assert float(mesh.v_pos.grad.abs().sum()) > 0  # the silhouettes move (antialias + mask term)
    grads = [p.grad for p in field.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(gr).all() for gr in grads) and sum(float(gr.abs().sum()) for gr in grads) > 0


def test_random_background_colour_term_is_not_premultiplied():
    """A floater outside every mask: with the fixed background only the mask term sees it; with a random one the
    colour term does too (the loss is larger by it)."""
    from meshlift.methods.nvdiffrec.evaluate import render_batch

    cfg, light = _cfg(mask_weight=0.0), _light()
    views = views_on_a_ring(2, 16)
    views.masks = torch.zeros_like(views.masks)  # nothing to fit: anything rendered is a floater
    inside = _sphere(5.0)
    fixed_loss, _ = image_loss(render_batch(inside, views, light, None, cfg), views, cfg)
    bg = draw_background(views, "random", torch.Generator().manual_seed(4))
    random_loss, _ = image_loss(render_batch(inside, views, light, None, cfg, background=bg), views, cfg, bg)
    assert float(fixed_loss.detach()) == 0.0
    assert float(random_loss.detach()) > 0.01


# ---- the occlusion regulariser -------------------------------------------------------------------------------


def test_occlusion_regularizer_is_zero_when_open_and_positive_when_occluded():
    cov = torch.zeros(2, 4, 4, 1)
    cov[:, 1:3, 1:3] = 1.0
    ks = torch.zeros(2, 4, 4, 3)
    ks[..., 1] = 0.5 * cov[..., 0]  # roughness does not count
    assert float(occlusion_regularizer(ks, cov)) == 0.0
    occ = ks.clone()
    occ[..., 0] = 0.4 * cov[..., 0]
    occ.requires_grad_()
    val = occlusion_regularizer(occ, cov)
    assert float(val.detach()) == pytest.approx(0.4)  # the mean over the covered pixels
    val.backward()
    assert float(occ.grad[..., 0].min()) > 0 and float(occ.grad[..., 1:].abs().max()) == 0.0
    assert float(occlusion_regularizer(torch.zeros(1, 2, 2, 3), torch.zeros(1, 2, 2, 1))) == 0.0  # empty frame


def test_occlusion_regulariser_acts_only_on_a_learned_occlusion():
    assert not occlusion_reg_active(_cfg())  # the default ks range fixes occlusion at 0
    assert occlusion_reg_active(_cfg(ks_min=(0.0, 0.25, 0.0), ks_max=(1.0, 1.0, 1.0)))
    assert not occlusion_reg_active(_cfg(ks_min=(0.0, 0.25, 0.0), ks_max=(1.0, 1.0, 1.0), occlusion_reg_weight=0.0))
    assert not occlusion_reg_active(_cfg(ks_min=(0.3, 0.25, 0.0), ks_max=(0.3, 1.0, 1.0)))  # a constant


def test_config_fields_and_their_checks():
    cfg = SurfaceConfig()
    assert cfg.train_background == "fixed" and cfg.occlusion_reg_weight == 0.03
    assert apply_dict(cfg, {"train_background": "random"}).train_background == "random"
    with pytest.raises(ConfigError, match="train_background"):
        apply_dict(cfg, {"train_background": "noise"})
    with pytest.raises(ConfigError, match="occlusion_reg_weight"):
        apply_dict(cfg, {"occlusion_reg_weight": -1})


def test_cuda_graph_step_is_skipped_with_either_lever():
    from meshlift.methods.nvdiffrec.pixel_graphs import PixelGraphs

    learned = dict(ks_min=(0.0, 0.25, 0.0), ks_max=(1.0, 1.0, 1.0))
    assert PixelGraphs.wanted(_cfg(), torch.device("cuda"), 2, False, (64, 64))
    assert not PixelGraphs.wanted(_cfg(train_background="random"), torch.device("cuda"), 2, False, (64, 64))
    assert not PixelGraphs.wanted(_cfg(**learned), torch.device("cuda"), 2, False, (64, 64))
    assert PixelGraphs.wanted(_cfg(**learned, occlusion_reg_weight=0.0), torch.device("cuda"), 2, False, (64, 64))


# ---- in the passes: a loss term in the history ----------------------------------------------------------------


def test_pass1_steps_on_random_backgrounds_log_the_occlusion_term():
    from meshlift.data.views import ProblemData
    from meshlift.methods.checkpoints import Checkpointer
    from meshlift.methods.engine import Monitor, TrainState
    from meshlift.methods.nvdiffrec.passes import Pass1Trainer
    from meshlift.methods.nvdiffrec.reconstruct import loss_term_means

    views = views_on_a_ring(3, 24)
    data = ProblemData(train=views, test=views, world_to_normalized=torch.eye(4, dtype=torch.float64))
    cfg = _cfg(train_background="random", ks_min=(0.0, 0.25, 0.0), ks_max=(1.0, 1.0, 1.0))
    state = TrainState()
    tr = Pass1Trainer(cfg, data, torch.device("cpu"), state=state, monitor=Monitor(), checkpointer=Checkpointer(None))
    tr.run()
    rows = [h for h in state.history if h["pass"] == 1]
    assert len(rows) == cfg.iter_pass1
    for h in rows:
        assert isinstance(h[OCCLUSION_REG_KEY], float) and 0.0 < h[OCCLUSION_REG_KEY] < 1.0
        assert isinstance(h["loss"], float) and h["loss"] == h["loss"]
    means = loss_term_means(state.history)["loss_terms"][OCCLUSION_REG_KEY]
    assert set(means) == {"pass1"} and means["pass1"] == pytest.approx(
        sum(h[OCCLUSION_REG_KEY] for h in rows) / len(rows))
    # without a learned occlusion the rows hold no such field, and the metrics no loss_terms
    state2 = TrainState()
    Pass1Trainer(_cfg(iter_pass1=1), data, torch.device("cpu"), state=state2, monitor=Monitor(),
                 checkpointer=Checkpointer(None)).run()
    assert OCCLUSION_REG_KEY not in state2.history[0] and loss_term_means(state2.history) == {}
