"""Run ``meshlift reconstruct --method milo`` on the shared data and print the docs/results.md tables.

Known truth (views rendered from the mesh; F-score at 1% of the gt bounding-box diagonal, target >= 0.97,
Chamfer-L1 in the normalised frame of the mesh, longest side 2): spot, bob, bunny.
Real captures (mesh render PSNR / SSIM / LPIPS on the test views, Gaussian PSNR beside it): statue, fox.
Every row also has vertex / face counts, wall time and peak GPU memory (from each run's metrics.json).

GPU (one H200):   python benchmarks/milo_results.py --out runs/milo --preset verylowres
                  python benchmarks/milo_results.py --out runs/milo_lowres --preset lowres --only spot statue
CPU smoke:        python benchmarks/milo_results.py --out /tmp/milo_cpu --quick --only spot
Each run writes OUT/<case>/ (GLB, OBJ, PLY, renders, metrics.json); a table and OUT/milo_results.json are
written at the end. ``--surface-results DIR`` adds the surface method's F-score / Chamfer read from
DIR/<case>/metrics.json (benchmarks/reconstruct_results.py output) beside MILo's. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MESHLIFT_SHARED_DATA", ROOT.parent / "shared" / "data"))

#: case -> (path under DATA, kind, extra --set values)
CASES = {
    "spot": ("spot/spot.obj", "truth", ["ref_views=100", "train_res=512"]),
    "bob": ("bob/bob_tri.obj", "truth", ["ref_views=100", "train_res=512"]),
    "bunny": ("classic_meshes/stanford-bunny.obj", "truth", ["ref_views=100", "train_res=512"]),
    # the same objects in an unmasked synthetic capture (floor + environment, no masks; F-score in the object's box)
    "spot_ground": ("spot/spot.obj", "truth", ["ref_views=100", "train_res=512", "ref_scene=ground"]),
    "bob_ground": ("bob/bob_tri.obj", "truth", ["ref_views=100", "train_res=512", "ref_scene=ground"]),
    "bunny_ground": ("classic_meshes/stanford-bunny.obj", "truth", ["ref_views=100", "train_res=512",
                                                                   "ref_scene=ground"]),
    "statue": ("statue_of_liberty_colmap", "real", ["max_test_views=5"]),
    "fox": ("fox", "real", ["max_test_views=5", "imp_metric=indoor"]),
}


def device_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        pass
    return f"CPU ({platform.processor() or platform.machine()})"


def _fmt(x, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def _result(out: Path, kind: str, rc: int, wall: float) -> dict:
    m = {}
    if rc == 0 and (out / "metrics.json").is_file():
        m = json.loads((out / "metrics.json").read_text())
    return {"kind": kind, "rc": rc, "wall_s": wall, "metrics": m}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--preset", default="verylowres", choices=["verylowres", "lowres", "default"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=list(CASES),
                    help="cases to run; CASE@LABEL:key=value,... is a variant of CASE with those --set values")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--surface-results", type=Path, default=None)
    ap.add_argument("--schedule-scale", type=float, default=1.0,
                    help="run MILo's schedule in this fraction of its steps (every step field scaled together)")
    ap.add_argument("--parallel", action="store_true",
                    help="run the cases at once (one process each, logs in OUT/<case>.log): quality, not speed")
    args = ap.parse_args()
    results = {}
    procs = {}
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        # a variant of a case: CASE@LABEL:key=value,key=value runs CASE with those --set values as OUT/CASE@LABEL
        base_name, _, variant = name.partition("@")
        rel, kind, extra = CASES[base_name]
        extra = extra + ([kv for kv in variant.partition(":")[2].split(",") if kv] if variant else [])
        name = base_name + ("@" + variant.partition(":")[0] if variant else "")
        out = args.out / name
        cmd = [sys.executable, "-m", "meshlift.cli.main", "reconstruct", str(DATA / rel), "--method", "milo",
               "--preset", args.preset, "--out", str(out), "--overwrite"] + (["--quick"] if args.quick else [])
        sched = []
        if args.schedule_scale != 1.0:
            from meshlift.methods.milo.presets import get_preset, scale_schedule

            base = get_preset(args.preset, quick=args.quick)
            sched = [f"{k}={v}" for k, v in scale_schedule(base, args.schedule_scale).items()]
        for s in sched + (extra if not args.quick else []) + args.sets:
            cmd += ["--set", s]
        print("$", " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        if args.parallel:
            log = open(args.out / f"{name}.log", "w")
            procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), t0, out, kind, log)
            continue
        rc = subprocess.call(cmd)
        results[name] = _result(out, kind, rc, time.perf_counter() - t0)
    for name, (p, t0, out, kind, log) in procs.items():
        rc = p.wait()
        log.close()
        results[name] = _result(out, kind, rc, time.perf_counter() - t0)
    (args.out / "milo_results.json").write_text(json.dumps(results, indent=1, default=str))

    pre = args.preset + (" --quick" if args.quick else "")
    print(f"\n### MILo ({pre}) on {device_name()}\n")
    print("| case | F-score @1% | Chamfer-L1 | surface method F / CD | mesh PSNR | Gaussian PSNR | verts | faces "
          "| wall (s) | peak GPU (GB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        m = r["metrics"]
        if r["rc"] != 0 or not m:
            print(f"| {name} | failed (exit {r['rc']}) | | | | | | | {r['wall_s']:.0f} | |")
            continue
        surf = "–"
        if args.surface_results is not None and (args.surface_results / name / "metrics.json").is_file():
            s = json.loads((args.surface_results / name / "metrics.json").read_text())
            surf = f"{_fmt(s.get('fscore'), '.4f')} / {_fmt(s.get('chamfer_l1'), '.5f')}"
        print(f"| {name} | {_fmt(m.get('fscore'), '.4f')} | {_fmt(m.get('chamfer_l1'), '.5f')} | {surf} | "
              f"{_fmt(m.get('mesh_psnr'), '.2f')}" + (f" ({_fmt(m.get('mesh_psnr_unrefined'), '.2f')} unrefined)"
                                                       if m.get("mesh_psnr_unrefined") is not None else "")
              + f" | {_fmt(m.get('gaussian_psnr'), '.2f')}"
              + (f" ({_fmt(m.get('gaussian_psnr_sh0'), '.2f')} at SH 0)"
                 if m.get("gaussian_psnr_sh0") not in (None, m.get("gaussian_psnr")) else "")
              + f" | {m['vertices']:,} | "
              f"{m['faces']:,} | {m['wall_time_s']:.0f} | {_fmt(m.get('peak_gpu_memory_gb'), '.1f')} |")
    print("\n| case | mesh SSIM | mesh LPIPS | Gaussian SSIM | Gaussians | pivots | tets | Delaunay runs | steps | extract |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        m = r["metrics"]
        if m:
            print(f"| {name} | {_fmt(m.get('mesh_ssim'), '.4f')} | {_fmt(m.get('mesh_lpips'), '.4f')} | "
                  f"{_fmt(m.get('gaussian_ssim'), '.4f')} | {m['gaussians']:,} | {m['pivots']:,} | {m['tets']:,} | "
                  f"{m['triangulations']} | {m['steps']} | {m.get('extract', 'delaunay')} |")
    return 0 if all(r["rc"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
