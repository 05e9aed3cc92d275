"""Shared fixtures: the shared datasets (skipped with a reason when absent), seeded RNGs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_root() -> Path:
    """``$MESHLIFT_SHARED_DATA`` or ``<repo>/../shared/data``."""
    env = os.environ.get("MESHLIFT_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    root = shared_data_root()
    if not root.is_dir():
        pytest.skip(f"shared datasets not found at {root} (set MESHLIFT_SHARED_DATA to run these tests)")
    return root


@pytest.fixture
def dataset(shared_data):
    """Return a function name -> path that skips when that dataset folder is absent."""

    def get(name: str) -> Path:
        p = shared_data / name
        if not p.exists():
            pytest.skip(f"shared dataset {name!r} not found at {p}")
        return p

    return get


@pytest.fixture(autouse=True)
def _seed():
    import torch

    torch.manual_seed(0)
    yield


@pytest.fixture
def kernels():
    """``kernels(raster=..., shading=..., splat=..., raster_dense=..., raster_tuning=...)``:
    :func:`meshlift.kernels.use_kernels` for the rest of the test (each call on top of the last; all undone
    after it)."""
    import contextlib

    from meshlift.kernels import use_kernels

    with contextlib.ExitStack() as stack:
        yield lambda **changes: stack.enter_context(use_kernels(**changes))
