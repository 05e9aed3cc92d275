"""The one-launch Adam of meshlift.kernels.adam_triton against its reference twin, torch.optim.Adam
(TRITON_INTERPRET=1 on the CPU): parameters, both moments and the step counters after several steps, with
unequal sizes (across block boundaries), learning rates that change per step, a parameter without a
gradient, state edited between steps (as density control does), and the cases it declines."""

from __future__ import annotations

import os

import pytest
import torch

from meshlift.kernels import adam_triton

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                                reason="needs TRITON_INTERPRET=1 (the Triton interpreter on the CPU)")

SHAPES = [(700, 3), (700, 4), (700, 3), (700,), (700, 1, 3), (700, 15, 3)]  # the Gaussian tensors
LRS = [1.6e-4, 1e-3, 5e-3, 5e-2, 2.5e-3, 1.25e-4]


def _pair(seed=0, shapes=SHAPES):
    g = torch.Generator().manual_seed(seed)
    init = [torch.randn(s, generator=g) for s in shapes]
    mine = [torch.nn.Parameter(t.clone()) for t in init]
    ref = [torch.nn.Parameter(t.clone()) for t in init]
    o_mine = [torch.optim.Adam([p], lr=1.0, eps=1e-15) for p in mine]
    o_ref = [torch.optim.Adam([p], lr=1.0, eps=1e-15) for p in ref]
    return g, mine, ref, o_mine, o_ref


def _grads(g, mine, ref, skip=()):
    for i, (a, b) in enumerate(zip(mine, ref)):
        if i in skip:
            a.grad = b.grad = None
            continue
        gr = torch.randn(a.shape, generator=g) * 10 ** float(torch.randint(-6, 1, (), generator=g))
        a.grad, b.grad = gr.clone(), gr.clone()


def _close(o_mine, o_ref, mine, ref):
    for a, b, oa, ob in zip(mine, ref, o_mine, o_ref):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=2e-6, atol=1e-7)
        sa, sb = oa.state.get(a, {}), ob.state.get(b, {})
        assert set(sa) == set(sb)
        for k in sb:  # moments: float32 rounding of m·β + g·(1 − β) where the two nearly cancel, so the bound
            # is relative to the tensor's largest entry
            x, y = sa[k].float(), sb[k].float()
            torch.testing.assert_close(x, y, rtol=2e-6, atol=2e-6 * float(y.abs().max()) + 1e-30)


def test_one_launch_matches_torch_adam_over_steps():
    g, mine, ref, o_mine, o_ref = _pair()
    for step in range(6):
        skip = (3,) if step == 2 else ()  # a parameter without a gradient is skipped (no step, no moments)
        _grads(g, mine, ref, skip)
        lrs = [lr * (0.9 ** step) for lr in LRS]
        assert adam_triton.multi_adam_step(o_mine, lrs)
        for o, lr in zip(o_ref, lrs):
            o.param_groups[0]["lr"] = lr
            o.step()
        _close(o_mine, o_ref, mine, ref)
    assert [o.param_groups[0]["lr"] for o in o_mine] == [o.param_groups[0]["lr"] for o in o_ref]
    assert float(o_mine[3].state[mine[3]]["step"]) == 5.0 and float(o_mine[0].state[mine[0]]["step"]) == 6.0


def test_state_edited_between_steps_and_fewer_tensors():
    shapes = [(1500, 3), (33,), (1025, 4)]  # 3 slots, one smaller than a block, one just over a block
    g, mine, ref, o_mine, o_ref = _pair(1, shapes)
    for step in range(3):
        _grads(g, mine, ref)
        assert adam_triton.multi_adam_step(o_mine, LRS[:3])
        for o, lr in zip(o_ref, LRS[:3]):
            o.param_groups[0]["lr"] = lr
            o.step()
        if step == 1:  # a prune-like edit: new leaves, moments and steps carried over (edit_params)
            keep = torch.arange(0, 1500, 2)
            for opts, params in ((o_mine, mine), (o_ref, ref)):
                old = params[0]
                new = torch.nn.Parameter(old.detach()[keep].clone())
                st = opts[0].state.pop(old)
                opts[0].param_groups[0]["params"] = [new]
                opts[0].state[new] = {k: (v[keep].clone() if v.ndim else v) for k, v in st.items()}
                params[0] = new
    _close(o_mine, o_ref, mine, ref)


def test_cases_it_declines_leave_everything_unchanged():
    p = torch.nn.Parameter(torch.ones(10))
    p.grad = torch.ones(10)
    wd = torch.optim.Adam([p], lr=0.1, weight_decay=0.1)
    assert not adam_triton.multi_adam_step([wd], [0.1])
    assert len(wd.state) == 0 and torch.equal(p.detach(), torch.ones(10))
    q = torch.nn.Parameter(torch.ones(4, dtype=torch.float64))
    q.grad = torch.ones(4, dtype=torch.float64)
    assert not adam_triton.multi_adam_step([torch.optim.Adam([q])], [0.1])
    assert not adam_triton.multi_adam_step([torch.optim.Adam([p])] * 7, [0.1] * 7)


def test_the_trainer_with_one_launch_adam_trains_as_with_torchs(tmp_path):
    """16 steps of the Gaussian trainer (SH degrees 0-2) with the six Adam steps as one launch and with torch's:
    the same parameters up to float32 rounding (densification off: its thresholds turn rounding into different
    clone decisions); with densification on, every moment stays aligned with its edited parameter."""
    import dataclasses
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from _gaussian_problem import tiny_problem
    from meshlift.methods.gaussians.presets import get_preset
    from meshlift.methods.gaussians.trainer import GaussianTrainer

    problem = tiny_problem(size=16, n_train=4, n_test=1)
    cfg = dataclasses.replace(get_preset("gaussians_tiny"), steps=16, num_random=60, densify_refine_start=4,
                              densify_refine_every=6, densify_refine_stop=14, sh_degree_interval=6,
                              checkpoint_every=0, checkpoint_every_s=0.0, preview_every=0, splat_backend="torch",
                              densify=False)
    out = []
    for multi in (True, False):
        tr = GaussianTrainer(cfg, problem, torch.device("cpu"))
        tr.multi_adam = multi
        tr.train()
        out.append(tr)
    a, b = out
    assert a.num_gaussians == b.num_gaussians
    for k in a.params:
        torch.testing.assert_close(a.params[k].detach(), b.params[k].detach(), rtol=1e-4, atol=1e-5)
        sa, sb = a.optimizers[k].state[a.params[k]], b.optimizers[k].state[b.params[k]]
        assert float(sa["step"]) == float(sb["step"]) == 16.0
    tr = GaussianTrainer(dataclasses.replace(cfg, densify=True), problem, torch.device("cpu"))
    tr.multi_adam = True
    tr.train()
    assert tr.strategy.history and tr.num_gaussians != 60
    for k, p in tr.params.items():
        st = tr.optimizers[k].state[p]
        assert tr.optimizers[k].param_groups[0]["params"][0] is p
        assert st["exp_avg"].shape == p.shape and st["exp_avg_sq"].shape == p.shape and float(st["step"]) == 16.0
