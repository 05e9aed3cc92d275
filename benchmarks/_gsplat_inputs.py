"""Inputs and checks of ``gsplat_compare.py``'s gsplat side that need no gsplat (and no GPU) to test.

Why the opacity-reset probe exists: gsplat 1.5.3's ``DefaultStrategy.step_post_backward`` decides the periodic
opacity reset with ``if step % self.reset_every == 0 & step > 0:`` (gsplat/strategy/default.py, tag v1.5.3,
introduced by gsplat PR #735). ``&`` binds tighter than the comparisons, so Python reads a chained comparison
``(step % reset_every) == (0 & step) > 0``, i.e. ``... and 0 > 0``: always False, the reset never happens.
gsplat PR #776 ("Fix bit-wise 'and' preventing opacity reset", commit 6e8c837f on gsplat's main, in no
release up to v1.5.3) changed it to ``and``. :func:`probe_opacity_reset` finds out which behaviour the
installed strategy has by driving it; :func:`opacity_reset_due` is gsplat's fixed rule, which the comparison
loop applies itself (with gsplat's own ``gsplat.strategy.ops.reset_opa``) when the installed strategy does not.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch

#: ``--gsplat-opacity-reset`` choices: auto = only when the probe says the installed strategy does not reset
OPACITY_RESET_MODES = ("auto", "on", "off")


def strategy_kwargs(cfg: Any, steps: int) -> dict:
    """gsplat ``DefaultStrategy`` keyword arguments of meshlift's ``densify_*`` config fields.

    ``cfg`` is a ``GaussiansConfig`` (any object with the ``densify_*`` attributes); ``steps`` the run's length.
    gsplat computes ``step % reset_every``, so meshlift's "never" (``densify_reset_every`` = 0) becomes a period
    longer than the run. gsplat 1.5.3 has no Gaussian cap: ``densify_max_gaussians`` has no counterpart.
    """
    reset_every = int(cfg.densify_reset_every)
    return dict(prune_opa=float(cfg.densify_prune_opa), grow_grad2d=float(cfg.densify_grow_grad2d),
                grow_scale3d=float(cfg.densify_grow_scale3d), prune_scale3d=float(cfg.densify_prune_scale3d),
                refine_start_iter=int(cfg.densify_refine_start), refine_stop_iter=int(cfg.densify_refine_stop),
                refine_every=int(cfg.densify_refine_every),
                reset_every=reset_every if reset_every > 0 else int(steps) + 1,
                absgrad=False, verbose=False)


def opacity_reset_due(step: int, reset_every: int, refine_stop_iter: int) -> bool:
    """gsplat's opacity-reset rule after PR #776 (and meshlift's): at ``step`` (0-based, the value passed to
    ``step_post_backward``) when ``step`` is a positive multiple of ``reset_every`` and below
    ``refine_stop_iter`` (``step_post_backward`` returns early from ``refine_stop_iter`` on)."""
    return 0 < step < refine_stop_iter and reset_every > 0 and step % reset_every == 0


def reset_opacity_reference(opacity_logits: torch.Tensor, value: float) -> torch.Tensor:
    """The reset's effect on the stored logits, written out: clamp to at most ``logit(value)`` (value = the
    post-sigmoid cap, gsplat uses ``2 × prune_opa``). The simple twin of ``gsplat.strategy.ops.reset_opa``."""
    return opacity_logits.clamp_max(math.log(value) - math.log1p(-value))


def decide_opacity_reset(mode: str, strategy_resets: Optional[bool]) -> bool:
    """Whether the comparison loop resets opacities itself.

    Args:
        mode: ``"on"``, ``"off"`` or ``"auto"`` (only when ``strategy_resets`` is False; a failed probe,
            ``None``, leaves the strategy alone).
        strategy_resets: :func:`probe_opacity_reset`'s ``resets``.

    Raises:
        ValueError: unknown ``mode``.

    A reset on top of a strategy that resets too (``on``) changes nothing: the clamp and the zeroed Adam
    moments are idempotent.
    """
    if mode not in OPACITY_RESET_MODES:
        raise ValueError(f"--gsplat-opacity-reset {mode!r}: use one of {', '.join(OPACITY_RESET_MODES)}")
    if mode == "auto":
        return strategy_resets is False
    return mode == "on"


def probe_opacity_reset(strategy_cls: Callable[..., Any], *, reset_every: int = 4, prune_opa: float = 0.005,
                        n: int = 6) -> dict:
    """Drive ``strategy_cls`` (gsplat's ``DefaultStrategy`` or anything with its constructor keywords and its
    ``initialize_state`` / ``step_post_backward``) through one ``step_post_backward`` at ``step ==
    reset_every`` with ``n`` opaque Gaussians (opacity 0.9) on the CPU, refinement scheduled well after it.

    Returns:
        ``{"resets": bool, "opacity_max_before", "opacity_max_after", "reset_value", "reset_every"}``;
        ``resets`` is True when every opacity ended at most ``2 × prune_opa`` (1e-4 relative slack). A probe
        that raises gives ``{"resets": None, "error": "<type>: <message>"}`` (never raises).
    """
    value = 2.0 * prune_opa
    out: dict = {"resets": None, "reset_every": reset_every, "reset_value": value}
    try:
        strategy = strategy_cls(prune_opa=prune_opa, reset_every=reset_every, refine_start_iter=10 * reset_every,
                                refine_stop_iter=100 * reset_every, refine_every=reset_every, verbose=False)
        g = torch.Generator().manual_seed(0)
        params = {
            "means": torch.nn.Parameter(torch.randn(n, 3, generator=g)),
            "scales": torch.nn.Parameter(torch.full((n, 3), math.log(0.01))),
            "quats": torch.nn.Parameter(torch.nn.functional.normalize(torch.randn(n, 4, generator=g), dim=-1)),
            "opacities": torch.nn.Parameter(torch.full((n,), math.log(0.9 / 0.1))),
            "sh0": torch.nn.Parameter(torch.zeros(n, 1, 3)),
        }
        optimizers = {k: torch.optim.Adam([{"params": [p], "lr": 1e-3, "name": k}], eps=1e-15)
                      for k, p in params.items()}
        state = strategy.initialize_state(scene_scale=1.0)
        means2d = torch.zeros(1, n, 2, requires_grad=True)
        means2d.grad = torch.zeros(1, n, 2)
        info = {"width": 8, "height": 8, "n_cameras": 1, "radii": torch.zeros(1, n, 2, dtype=torch.int32),
                "gaussian_ids": None, "means2d": means2d}
        out["opacity_max_before"] = float(torch.sigmoid(params["opacities"].detach()).max())
        strategy.step_post_backward(params, optimizers, state, reset_every, info, packed=False)
        after = float(torch.sigmoid(params["opacities"].detach()).max())
        out["opacity_max_after"] = after
        out["resets"] = bool(after <= value * (1 + 1e-4))
    except Exception as exc:  # noqa: BLE001 - a probe failure is reported, never fatal
        out["resets"] = None
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out
