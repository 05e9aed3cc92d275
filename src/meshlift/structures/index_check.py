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

#: ``id -> (weak reference, version, vertices needed = max index + 1, min index)`` of checked tensors.
_CHECKED: dict[int, tuple] = {}
#: At most this many entries are kept (dead ones are dropped first).
MAX_ENTRIES = 64


def index_range_ok(idx: torch.Tensor, n: int) -> tuple[bool, Optional[int], Optional[int]]:
    """Whether every entry of the integer tensor ``idx`` lies in ``[0, n)``.

    Returns:
        ``(ok, lo, hi)``: ``lo``/``hi`` are the min/max entry when they were read back now (for the error
        message), ``None`` when the answer came from the cache. An empty tensor is ok.
    """
    if idx.numel() == 0:
        return True, None, None
    entry = _CHECKED.get(id(idx))
    if entry is not None and entry[0]() is idx and entry[1] == idx._version:
        return entry[3] >= 0 and n >= entry[2], None, None
    lo, hi = (int(v) for v in torch.stack([idx.min(), idx.max()]).tolist())  # one read-back for both
    _remember(idx, hi + 1, lo)
    return lo >= 0 and hi < n, lo, hi


def _remember(idx: torch.Tensor, needed: int, lo: int) -> None:
    if len(_CHECKED) >= MAX_ENTRIES:
        dead = [k for k, e in _CHECKED.items() if e[0]() is None]
        for k in dead or list(_CHECKED)[: MAX_ENTRIES // 2]:
            _CHECKED.pop(k, None)
    try:
        _CHECKED[id(idx)] = (weakref.ref(idx), idx._version, int(needed), int(lo))
    except TypeError:  # not weak-referenceable: checked every time
        pass


#: ``(id, key) -> (weak reference, version, value)`` of :func:`derived_cached`.
_DERIVED: dict[tuple, tuple] = {}


def derived_cached(src: torch.Tensor, key: str, fn):
    """``fn(src)``, computed once per tensor ``src`` (identity + in-place version) and ``key``.

    For values derived from fixed index tensors in a training loop (an int32 copy of a face list that the
    rasterizer's range check then finds in its own cache, the antialiasing topology of a fixed mesh): the
    same object comes back until ``src`` is modified in place or freed. At most :data:`MAX_ENTRIES`
    entries are kept (an entry is dropped when its tensor is freed); a tensor that is not weak-referenceable is not cached.
    """
    k = (id(src), key)
    entry = _DERIVED.get(k)
    if entry is not None and entry[0]() is src and entry[1] == src._version:
        return entry[2]
    value = fn(src)
    if len(_DERIVED) >= MAX_ENTRIES:
        dead = [kk for kk, e in _DERIVED.items() if e[0]() is None]
        for kk in dead or list(_DERIVED)[: MAX_ENTRIES // 2]:
            _DERIVED.pop(kk, None)
    try:
        # the entry goes when ``src`` is freed (pass 1 builds a new face list every step)
        _DERIVED[k] = (weakref.ref(src, lambda _ref, k=k: _DERIVED.pop(k, None)), src._version, value)
    except TypeError:
        pass
    return value
