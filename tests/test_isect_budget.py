"""The training render's tile-list capacity (methods/gaussians/isect_budget.py, issue 29): the policy, and the
trainer's redo of a step whose lists overflowed (same parameters as reading the count back every step)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from _gaussian_problem import tiny_problem
from meshlift.methods.gaussians import trainer as T
from meshlift.methods.gaussians.isect_budget import IsectBudget
from meshlift.methods.gaussians.presets import get_preset
from meshlift.methods.gaussians.reconstruct import reconstruct

CPU = torch.device("cpu")


def _info(n: int) -> dict:
    return {"flatten_ids": torch.zeros(n, dtype=torch.int64)}


def test_policy_seeds_from_exact_renders_and_resets_when_the_set_changes():
    b = IsectBudget(CPU, headroom=1.25, window=3, granularity=100)
    assert b.capacity(50) is None  # first step: read back
    b.record(_info(1000), None)
    assert b.capacity(50) == 1300  # ceil(1.25 * 1000 / 100) * 100
    assert not b.overflowed()  # nothing capped yet
    info = {"isect_needed": torch.tensor([1200])}
    b.record(info, 1300)
    assert not b.overflowed() and b.capacity(50) == 1500  # the window's max is now 1200
    b.record({"isect_needed": torch.tensor([1600])}, 1500)
    assert b.overflowed() and b.redos == 1 and b.capped_steps == 2
    assert b.capacity(50) == 2000
    for n in (100, 100, 100):  # the window forgets the large counts
        b.record({"isect_needed": torch.tensor([n])}, 2000)
        assert not b.overflowed()
    assert b.capacity(50) == 200
    assert b.capacity(100) == 300  # densification doubled the set: the window's counts too (200; 1.25x: 250)
    assert b.capacity(40) == 300  # pruning shrank it: the counts are kept
    assert IsectBudget(CPU).capacity(10) is None  # the first step reads the count back
    with pytest.raises(ValueError):
        IsectBudget(CPU, headroom=1.0)


class _ForcedBudget(IsectBudget):
    """A budget on the CPU whose capacity is too small at the given steps (the render reports it)."""

    def __init__(self, short_at):
        super().__init__(CPU, granularity=1)
        self.short_at, self.step, self.calls = set(short_at), 0, 0

    def capacity(self, num_gaussians):
        self.step += 1
        return 10 if self.step in self.short_at else None


def test_trainer_redoes_a_step_whose_lists_overflowed(monkeypatch):
    """The step is rendered again exactly after an overflow and its first gradients are dropped: the run ends
    with the parameters of a run that never had a capacity (the CPU render is exact either way; the fake
    render below reports an overflow at steps 3 and 7)."""
    problem = tiny_problem(size=16, n_train=6, n_test=2)
    cfg = dataclasses.replace(get_preset("gaussians_tiny"), steps=10, num_random=60, densify_refine_start=4,
                              densify_refine_every=4, densify_refine_stop=9, preview_every=0, checkpoint_every=0,
                              device="cpu")
    base = reconstruct(cfg, None, problem=problem)
    calls = []
    real = T.render_params

    def render(*a, isect_capacity=None, **k):
        img, alpha, info = real(*a, **k)
        calls.append(isect_capacity)
        if isect_capacity is not None:
            info["isect_needed"] = torch.tensor([info["flatten_ids"].shape[0]])  # > 10: an overflow
        return img, alpha, info

    budget = _ForcedBudget(short_at=(3, 7))
    monkeypatch.setattr(T, "render_params", render)
    monkeypatch.setattr(T.GaussianTrainer, "_make_isect_budget", lambda self: budget)
    redone = reconstruct(cfg, None, problem=problem)
    assert base.metrics["isect_budget"] is None
    assert budget.redos == 2 and calls.count(10) == 2
    assert all(calls[i + 1] is None for i, c in enumerate(calls) if c == 10)  # each redone without a capacity
    for k, v in base.gaussians.tensors().items():
        torch.testing.assert_close(redone.gaussians.tensors()[k], v, rtol=0, atol=0)
