"""``reconstruct --method gaussians``: the whole 3DGS run — dataset → views → training → evaluation → folder.

What the CLI calls through the method's spec (:mod:`meshlift.methods.gaussians.method`): :func:`build_config`
(preset → ``--config`` file → ``field=value`` overrides; on ``--resume`` the run's saved ``config.json`` is the
base), :func:`check_out_dir`, :func:`reconstruct` (checks the output folder and the checkpoint before loading
anything, trains with :class:`~meshlift.methods.gaussians.trainer.GaussianTrainer`, evaluates the test split,
writes the folder of :mod:`meshlift.methods.gaussians.outputs`) and :func:`summary_lines` (what the CLI
prints). Nothing here prints.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from meshlift.errors import ConfigError, MeshliftError, OutOfMemoryError
from meshlift.methods.distributed import DistContext, init_from_env, make_checkpointer
from meshlift.methods.engine import (CHECKPOINT_NAME, Checkpointer, Monitor, TimeBudget, is_oom, kernel_backends,
                                     prepare_output_dir, resolve_device)
from meshlift.methods.gaussians.config import SHAPE_FIELDS, GaussiansConfig, apply_dict
from meshlift.methods.gaussians.exposure import EXPOSURE_MULTI_GPU
from meshlift.methods.gaussians.views import SplatProblem

__all__ = ["BUDGET_FRACTIONS", "GaussiansResult", "build_config", "check_out_dir",
           "load_problem", "reconstruct", "summary_lines"]

#: With ``time_budget_s``: training stops once this fraction of the budget has passed (the rest is left
#: for evaluation and export).
BUDGET_FRACTIONS = {"train": 0.9}


@dataclass
class GaussiansResult:
    """What :func:`reconstruct` produced: the Gaussians (world frame), metrics, folder, files, history."""

    gaussians: object
    metrics: dict
    out_dir: Optional[Path]
    files: dict
    history: list = field(default_factory=list)


def build_config(data: str, preset: Optional[str], quick: bool, config_file: Optional[Path],
                 overrides: list[str], out: Optional[Path] = None, resume: bool = False) -> GaussiansConfig:
    """The effective config: preset (default ``gaussians``, CPU-sized with ``quick``) → file → overrides
    (:func:`meshlift.methods.config_layers.build_layered_config`).

    Raises:
        ConfigError: unknown preset or field, bad value, unreadable ``config.json`` on resume, no input.
    """
    from meshlift.methods.config_layers import ConfigLayers, build_layered_config
    from meshlift.methods.gaussians.config import load_config_file, parse_overrides
    from meshlift.methods.gaussians.presets import get_preset

    layers = ConfigLayers(GaussiansConfig, apply_dict, get_preset, load_config_file, parse_overrides,
                          "gaussians", "no input: give DATA (a dataset folder)")
    return build_layered_config(layers, data, preset, quick, config_file, overrides, out, resume)


def check_out_dir(out: Optional[Path], *, resume: bool, overwrite: bool) -> None:
    """Refuse an output path that is a file, not writable, or a finished/started run's folder without
    ``resume`` / ``overwrite`` (issue 16: nothing is silently replaced): the shared rule of
    :func:`meshlift.methods.engine.prepare_output_dir`, plus this method's ``point_cloud.ply``.

    Raises:
        OutputError: as above.
    """
    from meshlift.errors import OutputError

    prepare_output_dir(out, resume=resume, overwrite=overwrite)
    if out is not None and not (resume or overwrite) and (Path(out) / "point_cloud.ply").exists():
        raise OutputError(f"--out {out} already holds a run (point_cloud.ply); pass --resume to continue it, "
                          "--overwrite to replace it, or choose another folder")


def _load_checkpoint(checkpointer: Checkpointer, cfg: GaussiansConfig) -> dict:
    """The checkpoint of ``--resume``, validated against ``cfg`` before anything is written."""
    path = checkpointer.path
    ck = checkpointer.load()  # engine.load_checkpoint: an unreadable file is one clear ConfigError
    if ck is None:
        raise ConfigError(f"--resume: no {CHECKPOINT_NAME} in {path.parent if path else None}; run without "
                          "--resume first")
    if not isinstance(ck, dict) or ck.get("method") != "gaussians" or "params" not in ck:
        raise ConfigError(f"--resume: {path} is not a checkpoint of --method gaussians")
    saved = ck.get("config", {})
    for name in SHAPE_FIELDS:
        if name in saved and saved[name] != getattr(cfg, name):
            raise ConfigError(f"--resume: config field {name!r} was {saved[name]!r} in the checkpoint and is "
                              f"{getattr(cfg, name)!r} now; it cannot change on resume (fixed: "
                              f"{', '.join(SHAPE_FIELDS)}; steps, learning rates, budgets and outputs can)")
    return ck


def load_problem(cfg: GaussiansConfig) -> SplatProblem:
    """Read ``cfg.data`` with ``cfg``'s split, resolution, mask and data-device fields."""
    from meshlift.methods.gaussians.views import load_splat_problem

    return load_splat_problem(cfg.data, train_split=cfg.train_split, test_split=cfg.test_split,
                              max_test_views=cfg.max_test_views, train_res=cfg.train_res,
                              downscale=cfg.downscale, use_masks=cfg.use_masks, data_device=cfg.data_device,
                              camera_convention=cfg.camera_convention, undistort_crop=cfg.undistort_crop)


def oom_error(cfg: GaussiansConfig, where: str, n: int) -> OutOfMemoryError:
    """The OutOfMemoryError to raise, naming the memory knobs and their current values."""
    return OutOfMemoryError(
        f"out of memory during {where} with {n:,} Gaussians. Lower the memory knobs: densify_max_gaussians="
        f"{cfg.densify_max_gaussians} (e.g. --set densify_max_gaussians={max(1000, cfg.densify_max_gaussians // 2)}),"
        f" train_res={cfg.train_res} (0 = as stored; e.g. --set train_res=800), downscale={cfg.downscale}, "
        f"batch={cfg.batch}, data_device={cfg.data_device} (keep images on the CPU), chunk_elements="
        f"{cfg.chunk_elements} (PyTorch rasterizer), sh_degree={cfg.sh_degree}")


@kernel_backends
def reconstruct(cfg: GaussiansConfig, out_dir: Optional[str | Path], *, resume: bool = False,
                overwrite: bool = False, monitor: Optional[Monitor] = None,
                problem: Optional[SplatProblem] = None, callbacks=None,
                dist: Optional[DistContext] = None) -> GaussiansResult:
    """Train Gaussians on ``cfg.data`` (or ``problem``), evaluate the test views, write ``out_dir``.

    Args:
        cfg: the validated configuration.
        out_dir: output folder (created), or None to write nothing (tests).
        resume: continue from ``out_dir/checkpoint.pt`` (a finished run is evaluated and exported again).
        overwrite: replace a previous run in ``out_dir``.
        monitor: progress sink; problem: pre-loaded views (skips reading ``cfg.data``);
        callbacks: :class:`~meshlift.methods.gaussians.trainer.TrainCallbacks`.
        dist: the process's place in a multi-process run (default: :func:`~meshlift.methods.distributed.
            init_from_env`, one process unless started by torchrun). Rank 0 alone checks the folder, reads
            the checkpoint (sent to the others), writes, reports, evaluates and exports; the other ranks
            return after training with ``metrics = {}`` and ``out_dir = None``.

    Raises:
        ConfigError, DatasetError: bad configuration, output folder, checkpoint or input.
        DivergenceError: training diverged twice (no outputs written). OutOfMemoryError: with the knobs.
    """
    from meshlift.methods.gaussians import outputs
    from meshlift.methods.gaussians.evaluate import eval_background, image_metrics, render_views
    from meshlift.methods.gaussians.trainer import GaussianTrainer

    out = Path(out_dir) if out_dir is not None else None
    device = resolve_device(cfg.device)
    dist = init_from_env(device) if dist is None else dist
    device = dist.device_for(device)
    monitor = (monitor or Monitor()) if dist.is_main else Monitor()
    if cfg.exposure_compensation and dist.enabled:  # refused before the data loads (the trainer checks too)
        raise ConfigError(EXPOSURE_MULTI_GPU)

    def check_and_load() -> Optional[dict]:  # rank 0 only; the others receive its result (or its error)
        check_out_dir(out, resume=resume, overwrite=overwrite)
        return _load_checkpoint(Checkpointer(out), cfg) if resume else None

    checkpoint = dist.from_main(check_and_load)
    checkpointer = make_checkpointer(out, dist)
    # first run on an empty Triton cache: the recorded kernel variants (all SH degrees, so none compiles at the
    # degree steps mid-run) compile in background processes (kernels/precompile.py; issue 29)
    if dist.is_main:
        from meshlift.kernels import precompile

        precompile.start("gaussians", device, log=monitor.log)
    torch.manual_seed(cfg.seed)
    budget = TimeBudget(cfg.time_budget_s, BUDGET_FRACTIONS)
    where, trainer = "loading the data", None
    try:
        if problem is None:
            monitor.log(f"loading {cfg.data}")
            problem = load_problem(cfg)
        if out is not None and dist.is_main:  # only once the input has loaded: a bad input leaves no folder
            out.mkdir(parents=True, exist_ok=True)
            if overwrite and not resume:
                for name in (CHECKPOINT_NAME, "metrics.json"):
                    (out / name).unlink(missing_ok=True)
            outputs.write_config(out, cfg)
        monitor.log(f"{problem.views_line()} at {problem.train.width}x"
                    f"{problem.train.height}, device {device}, splat backend {cfg.splat_backend}"
                    + (f", {dist.describe()}, {min(cfg.batch, len(problem.train))} views per step over all ranks"
                       if dist.enabled else ""))
        trainer = GaussianTrainer(cfg, problem, device, monitor=monitor, checkpointer=checkpointer,
                                  callbacks=callbacks, dist=dist)
        trainer.preview = outputs.preview_writer(out, problem, cfg, device, trainer.near) if dist.is_main else None
        where = "training"
        trainer.train(checkpoint=checkpoint, deadline=budget.deadline("train"))
        if not dist.is_main:  # rank 0 evaluates and exports
            return GaussiansResult(trainer.gaussians(), {}, None, {}, list(trainer.state.history))
        where = "evaluation"
        monitor.log(f"evaluating {len(problem.test)} held-out views")
        t_eval = time.perf_counter()
        ours, targets = render_views(trainer.params, problem.test, sh_degree=trainer.eval_sh_degree,
                                     background=cfg.background, near=trainer.near, device=device,
                                     settings=trainer.settings, backend=cfg.splat_backend)
        metrics = image_metrics(ours, targets, with_lpips=cfg.lpips)
        state = trainer.state
        state.timings["eval_s"] = time.perf_counter() - t_eval
        state.timings["total_s"] = time.perf_counter() - budget.t_start
        metrics.update({
            "method": "gaussians",
            "background": eval_background(cfg.background),
            "test_views": len(problem.test),
            "resolution": [problem.train.width, problem.train.height],
            "gaussians": trainer.num_gaussians,
            "steps": trainer.step,
            "steps_configured": cfg.steps,
            "sh_degree": trainer.eval_sh_degree,
            "scene_scale": trainer.scene_scale,
            "frame": "dataset world frame",
            "lr_factor": trainer.lr_factor,
            "nan_recoveries": trainer.recoveries,
            "isect_budget": trainer.isect_budget_stats(),
            "device": str(device),
            "splat_backend": cfg.splat_backend,
            "timings": dict(state.timings),
            "steps_per_s": trainer.step / max(state.timings.get("train_s", 0.0), 1e-9),
        })
        if trainer.strategy is not None and getattr(trainer.strategy, "history", None):
            metrics["densify_history"] = [list(h) for h in trainer.strategy.history]
        _check_results(metrics, cfg, problem, ours, targets, state.history)
        gaussians = trainer.gaussians()
        files: dict = {}
        if out is not None:
            where = "export"
            files = outputs.write_outputs(out, gaussians, metrics, state.history, cfg, ours=ours,
                                          targets=targets, names=problem.test.names)
    except MeshliftError:
        raise
    except Exception as exc:  # noqa: BLE001 - only memory errors are translated, the rest re-raised
        if is_oom(exc):
            raise oom_error(cfg, where, trainer.num_gaussians if trainer is not None else 0) from exc
        raise
    return GaussiansResult(gaussians, metrics, out, files, list(state.history))


def _check_results(metrics: dict, cfg: GaussiansConfig, problem: SplatProblem, ours, targets, history) -> None:
    """Test renders that show nothing, a test PSNR far below the training one: ``warnings`` in ``metrics``
    (:mod:`meshlift.methods.result_checks`)."""
    from meshlift.methods.gaussians.evaluate import eval_background
    from meshlift.methods.result_checks import add_warnings, budget_cut, check_test_views

    add_warnings(metrics, [budget_cut(metrics.get("steps", cfg.steps), cfg.steps, cfg.time_budget_s)])
    check_test_views(
        metrics, renders=ours, targets=targets, background=1.0 if eval_background(cfg.background) == "white" else 0.0,
        names=problem.test.names, history=history, test_psnr=metrics.get("psnr"), subject="the Gaussians",
        blank_hint="the test cameras are not in the training views' world frame (the dataset's poses, "
        "--camera-convention), or training removed the Gaussians they look at; compare renders/ with gt/",
        gap_hint="check that the test split's poses are in the training views' frame (meshlift inspect), that the "
        "training views surround what the test views see, and compare renders/ with gt/")


def summary_lines(result: GaussiansResult) -> list[str]:
    """The lines the CLI prints after a run (rich markup)."""
    from meshlift.methods.result_checks import warning_lines

    m = result.metrics
    lp = m.get("lpips")
    lines = [f"[bold]test PSNR[/bold] {m['psnr']:.2f} dB   [bold]SSIM[/bold] {m['ssim']:.4f}"
             + (f"   [bold]LPIPS[/bold] {lp:.4f}" if lp is not None else "")
             + f"   ({m['test_views']} views on {m['background']})",
             f"{m['gaussians']:,} Gaussians, {m['steps']} steps at {m['steps_per_s']:.2f} steps/s"]
    lines += warning_lines(m)
    t = m.get("timings", {})
    if t:
        lines.append(f"reconstruction {t.get('total_s', 0):.1f} s (data, training, evaluation); training time over all sessions "
                     f"{t.get('train_s', 0):.1f} s")
    if result.files:
        from meshlift.methods.spec import look_line

        lines.append(f"[bold]PLY[/bold] {result.files['ply']}   metrics {result.files['metrics']}")
        look = look_line(Path(result.files["metrics"]).parent, [
            ("images/preview_*.png", "a test view: render | target"), ("loss_curve.png", "the losses")])
        if look:
            lines.append(look)
    return lines
