"""The surface method's levers against floaters: the annealed SDF sign-change regulariser (nvdiffrec's values,
wired into every pass-1 step) and the view cull after pass 1 (wired, timed, budgeted, recorded)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from meshlift.methods.engine import LinearSchedule
from meshlift.methods.nvdiffrec.budget import SAFETY, StageRates, SurfaceStageCosts
from meshlift.methods.nvdiffrec.config import SurfaceConfig
from meshlift.methods.nvdiffrec.losses import RegularizerSchedules


def _nvdiffrec_sdf_weight(w0: float, t: float) -> float:
    """nvdiffrec's train.py: ``sdf_regularizer - (sdf_regularizer - 0.01) * min(1.0, 4.0 * t_iter)``."""
    return w0 - (w0 - 0.01) * min(1.0, 4.0 * t)


@pytest.mark.parametrize("w0", [0.2, 0.5])
def test_sdf_regulariser_anneals_like_nvdiffrec(w0):
    ramps = RegularizerSchedules.from_config(SurfaceConfig(sdf_reg_weight=w0, sdf_reg_final=0.01))
    for t in (0.0, 0.05, 0.125, 0.2, 0.25, 0.5, 1.0):
        assert ramps.sdf_reg(t) == pytest.approx(_nvdiffrec_sdf_weight(w0, t))
    assert ramps.sdf_reg(0.0) == w0 and ramps.sdf_reg(1.0) == pytest.approx(0.01)
    assert RegularizerSchedules.from_config(SurfaceConfig()).sdf_reg(0.0) == 0.2  # the default is nvdiffrec's


def test_sdf_regulariser_is_applied_every_pass1_step_with_the_annealed_weight(monkeypatch):
    """Each pass-1 step asks the ramp for ``it / iter_pass1`` and adds ``weight × reg_loss`` to its loss."""
    import meshlift.methods.nvdiffrec.passes as passes
    from meshlift.methods.nvdiffrec.geometry import DMTetGeometry
    from meshlift.methods.nvdiffrec.reconstruct import reconstruct, synthetic_problem
    from test_methods_nvdiffrec_e2e import _torus_mesh, small_config

    asked, calls = [], []

    class Recording(LinearSchedule):
        def __call__(self, x: float) -> float:
            asked.append(x)
            return super().__call__(x)

    real_from_config = RegularizerSchedules.from_config

    def from_config(cfg):
        r = real_from_config(cfg)
        return dataclasses.replace(r, sdf_reg=Recording(r.sdf_reg.start, r.sdf_reg.end, r.sdf_reg.duration))

    real_reg = DMTetGeometry.reg_loss

    def reg_loss(self):
        out = real_reg(self)
        calls.append(out.requires_grad)
        return out

    monkeypatch.setattr(passes.RegularizerSchedules, "from_config", staticmethod(from_config))
    monkeypatch.setattr(DMTetGeometry, "reg_loss", reg_loss)
    cfg = small_config(iter_pass1=8, iter_pass2=1, train_res=24, grid_res=12, ref_views=4, texture_res=16,
                       eval_samples=2000, view_cull="off")
    data = synthetic_problem(_torus_mesh(n=16, m=8), cfg, torch.device("cpu"), name="torus")
    reconstruct(cfg, None, data=data)
    assert asked == [it / 8 for it in range(8)]
    assert len(calls) == 8 and all(calls)  # differentiable: it reaches the SDF


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_view_cull_runs_after_pass1_and_is_recorded(monkeypatch):
    import meshlift.mesh.visibility as visibility
    from meshlift.methods.nvdiffrec.reconstruct import reconstruct, synthetic_problem
    from test_methods_nvdiffrec_e2e import _torus_mesh, small_config

    seen = []
    real = visibility.view_cull

    def spy(mesh, w2clip, masks, **kw):
        seen.append((mesh.num_faces, tuple(masks.shape), kw["mode"], kw["dilate_px"]))
        return real(mesh, w2clip, masks, **kw)

    monkeypatch.setattr(visibility, "view_cull", spy)
    cfg = small_config(iter_pass1=6, iter_pass2=1, train_res=24, grid_res=12, ref_views=4, texture_res=16,
                       eval_samples=2000, view_cull_dilate_px=3)
    data = synthetic_problem(_torus_mesh(n=16, m=8), cfg, torch.device("cpu"), name="torus")
    res = reconstruct(cfg, None, data=data)
    assert len(seen) == 1 and seen[0][1] == (4, 24, 24, 1) and seen[0][2:] == ("floaters", 3)
    vc = res.metrics["view_cull"]
    assert vc["mode"] == "floaters" and vc["faces_before"] == seen[0][0] and vc["dilate_px"] == 3
    assert vc["faces_after"] == res.dmtet_mesh.num_faces  # the pass-1 mesh written is the culled one
    assert "cull_s" in res.metrics["timings"]
    off = reconstruct(dataclasses.replace(cfg, view_cull="off"), None, data=data)
    assert len(seen) == 1 and "view_cull" not in off.metrics and "cull_s" not in off.metrics["timings"]


def test_stage_budget_counts_the_view_cull():
    rates = StageRates(hidden_s_per_pixel=1e-6, unwrap_s_per_face=1e-3, bake_s_per_texel=1e-6, eval_s_per_pixel=1e-6,
                       eval_s_per_sample=1e-5, export_s_per_texel=1e-7, fixed_s=1.0)
    cfg = SurfaceConfig(hidden_views=4, hidden_res=100, texture_res=100, unwrap_max_faces=1000)
    train_px = 50 * 400 * 400
    with_cull = SurfaceStageCosts(cfg, "cpu", 1000, rates=rates, train_pixels=train_px)
    off = SurfaceStageCosts(dataclasses.replace(cfg, view_cull="off"), "cpu", 1000, rates=rates, train_pixels=train_px)
    assert with_cull.between_s() - off.between_s() == pytest.approx(SAFETY * 1e-6 * train_px)
    assert SurfaceStageCosts(cfg, "cpu", 1000, rates=rates).between_s() == pytest.approx(off.between_s())
    measured = SurfaceStageCosts(cfg, "cpu", 1000, rates=rates, train_pixels=train_px,
                                 measured={"unwrap_bake_s": 2.0, "hidden_s": 0.5, "cull_s": 0.25})
    assert measured.between_s() == 2.75
