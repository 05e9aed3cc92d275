"""MILo's density control: 3DGS densification, then importance-based sampling and cumulative-importance pruning.

MILo (Guédon et al. 2025) trains its Gaussians with Mini-Splatting2's schedule (Fang & Wang 2024; project
notes §1): the standard clone/split/prune until the end of densification, with one **depth
re-initialisation** at ``reinit_step`` (MILo: 2000; :mod:`meshlift.methods.milo.depth_reinit`: the Gaussians
are replaced by new ones at points of their rendered surface, kNN-scaled, fresh Adam moments), then

- at ``sampling_step`` (MILo: 3000), **importance sampling**: every Gaussian's importance is accumulated
  over all training views from the compositing statistics of
  :func:`meshlift.render.splat.gaussian_statistics` (``indoor``: Σ over views of Σ αT; ``outdoor``: Σ over
  views of Σ αT / pixels touched, for views where the Gaussian is somewhere the strongest; Gaussians that
  are nowhere the strongest get 0). ``k = floor(sampling_factor × N × nonzero/N)`` Gaussians are kept,
  drawn **without replacement with probability ∝ importance** (:func:`sample_by_importance`);
- at ``prune_step`` (MILo: 8000), **cumulative-importance pruning**: keep the smallest set of most
  important Gaussians holding ``prune_cdf`` (0.99) of the total importance (:func:`cdf_keep_mask`).

:class:`MiloStrategy` is :class:`~meshlift.methods.gaussians.strategy.DefaultStrategy` with these two
events added to ``step_post_backward`` (the trainer's hooks are unchanged). It needs the training views
to score importance, so the method gives it an ``importance_fn(params) -> [N]`` (built by
:func:`importance_function`). Parameters and Adam moments are remapped with
:func:`~meshlift.methods.gaussians.strategy.edit_params`; the kept Gaussians keep their moments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from meshlift.errors import ConfigError
from meshlift.methods.gaussians.strategy import DefaultStrategy, edit_params

__all__ = ["MiloStrategy", "cdf_keep_mask", "importance_function", "importance_scores", "sample_by_importance"]


@torch.no_grad()
def importance_scores(params: dict, views, metric: str, *, near: float, device: torch.device, settings=None,
                      backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-Gaussian importance over every view of ``views`` (module docstring).

    Args:
        params: the trainer's stored tensors (``means``, ``quats``, ``log_scales``, ``opacity_logits``, ...).
        views: a :class:`~meshlift.methods.gaussians.views.SplatViews` (rendered one at a time).
        metric: ``"indoor"`` or ``"outdoor"``.

    Returns:
        ``(importance [N] float32, views_seen [N] int64)``: ``views_seen`` counts the views in which the
        Gaussian has a non-zero weight somewhere (MILo drops pivot candidates seen by ≤ 1 view).

    Raises:
        ConfigError: unknown metric.
    """
    from meshlift.render.splat import gaussian_statistics

    if metric not in ("indoor", "outdoor"):
        raise ConfigError(f"imp_metric = {metric!r}; choose indoor or outdoor")
    means = params["means"].detach()
    quats = params["quats"].detach()
    scales = torch.exp(params["log_scales"].detach())
    opac = torch.sigmoid(params["opacity_logits"].detach())
    n = means.shape[0]
    imp = torch.zeros(n, device=means.device)
    strongest = torch.zeros(n, dtype=torch.int64, device=means.device)
    seen = torch.zeros(n, dtype=torch.int64, device=means.device)
    for i in range(len(views)):
        b = views.batch(torch.tensor([i]), device)
        st = gaussian_statistics(means, quats, scales, opac, b.world_to_camera, b.K, views.width, views.height,
                                 near=near, settings=settings, backend=backend)
        w = st["accum_weights"][0].float()
        ap = st["area_proj"][0]
        am = st["area_max"][0]
        if metric == "indoor":
            imp += w
        else:
            imp += torch.where(am > 0, w / ap.clamp(min=1).float(), torch.zeros_like(w))
        strongest += am
        seen += (ap > 0).long()
    imp = torch.where(strongest > 0, imp, torch.zeros_like(imp))
    return imp, seen


def importance_function(views, metric: str, *, near: float, device: torch.device, settings=None,
                        backend: str = "auto") -> Callable[[dict], torch.Tensor]:
    """``params -> importance [N]`` over ``views`` (what :class:`MiloStrategy` calls)."""
    return lambda params: importance_scores(params, views, metric, near=near, device=device, settings=settings,
                                            backend=backend)[0]


def sample_by_importance(importance: torch.Tensor, k: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """``k`` distinct indices drawn without replacement with probability ∝ ``importance`` (sorted ascending).

    Only indices with non-zero importance can be drawn; ``k`` is clamped to their number.

    Raises:
        ConfigError: negative or non-finite importance.
    """
    if importance.ndim != 1:
        raise ConfigError(f"sample_by_importance: importance must be [N], got {tuple(importance.shape)}")
    if not bool(torch.isfinite(importance).all()) or bool((importance < 0).any()):
        raise ConfigError("sample_by_importance: importance must be finite and >= 0")
    nz = int((importance > 0).sum())
    k = min(int(k), nz)
    if k <= 0:
        return torch.zeros(0, dtype=torch.long, device=importance.device)
    p = importance.double().cpu()
    idx = torch.multinomial(p, k, replacement=False, generator=generator)
    return torch.sort(idx).values.to(importance.device)


def cdf_keep_mask(importance: torch.Tensor, cdf: float) -> torch.Tensor:
    """Bool ``[N]``: the smallest set of most important entries whose importance sums to ≥ ``cdf`` × total
    (ties in the order of a stable descending sort). All False importance keeps everything."""
    total = float(importance.sum())
    if total <= 0:
        return torch.ones_like(importance, dtype=torch.bool)
    order = torch.sort(importance, descending=True, stable=True).indices
    c = torch.cumsum(importance[order].double(), 0) / total
    n_keep = int(torch.searchsorted(c, torch.tensor([cdf], dtype=c.dtype, device=c.device)).item()) + 1
    n_keep = min(n_keep, importance.numel())
    keep = torch.zeros_like(importance, dtype=torch.bool)
    keep[order[:n_keep]] = True
    return keep


@dataclass
class MiloStrategy(DefaultStrategy):
    """:class:`DefaultStrategy` + MILo's importance sampling and cdf pruning (module docstring).

    ``history`` also gets ``(step, 0, 0, removed, total)`` rows for the events; ``events`` records
    ``(step, "reinit" | "sample" | "prune", before, after)``.
    """

    sampling_step: int = 3000
    """Step of the importance sampling (0 = never)."""
    sampling_factor: float = 0.6
    """Fraction of the non-zero-importance Gaussians kept by the sampling."""
    prune_step: int = 8000
    """Step of the cumulative-importance pruning (0 = never)."""
    prune_cdf: float = 0.99
    """Cumulative importance kept by the pruning."""
    seed: int = 0
    """Seed of the sampling."""
    reinit_step: int = 0
    """Step of the depth re-initialisation (0 = never)."""
    reinit_opacity: float = 0.1
    """Opacity of the re-initialised Gaussians."""
    reinit_scale: float = 1.0
    """Multiplier on the kNN scale of the re-initialised Gaussians."""
    reinit_fn: Optional[Callable[[dict], tuple]] = field(default=None, repr=False)
    """``params -> (points [P, 3], colours [P, 3])`` (set by the method when ``reinit_step`` > 0)."""
    importance_fn: Optional[Callable[[dict], torch.Tensor]] = field(default=None, repr=False)
    """``params -> importance [N]`` (set by the method; required when an event is scheduled)."""
    events: list = field(default_factory=list, repr=False)
    """``(step, kind, before, after)`` of each sampling / pruning event."""

    def check(self) -> None:
        super().check()
        if not 0 < self.sampling_factor <= 1:
            raise ConfigError(f"sampling_factor must be in (0, 1], got {self.sampling_factor}")
        if not 0 < self.prune_cdf <= 1:
            raise ConfigError(f"prune_cdf must be in (0, 1], got {self.prune_cdf}")

    @torch.no_grad()
    def step_post_backward(self, params, optimizers, state, step, info) -> dict:
        out = super().step_post_backward(params, optimizers, state, step, info)
        if self.reinit_step > 0 and step == self.reinit_step:
            self._reinit(params, optimizers, state, step)
        if self.sampling_step > 0 and step == self.sampling_step:
            out["pruned"] += self._apply(params, optimizers, state, step, "sample")
        if self.prune_step > 0 and step == self.prune_step:
            out["pruned"] += self._apply(params, optimizers, state, step, "prune")
        return out

    def _reinit(self, params, optimizers, state, step: int) -> None:
        """Replace every Gaussian by one at each point of ``reinit_fn(params)`` (kept as is below 4 points)."""
        from meshlift.methods.gaussians.init import init_gaussians

        if self.reinit_fn is None:
            raise ConfigError("MiloStrategy: reinit_fn is not set (the method must give the training views)")
        n = int(params["means"].shape[0])
        pts, rgb = self.reinit_fn(params)
        if pts.shape[0] < 4:
            self.events.append((step, "reinit skipped", n, n))
            return
        sh_degree = int(round((params["shN"].shape[1] + 1) ** 0.5)) - 1 if "shN" in params else 0
        new = init_gaussians(pts, rgb, torch.zeros(2, 3), sh_degree=sh_degree, init_opacity=self.reinit_opacity,
                             init_scale=self.reinit_scale)
        m = int(pts.shape[0])
        edit_params(params, optimizers, lambda name, p: new[name].to(p.device, p.dtype).reshape(m, *p.shape[1:]),
                    lambda key, v: torch.zeros((m, *v.shape[1:]), dtype=v.dtype, device=v.device))
        for k2 in ("grad2d", "count", "radii"):
            state[k2] = None
        self.events.append((step, "reinit", n, m))
        self.history.append((step, 0, 0, n, m))

    def _apply(self, params, optimizers, state, step: int, kind: str) -> int:
        if self.importance_fn is None:
            raise ConfigError("MiloStrategy: importance_fn is not set (the method must give the training views)")
        imp = self.importance_fn(params).to(params["means"].device)
        n = imp.numel()
        if kind == "sample":
            nonzero = int((imp > 0).sum())
            k = int(self.sampling_factor * n * (nonzero / max(n, 1)))
            gen = torch.Generator().manual_seed(self.seed + step)
            keep_idx = sample_by_importance(imp, max(k, 1), gen)
        else:
            keep_idx = cdf_keep_mask(imp, self.prune_cdf).nonzero().squeeze(-1)
        if keep_idx.numel() == 0:  # never remove every Gaussian
            keep_idx = torch.argmax(imp).reshape(1)
        edit_params(params, optimizers, lambda name, p: p[keep_idx], lambda key, v: v[keep_idx])
        for k2 in ("grad2d", "count", "radii"):
            if state.get(k2) is not None and state[k2].shape[0] == n:
                state[k2] = state[k2][keep_idx]
        after = int(keep_idx.numel())
        self.events.append((step, kind, n, after))
        self.history.append((step, 0, 0, n - after, after))
        return n - after
