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

Watertight coverage (issue 33; tests/test_raster_watertight.py). Evaluated in floating point, the edge lines
through a vertex that many small triangles share are each rounded on their own and no longer meet in one point:
pixel centres near the vertex can fall outside every triangle of the fan (the white and dark specks of the H100
fox's 8M-face whole-scene mesh: 136 of one view's 141 isolated empty pixels). So every triangle whose vertices all
lie in front of the eye (``w > 0``, ``z ≥ −w``) and within a guard band of ``±2^13`` pixels is tested as GPUs and
nvdiffrast's hardware path do: its vertices are **snapped** to a fixed-point grid of ``1/SUBPIXEL`` pixel
(:func:`snap_to_subpixels`), and the edge functions of the snapped triangle are evaluated **exactly** at the pixel
centres (integers below 2^53, in float64: :func:`fixed_edge_planes`; Triton: int64). Exact arithmetic gives a
consistent partition: a pixel centre is on the same side of a shared edge for both triangles, and around a
shared vertex the fan covers the plane (centres exactly on an edge are covered by both; the depth key decides).
Snapping moves a vertex by at most ``1/(2·SUBPIXEL)`` pixel. The other triangles (crossing the near plane,
reaching ``w ≤ 0``, or far outside the image: rare, and large on screen) keep the homogeneous test above. The
depth plane ``z/w``, the barycentrics and every gradient stay the homogeneous float ones.
"""

from __future__ import annotations

from typing import Tuple

import torch

#: Pixel-units slack added to screen bounding boxes so that rounding never drops an edge pixel (the
#: exact edge-function test decides coverage; the slack only adds candidates). It exceeds the largest move of a
#: snapped vertex (``1/(2·SUBPIXEL)`` = 0.00012 px), so the box holds every centre the snapped triangle covers.
BBOX_SLACK_PX = 1e-3

#: Sub-pixel grid of the watertight coverage test: vertices snap to ``1/SUBPIXEL`` pixel (12 bits; GPUs use 8).
#: The finer the grid, the fewer pixel centres fall between a snapped edge and the float one, where the covered
#: pixel's float barycentrics are ill-conditioned and pass no gradient (§3 of docs/conventions.md).
SUBPIXEL = 4096

#: Guard band of the snapped test (pixels, either side of the image origin): a vertex beyond it keeps the
#: homogeneous float test. ``2^13`` px at ``2^12`` sub-pixels keeps every snapped coordinate within ``2^25`` and
#: every edge-function value (pixel centres up to ``2^13`` px) below ``2^53``: exact in float64 (and int64).
GUARD_PX = 2.0**13

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


def snap_to_subpixels(xy: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Vertices in pixel-centre units (pixel ``j``'s centre at ``j``; any float dtype) to the watertight test's
    fixed-point grid.

    Returns ``(snapped, ok)``: ``snapped`` float64 integers ``floor(xy · SUBPIXEL + 0.5)`` (exact: within 2^25),
    ``ok`` bool ``[...]`` over the last dimension's absence: every coordinate finite and within ``±GUARD_PX``
    (elsewhere ``snapped`` is 0). The product and the sum are rounded in ``xy``'s dtype, as the Triton kernels
    round them.
    """
    ok = (xy.abs() <= GUARD_PX).all(-1)
    q = torch.floor(xy * SUBPIXEL + 0.5)
    return torch.where(ok.unsqueeze(-1), q, 0.0).to(torch.float64), ok


def fixed_edge_planes(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Exact, sign-normalised edge planes of snapped triangles.

    Args:
        X, Y: ``[n, 3]`` float64 snapped vertex coordinates (:func:`snap_to_subpixels`).

    Returns:
        ``[n, 3, 3]`` float64: row ``k`` the coefficients ``(a, b, c)`` of edge ``k`` (opposite vertex ``k``) over
        ``(PX, PY, 1)``, pixel centres in sub-pixel units (``PX = j · SUBPIXEL``), multiplied by the sign of the
        triangle's area, so that a centre is covered iff every ``(a PX + c) + b PY ≥ 0``; a triangle of zero
        snapped area gets ``c_0 = −1`` (covers nothing). Coefficients stay within 2^52 and edge values at pixel
        centres within the guard band below 2^53: each product and sum is exact in float64, whatever the order.
    """
    X1, X2 = X.roll(-1, dims=1), X.roll(-2, dims=1)
    Y1, Y2 = Y.roll(-1, dims=1), Y.roll(-2, dims=1)
    a = Y1 - Y2
    b = X2 - X1
    c = X1 * Y2 - Y1 * X2
    area = (a[:, 0] * X[:, 0] + c[:, 0]) + b[:, 0] * Y[:, 0]
    sg = torch.sign(area)[:, None]
    planes = torch.stack([a * sg, b * sg, c * sg], -1)
    planes[:, 0, 2] = torch.where(area == 0, -1.0, planes[:, 0, 2])
    return planes


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
