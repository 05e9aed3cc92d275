"""Triton JIT helpers shared by the kernels that work on ``[N, 3]`` row-major rows (``_pbr_triton_kernels``,
``_normals_triton_kernels``): load, store and atomically add one row's three components as three vectors.
Imported only by those modules (``triton`` at module level, like them)."""

import triton
import triton.language as tl


@triton.jit
def ld3(ptr, rows, m):
    return (tl.load(ptr + rows * 3, mask=m, other=0.0), tl.load(ptr + rows * 3 + 1, mask=m, other=0.0),
            tl.load(ptr + rows * 3 + 2, mask=m, other=0.0))


@triton.jit
def st3(ptr, rows, m, x, y, z):
    tl.store(ptr + rows * 3, x, mask=m)
    tl.store(ptr + rows * 3 + 1, y, mask=m)
    tl.store(ptr + rows * 3 + 2, z, mask=m)


@triton.jit
def add3(ptr, rows, m, x, y, z):
    tl.atomic_add(ptr + rows * 3, x, mask=m)
    tl.atomic_add(ptr + rows * 3 + 1, y, mask=m)
    tl.atomic_add(ptr + rows * 3 + 2, z, mask=m)
