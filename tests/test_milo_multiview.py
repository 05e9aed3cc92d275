"""PGSR's multi-view geometric consistency (issue #33): the reprojection error of two depth maps
(:mod:`meshlift.geometry.reprojection`: exact cases, the per-pixel loop twin, gradients) and its training hook
(:class:`meshlift.methods.gaussians.surface.SurfaceRegularizer`, MILo's ``multiview_*`` fields)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from meshlift.errors import CameraError, ConfigError
from meshlift.geometry.reprojection import (multiview_geometric_loss, reprojection_error,
                                            reprojection_error_reference)
from meshlift.methods.gaussians.surface import SurfaceRegularizer
from meshlift.methods.gaussians.trainer import GaussianTrainer
from meshlift.methods.milo.config import apply_dict
from meshlift.methods.milo.presets import get_preset

from _milo_scene import sphere_problem

F64 = torch.float64


def _look_at(centre, target=(0.0, 0.0, 0.0)) -> torch.Tensor:
    """``[4, 4]`` OpenCV world-to-camera looking from ``centre`` at ``target`` (world +y roughly up)."""
    c, t = torch.tensor(centre, dtype=F64), torch.tensor(target, dtype=F64)
    z = torch.nn.functional.normalize(t - c, dim=0)
    x = torch.nn.functional.normalize(torch.linalg.cross(torch.tensor([0.0, 1.0, 0.0], dtype=F64), z), dim=0)
    y = torch.linalg.cross(z, x)
    R = torch.stack([x, y, z])
    w = torch.eye(4, dtype=F64)
    w[:3, :3], w[:3, 3] = R, -R @ c
    return w


def _plane_depth(K, w2c, H, W, height=0.0) -> torch.Tensor:
    """``[H, W]`` exact camera-z depth of the plane ``world z = height`` at the pixel centres."""
    v, u = torch.meshgrid(torch.arange(H, dtype=F64) + 0.5, torch.arange(W, dtype=F64) + 0.5, indexing="ij")
    ray = torch.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], torch.ones_like(u)], -1)  # per unit z
    R, t = w2c[:3, :3], w2c[:3, 3]
    c = -R.T @ t
    return (height - c[2]) / (ray @ R)[..., 2]


K0 = torch.tensor([[20.0, 0.0, 8.0], [0.0, 20.0, 6.0], [0.0, 0.0, 1.0]], dtype=F64)
H, W = 12, 16


def test_parallel_views_of_a_plane_exact_and_scaled():
    """Two parallel cameras a baseline ``b`` apart facing a plane at depth ``D``: true depths give φ = 0; the
    neighbour's depth scaled by ``s`` gives φ = f b / D · |1 − 1/s| at every valid pixel (by hand:
    ``p_n = p − f b / D``, back-projected at ``s D`` and seen from r at ``p − f b / D + f b / (s D)``)."""
    f, b, D, s = 20.0, 0.3, 3.0, 1.1
    wr = torch.eye(4, dtype=F64)
    wn = torch.eye(4, dtype=F64)
    wn[0, 3] = -b  # camera n's centre at world (b, 0, 0)
    d = torch.full((1, H, W), D, dtype=F64)
    phi, ok = reprojection_error(d, d, K0[None], wr[None], K0[None], wn[None])
    assert ok.sum() > 0.5 * H * W
    assert float(phi[ok].abs().max()) < 1e-9 and float(phi[~ok].abs().max()) == 0.0
    # the columns whose p_n falls in n's image (shifted by f b / D = 2 px) are the valid ones
    assert ok[0, :, 3:].all() and not ok[0, :, :2].any()
    phi, ok2 = reprojection_error(d, s * d, K0[None], wr[None], K0[None], wn[None])
    assert torch.equal(ok, ok2)
    expect = f * b / D * abs(1 - 1 / s)
    torch.testing.assert_close(phi[ok2], torch.full_like(phi[ok2], expect), rtol=0, atol=1e-9)
    loss, used = multiview_geometric_loss(d, s * d, K0[None], wr[None], K0[None], wn[None])
    assert abs(float(loss) - expect * torch.exp(torch.tensor(-expect, dtype=F64)).item()) < 1e-9
    assert abs(float(used) - float(ok.double().mean())) < 1e-12
    # errors beyond max_error are dropped: nothing is left at 0.1 px
    loss, used = multiview_geometric_loss(d, s * d, K0[None], wr[None], K0[None], wn[None], max_error=0.1)
    assert float(loss) == 0.0 and float(used) == 0.0


def test_tilted_views_of_a_plane_agree_up_to_bilinear_depth():
    """Two converging views of the plane z = 0: true depths agree to the error of interpolating depth (not
    1/depth) bilinearly between pixel centres (< 1e-3 px here); the far view's empty pixels are not used."""
    wr, wn = _look_at([0.0, 0.0, 3.0]), _look_at([0.4, 0.2, 3.0])
    dr, dn = _plane_depth(K0, wr, H, W), _plane_depth(K0, wn, H, W)
    phi, ok = reprojection_error(dr[None], dn[None], K0[None], wr[None], K0[None], wn[None])
    assert ok.float().mean() > 0.7 and float(phi[ok].max()) < 1e-3
    dn_holes = dn.clone()
    dn_holes[:, :5] = 0.0  # an empty strip: pixels that would sample it are left out
    phi2, ok2 = reprojection_error(dr[None], dn_holes[None], K0[None], wr[None], K0[None], wn[None])
    assert ok2.sum() < ok.sum() and not (ok2 & ~ok).any()


def test_vectorised_equals_per_pixel_reference():
    """The batched function and its loop twin agree on φ and validity: random depths with holes, two pairs."""
    g = torch.Generator().manual_seed(3)
    wr = torch.stack([_look_at([0.0, 0.0, 3.0]), _look_at([1.0, 0.5, 2.8])])
    wn = torch.stack([_look_at([0.5, 0.2, 3.0]), _look_at([1.3, 0.1, 2.7])])
    Ks = torch.stack([K0, K0 * torch.tensor([[0.9], [0.9], [1.0]], dtype=F64)])
    dr = torch.stack([_plane_depth(Ks[i], wr[i], H, W) for i in range(2)]) * (1 + 0.02 * torch.randn(2, H, W, generator=g, dtype=F64))
    dn = torch.stack([_plane_depth(Ks[i], wn[i], H, W) for i in range(2)]) * (1 + 0.02 * torch.randn(2, H, W, generator=g, dtype=F64))
    dr[torch.rand(2, H, W, generator=g) < 0.1] = 0.0
    dn[torch.rand(2, H, W, generator=g) < 0.1] = 0.0
    phi, ok = reprojection_error(dr, dn, Ks, wr, Ks, wn)
    phi_ref, ok_ref = reprojection_error_reference(dr, dn, Ks, wr, Ks, wn)
    assert ok.sum() > 50 and torch.equal(ok, ok_ref)
    torch.testing.assert_close(phi, phi_ref, rtol=0, atol=1e-9)
    # float32 inputs give the same up to float32 rounding
    phi32, ok32 = reprojection_error(dr.float(), dn.float(), Ks.float(), wr.float(), Ks.float(), wn.float())
    both = ok32 & ok
    assert both.sum() >= ok.sum() - 3
    torch.testing.assert_close(phi32[both].double(), phi[both], rtol=0, atol=2e-3)


def test_gradients_reach_both_depths_gradcheck():
    """float64 gradcheck of φ w.r.t. both depth maps; the loss's gradient is ``exp(−φ) ∂φ`` / count (the
    weight is held constant)."""
    g = torch.Generator().manual_seed(0)
    K = torch.tensor([[[8.0, 0.0, 3.0], [0.0, 8.0, 2.5], [0.0, 0.0, 1.0]]], dtype=F64)
    wr = torch.eye(4, dtype=F64)[None]
    wn = wr.clone()
    wn[0, 0, 3] = -0.1
    dr = (2 + 0.05 * torch.rand(1, 5, 6, generator=g, dtype=F64)).requires_grad_()
    dn = (2 + 0.05 * torch.rand(1, 5, 6, generator=g, dtype=F64)).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: reprojection_error(a, b, K, wr, K, wn)[0], (dr, dn))
    loss, _ = multiview_geometric_loss(dr, dn, K, wr, K, wn, max_error=10.0)
    loss.backward()
    assert float(dr.grad.abs().sum()) > 0 and float(dn.grad.abs().sum()) > 0
    phi, ok = reprojection_error(dr.detach(), dn.detach(), K, wr, K, wn)
    assert (dr.grad[~ok] == 0).all()


def test_bad_input_raises():
    d = torch.ones(1, 4, 4)
    with pytest.raises(CameraError, match="K_n"):
        reprojection_error(d, d, torch.eye(3)[None], torch.eye(4)[None], torch.eye(3), torch.eye(4)[None])
    with pytest.raises(CameraError, match="depths"):
        reprojection_error(d[0], d[0], torch.eye(3)[None], torch.eye(4)[None], torch.eye(3)[None], torch.eye(4)[None])
    with pytest.raises(ConfigError, match="max_error"):
        multiview_geometric_loss(d, d, torch.eye(3)[None], torch.eye(4)[None], torch.eye(3)[None], torch.eye(4)[None],
                                 max_error=0.0)


def test_config_fields_validated():
    cfg = get_preset("verylowres")
    assert cfg.multiview_weight == 0.0 and cfg.multiview_every == 1 and cfg.multiview_neighbours == 4
    assert get_preset("verylowres", quick=True).multiview_start == 160
    for field, bad in (("multiview_weight", "-0.1"), ("multiview_every", "0"), ("multiview_neighbours", "0"),
                       ("multiview_start", "-1"), ("multiview_max_error", "0")):
        with pytest.raises(ConfigError, match=field):
            apply_dict(get_preset("verylowres"), {field: bad})
    with pytest.raises(ConfigError, match="multiview"):
        SurfaceRegularizer(1.0, multiview_every=0)
    reg = SurfaceRegularizer(1.0, depth_normal_weight=0.0, multiview_weight=0.03, multiview_start=4, multiview_every=3)
    assert [reg.render_outputs(s) for s in (3, 4, 5, 7)] == [(), ("median_plane_depth",), (), ("median_plane_depth",)]


@pytest.fixture(scope="module")
def sphere():
    return sphere_problem(size=20, n_train=6, n_test=1)


def _train(problem, reg, steps=6):
    cfg = dataclasses.replace(get_preset("milo_tiny"), steps=steps, num_random=150, densify=False, reinit_step=0,
                              sampling_step=0, prune_step=0, checkpoint_every=0, preview_every=0)
    t = GaussianTrainer(cfg, problem, torch.device("cpu"), strategy=None, regularizer=reg, method="milo")
    t.train()
    return t


def test_micro_training_run_with_and_without_the_term(sphere):
    """Weight 0: the term is never computed and training is bit-identical to a regulariser built without the
    multi-view arguments; weight > 0: it runs at its steps, is logged, and changes the Gaussians."""
    problem, _ = sphere
    kw = dict(depth_normal_start=2, depth="median")
    base = _train(problem, SurfaceRegularizer(problem.scene_scale, **kw))
    off = _train(problem, SurfaceRegularizer(problem.scene_scale, **kw, multiview_weight=0.0, multiview_start=0))
    assert off.regularizer.multiview_summary() == {} and "multiview" not in off.regularizer.last
    for k in base.params:
        assert torch.equal(base.params[k], off.params[k]), k
    on = _train(problem, SurfaceRegularizer(problem.scene_scale, **kw, multiview_weight=1.0, multiview_start=1,
                                            multiview_every=2, multiview_neighbours=2))
    s = on.regularizer.multiview_summary()
    assert s["calls"] == 3 and 0 <= s["mean_loss_px"] < 1 and 0 < s["mean_used_fraction"] <= 1
    assert "multiview" in on.regularizer.last
    assert not torch.equal(base.params["means"], on.params["means"])
    assert all(torch.isfinite(p).all() for p in on.params.values())


@pytest.mark.slow  # a whole tsdf run (training, fusion, evaluation): 2.3 s measured on 2 shared CPU cores, near the 3 s line
def test_reconstruct_records_the_term(sphere, tmp_path):
    """``--method milo`` with ``multiview_weight > 0`` writes the term's summary into metrics.json."""
    from meshlift.methods.milo.reconstruct import reconstruct

    problem, gt = sphere
    cfg = dataclasses.replace(get_preset("milo_tiny"), steps=12, num_random=200, densify=False, reinit_step=0,
                              sampling_step=0, prune_step=0, depth_normal_start=4, mesh_start=1000,
                              checkpoint_every=0, preview_every=0, render_test=True, texture_res=32,
                              eval_samples=2000, tsdf_resolution=32, scene_resolution=16, max_asset_faces=2000,
                              multiview_weight=0.03, multiview_start=6, multiview_every=2)
    r = reconstruct(cfg, tmp_path / "run", problem=problem, gt_mesh=gt)
    mv = r.metrics["multiview"]
    assert mv["calls"] == 3 and mv["mean_loss_px"] >= 0 and 0 < mv["mean_used_fraction"] <= 1
