"""What every reconstruction method shares: progress, checkpoints, train state, schedules, device/OOM, time budget.

- :class:`Monitor`: the progress protocol (the CLI passes a rich progress bar; nothing under ``methods``
  prints);
- :class:`TrainState` and :class:`Checkpointer`: resumable runs (``checkpoint.pt``, written atomically);
- :class:`ViewSampler`: seeded batches of view indices without replacement;
- schedules, each a named object with ``__call__`` and ``state_dict`` (no magic numbers in training loops):
  :class:`ExponentialLR` (nvdiffrec's learning-rate schedule), :class:`LinearSchedule` (weights that ramp),
  :class:`TimeBudget` (per-pass deadlines);
- :func:`resolve_device`, :func:`is_oom`: the device and memory errors;
- :func:`end_step`: per-step bookkeeping (history, progress, previews, checkpoints, time budget).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch

from meshlift.errors import ConfigError

CHECKPOINT_NAME = "checkpoint.pt"

__all__ = [
    "CHECKPOINT_NAME",
    "Checkpointer",
    "ExponentialLR",
    "LinearSchedule",
    "Monitor",
    "TimeBudget",
    "TrainState",
    "ViewSampler",
    "end_step",
    "is_oom",
    "psnr_from_mse",
    "resolve_device",
]


# ---- progress ---------------------------------------------------------------------------------------------


class Monitor:
    """Receives progress events; the default does nothing (the CLI supplies a rich progress bar)."""

    def start_pass(self, name: str, total: int, start: int = 0) -> None:
        """A pass of ``total`` iterations begins (at ``start`` when resuming)."""

    def update(self, iteration: int, loss: float, psnr: float) -> None:
        """Iteration ``iteration`` (1-based count done) finished with these values."""

    def end_pass(self) -> None:
        """The current pass finished."""

    def log(self, message: str) -> None:
        """A one-line status message."""


# ---- device, memory ---------------------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA when available else CPU; otherwise ``torch.device(name)``.

    Raises:
        ConfigError: the name is not a device, or CUDA was asked for and is not available.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"config field 'device' = {name!r}: {exc}; use auto, cpu or cuda") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"config field 'device' = {name!r} but CUDA is not available; use device=cpu")
    return dev


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-memory error of PyTorch (CUDA or host allocator)."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def psnr_from_mse(mse: float) -> float:
    """PSNR in dB of a mean squared error of [0, 1] images (``inf`` for 0)."""
    return float("inf") if mse <= 0 else -10.0 * math.log10(mse)


# ---- state, checkpoints -----------------------------------------------------------------------------------


@dataclass
class TrainState:
    """Mutable state of a run, saved in the checkpoint.

    Attributes:
        stage: the method's current stage (nvdiffrec: ``pass1``, ``pass2`` or ``done``); iteration: steps
            done in the current stage.
        history: per-step dicts (pass, iteration, loss, psnr) for the loss curve.
        timings: seconds spent per stage.
        iterations: steps actually run per stage (fewer than configured when a time budget cut it short).
    """

    stage: str = "pass1"
    iteration: int = 0
    history: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    iterations: dict = field(default_factory=dict)

    def state_dict(self) -> dict:
        """Plain-data copy for the checkpoint."""
        return dataclasses.asdict(self)


class Checkpointer:
    """Writes ``checkpoint.pt`` atomically (temp file + rename) in the output folder (nothing when None)."""

    def __init__(self, out_dir: Optional[Path]) -> None:
        self.path = None if out_dir is None else Path(out_dir) / CHECKPOINT_NAME

    def save(self, payload: dict) -> None:
        """Write ``payload`` (tensors and plain data) with ``torch.save``."""
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        torch.save(payload, tmp)
        os.replace(tmp, self.path)

    def load(self) -> Optional[dict]:
        """The saved payload on the CPU, or None when there is none (``weights_only`` loading)."""
        if self.path is None or not self.path.is_file():
            return None
        return torch.load(self.path, map_location="cpu", weights_only=True)


class ViewSampler:
    """Draws batches of view indices: random permutations without replacement, seeded (resumable)."""

    def __init__(self, n: int, batch: int, seed: int) -> None:
        self.n, self.batch = n, min(batch, n)
        self.g = torch.Generator().manual_seed(seed)
        self.order = torch.randperm(n, generator=self.g)
        self.pos = 0

    def next(self) -> torch.Tensor:
        """LongTensor ``[batch]`` of view indices; a new permutation starts when one is used up."""
        if self.pos + self.batch > self.n:
            self.order = torch.randperm(self.n, generator=self.g)
            self.pos = 0
        idx = self.order[self.pos:self.pos + self.batch]
        self.pos += self.batch
        return idx

    def state_dict(self) -> dict:
        return {"g": self.g.get_state(), "order": self.order, "pos": self.pos}

    def load_state_dict(self, s: dict) -> None:
        self.g.set_state(s["g"])
        self.order, self.pos = s["order"], int(s["pos"])


# ---- schedules --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExponentialLR:
    """Learning-rate factor of step ``it``: linear warm-up over ``warmup`` steps, then ``10^(-decay · it)``
    (nvdiffrec's ``lr_schedule``). Use with ``torch.optim.lr_scheduler.LambdaLR``."""

    warmup: int
    decay: float

    def __call__(self, it: int) -> float:
        warm = min(1.0, (it + 1) / self.warmup) if self.warmup > 0 else 1.0
        return warm * (10.0 ** (-self.decay * it))

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class LinearSchedule:
    """A value ramping linearly from ``start`` to ``end`` as ``x`` goes from 0 to ``duration``, then ``end``.

    ``x`` is whatever the caller measures progress in (steps, or the fraction of a pass done); the name of
    the instance says which (e.g. ``sdf_reg`` over the first quarter of pass 1).
    """

    start: float
    end: float
    duration: float

    def __call__(self, x: float) -> float:
        return self.start + (self.end - self.start) * min(1.0, x / self.duration)

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)


class TimeBudget:
    """Wall-clock deadlines per stage: stage ``k`` must end once ``fractions[k]`` of ``total_s`` has passed
    since :meth:`start`. ``total_s <= 0`` means no budget (every deadline is None)."""

    def __init__(self, total_s: float, fractions: dict[str, float]) -> None:
        self.total_s = float(total_s)
        self.fractions = dict(fractions)
        self.t_start = time.perf_counter()

    def start(self, t: Optional[float] = None) -> None:
        """Start the clock now (or at the ``time.perf_counter()`` value ``t``)."""
        self.t_start = time.perf_counter() if t is None else t

    def deadline(self, stage: str) -> Optional[float]:
        """The ``time.perf_counter()`` value at which ``stage`` must stop, or None without a budget."""
        if self.total_s <= 0:
            return None
        return self.t_start + self.fractions[stage] * self.total_s

    def state_dict(self) -> dict:
        return {"total_s": self.total_s, "fractions": dict(self.fractions)}


# ---- per-step bookkeeping ---------------------------------------------------------------------------------


def end_step(pass_no: int, it: int, total: int, loss: torch.Tensor, mse: torch.Tensor, *, state: TrainState,
             monitor: Monitor, preview_every: int, checkpoint_every: int, deadline: Optional[float],
             save: Callable[[], None], preview: Optional[Callable[[], None]]) -> bool:
    """Bookkeeping after step ``it`` (0-based) of pass ``pass_no``: history, progress, a preview every
    ``preview_every`` steps, a checkpoint every ``checkpoint_every`` (0 = never). Returns True when the
    ``deadline`` (a ``time.perf_counter()`` value) ends the pass early."""
    psnr = psnr_from_mse(float(mse))
    loss_value = float(loss.detach())
    state.history.append({"pass": pass_no, "iteration": it + 1, "loss": loss_value, "psnr": psnr})
    state.iteration = it + 1
    monitor.update(it + 1, loss_value, psnr)
    if preview is not None and preview_every > 0 and (it + 1) % preview_every == 0:
        with torch.no_grad():
            preview()
    if checkpoint_every > 0 and (it + 1) % checkpoint_every == 0 and it + 1 < total:
        save()
    if deadline is not None and time.perf_counter() > deadline and it + 1 < total:
        monitor.log(f"pass {pass_no}: time budget reached after {it + 1} of {total} steps")
        return True
    return False
