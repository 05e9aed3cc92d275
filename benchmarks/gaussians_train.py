"""3DGS training on the shared scenes: steps/s, Gaussian count, test PSNR/SSIM/LPIPS and wall time.

Usage (H200, one scene per command to stay under the 10-minute command limit)::

    python benchmarks/gaussians_train.py --scenes lego   --out runs/gs     # 30k steps, budget 480 s
    python benchmarks/gaussians_train.py --scenes fox    --out runs/gs --budget 420
    python benchmarks/gaussians_train.py --scenes statue --out runs/gs --budget 420
    python benchmarks/gaussians_train.py --scenes lego --quick --out runs/cpu   # the CPU --quick preset

Each scene runs ``meshlift.methods.gaussians.reconstruct`` with the ``gaussians`` preset (``--quick``: its
CPU variant) under ``--budget`` seconds (training stops at 90% of it; the learning-rate schedules still
follow the configured 30k steps), writes its run folder under OUT/<scene>, prints one line per 10% of the
steps and a markdown table row per scene (also appended to OUT/results.md). Targets (issue 10): lego
≥ 32 dB test PSNR in ≤ 8 min on one H200. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

#: scene -> (dataset folder under the shared data root, config overrides)
SCENES = {
    "lego": ("nerf_synthetic_lego_half", {}),
    "fox": ("fox", {}),
    "statue": ("statue_of_liberty_colmap", {}),
}


def _data_root() -> Path:
    env = os.environ.get("MESHLIFT_SHARED_DATA")
    for p in ([Path(env)] if env else []) + [ROOT / "shared" / "data", ROOT.parent / "shared" / "data"]:
        if p.is_dir():
            return p
    raise SystemExit("shared data not found: set MESHLIFT_SHARED_DATA")


class PrintMonitor:
    """Plain progress lines (every 10% of the steps) with steps/s and the Gaussian count."""

    def __init__(self, name: str) -> None:
        self.name = name

    def start_pass(self, name, total, start=0):
        self.total, self.start, self.t0 = total, start, time.perf_counter()
        print(f"[{self.name}] {name}: {total} steps" + (f" from {start}" if start else ""), flush=True)

    def update(self, iteration, loss, psnr):
        if iteration % max(1, self.total // 10) == 0:
            dt = time.perf_counter() - self.t0
            print(f"[{self.name}] {iteration}/{self.total} loss {loss:.4f} train PSNR {psnr:.2f} dB "
                  f"{(iteration - self.start) / max(dt, 1e-9):.1f} steps/s {dt:.0f} s", flush=True)

    def end_pass(self):
        pass

    def log(self, message):
        print(f"[{self.name}] {message}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", nargs="+", default=["lego"], choices=sorted(SCENES))
    ap.add_argument("--out", type=Path, default=Path("runs/gaussians"))
    ap.add_argument("--budget", type=float, default=480.0, help="seconds per scene (0 = none)")
    ap.add_argument("--quick", action="store_true", help="the CPU --quick preset")
    ap.add_argument("--set", nargs="*", default=[], help="extra field=value overrides")
    args = ap.parse_args(argv)

    import torch

    from meshlift.methods.gaussians.reconstruct import build_config, reconstruct

    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    rows = []
    for name in args.scenes:
        folder, extra = SCENES[name]
        overrides = [f"{k}={v}" for k, v in extra.items()] + [f"time_budget_s={args.budget}"] + list(args.set)
        cfg = build_config(str(_data_root() / folder), "gaussians", args.quick, None, overrides)
        t0 = time.perf_counter()
        res = reconstruct(cfg, args.out / name, overwrite=True, monitor=PrintMonitor(name))
        wall = time.perf_counter() - t0
        m = res.metrics
        lp = m.get("lpips")
        row = (f"| {name} | {dev} | {m['steps']}/{m['steps_configured']} | {m['steps_per_s']:.1f} | {m['gaussians']:,} "
               f"| {m['psnr']:.2f} | {m['ssim']:.4f} | {'n/a' if lp is None else f'{lp:.4f}'} "
               f"| {m['timings'].get('train_s', 0):.0f} | {wall:.0f} | {m['resolution'][0]}x{m['resolution'][1]} "
               f"| {m['test_views']} on {m['background']} |")
        rows.append(row)
        print(row, flush=True)
    header = ("| scene | device | steps run/configured | steps/s | Gaussians | test PSNR | SSIM | LPIPS | train s "
              "| wall s | resolution | test views |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(header)
    print("\n".join(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "results.md", "a", encoding="utf-8") as fh:
        fh.write(header + "\n" + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
