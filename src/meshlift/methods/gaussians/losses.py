"""Photometric losses of 3D Gaussian splatting training.

``L = (1 − λ) · L1 + λ · (1 − SSIM)`` with λ = 0.2 (Kerbl et al. 2023, Sec. 7, eq. 7). The training SSIM
is the one of the 3DGS code (and of ``fused-ssim``): 11×11 Gaussian window (σ = 1.5), zero-padded
"same" convolution so the map keeps the image size, ``C1 = 0.01²``, ``C2 = 0.03²``, mean over the map
— float32 and differentiable. The evaluation SSIM (float64, "valid" window, the NeRF protocol) stays
:func:`meshlift.metrics.image.ssim`.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from meshlift.metrics.image import gaussian_window

__all__ = ["ssim_same", "photometric_loss"]


_C1 = 0.01**2
_C2 = 0.03**2
_KERNELS: dict = {}


def _blur_kernels(window: int, sigma: float, c: int, dtype: torch.dtype, device: torch.device):
    """``(horizontal [c,1,1,w], vertical [c,1,w,1])`` depthwise Gaussian kernels, built once per device:
    a fresh CPU tensor copied every step would make the host wait for the GPU (pageable copy)."""
    key = (window, float(sigma), c, dtype, str(device))
    hit = _KERNELS.get(key)
    if hit is None:
        g = gaussian_window(window, sigma, dtype=dtype)
        hit = (g.view(1, 1, 1, -1).repeat(c, 1, 1, 1).to(device), g.view(1, 1, -1, 1).repeat(c, 1, 1, 1).to(device))
        _KERNELS[key] = hit
    return hit


def ssim_same(pred: torch.Tensor, target: torch.Tensor, window: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """Mean SSIM of ``pred`` vs ``target`` ``[B, H, W, C]`` (float, [0, 1]), 'same' padding; differentiable.

    Returns:
        ``[]`` tensor (mean over batch, pixels and channels).
    """
    x = pred.permute(0, 3, 1, 2)
    y = target.permute(0, 3, 1, 2)
    c = x.shape[1]
    kh, kv = _blur_kernels(window, sigma, c, x.dtype, x.device)
    pad = window // 2

    def blur(t):
        t = F.conv2d(F.pad(t, (pad, pad, 0, 0)), kh, groups=c)
        return F.conv2d(F.pad(t, (0, 0, pad, pad)), kv, groups=c)

    # One blur call for the five statistics (fewer launches).
    stats = blur(torch.cat([x, y, x * x, y * y, x * y], dim=0))
    b = x.shape[0]
    mu_x, mu_y, xx, yy, xy = stats.split(b, dim=0)
    sxx = xx - mu_x * mu_x
    syy = yy - mu_y * mu_y
    sxy = xy - mu_x * mu_y
    num = (2 * mu_x * mu_y + _C1) * (2 * sxy + _C2)
    den = (mu_x * mu_x + mu_y * mu_y + _C1) * (sxx + syy + _C2)
    return (num / den).mean()


def photometric_loss(pred: torch.Tensor, target: torch.Tensor, ssim_lambda: float = 0.2,
                     fused: Optional[bool] = None) -> dict:
    """3DGS loss terms for ``pred``/``target`` ``[B, H, W, 3]``.

    ``fused``: the SSIM through the fused Triton kernels of :mod:`meshlift.kernels.splat_ssim_triton`
    (4 launches for forward + backward; the same definition as :func:`ssim_same`, its tested twin). None =
    fused on CUDA when the splat backend (:func:`meshlift.kernels.choose_backend`; the config field
    ``splat_backend`` during a run) is Triton and ``target`` needs no gradient.

    Returns:
        ``{"loss", "l1", "ssim"}`` scalar tensors (``loss`` differentiable).
    """
    l1 = (pred - target).abs().mean()
    if fused is None:
        from meshlift.kernels import choose_backend

        fused = pred.is_cuda and choose_backend("splat", None, pred.device,
                                                prefer_torch=target.requires_grad) == "triton"
    if ssim_lambda <= 0:
        s = torch.ones((), device=pred.device)
    elif fused:
        from meshlift.kernels.splat_ssim_triton import ssim_mean

        s = ssim_mean(pred, target)
    else:
        s = ssim_same(pred, target)
    return {"loss": (1.0 - ssim_lambda) * l1 + ssim_lambda * (1.0 - s), "l1": l1, "ssim": s}
