"""Rendering and scoring of trained Gaussians on held-out views (the NeRF / 3DGS protocol).

Test views are rendered one at a time at the training resolution over the **evaluation background**
(``white``, or ``black``; a ``random`` training background evaluates on white), the targets composited on
the same colour, and scored with :mod:`meshlift.metrics` (PSNR, SSIM: float64, 11×11 Gaussian window,
"valid" convolution; LPIPS-Alex v0.1) on the sRGB images clipped to [0, 1]. The background used is
written into ``metrics.json``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from meshlift.methods.gaussians.views import SplatViews

__all__ = ["eval_background", "image_metrics", "render_views"]


def eval_background(name: str) -> str:
    """The background test views are scored on: the training one, or ``white`` for ``random``."""
    return "black" if name == "black" else "white"


@torch.no_grad()
def render_views(params: dict, views: SplatViews, *, sh_degree: int, background: str, near: float,
                 device: torch.device, settings=None, backend: str = "auto",
                 indices: Optional[list[int]] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Render ``views`` (all or ``indices``) and their targets on the ``background`` colour.

    Args:
        params: the stored tensors (:data:`~meshlift.methods.gaussians.trainer.PARAM_NAMES`), on ``device``.
        sh_degree: SH degree to evaluate; near: near plane (world units).

    Returns:
        ``(ours, targets)``: ``[V, H, W, 3]`` float32 sRGB in [0, 1] on the CPU.
    """
    from meshlift.methods.gaussians.trainer import background_color, render_params
    from meshlift.render.splat import SplatSettings

    settings = settings or SplatSettings(check_inputs=False)
    bg = background_color(eval_background(background), torch.Generator()).to(device)
    ours, targets = [], []
    for i in (range(len(views)) if indices is None else indices):
        b = views.batch(torch.tensor([i]), device)
        img, _, _ = render_params(params, b, sh_degree, bg, near, settings, backend)
        ours.append(img.clamp(0, 1).cpu())
        targets.append(b.targets(bg).clamp(0, 1).cpu())
    if not ours:
        empty = torch.zeros(0, views.height, views.width, 3)
        return empty, empty.clone()
    return torch.cat(ours), torch.cat(targets)


def image_metrics(ours: torch.Tensor, targets: torch.Tensor, *, with_lpips: bool = True,
                  with_cc: bool = False) -> dict:
    """Mean and per-view PSNR (dB), SSIM and (optionally, images ≥ 32 px) LPIPS of ``[V, H, W, 3]`` images;
    with ``with_cc`` also the colour-corrected PSNR (``psnr_cc``: after each view's best affine colour map,
    :func:`meshlift.metrics.image.psnr_color_corrected`)."""
    from meshlift.metrics.image import psnr, psnr_color_corrected, ssim

    ps = [float(psnr(o, r)) for o, r in zip(ours, targets)]
    ss = [float(ssim(o, r)) for o, r in zip(ours, targets)]
    out = {"psnr": float(np.mean(ps)) if ps else None, "ssim": float(np.mean(ss)) if ss else None,
           "psnr_per_view": ps, "ssim_per_view": ss}
    if with_cc:
        cc = [float(psnr_color_corrected(o, r)) for o, r in zip(ours, targets)]
        out.update(psnr_cc=float(np.mean(cc)) if cc else None, psnr_cc_per_view=cc)
    if with_lpips and len(ours) and min(ours.shape[1:3]) >= 32:
        from meshlift.metrics.lpips import lpips

        lp = lpips(ours, targets).reshape(-1).tolist()
        out["lpips"] = float(np.mean(lp))
        out["lpips_per_view"] = lp
    else:
        out["lpips"] = None
    return out
