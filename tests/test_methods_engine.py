"""methods.engine: named schedules (values, state_dict), time budget, device errors; _deps probes."""

from __future__ import annotations

import math

import pytest
import torch

from meshlift.errors import ConfigError, DependencyError
from meshlift.methods.engine import (ExponentialLR, LinearSchedule, StageCosts, TimeBudget, TrainState, is_oom,
                                     resolve_device)


def test_linear_schedule_ramps_then_holds_and_round_trips():
    s = LinearSchedule(0.2, 0.01, 0.25)
    assert s(0.0) == 0.2
    assert s(0.125) == pytest.approx(0.105)
    assert s(0.25) == pytest.approx(0.01) and s(0.9) == pytest.approx(0.01)
    assert LinearSchedule(**s.state_dict()) == s
    warm = LinearSchedule(0.0, 1.0, 500.0)
    assert [warm(i) for i in (0, 250, 500, 800)] == [0.0, 0.5, 1.0, 1.0]


def test_exponential_lr_warms_up_then_decays():
    f = ExponentialLR(warmup=4, decay=0.01)
    assert f(0) == pytest.approx(0.25)
    assert f(3) == pytest.approx(10 ** -0.03)
    assert f(100) == pytest.approx(10 ** -1.0)
    assert ExponentialLR(0, 0.0)(7) == 1.0
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, f)  # usable as a LambdaLR factor
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(f(1))


class FakeClock:
    """A settable clock: budgets are tested without timing anything."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_time_budget_shares_training_time_after_reserving_the_other_stages():
    clock = FakeClock(100.0)
    b = TimeBudget(100.0, {"pass1": 0.6, "pass2": 0.4}, clock=clock)
    costs = StageCosts(between_s=10.0, final_s=5.0)
    clock.t = 105.0  # data loading took 5 s
    d1 = b.deadline("pass1", costs)
    # time left 95 s, minus 10 + 5 reserved = 80 s of training; pass 1 gets 60% of it
    assert d1() == pytest.approx(105.0 + 0.6 * 80.0)
    clock.t = 152.9
    assert not d1.reached()
    clock.t = 153.1
    assert d1.reached()
    # the between-stage took 20 s instead of 10: pass 2 gets all that is left before the final 5 s
    clock.t = 173.1
    d2 = b.deadline("pass2", costs)
    assert d2() == pytest.approx(200.0 - 5.0)
    # a pass 1 that finished early leaves its time to pass 2
    clock.t = 120.0
    assert b.deadline("pass2", costs)() == pytest.approx(195.0)
    assert TimeBudget(0.0, {"pass1": 0.5, "pass2": 0.5}).deadline("pass1") is None
    assert b.state_dict() == {"total_s": 100.0, "shares": {"pass1": 0.6, "pass2": 0.4}}
    with pytest.raises(ConfigError, match="unknown pass"):
        b.deadline("pass3")
    with pytest.raises(ConfigError, match="shares"):
        TimeBudget(10.0, {"pass1": 0.0, "pass2": 0.0})


def test_check_pass_time_refuses_a_pass_with_no_time_and_names_the_knob():
    from meshlift.methods.engine import check_pass_time

    clock = FakeClock(0.0)
    b = TimeBudget(330.0, {"train": 0.85, "extract": 0.15}, clock=clock)
    check_pass_time(None, 0.0, "training")  # no budget: nothing to check
    check_pass_time(b.deadline("train", StageCosts(between_s=100.0, final_s=50.0)), 330.0, "training")  # 153 s
    with pytest.raises(ConfigError, match=r"time_budget_s=330 leaves 0 s for training \(a run needs at least 16 s\).*estimated at 400 s"):
        check_pass_time(b.deadline("train", StageCosts(between_s=300.0, final_s=100.0)), 330.0, "training")
    # less than 5 % of the budget (16.5 s) is refused too
    with pytest.raises(ConfigError, match="leaves 13 s"):
        check_pass_time(b.deadline("train", StageCosts(between_s=300.0, final_s=15.0)), 330.0, "training")


def test_time_budget_reserve_follows_the_observed_costs_and_never_goes_negative():
    clock = FakeClock(0.0)
    b = TimeBudget(50.0, {"pass1": 0.5, "pass2": 0.5}, clock=clock)

    class Costs:
        faces = 0

        def observe(self, faces):
            self.faces = faces

        def __call__(self):
            return StageCosts(between_s=self.faces * 1e-3, final_s=0.0)

    c = Costs()
    d = b.deadline("pass1", c)
    assert d() == pytest.approx(25.0)
    d.observe(faces=20_000)  # a bigger mesh needs a longer unwrap: pass 1 ends earlier
    assert d() == pytest.approx(0.5 * 30.0)
    d.observe(faces=10**9)
    assert d() == pytest.approx(0.0)  # nothing left to train: the deadline is the pass start


def test_train_state_round_trips_and_device_errors():
    st = TrainState(stage="pass2", iteration=3, history=[{"pass": 1}], timings={"pass1_s": 1.0})
    assert TrainState(**st.state_dict()) == st
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match=r"device 'nonsense-device' \(--set device=; `meshlift demo --device`\) is not a device"):
        resolve_device("nonsense-device")
    with pytest.raises(ConfigError, match="'meta' .* is not supported; use auto, cpu, cuda"):
        resolve_device("meta")  # a real torch device type meshlift does not run on
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="asks for CUDA.*meshlift doctor"):
            resolve_device("cuda")
    assert is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert not is_oom(RuntimeError("shape mismatch"))


def test_deps_require_names_the_package_and_the_install_line(monkeypatch):
    import sys

    from meshlift import _deps

    assert _deps.require("math") is math
    assert _deps.is_available("math") and not _deps.is_available("no_such_module_xyz")
    monkeypatch.setitem(sys.modules, "xatlas", None)
    with pytest.raises(DependencyError, match="pip install xatlas"):
        _deps.require("xatlas", "UV unwrapping")
    rows = {r["module"]: r for r in _deps.report()}
    assert {"xatlas", "OpenEXR", "triton"} <= set(rows) and rows["scipy"]["available"]


def test_kernel_backends_applies_the_config_fields_for_the_run_only():
    from types import SimpleNamespace

    from meshlift.kernels import kernel_choice, use_kernels
    from meshlift.methods.engine import kernel_backends

    seen = []

    @kernel_backends
    def reconstruct(cfg, out):
        seen.append((kernel_choice().raster, kernel_choice().shading, kernel_choice().splat, out))
        return "done"

    assert reconstruct(SimpleNamespace(raster_backend="torch", shading_backend="auto"), "o") == "done"
    with use_kernels(shading="torch", splat="torch"):  # "auto" and absent fields keep what is set
        reconstruct(SimpleNamespace(raster_backend="auto", splat_backend="torch"), "p")
    assert seen == [("torch", "auto", "auto", "o"), ("auto", "torch", "torch", "p")]
    assert kernel_choice().raster == "auto"  # restored
    with pytest.raises(Exception, match="splat backend 'fast'"):
        reconstruct(SimpleNamespace(splat_backend="fast"), "q")
