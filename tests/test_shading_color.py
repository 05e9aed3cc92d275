"""meshlift.shading.color: IEC 61966-2-1 sRGB transfer curves and nvdiffrec's log-sRGB tone map."""

import math

import pytest
import torch

from meshlift.errors import ImageError
from meshlift.shading.color import linear_to_srgb, srgb_to_linear, tonemap_srgb


def test_known_values():
    x = torch.tensor([0.0, 0.04045, 0.5, 1.0])
    lin = srgb_to_linear(x)
    # 0.5 sRGB -> 0.214041 linear (((0.5 + 0.055) / 1.055) ** 2.4), the standard's reference point.
    torch.testing.assert_close(lin, torch.tensor([0.0, 0.04045 / 12.92, 0.2140411, 1.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(linear_to_srgb(torch.tensor([0.0031308, 0.2140411, 1.0])),
                               torch.tensor([0.0031308 * 12.92, 0.5, 1.0]), atol=1e-5, rtol=0)


def test_roundtrip_and_continuity():
    x = torch.linspace(-0.1, 1.5, 2001, dtype=torch.float64)
    torch.testing.assert_close(linear_to_srgb(srgb_to_linear(x)), x, atol=1e-12, rtol=0)
    torch.testing.assert_close(srgb_to_linear(linear_to_srgb(x)), x, atol=1e-12, rtol=0)
    # The two branches meet at the knees (no visible step): compare just below and above.
    k = torch.tensor([0.0031308 - 1e-9, 0.0031308 + 1e-9], dtype=torch.float64)
    y = linear_to_srgb(k)
    assert abs(float(y[1] - y[0])) < 1e-6
    # Monotone.
    assert bool((torch.diff(srgb_to_linear(x)) > 0).all())


def test_gradients_finite_and_correct():
    x = torch.tensor([-0.2, 0.0, 0.002, 0.03, 0.2, 0.7, 1.3], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(srgb_to_linear, (x,))
    assert torch.autograd.gradcheck(linear_to_srgb, (x,))
    xp = torch.tensor([0.001, 0.1, 2.0, 50.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(tonemap_srgb, (xp,))
    z = torch.zeros(3, requires_grad=True)
    (linear_to_srgb(z).sum() + srgb_to_linear(z).sum() + tonemap_srgb(z).sum()).backward()
    assert bool(torch.isfinite(z.grad).all())


def test_tonemap():
    x = torch.tensor([-1.0, 0.0, math.e - 1.0, 1e9])
    y = tonemap_srgb(x)
    assert float(y[0]) == 0.0 and float(y[1]) == 0.0
    assert abs(float(y[2]) - 1.0) < 1e-6
    torch.testing.assert_close(y[3], linear_to_srgb(torch.tensor(math.log(65536.0))))


def test_validation():
    with pytest.raises(ImageError, match="floating-point"):
        srgb_to_linear(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(ImageError, match="torch.Tensor"):
        linear_to_srgb([0.5])
