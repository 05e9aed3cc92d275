"""Per-step launch and host-sync counts of the ``gaussians`` training step on the CPU, as the CUDA path makes them
(issue 29): Triton launches (counted at the interpreter's launch), torch ops that launch a kernel on CUDA
(dispatched aten ops, outside the Triton launches, that are neither views nor metadata:
``reconstruct_speed.NO_KERNEL_OPS``), host syncs (``reconstruct_speed.SYNC_OPS``: ``.item()``, ``nonzero``...).

Usage (repository root, no GPU; the Triton path runs in the interpreter, so small sizes)::

    OMP_NUM_THREADS=1 TRITON_INTERPRET=1 python benchmarks/gaussians_step_counts.py [--before]

Steps ``--start-step`` + 1 .. + 3 (SH degree 1; density statistics every step, no refinement step in the
window), the Triton splat backend and the fused SSIM (the CUDA choices), the one-launch Adam and density
statistics unless ``--before`` (then torch's six ``Adam.step`` — on CUDA each is torch's fused kernel plus a
step-counter increment, 12 launches, which the CPU's single-tensor Adam counts as more ops — and the torch
statistics). Counts do not depend on the image size or Gaussian count.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "nerf_synthetic_lego_half"))
    ap.add_argument("--train-res", type=int, default=32)
    ap.add_argument("--num-random", type=int, default=500)
    ap.add_argument("--start-step", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--before", action="store_true",
                    help="torch's six Adam steps and the torch density statistics (the code before issue 29's fusions)")
    a = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        raise SystemExit("run with TRITON_INTERPRET=1")
    from torch.utils._python_dispatch import TorchDispatchMode
    from triton.runtime.interpreter import InterpretedFunction

    import meshlift.methods.gaussians.trainer as T
    from _cuda_choices import cpu_trainer_with_cuda_choices
    from reconstruct_speed import NO_KERNEL_OPS, SYNC_OPS

    tr = cpu_trainer_with_cuda_choices(a.data, train_res=a.train_res, num_random=a.num_random, fused=not a.before,
                                       readback_every=20)
    cfg = tr.cfg
    tr.init_params()
    tr.step = a.start_step
    ck = tr.payload()
    tr.cfg = dataclasses.replace(cfg, steps=a.start_step + 1 + a.steps)

    counts = collections.Counter()
    state = {"in_triton": 0, "on": False}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if state["on"] and not state["in_triton"]:
                name = "aten::" + func._schema.name.split("::")[-1]
                if name in SYNC_OPS:
                    counts["sync " + name[6:]] += 1
                if name not in NO_KERNEL_OPS and "record_function" not in name:  # profiler markers: no kernel
                    counts["torch ops"] += 1
                    if state.get("opt"):
                        counts["torch ops in the optimizer step"] += 1
                    counts["op " + name[6:]] += 1
            return func(*args, **(kwargs or {}))

    orig_run = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kw):
        if state["on"]:
            counts["triton launches"] += 1
            counts["kernel " + self.fn.__name__] += 1
        state["in_triton"] += 1
        try:
            return orig_run(self, *args, grid=grid, warmup=warmup, **kw)
        finally:
            state["in_triton"] -= 1

    InterpretedFunction.run = run

    class CB(T.TrainCallbacks):
        def after_step(self, step, trainer):
            # the first step (lazy Adam state) and what follows the last are not counted
            state["on"] = a.start_step <= step < a.start_step + a.steps  # counts steps start+1 .. start+steps

    tr.callbacks = CB()
    opt_step = tr._optimizer_step

    def counted_opt_step(s):
        state["opt"] = True
        try:
            return opt_step(s)
        finally:
            state["opt"] = False

    tr._optimizer_step = counted_opt_step
    with Count():
        tr.train(checkpoint=ck)
    n = a.steps
    print(f"# per step ({n} steps from {a.start_step + 1} to {a.start_step + n}, {'before: torch Adam and statistics' if a.before else 'one-launch Adam and statistics'}, "
          f"{tr.num_gaussians} Gaussians, {a.train_res}px; loaded machine, counts only)")
    for k in ("triton launches", "torch ops", "torch ops in the optimizer step"):
        print(f"{k}: {counts[k] / n:g}")
    syncs = {k: v / n for k, v in counts.items() if k.startswith("sync ")}
    print(f"host syncs: {sum(syncs.values()):g} {syncs}")
    print("triton: " + ", ".join(f"{k[7:]} {v / n:g}" for k, v in sorted(counts.items()) if k.startswith("kernel ")))
    print("torch: " + ", ".join(f"{k[3:]} {v / n:g}" for k, v in counts.most_common() if k.startswith("op ")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
