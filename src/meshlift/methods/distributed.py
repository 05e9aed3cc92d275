"""Data parallelism on ``torch.distributed`` (launched by ``torchrun``), shared by every method family.

Launch ``N`` processes with ``torchrun --standalone --nproc_per_node N -m meshlift.cli.main reconstruct ...``
(what ``meshlift reconstruct --gpus N`` runs); torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``, which :func:`init_from_env` reads. Backend: NCCL when the compute device
is CUDA (rank ``r`` uses ``cuda:LOCAL_RANK``), gloo on the CPU.

The scheme (an explicit all-reduce, no ``DistributedDataParallel`` wrapper: DDP needs a fixed parameter set,
and marching tets / Gaussian densification change what is trained):

- **identical parameters everywhere**: every rank holds all parameters. They are broadcast from rank 0 at
  the start (:meth:`DistContext.broadcast_tensors`, :meth:`DistContext.broadcast_modules`) and after every
  topology change, which rank 0 alone decides (Gaussian densification from all-reduced statistics, the
  pass-2 UV mesh of the surface method) and sends (:meth:`DistContext.from_main`).
- **the global batch is split**: a view sampler seeded identically on every rank draws the step's
  ``batch`` views (the *global* batch); rank ``r`` renders its share ``torch.tensor_split(idx, N)[r]``
  (:meth:`DistContext.share`; the shares are disjoint and cover the batch; ``batch >= N`` is required).
- **gradients**: each rank's loss is the mean over its ``b_r`` views; :meth:`DistContext.all_reduce_gradients`
  scales each rank's gradient by ``b_r / B`` and sums, which is the gradient of the mean loss over the ``B``
  views of the step — the gradient of one process with the same global batch. Hence the **effective batch
  is ``batch``** (not ``N × batch``) and **learning rates are those of the single-process run with the same
  global batch**: no scaling rule applies. More ranks make a step faster (each renders ``batch / N`` views);
  a larger ``batch`` changes the optimisation as it does on one GPU.
- **decisions that depend on time** (checkpoint cadence, time budget) are rank 0's, sent to every rank
  (:meth:`DistContext.agree`), so all ranks run the same steps. Logged loss/PSNR are all-reduced
  (:meth:`DistContext.weighted_sum`).
- **rank 0 alone writes** (checkpoints, previews, outputs, ``config.json``) and reports progress; every
  rank waits at a barrier after a checkpoint write (:class:`DistCheckpointer`). Checkpoints hold no
  rank-specific state (the sampler is the global one), so ``--resume`` works with any number of ranks.
- **no hang**: every collective has the timeout ``MESHLIFT_DIST_TIMEOUT_S`` (seconds, default
  :data:`DEFAULT_TIMEOUT_S`); a rank that died or hangs makes the others raise :class:`DistributedError`
  naming the call, instead of waiting forever (under torchrun the launcher also stops the job when a rank
  exits with an error).

With one process (no ``WORLD_SIZE`` or ``WORLD_SIZE=1``) :data:`SINGLE` is used: every method is a no-op
returning its input unchanged, so single-process results are bit-identical to a run without this module.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import torch

from meshlift import _env
from meshlift.errors import ConfigError, DistributedError, MeshliftError
from meshlift.methods.engine import Checkpointer

__all__ = ["DEFAULT_TIMEOUT_S", "DistCheckpointer", "DistContext", "SINGLE", "TIMEOUT_ENV", "SyncedCadence",
           "env_rank", "env_world_size", "init_from_env", "make_checkpointer", "shutdown",
           "timeout_from_env"]

#: Environment variable: timeout (seconds) of the process-group start and of every collective call.
TIMEOUT_ENV = "MESHLIFT_DIST_TIMEOUT_S"
#: Default collective timeout, seconds (long enough for rank 0 to write a checkpoint or a preview while
#: the others wait; short enough that a dead rank ends the job within minutes).
DEFAULT_TIMEOUT_S = 600.0
#: Gradient all-reduce buckets hold at most this many float32 elements (memory bounded: 256 MiB).
BUCKET_ELEMENTS = 1 << 26

_OWNED_GROUP = False  # whether init_from_env created the process group (then shutdown destroys it)


def _env_int(name: str, default: Optional[int] = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        if default is None:
            raise DistributedError(f"environment variable {name} is not set; launch with torchrun "
                                   "(torchrun --nproc_per_node N -m meshlift.cli.main ...)")
        return default
    try:
        return int(raw)
    except ValueError:
        raise DistributedError(f"environment variable {name}={raw!r} is not an integer; launch with "
                               "torchrun, which sets it") from None


def env_world_size() -> int:
    """``WORLD_SIZE`` from the environment (1 when unset): the number of processes torchrun started."""
    return max(1, _env_int("WORLD_SIZE", 1))


def env_rank() -> int:
    """``RANK`` from the environment (0 when unset), without starting anything (the CLI uses it to keep
    progress output on rank 0)."""
    return _env_int("RANK", 0)


def timeout_from_env() -> float:
    """The collective timeout in seconds: ``MESHLIFT_DIST_TIMEOUT_S`` or :data:`DEFAULT_TIMEOUT_S`.

    Raises:
        ConfigError: the variable is not a positive number.
    """
    raw = _env.get(TIMEOUT_ENV) or ""
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{TIMEOUT_ENV}={raw!r}: must be a positive number of seconds (e.g. 600)")
    return value


def _to_cpu(tree):
    if torch.is_tensor(tree):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {k: _to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to_cpu(v) for v in tree)
    if hasattr(tree, "__dataclass_fields__") and hasattr(tree, "to") and callable(tree.to):
        return tree.to("cpu")  # e.g. structures.mesh.Mesh
    return tree


@dataclass(frozen=True)
class DistContext:
    """This process's place in the run and the collective operations of the scheme (module docstring).

    Attributes:
        rank: 0 .. ``world_size - 1``; ``local_rank``: index on this host (its CUDA device).
        world_size: number of processes; 1 = single process (every method is a no-op).
        timeout_s: timeout of every collective call, seconds.
        comm_device: where collective buffers live (``cuda:LOCAL_RANK`` with NCCL, else the CPU).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    timeout_s: float = DEFAULT_TIMEOUT_S
    comm_device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def enabled(self) -> bool:
        """Whether more than one process takes part."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0 (the one that writes and reports)."""
        return self.rank == 0

    def describe(self) -> str:
        """One line for the log, e.g. ``2 ranks (gloo)``."""
        if not self.enabled:
            return "1 process"
        import torch.distributed as dist

        return f"{self.world_size} ranks ({dist.get_backend()})"

    # ---- the batch ----------------------------------------------------------------------------------------
    def check_batch(self, batch: int, what: str = "batch") -> None:
        """Refuse a global batch smaller than the number of ranks (a rank would have no view).

        Raises:
            ConfigError: ``batch < world_size``.
        """
        if self.enabled and batch < self.world_size:
            raise ConfigError(
                f"config field '{what}' = {batch} (views per step, over all ranks) is smaller than the "
                f"{self.world_size} ranks: every rank needs at least one view per step. Use --set "
                f"{what}={self.world_size} or more, or fewer processes (--gpus)")

    def share(self, idx: torch.Tensor) -> torch.Tensor:
        """This rank's part of a global batch ``idx`` (``[B]`` view indices): ``tensor_split(idx, N)[rank]``.

        The parts of all ranks are disjoint, cover ``idx`` in order and differ in size by at most one.
        """
        if not self.enabled:
            return idx
        return torch.tensor_split(idx, self.world_size)[self.rank]

    def share_weight(self, n_global: int) -> float:
        """``b_r / B``: the weight of this rank's mean loss in the mean over the global batch of ``n_global``."""
        if not self.enabled:
            return 1.0
        return self._share_len(n_global) / n_global

    def _share_len(self, n_global: int) -> int:  # the length of tensor_split's part ``rank``
        base, extra = divmod(n_global, self.world_size)
        return base + (1 if self.rank < extra else 0)

    # ---- collectives --------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _collective(self, what: str):
        try:
            yield
        except MeshliftError:
            raise
        except Exception as exc:  # noqa: BLE001 - backend errors (timeouts, closed peers) become one line
            raise DistributedError(
                f"rank {self.rank}/{self.world_size}: the collective call '{what}' failed ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}). Another rank died, or did not answer within "
                f"{self.timeout_s:g} s ({TIMEOUT_ENV}); its own log says why") from exc

    def all_reduce_gradients(self, params: Iterable[torch.Tensor], weight: float) -> None:
        """Replace every ``p.grad`` by ``Σ_ranks weight_r · grad_r`` (the gradient of the global-batch mean).

        A parameter without a gradient on some ranks counts as zero there; one without a gradient on every
        rank keeps ``grad = None`` (the optimiser then skips it, as in one process). Buckets of at most
        :data:`BUCKET_ELEMENTS` elements bound the extra memory. No-op for one process.
        """
        if not self.enabled:
            return
        import torch.distributed as dist

        params = [p for p in params if p.requires_grad]
        if not params:
            return
        with self._collective("all-reduce of the gradient flags"):
            flags = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=self.comm_device)
            dist.all_reduce(flags)
        active = [p for p, f in zip(params, flags.tolist()) if f > 0]
        bucket: list[torch.Tensor] = []
        size = 0
        for p in active:
            if bucket and size + p.numel() > BUCKET_ELEMENTS:
                self._reduce_bucket(bucket, weight)
                bucket, size = [], 0
            bucket.append(p)
            size += p.numel()
        if bucket:
            self._reduce_bucket(bucket, weight)

    def _reduce_bucket(self, params: list[torch.Tensor], weight: float) -> None:
        import torch.distributed as dist

        parts = [(p.grad.detach().reshape(-1).float() * weight) if p.grad is not None else
                 torch.zeros(p.numel(), dtype=torch.float32, device=p.device) for p in params]
        buf = torch.cat([t.to(self.comm_device) for t in parts])
        with self._collective("all-reduce of the gradients"):
            dist.all_reduce(buf)
        pos = 0
        for p in params:
            n = p.numel()
            g = buf[pos:pos + n].view(p.shape).to(p.device, p.dtype)
            pos += n
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)

    def weighted_sum(self, values: Sequence[torch.Tensor], weight: float) -> list[torch.Tensor]:
        """``Σ_ranks weight_r · v_r`` of 0-dim tensors (the global-batch mean of per-rank means, for the log
        and the divergence guard). Returns 0-dim float64 tensors on each value's device (for one process:
        ``values`` unchanged)."""
        if not self.enabled:
            return list(values)
        import torch.distributed as dist

        buf = torch.stack([v.detach().double().reshape(()).cpu() * weight for v in values]).to(self.comm_device)
        with self._collective("all-reduce of the loss"):
            dist.all_reduce(buf)
        return [b.to(v.device) for b, v in zip(buf.unbind(0), values)]

    def all_reduce_sum_(self, tensors: Sequence[torch.Tensor], op: str = "sum") -> None:
        """In-place ``sum`` (or ``max``) of same-shaped tensors over ranks (e.g. densification statistics)."""
        if not self.enabled:
            return
        import torch.distributed as dist

        red = dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX
        for t in tensors:
            buf = t.detach().to(self.comm_device)
            with self._collective(f"all-reduce ({op}) of statistics"):
                dist.all_reduce(buf, op=red)
            with torch.no_grad():
                t.copy_(buf.to(t.device))

    def broadcast_tensors(self, tensors: Iterable[torch.Tensor]) -> None:
        """Overwrite ``tensors`` (same shapes on every rank) in place with rank 0's values."""
        if not self.enabled:
            return
        import torch.distributed as dist

        for t in tensors:
            buf = t.detach().to(self.comm_device).contiguous()
            with self._collective("broadcast of the parameters"):
                dist.broadcast(buf, src=0)
            with torch.no_grad():
                t.copy_(buf.to(t.device))

    def broadcast_modules(self, modules: Iterable[torch.nn.Module]) -> None:
        """Rank 0's parameters and buffers into every rank's ``modules`` (same structure everywhere)."""
        if not self.enabled:
            return
        self.broadcast_tensors([t for m in modules for t in m.state_dict(keep_vars=True).values()
                                if torch.is_tensor(t)])

    def agree(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank (decisions that depend on wall time). One process: ``flag``."""
        if not self.enabled:
            return flag
        import torch.distributed as dist

        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self.comm_device)
        with self._collective("broadcast of a decision of rank 0"):
            dist.broadcast(t, src=0)
        return bool(t.item())

    def barrier(self, what: str) -> None:
        """Wait for every rank (gloo: ``monitored_barrier``, which names the ranks that did not arrive)."""
        if not self.enabled:
            return
        import torch.distributed as dist

        with self._collective(f"barrier ({what})"):
            if dist.get_backend() == "gloo":
                dist.monitored_barrier(timeout=timedelta(seconds=self.timeout_s))
            else:
                dist.barrier(device_ids=[self.local_rank] if self.comm_device.type == "cuda" else None)

    def broadcast_object(self, obj=None):
        """Rank 0's ``obj`` (picklable; tensors travel on the CPU) on every rank."""
        if not self.enabled:
            return obj
        import torch.distributed as dist

        box = [_to_cpu(obj) if self.is_main else None]
        with self._collective("broadcast of an object from rank 0"):
            dist.broadcast_object_list(box, src=0, device=self.comm_device)
        return box[0]

    def broadcast_tree(self, tree=None):
        """Rank 0's nested dict/list/tuple ``tree`` of tensors and plain data on every rank, tensors sent by
        ``broadcast`` on the communication device (large parameter sets: no pickling of tensor data).
        Received tensors live on :attr:`comm_device`. One process: ``tree``."""
        if not self.enabled:
            return tree
        import torch.distributed as dist

        tensors: list[torch.Tensor] = []

        def strip(node):
            if torch.is_tensor(node):
                tensors.append(node.detach())
                return _Slot(len(tensors) - 1, tuple(node.shape), node.dtype)
            if isinstance(node, dict):
                return {k: strip(v) for k, v in node.items()}
            if isinstance(node, (list, tuple)):
                return type(node)(strip(v) for v in node)
            return node

        skeleton = self.broadcast_object(strip(tree) if self.is_main else None)
        slots: list[_Slot] = []

        def collect(node):
            if isinstance(node, _Slot):
                slots.append(node)
            elif isinstance(node, dict):
                for v in node.values():
                    collect(v)
            elif isinstance(node, (list, tuple)):
                for v in node:
                    collect(v)

        collect(skeleton)
        received: dict[int, torch.Tensor] = {}
        for slot in slots:
            wire = torch.uint8 if slot.dtype == torch.bool else slot.dtype
            if self.is_main:
                buf = tensors[slot.index].to(self.comm_device, wire).contiguous()
            else:
                buf = torch.empty(slot.shape, dtype=wire, device=self.comm_device)
            with self._collective("broadcast of rank 0's state"):
                dist.broadcast(buf, src=0)
            received[slot.index] = buf.to(slot.dtype)

        def build(node):
            if isinstance(node, _Slot):
                return received[node.index]
            if isinstance(node, dict):
                return {k: build(v) for k, v in node.items()}
            if isinstance(node, (list, tuple)):
                return type(node)(build(v) for v in node)
            return node

        return build(skeleton)

    def from_main(self, fn: Callable[[], object]):
        """Run ``fn`` on rank 0 only and return its result on every rank (tensors arrive on the CPU).

        An exception of ``fn`` is raised on every rank (a :class:`MeshliftError` with its own type and
        message; anything else re-raised on rank 0 and a :class:`DistributedError` on the others), so a bad
        input or a refused output folder stops all ranks with the same line, not a hang.
        """
        if not self.enabled:
            return fn()
        result, error, original = None, None, None
        if self.is_main:
            try:
                result = fn()
            except MeshliftError as exc:
                error, original = (type(exc), str(exc)), exc
            except Exception as exc:  # noqa: BLE001 - reported to the other ranks, then re-raised here
                error, original = (DistributedError, f"rank 0 failed: {type(exc).__name__}: {exc}"), exc
        status, payload = self.broadcast_object(("error", error) if error else ("ok", result))
        if status == "error":
            if original is not None:
                raise original
            cls, message = payload
            try:
                exc = cls(message)
            except Exception:  # noqa: BLE001 - an exception type with another signature
                exc = DistributedError(message)
            raise exc
        return payload

    def decorrelate_rng(self, seed: int) -> None:
        """Give each rank other than 0 its own stream of the global torch RNG (``seed + 7919 · rank``), called
        once the parameters are initialised and broadcast: per-step noise (jitter) then differs between the
        ranks' views as it differs between the views of one process. Rank 0 keeps its stream, which is the
        single process's (what rank 0 alone draws, e.g. the samples of Gaussian splits, stays the same).
        No-op for one process."""
        if self.enabled and not self.is_main:
            torch.manual_seed(int(seed) + 7919 * self.rank)

    def device_for(self, device: torch.device) -> torch.device:
        """The compute device of this rank: ``cuda:LOCAL_RANK`` for a CUDA ``device`` with several ranks."""
        if self.enabled and device.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return device


@dataclass(frozen=True)
class _Slot:
    """Where a tensor goes in a :meth:`DistContext.broadcast_tree` skeleton."""

    index: int
    shape: tuple
    dtype: torch.dtype


#: The context of a single-process run (no process group; every collective is a no-op).
SINGLE = DistContext()


class SyncedCadence:
    """A :class:`~meshlift.methods.engine.CheckpointCadence` whose ``due`` is rank 0's decision on every rank
    (the time-based part differs between processes; a cadence by step count alone is the same on every rank
    and needs no collective)."""

    def __init__(self, cadence, ctx: DistContext) -> None:
        self.cadence, self.ctx = cadence, ctx

    def due(self, step: int) -> bool:
        if self.cadence.every_s <= 0:
            return self.cadence.due(step)
        return self.ctx.agree(self.cadence.due(step))

    def saved(self) -> None:
        self.cadence.saved()


class DistCheckpointer(Checkpointer):
    """Rank 0 writes ``checkpoint.pt``; every rank then waits at a barrier (with the collective timeout), so
    no rank runs ahead of a checkpoint or ends before it is on disk. Other ranks write nothing."""

    def __init__(self, out_dir: Optional[Path], ctx: DistContext) -> None:
        super().__init__(out_dir if ctx.is_main else None)
        self.ctx = ctx

    def save(self, payload: dict) -> bool:
        wrote = super().save(payload) if self.ctx.is_main else False
        self.ctx.barrier("checkpoint write")
        return wrote


def make_checkpointer(out_dir: Optional[Path], ctx: DistContext, background: bool = False) -> Checkpointer:
    """A plain :class:`Checkpointer` for one process (writing on a worker thread when ``background``), a
    :class:`DistCheckpointer` for several (always synchronous: its barrier means "on disk")."""
    return DistCheckpointer(out_dir, ctx) if ctx.enabled else Checkpointer(out_dir, background=background)


def init_from_env(device: torch.device, timeout_s: Optional[float] = None) -> DistContext:
    """The :class:`DistContext` of this process, starting the process group from torchrun's environment.

    ``WORLD_SIZE`` unset or 1 → :data:`SINGLE` (nothing is started). Otherwise ``RANK`` / ``LOCAL_RANK``
    are read and ``torch.distributed.init_process_group`` is called with backend ``nccl`` for a CUDA
    ``device`` (after ``torch.cuda.set_device(LOCAL_RANK)``) or ``gloo`` on the CPU, and ``timeout_s``
    (default :func:`timeout_from_env`). A process group that already exists (started by the caller) is
    reused. Call :func:`shutdown` at the end.

    Raises:
        DistributedError: inconsistent environment, a CUDA rank without its GPU, or a failed start (a rank
            that never joined within the timeout).
        ConfigError: a bad ``MESHLIFT_DIST_TIMEOUT_S``.
    """
    global _OWNED_GROUP
    import torch.distributed as dist

    timeout_s = timeout_from_env() if timeout_s is None else float(timeout_s)
    if dist.is_available() and dist.is_initialized():
        world, rank = dist.get_world_size(), dist.get_rank()
        local = _env_int("LOCAL_RANK", rank)
        backend = dist.get_backend()
    else:
        world = env_world_size()
        if world <= 1:
            return SINGLE
        if not dist.is_available():
            raise DistributedError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
        rank = _env_int("RANK")
        local = _env_int("LOCAL_RANK", rank)
        if not 0 <= rank < world:
            raise DistributedError(f"RANK={rank} is outside 0..WORLD_SIZE-1 (WORLD_SIZE={world})")
        backend = "nccl" if device.type == "cuda" else "gloo"
        if backend == "nccl":
            if local >= torch.cuda.device_count():
                raise DistributedError(
                    f"rank {rank}: LOCAL_RANK={local} but only {torch.cuda.device_count()} CUDA devices are "
                    "visible; start at most that many processes per host (--nproc_per_node / --gpus)")
            torch.cuda.set_device(local)
        try:
            dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
        except Exception as exc:  # noqa: BLE001
            raise DistributedError(
                f"rank {rank}/{world}: could not start the process group ({backend}) within {timeout_s:g} s: "
                f"{type(exc).__name__}: {exc}. Check that every rank was started (torchrun) and that "
                f"MASTER_ADDR/MASTER_PORT are reachable; the timeout is {TIMEOUT_ENV}") from exc
        _OWNED_GROUP = True
    if world <= 1:
        return SINGLE
    comm = torch.device("cuda", local) if backend == "nccl" else torch.device("cpu")
    return DistContext(rank=rank, world_size=world, local_rank=local, timeout_s=timeout_s, comm_device=comm)


def shutdown() -> None:
    """Destroy the process group if :func:`init_from_env` started it (a no-op otherwise)."""
    global _OWNED_GROUP
    import torch.distributed as dist

    if _OWNED_GROUP and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _OWNED_GROUP = False
