"""Visibility backends and the one place that chooses between them.

``get_backend(name)`` returns a :class:`~meshlift.render.backends.base.VisibilityBackend`. Names:

- ``"torch"``: pure PyTorch (CPU and CUDA), the reference implementation; always available.
- ``"auto"`` (default, or env ``MESHLIFT_RASTER_BACKEND``): the fastest available backend for the device.
  ``"triton"`` on CUDA when ``import triton`` works, else ``"torch"``.
- ``"triton"``: Triton kernels (:mod:`meshlift.kernels.raster_triton`; CUDA, or CPU under
  ``TRITON_INTERPRET=1``); it also provides the whole differentiable ``rasterize``.
"""

from __future__ import annotations

import os
from typing import Dict, Optional

import torch

from meshlift.errors import RenderError
from meshlift.render.backends.base import VisibilityBackend
from meshlift.render.backends.torch_backend import TorchBackend

_BACKENDS: Dict[str, VisibilityBackend] = {"torch": TorchBackend()}

from meshlift.kernels.raster_triton import TritonBackend  # noqa: E402  (imports triton lazily)

_BACKENDS["triton"] = TritonBackend()

#: Order in which ``"auto"`` tries backends (first available wins); triton only ever on CUDA.
_AUTO_ORDER = ("triton", "torch")


def register_backend(backend: VisibilityBackend) -> None:
    """Add (or replace) a visibility backend under ``backend.name``."""
    if not isinstance(backend, VisibilityBackend):
        raise RenderError(
            f"register_backend: {backend!r} does not implement VisibilityBackend "
            "(needs .name, .is_available(device) and .visibility(...))"
        )
    _BACKENDS[backend.name] = backend


def available_backends(device: Optional[torch.device] = None) -> list[str]:
    """Names of the registered backends usable on ``device`` (default CPU)."""
    dev = torch.device("cpu") if device is None else torch.device(device)
    return [n for n, b in _BACKENDS.items() if b.is_available(dev)]


def get_backend(name: Optional[str] = None, device: Optional[torch.device] = None) -> VisibilityBackend:
    """Return the visibility backend ``name`` (None → env ``MESHLIFT_RASTER_BACKEND`` or ``"auto"``).

    Raises:
        RenderError: unknown name, or the backend cannot run on ``device``.
    """
    dev = torch.device("cpu") if device is None else torch.device(device)
    if name is None:
        name = os.environ.get("MESHLIFT_RASTER_BACKEND", "auto")
    if name == "auto":
        for n in _AUTO_ORDER:
            if n == "triton" and dev.type != "cuda":
                continue
            if n in _BACKENDS and _BACKENDS[n].is_available(dev):
                return _BACKENDS[n]
        raise RenderError(f"no visibility backend is available on device {dev}")
    if name not in _BACKENDS:
        raise RenderError(
            f"unknown rasterizer backend {name!r}; choose one of {sorted(_BACKENDS)} or 'auto' "
            "(argument backend= or env MESHLIFT_RASTER_BACKEND)"
        )
    backend = _BACKENDS[name]
    if not backend.is_available(dev):
        raise RenderError(f"rasterizer backend {name!r} is not available on device {dev}; use backend='torch'")
    return backend


__all__ = ["VisibilityBackend", "TorchBackend", "get_backend", "available_backends", "register_backend"]
