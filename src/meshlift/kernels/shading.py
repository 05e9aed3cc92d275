"""Backend selection for the shading fast paths (hash-grid encoding, cube-map prefilter and lookups, texture
lookups).

The public ops stay in :mod:`meshlift.shading` and :mod:`meshlift.render` (``HashGridEncoding``,
``specular_prefilter``, ``sample_cube``, ``sample_cube_mip``, ``texture_rows``); they ask
:func:`shading_backend` which implementation to run and call the Triton modules of this package
(:mod:`meshlift.kernels.hashgrid_triton`, :mod:`meshlift.kernels.prefilter_triton`,
:mod:`meshlift.kernels.cube_triton`, :mod:`meshlift.kernels.texture_triton`) only when it answers
``"triton"``. ``triton`` itself is imported lazily, inside those modules, on first use.

Names (argument ``backend``, else the environment variable ``MESHLIFT_SHADING_BACKEND``, else ``"auto"``):

- ``"torch"``: the pure-PyTorch implementation (the reference twin; CPU and CUDA).
- ``"triton"``: the Triton kernels. On CUDA tensors it needs ``import triton`` to work; on CPU tensors it
  runs only under the Triton interpreter (``TRITON_INTERPRET=1``, used by the tests), else it raises.
- ``"auto"``: ``"triton"`` for float32 CUDA tensors when ``import triton`` works, ``"torch"`` otherwise
  (always ``"torch"`` on the CPU, so the CPU path is unchanged).
"""

from __future__ import annotations

import functools
import os

import torch

from meshlift.errors import DependencyError, RenderError

__all__ = ["SHADING_BACKENDS", "shading_backend", "triton_available"]

#: Accepted names of :func:`shading_backend`.
SHADING_BACKENDS = ("auto", "torch", "triton")

#: Environment variable overriding the default ``"auto"``.
ENV_VAR = "MESHLIFT_SHADING_BACKEND"


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    """Whether ``import triton`` works in this process (cached)."""
    try:
        import triton  # noqa: F401
    except Exception:  # ImportError, or a broken install raising at import
        return False
    return True


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def shading_backend(backend: str | None, device: torch.device | str, dtype: torch.dtype = torch.float32) -> str:
    """Resolve a shading backend name to ``"torch"`` or ``"triton"`` for tensors on ``device``.

    Args:
        backend: ``"auto"``, ``"torch"``, ``"triton"`` or None (env ``MESHLIFT_SHADING_BACKEND``, else auto).
        device: where the op's tensors live.
        dtype: their floating dtype (the Triton kernels compute in float32; ``auto`` keeps other dtypes,
            e.g. the float64 of gradchecks, on the torch path).

    Returns:
        ``"torch"`` or ``"triton"``.

    Raises:
        RenderError: unknown name, or ``"triton"`` asked for on the CPU without ``TRITON_INTERPRET=1``.
        DependencyError: ``"triton"`` asked for on CUDA and ``import triton`` fails.
    """
    name = backend if backend is not None else os.environ.get(ENV_VAR, "auto")
    name = str(name).strip().lower()
    if name not in SHADING_BACKENDS:
        src = "backend" if backend is not None else f"${ENV_VAR}"
        raise RenderError(f"shading backend ({src}): unknown name {name!r}; use one of {', '.join(SHADING_BACKENDS)}")
    dev = torch.device(device)
    if name == "torch":
        return "torch"
    if name == "auto":
        return "triton" if dev.type == "cuda" and dtype == torch.float32 and triton_available() else "torch"
    if dev.type != "cuda" and not _interpreting():
        raise RenderError(
            f"shading backend 'triton': tensors are on {dev}, and Triton kernels run on CUDA only (or on the CPU "
            "under TRITON_INTERPRET=1, for tests); use backend='torch' or 'auto'"
        )
    if not triton_available():
        raise DependencyError("shading backend 'triton': `import triton` failed; pip install triton (or use 'torch')")
    if dtype not in (torch.float32,):
        raise RenderError(f"shading backend 'triton': computes in float32, got {dtype}; use backend='torch' for it")
    return "triton"
