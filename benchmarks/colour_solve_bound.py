"""How far the whole-scene mesh's colours are from their best fit on its own geometry (issue 33's fox gap).

The photometric refinement fits the vertex colours (and their view-dependent SH terms) with Adam, two training views a
step, 300 steps, an L1 loss, jointly with the vertex offsets. On the device fox the refined mesh renders its *training*
views at 27.80 dB where the Gaussians render them at 34.76 (session 31): either the colours are far from their optimum
on this geometry (an optimiser limit: more steps gained +0.47 dB), or no colours fit all training views (the geometry
limit). This script tells the two apart: it freezes the refined geometry, rasterises every training view once (the
raster cached: only the colours change), and minimises the **mean squared error** of the sRGB render over all
training views at once (full batch) with L-BFGS over the base colours and the SH terms. The converged training PSNR is
the geometry's bound for vertex colours of that SH degree; the test PSNR says whether reaching it generalises.

    PYTHONPATH=src python benchmarks/colour_solve_bound.py /tmp/cpu/foxmed --device cpu --iters 40 \\
        --variant cw:photo_refine_steps=300

The variant (``LABEL:key=value,...``, config fields) sets the refinement run before the solve, as
photo_refine_replay.py. Prints training / test PSNR of the refined mesh, then every ``--every`` iterations of the
solve. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--variant", default="cw:", help="LABEL:key=value,... (config fields) of the refinement")
    ap.add_argument("--iters", type=int, default=40, help="L-BFGS iterations")
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--sh-weight", type=float, default=0.0, help="L2 weight on the SH terms (per vertex, mean)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    from meshlift import render as R
    from meshlift.methods.engine import Monitor
    from meshlift.methods.gaussians.evaluate import image_metrics, render_views
    from meshlift.methods.milo.config import apply_dict
    from meshlift.methods.milo.extract import render_mesh_views
    from meshlift.methods.milo.photo_refine import mesh_world_to_clip
    from meshlift.methods.milo.tsdf_mesh import refined
    from meshlift.shading.color import linear_to_srgb
    from meshlift.shading.view_colors import camera_centres, view_dependent_colors
    from milo_fox_gap import run_inputs

    dev = torch.device(args.device)
    cfg, problem, params, settings, mesh, _, gauss, targets, bg, near = run_inputs(args.run, dev, {})
    label, _, kvs = args.variant.partition(":")
    over = dict(kv.split("=", 1) for kv in kvs.split(",") if kv)
    c = apply_dict(cfg, over) if over else cfg
    t0 = time.perf_counter()
    out, rep = refined(c, mesh, problem, dev, Monitor(), None, None, label=label)
    t_ref = time.perf_counter() - t0
    train = problem.train
    n_tr = len(train)
    g_tr, tr_targets = render_views(params, train, sh_degree=cfg.sh_degree, background=cfg.background, near=near,
                                    device=dev, settings=settings, backend=cfg.splat_backend)
    g_train = image_metrics(g_tr, tr_targets, with_lpips=False)["psnr"]
    g_test = image_metrics(gauss, targets, with_lpips=False)["psnr"]

    def score(m) -> tuple[float, float]:
        te = image_metrics(render_mesh_views(m, problem.test, dev, bg), targets, with_lpips=False)["psnr"]
        tr = image_metrics(render_mesh_views(m, train, dev, bg), tr_targets, with_lpips=False)["psnr"]
        return tr, te

    tr0, te0 = score(out)
    res = {"variant": args.variant, "faces": int(out.num_faces), "refine_s": t_ref, "gaussians": {"train": g_train,
           "test": g_test}, "refined": {"train": tr0, "test": te0}, "solve": []}
    print(f"{out.num_faces:,} faces; Gaussians train {g_train:.2f} / test {g_test:.2f}; refined mesh ({label}, "
          f"{t_ref:.1f} s) train {tr0:.2f} / test {te0:.2f}", flush=True)

    # the frozen geometry's raster of every training view (what render_unlit computes before its colours)
    v = out.v_pos.to(dev).float()
    tri = out.t_pos_idx.to(dev).int()
    rasts, poss, cents = [], [], []
    with torch.no_grad():
        for i in range(n_tr):
            b = train.batch(torch.tensor([i]), dev)
            clip = mesh_world_to_clip(b.world_to_camera, b.K, train.width, train.height, v)
            pos = R.transform_pos(clip.float(), v)
            rast, _ = R.rasterize(pos, tri, (train.height, train.width), precise=True)
            rasts.append(rast)
            poss.append(pos)
            cents.append(camera_centres(b.world_to_camera.float())[0])
    ex = out.extras
    base = ex.get("v_sh_base", out.v_color)[:, :3].to(dev).float().clone().requires_grad_(True)
    rest0 = ex.get("v_sh_rest")
    rest = (rest0.to(dev).float().clone() if rest0 is not None else torch.zeros(v.shape[0], 0, 3, device=dev))
    rest.requires_grad_(True)
    tg = [tr_targets[i:i + 1].to(dev).float() for i in range(n_tr)]
    bgd = bg.to(dev).float()
    npx = float(n_tr * train.height * train.width * 3)

    def closure():
        opt.zero_grad()
        total = 0.0
        for i in range(n_tr):
            col = view_dependent_colors(base, rest, v, cents[i]) if rest.shape[1] else base.clamp(0, 1)
            cv, _ = R.interpolate(col, rasts[i], tri)
            cov = (rasts[i][..., 3:4] > 0).float()
            img = linear_to_srgb(cv.clamp(0, 1)) * cov + bgd * (1 - cov)
            img = R.antialias(img.contiguous(), rasts[i], poss[i], tri).clamp(0, 1)
            loss = ((img - tg[i]) ** 2).sum() / npx
            loss.backward()
            total += float(loss.detach())
        if args.sh_weight > 0 and rest.shape[1]:
            reg = args.sh_weight * (rest ** 2).sum(dim=(1, 2)).mean()
            reg.backward()
            total += float(reg)
        return torch.tensor(total)

    opt = torch.optim.LBFGS([base, rest], lr=1.0, max_iter=args.every, history_size=10,
                            line_search_fn="strong_wolfe")
    done = 0
    t1 = time.perf_counter()
    while done < args.iters:
        loss = float(opt.step(closure))
        done += args.every
        from dataclasses import replace

        ext = dict(ex)
        m = out
        with torch.no_grad():
            if rest.shape[1]:
                ext["v_sh_rest"] = rest.detach().clone()
                ext["v_sh_base"] = base.detach().clone()
                m = replace(out, extras=ext)
            else:
                m = replace(out, v_color=base.detach().clamp(0, 1).clone())
        tr, te = score(m)
        res["solve"].append({"iters": done, "loss": loss, "train": tr, "test": te, "s": time.perf_counter() - t1})
        print(f"L-BFGS {done:4d} iterations: mse {loss:.6f} -> train {tr:.2f} (train mse psnr "
              f"{-10 * torch.log10(torch.tensor(loss)).item():.2f}) / test {te:.2f} dB, "
              f"{time.perf_counter() - t1:.1f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
