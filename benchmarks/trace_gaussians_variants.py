"""Trace the Triton kernel variants of the ``gaussians`` training loop on the CPU (Triton interpreter) and write
them as launch descriptors (``meshlift.kernels.variant_trace``), for the start-up warm-up's list (issue 29).

Usage (repository root; no GPU)::

    TRITON_INTERPRET=1 python benchmarks/trace_gaussians_variants.py --out /tmp/gs_trace.jsonl
    # rows with the GPU machine's Triton (3.6.0 there: a wheel unpacked on PYTHONPATH; no GPU needed)
    PYTHONPATH=/tmp/tr36:src python -m meshlift.kernels.variant_trace rows /tmp/gs_trace.jsonl --job gaussians \\
        --out /tmp/gs_rec.jsonl
    python benchmarks/record_kernel_variants.py --merge /tmp/gs_rec.jsonl

The loop runs at ``--train-res`` 48 by default: the integers the kernels specialise on keep the divisibility
classes of lego's 400² (48 and 400 ≡ 0 mod 16; 3 and 25 tiles per row neither 0 mod 16 nor 1; 3·48² and 3·400²
≡ 0 mod 16), so the keys are those of the 400² run at a small fraction of the interpreter's time. SH degrees 0..3 in four steps (``sh_degree_interval``
1), densification on from step 1 (its torch ops compile nothing; it changes the count between launches), the
Triton splat backend, the fused SSIM, the one-launch Adam and the fused density statistics forced as on CUDA.
"""

from __future__ import annotations

import argparse
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
    ap.add_argument("--train-res", type=int, default=48)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--num-random", type=int, default=300)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        raise SystemExit("run with TRITON_INTERPRET=1")

    from _cuda_choices import cpu_trainer_with_cuda_choices

    from meshlift.kernels import variant_trace

    trainer = cpu_trainer_with_cuda_choices(a.data, train_res=a.train_res, num_random=a.num_random, steps=a.steps,
                                            sh_degree_interval=1, densify_refine_start=1, densify_refine_every=2,
                                            densify_reset_every=3)
    with variant_trace.trace() as launches:
        trainer.train()
    n = variant_trace.save(launches, a.out)
    print(f"{len(launches)} launches, {n} distinct -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
