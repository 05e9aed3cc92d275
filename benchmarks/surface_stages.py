"""Where a surface-method (``nvdiffrec``) run loses its test PSNR, stage by stage, with images (issue 30).

Reads a finished run folder (``meshlift reconstruct ... --out RUN``: ``config.json`` and the final
``checkpoint.pt``, which holds pass 1's geometry / material field / light, the cleaned pass-1 mesh, and pass 2's
UV mesh, baked and trained textures, vertex offsets and light) and renders each stage's mesh at the run's
held-out views with meshlift's own renderer (``methods.nvdiffrec.evaluate.render_batch``)::

    python benchmarks/surface_stages.py RUN [--device cuda] [--data DATASET] [--out DIR] [--columns 6]

Stages (each rendered with the geometry and material the run had at that point, all under the run's final
light: the checkpoint's pass-1 light entry holds the same tensors as pass 2's, which trained on in place — so the
differences between stages are geometry and material alone):

1. ``pass1``: the pass-1 surface extracted again from the saved geometry (DMTet / FlexiCubes), material field;
2. ``cleaned``: after hidden-face removal and small-component removal (the mesh saved with pass 1);
3. ``view_cull``: after the view cull (``view_cull``; a run with ``view_cull=off`` shows what ``floaters``
   would remove, labelled so);
4. ``decimated``: the mesh pass 2 started from — decimated to ``unwrap_max_faces`` before xatlas — still
   shaded by the material field (the geometry lost by the decimation alone);
5. ``baked``: that mesh with the field baked into textures (kd, ks; no normal map);
6. ``pass2``: the final mesh (vertex offsets, trained kd / ks / normal maps) — the run's own
   evaluation; its PSNR equals metrics.json's ``psnr``;
7. ``glb``: the exported ``mesh.glb`` read back (:func:`meshlift.io.glb.load_glb`: 8-bit textures, glTF
   materials), moved back into the normalised frame (issue 30: within 0.5 dB of ``pass2``).

Per stage: faces, mean test PSNR (sRGB, on the dataset's background), and the silhouette against the test
masks: ``extra %`` = pixels covered by the mesh (alpha > 0.5) outside the mask (floaters, a fat silhouette),
``missing %`` = mask pixels the mesh does not cover (lost thin parts), both in % of the mask's pixels, and the
IoU. Writes ``stages.md`` (the table), ``stages.json``, ``contact.png`` (rows: target, then each stage; columns:
evenly spaced test views) and ``masks.png`` (the same grid: red = extra, blue = missing, over the target in
grey). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch


def load_run(run: Path, data: str | None, device: str):
    """``(cfg, problem data, checkpoint, device)`` of the finished run in ``run``."""
    from meshlift.methods.engine import resolve_device
    from meshlift.methods.nvdiffrec.reconstruct import build_config, load_problem

    cfg = build_config(data or "", None, False, None, [f"device={device}"], out=run, resume=True)
    dev = resolve_device(cfg.device)
    ck_path = run / "checkpoint.pt"
    if not ck_path.is_file():
        sys.exit(f"{ck_path}: no checkpoint (a `meshlift demo` folder, or a run started with checkpoints off)")
    ck = torch.load(ck_path, map_location="cpu", weights_only=False)
    if ck.get("pass2") is None or (ck.get("pass1") or {}).get("mesh") is None:
        sys.exit(f"{ck_path}: the run has not finished pass 1 and started pass 2; let it finish (--resume)")
    return cfg, load_problem(cfg, dev), ck, dev


def _light(cfg, dev, data, state):
    from meshlift.methods.nvdiffrec.materials import make_light

    light, trainable = make_light(cfg, dev, data.gt_light, torch.Generator().manual_seed(cfg.seed))
    if trainable and state is not None:
        light.load_state_dict(state)
    if trainable:
        light.build_mips()
    return light


def build_stages(cfg, data, ck, dev, run_dir: Path) -> list[dict]:
    """The stages of the module docstring: ``[{name, note, mesh, material, light}]`` (normalised frame)."""
    from meshlift.methods.nvdiffrec.geometry import make_geometry, view_cull_mesh
    from meshlift.methods.nvdiffrec.materials import BoundedMaterialField
    from meshlift.structures.mesh import Material, Mesh

    p1, p2 = ck["pass1"], ck["pass2"]
    geom = make_geometry(cfg, dev)
    geom.load_state_dict(p1["geometry"])
    field = BoundedMaterialField(cfg, dev)
    field.load_state_dict(p1["material"])
    field.eval()
    light = _light(cfg, dev, data, p2.get("light"))  # = p1["light"]: the same tensors, trained on in pass 2
    with torch.no_grad():
        raw = geom.get_mesh()[0]
    raw = Mesh(v_pos=raw.v_pos.detach(), t_pos_idx=raw.t_pos_idx)
    cleaned = Mesh(v_pos=p1["mesh"]["v_pos"].to(dev), t_pos_idx=p1["mesh"]["t_pos_idx"].to(dev))
    mode = cfg.view_cull if cfg.view_cull != "off" else "floaters"
    import dataclasses

    culled, info = view_cull_mesh(cleaned, data.train, dataclasses.replace(cfg, view_cull=mode))
    base = Mesh(v_pos=p2["base_v_pos"].to(dev), t_pos_idx=p2["t_pos_idx"].to(dev), v_tex=p2["v_tex"].to(dev),
                t_tex_idx=p2["t_tex_idx"].to(dev))
    geo_base = Mesh(v_pos=base.v_pos, t_pos_idx=base.t_pos_idx)
    baked = Material(kd=p2["kd"][..., :3].to(dev).contiguous(), ks=p2["ks"][..., :3].to(dev).contiguous(), name="baked")
    v2 = base.v_pos + p2["offset"].to(dev) if cfg.optimize_vertices else base.v_pos
    final_mat = Material(kd=p2["kd_param"].to(dev), ks=p2["ks_param"].to(dev),
                         normal=p2["normal"].to(dev) if cfg.perturb_normal else None, name="final")
    final = Mesh(v_pos=v2, t_pos_idx=base.t_pos_idx, v_tex=base.v_tex, t_tex_idx=base.t_tex_idx, material=final_mat)
    stages = []
    glb = _glb_stage(run_dir, data, dev, light)
    cull_note = (f"view_cull={cfg.view_cull}" if cfg.view_cull != "off" else
                 "what view_cull=floaters would remove (the run had it off)")
    cull_note += (f": -{info['removed']} faces ({info['background_only']} background-only, {info['outside_hull']} "
                  f"outside the hull, {info['pieces_removed']} pieces / {info['piece_faces_removed']} faces unseen in "
                  f"the masks or mostly outside the hull; {info['dilate_px']} px)")
    stages += [
        dict(name="pass1", note=f"{cfg.isosurface} at grid {cfg.grid_res}, material field", mesh=raw,
             material=field, light=light),
        dict(name="cleaned", note=f"hidden faces (remove_hidden={cfg.remove_hidden}) and components under "
             f"min_component_faces={cfg.min_component_faces:g} removed", mesh=cleaned, material=field, light=light),
        dict(name="view_cull", note=cull_note, mesh=culled, material=field, light=light),
        dict(name="decimated", note=f"pass 2's start mesh (unwrap_max_faces={cfg.unwrap_max_faces}), field",
             mesh=geo_base, material=field, light=light),
        dict(name="baked", note=f"field baked into {cfg.texture_res}² kd/ks, no normal map",
             mesh=dataclasses.replace(base, material=baked), material=None, light=light),
        dict(name="pass2", note="final: offsets, trained kd/ks/normal maps", mesh=final,
             material=None, light=light),
    ]
    return stages + ([glb] if glb is not None else [])


def _glb_stage(run_dir, data, dev, light) -> dict | None:
    """The exported ``mesh.glb`` in the normalised frame (its up-axis rotation, if any, undone), or None."""
    from meshlift.geometry.similarity import transform_mesh
    from meshlift.io.glb import load_glb

    path = run_dir / "mesh.glb"
    if not path.is_file():
        return None
    mesh = load_glb(path)
    conv = mesh.extras.get("up_axis_conversion") or _metrics(run_dir).get("up_axis_conversion")
    S = data.world_to_normalized.double().cpu()
    if conv:
        R = torch.eye(4, dtype=torch.float64)
        R[:3, :3] = torch.tensor(conv["matrix"], dtype=torch.float64)
        S = S @ torch.linalg.inv(R)
    mesh = transform_mesh(mesh, S, allow_mirror=True).to(dev)
    return dict(name="glb", note="the exported mesh.glb read back (8-bit textures)", mesh=mesh,
                material=None, light=light)


def _metrics(run_dir) -> dict:
    p = run_dir / "metrics.json"
    return json.loads(p.read_text()) if p.is_file() else {}


@torch.no_grad()
def render_stage(stage: dict, views, cfg, dev, batch: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(ours sRGB [N, H, W, 3], alpha [N, H, W], target sRGB [N, H, W, 3])`` on the CPU."""
    from meshlift.methods.nvdiffrec.evaluate import render_batch
    from meshlift.shading.color import linear_to_srgb

    ours, alpha, targets = [], [], []
    for s in range(0, len(views), batch):
        v = views.batch(torch.arange(s, min(s + batch, len(views))), dev)
        out = render_batch(stage["mesh"], v, stage["light"], stage["material"], cfg)
        ours.append(linear_to_srgb(out["shaded"].clamp(0, 1)).cpu())
        alpha.append(out["alpha"][..., 0].float().cpu())
        targets.append(linear_to_srgb(v.targets().clamp(0, 1)).cpu())
    return torch.cat(ours), torch.cat(alpha), torch.cat(targets)


def stage_metrics(ours, alpha, targets, masks) -> dict:
    from meshlift.metrics.image import psnr

    ps = [float(psnr(o, t)) for o, t in zip(ours, targets)]
    out = {"psnr": float(np.mean(ps)), "psnr_per_view": ps}
    if masks is not None:
        m = masks[..., 0] > 0.5
        a = alpha > 0.5
        n = m.flatten(1).sum(1).clamp(min=1).float()
        extra = (a & ~m).flatten(1).sum(1).float() / n
        missing = (~a & m).flatten(1).sum(1).float() / n
        iou = (a & m).flatten(1).sum(1).float() / (a | m).flatten(1).sum(1).clamp(min=1).float()
        out.update(extra_pct=100 * float(extra.mean()), missing_pct=100 * float(missing.mean()),
                   iou=float(iou.mean()), extra_pct_max=100 * float(extra.max()))
    return out


def _grid(rows: list[list[np.ndarray]], labels: list[str], cell: int):
    from PIL import Image, ImageDraw

    label_w = 110
    h = len(rows) * cell
    w = label_w + max(len(r) for r in rows) * cell
    sheet = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(sheet)
    for i, (row, label) in enumerate(zip(rows, labels)):
        for j, img in enumerate(row):
            im = Image.fromarray((np.clip(img, 0, 1) * 255).round().astype(np.uint8)).resize((cell, cell))
            sheet.paste(im, (label_w + j * cell, i * cell))
        draw.multiline_text((4, i * cell + 4), label, fill="black")
    return sheet


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a finished `meshlift reconstruct --method nvdiffrec` output folder")
    ap.add_argument("--data", default=None, help="the dataset, when it moved since the run (default: config.json's)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: RUN/stages)")
    ap.add_argument("--columns", type=int, default=6, help="test views in the contact sheets")
    ap.add_argument("--cell", type=int, default=200, help="pixels per image in the contact sheets")
    args = ap.parse_args(argv)
    out = args.out or args.run / "stages"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    cfg, data, ck, dev = load_run(args.run, args.data, args.device)
    stages = build_stages(cfg, data, ck, dev, args.run)
    test = data.test
    masks = None if test.masks is None else test.masks.float().cpu()
    n = len(test)
    cols = sorted({int(i) for i in np.linspace(0, n - 1, min(args.columns, n)).round()}) if n else []
    rows, mask_rows, labels, results = [], [], ["target"], []
    for st in stages:
        ours, alpha, targets = render_stage(st, test, cfg, dev)
        met = stage_metrics(ours, alpha, targets, masks)
        results.append({"stage": st["name"], "note": st["note"], "faces": int(st["mesh"].num_faces), **met})
        if not rows:
            rows.append([targets[i].numpy() for i in cols])
            grey = [np.repeat(targets[i].mean(-1, keepdim=True).numpy(), 3, -1) * 0.6 + 0.4 for i in cols]
            mask_rows.append(grey)
        rows.append([ours[i].numpy() for i in cols])
        if masks is not None:
            cells = []
            for k, i in enumerate(cols):
                img = mask_rows[0][k].copy()
                a, m = alpha[i].numpy() > 0.5, masks[i, ..., 0].numpy() > 0.5
                img[a & ~m] = (1.0, 0.1, 0.1)
                img[~a & m] = (0.1, 0.3, 1.0)
                cells.append(img)
            mask_rows.append(cells)
        labels.append(f"{st['name']}\n{met['psnr']:.2f} dB\n{st['mesh'].num_faces} faces"
                      + (f"\n+{met['extra_pct']:.2f}% -{met['missing_pct']:.2f}%" if masks is not None else ""))
        print(f"{st['name']:>10}: {met['psnr']:.2f} dB, {st['mesh'].num_faces} faces"
              + (f", extra {met['extra_pct']:.2f} %, missing {met['missing_pct']:.2f} %" if masks is not None else ""),
              flush=True)
    _grid(rows, labels, args.cell).save(out / "contact.png")
    if masks is not None:
        _grid(mask_rows, labels, args.cell).save(out / "masks.png")
    run_psnr = _metrics(args.run).get("psnr", math.nan)
    h, w = test.resolution
    lines = [f"# Surface-method stages of `{args.run}`", "",
             f"{cfg.data}: {len(data.train)} training / {n} test views at {w}x{h}, device {dev}; the run's own "
             f"test PSNR (metrics.json) {run_psnr:.2f} dB. extra / missing: % of the test masks' pixels covered by "
             "the mesh outside the mask / not covered inside it (mean over views; extra max = worst view).", "",
             "| stage | faces | PSNR (dB) | Δ vs previous | extra % | extra max % | missing % | IoU | what |",
             "|---|---|---|---|---|---|---|---|---|"]
    prev = None
    for r in results:
        d = "" if prev is None else f"{r['psnr'] - prev:+.2f}"
        prev = r["psnr"]
        lines.append(f"| {r['stage']} | {r['faces']:,} | {r['psnr']:.2f} | {d} | {r.get('extra_pct', math.nan):.2f} | "
                     f"{r.get('extra_pct_max', math.nan):.2f} | {r.get('missing_pct', math.nan):.2f} | "
                     f"{r.get('iou', math.nan):.4f} | {r['note']} |")
    lines += ["", f"contact.png: rows target, {', '.join(r['stage'] for r in results)}; columns test views {cols}. "
              "masks.png: red = extra, blue = missing.", f"({time.perf_counter() - t0:.1f} s)"]
    (out / "stages.md").write_text("\n".join(lines) + "\n")
    (out / "stages.json").write_text(json.dumps({"run": str(args.run), "run_psnr": run_psnr, "columns": cols,
                                                 "stages": results}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
