"""What every reconstruction method shares: progress, checkpoints, train state, schedules, device/OOM, time budget.

- :class:`Monitor`: the progress protocol (the CLI passes a rich progress bar; nothing under ``methods``
  prints);
- :class:`TrainState`, and :class:`Checkpointer` (re-exported from :mod:`meshlift.methods.checkpoints`):
  resumable runs (``checkpoint.pt``, written atomically);
- :class:`ViewSampler`: seeded batches of view indices without replacement;
- schedules, each a named object with ``__call__`` and ``state_dict`` (no magic numbers in training loops):
  :class:`ExponentialLR` (nvdiffrec's learning-rate schedule), :class:`LinearSchedule` (weights that ramp),
  :class:`TimeBudget` (per-pass deadlines from the cost of the stages around the passes, :class:`StageCosts`);
- :func:`resolve_device`, :func:`is_oom`: the device and memory errors; :func:`kernel_backends`: a run's backends;
- :func:`end_step`: per-step bookkeeping (history, progress, previews, checkpoints, time budget), reading the
  loss back from the device in batches (:class:`LossReadback`: no host sync in most steps);
- :data:`NO_STAGES`: the do-nothing stage timer of a training step (``benchmarks/reconstruct_speed.py`` passes a
  timing one).
"""

from __future__ import annotations

import contextlib
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
    "DivergenceGuard",
    "LossReadback",
    "NO_STAGES",
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
    "Monitor",
    "StageClock",
    "StageCosts",
    "TimeBudget",
    "TrainState",
    "ViewSampler",
    "end_step",
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
    what = f"device {name!r} (--device, or --set device=)"
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


# ---- per-step bookkeeping ---------------------------------------------------------------------------------


class _NoStages:
    """The stage timer of a normal run: every stage is a no-op context."""

    _ctx = contextlib.nullcontext()

    def __call__(self, name: str):
        return self._ctx


#: Do-nothing stage timer: ``with stages("backward"): ...`` costs one call. A timing one (CUDA events) is in
#: ``benchmarks/reconstruct_speed.py``; any callable ``name -> context manager`` works.
NO_STAGES = _NoStages()


class LossReadback:
    """Keeps each step's loss and MSE on the device and reads them back together every ``every`` steps.

    ``float(loss)`` every step is a host sync: on CUDA the host waits for the step's kernels before it may
    queue the next step's. :meth:`push` stores the detached scalars (no sync); :meth:`drain` stacks what is
    pending and copies it to the host in one transfer (one sync per ``every`` steps). The values are the
    same floats ``float(loss)`` gives (a float32 copied to the host).
    """

    def __init__(self, every: int = 1) -> None:
        if int(every) < 1:
            raise ConfigError(f"readback cadence must be >= 1 step, got {every}")
        self.every = int(every)
        self.pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    def push(self, it: int, loss: torch.Tensor, mse: torch.Tensor) -> None:
        """Store step ``it``'s (0-based) scalars."""
        self.pending.append((it, loss.detach().reshape(()), mse.detach().reshape(()).to(loss.dtype)))

    def due(self, step: int) -> bool:
        """Whether the cadence asks for a read-back after ``step`` (1-based count of steps done)."""
        return step % self.every == 0

    def drain(self) -> list[tuple[int, float, float]]:
        """``[(it, loss, mse)]`` of the pending steps as Python floats (one device → host copy)."""
        if not self.pending:
            return []
        vals = torch.stack([x for _, l, m in self.pending for x in (l, m)]).cpu().tolist()
        out = [(it, float(vals[2 * k]), float(vals[2 * k + 1])) for k, (it, _, _) in enumerate(self.pending)]
        self.pending = []
        return out

    def clear(self) -> None:
        self.pending = []


def deadline_reached(deadline) -> bool:
    """Whether ``deadline`` has passed: None (no budget) never; a :class:`PassDeadline` by its clock; a
    callable returning, or a plain, ``time.perf_counter()`` value."""
    if deadline is None:
        return False
    if hasattr(deadline, "reached"):
        return bool(deadline.reached())
    return time.perf_counter() > (deadline() if callable(deadline) else deadline)


class GracefulInterrupt:
    """Ctrl-C during training: the first SIGINT asks the training loop to stop after the current step with a
    checkpoint (:func:`end_step` saves it and raises ``KeyboardInterrupt``); a second one interrupts at once.

    Use ``with INTERRUPT:`` around a training call (the CLI does). The handler is installed only on the main
    thread and only over Python's default one; elsewhere the context changes nothing. Multi-process runs keep
    the default behaviour (the ranks would see the signal at different steps).
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous = None

    def __enter__(self) -> "GracefulInterrupt":
        import signal
        import threading

        self.requested = False
        distributed = int(os.environ.get("WORLD_SIZE", "1") or 1) > 1  # torchrun ranks: Python's default
        if (not distributed and threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        import sys

        sys.stderr.write("\nCtrl-C: stopping after this step with a checkpoint (press Ctrl-C again to stop now)\n")

    def __exit__(self, *exc) -> bool:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        self.requested = False
        return False


#: The process's :class:`GracefulInterrupt` (read by :func:`end_step`).
INTERRUPT = GracefulInterrupt()


def end_step(pass_no: int, it: int, total: int, loss: torch.Tensor, mse: torch.Tensor, *, state: TrainState,
             monitor: Monitor, preview_every: int, cadence: "CheckpointCadence", deadline,
             save: Callable[[], None], preview: Optional[Callable[[], None]],
             guard: Optional["DivergenceGuard"] = None, readback: Optional[LossReadback] = None,
             agree: Optional[Callable[[bool], bool]] = None) -> bool:
    """Bookkeeping after step ``it`` (0-based) of pass ``pass_no``: the loss read-back, the divergence guard
    (a non-finite loss rolls the state back, see :class:`DivergenceGuard`), history, progress, a preview
    every ``preview_every`` steps, a checkpoint when ``cadence`` says so. Returns True when the ``deadline``
    (a ``time.perf_counter()`` value, or a callable returning one, e.g. :class:`PassDeadline`) ends the
    pass early. After a Ctrl-C (:data:`INTERRUPT`, one process only) it saves a checkpoint of this step and
    raises ``KeyboardInterrupt``.

    With ``readback`` (a :class:`LossReadback`), the step's loss stays on the device until the read-back
    cadence, a preview, a checkpoint, a guard snapshot, the deadline or the last step asks for the values;
    then the pending steps are checked by the guard in order, recorded and reported (``monitor.update`` once
    per step, late by at most ``readback.every - 1`` steps). A non-finite loss found in a read-back rolls
    back to the guard's snapshot, which is never newer than the last read-back (snapshots are taken only at
    read-backs); the steps run since the bad one are dropped. Without ``readback`` every step is read back
    at once (the same as ``LossReadback(1)``).

    With several processes ``agree`` (rank 0's decision on every rank,
    :meth:`meshlift.methods.distributed.DistContext.agree`) makes the deadline decision common: each rank
    observes its own clock (and a cost-based :class:`PassDeadline` its own step costs), so without it the
    ranks could stop at different steps, or read back at different steps, and their collectives would no
    longer match. It is asked every step before the read-back gate (the gate then opens on all ranks alike).
    """
    readback = readback if readback is not None else LossReadback(1)
    step = it + 1
    readback.push(it, loss, mse)
    preview_due = preview is not None and preview_every > 0 and step % preview_every == 0
    save_due = cadence.due(step) and step < total
    over = step < total and deadline_reached(deadline)
    if agree is not None and deadline is not None and step < total:
        over = agree(over)
    snapshot_due = guard is not None and guard.due(step)
    interrupted = INTERRUPT.requested  # Ctrl-C (GracefulInterrupt: never set in a torchrun rank)
    if not (readback.due(step) or preview_due or save_due or over or snapshot_due or step >= total
            or interrupted):
        return False
    for i, loss_value, mse_value in readback.drain():
        if guard is not None and guard.after_step(i + 1, loss_value):
            readback.clear()
            monitor.log(f"pass {pass_no}: non-finite loss or parameters at step {i + 1}: rolled back to the state "
                        f"of step {guard.snapshot_step} and halved the learning rates")
            if interrupted:  # the rolled-back state is not step `step`'s: keep the last cadence checkpoint
                raise KeyboardInterrupt
            return False
        psnr = psnr_from_mse(mse_value)
        state.history.append({"pass": pass_no, "iteration": i + 1, "loss": loss_value, "psnr": psnr})
        state.iteration = i + 1
        monitor.update(i + 1, loss_value, psnr)
    if preview_due:
        with torch.no_grad():
            preview()
    if save_due or interrupted:
        save()
        cadence.saved()
    if interrupted:
        monitor.log(f"pass {pass_no}: stopped by Ctrl-C after step {step}; its checkpoint is written before the "
                    "run ends (--resume continues)")
        raise KeyboardInterrupt
    if over:
        monitor.log(f"pass {pass_no}: time budget reached after {step} of {total} steps")
        return True
    return False


class StageClock:
    """Adds wall time to ``state.timings[key]`` each :meth:`flush` (so mid-pass checkpoints carry it too)."""

    def __init__(self, state: TrainState, key: str) -> None:
        self.state, self.key = state, key
        self.t = time.perf_counter()

    def flush(self) -> None:
        now = time.perf_counter()
        self.state.timings[self.key] = self.state.timings.get(self.key, 0.0) + now - self.t
        self.t = now


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


class DivergenceGuard:
    """Non-finite loss or parameters → roll back to the last good state and halve the learning rates, once;
    a second divergence stops the run with :class:`~meshlift.errors.TrainingError` (nothing is written).

    ``capture()`` returns a snapshot (tensors are cloned by the guard), ``restore(snapshot)`` puts it back.
    A snapshot is taken every ``snapshot_every`` steps, and only after the parameters were checked finite.
    The step count goes on after a rollback (the steps since the snapshot are redone as later steps).
    """

    def __init__(self, name: str, capture: Callable[[], dict], restore: Callable[[dict], None],
                 optimizers: list, lr_fields: str, snapshot_every: int = 50, max_rollbacks: int = 1,
                 schedulers: tuple = (), hint: str = "") -> None:
        self.name, self.capture, self.restore = name, capture, restore
        self.hint = hint  # appended to the error (e.g. how to diagnose)
        self.optimizers, self.lr_fields = list(optimizers), lr_fields
        self.schedulers = list(schedulers)
        self.snapshot_every, self.max_rollbacks = max(1, int(snapshot_every)), int(max_rollbacks)
        self.rollbacks = 0
        self.snapshot: Optional[dict] = None
        self.snapshot_step = 0

    def _clone(self, tree):
        if torch.is_tensor(tree):
            return tree.detach().clone()
        if isinstance(tree, dict):
            return {k: self._clone(v) for k, v in tree.items()}
        if isinstance(tree, (list, tuple)):
            return type(tree)(self._clone(v) for v in tree)
        return tree

    def due(self, step: int) -> bool:
        """Whether :meth:`after_step` of ``step`` takes a snapshot (the state must then be that of ``step``:
        with deferred read-backs, :func:`end_step` reads back at every such step)."""
        return step % self.snapshot_every == 0

    def start(self, step: int) -> None:
        """Take the first snapshot (call before the loop)."""
        self.snapshot, self.snapshot_step = self._clone(self.capture()), step

    def after_step(self, step: int, loss_value: float) -> bool:
        """Call after each optimiser step with the step's loss (a float already read back).

        Returns:
            True when the state was rolled back (the caller carries on with the next step).

        Raises:
            TrainingError: the run diverged again after a rollback.
        """
        bad = not math.isfinite(loss_value)
        if not bad and self.due(step):
            state = self.capture()
            bad_names = nonfinite_tensors(state)
            if not bad_names:
                self.snapshot, self.snapshot_step = self._clone(state), step
                return False
            bad = True
        if not bad:
            return False
        from meshlift.errors import TrainingError

        if self.rollbacks >= self.max_rollbacks or self.snapshot is None:
            raise TrainingError(
                f"{self.name}: the loss or parameters became non-finite (NaN/inf) at step {step} again after "
                f"a rollback with halved learning rates; stopped without writing outputs. Lower the learning "
                f"rates ({self.lr_fields}) or check the input; the last good checkpoint is kept{self.hint}")
        self.restore(self._clone(self.snapshot))
        for opt in self.optimizers:
            for g in opt.param_groups:
                g["lr"] = g["lr"] * 0.5
                if "initial_lr" in g:
                    g["initial_lr"] = g["initial_lr"] * 0.5
        for sch in self.schedulers:  # LambdaLR (meshlift's or torch's) recomputes lr from base_lrs
            sch.base_lrs = [b * 0.5 for b in sch.base_lrs]
        self.rollbacks += 1
        return True


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

