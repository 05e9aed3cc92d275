"""Launch helpers shared by the Triton wrappers of this package (torch only; triton is not imported here)."""

from __future__ import annotations

import contextlib

import torch


def on_device(device: torch.device):
    """The context a launch on ``device`` runs in: that CUDA device current (Triton launches on the current
    device), or nothing for the CPU (the Triton interpreter)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def grid_1d(n: int, block: int) -> tuple[int]:
    """One program per ``block`` elements of ``n``; at least one program (kernels mask the tail)."""
    return (max(1, (n + block - 1) // block),)
