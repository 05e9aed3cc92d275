"""A CPU stand-in for ``torch.cuda.make_graphed_callables`` with replay semantics, for the plumbing tests of
``methods/nvdiffrec/pixel_graphs.py``: static inputs (copied into only when the argument's storage differs, so
parameters are read in place), static outputs and static input gradients (returned as aliases and overwritten
by the next call), and no Python side effects at replay (a replay runs no Python: the owner's ``light``
attributes are restored after each call). The warm-up iterations run as the real function does them."""

from __future__ import annotations

import torch


def emulated_graphed_callables(callables, sample_args, num_warmup_iters=3, allow_unused_input=False, pool=None):
    return tuple(_one(fn, args, num_warmup_iters, allow_unused_input) for fn, args in zip(callables, sample_args))


def _one(fn, args, num_warmup_iters, allow_unused_input):
    for _ in range(num_warmup_iters):
        outs = fn(*args)
        og = [o for o in outs if o.requires_grad]
        if og:
            torch.autograd.grad(og, [a for a in args if a.requires_grad], [torch.zeros_like(o) for o in og],
                                allow_unused=allow_unused_input)
    static_in = tuple(args)
    static_out = tuple(o.detach().clone() for o in fn(*static_in))  # the capture runs the Python once
    state = {}
    light = getattr(getattr(fn, "__self__", None), "light", None)

    class Replay(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            for s, i in zip(static_in, inputs):
                if s.data_ptr() != i.data_ptr():
                    s.copy_(i)
            saved = None if light is None else (light.diffuse, light.specular)
            with torch.enable_grad():
                outs = fn(*static_in)
            if saved is not None:
                light.diffuse, light.specular = saved
            state["outs"] = outs
            for s, o in zip(static_out, outs):
                s.copy_(o.detach())
            return tuple(s.detach() for s in static_out)

        @staticmethod
        def backward(ctx, *grads):
            outs = state.pop("outs")
            pairs = [(o, torch.zeros_like(o) if g is None else g) for o, g in zip(outs, grads) if o.requires_grad]
            need = [s for s in static_in if s.requires_grad]
            gi = torch.autograd.grad([p[0] for p in pairs], need, [p[1] for p in pairs], allow_unused=True)
            if "buffers" not in state:
                state["buffers"] = [None if g is None else g.detach().clone() for g in gi]
            else:
                for b, g in zip(state["buffers"], gi):
                    if b is not None and g is not None:
                        b.copy_(g)
            it = iter(state["buffers"])
            return tuple((lambda b: None if b is None else b.detach())(next(it)) if s.requires_grad else None
                         for s in static_in)

    return lambda *a: Replay.apply(*a)
