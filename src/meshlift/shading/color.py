"""Colour transfer functions: sRGB <-> linear and the log-sRGB tone map of the HDR image loss.

Conventions (docs/conventions.md §6): images from files are sRGB-encoded; shading happens in linear
radiance. Every function here works on any shape ``[..., C]`` (channel-agnostic: it is applied to every
value, so call it on RGB only, not on alpha), keeps dtype and device, and is differentiable with finite
gradients everywhere (the power branch is evaluated on a clamped input, so ``torch.where`` never
back-propagates a NaN from the branch it did not pick).
"""

from __future__ import annotations

import torch

from meshlift.errors import ImageError

__all__ = ["srgb_to_linear", "linear_to_srgb", "tonemap_srgb", "tonemapped_l1", "background_color", "BACKGROUND_COLORS"]

# IEC 61966-2-1:1999 piecewise curve constants.
_SRGB_ENC_KNEE = 0.0031308  # linear value where the encoding switches from linear to power segment
_SRGB_DEC_KNEE = 0.04045  # encoded value of that knee (12.92 * 0.0031308, rounded as the standard does)
_LOG_TONEMAP_MAX = 65535.0  # nvdiffrec clamps HDR radiance to this before log(x + 1)


def _check(x: torch.Tensor, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise ImageError(f"{name}: expected a torch.Tensor, got {type(x).__name__}; wrap arrays with torch.as_tensor")
    if not x.is_floating_point():
        raise ImageError(
            f"{name}: expected a floating-point tensor, got {x.dtype}; convert 8-bit images with x.float() / 255"
        )


def srgb_to_linear(x: torch.Tensor) -> torch.Tensor:
    """Decode sRGB-encoded values to linear (IEC 61966-2-1 piecewise curve).

    ``x <= 0.04045 -> x / 12.92``, else ``((x + 0.055) / 1.055) ** 2.4``.

    Args:
        x: ``[..., C]`` float tensor of sRGB-encoded values (nominally in [0, 1]; values above 1 follow the
            power branch, values below 0 the linear branch).

    Returns:
        ``[..., C]`` linear values, same dtype/device.

    Raises:
        ImageError: ``x`` is not a floating-point tensor.
    """
    _check(x, "srgb_to_linear(x)")
    power = torch.pow((torch.clamp(x, min=_SRGB_DEC_KNEE) + 0.055) / 1.055, 2.4)
    return torch.where(x <= _SRGB_DEC_KNEE, x / 12.92, power)


def linear_to_srgb(x: torch.Tensor) -> torch.Tensor:
    """Encode linear values to sRGB (IEC 61966-2-1 piecewise curve), the inverse of :func:`srgb_to_linear`.

    ``x <= 0.0031308 -> 12.92 x``, else ``1.055 x ** (1 / 2.4) - 0.055``.

    Args:
        x: ``[..., C]`` float tensor of linear values (not clamped: HDR values above 1 map above 1).

    Returns:
        ``[..., C]`` sRGB-encoded values, same dtype/device.

    Raises:
        ImageError: ``x`` is not a floating-point tensor.
    """
    _check(x, "linear_to_srgb(x)")
    power = 1.055 * torch.pow(torch.clamp(x, min=_SRGB_ENC_KNEE), 1.0 / 2.4) - 0.055
    return torch.where(x <= _SRGB_ENC_KNEE, x * 12.92, power)


def tonemap_srgb(x: torch.Tensor) -> torch.Tensor:
    """The log-sRGB tone map of nvdiffrec's HDR image loss: ``linear_to_srgb(log(clamp(x, 0, 65535) + 1))``.

    Source: Munkberg et al. 2022, "Extracting Triangular 3D Models, Materials, and Lighting From Images"
    (nvdiffrec), Sec. 4 (image loss on tone-mapped colours ``x -> Γ(log(x + 1))`` with Γ the sRGB transfer).

    Args:
        x: ``[..., C]`` linear HDR radiance (negative values clamp to 0).

    Returns:
        ``[..., C]`` tone-mapped values (about [0, 1.6] for radiance in [0, 65535]; 1 at x = e - 1).

    Raises:
        ImageError: ``x`` is not a floating-point tensor.
    """
    _check(x, "tonemap_srgb(x)")
    return linear_to_srgb(torch.log(torch.clamp(x, min=0.0, max=_LOG_TONEMAP_MAX) + 1.0))


def tonemapped_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None,
                  backend: str | None = None) -> torch.Tensor:
    """nvdiffrec's image loss ``mean |T(pred · mask) − T(target · mask)|`` with ``T`` = :func:`tonemap_srgb`.

    Source: Munkberg et al. 2022 (nvdiffrec), Sec. 4 and its ``logl1`` loss (the target premultiplied by the
    mask where masks exist).

    Args:
        pred: ``[..., C]`` linear HDR radiance (differentiable).
        target: ``[..., C]`` the reference, same shape (no gradient is needed through it).
        mask: ``[..., 1]`` coverage in [0, 1] of the same leading shape, or None (no premultiplication).
        backend: ``'auto'`` / ``'torch'`` / ``'triton'`` / None (the current choice, else auto:
            Triton for float32 CUDA tensors; :func:`meshlift.kernels.choose_backend`): one fused
            kernel forward and one backward (:mod:`meshlift.kernels.loss_triton`; no gradient to
            ``target``/``mask``), or this torch code, its reference twin.

    Returns:
        a 0-dim tensor (the mean over every value).

    Raises:
        ImageError: non-float inputs, or shapes that do not match.
    """
    _check(pred, "tonemapped_l1(pred)")
    _check(target, "tonemapped_l1(target)")
    if target.shape != pred.shape:
        raise ImageError(f"tonemapped_l1: target {tuple(target.shape)} must match pred {tuple(pred.shape)}")
    if mask is not None and (mask.shape != (*pred.shape[:-1], 1)):
        raise ImageError(f"tonemapped_l1(mask): expected {(*pred.shape[:-1], 1)}, got {tuple(mask.shape)}")
    from meshlift.kernels import choose_backend

    ts = [t for t in (pred, target, mask) if t is not None]
    if (all(t.dtype == torch.float32 and t.device == pred.device for t in ts)
            and choose_backend("shading", backend, pred.device, pred.dtype) == "triton"):
        from meshlift.kernels.loss_triton import tonemapped_l1_triton

        return tonemapped_l1_triton(pred, target, mask)
    if mask is not None:
        pred, target = pred * mask, target * mask
    return torch.nn.functional.l1_loss(tonemap_srgb(pred), tonemap_srgb(target))


#: Named background colours images are composited on (docs/conventions.md §6), as encoded values in [0, 1].
#: Readers also accept ``"random"`` (a fresh uniform colour per image, :func:`background_color`).
BACKGROUND_COLORS = {"white": (1.0, 1.0, 1.0), "black": (0.0, 0.0, 0.0)}


def background_color(name: str, *, dtype=torch.float32, device=None) -> torch.Tensor:
    """``[3]`` colour of the background ``name``: ``"white"``, ``"black"`` or ``"random"`` (``torch.rand``,
    global generator). Values are the same in sRGB and linear for white and black.

    Raises:
        ImageError: unknown name.
    """
    if name == "random":
        return torch.rand(3, dtype=dtype).to(device)
    if name not in BACKGROUND_COLORS:
        raise ImageError(f"background {name!r}: choose one of {sorted(BACKGROUND_COLORS) + ['random']}")
    return torch.tensor(BACKGROUND_COLORS[name], dtype=dtype, device=device)
