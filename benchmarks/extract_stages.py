"""Time the post-fusion stages of MILo's ``extract=tsdf`` on a synthetic capture (host CPU).

A room (the inside of a box) with a bumpy ball on its floor, seen by a ring of cameras whose depth maps carry
noise and outlier pixels (so the fused mesh has floaters, holes and small components like a real capture's),
is fused into a TSDF (:func:`meshlift.isosurface.sparse_grid.extract_tsdf_mesh`); then the stages that follow
the fusion in :func:`meshlift.methods.milo.tsdf_mesh.fused_mesh` / ``extract_assets`` are timed one by one:
``clean_mesh``, ``drop_small_components``, ``fill_holes``, the crop to a rotated box around the ball
(:func:`meshlift.mesh.crop.crop_mesh`), the support plane (:func:`meshlift.mesh.support_plane.remove_support_plane`)
and the decimation (:func:`meshlift.mesh.simplify.simplify_mesh`).

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/extract_stages.py --res 256 [--profile crop]

Prints one line per stage (seconds, faces in/out) and, with ``--profile STAGE``, the top of cProfile for it.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import time

import numpy as np
import torch


def look_at(eye: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    f = (target - eye) / (target - eye).norm()
    up = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    r = torch.linalg.cross(f, up)
    r = r / r.norm()
    rot = torch.stack([r, torch.linalg.cross(f, r), f])
    m = torch.eye(4, dtype=torch.float64)
    m[:3, :3] = rot
    m[:3, 3] = -rot @ eye
    return m


BALL_C = torch.tensor([0.0, 0.0, -1.4], dtype=torch.float64)
BALL_R = 0.6
ROOM = 2.0


def scene_depths(n_views: int, size: int, seed: int = 0):
    """``(depth [V, H, W], w2c [V, 4, 4], K [V, 3, 3])`` float32 of the room + ball, with noise."""
    g = torch.Generator().manual_seed(seed)
    focal = 0.6 * size
    k = torch.tensor([[focal, 0, size / 2], [0, focal, size / 2], [0, 0, 1.0]], dtype=torch.float64)
    jj, ii = torch.meshgrid(torch.arange(size) + 0.5, torch.arange(size) + 0.5, indexing="xy")
    d_cam = torch.stack([(jj - k[0, 2]) / focal, (ii - k[1, 2]) / focal, torch.ones_like(jj)], -1).double()
    depths, w2cs = [], []
    for i in range(n_views):
        a = 2 * math.pi * i / n_views
        eye = torch.tensor([1.7 * math.cos(a), 1.7 * math.sin(a), -1.0 + 0.5 * math.sin(3 * a)], dtype=torch.float64)
        w2c = look_at(eye, BALL_C + torch.tensor([0, 0, 0.2 * math.cos(2 * a)], dtype=torch.float64))
        d = d_cam @ w2c[:3, :3]  # world directions, camera z of o + t d is t
        o = eye
        with torch.no_grad():
            tmax = torch.full(d.shape[:2], float("inf"), dtype=torch.float64)
            for ax in range(3):
                for s in (-1.0, 1.0):
                    t = (s * ROOM - o[ax]) / d[..., ax]
                    tmax = torch.where(t > 0, torch.minimum(tmax, t), tmax)
            oc = o - BALL_C
            A, B, C = (d * d).sum(-1), (d * oc).sum(-1), oc @ oc - BALL_R ** 2
            disc = B * B - A * C
            tb = (-B - disc.clamp_min(0).sqrt()) / A
            hit = (disc > 0) & (tb > 0)
            p = o + tb[..., None] * d
            bump = 0.03 * torch.sin(9 * p[..., 0]) * torch.sin(9 * p[..., 1]) * torch.sin(9 * p[..., 2])
            t = torch.where(hit, tb + bump, tmax)
            t = t * (1 + 0.002 * torch.randn(t.shape, generator=g, dtype=torch.float64))
            out = torch.rand(t.shape, generator=g) < 0.01  # outliers: floaters and holes
            t = torch.where(out, t * (0.3 + 0.7 * torch.rand(t.shape, generator=g, dtype=torch.float64)), t)
            drop = torch.rand(t.shape, generator=g) < 0.003
            t = torch.where(drop, torch.zeros_like(t), t)
        depths.append(t.float())
        w2cs.append(w2c)
    return torch.stack(depths), torch.stack(w2cs).float(), k.expand(n_views, 3, 3).float().clone()


def roi():
    """A box around the ball, turned 10° about z and tilted 3°, cutting through the floor."""
    a, b = math.radians(10), math.radians(3)
    rz = np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]])
    rx = np.array([[1, 0, 0], [0, math.cos(b), -math.sin(b)], [0, math.sin(b), math.cos(b)]])
    R = rx @ rz
    c = R @ BALL_C.numpy()
    return c - 0.95, c + np.array([0.95, 0.95, 1.0]), R


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--res", type=int, default=256)
    ap.add_argument("--views", type=int, default=24)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--max-faces", type=int, default=50_000)
    ap.add_argument("--profile", default="", help="stage name to cProfile")
    ap.add_argument("--save", default="", help="write the fused mesh (npz) here")
    ap.add_argument("--load", default="", help="read the fused mesh (npz) instead of fusing")
    ap.add_argument("--dump", default="", help="write each stage's output mesh (npz) here (to compare two trees)")
    args = ap.parse_args()
    from meshlift.isosurface.sparse_grid import extract_tsdf_mesh
    from meshlift.mesh.clean import clean_mesh, drop_small_components
    from meshlift.mesh.crop import crop_mesh
    from meshlift.mesh.fill import fill_holes
    from meshlift.mesh.simplify import simplify_mesh
    from meshlift.mesh.support_plane import remove_support_plane
    from meshlift.structures.mesh import Mesh

    times = {}

    def stage(name, fn, *a, **kw):
        t0 = time.perf_counter()
        if name in args.profile.split(","):
            pr = cProfile.Profile()
            out = pr.runcall(fn, *a, **kw)
        else:
            out = fn(*a, **kw)
        times[name] = time.perf_counter() - t0
        if args.dump:
            m = out[0]
            np.savez(f"{args.dump}_{name}.npz", v=m.v_pos.numpy(), f=m.t_pos_idx.numpy())
        if name in args.profile.split(","):
            pstats.Stats(pr).sort_stats("tottime").print_stats(18)
        return out

    if args.load:
        z = np.load(args.load)
        v, f = torch.from_numpy(z["v"]), torch.from_numpy(z["f"])
    else:
        depth, w2c, K = scene_depths(args.views, args.size)
        t0 = time.perf_counter()
        lo, hi = torch.full((3,), -ROOM - 0.05), torch.full((3,), ROOM + 0.05)
        v, f, _ = extract_tsdf_mesh([(depth, w2c, K)], lo, hi, args.res, trunc_voxels=3.0,
                                    unseen="inside")
        times["fusion"] = time.perf_counter() - t0
        if args.save:
            np.savez(args.save, v=v.numpy(), f=f.numpy())
    print(f"raw: {len(v):,} vertices, {len(f):,} faces")
    mesh = Mesh(v.float(), f.long())
    mesh, crep = stage("clean", clean_mesh, mesh, keep_components=0.02)
    n_clean = mesh.num_faces
    mesh, _ = stage("small", drop_small_components, mesh, 0.01)
    mesh, frep = stage("fill", fill_holes, mesh, max_edges=64)
    n_fill = mesh.num_faces
    lo, hi, R = roi()
    cut, rep = stage("crop", crop_mesh, mesh, lo, hi, cap=True, rotation=R)
    up = R[2]
    voxel = 2 * (ROOM + 0.05) / args.res
    kept, srep = stage("support", remove_support_plane, cut, up, distance=2 * voxel, cut_offset=4 * voxel,
                       max_tilt_deg=5.0)
    dec, _ = stage("decimate", simplify_mesh, kept, args.max_faces, keep_uv=False)
    print(f"clean -> {n_clean:,}; fill -> {n_fill:,} ({frep.filled} loops); crop -> {cut.num_faces:,} "
          f"(split {rep.faces_split}, caps {rep.cap_faces}, open {rep.open_loops}); support found={srep.found} -> "
          f"{kept.num_faces:,}; decimate -> {dec.num_faces:,}")
    for k, s in times.items():
        print(f"{k:10s} {s:8.2f} s")


if __name__ == "__main__":
    main()
