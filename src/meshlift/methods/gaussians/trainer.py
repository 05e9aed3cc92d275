"""The 3DGS training loop: render → loss → Adam per parameter group → density control, resumable and guarded.

Source: Kerbl et al. 2023, "3D Gaussian Splatting for Real-Time Radiance Field Rendering" (Sec. 5 and 7;
``train.py`` of the reference code) with gsplat's ordering of the strategy hooks (Ye et al. 2024,
``examples/simple_trainer.py``: ``step_pre_backward`` after the render, the optimiser steps after
``backward``, then ``step_post_backward``). One step of :class:`GaussianTrainer`:

1. a batch of training views (:class:`~meshlift.engine.ViewSampler`), targets composited on the step's
   background (white / black / a random colour);
2. :func:`meshlift.render.splat.rasterize_gaussians` of the activated parameters at the active SH degree
   (:class:`ShDegreeSchedule`: +1 every ``sh_degree_interval`` steps);
3. ``L = (1 − λ) L1 + λ (1 − SSIM)`` (:func:`~meshlift.methods.gaussians.losses.photometric_loss`);
4. one Adam per parameter tensor (``eps = 1e-15`` as 3DGS), the position step following
   :class:`~meshlift.methods.engine.LogLinearLR` (× scene scale); on CUDA the six updates run as one Triton
   launch over the optimisers' own state (:mod:`meshlift.kernels.adam_triton`, issue 29);
5. the densification strategy's hooks (:class:`~meshlift.methods.gaussians.strategy.DefaultStrategy`, or any
   object with the same hooks);
   then an optional :class:`Regularizer`'s hooks (extra render outputs, extra loss terms, its own optimiser
   step and state; MILo's mesh in the loop uses them);
6. the **guard** (:class:`meshlift.methods.loop.TrainLoop`, :data:`GAUSSIAN_GUARD`): the loss and every
   parameter must be finite. Otherwise the run rolls back to the last good state (the last checkpoint, or
   the start), halves every learning rate once and continues; a second divergence stops with
   :class:`DivergenceError` — nothing non-finite is ever checkpointed or exported.
   The losses stay on the device and are read back together every ``readback_every`` steps
   (:class:`meshlift.methods.loop.LossReadback`; every step on the CPU, every :data:`CUDA_READBACK_EVERY` on
   a GPU), where the guard checks them and, once, the parameters: a step reads nothing back to the host
   otherwise. Checkpoints and previews read back first, so a checkpoint is always checked; a divergence
   found late rolls back to the same last good state as one found at once.

Checkpoints (``checkpoint.pt`` through :class:`meshlift.methods.engine.Checkpointer`, every
``checkpoint_every`` steps or ``checkpoint_every_s`` seconds, and at Ctrl-C) hold the parameters, optimiser
moments, strategy state, view sampler, RNG states, step, learning-rate factor and timings; a resumed run
continues bit for bit (on the same device and backend). Nothing here prints: progress goes through a
:class:`meshlift.methods.engine.Monitor`.

Several processes (``dist``, :mod:`meshlift.methods.distributed`): each rank renders its share of the step's
``batch`` views (the global batch), the gradients are averaged over the global batch before the Adam step,
the loss the guard checks is the all-reduced one, density control runs through
:class:`~meshlift.methods.gaussians.parallel.DistributedStrategy` (statistics summed over ranks, decisions
on rank 0, state broadcast), and checkpoint timing is rank 0's decision. One process: nothing changes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from meshlift.errors import ConfigError, TrainingError
from meshlift.methods.checkpoints import host_copy
from meshlift.methods.distributed import SINGLE, DistContext
from meshlift.methods.engine import Checkpointer, LogLinearLR, Monitor, TrainState, ViewSampler
from meshlift.methods.loop import GuardSettings, TrainLoop, readback_every
from meshlift.methods.data_device import resolve_data_device
from meshlift.methods.gaussians.config import GaussiansConfig, config_to_dict, densify_strategy
from meshlift.methods.gaussians.exposure import EXPOSURE_MULTI_GPU
from meshlift.methods.gaussians.views import SplatProblem

__all__ = ["CUDA_READBACK_EVERY", "DivergenceError", "GAUSSIAN_GUARD", "GaussianTrainer", "PARAM_NAMES", "Regularizer",
           "ShDegreeSchedule", "TrainCallbacks", "background_color", "render_params"]

#: The trained tensors, in the order of :class:`meshlift.structures.gaussians.Gaussians`.
PARAM_NAMES = ("means", "quats", "log_scales", "opacity_logits", "sh0", "shN")
#: Adam epsilon of 3DGS (tiny: the steps of small parameters are not damped).
ADAM_EPS = 1e-15
_BACKGROUNDS = {"white": (1.0, 1.0, 1.0), "black": (0.0, 0.0, 0.0)}
#: Steps between loss read-backs on a GPU when ``readback_every = 0`` (:func:`meshlift.methods.loop.
#: readback_every`; progress arrives in groups of this many steps; a divergence is caught at most this many
#: steps late, then rolled back as at once).
CUDA_READBACK_EVERY = 20
#: The trainer's divergence guard: the last checkpoint (or the start) is the state a rollback returns to (the
#: steps since are redone), the parameters are checked at every read-back, one rollback with halved
#: learning rates before the run stops.
GAUSSIAN_GUARD = GuardSettings(snapshot_every=0, snapshot_at_checkpoint=True, check_params_every_readback=True,
                               max_rollbacks=1)


#: Training produced a non-finite loss or parameter again after a rollback with halved learning rates (the
#: package's one divergence error type).
DivergenceError = TrainingError


@dataclass(frozen=True)
class ShDegreeSchedule:
    """Active SH degree of step ``s``: ``min(max_degree, s // interval)`` (3DGS ``oneupSHdegree``)."""

    max_degree: int
    interval: int

    def __call__(self, step: int) -> int:
        return min(self.max_degree, step // max(1, self.interval))


class TrainCallbacks:
    """Hooks into the loop (the default does nothing): for tests, fault injection and method variants."""

    def after_backward(self, step: int, params: dict) -> None:
        """Called after ``loss.backward()``, before the optimisers step (gradients are in ``p.grad``)."""

    def after_step(self, step: int, trainer: "GaussianTrainer") -> None:
        """Called after step ``step`` (0-based) and its bookkeeping. With deferred read-backs
        (``readback_every > 1``, the GPU default) the guard checks the step at the next read-back, and a
        rollback found there redoes it."""


class Regularizer:
    """Extra loss terms with their own state, plugged into the loop (the default adds nothing).

    A method built on this trainer (MILo's mesh in the loop, :mod:`meshlift.methods.milo.mesh_in_loop`)
    subclasses it; the trainer calls, per step ``s`` (0-based):

    1. :meth:`render_outputs` before the render: extra maps of ``rasterize_gaussians`` it needs
       (``"median_depth"``, ``"normal"``, ``"expected_depth"``; they arrive in ``info``);
    2. :meth:`loss` after the photometric loss, before ``backward``: a scalar added to the loss (or None);
       ``info`` also holds the render's ``alpha [B, H, W, 1]``;
    3. :meth:`after_optimizer_step` after the Gaussian optimisers and the strategy's hooks (step its own
       optimisers there; gradients of its own parameters are in ``.grad``);
    4. :meth:`state_dict` / :meth:`load_state_dict` with every checkpoint and rollback (CPU tensors).
    """

    def render_outputs(self, step: int) -> tuple:
        return ()

    def loss(self, step: int, trainer: "GaussianTrainer", batch, image: torch.Tensor, info: dict):
        return None

    def after_optimizer_step(self, step: int, trainer: "GaussianTrainer") -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def close(self) -> None:
        """Release background work (threads) when the run ends or fails."""


def background_color(name: str, generator: torch.Generator) -> torch.Tensor:
    """``[3]`` sRGB background of one step: white, black, or uniform random from ``generator``."""
    if name == "random":
        return torch.rand(3, generator=generator)
    return torch.tensor(_BACKGROUNDS[name])


def render_params(params: dict, batch, sh_degree: int, background: torch.Tensor, near: float,
                  settings, backend: str, isect_capacity=None):
    """``rasterize_gaussians`` of the stored (unconstrained) tensors ``params`` into ``batch``'s cameras.

    Returns ``(image [B, H, W, 3], alpha [B, H, W, 1], info)``.
    """
    from meshlift.render.splat import rasterize_gaussians

    B, H, W = batch.images.shape[:3]
    sh = torch.cat([params["sh0"], params["shN"]], dim=1)
    return rasterize_gaussians(
        params["means"], params["quats"], torch.exp(params["log_scales"]), torch.sigmoid(params["opacity_logits"]),
        sh, batch.world_to_camera, batch.K, W, H, near=near, sh_degree=sh_degree,
        background=background.to(dtype=params["means"].dtype), settings=settings, backend=backend,
        isect_capacity=isect_capacity)


class GaussianTrainer(TrainLoop):
    """Trains Gaussians on a :class:`SplatProblem` (see the module docstring for one step): a
    :class:`~meshlift.methods.loop.TrainLoop` with :data:`GAUSSIAN_GUARD`.

    Args:
        cfg: the validated :class:`GaussiansConfig`.
        problem: the views, scene box and SfM points.
        device: compute device.
        monitor: progress sink; checkpointer: where ``checkpoint.pt`` goes (a None folder writes nothing).
        callbacks: :class:`TrainCallbacks` (default: none).
        preview: ``(step, params, sh_degree) -> None`` writing a preview image, or None.
        strategy: a density-control object with the :class:`DefaultStrategy` hooks (default: built from
            ``cfg``'s ``densify_*`` fields; None when ``cfg.densify`` is off).
        regularizer: a :class:`Regularizer` (extra losses with state), or None.
        method: the ``method`` name written into checkpoints (``gaussians``; MILo writes ``milo``).
        dist: this process's place in a multi-process run (:data:`~meshlift.methods.distributed.SINGLE`).

    Raises:
        ConfigError: ``batch`` smaller than the number of ranks.
    """

    guard = GAUSSIAN_GUARD
    #: The six Adam steps as one Triton launch (:mod:`meshlift.kernels.adam_triton`): None = on CUDA when Triton
    #: runs there (decided at the first step); True/False force it (tests set True under the interpreter).
    multi_adam: Optional[bool] = None
    timing_key, cpu_timing_key, iterations_key = "train_s", "train_cpu_s", "train"

    def __init__(self, cfg: GaussiansConfig, problem: SplatProblem, device: torch.device, *,
                 monitor: Optional[Monitor] = None, checkpointer: Optional[Checkpointer] = None,
                 callbacks: Optional[TrainCallbacks] = None,
                 preview: Optional[Callable[[int, dict, int], None]] = None, strategy=None,
                 regularizer: Optional[Regularizer] = None, method: str = "gaussians",
                 dist: DistContext = SINGLE) -> None:
        from meshlift.render.splat import SplatSettings

        where = resolve_data_device(cfg.data_device, device, problem.train.nbytes())
        if where.type != problem.train.images.device.type:  # a copy: the caller's problem is left as it was
            problem = dataclasses.replace(problem, train=problem.train.to(where))
        super().__init__(state=TrainState(stage="train"), monitor=monitor, checkpointer=checkpointer)
        self.cfg, self.problem, self.device = cfg, problem, device
        self.callbacks = callbacks or TrainCallbacks()
        self.preview = preview
        self.regularizer = regularizer
        self.method = self.name = self.title = method
        self.scene_scale = problem.scene_scale
        self.near = cfg.near_frac * self.scene_scale
        self.strategy = strategy if strategy is not None else (
            densify_strategy(cfg, self.scene_scale) if cfg.densify else None)
        self.dist = dist
        if dist.enabled and self.strategy is not None:
            from meshlift.methods.gaussians.parallel import DistributedStrategy

            self.strategy = DistributedStrategy(self.strategy, dist)
        self.settings = SplatSettings(check_inputs=False, chunk_elements=cfg.chunk_elements)
        self.means_lr = LogLinearLR(cfg.lr_means * self.scene_scale, cfg.lr_means_final * self.scene_scale,
                                    cfg.steps)
        self.sh_schedule = ShDegreeSchedule(cfg.sh_degree, cfg.sh_degree_interval)
        self.base_lr = {"quats": cfg.lr_quats, "log_scales": cfg.lr_scales, "opacity_logits": cfg.lr_opacity,
                        "sh0": cfg.lr_sh0, "shN": cfg.lr_shN}
        self.lr_factor = 1.0
        self.sampler = ViewSampler(len(problem.train), cfg.batch, cfg.seed)
        dist.check_batch(self.sampler.batch)
        self.share_weight = dist.share_weight(self.sampler.batch)
        self.bg_generator = torch.Generator().manual_seed(cfg.seed + 1)
        self.isect_budget = self._make_isect_budget()  # None: every training render reads its count back
        self.exposure = None
        if cfg.exposure_compensation:
            if dist.enabled:
                raise ConfigError(EXPOSURE_MULTI_GPU)
            from meshlift.methods.gaussians.exposure import ExposureCompensation

            self.exposure = ExposureCompensation(len(problem.train), cfg.lr_exposure, device)
        self.params: dict = {}
        self.optimizers: dict = {}
        self.strategy_state: dict = self.strategy.initialize_state() if self.strategy is not None else {}
        self._checkpoint: Optional[dict] = None  # the one train() resumes from

    # ---- parameters -------------------------------------------------------------------------------------
    def init_params(self) -> str:
        """Initial Gaussians (:func:`~meshlift.methods.gaussians.init.init_gaussians`); returns how (for the log).

        Raises:
            ConfigError: ``init=sfm`` on a dataset without SfM points.
        """
        from meshlift.methods.gaussians.init import init_gaussians

        cfg, pb = self.cfg, self.problem
        gen = torch.Generator().manual_seed(cfg.seed)
        have = pb.points is not None and len(pb.points) > 0
        if cfg.init == "sfm" and not have:
            raise ConfigError(f"config field 'init' = 'sfm' but {pb.name or 'the dataset'} has no SfM points; "
                              "use --set init=random (or auto)")
        use_sfm = have and cfg.init in ("sfm", "auto")
        pts, rgb = (pb.points, pb.points_rgb) if use_sfm else (None, None)
        if use_sfm and 0 < cfg.max_init_points < len(pts):
            keep = torch.randperm(len(pts), generator=gen)[:cfg.max_init_points]
            pts, rgb = pts[keep], None if rgb is None else rgb[keep]
        c = pb.bounds.mean(0)
        half = 0.5 * (pb.bounds[1] - pb.bounds[0]) * cfg.random_box_scale
        t = init_gaussians(pts, rgb, torch.stack([c - half, c + half]), num_random=cfg.num_random,
                           sh_degree=cfg.sh_degree, init_opacity=cfg.init_opacity, init_scale=cfg.init_scale,
                           generator=gen)
        self.set_params(t)
        return f"{len(pts):,} SfM points" if use_sfm else f"{cfg.num_random:,} random points in the scene box"

    def set_params(self, tensors: dict, optimizer_states: Optional[dict] = None) -> None:
        """Install ``tensors`` (name -> ``[N, ...]``) as leaf parameters with fresh (or given) Adam states."""
        self.params = {k: torch.nn.Parameter(tensors[k].to(self.device, torch.float32).contiguous())
                       for k in PARAM_NAMES}
        fused = self.device.type == "cuda"  # one kernel per step and tensor on the GPU
        self.optimizers = {k: torch.optim.Adam([p], lr=self._lr(k, self.step), eps=ADAM_EPS, fused=fused)
                           for k, p in self.params.items()}
        if optimizer_states is not None:
            for k, opt in self.optimizers.items():
                opt.load_state_dict(optimizer_states[k])

    def _lr(self, name: str, step: int) -> float:
        base = self.means_lr(step) if name == "means" else self.base_lr[name]
        return base * self.lr_factor

    @property
    def num_gaussians(self) -> int:
        return int(self.params["means"].shape[0]) if self.params else 0

    def gaussians(self):
        """The current parameters as a detached :class:`~meshlift.structures.gaussians.Gaussians` (CPU)."""
        from meshlift.structures.gaussians import Gaussians

        return Gaussians(**{k: p.detach().cpu() for k, p in self.params.items()})

    # ---- state --------------------------------------------------------------------------------------------
    def payload(self) -> dict:
        """The checkpoint: CPU copies of everything that determines the rest of the run."""
        rng = {"torch": torch.get_rng_state(), "bg": self.bg_generator.get_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        strat = None
        if self.strategy is not None:
            strat = {"state": self.strategy_state, "history": [list(h) for h in getattr(self.strategy, "history", [])]}
        return host_copy({
            "method": self.method,
            "config": config_to_dict(self.cfg),
            "state": self.state.state_dict(),
            "step": self.step,
            "params": {k: p.detach() for k, p in self.params.items()},
            "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
            "strategy": strat,
            "sampler": self.sampler.state_dict(),
            "rng": rng,
            "lr_factor": self.lr_factor,
            "recoveries": self.recoveries,
            "scene_scale": self.scene_scale,
            "regularizer": None if self.regularizer is None else self.regularizer.state_dict(),
            "exposure": None if self.exposure is None else self.exposure.state_dict(),
        })

    def load_payload(self, ck: dict) -> None:
        """Restore a :meth:`payload` (a checkpoint, or the in-memory last good state)."""
        ck = host_copy(ck)
        self.state = TrainState(**ck["state"])
        self.step = int(ck["step"])
        self.lr_factor = float(ck.get("lr_factor", 1.0))
        self.recoveries = int(ck.get("recoveries", 0))
        self.set_params(ck["params"], ck["optimizers"])
        if self.strategy is not None and ck.get("strategy") is not None:
            self.strategy_state = {k: (None if v is None else v.to(self.device))
                                   for k, v in ck["strategy"]["state"].items()}
            if hasattr(self.strategy, "history"):
                self.strategy.history = [tuple(h) for h in ck["strategy"]["history"]]
        self.sampler.load_state_dict(ck["sampler"])
        if self.regularizer is not None and ck.get("regularizer") is not None:
            self.regularizer.load_state_dict(ck["regularizer"])
        if self.exposure is not None and ck.get("exposure") is not None:
            self.exposure.load_state_dict(ck["exposure"])
        torch.set_rng_state(ck["rng"]["torch"])
        self.bg_generator.set_state(ck["rng"]["bg"])
        if "cuda" in ck["rng"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(ck["rng"]["cuda"], self.device)

    # ---- the loop -----------------------------------------------------------------------------------------
    def train_step(self, it: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Optimisation step ``it`` (0-based, ``self.step``; not yet guarded). Returns ``(loss, mse)`` (0-dim
        tensors)."""
        cfg, s = self.cfg, it
        batch = self.problem.train.batch(self.dist.share(self.sampler.next()), self.device)
        bg = self._background()
        target = batch.targets(bg)
        budget = self.isect_budget
        cap = budget.capacity(self.num_gaussians) if budget is not None else None
        img, info, losses = self._forward_backward(s, batch, bg, target, cap, budget)
        # the count's copy was queued right after the render: this waits for the forward, not the backward
        if budget is not None and budget.overflowed():  # the lists were too short for this view: again, exactly
            for p in self.params.values():
                p.grad = None
            if self.exposure is not None:
                self.exposure.params.grad = None
            img, info, losses = self._forward_backward(s, batch, bg, target, None)
        self.dist.all_reduce_gradients(self.params.values(), self.share_weight)
        self.callbacks.after_backward(s, self.params)
        self._optimizer_step(s)
        if self.exposure is not None:
            self.exposure.step(cfg.lr_exposure * self.lr_factor)
        if self.strategy is not None:
            self.strategy.step_post_backward(self.params, self.optimizers, self.strategy_state, s, info)
        if self.regularizer is not None:
            self.regularizer.after_optimizer_step(s, self)
        with torch.no_grad():
            mse = ((img.detach() - target) ** 2).mean()
        loss, mse = self.dist.weighted_sum([losses["loss"].detach(), mse], self.share_weight)
        return loss, mse

    def _forward_backward(self, s: int, batch, bg: torch.Tensor, target: torch.Tensor, capacity,
                          budget=None) -> tuple:
        """Render, loss (+ regulariser) and backward of step ``s``; ``capacity``: the tile lists' size
        (:mod:`~meshlift.methods.gaussians.isect_budget`) or None; ``budget`` records the render's count right
        after the render (before the backward is queued). Returns ``(image, info, losses)``."""
        from meshlift.methods.gaussians.losses import photometric_loss

        cfg = self.cfg
        settings = self.settings
        extra = self.regularizer.render_outputs(s) if self.regularizer is not None else ()
        if extra:
            settings = dataclasses.replace(settings, outputs=tuple(extra))
        img, alpha, info = render_params(self.params, batch, self.sh_schedule(s), bg, self.near, settings,
                                         cfg.splat_backend, isect_capacity=capacity)
        if budget is not None:
            budget.record(info, capacity)
        if self.exposure is not None:  # training only: the loss sees the render in this photo's exposure
            img = self.exposure.apply(img, batch.indices, alpha, bg)
        losses = photometric_loss(img, target, cfg.ssim_lambda)
        if self.regularizer is not None:
            info["alpha"] = alpha
            reg = self.regularizer.loss(s, self, batch, img, info)
            if reg is not None:
                losses["loss"] = losses["loss"] + reg
        if self.strategy is not None:
            self.strategy.step_pre_backward(info)
        if losses["loss"].requires_grad:  # False when no Gaussian is visible in this batch: nothing to learn
            losses["loss"].backward()
        return img, info, losses

    def _make_isect_budget(self):
        """The :class:`~meshlift.methods.gaussians.isect_budget.IsectBudget` of the training renders when
        ``isect_readback`` is off and it applies (Triton on CUDA, no regulariser), else None."""
        if self.cfg.isect_readback or self.regularizer is not None or self.device.type != "cuda":
            return None
        from meshlift.render.splat import _resolve_backend

        if _resolve_backend(self.cfg.splat_backend, self.device, False) != "triton":
            return None
        from meshlift.methods.gaussians.isect_budget import IsectBudget

        return IsectBudget(self.device)

    def isect_budget_stats(self) -> Optional[dict]:
        """``{"capped_steps", "redos"}`` of the training renders sized by a capacity (``isect_readback`` off),
        or None when every step read its count back."""
        b = self.isect_budget
        return None if b is None else {"capped_steps": b.capped_steps, "redos": b.redos}

    def _optimizer_step(self, s: int) -> None:
        """Step every Gaussian optimiser at step ``s``'s learning rates and drop the gradients: on CUDA one Triton
        launch for all six (:func:`meshlift.kernels.adam_triton.multi_adam_step`; torch's update up to float32
        rounding), else (or when that kernel declines) each ``torch.optim.Adam.step``."""
        names = list(self.optimizers)
        lrs = [self._lr(k, s) for k in names]
        use = self.multi_adam
        if use is None:
            from meshlift.kernels import adam_triton

            use = self.device.type == "cuda" and adam_triton.is_available(self.device)
            self.multi_adam = use
        done = False
        if use:
            from meshlift.kernels.adam_triton import multi_adam_step

            done = multi_adam_step([self.optimizers[k] for k in names], lrs)
        if done:  # what zero_grad(set_to_none=True) does, without its profiler record per optimiser
            for p in self.params.values():
                p.grad = None
            return
        for k, lr in zip(names, lrs):
            opt = self.optimizers[k]
            opt.param_groups[0]["lr"] = lr
            opt.step()
            opt.zero_grad(set_to_none=True)

    def params_finite(self) -> bool:
        """Every parameter is finite (one host read-back)."""
        with torch.no_grad():
            ps = list(self.params.values()) + ([self.exposure.params] if self.exposure is not None else [])
            return bool(torch.stack([torch.isfinite(p).all() for p in ps]).all())

    def _background(self) -> torch.Tensor:
        """``[3]`` background of this step on the device (random: drawn on the host generator, copied
        without a host wait; white/black: one cached tensor)."""
        from meshlift.methods.gaussians.views import to_device

        name = self.cfg.background
        if name != "random":
            cache = self.__dict__.setdefault("_bg_cache", {})
            if name not in cache:
                cache[name] = background_color(name, self.bg_generator).to(self.device)
            return cache[name]
        return to_device(background_color(name, self.bg_generator), self.device)

    # ---- TrainLoop hooks ----------------------------------------------------------------------------------
    def begin(self) -> None:
        """Resume from the checkpoint given to :meth:`train` or initialise; the step-0 preview."""
        cfg, checkpoint = self.cfg, self._checkpoint
        if checkpoint is not None:
            self.load_payload(checkpoint)
            self.saved_step = self.step
        else:
            how = self.init_params()
            self.monitor.log(f"initialised {self.num_gaussians:,} Gaussians from {how}; scene scale "
                             f"{self.scene_scale:.3g}")
        self.dist.broadcast_tensors(self.params.values())  # every rank starts from rank 0's parameters
        self.dist.decorrelate_rng(cfg.seed + 1 + self.step)
        self.total = cfg.steps
        self.readback_steps = readback_every(cfg.readback_every, self.device, CUDA_READBACK_EVERY)
        self.checkpoint_every, self.checkpoint_every_s = cfg.checkpoint_every, cfg.checkpoint_every_s
        self.preview_every = cfg.preview_every
        if self.step == 0 and self.preview is not None:
            with torch.no_grad():
                self.preview(0, self.params, self.sh_schedule(0))

    def after_train_step(self, it: int) -> dict:
        return {"gaussians": self.num_gaussians}  # the count after the step, in its history row

    def preview_step(self, step: int) -> None:
        self.preview(step, self.params, self.sh_schedule(step - 1))

    def on_rollback(self, snapshot: dict) -> None:
        factor = self.lr_factor * 0.5
        self.load_payload(snapshot)
        self.lr_factor = factor

    def divergence_message(self, step: int, loss: float) -> str:
        where = (f"the last good checkpoint (step {self.saved_step}) is kept in {self.checkpointer.path}"
                 if self.saved_step is not None else "no checkpoint or outputs were written")
        cfg = self.cfg
        return (f"training diverged again at step {step} (loss {loss}) after rolling back and halving every "
                f"learning rate; {where}. Lower the learning rates (e.g. --set lr_means={cfg.lr_means / 4:g} "
                f"lr_opacity={cfg.lr_opacity / 4:g} lr_scales={cfg.lr_scales / 4:g}), check the cameras "
                "(meshlift inspect), or train at a lower train_res")

    def after_step(self, it: int) -> None:
        self.callbacks.after_step(it, self)

    def train(self, checkpoint: Optional[dict] = None, deadline: Optional[float] = None) -> None:
        """Run (or, with ``checkpoint``, continue) the loop to ``cfg.steps`` or the ``deadline``
        (a ``time.perf_counter()`` value). The final state is checkpointed.

        Raises:
            DivergenceError: a second divergence (see the module docstring).
        """
        self._checkpoint = checkpoint
        try:
            self.run(deadline)
        finally:
            self._checkpoint = None
        self.state.stage = "done"
        self.save_checkpoint()

    @property
    def eval_sh_degree(self) -> int:
        """The SH degree active at the last step run (what the model was fitted with)."""
        return self.sh_schedule(max(0, self.step - 1))
