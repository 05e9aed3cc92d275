"""Argument validation shared by the rendering ops (raise RenderError, never assert)."""

from __future__ import annotations

import weakref
from typing import Dict, Sequence, Tuple

import torch

from meshlift.errors import RenderError


def check_float(name: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise RenderError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise RenderError(f"{name} must be a floating-point tensor, got dtype {x.dtype}; convert with .float()")


def check_tri(tri: torch.Tensor, num_vertices: int, device: torch.device, what: str = "pos") -> torch.Tensor:
    """Validate ``tri [T, 3]`` (int32/int64, indices < num_vertices) and return it as int64 on ``device``."""
    if not isinstance(tri, torch.Tensor):
        raise RenderError(f"tri must be a torch.Tensor, got {type(tri).__name__}")
    if tri.ndim != 2 or tri.shape[1] != 3:
        raise RenderError(f"tri must have shape [T, 3], got {tuple(tri.shape)}")
    if tri.dtype not in (torch.int32, torch.int64):
        raise RenderError(f"tri must be int32 or int64, got {tri.dtype}; convert with .int()")
    if tri.device != device:
        raise RenderError(f"tri is on {tri.device} but pos is on {device}; move them to one device")
    tri64 = tri.to(torch.int64)
    if tri.numel():
        hit = _TRI_RANGE.get(id(tri))
        if hit is not None and hit[0]() is tri and hit[1] == tri._version:
            lo, hi = hit[2], hit[3]
        else:
            lo, hi = torch.stack(torch.aminmax(tri64)).tolist()  # one host sync, then cached per tensor
            if len(_TRI_RANGE) >= 64:
                _TRI_RANGE.clear()
            _TRI_RANGE[id(tri)] = (weakref.ref(tri), tri._version, lo, hi)
        if lo < 0 or hi >= num_vertices:
            raise RenderError(
                f"tri indexes vertex {lo if lo < 0 else hi} but {what} has {num_vertices} vertices; "
                "fix the face list"
            )
    return tri64


#: Index range of recently validated face lists: id → (weakref, version counter, min, max). A face list
#: is re-read only when it is a new tensor or was modified in place (its version counter moved), so the
#: per-call validation costs no GPU→CPU sync in a training loop.
_TRI_RANGE: Dict[int, tuple] = {}


def check_resolution(resolution: Sequence[int]) -> Tuple[int, int]:
    try:
        H, W = (int(resolution[0]), int(resolution[1]))
        if len(resolution) != 2:
            raise ValueError
    except (TypeError, ValueError, IndexError):
        raise RenderError(f"resolution must be (height, width), got {resolution!r}") from None
    if H <= 0 or W <= 0:
        raise RenderError(f"resolution must be positive, got {(H, W)}")
    return H, W


def check_rast(rast: torch.Tensor, name: str = "rast") -> None:
    check_float(name, rast)
    if rast.ndim != 4 or rast.shape[-1] != 4:
        raise RenderError(f"{name} must have shape [B, H, W, 4] (output of rasterize), got {tuple(rast.shape)}")
