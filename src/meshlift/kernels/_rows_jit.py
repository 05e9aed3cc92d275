"""Triton JIT helpers shared by the kernels that work on ``[N, 3]`` row-major rows (``_pbr_triton_kernels``,
``_normals_triton_kernels``, ``_tangents_triton_kernels``, ``_antialias_triton_kernels``): load, store and
atomically add one row's three components as three vectors, and load one row of a face list as three int64
indices. Imported only by those modules (``triton`` at module level, like them)."""

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


@triton.jit
def ld3_index(ptr, rows, m):
    """The three int64 indices of row ``rows`` of an int32/int64 ``[N, 3]`` index list (0 where masked)."""
    return (tl.load(ptr + rows * 3, mask=m, other=0).to(tl.int64),
            tl.load(ptr + rows * 3 + 1, mask=m, other=0).to(tl.int64),
            tl.load(ptr + rows * 3 + 2, mask=m, other=0).to(tl.int64))
