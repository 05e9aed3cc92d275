"""Run `meshlift reconstruct` on the shared datasets and print a docs/results.md table.

Usage (GPU, full presets):   python benchmarks/reconstruct_results.py --out runs/gpu
      (CPU, quick presets):  python benchmarks/reconstruct_results.py --out runs/cpu --quick --only spot
Each run writes its asset folder under OUT/<name>; the table row uses that run's metrics.json.
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"

RUNS = {
    "spot": ("spot/spot.obj", "spot"),
    "bob": ("bob/bob_tri.obj", "bob"),
    "lego": ("nerf_synthetic_lego_half", "nerf"),
    "ehead": ("nerd_ethiopian_head", "nerd"),
}


def device_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        pass
    return f"CPU ({platform.processor() or platform.machine()})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=list(RUNS))
    ap.add_argument("--set", dest="sets", action="append", default=[])
    args = ap.parse_args()
    rows = []
    for name in args.only:
        rel, preset = RUNS[name]
        out = args.out / name
        cmd = [sys.executable, "-m", "meshlift.cli.main", "reconstruct", str(DATA / rel), "--out", str(out),
               "--preset", preset] + (["--quick"] if args.quick else [])
        for s in args.sets:
            cmd += ["--set", s]
        t0 = time.perf_counter()
        rc = subprocess.call(cmd)
        wall = time.perf_counter() - t0
        if rc != 0:
            rows.append(f"| {name} | {preset}{' --quick' if args.quick else ''} | failed (exit {rc}) |")
            continue
        m = json.loads((out / "metrics.json").read_text())
        it = m["iterations"]
        geo = (f"{m['chamfer_l1']:.4f} | {m['fscore']:.3f} ({m['threshold']:.4f})" if "fscore" in m else "– | –")
        rows.append(
            f"| {name} | {preset}{' --quick' if args.quick else ''} | {device_name()} | {wall:.0f} s | "
            f"{it['pass1']}+{it['pass2']} | {m['psnr']:.2f} / {m['ssim']:.3f} | {geo} | {out / 'images' / 'asset.png'} |"
        )
    print("| dataset | preset | device | wall time | iterations | test PSNR / SSIM | Chamfer-L1 | F-score (threshold) | image |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
