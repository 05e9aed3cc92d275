"""Maths shared by the visibility backends and their brute-force reference.

Homogeneous rasterization (Olano & Greer 1997, "Triangle Scan Conversion using 2D Homogeneous
Coordinates"): with the clip-space vertices written as 3-vectors ``v'_k = (x_k, y_k, w_k)`` and a pixel
centre ``p = (px, py, 1)`` in NDC, the edge functions ``e_k(p) = (v'_{k+1} × v'_{k+2}) · p`` are linear in
``p``; the perspective-correct barycentrics are ``b_k = e_k / Σ e``, the hit point's ``w`` is ``det / Σ e``
with ``det = v'_0 · (v'_1 × v'_2)``, and ``z/w = (Σ_k z_k e_k) / det``. A pixel centre is covered (by the
part of the triangle in front of the eye) iff every ``sign(det) · e_k ≥ 0``; clipping against the near
and far planes is then the per-fragment test ``−1 ≤ z/w ≤ 1``. No geometric splitting is needed, and
triangles crossing ``w = 0`` are handled exactly; only their screen bounding box comes from the polygon
clipped against the near plane ``z = −w``.
"""

from __future__ import annotations

from typing import Tuple

import torch

#: Pixel-units slack added to screen bounding boxes so that rounding never drops an edge pixel (the
#: exact edge-function test decides coverage; the slack only adds candidates).
BBOX_SLACK_PX = 1e-3

#: Largest triangle index the packed depth key can hold (31 bits).
MAX_TRIANGLES = 2**31 - 1

INT64_MAX = torch.iinfo(torch.int64).max

#: Every key at or above this value means "no fragment": it encodes ``z/w ≥ 2`` (outside the clip range,
#: never stored by a valid fragment). Backends may write any key ≥ this as "empty" (e.g. the int32 sentinel
#: ``2^31 − 1`` shifted up, cheaper than building ``INT64_MAX`` in int64).
EMPTY_KEY = 2**61

#: int32 sentinel of the order-preserving depth bits meaning "no fragment" (see :func:`depth_key`).
EMPTY_DEPTH_BITS = 2**31 - 1


_TABLES: dict = {}
_COLS: dict = {}


def gather_rows(src: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``src.index_select(0, idx)`` for tensors with short rows (a few elements), differentiable.

    On CUDA it runs as one element-wise ``torch.take`` (whose backward is an atomic ``put_``): PyTorch's
    row-gather kernel behind ``index_select`` assigns work per row and was measured on an H200 at
    ~0.3 ms for 3M rows of 16 bytes, most of the rasterizer's GPU time. On the CPU ``index_select``
    (unless :func:`dense_path` is forced, so that tests run the ``take`` variant too).
    """
    if not dense_path(src.device) or idx.numel() == 0:
        return src.index_select(0, idx)
    k = src[0].numel() if src.shape[0] else 1
    key = (k, str(src.device))
    if key not in _COLS:
        _COLS[key] = torch.arange(k, device=src.device)
    flat = (idx * k).unsqueeze(1) + _COLS[key]
    return torch.take(src.contiguous(), flat).view(idx.shape[0], *src.shape[1:])


def pixel_centre_tables(H: int, W: int, dtype: torch.dtype, device: torch.device, pad: int = 0):
    """NDC of the pixel-centre columns ``[W + pad]`` and rows ``[H + pad]`` (docs/conventions.md §3:
    ``2(j + 0.5)/W − 1``), the ``pad`` extra entries NaN. Cached per (H, W, dtype, device, pad): building
    them costs a dozen tiny GPU launches per call otherwise. Treat as read-only."""
    k = (H, W, dtype, str(device), pad)
    if k not in _TABLES:
        if len(_TABLES) >= 32:
            _TABLES.clear()
        # built on the CPU and copied: CUDA's `tensor / python_scalar` multiplies by the rounded reciprocal
        # (1/192 is inexact), which moved some pixel centres by an ulp against the CPU tables
        nan = torch.full((pad,), float("nan"), dtype=dtype)
        xtab = torch.cat([(2 * torch.arange(W) + 1).to(dtype) / W - 1, nan])
        ytab = torch.cat([(2 * torch.arange(H) + 1).to(dtype) / H - 1, nan])
        _TABLES[k] = (xtab.to(device), ytab.to(device))
    return _TABLES[k]


def dense_path(device: torch.device) -> bool:
    """Whether the rasterizer runs its sync-free dense variants (every pixel / every stamp candidate,
    masked) rather than compacting to the covered ones with data-dependent shapes.

    Default: dense on GPUs (where a data-dependent shape costs a GPU→CPU sync), compacted on the CPU
    (where it is free and saves work). ``kernels.use_kernels(raster_dense=True / False)`` forces either
    (tests check both variants agree; benchmarks compare them). Results are identical either way.
    """
    from meshlift.kernels.choice import kernel_choice

    forced = kernel_choice().raster_dense
    if forced is not None:
        return forced
    return device.type != "cpu"


def triangle_planes(v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Edge-function and depth planes of clip-space triangles.

    Args:
        v: ``[n, 3, 4]`` clip-space vertices ``(x, y, z, w)``.

    Returns:
        ``edges [n, 3, 3]`` (row k: coefficients of ``e_k`` on ``(px, py, 1)``), ``zplane [n, 3]``
        (coefficients of ``Σ_k z_k e_k``), ``det [n]``.
    """
    h = v[..., (0, 1, 3)]  # [n, 3, 3]  (x, y, w)
    h1 = h.roll(-1, dims=1)
    h2 = h.roll(-2, dims=1)
    # row k = v'_{k+1} x v'_{k+2}, written out op by op (not torch.linalg.cross, whose CPU and CUDA kernels
    # are compiled with multiply-add contraction: fma(a1, b2, -(a2 b1)), measured on torch 2.13 CPU, and
    # CUDA's nvcc default): every product and difference rounded on its own, so the planes are the same on
    # any device and CPU instruction set, equal to the Triton kernels' (compiled without contraction), and
    # the planes of two triangles sharing an edge are exact negatives of each other (watertight).
    x1, y1, w1 = h1.unbind(-1)
    x2, y2, w2 = h2.unbind(-1)
    edges = torch.stack([y1 * w2 - w1 * y2, w1 * x2 - x1 * w2, x1 * y2 - y1 * x2], -1)
    p = v[..., 2:3] * edges  # [n, 3 (k), 3]: z_k times e_k's coefficients
    zplane = (p[:, 0] + p[:, 1]) + p[:, 2]
    q = h[:, 0] * edges[:, 0]
    det = (q[:, 0] + q[:, 1]) + q[:, 2]
    return edges, zplane, det


def depth_key(z: torch.Tensor, tri_id: torch.Tensor) -> torch.Tensor:
    """Pack (z/w, triangle index) into one int64 whose order is (z ascending, index ascending).

    ``z`` is compared at float32 precision through the order-preserving map of IEEE-754 bit patterns
    (the magnitude bits of negative floats flipped, giving a signed int32 that sorts like the floats);
    key = that int × 2^31 + index (index < 2^31), so the low 31 bits of the key are the index.
    """
    bits = z.to(torch.float32).view(torch.int32)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return ordered.to(torch.int64) * 2**31 + tri_id


def key_to_index(key: torch.Tensor) -> torch.Tensor:
    """Triangle index from a packed depth key (−1 where ``key ≥ EMPTY_KEY``, e.g. ``INT64_MAX``)."""
    return torch.where(key >= EMPTY_KEY, -1, key & MAX_TRIANGLES)


def screen_bbox(v: torch.Tensor, H: int, W: int) -> Tuple[torch.Tensor, ...]:
    """Inclusive pixel bounding box of each triangle's part in front of the near plane ``z ≥ −w``.

    Args:
        v: ``[n, 3, 4]`` clip-space vertices.

    Returns:
        ``(i0, i1, j0, j1)`` int64 ``[n]`` each, clamped to the image; empty boxes have ``i1 < i0`` or
        ``j1 < j0``. Triangles wholly behind the near plane or beyond the far plane get empty boxes; a
        clipped polygon reaching ``w ≤ 0`` (possible only with unusual projection matrices) gets the
        whole image (the per-fragment test stays exact).
    """
    d = v[..., 2] + v[..., 3]  # signed distance to the near plane (>= 0 inside)
    inside = d >= 0
    vn = v.roll(-1, dims=1)  # edge k runs from vertex k to vertex k + 1
    dn = vn[..., 2] + vn[..., 3]
    cross = inside != (dn >= 0)
    t = d / torch.where(cross, d - dn, 1.0)  # garbage where not crossing, masked below
    cand = torch.cat([v, v + t.unsqueeze(-1) * (vn - v)], dim=1)  # [n, 6, 4]: vertices, crossings
    valid = torch.cat([inside, cross], dim=1)
    cw = cand[..., 3]
    good_w = cw > torch.finfo(v.dtype).tiny
    use = (valid & good_w).unsqueeze(-1)
    half = torch.tensor([W * 0.5, H * 0.5], dtype=v.dtype, device=v.device)
    XY = (cand[..., :2] / torch.where(use, cw.unsqueeze(-1), 1.0) + 1) * half - 0.5  # pixel-centre coords
    mn = torch.where(use, XY, float("inf")).amin(1)  # [n, 2] = (x, y)
    mx = torch.where(use, XY, float("-inf")).amax(1)
    full = (valid & ~good_w).any(1)
    none_inside = ~inside.any(1)
    beyond_far = (v[..., 3] < v[..., 2]).all(1)  # every vertex has z/w > 1
    lim = torch.tensor([W - 1, H - 1], device=v.device)
    big = float(max(H, W) + 2)
    lo = torch.minimum(torch.ceil((mn - BBOX_SLACK_PX).clamp(-1, big)).to(torch.int64).clamp(min=0), lim)
    hi = torch.minimum(torch.floor((mx + BBOX_SLACK_PX).clamp(-big, big)).to(torch.int64).clamp(min=-1), lim)
    off = (mn - BBOX_SLACK_PX > lim).any(1)  # box wholly right of / below the image
    empty = none_inside | beyond_far | (~full & off)
    lo = torch.where(full.unsqueeze(1), 0, lo)
    hi = torch.where(full.unsqueeze(1), lim, hi)
    hi = torch.where(empty.unsqueeze(1), -1, hi)
    return lo[:, 1], hi[:, 1], lo[:, 0], hi[:, 0]
