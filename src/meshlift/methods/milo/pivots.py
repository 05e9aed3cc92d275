"""Pivots of Gaussians and the learnable SDF at them (MILo, Guédon et al. 2025, Sec. 3).

**Pivots.** Every selected Gaussian (mean ``mu``, standard deviations ``sigma`` along its axes, rotation
``R`` from the quaternion ``q = (w, x, y, z)``, docs/conventions.md §5) spawns 9 points: its centre and the
8 corners of its ``3 sigma`` box, ``mu + R diag(3 sigma k) s`` for ``s in {-1, +1}^3``. They are
differentiable w.r.t. ``mu``, ``sigma`` and ``q`` and are the vertices of MILo's Delaunay
tetrahedralisation, so the extracted mesh moves with the Gaussians. When only a subset of the Gaussians
spawns pivots (ratio ``r = selected / total``), MILo enlarges each box by ``k = r^(-1/3)`` so the sparser
pivots still cover the surface; ``k = 1`` for all Gaussians. ``sigma`` is the scale the renderer uses
(including a 3-D / Mip filter if there is one). Each pivot's *scale* is ``max(3 sigma)`` of its Gaussian
(without ``k``, as described in the project notes), used by the large-edge face filter of
:func:`meshlift.isosurface.dmtet.marching_tets` (``scales=``).

Layout: ``pivots[g, 0]`` is the centre; ``pivots[g, c]`` for ``c = 1..8`` is the corner with signs
``s = (2 b0 - 1, 2 b1 - 1, 2 b2 - 1)``, ``b_i = ((c - 1) >> i) & 1`` (first corner ``(-, -, -)``, last
``(+, +, +)``). Flattened, pivot ``9 g + c`` belongs to Gaussian ``g``.

**Pivot SDF.** Each pivot has an occupancy logit split into a fixed *base* (set from depth fusion,
:mod:`meshlift.methods.milo.depth_fusion`, and periodically reset) and a learned *shift* (MILo learns it
at the opacity learning rate, 0.025)::

    occ = sigmoid(base + shift)                  # 1 = inside
    sdf = -(2 occ - 1) / SDF_SCALE,  SDF_SCALE = 0.99   (MILo: sdf = -(occ - 0.5) * 2 / 0.99)

Occupancies from depth fusion lie in ``[OCC_MIN, OCC_MAX] = [0.005, 0.995]``, so their SDF spans
``[-1, 1]``; the sign convention is meshlift's (``sdf < 0`` inside, i.e. ``occ > 0.5``), which
:func:`marching_tets` consumes directly.
"""

from __future__ import annotations

import torch

from meshlift.errors import MeshError
from meshlift.geometry.rotations import quaternion_to_matrix

#: Box half-size in standard deviations (MILo's 3 sigma).
BOX_SIGMAS = 3.0
#: Occupancy range produced by depth fusion (MILo's constants).
OCC_MIN, OCC_MAX = 0.005, 0.995
#: ``sdf = -(2 occ - 1) / SDF_SCALE``; with OCC_MIN/OCC_MAX the SDF spans [-1, 1].
SDF_SCALE = 0.99
#: Pivots per Gaussian.
PIVOTS_PER_GAUSSIAN = 9


def _corner_signs(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``[8, 3]`` signs of the box corners in the documented order."""
    c = torch.arange(8, device=device)
    bits = torch.stack([(c >> i) & 1 for i in range(3)], dim=1)
    return (2 * bits - 1).to(dtype)


def _check_gaussians(means, scales, quats, fn: str) -> None:
    for name, x, d in (("means", means, 3), ("scales", scales, 3), ("quats", quats, 4)):
        if not isinstance(x, torch.Tensor) or x.ndim != 2 or x.shape[1] != d or not x.dtype.is_floating_point:
            got = f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise MeshError(f"{fn}: {name} must be a float [G, {d}] tensor, got {got}")
    if not means.shape[0] == scales.shape[0] == quats.shape[0]:
        raise MeshError(
            f"{fn}: means, scales and quats must hold the same number of Gaussians, got "
            f"{means.shape[0]}, {scales.shape[0]}, {quats.shape[0]}"
        )
    if not means.device == scales.device == quats.device:
        raise MeshError(f"{fn}: means, scales and quats must be on one device")


def gaussian_pivots(
    means: torch.Tensor,
    scales: torch.Tensor,
    quats: torch.Tensor,
    *,
    subset_ratio: float = 1.0,
    box_sigmas: float = BOX_SIGMAS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The 9 pivots of each Gaussian and their scales (see the module docstring for the layout).

    Args:
        means: ``[G, 3]`` float Gaussian centres (world or normalised units).
        scales: ``[G, 3]`` float standard deviations along the Gaussian's axes (activated, not log), > 0.
        quats: ``[G, 4]`` float rotations ``(w, x, y, z)`` (normalised here; need not be unit).
        subset_ratio: ``selected / total`` Gaussians when only a subset spawns pivots, in ``(0, 1]``;
            boxes are scaled by ``subset_ratio ** (-1/3)``.
        box_sigmas: box half-size in standard deviations (3).

    Returns:
        pivots: ``[G, 9, 3]`` (dtype of ``means``), differentiable w.r.t. all three inputs;
            ``pivots.reshape(-1, 3)`` is the point set for :func:`meshlift.isosurface.delaunay.delaunay_tets`.
        pivot_scales: ``[G, 9]`` ``box_sigmas * max(sigma)`` of each pivot's Gaussian.

    Raises:
        MeshError: bad shapes, devices, or ``subset_ratio`` outside ``(0, 1]``.
    """
    _check_gaussians(means, scales, quats, "gaussian_pivots")
    if not 0.0 < float(subset_ratio) <= 1.0:
        raise MeshError(f"gaussian_pivots: subset_ratio must be in (0, 1] (selected / total), got {subset_ratio!r}")
    if not float(box_sigmas) > 0:
        raise MeshError(f"gaussian_pivots: box_sigmas must be > 0, got {box_sigmas!r}")
    k = float(subset_ratio) ** (-1.0 / 3.0)
    R = quaternion_to_matrix(quats.to(means.dtype))  # [G, 3, 3]
    half = scales.to(means.dtype) * (box_sigmas * k)  # [G, 3]
    local = _corner_signs(means.dtype, means.device)[None] * half[:, None, :]  # [G, 8, 3]
    corners = means[:, None, :] + torch.einsum("gij,gcj->gci", R, local)
    pivots = torch.cat([means[:, None, :], corners], dim=1)  # [G, 9, 3]
    pivot_scales = (box_sigmas * scales.to(means.dtype).amax(dim=1, keepdim=True)).expand(-1, PIVOTS_PER_GAUSSIAN)
    return pivots, pivot_scales


def occupancy_to_sdf(occ: torch.Tensor) -> torch.Tensor:
    """MILo's ``sdf = -(2 occ - 1) / 0.99`` (negative inside, i.e. where ``occ > 0.5``); differentiable."""
    return -(2.0 * occ - 1.0) / SDF_SCALE


def sdf_to_occupancy(sdf: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`occupancy_to_sdf`: ``occ = (1 - 0.99 sdf) / 2``; ``sdf in [-1, 1]`` maps to [0.005, 0.995]."""
    return 0.5 * (1.0 - SDF_SCALE * sdf)


def occupancy_logit(occ: torch.Tensor) -> torch.Tensor:
    """``logit(occ)`` with occ clamped to ``[OCC_MIN, OCC_MAX]`` (finite for 0/1 labels)."""
    o = occ.clamp(OCC_MIN, OCC_MAX)
    return torch.log(o) - torch.log1p(-o)


class PivotSDF(torch.nn.Module):
    """Learnable per-pivot occupancy ``sigmoid(base + shift)`` (MILo's learnable SDF; module docstring).

    ``base`` is a buffer (fixed between resets, saved in the state dict); ``shift`` is the learned
    parameter (zeros at creation). Both are ``[G, 9]`` like the pivots.

    Args:
        base_occupancy: ``[G, 9]`` float initial occupancy in (0, 1) (e.g. from
            :func:`meshlift.methods.milo.depth_fusion.fuse_depth_at_pivots`); not modified.

    Raises:
        MeshError: wrong shape or dtype.
    """

    def __init__(self, base_occupancy: torch.Tensor):
        super().__init__()
        self._check(base_occupancy, None, "PivotSDF")
        self.register_buffer("base", occupancy_logit(base_occupancy.detach()).clone())
        self.shift = torch.nn.Parameter(torch.zeros_like(self.base))

    @staticmethod
    def _check(occ: torch.Tensor, shape, fn: str) -> None:
        if not isinstance(occ, torch.Tensor) or not occ.dtype.is_floating_point or occ.ndim != 2:
            raise MeshError(f"{fn}: occupancy must be a float [G, 9] tensor, got {getattr(occ, 'shape', occ)!r}")
        if occ.shape[1] != PIVOTS_PER_GAUSSIAN or (shape is not None and tuple(occ.shape) != tuple(shape)):
            want = f"[{shape[0]}, 9]" if shape is not None else "[G, 9]"
            raise MeshError(f"{fn}: occupancy must have shape {want}, got {list(occ.shape)}")

    def logits(self) -> torch.Tensor:
        """``[G, 9]`` occupancy logits ``base + shift`` (differentiable w.r.t. ``shift``)."""
        return self.base + self.shift

    def occupancy(self) -> torch.Tensor:
        """``[G, 9]`` occupancy in (0, 1), 1 = inside."""
        return torch.sigmoid(self.logits())

    def sdf(self) -> torch.Tensor:
        """``[G, 9]`` SDF, negative inside (:func:`occupancy_to_sdf`); ``.reshape(-1)`` for marching_tets."""
        return occupancy_to_sdf(self.occupancy())

    @torch.no_grad()
    def reset_base(self, occupancy: torch.Tensor, *, blend: float | None = None) -> None:
        """Reset the base so that the occupancy becomes ``occupancy`` (or a blend of it and the current one).

        With ``blend = a`` the new occupancy is ``a * occupancy + (1 - a) * current`` (MILo blends its
        depth-fusion resets with a = 0.4 [the weight's side is our reading of the notes]). The shift
        parameter keeps its value (so optimiser state stays valid); the base absorbs the change:
        ``base = logit(target) - shift``, with the target clamped to ``[OCC_MIN, OCC_MAX]``.

        Raises:
            MeshError: wrong shape, or ``blend`` outside [0, 1].
        """
        self._check(occupancy, self.base.shape, "PivotSDF.reset_base")
        target = occupancy.detach().to(self.base)
        if blend is not None:
            if not 0.0 <= float(blend) <= 1.0:
                raise MeshError(f"PivotSDF.reset_base: blend must be in [0, 1], got {blend!r}")
            target = float(blend) * target + (1.0 - float(blend)) * self.occupancy()
        self.base.copy_(occupancy_logit(target) - self.shift)
