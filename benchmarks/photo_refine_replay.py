"""Variants of the photometric refinement on one finished capture run's whole-scene mesh (issue 33).

Reads OUT/checkpoint.pt and OUT/config.json of ``meshlift reconstruct CAPTURE --method milo --out OUT`` (a capture
without masks: the fox), re-extracts the *unrefined* whole-scene mesh exactly as the run does
(``milo_fox_gap.scene_mesh``, cached in OUT/gap_scene_<key>.pt), then for each variant refines it with the run's
``photo_refine_*`` settings changed by the variant, as the run does (:func:`meshlift.methods.milo.tsdf_mesh.refined`:
colours fused again from the refined surface unless the colour term fitted them), and renders the test views.
Prints mesh PSNR per test view and the mean, beside the Gaussians'; ``--json`` writes them.

    PYTHONPATH=src python benchmarks/photo_refine_replay.py /tmp/cpu/fox --device cpu \\
        --variant base:photo_refine_steps=0 --variant default: --variant smooth300:photo_refine_smooth=300

A variant is ``LABEL:key=value,key=value`` (config fields; an empty list = the run's settings); ``--set key=value``
changes the re-extraction itself (e.g. ``fill_hole_edges=1024``; its own cache). Each row also gives the share of the
test pixels the mesh leaves empty. ``--train-views K`` also scores K evenly spaced *training* views (mesh and
Gaussians): a mesh that fits the training photos well but not the test ones overfits its colours; one that fits
neither is short of capacity or of steps. ``--edge-split PX`` splits each scored view's squared error (mesh and
Gaussians) into the pixels within PX pixels of a depth edge of the mesh (a jump of more than 5 % in camera depth
between neighbouring pixels, or the mesh's border with empty pixels) and the rest: where the gap lies, at the
occlusion boundaries (geometry) or inside surfaces (colour). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def depth_edges(mesh, views, dev, indices, px: int) -> torch.Tensor:
    """``[V, H, W]`` bool: pixels within ``px`` pixels of a depth edge of ``mesh`` (relative jump > 5 % between
    4-neighbours, or covered next to empty) in the views ``indices``."""
    from meshlift import render as R
    from meshlift.methods.milo.vertex_render import mesh_world_to_clip

    m = mesh.to(dev)
    out = []
    for i in indices:
        b = views.batch(torch.tensor([i]), dev)
        v = m.v_pos.float()
        clip = mesh_world_to_clip(b.world_to_camera, b.K, views.width, views.height, v)
        pos = torch.einsum("cij,vj->cvi", clip, torch.cat([v, torch.ones_like(v[:, :1])], 1))
        rast, _ = R.rasterize(pos, m.t_pos_idx.int(), (views.height, views.width), precise=True)
        cam_z = (torch.cat([v, torch.ones_like(v[:, :1])], 1) @ b.world_to_camera[0].float().T)[:, 2:3].abs()
        d, _ = R.interpolate(cam_z, rast, m.t_pos_idx.int())
        d = torch.where(rast[..., 3:] > 0, d, torch.zeros_like(d))[0, ..., 0]
        ld = torch.log(d.clamp(min=1e-8))
        cov = d > 0
        e = torch.zeros_like(cov)
        for dim in (0, 1):
            a, bb = ld.narrow(dim, 0, ld.shape[dim] - 1), ld.narrow(dim, 1, ld.shape[dim] - 1)
            ca, cb = cov.narrow(dim, 0, cov.shape[dim] - 1), cov.narrow(dim, 1, cov.shape[dim] - 1)
            jump = ((a - bb).abs() > 0.05) & ca & cb | (ca != cb)
            e.narrow(dim, 0, e.shape[dim] - 1).logical_or_(jump)
            e.narrow(dim, 1, e.shape[dim] - 1).logical_or_(jump)
        if px > 0:
            e = torch.nn.functional.max_pool2d(e[None, None].float(), 2 * px + 1, 1, px)[0, 0] > 0
        out.append(e.cpu())
    return torch.stack(out)


def error_split(img: torch.Tensor, target: torch.Tensor, edges: torch.Tensor) -> dict:
    """Squared error of ``img`` against ``target`` (``[V, H, W, 3]``) at the ``edges`` pixels and the rest: the share
    of the total at edges, and the PSNR of each part."""
    se = ((img.float() - target.float()) ** 2).mean(-1)
    tot = float(se.sum())
    e_sum, i_sum = float(se[edges].sum()), float(se[~edges].sum())
    n_e, n_i = int(edges.sum()), int((~edges).sum())
    psnr = lambda s, n: float("nan") if n == 0 or s <= 0 else -10 * torch.log10(torch.tensor(s / n)).item()
    return {"edge_pixels": n_e / max(n_e + n_i, 1), "edge_error_share": e_sum / max(tot, 1e-12),
            "psnr_edges": psnr(e_sum, n_e), "psnr_interior": psnr(i_sum, n_i)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--variant", action="append", default=[], help="LABEL:key=value,... (config fields)")
    ap.add_argument("--set", action="append", default=[],
                    help="config override of the re-extraction (key=value; e.g. fill_hole_edges=1024), as milo_fox_gap")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--images", type=Path, default=None, help="write each variant's mesh render of test view 0 here")
    ap.add_argument("--image-views", default="0",
                    help="which test views --images writes: comma-separated indices, or 'all' (default: 0)")
    ap.add_argument("--raster-compare", action="store_true",
                    help="first render the unrefined mesh at the test views with each raster backend (torch, and triton "
                         "on CUDA) and print the empty pixels of each, isolated ones apart (a watertightness check)")
    ap.add_argument("--train-views", type=int, default=0,
                    help="also score this many evenly spaced training views (mesh and Gaussians; default 0: none)")
    ap.add_argument("--edge-split", type=int, default=-1, metavar="PX",
                    help="split the error at depth edges (within PX pixels) from the rest (module docstring; -1: off)")
    args = ap.parse_args()
    from meshlift.methods.gaussians.evaluate import image_metrics, render_views
    from meshlift.methods.milo.config import apply_dict
    from meshlift.methods.engine import Monitor
    from meshlift.methods.milo.extract import render_mesh_views
    from meshlift.methods.milo.tsdf_mesh import refined
    from milo_fox_gap import render_with_empty, run_inputs

    dev = torch.device(args.device)
    extract_over = dict(kv.split("=", 1) for kv in args.set)
    cfg, problem, params, settings, mesh, _, gauss, targets, bg, near = run_inputs(args.run, dev, extract_over)
    test = problem.test
    g = image_metrics(gauss, targets, with_lpips=False)
    print(f"whole-scene mesh ({extract_over or 'as the run'}): {mesh.num_faces:,} faces; Gaussians {g['psnr']:.2f} dB "
          f"({', '.join(f'{p:.2f}' for p in g['psnr_per_view'])})", flush=True)
    rows = {"gaussians": {"psnr": g["psnr"], "psnr_per_view": g["psnr_per_view"]}, "faces": int(mesh.num_faces)}
    train_idx, train_targets = None, None
    if args.train_views > 0:
        n_tr = len(problem.train)
        train_idx = sorted({int(round(k * (n_tr - 1) / max(args.train_views - 1, 1)))
                            for k in range(min(args.train_views, n_tr))})
        g_tr, train_targets = render_views(params, problem.train, sh_degree=cfg.sh_degree, background=cfg.background,
                                           near=near, device=dev, settings=settings, backend=cfg.splat_backend,
                                           indices=train_idx)
        gt = image_metrics(g_tr, train_targets, with_lpips=False)
        rows["gaussians"]["train_psnr"] = gt["psnr"]
        rows["train_views"] = train_idx
        print(f"training views {train_idx}: Gaussians {gt['psnr']:.2f} dB", flush=True)
    split_masks = {}
    if args.edge_split >= 0:  # the unrefined mesh's depth edges: the same pixels for every variant
        split_masks["test"] = depth_edges(mesh, test, dev, list(range(len(test))), args.edge_split)
        rows["gaussians"]["split"] = error_split(gauss, targets, split_masks["test"])
        if train_idx is not None:
            split_masks["train"] = depth_edges(mesh, problem.train, dev, train_idx, args.edge_split)
            rows["gaussians"]["train_split"] = error_split(g_tr, train_targets, split_masks["train"])
        print(f"edge split ({args.edge_split} px): Gaussians {rows['gaussians']['split']}"
              + (f"; training {rows['gaussians']['train_split']}" if "train" in split_masks else ""), flush=True)
    if args.raster_compare:
        from meshlift.kernels.choice import use_kernels

        rows["raster_compare"] = {}
        for be in ["torch"] + (["triton"] if dev.type == "cuda" else []):
            with use_kernels(raster=be):
                w, empty = render_with_empty(mesh, test, dev, bg)
            e = empty.float()[:, None]
            iso = (e > 0) & (torch.nn.functional.avg_pool2d(e, 3, 1, 1) * 9 <= 1.01)
            m = image_metrics(w, targets, with_lpips=False)
            rows["raster_compare"][be] = {"empty": float(e.mean()), "isolated": int(iso.sum()), "psnr": m["psnr"]}
            print(f"raster {be}: empty {100 * float(e.mean()):.3f} % of the test pixels, {int(iso.sum())} isolated, "
                  f"mesh {m['psnr']:.2f} dB", flush=True)
    picks = range(len(test)) if args.image_views == "all" else [int(i) for i in args.image_views.split(",")]
    tag = "" if not args.set else "_" + "_".join(kv.replace("=", "") for kv in args.set)
    for spec in args.variant or ["base:photo_refine_steps=0", "default:"]:
        label, _, kvs = spec.partition(":")
        over = dict(kv.split("=", 1) for kv in kvs.split(",") if kv)
        c = apply_dict(cfg, over) if over else cfg
        t0 = time.perf_counter()
        out, r = mesh, {"steps": 0}
        if c.photo_refine_steps > 0:  # as the run does: refined, colours fused again unless the colour term fitted them
            out, r = refined(c, mesh, problem, dev, Monitor(), None, None, label=label)
        img, empty_px = render_with_empty(out, test, dev, bg, supersample=c.mesh_supersample)
        m = image_metrics(img, targets, with_lpips=False)
        if args.images is not None:
            from meshlift.io.images import write_image

            args.images.mkdir(parents=True, exist_ok=True)
            for i in picks:
                write_image(args.images / f"{label}{tag}_{test.names[i]}.png", img[i])
                if not (args.images / f"target_{test.names[i]}.png").exists():
                    write_image(args.images / f"target_{test.names[i]}.png", targets[i])
        empty = float(empty_px.float().mean())
        diffuse = None  # view-dependent colours: also the diffuse colours alone (what the exports hold)
        if "v_sh_rest" in out.extras:
            diffuse = image_metrics(render_mesh_views(out, test, dev, bg, view_dependent=False,
                                                      supersample=c.mesh_supersample), targets,
                                    with_lpips=False)["psnr"]
        train_psnr, split = None, {}
        if "test" in split_masks:
            split["test"] = error_split(img, targets, split_masks["test"])
        if train_idx is not None:
            tr_img = render_mesh_views(out, problem.train, dev, bg, indices=train_idx,
                                       supersample=c.mesh_supersample)
            train_psnr = image_metrics(tr_img, train_targets, with_lpips=False)["psnr"]
            if "train" in split_masks:
                split["train"] = error_split(tr_img, train_targets, split_masks["train"])
        rows[label] = {"train_psnr": train_psnr, "settings": over, "empty_pixels": empty, "psnr": m["psnr"], "ssim": m["ssim"], "psnr_per_view": m["psnr_per_view"],
                       "psnr_diffuse": diffuse, "split": split,
                       "refine": {k: v for k, v in r.items() if isinstance(v, (int, float, str, bool, dict))},
                       "seconds": time.perf_counter() - t0}
        print(f"{label:>14}: mesh {m['psnr']:.2f} dB (gap {g['psnr'] - m['psnr']:.2f}), per view "
              f"{', '.join(f'{p:.2f}' for p in m['psnr_per_view'])}; {r.get('steps', 0)} steps, "
              f"loss {r.get('loss_first', float('nan')):.4f} -> {r.get('loss_last', float('nan')):.4f}, offset "
              f"{r.get('offset_mean', 0):.3f} px, valid {r.get('consistency_valid', float('nan')):.2f}, "
              f"empty px {100 * empty:.2f} %, {time.perf_counter() - t0:.1f} s"
              + ("" if diffuse is None else f"; diffuse colours alone {diffuse:.2f} dB")
              + ("" if train_psnr is None else f"; training views {train_psnr:.2f} dB")
              + ("" if "subdivide" not in r else f"; edges split: {r['subdivide']['faces_before']:,} -> "
                 f"{r['subdivide']['faces_after']:,} faces in {r['subdivide']['seconds']:.1f} s"), flush=True)
        if split:
            print(f"{'':>14}  edge split: {split}", flush=True)
        if args.json:  # after every variant: a replay cut short by its time limit keeps what it measured
            args.json.write_text(json.dumps(rows, indent=1, default=str))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
