"""``floor_snap`` on the CPU without training: the true depth of an unmasked synthetic scene with a blotchy floor.

The H200 runs of 2026-12-04 lost all of the unmasked assets' precision to the floor (its Gaussian depth is
blotchy: −0.07 … +0.2 around y = 0 for an object 2 high; benchmarks/results/milo_tsdf_h200_2026-12-04.md). This
script reproduces that on the CPU in a minute or two: it renders the *true* depth of object + floor at the training
views of :func:`meshlift.data.synthetic_scene.make_synthetic_scene`, moves the floor samples off the floor by a
smooth random height field (a symmetric part of ±``--bumps`` plus positive blotches up to ``--blotch`` over a
fifth of the floor, ``--jitter`` of independent noise per view, and optionally a ``--skirt`` rising towards the
object's foot), then builds the asset exactly as
``extract=tsdf`` does (:func:`meshlift.methods.milo.tsdf_mesh.fused_mesh` over the region of interest,
:func:`~meshlift.methods.milo.tsdf_mesh.object_asset` with the support cut) once per ``floor_snap`` value, and
scores each in the scene's evaluation box (F-score at 1 % of the diagonal).

    PYTHONPATH=src python benchmarks/floor_snap_cpu.py --mesh ../shared/data/spot/spot.obj --snaps 0 0.08
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time

import torch


def height_field(p: torch.Tensor, seed: int, bumps: float, blotch: float) -> torch.Tensor:
    """A smooth random height for floor points ``p [..., 3]`` (x, z used)."""
    g = torch.Generator().manual_seed(seed)
    h = torch.zeros(p.shape[:-1], dtype=torch.float64)
    x, z = p[..., 0].double(), p[..., 2].double()
    for k in range(6):  # symmetric bumps
        f = 2.0 + 3.0 * float(torch.rand(1, generator=g))
        a = 2 * math.pi * float(torch.rand(1, generator=g))
        ph = 2 * math.pi * float(torch.rand(1, generator=g))
        h += torch.sin(f * (math.cos(a) * x + math.sin(a) * z) + ph)
    h = bumps * h / h.abs().max().clamp_min(1e-9)
    b = torch.zeros_like(h)
    for k in range(4):  # positive blotches over part of the floor
        f = 3.0 + 3.0 * float(torch.rand(1, generator=g))
        a = 2 * math.pi * float(torch.rand(1, generator=g))
        ph = 2 * math.pi * float(torch.rand(1, generator=g))
        b += torch.sin(f * (math.cos(a) * x + math.sin(a) * z) + ph)
    b = b / b.abs().max().clamp_min(1e-9)
    return h + blotch * ((b - 0.6) / 0.4).clamp(0, 1)


def bad_by_height(pred, gt, box, tau=None, n=60_000) -> dict:
    """Share of the predicted surface samples inside ``box`` farther than ``tau`` (1 % of the truth's box diagonal)
    from the truth, binned by height y (the floor is y = 0): where the lost precision is."""
    import numpy as np
    import trimesh
    from scipy.spatial import cKDTree

    lo, hi = (np.asarray(b, dtype=np.float64) for b in box)
    g = trimesh.Trimesh(gt.v_pos.double().numpy(), gt.t_pos_idx.numpy(), process=False)
    tau = tau or 0.01 * float(np.linalg.norm(g.bounds[1] - g.bounds[0]))
    tree = cKDTree(trimesh.sample.sample_surface(g, 400_000, seed=0)[0])
    pm = trimesh.Trimesh(pred.v_pos.double().numpy(), pred.t_pos_idx.numpy(), process=False)
    q = trimesh.sample.sample_surface(pm, n, seed=1)[0]
    q = q[((q >= lo) & (q <= hi)).all(1)]
    far = tree.query(q)[0] > tau
    edges = [0.0, 0.05, 0.1, 0.2, 0.4, 10.0]
    return {f"{a:g}-{b:g}": round(float((far & (q[:, 1] >= a) & (q[:, 1] < b)).mean()), 4)
            for a, b in zip(edges[:-1], edges[1:])}


def main() -> int:
    from meshlift.data.synthetic_scene import make_synthetic_scene
    from meshlift.methods.engine import Monitor
    from meshlift.methods.gaussians.views import STORE_DTYPE, SplatProblem, SplatViews
    from meshlift.methods.milo import tsdf_mesh
    from meshlift.methods.milo.floor_depth import snap_floor_depths
    from meshlift.methods.milo.occupancy_labels import render_mesh_depth
    from meshlift.methods.milo.presets import get_preset
    from meshlift.metrics.geometry import mesh_metrics

    ap = argparse.ArgumentParser()
    ap.add_argument("--mesh", default="../shared/data/spot/spot.obj")
    ap.add_argument("--views", type=int, default=40)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--res", type=int, default=128, help="tsdf_resolution of the asset's fusion")
    ap.add_argument("--bumps", type=float, default=0.07)
    ap.add_argument("--blotch", type=float, default=0.13)
    ap.add_argument("--jitter", type=float, default=0.02)
    ap.add_argument("--skirt", type=float, default=0.0,
                    help="a skirt: floor samples within --skirt-width of the object's foot raised up to this")
    ap.add_argument("--skirt-width", type=float, default=0.15)
    ap.add_argument("--snaps", type=float, nargs="+", default=[0.0, 0.08])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--floor-cut-voxels", type=float, nargs="+", default=[2.0],
                    help="tsdf_mesh.FLOOR_CUT_VOXELS values tried with each floor_snap > 0")
    ap.add_argument("--cover-rules", nargs="+", default=["open"], choices=["open", "footprint"],
                    help="floor_depth.floor_cover rules tried with each floor_snap > 0 (footprint: before 2026-12-06)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    sc = make_synthetic_scene(args.mesh, n_train=args.views, n_test=1, resolution=args.size, seed=args.seed)
    v = sc.views("train")
    tr = SplatViews(v.world_to_camera, v.K, v.images.to(STORE_DTYPE), None, list(v.names))
    box = torch.stack([sc.eval_box_min.float(), sc.eval_box_max.float()])
    pb = SplatProblem(train=tr, test=tr, bounds=sc.scene_bounds.float(), name="ground", eval_box=box)
    hw = (tr.height, tr.width)
    d_obj = render_mesh_depth(sc.gt_mesh.v_pos, sc.gt_mesh.t_pos_idx, tr.world_to_camera, tr.K, hw).cpu()
    d_floor = render_mesh_depth(sc.ground_mesh.v_pos, sc.ground_mesh.t_pos_idx, tr.world_to_camera, tr.K, hw).cpu()
    floor = (d_floor > 0) & ((d_obj <= 0) | (d_floor < d_obj))
    depth = torch.where(floor, d_floor, d_obj)
    # move the floor samples along their rays to the bumped heights (y = h): z' = (h - c_y) / r_y
    from meshlift.methods.milo.floor_depth import _camera_rays

    c, r = _camera_rays(tr.world_to_camera, tr.K, *hw)
    p = c[:, None, None, :] + depth.double()[..., None] * r
    g = torch.Generator().manual_seed(args.seed + 1)
    h = height_field(p, args.seed, args.bumps, args.blotch) + args.jitter * torch.randn(p.shape[:-1], generator=g,
                                                                                           dtype=torch.float64)
    if args.skirt > 0:  # the fattened base: floor raised near where the object touches it, falling off linearly
        foot = sc.gt_mesh.v_pos.double()
        foot = foot[foot[:, 1] < 0.05][:, [0, 2]]
        fl = p[floor][:, [0, 2]]
        dist = torch.cat([torch.cdist(fl[i:i + 65536], foot).amin(1) for i in range(0, len(fl), 65536)])
        h[floor] += args.skirt * (1 - dist / args.skirt_width).clamp(0, 1)
    ry = r[..., 1]
    z_b = (h - c[:, None, None, 1]) / torch.where(ry < -1e-6, ry, -torch.ones_like(ry))
    bumped = torch.where(floor & (ry < -1e-6) & (z_b > 0), z_b, depth.double()).float()
    print(f"scene + depth: {time.perf_counter() - t0:.1f} s; floor pixels {100 * float(floor.float().mean()):.0f}%",
          flush=True)

    cfg = dataclasses.replace(get_preset("verylowres"), tsdf_resolution=args.res)
    roi = tsdf_mesh.region_of_interest(cfg, pb)
    region = tsdf_mesh.fusion_region("object", roi=roi, pad=0.02)
    voxel = float((roi.box_max - roi.box_min).max()) / args.res
    rows = {}
    runs = [(s, c, r) for s in args.snaps for c in (args.floor_cut_voxels if s > 0 else [None])
            for r in (args.cover_rules if s > 0 else [None])]
    for snap, cut_vox, rule in runs:
        t1 = time.perf_counter()
        d, plane, frep = bumped, None, None
        if snap > 0:
            half = 0.5 * float((roi.box_max - roi.box_min).max())
            d, plane, frep = snap_floor_depths(bumped, tr.world_to_camera, tr.K, roi, snap=snap * half,
                                               cover_rule=rule)
            tsdf_mesh.FLOOR_CUT_VOXELS = cut_vox
        mesh, _ = tsdf_mesh.fused_mesh(cfg, d, pb, region, args.res, near=0.01, device=torch.device("cpu"),
                                       monitor=Monitor())
        asset, crep = tsdf_mesh.object_asset(mesh, roi, monitor=Monitor(), support_voxel=voxel, floor=plane)
        m = mesh_metrics(asset, sc.gt_mesh, threshold_frac=0.01, n_samples=100_000, crop_box=sc.eval_box)
        bins = bad_by_height(asset, sc.gt_mesh, sc.eval_box, float(m.get("threshold", 0.0)) or None)
        key = f"snap={snap:g}" + ("" if cut_vox is None else f",cut={cut_vox:g}vox") + ("" if rule is None else f",{rule}")
        rows[key] = {k: m[k] for k in ("fscore", "precision", "recall", "chamfer_l1")}
        rows[key]["bad_by_height"] = bins
        rows[key]["support_plane_found"] = crep["support_plane"]["found"]
        rows[key]["support_offset"] = crep["support_plane"]["offset"]
        if frep is not None:
            rows[key]["floor"] = {k: getattr(frep, k) for k in ("found", "offset", "tilt_deg", "snapped_frac",
                                                                 "floor_cover", "footprint_cover", "cover_cell",
                                                                 "open_share", "below_frac", "protected_cells",
                                                                 "seconds")}
        print(f"{key}: F {m['fscore']:.4f} (P {m['precision']:.3f} / R {m['recall']:.3f}), "
              f"{time.perf_counter() - t1:.1f} s; far predicted samples by height: {bins}", flush=True)
    print(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
