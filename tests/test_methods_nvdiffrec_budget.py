"""The nvdiffrec time budget: stage-cost estimates and the pass deadlines they give (fake clock, no timing)."""

from __future__ import annotations

import dataclasses

import pytest

from meshlift.methods.engine import StageCosts
from meshlift.methods.nvdiffrec.budget import SAFETY, StageRates, SurfaceStageCosts
from meshlift.methods.nvdiffrec.config import SurfaceConfig
from meshlift.methods.nvdiffrec.reconstruct import budget_for

RATES = StageRates(hidden_s_per_pixel=1e-6, unwrap_s_per_face=1e-3, bake_s_per_texel=1e-6, eval_s_per_pixel=1e-6,
                   eval_s_per_sample=1e-5, export_s_per_texel=1e-7, fixed_s=1.0)


def _cfg(**kw) -> SurfaceConfig:
    base = dict(hidden_views=4, hidden_res=100, texture_res=1000, unwrap_max_faces=5000, eval_samples=10000,
                time_budget_s=100.0, budget_pass2_share=0.25)
    base.update(kw)
    return SurfaceConfig(**base)


def test_stage_costs_grow_with_mesh_and_texture_and_use_measurements():
    cfg = _cfg()
    c = SurfaceStageCosts(cfg, "cpu", test_pixels=1000, rates=RATES)
    hidden, bake = 4 * 100**2 * 1e-6, 1000**2 * 1e-6
    assert c.between_s() == pytest.approx(SAFETY * (hidden + 5000 * 1e-3 + bake))  # unwrap_max_faces assumed
    c.observe(faces=1000)
    assert c.between_s() == pytest.approx(SAFETY * (hidden + 1.0 + bake))
    big = SurfaceStageCosts(dataclasses.replace(cfg, texture_res=2000), "cpu", 1000, faces=1000, rates=RATES)
    assert big.between_s() > c.between_s()
    assert c.final_s() == pytest.approx(SAFETY * (1000e-6 + 2 * 10000 * 1e-5 + 3 * 1000**2 * 1e-7 + 1.0))
    no_hidden = SurfaceStageCosts(dataclasses.replace(cfg, remove_hidden=False), "cpu", 1000, faces=1000, rates=RATES)
    assert no_hidden.between_s() == pytest.approx(SAFETY * (1.0 + bake))
    measured = {"unwrap_bake_s": 3.0, "hidden_s": 0.5}
    m = SurfaceStageCosts(cfg, "cuda", 1000, measured=measured, rates=RATES)
    assert m() == StageCosts(between_s=3.5, final_s=m.final_s())
    measured["eval_s"], measured["export_s"] = 1.0, 2.0  # live: measured later in the run
    assert m.final_s() == 3.0


def test_budget_gives_pass2_its_share_and_what_pass1_left(monkeypatch):
    clock = {"t": 0.0}
    cfg = _cfg()
    budget = budget_for(cfg)
    budget.clock = lambda: clock["t"]
    budget.start(0.0)
    costs = SurfaceStageCosts(cfg, "cpu", test_pixels=1000, faces=2000, rates=RATES)
    between, final = costs.between_s(), costs.final_s()
    d1 = budget.deadline("pass1", costs)
    train = 100.0 - between - final
    assert d1() == pytest.approx(0.75 * train)
    # pass 1 ran to its deadline, the unwrap + bake took exactly the estimate: pass 2 gets its 25 %
    clock["t"] = 0.75 * train + between
    d2 = budget.deadline("pass2", costs)
    assert d2() - clock["t"] == pytest.approx(0.25 * train)
    assert d2() == pytest.approx(100.0 - final)
    # the old fixed fractions (55 % / 80 %) would have left pass 2 nothing after a 30 s unwrap + bake
    slow = SurfaceStageCosts(cfg, "cpu", 1000, measured={"unwrap_bake_s": 30.0}, rates=RATES)
    clock["t"] = 55.0 + 30.0
    assert budget.deadline("pass2", slow)() - clock["t"] == pytest.approx(100.0 - slow.final_s() - 85.0)
    assert 100.0 - slow.final_s() - 85.0 > 0


def test_budget_share_field_is_validated():
    from meshlift.errors import ConfigError
    from meshlift.methods.nvdiffrec.config import apply_dict

    with pytest.raises(ConfigError, match="budget_pass2_share"):
        apply_dict(SurfaceConfig(), {"budget_pass2_share": 1.5})
    with pytest.raises(ConfigError, match="readback_every"):
        apply_dict(SurfaceConfig(), {"readback_every": -1})


# ---- whole runs (tiny torus, CPU) ------------------------------------------------------------------------


def _tiny_run(tmp_path, name, *extra):
    import json

    from test_robustness_runs import TINY

    from meshlift.cli.main import main
    from meshlift.io.obj import save_obj
    from test_methods_nvdiffrec_e2e import _torus_mesh

    obj = tmp_path / "torus.obj"
    if not obj.exists():
        save_obj(obj, _torus_mesh(n=24, m=12))
    out = tmp_path / name
    args = ["reconstruct", str(obj), "--out", str(out), "--preset", "spot", "--quick"]
    for item in TINY + ["iter_pass1=6", "iter_pass2=4", "checkpoint_every=0", "checkpoint_every_s=0"] + list(extra):
        args += ["--set", item]
    assert main(args) == 0
    return json.loads((out / "metrics.json").read_text()), (out / "mesh.glb").read_bytes()


@pytest.mark.slow
def test_deferred_readbacks_give_the_same_run_and_budget_records_stage_times(tmp_path):
    m1, glb1 = _tiny_run(tmp_path, "every1", "readback_every=1")
    m4, glb4 = _tiny_run(tmp_path, "every4", "readback_every=4", "time_budget_s=100000")
    assert glb1 == glb4  # the read-back cadence (and a budget that is never reached) change nothing
    for k in ("psnr", "ssim", "chamfer_l1", "fscore"):
        assert m1[k] == m4[k]
    assert m4["iterations"] == {"pass1": 6, "pass2": 4}
    assert {"hidden_s", "unwrap_bake_s", "eval_s", "pass1_s", "pass2_s"} <= set(m4["timings"])
