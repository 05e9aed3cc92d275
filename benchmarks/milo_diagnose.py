"""What each stage of MILo's mesh costs in F-score, on a finished run with a known truth (a mesh input).

Reads OUT/checkpoint.pt and OUT/config.json of a ``meshlift reconstruct MESH --method milo --out OUT`` run and
prints, against the input mesh (in the normalised frame the run trains in; F-score at 1% of its bbox diagonal):

- the Gaussians' surface depth against the true depth of the training views (the gt mesh rendered by
  meshlift's rasterizer): signed median error (> 0: behind the surface), |error| quantiles, coverage;
- (a) the mesh from depth fusion alone (fused SDF at the pivots -> marching tets, no learned shift), with and
  without the large-edge filter, and the same with the *true* depth fused (the pivots' ceiling);
- (b) the mesh of the learned occupancy in the checkpoint (base + shift);
- (c) that mesh after extraction's frustum culling + cleaning.

    python benchmarks/milo_diagnose.py runs/spot            # CPU or CUDA, a few seconds at 64 px
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def _f(mesh_or_vf, gt, frac):
    from meshlift.metrics.geometry import mesh_metrics
    from meshlift.structures.mesh import Mesh

    if isinstance(mesh_or_vf, tuple):
        v, f = mesh_or_vf
        if f.shape[0] == 0:
            return {"fscore": 0.0, "precision": 0.0, "recall": 0.0, "chamfer_l1": float("nan"), "faces": 0}
        mesh_or_vf = Mesh(v.detach().float().cpu(), f.long().cpu())
    g = mesh_metrics(mesh_or_vf, gt, threshold_frac=frac, n_samples=50_000)
    return {k: g[k] for k in ("fscore", "precision", "recall", "chamfer_l1")} | {"faces": int(mesh_or_vf.num_faces)}


def load_run(run: Path, device: torch.device):
    """``(cfg, problem, gt mesh, checkpoint, params on device, settings)`` of a finished milo run in ``run``."""
    from meshlift.methods.milo.config import MiloConfig, apply_dict
    from meshlift.methods.milo.reconstruct import load_problem
    from meshlift.render.splat import SplatSettings

    saved = json.loads((run / "config.json").read_text())
    saved = {"reinit_step": 0, **saved.get("config", saved)}  # runs from before the re-init field
    cfg = apply_dict(MiloConfig(), {k: v for k, v in saved.items() if k in MiloConfig.__dataclass_fields__})
    problem, gt = load_problem(cfg)
    ck = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=False)
    params = {k: v.to(device) for k, v in ck["params"].items()}
    return cfg, problem, gt, ck, params, SplatSettings(check_inputs=False, chunk_elements=cfg.chunk_elements)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--trunc", type=float, nargs="*", default=[],
                    help="also fuse the true depth with these truncations (× the pixel footprint)")
    args = ap.parse_args()
    from meshlift.methods.engine import Monitor
    from meshlift.methods.milo import extract
    from meshlift.methods.milo.depth_fusion import fuse_depth_at_pivots
    from meshlift.methods.milo.mesh_in_loop import MeshInTheLoop
    from meshlift.methods.milo.occupancy_labels import render_mesh_depth
    from meshlift.methods.milo.pivots import PivotSDF

    dev = torch.device(args.device)
    cfg, problem, gt, ck, params, settings = load_run(args.run, dev)
    reg = MeshInTheLoop(cfg, problem, dev, monitor=Monitor(), settings=settings,
                        near=cfg.near_frac * problem.scene_scale)
    reg.load_state_dict(ck["regularizer"])
    if not reg.active:  # the run stopped before mesh_start: start the mesh as the extraction does
        reg.start(int(ck["step"]), params)
    views = problem.train
    w2c, K = views.world_to_camera.to(dev), views.K.to(dev)
    res = (views.height, views.width)
    out: dict = {"run": str(args.run), "gaussians": int(params["means"].shape[0]), "pivots": 9 * int(reg.idx.numel()),
                 "tets": int(reg.tets.shape[0]), "scene_scale": problem.scene_scale, "truncation": reg.truncation}

    with torch.no_grad():
        d_true = render_mesh_depth(gt.v_pos.to(dev), gt.t_pos_idx.to(dev), w2c, K, res)
        d_g = reg.gaussian_depths(params)
    both = (d_true > 0) & (d_g > 0)
    err = (d_g - d_true)[both]
    q = torch.quantile(err.abs().float(), torch.tensor([0.5, 0.9]))
    out["depth"] = {"signed_median": float(err.median()), "abs_median": float(q[0]), "abs_p90": float(q[1]),
                    "gt_covered_gauss_empty": float(((d_true > 0) & (d_g <= 0)).sum() / (d_true > 0).sum()),
                    "gauss_covered_gt_empty": float(((d_true <= 0) & (d_g > 0)).sum() / max(int((d_g > 0).sum()), 1)),
                    "pixel_footprint": float(2 * problem.scene_scale / 1.1 * 0.4142 / views.height)}
    sc = scales = None
    with torch.no_grad():
        piv, ps = reg.pivots(params)
        sc = ps.reshape(-1)
        tets = reg.tets
        learned = reg.sdf.sdf().reshape(-1)

        def mt(sdf, filt=True):
            from meshlift.isosurface.dmtet import marching_tets

            return marching_tets(piv.reshape(-1, 3), sdf, tets, scales=sc if filt else None)

        fused = fuse_depth_at_pivots(piv, d_g, w2c, K, truncation=reg.truncation)
        oracle = fuse_depth_at_pivots(piv, d_true, w2c, K, truncation=reg.truncation)
        fs = PivotSDF(fused.occupancy.float()).sdf().reshape(-1)
        os_ = PivotSDF(oracle.occupancy.float()).sdf().reshape(-1)
        for frac in (0.01, 0.02):
            tag = f"@{int(frac * 100)}%"
            out[f"a_fused_filter{tag}"] = _f(mt(fs), gt, frac)
            out[f"a_fused_nofilter{tag}"] = _f(mt(fs, False), gt, frac)
            out[f"a_oracle_filter{tag}"] = _f(mt(os_), gt, frac)
            out[f"a_oracle_nofilter{tag}"] = _f(mt(os_, False), gt, frac)
            out[f"b_learned_filter{tag}"] = _f(mt(learned), gt, frac)
        for k in args.trunc:
            t = k * out["depth"]["pixel_footprint"]
            o2 = PivotSDF(fuse_depth_at_pivots(piv, d_true, w2c, K, truncation=t).occupancy.float()).sdf().reshape(-1)
            g2 = PivotSDF(fuse_depth_at_pivots(piv, d_g, w2c, K, truncation=t).occupancy.float()).sdf().reshape(-1)
            out[f"trunc_{k}px"] = {"oracle@1%": _f(mt(o2), gt, 0.01)["fscore"], "fused@1%": _f(mt(g2), gt, 0.01)["fscore"]}
    mesh, rep = extract.final_mesh(reg, params, keep_components=cfg.keep_components,
                                   min_component_faces=cfg.min_component_faces)
    for frac in (0.01, 0.02):
        out[f"c_cleaned@{int(frac * 100)}%"] = _f(mesh, gt, frac)
    out["clean_report"] = {k: rep[k] for k in ("raw_faces", "frustum_culled_faces", "small_fragment_faces", "faces")}
    print(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
