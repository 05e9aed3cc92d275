"""Range checks of index tensors (face lists) that read the device once per tensor, not once per use.

Checking that a face list indexes existing vertices needs its min and max on the host: on CUDA a host sync.
Meshes are validated where they are built (:class:`meshlift.structures.mesh.Mesh`) and where mesh ops take
them (``meshlift.geometry.mesh_ops``), so a training step checked the same face list several times.
:func:`index_range_ok` remembers the tensors it has checked (by identity, with a weak reference and the
tensor's in-place version counter), so a face list is read back once until it is modified in place or freed.
"""

from __future__ import annotations

import weakref
from typing import Optional

import torch

__all__ = ["index_range_ok", "derived_cached"]

#: ``(id, key) -> (weak reference, version, value)``: one cache for the range checks (key ``"range"``, value
#: ``(min, max)``) and :func:`derived_cached`; an entry goes when its tensor is freed.
_CACHE: dict[tuple, tuple] = {}
#: At most this many entries are kept (the oldest half is dropped when full).
MAX_ENTRIES = 64


def _lookup(src: torch.Tensor, key: str) -> tuple[bool, object]:
    """``(hit, value)`` of ``src`` (identity + in-place version) and ``key``."""
    entry = _CACHE.get((id(src), key))
    if entry is not None and entry[0]() is src and entry[1] == src._version:
        return True, entry[2]
    return False, None


def _store(src: torch.Tensor, key: str, value) -> None:
    if len(_CACHE) >= MAX_ENTRIES:
        dead = [k for k, e in _CACHE.items() if e[0]() is None]
        for k in dead or list(_CACHE)[: MAX_ENTRIES // 2]:
            _CACHE.pop(k, None)
    k = (id(src), key)
    try:
        # the entry goes when ``src`` is freed (pass 1 builds a new face list every step)
        _CACHE[k] = (weakref.ref(src, lambda _ref, k=k: _CACHE.pop(k, None)), src._version, value)
    except TypeError:  # not weak-referenceable: computed every time
        pass


def index_range_ok(idx: torch.Tensor, n: int) -> tuple[bool, Optional[int], Optional[int]]:
    """Whether every entry of the integer tensor ``idx`` lies in ``[0, n)``.

    Returns:
        ``(ok, lo, hi)``: ``lo``/``hi`` are the min/max entry when they were read back now (for the error
        message), ``None`` when the answer came from the cache. An empty tensor is ok.
    """
    if idx.numel() == 0:
        return True, None, None
    hit, cached = _lookup(idx, "range")
    if hit:
        lo, hi = cached
        return lo >= 0 and hi < n, None, None
    lo, hi = (int(v) for v in torch.stack([idx.min(), idx.max()]).tolist())  # one read-back for both
    _store(idx, "range", (lo, hi))
    return lo >= 0 and hi < n, lo, hi


def derived_cached(src: torch.Tensor, key: str, fn):
    """``fn(src)``, computed once per tensor ``src`` (identity + in-place version) and ``key``.

    For values derived from fixed index tensors in a training loop (an int32 copy of a face list that the
    rasterizer's range check then finds in its own cache, the antialiasing topology of a fixed mesh): the
    same object comes back until ``src`` is modified in place or freed. At most :data:`MAX_ENTRIES`
    entries are kept; a tensor that is not weak-referenceable is not cached.
    """
    hit, value = _lookup(src, key)
    if not hit:
        value = fn(src)
        _store(src, key, value)
    return value
