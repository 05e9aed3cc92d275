"""Cube maps and lat-long maps: texel directions, solid angles, seamless bilinear and mip-mapped sampling.

Conventions (docs/conventions.md §8): a cube map is ``[6, R, R, C]`` in OpenGL face order
(+x, -x, +y, -y, +z, -z). Texel (row i, column j) of face s has face coordinates
``x = 2 (j + 0.5) / R - 1`` (columns), ``y = 2 (i + 0.5) / R - 1`` (rows) and the (unnormalised) direction

    +x: ( 1, -y, -x)   -x: (-1, -y,  x)   +y: ( x,  1,  y)
    -y: ( x, -1, -y)   +z: ( x, -y,  1)   -z: (-x, -y, -1)

which is the OpenGL cube-map selection rule (OpenGL 4.6 spec, Table 8.19) that nvdiffrast's
``texture(..., boundary_mode='cube')`` and nvdiffrec use. A lat-long map ``[H, 2H, C]`` maps pixel (i, j) to
``(sin θ sin φ, cos θ, -sin θ cos φ)`` with ``θ = π (i + 0.5) / H`` and ``φ = 2π (j + 0.5) / W - π``.

Sampling here is self-contained (no dependency on :mod:`meshlift.render`): bilinear filtering within a face,
made seamless by padding every face with a one-texel border resampled from its neighbours (so filtering
crosses face edges like nvdiffrast's cube mode, up to the corner texels), and linear interpolation between
mip levels. Everything is differentiable with respect to the map (and piecewise-linearly to the directions).
"""

from __future__ import annotations

import functools
import math

import torch

from meshlift.errors import RenderError

__all__ = [
    "cube_to_dir",
    "cube_texel_directions",
    "texel_solid_angles",
    "dir_to_cube",
    "sample_cube",
    "sample_cube_mip",
    "sample_cube_mip_reference",
    "latlong_directions",
    "dir_to_latlong_uv",
    "sample_latlong",
    "latlong_to_cube",
    "cube_to_latlong",
    "avg_pool_cube",
]


def _check_cube(cube: torch.Tensor, name: str) -> None:
    if not isinstance(cube, torch.Tensor) or cube.ndim != 4 or cube.shape[0] != 6 or cube.shape[1] != cube.shape[2]:
        shape = tuple(cube.shape) if isinstance(cube, torch.Tensor) else type(cube).__name__
        raise RenderError(f"{name}: expected a cube map [6, R, R, C], got {shape}")


def cube_to_dir(face: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Unnormalised direction of face coordinates ``(x, y)`` (columns, rows; in [-1, 1] on the face).

    Args:
        face: 0..5 in the order (+x, -x, +y, -y, +z, -z).
        x: ``[...]`` column coordinate.
        y: ``[...]`` row coordinate.

    Returns:
        ``[..., 3]`` direction (major-axis component ±1).
    """
    one = torch.ones_like(x)
    if face == 0:
        d = (one, -y, -x)
    elif face == 1:
        d = (-one, -y, x)
    elif face == 2:
        d = (x, one, y)
    elif face == 3:
        d = (x, -one, -y)
    elif face == 4:
        d = (x, -y, one)
    elif face == 5:
        d = (-x, -y, -one)
    else:
        raise RenderError(f"cube_to_dir(face): must be 0..5, got {face}")
    return torch.stack(d, dim=-1)


def _face_coords(res: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    c = (torch.arange(res, dtype=dtype, device=device) + 0.5) * (2.0 / res) - 1.0
    y, x = torch.meshgrid(c, c, indexing="ij")
    return x, y


def cube_texel_directions(
    res: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """Unit directions of every texel centre: ``[6, R, R, 3]``."""
    x, y = _face_coords(res, dtype, device)
    d = torch.stack([cube_to_dir(s, x, y) for s in range(6)])
    return d / d.norm(dim=-1, keepdim=True)


def texel_solid_angles(
    res: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """Exact solid angle of every cube texel, ``[6, R, R]`` (sums to 4π).

    The solid angle of the face rectangle [0, x] x [0, y] at unit distance is
    ``atan2(x y, sqrt(x^2 + y^2 + 1))``; a texel's is the inclusion-exclusion of its four corners.
    """
    e = torch.arange(res + 1, dtype=torch.float64, device=device) * (2.0 / res) - 1.0
    y, x = torch.meshgrid(e, e, indexing="ij")
    a = torch.atan2(x * y, torch.sqrt(x * x + y * y + 1.0))
    w = a[1:, 1:] - a[:-1, 1:] - a[1:, :-1] + a[:-1, :-1]
    return w.abs().to(dtype)[None].expand(6, res, res).contiguous()


def dir_to_cube(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Face index and face coordinates of directions (inverse of :func:`cube_to_dir`).

    Args:
        d: ``[..., 3]`` directions (any length > 0).

    Returns:
        ``(face [...] int64, x [...], y [...])`` with x, y in [-1, 1]. Ties between axes go to x, then y.
    """
    ax, ay, az = d[..., 0].abs(), d[..., 1].abs(), d[..., 2].abs()
    is_x = (ax >= ay) & (ax >= az)
    is_y = ~is_x & (ay >= az)
    is_z = ~is_x & ~is_y
    dx, dy, dz = d[..., 0], d[..., 1], d[..., 2]
    ma = torch.where(is_x, ax, torch.where(is_y, ay, az)).clamp_min(1e-30)
    # Face coordinates (sc, tc) per the OpenGL table, then divided by the major axis.
    sc = torch.where(
        is_x, torch.where(dx > 0, -dz, dz), torch.where(is_y, dx, torch.where(dz > 0, dx, -dx))
    )
    tc = torch.where(is_x | is_z, -dy, torch.where(dy > 0, dz, -dz))
    face = torch.where(
        is_x,
        torch.where(dx > 0, 0, 1),
        torch.where(is_y, torch.where(dy > 0, 2, 3), torch.where(dz > 0, 4, 5)),
    ).to(torch.int64)
    return face, sc / ma, tc / ma


def _bilinear_clamped(cube: torch.Tensor, face: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Bilinear within the face, clamp-to-edge. ``cube [6, R, R, C]``, ``face/x/y [P]`` -> ``[P, C]``."""
    res = cube.shape[1]
    px = torch.clamp((x + 1.0) * (0.5 * res) - 0.5, 0.0, res - 1.0)
    py = torch.clamp((y + 1.0) * (0.5 * res) - 0.5, 0.0, res - 1.0)
    return _gather_bilinear(cube.reshape(-1, cube.shape[-1]), face, px, py, res, res)


def _gather_bilinear(
    flat: torch.Tensor, face: torch.Tensor, px: torch.Tensor, py: torch.Tensor, res: int, stride: int
) -> torch.Tensor:
    """Bilinear gather from ``flat [6 * stride^2, C]`` at pixel coordinates in ``[0, res - 1]``."""
    x0 = torch.clamp(torch.floor(px.detach()).long(), 0, max(res - 2, 0))
    y0 = torch.clamp(torch.floor(py.detach()).long(), 0, max(res - 2, 0))
    x1 = torch.clamp(x0 + 1, max=res - 1)
    y1 = torch.clamp(y0 + 1, max=res - 1)
    fx = (px - x0.to(px.dtype))[:, None]
    fy = (py - y0.to(py.dtype))[:, None]
    base = face * (stride * stride)
    # One index_select for the four taps (its backward is a scatter-add, cheaper than indexing's).
    idx = torch.cat([base + y0 * stride + x0, base + y0 * stride + x1, base + y1 * stride + x0, base + y1 * stride + x1])
    c00, c01, c10, c11 = flat.index_select(0, idx).chunk(4, dim=0)
    return (c00 * (1 - fx) + c01 * fx) * (1 - fy) + (c10 * (1 - fx) + c11 * fx) * fy


@functools.lru_cache(maxsize=32)
def _border_lookup(res: int, device_str: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where each border texel of the padded ``[6, R+2, R+2]`` faces samples its neighbour faces."""
    device = torch.device(device_str)
    c = (torch.arange(res + 2, dtype=torch.float64, device=device) - 0.5) * (2.0 / res) - 1.0
    y, x = torch.meshgrid(c, c, indexing="ij")
    border = torch.ones(res + 2, res + 2, dtype=torch.bool, device=device)
    border[1:-1, 1:-1] = False
    dirs = torch.stack([cube_to_dir(s, x[border], y[border]) for s in range(6)])  # [6, B, 3]
    face, fx, fy = dir_to_cube(dirs.reshape(-1, 3))
    idx = torch.nonzero(border.reshape(-1))[:, 0]
    return face, fx.float(), fy.float(), idx


@functools.lru_cache(maxsize=32)
def _border_taps(res: int, dtype: torch.dtype, device_str: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The border resampling of :func:`_pad_cube` as fixed taps: ``(tap [4 * 6B] int64, weight [4, 6B, 1], idx)``.

    Same bilinear clamp-to-edge lookups as :func:`_bilinear_clamped` at the cached border positions, with
    the four texel indices and weights precomputed (they depend only on R), so padding a cube is one gather
    and a weighted sum.
    """
    face, fx, fy, idx = _border_lookup(res, device_str)
    x, y = fx.to(dtype), fy.to(dtype)
    px = torch.clamp((x + 1.0) * (0.5 * res) - 0.5, 0.0, res - 1.0)
    py = torch.clamp((y + 1.0) * (0.5 * res) - 0.5, 0.0, res - 1.0)
    x0 = torch.clamp(torch.floor(px).long(), 0, max(res - 2, 0))
    y0 = torch.clamp(torch.floor(py).long(), 0, max(res - 2, 0))
    x1 = torch.clamp(x0 + 1, max=res - 1)
    y1 = torch.clamp(y0 + 1, max=res - 1)
    ax = px - x0.to(dtype)
    ay = py - y0.to(dtype)
    base = face * (res * res)
    tap = torch.cat([base + y0 * res + x0, base + y0 * res + x1, base + y1 * res + x0, base + y1 * res + x1])
    w = torch.stack([(1 - ax) * (1 - ay), ax * (1 - ay), (1 - ax) * ay, ax * ay])[..., None]
    return tap, w, idx


def _pad_cube(cube: torch.Tensor) -> torch.Tensor:
    """``[6, R, R, C]`` -> ``[6, R+2, R+2, C]`` with each face's border resampled from its neighbours."""
    res, ch = cube.shape[1], cube.shape[-1]
    tap, w, idx = _border_taps(res, cube.dtype, str(cube.device))
    border_vals = (cube.reshape(-1, ch).index_select(0, tap).reshape(4, -1, ch) * w).sum(0)  # [6 * B, C]
    out = torch.nn.functional.pad(cube, (0, 0, 1, 1, 1, 1))
    flat = out.reshape(6, (res + 2) * (res + 2), ch)
    flat = flat.index_copy(1, idx, border_vals.reshape(6, -1, ch))
    return flat.reshape(6, res + 2, res + 2, ch)


def _csr_pair(row: torch.Tensor, col: torch.Tensor, val: torch.Tensor, shape: tuple[int, int]):
    """int32 CSR ``M`` [shape] from COO triplets (duplicates kept) and ``M^T``, rows and columns sorted."""
    import warnings

    out = []
    for r, c, (n_r, n_c) in ((row, col, shape), (col, row, shape[::-1])):
        order = torch.argsort(r * n_c + c, stable=True)
        crow = torch.zeros(n_r + 1, dtype=torch.int64, device=r.device)
        crow[1:] = torch.cumsum(torch.bincount(r, minlength=n_r), 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
            out.append(torch.sparse_csr_tensor(crow.to(torch.int32), c[order].to(torch.int32), val[order],
                                               (n_r, n_c), check_invariants=False))
    return out[0], out[1]


@functools.lru_cache(maxsize=32)
def _pad_operator(sizes: tuple[int, ...], dtype: torch.dtype, device_str: str) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_pad_cube` of a whole mip chain as one fixed sparse matrix, and its transpose.

    ``W @ cat([c.reshape(-1, C) for c in levels]) == cat([_pad_cube(c).reshape(-1, C) for c in levels])``
    for levels of face sizes ``sizes``: a padded texel's row is a single 1 at its interior texel, or the
    four bilinear taps and weights of :func:`_border_taps` (the same tensors, so the same weights); rows
    follow :func:`_mip_layout`'s offsets. ``W`` is ``[sum 6 (R_l+2)^2, sum 6 R_l^2]`` CSR with int32
    indices (``dtype`` values, 1 or 4 entries a row), ``W^T`` CSR likewise (for
    :func:`meshlift.kernels.prefilter_triton.csr_apply_cat_triton`'s backward). Cached per process.
    """
    device = torch.device(device_str)
    rows, cols, vals = [], [], []
    row_off = col_off = 0
    for res in sizes:
        st = res + 2
        tap, w, idx = _border_taps(res, dtype, device_str)
        ii, jj = torch.meshgrid(torch.arange(res, device=device), torch.arange(res, device=device), indexing="ij")
        inner = ((ii + 1) * st + (jj + 1)).reshape(-1)  # interior positions in a padded face
        face = torch.arange(6, device=device)[:, None]
        rows.append((row_off + face * st * st + inner).reshape(-1))
        cols.append(col_off + torch.arange(6 * res * res, device=device))
        vals.append(torch.ones(6 * res * res, dtype=dtype, device=device))
        border_rows = (row_off + face * st * st + idx[None]).reshape(-1)  # [6B], face-major like tap's
        rows.append(border_rows.repeat(4))
        cols.append(col_off + tap)
        vals.append(w.reshape(-1))
        row_off += 6 * st * st
        col_off += 6 * res * res
    return _csr_pair(torch.cat(rows), torch.cat(cols), torch.cat(vals), (row_off, col_off))


def _padded_table(levels: list[torch.Tensor]) -> torch.Tensor:
    """``cat([_pad_cube(c).reshape(-1, C) for c in levels])`` in one fused CSR apply (float32, Triton)."""
    from meshlift.kernels.prefilter_triton import csr_apply_cat_triton

    fwd, bwd = _pad_operator(tuple(int(c.shape[1]) for c in levels), levels[0].dtype, str(levels[0].device))
    return csr_apply_cat_triton(levels, fwd, bwd)


def _sample_padded(padded: torch.Tensor, face: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    stride = padded.shape[1]
    res = stride - 2
    px = torch.clamp((x + 1.0) * (0.5 * res) + 0.5, 0.0, res + 1.0)
    py = torch.clamp((y + 1.0) * (0.5 * res) + 0.5, 0.0, res + 1.0)
    return _gather_bilinear(padded.reshape(-1, padded.shape[-1]), face, px, py, stride, stride)


def sample_cube(cube: torch.Tensor, dirs: torch.Tensor, backend: str | None = None) -> torch.Tensor:
    """Seamless bilinear lookup of a cube map by direction.

    Args:
        cube: ``[6, R, R, C]`` cube map (docs/conventions.md §8).
        dirs: ``[..., 3]`` directions (need not be normalised).
        backend: ``'auto'`` / ``'torch'`` / ``'triton'`` / None (the current choice, else auto;
            :func:`meshlift.kernels.choose_backend`): the Triton kernel
            (:mod:`meshlift.kernels.cube_triton`, float32; the padding there is one CSR apply of
            :func:`_pad_operator`, :func:`meshlift.kernels.prefilter_triton.csr_apply_cat_triton`) or this
            torch path (:func:`_pad_cube`), its reference twin.

    Returns:
        ``[..., C]``, differentiable with respect to ``cube`` and ``dirs``.

    Raises:
        RenderError: bad shapes.
    """
    _check_cube(cube, "sample_cube(cube)")
    if dirs.shape[-1] != 3:
        raise RenderError(f"sample_cube(dirs): expected [..., 3], got {tuple(dirs.shape)}")
    lead = dirs.shape[:-1]
    if _use_triton(backend, cube, dirs):
        from meshlift.kernels.cube_triton import sample_cube_table_triton

        strides, offsets = _mip_layout((int(cube.shape[1]),), str(cube.device))
        table = _padded_table([cube])
        out = sample_cube_table_triton(table, strides, offsets, _shaped(dirs, (-1, 3)), None)
        return _shaped(out, (*lead, cube.shape[-1]))
    face, x, y = dir_to_cube(dirs.reshape(-1, 3).to(cube.dtype))
    out = _sample_padded(_pad_cube(cube), face, x, y)
    return out.reshape(*lead, cube.shape[-1])


def _shaped(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``t.reshape(shape)``, or ``t`` itself when it has that shape already (no view node in the graph)."""
    n_known = math.prod(d for d in shape if d != -1)
    want = tuple(t.numel() // max(n_known, 1) if d == -1 else d for d in shape)
    return t if tuple(t.shape) == want else t.reshape(shape)


def _use_triton(backend: str | None, cube: torch.Tensor, dirs: torch.Tensor) -> bool:
    """Whether the Triton lookup runs (float32 cube and directions, and :func:`meshlift.kernels.choose_backend` says so)."""
    if backend == "torch" or cube.dtype != torch.float32 or dirs.dtype != torch.float32:
        return False
    from meshlift.kernels import choose_backend

    return choose_backend("shading", backend, cube.device, cube.dtype) == "triton"


def _check_mip_args(levels: list[torch.Tensor], dirs: torch.Tensor, level: torch.Tensor, name: str) -> None:
    if not levels:
        raise RenderError(f"{name}(levels): need at least one level")
    for i, lv in enumerate(levels):
        _check_cube(lv, f"{name}(levels[{i}])")
    if dirs.shape[-1] != 3 or level.shape != dirs.shape[:-1]:
        raise RenderError(
            f"{name}: dirs must be [..., 3] and level [...] with the same leading shape, got "
            f"{tuple(dirs.shape)} and {tuple(level.shape)}"
        )


@functools.lru_cache(maxsize=32)
def _mip_layout(sizes: tuple[int, ...], device_str: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per level of a padded mip chain stored back to back: ``(stride R_l + 2 [L] int64, offset [L] int64)``."""
    strides = [r + 2 for r in sizes]
    offsets = [0]
    for st in strides[:-1]:
        offsets.append(offsets[-1] + 6 * st * st)
    dev = torch.device(device_str)
    return torch.tensor(strides, dtype=torch.int64, device=dev), torch.tensor(offsets, dtype=torch.int64, device=dev)


def sample_cube_mip(levels: list[torch.Tensor], dirs: torch.Tensor, level: torch.Tensor,
                    backend: str | None = None) -> torch.Tensor:
    """Trilinear lookup in a cube-map mip chain: bilinear per level, linear between levels.

    Equivalent to nvdiffrast's ``texture(..., mip=levels[1:], mip_level_bias=level,
    filter_mode='linear-mipmap-linear', boundary_mode='cube')`` without uv derivatives.

    Every lookup reads its two neighbouring levels ``floor(level)`` and ``floor(level) + 1`` (the last two
    for ``level = L - 1``): the padded levels are stored back to back and the 2 x 4 bilinear taps of all
    lookups are one gather, so the op count does not grow with the number of levels and nothing syncs with
    the host. :func:`sample_cube_mip_reference` is the per-level twin (same values; at exactly integer
    levels this function's derivative with respect to ``level`` is the one-sided difference towards the
    next level, the twin's is 0).

    Args:
        levels: list of ``[6, R_l, R_l, C]`` cube maps, finest first.
        dirs: ``[..., 3]`` directions.
        level: ``[...]`` fractional mip level (clamped to [0, len(levels) - 1]).
        backend: as for :func:`sample_cube` (the Triton kernel does all levels in one launch, after one
            fused CSR apply pads all of them: two autograd nodes per call whatever the number of levels).

    Returns:
        ``[..., C]``, differentiable with respect to the levels, ``dirs`` and ``level``.

    Raises:
        RenderError: bad shapes.
    """
    _check_mip_args(levels, dirs, level, "sample_cube_mip")
    if len(levels) == 1:
        return sample_cube(levels[0], dirs, backend)
    lead = dirs.shape[:-1]
    dtype = levels[0].dtype
    ch = levels[0].shape[-1]
    if _use_triton(backend, levels[0], dirs) and level.dtype == torch.float32:
        from meshlift.kernels.cube_triton import sample_cube_table_triton

        strides, offsets = _mip_layout(tuple(int(c.shape[1]) for c in levels), str(dirs.device))
        table = _padded_table(levels)
        out = sample_cube_table_triton(table, strides, offsets, _shaped(dirs, (-1, 3)), _shaped(level, (-1,)))
        return _shaped(out, (*lead, ch))
    face, x, y = dir_to_cube(dirs.reshape(-1, 3).to(dtype))
    lv = torch.clamp(level.reshape(-1).to(dtype), 0.0, len(levels) - 1.0)
    l0 = torch.clamp(torch.floor(lv.detach()), max=len(levels) - 2.0)
    t = (lv - l0)[:, None]  # weight of the upper level, in [0, 1]
    strides, offsets = _mip_layout(tuple(int(c.shape[1]) for c in levels), str(face.device))
    table = torch.cat([_pad_cube(c).reshape(-1, ch) for c in levels])
    li = torch.cat([l0.long(), l0.long() + 1])  # [2P]: lower level of every lookup, then upper
    stride = strides[li]
    res = (stride - 2).to(dtype)
    face2, x2, y2 = face.repeat(2), x.repeat(2), y.repeat(2)
    px = torch.minimum(torch.clamp((x2 + 1.0) * (0.5 * res) + 0.5, min=0.0), res + 1.0)
    py = torch.minimum(torch.clamp((y2 + 1.0) * (0.5 * res) + 0.5, min=0.0), res + 1.0)
    x0 = torch.minimum(torch.floor(px.detach()).long(), stride - 2)
    y0 = torch.minimum(torch.floor(py.detach()).long(), stride - 2)
    fx = (px - x0.to(dtype))[:, None]
    fy = (py - y0.to(dtype))[:, None]
    base = offsets[li] + face2 * stride * stride + y0 * stride + x0
    idx = torch.cat([base, base + 1, base + stride, base + stride + 1])
    c00, c01, c10, c11 = table.index_select(0, idx).chunk(4, dim=0)
    both = (c00 * (1 - fx) + c01 * fx) * (1 - fy) + (c10 * (1 - fx) + c11 * fx) * fy  # [2P, C]
    lo, hi = both.chunk(2, dim=0)
    return (lo + (hi - lo) * t).reshape(*lead, ch)


def sample_cube_mip_reference(levels: list[torch.Tensor], dirs: torch.Tensor, level: torch.Tensor) -> torch.Tensor:
    """Per-level twin of :func:`sample_cube_mip`: each level sampled for the lookups that use it (tests)."""
    _check_mip_args(levels, dirs, level, "sample_cube_mip_reference")
    lead = dirs.shape[:-1]
    dtype = levels[0].dtype
    face, x, y = dir_to_cube(dirs.reshape(-1, 3).to(dtype))
    lv = torch.clamp(level.reshape(-1).to(dtype), 0.0, len(levels) - 1.0)
    ch = levels[0].shape[-1]
    out = torch.zeros(face.shape[0], ch, dtype=torch.promote_types(dtype, lv.dtype), device=face.device)
    for i, cube in enumerate(levels):
        w = torch.clamp(1.0 - (lv - i).abs(), min=0.0)
        sel = torch.nonzero(w > 0)[:, 0]  # only the pixels that use this level (at most two levels each)
        if sel.numel() == 0:
            continue
        s = _sample_padded(_pad_cube(cube), face[sel], x[sel], y[sel]) * w[sel, None]
        out = out.index_add(0, sel, s)
    return out.reshape(*lead, ch)


def avg_pool_cube(cube: torch.Tensor) -> torch.Tensor:
    """2x2 box down-sampling of every face: ``[6, R, R, C]`` -> ``[6, R/2, R/2, C]`` (R even)."""
    _check_cube(cube, "avg_pool_cube(cube)")
    if cube.shape[1] % 2:
        raise RenderError(f"avg_pool_cube(cube): face size must be even, got {cube.shape[1]}")
    y = torch.nn.functional.avg_pool2d(cube.permute(0, 3, 1, 2), 2)
    return y.permute(0, 2, 3, 1).contiguous()


def latlong_directions(
    height: int, width: int | None = None, dtype: torch.dtype = torch.float32, device=None
) -> torch.Tensor:
    """Unit direction of every lat-long pixel centre, ``[H, W, 3]`` (docs/conventions.md §8; W = 2H default)."""
    width = 2 * height if width is None else width
    theta = (torch.arange(height, dtype=torch.float64, device=device) + 0.5) * (math.pi / height)
    phi = (torch.arange(width, dtype=torch.float64, device=device) + 0.5) * (2.0 * math.pi / width) - math.pi
    t, p = torch.meshgrid(theta, phi, indexing="ij")
    d = torch.stack([torch.sin(t) * torch.sin(p), torch.cos(t), -torch.sin(t) * torch.cos(p)], dim=-1)
    return d.to(dtype)


def dir_to_latlong_uv(d: torch.Tensor) -> torch.Tensor:
    """Lat-long texture coordinates ``(u, v)`` in [0, 1]^2 of directions ``[..., 3]`` -> ``[..., 2]``.

    ``u = atan2(x, -z) / 2π + 1/2`` (column), ``v = acos(y / |d|) / π`` (row).
    """
    n = d / d.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    u = torch.atan2(n[..., 0], -n[..., 2]) / (2.0 * math.pi) + 0.5
    v = torch.acos(torch.clamp(n[..., 1], -1.0, 1.0)) / math.pi
    return torch.stack([u, v], dim=-1)


def sample_latlong(img: torch.Tensor, dirs: torch.Tensor) -> torch.Tensor:
    """Bilinear lookup of a lat-long map by direction (u wraps around, v clamps at the poles).

    Args:
        img: ``[H, W, C]`` lat-long map.
        dirs: ``[..., 3]`` directions.

    Returns:
        ``[..., C]``, differentiable with respect to ``img``.
    """
    if img.ndim != 3:
        raise RenderError(f"sample_latlong(img): expected [H, W, C], got {tuple(img.shape)}")
    h, w, ch = img.shape
    uv = dir_to_latlong_uv(dirs.reshape(-1, 3).to(img.dtype))
    px = uv[:, 0] * w - 0.5
    py = torch.clamp(uv[:, 1] * h - 0.5, 0.0, h - 1.0)
    x0 = torch.floor(px).long()
    y0 = torch.clamp(torch.floor(py).long(), 0, max(h - 2, 0))
    fx = (px - x0.to(px.dtype))[:, None]
    fy = (py - y0.to(py.dtype))[:, None]
    x1 = (x0 + 1) % w
    x0 = x0 % w
    y1 = torch.clamp(y0 + 1, max=h - 1)
    flat = img.reshape(-1, ch)
    idx = torch.cat([y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1])
    c00, c01, c10, c11 = flat.index_select(0, idx).chunk(4, dim=0)
    out = (c00 * (1 - fx) + c01 * fx) * (1 - fy) + (c10 * (1 - fx) + c11 * fx) * fy
    return out.reshape(*dirs.shape[:-1], ch)


def latlong_to_cube(img: torch.Tensor, res: int, supersample: int | None = None) -> torch.Tensor:
    """Resample a lat-long map ``[H, W, C]`` into a cube map ``[6, R, R, C]``.

    Each cube texel averages ``supersample^2`` bilinear lookups at stratified sub-texel directions
    (default: enough that the lookups are about one lat-long pixel apart, at most 8), so a large probe
    shrunk into a small cube is box-filtered rather than aliased.

    Raises:
        RenderError: bad shapes or ``res < 1``.
    """
    if img.ndim != 3:
        raise RenderError(f"latlong_to_cube(img): expected [H, W, C], got {tuple(img.shape)}")
    if int(res) != res or res < 1:
        raise RenderError(f"latlong_to_cube(res): must be a positive integer, got {res!r}")
    if supersample is None:
        supersample = int(min(8, max(1, math.ceil(img.shape[0] / (2 * res)))))
    ss = int(supersample)
    sub = (torch.arange(res * ss, dtype=torch.float64, device=img.device) + 0.5) * (2.0 / (res * ss)) - 1.0
    y, x = torch.meshgrid(sub, sub, indexing="ij")
    dirs = torch.stack([cube_to_dir(s, x, y) for s in range(6)])  # [6, R*ss, R*ss, 3]
    vals = sample_latlong(img, dirs.to(img.dtype))  # [6, R*ss, R*ss, C]
    if ss == 1:
        return vals.contiguous()
    v = vals.permute(0, 3, 1, 2)
    return torch.nn.functional.avg_pool2d(v, ss).permute(0, 2, 3, 1).contiguous()


def cube_to_latlong(cube: torch.Tensor, height: int) -> torch.Tensor:
    """Resample a cube map ``[6, R, R, C]`` into a lat-long map ``[height, 2 height, C]`` (bilinear)."""
    _check_cube(cube, "cube_to_latlong(cube)")
    if int(height) != height or height < 1:
        raise RenderError(f"cube_to_latlong(height): must be a positive integer, got {height!r}")
    dirs = latlong_directions(int(height), dtype=cube.dtype, device=cube.device)
    return sample_cube(cube, dirs)
