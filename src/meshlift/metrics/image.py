"""Image metrics: PSNR and SSIM (torch, CPU or GPU, no extra dependency).

Images are ``[H, W, C]`` or ``[B, H, W, C]`` float in [0, 1] (docs/conventions.md §6); compare images
in the same encoding (sRGB files, as the NeRF evaluation code does).
"""

from __future__ import annotations

import torch

from meshlift.errors import ImageError

_SSIM_K1 = 0.01
_SSIM_K2 = 0.03
_SSIM_WINDOW = 11
_SSIM_SIGMA = 1.5


def _as_batch(pred: torch.Tensor, gt: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(pred, torch.Tensor) or not isinstance(gt, torch.Tensor):
        raise ImageError(f"{name}: pred and gt must be torch tensors")
    if pred.shape != gt.shape:
        raise ImageError(
            f"{name}: pred {tuple(pred.shape)} and gt {tuple(gt.shape)} differ in shape; resize one of them "
            "or render at the ground truth's resolution"
        )
    if pred.ndim == 3:
        pred, gt = pred[None], gt[None]
    if pred.ndim != 4:
        raise ImageError(f"{name}: images must be [H, W, C] or [B, H, W, C], got {tuple(pred.shape)}")
    return pred.double(), gt.double()


def psnr(pred: torch.Tensor, gt: torch.Tensor, *, max_val: float = 1.0) -> torch.Tensor:
    """Peak signal-to-noise ratio per image, ``10 log10(max_val² / MSE)`` in dB.

    Args:
        pred, gt: ``[H, W, C]`` or ``[B, H, W, C]`` float in [0, max_val]; same shape.
        max_val: peak value (1.0 for [0, 1] images).

    Returns:
        ``[]`` (one image) or ``[B]`` float64 tensor; ``inf`` for identical images. Datasets report
        the mean of per-image PSNR (what ``meshlift eval images`` prints).

    Raises:
        ImageError: shape mismatch or wrong rank.
    """
    single = pred.ndim == 3
    p, g = _as_batch(pred, gt, "psnr")
    mse = ((p - g) ** 2).mean(dim=(1, 2, 3))
    out = 10.0 * torch.log10(max_val**2 / mse)
    return out[0] if single else out


def color_correct(pred: torch.Tensor, gt: torch.Tensor, *, mask: torch.Tensor | None = None,
                  per_channel: bool = False) -> torch.Tensor:
    """``pred`` under the affine colour map that brings it closest to ``gt`` (least squares, one map per image).

    Per image, ``M`` (``[C+1, C]``) minimises ``‖[pred, 1] M − gt‖²`` over the pixels (those of ``mask``, when
    given); the result is ``clamp([pred, 1] M, 0, 1)`` on every pixel. With ``per_channel`` the map is a gain
    and an offset per channel (no cross-talk). A per-photo exposure, white balance or tone change of the target
    is such a map, so the PSNR after it (:func:`psnr_color_corrected`) scores what an asset with fixed colours
    can show of a capture whose exposure varies from photo to photo: the colour-corrected metrics of RawNeRF
    (Mildenhall et al., CVPR 2022, Sec. 6) and Zip-NeRF (Barron et al., ICCV 2023; their ``color_correct``
    fits a quadratic per channel, this one the affine map).

    Args:
        pred, gt: ``[H, W, C]`` or ``[B, H, W, C]`` float in [0, 1]; same shape.
        mask: ``[H, W]`` or ``[B, H, W]`` bool, the pixels the map is fitted on (None: all).
        per_channel: fit each channel alone (``2`` numbers a channel instead of ``C + 1``).

    Returns:
        ``pred``'s shape, float64.

    Raises:
        ImageError: shape mismatch or wrong rank (of the images or the mask).
    """
    single = pred.ndim == 3
    p, g = _as_batch(pred, gt, "color_correct")
    B, H, W, C = p.shape
    w = torch.ones(B, H * W, 1, dtype=p.dtype, device=p.device)
    if mask is not None:
        if tuple(mask.shape[-2:]) != (H, W) or mask.ndim not in (2, 3) or mask.numel() not in (H * W, B * H * W):
            raise ImageError(f"color_correct: mask {tuple(mask.shape)} does not match the images' [{B}, {H}, {W}]")
        w = w * mask.reshape(-1, H * W, 1).to(w)
    x, y = p.reshape(B, H * W, C), g.reshape(B, H * W, C)
    if per_channel:  # the channels as a batch of one-channel images
        x, y = (t.transpose(1, 2).reshape(B * C, H * W, 1) for t in (x, y))
        w = w.repeat_interleave(C, dim=0)
    x = torch.cat([x, torch.ones_like(x[..., :1])], dim=-1)
    # normal equations with a tiny ridge: a flat image (rank-deficient x) gets the map that keeps it flat
    xtx = (x * w).transpose(1, 2) @ x
    xtx = xtx + 1e-9 * (H * W) * torch.eye(x.shape[-1], dtype=p.dtype, device=p.device)
    fitted = x @ torch.linalg.solve(xtx, (x * w).transpose(1, 2) @ y)
    if per_channel:
        fitted = fitted.reshape(B, C, H * W).transpose(1, 2)
    out = fitted.clamp(0.0, 1.0).reshape(B, H, W, C)
    return out[0] if single else out


def psnr_color_corrected(pred: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """:func:`psnr` of :func:`color_correct` ``(pred, gt)`` against ``gt`` (dB; ``[]`` or ``[B]`` float64).

    Never more than ~1e-6 dB below :func:`psnr` of the same pair for images in [0, 1] (the identity is one of
    the maps and the clamp only moves values towards ``gt``'s range); the difference is how much of the
    error is a global colour change.

    Raises:
        ImageError: shape mismatch or wrong rank.
    """
    return psnr(color_correct(pred, gt), gt.double())


def gaussian_window(size: int = _SSIM_WINDOW, sigma: float = _SSIM_SIGMA, dtype=torch.float64) -> torch.Tensor:
    """Normalised 1-D Gaussian ``[size]`` centred on the middle tap (Wang et al. 2004, §III-C)."""
    x = torch.arange(size, dtype=dtype) - (size - 1) / 2.0
    w = torch.exp(-(x**2) / (2.0 * sigma**2))
    return w / w.sum()


def ssim(
    pred: torch.Tensor, gt: torch.Tensor, *, max_val: float = 1.0, return_map: bool = False
) -> torch.Tensor:
    """Structural similarity (Wang, Bovik, Sheikh, Simoncelli 2004, eq. 13) per image.

    11×11 Gaussian window (σ = 1.5), ``K1 = 0.01``, ``K2 = 0.03``, ``L = max_val``; local statistics
    from a separable 'valid' convolution (no padding), SSIM averaged over the valid map and the
    channels — the computation of the common NeRF evaluation code (mip-NeRF ``compute_ssim``).

    Args:
        pred, gt: ``[H, W, C]`` or ``[B, H, W, C]`` float in [0, max_val], H and W ≥ 11.
        max_val: dynamic range L.
        return_map: also return the SSIM map ``[B, H - 10, W - 10, C]``.

    Returns:
        ``[]`` or ``[B]`` float64 (and the map when asked). 1 for identical images.

    Raises:
        ImageError: shape mismatch, wrong rank, images smaller than the window.
    """
    single = pred.ndim == 3
    p, g = _as_batch(pred, gt, "ssim")
    B, H, W, C = p.shape
    if H < _SSIM_WINDOW or W < _SSIM_WINDOW:
        raise ImageError(f"ssim: images are {H}x{W}; SSIM needs at least {_SSIM_WINDOW}x{_SSIM_WINDOW} pixels")
    w = gaussian_window(dtype=p.dtype).to(p.device)
    kx = w.reshape(1, 1, 1, -1).expand(C, 1, 1, -1)
    ky = w.reshape(1, 1, -1, 1).expand(C, 1, -1, 1)

    def filt(z: torch.Tensor) -> torch.Tensor:  # z: [B, C, H, W], valid separable Gaussian blur
        z = torch.nn.functional.conv2d(z, ky, groups=C)
        return torch.nn.functional.conv2d(z, kx, groups=C)

    x = p.permute(0, 3, 1, 2)
    y = g.permute(0, 3, 1, 2)
    mu_x, mu_y = filt(x), filt(y)
    sxx = filt(x * x) - mu_x**2
    syy = filt(y * y) - mu_y**2
    sxy = filt(x * y) - mu_x * mu_y
    # numerical noise can make variances slightly negative; clamp as mip-NeRF does
    sxx = sxx.clamp_min(0.0)
    syy = syy.clamp_min(0.0)
    sxy = torch.sign(sxy) * torch.minimum(torch.sqrt(sxx * syy), sxy.abs())
    c1 = (_SSIM_K1 * max_val) ** 2
    c2 = (_SSIM_K2 * max_val) ** 2
    smap = ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x**2 + mu_y**2 + c1) * (sxx + syy + c2))
    val = smap.mean(dim=(1, 2, 3))
    val = val[0] if single else val
    if return_map:
        return val, smap.permute(0, 2, 3, 1)
    return val

