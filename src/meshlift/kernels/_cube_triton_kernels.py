"""Triton kernels of :mod:`meshlift.kernels.cube_triton` (design, formulas and twin: its docstring).

Imported only by that module, on first use (``triton`` is imported here at module level, so set
``TRITON_INTERPRET=1`` before the first call to run them on the CPU interpreter).
"""

import triton
import triton.language as tl


@triton.jit
def _face_coords(dx, dy, dz):
    """``shading.cubemap.dir_to_cube``: face, (x, y) in [-1, 1], the major axis ``ma`` and the selectors."""
    ax = tl.abs(dx)
    ay = tl.abs(dy)
    az = tl.abs(dz)
    is_x = (ax >= ay) & (ax >= az)
    is_y = (~is_x) & (ay >= az)
    is_z = (~is_x) & (~is_y)
    ma = tl.maximum(tl.where(is_x, ax, tl.where(is_y, ay, az)), 1e-30)
    sc = tl.where(is_x, tl.where(dx > 0, -dz, dz), tl.where(is_y, dx, tl.where(dz > 0, dx, -dx)))
    tc = tl.where(is_x | is_z, -dy, tl.where(dy > 0, dz, -dz))
    face = tl.where(is_x, tl.where(dx > 0, 0, 1), tl.where(is_y, tl.where(dy > 0, 2, 3), tl.where(dz > 0, 4, 5)))
    # correctly rounded, as torch's (float32 ``/`` compiles to an approximate division on the GPU)
    return face.to(tl.int64), tl.div_rn(sc, ma), tl.div_rn(tc, ma), ma, is_x, is_y, is_z


@triton.jit
def _level_taps(stride_ptr, off_ptr, li, face, x, y, m):
    """Bilinear taps of padded level ``li`` (``cubemap.sample_cube_mip``'s arithmetic) and d px / d x."""
    stride = tl.load(stride_ptr + li, mask=m, other=3)
    off = tl.load(off_ptr + li, mask=m, other=0)
    res = (stride - 2).to(tl.float32)
    half = 0.5 * res
    ax_ = (x + 1.0) * half + 0.5
    ay_ = (y + 1.0) * half + 0.5
    px = tl.minimum(tl.maximum(ax_, 0.0), res + 1.0)
    py = tl.minimum(tl.maximum(ay_, 0.0), res + 1.0)
    x0 = tl.minimum(tl.floor(px).to(tl.int64), stride - 2)
    y0 = tl.minimum(tl.floor(py).to(tl.int64), stride - 2)
    fx = px - x0.to(tl.float32)
    fy = py - y0.to(tl.float32)
    base = off + face * stride * stride + y0 * stride + x0
    # the clamps pass the gradient where 0 <= pre-clamp value <= res + 1 (torch's clamp rule)
    dpx = tl.where((ax_ >= 0.0) & (ax_ <= res + 1.0), half, 0.0)
    dpy = tl.where((ay_ >= 0.0) & (ay_ <= res + 1.0), half, 0.0)
    return base, stride, fx, fy, dpx, dpy


@triton.jit(do_not_specialize=["n"])
def cube_fwd(
    table_ptr, stride_ptr, off_ptr, dir_ptr, lvl_ptr, out_ptr, n, lmax,
    C: tl.constexpr, CP: tl.constexpr, MIP: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    m = rows < n
    rows64 = rows.to(tl.int64)
    ch = tl.arange(0, CP)
    m2 = m[:, None] & (ch[None, :] < C)
    dx = tl.load(dir_ptr + rows64 * 3 + 0, mask=m, other=1.0)
    dy = tl.load(dir_ptr + rows64 * 3 + 1, mask=m, other=0.0)
    dz = tl.load(dir_ptr + rows64 * 3 + 2, mask=m, other=0.0)
    face, x, y, _ma, _ix, _iy, _iz = _face_coords(dx, dy, dz)
    if MIP:
        lv = tl.minimum(tl.maximum(tl.load(lvl_ptr + rows64, mask=m, other=0.0), 0.0), lmax)
        l0f = tl.minimum(tl.floor(lv), lmax - 1.0)
        t = lv - l0f
        l0 = l0f.to(tl.int32)
    else:
        l0 = tl.zeros([BLOCK], dtype=tl.int32)
    base, stride, fx, fy, _dpx, _dpy = _level_taps(stride_ptr, off_ptr, l0, face, x, y, m)
    c00 = tl.load(table_ptr + base[:, None] * C + ch[None, :], mask=m2, other=0.0)
    c01 = tl.load(table_ptr + (base + 1)[:, None] * C + ch[None, :], mask=m2, other=0.0)
    c10 = tl.load(table_ptr + (base + stride)[:, None] * C + ch[None, :], mask=m2, other=0.0)
    c11 = tl.load(table_ptr + (base + stride + 1)[:, None] * C + ch[None, :], mask=m2, other=0.0)
    fx2 = fx[:, None]
    fy2 = fy[:, None]
    lo = (c00 * (1 - fx2) + c01 * fx2) * (1 - fy2) + (c10 * (1 - fx2) + c11 * fx2) * fy2
    if MIP:
        base, stride, fx, fy, _dpx, _dpy = _level_taps(stride_ptr, off_ptr, l0 + 1, face, x, y, m)
        c00 = tl.load(table_ptr + base[:, None] * C + ch[None, :], mask=m2, other=0.0)
        c01 = tl.load(table_ptr + (base + 1)[:, None] * C + ch[None, :], mask=m2, other=0.0)
        c10 = tl.load(table_ptr + (base + stride)[:, None] * C + ch[None, :], mask=m2, other=0.0)
        c11 = tl.load(table_ptr + (base + stride + 1)[:, None] * C + ch[None, :], mask=m2, other=0.0)
        fx2 = fx[:, None]
        fy2 = fy[:, None]
        hi = (c00 * (1 - fx2) + c01 * fx2) * (1 - fy2) + (c10 * (1 - fx2) + c11 * fx2) * fy2
        lo = lo + (hi - lo) * t[:, None]
    tl.store(out_ptr + rows64[:, None] * C + ch[None, :], lo, mask=m2)


@triton.jit
def _level_bwd(table_ptr, gtab_ptr, stride_ptr, off_ptr, li, face, x, y, g, fac, m, m2, ch,
               C: tl.constexpr, NEED_TAB: tl.constexpr, NEED_DIR: tl.constexpr):
    """Scatter ``fac · g`` into one level's taps; return (<g, value>, d/dx, d/dy) of that level."""
    base, stride, fx, fy, dpx, dpy = _level_taps(stride_ptr, off_ptr, li, face, x, y, m)
    r00 = base[:, None] * C + ch[None, :]
    r01 = (base + 1)[:, None] * C + ch[None, :]
    r10 = (base + stride)[:, None] * C + ch[None, :]
    r11 = (base + stride + 1)[:, None] * C + ch[None, :]
    if NEED_TAB:
        gf = g * fac[:, None]
        tl.atomic_add(gtab_ptr + r00, gf * ((1 - fx) * (1 - fy))[:, None], mask=m2)
        tl.atomic_add(gtab_ptr + r01, gf * (fx * (1 - fy))[:, None], mask=m2)
        tl.atomic_add(gtab_ptr + r10, gf * ((1 - fx) * fy)[:, None], mask=m2)
        tl.atomic_add(gtab_ptr + r11, gf * (fx * fy)[:, None], mask=m2)
    val = tl.zeros_like(fx)
    gx = tl.zeros_like(fx)
    gy = tl.zeros_like(fx)
    if NEED_DIR:
        v00 = tl.sum(g * tl.load(table_ptr + r00, mask=m2, other=0.0), 1)
        v01 = tl.sum(g * tl.load(table_ptr + r01, mask=m2, other=0.0), 1)
        v10 = tl.sum(g * tl.load(table_ptr + r10, mask=m2, other=0.0), 1)
        v11 = tl.sum(g * tl.load(table_ptr + r11, mask=m2, other=0.0), 1)
        val = (v00 * (1 - fx) + v01 * fx) * (1 - fy) + (v10 * (1 - fx) + v11 * fx) * fy
        gx = ((v01 - v00) * (1 - fy) + (v11 - v10) * fy) * dpx
        gy = ((v10 - v00) * (1 - fx) + (v11 - v01) * fx) * dpy
    return val, gx, gy


@triton.jit(do_not_specialize=["n"])
def cube_bwd(
    table_ptr, stride_ptr, off_ptr, dir_ptr, lvl_ptr, g_ptr, gtab_ptr, gdir_ptr, glvl_ptr, n, lmax,
    C: tl.constexpr, CP: tl.constexpr, MIP: tl.constexpr, NEED_TAB: tl.constexpr, NEED_DIR: tl.constexpr,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    m = rows < n
    rows64 = rows.to(tl.int64)
    ch = tl.arange(0, CP)
    m2 = m[:, None] & (ch[None, :] < C)
    dx = tl.load(dir_ptr + rows64 * 3 + 0, mask=m, other=1.0)
    dy = tl.load(dir_ptr + rows64 * 3 + 1, mask=m, other=0.0)
    dz = tl.load(dir_ptr + rows64 * 3 + 2, mask=m, other=0.0)
    face, x, y, ma, is_x, is_y, is_z = _face_coords(dx, dy, dz)
    g = tl.load(g_ptr + rows64[:, None] * C + ch[None, :], mask=m2, other=0.0)
    if MIP:
        raw = tl.load(lvl_ptr + rows64, mask=m, other=0.0)
        lv = tl.minimum(tl.maximum(raw, 0.0), lmax)
        l0f = tl.minimum(tl.floor(lv), lmax - 1.0)
        t = lv - l0f
        l0 = l0f.to(tl.int32)
        v_lo, gx, gy = _level_bwd(table_ptr, gtab_ptr, stride_ptr, off_ptr, l0, face, x, y, g, 1.0 - t, m, m2, ch,
                                  C, NEED_TAB, NEED_DIR)
        v_hi, gx1, gy1 = _level_bwd(table_ptr, gtab_ptr, stride_ptr, off_ptr, l0 + 1, face, x, y, g, t, m, m2, ch,
                                    C, NEED_TAB, NEED_DIR)
        if NEED_DIR:
            gx = gx * (1.0 - t) + gx1 * t
            gy = gy * (1.0 - t) + gy1 * t
            inside = (raw >= 0.0) & (raw <= lmax)
            tl.store(glvl_ptr + rows64, tl.where(inside, v_hi - v_lo, 0.0), mask=m)
    else:
        l0 = tl.zeros([BLOCK], dtype=tl.int32)
        one = tl.full([BLOCK], 1.0, tl.float32)
        _v, gx, gy = _level_bwd(table_ptr, gtab_ptr, stride_ptr, off_ptr, l0, face, x, y, g, one, m, m2, ch,
                                C, NEED_TAB, NEED_DIR)
    if NEED_DIR:
        # x = sc / ma, y = tc / ma (dir_to_cube); ma = |d_major| clamped at 1e-30
        gsc = gx / ma
        gtc = gy / ma
        gma = tl.where(ma > 1e-30, -(gx * x + gy * y) / ma, 0.0)
        sx = tl.where(dx > 0, 1.0, tl.where(dx < 0, -1.0, 0.0))
        sy = tl.where(dy > 0, 1.0, tl.where(dy < 0, -1.0, 0.0))
        sz = tl.where(dz > 0, 1.0, tl.where(dz < 0, -1.0, 0.0))
        # is_x: sc = ∓dz, tc = -dy; is_y: sc = dx, tc = ±dz; is_z: sc = ±dx, tc = -dy
        gdx = tl.where(is_x, gma * sx, tl.where(is_y, gsc, tl.where(dz > 0, gsc, -gsc)))
        gdy = tl.where(is_y, gma * sy, -gtc)
        gdz = tl.where(is_x, tl.where(dx > 0, -gsc, gsc), tl.where(is_y, tl.where(dy > 0, gtc, -gtc), gma * sz))
        tl.store(gdir_ptr + rows64 * 3 + 0, gdx, mask=m)
        tl.store(gdir_ptr + rows64 * 3 + 1, gdy, mask=m)
        tl.store(gdir_ptr + rows64 * 3 + 2, gdz, mask=m)
