"""Time marching tetrahedra and FlexiCubes (forward + backward) per resolution; CPU or GPU.

Usage: ``python benchmarks/isosurface_bench.py [--device cuda] [--res 64 128 256]``. Prints one line per
method and resolution: grid size, output size, milliseconds forward / backward (median of 5 after a
warm-up), peak CUDA memory. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from meshlift.isosurface import cube_grid, flexicubes, marching_tets, regular_tet_grid


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _torus(p: torch.Tensor) -> torch.Tensor:
    q = torch.stack([torch.sqrt(p[:, 0] ** 2 + p[:, 2] ** 2) - 0.5, p[:, 1]], dim=-1)
    return q.norm(dim=-1) - 0.2 + 0.01 * torch.sin(30 * p[:, 0])


def _time(fn, dev: torch.device, reps: int = 5) -> tuple[float, float, tuple]:
    fwd, bwd = [], []
    out = None
    for i in range(reps + 1):
        _sync(dev)
        t0 = time.perf_counter()
        out, loss, leaves = fn()
        _sync(dev)
        t1 = time.perf_counter()
        loss.backward()
        _sync(dev)
        t2 = time.perf_counter()
        if i:
            fwd.append(1e3 * (t1 - t0))
            bwd.append(1e3 * (t2 - t1))
    return statistics.median(fwd), statistics.median(bwd), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--res", type=int, nargs="+", default=[32, 64, 128])
    args = ap.parse_args()
    dev = torch.device(args.device)
    for res in args.res:
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        verts, tets = regular_tet_grid(res, device=dev)
        sdf0 = _torus(verts)

        def run_dmtet():
            s = sdf0.clone().requires_grad_(True)
            d = torch.zeros_like(verts, requires_grad=True)
            v, f = marching_tets(verts + d, s, tets)
            return (v.shape[0], f.shape[0]), v.square().sum(), (s, d)

        fw, bw, out = _time(run_dmtet, dev)
        mem = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else float("nan")
        print(f"dmtet      R={res:4d} tets={tets.shape[0]:>11,d} V={out[0]:>9,d} F={out[1]:>9,d} "
              f"fwd {fw:8.1f} ms  bwd {bw:8.1f} ms  peak {mem:.2f} GiB")
        del tets, verts, sdf0
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        verts, cubes = cube_grid(res, device=dev)
        sdf1 = _torus(verts)
        beta = torch.zeros(res**3, 12, device=dev, requires_grad=True)
        alpha = torch.zeros(res**3, 8, device=dev, requires_grad=True)
        gamma = torch.zeros(res**3, device=dev, requires_grad=True)

        def run_flexi():
            s = sdf1.clone().requires_grad_(True)
            v, f, l_dev = flexicubes(verts, s, cubes, res, beta, alpha, gamma, training=True)
            return (v.shape[0], f.shape[0]), v.square().sum() + l_dev.mean(), (s,)

        fw, bw, out = _time(run_flexi, dev)
        mem = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else float("nan")
        print(f"flexicubes R={res:4d} cubes={cubes.shape[0]:>10,d} V={out[0]:>9,d} F={out[1]:>9,d} "
              f"fwd {fw:8.1f} ms  bwd {bw:8.1f} ms  peak {mem:.2f} GiB")
        del verts, cubes, sdf1, beta, alpha, gamma


if __name__ == "__main__":
    main()
