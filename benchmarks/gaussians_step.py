"""Per-stage cost of one 3DGS training step, steps/s, and the aten ops / host syncs / CUDA launches per step.

Usage (from the repository root)::

    python benchmarks/gaussians_step.py --device cuda                               # lego 400², 100k random
    python benchmarks/gaussians_step.py --device cuda --start-step 7000 --set num_random=300000
    python benchmarks/gaussians_step.py --device cuda --from-checkpoint runs/gs/lego/checkpoint.pt  # trained scene
    python benchmarks/gaussians_step.py --device cpu --train-res 48 --set num_random=2000 --steps 4 --warmup 2

It builds the ``gaussians`` preset on the shared lego (``--data`` for another folder), starts a
:class:`~meshlift.methods.gaussians.trainer.GaussianTrainer` at ``--start-step`` (the learning rates, SH
degree and strategy schedule of that step; densification off unless ``--densify``, so the Gaussian count
stays ``num_random``) and runs ``--warmup`` (not measured: Triton compiles) + ``--steps`` (timed) +
``--profile-steps`` (``torch.profiler``: op, sync and launch counts) steps of the real loop.

Stages (CUDA events on the GPU, ``perf_counter`` on the CPU; exclusive of nested stages, as
``benchmarks/reconstruct_speed.py``): ``views`` (batch to the device, targets), ``render``
(``rasterize_gaussians`` of the activated parameters), ``loss`` (L1 + SSIM), ``backward``, ``optimizer``
(the six Adam steps), ``strategy`` (density-control statistics), ``bookkeeping`` (``TrainLoop._bookkeeping`` of
``methods.loop``: read-back, guard, history), ``other`` (the rest of the step: timing not covered by a stage). Counts use
:func:`reconstruct_speed.count_ops` (``syncs``: ``.item()``, ``nonzero``, ... read-backs; on CUDA also
``syncs (cuda)``, what ``torch.cuda.set_sync_debug_mode`` reports, which includes copies from pageable
memory). Timing on a shared CPU is unreliable: compare counts there, times on a quiet GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from reconstruct_speed import PhaseMonitor, StageClock, count_ops  # noqa: E402

STAGES = ("views", "render", "loss", "backward", "optimizer", "strategy", "bookkeeping")


def _data_root() -> Path:
    env = os.environ.get("MESHLIFT_SHARED_DATA")
    for p in ([Path(env)] if env else []) + [ROOT / "shared" / "data", ROOT.parent / "shared" / "data"]:
        if p.is_dir():
            return p
    raise SystemExit("shared data not found: set MESHLIFT_SHARED_DATA or pass --data")


class _Patches:
    """Wraps the loop's functions in clock stages; undone on exit."""

    def __init__(self, clock: StageClock) -> None:
        self.clock, self.undo = clock, []

    def wrap(self, obj, attr: str, stage: str) -> None:
        fn = getattr(obj, attr)
        clock = self.clock

        def wrapped(*a, **k):
            with clock(stage):
                return fn(*a, **k)

        had = attr in getattr(obj, "__dict__", {})
        setattr(obj, attr, wrapped)
        self.undo.append((obj, attr, fn, had))

    def close(self) -> None:
        for obj, attr, fn, had in reversed(self.undo):
            if had or isinstance(obj, type) or hasattr(obj, "__file__"):
                setattr(obj, attr, fn)
            else:
                delattr(obj, attr)


def _wrap_bookkeeping(p, T) -> None:
    """The loop's per-step bookkeeping: ``methods.loop.TrainLoop._bookkeeping`` (``end_step`` of the trainer
    module in trees before the loop was one class)."""
    try:
        from meshlift.methods.loop import TrainLoop
    except ImportError:
        p.wrap(T, "end_step", "bookkeeping")
    else:
        p.wrap(TrainLoop, "_bookkeeping", "bookkeeping")


@contextlib.contextmanager
def instrument(trainer, clock: StageClock):
    import meshlift.methods.gaussians.losses as L
    import meshlift.methods.gaussians.trainer as T

    p = _Patches(clock)
    p.wrap(trainer.problem.train, "batch", "views")  # first stage of a step: the step boundary
    p.wrap(T, "render_params", "render")
    p.wrap(L, "photometric_loss", "loss")
    p.wrap(torch.Tensor, "backward", "backward")
    if hasattr(type(trainer), "_optimizer_step"):  # the six Adam steps (one Triton launch on CUDA)
        p.wrap(trainer, "_optimizer_step", "optimizer")
    else:
        p.wrap(torch.optim.Adam, "step", "optimizer")
    if trainer.strategy is not None:
        p.wrap(trainer.strategy, "step_post_backward", "strategy")
    _wrap_bookkeeping(p, T)
    try:
        yield
    finally:
        p.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="dataset folder (default: the shared lego)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--train-res", type=int, default=0, help="longest image side (0: as stored, lego 400)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--start-step", type=int, default=1000, help="schedules (SH degree, lr) of this step")
    ap.add_argument("--densify", action="store_true", help="keep density control on (the count then changes)")
    ap.add_argument("--from-checkpoint", type=Path, default=None,
                    help="start from a gaussians run's checkpoint.pt (its step, Gaussians and optimiser state: "
                         "the step's cost at a trained scene's intersection counts) instead of random points")
    ap.add_argument("--set", nargs="*", default=[], help="extra GaussiansConfig field=value overrides")
    args = ap.parse_args(argv)

    from meshlift.methods.gaussians.config import apply_dict, parse_overrides
    from meshlift.methods.gaussians.reconstruct import build_config, load_problem
    from meshlift.methods.gaussians.trainer import GaussianTrainer

    try:
        from meshlift.methods.gaussians.trainer import CUDA_READBACK_EVERY
        from meshlift.methods.loop import readback_every as _rule

        def readback_every(cfg, device):
            return _rule(cfg.readback_every, device, CUDA_READBACK_EVERY)
    except ImportError:
        try:  # a tree before the one loop class: the trainer's own rule
            from meshlift.methods.gaussians.trainer import readback_every
        except ImportError:  # a tree before deferred read-backs ("before" counts): every step
            def readback_every(cfg, device):
                return 1

    data = args.data or str(_data_root() / "nerf_synthetic_lego_half")
    cfg = build_config(data, "gaussians", False, None, [])
    n_run = args.warmup + args.steps + args.profile_steps + 1
    over = {"device": args.device, "train_res": args.train_res, "preview_every": 0, "checkpoint_every": 0,
            "checkpoint_every_s": 0.0, "lpips": False}
    cfg = apply_dict(dataclasses.replace(cfg, **over), parse_overrides(list(args.set)))
    if not args.densify:
        cfg = dataclasses.replace(cfg, densify=False)
    device = torch.device(args.device)
    problem = load_problem(cfg)
    trainer = GaussianTrainer(cfg, problem, device)
    if args.from_checkpoint is not None:
        ck = torch.load(args.from_checkpoint, map_location="cpu", weights_only=False)
        start = int(ck["step"])
        trainer.load_payload(ck)
    else:
        trainer.init_params()
        trainer.step = start = args.start_step
        ck = trainer.payload()
    # run n_run steps from the start step: the loop's total is cfg.steps, so stop it with the step count
    trainer.cfg = dataclasses.replace(cfg, steps=max(cfg.steps, start + n_run))
    stop_at = start + n_run

    clock = StageClock(device)
    mon = PhaseMonitor(clock, device, args.warmup, args.steps, args.profile_steps)
    trainer.monitor = mon

    class _Stop(Exception):
        pass

    def after_step(s, tr):
        if s + 1 >= stop_at:
            raise _Stop

    trainer.callbacks.after_step = after_step
    # one event per step boundary of the timed window: the distribution of step times (outliers = compiles,
    # densification, checkpoints)
    marks: list = []
    boundary = mon.step_boundary

    def step_boundary():
        boundary()
        if clock.armed or (mon.n - 1 == args.warmup + args.steps):
            marks.append(clock._mark())

    mon.step_boundary = step_boundary
    print(f"# gaussians_step: {data} {problem.train.width}x{problem.train.height}, {trainer.num_gaussians:,} "
          f"Gaussians, device {device}, backend {cfg.splat_backend}, readback every "
          f"{readback_every(cfg, device)}, start step {start} (SH degree "
          f"{trainer.sh_schedule(start)}), densify {'on' if cfg.densify else 'off'}", flush=True)
    t0 = time.perf_counter()
    with instrument(trainer, clock):
        try:
            trainer.train(checkpoint=ck)
        except _Stop:
            pass
    if mon.prof is not None and clock.profiling:
        mon._end_profile()
    if device.type == "cuda":
        torch.cuda.synchronize()
    per, covered = clock.per_stage_ms()
    wall_ms = 1e3 * mon.wall_s / max(1, args.steps) if mon.wall_s else float("nan")
    print(f"# {args.steps} timed steps: {wall_ms:.3f} ms/step = {1e3 / wall_ms:.1f} steps/s "
          f"(total {time.perf_counter() - t0:.1f} s with warm-up and profile)")
    if len(marks) > 1:
        dts = sorted(marks[i].elapsed_time(marks[i + 1]) if device.type == "cuda" else 1e3 * (marks[i + 1] - marks[i])
                     for i in range(len(marks) - 1))
        print(f"# step ms: median {dts[len(dts) // 2]:.3f}, mean {sum(dts) / len(dts):.3f}, p90 "
              f"{dts[int(0.9 * (len(dts) - 1))]:.3f}, max {dts[-1]:.3f} ({len(dts)} steps)")
    print("| stage | ms/step |\n|---|---:|")
    for k in STAGES:
        print(f"| {k} | {per.get(k, 0.0):.3f} |")
    print(f"| other | {wall_ms - covered:.3f} |\n| **step** | **{wall_ms:.3f}** |")
    if mon.prof is not None:
        c = count_ops(mon.prof, args.profile_steps)
        print(f"# per step: aten ops {c['aten_ops']:.0f}, kernel ops {c['kernel_ops']:.0f}, CUDA launches "
              f"{c['launches']:.0f}, syncs {c['syncs']:.2f} "
              f"({', '.join(f'{k[6:]} {v:g}' for k, v in sorted(c['sync_ops'].items()))}), syncs (cuda) "
              f"{mon.sync_warnings / max(1, args.profile_steps):.2f}")
        print("# kernel ops by stage: " + ", ".join(f"{k} {v:g}" for k, v in
                                                     sorted(c["kernel_ops_by_stage"].items(), key=lambda x: -x[1])))
        print("# syncs by stage: " + (", ".join(f"{k} {v:g}" for k, v in c["syncs_by_stage"].items()) or "none"))
        print("# top kernel ops: " + ", ".join(f"{k[6:]} {v:g}" for k, v in c["top"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
