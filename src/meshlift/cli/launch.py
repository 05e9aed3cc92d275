"""``--gpus N``: run the same command as ``N`` processes under torchrun (``torch.distributed.run``).

``meshlift reconstruct DATA --out OUT --gpus 2`` runs::

    python -m torch.distributed.run --standalone --nproc_per_node 2 -m meshlift.cli.main reconstruct DATA --out OUT

(``--standalone``: one host, a free local rendezvous port). Each process is one rank of
:mod:`meshlift.methods.distributed`; rank 0 prints the progress and the summary. Without a CUDA device the
ranks run on the CPU over gloo (useful to try the scheme; not faster).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional, Sequence

__all__ = ["argv_without_gpus", "remember_argv", "run_under_torchrun", "torchrun_command"]

_ARGV: list[str] = []


def remember_argv(argv: Sequence[str]) -> None:
    """Keep the command line of this invocation (``meshlift.cli.main.main`` calls it) for a relaunch."""
    _ARGV[:] = list(argv)


def argv_without_gpus(argv: Sequence[str]) -> list[str]:
    """``argv`` without ``--gpus N`` / ``--gpus=N``."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--gpus":
            skip = True
            continue
        if a.startswith("--gpus="):
            continue
        out.append(a)
    return out


def torchrun_command(nproc: int, argv: Sequence[str]) -> list[str]:
    """The torchrun command line that runs ``meshlift <argv>`` (``--gpus`` removed) as ``nproc`` ranks."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(int(nproc)),
            "-m", "meshlift.cli.main", *argv_without_gpus(argv)]


def run_under_torchrun(nproc: int, echo=None, argv: Optional[Sequence[str]] = None) -> int:
    """Relaunch this command (``argv``, default the remembered one) as ``nproc`` ranks; returns torchrun's
    exit status. ``echo(str)`` is told the command.

    Raises:
        ConfigError: ``nproc < 1``, or more GPUs asked for than are visible.
    """
    import torch

    from meshlift.errors import ConfigError

    if nproc < 1:
        raise ConfigError(f"--gpus {nproc}: give a number of processes >= 1")
    if torch.cuda.is_available() and torch.cuda.device_count() < nproc:
        raise ConfigError(f"--gpus {nproc}: only {torch.cuda.device_count()} CUDA devices are visible "
                          "(CUDA_VISIBLE_DEVICES); ask for at most that many")
    cmd = torchrun_command(nproc, _ARGV if argv is None else argv)
    env = dict(os.environ)
    if not torch.cuda.is_available() and not env.get("OMP_NUM_THREADS"):
        from meshlift._threads import free_cores

        env["OMP_NUM_THREADS"] = str(max(1, free_cores() // nproc))  # the CPU ranks share the cores
    if echo is not None:
        kind = "GPUs (NCCL)" if torch.cuda.is_available() else "CPU processes (gloo; no CUDA device)"
        echo(f"launching {nproc} {kind}: {' '.join(cmd)}")
    return subprocess.run(cmd, env=env, check=False).returncode
