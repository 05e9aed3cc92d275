"""One training-loop shape for every method: :class:`TrainLoop` and the per-step machinery it owns.

A method's training pass is a :class:`TrainLoop` subclass (the surface method's two passes,
:mod:`meshlift.methods.nvdiffrec.passes`; the Gaussian trainer, :mod:`meshlift.methods.gaussians.trainer`,
which MILo reuses). The loop is written once here; a family fills in its hooks:

- :meth:`TrainLoop.begin`: before the first step (initialise or resume, the step-0 preview); sets
  ``self.step`` (steps already done) and ``self.total``;
- :meth:`TrainLoop.train_step`: one optimisation step ``it`` (0-based); returns its ``(loss, mse)`` as 0-dim
  device tensors (not read back);
- :meth:`TrainLoop.after_train_step`: right after it, extra fields for the step's history row (or None; 0-dim
  tensors among them are read back with the loss, as floats);
- :meth:`TrainLoop.preview_step`: write a preview after ``step`` steps (under ``torch.no_grad``);
- :meth:`TrainLoop.capture` / :meth:`TrainLoop.on_rollback`: the divergence guard's snapshot, and how to
  put one back and halve the learning rates;
- :meth:`TrainLoop.after_step`: after a step's bookkeeping (not after a step that was rolled back);
- :meth:`TrainLoop.payload`: the checkpoint dict; every checkpoint goes through
  :meth:`TrainLoop.save_checkpoint`.

Per step the loop runs ``train_step`` → ``after_train_step`` → the bookkeeping (:meth:`TrainLoop._bookkeeping`:
loss read-back, divergence guard, history, progress, preview, time budget, Ctrl-C) → ``after_step`` → a
checkpoint when the cadence says so. What differs between families is data: :class:`GuardSettings` (when the
guard snapshots and checks the parameters), the read-back cadence (:func:`readback_every`, one rule with a
per-family GPU default), the checkpoint cadence (:class:`~meshlift.methods.checkpoints.CheckpointCadence`).

Also here: :class:`LossReadback` (the losses stay on the device and are read back in groups),
:class:`StageClock` (a pass's wall and CPU time in ``TrainState.timings``), :data:`NO_STAGES` (the
do-nothing stage timer of a step; ``benchmarks/reconstruct_speed.py`` passes a timing one) and
:data:`INTERRUPT` (Ctrl-C stops after the current step with a checkpoint).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from meshlift.errors import ConfigError, TrainingError
from meshlift.methods.checkpoints import CheckpointCadence, Checkpointer, map_tensors, nonfinite_tensors
from meshlift.methods.distributed import SINGLE, DistContext, SyncedCadence
from meshlift.methods.engine import Monitor, TrainState, deadline_reached, psnr_from_mse

__all__ = ["GuardSettings", "INTERRUPT", "GracefulInterrupt", "LossReadback", "NO_STAGES", "StageClock",
           "TrainLoop", "readback_every"]


def readback_every(requested: int, device: torch.device, cuda_default: int) -> int:
    """Steps between loss read-backs: ``requested`` when > 0 (a config's ``readback_every``); with 0 every
    step on the CPU (a read-back costs nothing there) and ``cuda_default`` elsewhere (progress then arrives in
    groups of that many steps, and a divergence is caught at most that many steps late, then rolled back as
    at once).

    Raises:
        ConfigError: ``requested`` < 0 or ``cuda_default`` < 1.
    """
    requested = int(requested)
    if requested < 0 or int(cuda_default) < 1:
        raise ConfigError(f"readback_every must be >= 0 (0 = the device's default), got {requested}")
    if requested > 0:
        return requested
    return 1 if torch.device(device).type == "cpu" else int(cuda_default)


# ---- per-step machinery -----------------------------------------------------------------------------------


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


def _host_extras(extras: dict) -> None:
    """Replace the tensors among the pending history fields ``{it: {name: value}}`` by Python floats, in one
    device → host copy (made after the loss read-back: the values are ready, nothing more is waited for)."""
    keys = [(i, k) for i, row in extras.items() for k, v in row.items() if torch.is_tensor(v)]
    if not keys:
        return
    vals = torch.stack([extras[i][k].detach().reshape(()).to(torch.float64) for i, k in keys]).cpu().tolist()
    for (i, k), v in zip(keys, vals):
        extras[i][k] = float(v)


class StageClock:
    """Keeps ``state.timings[key]`` at its value when the clock started plus the wall time since (and
    ``state.timings[cpu_key]`` likewise with the process's CPU time), written at each :meth:`flush` (so
    mid-pass checkpoints carry it too). ``state`` may be replaced (a rollback restores an older one): the
    next flush writes the whole time since the start into the new one."""

    def __init__(self, state: TrainState, key: str, cpu_key: Optional[str] = None) -> None:
        self.state, self.key, self.cpu_key = state, key, cpu_key
        self.base = state.timings.get(key, 0.0)
        self.cpu_base = state.timings.get(cpu_key, 0.0) if cpu_key else 0.0
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def flush(self) -> None:
        self.state.timings[self.key] = self.base + time.perf_counter() - self.t0
        if self.cpu_key:
            self.state.timings[self.cpu_key] = self.cpu_base + time.process_time() - self.c0


class GracefulInterrupt:
    """Ctrl-C during training: the first SIGINT asks the training loop to stop after the current step with a
    checkpoint (:class:`TrainLoop` saves it and raises ``KeyboardInterrupt``); a second one interrupts at once.

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


#: The process's :class:`GracefulInterrupt` (read by :class:`TrainLoop` after every step).
INTERRUPT = GracefulInterrupt()


# ---- the loop ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GuardSettings:
    """How a family's divergence guard works (see :class:`TrainLoop`).

    A non-finite loss (or parameter) rolls the run back to the last snapshot and halves the learning rates
    (:meth:`TrainLoop.on_rollback`), then the state is snapshotted again; after ``max_rollbacks`` rollbacks
    the next divergence raises :class:`~meshlift.errors.TrainingError` (nothing non-finite is ever written).
    """

    snapshot_every: int = 0
    """Steps between snapshots taken by the guard itself (the state is then checked finite first; the step is
    always read back); 0 = none (snapshots only at the start, at checkpoints with ``snapshot_at_checkpoint``
    and after a rollback)."""
    snapshot_at_checkpoint: bool = False
    """Every checkpoint (written or not: the cadence counts) becomes the snapshot; the family's
    :meth:`TrainLoop.payload` and :meth:`TrainLoop.capture` must then return copies (no live tensors), which
    the guard keeps as they are (otherwise it clones what :meth:`TrainLoop.capture` returns)."""
    check_params_every_readback: bool = False
    """Check the parameters (:meth:`TrainLoop.params_finite`) at the newest step of every read-back, not only
    at snapshot steps (a checkpoint is then always checked: a due checkpoint forces a read-back)."""
    max_rollbacks: int = 1
    """Divergences survived by rolling back; the next one stops the run."""


def _clone(tree):
    """Deep copy of a (nested) state with every tensor detached and cloned (same device)."""
    return map_tensors(tree, lambda t: t.detach().clone())


class TrainLoop:
    """The training loop of every method; a family subclasses it and fills in the hooks (module docstring).

    Attributes a subclass sets (in ``__init__`` or :meth:`begin`): ``name`` (the pass in messages, e.g.
    ``"pass 1"``), ``title`` (the progress bar's label), ``pass_no`` (the history rows' ``pass``),
    ``timing_key`` / ``cpu_timing_key`` / ``iterations_key`` (where the pass's time and steps go in
    ``state``), ``guard`` (:class:`GuardSettings`), ``readback_steps`` (steps between read-backs,
    :func:`readback_every`), ``checkpoint_every`` / ``checkpoint_every_s`` (the cadence), ``preview`` (a
    callable or None; :meth:`preview_step` runs every ``preview_every`` steps when it is set), ``state``,
    ``monitor``, ``checkpointer``, ``dist``, ``stages``; :meth:`begin` sets ``step`` and ``total``
    (``deadline``, the argument of :meth:`run`, is set by then).

    The step count ``self.step`` is the number of steps done; a rollback may set it back (the Gaussian trainer
    redoes the steps since the snapshot) or leave it (the surface passes go on counting).
    """

    name = "training"
    title = "training"
    pass_no = 1
    timing_key = "train_s"
    cpu_timing_key: Optional[str] = None
    iterations_key = "train"
    guard = GuardSettings()
    readback_steps = 1
    checkpoint_every = 0
    checkpoint_every_s = 0.0
    preview_every = 0
    preview: Optional[Callable] = None
    stages = NO_STAGES
    dist: DistContext = SINGLE

    def __init__(self, *, state: Optional[TrainState] = None, monitor: Optional[Monitor] = None,
                 checkpointer: Optional[Checkpointer] = None) -> None:
        self.state = state if state is not None else TrainState()
        self.monitor = monitor or Monitor()
        self.checkpointer = checkpointer or Checkpointer(None)
        self.step = 0
        self.total = 0
        self.recoveries = 0  # rollbacks so far (checkpointed by families that resume with them)
        self.saved_step: Optional[int] = None  # step of the last checkpoint written to disk
        self.deadline = None  # the current run's (for hooks that observe it)
        self.snapshot: Optional[dict] = None
        self.snapshot_step = 0
        self._clock: Optional[StageClock] = None
        self._cadence = None

    # ---- hooks ------------------------------------------------------------------------------------------
    def begin(self) -> None:
        """Before the first step: initialise or resume, set ``self.step`` and ``self.total``."""

    def train_step(self, it: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step ``it`` (0-based): returns ``(loss, mse)`` as 0-dim device tensors (read back later)."""
        raise NotImplementedError

    def after_train_step(self, it: int) -> Optional[dict]:
        """Right after :meth:`train_step`: extra fields for step ``it``'s history row (or None). A 0-dim tensor
        value stays on the device until the loss read-back, which turns it into a float (:func:`_host_extras`)."""
        return None

    def preview_step(self, step: int) -> None:
        """Write a preview of the state after ``step`` steps (called under ``torch.no_grad``)."""

    def capture(self) -> dict:
        """The state a rollback returns to (the guard clones it); default: the checkpoint payload."""
        return self.payload()

    def params_finite(self) -> bool:
        """Whether the trained state is finite (default: every tensor of :meth:`capture`)."""
        return not nonfinite_tensors(self.capture())

    def on_rollback(self, snapshot: dict) -> None:
        """Put ``snapshot`` (a clone of a :meth:`capture`) back and halve the learning rates."""
        raise NotImplementedError

    def divergence_message(self, step: int, loss: float) -> str:
        """The error when the run diverges again after its rollbacks (``step``: 1-based)."""
        return (f"{self.name}: the loss or parameters became non-finite (NaN/inf) at step {step} again after a "
                "rollback with halved learning rates; stopped without writing outputs. Lower the learning rates "
                "or check the input; the last good checkpoint is kept")

    def after_step(self, it: int) -> None:
        """After step ``it``'s bookkeeping (a step that was rolled back gets no call)."""

    def payload(self) -> dict:
        """The checkpoint: everything a resumed run needs."""
        raise NotImplementedError

    # ---- checkpoints --------------------------------------------------------------------------------------
    def save_checkpoint(self, payload: Optional[dict] = None) -> dict:
        """Write ``payload`` (default :meth:`payload`) through the checkpointer (a payload holding NaN/inf is
        not written), restart the cadence and, with ``guard.snapshot_at_checkpoint``, make it the rollback
        snapshot. Returns the payload."""
        if self._clock is not None:
            self._clock.flush()
        payload = self.payload() if payload is None else payload
        self.checkpointer.save(payload)
        if self.checkpointer.path is not None:
            self.saved_step = self.step
        if self._cadence is not None:
            self._cadence.saved()
        if self.guard.snapshot_at_checkpoint:
            self.snapshot, self.snapshot_step = payload, self.step
        return payload

    # ---- the loop -----------------------------------------------------------------------------------------
    def run(self, deadline=None) -> int:
        """:meth:`begin`, then steps ``self.step`` … ``self.total - 1`` with their bookkeeping, until the end,
        the ``deadline`` (a ``time.perf_counter()`` value, or a :class:`~meshlift.methods.engine.PassDeadline`;
        with several processes rank 0 decides) or Ctrl-C (:data:`INTERRUPT`: a checkpoint of the step, then
        ``KeyboardInterrupt``). Records the steps done in ``state.iterations[iterations_key]`` and returns them.

        Raises:
            TrainingError: the run diverged again after its rollbacks (:class:`GuardSettings`).
        """
        self.deadline = deadline
        self.begin()
        self.monitor.start_pass(self.title, self.total, self.step)
        start = self.step
        self._clock = StageClock(self.state, self.timing_key, self.cpu_timing_key)
        cadence = CheckpointCadence(self.checkpoint_every, self.checkpoint_every_s)
        self._cadence = SyncedCadence(cadence, self.dist) if self.dist.enabled else cadence
        self._take_snapshot(self.capture(), self.step)
        readback = LossReadback(self.readback_steps)
        extras: dict = {}
        while self.step < self.total:
            it = self.step
            loss, mse = self.train_step(it)
            self.step = it + 1
            extra = self.after_train_step(it)
            if extra:
                extras[it] = extra
            self._clock.flush()
            save = self.step < self.total and self._cadence.due(self.step)
            with self.stages("bookkeeping"):
                stop, rolled_back = self._bookkeeping(it, loss, mse, readback, extras, save, deadline)
            if rolled_back:
                extras.clear()
                continue
            self.after_step(it)
            if stop:
                break
            if save:
                self.save_checkpoint()
        self.monitor.end_pass()
        self.state.iterations[self.iterations_key] = self.step
        if self.step > start:  # a resume with nothing left to train adds no time
            self._clock.flush()
        self._clock = self._cadence = None
        return self.step

    def _bookkeeping(self, it: int, loss: torch.Tensor, mse: torch.Tensor, readback: LossReadback, extras: dict,
                     save: bool, deadline) -> tuple[bool, bool]:
        """After step ``it`` (0-based): the read-back, the guard, history, progress, a preview, Ctrl-C, the
        deadline. Returns ``(stop, rolled_back)``.

        The step's loss stays on the device until the read-back cadence, a preview, a due checkpoint, a guard
        snapshot, the deadline, Ctrl-C or the last step asks for the values; then the pending steps are
        checked in order, recorded and reported (``monitor.update`` once per step, late by at most
        ``readback_steps - 1`` steps). A non-finite loss rolls back to the snapshot, which is never newer than the
        last read-back; the steps run since the bad one are dropped.
        """
        step, total, dist = it + 1, self.total, self.dist
        readback.push(it, loss, mse)
        preview_due = self.preview is not None and self.preview_every > 0 and step % self.preview_every == 0
        over = step < total and deadline_reached(deadline)
        if dist.enabled and deadline is not None and step < total:
            over = dist.agree(over)  # each rank observes its own clock: rank 0 decides for all
        snapshot_due = self.guard.snapshot_every > 0 and step % self.guard.snapshot_every == 0
        interrupted = INTERRUPT.requested  # Ctrl-C (GracefulInterrupt: never set in a torchrun rank)
        if not (readback.due(step) or preview_due or save or over or snapshot_due or step >= total
                or interrupted):
            return False, False
        drained = readback.drain()
        _host_extras(extras)
        for i, loss_value, mse_value in drained:
            if self._check(i + 1, loss_value):
                readback.clear()
                if interrupted:  # the rolled-back state is not step `step`'s: keep the last checkpoint
                    raise KeyboardInterrupt
                return False, True
            psnr = psnr_from_mse(mse_value)
            self.state.history.append({"pass": self.pass_no, "iteration": i + 1, "loss": loss_value, "psnr": psnr,
                                       **extras.pop(i, {})})
            self.state.iteration = i + 1
            self.monitor.update(i + 1, loss_value, psnr)
        if preview_due:
            with torch.no_grad():
                self.preview_step(step)
        if interrupted:
            self.save_checkpoint()
            self.monitor.log(f"{self.name}: stopped by Ctrl-C after step {step}; its checkpoint is written before "
                             "the run ends (--resume continues)")
            raise KeyboardInterrupt
        if over:
            self.monitor.log(f"{self.name}: time budget reached after {step} of {total} steps")
            return True, False
        return False, False

    def _check(self, step: int, loss_value: float) -> bool:
        """The divergence guard for ``step`` (1-based) with its read-back loss: True when it rolled back.

        At the newest step (the state is that step's) it checks the parameters when ``guard`` asks, and takes
        the snapshot at a snapshot step once they are finite.
        """
        g = self.guard
        bad = not math.isfinite(loss_value)
        if not bad and step == self.step:
            if g.snapshot_every > 0 and step % g.snapshot_every == 0:
                state = self.capture()
                if nonfinite_tensors(state):
                    bad = True
                else:
                    self._take_snapshot(state, step)
            elif g.check_params_every_readback:
                bad = not self.params_finite()
        if not bad:
            return False
        if self.recoveries >= g.max_rollbacks or self.snapshot is None:
            raise TrainingError(self.divergence_message(step, loss_value))
        recoveries = self.recoveries
        self.on_rollback(_clone(self.snapshot))
        self.recoveries = recoveries + 1
        if self._clock is not None:
            self._clock.state = self.state  # a rollback may restore an older TrainState
        self.monitor.log(f"{self.name}: non-finite loss or parameters at step {step}: rolled back to the state of "
                         f"step {self.snapshot_step} and halved the learning rates")
        self._take_snapshot(self.capture(), self.snapshot_step)
        return True

    def _take_snapshot(self, state: dict, step: int) -> None:
        self.snapshot = state if self.guard.snapshot_at_checkpoint else _clone(state)
        self.snapshot_step = step
