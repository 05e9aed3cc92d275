"""Timing of one callable for the benchmark scripts (never collected by pytest): the one CUDA-event loop they share.

On a CUDA device each call is bracketed by two CUDA events after a synchronise, and the device is synchronised
after it (the events' elapsed time: what the GPU spent, the host's issue overlapping). On the CPU the wall clock
(``time.perf_counter``) of each call: a smoke run of a script, not a benchmark.
"""

from __future__ import annotations

import statistics
import time

import torch


def sample_ms(fn, device, warmup: int = 3, repeats: int = 20) -> list[float]:
    """Milliseconds of each of ``repeats`` calls of ``fn()`` after ``warmup`` untimed calls on ``device``
    (a ``torch.device`` or its name)."""
    cuda = torch.device(device).type == "cuda"
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            out.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter()
            fn()
            out.append(1e3 * (time.perf_counter() - t0))
    return out


def median_ms(fn, device, warmup: int = 3, repeats: int = 20) -> float:
    """The median of :func:`sample_ms`."""
    return statistics.median(sample_ms(fn, device, warmup, repeats))
