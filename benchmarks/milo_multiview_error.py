"""How well a MILo run's training views agree on the surface: PGSR's reprojection error of their depth maps.

Reads OUT/checkpoint.pt and OUT/config.json of ``meshlift reconstruct CAPTURE --method milo --out OUT`` (via
``milo_diagnose.load_run``), renders the surface depth (``surface_depth``, opaque at alpha > 0.5) of every training
view, and for each view and its nearest neighbour (:func:`meshlift.isosurface.depth_consistency.view_neighbours`,
k = 1) computes the forward-backward reprojection error φ (:func:`meshlift.geometry.reprojection.reprojection_error`,
pixels). Prints the median / mean φ over valid pixels, the share under 1 px and the share of pixels valid: the
direct target of ``multiview_weight`` (issue #33), measured on the training views themselves.

    PYTHONPATH=src python3 benchmarks/milo_multiview_error.py RUN [RUN ...] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def multiview_error(run: Path, device: torch.device) -> dict:
    from meshlift.geometry.reprojection import reprojection_error
    from meshlift.isosurface.depth_consistency import view_neighbours
    from meshlift.methods.milo.tsdf_mesh import render_depths

    from milo_diagnose import load_run

    cfg, problem, _, ck, params, settings = load_run(run, device)
    tr = problem.train
    near = cfg.near_frac * problem.scene_scale
    depth = render_depths(params, tr, near=near, device=device, settings=settings, backend=cfg.splat_backend,
                          depth=cfg.surface_depth, min_alpha=0.5)
    nb = view_neighbours(tr.world_to_camera, 1)[:, 0]
    keep = (nb >= 0).nonzero().squeeze(-1)
    i, j = keep, nb[keep]
    w2c, K = tr.world_to_camera.float(), tr.K.float()
    phi, ok = reprojection_error(depth[i], depth[j], K[i], w2c[i], K[j], w2c[j])
    p = phi[ok]
    return {"run": str(run), "views": int(len(keep)), "valid_share": float(ok.float().mean()),
            "median_px": float(p.median()) if p.numel() else None, "mean_px": float(p.mean()) if p.numel() else None,
            "under_1px_share": float((p < 1).float().mean()) if p.numel() else None}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    for run in args.runs:
        print(json.dumps(multiview_error(run, torch.device(args.device))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
