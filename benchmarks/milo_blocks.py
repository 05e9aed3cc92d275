"""MILo building blocks at preset sizes: Delaunay (background thread), marching tets, depth fusion, labels.

Run on the GPU machine (CPU works too, slowly)::

    python benchmarks/milo_blocks.py --pivots 270000            # verylowres
    python benchmarks/milo_blocks.py --pivots 540000 --views 100  # lowres

Scene: Gaussians on a noisy unit sphere shell (flat discs, random rotations), 9 pivots each, SDF from
depth fusion of analytic sphere depth maps, cameras on a sphere of radius 3. Prints one line per stage
(wall time, peak GPU memory) and whether the training thread kept stepping during the Delaunay (the
GIL is released by Qhull): ``gpu steps during delaunay`` should be in the thousands, not ~0.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from meshlift.cameras import cameras_on_sphere
from meshlift.isosurface.delaunay import DelaunayRunner
from meshlift.isosurface.dmtet import marching_tets
from meshlift.methods.milo.depth_fusion import fuse_depth_at_pivots
from meshlift.methods.milo.occupancy_labels import occupancy_labels, render_mesh_depth
from meshlift.methods.milo.pivots import PivotSDF, gaussian_pivots


def sphere_depth(w2c, K, hw, r, device):
    H, W = hw
    j, i = torch.meshgrid(torch.arange(W, device=device) + 0.5, torch.arange(H, device=device) + 0.5, indexing="xy")
    pix = torch.stack([j, i, torch.ones_like(j)], dim=-1).double()
    R, t = w2c[:, :3, :3], w2c[:, :3, 3]
    d = torch.einsum("hwk,cjk,cji->chwi", pix, torch.linalg.inv(K), R)
    o = -torch.einsum("cji,cj->ci", R, t)[:, None, None, :]
    a = (d * d).sum(-1)
    b = 2 * (d * o).sum(-1)
    c = (o * o).sum(-1) - r * r
    disc = b * b - 4 * a * c
    tt = (-b - disc.clamp(min=0).sqrt()) / (2 * a)
    return torch.where((disc > 0) & (tt > 0), tt, torch.zeros_like(tt)).float()


def stage(name, fn, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    out = fn()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    mem = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else float("nan")
    print(f"{name:<34} {time.perf_counter() - t:8.2f} s   peak GPU {mem:6.2f} GiB")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pivots", type=int, default=270_000)
    ap.add_argument("--views", type=int, default=100)
    ap.add_argument("--size", type=int, default=800)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    dev = torch.device(args.device)
    G = args.pivots // 9
    g = torch.Generator().manual_seed(0)
    n = torch.randn(G, 3, generator=g)
    n = n / n.norm(dim=1, keepdim=True)
    means = (n * (1 + 0.01 * torch.randn(G, 1, generator=g))).to(dev)
    scales = (0.004 + 0.01 * torch.rand(G, 3, generator=g)).to(dev)
    quats = torch.randn(G, 4, generator=g).to(dev)
    print(f"{G:,} Gaussians -> {9 * G:,} pivots, {args.views} views at {args.size}^2, device {dev}")
    piv, ps = stage("pivots", lambda: gaussian_pivots(means, scales, quats), dev)
    pts = piv.reshape(-1, 3)

    # Delaunay in the background while the "training loop" keeps the GPU busy
    x = torch.randn(2048, 2048, device=dev)
    with DelaunayRunner() as runner:
        t0 = time.perf_counter()
        job = runner.submit(pts)
        steps = 0
        last = 0.0
        while not job.done():
            x = torch.tanh(x @ x * 1e-3)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            steps += 1
            if time.perf_counter() - last > 5:
                print("  ", runner.status())
                last = time.perf_counter()
        res = job.result()
    print(f"{'delaunay (background)':<34} {time.perf_counter() - t0:8.2f} s   {res.tets.shape[0]:,} tets "
          f"({res.tets.shape[0] / pts.shape[0]:.2f}/pivot), {res.num_degenerate} degenerate; "
          f"gpu steps during delaunay: {steps}")
    print("  ", runner.status())
    tets = res.tets.to(dev)

    cams = cameras_on_sphere(args.views, 3.0, math.radians(50), args.size)
    w2c = cams.world_to_camera.to(dev, torch.float64)
    K = cams.K.to(dev, torch.float64)
    depth = stage("synthetic depth maps", lambda: sphere_depth(w2c, K, (args.size, args.size), 1.0, dev), dev)
    w2c32, K32 = w2c.float(), K.float()
    fused = stage("depth fusion at pivots", lambda: fuse_depth_at_pivots(piv, depth, w2c32, K32, truncation=0.01), dev)
    sdf_mod = PivotSDF(fused.occupancy).to(dev)

    def extract():
        return marching_tets(pts, sdf_mod.sdf().reshape(-1), tets, scales=ps.reshape(-1))

    v, f = stage("marching tets (+ filter, fwd)", extract, dev)
    err = float((v.detach().norm(dim=1) - 1).abs().mean())
    print(f"   mesh: {v.shape[0]:,} vertices, {f.shape[0]:,} faces, mean |r - 1| = {err:.4f}")
    stage("marching tets backward", lambda: v.sum().backward(), dev)
    with torch.no_grad():
        hw = (args.size, args.size)
        md = stage("mesh depth maps (all views)", lambda: render_mesh_depth(v.detach(), f, w2c32, K32, hw), dev)
    lab = stage("occupancy labels", lambda: occupancy_labels(piv.detach(), md, w2c32, K32), dev)
    print(f"   inside: {int(lab.inside.sum()):,} of {lab.inside.numel():,} pivots")


if __name__ == "__main__":
    main()
