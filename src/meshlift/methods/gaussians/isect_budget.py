"""Tile-list capacity of the training render: the 3DGS step without its per-step host wait (issue 29).

Why. The tile-based splatting render needs the number of (tile, Gaussian) pairs to allocate its sorted lists;
reading it back (gsplat's way, and :func:`meshlift.render.splat.rasterize_gaussians` without a capacity) makes
the host wait for the GPU in the middle of every step: the queue drains, and the GPU then idles while the host
issues the rest of the step, so the step costs about host time + device time instead of the larger of the two.

What. :class:`IsectBudget` gives the render a capacity instead (``rasterize_gaussians(..., isect_capacity=)``):
``headroom ×`` the largest count of the last ``window`` steps, rounded up to ``granularity`` pairs (the sort's
size changes rarely). The true count of the render is copied to pinned memory right after the render, before
the loss and backward are queued; after the step's backward has been issued, :meth:`IsectBudget.overflowed`
waits for that copy (the forward, while the GPU goes on with the backward) and says whether the count exceeded
the capacity; the trainer then discards the step's gradients and renders it again without a capacity (exactly;
a counted ``redo``). The first step reads the count back and seeds the window; when densification grows the set,
the window's counts grow in proportion.

Memory: the lists take ``capacity`` slots instead of the count (``headroom`` − 1 more at most, 25 % by
default, 10 bytes a slot). Only the Triton path on CUDA has a capacity; elsewhere :meth:`capacity` is None.
"""

from __future__ import annotations

import collections
import math
from typing import Optional

import torch

#: Pairs the capacity is rounded up to (a multiple of this: the sort's size changes rarely).
GRANULARITY = 1 << 16


class IsectBudget:
    """Capacity of the tile lists of the next training render, and the check of the last one.

    Args:
        device: the render's device (CUDA: the count is copied to pinned memory and waited on by event).
        headroom: capacity over the largest recent count (> 1).
        window: how many recent counts the capacity covers (the views of one pass through the data vary).
        granularity: the capacity is a multiple of this many pairs.
    """

    def __init__(self, device: torch.device, headroom: float = 1.25, window: int = 64,
                 granularity: int = GRANULARITY) -> None:
        if not headroom > 1.0 or window < 1 or granularity < 1:
            raise ValueError("IsectBudget: headroom must be > 1, window and granularity >= 1")
        self.device = torch.device(device)
        self.headroom, self.granularity = float(headroom), int(granularity)
        self.recent: collections.deque = collections.deque(maxlen=int(window))
        self.redos = 0  # steps rendered again because their count exceeded the capacity
        self.capped_steps = 0
        self._size = None  # Gaussian count the window belongs to
        self._pending = None  # the capacity of the last capped render, until checked
        cuda = self.device.type == "cuda"
        self._host = torch.zeros(1, dtype=torch.int64, pin_memory=cuda)
        # recorded again each step (its last use was waited on before)
        self._event = torch.cuda.Event() if cuda else None

    def capacity(self, num_gaussians: int) -> Optional[int]:
        """Capacity for the next render of ``num_gaussians`` Gaussians, or None: read the count back (the first
        step). When the set grew (densification) the window's counts grow in proportion (pairs scale with the
        count for a cloned Gaussian, less for a split one); when it shrank (pruning) they are kept."""
        if self._size and num_gaussians > self._size and self.recent:
            ratio = num_gaussians / self._size
            self.recent = collections.deque((int(math.ceil(v * ratio)) for v in self.recent),
                                            maxlen=self.recent.maxlen)
        self._size = num_gaussians
        if not self.recent:
            return None
        want = self.headroom * max(self.recent)
        return max(self.granularity, int(math.ceil(want / self.granularity)) * self.granularity)

    def record(self, info: dict, capacity: Optional[int]) -> None:
        """After a render made with ``capacity``: an exact one seeds the window with its count (a host int), a
        capped one starts the copy of its true count (``info["isect_needed"]``) to the host."""
        if capacity is None or "isect_needed" not in info:
            self.recent.append(int(info["flatten_ids"].shape[0]))
            self._pending = None
            return
        self.capped_steps += 1
        self._host.copy_(info["isect_needed"].reshape(1), non_blocking=True)
        if self._event is not None:
            self._event.record(torch.cuda.current_stream(self.device))
        self._pending = int(capacity)

    def overflowed(self) -> bool:
        """Whether the last capped render needed more pairs than it had (waits for its count's copy only);
        records its count. False after an exact render."""
        if self._pending is None:
            return False
        capacity, self._pending = self._pending, None
        if self._event is not None:
            self._event.synchronize()
        needed = int(self._host[0])
        self.recent.append(needed)
        if needed > capacity:
            self.redos += 1
            return True
        return False
