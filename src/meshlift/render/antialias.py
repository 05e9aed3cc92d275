"""``antialias``: analytic silhouette antialiasing with gradients to vertex positions.

The method of nvdiffrast (Laine et al. 2020, "Modular Primitives for High-Performance Differentiable
Rendering", Sec. 3.4 and Fig. 4): for every pair of horizontally or vertically adjacent pixels whose
triangle ids differ, take the nearer triangle (the one that is not background); if one of its
*silhouette* edges (a mesh boundary edge, or an edge whose neighbouring triangle folds back so that
its opposite vertex lies on the same side as this triangle's) crosses the segment between the two pixel
centres, at distance ``dc ∈ [0, 1]`` from the pixel the triangle covers, the pixel on the far side of the
crossing from the midpoint is blended towards the other pixel's colour by ``|0.5 − dc|`` — its box-filter
coverage for a straight edge. ``dc`` is a differentiable function of the edge's projected endpoints, so
the image changes continuously as silhouette vertices move, and gradients reach ``pos``.

Edges are considered only for the pair direction they are more perpendicular to (``|dy| ≥ |dx|`` for a
horizontal pair), crossings within 1/16 pixel outside the segment are clamped onto it, and an edge whose
endpoint is behind the camera (``w ≤ 0``) is skipped.
"""

from __future__ import annotations

from typing import Optional

import torch

from meshlift.errors import RenderError
from meshlift.kernels import get_backend
from meshlift.render._checks import check_float, check_rast, check_tri
from meshlift.structures.index_check import derived_cached

#: Crossings up to this many pixels outside the pixel-centre segment still count (then clamped).
CROSSING_SLACK_PX = 1.0 / 16.0


def antialias_construct_topology(tri: torch.Tensor, num_vertices: Optional[int] = None) -> torch.Tensor:
    """Opposite vertex across each triangle edge, for silhouette detection.

    Args:
        tri: ``[T, 3]`` int triangles.
        num_vertices: any bound above the largest index of ``tri`` (e.g. the vertex count it was checked
            against); None reads the maximum back (a host sync on CUDA). The result does not depend on it.

    Returns:
        ``[T, 3]`` int64: entry ``(t, k)`` is the vertex, opposite the shared edge, of the other triangle
        containing edge ``(tri[t, k+1], tri[t, k+2])`` (the edge opposite vertex ``k``), or −1 for a
        boundary edge. Reuse it across calls with a fixed ``tri`` (``antialias(..., topology=...)``).
        For non-manifold edges (3+ triangles) one neighbour is picked arbitrarily.
    """
    t = tri.to(torch.int64)
    T = t.shape[0]
    if T == 0:
        return torch.empty(0, 3, dtype=torch.int64, device=tri.device)
    a = t.roll(-1, dims=1)  # v_{k+1}
    b = t.roll(-2, dims=1)  # v_{k+2}
    lo, hi = torch.minimum(a, b), torch.maximum(a, b)
    nv = int(t.max()) + 1 if num_vertices is None else int(num_vertices)
    key = (lo * nv + hi).reshape(-1)
    order = torch.argsort(key, stable=True)
    sk = key[order]
    n = sk.numel()
    partner = torch.full((n,), -1, dtype=torch.int64, device=tri.device)
    same_next = torch.zeros(n, dtype=torch.bool, device=tri.device)
    same_prev = torch.zeros(n, dtype=torch.bool, device=tri.device)
    if n > 1:
        same_next[:-1] = sk[:-1] == sk[1:]
        same_prev[1:] = sk[1:] == sk[:-1]
    pos_idx = torch.arange(n, device=tri.device)
    partner = torch.where(same_next, pos_idx + 1, torch.where(same_prev, pos_idx - 1, partner))
    opp_sorted = torch.where(partner >= 0, t.reshape(-1)[order[partner.clamp(min=0)]], partner)
    opp = torch.empty_like(opp_sorted)
    opp[order] = opp_sorted
    degenerate = (t[:, 0] == t[:, 1]) | (t[:, 1] == t[:, 2]) | (t[:, 2] == t[:, 0])
    opp = opp.view(T, 3)
    return torch.where(degenerate.unsqueeze(1), torch.full_like(opp, -1), opp)


def _same_sign(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.signbit(a) == torch.signbit(b)


def antialias(
    color: torch.Tensor,
    rast: torch.Tensor,
    pos: torch.Tensor,
    tri: torch.Tensor,
    topology: Optional[torch.Tensor] = None,
    pos_gradient_boost: float = 1.0,
    backend: Optional[str] = None,
) -> torch.Tensor:
    """Antialias silhouette edges of a rendered image (nvdiffrast ``antialias`` semantics).

    Args:
        color: ``[B, H, W, C]`` shaded image (any float).
        rast: ``[B, H, W, 4]`` from :func:`~meshlift.render.rasterize` with the same ``pos``, ``tri``.
        pos: clip-space positions given to ``rasterize`` (``[B, V, 4]``, or ``[V, 4]`` in range mode).
        tri: ``[T, 3]`` int triangles.
        topology: precomputed :func:`antialias_construct_topology` ``(tri)`` (default: built here).
        pos_gradient_boost: multiplier on the gradient to ``pos`` (nvdiffrast's knob), 1 = exact.
        backend: rasterizer backend name (None → the current choice, default ``"auto"``:
            :func:`meshlift.kernels.choose_backend`). ``"triton"`` with float32 ``color``/``pos``/``rast`` runs
            the fused kernels of :mod:`meshlift.kernels.antialias_triton` (three launches forward, four
            backward, no host sync); this torch code is their reference twin.

    Returns:
        ``[B, H, W, C]`` antialiased image, differentiable w.r.t. ``color`` and ``pos``.

    Raises:
        RenderError: shapes/devices that do not match.
    """
    check_float("color", color)
    check_rast(rast)
    check_float("pos", pos)
    if color.ndim != 4 or color.shape[:3] != rast.shape[:3]:
        raise RenderError(f"color must be [B, H, W, C] matching rast {tuple(rast.shape[:3])}, got {tuple(color.shape)}")
    if pos.ndim not in (2, 3) or pos.shape[-1] != 4:
        raise RenderError(f"pos must be clip-space [B, V, 4] or [V, 4], got {tuple(pos.shape)}")
    if pos.ndim == 3 and pos.shape[0] != rast.shape[0]:
        raise RenderError(f"pos batch {pos.shape[0]} does not match rast batch {rast.shape[0]}")
    if tri.ndim != 2 or tri.shape[1] != 3 or tri.dtype not in (torch.int32, torch.int64):
        raise RenderError(f"tri must be an int tensor [T, 3], got {tuple(tri.shape)} {tri.dtype}")
    V = pos.shape[-2]
    if topology is None:
        # the face list's range is checked (cached per tensor: rasterize has usually checked this one);
        # the topology of a face list is built once per tensor (a fixed mesh's, as in pass 2, is reused)
        check_tri(tri, V, pos.device)
        topology = derived_cached(tri, "antialias_topology", lambda t: antialias_construct_topology(t, V))
    elif topology.shape != tri.shape:
        raise RenderError("topology must come from antialias_construct_topology(tri) for this tri")
    if (color.dtype == torch.float32 and pos.dtype == torch.float32 and rast.dtype == torch.float32
            and get_backend(backend, color.device).name == "triton"):
        from meshlift.kernels.antialias_triton import antialias_triton

        return antialias_triton(color, rast, pos, tri, topology, pos_gradient_boost)
    B, H, W, C = color.shape
    dev = color.device
    tri64 = tri.to(torch.int64)
    ids = rast[..., 3].detach().round().to(torch.int64).reshape(-1) - 1
    zbuf = rast[..., 2].detach().reshape(-1)
    flat = color.reshape(-1, C)
    pix = torch.arange(B * H * W, device=dev)
    col = pix % W
    row = (pix // W) % H
    pos_flat = pos.reshape(-1, 4)
    if pos_gradient_boost != 1.0:
        pos_flat = _GradScale.apply(pos_flat, float(pos_gradient_boost))
    delta_pix, delta_val = [], []
    for down in (False, True):
        step = W if down else 1
        # candidate pairs (p, p + step) whose ids differ, found with one nonzero (one host sync) per
        # direction; ascending pixel order, as boolean-mask indexing gives
        ok = (row < H - 1) if down else (col < W - 1)
        nb = torch.cat([ids[step:], ids[-step:]])  # ids[p + step]; the tail is excluded by ``ok``
        p0 = torch.nonzero(ok & (ids != nb)).squeeze(1)
        if p0.numel() == 0:
            continue
        p1 = p0 + step
        t0, t1 = ids[p0], ids[p1]
        use1 = (t0 < 0) | ((t1 >= 0) & ~(zbuf[p0] < zbuf[p1]))
        t = torch.where(use1, t1, t0)
        ref = torch.where(use1, p1, p0)
        ds = torch.where(use1, -1.0, 1.0).to(pos.dtype)
        vi = tri64[t]  # [n, 3]
        op = topology[t]
        op = torch.where(op >= 0, op, vi)
        if pos.ndim == 3:
            vb = (ref // (H * W) * V).unsqueeze(1)
            vi_f, op_f = vi + vb, op + vb
        else:
            vi_f, op_f = vi, op
        P = pos_flat.index_select(0, vi_f.reshape(-1)).view(-1, 3, 4)  # [n, 3, 4]
        rx = (ref % W).to(pos.dtype) + 0.5
        ry = ((ref // W) % H).to(pos.dtype) + 0.5

        def to_pixels(q):
            X = (q[..., 0] / q[..., 3] + 1) * (W * 0.5) - rx.unsqueeze(1)
            Y = (q[..., 1] / q[..., 3] + 1) * (H * 0.5) - ry.unsqueeze(1)
            return (Y, X) if down else (X, Y)  # flip so the neighbour lies along +x

        with torch.no_grad():
            x, y = to_pixels(P)
            O = pos_flat[op_f]
            ox, oy = to_pixels(O)
            x0, x1, x2 = x.unbind(1)
            y0, y1, y2 = y.unbind(1)
            bb = (x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0)
            xa, xb = x.roll(-1, 1), x.roll(-2, 1)  # edge k: from v_{k+1} to v_{k+2}
            ya, yb = y.roll(-1, 1), y.roll(-2, 1)
            area_o = (xa - ox) * (yb - oy) - (xb - ox) * (ya - oy)
            # the x/y flip mirrors orientation; compare signs in the same (flipped) frame
            silhouette = _same_sign(area_o, bb.unsqueeze(1))
            dx, dy = xb - xa, yb - ya
            crosses = ~_same_sign(ya, yb) & (dy != 0)
            dnum = ds.unsqueeze(1) * (xa * dy - ya * dx)
            dc_all = torch.where(crosses, dnum / torch.where(crosses, dy, torch.ones_like(dy)), -torch.inf)
            k = dc_all.argmax(1)
            ar = torch.arange(k.numel(), device=dev)
            dck = dc_all[ar, k]
            front = (P[..., 3] > 0).all(1)
            good = (
                torch.isfinite(dck)
                & silhouette[ar, k]
                & (dy[ar, k].abs() >= dx[ar, k].abs())
                & (dck > -CROSSING_SLACK_PX)
                & (dck < 1 + CROSSING_SLACK_PX)
                & front
            )
        # differentiable crossing distance along the pair for the chosen edge. Every candidate is kept
        # (no second compaction, so no second sync): the others get alpha = 0 (adding an exact 0), and
        # their w and edge denominators are replaced by 1 so that no inf/NaN reaches the gradient.
        ka = (k + 1) % 3
        kb = (k + 2) % 3
        qa = P[ar, ka]
        qb = P[ar, kb]
        one = torch.ones_like(rx)
        wa = torch.where(good, qa[:, 3], one)
        wb = torch.where(good, qb[:, 3], one)
        Xa = (qa[:, 0] / wa + 1) * (W * 0.5) - rx
        Ya = (qa[:, 1] / wa + 1) * (H * 0.5) - ry
        Xb = (qb[:, 0] / wb + 1) * (W * 0.5) - rx
        Yb = (qb[:, 1] / wb + 1) * (H * 0.5) - ry
        if down:
            Xa, Ya, Xb, Yb = Ya, Xa, Yb, Xb
        dcs = ds * (Xa * (Yb - Ya) - Ya * (Xb - Xa)) / torch.where(good, Yb - Ya, one)
        alpha = torch.where(good, ds * (0.5 - dcs.clamp(0, 1)), torch.zeros_like(rx))
        target = torch.where(alpha.detach() > 0, p0, p1)
        delta_pix.append(target)
        delta_val.append(alpha.unsqueeze(1).to(color.dtype) * (flat.index_select(0, p1) - flat.index_select(0, p0)))
    if not delta_pix:
        return color + 0
    out = flat.index_add(0, torch.cat(delta_pix), torch.cat(delta_val))
    return out.view(B, H, W, C)


class _GradScale(torch.autograd.Function):
    """Identity forward, gradient × s backward."""

    @staticmethod
    def forward(ctx, x, s):
        ctx.s = s
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.s, None


__all__ = ["antialias", "antialias_construct_topology", "CROSSING_SLACK_PX"]
