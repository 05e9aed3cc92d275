"""Pure-PyTorch reference pipeline of Gaussian splatting (CPU and CUDA; autograd through torch ops).

This is the *specification* of :func:`meshlift.render.splat.rasterize_gaussians`: every fast kernel
(:mod:`meshlift.kernels.splat_triton`) is tested forward and backward against the functions below.
Conventions: docs/conventions.md, "Gaussian splatting". Stages:

1. :func:`project_gaussians` — EWA splatting (Zwicker et al. 2002, "EWA Splatting", Sec. 4; 3DGS,
   Kerbl et al. 2023, Sec. 4, eq. 5): ``Σ' = J W Σ Wᵀ Jᵀ + eps2d·I``, the opacity-aware screen bounding
   box of Radl et al. 2024 ("StopThePop", arXiv:2402.00525, Sec. B.2) and the culling rules of gsplat.
2. :func:`spherical_harmonics` — the real SH basis of 3DGS up to degree 3.
3. :func:`isect_tiles` — 16×16 tile binning with int64 keys ``(tile id << 32) | float_bits(depth)``
   sorted with ``torch.sort`` (as gsplat's ``isect_tiles``); with the conics and opacities, each Gaussian only
   to the tiles its ellipse of reach touches (tile-accurate binning, Speedy-Splat's AccuTile).
4. :func:`composite_tiles` — front-to-back alpha compositing per tile, chunked by a memory budget
   (``chunk_elements`` Gaussian×pixel pairs at once, never a dense Gaussians×pixels tensor), each chunk
   wrapped in activation checkpointing so that the memory kept for backward is also bounded.
5. :func:`tile_statistics` — the no-grad per-Gaussian statistics pass (Σ αT, pixels touched, pixels
   where the Gaussian is the largest contributor; Mini-Splatting's importance, as used by MILo).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch.utils.checkpoint import checkpoint

from meshlift.errors import RenderError

__all__ = [
    "SH_C0",
    "SH_C1",
    "SH_C2",
    "SH_C3",
    "ALPHA_THRESHOLD",
    "T_THRESHOLD",
    "MAX_EXTEND",
    "spherical_harmonics",
    "quat_scale_to_covar",
    "project_gaussians",
    "ellipse_reach2",
    "ellipse_row_spans",
    "isect_tiles",
    "composite_tiles",
    "tile_statistics",
]

#: Real SH normalisation constants of 3DGS (``utils/sh_utils.py`` of the paper's code; also gsplat).
SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792,
         0.5462742152960396)
SH_C3 = (-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
         -0.4570457994644658, 1.445305721320277, -0.5900435899266435)

#: A Gaussian is skipped at a pixel where its alpha is below this (3DGS, gsplat).
ALPHA_THRESHOLD = 1.0 / 255.0
#: Compositing stops (and the Gaussian that would cross it is not added) when T would fall below this.
T_THRESHOLD = 1e-4
#: Largest screen-space extent of a Gaussian in standard deviations (gsplat's 3.33).
MAX_EXTEND = 3.33


# --------------------------------------------------------------------------------------------------
# Spherical harmonics
# --------------------------------------------------------------------------------------------------


def sh_basis(degree: int, dirs: torch.Tensor) -> torch.Tensor:
    """Real SH basis values ``[..., (degree+1)^2]`` at unit directions ``dirs [..., 3]`` (3DGS order)."""
    x, y, z = dirs.unbind(-1)
    out = [torch.full_like(x, SH_C0)]
    if degree >= 1:
        out += [-SH_C1 * y, SH_C1 * z, -SH_C1 * x]
    if degree >= 2:
        xx, yy, zz, xy, yz, xz = x * x, y * y, z * z, x * y, y * z, x * z
        out += [SH_C2[0] * xy, SH_C2[1] * yz, SH_C2[2] * (2 * zz - xx - yy), SH_C2[3] * xz,
                SH_C2[4] * (xx - yy)]
    if degree >= 3:
        out += [SH_C3[0] * y * (3 * xx - yy), SH_C3[1] * xy * z, SH_C3[2] * y * (4 * zz - xx - yy),
                SH_C3[3] * z * (2 * zz - 3 * xx - 3 * yy), SH_C3[4] * x * (4 * zz - xx - yy),
                SH_C3[5] * z * (xx - yy), SH_C3[6] * x * (xx - 3 * yy)]
    return torch.stack(out, dim=-1)


def spherical_harmonics(degree: int, dirs: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """Evaluate SH colours ``[..., 3] = Σ_k Y_k(d̂) coeffs[..., k, :]`` (no +0.5 offset, no clamp).

    Args:
        degree: 0..3; only the first ``(degree+1)^2`` coefficients are used.
        dirs: ``[..., 3]`` view directions (normalised here; from the camera centre to the Gaussian).
        coeffs: ``[..., K, 3]`` with ``K >= (degree+1)^2``, broadcastable against ``dirs``.
    """
    if not 0 <= degree <= 3:
        raise RenderError(f"sh_degree must be in 0..3, got {degree}")
    k = (degree + 1) ** 2
    if coeffs.shape[-2] < k:
        raise RenderError(f"SH degree {degree} needs {k} coefficients, colors has {coeffs.shape[-2]}")
    d = dirs / dirs.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    basis = sh_basis(degree, d)
    return (basis[..., None] * coeffs[..., :k, :]).sum(-2)


# --------------------------------------------------------------------------------------------------
# Projection
# --------------------------------------------------------------------------------------------------


def quat_scale_to_covar(quats: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """World covariances ``[N, 3, 3] = R diag(s²) Rᵀ`` from quats ``[N, 4]`` (w,x,y,z; normalised
    here) and standard deviations ``scales [N, 3]``."""
    R = quat_to_rotmat(quats)
    M = R * scales[:, None, :]
    return M @ M.transpose(-1, -2)


def quat_to_rotmat(quats: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``[N, 3, 3]`` of (not necessarily unit) quaternions ``[N, 4]`` (w, x, y, z)."""
    q = quats / quats.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    w, x, y, z = q.unbind(-1)
    return torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ], dim=-1).reshape(q.shape[:-1] + (3, 3))


def project_gaussians(means: torch.Tensor, quats: torch.Tensor, scales: torch.Tensor,
                      opacities: torch.Tensor, world_to_camera: torch.Tensor, K: torch.Tensor,
                      width: int, height: int, near: float, far: float, eps2d: float = 0.3,
                      antialiased: bool = False, radius_clip: float = 0.0) -> dict:
    """Project 3D Gaussians to screen-space 2D Gaussians (EWA; conventions "Gaussian splatting").

    Args:
        means ``[N, 3]``, quats ``[N, 4]`` (w,x,y,z), scales ``[N, 3]`` (std devs), opacities ``[N]``.
        world_to_camera ``[C, 4, 4]`` (OpenCV), K ``[C, 3, 3]`` (pixels; skew ignored).
        near, far: a Gaussian whose centre depth z is outside ``[near, far]`` is culled.
        eps2d: the screen-space low-pass variance (pixels²) added to the 2D covariance.
        antialiased: multiply opacity by ``sqrt(det Σ' / det(Σ' + eps2d I))`` (Mip-Splatting 2D filter).
        radius_clip: cull Gaussians whose screen radii are both ``<= radius_clip`` pixels.

    Returns a dict of ``means2d [C,N,2]`` (pixels), ``conics [C,N,3]`` (upper triangle a, b, c of the
    inverse 2D covariance), ``depths [C,N]`` (camera z), ``opacities [C,N]`` (after compensation),
    ``radii [C,N,2]`` int32 (0 = culled) and ``compensations [C,N]``. Culled entries carry finite values.
    """
    C = world_to_camera.shape[0]
    R = world_to_camera[:, :3, :3]
    t = world_to_camera[:, :3, 3]
    mc = torch.einsum("cij,nj->cni", R, means) + t[:, None, :]  # [C,N,3]
    cov = quat_scale_to_covar(quats, scales)  # [N,3,3]
    covc = R[:, None] @ cov[None] @ R.transpose(-1, -2)[:, None]  # [C,N,3,3]
    x, y, z = mc.unbind(-1)
    fx, fy = K[:, 0, 0, None], K[:, 1, 1, None]
    cx, cy = K[:, 0, 2, None], K[:, 1, 2, None]
    in_depth = (z >= near) & (z <= far)
    zs = torch.where(in_depth, z, torch.ones_like(z))
    tan_x, tan_y = 0.5 * width / fx, 0.5 * height / fy
    lim_xp, lim_xn = (width - cx) / fx + 0.3 * tan_x, cx / fx + 0.3 * tan_x
    lim_yp, lim_yn = (height - cy) / fy + 0.3 * tan_y, cy / fy + 0.3 * tan_y
    rz = 1.0 / zs
    tx = zs * torch.minimum(torch.maximum(x * rz, -lim_xn), lim_xp)
    ty = zs * torch.minimum(torch.maximum(y * rz, -lim_yn), lim_yp)
    zero = torch.zeros_like(zs)
    J = torch.stack([
        torch.stack([fx * rz, zero, -fx * tx * rz * rz], -1),
        torch.stack([zero, fy * rz, -fy * ty * rz * rz], -1),
    ], -2)  # [C,N,2,3]
    cov2d = J @ covc @ J.transpose(-1, -2)
    a0, b, c0 = cov2d[..., 0, 0], cov2d[..., 0, 1], cov2d[..., 1, 1]
    det0 = a0 * c0 - b * b
    a, c = a0 + eps2d, c0 + eps2d
    det = a * c - b * b
    ok = in_depth & (det > 0) & torch.isfinite(det)
    det_s = torch.where(ok, det, torch.ones_like(det))
    comp = torch.sqrt(torch.clamp(det0 / det_s, min=0.0))
    conics = torch.stack([c / det_s, -b / det_s, a / det_s], dim=-1)
    means2d = torch.stack([fx * x * rz + cx, fy * y * rz + cy], dim=-1)
    op = opacities[None].expand(C, -1)
    if antialiased:
        op = op * comp
    with torch.no_grad():
        ok = ok & (op >= ALPHA_THRESHOLD)
        extend = torch.clamp(torch.sqrt(2.0 * torch.log(op.clamp_min(ALPHA_THRESHOLD) / ALPHA_THRESHOLD)),
                             max=MAX_EXTEND)
        rx = torch.ceil(extend * torch.sqrt(a.clamp_min(0)))
        ry = torch.ceil(extend * torch.sqrt(c.clamp_min(0)))
        ok = ok & torch.isfinite(rx) & torch.isfinite(ry) & ~((rx <= radius_clip) & (ry <= radius_clip))
        mx, my = means2d[..., 0], means2d[..., 1]
        ok = ok & ~((mx + rx <= 0) | (mx - rx >= width) | (my + ry <= 0) | (my - ry >= height))
        ok = ok & torch.isfinite(mx) & torch.isfinite(my)
        radii = torch.stack([torch.where(ok, rx, 0), torch.where(ok, ry, 0)], -1).to(torch.int32)
    return {"means2d": means2d, "conics": conics, "depths": z, "opacities": op, "radii": radii,
            "compensations": comp}


# --------------------------------------------------------------------------------------------------
# Tile binning
# --------------------------------------------------------------------------------------------------


def tile_grid(width: int, height: int, tile_size: int) -> Tuple[int, int]:
    """``(tiles_w, tiles_h)``: the number of tiles covering the image."""
    return (width + tile_size - 1) // tile_size, (height + tile_size - 1) // tile_size


def ellipse_reach2(conics: torch.Tensor, opacities: torch.Tensor) -> torch.Tensor:
    """``[...]`` float32: the squared Mahalanobis radius ``r²`` inside which a Gaussian can pass the compositing cut.

    A Gaussian of opacity ``o`` (after compensation) and conic ``A`` passes the cut ``o·exp(−q/2) ≥ 1/255`` at
    offset ``d`` only where ``q = dᵀ A d ≤ 2 ln(255 o)``. The bound is widened to ``(2 ln(255 o) + 0.04) / 0.99``
    (the margin of the compositing kernels' own band culling) so that float32 rounding of the per-pixel ``q`` never
    drops a pixel that passes. ``conics [..., 3]`` (a, b, c), ``opacities [...]``; ``0.04 / 0.99`` where
    ``o ≤ 1/255`` (projection culls those).
    """
    op = opacities.detach().to(torch.float32)
    e2 = 2.0 * torch.log(torch.clamp(op, min=ALPHA_THRESHOLD) * 255.0)
    return (e2 + 0.04) / 0.99


def ellipse_row_spans(u, v, ca, cb, cc, r2, ty, tile_size: int, x0, x1):
    """Tile columns ``[tx0, tx1)`` of tile row ``ty`` that the ellipse ``q(d) ≤ r2`` of a Gaussian at ``(u, v)``
    with conic ``(ca, cb, cc)`` reaches (all float32 tensors of one shape; ``ty``, ``x0``, ``x1`` integer tensors:
    the row and the Gaussian's bounding-box columns, to which the span is clamped; ``tx1 ≤ tx0`` when the row
    misses the ellipse).

    Tile-accurate binning (AccuTile of Hanson et al. 2025, "Speedy-Splat", §4.2; StopThePop §4.1 tests tiles
    against the ellipse too): on the row's band ``dy ∈ [ty·ts − v, (ty+1)·ts − v]`` the ellipse's right edge
    ``R(dy) = (−b dy + √(a r2 − det dy²)) / a`` is concave with its maximum at ``dy_R = −(b/c)·√(r2 c/det)`` (the
    ellipse's rightmost point), so its largest value on the band is ``R(clamp(dy_R))``; the left edge likewise
    (``dy_L = −dy_R``). A conic that is not positive definite keeps the whole bounding-box row. The same float32
    operations, in the same order, as the Triton twin (:mod:`meshlift.kernels._splat_raster_jit`, ``_row_span``).
    """
    ts = float(tile_size)
    pd = (ca > 0) & (cc > 0) & (ca * cc - cb * cb > 0)
    a = torch.where(pd, ca, torch.ones_like(ca))
    c = torch.where(pd, cc, torch.ones_like(cc))
    det = torch.where(pd, ca * cc - cb * cb, torch.ones_like(ca))
    ey = torch.sqrt(torch.clamp(r2 * a / det, min=0.0))
    ex = torch.sqrt(torch.clamp(r2 * c / det, min=0.0))
    tyf = ty.to(torch.float32)
    lo = torch.maximum(tyf * ts - v, -ey)
    hi = torch.minimum((tyf + 1.0) * ts - v, ey)
    dyr = torch.minimum(torch.maximum(-(cb / c) * ex, lo), hi)
    dyl = torch.minimum(torch.maximum((cb / c) * ex, lo), hi)
    right = (-cb * dyr + torch.sqrt(torch.clamp(a * r2 - det * dyr * dyr, min=0.0))) / a
    left = (-cb * dyl - torch.sqrt(torch.clamp(a * r2 - det * dyl * dyl, min=0.0))) / a
    tx0 = torch.floor((u + left) / ts).to(torch.int64)
    tx1 = torch.ceil((u + right) / ts).to(torch.int64)
    tx0 = torch.where(pd, torch.maximum(tx0, x0), x0)
    tx1 = torch.where(pd, torch.minimum(tx1, x1), x1)
    tx1 = torch.where(pd & (lo > hi), tx0, tx1)
    return tx0, tx1


def _runs(counts: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``counts [n]`` int64 → ``(owner [M], k [M])`` with ``M = Σ counts``: entry ``i`` repeated ``counts[i]`` times
    and each repeat's index ``0 .. counts[i] − 1`` within its run."""
    owner = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)
    k = torch.arange(owner.numel(), device=counts.device) - (torch.cumsum(counts, 0) - counts)[owner]
    return owner, k


def isect_tiles(means2d: torch.Tensor, radii: torch.Tensor, depths: torch.Tensor, tile_size: int,
                tiles_w: int, tiles_h: int, with_keys: bool = True, conics: Optional[torch.Tensor] = None,
                opacities: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tile/Gaussian intersections, sorted by (camera, tile, depth).

    Args: ``means2d [C,N,2]``, ``radii [C,N,2]`` (int, 0 = culled), ``depths [C,N]`` (> 0 where
    visible), the tile size and grid. With ``conics [C,N,3]`` and ``opacities [C,N]`` (both or neither) a
    Gaussian is binned only to the tiles of its bounding box that its ellipse of reach touches
    (:func:`ellipse_row_spans`, :func:`ellipse_reach2`; every pixel where it can pass the compositing cut is
    still covered, so the render is the same); without them, to its whole bounding box (as gsplat 1.5).

    Returns ``(isect_ids [M] int64, flatten_ids [M] int64, isect_offsets [C, tiles_h, tiles_w] int64)``:
    ``isect_ids = (global tile id << 32) | float32_bits(depth)`` with global tile id
    ``(c · tiles_h + ty) · tiles_w + tx``; ``flatten_ids`` index ``C·N`` (``c · N + n``);
    ``isect_offsets`` is where each tile's run starts (its end is the next tile's start, or ``M``).
    Sorting is stable, so equal depths keep the Gaussian order. ``with_keys`` is accepted for the fast
    twin's sake (which can skip building the keys); the reference always returns them.

    Raises:
        RenderError: only one of ``conics`` and ``opacities`` given, or either not shaped as ``depths`` needs.
    """
    if (conics is None) != (opacities is None):
        raise RenderError("isect_tiles: pass both conics and opacities (ellipse binning) or neither (bounding boxes)")
    C, N = depths.shape
    if conics is not None and (tuple(conics.shape) != (C, N, 3) or tuple(opacities.shape) != (C, N)):
        raise RenderError(f"isect_tiles: conics {tuple(conics.shape)} and opacities {tuple(opacities.shape)} must be "
                          f"[C, N, 3] and [C, N] as depths [C, N] = {(C, N)} (project_gaussians' outputs)")
    dev = depths.device
    with torch.no_grad():
        m = means2d.detach().reshape(-1, 2).to(torch.float32)
        r = radii.reshape(-1, 2).to(torch.float32)
        vis = (r[:, 0] > 0) & (r[:, 1] > 0)
        x0 = torch.clamp(torch.floor((m[:, 0] - r[:, 0]) / tile_size), 0, tiles_w)
        x1 = torch.clamp(torch.ceil((m[:, 0] + r[:, 0]) / tile_size), 0, tiles_w)
        y0 = torch.clamp(torch.floor((m[:, 1] - r[:, 1]) / tile_size), 0, tiles_h)
        y1 = torch.clamp(torch.ceil((m[:, 1] + r[:, 1]) / tile_size), 0, tiles_h)
        x0 = torch.where(vis, x0, 0).long()
        x1 = torch.where(vis, x1, 0).long()
        y0 = torch.where(vis, y0, 0).long()
        y1 = torch.where(vis, y1, 0).long()
        if conics is None:
            bw = x1 - x0
            counts = bw * (y1 - y0)
            gid, k = _runs(counts)
            bwg = bw[gid].clamp_min(1)
            tx = x0[gid] + k % bwg
            ty = y0[gid] + k // bwg
        else:  # one entry per (Gaussian, bounding-box row), then its span of columns
            con = conics.detach().reshape(-1, 3).to(torch.float32)
            r2 = ellipse_reach2(con, opacities.reshape(-1))
            rows = y1 - y0
            rg, rk = _runs(rows)
            rty = y0[rg] + rk
            a0, a1 = ellipse_row_spans(m[rg, 0], m[rg, 1], con[rg, 0], con[rg, 1], con[rg, 2], r2[rg], rty,
                                       tile_size, x0[rg], x1[rg])
            width = (a1 - a0).clamp_min(0)
            ri, k = _runs(width)
            gid = rg[ri]
            tx = a0[ri] + k
            ty = rty[ri]
        cam = gid // max(N, 1)
        tile = (cam * tiles_h + ty) * tiles_w + tx
        dbits = depths.detach().reshape(-1).to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
        keys = (tile << 32) | (dbits[gid] & 0xFFFFFFFF)
        keys, order = torch.sort(keys, stable=True)
        flatten_ids = gid[order]
        n_tiles = C * tiles_h * tiles_w
        tile_sorted = keys >> 32
        offsets = torch.searchsorted(tile_sorted, torch.arange(n_tiles, device=dev, dtype=torch.int64))
    return keys, flatten_ids, offsets.reshape(C, tiles_h, tiles_w)


# --------------------------------------------------------------------------------------------------
# Compositing
# --------------------------------------------------------------------------------------------------


def _plan(isect_offsets: torch.Tensor, n_isect: int, tile_size: int, chunk_elements: int):
    """Group the non-empty tiles (longest lists first) into ``[G, L]`` chunks of at most
    ``chunk_elements`` Gaussian×pixel pairs. Yields ``(tile_idx [G], starts [G], counts [G], L_total)``."""
    off = isect_offsets.reshape(-1)
    ends = torch.cat([off[1:], off.new_tensor([n_isect])])
    counts = ends - off
    nz = torch.nonzero(counts > 0).flatten()
    if nz.numel() == 0:
        return []
    cn = counts[nz]
    cn_sorted, order = torch.sort(cn, descending=True)
    nz = nz[order]
    P = tile_size * tile_size
    cn_host = cn_sorted.tolist()
    groups = []
    i = 0
    while i < len(cn_host):
        L = cn_host[i]
        lc = max(1, min(L, chunk_elements // P))
        g = max(1, chunk_elements // (P * lc))
        sl = slice(i, min(i + g, len(cn_host)))
        groups.append((nz[sl], off[nz[sl]], cn_sorted[sl], L, lc))
        i = sl.stop
    return groups


def _tile_pixels(tile_idx: torch.Tensor, tiles_w: int, tiles_h: int, tile_size: int, width: int,
                 height: int, dtype: torch.dtype):
    loc = tile_idx % (tiles_w * tiles_h)
    ty, tx = loc // tiles_w, loc % tiles_w
    p = torch.arange(tile_size * tile_size, device=tile_idx.device)
    pxi = tx[:, None] * tile_size + p % tile_size
    pyi = ty[:, None] * tile_size + p // tile_size
    inimg = (pxi < width) & (pyi < height)
    return pxi.to(dtype) + 0.5, pyi.to(dtype) + 0.5, inimg


def _chunk_alphas(ids, valid, px, py, inimg, means2d, conics, opacities, alpha_max):
    """Raw per (tile, Gaussian, pixel) alphas of one chunk after the skip rules; ``[G, L, P]``."""
    mu = means2d[ids]  # [G,L,2]
    cn = conics[ids]  # [G,L,3]
    dx = mu[..., 0:1] - px[:, None, :]
    dy = mu[..., 1:2] - py[:, None, :]
    sigma = 0.5 * (cn[..., 0:1] * dx * dx + cn[..., 2:3] * dy * dy) + cn[..., 1:2] * dx * dy
    raw = opacities[ids][..., None] * torch.exp(-sigma)
    keep = valid[..., None] & inimg[:, None, :] & (sigma >= 0) & (raw >= ALPHA_THRESHOLD)
    return torch.where(keep, torch.clamp(raw, max=alpha_max), torch.zeros_like(raw))


def _composite_chunk(T, done, acc, med, ids, valid, px, py, inimg, means2d, conics, opacities, features,
                     depths, alpha_max, want_median):
    a = _chunk_alphas(ids, valid, px, py, inimg, means2d, conics, opacities, alpha_max)
    one_m = 1.0 - a
    t_incl = T[:, None, :] * torch.cumprod(one_m, dim=1)
    inc = (t_incl >= T_THRESHOLD) & ~done[:, None, :]
    a = torch.where(inc, a, torch.zeros_like(a))
    cp = torch.cumprod(1.0 - a, dim=1)
    t_excl = T[:, None, :] * torch.cat([torch.ones_like(cp[:, :1]), cp[:, :-1]], dim=1)
    w = a * t_excl  # [G,L,P]
    acc = acc + torch.einsum("glp,gld->gpd", w, features[ids])
    T_new = T * cp[:, -1]
    done_new = done | (t_incl[:, -1] < T_THRESHOLD)
    if want_median:
        cond = (a > 0) & (t_excl > 0.5)
        L = a.shape[1]
        ar = torch.arange(1, L + 1, device=a.device)[None, :, None]
        last = (cond * ar).amax(dim=1)  # [G,P], 0 = none
        dg = depths[ids]  # [G,L,k]
        k = dg.shape[-1]
        val = torch.gather(dg, 1, (last - 1).clamp_min(0)[..., None].expand(-1, -1, k))  # [G,P,k]
        med = torch.where(last[..., None] > 0, val, med)
    return T_new, done_new, acc, med


def composite_tiles(means2d: torch.Tensor, conics: torch.Tensor, opacities: torch.Tensor,
                    features: torch.Tensor, depths: Optional[torch.Tensor], flatten_ids: torch.Tensor,
                    isect_offsets: torch.Tensor, width: int, height: int, tile_size: int = 16,
                    alpha_max: float = 0.99, chunk_elements: int = 1 << 22
                    ) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """Front-to-back alpha compositing of sorted tile lists (3DGS eq. 3; conventions "alpha rules").

    Per pixel and Gaussian in depth order: ``σ = ½(a dx² + c dy²) + b dx dy`` with ``d = mean2d −
    pixel centre``, ``α = min(alpha_max, o·exp(−σ))``; skipped if ``α < 1/255`` or ``σ < 0``; a Gaussian
    for which ``T·(1 − α) < 1e-4`` is not added and ends the pixel. ``C = Σ α_i T_i f_i``.

    Args:
        means2d ``[C,N,2]``, conics ``[C,N,3]``, opacities ``[C,N]``, features ``[C,N,D]``.
        depths: ``[C,N]`` camera z (or ``[C,N,k]`` per-Gaussian values), or None; given, the median depth is
            also returned: the value of the last contributing Gaussian whose incoming transmittance is > 0.5
            (where T crosses 0.5; RaDe-GS's rule), 0 where nothing contributes.
        flatten_ids, isect_offsets: from :func:`isect_tiles`.
        chunk_elements: memory budget, Gaussian×pixel pairs evaluated at once (each chunk keeps about
            ten such temporaries). Above ``4 · chunk_elements`` pairs in all, each chunk is wrapped in
            activation checkpointing (recomputed in backward), so autograd's memory is bounded too.

    Returns ``(features [C,H,W,D], alpha [C,H,W,1], median_depth [C,H,W,1] (``[C,H,W,k]`` for ``[C,N,k]``
    depths) or None)`` (no background).
    """
    C, N = opacities.shape
    D = features.shape[-1]
    dev, dtype = means2d.device, means2d.dtype
    tiles_h, tiles_w = isect_offsets.shape[1:]
    P = tile_size * tile_size
    n_tiles = C * tiles_h * tiles_w
    m2 = means2d.reshape(C * N, 2)
    cn = conics.reshape(C * N, 3)
    op = opacities.reshape(C * N)
    ft = features.reshape(C * N, D)
    dp = depths.reshape(C * N, -1) if depths is not None else None
    km = dp.shape[-1] if dp is not None else 1
    want_median = depths is not None
    n_isect = int(flatten_ids.numel())
    grad_on = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (means2d, conics, opacities, features, depths))
    # Small problems keep their activations (faster); larger ones recompute each chunk in backward so
    # that what autograd keeps stays bounded by the budget as well.
    use_checkpoint = grad_on and n_isect * P > 4 * chunk_elements
    outs_idx, outs_acc, outs_T, outs_med = [], [], [], []
    dummy_dp = torch.zeros(max(C * N, 1), 1, device=dev, dtype=dtype)
    for tile_idx, starts, counts, L, lc in _plan(isect_offsets, n_isect, tile_size, chunk_elements):
        G = tile_idx.numel()
        px, py, inimg = _tile_pixels(tile_idx, tiles_w, tiles_h, tile_size, width, height, dtype)
        T = torch.ones(G, P, device=dev, dtype=dtype)
        done = torch.zeros(G, P, device=dev, dtype=torch.bool)
        acc = torch.zeros(G, P, D, device=dev, dtype=dtype)
        med = torch.zeros(G, P, km, device=dev, dtype=dtype)
        for k0 in range(0, L, lc):
            k = k0 + torch.arange(min(lc, L - k0), device=dev)
            valid = k[None, :] < counts[:, None]
            pos = torch.clamp(starts[:, None] + k[None, :], max=max(n_isect - 1, 0))
            ids = flatten_ids[pos]
            args = (T, done, acc, med, ids, valid, px, py, inimg, m2, cn, op, ft,
                    dp if want_median else dummy_dp, alpha_max, want_median)
            if use_checkpoint:
                T, done, acc, med = checkpoint(_composite_chunk, *args, use_reentrant=False,
                                               preserve_rng_state=False)
            else:
                T, done, acc, med = _composite_chunk(*args)
        outs_idx.append(tile_idx)
        outs_acc.append(acc)
        outs_T.append(T)
        outs_med.append(med)
    full_acc = torch.zeros(n_tiles, P, D, device=dev, dtype=dtype)
    full_T = torch.ones(n_tiles, P, device=dev, dtype=dtype)
    full_med = torch.zeros(n_tiles, P, km, device=dev, dtype=dtype)
    if outs_idx:
        idx = torch.cat(outs_idx)
        full_acc = full_acc.index_copy(0, idx, torch.cat(outs_acc))
        full_T = full_T.index_copy(0, idx, torch.cat(outs_T))
        full_med = full_med.index_copy(0, idx, torch.cat(outs_med))

    def to_image(x):  # [n_tiles, P, k] -> [C, H, W, k]
        k = x.shape[-1]
        x = x.reshape(C, tiles_h, tiles_w, tile_size, tile_size, k).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(C, tiles_h * tile_size, tiles_w * tile_size, k)[:, :height, :width]

    image = to_image(full_acc)
    alpha = 1.0 - to_image(full_T[..., None])
    median = to_image(full_med) if want_median else None
    return image, alpha, median


@torch.no_grad()
def tile_statistics(means2d: torch.Tensor, conics: torch.Tensor, opacities: torch.Tensor,
                    flatten_ids: torch.Tensor, isect_offsets: torch.Tensor, width: int, height: int,
                    tile_size: int = 16, alpha_max: float = 0.99, chunk_elements: int = 1 << 22
                    ) -> dict:
    """Per-Gaussian compositing statistics (no grad), same alpha rules as :func:`composite_tiles`.

    Returns ``accum_weights [C,N]`` (Σ over pixels of the blending weight αT), ``area_proj [C,N]``
    int64 (pixels where the weight is > 0) and ``area_max [C,N]`` int64 (pixels where it has the largest
    weight of all Gaussians; ties go to the front-most).
    """
    C, N = opacities.shape
    dev, dtype = means2d.device, means2d.dtype
    tiles_h, tiles_w = isect_offsets.shape[1:]
    P = tile_size * tile_size
    m2, cn, op = means2d.reshape(C * N, 2), conics.reshape(C * N, 3), opacities.reshape(C * N)
    accum = torch.zeros(C * N, device=dev, dtype=dtype)
    touched = torch.zeros(C * N, device=dev, dtype=torch.int64)
    area_max = torch.zeros(C * N, device=dev, dtype=torch.int64)
    n_isect = int(flatten_ids.numel())
    for tile_idx, starts, counts, L, lc in _plan(isect_offsets, n_isect, tile_size, chunk_elements):
        G = tile_idx.numel()
        px, py, inimg = _tile_pixels(tile_idx, tiles_w, tiles_h, tile_size, width, height, dtype)
        T = torch.ones(G, P, device=dev, dtype=dtype)
        done = torch.zeros(G, P, device=dev, dtype=torch.bool)
        best_w = torch.zeros(G, P, device=dev, dtype=dtype)
        best_id = torch.zeros(G, P, device=dev, dtype=torch.int64)
        for k0 in range(0, L, lc):
            k = k0 + torch.arange(min(lc, L - k0), device=dev)
            valid = k[None, :] < counts[:, None]
            ids = flatten_ids[torch.clamp(starts[:, None] + k[None, :], max=max(n_isect - 1, 0))]
            a = _chunk_alphas(ids, valid, px, py, inimg, m2, cn, op, alpha_max)
            t_incl = T[:, None, :] * torch.cumprod(1.0 - a, dim=1)
            inc = (t_incl >= T_THRESHOLD) & ~done[:, None, :]
            a = torch.where(inc, a, torch.zeros_like(a))
            cp = torch.cumprod(1.0 - a, dim=1)
            t_excl = T[:, None, :] * torch.cat([torch.ones_like(cp[:, :1]), cp[:, :-1]], dim=1)
            w = a * t_excl
            T = T * cp[:, -1]
            done = done | (t_incl[:, -1] < T_THRESHOLD)
            accum.index_add_(0, ids[valid], w.sum(-1)[valid])
            touched.index_add_(0, ids[valid], (w > 0).sum(-1)[valid])
            wmax, kmax = w.max(dim=1)
            better = wmax > best_w
            best_w = torch.where(better, wmax, best_w)
            best_id = torch.where(better, torch.gather(ids, 1, kmax), best_id)
        sel = best_w > 0
        area_max += torch.bincount(best_id[sel], minlength=C * N)
    return {"accum_weights": accum.reshape(C, N), "area_proj": touched.reshape(C, N),
            "area_max": area_max.reshape(C, N)}
