"""Adam and a lambda learning-rate schedule for the surface method, on torch's own update, without
``torch.optim.Optimizer``.

Why. Constructing any ``torch.optim`` optimizer imports ``torch._dynamo`` (its methods are wrapped in
``torch._disable_dynamo``, which imports it on first call): 1.1 s on the H200 host with a bytecode cache, 4.4 s
on a 2-core machine (measured 2026-12-02) — a tenth of ``meshlift demo --device cuda``, for a run that never
compiles a graph. These classes keep the parameter groups and state and call ``torch.optim.adam.adam``, the
functional form ``torch.optim.Adam.step`` itself calls, so every update is torch's bit for bit (single-tensor on
the CPU, ``fused`` on CUDA when asked; ``tests/test_methods_optim.py`` compares both against ``torch.optim``).

State dicts have ``torch.optim``'s layout (``{"state": {index: {"step", "exp_avg", "exp_avg_sq"}},
"param_groups": [...]}`` and ``LambdaLR``'s ``base_lrs`` / ``last_epoch`` / ``_last_lr``), so checkpoints
written before this module load, and the other way round. What is left out: amsgrad, maximize,
differentiable/capturable updates, sparse gradients, hooks (nothing in meshlift uses them); the Gaussian
family keeps ``torch.optim.Adam`` (its densification edits the optimizer state in torch's structures).
"""

from __future__ import annotations

import functools
import inspect
import types
from collections import defaultdict
from typing import Callable, Iterable, List

import torch

__all__ = ["Adam", "LambdaLR"]


def _scalar_dtype(fused: bool = False) -> torch.dtype:
    # torch.optim.optimizer._get_scalar_dtype: the dtype of the step counters (float32 for the fused kernel)
    if fused:
        return torch.float32
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


@functools.lru_cache(maxsize=1)
def _adam_kwargs() -> frozenset:
    """The parameters of this torch's functional ``adam`` (they grew over releases)."""
    from torch.optim.adam import adam

    return frozenset(inspect.signature(adam).parameters)


class Adam:
    """Adam (Kingma & Ba 2015, Algorithm 1; torch's implementation), the subset meshlift's surface method uses.

    Args:
        params: tensors, or a list of parameter-group dicts (``{"params": [...], "lr": ...}``).
        lr, betas, eps, weight_decay: as ``torch.optim.Adam`` (L2 weight decay added to the gradient).
        fused: torch's fused CUDA kernel (one launch per group and step; the step counters on the device).

    Raises:
        ValueError: no parameters, or a parameter in two groups.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, *, fused: bool = False):
        self.defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                         "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
                         "differentiable": False, "fused": bool(fused)}
        if "decoupled_weight_decay" in _adam_kwargs():
            self.defaults["decoupled_weight_decay"] = False
        groups = list(params)
        if not groups:
            raise ValueError("Adam: the parameter list is empty")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.param_groups: List[dict] = []
        self.state: dict = defaultdict(dict)
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group: dict) -> None:
        g = dict(group)
        params = g["params"]
        g["params"] = [params] if torch.is_tensor(params) else list(params)
        for k, v in self.defaults.items():
            g.setdefault(k, v)
        seen = {id(p) for other in self.param_groups for p in other["params"]}
        if any(id(p) in seen for p in g["params"]):
            raise ValueError("Adam: a parameter appears in more than one group")
        self.param_groups.append(g)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().requires_grad_(False).zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        from torch.optim.adam import adam

        names = _adam_kwargs()
        for g in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
            for p in g["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    on_device = g["fused"] or g["capturable"]
                    st["step"] = (torch.zeros((), dtype=_scalar_dtype(g["fused"]), device=p.device) if on_device
                                  else torch.tensor(0.0, dtype=_scalar_dtype()))
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                params.append(p)
                grads.append(p.grad)
                exp_avgs.append(st["exp_avg"])
                exp_avg_sqs.append(st["exp_avg_sq"])
                steps.append(st["step"])
            if not params:
                continue
            kw = {"foreach": g["foreach"], "capturable": g["capturable"], "differentiable": g["differentiable"],
                  "fused": g["fused"], "grad_scale": None, "found_inf": None, "amsgrad": False,
                  "beta1": g["betas"][0], "beta2": g["betas"][1], "lr": g["lr"], "weight_decay": g["weight_decay"],
                  "eps": g["eps"], "maximize": False}
            if "has_complex" in names:
                kw["has_complex"] = any(torch.is_complex(p) for p in params)
            if "decoupled_weight_decay" in names:
                kw["decoupled_weight_decay"] = g.get("decoupled_weight_decay", False)
            adam(params, grads, exp_avgs, exp_avg_sqs, [], steps, **kw)

    def state_dict(self) -> dict:
        """``torch.optim.Adam.state_dict``'s layout (live tensors, not copies: clone before keeping)."""
        index, groups, k = {}, [], 0
        for g in self.param_groups:
            ids = []
            for p in g["params"]:
                index[id(p)] = k
                ids.append(k)
                k += 1
            groups.append({**{key: v for key, v in g.items() if key != "params"}, "params": ids})
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, sd: dict) -> None:
        """Load a state dict of this class or of ``torch.optim.Adam`` over the same parameter groups.

        Raises:
            ValueError: the group count or sizes differ from this optimizer's.
        """
        saved = sd["param_groups"]
        if len(saved) != len(self.param_groups) or any(
                len(a["params"]) != len(b["params"]) for a, b in zip(saved, self.param_groups)):
            raise ValueError("Adam.load_state_dict: the saved parameter groups do not match this optimizer's")
        by_index = {}
        for sg, g in zip(saved, self.param_groups):
            for i, p in zip(sg["params"], g["params"]):
                by_index[i] = (p, g)
            for key, v in sg.items():
                if key != "params":
                    g[key] = tuple(v) if key == "betas" else v
        self.state = defaultdict(dict)
        for i, s in sd["state"].items():
            p, g = by_index[int(i)]
            out = {}
            for key, v in s.items():
                if key == "step":  # torch's rule: on the parameter's device only for fused/capturable
                    out[key] = (v.to(dtype=_scalar_dtype(g["fused"]), device=p.device) if g["fused"] or g["capturable"]
                                else v)
                elif torch.is_tensor(v):
                    out[key] = v.to(dtype=p.dtype, device=p.device) if p.is_floating_point() else v.to(p.device)
                else:
                    out[key] = v
            self.state[p] = out


class LambdaLR:
    """``lr = base_lr · factor(step)`` for every group of ``optimizer`` (``torch.optim.lr_scheduler.LambdaLR``'s
    rule and state-dict keys): the factor of step 0 is applied at construction, each :meth:`step` advances one.

    Args:
        optimizer: an :class:`Adam` (anything with ``param_groups``).
        factor: ``callable(step) -> float`` (e.g. ``engine.ExponentialLR``); its state is not saved, the
            configuration rebuilds it.
    """

    def __init__(self, optimizer, factor: Callable[[int], float]):
        self.optimizer, self.factor = optimizer, factor
        for g in optimizer.param_groups:
            g.setdefault("initial_lr", g["lr"])
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = -1
        self._step_count = 0
        self.step()

    def step(self) -> None:
        self._step_count += 1
        self.last_epoch += 1
        for g, base in zip(self.optimizer.param_groups, self.base_lrs):
            g["lr"] = base * self.factor(self.last_epoch)
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list:
        return list(self._last_lr)

    def state_dict(self) -> dict:
        fn = self.factor
        saved = None if isinstance(fn, types.FunctionType) else dict(getattr(fn, "__dict__", {}))
        return {"base_lrs": list(self.base_lrs), "last_epoch": self.last_epoch, "_step_count": self._step_count,
                "_last_lr": list(self._last_lr), "lr_lambdas": [saved] * len(self.base_lrs)}

    def load_state_dict(self, sd: dict) -> None:
        """Load a state dict of this class or of ``torch.optim.lr_scheduler.LambdaLR`` (the factor is kept)."""
        self.base_lrs = list(sd["base_lrs"])
        self.last_epoch = int(sd["last_epoch"])
        self._step_count = int(sd.get("_step_count", self.last_epoch + 1))
        self._last_lr = list(sd.get("_last_lr", [g["lr"] for g in self.optimizer.param_groups]))
