"""``texture``: differentiable texture sampling with mipmaps and cube maps (nvdiffrast semantics).

Filtering follows nvdiffrast (Laine et al. 2020, "Modular Primitives for High-Performance
Differentiable Rendering", Sec. 3.3): bilinear taps at texel centres ``uv = ((c + 0.5)/W, (r + 0.5)/H)``
(docs/conventions.md §7: (0, 0) is the top-left corner of the image, v points down); mip levels by 2×2
box filtering (area averaging for odd sizes); trilinear filtering between mip levels with the level
``0.5·log2(λ_max) + bias``, ``λ_max`` the larger eigenvalue of ``JᵀJ`` for the texel-space Jacobian
``J = ∂(u·W, v·H)/∂(X, Y)`` (the footprint ellipse's major axis). Cube maps: direction → face and face
coordinates by the OpenGL rule (docs/conventions.md §8); bilinear taps crossing a face edge continue on
the neighbouring face. Gradients reach ``tex`` (and every mip level),
``uv``, ``uv_da`` and ``mip_level_bias``.
"""

from __future__ import annotations

import functools
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from meshlift.errors import RenderError
from meshlift.render._checks import check_float

FILTER_MODES = ("auto", "nearest", "linear", "linear-mipmap-nearest", "linear-mipmap-linear")
BOUNDARY_MODES = ("wrap", "clamp", "zero", "cube")

#: Floor of λ_max before the log, so zero derivatives give level 0 (and finite gradients).
_LAMBDA_FLOOR = 1e-20


def texture_construct_mip(
    tex: torch.Tensor, max_mip_level: Optional[int] = None, cube: bool = False
) -> List[torch.Tensor]:
    """Build a mip chain ``[tex, level1, level2, ...]`` by 2×2 box filtering (differentiable).

    Args:
        tex: ``[B, H, W, C]`` (or ``[B, 6, R, R, C]`` with ``cube=True``).
        max_mip_level: stop after this many downsamplings (None: until 1×1).
        cube: whether ``tex`` is a cube map.

    Returns:
        list of tensors, level ``l`` of size ``max(1, H // 2^l) × max(1, W // 2^l)``; odd sizes are
        area-averaged (``adaptive_avg_pool2d``).
    """
    levels = [tex]
    cur = tex
    lvl = 0
    while True:
        h, w = cur.shape[-3], cur.shape[-2]
        if (h == 1 and w == 1) or (max_mip_level is not None and lvl >= max_mip_level):
            break
        nh, nw = max(1, h // 2), max(1, w // 2)
        lead = cur.shape[:-3]
        C = cur.shape[-1]
        x = cur.reshape(-1, h, w, C).permute(0, 3, 1, 2)
        x = F.adaptive_avg_pool2d(x, (nh, nw)).permute(0, 2, 3, 1)
        cur = x.reshape(*lead, nh, nw, C)
        levels.append(cur)
        lvl += 1
    return levels


def cube_to_face_uv(d: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Direction ``[..., 3]`` → ``(face [...] int64, s [...], t [...])`` with s, t in [0, 1].

    OpenGL cube-map rule (docs/conventions.md §8), faces ordered (+x, −x, +y, −y, +z, −z); ``s`` runs
    along face columns, ``t`` along face rows (row 0 on top). Major axis → (sc, tc):
    +x: (−z, −y), −x: (+z, −y), +y: (+x, +z), −y: (+x, −z), +z: (+x, −y), −z: (−x, −y);
    ``s = (sc/|ma| + 1)/2``, ``t = (tc/|ma| + 1)/2``.
    """
    x, y, z = d.unbind(-1)
    ax, ay, az = x.abs(), y.abs(), z.abs()
    is_x = (ax >= ay) & (ax >= az)
    is_y = ~is_x & (ay >= az)
    face = torch.where(is_x, (x < 0).long(), torch.where(is_y, 2 + (y < 0).long(), 4 + (z < 0).long()))
    ma = torch.where(is_x, ax, torch.where(is_y, ay, az)).clamp_min(1e-20)
    sc = torch.where(is_x, torch.where(x >= 0, -z, z), torch.where(is_y, x, torch.where(z >= 0, x, -x)))
    tc = torch.where(is_x, -y, torch.where(is_y, torch.where(y >= 0, z, -z), -y))
    return face, (sc / ma + 1) * 0.5, (tc / ma + 1) * 0.5


def face_uv_to_dir(face: torch.Tensor, s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`cube_to_face_uv`: ``(face, s, t)`` → (non-unit) direction ``[..., 3]``.

    ``s, t`` may lie outside [0, 1] (points beyond the face's edge, used to find seam neighbours).
    """
    sc = 2 * s - 1
    tc = 2 * t - 1
    one = torch.ones_like(sc)
    cand = torch.stack(
        [
            torch.stack([one, -tc, -sc], -1),
            torch.stack([-one, -tc, sc], -1),
            torch.stack([sc, one, tc], -1),
            torch.stack([sc, -one, -tc], -1),
            torch.stack([sc, -tc, one], -1),
            torch.stack([-sc, -tc, -one], -1),
        ],
        0,
    )  # [6, ..., 3]
    idx = face.unsqueeze(0).unsqueeze(-1).expand((1,) + tuple(face.shape) + (3,))
    return torch.gather(cand, 0, idx).squeeze(0)


def _sample_cube(flat, base, R, face, s, t, linear):
    """Filter a cube map level (faces of ``R × R`` texels from ``base``) at face coords ``(s, t)``.

    Taps that fall off the face are re-projected through the direction of their texel centre onto the
    neighbouring face (so bilinear filtering is continuous across seams, as in nvdiffrast).
    """
    Rf = R.to(s.dtype)
    if linear:
        x = s * Rf - 0.5
        y = t * Rf - 0.5
        x0 = torch.floor(x)
        y0 = torch.floor(y)
        fx, fy = x - x0, y - y0
        taps = [(x0, y0, (1 - fx) * (1 - fy)), (x0 + 1, y0, fx * (1 - fy)), (x0, y0 + 1, (1 - fx) * fy), (x0 + 1, y0 + 1, fx * fy)]
    else:
        taps = [(torch.floor(s * Rf), torch.floor(t * Rf), torch.ones_like(s))]
    idx, wts = [], []
    for xf, yf, w in taps:
        xf, yf = xf.detach(), yf.detach()
        off = (xf < 0) | (xf >= Rf) | (yf < 0) | (yf >= Rf)
        d = face_uv_to_dir(face, (xf + 0.5) / Rf, (yf + 0.5) / Rf)
        f2, s2, t2 = cube_to_face_uv(d)
        ix2 = torch.minimum(torch.floor(s2 * Rf).long().clamp(min=0), R - 1)
        iy2 = torch.minimum(torch.floor(t2 * Rf).long().clamp(min=0), R - 1)
        ix = torch.minimum(xf.long().clamp(min=0), R - 1)
        iy = torch.minimum(yf.long().clamp(min=0), R - 1)
        ff = torch.where(off, f2, face)
        ix = torch.where(off, ix2, ix)
        iy = torch.where(off, iy2, iy)
        idx.append(base + (ff * R + iy) * R + ix)
        wts.append(w)
    k = len(idx)
    vals = flat.index_select(0, torch.stack(idx, 1).reshape(-1)).view(-1, k, flat.shape[-1])
    return (vals * torch.stack(wts, 1).unsqueeze(-1).to(vals.dtype)).sum(1)


def _mip_level(uv_da, mip_level_bias, W0, H0, n_levels, dtype):
    """Per-pixel continuous mip level, ``[N]``, clamped to [0, n_levels − 1]."""
    level = None
    if uv_da is not None:
        a = uv_da[:, 0] * W0  # du/dX in texels
        b = uv_da[:, 1] * W0  # du/dY
        c = uv_da[:, 2] * H0  # dv/dX
        d = uv_da[:, 3] * H0  # dv/dY
        A = a * a + c * c
        Cc = b * b + d * d
        Bx = a * b + c * d
        half = 0.5 * (A - Cc)
        lam = 0.5 * (A + Cc) + torch.sqrt(half * half + Bx * Bx + _LAMBDA_FLOOR)
        level = 0.5 * torch.log2(lam.clamp_min(_LAMBDA_FLOOR))
    if mip_level_bias is not None:
        level = mip_level_bias if level is None else level + mip_level_bias
    return level.to(dtype).clamp(0, n_levels - 1)


def _taps(coord, size, boundary, linear):
    """Integer taps and weights along one axis. ``coord`` in [0, 1] units, ``size`` int tensor."""
    sz = size.to(coord.dtype)
    if linear:
        x = coord * sz - 0.5
        x0f = torch.floor(x)
        f = x - x0f
        x0 = x0f.long()
        idx = [x0, x0 + 1]
        wts = [1 - f, f]
    else:
        idx = [torch.floor(coord * sz).long()]
        wts = [torch.ones_like(coord)]
    out_i, out_w = [], []
    for i, w in zip(idx, wts):
        if boundary == "wrap":
            i = torch.remainder(i, size)
        elif boundary == "zero":
            valid = (i >= 0) & (i < size)
            w = w * valid.to(w.dtype)
            i = torch.minimum(i.clamp(min=0), size - 1)
        else:  # clamp, cube (within the face)
            i = torch.minimum(i.clamp(min=0), size - 1)
        out_i.append(i)
        out_w.append(w)
    return out_i, out_w


def _sample(flat, base, hs, ws, s, t, boundary, linear):
    """Filter ``flat [M, C]`` at (s, t) of images starting at ``base`` with sizes ``hs × ws``; ``[N, C]``."""
    xi, xw = _taps(s, ws, boundary, linear)
    yi, yw = _taps(t, hs, boundary, linear)
    idx, wts = [], []
    for yy, wy in zip(yi, yw):
        for xx, wx in zip(xi, xw):
            idx.append(base + yy * ws + xx)
            wts.append(wy * wx)
    k = len(idx)
    vals = flat.index_select(0, torch.stack(idx, 1).reshape(-1)).view(-1, k, flat.shape[-1])
    return (vals * torch.stack(wts, 1).unsqueeze(-1).to(vals.dtype)).sum(1)


def texture(
    tex: torch.Tensor,
    uv: torch.Tensor,
    uv_da: Optional[torch.Tensor] = None,
    mip_level_bias: Optional[torch.Tensor] = None,
    mip: Optional[Sequence[torch.Tensor]] = None,
    filter_mode: str = "auto",
    boundary_mode: str = "wrap",
    max_mip_level: Optional[int] = None,
) -> torch.Tensor:
    """Sample a texture at per-pixel coordinates (nvdiffrast ``texture`` semantics).

    Args:
        tex: ``[B, Ht, Wt, C]`` (or ``[1, ...]``, shared) float texture; cube maps ``[B, 6, R, R, C]``
            with ``boundary_mode='cube'``.
        uv: ``[B, H, W, 2]`` texture coordinates (docs/conventions.md §7), or ``[B, H, W, 3]`` directions
            for cube maps (need not be unit length).
        uv_da: ``[B, H, W, 4]`` = ``(du/dX, du/dY, dv/dX, dv/dY)`` in uv units per pixel (e.g. from
            ``interpolate(..., diff_attrs='all')``), for mip-level selection (2D textures only).
        mip_level_bias: ``[B, H, W]`` added to the level (or the level itself without ``uv_da``).
        mip: precomputed chain from :func:`texture_construct_mip` (default: built here from ``tex``).
        filter_mode: ``'auto'`` (trilinear when ``uv_da`` or ``mip_level_bias`` is given, else
            bilinear), ``'nearest'``, ``'linear'``, ``'linear-mipmap-nearest'``, ``'linear-mipmap-linear'``.
        boundary_mode: ``'wrap'``, ``'clamp'``, ``'zero'`` (texels outside are 0) or ``'cube'``.
        max_mip_level: most mip levels to build/use (None: down to 1×1).

    Returns:
        ``[B, H, W, C]`` filtered texture values, in ``tex``'s units, differentiable w.r.t. ``tex``,
        ``uv`` (except nearest), ``uv_da`` and ``mip_level_bias``.

    Raises:
        RenderError: bad shapes or modes, mipmapping without ``uv_da``/``mip_level_bias``.

    Cube maps: bilinear taps that fall off a face are re-projected onto the neighbouring face through
    their texel centre's direction, so filtering is continuous across seams.
    """
    check_float("tex", tex)
    check_float("uv", uv)
    if filter_mode not in FILTER_MODES:
        raise RenderError(f"filter_mode must be one of {FILTER_MODES}, got {filter_mode!r}")
    if boundary_mode not in BOUNDARY_MODES:
        raise RenderError(f"boundary_mode must be one of {BOUNDARY_MODES}, got {boundary_mode!r}")
    cube = boundary_mode == "cube"
    if cube:
        if tex.ndim != 5 or tex.shape[1] != 6 or tex.shape[2] != tex.shape[3]:
            raise RenderError(f"cube-map tex must be [B, 6, R, R, C], got {tuple(tex.shape)}")
        if uv.ndim != 4 or uv.shape[-1] != 3:
            raise RenderError(f"with boundary_mode='cube', uv must be directions [B, H, W, 3], got {tuple(uv.shape)}")
        if uv_da is not None:
            raise RenderError("cube maps select mip levels from mip_level_bias only; pass uv_da=None")
    else:
        if tex.ndim != 4:
            raise RenderError(f"tex must be [B, Ht, Wt, C] (cube maps need boundary_mode='cube'), got {tuple(tex.shape)}")
        if uv.ndim != 4 or uv.shape[-1] != 2:
            raise RenderError(f"uv must be [B, H, W, 2], got {tuple(uv.shape)}")
    B, H, W, _ = uv.shape
    if tex.shape[0] not in (1, B):
        raise RenderError(f"tex batch {tex.shape[0]} must be 1 or match uv's batch {B}")
    if uv_da is not None and (uv_da.shape != (B, H, W, 4)):
        raise RenderError(f"uv_da must be [B, H, W, 4] = {(B, H, W, 4)}, got {tuple(uv_da.shape)}")
    if mip_level_bias is not None:
        if mip_level_bias.shape == (B, H, W, 1):
            mip_level_bias = mip_level_bias[..., 0]
        if mip_level_bias.shape != (B, H, W):
            raise RenderError(f"mip_level_bias must be [B, H, W], got {tuple(mip_level_bias.shape)}")
    if filter_mode == "auto":
        filter_mode = "linear-mipmap-linear" if (uv_da is not None or mip_level_bias is not None) else "linear"
    mipmapped = filter_mode.startswith("linear-mipmap")
    if mipmapped and uv_da is None and mip_level_bias is None:
        raise RenderError(f"filter_mode={filter_mode!r} needs uv_da or mip_level_bias to choose mip levels")
    if max_mip_level is not None and max_mip_level < 0:
        raise RenderError(f"max_mip_level must be >= 0, got {max_mip_level}")

    dtype = torch.promote_types(tex.dtype, uv.dtype)
    dev = uv.device
    if mipmapped:
        levels = list(mip) if mip is not None else texture_construct_mip(tex, max_mip_level, cube)
        if max_mip_level is not None:
            levels = levels[: max_mip_level + 1]
    else:
        levels = [tex]
    Bt = tex.shape[0]
    C = tex.shape[-1]
    # one flat buffer: per image, the levels one after another (cube: 6 faces per level)
    per_img = [lv.reshape(Bt, -1, C) for lv in levels]
    sizes = [p.shape[1] for p in per_img]
    flat = torch.cat(per_img, 1).reshape(-1, C).to(dtype)
    total = sum(sizes)
    offs = torch.tensor([0] + sizes[:-1], device=dev).cumsum(0)
    hs_l = torch.tensor([lv.shape[-3] for lv in levels], device=dev)
    ws_l = torch.tensor([lv.shape[-2] for lv in levels], device=dev)

    N = B * H * W
    uvf = uv.reshape(N, -1).to(dtype)
    img = torch.arange(B, device=dev).repeat_interleave(H * W) if Bt > 1 else torch.zeros(N, dtype=torch.long, device=dev)
    img_base = img * total
    if cube:
        face, s, t = cube_to_face_uv(uvf)
    else:
        face = None
        s, t = uvf[:, 0], uvf[:, 1]

    def at_level(li: torch.Tensor, linear: bool) -> torch.Tensor:
        hs, ws = hs_l[li], ws_l[li]
        base = img_base + offs[li]
        if cube:
            return _sample_cube(flat, base, hs, face, s, t, linear)
        return _sample(flat, base, hs, ws, s, t, boundary_mode, linear)

    if not mipmapped:
        zero = torch.zeros(N, dtype=torch.long, device=dev)
        out = at_level(zero, filter_mode == "linear")
    else:
        level = _mip_level(
            None if uv_da is None else uv_da.reshape(N, 4).to(dtype),
            None if mip_level_bias is None else mip_level_bias.reshape(N).to(dtype),
            levels[0].shape[-2],
            levels[0].shape[-3],
            len(levels),
            dtype,
        )
        if filter_mode == "linear-mipmap-nearest":
            out = at_level(torch.floor(level.detach() + 0.5).long().clamp(max=len(levels) - 1), True)
        else:
            l0 = torch.floor(level.detach()).long()
            l1 = (l0 + 1).clamp(max=len(levels) - 1)
            fr = (level - l0.to(dtype)).unsqueeze(1)
            out = at_level(l0, True) * (1 - fr) + at_level(l1, True) * fr
    return out.view(B, H, W, C)


class MipStack(NamedTuple):
    """A 2D texture's mip chain flattened for row lookups (:func:`texture_mip_stack`, :func:`texture_rows`).

    Fields: ``flat [M, C]`` the texels of every level, row-major, one level after another (level ``l``
    starts at row ``offsets[l]`` and is ``heights[l] × widths[l]``); ``offsets``, ``heights``, ``widths``
    ``[L]`` int64 on ``flat``'s device; ``base_hw`` ``(H₀, W₀)`` of level 0 in texels.
    """

    flat: torch.Tensor
    offsets: torch.Tensor
    heights: torch.Tensor
    widths: torch.Tensor
    base_hw: Tuple[int, int]


@functools.lru_cache(maxsize=64)
def _level_tables(shapes: Tuple[Tuple[int, int], ...], device: str) -> Tuple[torch.Tensor, ...]:
    """``(offsets, heights, widths)`` of a chain with level sizes ``shapes`` (cached: no copy per call)."""
    sizes = [h * w for h, w in shapes]
    offs = [0]
    for n in sizes[:-1]:
        offs.append(offs[-1] + n)
    mk = functools.partial(torch.tensor, dtype=torch.int64, device=device)
    return mk(offs), mk([h for h, _ in shapes]), mk([w for _, w in shapes])


def _mip_shapes(h: int, w: int, max_mip_level: Optional[int]) -> Tuple[Tuple[int, int], ...]:
    """Level sizes ``((H₀, W₀), (H₁, W₁), ...)`` of :func:`texture_construct_mip`'s chain (its stop rule)."""
    shapes = [(h, w)]
    while not ((h == 1 and w == 1) or (max_mip_level is not None and len(shapes) - 1 >= max_mip_level)):
        h, w = max(1, h // 2), max(1, w // 2)
        shapes.append((h, w))
    return tuple(shapes)


def _pool_into(x: torch.Tensor, out: torch.Tensor) -> None:
    """``F.adaptive_avg_pool2d(x, out.shape[-2:])`` (``x [1, C, h, w]``) written into the view ``out``.

    The same kernels as the functional form (whose 1×1 case is ``mean``), so the values are identical; if
    the out= kernel re-laid ``out``'s strides (it follows ``x``'s memory format), the values are moved back.
    """
    ptr, strides = out.data_ptr(), out.stride()
    res = out.as_strided(out.shape, out.stride())  # a second handle: resize_ inside out= may restride it
    if tuple(out.shape[-2:]) == (1, 1):
        torch.mean(x, (-1, -2), keepdim=True, out=res)
    else:
        torch._C._nn.adaptive_avg_pool2d(x, tuple(out.shape[-2:]), out=res)
    if res.data_ptr() != ptr or res.stride() != strides:
        out.copy_(res.clone())


class _MipStackFn(torch.autograd.Function):
    """The flat mip chain of channel-concatenated maps as one autograd node (:func:`texture_mip_stack`).

    Forward (no autograd recording): level 0 is the maps concatenated along channels, written into rows
    ``[0, H₀W₀)`` of a preallocated ``flat [Σ H_l W_l, C]``; level ``l + 1`` is ``adaptive_avg_pool2d`` of
    level ``l`` (2×2 box, area averaging at odd sizes), written straight into its rows. Backward: the adjoint
    of that chain, coarse to fine, ``acc_l = g_l + pool_lᵀ(acc_{l+1})`` with ``pool_lᵀ`` the pooling's own
    backward kernel (``mean``'s for a 1×1 level), then ``acc_0``'s channel slices for the maps.
    """

    @staticmethod
    def forward(ctx, shapes, *maps):
        dtype = functools.reduce(torch.promote_types, [t.dtype for t in maps])
        ts = [(t if t.ndim == 4 else t[None]).to(dtype) for t in maps]
        C = sum(t.shape[-1] for t in ts)
        sizes = [h * w for h, w in shapes]
        offs = [sum(sizes[:i]) for i in range(len(sizes))]
        flat = torch.empty(sum(sizes), C, dtype=dtype, device=ts[0].device)
        H, W = shapes[0]
        lvl0 = flat[: sizes[0]].view(1, H, W, C)
        if len(ts) == 1:
            lvl0.copy_(ts[0])
        else:
            torch.cat(ts, -1, out=lvl0)
        for l in range(1, len(shapes)):
            (h, w), (nh, nw) = shapes[l - 1], shapes[l]
            x = flat[offs[l - 1]: offs[l - 1] + sizes[l - 1]].view(1, h, w, C).permute(0, 3, 1, 2)
            _pool_into(x, flat[offs[l]: offs[l] + sizes[l]].view(1, nh, nw, C).permute(0, 3, 1, 2))
        ctx.shapes, ctx.offs, ctx.sizes = shapes, offs, sizes
        ctx.map_meta = [(t.shape, t.dtype, t.shape[-1]) for t in maps]
        return flat

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        shapes, offs, sizes = ctx.shapes, ctx.offs, ctx.sizes
        C = g.shape[1]
        acc = None  # [1, C, h, w] gradient of the current level (fine-ward accumulation)
        for l in range(len(shapes) - 1, -1, -1):
            h, w = shapes[l]
            gl = g[offs[l]: offs[l] + sizes[l]].reshape(1, h, w, C).permute(0, 3, 1, 2)
            if acc is None:
                acc = gl
                continue
            nh, nw = shapes[l + 1]
            if (nh, nw) == (1, 1):
                up = acc.expand(1, C, h, w) / (h * w)
            else:
                like = torch.empty(1, h, w, C, dtype=g.dtype, device=g.device).permute(0, 3, 1, 2)
                up = torch.ops.aten._adaptive_avg_pool2d_backward(acc, like)
            acc = gl + up
        g0 = acc.permute(0, 2, 3, 1)  # [1, H, W, C]
        grads, c0 = [], 0
        for i, (shape, dtype, ci) in enumerate(ctx.map_meta):
            gi = None
            if ctx.needs_input_grad[i + 1]:
                gi = g0[..., c0: c0 + ci].reshape(shape).to(dtype)
            grads.append(gi)
            c0 += ci
        return (None, *grads)


def _check_maps(tex) -> List[torch.Tensor]:
    maps = list(tex) if isinstance(tex, (list, tuple)) else [tex]
    if not maps:
        raise RenderError("texture_mip_stack: tex is an empty list; pass at least one [Ht, Wt, C] texture")
    for i, t in enumerate(maps):
        check_float(f"tex[{i}]" if len(maps) > 1 else "tex", t)
        if not (t.ndim == 3 or (t.ndim == 4 and t.shape[0] == 1)):
            raise RenderError(f"texture_mip_stack: tex must be [Ht, Wt, C] or [1, Ht, Wt, C], got {tuple(t.shape)}")
        if t.numel() == 0:
            raise RenderError(f"texture_mip_stack: tex has no texels, shape {tuple(t.shape)}; pass a non-empty map")
        if tuple(t.shape[-3:-1]) != tuple(maps[0].shape[-3:-1]) or t.device != maps[0].device:
            raise RenderError(
                f"texture_mip_stack: the maps must share one size and device; map {i} is "
                f"{tuple(t.shape[-3:-1])} on {t.device}, map 0 {tuple(maps[0].shape[-3:-1])} on {maps[0].device}")
    return maps


def texture_mip_stack(tex, max_mip_level: Optional[int] = None) -> MipStack:
    """Build the mip chain of ``tex`` (:func:`texture_construct_mip`) as one flat :class:`MipStack`.

    One autograd node (``_MipStackFn``: the levels computed without recording, each written into its rows
    of ``flat``; the backward is the chain's adjoint) in place of ~4 nodes per level; the values are
    those of :func:`texture_mip_stack_reference` (its twin: the same kernels in the same order).

    Args:
        tex: ``[Ht, Wt, C]`` or ``[1, Ht, Wt, C]`` float texture (one image; shared by every lookup), or a
            list of such maps of one size, concatenated along channels (e.g. kd | ks | normal).
        max_mip_level: most downsamplings (None: down to 1×1).

    Returns:
        :class:`MipStack` (``flat`` in the maps' promoted dtype), differentiable with respect to every map
        through ``flat`` (first-order gradients only).

    Raises:
        RenderError: a map not a non-empty float ``[Ht, Wt, C]`` / ``[1, Ht, Wt, C]`` tensor; maps of several
            sizes or devices; an empty list.
    """
    maps = _check_maps(tex)
    H, W = int(maps[0].shape[-3]), int(maps[0].shape[-2])
    shapes = _mip_shapes(H, W, max_mip_level)
    flat = _MipStackFn.apply(shapes, *maps)
    offs, hs, ws = _level_tables(shapes, str(flat.device))
    return MipStack(flat, offs, hs, ws, shapes[0])


def texture_mip_stack_reference(tex, max_mip_level: Optional[int] = None) -> MipStack:
    """Reference twin of :func:`texture_mip_stack`: autograd-recorded ops (``torch.cat`` of the maps,
    :func:`texture_construct_mip`, ``torch.cat`` of the levels). Same arguments, returns and errors."""
    maps = _check_maps(tex)
    dtype = functools.reduce(torch.promote_types, [t.dtype for t in maps])
    ts = [(t if t.ndim == 4 else t[None]).to(dtype) for t in maps]
    t = ts[0] if len(ts) == 1 else torch.cat(ts, -1)
    levels = texture_construct_mip(t, max_mip_level)
    C = t.shape[-1]
    flat = torch.cat([lv.reshape(-1, C) for lv in levels], 0)
    shapes = tuple((int(lv.shape[1]), int(lv.shape[2])) for lv in levels)
    offs, hs, ws = _level_tables(shapes, str(t.device))
    return MipStack(flat, offs, hs, ws, shapes[0])


def texture_rows(
    stack: MipStack,
    uv: torch.Tensor,
    uv_da: torch.Tensor,
    boundary_mode: str = "wrap",
    channels: Optional[int] = None,
    backend: Optional[str] = None,
) -> torch.Tensor:
    """Trilinear mip-mapped lookup of a :class:`MipStack` at ``N`` points (e.g. the covered pixels).

    The values are those of ``texture(tex, uv, uv_da, filter_mode='linear-mipmap-linear')`` at the same
    points (nvdiffrast semantics, Laine et al. 2020, Sec. 3.3; the level from the footprint ellipse's major
    axis, module docstring), without the image layout: pass only the pixels that need a value.

    Args:
        stack: from :func:`texture_mip_stack`.
        uv: ``[N, 2]`` texture coordinates (docs/conventions.md §7).
        uv_da: ``[N, 4]`` ``(du/dX, du/dY, dv/dX, dv/dY)`` in uv units per pixel.
        boundary_mode: ``'wrap'`` or ``'clamp'``.
        channels: sample only the first ``channels`` columns of ``stack.flat`` (None: all).
        backend: ``'auto'`` / ``'torch'`` / ``'triton'`` / None (the current choice, else auto):
            :func:`meshlift.kernels.choose_backend`; the Triton kernel is
            :mod:`meshlift.kernels.texture_triton` (float32, CUDA), the torch path is its reference twin.

    Returns:
        ``[N, channels]``, in the texture's units, differentiable w.r.t. ``stack.flat``, ``uv`` and ``uv_da``.

    Raises:
        RenderError: bad shapes, dtypes or modes.
    """
    from meshlift.kernels import choose_backend

    flat = stack.flat
    C = flat.shape[1] if channels is None else int(channels)
    if not 1 <= C <= flat.shape[1]:
        raise RenderError(f"texture_rows: channels must be in 1..{flat.shape[1]} (the stack's), got {channels}")
    if boundary_mode not in ("wrap", "clamp"):
        raise RenderError(f"texture_rows: boundary_mode must be 'wrap' or 'clamp', got {boundary_mode!r}")
    check_float("uv", uv)
    check_float("uv_da", uv_da)
    if uv.ndim != 2 or uv.shape[1] != 2 or uv_da.shape != (uv.shape[0], 4):
        raise RenderError(f"texture_rows: uv must be [N, 2] and uv_da [N, 4], got {tuple(uv.shape)} and "
                          f"{tuple(uv_da.shape)}")
    dtype = torch.promote_types(flat.dtype, uv.dtype)
    if backend != "torch" and dtype == torch.float32 and uv_da.dtype == torch.float32:
        if choose_backend("shading", backend, uv.device, dtype) == "triton":
            from meshlift.kernels.texture_triton import texture_rows_triton

            return texture_rows_triton(flat, uv, uv_da, stack.offsets, stack.heights, stack.widths, stack.base_hw,
                                       C, boundary_mode == "wrap")
    if C < flat.shape[1]:
        flat = flat[:, :C]
    flat = flat.to(dtype)
    uv = uv.to(dtype)
    n_levels = stack.offsets.shape[0]
    level = _mip_level(uv_da.to(dtype), None, stack.base_hw[1], stack.base_hw[0], n_levels, dtype)
    s, t = uv[:, 0], uv[:, 1]

    def at_level(li: torch.Tensor) -> torch.Tensor:
        return _sample(flat, stack.offsets[li], stack.heights[li], stack.widths[li], s, t, boundary_mode, True)

    l0 = torch.floor(level.detach()).long()
    l1 = (l0 + 1).clamp(max=n_levels - 1)
    fr = (level - l0.to(dtype)).unsqueeze(1)
    return at_level(l0) * (1 - fr) + at_level(l1) * fr


__all__ = ["texture", "texture_rows", "texture_mip_stack", "texture_mip_stack_reference", "MipStack",
           "texture_construct_mip", "cube_to_face_uv", "face_uv_to_dir", "FILTER_MODES", "BOUNDARY_MODES"]
