"""``interpolate``: barycentric interpolation of vertex attributes over a rasterized image.

nvdiffrast semantics (Laine et al. 2020, Sec. 3.2): ``out = u·a_0 + v·a_1 + (1 − u − v)·a_2`` for the
triangle in ``rast``, 0 where empty; screen derivatives by the chain rule through ``rast_db``.
Differentiable w.r.t. ``attr`` and ``rast`` (hence ``pos``). Without ``diff_attrs``, on CUDA with Triton
(the rasterizer backend resolving to ``"triton"``), one fused kernel forward and one backward
(:func:`meshlift.kernels.raster_triton.interpolate_triton`); else the PyTorch ops below (its twin).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch

from meshlift.errors import RenderError
from meshlift.render._checks import check_float, check_rast, check_tri
from meshlift.kernels import get_backend
from meshlift.kernels._common import gather_rows
from meshlift.kernels.raster_triton import interpolate_triton


def _fused(device: torch.device) -> bool:
    """Whether the fused Triton kernel runs: the rasterizer backend (the current choice,
    :func:`meshlift.kernels.choose_backend`) resolves to ``"triton"`` on this device."""
    return get_backend(None, device).name == "triton"


def _triangle_index(rast: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(tid [N] int64 clamped ≥ 0, covered [N] bool)`` from the id channel of a flattened rast."""
    ids = rast[..., 3].detach().reshape(-1).round().to(torch.int64) - 1
    return ids.clamp(min=0), ids >= 0


def interpolate(
    attr: torch.Tensor,
    rast: torch.Tensor,
    tri: torch.Tensor,
    rast_db: Optional[torch.Tensor] = None,
    diff_attrs: Union[None, str, Sequence[int]] = None,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Interpolate per-vertex attributes at every pixel.

    Args:
        attr: ``[V, C]`` (shared by every image, and required in range mode) or ``[B, V, C]`` float.
        rast: ``[B, H, W, 4]`` from :func:`~meshlift.render.rasterize`.
        tri: ``[T, 3]`` int32/int64, the triangles given to ``rasterize``.
        rast_db: ``[B, H, W, 4]`` from ``rasterize`` (needed only with ``diff_attrs``).
        diff_attrs: ``"all"`` or a list of attribute channels whose screen derivatives to return.

    Returns:
        ``out [B, H, W, C]`` (0 where empty) and ``out_da [B, H, W, 2·D]`` ordered
        ``(dA_0/dX, dA_0/dY, dA_1/dX, ...)`` over the D selected channels, in attribute units per pixel
        (None without ``diff_attrs``).

    Raises:
        RenderError: bad shapes, dtypes or devices; ``diff_attrs`` without ``rast_db``.
    """
    check_float("attr", attr)
    check_rast(rast)
    if attr.ndim not in (2, 3):
        raise RenderError(f"attr must be [V, C] or [B, V, C], got {tuple(attr.shape)}")
    if attr.device != rast.device or tri.device != rast.device:
        raise RenderError("attr, rast and tri must be on one device")
    if tri.ndim != 2 or tri.shape[1] != 3 or tri.dtype not in (torch.int32, torch.int64):
        raise RenderError(f"tri must be an int tensor [T, 3], got {tuple(tri.shape)} {tri.dtype}")
    B, H, W, _ = rast.shape
    V, C = attr.shape[-2], attr.shape[-1]
    if attr.ndim == 3 and attr.shape[0] not in (1, B):
        raise RenderError(f"attr has batch {attr.shape[0]} but rast has batch {B}; use [V, C] or [{B}, V, C]")
    tri64 = check_tri(tri, V, rast.device, what="attr")
    if diff_attrs is None and _fused(rast.device):
        return interpolate_triton(attr, rast, tri), None
    tid, covered = _triangle_index(rast)
    vidx = gather_rows(tri64, tid)  # [N, 3]
    if attr.ndim == 3 and attr.shape[0] == B and B > 1:
        bidx = torch.arange(B, device=rast.device).repeat_interleave(H * W)
        vidx = vidx + (bidx * V).unsqueeze(1)
        a_flat = attr.reshape(-1, C)
    else:
        a_flat = attr.reshape(V, C)
    a = gather_rows(a_flat, vidx.reshape(-1)).view(-1, 3, C)  # [N, 3, C]
    dtype = torch.promote_types(attr.dtype, rast.dtype)
    r = rast.reshape(-1, 4).to(dtype)
    mask = covered.to(dtype).unsqueeze(1)
    u = r[:, 0:1] * mask
    v = r[:, 1:2] * mask
    a0, a1, a2 = a[:, 0].to(dtype), a[:, 1].to(dtype), a[:, 2].to(dtype)
    out = (a2 + u * (a0 - a2) + v * (a1 - a2)) * mask
    out = out.view(B, H, W, C)
    if diff_attrs is None:
        return out, None
    if rast_db is None or rast_db.shape[-1] != 4:
        raise RenderError("interpolate: diff_attrs needs rast_db [B, H, W, 4] from rasterize(..., grad_db=True)")
    if diff_attrs == "all":
        sel = list(range(C))
    elif isinstance(diff_attrs, str):
        raise RenderError(f"diff_attrs must be 'all' or a list of channel indices, got {diff_attrs!r}")
    else:
        sel = [int(i) for i in diff_attrs]
        if any(i < 0 or i >= C for i in sel):
            raise RenderError(f"diff_attrs {sel} out of range for {C} attribute channels")
    db = rast_db.reshape(-1, 4).to(dtype) * mask
    d0 = (a0 - a2)[:, sel]
    d1 = (a1 - a2)[:, sel]
    ddx = db[:, 0:1] * d0 + db[:, 2:3] * d1
    ddy = db[:, 1:2] * d0 + db[:, 3:4] * d1
    out_da = torch.stack([ddx, ddy], dim=-1).reshape(B, H, W, 2 * len(sel))
    return out, out_da
