"""Where the whole-scene mesh's PSNR gap to the Gaussians goes, per test view, on a finished capture run.

Reads OUT/checkpoint.pt and OUT/config.json of ``meshlift reconstruct CAPTURE --method milo --out OUT`` (a
capture without masks: the fox), re-extracts the whole-scene mesh exactly as the run does (surface depth of the
training views, the region of interest + contracted shell, ``fused_mesh``, ``vertex_colors``; cached in
OUT/gap_scene.pt) and prints, per test view and as the mean over the views:

- ``gauss`` / ``mesh``: PSNR of the Gaussians' render and of the mesh render (vertex colours), as the run scores;
- ``oracle_vertex``: the same geometry with ORACLE vertex colours, fused from the test view itself (its own
  depth test; vertices it does not see keep the run's colours) — what per-vertex colour could reach on this
  geometry at best (vertex sampling + geometry limited);
- ``diffuse_ceiling``: vertex colours fused from all the *test* photos that see each vertex (the least-squares
  single colour for these views; an oracle): what no one-colour-per-point mesh of this surface can beat at these
  views (session 28's H200 fox: 24.36 dB against the Gaussians' 30.74);
- ``gauss_sh0``: the Gaussians rendered with their SH degree 0 term only (view-independent colour): what a
  diffuse mesh is fairly compared with (session 27's H100 fox: 22.33 with degree 3, 21.04 with degree 0);
- ``mesh_affine`` / ``gauss_affine``: each render after the per-channel gain and offset that fit it best to the
  test view on the covered pixels (:func:`meshlift.metrics.image.color_correct`, clamped to [0, 1]; what a
  per-view exposure explains: the same fox, mesh +0.6 dB on average and +1.4 on view 0042, the Gaussians +0.2:
  their SH follows the capture's exposure, the diffuse mesh cannot);
- ``per_pixel_train``: every covered test pixel takes the colour the training views give the mesh's surface
  point there (back-projected with the mesh's depth, fused by ``fuse_colors`` with the run's depth test and
  weights) — what a texture baked at the test image's resolution could reach from the training photos (the
  bound of a per-texel bake; the gap from ``mesh`` to this is what the vertex sampling loses);
- ``per_pixel_train_p2``: the same with ``scene_color_power = 2`` (close views outweigh distant ones);
- ``per_pixel_near3``: the same from the 3 training cameras nearest the test camera only (little parallax, and
  in a video near in time): near the oracle = the surface's position error (or an exposure drift) dominates.
  A point the views' depth test rejects keeps the mesh's colour (before session 28 it turned black, which
  pulled these two rows down: the fox's near-3 row read 23.1 dB where colouring without the depth test gives
  31.9 / 28.4 on views 0001 / 0073);
- ``empty``: share of the pixels the mesh leaves empty, their share of the squared error, and the mesh PSNR
  with those pixels replaced by the Gaussians' (what filling them perfectly would give);
- ``edges``: pixels within 2 px of a depth edge of the mesh (relative depth jump > ``--edge-rel``): share of
  the pixels, of the mesh's and the Gaussians' squared error, and the mesh PSNR with them replaced by the
  Gaussians' pixels; ``flat`` the complement's PSNR of mesh and Gaussians;
- ``shell``: pixels whose surface point lies outside the region of interest (the contracted shell, coarser
  voxels): the same shares and replacement PSNR.

    PYTHONPATH=src python benchmarks/milo_fox_gap.py /tmp/fox480 [--device cpu] [--set scene_resolution=256]
Not collected by pytest. ``--set`` overrides config fields for the re-extraction (a lever's what-if); the cache
is keyed by them.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _psnr(se_sum: float, n: int) -> float:
    return 10.0 * math.log10(1.0 / max(se_sum / max(n, 1), 1e-12))


def _sub(views, idx: list):
    """The views ``idx`` of ``views`` (a SplatViews slice)."""
    t = torch.as_tensor(idx, dtype=torch.long)
    return dataclasses.replace(views, world_to_camera=views.world_to_camera[t], K=views.K[t], images=views.images[t],
                               alpha=None if views.alpha is None else views.alpha[t],
                               names=[views.names[i] for i in idx] if views.names else [])


def _edges(depth: torch.Tensor, rel: float, grow: int = 2) -> torch.Tensor:
    """Bool ``[H, W]``: within ``grow`` px of a relative depth jump > ``rel`` (or of an empty/covered border)."""
    d = depth
    cov = d > 0
    e = torch.zeros_like(cov)
    for dy, dx in ((0, 1), (1, 0)):
        a = d[: d.shape[0] - dy, : d.shape[1] - dx]
        b = d[dy:, dx:]
        ca, cb = cov[: d.shape[0] - dy, : d.shape[1] - dx], cov[dy:, dx:]
        jump = (ca != cb) | (ca & cb & ((a - b).abs() > rel * torch.minimum(a, b).clamp(min=1e-9)))
        e[: d.shape[0] - dy, : d.shape[1] - dx] |= jump
        e[dy:, dx:] |= jump
    k = 2 * grow + 1
    return torch.nn.functional.max_pool2d(e[None, None].float(), k, 1, grow)[0, 0] > 0


def _backproject(depth: torch.Tensor, w2c: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """``[H, W, 3]`` world points of a camera-z depth map (OpenCV camera)."""
    H, W = depth.shape
    ys, xs = torch.meshgrid(torch.arange(H, dtype=torch.float32) + 0.5, torch.arange(W, dtype=torch.float32) + 0.5,
                            indexing="ij")
    x = (xs - K[0, 2]) / K[0, 0] * depth
    y = (ys - K[1, 2]) / K[1, 1] * depth
    cam = torch.stack([x, y, depth, torch.ones_like(depth)], -1)
    return (cam.reshape(-1, 4) @ torch.linalg.inv(w2c.double()).float().T)[:, :3].reshape(H, W, 3)


def scene_mesh(run: Path, cfg, problem, params, settings, dev, overrides: dict):
    """The run's whole-scene mesh (coloured as the run does), cached in ``run/gap_scene_<key>.pt``."""
    from meshlift.methods.engine import Monitor
    from meshlift.methods.milo import tsdf_mesh
    from meshlift.structures.mesh import Mesh

    key = hashlib.sha1(json.dumps(overrides, sort_keys=True).encode()).hexdigest()[:8]
    cache = run / f"gap_scene_{key}.pt"
    if cache.is_file():
        d = torch.load(cache, weights_only=False)
        return Mesh(d["v"], d["f"], v_color=d["c"]), d["rep"]
    mon = Monitor()
    near = cfg.near_frac * problem.scene_scale
    t0 = time.perf_counter()
    depths, _ = tsdf_mesh.surface_depths(cfg, params, problem, near=near, device=dev, settings=settings, monitor=mon)
    roi = tsdf_mesh.region_of_interest(cfg, problem)
    region = tsdf_mesh.fusion_region("scene", roi=roi)
    res = cfg.scene_resolution or tsdf_mesh.scene_resolution_from_pixels(cfg, problem, region)
    mesh, rep = tsdf_mesh.fused_mesh(cfg, depths, problem, region, res, near=near, device=dev, monitor=mon)
    colored, crep = tsdf_mesh.vertex_colors(cfg, mesh, problem, dev)
    rep = {"scene_resolution": res, "faces": int(mesh.num_faces), **crep, "extract_s": time.perf_counter() - t0,
           "roi_box": [roi.world_aabb()[0].tolist(), roi.world_aabb()[1].tolist()]}
    torch.save({"v": colored.v_pos, "f": colored.t_pos_idx, "c": colored.v_color, "rep": rep}, cache)
    return colored, rep


def render_with_empty(mesh, views, dev, bg: torch.Tensor, indices=None,
                      supersample: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(render on bg [V, H, W, 3], empty [V, H, W] bool)``: the mesh rendered on ``bg`` and on its opposite; a
    pixel whose colour follows the background is one the mesh leaves empty."""
    from meshlift.methods.milo.extract import render_mesh_views

    img = render_mesh_views(mesh, views, dev, bg, indices=indices, supersample=supersample)
    other = render_mesh_views(mesh, views, dev, 1.0 - bg, indices=indices, supersample=supersample)
    return img, (img - other).abs().amax(-1) > 0.5


def run_inputs(run: Path, dev, overrides: dict, indices=None):
    """What a replay of a finished capture run needs: ``(cfg with overrides, problem, params, settings, whole-scene
    mesh, its report, Gaussian renders and targets of the test views ``indices`` (None: all), background, near)``."""
    from meshlift.methods.gaussians.evaluate import eval_background, render_views
    from meshlift.methods.milo.config import apply_dict

    from milo_diagnose import load_run

    cfg, problem, _, ck, params, settings = load_run(run, dev)
    cfg = apply_dict(cfg, overrides) if overrides else cfg
    near = cfg.near_frac * problem.scene_scale
    mesh, rep = scene_mesh(run, cfg, problem, params, settings, dev, overrides)
    sh = int(ck["state"].get("eval_sh_degree", cfg.sh_degree)) if isinstance(ck.get("state"), dict) else cfg.sh_degree
    gauss, targets = render_views(params, problem.test, sh_degree=sh, background=cfg.background, near=near,
                                  device=dev, settings=settings, backend=cfg.splat_backend, indices=indices)
    bg = torch.ones(3) if eval_background(cfg.background) == "white" else torch.zeros(3)
    return cfg, problem, params, settings, mesh, rep, gauss, targets, bg, near


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--set", action="append", default=[], help="config override for the re-extraction: key=value")
    ap.add_argument("--edge-rel", type=float, default=0.05)
    ap.add_argument("--views", type=int, nargs="*", default=None, help="test view indices (default: all)")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args()
    from meshlift.methods.milo.extract import fuse_colors, mesh_depth_all
    from meshlift.methods.milo.extract import render_mesh_views
    from meshlift.metrics.image import color_correct
    from meshlift.shading.color import srgb_to_linear

    dev = torch.device(args.device)
    overrides = dict(s.split("=", 1) for s in args.set)
    cfg, problem, params, settings, mesh, rep, gauss, targets, bg, near = run_inputs(
        args.run, dev, overrides, indices=args.views)
    test, train = problem.test, problem.train
    H, W = test.height, test.width
    tol = cfg.color_depth_tol * problem.scene_scale
    which = list(range(len(test))) if args.views is None else args.views
    mesh_img, mesh_empty = render_with_empty(mesh, test, dev, bg, indices=which)
    from meshlift.methods.gaussians.evaluate import render_views
    gauss_sh0, _ = render_views(params, test, sh_degree=0, background=cfg.background, near=near, device=dev,
                                settings=settings, backend=cfg.splat_backend, indices=which)
    tdepth = mesh_depth_all(mesh, test, dev, chunk_views=2, max_fragments=None)[which].cpu()
    train_depth = mesh_depth_all(mesh, train, dev, chunk_views=cfg.mesh_chunk_views, max_fragments=None)
    lo, hi = (torch.tensor(x) for x in rep["roi_box"])
    # (i) the diffuse ceiling: every vertex's mean over the *test* photos that see it (the least-squares single
    # colour for these views; an oracle): what no one-colour-per-point mesh of this surface can beat here
    rgb_c, n_c = fuse_colors(mesh.v_pos.to(dev), _sub(test, which), tdepth.to(dev), tol=tol)
    col_c = mesh.v_color.clone()
    col_c[n_c.cpu() > 0] = srgb_to_linear(rgb_c.cpu()[n_c.cpu() > 0]).clamp(0, 1)
    ceiling = render_mesh_views(dataclasses.replace(mesh, v_color=col_c), test, dev, bg, indices=which)
    rows = []
    for j, i in enumerate(which):
        t, g, m = targets[j], gauss[j], mesh_img[j]
        n = H * W
        se_m = ((m - t) ** 2).mean(-1)  # [H, W] per-pixel mean over channels
        se_g = ((g - t) ** 2).mean(-1)
        empty = mesh_empty[j]
        d = tdepth[j]
        edge = _edges(d, args.edge_rel) & ~empty
        pts = _backproject(d, test.world_to_camera[i], test.K[i])
        inside = ((pts >= lo.float()) & (pts <= hi.float())).all(-1)
        shell = (d > 0) & ~inside & ~empty

        def share(mask):
            return {"pixels": float(mask.float().mean()),
                    "mesh_se_share": float(se_m[mask].sum() / se_m.sum()),
                    "gauss_se_share": float(se_g[mask].sum() / se_g.sum()),
                    "mesh_psnr_if_gauss_there": _psnr(float(torch.where(mask, se_g, se_m).sum()), n),
                    "mesh_psnr_in": _psnr(float(se_m[mask].sum()), int(mask.sum())),
                    "gauss_psnr_in": _psnr(float(se_g[mask].sum()), int(mask.sum()))}

        # (b) oracle vertex colours from the test view itself
        sub = _sub(test, [i])
        rgb_o, n_o = fuse_colors(mesh.v_pos.to(dev), sub, tdepth[j:j + 1].to(dev), tol=tol)
        col = mesh.v_color.clone()
        seen = n_o.cpu() > 0
        col[seen] = srgb_to_linear(rgb_o.cpu()[seen]).clamp(0, 1)
        orc = render_mesh_views(dataclasses.replace(mesh, v_color=col), test, dev, bg, indices=[i])[0]
        # (e) per-pixel colour from the training views at the mesh's surface point of every covered pixel
        cov = (d > 0).reshape(-1)
        per = {}
        for power in (0.0, 2.0):
            rgb_p, n_p = fuse_colors(pts.reshape(-1, 3)[cov].to(dev), train, train_depth.to(dev), tol=tol,
                                     view_power=power)
            img = m.clone().reshape(-1, 3)
            got = cov.clone()
            got[cov] = n_p.cpu() > 0  # a point no training view confirms keeps the mesh's colour (was: black)
            img[got] = rgb_p.cpu()[n_p.cpu() > 0].clamp(0, 1)
            img = img.reshape(H, W, 3)
            per[power] = (_psnr(float(((img - t) ** 2).mean(-1).sum()), n), float((n_p > 0).float().mean()))
        # (f) the same from the 3 training views nearest the test camera only (little parallax, near in time
        # in a video): close to the oracle = the surface's position error (or exposure drift) dominates
        centres = torch.linalg.inv(train.world_to_camera.double())[:, :3, 3]
        c_test = torch.linalg.inv(test.world_to_camera[i].double())[:3, 3]
        near3 = torch.argsort((centres - c_test).norm(dim=1))[:3]
        sub3 = _sub(train, near3.tolist())
        depth3 = train_depth[near3.to(train_depth.device)].to(dev)
        rgb_n, n_n = fuse_colors(pts.reshape(-1, 3)[cov].to(dev), sub3, depth3, tol=tol)
        img = m.clone().reshape(-1, 3)
        got = cov.clone()
        got[cov] = n_n.cpu() > 0  # seen by none of the 3 (depth test): the mesh's colour (session 28: was black)
        img[got] = rgb_n.cpu()[n_n.cpu() > 0].clamp(0, 1)
        near3_psnr = _psnr(float(((img.reshape(H, W, 3) - t) ** 2).mean(-1).sum()), n)
        # (h) each render after the per-channel gain and offset that fit it best to this test view on the pixels
        # the mesh covers (what a per-view exposure would explain)
        fit = {k: color_correct(r, t, mask=~empty, per_channel=True).float() for k, r in (("mesh", m), ("gauss", g))}
        rows.append({
            "view": test.names[i] if test.names else i,
            "gauss": _psnr(float(se_g.sum()), n), "mesh": _psnr(float(se_m.sum()), n),
            # (g) the Gaussians' view-independent colour (SH degree 0): the reference a diffuse mesh can reach
            "gauss_sh0": _psnr(float(((gauss_sh0[j] - t) ** 2).mean(-1).sum()), n),
            "mesh_affine": _psnr(float(((fit["mesh"] - t) ** 2).mean(-1).sum()), n),
            "gauss_affine": _psnr(float(((fit["gauss"] - t) ** 2).mean(-1).sum()), n),
            "oracle_vertex": _psnr(float(((orc - t) ** 2).mean(-1).sum()), n),
            "diffuse_ceiling": _psnr(float(((ceiling[j] - t) ** 2).mean(-1).sum()), n),
            "per_pixel_train": per[0.0][0], "per_pixel_train_p2": per[2.0][0], "per_pixel_seen": per[0.0][1],
            "per_pixel_near3": near3_psnr,
            "empty": share(empty), "edges": share(edge), "flat": share(~edge & ~empty), "shell": share(shell),
        })
        print(json.dumps(rows[-1], default=float), flush=True)

    def mean(key, sub=None):
        vals = [r[key] if sub is None else r[key][sub] for r in rows]
        return sum(vals) / len(vals)

    summary = {k: mean(k) for k in ("gauss", "gauss_sh0", "mesh", "mesh_affine", "gauss_affine", "oracle_vertex",
                                   "diffuse_ceiling",
                                   "per_pixel_train", "per_pixel_train_p2", "per_pixel_near3")}
    for cat in ("empty", "edges", "flat", "shell"):
        summary[cat] = {s: mean(cat, s) for s in rows[0][cat]}
    out = {"run": str(args.run), "overrides": overrides, "scene": rep, "resolution": [W, H], "summary": summary,
           "views": rows}
    print(json.dumps({"summary": summary, "scene": rep}, indent=1, default=float))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
