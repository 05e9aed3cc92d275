"""Which implementation each fast-path family runs: the process's :class:`KernelChoice`.

A render op asks :func:`meshlift.kernels.choose_backend` (the one place a backend is chosen); an op called
with ``backend=None`` gets the family's entry of the current :class:`KernelChoice`. The choice is ``auto``
for every family unless code says otherwise with :func:`use_kernels` (a context manager; each method's run
applies its config fields ``raster_backend`` / ``shading_backend`` / ``splat_backend`` with it, through
:func:`meshlift.methods.engine.kernel_backends`). The tuning of the Triton rasterizer
(:class:`RasterTuning`) and the rasterizer's dense / compacted variant are part of the choice too, so that
tests and benchmarks set them the same way.

Deprecated: the environment variables ``MESHLIFT_RASTER_BACKEND`` and ``MESHLIFT_SHADING_BACKEND`` (documented
before the config fields existed) still set the default of their family, with one warning per process
(:func:`meshlift._env.deprecated`).

Imports neither torch nor triton at import (the probes below import them when called).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from dataclasses import dataclass, field
from typing import Iterator, Optional, Tuple

from meshlift import _env
from meshlift.errors import RenderError

__all__ = ["FAMILIES", "KernelChoice", "RasterTuning", "interpreting", "kernel_choice", "triton_importable",
           "triton_runs_on", "use_kernels"]

#: The fast-path families a backend is chosen for, with the names each accepts besides ``"auto"``
#: (the rasterizer also accepts any backend added with :func:`meshlift.kernels.register_backend`).
FAMILIES = {
    "raster": ("torch", "triton"),
    "shading": ("torch", "triton"),
    "splat": ("torch", "triton"),
}

#: Default tile of the raster kernel for large frames, the tile below :data:`LARGE_FRAME_PIXELS` pixels per
#: call, and the other launch settings: the first H200 sweep (benchmarks/raster_triton_tune.py,
#: 2026-12-01: tiles 8x8 / 16x16 / 8x32, stamp 0 / 4, warps 4, unroll 2) found 8x8 + stamp 4 best over the
#: ten cases (geometric mean) but 16x16 best on the 2048² and the batch-8 cases, i.e. from 2^21 pixels.
DEFAULT_TILE = (16, 16)
SMALL_FRAME_TILE = (8, 8)
LARGE_FRAME_PIXELS = 2**21
DEFAULT_WARPS = 4
DEFAULT_UNROLL = 2
DEFAULT_STAMP = 4
DEFAULT_BWD_IDS = 8


def _power_of_two(n: int) -> bool:
    return n >= 1 and not n & (n - 1)


@dataclass(frozen=True)
class RasterTuning:
    """Launch settings of the Triton rasterizer (:mod:`meshlift.kernels.raster_triton`); the defaults are
    the measured best (``benchmarks/raster_triton_tune.py`` sweeps the others). Results are the same for
    every setting; only speed changes."""

    tile: Optional[Tuple[int, int]] = None
    """Pixels ``(rows, cols)`` per raster program, powers of two; None = by frame size (8x8 below 2^21
    pixels per call, 16x16 from there)."""
    warps: int = DEFAULT_WARPS
    """``num_warps`` of the raster kernel: 1, 2, 4, 8 or 16."""
    unroll: int = DEFAULT_UNROLL
    """Triangles per step of the raster kernel's loop: 1 or 2."""
    stamp: int = DEFAULT_STAMP
    """Triangles whose screen box fits this many pixels a side are stamped per triangle instead of binned
    to tiles: 0 (never), 2, 4 or 8."""
    bwd_ids: int = DEFAULT_BWD_IDS
    """Most triangles whose gradients one backward tile sums in registers before its atomics, 0-64 (0 = one
    atomic per pixel and value)."""

    def __post_init__(self) -> None:
        if self.tile is not None and (len(self.tile) != 2 or not all(_power_of_two(int(s)) for s in self.tile)):
            raise RenderError(f"RasterTuning.tile={self.tile!r}: give two powers of two, e.g. (16, 16), or None")
        if self.warps not in (1, 2, 4, 8, 16):
            raise RenderError(f"RasterTuning.warps={self.warps!r}: use 1, 2, 4, 8 or 16")
        if self.unroll not in (1, 2):
            raise RenderError(f"RasterTuning.unroll={self.unroll!r}: use 1 or 2")
        if self.stamp not in (0, 2, 4, 8):
            raise RenderError(f"RasterTuning.stamp={self.stamp!r}: use 0, 2, 4 or 8")
        if not (isinstance(self.bwd_ids, int) and 0 <= self.bwd_ids <= 64):
            raise RenderError(f"RasterTuning.bwd_ids={self.bwd_ids!r}: use an integer 0-64 (0 = no pre-reduction)")


@dataclass(frozen=True)
class KernelChoice:
    """The implementation of each fast-path family this process runs (``backend=None`` in the ops)."""

    raster: str = "auto"
    """Visibility backend of ``rasterize`` (and the fused ``interpolate`` / ``antialias``): ``auto``
    (Triton on CUDA when ``import triton`` works, else PyTorch), ``torch``, ``triton`` or a registered
    backend's name."""
    shading: str = "auto"
    """Shading fast paths (hash grid, cube maps, texture lookups, normals and tangents, PBR shading, the
    image loss): ``auto`` (Triton for float32 CUDA tensors when ``import triton`` works), ``torch`` or
    ``triton`` (on the CPU only under ``TRITON_INTERPRET=1``, the tests' interpreter)."""
    splat: str = "auto"
    """Gaussian splatting and its fused SSIM: ``auto`` (Triton on CUDA when it is available), ``torch`` or
    ``triton``."""
    raster_dense: Optional[bool] = None
    """The rasterizer's variants: None = dense (every pixel, masked; no GPU→CPU sync) on GPUs, compacted to
    the covered pixels on the CPU; True / False forces either (identical results: tests compare them)."""
    raster_tuning: RasterTuning = field(default_factory=RasterTuning)
    """Launch settings of the Triton rasterizer."""

    def __post_init__(self) -> None:
        for fam, names in FAMILIES.items():
            value = getattr(self, fam)
            if not isinstance(value, str) or not value:
                raise RenderError(f"KernelChoice.{fam}={value!r}: give a backend name ('auto', {', '.join(map(repr, names))})")
        for fam in ("shading", "splat"):
            if getattr(self, fam) not in ("auto",) + FAMILIES[fam]:
                raise RenderError(f"{fam} backend {getattr(self, fam)!r}: choose 'auto', "
                                  f"{' or '.join(map(repr, FAMILIES[fam]))}")
        if not isinstance(self.raster_tuning, RasterTuning):
            raise RenderError(f"KernelChoice.raster_tuning: a RasterTuning, got {type(self.raster_tuning).__name__}")


_OVERRIDE: list[KernelChoice] = []


def _from_environment() -> KernelChoice:
    """``auto`` everywhere, except where a deprecated variable still says otherwise (with a warning)."""
    raster = _env.deprecated("MESHLIFT_RASTER_BACKEND")
    shading = _env.deprecated("MESHLIFT_SHADING_BACKEND")
    if raster is None and shading is None:
        return _AUTO
    try:
        return KernelChoice(raster=(raster or "auto").lower(), shading=(shading or "auto").lower())
    except RenderError as exc:
        raise RenderError(f"{exc} (from the deprecated environment variable MESHLIFT_RASTER_BACKEND / "
                          "MESHLIFT_SHADING_BACKEND; unset it)") from None


_AUTO = KernelChoice()


def source_of(family: str) -> str:
    """Where the current choice of ``family`` comes from, for error messages."""
    deprecated = {"raster": "MESHLIFT_RASTER_BACKEND", "shading": "MESHLIFT_SHADING_BACKEND"}.get(family)
    if not _OVERRIDE and deprecated and os.environ.get(deprecated):
        return f"the deprecated environment variable {deprecated}; unset it"
    return f"kernels.use_kernels({family}=...) / config field {family}_backend"


def kernel_choice() -> KernelChoice:
    """The current :class:`KernelChoice`: the innermost :func:`use_kernels`, else ``auto`` everywhere."""
    return _OVERRIDE[-1] if _OVERRIDE else _from_environment()


@contextlib.contextmanager
def use_kernels(raster: Optional[str] = None, shading: Optional[str] = None, splat: Optional[str] = None, *,
                raster_dense: Optional[bool] = None, raster_tuning: Optional[RasterTuning] = None,
                ) -> Iterator[KernelChoice]:
    """Run the enclosed code with these backends (None keeps the current entry); restores the previous
    choice on exit. Process-wide (every thread sees it), not re-entrant across threads.

    Example: ``with use_kernels(shading="torch"): ...`` runs the PyTorch twins of the shading kernels.

    Args:
        raster, shading, splat: backend names (:class:`KernelChoice`).
        raster_dense: force the rasterizer's dense (True) or compacted (False) variant.
        raster_tuning: launch settings of the Triton rasterizer.

    Raises:
        RenderError: an unknown name or a bad tuning (naming the field).
    """
    changes = {k: v for k, v in (("raster", raster), ("shading", shading), ("splat", splat),
                                 ("raster_tuning", raster_tuning)) if v is not None}
    if raster_dense is not None:
        changes["raster_dense"] = bool(raster_dense)
    choice = dataclasses.replace(kernel_choice(), **{k: (v.lower() if isinstance(v, str) else v)
                                                     for k, v in changes.items()})
    _OVERRIDE.append(choice)
    try:
        yield choice
    finally:
        for i in range(len(_OVERRIDE) - 1, -1, -1):  # by identity: an equal choice may be nested inside
            if _OVERRIDE[i] is choice:
                del _OVERRIDE[i]
                break


@functools.lru_cache(maxsize=1)
def triton_importable() -> bool:
    """Whether ``import triton`` works in this process (cached)."""
    try:
        import triton  # noqa: F401
    except Exception:  # ImportError, or a broken install raising at import
        return False
    return True


def interpreting() -> bool:
    """Whether Triton kernels run in Triton's CPU interpreter (env ``TRITON_INTERPRET=1``, the tests')."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_runs_on(device) -> bool:
    """Whether Triton kernels can run on ``device``: CUDA with triton importable, or the CPU under the
    interpreter."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.is_available() and triton_importable()
    return dev.type == "cpu" and interpreting() and triton_importable()
