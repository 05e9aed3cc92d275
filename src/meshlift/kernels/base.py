"""The visibility backend interface (the seam where faster GPU rasterizer passes slot in).

A visibility backend answers one discrete question — which triangle is nearest at each pixel centre.
Barycentrics, depth and their gradients are then computed by differentiable PyTorch ops in
:mod:`meshlift.render.rasterize`, so *this* interface has no backward pass. Kernels that do need one
(splatting, hash grids) follow the differentiable-kernel contract in :mod:`meshlift.kernels`.
"""

from __future__ import annotations

from typing import Optional, Protocol, Tuple, runtime_checkable

import torch


@runtime_checkable
class VisibilityBackend(Protocol):
    """What every visibility backend provides.

    Attributes:
        name: the name users pass as ``backend=`` (``"torch"``, later ``"triton"``, ``"nvdiffrast"``).
    """

    name: str

    def is_available(self, device: torch.device) -> bool:
        """Whether this backend can run on ``device`` in this environment (no import errors)."""
        ...

    def visibility(
        self,
        pos: torch.Tensor,
        tri: torch.Tensor,
        resolution: Tuple[int, int],
        ranges: Optional[torch.Tensor],
        max_fragments: int,
    ) -> torch.Tensor:
        """Nearest triangle per pixel centre.

        Args:
            pos: clip-space positions, ``[B, V, 4]`` (instanced mode) or ``[V, 4]`` (range mode), float,
                detached (no gradient is taken here).
            tri: ``[T, 3]`` int64 vertex indices.
            resolution: ``(H, W)``.
            ranges: ``[B, 2]`` int64 ``(first triangle, triangle count)`` per image in range mode, else None.
            max_fragments: fragment budget: at most this many candidate (triangle, pixel) pairs are alive
                at once.

        Returns:
            ``[B, H, W]`` int64 triangle index (into ``tri``) of the visible triangle, −1 where empty.
            Conventions (docs/conventions.md §3): pixel centres at NDC ``2(j + 0.5)/W − 1``,
            ``2(i + 0.5)/H − 1``; smallest ``z/w`` wins, ties to the lower triangle index; fragments with
            ``z/w`` outside [−1, 1] are clipped (near and far planes).
        """
        ...
