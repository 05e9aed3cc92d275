"""The single door to meshlift's fast paths, and the only package that may import ``triton``.

Everything that trades readability for speed lives here: visibility backends of the rasterizer (this
module's registry), Triton kernels (compiled at run time, never nvcc) and vectorised/chunked passes. The
public ops in :mod:`meshlift.render` (and later the splat ops) call into this package; nothing above
``render`` imports it directly.

**Backend choice** (:func:`choose_backend`, the one place an implementation is picked): every fast-path
family (``"raster"``, ``"shading"``, ``"splat"``) has a ``"torch"`` implementation, the readable reference
(CPU and CUDA), and a ``"triton"`` one (CUDA, or the CPU under ``TRITON_INTERPRET=1``). An op's
``backend=`` argument wins; ``None`` takes the family's entry of the current
:class:`~meshlift.kernels.choice.KernelChoice` (:func:`use_kernels`; a method run sets it from its config
fields ``raster_backend`` / ``shading_backend`` / ``splat_backend``), which is ``"auto"`` unless set:
Triton on CUDA when ``import triton`` works (shading: float32 tensors only), else torch.

**Visibility backends** (the registry below): ``get_backend(name)`` returns a
:class:`~meshlift.kernels.base.VisibilityBackend`. ``"torch"`` (pure PyTorch, always available; its naive twin
is ``meshlift.render.reference.visibility_reference``) and ``"triton"``
(:mod:`meshlift.kernels.raster_triton`; it also provides the whole differentiable ``rasterize`` and a fused
``interpolate``). Other backend modules register themselves with :func:`register_backend`.

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

from typing import Dict, Optional

import torch

from meshlift.errors import DependencyError, RenderError
from meshlift.kernels.base import VisibilityBackend
from meshlift.kernels.choice import (
    FAMILIES,
    KernelChoice,
    RasterTuning,
    interpreting,
    kernel_choice,
    source_of,
    triton_importable,
    triton_runs_on,
    use_kernels,
)
from meshlift.kernels.torch_backend import TorchBackend

_BACKENDS: Dict[str, VisibilityBackend] = {"torch": TorchBackend()}

from meshlift.kernels.raster_triton import TritonBackend  # noqa: E402  (imports triton lazily)

_BACKENDS["triton"] = TritonBackend()


def register_backend(backend: VisibilityBackend) -> None:
    """Add (or replace) a visibility backend under ``backend.name``."""
    if not isinstance(backend, VisibilityBackend):
        raise RenderError(
            f"register_backend: {backend!r} does not implement VisibilityBackend "
            "(needs .name, .is_available(device) and .visibility(...))"
        )
    _BACKENDS[backend.name] = backend


def available_backends(device: Optional[torch.device] = None) -> list[str]:
    """Names of the registered visibility backends usable on ``device`` (default CPU)."""
    dev = torch.device("cpu") if device is None else torch.device(device)
    return [n for n, b in _BACKENDS.items() if b.is_available(dev)]


def choose_backend(family: str, backend: Optional[str], device, dtype: torch.dtype = torch.float32, *,
                   prefer_torch: bool = False) -> str:
    """The implementation of ``family`` to run for tensors on ``device``: the one place a backend is chosen.

    Args:
        family: ``"raster"``, ``"shading"`` or ``"splat"``.
        backend: the op's ``backend=`` argument: ``"auto"``, ``"torch"``, ``"triton"`` (raster: or a
            registered backend's name); None = the family's entry of :func:`kernel_choice`.
        device: where the op's tensors live.
        dtype: their floating dtype; the shading kernels compute in float32, so ``auto`` keeps other dtypes
            (the float64 of gradchecks) on torch and ``"triton"`` refuses them.
        prefer_torch: the op needs something only the torch path gives (e.g. gradients to the cameras of
            a splat): ``auto`` then picks torch.

    Returns:
        The backend's name (``"torch"``, ``"triton"``, or a registered raster backend).

    Raises:
        RenderError: unknown family or name, or a name that cannot run on ``device``.
        DependencyError: ``"triton"`` asked for on CUDA and ``import triton`` fails.
    """
    if family not in FAMILIES:
        raise RenderError(f"choose_backend: unknown family {family!r}; one of {', '.join(FAMILIES)}")
    source = "backend=" if backend is not None else source_of(family)
    name = str(backend if backend is not None else getattr(kernel_choice(), family)).strip().lower()
    dev = torch.device(device)
    known = ("auto",) + (tuple(_BACKENDS) if family == "raster" else FAMILIES[family])
    if name not in known:
        raise RenderError(f"unknown {family} backend {name!r} ({source}); choose one of {', '.join(known)}")
    if name == "auto":
        if prefer_torch or dev.type != "cuda" or (family == "shading" and dtype != torch.float32):
            return "torch"
        if family == "raster":
            usable = [n for n in ("triton", "torch") if _BACKENDS[n].is_available(dev)]
            return usable[0] if usable else "torch"
        return "triton" if triton_runs_on(dev) else "torch"
    if name == "torch":
        return name
    if family == "raster":  # the registry's backends say where they run
        if not _BACKENDS[name].is_available(dev):
            raise RenderError(f"rasterizer backend {name!r} ({source}) is not available on device {dev}; use "
                              "backend='torch'")
        return name
    if dev.type != "cuda" and not interpreting():
        raise RenderError(f"{family} backend 'triton' ({source}): tensors are on {dev}, and Triton kernels run on "
                          "CUDA only (or on the CPU under TRITON_INTERPRET=1, for tests); use 'torch' or 'auto'")
    if not triton_importable():
        raise DependencyError(f"{family} backend 'triton' ({source}): `import triton` failed; pip install triton "
                              "(or use 'torch')")
    if family == "shading" and dtype != torch.float32:
        raise RenderError(f"shading backend 'triton': computes in float32, got {dtype}; use 'torch' for it")
    return "triton"


def get_backend(name: Optional[str] = None, device: Optional[torch.device] = None) -> VisibilityBackend:
    """The visibility backend :func:`choose_backend` picks for ``name`` (None → the current choice).

    Raises:
        RenderError: unknown name, or the backend cannot run on ``device``.
    """
    dev = torch.device("cpu") if device is None else torch.device(device)
    return _BACKENDS[choose_backend("raster", name, dev)]


__all__ = ["FAMILIES", "KernelChoice", "RasterTuning", "TorchBackend", "VisibilityBackend", "available_backends",
           "choose_backend", "get_backend", "interpreting", "kernel_choice", "register_backend",
           "triton_importable", "triton_runs_on", "use_kernels"]
