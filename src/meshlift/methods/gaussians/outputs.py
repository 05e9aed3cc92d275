"""Writing a Gaussian splatting run's folder.

Layout of ``DIR``:

- ``point_cloud.ply``: the trained Gaussians in the standard 3DGS layout
  (:func:`meshlift.io.gaussian_ply.save_gaussian_ply`), in the **dataset's world frame** (training runs in
  it; docs/conventions.md §11) — opens in common splat viewers and in ``meshlift render``;
- ``renders/<view>.png`` and ``gt/<view>.png``: every evaluated test view and its target on the evaluation
  background (``meshlift eval images DIR/renders DIR/gt`` scores them again);
- ``images/preview_<step>.png``: render | target of the first test view during training;
- ``metrics.json`` (strict JSON), ``config.json``, ``checkpoint.pt``, ``loss_curve.png``.

Every file is written atomically (temporary name + rename); nothing is written from non-finite parameters
(the trainer's guard stops before).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import torch

from meshlift.methods.gaussians.config import GaussiansConfig, config_to_dict

__all__ = ["preview_writer", "side_by_side", "write_config", "write_outputs"]


def write_config(out: Path, cfg: GaussiansConfig) -> Path:
    """Write the effective config to ``out/config.json`` (atomically, strict JSON), with the ``--method`` that
    wrote the folder (``gaussians`` or ``milo``: :func:`meshlift.methods.config_layers.saved_config`)."""
    from meshlift.io.jsonfile import write_json

    from meshlift.methods.config_layers import saved_config
    return write_json(Path(out) / "config.json", saved_config(config_to_dict(cfg), type(cfg).METHOD))


#: Width in pixels of the grey separator between the images of :func:`side_by_side` (and its panels).
SEPARATOR_PX = 2


def side_by_side(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``[H, W, 3]`` left | right with a ``SEPARATOR_PX``-pixel grey separator."""
    sep = torch.full((left.shape[0], SEPARATOR_PX, 3), 0.5)
    return torch.cat([left.cpu(), sep, right.cpu()], dim=1)


#: Comparison panels (``compare/``) are enlarged (nearest neighbour, a whole factor) to at least this many
#: pixels tall: a ``--quick`` run's 36×64 test views were too small to judge (a fresh user's report, 2026-12-04).
PANEL_MIN_HEIGHT = 270


#: Height in pixels of the caption strip :func:`comparison_panel` puts above labelled panels.
CAPTION_HEIGHT = 16


def comparison_panel(images: list, labels: Optional[list] = None) -> torch.Tensor:
    """``[H·k (+ CAPTION_HEIGHT), (n·W + SEPARATOR_PX·(n−1))·k, 3]``: the ``[H, W, 3]`` float images side by side (grey
    separators), each enlarged by the whole factor ``k = ceil(PANEL_MIN_HEIGHT / H)`` (1 for views at least that
    tall); with ``labels`` (one string per image) a white strip above names each one (a fresh user could not
    tell the panels apart, 2026-12-06). The images' pixels are unchanged.

    Raises:
        ValueError: images of different heights, or not one label per image.
    """
    import math

    if len({int(im.shape[0]) for im in images}) != 1:
        raise ValueError(f"comparison_panel: images of different heights {[tuple(im.shape) for im in images]}")
    if labels is not None and len(labels) != len(images):
        raise ValueError(f"comparison_panel: {len(labels)} labels for {len(images)} images")
    k = max(1, math.ceil(PANEL_MIN_HEIGHT / int(images[0].shape[0])))
    panel = images[0].cpu().float()
    for im in images[1:]:
        panel = side_by_side(panel, im.cpu().float())
    panel = panel.repeat_interleave(k, dim=0).repeat_interleave(k, dim=1) if k > 1 else panel
    if labels is None:
        return panel
    import numpy as np
    from PIL import Image, ImageDraw

    strip = Image.new("RGB", (int(panel.shape[1]), CAPTION_HEIGHT), (255, 255, 255))
    draw = ImageDraw.Draw(strip)
    x = 0
    for im, text in zip(images, labels):
        draw.text((x + 4, 2), str(text), fill=(0, 0, 0))
        x += (int(im.shape[1]) + SEPARATOR_PX) * k
    cap = torch.from_numpy(np.asarray(strip).copy()).float() / 255.0
    return torch.cat([cap, panel], dim=0)


def preview_writer(out: Optional[Path], problem, cfg: GaussiansConfig, device: torch.device,
                   near: float) -> Optional[Callable[[int, dict, int], None]]:
    """Callback ``(step, params, sh_degree)`` writing ``images/preview_<step>.png`` (render | target of the
    first test view), or None without an output folder or test views."""
    if out is None or len(problem.test) == 0:
        return None

    def write(step: int, params: dict, sh_degree: int) -> None:
        from meshlift.io.images import write_image
        from meshlift.methods.gaussians.evaluate import render_views

        ours, target = render_views(params, problem.test, sh_degree=sh_degree, background=cfg.background,
                                    near=near, device=device, backend=cfg.splat_backend, indices=[0])
        write_image(Path(out) / "images" / f"preview_{step:06d}.png", side_by_side(ours[0], target[0]))

    return write


def _write_png_atomic(path: Path, image: torch.Tensor) -> None:
    import os

    from meshlift.io.images import write_image

    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    write_image(tmp, image)
    os.replace(tmp, path)


def write_outputs(out: Path, gaussians, metrics: dict, history: list[dict], cfg: GaussiansConfig, *,
                  ours: Optional[torch.Tensor] = None, targets: Optional[torch.Tensor] = None,
                  names: Optional[list] = None) -> dict:
    """Write every output of a finished run into ``out``; returns ``{name: path}``.

    Args:
        gaussians: the trained :class:`~meshlift.structures.gaussians.Gaussians` (world frame).
        metrics: the dict for ``metrics.json`` (``outputs`` is added).
        history: per-step dicts (loss, psnr) for the loss curve.
        ours, targets: ``[V, H, W, 3]`` test renders and targets; names: one file stem per view.
    """
    from meshlift.io.gaussian_ply import save_gaussian_ply
    from meshlift.io.jsonfile import write_json
    from meshlift.methods.nvdiffrec.outputs import plot_loss_curve

    out = Path(out)
    files: dict = {"ply": save_gaussian_ply(out / "point_cloud.ply", gaussians)}
    if cfg.render_test and ours is not None and targets is not None and len(ours):
        names = names or [f"{i:04d}" for i in range(len(ours))]
        for sub, imgs in (("renders", ours), ("gt", targets)):
            (out / sub).mkdir(parents=True, exist_ok=True)
            for name, img in zip(names, imgs):
                _write_png_atomic(out / sub / f"{name}.png", img)
        files["renders"] = out / "renders"
        files["gt"] = out / "gt"
    curve = out / "loss_curve.png"
    tmp = out / ".loss_curve.tmp.png"
    plot_loss_curve(history, tmp)
    tmp.replace(curve)
    files["loss_curve"] = curve
    files["metrics"] = out / "metrics.json"
    m = dict(metrics)
    m["outputs"] = {k: str(Path(v).relative_to(out)) for k, v in files.items()}
    write_json(files["metrics"], m)
    return files
