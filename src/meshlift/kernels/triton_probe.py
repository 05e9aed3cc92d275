"""A tiny real Triton kernel that ``meshlift doctor`` compiles and runs to prove the GPU toolchain works.

Triton compiles kernels at run time with its bundled LLVM/ptxas (no nvcc, no CUDA toolkit). The first call
of a kernel compiles it and writes the result into Triton's cache directory; when that directory is not
writable, or the driver is too old for Triton's PTX, the failure shows up here instead of in the middle of a
reconstruction. The kernel is ``out = a * x + y`` (saxpy) on 4096 float32 values, checked against PyTorch.

This module imports ``triton`` only inside :func:`run_probe` (``meshlift.kernels`` is the only package
allowed to import it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional


def triton_cache_dir() -> Path:
    """Triton's kernel cache directory: ``$TRITON_CACHE_DIR`` or ``~/.triton/cache`` (Triton's default)."""
    env = os.environ.get("TRITON_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("TRITON_HOME", str(Path.home()))) / ".triton" / "cache"


def _make_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _saxpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, a * x + y, mask=mask)

    return _saxpy


def run_probe(device: Optional[str] = None, n: int = 4096) -> dict:
    """Compile and run the saxpy kernel on ``device`` (default ``cuda``); returns plain values.

    Returns:
        ``{"device", "n", "first_call_s", "second_call_s", "compile_s", "max_abs_err"}``: wall times of the
        first call (compile + launch) and of a second call (launch only), their difference as the compile
        time (seconds), and the largest absolute difference from ``a * x + y`` computed by PyTorch.

    Raises:
        Whatever Triton or the driver raises (doctor reports it verbatim and classifies it).
    """
    import torch
    import triton

    dev = torch.device(device or "cuda")
    kernel = _make_kernel()
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.rand(n, generator=gen).to(dev)
    y = torch.rand(n, generator=gen).to(dev)
    out = torch.empty_like(x)
    block = 1024
    grid = (triton.cdiv(n, block),)

    def call() -> float:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        kernel[grid](x, y, out, 2.5, n, BLOCK=block)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return time.perf_counter() - t0

    first = call()
    second = call()
    err = float((out - (2.5 * x + y)).abs().max())
    return {"device": str(dev), "n": n, "first_call_s": first, "second_call_s": second,
            "compile_s": max(first - second, 0.0), "max_abs_err": err}


__all__ = ["run_probe", "triton_cache_dir"]
