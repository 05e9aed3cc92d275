"""Sweep the Triton rasterizer's tile shape, warps and loop unroll on issue 9's ten cases (CUDA only).

Usage (from the repository root, on the GPU machine)::

    python benchmarks/raster_triton_tune.py                       # default sweep, markdown to stdout
    python benchmarks/raster_triton_tune.py --tiles 16x16,8x32 --warps 4 --unroll 1,2 --out tune.md

For every case (bumpy sphere, distance 1.5 and 2.2, as ``benchmarks/raster.py``) and every configuration
(``meshlift.kernels.use_kernels(raster_tuning=RasterTuning(tile=..., warps=..., unroll=..., stamp=...,
bwd_ids=...))``, read by :func:`meshlift.kernels.raster_triton.tile_config` at every call) it times ``rasterize(grad_db=False)`` +
``interpolate`` forward+backward (CUDA-event median after warm-up) and prints one table (ms, rows =
configurations, columns = cases), the best configuration per case and the one with the lowest geometric
mean over all cases: set that as the default (``DEFAULT_TILE`` / ``_WARPS`` / ``_UNROLL`` / ``_STAMP``
in ``src/meshlift/kernels/choice.py``). The full default sweep is 5 × 3 × 2 × 3 = 90
configurations (each compiles once): about 5-8 minutes; narrow it with the flags. ``--tiles auto`` runs the
default per-frame rule, ``--bwd-ids 0,8`` compares the backward with and without its pre-reduction; every
timing line says what it ran with (``raster_triton.describe_config``). Each configuration is checked to give the same triangle ids
as the first one (they must not depend on it).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _scenes import bumpy_sphere, camera_mvp  # noqa: E402
from raster import GPU_CASES, parse_case, timeit  # noqa: E402

from meshlift.render import interpolate, rasterize, transform_pos  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(GPU_CASES))
    ap.add_argument("--distances", default="1.5,2.2")
    ap.add_argument("--tiles", default="8x8,16x16,8x32,16x32,32x32", help="tile shapes; 'auto' = the default rule (raster_triton.default_tile)")
    ap.add_argument("--warps", default="2,4,8")
    ap.add_argument("--unroll", default="1,2")
    ap.add_argument("--stamp", default="0,4,8", help="RasterTuning.stamp values (small-triangle stamp side, 0 = off)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--bwd-ids", default="8", help="RasterTuning.bwd_ids values (backward pre-reduction depth, 0 = off)")
    ap.add_argument("--out", default=None, help="also write the markdown to this file")
    args = ap.parse_args()
    from meshlift.kernels import RasterTuning, use_kernels
    from meshlift.kernels.raster_triton import describe_config
    if not torch.cuda.is_available():
        raise SystemExit("raster_triton_tune.py needs a CUDA device")
    dev = torch.device("cuda")
    configs = list(
        itertools.product(
            args.tiles.split(","), [int(w) for w in args.warps.split(",")], [int(u) for u in args.unroll.split(",")],
            [int(x) for x in args.stamp.split(",")], [int(x) for x in args.bwd_ids.split(",")],
        )
    )
    cols, times = [], {c: [] for c in configs}
    for spec in args.cases.split(","):
        label, n, res, batch = parse_case(spec)
        v, tri = bumpy_sphere(n, device=dev)
        attr = torch.rand(v.shape[0], 3, device=dev)
        for d in (float(x) for x in args.distances.split(",")):
            pos = transform_pos(camera_mvp(d, batch=batch, device=dev), v).contiguous()
            cols.append(f"{label}@{res}²×{batch} d{d}")
            ids0 = None
            for tile, warps, unroll, stamp, bids in configs:
                tuning = RasterTuning(tile=None if tile == "auto" else tuple(int(x) for x in tile.split("x")),
                                      warps=warps, unroll=unroll, stamp=stamp, bwd_ids=bids)
                with use_kernels(raster="triton", raster_tuning=tuning):
                    ran = describe_config(res, res, batch)

                    def fwd_bwd():
                        p = pos.detach().requires_grad_(True)
                        a = attr.detach().requires_grad_(True)
                        rast, _ = rasterize(p, tri, (res, res), grad_db=False)
                        out, _ = interpolate(a, rast, tri)
                        out.sum().backward()
                        return rast

                    with torch.no_grad():
                        ids = rasterize(pos, tri, (res, res), grad_db=False)[0][..., 3]
                    if ids0 is None:
                        ids0 = ids
                    elif not torch.equal(ids, ids0):
                        print(f"# WARNING: {ran} changes the triangle ids on {cols[-1]}", file=sys.stderr)
                    t = timeit(fwd_bwd, dev, args.warmup, args.repeats)[0]
                    times[(tile, warps, unroll, stamp, bids)].append(t)
                print(f"# {cols[-1]} ran with {ran}: {t:.3f} ms", file=sys.stderr)
            torch.cuda.empty_cache()
    lines = [
        f"Triton rasterizer sweep, {torch.cuda.get_device_name(dev)}, rasterize+interpolate fwd+bwd ms (median of {args.repeats})",
        "",
        "| tile | warps | unroll | stamp | bwd ids | " + " | ".join(cols) + " | geo-mean |",
        "|---|---:|---:|---:|---:|" + "---:|" * (len(cols) + 1),
    ]
    geo = {}
    for c, ts in times.items():
        geo[c] = math.exp(sum(math.log(t) for t in ts) / len(ts))
        lines.append(f"| {c[0]} | {c[1]} | {c[2]} | {c[3]} | {c[4]} | " + " | ".join(f"{t:.3f}" for t in ts) + f" | {geo[c]:.3f} |")
    lines.append("")
    for k, col in enumerate(cols):
        best = min(configs, key=lambda c: times[c][k])
        lines.append(f"- best for {col}: tile {best[0]}, warps {best[1]}, unroll {best[2]}, stamp {best[3]}, bwd ids {best[4]} ({times[best][k]:.3f} ms)")
    b = min(configs, key=lambda c: geo[c])
    lines.append(f"- best overall (geometric mean): tile {b[0]}, warps {b[1]}, unroll {b[2]}, stamp {b[3]}, bwd ids {b[4]} ({geo[b]:.3f} ms)")
    lines.append("- tile 'auto' = raster_triton.default_tile: 8x8 below 2^21 pixels per call, 16x16 from there")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
