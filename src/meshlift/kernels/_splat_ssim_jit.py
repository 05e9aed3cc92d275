"""Triton JIT kernels of the fused training SSIM (forward and backward). Imported only by
:mod:`meshlift.kernels.splat_ssim_triton` (lazily, on first use); see that module for the algorithm.

Images are flat, contiguous, channels last: element ``e`` of ``[B, H, W, C]`` is pixel ``(b, h, w)``,
channel ``c``; horizontal neighbours are ``±C`` apart, vertical ones ``±W·C``. Zero padding ("same").
"""

import triton
import triton.language as tl


@triton.jit
def _coords(e, C, W, H):
    c_w = e // C
    w = c_w % W
    h = (c_w // W) % H
    return w, h


@triton.jit(do_not_specialize=["E"])
def ssim_hstats(x, y, g, out, E, C, W, H, WIN: tl.constexpr, BLOCK: tl.constexpr):
    """``out[0..4]`` = horizontal blur of x, y, x², y², x·y."""
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = e < E
    w, h = _coords(e, C, W, H)
    zx = tl.load(x + e, mask=m, other=0.0) * 0.0
    sx = zx
    sy = zx
    sxx = zx
    syy = zx
    sxy = zx
    for k in tl.static_range(WIN):
        d = k - WIN // 2
        ok = m & (w + d >= 0) & (w + d < W)
        gk = tl.load(g + k)
        xv = tl.load(x + e + d * C, mask=ok, other=0.0)
        yv = tl.load(y + e + d * C, mask=ok, other=0.0)
        sx += gk * xv
        sy += gk * yv
        sxx += gk * xv * xv
        syy += gk * yv * yv
        sxy += gk * xv * yv
    tl.store(out + e, sx, mask=m)
    tl.store(out + E + e, sy, mask=m)
    tl.store(out + 2 * E + e, sxx, mask=m)
    tl.store(out + 3 * E + e, syy, mask=m)
    tl.store(out + 4 * E + e, sxy, mask=m)


@triton.jit(do_not_specialize=["E"])
def ssim_vmap(hs, g, smap, dmaps, E, C, W, H, C1, C2, WIN: tl.constexpr, GRAD: tl.constexpr,
              BLOCK: tl.constexpr):
    """Vertical blur of the five statistics, the SSIM map, and (``GRAD``) its partial derivatives
    ``dmaps[0..2]`` = dS/dμx, dS/dE[x²], dS/dE[xy] (statistics taken as independent variables)."""
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = e < E
    w, h = _coords(e, C, W, H)
    z = tl.load(hs + e, mask=m, other=0.0) * 0.0
    mx = z
    my = z
    exx = z
    eyy = z
    exy = z
    WC = W * C
    for k in tl.static_range(WIN):
        d = k - WIN // 2
        ok = m & (h + d >= 0) & (h + d < H)
        gk = tl.load(g + k)
        o = e + d * WC
        mx += gk * tl.load(hs + o, mask=ok, other=0.0)
        my += gk * tl.load(hs + E + o, mask=ok, other=0.0)
        exx += gk * tl.load(hs + 2 * E + o, mask=ok, other=0.0)
        eyy += gk * tl.load(hs + 3 * E + o, mask=ok, other=0.0)
        exy += gk * tl.load(hs + 4 * E + o, mask=ok, other=0.0)
    A = 2.0 * mx * my + C1
    Bv = 2.0 * (exy - mx * my) + C2
    Cv = mx * mx + my * my + C1
    Dv = (exx - mx * mx) + (eyy - my * my) + C2
    den = Cv * Dv
    S = A * Bv / den
    tl.store(smap + e, S, mask=m)
    if GRAD:
        dnum = 2.0 * my * Bv - 2.0 * my * A
        dden = 2.0 * mx * Dv - 2.0 * mx * Cv
        tl.store(dmaps + e, (dnum - S * dden) / den, mask=m)
        tl.store(dmaps + E + e, -S / Dv, mask=m)
        tl.store(dmaps + 2 * E + e, 2.0 * A / den, mask=m)


@triton.jit(do_not_specialize=["E"])
def ssim_hblur3(dm, g, out, E, C, W, H, WIN: tl.constexpr, BLOCK: tl.constexpr):
    """Horizontal blur of the three derivative maps (the blur is its own adjoint: symmetric window, zero
    padding)."""
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = e < E
    w, h = _coords(e, C, W, H)
    z = tl.load(dm + e, mask=m, other=0.0) * 0.0
    a0 = z
    a1 = z
    a2 = z
    for k in tl.static_range(WIN):
        d = k - WIN // 2
        ok = m & (w + d >= 0) & (w + d < W)
        gk = tl.load(g + k)
        a0 += gk * tl.load(dm + e + d * C, mask=ok, other=0.0)
        a1 += gk * tl.load(dm + E + e + d * C, mask=ok, other=0.0)
        a2 += gk * tl.load(dm + 2 * E + e + d * C, mask=ok, other=0.0)
    tl.store(out + e, a0, mask=m)
    tl.store(out + E + e, a1, mask=m)
    tl.store(out + 2 * E + e, a2, mask=m)


@triton.jit(do_not_specialize=["E"])
def ssim_vgrad(hd, x, y, g, gout, dx, E, C, W, H, inv_count, WIN: tl.constexpr, BLOCK: tl.constexpr):
    """``dx = gout / count · (V(hd0) + 2 x V(hd1) + y V(hd2))`` (V: vertical blur)."""
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = e < E
    w, h = _coords(e, C, W, H)
    z = tl.load(hd + e, mask=m, other=0.0) * 0.0
    a0 = z
    a1 = z
    a2 = z
    WC = W * C
    for k in tl.static_range(WIN):
        d = k - WIN // 2
        ok = m & (h + d >= 0) & (h + d < H)
        gk = tl.load(g + k)
        o = e + d * WC
        a0 += gk * tl.load(hd + o, mask=ok, other=0.0)
        a1 += gk * tl.load(hd + E + o, mask=ok, other=0.0)
        a2 += gk * tl.load(hd + 2 * E + o, mask=ok, other=0.0)
    xv = tl.load(x + e, mask=m, other=0.0)
    yv = tl.load(y + e, mask=m, other=0.0)
    s = tl.load(gout) * inv_count
    tl.store(dx + e, s * (a0 + 2.0 * xv * a1 + yv * a2), mask=m)
