"""Checkpoints of a training run: writing (atomically, optionally on a worker thread), cadence, reading back.

- :class:`Checkpointer`: ``checkpoint.pt`` in the output folder (temp file + rename; ``background=True``
  writes a host copy on a worker thread so the training loop does not wait for the disk);
- :class:`CheckpointCadence`: every N steps or every S seconds;
- :func:`load_checkpoint`, :func:`check_resume_compatible`: ``--resume`` with one clear error per problem;
- :func:`nonfinite_tensors`: a diverged payload is never written over a good one;
- :func:`host_copy`: a payload with every tensor copied to host memory (the Gaussian trainer's checkpoints and
  rollback snapshots).

Re-exported by :mod:`meshlift.methods.engine`; the training loop that saves through it is
:class:`meshlift.methods.loop.TrainLoop`.
"""

from __future__ import annotations

import copy
import os
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import torch

from meshlift.errors import ConfigError

__all__ = ["CHECKPOINT_NAME", "CheckpointCadence", "Checkpointer", "check_resume_compatible", "host_copy", "map_tensors",
           "load_checkpoint", "nonfinite_tensors"]

CHECKPOINT_NAME = "checkpoint.pt"


class Checkpointer:
    """Writes ``checkpoint.pt`` atomically (temp file + rename) in the output folder (nothing when None).

    With ``background=True`` :meth:`save` copies the payload's tensors to host memory (so training may go on
    changing them) and writes the file on a worker thread, one write at a time: the training loop does not
    wait for the disk (a pass-2 checkpoint of the surface method at 2048² textures holds ~0.8 GB of
    tensors). A write that failed raises at the next :meth:`save`, :meth:`flush` or :meth:`load`; the
    previous checkpoint stays valid until a new one is complete (the rename). Call :meth:`flush` before
    relying on the file.
    """

    def __init__(self, out_dir: Optional[Path], background: bool = False) -> None:
        self.path = None if out_dir is None else Path(out_dir) / CHECKPOINT_NAME
        self.background = bool(background)
        self._thread: Optional[threading.Thread] = None
        self._done = threading.Event()
        self._error: Optional[BaseException] = None

    def save(self, payload: dict) -> bool:
        """Write ``payload`` (tensors and plain data) with ``torch.save``; a payload holding NaN/inf is not
        written (a good checkpoint is never replaced by a diverged one). Returns whether it was written (with
        ``background``: handed to the writer thread)."""
        if self.path is None:
            return False
        if nonfinite_tensors(payload):
            return False
        if not self.background:
            self._write(payload)
            return True
        staged = host_copy(payload)
        self.flush()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._write_logged, args=(staged,), name="meshlift-checkpoint")
        self._thread.start()
        return True

    def _write(self, payload: dict) -> None:
        tmp = self.path.with_suffix(".tmp")
        torch.save(payload, tmp)
        os.replace(tmp, self.path)

    def _write_logged(self, payload: dict) -> None:
        try:
            self._write(payload)
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread by flush()
            self._error = exc
        finally:
            self._done.set()

    def flush(self) -> None:
        """Wait for a background write to finish; re-raise its error (e.g. a full disk) if it failed.

        A Ctrl-C while waiting does not abandon the write (a half-written checkpoint would be no checkpoint):
        the wait goes on and the KeyboardInterrupt is raised once the file is complete."""
        interrupted = False
        if self._thread is not None:
            # wait on the writer's own event: a Thread.join interrupted by Ctrl-C may return early afterwards
            while True:
                try:
                    if self._done.wait(0.1):
                        break
                except KeyboardInterrupt:
                    if not interrupted:
                        sys.stderr.write("Ctrl-C: the checkpoint is being written; stopping when it is complete\n")
                    interrupted = True
            self._thread.join()
            self._thread = None
        if self._error is not None:
            exc, self._error = self._error, None
            raise exc
        if interrupted:
            raise KeyboardInterrupt

    def load(self) -> Optional[dict]:
        """The saved payload on the CPU, or None when there is none (:func:`load_checkpoint`: an unreadable
        file raises a clear ConfigError)."""
        self.flush()
        if self.path is None or not self.path.is_file():
            return None
        return load_checkpoint(self.path)


def map_tensors(tree, fn, other=lambda leaf: leaf):
    """``tree`` (nested dicts / lists / tuples / named tuples) rebuilt with ``fn(tensor)`` at every tensor leaf
    and ``other(leaf)`` at every other leaf (as it is, by default)."""
    if torch.is_tensor(tree):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: map_tensors(v, fn, other) for k, v in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a named tuple
        return type(tree)(*(map_tensors(v, fn, other) for v in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(map_tensors(v, fn, other) for v in tree)
    return other(tree)


def host_copy(tree):
    """``tree`` (nested dicts/lists/tuples) with every tensor copied to host memory (a copy also for CPU
    tensors, so later in-place updates do not reach a pending write); other leaves deep-copied."""
    return map_tensors(tree, lambda t: t.detach().to("cpu", copy=True), copy.deepcopy)


def load_checkpoint(path: Path) -> dict:
    """Read a checkpoint written by :class:`Checkpointer`, refusing anything unreadable with one clear line.

    Raises:
        ConfigError: missing, truncated, empty, not a checkpoint, or holding objects other than tensors and
            plain data (``weights_only`` loading).
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--resume: no {path.name} in {path.parent}; run without --resume first")
    if path.stat().st_size == 0:
        raise ConfigError(f"--resume: {path} is empty (a kill during the first write?); start again with "
                          "--overwrite")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - every unreadable file gets the same advice
        raise ConfigError(f"--resume: {path} is truncated or not a meshlift checkpoint ({type(exc).__name__}); "
                          "start again with --overwrite (or restore the file)") from None
    if not isinstance(ck, dict) or "state" not in ck or "config" not in ck:
        raise ConfigError(f"--resume: {path} is not a meshlift checkpoint (no state/config); start again with "
                          "--overwrite")
    return ck


def same_input(saved, new) -> bool:
    """Whether two ``data`` values name the same input: equal, the same file or folder, or a relative saved
    path (runs before paths were stored absolute) that does not resolve from here, with the new one an
    existing path of the same name (the run is resumed from another working directory)."""
    if saved == new:
        return True
    if not isinstance(saved, str) or not isinstance(new, str) or not saved or not new:
        return False
    a, b = Path(saved), Path(new)
    try:
        if a.exists() and b.exists():
            return a.resolve() == b.resolve()
    except OSError:
        return False
    return not a.is_absolute() and not a.exists() and b.exists() and a.name == b.name


def check_resume_compatible(saved: dict, new: dict, fixed_fields: tuple[str, ...], source: str) -> None:
    """Refuse a resume whose config changes a field that shapes the saved parameters.

    Args:
        saved: the config dict stored in the checkpoint; new: the effective config dict of this call.
        fixed_fields: fields that may not change on resume (e.g. grid resolution, hash-table size).
        source: the checkpoint path, for the message.

    Raises:
        ConfigError: naming every changed fixed field with both values, and what may change.
    """
    changed = [f"{k}: {saved.get(k)!r} -> {new.get(k)!r}" for k in fixed_fields
               if k in saved and saved.get(k) != new.get(k) and not (k == "data" and same_input(saved[k], new[k]))]
    if changed:
        raise ConfigError(
            f"--resume from {source}: these fields change the shape of the saved parameters and cannot change "
            f"on resume: {'; '.join(changed)}. Fields that can change: iterations, learning rates, time budget, "
            "checkpoint/preview cadence, device. Resume without them, or start a new run with --overwrite")


def nonfinite_tensors(tree, prefix: str = "") -> list[str]:
    """Names of floating-point tensors in a nested dict/list ``tree`` that hold NaN or inf."""
    bad: list[str] = []
    if torch.is_tensor(tree):
        if tree.is_floating_point() and tree.numel() and not bool(torch.isfinite(tree).all()):
            bad.append(prefix or "tensor")
    elif isinstance(tree, dict):
        for k, v in tree.items():
            bad += nonfinite_tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            bad += nonfinite_tensors(v, f"{prefix}[{i}]")
    return bad


class CheckpointCadence:
    """When to save mid-run: every ``every_steps`` steps (0 = never by count) **or** once ``every_s`` seconds
    have passed since the last save (0 = never by time), so short presets are saved too."""

    def __init__(self, every_steps: int, every_s: float) -> None:
        self.every_steps, self.every_s = int(every_steps), float(every_s)
        self.last = time.perf_counter()

    def due(self, step: int) -> bool:
        """Whether to save after ``step`` (1-based count of steps done)."""
        by_count = self.every_steps > 0 and step % self.every_steps == 0
        by_time = self.every_s > 0 and time.perf_counter() - self.last >= self.every_s
        return by_count or by_time

    def saved(self) -> None:
        self.last = time.perf_counter()
