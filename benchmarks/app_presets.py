"""Wall time of the web app's presets against what the page promises (run on the target machine).

Runs ``meshlift.app.jobs.reconstruct_job`` (the function the page calls; on ZeroGPU the decorated one) on
the procedural demo ring uploaded as a reference mesh (or on ``--data``, a posed dataset folder, for a method
that takes no mesh), for each preset given, and prints ``preset, device, measured s, promised s, PSNR,
F-score``. ``--method``: any method of the registry (:mod:`meshlift.methods.registry`).

    python benchmarks/app_presets.py --presets tiny quick            # CPU: promises are the cpu_s values
    python benchmarks/app_presets.py --presets tiny quick full       # GPU: promises are the gpu_s values
    python benchmarks/app_presets.py --method gaussians --data ../shared/data/nerf_synthetic_lego_half
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")


def main() -> None:
    from meshlift.methods.registry import METHODS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", nargs="+", default=["tiny", "quick"])
    ap.add_argument("--method", default=next(iter(METHODS)), choices=list(METHODS))
    ap.add_argument("--data", default=None, help="a posed dataset folder instead of the demo ring (mesh)")
    args = ap.parse_args()

    import torch

    from meshlift.app.jobs import reconstruct_job
    from meshlift.app.methods import get_method
    from meshlift.io.glb import save_glb
    from meshlift.data.demo_object import make_demo_object

    gpu = torch.cuda.is_available()
    spec = get_method(args.method)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        if args.data is None and "mesh" not in spec.inputs:
            ap.error(f"--method {args.method} takes no mesh: give --data (a posed dataset folder)")
        kind, path = ("posed", args.data) if args.data else ("mesh", str(save_glb(Path(d) / "ring.glb",
                                                                                 make_demo_object())))
        for name in args.presets:
            p = spec.preset(name)
            if p.gpu_only and not gpu:
                print(f"{name}: skipped (needs a GPU)")
                continue
            t0 = time.perf_counter()
            last = {}
            for ev in reconstruct_job(path, kind, args.method, name, str(Path(d) / name)):
                if ev["type"] in ("done", "error"):
                    last = ev
            wall = time.perf_counter() - t0
            if last.get("type") != "done":
                print(f"{name}: failed: {last.get('message')}")
                continue
            m = last["metrics"]
            fscore = m.get("fscore")
            rows.append((name, "cuda" if gpu else "cpu", wall, p.gpu_s if gpu else p.cpu_s,
                         (last.get("summary") or [""])[0], "–" if fscore is None else f"{fscore:.3f}"))
    print(f"method {args.method}")
    print("| preset | device | measured s | promised s | test metrics (the method's summary) | F-score |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.0f} | {r[4]} | {r[5]} |")


if __name__ == "__main__":
    main()
