"""PSNR and SSIM against hand-computed values and a naive per-window SSIM reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from meshlift.errors import ImageError
from meshlift.metrics.image import gaussian_window, psnr, ssim


def test_psnr_constant_offset():
    gt = torch.rand(2, 16, 16, 3) * 0.8
    for c in (0.01, 0.1):
        p = psnr(gt + c, gt)
        assert p.shape == (2,)
        assert torch.allclose(p, torch.full((2,), 20 * math.log10(1 / c), dtype=torch.float64), atol=1e-4)
    assert math.isinf(float(psnr(gt[0], gt[0])))


def _ssim_reference(x: np.ndarray, y: np.ndarray) -> float:
    """Wang et al. 2004 eq. 13 window by window: Gaussian-weighted statistics of every valid 11x11 window."""
    w1 = gaussian_window().numpy()
    w = np.outer(w1, w1)
    c1, c2 = 0.01**2, 0.03**2
    vals = []
    H, W, C = x.shape
    for ch in range(C):
        for i in range(H - 10):
            for j in range(W - 10):
                a, b = x[i: i + 11, j: j + 11, ch], y[i: i + 11, j: j + 11, ch]
                mx, my = (w * a).sum(), (w * b).sum()
                vx = (w * (a - mx) ** 2).sum()
                vy = (w * (b - my) ** 2).sum()
                cxy = (w * (a - mx) * (b - my)).sum()
                vals.append(((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2)))
    return float(np.mean(vals))


def test_gaussian_window():
    w = gaussian_window()
    assert w.shape == (11,) and float(w.sum()) == pytest.approx(1.0)
    assert float(w[5] / w[4]) == pytest.approx(math.exp(1 / (2 * 1.5**2)))


def test_ssim_identical_and_reference():
    g = torch.Generator().manual_seed(1)
    x = torch.rand(18, 20, 3, generator=g)
    y = (x + 0.15 * torch.randn(18, 20, 3, generator=g)).clamp(0, 1)
    assert float(ssim(x, x)) == pytest.approx(1.0, abs=1e-12)
    ref = _ssim_reference(x.double().numpy(), y.double().numpy())
    assert float(ssim(x, y)) == pytest.approx(ref, abs=1e-9)
    assert 0.2 < ref < 0.95
    b = ssim(torch.stack([x, y]), torch.stack([y, y]))
    assert b.shape == (2,) and float(b[1]) == pytest.approx(1.0)


def test_errors():
    with pytest.raises(ImageError, match="differ in shape"):
        psnr(torch.rand(8, 8, 3), torch.rand(8, 9, 3))
    with pytest.raises(ImageError, match="at least 11x11"):
        ssim(torch.rand(8, 8, 3), torch.rand(8, 8, 3))
