"""The side-by-side panels of compare/ and images/preview_*.png (methods/gaussians/outputs.py)."""

from __future__ import annotations

import pytest
import torch

from meshlift.methods.gaussians.outputs import CAPTION_HEIGHT, PANEL_MIN_HEIGHT, comparison_panel


def test_small_views_are_enlarged_and_labels_name_each_panel():
    a, b = torch.zeros(36, 64, 3), torch.ones(36, 64, 3)
    plain = comparison_panel([a, b])
    k = -(-PANEL_MIN_HEIGHT // 36)
    assert plain.shape == (36 * k, (64 * 2 + 2) * k, 3)
    labelled = comparison_panel([a, b], ["mesh", "target"])
    assert labelled.shape == (36 * k + CAPTION_HEIGHT, plain.shape[1], 3)
    assert torch.equal(labelled[CAPTION_HEIGHT:], plain)  # the images' pixels are untouched
    strip = labelled[:CAPTION_HEIGHT]
    w = 64 * k
    # text drawn over each image's column, on white
    assert (strip[:, :w] < 0.5).any() and (strip[:, w + 2 * k:] < 0.5).any() and strip.max() == 1.0


def test_bad_panels_raise():
    with pytest.raises(ValueError, match="different heights"):
        comparison_panel([torch.zeros(4, 4, 3), torch.zeros(5, 4, 3)])
    with pytest.raises(ValueError, match="1 labels for 2 images"):
        comparison_panel([torch.zeros(4, 4, 3), torch.zeros(4, 4, 3)], ["x"])
