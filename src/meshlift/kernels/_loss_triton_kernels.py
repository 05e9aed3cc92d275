"""Triton kernels of :mod:`meshlift.kernels.loss_triton` (formulas and twin: its docstring).

Imported only by that module, on first use (``triton`` is imported here at module level, so set
``TRITON_INTERPRET=1`` before the first call to run them on the CPU interpreter).
"""

import triton
import triton.language as tl


@triton.jit
def _tonemap(x):
    """``shading.color.tonemap_srgb`` and its derivative (torch's clamp and where rules)."""
    c = tl.minimum(tl.maximum(x, 0.0), 65535.0)
    u = tl.log(c + 1.0)
    lin = u <= 0.0031308
    uc = tl.maximum(u, 0.0031308)
    p = tl.exp2(tl.log2(uc) * (1.0 / 2.4))  # uc ** (1 / 2.4), uc > 0
    y = tl.where(lin, u * 12.92, 1.055 * p - 0.055)
    dy_du = tl.where(lin, 12.92, tl.where(u >= 0.0031308, (1.055 / 2.4) * p / uc, 0.0))
    dy = tl.where((x >= 0.0) & (x <= 65535.0), dy_du / (c + 1.0), 0.0)
    return y, dy


@triton.jit
def _load(pred_ptr, target_ptr, mask_ptr, offs, m, C: tl.constexpr, MASK: tl.constexpr):
    p = tl.load(pred_ptr + offs, mask=m, other=0.0)
    t = tl.load(target_ptr + offs, mask=m, other=0.0)
    if MASK:
        w = tl.load(mask_ptr + offs // C, mask=m, other=0.0)
        p = p * w
        t = t * w
    else:
        w = tl.zeros_like(p) + 1.0
    return p, t, w


@triton.jit(do_not_specialize=["n"])
def tonemapped_l1_fwd(pred_ptr, target_ptr, mask_ptr, part_ptr, n, inv_n,
                      C: tl.constexpr, MASK: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    p, t, w = _load(pred_ptr, target_ptr, mask_ptr, offs, m, C, MASK)
    yp, _ = _tonemap(p)
    yt, _ = _tonemap(t)
    d = tl.where(m, tl.abs(yp - yt), 0.0)
    tl.store(part_ptr + tl.program_id(0), tl.sum(d, axis=0) * inv_n)


@triton.jit(do_not_specialize=["n"])
def tonemapped_l1_bwd(pred_ptr, target_ptr, mask_ptr, g_ptr, g_pred_ptr, n, inv_n,
                      C: tl.constexpr, MASK: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    p, t, w = _load(pred_ptr, target_ptr, mask_ptr, offs, m, C, MASK)
    yp, dyp = _tonemap(p)
    yt, _ = _tonemap(t)
    diff = yp - yt
    sgn = tl.where(diff > 0, 1.0, tl.where(diff < 0, -1.0, 0.0))
    g = tl.load(g_ptr) * inv_n
    tl.store(g_pred_ptr + offs, g * sgn * dyp * w, mask=m)
