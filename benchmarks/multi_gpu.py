"""Multi-GPU scaling of the Gaussian method: steps/s and test PSNR on 1 and N GPUs, scaling efficiency.

Usage (a machine with >= 2 GPUs; one scene per command to stay under a 10-minute command limit)::

    python benchmarks/multi_gpu.py --scenes lego   --gpus 1 2 --steps 3000 --batch 4 --out runs/mgpu
    python benchmarks/multi_gpu.py --scenes statue --gpus 1 2 --steps 3000 --batch 4 --out runs/mgpu
    python benchmarks/multi_gpu.py --scenes lego --gpus 1 2 --cpu --out runs/mgpu_cpu   # smoke test: gloo, tiny preset
    python benchmarks/multi_gpu.py --scenes lego --gpus 1 2 --dry-run                   # print the commands only

Every run is ``torchrun --standalone --nproc_per_node G -m meshlift.cli.main reconstruct DATA --method
gaussians ...`` (also for G = 1, so both sides pay the same launcher), with the **same global batch**
(``--batch`` views per step over all GPUs; each GPU renders ``batch / G``) and the same ``--steps``, so the
runs optimise the same objective (docs/usage/multi_gpu.md) and the PSNRs should agree within noise. From each
run's ``metrics.json``: ``steps_per_s`` (training steps / training seconds of rank 0, which waits for the
slowest rank at every all-reduce) and the test ``psnr``. Speed-up = steps/s(G) / steps/s(first count, 1 in
the usual call); scaling efficiency = speed-up / (G / first count). Prints a markdown table (also appended to OUT/results.md) for docs/benchmarks.md.
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: scene -> dataset folder under the shared data root
SCENES = {"lego": "nerf_synthetic_lego_half", "statue": "statue_of_liberty_colmap"}


def _data_root() -> Path:
    env = os.environ.get("MESHLIFT_SHARED_DATA")
    for p in ([Path(env)] if env else []) + [ROOT / "shared" / "data", ROOT.parent / "shared" / "data"]:
        if p.is_dir():
            return p
    raise SystemExit("shared data not found: set MESHLIFT_SHARED_DATA")


def command(scene_dir: Path, out: Path, gpus: int, args) -> list[str]:
    """The torchrun command of one run."""
    sets = [f"steps={args.steps}", f"batch={args.batch}", "preview_every=0", "checkpoint_every_s=0",
            "data_device=cpu"]
    preset = ["--preset", "gaussians"]
    if args.cpu:
        preset = ["--preset", "gaussians_tiny"]
        sets += ["device=cpu"]
    else:
        sets += ["device=cuda"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus),
           "-m", "meshlift.cli.main", "reconstruct", str(scene_dir), "--method", "gaussians", *preset,
           "--out", str(out), "--overwrite"]
    for s in sets + list(args.set or []):
        cmd += ["--set", s]
    return cmd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenes", nargs="+", default=["lego"], choices=sorted(SCENES))
    ap.add_argument("--gpus", nargs="+", type=int, default=[1, 2], help="GPU counts to run (first = baseline)")
    ap.add_argument("--steps", type=int, default=3000, help="training steps of every run")
    ap.add_argument("--batch", type=int, default=4, help="global batch (views per step over all GPUs)")
    ap.add_argument("--out", type=Path, default=Path("runs/multi_gpu"))
    ap.add_argument("--set", action="append", help="extra config override field=value (every run)")
    ap.add_argument("--cpu", action="store_true", help="CPU ranks on gloo with the tiny preset (smoke test)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands and stop")
    args = ap.parse_args()
    if args.cpu and args.steps == 3000:
        args.steps = 20
    if any(args.batch < g for g in args.gpus):
        raise SystemExit(f"--batch {args.batch} must be >= every GPU count {args.gpus} (one view per GPU at least)")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    rows = []
    for scene in args.scenes:
        data = _data_root() / SCENES[scene]
        base = None
        for g in args.gpus:
            out = args.out / f"{scene}_g{g}"
            cmd = command(data, out, g, args)
            print("$ " + " ".join(cmd), flush=True)
            if args.dry_run:
                continue
            t0 = time.perf_counter()
            rc = subprocess.run(cmd, env=env, check=False).returncode
            wall = time.perf_counter() - t0
            if rc != 0:
                print(f"[{scene} x{g}] failed with exit status {rc}", flush=True)
                rows.append((scene, g, None, None, None, wall))
                continue
            m = json.loads((out / "metrics.json").read_text())
            sps, psnr = float(m["steps_per_s"]), float(m["psnr"])
            base = sps if base is None else base
            rows.append((scene, g, sps, psnr, m.get("gaussians"), wall))
            print(f"[{scene} x{g}] {sps:.2f} steps/s, test PSNR {psnr:.2f} dB, {m.get('gaussians')} Gaussians, "
                  f"wall {wall:.0f} s", flush=True)
    if args.dry_run:
        return
    lines = [f"| scene | GPUs | global batch | steps | steps/s | speed-up | scaling efficiency | test PSNR (dB) | "
             "Gaussians | wall (s) |", "|---|---|---|---|---|---|---|---|---|---|"]
    baseline: dict = {}
    for scene, g, sps, psnr, n, wall in rows:
        if sps is None:
            lines.append(f"| {scene} | {g} | {args.batch} | {args.steps} | failed | | | | | {wall:.0f} |")
            continue
        baseline.setdefault(scene, (g, sps))
        g0, s0 = baseline[scene]  # the first GPU count run (1 in the usual call)
        speedup = sps / s0
        lines.append(f"| {scene} | {g} | {args.batch} | {args.steps} | {sps:.2f} | {speedup:.2f}x | "
                     f"{speedup / (g / g0):.0%} | {psnr:.2f} | {n} | {wall:.0f} |")
    table = "\n".join(lines)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "results.md", "a", encoding="utf-8") as fh:
        fh.write(table + "\n\n")


if __name__ == "__main__":
    main()
