"""Renders that show nothing: an image that is background everywhere, judged against its reference.

A render whose every pixel is within :data:`BLANK_TOLERANCE` of the background shows nothing of the asset;
when the reference image of the same camera has content (more than :data:`CONTENT_FRACTION` of its pixels
differ from the background by more than :data:`CONTENT_TOLERANCE`), the asset is outside that camera's view
(another world frame or scale, clipped by the depth range), and any score computed from the pair measures
the background, not the asset. Commands report such views as a warning in their summary and JSON.

Images are ``[H, W, C]`` float tensors in [0, 1] (sRGB as written; C >= 3, only RGB is compared).
"""

from __future__ import annotations

import torch

__all__ = ["BLANK_TOLERANCE", "CONTENT_TOLERANCE", "CONTENT_FRACTION", "is_blank", "has_content"]

#: A pixel within this of the background (each RGB channel, [0, 1] units: 2 of 255 steps) is background.
BLANK_TOLERANCE = 2.0 / 255.0
#: A reference pixel further than this from the background (any RGB channel) shows something.
CONTENT_TOLERANCE = 8.0 / 255.0
#: A reference with more than this fraction of such pixels has content.
CONTENT_FRACTION = 0.005


def _distance(image: torch.Tensor, background: float) -> torch.Tensor:
    """``[H, W]`` largest per-channel distance of the RGB values from the grey level ``background``."""
    return (image[..., :3].float() - float(background)).abs().amax(dim=-1)


def is_blank(image: torch.Tensor, background: float) -> bool:
    """True when every pixel of ``image [H, W, C]`` is within :data:`BLANK_TOLERANCE` of ``background``
    (a grey level in [0, 1])."""
    return bool((_distance(image, background) <= BLANK_TOLERANCE).all())


def has_content(reference: torch.Tensor, background: float) -> bool:
    """True when more than :data:`CONTENT_FRACTION` of the pixels of ``reference [H, W, C]`` differ from
    ``background`` by more than :data:`CONTENT_TOLERANCE` (so a render of it should not be blank)."""
    d = _distance(reference, background)
    return bool((d > CONTENT_TOLERANCE).float().mean() > CONTENT_FRACTION)
