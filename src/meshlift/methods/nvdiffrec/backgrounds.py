"""Training backgrounds of the surface method (config field ``train_background``).

``fixed`` trains on the views' own background (``PosedViews.background``, the config's ``background``: what the
evaluation and the metrics use). ``random`` / ``random_view`` draw a new uniform random linear colour per pixel /
per view at every step and put it behind both sides of the loss: the render is composited over it by the renderer
(:func:`meshlift.methods.nvdiffrec.evaluate.render_batch`), the target is re-composited over it with its mask
(:func:`targets_on`). Against a known fixed background a floater of that colour, or a hole in front of a bright
part, costs little; against noise it costs wherever it shows, so coverage has to be learnt (NeRF-synthetic
practice: nvdiffrec's ``--background random``, instant-ngp). Only views with masks can be re-composited; without
masks the background stays fixed.

Images are linear radiance (conventions §6). A target composited on ``bg`` with mask ``m`` is
``t = c·m + bg·(1 − m)``, so on ``b`` it is ``t + (b − bg)·(1 − m)``, with no division by ``m``: exact for
straight views composited here (``PosedViews.straight``) and, for a reader's composite (which is made on the
sRGB-encoded file values), exact where ``m`` is 0 or 1 and within the sRGB curve's non-linearity across the
antialiased rim of the silhouette.
"""

from __future__ import annotations

from typing import Optional

import torch

from meshlift.data.views import PosedViews
from meshlift.errors import ConfigError
from meshlift.methods.nvdiffrec.config import TRAIN_BACKGROUNDS

__all__ = ["TRAIN_BACKGROUNDS", "draw_background", "targets_on"]

def draw_background(views: PosedViews, mode: str, generator: Optional[torch.Generator] = None
                    ) -> Optional[torch.Tensor]:
    """The training background of one step: ``[B, H, W, 3]`` float32 linear colours uniform in [0, 1] on the
    views' device (``random``: each pixel its own; ``random_view``: one per view), or None for ``fixed`` and for
    views without masks (their targets cannot be re-composited; the views' own background is used).

    ``generator``: a ``torch.Generator`` on the views' device (None: torch's default one of that device, which
    the passes seed with ``seed``).

    Raises:
        ConfigError: an unknown ``mode`` (the message lists :data:`TRAIN_BACKGROUNDS`).
    """
    if mode not in TRAIN_BACKGROUNDS:
        raise ConfigError(f"config field 'train_background' = {mode!r}; choose one of {', '.join(TRAIN_BACKGROUNDS)}")
    if mode == "fixed" or views.masks is None:
        return None
    B, (H, W) = len(views), views.resolution
    device = views.images.device
    if mode == "random":
        return torch.rand(B, H, W, 3, device=device, generator=generator)
    return torch.rand(B, 1, 1, 3, device=device, generator=generator).expand(B, H, W, 3).contiguous()


def targets_on(views: PosedViews, background: torch.Tensor) -> torch.Tensor:
    """``views.targets()`` re-composited on ``background`` (``[B, H, W, 3]``, or anything broadcasting to it):
    ``targets + (background − views.background)·(1 − masks)`` (see the module doc for the accuracy).

    Returns ``[B, H, W, 3]`` linear. Raises:
        ConfigError: the views have no masks (nothing tells object from background).
    """
    if views.masks is None:
        raise ConfigError("a random training background needs masks (alpha or mask files) to re-composite the "
                          "targets; use --set train_background=fixed for this dataset")
    t = views.targets()
    bg = views.background.to(t).view(1, 1, 1, 3)
    return t + (background.to(t) - bg) * (1.0 - views.masks.to(t))
