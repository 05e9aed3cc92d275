"""Where the F-score of MILo's ``extract=tsdf`` mesh goes, stage by stage, on a finished run with a known truth.

Reads OUT/checkpoint.pt and OUT/config.json of ``meshlift reconstruct MESH --method milo --out OUT`` (a mesh
input, object views) and prints against the input mesh (normalised frame; F-score at 1% of its bbox diagonal):

- the Gaussians' plane depth and median depth against the true depth of the training views (the gt mesh
  rendered by meshlift's rasterizer): signed median error (> 0: behind the surface), |error| quantiles,
  coverage, in pixel footprints too;
- the TSDF mesh (same region, resolution, truncation and cleaning as the run) fused from the **true** depth
  (the ceiling of the fusion), from the plane depth and from the median depth, each raw and cleaned;
- optionally other truncations (``--trunc``), resolutions (``--res``) and depth-disagreement spreads
  (``--spread``: ``tsdf_trunc_spread`` values, 0 = the band without it, issue 33).

The fusion is the run's: a mesh input fuses without majority carving (``tsdf_carve_fraction=0``, as
:func:`meshlift.methods.milo.tsdf_mesh.extract_assets` does for it; before 2026-12-06 this script carved, so
its rows differed from the run's). The truth is the scored one (a scan's holes closed,
:func:`meshlift.data.synthetic.close_scan_holes`).

    python benchmarks/milo_tsdf_diagnose.py runs/spot [--device cuda] [--trunc 2 6] [--res 256] [--spread 0 4 8]
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch


def _f(mesh, gt, frac=0.01):
    from meshlift.metrics.geometry import mesh_metrics

    if mesh.num_faces == 0:
        return {"fscore": 0.0, "precision": 0.0, "recall": 0.0, "chamfer_l1": float("nan"), "faces": 0}
    g = mesh_metrics(mesh, gt, threshold_frac=frac, n_samples=50_000)
    return {k: round(float(g[k]), 4) for k in ("fscore", "precision", "recall", "chamfer_l1")} | {"faces": int(mesh.num_faces)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--trunc", type=float, nargs="*", default=[])
    ap.add_argument("--res", type=int, nargs="*", default=[])
    ap.add_argument("--spread", type=float, nargs="*", default=[])
    args = ap.parse_args()
    from meshlift.methods.engine import Monitor
    from meshlift.methods.milo import tsdf_mesh
    from meshlift.methods.milo.occupancy_labels import render_mesh_depth
    from meshlift.structures.mesh import Mesh

    from milo_diagnose import load_run  # benchmarks/ is on sys.path when this file runs as a script

    dev = torch.device(args.device)
    cfg, problem, gt, _, params, settings = load_run(args.run, dev)
    if problem.eval_box is None:  # a mesh input: the run fuses its object box without majority carving
        cfg = dataclasses.replace(cfg, tsdf_carve_fraction=0.0)
    near = cfg.near_frac * problem.scene_scale
    views = problem.train
    w2c, K = views.world_to_camera.to(dev), views.K.to(dev)
    with torch.no_grad():
        d_true = render_mesh_depth(gt.v_pos.to(dev), gt.t_pos_idx.to(dev), w2c, K, (views.height, views.width)).cpu()
    foot = float(2 * problem.scene_scale / 1.1 * 0.4142 / views.height)
    out: dict = {"run": str(args.run), "gaussians": int(params["means"].shape[0]), "pixel_footprint": foot,
                 "threshold_1pct": None, "truth_holes": gt.extras.get("truth_holes")}
    depths = {"true": d_true}
    for kind in ("median_plane", "plane", "median"):
        d = tsdf_mesh.render_depths(params, views, near=near, device=dev, settings=settings, backend=cfg.splat_backend,
                                    depth=kind)
        depths[kind] = d
        both = (d_true > 0) & (d > 0)
        err = (d - d_true)[both]
        q = torch.quantile(err.abs().float(), torch.tensor([0.5, 0.9]))
        out[f"depth_{kind}"] = {"signed_median": float(err.median()), "abs_median": float(q[0]), "abs_p90": float(q[1]),
                                "abs_median_px": float(q[0]) / foot,
                                "gt_covered_gauss_empty": float(((d_true > 0) & (d <= 0)).sum() / (d_true > 0).sum())}
    region = tsdf_mesh.fusion_region("object", bounds=problem.bounds, pad=0.05)  # what a mesh input's run fuses
    monitor = Monitor()

    def mesh_from(d, c):
        d = d.clone()
        if views.alpha is not None:  # masks: free space outside them, as the run does
            d[views.alpha[..., 0].float().cpu() < 0.5] = tsdf_mesh.FREE_SPACE_DEPTH * problem.scene_scale
        try:
            m, rep = tsdf_mesh.fused_mesh(c, d, problem, region, c.tsdf_resolution, near=near, device=dev,
                                          monitor=monitor)
        except Exception as exc:  # noqa: BLE001 - a failed stage is a row, not a crash
            return {"error": str(exc)[:200]}
        raw = Mesh(m.v_pos, m.t_pos_idx)
        return _f(raw, gt) | {"raw_faces": rep["raw_faces"], "trunc_voxels": round(rep["trunc_voxels"], 2),
                              "disagreement": rep["depth_spread"].get("disagreement")}

    for kind, d in depths.items():
        out[f"tsdf_{kind}"] = mesh_from(d, cfg)
    for t in args.trunc:
        for kind in ("true", cfg.surface_depth):
            out[f"tsdf_{kind}_trunc{t:g}"] = mesh_from(depths[kind], dataclasses.replace(cfg, tsdf_trunc_voxels=t))
    for r in args.res:
        for kind in ("true", cfg.surface_depth):
            out[f"tsdf_{kind}_res{r}"] = mesh_from(depths[kind], dataclasses.replace(cfg, tsdf_resolution=r))
    for sp in args.spread:
        for kind in ("true", cfg.surface_depth):
            out[f"tsdf_{kind}_spread{sp:g}"] = mesh_from(depths[kind], dataclasses.replace(cfg, tsdf_trunc_spread=sp))
    print(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
