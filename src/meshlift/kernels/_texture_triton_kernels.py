"""Triton kernels of :mod:`meshlift.kernels.texture_triton` (design, formulas and twin: its docstring).

Imported only by that module, on first use (``triton`` is imported here at module level, so set
``TRITON_INTERPRET=1`` before the first call to run them on the CPU interpreter).
"""

import triton
import triton.language as tl


@triton.jit
def _footprint(da_ptr, rows64, m, W0, H0):
    """Texel-space Jacobian ``(a, b, c, d)`` and the pieces of ``λ_max`` (``render.texture._mip_level``)."""
    a = tl.load(da_ptr + rows64 * 4 + 0, mask=m, other=0.0) * W0
    b = tl.load(da_ptr + rows64 * 4 + 1, mask=m, other=0.0) * W0
    c = tl.load(da_ptr + rows64 * 4 + 2, mask=m, other=0.0) * H0
    d = tl.load(da_ptr + rows64 * 4 + 3, mask=m, other=0.0) * H0
    A = a * a + c * c
    Cc = b * b + d * d
    Bx = a * b + c * d
    half = 0.5 * (A - Cc)
    r = tl.sqrt(half * half + Bx * Bx + 1e-20)
    lam = 0.5 * (A + Cc) + r
    raw = 0.5 * tl.log2(tl.maximum(lam, 1e-20))
    return a, b, c, d, Bx, half, r, lam, raw


@triton.jit
def _axis(coord, size, WRAP: tl.constexpr):
    """Two taps and the fraction along one axis at one level (``render.texture._taps``, linear)."""
    sf = size.to(tl.float32)
    x = coord * sf - 0.5
    x0f = tl.floor(x)
    f = x - x0f
    i0 = x0f.to(tl.int64)
    i1 = i0 + 1
    if WRAP:
        i0 = ((i0 % size) + size) % size
        i1 = ((i1 % size) + size) % size
    else:
        i0 = tl.minimum(tl.maximum(i0, 0), size - 1)
        i1 = tl.minimum(tl.maximum(i1, 0), size - 1)
    return i0, i1, f, sf


@triton.jit
def _level_taps(off_ptr, h_ptr, w_ptr, li, s, t, m, WRAP: tl.constexpr):
    """Row indices of the four taps of level ``li`` (per row), their fractions and the level's size."""
    off = tl.load(off_ptr + li, mask=m, other=0)
    hh = tl.load(h_ptr + li, mask=m, other=1)
    ww = tl.load(w_ptr + li, mask=m, other=1)
    x0, x1, fx, wf = _axis(s, ww, WRAP)
    y0, y1, fy, hf = _axis(t, hh, WRAP)
    r00 = off + y0 * ww + x0
    r01 = off + y0 * ww + x1
    r10 = off + y1 * ww + x0
    r11 = off + y1 * ww + x1
    return r00, r01, r10, r11, fx, fy, wf, hf


@triton.jit(do_not_specialize=["n"])
def tex_fwd(
    flat_ptr, uv_ptr, da_ptr, off_ptr, h_ptr, w_ptr, out_ptr, n, W0, H0, lmaxf, lmax, ct,
    C: tl.constexpr, CP: tl.constexpr, WRAP: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    m = rows < n
    rows64 = rows.to(tl.int64)
    ch = tl.arange(0, CP)
    m2 = m[:, None] & (ch[None, :] < C)
    s = tl.load(uv_ptr + rows64 * 2 + 0, mask=m, other=0.0)
    t = tl.load(uv_ptr + rows64 * 2 + 1, mask=m, other=0.0)
    _a, _b, _c, _d, _bx, _half, _r, _lam, raw = _footprint(da_ptr, rows64, m, W0, H0)
    level = tl.minimum(tl.maximum(raw, 0.0), lmaxf)
    l0f = tl.floor(level)
    fr = level - l0f
    l0 = l0f.to(tl.int32)
    l1 = tl.minimum(l0 + 1, lmax)
    acc = tl.zeros([BLOCK, CP], dtype=tl.float32)
    for k in tl.static_range(2):
        li = l0 if k == 0 else l1
        fac = (1.0 - fr) if k == 0 else fr
        r00, r01, r10, r11, fx, fy, _wf, _hf = _level_taps(off_ptr, h_ptr, w_ptr, li, s, t, m, WRAP)
        v00 = tl.load(flat_ptr + r00[:, None] * ct + ch[None, :], mask=m2, other=0.0)
        v01 = tl.load(flat_ptr + r01[:, None] * ct + ch[None, :], mask=m2, other=0.0)
        v10 = tl.load(flat_ptr + r10[:, None] * ct + ch[None, :], mask=m2, other=0.0)
        v11 = tl.load(flat_ptr + r11[:, None] * ct + ch[None, :], mask=m2, other=0.0)
        w00 = ((1.0 - fy) * (1.0 - fx))[:, None]
        w01 = ((1.0 - fy) * fx)[:, None]
        w10 = (fy * (1.0 - fx))[:, None]
        w11 = (fy * fx)[:, None]
        val = v00 * w00 + v01 * w01 + v10 * w10 + v11 * w11
        acc += val * fac[:, None]
    tl.store(out_ptr + rows64[:, None] * C + ch[None, :], acc, mask=m2)


@triton.jit(do_not_specialize=["n"])
def tex_bwd(
    flat_ptr, uv_ptr, da_ptr, off_ptr, h_ptr, w_ptr, g_ptr, gflat_ptr, guv_ptr, gda_ptr, n, W0, H0, lmaxf, lmax, ct,
    C: tl.constexpr, CP: tl.constexpr, WRAP: tl.constexpr, NEED_TEX: tl.constexpr, NEED_UV: tl.constexpr,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    m = rows < n
    rows64 = rows.to(tl.int64)
    ch = tl.arange(0, CP)
    m2 = m[:, None] & (ch[None, :] < C)
    s = tl.load(uv_ptr + rows64 * 2 + 0, mask=m, other=0.0)
    t = tl.load(uv_ptr + rows64 * 2 + 1, mask=m, other=0.0)
    a, b, c, d, Bx, half, r, lam, raw = _footprint(da_ptr, rows64, m, W0, H0)
    level = tl.minimum(tl.maximum(raw, 0.0), lmaxf)
    l0f = tl.floor(level)
    fr = level - l0f
    l0 = l0f.to(tl.int32)
    l1 = tl.minimum(l0 + 1, lmax)
    g = tl.load(g_ptr + rows64[:, None] * C + ch[None, :], mask=m2, other=0.0)
    gs = tl.zeros([BLOCK], dtype=tl.float32)
    gt = tl.zeros([BLOCK], dtype=tl.float32)
    glevel = tl.zeros([BLOCK], dtype=tl.float32)
    for k in tl.static_range(2):
        li = l0 if k == 0 else l1
        fac = (1.0 - fr) if k == 0 else fr
        r00, r01, r10, r11, fx, fy, wf, hf = _level_taps(off_ptr, h_ptr, w_ptr, li, s, t, m, WRAP)
        w00 = (1.0 - fy) * (1.0 - fx)
        w01 = (1.0 - fy) * fx
        w10 = fy * (1.0 - fx)
        w11 = fy * fx
        if NEED_TEX:
            gf = g * fac[:, None]
            tl.atomic_add(gflat_ptr + r00[:, None] * ct + ch[None, :], gf * w00[:, None], mask=m2)
            tl.atomic_add(gflat_ptr + r01[:, None] * ct + ch[None, :], gf * w01[:, None], mask=m2)
            tl.atomic_add(gflat_ptr + r10[:, None] * ct + ch[None, :], gf * w10[:, None], mask=m2)
            tl.atomic_add(gflat_ptr + r11[:, None] * ct + ch[None, :], gf * w11[:, None], mask=m2)
        if NEED_UV:
            v00 = tl.sum(g * tl.load(flat_ptr + r00[:, None] * ct + ch[None, :], mask=m2, other=0.0), 1)
            v01 = tl.sum(g * tl.load(flat_ptr + r01[:, None] * ct + ch[None, :], mask=m2, other=0.0), 1)
            v10 = tl.sum(g * tl.load(flat_ptr + r10[:, None] * ct + ch[None, :], mask=m2, other=0.0), 1)
            v11 = tl.sum(g * tl.load(flat_ptr + r11[:, None] * ct + ch[None, :], mask=m2, other=0.0), 1)
            # <g, value> of this level, and its derivatives along the two axes (d frac / d coord = size)
            val = v00 * w00 + v01 * w01 + v10 * w10 + v11 * w11
            gs += fac * wf * ((1.0 - fy) * (v01 - v00) + fy * (v11 - v10))
            gt += fac * hf * ((1.0 - fx) * (v10 - v00) + fx * (v11 - v01))
            glevel += val if k == 1 else -val
    if NEED_UV:
        tl.store(guv_ptr + rows64 * 2 + 0, gs, mask=m)
        tl.store(guv_ptr + rows64 * 2 + 1, gt, mask=m)
        # level = clamp(raw, 0, lmax) passes the gradient where 0 <= raw <= lmax (torch's clamp rule);
        # raw = 0.5 log2(λ), λ = (A + C)/2 + sqrt(((A - C)/2)² + B² + ε)
        inside = (raw >= 0.0) & (raw <= lmaxf)
        glam = tl.where(inside, glevel, 0.0) * 0.5 / (lam * 0.6931471805599453)
        gA = glam * (0.5 + 0.5 * half / r)
        gC = glam * (0.5 - 0.5 * half / r)
        gB = glam * (Bx / r)
        tl.store(gda_ptr + rows64 * 4 + 0, (gA * 2.0 * a + gB * b) * W0, mask=m)
        tl.store(gda_ptr + rows64 * 4 + 1, (gC * 2.0 * b + gB * a) * W0, mask=m)
        tl.store(gda_ptr + rows64 * 4 + 2, (gA * 2.0 * c + gB * d) * H0, mask=m)
        tl.store(gda_ptr + rows64 * 4 + 3, (gC * 2.0 * d + gB * c) * H0, mask=m)
