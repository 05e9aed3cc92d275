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
    edges = torch.linalg.cross(h1, h2, dim=-1)  # row k = v'_{k+1} x v'_{k+2}
    zplane = (v[..., 2:3] * edges).sum(1)
    det = (h[:, 0] * edges[:, 0]).sum(-1)
    return edges, zplane, det


def depth_key(z: torch.Tensor, tri_id: torch.Tensor) -> torch.Tensor:
    """Pack (z/w, triangle index) into one int64 whose order is (z ascending, index ascending).

    ``z`` is compared at float32 precision through the order-preserving map of IEEE-754 bit patterns
    (negative floats reversed), shifted into 32 unsigned bits; the index fills the low 31 bits.
    """
    bits = z.to(torch.float32).view(torch.int32).to(torch.int64)
    mag = bits & 0x7FFFFFFF
    ordered = torch.where(bits >= 0, mag + 2**31, 2**31 - 1 - mag)
    return (ordered << 31) | tri_id


def key_to_index(key: torch.Tensor) -> torch.Tensor:
    """Triangle index from a packed depth key (−1 where ``key`` is the empty value ``INT64_MAX``)."""
    return torch.where(key == INT64_MAX, torch.full_like(key, -1), key & MAX_TRIANGLES)


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
    dn = d.roll(-1, dims=1)
    vn = v.roll(-1, dims=1)
    cross = inside != (dn >= 0)
    t = torch.where(cross, d / torch.where(cross, d - dn, torch.ones_like(d)), torch.zeros_like(d))
    pc = v + t.unsqueeze(-1) * (vn - v)
    cand = torch.cat([v, pc], dim=1)  # [n, 6, 4]
    valid = torch.cat([inside, cross], dim=1)
    cw = cand[..., 3]
    tiny = torch.finfo(v.dtype).tiny
    good_w = cw > tiny
    use = valid & good_w
    safe_w = torch.where(use, cw, torch.ones_like(cw))
    X = (cand[..., 0] / safe_w + 1) * (W * 0.5) - 0.5  # pixel-centre coordinates
    Y = (cand[..., 1] / safe_w + 1) * (H * 0.5) - 0.5
    inf = torch.tensor(float("inf"), dtype=v.dtype, device=v.device)
    xmin = torch.where(use, X, inf).amin(1)
    xmax = torch.where(use, X, -inf).amax(1)
    ymin = torch.where(use, Y, inf).amin(1)
    ymax = torch.where(use, Y, -inf).amax(1)
    # beyond-far test: every vertex has z > w (w - z < 0)
    beyond_far = ((v[..., 3] - v[..., 2]) < 0).all(1)
    none_inside = ~inside.any(1)
    full = (valid & ~good_w).any(1) | ~torch.isfinite(xmin) & ~none_inside
    big = float(max(H, W) + 2)
    j0 = torch.ceil((xmin - BBOX_SLACK_PX).clamp(-1, big)).to(torch.int64).clamp(0, W - 1)
    j1 = torch.floor((xmax + BBOX_SLACK_PX).clamp(-big, big)).to(torch.int64).clamp(-1, W - 1)
    i0 = torch.ceil((ymin - BBOX_SLACK_PX).clamp(-1, big)).to(torch.int64).clamp(0, H - 1)
    i1 = torch.floor((ymax + BBOX_SLACK_PX).clamp(-big, big)).to(torch.int64).clamp(-1, H - 1)
    # boxes entirely left/above the image: j1 may be < 0 -> empty; entirely right/below: j0 clamps
    # to W-1 but the unclamped start exceeded it -> mark empty explicitly.
    off_right = xmin - BBOX_SLACK_PX > W - 1
    off_below = ymin - BBOX_SLACK_PX > H - 1
    zero = torch.zeros_like(j0)
    j0 = torch.where(full, zero, j0)
    i0 = torch.where(full, zero, i0)
    j1 = torch.where(full, zero + (W - 1), j1)
    i1 = torch.where(full, zero + (H - 1), i1)
    empty = none_inside | beyond_far | (~full & (off_right | off_below))
    j1 = torch.where(empty, zero - 1, j1)
    i1 = torch.where(empty, zero - 1, i1)
    return i0, i1, j0, j1
