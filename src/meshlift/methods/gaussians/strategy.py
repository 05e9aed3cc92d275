"""Adaptive density control of 3D Gaussians as a strategy object with hooks (the gsplat pattern).

Kerbl et al. 2023 ("3D Gaussian Splatting for Real-Time Radiance Field Rendering", Sec. 5.2): every
``refine_every`` steps between ``refine_start`` and ``refine_stop``, Gaussians whose mean screen-space
positional gradient exceeds ``grow_grad2d`` are **cloned** (small ones, largest scale ≤
``grow_scale3d`` × scene scale) or **split** in two (large ones: the new means are drawn from the
Gaussian itself, scales divided by 1.6); Gaussians with opacity below ``prune_opa`` (and, after the first
opacity reset, too large in world or screen space) are **pruned**; every ``reset_every`` steps the
opacities are clamped to ``2 · prune_opa`` (**opacity reset**). The defaults are gsplat's
``DefaultStrategy`` (nerfstudio-project/gsplat, ``gsplat/strategy/default.py``).

The training loop owns nothing of this: it calls

- :meth:`DefaultStrategy.initialize_state` once,
- :meth:`DefaultStrategy.step_pre_backward` after the render, before ``loss.backward()`` (keeps the
  gradient of the projected means ``info["means2d"]``),
- :meth:`DefaultStrategy.step_post_backward` after ``loss.backward()`` and the optimiser step (gsplat's order),

and the strategy edits ``params`` (a dict of ``torch.nn.Parameter``) and their Adam states in place
through :func:`edit_params` (the one remap primitive: every per-Gaussian tensor and optimiser moment
follows). A method with its own rules (MILo's importance sampling) subclasses it or writes another
object with the same hooks.

``info`` (from :func:`meshlift.render.splat.rasterize_gaussians`) must hold ``means2d [C, N, 2]``
(pixels, with a retained gradient), ``radii [C, N]`` or ``[C, N, 2]`` (pixels, 0 = not visible),
``width``, ``height`` and ``n_cameras``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

import torch

from meshlift.errors import ConfigError

__all__ = ["DefaultStrategy", "edit_params", "split_samples"]

Params = Dict[str, torch.nn.Parameter]
Optimizers = Dict[str, torch.optim.Optimizer]


@torch.no_grad()
def edit_params(params: Params, optimizers: Optimizers,
                param_fn: Callable[[str, torch.Tensor], torch.Tensor],
                state_fn: Callable[[str, torch.Tensor], torch.Tensor]) -> None:
    """Replace every per-Gaussian parameter and its optimiser state (the one remap primitive).

    Args:
        params: name -> leaf ``Parameter`` whose first dimension is the Gaussian index ``N``.
        optimizers: name -> optimiser holding exactly ``params[name]`` (one param group, one param).
        param_fn: ``(name, old_tensor) -> new_tensor [N', ...]``.
        state_fn: ``(state_key, old_state_tensor [N, ...]) -> new [N', ...]`` for Adam's moments
            (``exp_avg``, ``exp_avg_sq``); scalar states (``step``) are kept.
    """
    for name in list(params):
        old = params[name]
        new = torch.nn.Parameter(param_fn(name, old.data), requires_grad=old.requires_grad)
        params[name] = new
        opt = optimizers.get(name)
        if opt is None:
            continue
        group = opt.param_groups[0]
        st = opt.state.pop(old, None)
        group["params"] = [new]
        if st is not None:
            opt.state[new] = {k: (state_fn(k, v) if torch.is_tensor(v) and v.ndim > 0 and
                                  v.shape[0] == old.shape[0] else v) for k, v in st.items()}


def split_samples(means: torch.Tensor, quats: torch.Tensor, scales: torch.Tensor, n: int = 2,
                  generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """``n`` samples per Gaussian from N(mean, R diag(scale²) Rᵀ): ``[n, M, 3]`` (the split rule)."""
    from meshlift.geometry.rotations import normalize_quaternion, quaternion_to_matrix

    R = quaternion_to_matrix(normalize_quaternion(quats))
    z = torch.randn((n, *means.shape), device=means.device, dtype=means.dtype, generator=generator)
    return means[None] + torch.einsum("mij,nmj->nmi", R, z * scales[None])


@dataclass
class DefaultStrategy:
    """gsplat's default densification schedule (3DGS Sec. 5.2). Every field is a knob of the method
    config (``--set densify.<field>=...``)."""

    prune_opa: float = 0.005
    """Prune Gaussians whose opacity falls below this."""
    grow_grad2d: float = 0.0002
    """Clone/split Gaussians whose mean screen-space gradient (NDC units, as 3DGS) exceeds this."""
    grow_scale3d: float = 0.01
    """Largest scale (× scene scale) up to which a Gaussian is cloned; above it is split."""
    grow_scale2d: float = 0.05
    """Split Gaussians whose screen radius exceeds this fraction of the image size (only before
    ``refine_scale2d_stop``)."""
    prune_scale3d: float = 0.1
    """After the first opacity reset, prune Gaussians larger than this × scene scale."""
    prune_scale2d: float = 0.15
    """After the first opacity reset (and before ``refine_scale2d_stop``), prune Gaussians whose screen
    radius exceeds this fraction of the image size."""
    refine_scale2d_stop: int = 0
    """Step until which the screen-size rules apply (0: never)."""
    refine_start: int = 500
    """First step at which density control runs."""
    refine_stop: int = 15_000
    """Last step at which density control runs."""
    reset_every: int = 3000
    """Reset opacities every this many steps (0 = never)."""
    refine_every: int = 100
    """Run clone/split/prune every this many steps."""
    pause_refine_after_reset: int = 0
    """Skip refinement for this many steps after each opacity reset."""
    max_gaussians: int = 6_000_000
    """Never grow beyond this many Gaussians (a memory knob: growth stops, pruning continues)."""
    scene_scale: float = 1.0
    """Scene extent (world units) that the 3D scale thresholds are relative to (set by the method)."""
    verbose: bool = False
    """Print the counts after each refinement."""
    history: list = field(default_factory=list, repr=False)
    """(step, cloned, split, pruned, total) after each refinement (read by progress/log code)."""
    fused_stats: Optional[bool] = field(default=None, repr=False, compare=False)
    """The per-step gradient statistics as one Triton launch (:mod:`meshlift.kernels.densify_triton`): None =
    on CUDA when Triton runs there (decided at the first step); False = the torch code (its reference twin)."""

    def check(self) -> None:
        """Raise :class:`ConfigError` on out-of-range fields."""
        for name in ("prune_opa", "grow_grad2d", "grow_scale3d", "prune_scale3d", "scene_scale"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigError(f"densify.{name} must be a finite positive number, got {v!r}")
        if not 0 < self.prune_opa < 1:
            raise ConfigError(f"densify.prune_opa must be in (0, 1), got {self.prune_opa}")
        if self.refine_every < 1:
            raise ConfigError(f"densify.refine_every must be ≥ 1, got {self.refine_every}")
        if self.max_gaussians < 1:
            raise ConfigError(f"densify.max_gaussians must be ≥ 1, got {self.max_gaussians}")

    # ---- hooks -------------------------------------------------------------------------------
    def initialize_state(self) -> dict:
        """The running statistics (a dict, saved in checkpoints)."""
        return {"grad2d": None, "count": None, "radii": None}

    def step_pre_backward(self, info: dict) -> None:
        """Keep the gradient of the projected means (call after the render, before backward)."""
        m2d = info.get("means2d")
        if m2d is None or not isinstance(m2d, torch.Tensor):
            raise ConfigError("DefaultStrategy needs info['means2d'] from rasterize_gaussians")
        if m2d.requires_grad:
            m2d.retain_grad()

    @torch.no_grad()
    def step_post_backward(self, params: Params, optimizers: Optimizers, state: dict, step: int,
                           info: dict) -> dict:
        """Accumulate statistics (call after backward and the optimiser step); at the scheduled steps
        clone/split/prune and reset opacities.

        Returns:
            ``{"cloned", "split", "pruned", "reset"}`` counts of this call (zeros off-schedule).
        """
        out = {"cloned": 0, "split": 0, "pruned": 0, "reset": False}
        if step >= self.refine_stop:
            return out
        self._update_state(params, state, info)
        if (step > self.refine_start and step % self.refine_every == 0
                and (self.reset_every <= 0 or step % self.reset_every >= self.pause_refine_after_reset)):
            out["cloned"], out["split"] = self._grow(params, optimizers, state, step)
            out["pruned"] = self._prune(params, optimizers, state, step)
            for k in ("grad2d", "count", "radii"):
                if state[k] is not None:
                    state[k].zero_()
            self.history.append((step, out["cloned"], out["split"], out["pruned"],
                                 int(params["means"].shape[0])))
            if self.verbose:
                print(f"step {step}: +{out['cloned']} cloned, +{out['split']} split, -{out['pruned']} "
                      f"pruned -> {params['means'].shape[0]} Gaussians")
        if self.reset_every > 0 and step % self.reset_every == 0 and step > 0:
            self.reset_opacities(params, optimizers)
            out["reset"] = True
        return out

    # ---- parts ---------------------------------------------------------------------------------
    def _update_state(self, params: Params, state: dict, info: dict) -> None:
        m2d = info["means2d"]
        grad = m2d.grad if m2d.grad is not None else None
        n = params["means"].shape[0]
        dev = params["means"].device
        if state["grad2d"] is None or state["grad2d"].shape[0] != n:
            state["grad2d"] = torch.zeros(n, device=dev)
            state["count"] = torch.zeros(n, device=dev)
            state["radii"] = torch.zeros(n, device=dev)
        if grad is None:
            return
        width, height = float(info["width"]), float(info["height"])
        ncam = float(info.get("n_cameras", grad.shape[0]))
        fused = self.fused_stats
        if fused is None:
            from meshlift.kernels import densify_triton

            fused = self.fused_stats = dev.type == "cuda" and densify_triton.is_available(dev)
        if (fused and grad.dtype == torch.float32 and grad.ndim == 3 and grad.shape[1] == n
                and info["radii"].dtype == torch.int32 and state["grad2d"].dtype == torch.float32
                and state["count"].dtype == torch.float32):
            from meshlift.kernels.densify_triton import accumulate_grad2d

            # the lines below in one launch (kernels/densify_triton.py; issue 29)
            accumulate_grad2d(grad, info["radii"].reshape(grad.shape[0], n, -1), state["grad2d"], state["count"],
                              width / 2.0 * ncam, height / 2.0 * ncam)
            if self.refine_scale2d_stop > 0:
                rad = info["radii"].reshape(grad.shape[0], n, -1).amax(dim=-1)
                state["radii"] = torch.maximum(state["radii"], (rad.to(grad.dtype) / max(width, height)).amax(0))
            return
        # NDC-scaled norm of the screen gradient, summed over the visible (camera, Gaussian) pairs: a few
        # elementwise launches per step, nothing read back (the decisions wait for the refine steps)
        g = grad.reshape(-1, n, 2)
        norm = torch.hypot(g[..., 0] * (width / 2.0 * ncam), g[..., 1] * (height / 2.0 * ncam))
        rad = info["radii"].reshape(g.shape[0], n, -1).amax(dim=-1)
        vis = rad > 0
        contrib = torch.where(vis, norm, 0.0)
        one = g.shape[0] == 1
        state["grad2d"].add_(contrib[0] if one else contrib.sum(0))
        state["count"].add_(vis[0] if one else vis.sum(0))
        if self.refine_scale2d_stop > 0:
            state["radii"] = torch.maximum(state["radii"], (rad.to(g.dtype) / max(width, height)).amax(0))

    def _grow(self, params: Params, optimizers: Optimizers, state: dict, step: int) -> tuple[int, int]:
        n = params["means"].shape[0]
        room = max(0, self.max_gaussians - n)
        avg = state["grad2d"] / state["count"].clamp_min(1)
        high = avg > self.grow_grad2d
        scales = torch.exp(params["log_scales"])
        small = scales.amax(dim=-1) <= self.grow_scale3d * self.scene_scale
        clone = high & small
        split = high & ~small
        if step < self.refine_scale2d_stop:
            split |= state["radii"] > self.grow_scale2d
        # Respect the growth budget: clones add one each, splits add one each (2 new, 1 removed).
        n_clone, n_split = int(clone.sum()), int(split.sum())
        if n_clone + n_split > room:
            order = torch.argsort(avg, descending=True)
            keep = torch.zeros(n, dtype=torch.bool, device=avg.device)
            keep[order[:room]] = True
            clone &= keep
            split &= keep
            n_clone, n_split = int(clone.sum()), int(split.sum())
        if n_clone:
            self._clone(params, optimizers, state, clone)
        if n_split:
            split = torch.cat([split, torch.zeros(n_clone, dtype=torch.bool, device=split.device)])
            self._split(params, optimizers, state, split)
        return n_clone, n_split

    def _clone(self, params, optimizers, state, mask) -> None:
        idx = mask.nonzero().squeeze(-1)
        edit_params(params, optimizers,
                    lambda name, p: torch.cat([p, p[idx]]),
                    lambda key, v: torch.cat([v, torch.zeros((len(idx), *v.shape[1:]), device=v.device,
                                                             dtype=v.dtype)]))
        for k in ("grad2d", "count", "radii"):
            state[k] = torch.cat([state[k], state[k][idx]])

    def _split(self, params, optimizers, state, mask) -> None:
        idx = mask.nonzero().squeeze(-1)
        rest = (~mask).nonzero().squeeze(-1)
        scales = torch.exp(params["log_scales"][idx])
        samples = split_samples(params["means"][idx], params["quats"][idx], scales, 2)  # [2, M, 3]

        def pfn(name, p):
            if name == "means":
                new = samples.reshape(-1, 3)
            elif name == "log_scales":
                new = torch.log(scales / 1.6).repeat(2, 1)
            else:
                new = p[idx].repeat(2, *([1] * (p.ndim - 1)))
            return torch.cat([p[rest], new])

        def sfn(key, v):
            return torch.cat([v[rest], torch.zeros((2 * len(idx), *v.shape[1:]), device=v.device, dtype=v.dtype)])

        edit_params(params, optimizers, pfn, sfn)
        for k in ("grad2d", "count", "radii"):
            state[k] = torch.cat([state[k][rest], state[k][idx].repeat(2)])

    def _prune(self, params: Params, optimizers: Optimizers, state: dict, step: int) -> int:
        opa = torch.sigmoid(params["opacity_logits"])
        prune = opa < self.prune_opa
        if self.reset_every > 0 and step > self.reset_every:
            big = torch.exp(params["log_scales"]).amax(dim=-1) > self.prune_scale3d * self.scene_scale
            if step < self.refine_scale2d_stop:
                big |= state["radii"] > self.prune_scale2d
            prune |= big
        n_prune = int(prune.sum())
        if n_prune == prune.numel():  # never remove every Gaussian: keep the most opaque one
            prune[torch.argmax(opa)] = False
            n_prune -= 1
        if n_prune:
            keep = (~prune).nonzero().squeeze(-1)
            edit_params(params, optimizers, lambda name, p: p[keep], lambda key, v: v[keep])
            for k in ("grad2d", "count", "radii"):
                state[k] = state[k][keep]
        return n_prune

    @torch.no_grad()
    def reset_opacities(self, params: Params, optimizers: Optimizers) -> None:
        """Clamp opacities to at most ``2 · prune_opa`` and zero their optimiser moments."""
        cap = math.log(2 * self.prune_opa) - math.log1p(-2 * self.prune_opa)

        # Only the opacity and its moments change: edit that one parameter.
        sub = {"opacity_logits": params["opacity_logits"]}
        edit_params(sub, optimizers, lambda name, p: p.clamp_max(cap), lambda key, v: torch.zeros_like(v))
        params["opacity_logits"] = sub["opacity_logits"]
