"""Rasterizer benchmark: forward and forward+backward time and peak memory of rasterize + interpolate.

Usage (from the repository root)::

    python benchmarks/raster.py --device cuda            # the issue's GPU table (H200), markdown
    python benchmarks/raster.py --device cpu             # CPU sizes (5k, 50k triangles at 256²)
    python benchmarks/raster.py --device cuda --cases "100k@1024x1" --repeats 50

Scene: a closed bumpy UV sphere; case (a) camera at distance 1.5 (surface fills the frame, a few % of
the triangles visible, like the nvdiffrast anchor), case (b) distance 3.5 (whole object in view). Loss =
sum of the interpolated 3-channel attribute; forward+backward includes gradients to clip-space
positions and attributes (as in /work/shared/ANCHORS.md). GPU times are CUDA-event medians after
warm-up; CPU times are wall-clock medians. Peak memory: CUDA ``max_memory_allocated`` during one
forward+backward (inputs included); on CPU not measured.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _scenes import bumpy_sphere, camera_mvp  # noqa: E402

from meshlift.render import interpolate, rasterize, transform_pos, visible_triangles  # noqa: E402

#: nvdiffrast 0.4.0 on one H200, case (a) (ANCHORS.md): (forward ms, forward+backward ms)
NVDIFFRAST_H200 = {
    ("100k", 1024, 1): (0.33, 0.86),
    ("1M", 1024, 1): (0.98, 1.61),
    ("1M", 2048, 1): (1.04, 2.39),
    ("100k", 512, 8): (0.60, 1.44),
    ("1M", 512, 8): (2.76, 3.40),
}
GPU_CASES = ["100k@1024x1", "1M@1024x1", "1M@2048x1", "100k@512x8", "1M@512x8"]
CPU_CASES = ["5k@256x1", "50k@256x1"]
DISTANCE = {"a": 1.5, "b": 3.5}


def parse_case(s: str):
    tris, rest = s.split("@")
    res, batch = rest.split("x")
    n = int(float(tris.lower().replace("k", "e3").replace("m", "e6")))
    return tris, n, int(res), int(batch)


def timeit(fn, device, warmup, repeats):
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize()
        for _ in range(repeats):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
    else:
        cpu = []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
        return statistics.median(times), statistics.median(cpu)
    return statistics.median(times), None


def run_case(label, n_tri, res, batch, case, device, args):
    v, tri = bumpy_sphere(n_tri, device=device)
    mvp = camera_mvp(DISTANCE[case], batch=batch, device=device)
    pos = transform_pos(mvp, v).contiguous()
    attr = torch.rand(v.shape[0], 3, device=device)
    kw = {"max_fragments": args.max_fragments}

    def fwd():
        with torch.no_grad():
            rast, _ = rasterize(pos, tri, (res, res), grad_db=False, **kw)
            out, _ = interpolate(attr, rast, tri)
        return rast, out

    def fwd_bwd():
        p = pos.detach().requires_grad_(True)
        a = attr.detach().requires_grad_(True)
        rast, _ = rasterize(p, tri, (res, res), grad_db=False, **kw)
        out, _ = interpolate(a, rast, tri)
        out.sum().backward()

    rast, _ = fwd()
    parts = {}
    if args.parts:
        import warnings

        def vis():
            visible_triangles(pos, tri, (res, res), **kw)

        def ras():
            with torch.no_grad():
                rasterize(pos, tri, (res, res), grad_db=False, **kw)

        parts["vis"] = timeit(vis, device, args.warmup, args.repeats)[0]
        parts["rast"] = timeit(ras, device, args.warmup, args.repeats)[0]
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode(1)
            with warnings.catch_warnings(record=True) as wl:
                warnings.simplefilter("always")
                fwd_bwd()
            torch.cuda.set_sync_debug_mode(0)
            parts["syncs"] = sum("synchroniz" in str(w.message) for w in wl)
    if args.profile and device.type == "cuda":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                fwd_bwd()
            torch.cuda.synchronize()
        ev = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA or e.self_device_time_total > 0]
        ev.sort(key=lambda e: -e.self_device_time_total)
        n_k = sum(e.count for e in ev) / 3
        print(f"## profile {label}@{res}x{batch} ({case}): {n_k:.0f} kernels/iter, device {sum(e.self_device_time_total for e in ev) / 3e3:.2f} ms/iter", file=sys.stderr)
        for e in ev[:14]:
            print(f"##   {e.self_device_time_total / 3e3:7.3f} ms {e.count // 3:4d}x {e.key[:90]}", file=sys.stderr)
    ids = rast[..., 3]
    vis = torch.unique(ids[ids > 0]).numel() / (tri.shape[0] * batch) * batch
    cov = (ids > 0).float().mean().item()
    t_f, c_f = timeit(fwd, device, args.warmup, args.repeats)
    t_fb, c_fb = timeit(fwd_bwd, device, args.warmup, args.repeats)
    peak = None
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        fwd_bwd()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**20
    return {
        "label": label,
        "tris": tri.shape[0],
        "res": res,
        "batch": batch,
        "case": case,
        "fwd": t_f,
        "fwdbwd": t_fb,
        "cpu_fwd": c_f,
        "cpu_fwdbwd": c_fb,
        "peak": peak,
        "visible": vis,
        "coverage": cov,
        "parts": parts,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cases", default=None, help="comma list like 100k@1024x1 (triangles@resolution x batch)")
    ap.add_argument("--which", default="ab", help="scene cases: a (close), b (whole object) or ab")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--max-fragments", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--parts", action="store_true", help="also time visibility alone, rasterize alone; count host syncs")
    ap.add_argument("--profile", action="store_true", help="CUDA: print the costliest kernels of forward+backward")
    ap.add_argument("--out", default=None, help="also write the markdown table to this file")
    args = ap.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    cases = args.cases.split(",") if args.cases else (GPU_CASES if device.type == "cuda" else CPU_CASES)
    rows = []
    for c in cases:
        label, n, res, batch = parse_case(c)
        for case in args.which:
            r = run_case(label, n, res, batch, case, device, args)
            rows.append(r)
            extra = "".join(f", {k} {v:.2f}" if isinstance(v, float) else f", {k} {v}" for k, v in r["parts"].items())
            print(f"# {label} tris @ {res}² x{batch} ({case}): fwd {r['fwd']:.2f} ms, fwd+bwd {r['fwdbwd']:.2f} ms{extra}", file=sys.stderr)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "?"
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    lines = [
        f"meshlift rasterize + interpolate (torch backend), {datetime.date.today()}, {dev_name}, torch {torch.__version__}, commit {commit}",
        f"fragment budget {args.max_fragments or os.environ.get('MESHLIFT_RASTER_MAX_FRAGMENTS', 'default')}; median of {args.repeats} after {args.warmup} warm-up",
        "",
        "| triangles | resolution | batch | case | visible tris | coverage | forward ms | fwd+bwd ms | peak MiB | nvdiffrast fwd / fwd+bwd ms (a) | ratio fwd+bwd |",
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        ref = NVDIFFRAST_H200.get((r["label"], r["res"], r["batch"])) if r["case"] == "a" else None
        ref_s = f"{ref[0]:.2f} / {ref[1]:.2f}" if ref else ""
        ratio = f"{r['fwdbwd'] / ref[1]:.1f}×" if ref and device.type == "cuda" else ""
        peak = f"{r['peak']:.0f}" if r["peak"] is not None else "n/a"
        lines.append(
            f"| {r['tris']:,} | {r['res']}² | {r['batch']} | {r['case']} | {100 * r['visible']:.1f}% | "
            f"{100 * r['coverage']:.0f}% | {r['fwd']:.2f} | {r['fwdbwd']:.2f} | {peak} | {ref_s} | {ratio} |"
        )
    if device.type == "cpu":
        lines += [
            "",
            "Process CPU time (all threads; robust to other load on a shared machine):",
            "",
            "| triangles | resolution | case | forward CPU ms | fwd+bwd CPU ms |",
            "|---:|---|---|---:|---:|",
        ]
        lines += [
            f"| {r['tris']:,} | {r['res']}² | {r['case']} | {r['cpu_fwd']:.1f} | {r['cpu_fwdbwd']:.1f} |" for r in rows
        ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
