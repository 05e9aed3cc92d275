"""The fused Triton training SSIM vs its PyTorch twin ``ssim_same``: values and gradients (float64 and
float32), the window size, and bad input. Without CUDA the kernels run in Triton's interpreter
(``TRITON_INTERPRET=1``, set before triton is first imported), at small sizes."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

triton = pytest.importorskip("triton")

from meshlift.errors import RenderError  # noqa: E402
from meshlift.kernels import splat_ssim_triton as ks  # noqa: E402
from meshlift.kernels import splat_triton as kt  # noqa: E402
from meshlift.methods.gaussians.losses import photometric_loss, ssim_same  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(not kt.is_available(torch.device(DEV)),
                                reason="triton cannot run here (no CUDA and interpreter not enabled)")


def _pair(shape, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    y = torch.rand(shape, generator=g, dtype=torch.float64)
    x = (y + 0.2 * torch.randn(shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    return x.to(DEV, dtype), y.to(DEV, dtype)


@pytest.mark.parametrize("dtype,window,tol", [(torch.float64, 11, 1e-12), (torch.float32, 11, 2e-6),
                                              (torch.float64, 5, 1e-12)])
def test_fused_ssim_matches_the_torch_twin_forward_and_backward(dtype, window, tol):
    x, y = _pair((2, 9, 13, 3), seed=window, dtype=dtype)
    up = 0.7
    res = []
    for fn in (ssim_same, ks.ssim_mean):
        xl = x.clone().requires_grad_(True)
        s = fn(xl, y, window=window)
        (gx,) = torch.autograd.grad(up * s, [xl])
        res.append((s.detach(), gx))
    (s0, g0), (s1, g1) = res
    assert abs(float(s0) - float(s1)) <= tol, (float(s0), float(s1))
    assert 0.0 < float(s0) < 1.0
    scale = g0.abs().max()
    assert (g0 - g1).abs().max() <= 1e3 * tol * scale, ((g0 - g1).abs().max(), scale)


def test_fused_ssim_identical_images_and_no_grad():
    x, _ = _pair((1, 6, 7, 2), seed=3, dtype=torch.float64)
    assert abs(float(ks.ssim_mean(x, x)) - 1.0) < 1e-12
    with torch.no_grad():
        assert abs(float(ks.ssim_mean(x, x * 0.5)) - float(ssim_same(x, x * 0.5))) < 1e-12


def test_fused_ssim_bad_input():
    x = torch.zeros(1, 4, 4, 3, device=DEV)
    with pytest.raises(RenderError, match="must both be"):
        ks.ssim_mean(x, torch.zeros(1, 4, 5, 3, device=DEV))
    with pytest.raises(RenderError, match="odd positive"):
        ks.ssim_mean(x, x, window=4)


def test_photometric_loss_fused_and_torch_agree():
    x, y = _pair((1, 8, 10, 3), seed=5, dtype=torch.float32)
    out = []
    for fused in (False, True):
        xl = x.clone().requires_grad_(True)
        L = photometric_loss(xl, y, 0.2, fused=fused)
        L["loss"].backward()
        out.append((L["loss"].detach(), L["ssim"].detach(), xl.grad))
    assert torch.allclose(out[0][0], out[1][0], atol=1e-6) and torch.allclose(out[0][1], out[1][1], atol=1e-6)
    assert torch.allclose(out[0][2], out[1][2], atol=1e-7, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_fused_ssim_parity_at_training_size():
    """400×400 (the lego training size), two images: the compiled kernels agree with the torch twin."""
    x, y = _pair((2, 400, 400, 3), seed=9, dtype=torch.float32)
    res = []
    for fn in (ssim_same, ks.ssim_mean):
        xl = x.clone().requires_grad_(True)
        s = fn(xl, y)
        s.backward()
        res.append((float(s), xl.grad))
    assert abs(res[0][0] - res[1][0]) < 1e-5
    assert (res[0][1] - res[1][1]).abs().max() <= 1e-3 * res[0][1].abs().max()
