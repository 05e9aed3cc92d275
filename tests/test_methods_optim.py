"""meshlift.methods.optim: Adam and LambdaLR give torch.optim's updates bit for bit, read and write its state
dicts, and do not import torch._dynamo (the reason they exist)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from meshlift.methods.engine import ExponentialLR
from meshlift.methods.optim import Adam, LambdaLR

SRC = Path(__file__).resolve().parents[1] / "src"


def _params(device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.nn.Parameter(torch.randn(7, 3, generator=g).to(device))
    b = torch.nn.Parameter(torch.randn(5, generator=g).to(device))
    c = torch.nn.Parameter(torch.randn(2, 4, 4, generator=g).to(device))
    return [a, b, c]


def _loss(ps, it):
    a, b, c = ps
    return (a.sin() * (it + 1)).square().sum() + (b ** 3).mean() + (c.exp() * 0.1).sum() + (a.sum() * b.sum())


def _run(make_opt, make_sched, ps, steps, start=0, opt=None, sched=None):
    if opt is None:
        opt = make_opt([{"params": ps[:2], "lr": 0.03}, {"params": ps[2:], "lr": 0.01}])
        sched = make_sched(opt, ExponentialLR(5, 0.01))
    for it in range(start, steps):
        opt.zero_grad(set_to_none=True)
        if it % 7 == 3:  # a step where one tensor has no gradient (it keeps its state and is not updated)
            (ps[0].square().sum() + ps[2].sum()).backward()
        else:
            _loss(ps, it).backward()
        opt.step()
        sched.step()
    return opt, sched


def _torch_adam(groups, fused=False):
    return torch.optim.Adam(groups, fused=fused)


@pytest.mark.parametrize("steps", [1, 25])
def test_updates_equal_torch_optim_bit_for_bit(steps):
    ours, theirs = _params(), _params()
    o1, s1 = _run(lambda g: Adam(g), LambdaLR, ours, steps)
    o2, s2 = _run(_torch_adam, torch.optim.lr_scheduler.LambdaLR, theirs, steps)
    for p, q in zip(ours, theirs):
        assert torch.equal(p, q)
    assert s1.get_last_lr() == s2.get_last_lr()
    for (k, a), (_, b) in zip(sorted(o1.state_dict()["state"].items()), sorted(o2.state_dict()["state"].items())):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(a[key], b[key]), (k, key)


def test_state_dicts_move_between_torch_optim_and_ours():
    # 10 steps with torch's classes, then resume 10 more with ours from their state dicts (an old checkpoint),
    # against 20 steps with torch's alone; and the other way round
    ref = _params()
    _run(_torch_adam, torch.optim.lr_scheduler.LambdaLR, ref, 20)
    for first, second in ((("torch", _torch_adam, torch.optim.lr_scheduler.LambdaLR), ("ours", Adam, LambdaLR)),
                          (("ours", Adam, LambdaLR), ("torch", _torch_adam, torch.optim.lr_scheduler.LambdaLR))):
        ps = _params()
        o, s = _run(first[1], first[2], ps, 10)
        osd, ssd = o.state_dict(), s.state_dict()
        o2 = second[1]([{"params": ps[:2], "lr": 0.03}, {"params": ps[2:], "lr": 0.01}])
        s2 = second[2](o2, ExponentialLR(5, 0.01))
        o2.load_state_dict(osd)
        s2.load_state_dict(ssd)
        _run(None, None, ps, 20, start=10, opt=o2, sched=s2)
        for p, q in zip(ps, ref):
            assert torch.equal(p, q), f"{first[0]} -> {second[0]}"


def test_bad_groups_are_refused():
    ps = _params()
    with pytest.raises(ValueError, match="empty"):
        Adam([])
    with pytest.raises(ValueError, match="more than one group"):
        Adam([{"params": ps[:2]}, {"params": ps[1:]}])
    o = Adam(ps)
    with pytest.raises(ValueError, match="do not match"):
        o.load_state_dict(Adam(ps[:2]).state_dict())


def test_no_torch_dynamo_import():
    code = ("import sys, torch\n"
            "from meshlift.methods.optim import Adam, LambdaLR\n"
            "p = torch.nn.Parameter(torch.ones(3)); o = Adam([p], lr=0.1); s = LambdaLR(o, lambda i: 0.5)\n"
            "(p * 2).sum().backward(); o.step(); s.step(); o.zero_grad(); o.load_state_dict(o.state_dict())\n"
            "print('torch._dynamo' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_on_cuda_equals_torch_fused_adam():
    ours, theirs = _params("cuda"), _params("cuda")
    _run(lambda g: Adam(g, fused=True), LambdaLR, ours, 25)
    _run(lambda g: _torch_adam(g, fused=True), torch.optim.lr_scheduler.LambdaLR, theirs, 25)
    for p, q in zip(ours, theirs):
        assert torch.equal(p, q)
