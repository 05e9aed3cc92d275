"""Same-run, same-scene 3DGS training: meshlift's ``gaussians`` preset against a gsplat loop (issue 29 item 2).

Both sides train **the same scene for the same steps** from **the same initial Gaussians** on **the same
tensors**, one after the other in one process, and are scored by the same code:

- data: ``meshlift.methods.gaussians.views.load_splat_problem`` once (premultiplied sRGB + alpha, OpenCV
  ``world_to_camera [C, 4, 4]`` and ``K [C, 3, 3]`` in the dataset's world frame: exactly what gsplat's
  ``viewmats`` / ``Ks`` take, so the cameras pass unchanged); the same train/test split and resolution;
- init: ``GaussianTrainer.init_params`` of the same config and seed (100k random points in the scene box for
  NeRF-synthetic lego, the SfM points for the statue), copied to both sides (meshlift quaternions are
  (w, x, y, z) like gsplat's);
- views: meshlift's seeded ``ViewSampler`` order, targets composited on the preset background (white);
- loss: ``(1 − λ) L1 + λ (1 − SSIM)``, λ = ``ssim_lambda`` (0.2), through meshlift's ``photometric_loss``
  on both sides (the fused Triton SSIM on CUDA; gsplat's trainer uses the ``fused-ssim`` package, which the
  device lacks — ``--gsplat-ssim torch`` uses the pure-PyTorch SSIM instead);
- optimisation: one Adam per tensor, eps 1e-15, the preset's learning rates, position rate log-linear from
  ``lr_means`` to ``lr_means_final`` (× scene scale) over ``steps`` (gsplat's ``ExponentialLR(0.01^(1/steps))``
  is the same curve), SH degree + 1 every ``sh_degree_interval`` steps, near plane ``near_frac × scene
  scale``;
- densification: gsplat's own ``gsplat.strategy.DefaultStrategy`` with the preset's ``densify_*`` values
  (prune_opa, grow_grad2d, grow_scale3d, prune_scale3d, refine start/stop/every, reset_every); gsplat 1.5.3
  has no Gaussian cap (meshlift's ``densify_max_gaussians`` = 6M is never reached on these scenes).
  **gsplat 1.5.3's strategy never resets opacities** (``step % reset_every == 0 & step > 0`` is always False;
  fixed upstream by gsplat PR #776, after 1.5.3; see ``_gsplat_inputs.py``): at start a probe drives the
  installed ``DefaultStrategy`` through its reset step (``strategy_resets_opacity`` in the JSON) and, with
  ``--gsplat-opacity-reset auto`` (default), the loop then resets itself at the fixed rule's steps with gsplat's
  own ``gsplat.strategy.ops.reset_opa`` (opacity clamped to 2 × prune_opa, Adam moments zeroed) — what meshlift's
  strategy does; ``on`` always, ``off`` as installed (``opacity_reset`` in the JSON);
- evaluation at each ``--eval-at`` step (and the last): the test views rendered at the training resolution
  on the evaluation background, scored by ``meshlift.methods.gaussians.evaluate.image_metrics``
  (``meshlift.metrics.image`` PSNR/SSIM, meshlift's LPIPS-Alex) for both sides.

The meshlift side is the real ``GaussianTrainer`` loop of the preset (its readback guard and in-memory
checkpoint copies every 5000 steps / 300 s included), writing no files. The gsplat side mirrors the structure
of gsplat's ``examples/simple_trainer.py`` (render → ``step_pre_backward`` → loss → backward → optimisers →
``step_post_backward``) with ``gsplat.rasterization(..., packed=False, rasterize_mode="classic")``.

Timing, per side: ``torch.cuda.synchronize()`` + wall clock from before the initialisation to each evaluation
point (evaluation time excluded and reported apart), CUDA events around every step (the first ``--warmup``
steps — Triton / CUDA compiles, first allocations — reported separately from the steady steps),
``torch.cuda.max_memory_allocated`` (peak reset between the sides), final Gaussian count, steps/s. What both
sides share (the fused SSIM kernels, the first view batch, scipy's k-NN) is compiled or loaded once before
either side starts (``shared_warmup_s`` in the JSON), so that neither wall time carries it. At start
the script checks that gsplat imports and that its kernels build and run (a tiny rasterization, forward +
backward: a JIT build happens here; its time is reported). Without gsplat the meshlift side still runs.

Output: progress lines, then markdown tables (printed last) and a JSON (``--out``; sides run by an earlier
invocation with the same ``--out`` are kept, so the sides can run in separate calls).

Usage here (CPU smoke, no gsplat needed; ``--gsplat-standin`` runs the gsplat loop with meshlift's rasterizer
in place of ``gsplat.rasterization`` to check the loop, strategy and bookkeeping — its numbers mean nothing)::

    python benchmarks/gsplat_compare.py --data ../shared/data/nerf_synthetic_lego_half --device cpu \\
        --steps 20 --only meshlift --train-res 64 --set num_random=3000 --no-lpips --out /tmp/cmp.json

The gsplat side's loop and strategy on the CPU (gsplat's python ``strategy`` package imports without CUDA; its
kernels are never built): unpack the source tarball below and put it on ``PYTHONPATH``; a short schedule with
opacity resets (``--gsplat-opacity-reset off`` for gsplat 1.5.3 as installed)::

    mkdir -p /tmp/gs && tar xzf .whl/gsplat-1.5.3-src.tar.gz -C /tmp/gs
    PYTHONPATH=src:/tmp/gs/gsplat-1.5.3 python benchmarks/gsplat_compare.py --data ../shared/data/nerf_synthetic_lego_half \
        --device cpu --steps 600 --eval-at 200,400,600 --train-res 64 --no-lpips --gsplat-standin \
        --set num_random=3000 densify_refine_start=100 densify_refine_every=50 densify_reset_every=200 \
        densify_refine_stop=500 --out /tmp/cmp600.json

On one H200 (device tool; nothing can be downloaded there). Once, here, in the repo root — the gsplat source
(v1.5.3, the version of ANCHORS.md, with its glm submodule) as a git-ignored tarball, and lego beside the
other scenes in the git-ignored ``.devrun/data``::

    # the `fetch` tool: github:nerfstudio-project/gsplat and github:g-truc/glm, then
    M=/work/.mirror; P=/tmp/gsplat-pack/gsplat-1.5.3; rm -rf /tmp/gsplat-pack; mkdir -p $P
    git -C $M/nerfstudio-project+gsplat/repo archive v1.5.3 gsplat setup.py LICENSE README.md MANIFEST.in | tar x -C $P
    git -C $M/g-truc+glm/repo archive 33b4a621a697a305bc3a7610d290677b96beb181 glm copying.txt \\
        | tar x -C $P/gsplat/cuda/csrc/third_party/glm
    mkdir -p .whl && tar czf .whl/gsplat-1.5.3-src.tar.gz -C /tmp/gsplat-pack gsplat-1.5.3
    cp -r ../shared/data/nerf_synthetic_lego_half .devrun/data/

Then device calls through ``benchmarks/gsplat_compare_gpu.sh`` (it unpacks gsplat, builds it — JIT on the
first rasterization by default, ``GSPLAT_INSTALL=pip`` for ``pip install --no-build-isolation`` — and runs
this script in its own process session, returning after ``WAIT`` seconds with whatever is finished; a run
that is still going is picked up by ``COLLECT=1`` in a call made **within 30 s** of the last one, before the
machine is given back). Each call carries ``[".whl", ".devrun/data"]``::

    WAIT=540 bash benchmarks/gsplat_compare_gpu.sh --data .devrun/data/nerf_synthetic_lego_half --out runs/cmp/lego.json
    COLLECT=1 WAIT=540 bash benchmarks/gsplat_compare_gpu.sh --out runs/cmp/lego.json   # next call, within 30 s

Lego at 400² for 30k steps: gsplat a few minutes, meshlift about 8.5 min (docs/results.md), so about 15
device minutes with the build. ``--steps 7000 --eval-at 7000`` is the cheap variant (both schedules then
compress to 7k steps). Real scenes: ``--data .devrun/data/statue_of_liberty_colmap`` (SfM init, masks) or
``.devrun/data/fox``. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gsplat_inputs import (OPACITY_RESET_MODES, decide_opacity_reset, opacity_reset_due,  # noqa: E402
                            probe_opacity_reset, strategy_kwargs)

#: short scene names accepted by ``--data`` -> folder under the shared data root
SCENES = {"lego": "nerf_synthetic_lego_half", "fox": "fox", "statue": "statue_of_liberty_colmap"}
#: gsplat's parameter names for meshlift's stored tensors (the same activations: exp, sigmoid, raw SH)
GSPLAT_NAMES = {"means": "means", "log_scales": "scales", "quats": "quats", "opacity_logits": "opacities",
                "sh0": "sh0", "shN": "shN"}
GIB = 1024 ** 3


def log(msg: str) -> None:
    print(msg, flush=True)


def resolve_data(arg: str) -> Path:
    """``arg`` as a folder, or a :data:`SCENES` name under ``$MESHLIFT_SHARED_DATA`` / shared data roots."""
    p = Path(arg)
    if p.is_dir():
        return p
    folder = SCENES.get(arg, arg)
    env = os.environ.get("MESHLIFT_SHARED_DATA")
    roots = ([Path(env)] if env else []) + [ROOT / ".devrun" / "data", ROOT / "shared" / "data",
                                            ROOT.parent / "shared" / "data"]
    for r in roots:
        if (r / folder).is_dir():
            return r / folder
    raise SystemExit(f"--data {arg}: not a folder, and {folder!r} is in none of {[str(r) for r in roots]}; "
                     "give the dataset folder")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepClock:
    """Wall clock of a whole loop (evaluations excluded) and per-step times (CUDA events on a GPU).

    ``step_done()`` after each step records an event on the current stream (no host wait); a step's time
    is the interval from the previous step's end (or the start / the end of an evaluation pause).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.intervals: list = []  # (start, end) events, or seconds on the CPU
        self.t0 = 0.0
        self.paused = 0.0
        self._cur = None
        self._tp = 0.0

    def _mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def start(self) -> None:
        sync(self.device)
        self.t0 = time.perf_counter()
        self._cur = self._mark()

    def step_done(self) -> None:
        end = self._mark()
        self.intervals.append((self._cur, end))
        self._cur = end

    def elapsed(self) -> float:
        """Seconds since :meth:`start` without the pauses (synchronises the device)."""
        sync(self.device)
        return time.perf_counter() - self.t0 - self.paused

    def pause(self) -> float:
        """Begin an excluded interval; returns the elapsed wall time up to now."""
        t = self.elapsed()
        self._tp = time.perf_counter()
        return t

    def resume(self) -> float:
        """End the excluded interval; returns its length in seconds."""
        sync(self.device)
        dt = time.perf_counter() - self._tp
        self.paused += dt
        self._cur = self._mark()
        return dt

    def step_ms(self) -> list:
        sync(self.device)
        if self.cuda:
            return [s.elapsed_time(e) for s, e in self.intervals]
        return [1000.0 * (e - s) for s, e in self.intervals]


def step_stats(ms: list, warmup: int) -> dict:
    """Warm-up and steady per-step statistics of ``ms`` (milliseconds per step)."""
    warm, steady = ms[:warmup], ms[warmup:]
    out = {"warmup_steps": len(warm), "warmup_s": sum(warm) / 1000.0, "timed_steps": len(steady)}
    if steady:
        srt = sorted(steady)
        mean = statistics.fmean(steady)
        out.update(steady_ms_mean=mean, steady_ms_median=statistics.median(steady),
                   steady_ms_p90=srt[min(len(srt) - 1, int(0.9 * len(srt)))], steady_ms_max=srt[-1],
                   steady_steps_per_s=1000.0 / mean if mean > 0 else None)
    return out


def peak_memory(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"peak_allocated_gib": None, "peak_reserved_gib": None}
    return {"peak_allocated_gib": torch.cuda.max_memory_allocated(device) / GIB,
            "peak_reserved_gib": torch.cuda.max_memory_reserved(device) / GIB}


def reset_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def eval_record(step: int, wall_s: float, n: int, metrics: dict, eval_s: float) -> dict:
    return {"step": step, "wall_s": wall_s, "gaussians": n, "psnr": metrics["psnr"], "ssim": metrics["ssim"],
            "lpips": metrics.get("lpips"), "eval_s": eval_s, "psnr_per_view": metrics.get("psnr_per_view")}


# ---- the meshlift side ---------------------------------------------------------------------------------------


def run_meshlift(cfg, problem, device: torch.device, eval_at: set, args, on_eval: Callable[[dict], None]) -> dict:
    """Train with meshlift's ``GaussianTrainer`` (the preset's loop, no files); evaluate at ``eval_at``."""
    from meshlift.methods.engine import Monitor
    from meshlift.methods.gaussians.evaluate import image_metrics, render_views
    from meshlift.methods.gaussians.trainer import GaussianTrainer, TrainCallbacks

    clock = StepClock(device)
    evals: list = []

    class Progress(Monitor):
        def start_pass(self, name, total, start=0):
            self.total = total

        def log(self, message):
            log(f"[meshlift] {message}")

    class Hooks(TrainCallbacks):
        def after_step(self, step: int, trainer: GaussianTrainer) -> None:
            clock.step_done()
            n = step + 1
            if n % max(1, cfg.steps // 10) == 0 and n not in eval_at:
                log(f"[meshlift] step {n}/{cfg.steps} {trainer.num_gaussians:,} Gaussians "
                    f"{clock.elapsed():.1f} s")
            if n not in eval_at:
                return
            wall = clock.pause()
            ours, targets = render_views(trainer.params, problem.test, sh_degree=trainer.sh_schedule(step),
                                         background=cfg.background, near=trainer.near, device=device,
                                         settings=trainer.settings, backend=cfg.splat_backend)
            m = image_metrics(ours, targets, with_lpips=cfg.lpips)
            rec = eval_record(n, wall, trainer.num_gaussians, m, clock.resume())
            evals.append(rec)
            log(f"[meshlift] step {n}: {wall:.1f} s, {rec['gaussians']:,} Gaussians, test PSNR {rec['psnr']:.2f} "
                f"SSIM {rec['ssim']:.4f} LPIPS {_f(rec['lpips'], '.4f')}")
            on_eval(rec)

    reset_memory(device)
    torch.manual_seed(cfg.seed)
    clock.start()
    # what `meshlift reconstruct --method gaussians` does at its start (inside the wall): an empty Triton cache
    # compiles the recorded variants in background processes (meshlift.kernels.precompile; issue 29)
    from meshlift.kernels import precompile

    precompile.start("gaussians", device, log=Progress().log)
    trainer = GaussianTrainer(cfg, problem, device, monitor=Progress(), callbacks=Hooks())
    saved = None
    if args.kernel:  # the compositing kernels' block settings and the binning of this side (benchmarks/_kernel_ab.py)
        import dataclasses

        from _kernel_ab import BWD_KNOBS, FWD_KNOBS, _set, parse_variants

        from meshlift.kernels import splat_triton as kt

        (fv, bv, tiles), = parse_variants([args.kernel], "--kernel")
        saved = {k: getattr(kt, k) for k in FWD_KNOBS + BWD_KNOBS}
        _set(kt, {**dict(zip(FWD_KNOBS, fv)), **dict(zip(BWD_KNOBS, bv))})
        if tiles is not None:
            trainer.settings = dataclasses.replace(trainer.settings, ellipse_tiles=tiles)
        log(f"[meshlift] kernel settings {args.kernel}: " + ", ".join(f"{k}={getattr(kt, k)}" for k in saved)
            + f", ellipse_tiles={trainer.settings.ellipse_tiles}")
    try:
        trainer.train()
    finally:
        if saved is not None:
            _set(kt, saved)
    wall = clock.elapsed()
    out = {
        "side": "meshlift",
        "steps": trainer.step,
        "train_wall_s": wall,
        "steps_per_s": trainer.step / max(wall, 1e-9),
        "final_gaussians": trainer.num_gaussians,
        "evals": evals,
        "nan_recoveries": trainer.recoveries,
        "splat_backend": cfg.splat_backend,
        "densify_max_gaussians": cfg.densify_max_gaussians if cfg.densify else None,
        "densify_history": [list(h) for h in getattr(trainer.strategy, "history", [])][-5:],
        **step_stats(clock.step_ms(), args.warmup),
        **peak_memory(device),
    }
    del trainer
    return out


# ---- the gsplat side -----------------------------------------------------------------------------------------


def _standin_rasterization(means, quats, scales, opacities, colors, viewmats, Ks, width, height, *,
                           near_plane, sh_degree, backgrounds, **_):
    """meshlift's rasterizer behind gsplat's ``rasterization`` signature and ``info`` keys (``--gsplat-standin``,
    a CPU check of the loop only)."""
    from meshlift.render.splat import SplatSettings, rasterize_gaussians

    img, alpha, info = rasterize_gaussians(means, quats, scales, opacities, colors, viewmats, Ks, width, height,
                                           near=near_plane, sh_degree=sh_degree, background=backgrounds[0],
                                           settings=SplatSettings(check_inputs=False))
    radii = info["radii"]
    if radii.ndim == 2:  # gsplat: [C, N, 2]
        radii = radii[..., None].expand(*radii.shape, 2)
    info = {"means2d": info["means2d"], "radii": radii, "width": width, "height": height,
            "n_cameras": viewmats.shape[0], "gaussian_ids": None}
    return img, alpha, info


def gsplat_check(device: torch.device) -> dict:
    """Import gsplat and run a tiny rasterization forward + backward twice (the first builds / loads the
    kernels). Never raises: ``{"ok": False, "reason": ...}`` instead."""
    out: dict = {"ok": False}
    t = time.perf_counter()
    try:
        import gsplat
    except Exception as exc:  # noqa: BLE001 - any import failure only disables the gsplat side
        out["reason"] = f"import gsplat failed ({type(exc).__name__}: {exc})"
        return out
    out.update(version=getattr(gsplat, "__version__", "?"), path=str(Path(gsplat.__file__).parent),
               import_s=time.perf_counter() - t)
    if device.type != "cuda":
        out["reason"] = f"gsplat needs CUDA; --device is {device}"
        return out
    try:
        g = torch.Generator(device="cpu").manual_seed(0)
        n = 256
        means = (torch.rand(n, 3, generator=g) - 0.5).mul(0.5).add(torch.tensor([0.0, 0.0, 2.0])).to(device)
        quats = torch.randn(n, 4, generator=g).to(device)
        scales = torch.full((n, 3), 0.02, device=device)
        opac = torch.full((n,), 0.5, device=device)
        cols = torch.rand(n, 3, generator=g).to(device).requires_grad_(True)
        means.requires_grad_(True)
        K = torch.tensor([[[40.0, 0, 32], [0, 40.0, 32], [0, 0, 1]]], device=device)
        times = []
        for _ in range(2):
            sync(device)
            t0 = time.perf_counter()
            img, _, _ = gsplat.rasterization(means, quats, scales, opac, cols, torch.eye(4, device=device)[None],
                                             K, 64, 64, packed=False)
            img.sum().backward()
            sync(device)
            times.append(time.perf_counter() - t0)
        if not torch.isfinite(img).all() or float(img.sum()) <= 0:
            out["reason"] = "tiny rasterization gave an empty or non-finite image"
            return out
        out.update(ok=True, first_call_s=times[0], second_call_ms=1000 * times[1])
    except Exception as exc:  # noqa: BLE001 - a build or kernel failure only disables the gsplat side
        msg = str(exc).strip().splitlines()
        out["reason"] = f"gsplat kernels failed ({type(exc).__name__}: {msg[-1] if msg else ''})"
    return out


def run_gsplat(cfg, problem, device: torch.device, eval_at: set, args, on_eval: Callable[[dict], None]) -> dict:
    """gsplat's ``rasterization`` + ``DefaultStrategy`` in a loop shaped like ``examples/simple_trainer.py``,
    with the preset's hyperparameters and meshlift's data, init, view order, loss and metrics."""
    from meshlift.methods.engine import ViewSampler
    from meshlift.methods.gaussians.evaluate import eval_background, image_metrics
    from meshlift.methods.gaussians.losses import photometric_loss
    from meshlift.methods.gaussians.trainer import ADAM_EPS, GaussianTrainer, background_color

    if args.gsplat_standin:
        from gsplat.strategy import DefaultStrategy
        rasterization = _standin_rasterization
    else:
        from gsplat import rasterization
        from gsplat.strategy import DefaultStrategy

    # gsplat 1.5.3's DefaultStrategy never resets opacities (see _gsplat_inputs): probed (on the CPU, before the
    # clock starts), then done in the loop with gsplat's own reset_opa at the fixed rule's steps when
    # --gsplat-opacity-reset says so
    probe = probe_opacity_reset(DefaultStrategy)
    loop_reset = cfg.densify and decide_opacity_reset(args.gsplat_opacity_reset, probe["resets"])
    clock = StepClock(device)
    evals: list = []
    reset_memory(device)
    torch.manual_seed(cfg.seed)
    clock.start()
    # the initial Gaussians, near plane, scene scale and schedules of meshlift's trainer for this config
    ref = GaussianTrainer(cfg, problem, torch.device("cpu"))
    how = ref.init_params()
    init = {k: p.detach() for k, p in ref.params.items()}
    scene_scale, near, means_lr, sh_schedule = ref.scene_scale, ref.near, ref.means_lr, ref.sh_schedule
    del ref
    log(f"[gsplat] initialised {init['means'].shape[0]:,} Gaussians from {how}; scene scale {scene_scale:.3g}")
    params = {GSPLAT_NAMES[k]: torch.nn.Parameter(v.to(device, torch.float32).contiguous()) for k, v in init.items()}
    lrs = {"scales": cfg.lr_scales, "quats": cfg.lr_quats, "opacities": cfg.lr_opacity, "sh0": cfg.lr_sh0,
           "shN": cfg.lr_shN, "means": means_lr(0)}
    fused = args.gsplat_adam == "fused" and device.type == "cuda"
    optimizers = {k: torch.optim.Adam([{"params": [p], "lr": lrs[k], "name": k}], eps=ADAM_EPS, fused=fused)
                  for k, p in params.items()}
    strategy = None
    reset_steps: list = []
    if cfg.densify:
        strategy = DefaultStrategy(**strategy_kwargs(cfg, cfg.steps))
        strategy.check_sanity(params, optimizers)
        state = strategy.initialize_state(scene_scale=scene_scale)
    if loop_reset:
        from gsplat.strategy.ops import reset_opa
    log(f"[gsplat] DefaultStrategy resets opacity: {probe['resets']}"
        + (f" ({probe['error']})" if probe.get("error") else "")
        + f"; --gsplat-opacity-reset {args.gsplat_opacity_reset}: the loop resets "
        + ("itself (gsplat.strategy.ops.reset_opa)" if loop_reset else "nothing"))
    # the training images where meshlift's trainer keeps them (data_device; auto: on the GPU when they fit)
    from meshlift.methods.data_device import resolve_data_device
    train = problem.train
    where = resolve_data_device(cfg.data_device, device, train.nbytes())
    train = train.to(where) if where.type != train.images.device.type else train
    sampler = ViewSampler(len(train), cfg.batch, cfg.seed)
    bg_gen = torch.Generator().manual_seed(cfg.seed + 1)
    fixed_bg = None if cfg.background == "random" else background_color(cfg.background, bg_gen).to(device)
    eval_bg = background_color(eval_background(cfg.background), torch.Generator()).to(device)
    H, W = problem.train.height, problem.train.width

    def render(batch, sh_degree: int, bg: torch.Tensor):
        C = batch.world_to_camera.shape[0]
        return rasterization(
            params["means"], params["quats"], torch.exp(params["scales"]), torch.sigmoid(params["opacities"]),
            torch.cat([params["sh0"], params["shN"]], 1), batch.world_to_camera, batch.K, W, H,
            near_plane=near, far_plane=1e10, sh_degree=sh_degree, packed=False, absgrad=False,
            rasterize_mode="classic", backgrounds=bg.reshape(1, 3).expand(C, 3))

    @torch.no_grad()
    def evaluate(step: int) -> None:
        wall = clock.pause()
        ours, targets = [], []
        for i in range(len(problem.test)):
            b = problem.test.batch(torch.tensor([i]), device)
            img, _, _ = render(b, sh_schedule(step - 1), eval_bg)
            ours.append(img.clamp(0, 1).cpu())
            targets.append(b.targets(eval_bg).clamp(0, 1).cpu())
        m = image_metrics(torch.cat(ours), torch.cat(targets), with_lpips=cfg.lpips)
        rec = eval_record(step, wall, int(params["means"].shape[0]), m, clock.resume())
        evals.append(rec)
        log(f"[gsplat] step {step}: {wall:.1f} s, {rec['gaussians']:,} Gaussians, test PSNR {rec['psnr']:.2f} "
            f"SSIM {rec['ssim']:.4f} LPIPS {_f(rec['lpips'], '.4f')}")
        on_eval(rec)

    for step in range(cfg.steps):
        batch = train.batch(sampler.next(), device)
        bg = fixed_bg if fixed_bg is not None else background_color("random", bg_gen).to(device)
        target = batch.targets(bg)
        img, _, info = render(batch, sh_schedule(step), bg)
        if strategy is not None:
            strategy.step_pre_backward(params, optimizers, state, step, info)
        if args.gsplat_ssim == "torch":
            from meshlift.methods.gaussians.losses import ssim_same
            loss = (1 - cfg.ssim_lambda) * (img - target).abs().mean() + cfg.ssim_lambda * (1 - ssim_same(img, target))
        else:
            loss = photometric_loss(img, target, cfg.ssim_lambda)["loss"]
        loss.backward()
        optimizers["means"].param_groups[0]["lr"] = means_lr(step)
        for opt in optimizers.values():
            opt.step()
            opt.zero_grad(set_to_none=True)
        if strategy is not None:
            strategy.step_post_backward(params, optimizers, state, step, info, packed=False)
            if loop_reset and opacity_reset_due(step, strategy.reset_every, strategy.refine_stop_iter):
                reset_opa(params=params, optimizers=optimizers, state=state, value=2.0 * strategy.prune_opa)
                reset_steps.append(step)
        clock.step_done()
        n = step + 1
        if n % max(1, cfg.steps // 10) == 0 and n not in eval_at:
            log(f"[gsplat] step {n}/{cfg.steps} loss {float(loss):.4f} {params['means'].shape[0]:,} Gaussians "
                f"{clock.elapsed():.1f} s")
        if n in eval_at:
            evaluate(n)
    wall = clock.elapsed()
    return {
        "side": "gsplat" + (" (STAND-IN: meshlift rasterizer)" if args.gsplat_standin else ""),
        "steps": cfg.steps,
        "train_wall_s": wall,
        "steps_per_s": cfg.steps / max(wall, 1e-9),
        "final_gaussians": int(params["means"].shape[0]),
        "evals": evals,
        "adam": "fused" if fused else "torch default (foreach)",
        "ssim": args.gsplat_ssim,
        "rasterization": "packed=False, classic, tile 16, eps2d 0.3",
        "strategy_resets_opacity": probe["resets"],
        "strategy_probe": probe,
        "opacity_reset": {"mode": args.gsplat_opacity_reset, "by_loop": bool(loop_reset),
                          "loop_reset_steps": reset_steps},
        "densify_max_gaussians": None,
        **step_stats(clock.step_ms(), args.warmup),
        **peak_memory(device),
    }


def warm_shared(problem, cfg, device: torch.device) -> float:
    """Compile / load what both sides share (the photometric loss's fused SSIM kernels, the view batching, the
    k-NN of the initialisation) once before either side, so that neither side's wall time carries it; returns
    the seconds it took."""
    from meshlift.methods.gaussians.init import knn_mean_distance
    from meshlift.methods.gaussians.losses import photometric_loss

    sync(device)
    t = time.perf_counter()
    knn_mean_distance(torch.rand(16, 3))  # imports scipy's KD-tree (both sides' initialisation)
    b = problem.train.batch(torch.tensor([0]), device)
    img = torch.rand_like(b.images).requires_grad_(True)
    photometric_loss(img, b.images, cfg.ssim_lambda)["loss"].backward()
    sync(device)
    return time.perf_counter() - t


# ---- output ------------------------------------------------------------------------------------------------


def _f(v, fmt: str) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def tables(result: dict) -> str:
    sides = result.get("sides", {})
    lines = ["| side | step | wall s (to step) | Gaussians | test PSNR | SSIM | LPIPS | eval s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in sides.items():
        for e in s.get("evals", []):
            lines.append(f"| {name} | {e['step']:,} | {_f(e['wall_s'], '.1f')} | {e['gaussians']:,} | "
                         f"{_f(e['psnr'], '.2f')} | {_f(e['ssim'], '.4f')} | {_f(e['lpips'], '.4f')} | "
                         f"{_f(e['eval_s'], '.1f')} |")
    lines += ["", "| side | steps | train wall s | steps/s (wall) | warm-up: steps, s | steady ms/step median "
              "(mean, p90, max) | steady steps/s | peak GPU GiB (reserved) | final Gaussians |",
              "|---|---:|---:|---:|---|---|---:|---|---:|"]
    for name, s in sides.items():
        if "train_wall_s" not in s:
            lines.append(f"| {name} | unfinished ({len(s.get('evals', []))} evaluations recorded) |||||||| ")
            continue
        lines.append(
            f"| {name} | {s['steps']:,} | {s['train_wall_s']:.1f} | {s['steps_per_s']:.1f} | "
            f"{s['warmup_steps']}, {s['warmup_s']:.2f} | {_f(s.get('steady_ms_median'), '.2f')} "
            f"({_f(s.get('steady_ms_mean'), '.2f')}, {_f(s.get('steady_ms_p90'), '.2f')}, "
            f"{_f(s.get('steady_ms_max'), '.1f')}) | {_f(s.get('steady_steps_per_s'), '.1f')} | "
            f"{_f(s.get('peak_allocated_gib'), '.2f')} ({_f(s.get('peak_reserved_gib'), '.2f')}) | "
            f"{s['final_gaussians']:,} |")
    a, b = sides.get("meshlift"), sides.get("gsplat")
    lines.append("")
    if a and b:
        eb = {e["step"]: e for e in b.get("evals", [])}
        for e in a.get("evals", []):
            o = eb.get(e["step"])
            if o and o["wall_s"] > 0:
                lines.append(f"step {e['step']:,}: meshlift / gsplat wall time {e['wall_s'] / o['wall_s']:.2f}x, "
                             f"PSNR difference {e['psnr'] - o['psnr']:+.2f} dB")
    if b and "strategy_resets_opacity" in b:
        r = b.get("opacity_reset", {})
        lines.append(f"gsplat opacity reset: DefaultStrategy resets {b['strategy_resets_opacity']}, "
                     f"--gsplat-opacity-reset {r.get('mode')}, loop resets at steps {r.get('loop_reset_steps')}")
    g = result.get("gsplat_check", {})
    lines.append("gsplat: " + (f"{g.get('version')} from {g.get('path')}, first call (build/load + run) "
                                 f"{_f(g.get('first_call_s'), '.1f')} s, second {_f(g.get('second_call_ms'), '.1f')} ms"
                                 if g.get("ok") else g.get("reason", "not checked")))
    return "\n".join(lines)


def write_json(path: Optional[Path], result: dict) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)


def _git_commit() -> Optional[str]:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or None
    except Exception:  # noqa: BLE001
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Device commands: see the module docstring and benchmarks/README.md.")
    ap.add_argument("--data", required=True,
                    help="dataset folder, or lego / fox / statue (looked up in the shared data roots)")
    ap.add_argument("--steps", type=int, default=30_000, help="steps of both sides (the preset's schedules "
                    "follow it; default 30000)")
    ap.add_argument("--eval-at", default="7000,30000",
                    help="comma-separated steps to evaluate and time at (the last step is always added)")
    ap.add_argument("--only", choices=("meshlift", "gsplat", "both"), default="both")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--train-res", type=int, default=0, help="longest image side (0 = as stored)")
    ap.add_argument("--preset", default="gaussians")
    ap.add_argument("--quick", action="store_true", help="the preset's CPU-sized --quick variant")
    ap.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                    help="extra GaussiansConfig overrides, used by both sides")
    ap.add_argument("--kernel", default=None, metavar="FS:FC/BS:BC[@box|@ellipse]",
                    help="meshlift side: the Triton compositing settings (forward _SPLIT_FWD:_CULL_FWD[:_BATCH:_WARPS] / "
                         "backward _SPLIT_BWD:_CULL_BWD[:_BATCH_BWD:_WARPS_BWD:_CULL_CHUNK], as --kernel-ab of "
                         "gaussians_loop_profile.py) and the binning (@box: whole bounding boxes, as gsplat; @ellipse: "
                         "the tiles each ellipse reaches, the default), e.g. 4:0/8:0 for the backward without band "
                         "culling")
    ap.add_argument("--warmup", type=int, default=20, help="first steps timed apart (compiles, allocations)")
    ap.add_argument("--no-lpips", action="store_true")
    ap.add_argument("--order", choices=("gsplat-first", "meshlift-first"), default="gsplat-first")
    ap.add_argument("--gsplat-adam", choices=("torch", "fused"), default="torch",
                    help="gsplat side's Adam: torch's default (as simple_trainer.py) or fused (as meshlift on CUDA)")
    ap.add_argument("--gsplat-ssim", choices=("meshlift", "torch"), default="meshlift",
                    help="gsplat side's SSIM term: meshlift's photometric_loss (fused Triton on CUDA; the same "
                    "as the meshlift side) or the pure-PyTorch ssim_same")
    ap.add_argument("--gsplat-opacity-reset", choices=OPACITY_RESET_MODES, default="auto",
                    help="the gsplat loop resets opacities itself (gsplat's reset_opa, at gsplat's reset steps): "
                    "auto = only when a probe finds the installed DefaultStrategy does not (gsplat 1.5.3's "
                    "'& step > 0' bug, fixed upstream by gsplat PR #776); on; off = as installed")
    ap.add_argument("--gsplat-standin", action="store_true",
                    help="CPU check only: the gsplat loop with meshlift's rasterizer in place of gsplat's")
    ap.add_argument("--out", type=Path, default=None, help="JSON file (sides from an earlier run are kept)")
    args = ap.parse_args(argv)
    if args.kernel:  # checked before any data loads
        from _kernel_ab import parse_variants

        parse_variants([args.kernel], "--kernel")

    from meshlift.config import config_to_dict
    from meshlift.methods.engine import resolve_device
    from meshlift.methods.gaussians.reconstruct import build_config, load_problem

    data = resolve_data(args.data)
    overrides = [f"steps={args.steps}", f"device={args.device}"] + list(args.set)
    if args.train_res:
        overrides.append(f"train_res={args.train_res}")
    if args.no_lpips:
        overrides.append("lpips=false")
    cfg = build_config(str(data), args.preset, args.quick, None, overrides)
    device = resolve_device(cfg.device)
    eval_at = {int(s) for s in args.eval_at.split(",") if s.strip()}
    eval_at = {s for s in eval_at if 0 < s <= cfg.steps} | {cfg.steps}

    result: dict = {"sides": {}}
    if args.out is not None and args.out.exists():
        try:
            old = json.loads(args.out.read_text(encoding="utf-8"))
            if old.get("config") == config_to_dict(cfg) and old.get("data") == str(data):
                result["sides"] = {k: v for k, v in old.get("sides", {}).items()}
                result["earlier"] = {k: old.get(k) for k in ("started", "commit", "gsplat_check")}
            else:
                log(f"--out {args.out}: earlier results are of another data set or config; they are replaced")
        except (OSError, ValueError) as exc:
            log(f"--out {args.out}: unreadable earlier results ignored ({exc})")
    result.update({
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "commit": _git_commit(),
        "data": str(data),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "argv": sys.argv[1:],
        "config": config_to_dict(cfg),
        "eval_at": sorted(eval_at),
    })

    gs = (result.get("earlier") or {}).get("gsplat_check") or {"ok": False, "reason": "not requested (--only meshlift)"}
    if args.only in ("gsplat", "both"):
        log("checking gsplat (import, build/load of the kernels, a tiny rasterization)...")
        gs = gsplat_check(device)
        if gs.get("ok"):
            log(f"gsplat {gs['version']} ok: first call {gs['first_call_s']:.1f} s, second "
                f"{gs['second_call_ms']:.1f} ms")
        elif args.gsplat_standin and gs.get("version"):
            log(f"gsplat side with the stand-in rasterizer ({gs['reason']})")
        else:
            log(f"gsplat side skipped: {gs['reason']}; running the meshlift side")
    result["gsplat_check"] = gs

    t = time.perf_counter()
    problem = load_problem(cfg)
    result["problem"] = {"train_views": len(problem.train), "test_views": len(problem.test),
                         "resolution": [problem.train.width, problem.train.height],
                         "sfm_points": None if problem.points is None else int(len(problem.points)),
                         "scene_scale": problem.scene_scale, "load_s": time.perf_counter() - t}
    log(f"{data.name}: {len(problem.train)} train / {len(problem.test)} test views at {problem.train.width}x"
        f"{problem.train.height}, device {result['device']}, {cfg.steps} steps, evaluation at {sorted(eval_at)}")

    result["shared_warmup_s"] = warm_shared(problem, cfg, device)
    sides = []
    if args.only in ("meshlift", "both"):
        sides.append(("meshlift", run_meshlift))
    if args.only in ("gsplat", "both") and (gs.get("ok") or (args.gsplat_standin and gs.get("version"))):
        sides.append(("gsplat", run_gsplat))
    if args.order == "gsplat-first":
        sides.sort(key=lambda s: s[0] != "gsplat")
    for name, fn in sides:
        log(f"=== {name} ===")
        partial = result["sides"][name] = {"side": name, "evals": [], "started": time.strftime("%H:%M:%S")}

        def on_eval(rec, partial=partial):
            partial["evals"] = partial["evals"] + [rec]
            write_json(args.out, result)

        try:
            result["sides"][name] = fn(cfg, problem, device, eval_at, args, on_eval)
        except Exception as exc:  # noqa: BLE001 - report the failure, keep the other side's results
            partial["error"] = f"{type(exc).__name__}: {exc}"
            log(f"[{name}] failed: {partial['error']}")
        write_json(args.out, result)
        reset_memory(device)
    print("\n" + tables(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
