"""methods.engine: named schedules (values, state_dict), time budget, device errors; _deps probes."""

from __future__ import annotations

import math

import pytest
import torch

from meshlift.errors import ConfigError, DependencyError
from meshlift.methods.engine import ExponentialLR, LinearSchedule, TimeBudget, TrainState, is_oom, resolve_device


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


def test_time_budget_deadlines():
    b = TimeBudget(10.0, {"pass1": 0.55, "pass2": 0.8})
    b.start(100.0)
    assert b.deadline("pass1") == pytest.approx(105.5) and b.deadline("pass2") == pytest.approx(108.0)
    assert TimeBudget(0.0, {"pass1": 0.5}).deadline("pass1") is None
    assert b.state_dict() == {"total_s": 10.0, "fractions": {"pass1": 0.55, "pass2": 0.8}}


def test_train_state_round_trips_and_device_errors():
    st = TrainState(stage="pass2", iteration=3, history=[{"pass": 1}], timings={"pass1_s": 1.0})
    assert TrainState(**st.state_dict()) == st
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match="device"):
        resolve_device("nonsense-device")
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
