"""Name the source of a non-finite loss or gradient (``diagnose_nonfinite``), for any training loop.

Without it, a NaN is seen only as a non-finite loss at a read-back, and the divergence guard of
:class:`~meshlift.methods.loop.TrainLoop` rolls back: the run says *that* it diverged, not *where*. With it, every step (one host
sync per step, so only for diagnosis):

1. the named forward tensors (the loss terms, the rendered image, the vertices …) are checked first, then
   every parameter's gradient, all in one device → host read-back;
2. at the first step with a non-finite one, the step's forward and backward are run again under
   ``torch.autograd.detect_anomaly(check_nan=True)`` (PyTorch then names the first backward function that
   returns a NaN and prints the forward call that made it);
3. :class:`~meshlift.errors.TrainingError` is raised with the step, what was non-finite (forward tensor or
   parameter gradient, with the counts of NaN and inf) and the op that anomaly detection named (or that the
   repeat was finite: the NaN then came from a non-deterministic kernel or a race).

The check runs before the optimiser step, so the state at the error is the last finite one.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import torch

from meshlift.errors import TrainingError


def _counts(t: torch.Tensor) -> torch.Tensor:
    """``[2]`` int64: NaN and inf counts of ``t``."""
    return torch.stack([torch.isnan(t).sum(), torch.isinf(t).sum()])


class NonfiniteProbe:
    """Per-step finiteness check of one pass (see the module docstring).

    Args:
        name: the pass's name in messages (``"pass 1"``).
        named_params: ``(name, parameter)`` pairs whose gradients are checked.
        enabled: ``cfg.diagnose_nonfinite``; when False :meth:`check` returns at once (no sync).
    """

    def __init__(self, name: str, named_params: Iterable[tuple[str, torch.Tensor]], enabled: bool) -> None:
        self.name = name
        self.named_params = list(named_params)
        self.enabled = bool(enabled)

    def check(self, it: int, forward: dict[str, Optional[torch.Tensor]], redo: Callable[[], torch.Tensor]) -> None:
        """Check step ``it`` (0-based) after its backward, before the optimiser step.

        Args:
            it: the step.
            forward: named tensors of the step's forward (None entries are skipped), in the order they are
                computed (the first non-finite one is reported as the origin).
            redo: re-runs the step's forward and returns the scalar loss to differentiate (same views).

        Raises:
            TrainingError: something was non-finite; the message names it and the op.
        """
        if not self.enabled:
            return
        fwd = [(k, t) for k, t in forward.items() if t is not None and t.is_floating_point()]
        grads = [(n, p.grad) for n, p in self.named_params if p.grad is not None]
        items = [("forward " + k, t.detach()) for k, t in fwd] + [("gradient of " + n, g) for n, g in grads]
        if not items:
            return
        counts = torch.stack([_counts(t) for _, t in items]).cpu().tolist()  # one sync
        bad = [(what, nan, inf) for (what, _), (nan, inf) in zip(items, counts) if nan or inf]
        if not bad:
            return
        found = "; ".join(f"{what} ({nan} NaN, {inf} inf)" for what, nan, inf in bad[:8])
        op = self._anomaly(redo)
        raise TrainingError(
            f"{self.name}, step {it}: non-finite values: {found}. Anomaly detection on a repeat of the step: "
            f"{op}. The optimiser step was not taken. Report this with the command line; lowering the learning "
            "rates (lr_pos, lr_mat, lr_light) may avoid it")

    def _anomaly(self, redo: Callable[[], torch.Tensor]) -> str:
        for _, p in self.named_params:
            p.grad = None
        try:
            with torch.autograd.detect_anomaly(check_nan=True):
                loss = redo()
                if not bool(torch.isfinite(loss.detach())):
                    return f"the repeated loss is {float(loss.detach())} (non-finite in the forward)"
                loss.backward()
        except RuntimeError as e:
            return str(e).strip().splitlines()[0]
        return "the repeat was finite everywhere (a non-deterministic kernel or a race)"
