"""Triton JIT kernel of :mod:`meshlift.kernels.densify_triton` (imported only when Triton is)."""

import triton
import triton.language as tl


# N and the strides (which follow N) are not specialised: no recompiles as the Gaussian set grows.
@triton.jit(do_not_specialize=["N", "C", "gs_c", "gs_n", "rs_c", "rs_n"])
def grad2d_stats(grad, radii, o_grad2d, o_count, N, C, gs_c, gs_n, gs_k, rs_c, rs_n, rs_k, sx, sy,
                 BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    cnt = tl.zeros([BLOCK], dtype=tl.float32)
    for c in range(0, C):
        gx = tl.load(grad + c * gs_c + i * gs_n, mask=ok, other=0.0) * sx
        gy = tl.load(grad + c * gs_c + i * gs_n + gs_k, mask=ok, other=0.0) * sy
        r0 = tl.load(radii + c * rs_c + i * rs_n, mask=ok, other=0)
        r1 = tl.load(radii + c * rs_c + i * rs_n + rs_k, mask=ok, other=0)
        vis = tl.maximum(r0, r1) > 0
        acc += tl.where(vis, tl.sqrt(gx * gx + gy * gy), 0.0)
        cnt += vis.to(tl.float32)
    tl.store(o_grad2d + i, tl.load(o_grad2d + i, mask=ok, other=0.0) + acc, mask=ok)
    tl.store(o_count + i, tl.load(o_count + i, mask=ok, other=0.0) + cnt, mask=ok)
