"""Density control with several processes: statistics all-reduced, decisions on rank 0, state broadcast.

Each rank renders its own views of the step (:mod:`meshlift.methods.distributed`), so each sees only part of
the screen-space gradients that :class:`~meshlift.methods.gaussians.strategy.DefaultStrategy` accumulates.
:class:`DistributedStrategy` wraps a strategy with the same hooks:

1. every rank accumulates its views' statistics (the strategy's ``_update_state``); the increments of
   ``grad2d`` and ``count`` are summed over the ranks and ``radii`` takes the maximum, so every rank holds
   the statistics one process would have accumulated over the whole global batch (the per-camera gradient
   is scaled by the rank's ``n_cameras``, which undoes the rank's own batch mean);
2. rank 0 alone runs the strategy's decisions (clone / split / prune / opacity reset — split draws random
   samples, so it must happen once);
3. when rank 0 changed anything, it sends every rank the new parameters, their Adam states, the statistics
   and the refinement history (:meth:`meshlift.methods.distributed.DistContext.broadcast_tree`), so all ranks
   hold identical parameters again.
"""

from __future__ import annotations

import torch

from meshlift.methods.distributed import DistContext

__all__ = ["DistributedStrategy"]

_SUMMED = ("grad2d", "count")


class DistributedStrategy:
    """``inner`` (a :class:`DefaultStrategy`-like object with ``_update_state``) run as the module docstring
    says. ``history`` is the inner strategy's."""

    def __init__(self, inner, ctx: DistContext) -> None:
        self.inner, self.ctx = inner, ctx

    @property
    def history(self) -> list:
        return self.inner.history

    @history.setter
    def history(self, value: list) -> None:
        self.inner.history = value

    def initialize_state(self) -> dict:
        return self.inner.initialize_state()

    def step_pre_backward(self, info: dict) -> None:
        self.inner.step_pre_backward(info)

    @torch.no_grad()
    def step_post_backward(self, params: dict, optimizers: dict, state: dict, step: int, info: dict) -> dict:
        """Statistics over all ranks, rank 0's decisions, then rank 0's state everywhere. Returns the counts
        of this call (rank 0's; zeros on the other ranks)."""
        inner, ctx = self.inner, self.ctx
        out = {"cloned": 0, "split": 0, "pruned": 0, "reset": False}
        if step >= inner.refine_stop:
            return out
        n = params["means"].shape[0]
        before = {k: state[k].clone() if state.get(k) is not None and state[k].shape[0] == n else None
                  for k in _SUMMED}
        inner._update_state(params, state, info)
        deltas = [state[k] - before[k] if before[k] is not None else state[k].clone() for k in _SUMMED]
        ctx.all_reduce_sum_(deltas)
        for k, d in zip(_SUMMED, deltas):
            state[k] = d if before[k] is None else before[k] + d
        ctx.all_reduce_sum_([state["radii"]], op="max")
        changed = False
        if ctx.is_main:
            ids = {k: id(p) for k, p in params.items()}
            refinements = len(inner.history)
            # the statistics are in already: the strategy must not add this rank's gradients again
            out = inner.step_post_backward(params, optimizers, state, step,
                                           dict(info, means2d=info["means2d"].detach()))
            changed = bool(out["reset"]) or len(inner.history) != refinements or any(
                id(p) != ids[k] for k, p in params.items())
        if ctx.agree(changed):
            self._sync(params, optimizers, state)
        return out

    def _sync(self, params: dict, optimizers: dict, state: dict) -> None:
        ctx = self.ctx
        sent = None
        if ctx.is_main:
            sent = {"params": {k: p.detach() for k, p in params.items()},
                    "optimizers": {k: o.state_dict() for k, o in optimizers.items()},
                    "state": {k: v for k, v in state.items() if torch.is_tensor(v)},
                    "history": [list(h) for h in self.inner.history]}
        got = ctx.broadcast_tree(sent)
        if ctx.is_main:
            return
        for k in list(params):
            old = params[k]
            new = torch.nn.Parameter(got["params"][k].to(old.device, old.dtype), requires_grad=old.requires_grad)
            params[k] = new
            opt = optimizers.get(k)
            if opt is not None:
                opt.state.pop(old, None)
                opt.param_groups[0]["params"] = [new]
                opt.load_state_dict(got["optimizers"][k])
        device = params["means"].device
        for k, v in got["state"].items():
            state[k] = v.to(device)
        self.inner.history = [tuple(h) for h in got["history"]]
