"""Triton JIT kernel of :mod:`meshlift.kernels.adam_triton` (imported only when Triton is)."""

import triton
import triton.language as tl


@triton.jit
def _one_minus_exp(x):
    # 1 - exp(x) for x <= 0 without the cancellation of float32 near 0 (1 - 0.999**1 would lose 4 digits):
    # -expm1(x) by its series for |x| < 0.1 (next term x^6/720: < 2e-8 relative), 1 - exp(x) beyond
    series = -x * (1.0 + x * (0.5 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0)))))
    return tl.where(x > -0.1, series, 1.0 - tl.exp(x))


@triton.jit
def _adam_seg(p, g, m, v, step_ptr, n, lr, blk, beta2, omb1, omb2, ln_beta1, ln_beta2, eps, BLOCK: tl.constexpr):
    # bias corrections of step s + 1 from the tensor's own device step counter (incremented after the launch);
    # ln_beta = log(beta), omb = 1 - beta: from the host in double precision (1 - 0.999 in float32 loses digits)
    s = tl.load(step_ptr).to(tl.float32) + 1.0
    bc1 = _one_minus_exp(s * ln_beta1)
    bc2_sqrt = tl.sqrt(_one_minus_exp(s * ln_beta2))
    step_size = lr / bc1
    offs = blk.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    gr = tl.load(g + offs, mask=ok, other=0.0)
    ea = tl.load(m + offs, mask=ok, other=0.0)
    es = tl.load(v + offs, mask=ok, other=0.0)
    ea = ea + omb1 * (gr - ea)  # torch's lerp(m, g, 1 - beta1)
    es = beta2 * es + omb2 * (gr * gr)
    denom = tl.sqrt(es) / bc2_sqrt + eps
    x = tl.load(p + offs, mask=ok, other=0.0)
    tl.store(p + offs, x - step_size * ea / denom, mask=ok)
    tl.store(m + offs, ea, mask=ok)
    tl.store(v + offs, es, mask=ok)


# Six tensor slots (the Gaussian parameters: means, quats, scales, opacities, sh0, shN); slot k owns the
# programs [b_k, b_{k+1}) with b_0 = 0; an unused slot has no programs. Counts and block starts change with the
# Gaussian count: not specialised (no recompiles as the set grows).
@triton.jit(do_not_specialize=["n0", "n1", "n2", "n3", "n4", "n5", "b1", "b2", "b3", "b4", "b5"])
def adam6(p0, g0, m0, v0, s0, n0, lr0, p1, g1, m1, v1, s1, n1, lr1, p2, g2, m2, v2, s2, n2, lr2,
          p3, g3, m3, v3, s3, n3, lr3, p4, g4, m4, v4, s4, n4, lr4, p5, g5, m5, v5, s5, n5, lr5,
          b1, b2, b3, b4, b5, beta2, omb1, omb2, ln_beta1, ln_beta2, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid < b1:
        _adam_seg(p0, g0, m0, v0, s0, n0, lr0, pid, beta2, omb1, omb2, ln_beta1, ln_beta2, eps, BLOCK)
    elif pid < b2:
        _adam_seg(p1, g1, m1, v1, s1, n1, lr1, pid - b1, beta2, omb1, omb2, ln_beta1, ln_beta2, eps, BLOCK)
    elif pid < b3:
        _adam_seg(p2, g2, m2, v2, s2, n2, lr2, pid - b2, beta2, omb1, omb2, ln_beta1, ln_beta2, eps, BLOCK)
    elif pid < b4:
        _adam_seg(p3, g3, m3, v3, s3, n3, lr3, pid - b3, beta2, omb1, omb2, ln_beta1, ln_beta2, eps, BLOCK)
    elif pid < b5:
        _adam_seg(p4, g4, m4, v4, s4, n4, lr4, pid - b4, beta2, omb1, omb2, ln_beta1, ln_beta2, eps, BLOCK)
    else:
        _adam_seg(p5, g5, m5, v5, s5, n5, lr5, pid - b5, beta2, omb1, omb2, ln_beta1, ln_beta2, eps, BLOCK)
