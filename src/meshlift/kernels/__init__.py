"""The single door to meshlift's fast paths, and the only package that may import ``triton``.

Everything that trades readability for speed lives here: visibility backends of the rasterizer (this
module's registry), Triton kernels (compiled at run time, never nvcc) and vectorised/chunked passes. The
public ops in :mod:`meshlift.render` (and later the splat ops) call into this package; nothing above
``render`` imports it directly.

**Visibility backends** (the registry below): ``get_backend(name)`` returns a
:class:`~meshlift.kernels.base.VisibilityBackend`. Names:

- ``"torch"``: pure PyTorch (CPU and CUDA), the portable implementation; always available (its naive twin
  is ``meshlift.render.reference.visibility_reference``).
- ``"triton"``: Triton kernels (:mod:`meshlift.kernels.raster_triton`; CUDA, or CPU under
  ``TRITON_INTERPRET=1``); it also provides the whole differentiable ``rasterize`` and a fused
  ``interpolate``.
- ``"auto"`` (default, or env ``MESHLIFT_RASTER_BACKEND``): the first available backend of ``_AUTO_ORDER``
  for the device: ``"triton"`` on CUDA when ``import triton`` works, else ``"torch"``. Other backend
  modules register themselves with :func:`register_backend`.

**Contract for differentiable kernels** (splatting forward/backward, hash-grid encoding, ...):

1. The kernel is a *private* ``torch.autograd.Function`` (``_SomethingFn``) in its own module here
   (``kernels/<family>_triton.py``); the public function lives in the op layer and picks the
   implementation. Users never see the Function.
2. Its naive, readable PyTorch twin lives in :mod:`meshlift.render.reference` (or beside the op, for a new
   op family) and is the specification: same inputs, same outputs, autograd for the backward.
3. Tests compare forward *and* backward of the kernel against the twin with explicit tolerances, at
   several small sizes, plus a float64 ``gradcheck`` (or finite differences) of the twin.
4. CI has no GPU: Triton kernels run there under ``TRITON_INTERPRET=1`` (set in the test process before
   triton is imported, only when no CUDA device is present), at small sizes.
5. Selection is ``"auto"`` by default: the fast path when its dependency probe
   (:mod:`meshlift._deps`) and ``is_available(device)`` say yes, else the twin; an explicit name that
   cannot run raises a meshlift error naming the alternative.
6. Memory is bounded by a named budget argument (chunking); OOM messages name it.
"""

from __future__ import annotations

import os
from typing import Dict, Optional

import torch

from meshlift.errors import RenderError
from meshlift.kernels.base import VisibilityBackend
from meshlift.kernels.torch_backend import TorchBackend

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
