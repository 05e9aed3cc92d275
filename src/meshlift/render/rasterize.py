"""``rasterize``: nvdiffrast-compatible differentiable triangle rasterization in pure PyTorch.

The discrete visibility pass (which triangle is nearest at each pixel centre) runs in a backend
(:mod:`meshlift.kernels`, no gradient). The continuous outputs — perspective-correct barycentrics
``(u, v)``, ``z/w`` and their screen derivatives — are then recomputed from ``pos`` with ordinary
differentiable PyTorch ops at the covered pixels, so gradients reach the clip-space vertex positions
exactly as in nvdiffrast (Laine et al. 2020, "Modular Primitives for High-Performance Differentiable
Rendering", Sec. 3.1; barycentrics by homogeneous rasterization, Olano & Greer 1997).

Conventions: docs/conventions.md §3 (clip space, pixel centres, depth-test tie rule).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from meshlift import _env
from meshlift.errors import OutOfMemoryError, RenderError
from meshlift.render._checks import check_float, check_resolution, check_tri
from meshlift.kernels import get_backend
from meshlift.kernels._common import MAX_TRIANGLES, dense_path, gather_rows, pixel_centre_tables

#: Default fragment budget when the argument is None (the methods carry it as the config field ``max_fragments``).
DEFAULT_MAX_FRAGMENTS = 2**24


def resolve_max_fragments(max_fragments: Optional[int]) -> int:
    """The fragment budget: the argument, else :data:`DEFAULT_MAX_FRAGMENTS` (or, deprecated, the environment
    variable ``MESHLIFT_RASTER_MAX_FRAGMENTS``, with a warning).

    Raises:
        RenderError: a budget below 1, or a deprecated variable that is not a number.
    """
    if max_fragments is None:
        env = _env.deprecated("MESHLIFT_RASTER_MAX_FRAGMENTS")
        if env:
            try:
                max_fragments = int(float(env))
            except ValueError:
                raise RenderError(
                    f"MESHLIFT_RASTER_MAX_FRAGMENTS={env!r} (deprecated) is not a number; unset it and set the "
                    "config field max_fragments or the max_fragments= argument instead"
                ) from None
        else:
            max_fragments = DEFAULT_MAX_FRAGMENTS
    if int(max_fragments) < 1:
        raise RenderError(f"max_fragments must be positive, got {max_fragments}")
    return int(max_fragments)


def _check_pos_ranges(pos: torch.Tensor, ranges: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    check_float("pos", pos)
    if ranges is None:
        if pos.ndim != 3 or pos.shape[-1] != 4:
            raise RenderError(
                f"pos must be clip-space [B, V, 4] (or [V, 4] with ranges=), got {tuple(pos.shape)}; "
                "see meshlift.render.transform_pos"
            )
        return None
    if pos.ndim != 2 or pos.shape[-1] != 4:
        raise RenderError(f"with ranges=, pos must be [V, 4] (range mode), got {tuple(pos.shape)}")
    if not isinstance(ranges, torch.Tensor) or ranges.ndim != 2 or ranges.shape[1] != 2:
        raise RenderError("ranges must be an int tensor [B, 2] of (first triangle, triangle count)")
    if ranges.dtype not in (torch.int32, torch.int64):
        raise RenderError(f"ranges must be int32 or int64, got {ranges.dtype}")
    return ranges.to(torch.int64)


#: Largest triangle count whose ids ``rast[..., 3]`` holds exactly in float32 (integers up to 2^24 are exact).
MAX_FLOAT32_IDS = 2**24


def _validate(pos, tri, resolution, ranges, max_fragments, backend):
    """Checked ``(ranges int64 on pos.device or None, H, W, tri int64, budget, backend)``."""
    ranges = _check_pos_ranges(pos, ranges)
    H, W = check_resolution(resolution)
    tri = check_tri(tri, pos.shape[-2], pos.device)
    if tri.shape[0] > MAX_TRIANGLES:
        raise RenderError(f"at most {MAX_TRIANGLES} triangles are supported, got {tri.shape[0]}")
    if tri.shape[0] > MAX_FLOAT32_IDS and pos.dtype != torch.float64:
        raise RenderError(
            f"rasterize: {tri.shape[0]:,} triangles with {pos.dtype} positions: rast stores the triangle id in "
            f"the positions' float type, exact only up to {MAX_FLOAT32_IDS:,} (2^24) in float32; decimate the "
            "mesh (meshlift convert --simplify), render it in parts, or pass float64 positions")
    if ranges is not None:
        r = ranges
        if r.numel() and (int(r.min()) < 0 or int((r[:, 0] + r[:, 1]).max()) > tri.shape[0]):
            raise RenderError(f"ranges point past the {tri.shape[0]} triangles of tri; fix ranges")
        ranges = r.to(pos.device)
    return ranges, H, W, tri, resolve_max_fragments(max_fragments), get_backend(backend, pos.device)


def visible_triangles(
    pos: torch.Tensor,
    tri: torch.Tensor,
    resolution: Sequence[int],
    ranges: Optional[torch.Tensor] = None,
    max_fragments: Optional[int] = None,
    backend: Optional[str] = None,
) -> torch.Tensor:
    """The discrete visibility pass alone: ``[B, H, W]`` int64 index of the nearest triangle, −1 if empty.

    Same arguments as :func:`rasterize`. No gradient.
    """
    ranges, H, W, tri, budget, be = _validate(pos, tri, resolution, ranges, max_fragments, backend)
    p = pos.detach()
    if p.dtype in (torch.float16, torch.bfloat16):
        p = p.float()
    try:
        return be.visibility(p, tri, (H, W), ranges, budget)
    except torch.OutOfMemoryError as e:  # pragma: no cover - depends on the machine
        raise OutOfMemoryError(
            f"rasterize ran out of memory at {H}x{W}, {tri.shape[0]} triangles (fragment budget {budget}): "
            "lower max_fragments= (config field max_fragments), the batch size or the resolution"
        ) from e


def well_conditioned(e: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which covered pixels have trustworthy barycentrics (docs/conventions.md §3), and safe denominators.

    Args:
        e: ``[P, 3]`` edge values ``e_k`` at the points; w: ``[P, 3]`` the vertices' clip ``w``.

    Returns:
        ``(ok [P] bool, S [P], D [P])``: ``ok`` where ``Σe ≠ 0``, ``Σ e_k w_k ≠ 0`` and no ``e_k`` has the
        opposite sign of ``Σe``; ``S = Σe`` and ``D = Σ e_k w_k`` where ``ok`` and 1 elsewhere (so that
        divisions by them are finite everywhere, and so are their gradients under ``torch.where``).
    """
    S = (e[:, 0] + e[:, 1]) + e[:, 2]
    D = (e[:, 0] * w[:, 0] + e[:, 1] * w[:, 1]) + e[:, 2] * w[:, 2]
    sg = torch.where(S < 0, -1.0, 1.0).to(e.dtype).unsqueeze(1)
    ok = (S != 0) & (D != 0) & ((e * sg) >= 0).all(1)
    return ok, torch.where(ok, S, 1.0), torch.where(ok, D, 1.0)


def clamped_barycentrics(e: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``(u, v, z/w) [P, 3]`` of the clamped edge values ``max(sign(Σe)·e_k, 0)`` (no gradient): the values
    an ill-conditioned pixel takes (docs/conventions.md §3). The centroid where all clamp to 0, ``z/w`` 0
    where its denominator is 0."""
    e = e.detach()
    S = (e[:, 0] + e[:, 1]) + e[:, 2]
    sg = torch.where(S < 0, -1.0, 1.0).to(e.dtype).unsqueeze(1)
    eh = (e * sg).clamp(min=0)
    eh = torch.where((eh.sum(1, keepdim=True) > 0), eh, torch.ones_like(eh))  # all zero: the centroid
    Sh = eh.sum(1)
    num = (eh * z.detach()).sum(1)
    den = (eh * w.detach()).sum(1)
    zw = torch.where(den != 0, num / torch.where(den != 0, den, 1.0), 0.0)
    return torch.stack([eh[:, 0] / Sh, eh[:, 1] / Sh, zw], dim=-1)


def barycentrics_at(
    verts: torch.Tensor, px: torch.Tensor, py: torch.Tensor, grad_db: bool = True
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Perspective-correct barycentrics and ``z/w`` of clip-space triangles at NDC points (differentiable).

    Args:
        verts: ``[P, 3, 4]`` clip-space vertices of the triangle covering each point.
        px, py: ``[P]`` NDC coordinates of the points.
        grad_db: also return the screen derivatives.

    Returns:
        ``uvz [P, 3]`` = ``(u, v, z/w)`` with ``u, v`` the weights of the first and second vertex, and
        ``db [P, 4]`` = ``(du/dpx, du/dpy, dv/dpx, dv/dpy)`` in NDC units (or None). Ill-conditioned points
        (:func:`well_conditioned`) take :func:`clamped_barycentrics`, ``db = 0`` and no gradient.

    Formula (homogeneous rasterization, Olano & Greer 1997): with ``a_k = x_k − px·w_k``,
    ``c_k = y_k − py·w_k``, ``e_k = a_{k+1} c_{k+2} − a_{k+2} c_{k+1}``, ``u = e_0/Σe``, ``v = e_1/Σe``,
    ``z/w = Σ e_k z_k / Σ e_k w_k``.
    """
    x, y, z, w = verts.unbind(-1)  # [P, 3]
    a = x - px.unsqueeze(1) * w
    c = y - py.unsqueeze(1) * w
    a0, a1, a2 = a.unbind(1)
    c0, c1, c2 = c.unbind(1)
    w0, w1, w2 = w.unbind(1)
    e0 = a1 * c2 - a2 * c1
    e1 = a2 * c0 - a0 * c2
    e2 = a0 * c1 - a1 * c0
    e = torch.stack([e0, e1, e2], 1)
    ok, S, D = well_conditioned(e, w)
    inv = 1.0 / S
    u = e0 * inv
    v = e1 * inv
    zw = (e0 * z[:, 0] + e1 * z[:, 1] + e2 * z[:, 2]) / D
    uvz = torch.where(ok.unsqueeze(1), torch.stack([u, v, zw], dim=-1), clamped_barycentrics(e, z, w))
    if not grad_db:
        return uvz, None
    # d a_k / d px = -w_k ; d c_k / d py = -w_k
    de0x = -w1 * c2 + w2 * c1
    de1x = -w2 * c0 + w0 * c2
    de2x = -w0 * c1 + w1 * c0
    de0y = -a1 * w2 + a2 * w1
    de1y = -a2 * w0 + a0 * w2
    de2y = -a0 * w1 + a1 * w0
    dSx = de0x + de1x + de2x
    dSy = de0y + de1y + de2y
    dudx = (de0x - u * dSx) * inv
    dudy = (de0y - u * dSy) * inv
    dvdx = (de1x - v * dSx) * inv
    dvdy = (de1y - v * dSy) * inv
    db = torch.where(ok.unsqueeze(1), torch.stack([dudx, dudy, dvdx, dvdy], dim=-1), 0.0)
    return uvz, db


def _uvz_lean(verts: torch.Tensor, px: torch.Tensor, py: torch.Tensor) -> torch.Tensor:
    """``(u, v, z/w) [P, 3]`` as :func:`barycentrics_at` (same formula, fewer and fatter ops; rounding
    may differ in the last bit). No gradient of its own: used inside :class:`_Barycentrics`."""
    ac = verts[..., :2].permute(2, 0, 1) - torch.stack([px, py]).unsqueeze(2) * verts[..., 3]  # [2, P, 3]
    ac1, ac2 = ac.roll(-1, 2), ac.roll(-2, 2)  # vertex k + 1, k + 2
    e = ac1[0] * ac2[1] - ac2[0] * ac1[1]  # [P, 3] edge functions
    w = verts[..., 3]
    ok, S, D = well_conditioned(e, w)
    zw = (e * verts[..., 2]).sum(1)
    lean = torch.cat([e[:, :2] / S.unsqueeze(1), (zw / D).unsqueeze(1)], 1)
    return torch.where(ok.unsqueeze(1), lean, clamped_barycentrics(e, verts[..., 2], w))


class _Barycentrics(torch.autograd.Function):
    """Fast path of :func:`barycentrics_at`: same forward, analytic backward for ``(u, v, z/w)``.

    The gradient through ``db`` (only needed when ``rast_db`` feeds a loss, e.g. through mip-level
    selection) is obtained by re-running :func:`barycentrics_at` under autograd in the backward pass.
    First-order only (``once_differentiable``). Reference twin: :func:`barycentrics_at` (tests compare).
    """

    @staticmethod
    def forward(ctx, verts, px, py, grad_db: bool):
        ctx.set_materialize_grads(False)
        if grad_db:
            uvz, db = barycentrics_at(verts, px, py, True)
        else:
            uvz, db = _uvz_lean(verts, px, py), None
        ctx.save_for_backward(verts, px, py, uvz)
        ctx.grad_db = grad_db
        return uvz, db if grad_db else uvz.new_zeros(uvz.shape[0], 0)

    @staticmethod
    @once_differentiable
    def backward(ctx, g_uvz, g_db):
        verts, px, py, uvz = ctx.saved_tensors
        grad = None
        if g_uvz is not None:
            x, y, z, w = verts.permute(2, 0, 1).contiguous().unbind(0)  # [P, 3] each, contiguous
            pxc, pyc = px.unsqueeze(1), py.unsqueeze(1)
            a = x - pxc * w
            c = y - pyc * w
            a1, c1 = a.roll(-1, 1), c.roll(-1, 1)  # k + 1
            a2, c2 = a.roll(-2, 1), c.roll(-2, 1)  # k + 2
            e = a1 * c2 - a2 * c1  # e_k = a_{k+1} c_{k+2} - a_{k+2} c_{k+1}
            ok, S, D = well_conditioned(e, w)  # ill-conditioned points pass no gradient
            okf = ok.to(e.dtype).unsqueeze(1)
            iS = okf / S.unsqueeze(1)
            iD = 1.0 / D.unsqueeze(1)
            u, v, zw = uvz[:, 0:1], uvz[:, 1:2], uvz[:, 2:3]
            gz = g_uvz[:, 2:3] * iD * okf
            # dL/de_k = (gu (δ_k0 − u) + gv (δ_k1 − v)) / S + gz (z_k − zw w_k) / D
            guv = F.pad(g_uvz[:, 0:2], (0, 1)) - (g_uvz[:, 0:1] * u + g_uvz[:, 1:2] * v)
            ge = guv * iS + gz * (z - zw * w)
            ge1 = ge.roll(-1, 1)
            ge2 = ge.roll(-2, 1)
            ga = ge2 * c1 - ge1 * c2
            gc = ge1 * a2 - ge2 * a1
            gzk = gz * e
            gw = -(pxc * ga + pyc * gc + zw * gzk)
            grad = torch.stack([ga, gc, gzk, gw], dim=-1)
        if g_db is not None and ctx.grad_db:
            with torch.enable_grad():
                vv = verts.detach().requires_grad_(True)
                _, db = barycentrics_at(vv, px, py, True)
                gdb = torch.autograd.grad(db, vv, g_db)[0]
            grad = gdb if grad is None else grad + gdb
        return grad, None, None, None


def rasterize(
    pos: torch.Tensor,
    tri: torch.Tensor,
    resolution: Sequence[int],
    ranges: Optional[torch.Tensor] = None,
    grad_db: bool = True,
    max_fragments: Optional[int] = None,
    backend: Optional[str] = None,
    precise: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Rasterize triangles (nvdiffrast ``rasterize`` semantics, pure PyTorch, CPU and CUDA).

    Args:
        pos: clip-space vertex positions (docs/conventions.md §3), float32/float64 (half precision is
            computed and returned in float32), ``[B, V, 4]``
            (instanced mode: every image uses all of ``tri``) or ``[V, 4]`` with ``ranges`` (range mode).
        tri: ``[T, 3]`` int32/int64 vertex indices (counter-clockwise from outside; no culling).
        resolution: ``(H, W)`` in pixels.
        ranges: range mode only, ``[B, 2]`` int ``(first triangle, triangle count)`` of each image.
        grad_db: also compute ``rast_db`` (needed for texture mip-level selection).
        max_fragments: fragment budget bounding the visibility pass's memory (None →
            :data:`DEFAULT_MAX_FRAGMENTS`, 2^24; peak memory ≤ ~170 bytes each). The barycentric
            pass after it holds ~250 bytes per pixel (``B·H·W``) for the backward on a GPU, where it
            runs over every pixel without a host sync (on the CPU over the covered pixels only).
        backend: visibility backend (None → the current choice,
            :func:`meshlift.kernels.choose_backend`, default ``"auto"``: Triton
            kernels on CUDA when ``import triton`` works, :mod:`meshlift.kernels.raster_triton`).
        precise: rasterize float32/half positions in float64 and return ``rast`` / ``rast_db`` in float32
            (gradients reach ``pos`` through the cast). For dense meshes of sub-pixel triangles: in float32
            the edge planes of tiny triangles away from the image centre are rounded so that the edge lines
            through a shared vertex miss each other and a pixel centre in the sliver between them is covered
            by no triangle (pinholes; ``tests/test_raster_watertight.py``: 10 of 729 pixels of a hole-free
            sheet of 179k triangles at 256², 136 of 141 isolated empty pixels of a fox view of an 8M-face
            scene mesh; none in float64). Costs float64 arithmetic in every pass (CPU visibility +34 % there).

    Returns:
        ``rast [B, H, W, 4]`` = ``(u, v, z/w, triangle_id + 1)``, all 0 where no triangle covers the pixel
        centre; ``(u, v)`` are the perspective-correct barycentric weights of the triangle's first and
        second vertex (the third is ``1 − u − v``); the id is a float (exact below 2^24 triangles) and in
        range mode indexes the whole ``tri``. ``rast_db [B, H, W, 4]`` = ``(du/dX, du/dY, dv/dX, dv/dY)``
        per pixel (``[B, H, W, 0]`` when ``grad_db`` is False). Gradients flow to ``pos`` through
        ``u, v, z/w`` and ``rast_db``, none through the id.

    Pixel (row i, col j) samples NDC ``(2(j + 0.5)/W − 1, 2(i + 0.5)/H − 1)``; the smallest ``z/w`` wins,
    ties go to the lower triangle index; fragments outside ``−1 ≤ z/w ≤ 1`` are clipped, so triangles
    crossing the near plane are clipped exactly. Triangle edges are inclusive (a pixel centre on an
    edge shared by two triangles goes to the nearer one, then the lower index). Edge-on triangles
    (zero projected area) cover nothing.

    Raises:
        RenderError: bad shapes, dtypes, devices or indices; more than 2^24 triangles with float32 (or half)
            positions (their ids would not be exact in ``rast``).
        OutOfMemoryError: the visibility pass ran out of memory (message names the knobs).
    """
    ranges_c, H, W, tri_c, budget, be = _validate(pos, tri, resolution, ranges, max_fragments, backend)
    cast = precise and pos.dtype != torch.float64  # float32 ids stay exact: _validate refused > 2^24 triangles
    if cast:
        pos = pos.double()
    if hasattr(be, "rasterize"):  # a backend with its own differentiable rasterize (triton)
        try:
            rast, rast_db = be.rasterize(pos, tri, (H, W), ranges_c, grad_db, budget)
        except torch.OutOfMemoryError as e:  # pragma: no cover - depends on the machine
            raise OutOfMemoryError(
                f"rasterize ran out of memory at {H}x{W}, {tri.shape[0]} triangles (backend {be.name}): "
                "lower the batch size or the resolution, or use backend='torch' with a smaller max_fragments"
            ) from e
        return (rast.float(), rast_db.float()) if cast else (rast, rast_db)
    tri_ids = visible_triangles(pos, tri, resolution, ranges, max_fragments, backend)
    if pos.dtype in (torch.float16, torch.bfloat16):
        pos = pos.float()  # half precision cannot resolve sub-pixel barycentrics
    tri64 = tri.to(torch.int64)
    B, H, W = tri_ids.shape
    dtype, dev = pos.dtype, pos.device
    flat = tri_ids.reshape(-1)
    covered = flat >= 0
    if tri64.shape[0] == 0:  # nothing to draw
        return pos.new_zeros(B, H, W, 4), pos.new_zeros(B, H, W, 4 if grad_db else 0)
    if not dense_path(dev):
        # CPU: compute at the covered pixels only (data-dependent shapes cost nothing here)
        cov = covered.nonzero().squeeze(1)
        tid = flat.index_select(0, cov)
        rows = (cov // W) % H
        cols = cov % W
        vidx = tri64.index_select(0, tid)
        if ranges is None and B > 1:
            vidx = vidx + ((cov // (H * W)) * pos.shape[1]).unsqueeze(1)
        px = (2 * cols + 1).to(dtype) / W - 1
        py = (2 * rows + 1).to(dtype) / H - 1
    else:
        # GPU: every pixel, no host sync; empty pixels evaluate a harmless dummy triangle, masked below
        cov = None
        tid = flat.clamp(min=0)
        vidx = gather_rows(tri64, tid)
        if ranges is None and B > 1:
            vidx = (vidx.view(B, H * W, 3) + (torch.arange(B, device=dev) * pos.shape[1]).view(B, 1, 1)).view(-1, 3)
        xtab, ytab = pixel_centre_tables(H, W, dtype, dev)
        px = xtab.expand(B, H, W).reshape(-1)
        py = ytab.view(1, H, 1).expand(B, H, W).reshape(-1)
    verts = gather_rows(pos.reshape(-1, 4), vidx.reshape(-1)).view(-1, 3, 4)
    if cov is None:
        verts = torch.where(covered.view(-1, 1, 1), verts, _dummy_triangle(dtype, dev))
    if grad_db:
        uvz, db = barycentrics_at(verts, px, py, True)  # autograd through rast_db as well
    else:
        uvz, db = _Barycentrics.apply(verts, px, py, False)  # one autograd node, analytic backward
    vals = torch.cat([uvz, (tid + 1).to(dtype).unsqueeze(1)], dim=1)
    if cov is None:
        rast = torch.where(covered.unsqueeze(1), vals, 0.0).view(B, H, W, 4)
    else:
        rast = pos.new_zeros(B * H * W, 4).index_put((cov,), vals).view(B, H, W, 4)
    if grad_db:
        scale = torch.tensor([2.0 / W, 2.0 / H, 2.0 / W, 2.0 / H], dtype=dtype, device=dev)
        if cov is None:
            rast_db = torch.where(covered.unsqueeze(1), db * scale, 0.0).view(B, H, W, 4)
        else:
            rast_db = pos.new_zeros(B * H * W, 4).index_put((cov,), db * scale).view(B, H, W, 4)
    else:
        rast_db = pos.new_zeros(B, H, W, 0)
    return (rast.float(), rast_db.float()) if cast else (rast, rast_db)


_DUMMY = {}


def _dummy_triangle(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``[3, 4]`` clip-space triangle with constant ``w = 1`` and unit area: finite barycentrics (and
    gradients) at every point, used in place of the triangle at empty pixels of the dense GPU path."""
    k = (dtype, device)
    if k not in _DUMMY:
        _DUMMY[k] = torch.tensor([[0.0, 0, 0, 1], [1, 0, 0, 1], [0, 1, 0, 1]], dtype=dtype, device=device)
    return _DUMMY[k]
