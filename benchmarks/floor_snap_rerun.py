"""Rerun the ``floor_snap`` decision and the asset on a finished MILo run: same Gaussians, other floor rules.

A run directory of ``meshlift reconstruct MESH --method milo --set ref_scene=ground --out RUN`` (what
``benchmarks/milo_gpu.sh`` / ``milo_results.py`` leave in ``--out``/CASE) holds ``config.json`` and
``checkpoint.pt``. This script loads them (``milo_diagnose.load_run``), renders the training views' surface depth
once (cached in ``RUN/floor_rerun_depths.pt``; ``--no-cache`` renders again), and for each rule builds the asset
exactly as ``extract=tsdf`` does (:func:`meshlift.methods.milo.tsdf_mesh.floor_flattened`'s snap,
:func:`~meshlift.methods.milo.tsdf_mesh.fused_mesh` over the region of interest,
:func:`~meshlift.methods.milo.tsdf_mesh.object_asset` with the support cut) and scores it against the truth in the
scene's evaluation box (F-score at 1 % of the diagonal, as ``metrics.json``):

- ``old``: the floor cover judged on all the footprint cells (``cover_rule="footprint"``, 40 %);
- ``new``: cells sized by the floor points' density, the object's footprint left out, 70 %, nothing below
  (``cover_rule="open"``, :func:`meshlift.methods.milo.floor_depth.floor_cover`);
- ``standing``: ``new``, the fit's band share taken of the lowest points not standing above the plane
  (``inlier_rule="standing"``, :func:`meshlift.methods.milo.floor_depth.fit_floor_plane`);
- ``nosnap``: no flattening (``floor_snap=0``; the mesh's own support plane cut).

    PYTHONPATH=src python benchmarks/floor_snap_rerun.py runs/g/bob_ground --rules old new nosnap [--device cuda]

Prints one line per rule and a JSON summary (``--json FILE`` also writes it). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

RULES = {"old": ("footprint", "lowest"), "new": ("open", "lowest"), "standing": ("open", "standing"), "nosnap": None}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--rules", nargs="+", default=["new", "standing", "nosnap"], choices=sorted(RULES))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-cache", action="store_true", help="render the depth again instead of RUN/floor_rerun_depths.pt")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from milo_diagnose import load_run

    from meshlift.methods.engine import Monitor
    from meshlift.methods.milo import tsdf_mesh
    from meshlift.methods.milo.floor_depth import snap_floor_depths
    from meshlift.metrics.geometry import mesh_metrics

    t0 = time.perf_counter()
    dev = torch.device(args.device)
    cfg, problem, gt, _, params, settings = load_run(args.run, dev)
    if gt is None:
        raise SystemExit(f"{args.run}: not a run on a mesh file (no truth to score against)")
    monitor = Monitor()
    near = cfg.near_frac * problem.scene_scale
    cache = args.run / "floor_rerun_depths.pt"
    if cache.is_file() and not args.no_cache:
        depths = torch.load(cache, map_location="cpu")
    else:
        depths, _ = tsdf_mesh.surface_depths(cfg, params, problem, near=near, device=dev, settings=settings,
                                             monitor=monitor)
        torch.save(depths, cache)
    del params
    roi = tsdf_mesh.region_of_interest(cfg, problem)
    masked = problem.train.alpha is not None
    support = cfg.object_asset and cfg.remove_support and not masked
    half = 0.5 * float((roi.box_max - roi.box_min).max())
    snap = float(cfg.floor_snap or 0.08) * half
    voxel = 2 * half / cfg.tsdf_resolution
    box = problem.eval_box
    tr = problem.train
    print(f"{args.run}: {len(tr)} views {tr.width}x{tr.height}, depth {time.perf_counter() - t0:.1f} s, snap "
          f"{snap:.4g}, support cut {'on' if support else 'off (masks)'}", flush=True)
    rows = {}
    for name in args.rules:
        t1 = time.perf_counter()
        rule = RULES[name]
        d, plane, frep = depths, None, None
        if rule is not None and support:
            d, plane, frep = snap_floor_depths(depths, tr.world_to_camera, tr.K, roi, snap=snap,
                                               max_tilt_deg=tsdf_mesh.SUPPORT_MAX_TILT_DEG, device=dev,
                                               chunk_views=max(1, cfg.mesh_chunk_views), cover_rule=rule[0],
                                               inlier_rule=rule[1])
        obj, _ = tsdf_mesh.fused_mesh(cfg, d, problem, tsdf_mesh.fusion_region("object", roi=roi, pad=0.02),
                                      cfg.tsdf_resolution, near=near, device=dev, monitor=monitor)
        asset, crep = tsdf_mesh.object_asset(obj, roi, monitor=monitor, support_voxel=voxel if support else 0.0,
                                             floor=plane)
        m = mesh_metrics(asset, gt, threshold_frac=0.01, n_samples=cfg.eval_samples,
                         crop_box=None if box is None else (box[0].tolist(), box[1].tolist()))
        row = {k: round(float(m[k]), 4) for k in ("fscore", "precision", "recall", "chamfer_l1")}
        row["faces"] = int(asset.num_faces)
        if frep is not None:
            row["floor"] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in frep.to_dict().items()
                            if k in ("found", "offset", "tilt_deg", "inlier_frac", "floor_cover", "footprint_cover",
                                     "cover_cell", "open_share", "below_frac", "snapped_frac", "protected_cells",
                                     "notes")}
        row["support_plane_found"] = crep.get("support_plane", {}).get("found")
        row["seconds"] = round(time.perf_counter() - t1, 1)
        rows[name] = row
        fl = row.get("floor", {})
        print(f"{name}: F {row['fscore']:.4f} (P {row['precision']:.4f} / R {row['recall']:.4f}), floor "
              f"{'snapped' if fl.get('found') else 'not snapped'} (cover {fl.get('floor_cover', 0):.3f}, footprint "
              f"{fl.get('footprint_cover', 0):.3f}, cell {fl.get('cover_cell', 0):.4g}, open "
              f"{fl.get('open_share', 0):.3f}, below {fl.get('below_frac', 0):.4f}), {row['seconds']} s", flush=True)
    out = {"run": str(args.run), "snap": snap, "rules": rows}
    print(json.dumps(out, indent=1, default=str))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
