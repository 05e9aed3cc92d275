"""Rasterizer benchmark: forward and forward+backward time and peak memory of rasterize + interpolate.

Usage (from the repository root)::

    python benchmarks/raster.py --device cuda            # the issue's GPU table (H200), markdown
    python benchmarks/raster.py --device cpu             # CPU sizes (5k, 50k triangles at 256²)
    python benchmarks/raster.py --device cuda --cases "100k@1024x1" --repeats 50
    python benchmarks/raster.py --device cuda --backend both --which ac --out raster_h200.md
        # issue 9's ten cases: torch and triton backends and (when `import nvdiffrast.torch` works)
        # nvdiffrast on the identical inputs, in one run, with ratios

Scene: a closed bumpy UV sphere; case (a) camera at distance 1.5 (surface fills the frame, a few % of
the triangles visible, like the nvdiffrast anchor), case (b) distance 3.5 (whole object in view), case
(c) distance 2.2 (issue 9's second distance). ``--backend``: ``torch``, ``triton`` or ``both`` (default:
``both`` on CUDA when triton imports, else ``torch``); nvdiffrast runs beside them unless
``--no-nvdiffrast``. The id-agreement column compares each meshlift backend's triangle ids with
nvdiffrast's (fraction of pixels with the same id, and the largest |Δu|, |Δv| where they agree). Loss =
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
from _timing import median_ms  # noqa: E402

from meshlift.kernels import kernel_choice  # noqa: E402
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
DISTANCE = {"a": 1.5, "b": 3.5, "c": 2.2}


def parse_case(s: str):
    tris, rest = s.split("@")
    res, batch = rest.split("x")
    n = int(float(tris.lower().replace("k", "e3").replace("m", "e6")))
    return tris, n, int(res), int(batch)


def timeit(fn, device, warmup, repeats):
    """``(median ms, median CPU process ms or None)``: CUDA events on a GPU (:func:`_timing.median_ms`); on the CPU
    the wall clock and the process time of each call (the threads' share)."""
    if device.type == "cuda":
        return median_ms(fn, device, warmup, repeats), None
    for _ in range(warmup):
        fn()
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return statistics.median(times), statistics.median(cpu)


def _Env(backend):
    """The rasterizer backend ``backend`` (None: as it is) while one implementation is measured (interpolate
    and antialias follow it)."""
    from meshlift.kernels import use_kernels

    return use_kernels(raster=backend)


def _nvdiffrast():
    """``nvdiffrast.torch`` or None."""
    try:
        import nvdiffrast.torch as dr  # noqa: PLC0415

        return dr
    except Exception:  # not installed / not built
        return None


def _impl(name, pos, tri, attr, res, args, ctx):
    """``(fwd, fwd_bwd)`` closures of one implementation: a meshlift backend or ``"nvdiffrast"``."""
    if name == "nvdiffrast":
        dr = _nvdiffrast()

        def rast_fn(p):
            return dr.rasterize(ctx, p, tri, resolution=[res, res], grad_db=False)[0]  # same work as meshlift's

        def interp_fn(a, r):
            return dr.interpolate(a, r, tri)[0]

    else:
        kw = {"max_fragments": args.max_fragments, "backend": name}

        def rast_fn(p):
            return rasterize(p, tri, (res, res), grad_db=False, **kw)[0]

        def interp_fn(a, r):
            return interpolate(a, r, tri)[0]

    def fwd():
        with torch.no_grad():
            rast = rast_fn(pos)
            out = interp_fn(attr, rast)
        return rast, out

    def fwd_bwd():
        p = pos.detach().requires_grad_(True)
        a = attr.detach().requires_grad_(True)
        out = interp_fn(a, rast_fn(p))
        out.sum().backward()

    return fwd, fwd_bwd


def run_case(label, n_tri, res, batch, case, device, args, impls=("torch",), ctx=None):
    """Measure every implementation in ``impls`` on the same inputs; returns one row dict per implementation."""
    v, tri = bumpy_sphere(n_tri, device=device)
    mvp = camera_mvp(DISTANCE[case], batch=batch, device=device)
    pos = transform_pos(mvp, v).contiguous()
    attr = torch.rand(v.shape[0], 3, device=device)
    rows, ref_ids = [], None
    for name in impls:
        with _Env(None if name == "nvdiffrast" else name):
            rows.append(_measure(name, label, pos, tri, attr, res, batch, case, device, args, ctx))
        if name == "nvdiffrast":
            ref_ids = rows[-1].pop("rast")
    for r in rows:
        rast = r.pop("rast", None)
        if ref_ids is not None and rast is not None:
            same = rast[..., 3] == ref_ids[..., 3]
            r["id_agree"] = same.float().mean().item()
            both = same & (rast[..., 3] > 0)
            r["uv_err"] = (rast[..., :2] - ref_ids[..., :2]).abs()[both].max().item() if both.any() else 0.0
    return rows


def _measure(name, label, pos, tri, attr, res, batch, case, device, args, ctx):
    fwd, fwd_bwd = _impl(name, pos, tri, attr, res, args, ctx)
    first = None
    if device.type == "cuda":
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fwd_bwd()  # first call: Triton JIT compile (or its on-disk cache) for the triton backend
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
    rast, _ = fwd()
    parts = {}
    if args.parts and name != "nvdiffrast":
        import warnings

        kw = {"max_fragments": args.max_fragments, "backend": name}

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
        print(f"## profile {name} {label}@{res}x{batch} ({case}): {n_k:.0f} kernels/iter, device {sum(e.self_device_time_total for e in ev) / 3e3:.2f} ms/iter", file=sys.stderr)
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
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        fwd_bwd()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**20
    cfg = None
    if name == "triton":
        from meshlift.kernels.raster_triton import describe_config

        cfg = describe_config(res, res, batch)
    return {
        "impl": name,
        "cfg": cfg,
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
        "first": first,
        "visible": vis,
        "coverage": cov,
        "parts": parts,
        "rast": rast,
    }


def _f(x, spec=".2f", suffix=""):
    return "n/a" if x is None else f"{x:{spec}}{suffix}"


def _ratio(x, y):
    return "n/a" if x is None or y is None or not y else f"{x / y:.2f}×"


def format_table(rows, impls, device, args) -> str:
    """The markdown table: one row per meshlift backend and case, nvdiffrast's figures beside it when run."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "?"
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    nv = "nvdiffrast" in impls
    vers = f"torch {torch.__version__}"
    if "triton" in impls:
        import triton

        vers += f", triton {triton.__version__}"
    if nv:
        vers += f", nvdiffrast {getattr(_nvdiffrast(), '__version__', '?')} (same run)"
    lines = [
        f"meshlift rasterize + interpolate ({' / '.join(i for i in impls if i != 'nvdiffrast')}), {datetime.date.today()}, {dev_name}, {vers}, commit {commit}",
        f"fragment budget {args.max_fragments or 'default'}; median of {args.repeats} after {args.warmup} warm-up; "
        "rasterize(grad_db=False) + interpolate of 3 channels, loss = sum; triton configuration per row (kernels.RasterTuning: "
        + str(kernel_choice().raster_tuning) + ")",
        "",
    ]
    if nv:
        lines += [
            "| triangles | resolution | batch | distance | backend | visible tris | coverage | forward ms | fwd+bwd ms | peak MiB | "
            "nvdiffrast fwd / fwd+bwd ms | nvdiffrast peak MiB | ratio fwd+bwd | ratio peak | ids = nvdiffrast | max Δuv | first call s |",
            "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
    else:
        lines += [
            "| triangles | resolution | batch | case | backend | visible tris | coverage | forward ms | fwd+bwd ms | peak MiB | nvdiffrast fwd / fwd+bwd ms (a, ANCHORS.md) | ratio fwd+bwd | first call s |",
            "|---:|---|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|",
        ]
    for group in rows:
        ref = next((r for r in group if r["impl"] == "nvdiffrast"), None)
        for r in group:
            if r["impl"] == "nvdiffrast":
                continue
            peak = f"{r['peak']:.0f}" if r["peak"] is not None else "n/a"
            first = f"{r['first']:.2f}" if r["first"] is not None else ""
            head = f"| {r['tris']:,} | {r['res']}² | {r['batch']} | "
            impl = f"{r['impl']} ({r['cfg']})" if r.get("cfg") else r["impl"]
            body = f"{impl} | {100 * r['visible']:.1f}% | {100 * r['coverage']:.0f}% | {r['fwd']:.2f} | {r['fwdbwd']:.2f} | {peak} | "
            if nv:
                lines.append(
                    head + f"{DISTANCE[r['case']]} | " + body
                    + f"{ref['fwd']:.2f} / {ref['fwdbwd']:.2f} | {_f(ref['peak'], '.0f')} | {_ratio(r['fwdbwd'], ref['fwdbwd'])} | "
                    f"{_ratio(r['peak'], ref['peak'])} | {_f(100 * r['id_agree'] if 'id_agree' in r else None, '.3f', '%')} | "
                    f"{_f(r.get('uv_err'), '.1e')} | {first} |"
                )
            else:
                anchor = NVDIFFRAST_H200.get((r["label"], r["res"], r["batch"])) if r["case"] == "a" else None
                ref_s = f"{anchor[0]:.2f} / {anchor[1]:.2f}" if anchor else ""
                ratio = f"{r['fwdbwd'] / anchor[1]:.1f}×" if anchor and device.type == "cuda" else ""
                lines.append(head + f"{r['case']} | " + body + f"{ref_s} | {ratio} | {first} |")
    if device.type == "cpu":
        lines += [
            "",
            "Process CPU time (all threads; robust to other load on a shared machine):",
            "",
            "| triangles | resolution | case | backend | forward CPU ms | fwd+bwd CPU ms |",
            "|---:|---|---|---|---:|---:|",
        ]
        lines += [
            f"| {r['tris']:,} | {r['res']}² | {r['case']} | {r['impl']} | {r['cpu_fwd']:.1f} | {r['cpu_fwdbwd']:.1f} |" for g in rows for r in g
        ]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--cases", default=None, help="comma list like 100k@1024x1 (triangles@resolution x batch)")
    ap.add_argument("--which", default=None, help="scene cases: a (distance 1.5), b (3.5), c (2.2); default ac on CUDA, ab on CPU")
    ap.add_argument("--backend", default=None, choices=["torch", "triton", "both"], help="meshlift backend(s); default both on CUDA with triton")
    ap.add_argument("--no-nvdiffrast", action="store_true", help="do not run nvdiffrast even if it imports")
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
    from meshlift.kernels import available_backends

    have = available_backends(device)
    backend = args.backend or ("both" if device.type == "cuda" and "triton" in have else "torch")
    impls = ["torch", "triton"] if backend == "both" else [backend]
    for n in impls:
        if n not in have:
            raise SystemExit(f"backend {n!r} is not available on {device} (available: {have})")
    ctx = None
    if device.type == "cuda" and not args.no_nvdiffrast and _nvdiffrast() is not None:
        ctx = _nvdiffrast().RasterizeCudaContext(device=device)
        impls.append("nvdiffrast")
    which = args.which or ("ac" if device.type == "cuda" else "ab")
    cases = args.cases.split(",") if args.cases else (GPU_CASES if device.type == "cuda" else CPU_CASES)
    rows = []
    for c in cases:
        label, n, res, batch = parse_case(c)
        for case in which:
            group = run_case(label, n, res, batch, case, device, args, impls, ctx)
            rows.append(group)
            for r in group:
                extra = "".join(f", {k} {v:.2f}" if isinstance(v, float) else f", {k} {v}" for k, v in r["parts"].items())
                first = f", first call {r['first']:.2f} s" if r["first"] is not None else ""
                cfg = f" [{r['cfg']}]" if r.get("cfg") else ""
                print(f"# {r['impl']}{cfg}: {label} tris @ {res}² x{batch} ({case}): fwd {r['fwd']:.2f} ms, fwd+bwd {r['fwdbwd']:.2f} ms{first}{extra}", file=sys.stderr)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    text = format_table(rows, impls, device, args)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
