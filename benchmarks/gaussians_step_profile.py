"""Where one 3DGS training step's time goes: step ms (CUDA events), GPU-busy ms, host syncs and the top kernels.

Usage (H200)::

    python benchmarks/gaussians_step_profile.py --scene lego --warmup 600 --steps 50 --profile-steps 5

Builds the ``gaussians`` preset's trainer on a shared scene, runs ``--warmup`` unmeasured steps (Triton
compiles, the first densification), times ``--steps`` steps with CUDA events (median and mean ms per step),
then profiles ``--profile-steps`` steps with ``torch.profiler`` (CPU + CUDA activity): CUDA launches per
step, syncs per step (``torch.cuda.set_sync_debug_mode('warn')`` warnings) and the kernels by device time.
A step is host-bound when GPU-busy ms is well below step ms. Not collected by pytest; timing never goes into
a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gaussians_train import SCENES, _data_root  # noqa: E402
from reconstruct_speed import print_kernel_table  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene", default="lego", choices=sorted(SCENES))
    ap.add_argument("--warmup", type=int, default=600)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--set", nargs="*", default=[], help="extra field=value overrides")
    args = ap.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from meshlift.methods.engine import resolve_device
    from meshlift.methods.gaussians.reconstruct import build_config, load_problem
    from meshlift.methods.gaussians.trainer import GaussianTrainer

    folder, over = SCENES[args.scene]
    sets = [f"{k}={v}" for k, v in over.items()] + list(args.set) + ["device=cuda"]
    cfg = build_config(str(_data_root() / folder), None, False, None, sets)
    device = resolve_device(cfg.device)
    t = time.perf_counter()
    problem = load_problem(cfg)
    print(f"[{args.scene}] {len(problem.train)} train views loaded in {time.perf_counter() - t:.1f} s", flush=True)
    tr = GaussianTrainer(cfg, problem, device)
    print(f"[{args.scene}] {tr.init_params()}", flush=True)

    def step():
        tr.train_step()
        tr.step += 1

    t = time.perf_counter()
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    print(f"[{args.scene}] warm-up {args.warmup} steps in {time.perf_counter() - t:.1f} s, "
          f"{tr.num_gaussians:,} Gaussians", flush=True)
    ms = []
    for _ in range(args.steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    print(f"[{args.scene}] step ms over {args.steps} steps: median {statistics.median(ms):.2f}, mean "
          f"{statistics.fmean(ms):.2f} ({1000.0 / statistics.fmean(ms):.1f} steps/s) at "
          f"{tr.num_gaussians:,} Gaussians", flush=True)
    if args.profile_steps:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(args.profile_steps):
                    step()
                torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("default")
        n = args.profile_steps
        syncs = sum("synchroniz" in str(w.message) for w in rec)
        launches = sum(1 for e in prof.events() if e.name in ("cudaLaunchKernel", "cuLaunchKernel",
                                                               "cuLaunchKernelEx", "cudaLaunchKernelExC"))
        print(f"[{args.scene}] per step: {launches / n:.0f} CUDA launches, {syncs / n:.1f} syncs", flush=True)
        print_kernel_table(prof, n)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
