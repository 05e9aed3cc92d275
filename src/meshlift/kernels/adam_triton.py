"""Adam over up to six parameter tensors in one Triton launch (the Gaussian trainer's per-tensor optimisers).

Why. The 3DGS loop keeps one ``torch.optim.Adam`` per Gaussian tensor (means, quats, scales, opacities, sh0,
shN: each has its own learning rate, and density control edits their states in torch's structures,
:func:`meshlift.methods.gaussians.strategy.edit_params`). Stepping them costs, per training step, six
``Optimizer.step`` calls (Python wrappers, ~50-100 µs of host time each) and twelve CUDA launches (torch's
fused kernel and its step-counter increment, per optimiser). Here the same update is **one** Triton launch
over all six tensors plus one ``torch._foreach_add_`` of the six step counters; the optimisers stay the
state containers (their ``state`` / ``param_groups`` / ``state_dict`` are torch's, so checkpoints, resume and
density control are unchanged).

The update (Kingma & Ba 2015, Algorithm 1, as torch's fused CUDA Adam computes it; no weight decay, amsgrad
or maximize), per element, with ``s`` the tensor's step counter after the increment::

    m ← m + (1 − β1)(g − m);   v ← β2 v + (1 − β2) g²
    p ← p − lr / (1 − β1^s) · m / (√v / √(1 − β2^s) + ε)

in float32; ``1 − β^s`` as ``−expm1(s · ln β)`` (``ln β`` from the host in double; the series for small
arguments: ``1 − 0.999`` in float32 would lose four digits), a few ulp from torch. The counters are read on the
device (no host read-back). Reference twin: ``torch.optim.Adam`` itself (``tests/test_kernels_adam_triton.py``
compares parameters, moments and steps over several steps, unequal sizes and learning rates, a missing
gradient, under ``TRITON_INTERPRET=1``). ``triton`` is imported on first use.
"""

from __future__ import annotations

import functools
import math
from typing import Optional, Sequence

import torch

from meshlift.kernels._launch import on_device
from meshlift.kernels.choice import triton_runs_on

__all__ = ["is_available", "multi_adam_step", "SLOTS"]

#: Tensors one launch updates.
SLOTS = 6
_BLOCK = 1024
_WARPS = 4


def is_available(device: torch.device) -> bool:
    """Triton runs on ``device`` (CUDA, or the CPU under ``TRITON_INTERPRET=1``)."""
    return triton_runs_on(device)


@functools.lru_cache(maxsize=1)
def _k():
    from meshlift.kernels import _adam_triton_kernels

    return _adam_triton_kernels


def _usable(opt) -> Optional[tuple]:
    """``(param, grad, group)`` of a one-parameter plain Adam whose update this kernel makes, None for a
    parameter without a gradient, False when the kernel does not apply (the caller keeps torch's step)."""
    if len(opt.param_groups) != 1 or len(opt.param_groups[0]["params"]) != 1:
        return False
    g = opt.param_groups[0]
    p = g["params"][0]
    if p.grad is None:
        return None
    if (g.get("weight_decay", 0) or g.get("amsgrad") or g.get("maximize") or p.dtype != torch.float32
            or p.grad.dtype != torch.float32 or p.grad.is_sparse or not p.is_contiguous()
            or not p.grad.is_contiguous() or g.get("differentiable")):
        return False
    return p, p.grad, g


def multi_adam_step(optimizers: Sequence, lrs: Sequence[float]) -> bool:
    """Step ``optimizers`` (at most :data:`SLOTS` ``torch.optim.Adam``, one parameter each, on one device) at
    learning rates ``lrs`` in one launch, as their own ``step()`` would (parameters without a gradient are
    skipped, as torch does). Sets each group's ``lr``; does not zero the gradients.

    Returns:
        True when done; False when nothing was changed because the kernel does not apply (more than
        :data:`SLOTS` optimisers, several groups or parameters, weight decay / amsgrad / maximize, a
        non-float32 or non-contiguous tensor, unequal betas / eps, several devices): then call ``step()``.
    """
    if len(optimizers) > SLOTS or len(optimizers) != len(lrs):
        return False
    items = []
    for opt, lr in zip(optimizers, lrs):
        u = _usable(opt)
        if u is False:
            return False
        if u is not None:
            items.append((opt, float(lr)) + u)
    if not items:
        for opt, lr in zip(optimizers, lrs):
            opt.param_groups[0]["lr"] = float(lr)
        return True
    dev = items[0][2].device
    betas = {tuple(it[4]["betas"]) for it in items}
    eps = {float(it[4]["eps"]) for it in items}
    if len(betas) != 1 or len(eps) != 1 or any(it[2].device != dev for it in items):
        return False
    (beta1, beta2), = betas
    slots, steps = [], []
    for opt, lr, p, g, group in items:
        st = opt.state[p]
        if len(st) == 0:  # torch's lazy initialisation of a fused Adam's state
            st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        step = st["step"]
        if step.device != p.device or step.dtype != torch.float32:
            st["step"] = step = step.to(device=p.device, dtype=torch.float32)
        group["lr"] = lr
        slots.append((p, g, st["exp_avg"], st["exp_avg_sq"], step, p.numel(), lr))
        steps.append(step)
    for opt, lr in zip(optimizers, lrs):  # the ones without a gradient keep their state; their lr follows
        opt.param_groups[0]["lr"] = float(lr)
    starts, total = [], 0
    for s in slots:
        starts.append(total)
        total += (s[5] + _BLOCK - 1) // _BLOCK
    while len(slots) < SLOTS:  # unused slots: no programs (their start is the end)
        slots.append(slots[0][:5] + (0, 0.0))
        starts.append(total)
    if total:
        flat = [a for s in slots for a in s]
        with on_device(dev):
            _k().adam6[(total,)](*flat, *starts[1:], float(beta2), 1.0 - beta1, 1.0 - beta2, math.log(beta1),
                                 math.log(beta2),
                                 float(next(iter(eps))),
                                 BLOCK=_BLOCK, num_warps=_WARPS)
    torch._foreach_add_(steps, 1.0)
    return True
