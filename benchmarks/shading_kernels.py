"""Shading fast paths: hash-grid encoding and split-sum prefilter, torch vs Triton backend.

Usage (from the repository root, on a CUDA machine)::

    python benchmarks/shading_kernels.py --device cuda --out benchmarks/results/shading_kernels_h200.md
    python benchmarks/shading_kernels.py --smoke          # tiny sizes, 1 repeat: checks the script runs

Cases:

- ``hashgrid``: :class:`meshlift.shading.encoding.HashGridEncoding` on N uniform points in [0, 1]^3, with
  the presets' level configurations: ``full`` = every full preset (16 levels, F = 2, T = 2^19, 16 -> 4096)
  and ``quick`` = the demo / ``--quick`` presets (12 levels, T = 2^15, 16 -> 512). N = 512² × 8 = 2,097,152
  (one batch of the full presets if every pixel were covered) and 2^16 (one ``MaterialField`` chunk).
  Forward, and forward + backward with gradients to the table and to the points (pass 1 needs both).
- ``prefilter``: :func:`meshlift.shading.light.specular_prefilter` for every level that
  ``EnvironmentLight.build_mips`` filters at the presets' light sizes (``env_res`` 128: full presets; 16:
  quick), forward + backward (gradient to the source mip), and the whole ``build_mips`` + backward.
- ``sample_cube_mip``: the specular mip lookup of ``EnvironmentLight.shade`` (512² × 8 lookups, env 128,
  4 levels), forward + backward: the per-level twin (``sample_cube_mip_reference``, the old code) vs the
  one-gather version. Pure torch; rows differ in implementation, not backend.

Columns: median ms over ``--repeats`` runs after ``--warmup`` runs (CUDA events on GPU, wall clock on the
CPU), CUDA kernel launches of one forward + backward (``torch.profiler``; ``-`` on the CPU), aten ops of one
forward + backward (dispatcher count, any device), and peak CUDA memory of one forward + backward.
The Triton rows need CUDA (on the CPU only the torch rows run, unless ``--smoke`` under TRITON_INTERPRET=1).
The first Triton call of a configuration compiles its kernels (cached in ``~/.triton/cache``); the script
prints the first forward + backward time of each hash-grid row (compile included, when not cached) and
the warm-up keeps it out of the medians.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_ms  # noqa: E402

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

HASH_CONFIGS = {
    "full": dict(n_levels=16, n_features_per_level=2, log2_hashmap_size=19, base_resolution=16, desired_resolution=4096),
    "quick": dict(n_levels=12, n_features_per_level=2, log2_hashmap_size=15, base_resolution=16, desired_resolution=512),
}
HASH_POINTS = {"512x512x8": 512 * 512 * 8, "chunk 2^16": 1 << 16}
LIGHT_RES = {"full": 128, "quick": 16}


class _OpCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def aten_ops(fn):
    with _OpCount() as c:
        fn()
    views = {"aten.view", "aten._unsafe_view", "aten.select", "aten.slice", "aten.unsqueeze", "aten.squeeze",
             "aten.transpose", "aten.t", "aten.expand", "aten.detach", "aten.alias", "aten.permute"}
    return sum(c.count.values()), sum(v for k, v in c.count.items() if k not in views)


def cuda_launches(fn, device):
    if device.type != "cuda":
        return "-"
    from torch.profiler import ProfilerActivity, profile

    try:
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        cuda = torch.autograd.DeviceType.CUDA
        return sum(1 for e in prof.events() if getattr(e, "device_type", None) == cuda)
    except Exception as exc:  # the profiler's API moves between torch versions: report, do not stop
        print(f"(kernel count unavailable: {exc})", file=sys.stderr)
        return "n/a"


def peak_mib(fn, device):
    if device.type != "cuda":
        return "-"
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return f"{(torch.cuda.max_memory_allocated() - base) / 2**20:.0f}"


def backends_for(device, smoke):
    from meshlift.kernels import triton_importable

    out = ["torch"]
    if triton_importable() and (device.type == "cuda" or (smoke and os.environ.get("TRITON_INTERPRET") == "1")):
        out.append("triton")
    return out


def bench_hashgrid(device, args, rows):
    from meshlift.shading.encoding import HashGridEncoding

    configs = {"quick": HASH_CONFIGS["quick"]} if args.smoke else HASH_CONFIGS
    points = {"smoke 512": 512} if args.smoke else HASH_POINTS
    for cname, cfg in configs.items():
        if args.smoke:
            cfg = dict(cfg, n_levels=4, log2_hashmap_size=10, desired_resolution=64)
        for pname, n in points.items():
            torch.manual_seed(0)
            x = torch.rand(n, 3, device=device)
            g = None
            for backend in backends_for(device, args.smoke):
                enc = HashGridEncoding(3, backend=backend, **cfg).to(device)
                xg = x.clone().requires_grad_()

                def fwd():
                    with torch.no_grad():
                        enc(x)

                def fwd_bwd():
                    nonlocal g
                    y = enc(xg)
                    if g is None:
                        g = torch.randn_like(y)
                    torch.autograd.grad(y, (enc.embeddings, xg), g)

                _sync(device)
                t0 = time.perf_counter()
                fwd_bwd()  # the first call compiles the Triton kernels (when not cached)
                _sync(device)
                first = time.perf_counter() - t0
                print(f"hashgrid {cname} {pname} {backend}: first forward+backward {first:.2f} s", flush=True)
                t_f = median_ms(fwd, device, args.warmup, args.repeats)
                t_fb = median_ms(fwd_bwd, device, args.warmup, args.repeats)
                ops, ops_nv = aten_ops(fwd_bwd)
                rows.append(("hashgrid", f"{cname} L={cfg['n_levels']} T=2^{cfg['log2_hashmap_size']}", pname, backend,
                             f"{t_f:.3f}", f"{t_fb:.3f}", cuda_launches(fwd_bwd, device), f"{ops} ({ops_nv})",
                             peak_mib(fwd_bwd, device)))
                print(" | ".join(str(c) for c in rows[-1]), flush=True)


def bench_prefilter(device, args, rows):
    from meshlift.kernels import use_kernels
    from meshlift.shading.cubemap import avg_pool_cube
    from meshlift.shading.light import EnvironmentLight, specular_prefilter

    sizes = {"smoke": 8} if args.smoke else LIGHT_RES
    for lname, res in sizes.items():
        # The surface method's light: min_res = max(4, min(16, env_res // 4)) (methods/nvdiffrec/materials.py make_light).
        light = EnvironmentLight.random(res, min_res=max(4, min(16, res // 4))).to(device)
        levels = [light.base.detach()]
        while levels[-1].shape[1] > light.min_res:
            levels.append(avg_pool_cube(levels[-1]))
        rough = light.level_roughness(len(levels))
        for backend in backends_for(device, args.smoke):
            with use_kernels(shading=backend):  # the torch twins or the Triton kernels, build_mips included
                for i, r in enumerate(rough):
                    out_res = levels[i].shape[1]
                    src_res = _source_res(light, i, levels)  # the source mip build_mips gathers level i from
                    src = next(lv for lv in levels if lv.shape[1] == src_res).clone().requires_grad_()
                    g = torch.randn(6, out_res, out_res, 3, device=device)

                    def fwd_bwd():
                        y = specular_prefilter(src, r, out_res=out_res, backend=backend)
                        torch.autograd.grad(y, src, g)

                    t_fb = median_ms(fwd_bwd, device, args.warmup, args.repeats)
                    ops, ops_nv = aten_ops(fwd_bwd)
                    rows.append(("prefilter", f"env {res}: level {i} r={r:.2f} {src_res}²->{out_res}²", "6 faces", backend,
                                 "", f"{t_fb:.3f}", cuda_launches(fwd_bwd, device), f"{ops} ({ops_nv})",
                                 peak_mib(fwd_bwd, device)))
                    print(" | ".join(str(c) for c in rows[-1]), flush=True)

                def build():
                    light.base.grad = None
                    light.build_mips()
                    loss = sum((s * (k + 1)).sum() for k, s in enumerate(light.specular)) + light.diffuse.sum()
                    loss.backward()

                t_fb = median_ms(build, device, args.warmup, args.repeats)
                ops, ops_nv = aten_ops(build)
                rows.append(("build_mips", f"env {res} ({len(rough)} levels + diffuse)", "-", backend, "", f"{t_fb:.3f}",
                             cuda_launches(build, device), f"{ops} ({ops_nv})", peak_mib(build, device)))
                print(" | ".join(str(c) for c in rows[-1]), flush=True)


def bench_mip_lookup(device, args, rows):
    """The specular lookup of ``EnvironmentLight.shade``: per-level twin vs the one-gather version."""
    from meshlift.shading.cubemap import avg_pool_cube, sample_cube_mip, sample_cube_mip_reference

    res, n = (8, 512) if args.smoke else (128, 512 * 512 * 8)
    torch.manual_seed(0)
    base = torch.rand(6, res, res, 3, device=device)
    levels = [base]
    while levels[-1].shape[1] > max(4, min(16, res // 4)):
        levels.append(avg_pool_cube(levels[-1]))
    levels = [lv.clone().requires_grad_() for lv in levels]
    dirs = torch.randn(n, 3, device=device)
    level = torch.rand(n, device=device) * (len(levels) - 1)
    g = torch.randn(n, 3, device=device)
    for name, fn in (("per-level loop (reference)", sample_cube_mip_reference), ("one gather", sample_cube_mip)):

        def fwd_bwd():
            torch.autograd.grad(fn(levels, dirs, level), levels, g)

        t_fb = median_ms(fwd_bwd, device, args.warmup, args.repeats)
        ops, ops_nv = aten_ops(fwd_bwd)
        rows.append(("sample_cube_mip", f"env {res}, {len(levels)} levels", f"{n}", name, "", f"{t_fb:.3f}",
                     cuda_launches(fwd_bwd, device), f"{ops} ({ops_nv})", peak_mib(fwd_bwd, device)))
        print(" | ".join(str(c) for c in rows[-1]), flush=True)


def _source_res(light, i, levels):
    """The source face size ``build_mips`` uses for level i (same rule as EnvironmentLight.build_mips)."""
    import math

    from meshlift.shading.light import _estimate_nnz, ggx_cutoff_cos

    r = light.level_roughness(len(levels))[i]
    budget = light.max_nnz_per_level
    if budget is None:
        budget = 1 << 26 if light.base.device.type == "cuda" else 1 << 24
    out_res, src = levels[i].shape[1], i
    theta_cut = math.acos(ggx_cutoff_cos(float(r), 0.99))
    while (
        src + 1 < len(levels)
        and _estimate_nnz(out_res, levels[src].shape[1], r, 0.99) > budget
        and 2.0 / levels[src + 1].shape[1] <= 0.5 * theta_cut
    ):
        src += 1
    return levels[src].shape[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--only", choices=["hashgrid", "prefilter", "mip"], default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 1 repeat (checks that the script runs)")
    ap.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    args = ap.parse_args(argv)
    if args.smoke:
        args.warmup, args.repeats = 1, 1
    device = torch.device(args.device)
    torch.set_grad_enabled(True)
    rows = []
    if args.only in (None, "hashgrid"):
        bench_hashgrid(device, args, rows)
    if args.only in (None, "prefilter"):
        bench_prefilter(device, args, rows)
    if args.only in (None, "mip"):
        bench_mip_lookup(device, args, rows)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    import importlib.util

    tri = "-"
    if importlib.util.find_spec("triton") is not None:
        import triton

        tri = triton.__version__
    head = (f"# shading kernels ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {name}, "
            f"torch {torch.__version__}, triton {tri})\n\n"
            "| op | config | points | backend | fwd ms | fwd+bwd ms | CUDA launches (fwd+bwd) | aten ops fwd+bwd "
            "(non-view) | peak MiB |\n|---|---|---|---|---:|---:|---:|---:|---:|\n")
    table = head + "".join("| " + " | ".join(str(c) for c in r) + " |\n" for r in rows)
    print()
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
