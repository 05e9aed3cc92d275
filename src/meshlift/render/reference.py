"""Simple, slow reference twins of the rendering ops, for tests (small inputs only).

- :func:`rasterize_reference`: brute force — every triangle tested against every pixel centre, one
  triangle at a time (the snapped triangle's exact edges where it is in front of the eye and inside the guard
  band, else the homogeneous ones: ``kernels._common``), ``torch.minimum`` on the packed depth key; barycentrics by solving the 3×3 system
  ``Σ_k b_k (x_k, y_k, w_k) ∝ (px, py, 1)`` per pixel (an independent formula from the fast path's).
- :func:`interpolate_reference`: per-pixel Python loop.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from meshlift.kernels._common import (INT64_MAX, SUBPIXEL, depth_key, fixed_edge_planes, key_to_index,
                                      snap_to_subpixels, triangle_planes)


def visibility_reference(
    pos: torch.Tensor, tri: torch.Tensor, resolution: Sequence[int], ranges: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """``[B, H, W]`` int64 nearest-triangle index (−1 empty) by testing every triangle at every pixel."""
    H, W = int(resolution[0]), int(resolution[1])
    tri = tri.to(torch.int64)
    pos = pos.detach()
    jj, ii = torch.meshgrid(torch.arange(W), torch.arange(H), indexing="xy")
    px = ((2 * jj + 1).to(pos.dtype) / W - 1).to(pos.device)
    py = ((2 * ii + 1).to(pos.dtype) / H - 1).to(pos.device)
    qx = (jj * SUBPIXEL).to(torch.float64).to(pos.device)  # pixel centres on the snapped test's grid
    qy = (ii * SUBPIXEL).to(torch.float64).to(pos.device)
    half = torch.tensor([W * 0.5, H * 0.5], dtype=pos.dtype, device=pos.device)
    out = []
    B = pos.shape[0] if ranges is None else ranges.shape[0]
    for b in range(B):
        if ranges is None:
            P, ids = pos[b], range(tri.shape[0])
        else:
            s, n = int(ranges[b, 0]), int(ranges[b, 1])
            P, ids = pos, range(s, s + n)
        best = torch.full((H, W), INT64_MAX, dtype=torch.int64, device=pos.device)
        for t in ids:
            v = P[tri[t]].unsqueeze(0)
            edges, zplane, det = triangle_planes(v)
            d = float(det[0])
            if d == 0:
                continue
            sg = 1.0 if d > 0 else -1.0
            # evaluation order (a px + c) + b py, as in the backend (so exact ties agree)
            e = [(sg * edges[0, k, 0] * px + sg * edges[0, k, 2]) + sg * edges[0, k, 1] * py for k in range(3)]
            zp = zplane[0] / det[0]
            z = (zp[0] * px + zp[2]) + zp[1] * py
            cov = (e[0] >= 0) & (e[1] >= 0) & (e[2] >= 0)
            w, zc = v[0, :, 3], v[0, :, 2]
            if bool(((zc + w >= 0) & (w > torch.finfo(pos.dtype).tiny)).all()):
                sn, ok = snap_to_subpixels((v[0, :, :2] / w[:, None]) * half + (half - 0.5))
                if bool(ok.all()):  # the watertight test (kernels._common): the snapped triangle's exact edges
                    q = fixed_edge_planes(sn[None, :, 0], sn[None, :, 1])[0]
                    cov = ((q[0, 0] * qx + q[0, 2]) + q[0, 1] * qy >= 0) & ((q[1, 0] * qx + q[1, 2]) + q[1, 1] * qy >= 0) \
                        & ((q[2, 0] * qx + q[2, 2]) + q[2, 1] * qy >= 0)
            cov = cov & (z.abs() <= 1)
            key = torch.where(cov, depth_key(z, torch.full_like(best, t)), best)
            best = torch.minimum(best, key)
        out.append(key_to_index(best))
    return torch.stack(out)


def rasterize_reference(
    pos: torch.Tensor, tri: torch.Tensor, resolution: Sequence[int], ranges: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Reference ``rast [B, H, W, 4]`` (no ``rast_db``), differentiable w.r.t. ``pos`` via linalg.solve."""
    H, W = int(resolution[0]), int(resolution[1])
    ids = visibility_reference(pos, tri, (H, W), ranges)
    tri = tri.to(torch.int64)
    rast = torch.zeros(ids.shape + (4,), dtype=pos.dtype, device=pos.device)
    rows = []
    for b, i, j in ids.ge(0).nonzero().tolist():
        t = int(ids[b, i, j])
        v = (pos[b] if ranges is None else pos)[tri[t]]  # [3, 4]
        M = v[:, (0, 1, 3)].T  # columns (x, y, w)
        p = torch.tensor([2 * (j + 0.5) / W - 1, 2 * (i + 0.5) / H - 1, 1.0], dtype=pos.dtype, device=pos.device)
        bary = torch.linalg.solve(M, p)
        bary = bary / bary.sum()
        zw = (bary * v[:, 2]).sum() / (bary * v[:, 3]).sum()
        rows.append(((b, i, j), torch.stack([bary[0], bary[1], zw, pos.new_tensor(t + 1.0)])))
    if rows:
        idx = torch.tensor([r[0] for r in rows], device=pos.device)
        rast = rast.index_put((idx[:, 0], idx[:, 1], idx[:, 2]), torch.stack([r[1] for r in rows]))
    return rast


def interpolate_reference(attr: torch.Tensor, rast: torch.Tensor, tri: torch.Tensor) -> torch.Tensor:
    """Reference ``interpolate`` output by a per-pixel loop."""
    B, H, W, _ = rast.shape
    C = attr.shape[-1]
    tri = tri.to(torch.int64)
    out = torch.zeros(B, H, W, C, dtype=attr.dtype, device=attr.device)
    vals = {}
    for b in range(B):
        A = attr if attr.ndim == 2 else attr[b if attr.shape[0] > 1 else 0]
        for i in range(H):
            for j in range(W):
                t = int(round(float(rast[b, i, j, 3]))) - 1
                if t < 0:
                    continue
                u, v = rast[b, i, j, 0], rast[b, i, j, 1]
                i0, i1, i2 = tri[t].tolist()
                vals[(b, i, j)] = u * A[i0] + v * A[i1] + (1 - u - v) * A[i2]
    if vals:
        idx = torch.tensor(list(vals.keys()), device=attr.device)
        out = out.index_put((idx[:, 0], idx[:, 1], idx[:, 2]), torch.stack(list(vals.values())))
    return out


def texture_reference(tex: torch.Tensor, uv: torch.Tensor, boundary_mode: str = "wrap", level=None) -> torch.Tensor:
    """Reference bilinear lookup by a per-pixel loop (2D textures; ``level``: per-pixel float mip level
    ``[B, H, W]`` with trilinear blending over the chain built by 2×2 averaging, or None)."""
    import math

    from meshlift.render.texture import texture_construct_mip

    chain = texture_construct_mip(tex) if level is not None else [tex]
    B, H, W, _ = uv.shape
    C = tex.shape[-1]
    out = []

    def texel(lv, b, r, c):
        h, w = lv.shape[1], lv.shape[2]
        if boundary_mode == "wrap":
            r, c = r % h, c % w
        elif boundary_mode == "clamp":
            r, c = min(max(r, 0), h - 1), min(max(c, 0), w - 1)
        elif not (0 <= r < h and 0 <= c < w):
            return torch.zeros(C, dtype=tex.dtype)
        return lv[b if lv.shape[0] > 1 else 0, r, c]

    def bilinear(lv, b, u, v):
        h, w = lv.shape[1], lv.shape[2]
        x, y = u * w - 0.5, v * h - 0.5
        x0, y0 = math.floor(x), math.floor(y)
        fx, fy = x - x0, y - y0
        return (
            texel(lv, b, y0, x0) * (1 - fx) * (1 - fy)
            + texel(lv, b, y0, x0 + 1) * fx * (1 - fy)
            + texel(lv, b, y0 + 1, x0) * (1 - fx) * fy
            + texel(lv, b, y0 + 1, x0 + 1) * fx * fy
        )

    for b in range(B):
        for i in range(H):
            for j in range(W):
                u, v = float(uv[b, i, j, 0]), float(uv[b, i, j, 1])
                if level is None:
                    out.append(bilinear(chain[0], b, u, v))
                else:
                    lf = min(max(float(level[b, i, j]), 0.0), len(chain) - 1)
                    l0 = int(math.floor(lf))
                    l1 = min(l0 + 1, len(chain) - 1)
                    fr = lf - l0
                    out.append(bilinear(chain[l0], b, u, v) * (1 - fr) + bilinear(chain[l1], b, u, v) * fr)
    return torch.stack(out).view(B, H, W, C)


def antialias_reference(color, rast, pos, tri) -> torch.Tensor:
    """Reference ``antialias`` forward by a per-pixel-pair Python loop (same rules, scalar code)."""
    import math

    B, H, W, C = color.shape
    tri = tri.tolist()
    # opposite vertices by a dict of edges
    edge_map = {}
    for ti, (a, b, c) in enumerate(tri):
        for k, (u, v) in enumerate(((b, c), (c, a), (a, b))):
            edge_map.setdefault((min(u, v), max(u, v)), []).append((ti, k))
    out = color.detach().clone()
    ids = (rast[..., 3].round().long() - 1).tolist()
    zs = rast[..., 2].tolist()
    for b in range(B):
        P = (pos[b] if pos.ndim == 3 else pos).detach().double().tolist()
        for i in range(H):
            for j in range(W):
                for down in (False, True):
                    i1, j1 = (i + 1, j) if down else (i, j + 1)
                    if i1 >= H or j1 >= W:
                        continue
                    ta, tb = ids[b][i][j], ids[b][i1][j1]
                    if ta == tb:
                        continue
                    use1 = ta < 0 or (tb >= 0 and not zs[b][i][j] < zs[b][i1][j1])
                    t = tb if use1 else ta
                    ri, rj = (i1, j1) if use1 else (i, j)
                    ds = -1.0 if use1 else 1.0
                    vs = tri[t]
                    if any(P[v][3] <= 0 for v in vs):
                        continue
                    opp = []
                    for k in range(3):
                        u, v = vs[(k + 1) % 3], vs[(k + 2) % 3]
                        others = [o for o in edge_map[(min(u, v), max(u, v))] if o[0] != t]
                        opp.append(tri[others[0][0]][others[0][1]] if others else vs[k])

                    def proj(v):
                        X = (P[v][0] / P[v][3] + 1) * W / 2 - (rj + 0.5)
                        Y = (P[v][1] / P[v][3] + 1) * H / 2 - (ri + 0.5)
                        return (Y, X) if down else (X, Y)

                    q = [proj(v) for v in vs]
                    o = [proj(v) for v in opp]
                    bb = (q[1][0] - q[0][0]) * (q[2][1] - q[0][1]) - (q[2][0] - q[0][0]) * (q[1][1] - q[0][1])
                    best, bk = -math.inf, -1
                    for k in range(3):
                        (xa, ya), (xb, yb) = q[(k + 1) % 3], q[(k + 2) % 3]
                        if (ya < 0) == (yb < 0) or yb == ya:
                            continue
                        dc = ds * (xa * (yb - ya) - ya * (xb - xa)) / (yb - ya)
                        if dc > best:
                            best, bk = dc, k
                    if bk < 0:
                        continue
                    (xa, ya), (xb, yb) = q[(bk + 1) % 3], q[(bk + 2) % 3]
                    ox, oy = o[bk]
                    area_o = (xa - ox) * (yb - oy) - (xb - ox) * (ya - oy)
                    if (area_o < 0) != (bb < 0) or abs(yb - ya) < abs(xb - xa):
                        continue
                    if not (-1 / 16 < best < 1 + 1 / 16):
                        continue
                    alpha = ds * (0.5 - min(max(best, 0.0), 1.0))
                    tgt = (i, j) if alpha > 0 else (i1, j1)
                    out[b, tgt[0], tgt[1]] += alpha * (color[b, i1, j1] - color[b, i, j]).detach()
    return out
