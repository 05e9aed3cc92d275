"""The object TSDF fusion alone, fed the TRUE depth: what the fusion loses with perfect Gaussians (issue 33).

Builds the training views of a mesh as ``meshlift reconstruct MESH --method milo`` does (``--quick`` or the
preset and ``--set`` overrides), renders the truth mesh's depth at them (meshlift's rasterizer), optionally adds
Gaussian noise (``--noise``: standard deviation in training-pixel footprints at the region's centre, the
Gaussians' depth error is ~1.5 px on spot, :func:`meshlift.methods.milo.tsdf_mesh.truncation_voxels`), writes the
free-space depth outside the masks, and fuses it exactly as the run fuses a mesh input
(:func:`meshlift.methods.milo.tsdf_mesh.fused_mesh`, object box, no majority carving) for each
``tsdf_trunc_spread`` in ``--spread``. Prints F-score / precision / recall at 1% of the bbox diagonal against the
scored truth (a scan's holes closed, :func:`meshlift.data.synthetic.close_scan_holes`) and against the truth as
given, the band in voxels and the measured depth disagreement. Separates the fusion's error (this script) from
the Gaussians' (benchmarks/milo_tsdf_diagnose.py on a finished run).

    OMP_NUM_THREADS=1 python benchmarks/truth_fusion.py ../shared/data/classic_meshes/stanford-bunny.obj --quick \\
        --spread 0 8 --noise 0 1.5
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mesh")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--preset", default=None)
    ap.add_argument("--set", nargs="*", default=[], dest="overrides")
    ap.add_argument("--spread", type=float, nargs="*", default=[0.0, 8.0])
    ap.add_argument("--noise", type=float, nargs="*", default=[0.0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--depth-of", choices=("given", "closed"), default="closed",
                    help="render the depth of the truth with its holes closed (what the run's views show since "
                         "2026-12-06) or as given (the open scan, what they showed before)")
    args = ap.parse_args()
    from meshlift.metrics.geometry import mesh_metrics
    from meshlift.methods.engine import Monitor
    from meshlift.methods.milo import tsdf_mesh
    from meshlift.methods.milo.occupancy_labels import render_mesh_depth
    from meshlift.methods.milo.reconstruct import build_config, load_problem
    from meshlift.structures.mesh import Mesh

    dev = torch.device(args.device)
    cfg = build_config(args.mesh, args.preset, args.quick, None, args.overrides)
    cfg = dataclasses.replace(cfg, tsdf_carve_fraction=0.0)  # what the run does for a mesh input
    t0 = time.perf_counter()
    problem, gt = load_problem(cfg)
    tr = problem.train
    holes = gt.extras.get("truth_holes") or {}
    open_gt = None  # the truth as given: the fill faces are appended after the original ones
    if holes.get("closed"):
        open_gt = Mesh(gt.v_pos, gt.t_pos_idx[:gt.num_faces - holes["faces_added"]])
    shown = open_gt if open_gt is not None and args.depth_of == "given" else gt  # the run's views show the closed truth
    with torch.no_grad():
        d_true = render_mesh_depth(shown.v_pos.to(dev), shown.t_pos_idx.to(dev), tr.world_to_camera.to(dev), tr.K.to(dev),
                                   (tr.height, tr.width)).cpu()
    region = tsdf_mesh.fusion_region("object", bounds=problem.bounds, pad=0.05)
    foot = tsdf_mesh._footprint_and_side(problem, region)[0]
    out: dict = {"mesh": args.mesh, "views": len(tr), "resolution": [tr.width, tr.height],
                 "tsdf_resolution": cfg.tsdf_resolution, "pixel_footprint": foot, "truth_holes": holes, "depth_of": args.depth_of,
                 "setup_s": round(time.perf_counter() - t0, 1), "rows": []}
    free = tr.alpha[..., 0].float().cpu() < 0.5
    for noise in args.noise:
        d = d_true.clone()
        if noise > 0:
            g = torch.Generator().manual_seed(args.seed)
            d = torch.where(d > 0, d + noise * foot * torch.randn(d.shape, generator=g), d)
        d[free] = tsdf_mesh.FREE_SPACE_DEPTH * problem.scene_scale
        for sp in args.spread:
            c = dataclasses.replace(cfg, tsdf_trunc_spread=sp)
            t1 = time.perf_counter()
            m, rep = tsdf_mesh.fused_mesh(c, d, problem, region, c.tsdf_resolution, near=cfg.near_frac * problem.scene_scale,
                                          device=dev, monitor=Monitor())
            row = {"noise_px": noise, "spread": sp, "trunc_voxels": round(rep["trunc_voxels"], 2),
                   "disagreement": rep["depth_spread"].get("disagreement"), "faces": m.num_faces,
                   "seconds": round(time.perf_counter() - t1, 1)}
            for name, truth in (("closed", gt), ("open", open_gt)):
                if truth is None:
                    continue
                gm = mesh_metrics(m, truth, threshold_frac=0.01, n_samples=100_000)
                row[name] = {k: round(float(gm[k]), 4) for k in ("fscore", "precision", "recall")}
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
    print(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
