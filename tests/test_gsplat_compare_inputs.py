"""benchmarks/_gsplat_inputs.py: the gsplat comparison's strategy settings, its opacity-reset rule and the probe
that finds out whether an installed gsplat ``DefaultStrategy`` resets opacities (gsplat 1.5.3 does not)."""

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _gsplat_inputs import (decide_opacity_reset, opacity_reset_due, probe_opacity_reset,  # noqa: E402
                            reset_opacity_reference, strategy_kwargs)


def _cfg(**kw):
    base = dict(densify_prune_opa=0.005, densify_grow_grad2d=0.0002, densify_grow_scale3d=0.01,
                densify_prune_scale3d=0.1, densify_refine_start=500, densify_refine_stop=15_000,
                densify_refine_every=100, densify_reset_every=3000, densify_max_gaussians=6_000_000)
    base.update(kw)
    return SimpleNamespace(**base)


# ---- fake strategies with gsplat DefaultStrategy's constructor keywords and call signature -----------------------


class _FakeStrategy:
    def __init__(self, prune_opa=0.005, reset_every=3000, refine_start_iter=500, refine_stop_iter=15_000,
                 refine_every=100, verbose=False):
        self.prune_opa, self.reset_every = prune_opa, reset_every
        self.refine_stop_iter = refine_stop_iter

    def initialize_state(self, scene_scale=1.0):
        return {"grad2d": None, "count": None, "scene_scale": scene_scale}

    def _reset(self, params):  # as gsplat's reset_opa: a new Parameter in the dict
        params["opacities"] = torch.nn.Parameter(
            reset_opacity_reference(params["opacities"].detach(), 2.0 * self.prune_opa))


class _Fixed(_FakeStrategy):
    """The rule after gsplat PR #776."""

    def step_post_backward(self, params, optimizers, state, step, info, packed=False):
        if step >= self.refine_stop_iter:
            return
        assert info["means2d"].grad is not None
        if step % self.reset_every == 0 and step > 0:
            self._reset(params)


class _Buggy(_FakeStrategy):
    """gsplat 1.5.3's condition, verbatim."""

    def step_post_backward(self, params, optimizers, state, step, info, packed=False):
        if step >= self.refine_stop_iter:
            return
        if step % self.reset_every == 0 & step > 0:
            self._reset(params)


class _TooHigh(_FakeStrategy):
    """Resets, but to a cap above 2 × prune_opa."""

    def step_post_backward(self, params, optimizers, state, step, info, packed=False):
        if step % self.reset_every == 0 and step > 0:
            params["opacities"] = torch.nn.Parameter(reset_opacity_reference(params["opacities"].detach(), 0.5))


class _Late(_FakeStrategy):
    """Resets one period too late (at 2 × reset_every)."""

    def step_post_backward(self, params, optimizers, state, step, info, packed=False):
        if step % (2 * self.reset_every) == 0 and step > 0:
            self._reset(params)


class _Raising(_FakeStrategy):
    def step_post_backward(self, params, optimizers, state, step, info, packed=False):
        raise AssertionError("radii is required but missing.")


def test_probe_sees_a_strategy_that_resets():
    out = probe_opacity_reset(_Fixed)
    assert out["resets"] is True
    assert out["opacity_max_before"] == pytest.approx(0.9, rel=1e-6)
    assert out["opacity_max_after"] <= 2 * 0.005 * (1 + 1e-4)


@pytest.mark.parametrize("cls", [_Buggy, _TooHigh, _Late])
def test_probe_sees_a_strategy_that_does_not_reset(cls):
    out = probe_opacity_reset(cls)
    assert out["resets"] is False
    assert out["opacity_max_after"] > out["reset_value"]


def test_probe_reports_a_failing_strategy_without_raising():
    out = probe_opacity_reset(_Raising)
    assert out["resets"] is None
    assert out["error"].startswith("AssertionError: radii")


def test_probe_follows_its_prune_opa():
    assert probe_opacity_reset(_Fixed, prune_opa=0.05, reset_every=7)["opacity_max_after"] == pytest.approx(0.1, 1e-5)


# ---- the rule, the reset's reference, the decision ---------------------------------------------------------------


def test_opacity_reset_due_is_the_fixed_gsplat_rule():
    due = [s for s in range(30_000) if opacity_reset_due(s, 3000, 15_000)]
    assert due == [3000, 6000, 9000, 12_000]  # 15000: step_post_backward returns early from refine_stop on
    assert not any(opacity_reset_due(s, 7001, 15_000) for s in range(7000))  # "never" = a period past the run
    assert not any(opacity_reset_due(s, 0, 15_000) for s in range(100))


def test_gsplat_153_condition_never_fires():
    """The bug this module works around: the 1.5.3 expression is a chained comparison ending in ``0 > 0``."""
    reset_every = 3000
    assert [s for s in range(20_000) if s % reset_every == 0 & s > 0] == []
    assert [s for s in range(20_000) if s % reset_every == 0 and s > 0][:2] == [3000, 6000]


def test_reset_opacity_reference_clamps_in_logit_space():
    logits = torch.tensor([-8.0, -5.0, -4.5, 0.0, 3.0])
    out = reset_opacity_reference(logits, 0.01)
    cap = math.log(0.01 / 0.99)
    assert torch.equal(out[:2], logits[:2])  # already below the cap: unchanged
    assert torch.allclose(out[2:], torch.full((3,), cap))
    assert torch.sigmoid(out).max().item() == pytest.approx(0.01, rel=1e-5)


@pytest.mark.parametrize("mode,resets,expected", [
    ("auto", False, True), ("auto", True, False), ("auto", None, False),
    ("on", True, True), ("on", False, True), ("off", False, False), ("off", True, False)])
def test_decide_opacity_reset(mode, resets, expected):
    assert decide_opacity_reset(mode, resets) is expected


def test_decide_opacity_reset_rejects_unknown_mode():
    with pytest.raises(ValueError, match="--gsplat-opacity-reset 'yes'"):
        decide_opacity_reset("yes", False)


def test_strategy_kwargs_maps_the_densify_fields():
    kw = strategy_kwargs(_cfg(), 30_000)
    assert kw == dict(prune_opa=0.005, grow_grad2d=0.0002, grow_scale3d=0.01, prune_scale3d=0.1,
                      refine_start_iter=500, refine_stop_iter=15_000, refine_every=100, reset_every=3000,
                      absgrad=False, verbose=False)
    assert strategy_kwargs(_cfg(densify_reset_every=0), 7000)["reset_every"] == 7001


def test_strategy_kwargs_of_the_real_preset():
    from meshlift.methods.gaussians.presets import get_preset

    kw = strategy_kwargs(get_preset("gaussians"), 30_000)
    assert (kw["reset_every"], kw["refine_stop_iter"], kw["prune_opa"]) == (3000, 15_000, 0.005)


# ---- against gsplat itself (skipped without it) ------------------------------------------------------------------


def _gsplat_strategy():
    try:
        import gsplat  # noqa: F401 - the package import is what needs the source tree / wheel
        from gsplat.strategy import DefaultStrategy
        from gsplat.strategy.ops import reset_opa
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"gsplat not importable ({type(exc).__name__}); put its source tree on PYTHONPATH "
                    "(benchmarks/gsplat_compare.py's docstring shows how to unpack it)")
    return gsplat, DefaultStrategy, reset_opa


def test_probe_on_installed_gsplat():
    gsplat, DefaultStrategy, _ = _gsplat_strategy()
    import inspect

    out = probe_opacity_reset(DefaultStrategy)
    src = inspect.getsource(DefaultStrategy.step_post_backward)
    # 1.5.3 has '== 0 & step > 0' (always False); gsplat PR #776 made it 'and' (after 1.5.3)
    assert out["resets"] is ("== 0 & step > 0" not in src), (gsplat.__version__, out)


def test_gsplat_reset_opa_matches_the_reference():
    _, _, reset_opa = _gsplat_strategy()
    logits = torch.nn.Parameter(torch.tensor([-6.0, -4.0, 0.5, 2.0]))
    params = {"opacities": logits}
    opt = {"opacities": torch.optim.Adam([{"params": [logits], "lr": 0.1, "name": "opacities"}])}
    logits.grad = torch.ones_like(logits)
    opt["opacities"].step()
    before = params["opacities"].detach().clone()
    reset_opa(params=params, optimizers=opt, state={}, value=0.01)
    assert torch.allclose(params["opacities"].detach(), reset_opacity_reference(before, 0.01))
    st = opt["opacities"].state[params["opacities"]]
    assert float(st["exp_avg"].abs().max()) == 0.0 and float(st["exp_avg_sq"].abs().max()) == 0.0
