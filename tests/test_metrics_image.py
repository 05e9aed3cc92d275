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


def test_color_correct_recovers_an_exposure_and_white_balance_change():
    """A target that is the render under a per-image affine colour map (gain, cross-talk, offset) is matched
    exactly; the colour-corrected PSNR is then far above the plain one."""
    from meshlift.metrics.image import color_correct, psnr_color_corrected

    g = torch.Generator().manual_seed(0)
    pred = torch.rand(2, 12, 10, 3, generator=g, dtype=torch.float64) * 0.6 + 0.1
    A = torch.tensor([[1.2, 0.05, 0.0], [0.0, 0.9, 0.1], [0.02, 0.0, 1.1]], dtype=torch.float64)
    b = torch.tensor([0.02, -0.03, 0.01], dtype=torch.float64)
    gt = pred @ A + b
    gt[1] = pred[1] * 0.8  # the second image: exposure only
    assert torch.allclose(color_correct(pred, gt), gt, atol=1e-6)
    cc, raw = psnr_color_corrected(pred, gt), psnr(pred, gt)
    assert cc.shape == (2,) and bool((cc > 100).all()) and bool((raw < 30).all())


def test_color_correct_matches_numpy_lstsq_and_never_lowers_psnr():
    """Twin: numpy's least squares per image (before the clamp); the corrected PSNR is never below the plain
    one (the identity is one of the maps), for random pairs and for a flat render (rank-deficient fit)."""
    from meshlift.metrics.image import color_correct, psnr_color_corrected

    g = torch.Generator().manual_seed(1)
    pred = torch.rand(3, 9, 7, 3, generator=g, dtype=torch.float64)
    gt = (0.7 * pred.flip(-1) + 0.3 * torch.rand(3, 9, 7, 3, generator=g, dtype=torch.float64)).clamp(0, 1)
    out = color_correct(pred, gt)
    for i in range(3):
        x = np.concatenate([pred[i].reshape(-1, 3).numpy(), np.ones((63, 1))], axis=1)
        m = np.linalg.lstsq(x, gt[i].reshape(-1, 3).numpy(), rcond=None)[0]
        want = np.clip(x @ m, 0, 1).reshape(9, 7, 3)
        assert np.allclose(out[i].numpy(), want, atol=1e-6)
    assert bool((psnr_color_corrected(pred, gt) >= psnr(pred, gt) - 1e-6).all())
    flat = torch.full((9, 7, 3), 0.5, dtype=torch.float64)
    cc = psnr_color_corrected(flat, gt[0])
    assert math.isfinite(float(cc)) and float(cc) >= float(psnr(flat, gt[0])) - 1e-6
    with pytest.raises(ImageError, match="color_correct"):
        color_correct(pred, gt[0])


def test_color_correct_per_channel_on_a_mask_matches_lstsq():
    """``per_channel`` with a ``mask``: each channel's gain and offset fitted by numpy's least squares on the
    masked pixels only, applied everywhere (then clamped); a mask of the wrong size is refused."""
    from meshlift.metrics.image import color_correct

    g = torch.Generator().manual_seed(2)
    pred = torch.rand(12, 10, 3, generator=g, dtype=torch.float64)
    gt = (pred * torch.tensor([1.1, 0.9, 1.0], dtype=torch.float64) + 0.02).clamp(0, 1)
    mask = torch.rand(12, 10, generator=g) > 0.3
    gt[~mask] = 0.0  # outside the mask the target says nothing about the map
    want = np.empty((12, 10, 3))
    for c in range(3):
        x = pred[..., c].numpy()
        a = np.stack([x[mask.numpy()], np.ones(int(mask.sum()))], 1)
        gain, off = np.linalg.lstsq(a, gt[..., c].numpy()[mask.numpy()], rcond=None)[0]
        want[..., c] = np.clip(x * gain + off, 0, 1)
    assert np.allclose(color_correct(pred, gt, mask=mask, per_channel=True).numpy(), want, atol=1e-7)
    with pytest.raises(ImageError, match="mask"):
        color_correct(pred, gt, mask=mask[:5])
