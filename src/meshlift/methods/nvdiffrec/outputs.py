"""Writing a reconstruction's asset folder.

Layout of ``DIR`` (issue 4):

- ``mesh/mesh.obj`` + ``mesh.mtl`` + ``texture_kd.png``, ``texture_ks.png``, ``texture_n.png``;
- ``mesh.glb`` (PBR metallicRoughness + normal map), both in the dataset's world frame and units;
- ``probe.hdr``: the environment light as a lat-long map (conventions §8), in the normalised frame's axes
  (the world frame's axes when the normalisation is a pure scale + translation);
- ``dmtet_mesh/mesh.obj``: the pass-1 mesh (no material);
- ``images/``: validation views ``start_XX.png`` and ``end_XX.png`` (target | ours), previews
  ``preview_<pass>_<iteration>.png`` and a rendered image of the asset ``asset.png``;
- ``metrics.json``, ``config.json``, ``checkpoint.pt`` and ``loss_curve.png``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from meshlift.methods.engine import CHECKPOINT_NAME, FINISHED_MARKER
from meshlift.methods.nvdiffrec.config import SurfaceConfig, config_to_dict
from meshlift.methods.nvdiffrec.evaluate import render_views


#: The files of the layout above, and its folders (which hold ``.obj`` / ``.mtl`` / ``.png`` files).
RUN_FILES = (FINISHED_MARKER, "config.json", CHECKPOINT_NAME, "mesh.glb", "probe.hdr", "loss_curve.png")
RUN_FOLDERS = ("mesh", "dmtet_mesh", "images")


def clear_outputs(out: Path) -> None:
    """Remove an earlier run's outputs from ``out`` (:data:`RUN_FILES`, and the ``.obj`` / ``.mtl`` / ``.png``
    files of :data:`RUN_FOLDERS`, which go when empty), so a replacing run stopped half-way leaves no old
    results beside its new config. Other files stay."""
    out = Path(out)
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)
    for name in RUN_FOLDERS:
        d = out / name
        if not d.is_dir():
            continue
        for f in d.iterdir():
            if f.is_file() and f.suffix.lower() in (".obj", ".mtl", ".png"):
                f.unlink()
        if not any(d.iterdir()):
            d.rmdir()


def write_config(out: Path, cfg: SurfaceConfig) -> Path:
    """Write the effective config to ``out/config.json`` (strict JSON, atomically), with the ``--method`` that
    wrote the folder (:func:`meshlift.methods.config_layers.saved_config`)."""
    from meshlift.io.jsonfile import write_json

    from meshlift.methods.config_layers import saved_config
    return write_json(Path(out) / "config.json", saved_config(config_to_dict(cfg), type(cfg).METHOD))


def _atomic_path(path: Path, write) -> Path:
    """Run ``write(tmp_path)`` on a temporary sibling (file or folder) of ``path`` and rename it into place,
    so an interrupted export leaves the previous file (or none), never a half-written one."""
    import os
    import shutil

    path = Path(path)
    tmp_root = path.parent / f".{path.name}.tmp"
    if tmp_root.exists():
        shutil.rmtree(tmp_root) if tmp_root.is_dir() else tmp_root.unlink()
    tmp_root.mkdir(parents=True)
    try:
        result = write(tmp_root / path.name)
        target_tmp = tmp_root / path.name
        if path.is_dir() and target_tmp.is_dir():
            shutil.rmtree(path)
        os.replace(target_tmp, path)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    return result


def _side_by_side(target: torch.Tensor, ours: torch.Tensor) -> torch.Tensor:
    """``[H, W, 3]`` target | ours with a 2-pixel grey separator."""
    sep = torch.full((target.shape[0], 2, 3), 0.5)
    return torch.cat([target.cpu(), sep, ours.cpu()], dim=1)


def _val_indices(n: int, k: int) -> list[int]:
    if n == 0 or k <= 0:
        return []
    return sorted({int(i) for i in np.linspace(0, n - 1, min(k, n)).round()})


def write_validation_images(out: Path, tag: str, mesh, data, light, material, cfg: SurfaceConfig,
                            device: torch.device) -> list[Path]:
    """Render ``cfg.val_views`` held-out views and write ``images/<tag>_XX.png`` (target | ours)."""
    from meshlift.io.images import write_image

    idx = _val_indices(len(data.test), cfg.val_views)
    if not idx:
        return []
    ours, targets = render_views(mesh, data.test, light, material, cfg, device, indices=idx)
    paths = []
    for k, (o, r) in enumerate(zip(ours, targets)):
        p = Path(out) / "images" / f"{tag}_{k:02d}.png"
        write_image(p, _side_by_side(r, o))
        paths.append(p)
    return paths


def preview_writer(out: Optional[Path], data, cfg: SurfaceConfig, device: torch.device):
    """Callback ``(tag, iteration, mesh, light, material)`` writing start views and previews."""
    if out is None:
        return None

    def write(tag: str, iteration: int, mesh, light, material) -> None:
        from meshlift.io.images import write_image

        if tag == "start":
            write_validation_images(out, "start", mesh, data, light, material, cfg, device)
            return
        if len(data.test) == 0:
            return
        ours, targets = render_views(mesh, data.test, light, material, cfg, device, indices=[0])
        write_image(Path(out) / "images" / f"preview_{tag}_{iteration:06d}.png", _side_by_side(targets[0], ours[0]))

    return write


def plot_loss_curve(history: list[dict], path: Path, size: tuple[int, int] = (640, 360)) -> Path:
    """Draw loss (log scale, left axis) and training PSNR per iteration of both passes as a PNG (Pillow)."""
    from PIL import Image, ImageDraw

    W, H = size
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    m = dict(left=50, right=50, top=20, bottom=30)
    x0, x1, y0, y1 = m["left"], W - m["right"], m["top"], H - m["bottom"]
    d.rectangle([x0, y0, x1, y1], outline="black")
    if history:
        n = len(history)
        loss = np.array([max(h["loss"], 1e-8) for h in history])
        psnr = np.array([h["psnr"] if math.isfinite(h["psnr"]) else np.nan for h in history])
        ll = np.log10(loss)
        lo, hi = float(ll.min()), float(ll.max())
        hi = hi if hi > lo else lo + 1
        xs = x0 + (x1 - x0) * np.arange(n) / max(1, n - 1)
        ys = y1 - (y1 - y0) * (ll - lo) / (hi - lo)
        d.line(list(zip(xs.tolist(), ys.tolist())), fill=(200, 40, 40), width=1)
        if np.isfinite(psnr).any():
            plo, phi = float(np.nanmin(psnr)), float(np.nanmax(psnr))
            phi = phi if phi > plo else plo + 1
            pts = [(float(x), float(y1 - (y1 - y0) * (p - plo) / (phi - plo))) for x, p in zip(xs, psnr) if np.isfinite(p)]
            d.line(pts, fill=(40, 80, 200), width=1)
            d.text((x1 + 4, y0), f"{phi:.1f}dB", fill=(40, 80, 200))
            d.text((x1 + 4, y1 - 10), f"{plo:.1f}dB", fill=(40, 80, 200))
        d.text((4, y0), f"{10 ** hi:.3g}", fill=(200, 40, 40))  # the loss at the top and bottom
        d.text((4, y1 - 10), f"{10 ** lo:.3g}", fill=(200, 40, 40))
        p2 = next((i for i, h in enumerate(history) if h["pass"] == 2), None)
        if p2 is not None:
            xp = float(xs[p2])
            d.line([(xp, y0), (xp, y1)], fill=(120, 120, 120))
            d.text((xp + 3, y0 + 2), "pass 2", fill=(90, 90, 90))
    d.text((x0, H - 20), "iteration   (red: loss, log scale; blue: training PSNR)", fill="black")
    img.save(path)
    return path


def write_outputs(out: Path, mesh_world, dmtet_world, light, metrics: dict, history: list[dict],
                  cfg: SurfaceConfig, *, ours: Optional[torch.Tensor] = None,
                  targets: Optional[torch.Tensor] = None) -> dict:
    """Write every output of a finished run into ``out``; returns ``{name: path}``.

    ``ours`` / ``targets`` (``[N, H, W, 3]`` sRGB, the evaluation renders) give the end-of-run validation
    images and ``images/asset.png`` without rendering again."""
    from meshlift.io.glb import save_glb
    from meshlift.io.hdr import write_hdr
    from meshlift.io.images import write_image
    from meshlift.errors import TrainingError
    from meshlift.io.jsonfile import write_json
    from meshlift.io.obj import save_obj
    from meshlift.mesh.orient import to_y_up
    from meshlift.structures.mesh import Mesh

    out = Path(out)
    if cfg.up_axis != "keep":  # exports only: the metrics were computed in the world frame
        mesh_world, dmtet_world = to_y_up(mesh_world, cfg.up_axis), to_y_up(dmtet_world, cfg.up_axis)
    for name, m in (("mesh", mesh_world), ("pass-1 mesh", dmtet_world)):
        if not bool(torch.isfinite(m.v_pos).all()):
            raise TrainingError(f"the {name} has non-finite vertices (the run diverged); nothing was written to "
                                f"{out}. Lower the learning rates (lr_pos, lr_vertex) and run again")
    files: dict = {}
    files["obj"] = out / "mesh" / "mesh.obj"
    files["glb"] = out / "mesh.glb"
    files["dmtet_obj"] = out / "dmtet_mesh" / "mesh.obj"
    files["probe"] = out / "probe.hdr"
    latlong = light.to_latlong(256) if hasattr(light, "to_latlong") else None
    latlong = None if latlong is None else latlong.detach().cpu()
    # end-of-run validation views: reuse the evaluation renders
    images = []
    if ours is not None and targets is not None:
        images = [(out / "images" / f"end_{k:02d}.png", _side_by_side(targets[i], ours[i]))
                  for k, i in enumerate(_val_indices(len(ours), cfg.val_views))]
        if len(ours):
            images.append((out / "images" / "asset.png", ours[0].cpu()))
            files["asset_image"] = out / "images" / "asset.png"

    def write_images_and_curve() -> Path:
        for path, img in images:
            write_image(path, img)
        return plot_loss_curve(history, out / "loss_curve.png")

    # every file at once (PNG encoding, zlib and text formatting release the GIL for the most part)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=5) as pool:
        jobs = [pool.submit(_atomic_path, out / "mesh", lambda d: save_obj(d / "mesh.obj", mesh_world)),
                pool.submit(_atomic_path, files["glb"], lambda p: save_glb(p, mesh_world)),
                pool.submit(_atomic_path, out / "dmtet_mesh", lambda d: save_obj(
                    d / "mesh.obj", Mesh(v_pos=dmtet_world.v_pos, t_pos_idx=dmtet_world.t_pos_idx)))]
        if latlong is not None:
            jobs.append(pool.submit(write_hdr, files["probe"], latlong))
        curve = pool.submit(write_images_and_curve)
        for job in jobs + [curve]:
            job.result()  # re-raises the first error
    files["loss_curve"] = curve.result()
    files["metrics"] = out / "metrics.json"
    m = dict(metrics)
    m["up_axis_conversion"] = mesh_world.extras.get("up_axis_conversion")
    m["outputs"] = {k: str(Path(v).relative_to(out)) for k, v in files.items() if v is not None}
    write_json(files["metrics"], m)  # written last: its presence marks a finished run
    return files


__all__ = ["clear_outputs", "plot_loss_curve", "preview_writer", "write_config", "write_outputs", "write_validation_images"]
