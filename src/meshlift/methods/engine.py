"""What every reconstruction method shares: progress, checkpoints, train state, schedules, device/OOM, time budget.

- :class:`Monitor`: the progress protocol (the CLI passes a rich progress bar; nothing under ``methods``
  prints);
- :class:`TrainState`, and :class:`Checkpointer` (re-exported from :mod:`meshlift.methods.checkpoints`):
  resumable runs (``checkpoint.pt``, written atomically);
- :class:`ViewSampler`: seeded batches of view indices without replacement;
- schedules, each a named object with ``__call__`` and ``state_dict`` (no magic numbers in training loops),
  the learning-rate ones all here: :class:`ExponentialLR` (nvdiffrec's), :class:`LogLinearLR` (3DGS's
  position step), :class:`LinearSchedule` (weights that ramp), :class:`TimeBudget` (per-pass deadlines from
  the cost of the stages around the passes, :class:`StageCosts`; :func:`deadline_reached`);
- :func:`resolve_device`, :func:`is_oom`: the device and memory errors; :func:`kernel_backends`: a run's backends;
- :func:`prepare_output_dir`, :func:`check_memory`: refusing a bad ``--out`` or a run that cannot fit, early.

The training loop itself (read-back, divergence guard, checkpoint cadence, Ctrl-C) is
:class:`meshlift.methods.loop.TrainLoop`, one layer of modules above this one.
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
from meshlift.methods.checkpoints import (CHECKPOINT_NAME, CheckpointCadence, Checkpointer, check_resume_compatible,
                                         load_checkpoint, nonfinite_tensors)


__all__ = [
    "CHECKPOINT_NAME",
    "CheckpointCadence",
    "Checkpointer",
    "FINISHED_MARKER",
    "available_memory_bytes",
    "check_memory",
    "check_resume_compatible",
    "load_checkpoint",
    "nonfinite_tensors",
    "prepare_output_dir",
    "PassDeadline",
    "ExponentialLR",
    "LinearSchedule",
    "LogLinearLR",
    "deadline_reached",
    "Monitor",
    "StageCosts",
    "TimeBudget",
    "TrainState",
    "ViewSampler",
    "is_oom",
    "kernel_backends",
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
    what = f"device {name!r} (--set device=; `meshlift demo --device`)"
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"{what} is not a device meshlift runs on; use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{what} asks for CUDA, which this PyTorch cannot use (`meshlift doctor` says why); "
                          "use cpu or auto")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"{what} is not supported; use auto, cpu, cuda or cuda:N")
    return dev


def kernel_backends(run: Callable) -> Callable:
    """Decorator of a method's ``reconstruct(cfg, ...)``: the run uses the fast-path backends its config names
    (fields ``raster_backend``, ``shading_backend``, ``splat_backend``, those it has; ``auto`` or absent keeps
    the current choice) through :func:`meshlift.kernels.use_kernels`, restored when it returns."""
    import functools

    @functools.wraps(run)
    def wrapped(cfg, *args, **kwargs):
        from meshlift.kernels import FAMILIES, use_kernels

        names = {f: getattr(cfg, f"{f}_backend", "auto") for f in FAMILIES}
        with use_kernels(**{f: n for f, n in names.items() if n != "auto"}):
            return run(cfg, *args, **kwargs)
    return wrapped


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-memory error of PyTorch: CUDA (``torch.cuda.OutOfMemoryError``), the
    host allocator (``DefaultCPUAllocator: can't allocate memory``) or Python's ``MemoryError``."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    msg = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg
                                              or "cannot allocate memory" in msg)


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
    (nvdiffrec's ``lr_schedule``). Use with ``methods.optim.LambdaLR`` or ``torch.optim.lr_scheduler.LambdaLR``."""

    warmup: int
    decay: float

    def __call__(self, it: int) -> float:
        warm = min(1.0, (it + 1) / self.warmup) if self.warmup > 0 else 1.0
        return warm * (10.0 ** (-self.decay * it))

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class LogLinearLR:
    """``exp((1 − t) log start + t log end)`` with ``t = step / steps`` clamped to [0, 1] (3DGS's
    ``get_expon_lr_func`` without the delay; the Gaussians' position learning rate)."""

    start: float
    end: float
    steps: int

    def __call__(self, step: int) -> float:
        t = min(max(step / max(1, self.steps), 0.0), 1.0)
        return math.exp((1.0 - t) * math.log(self.start) + t * math.log(self.end))

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


@dataclass(frozen=True)
class StageCosts:
    """Estimated seconds of the stages that are not training passes: ``between_s`` after each pass but the
    last (nvdiffrec: hidden-face removal, UV unwrap, bake) and ``final_s`` after the last one (evaluation,
    export). Estimates only; :class:`TimeBudget` re-plans with what actually elapsed at each pass start."""

    between_s: float = 0.0
    final_s: float = 0.0


class TimeBudget:
    """Shares a wall-clock budget between training passes by the cost of the stages around them.

    The run has training passes in ``shares`` order (name → share of the *training* time, e.g. ``{"pass1":
    0.6, "pass2": 0.4}``), a stage of ``between_s`` seconds after every pass but the last and one of
    ``final_s`` after the last (:class:`StageCosts`, estimated by the method). When a pass starts at time
    ``now`` (the budget started at ``t_start``), the time left, ``t_start + total_s - now``, minus the
    estimated cost of every non-training stage still to come, is the training time left; the pass gets its
    share of it relative to the passes still to come. So a pass that ended early (all its iterations done)
    or a between-stage that was faster than estimated leaves its time to the next pass, and the last pass
    runs until ``final_s`` before the end. ``total_s <= 0`` means no budget (every deadline is None).

    The deadline of a pass is a :class:`PassDeadline`; its reserve may be re-estimated while the pass runs
    (``costs`` is called at each check, e.g. with the current mesh size). ``clock`` is injectable (tests).
    """

    def __init__(self, total_s: float, shares: dict[str, float],
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if any(not v >= 0 for v in shares.values()) or not sum(shares.values()) > 0:
            raise ConfigError(f"time budget: pass shares must be >= 0 and not all 0, got {shares}")
        self.total_s = float(total_s)
        self.shares = dict(shares)
        self.clock = clock
        self.t_start = clock()

    def start(self, t: Optional[float] = None) -> None:
        """Start the clock now (or at the clock value ``t``)."""
        self.t_start = self.clock() if t is None else t

    def deadline(self, stage: str, costs: Callable[[], StageCosts] | StageCosts = StageCosts(),
                 now: Optional[float] = None) -> Optional["PassDeadline"]:
        """The deadline of training pass ``stage`` starting ``now`` (default: the clock), or None without a
        budget. ``costs``: the estimated non-training stages (a value, or a callable re-evaluated at every
        check)."""
        if self.total_s <= 0:
            return None
        names = list(self.shares)
        if stage not in self.shares:
            raise ConfigError(f"time budget: unknown pass {stage!r}; passes are {', '.join(names)}")
        k = names.index(stage)
        later = names[k:]
        rest = sum(self.shares[n] for n in later)
        frac = self.shares[stage] / rest if rest > 0 else 1.0
        n_between = len(later) - 1
        return PassDeadline(self.clock() if now is None else now, self.t_start + self.total_s, frac, n_between,
                            costs, self.clock)

    def state_dict(self) -> dict:
        return {"total_s": self.total_s, "shares": dict(self.shares)}


class PassDeadline:
    """When a training pass must stop: ``t0 + frac · (t_end − t0 − reserve)``, with ``reserve = n_between ·
    between_s + final_s`` of the current :class:`StageCosts` (see :class:`TimeBudget`). Callable: returns
    the deadline as a clock value; :meth:`reached` compares with the clock."""

    def __init__(self, t0: float, t_end: float, frac: float, n_between: int,
                 costs: Callable[[], StageCosts] | StageCosts, clock: Callable[[], float]) -> None:
        self.t0, self.t_end, self.frac, self.n_between = t0, t_end, frac, n_between
        self.costs, self.clock = costs, clock

    def __call__(self) -> float:
        c = self.costs() if callable(self.costs) else self.costs
        reserve = self.n_between * max(0.0, c.between_s) + max(0.0, c.final_s)
        return self.t0 + self.frac * max(0.0, self.t_end - self.t0 - reserve)

    def reached(self) -> bool:
        """Whether the clock has passed the deadline."""
        return self.clock() > self()

    def observe(self, **facts) -> None:
        """Pass facts about the run (e.g. ``faces=``) to ``costs.observe`` when it has one."""
        fn = getattr(self.costs, "observe", None)
        if fn is not None:
            fn(**facts)


#: A budgeted pass that would get less than this many seconds (or :data:`MIN_PASS_SHARE` of the budget, the larger)
#: is refused before it starts (:func:`check_pass_time`): session 25's fox with ``time_budget_s=330`` on a shared
#: H100 trained 1 step of 9,000 (its extraction reserve took the whole budget) and exited 0 with a 7.6 dB mesh.
MIN_PASS_S = 10.0
MIN_PASS_SHARE = 0.05


def check_pass_time(deadline, budget_s: float, what: str, knob: str = "time_budget_s") -> None:
    """Raise when a budgeted pass would start with (almost) no time: before a run trains for nothing.

    Args:
        deadline: the pass's :class:`PassDeadline` (None = no budget: nothing to check).
        budget_s: the whole budget (seconds), for the message and :data:`MIN_PASS_SHARE`.
        what: the pass's name in the message (e.g. ``"training"``).
        knob: the config field to raise.

    Raises:
        ConfigError: the pass would get less than ``max(MIN_PASS_S, MIN_PASS_SHARE × budget_s)`` seconds; the
            message gives the estimated cost of the stages after it and the budget that would leave it time.
    """
    if deadline is None or not hasattr(deadline, "costs"):
        return
    now = deadline.clock()
    avail = deadline() - now
    need = max(MIN_PASS_S, MIN_PASS_SHARE * float(budget_s))
    if avail >= need:
        return
    c = deadline.costs() if callable(deadline.costs) else deadline.costs
    reserve = deadline.n_between * max(0.0, c.between_s) + max(0.0, c.final_s)
    left = max(0.0, deadline.t_end - now)
    spent = max(0.0, float(budget_s) - left)  # loading and set-up before the pass count against the budget too
    suggest = math.ceil((spent + reserve + 4 * need) / 60.0) * 60
    raise ConfigError(
        f"{knob}={budget_s:g} leaves {max(0.0, avail):.0f} s for {what} (a run needs at least {need:.0f} s): the "
        f"stages after it are estimated at {reserve:.0f} s on this device (the estimate is conservative; "
        f"{left:.0f} s of the budget are left). Raise {knob} (at least ~{suggest:.0f}) or set it to 0 (no budget)")


# ---- deadlines ---------------------------------------------------------------------------------------------


def deadline_reached(deadline) -> bool:
    """Whether ``deadline`` has passed: None (no budget) never; a :class:`PassDeadline` by its clock; a
    callable returning, or a plain, ``time.perf_counter()`` value."""
    if deadline is None:
        return False
    if hasattr(deadline, "reached"):
        return bool(deadline.reached())
    return time.perf_counter() > (deadline() if callable(deadline) else deadline)


# ---- robustness: output folders, resume checks, finite state, memory --------------------------------------

#: Files whose presence marks a finished run (``metrics.json``) or an unfinished one (the checkpoint).
FINISHED_MARKER = "metrics.json"


def _try_create(missing: list, out: Path, option: str) -> None:
    """Create the ``missing`` folders (outermost last, as listed from ``out`` up) and remove them again:
    OutputError naming ``option`` if that fails."""
    from meshlift.errors import OutputError

    created = []
    try:
        for d in reversed(missing):
            d.mkdir()
            created.append(d)
    except OSError as e:
        raise OutputError(f"{option} {out}: cannot be created ({e.strerror or e}); choose a folder you can "
                          "write to") from None
    finally:
        for d in reversed(created):
            try:
                d.rmdir()
            except OSError:
                pass


def _try_write(out: Path, option: str) -> None:
    """Create and remove a file in the existing folder ``out``: OutputError naming ``option`` if that fails."""
    import tempfile

    from meshlift.errors import OutputError

    try:
        with tempfile.NamedTemporaryFile(dir=out, prefix=".meshlift-write-test-"):
            pass
    except OSError as e:
        raise OutputError(f"{option} {out}: cannot write a file there ({e.strerror or e}); choose a folder you "
                          "can write to") from None


def prepare_output_dir(out: Optional[Path], *, resume: bool, overwrite: bool, option: str = "--out") -> None:
    """Check ``out`` before anything is loaded, so a bad ``--out`` costs nothing and loses nothing.

    ``option`` names the command's flag in the messages (``--out``, or ``--out-dir`` for ``convert``).

    Raises:
        OutputError: ``out`` is an existing file; it (or the nearest existing parent) is not writable; it
            holds a finished run (``metrics.json``) or an unfinished one (``checkpoint.pt``) and neither
            ``resume`` nor ``overwrite`` was given.
    """
    from meshlift.errors import OutputError

    if out is None:
        return
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{option} {out}: is an existing file, not a folder; choose another {option}")
    probe, missing = out, []
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {out}: {probe} is not writable; choose a folder you can write to")
    if missing:  # permission bits can pass where creating fails (root; /proc; a read-only mount)
        _try_create(missing, out, option)
    else:  # an existing folder: the same, for a file in it (root in /sys)
        _try_write(out, option)
    if resume or overwrite or not out.is_dir():
        return
    if (out / FINISHED_MARKER).is_file():
        raise OutputError(
            f"--out {out}: holds a finished run ({FINISHED_MARKER}); running again would "
            "replace it. Pass --resume to continue or re-export it, --overwrite to replace it, or choose "
            "another --out")
    if (out / CHECKPOINT_NAME).is_file():
        raise OutputError(
            f"--out {out}: holds an unfinished run ({CHECKPOINT_NAME}); pass --resume to continue it, "
            "--overwrite to start again, or choose another --out")


def available_memory_bytes(device: torch.device) -> Optional[int]:
    """Free memory on ``device``: CUDA ``mem_get_info``; CPU ``MemAvailable`` of /proc/meminfo (None when
    unknown)."""
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except Exception:  # noqa: BLE001
            return None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_memory(estimate_bytes: int, device: torch.device, what: str, knobs: str) -> None:
    """Refuse before allocating when ``estimate_bytes`` exceeds the free memory of ``device``.

    Raises:
        OutOfMemoryError: naming the estimate, the free memory and the knobs.
    """
    free = available_memory_bytes(device)
    if free is None or estimate_bytes <= free:
        return
    from meshlift.errors import OutOfMemoryError

    gib = 1024**3
    raise OutOfMemoryError(
        f"{what} needs about {estimate_bytes / gib:.1f} GiB but {device} has {free / gib:.1f} GiB free; lower "
        f"the memory knobs: {knobs}")

