"""The environment variables meshlift reads: the one table of them, and the only reader.

Only what must come from the environment is here: where files go (caches, the app's session folders),
how many threads and worker processes a process starts, settings every rank of a ``torchrun`` job reads
before it has a config, the console script's exit, and what the tests and benchmarks need to find (the
shared datasets, external tools). Everything that changes what a run computes is a config field or a
function argument instead (e.g. the fast-path backends: the config fields ``raster_backend`` /
``shading_backend`` / ``splat_backend``, or :func:`meshlift.kernels.use_kernels`).

:data:`VARIABLES` is the table (docs/usage/environment.md prints the same table; ``tests/test_environment.py``
fails when code names a ``MESHLIFT_*`` variable that is not in it, or when the page and this table
differ). :func:`get` reads one of them and refuses a name that is not in the table. :data:`DEPRECATED`
lists the documented variables that were replaced by a config field: :func:`deprecated` still reads them,
with one warning per process naming the replacement; :data:`REMOVED` the ones no longer read. ``meshlift doctor`` lists the ``MESHLIFT_*`` variables
that are set (:func:`meshlift_variables`), and flags unknown and deprecated names.

Stdlib only.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Mapping, Optional

from meshlift.errors import ConfigError

__all__ = ["DEPRECATED", "EnvVar", "REMOVED", "SCOPES", "VARIABLES", "deprecated", "get", "meshlift_variables"]

#: Who reads a variable: a run of meshlift (``run``), the web app server (``app``), or the test suite and
#: the benchmark scripts (``tests``).
SCOPES = ("run", "app", "tests")


@dataclass(frozen=True)
class EnvVar:
    """One environment variable meshlift reads."""

    name: str
    """``MESHLIFT_...``."""
    scope: str
    """One of :data:`SCOPES`."""
    default: str
    """What applies when it is unset (words)."""
    what: str
    """What it sets, in one line."""


_TABLE = (
    EnvVar("MESHLIFT_NUM_THREADS", "run", "free cores (cores − load average), or OMP_NUM_THREADS",
           "CPU threads of torch's pool in the CLI (a positive integer; pin it for bit-reproducible runs)"),
    EnvVar("MESHLIFT_PRECOMPILE_WORKERS", "run", "min(12, cores − 4), at least 1",
           "background processes that compile the Triton kernel variants on a first CUDA run (0 = off)"),
    EnvVar("MESHLIFT_CACHE", "run", "$XDG_CACHE_HOME/meshlift, else ~/.cache/meshlift",
           "folder of meshlift's on-disk cache (the BRDF lookup table)"),
    EnvVar("MESHLIFT_DIST_TIMEOUT_S", "run", "600",
           "seconds before a collective of a multi-GPU (torchrun) job gives up on a dead or hung rank"),
    EnvVar("MESHLIFT_FAST_EXIT", "run", "1",
           "0 keeps the interpreter's full teardown at the end of a console-script command"),
    EnvVar("MESHLIFT_APP_ROOT", "app", "$TMPDIR/meshlift_app",
           "parent folder of the web app's per-session folders"),
    EnvVar("MESHLIFT_APP_MAX_FILES", "app", "500", "most files per upload (zip members included)"),
    EnvVar("MESHLIFT_APP_MAX_FILE_MB", "app", "50", "largest uploaded file or zip member, MiB"),
    EnvVar("MESHLIFT_APP_MAX_TOTAL_MB", "app", "500", "largest upload after extraction, MiB"),
    EnvVar("MESHLIFT_APP_MAX_AGE_S", "app", "3600", "session folders older than this are deleted, seconds"),
    EnvVar("MESHLIFT_SHARED_DATA", "tests", "../shared/data beside the checkout",
           "the shared datasets the tests and benchmarks read"),
    EnvVar("MESHLIFT_TEST_ARTIFACTS", "tests", "pytest's temporary folder",
           "where the browser tests write their screenshots"),
    EnvVar("MESHLIFT_GLTF_VALIDATOR_DIR", "tests", "unset: the glTF-validator tests skip",
           "node_modules folder holding the gltf-validator package"),
    EnvVar("MESHLIFT_THREEJS_DIR", "tests", "/tmp/three/node_modules/three",
           "the three package folder for the client-parity test"),
    EnvVar("MESHLIFT_CHROMIUM", "tests", "chromium on PATH", "the Chromium binary of the client-parity test"),
)

#: Every variable meshlift reads, by name, in the order of the documentation's table.
VARIABLES: dict[str, EnvVar] = {v.name: v for v in _TABLE}

#: Documented variables that a config field or argument replaced: ``{name: what to use instead}``. They
#: still act (:func:`deprecated`), with a warning once per process.
DEPRECATED: dict[str, str] = {
    "MESHLIFT_RASTER_BACKEND": "the config field raster_backend (--set raster_backend=torch), or "
                               "meshlift.kernels.use_kernels(raster=...)",
    "MESHLIFT_SHADING_BACKEND": "the config field shading_backend (--set shading_backend=torch), or "
                                "meshlift.kernels.use_kernels(shading=...)",
    "MESHLIFT_RASTER_MAX_FRAGMENTS": "the config field max_fragments (--set max_fragments=N), or the "
                                     "max_fragments= argument of the render ops",
}

#: Variables meshlift no longer reads (or never read, though a page named them): ``{name: what to use}``.
#: ``meshlift doctor`` names the replacement when one is still set.
REMOVED: dict[str, str] = {
    "MESHLIFT_SPLAT_BACKEND": "the config field splat_backend, or meshlift.kernels.use_kernels(splat=...)",
    "MESHLIFT_RASTER_DENSE": "meshlift.kernels.use_kernels(raster_dense=True / False)",
    "MESHLIFT_TRITON_TILE": "meshlift.kernels.use_kernels(raster_tuning=RasterTuning(tile=(16, 16)))",
    "MESHLIFT_TRITON_WARPS": "meshlift.kernels.use_kernels(raster_tuning=RasterTuning(warps=...))",
    "MESHLIFT_TRITON_UNROLL": "meshlift.kernels.use_kernels(raster_tuning=RasterTuning(unroll=...))",
    "MESHLIFT_TRITON_STAMP": "meshlift.kernels.use_kernels(raster_tuning=RasterTuning(stamp=...))",
    "MESHLIFT_TRITON_BWD_IDS": "meshlift.kernels.use_kernels(raster_tuning=RasterTuning(bwd_ids=...))",
    "MESHLIFT_MAX_FRAGMENTS": "the config field max_fragments (this name never existed; an older page named it)",
}

_WARNED: set[str] = set()


def get(name: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The value of the table's variable ``name`` (stripped; None when unset or empty).

    Raises:
        ConfigError: ``name`` is not in :data:`VARIABLES` (add it to the table and to
            docs/usage/environment.md first).
    """
    if name not in VARIABLES:
        raise ConfigError(f"environment variable {name!r} is not in meshlift._env.VARIABLES; add it there and "
                          "to docs/usage/environment.md, or make it a config field")
    raw = (os.environ if environ is None else environ).get(name)
    raw = None if raw is None else raw.strip()
    return raw or None


def deprecated(name: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The value of the deprecated variable ``name`` (None when unset), with a :class:`FutureWarning` naming
    its replacement the first time it is found set in this process.

    Raises:
        ConfigError: ``name`` is not in :data:`DEPRECATED`.
    """
    if name not in DEPRECATED:
        raise ConfigError(f"{name!r} is not a deprecated meshlift variable (meshlift._env.DEPRECATED)")
    raw = (os.environ if environ is None else environ).get(name)
    raw = None if raw is None else raw.strip()
    if raw and name not in _WARNED:
        _WARNED.add(name)
        warnings.warn(f"{name} is deprecated and will be removed; use {DEPRECATED[name]}", FutureWarning,
                      stacklevel=3)
    return raw or None


def meshlift_variables(environ: Optional[Mapping[str, str]] = None) -> list[tuple[str, str, str]]:
    """``[(name, value, kind)]`` of the ``MESHLIFT_*`` variables set, sorted by name; ``kind`` is
    ``known``, ``deprecated``, ``removed`` (:data:`REMOVED`) or ``unknown`` (a name meshlift never read: a
    typo)."""
    env = os.environ if environ is None else environ
    out = []
    for name in sorted(k for k in env if k.startswith("MESHLIFT_")):
        kind = ("known" if name in VARIABLES else "deprecated" if name in DEPRECATED
                else "removed" if name in REMOVED else "unknown")
        out.append((name, env[name], kind))
    return out
