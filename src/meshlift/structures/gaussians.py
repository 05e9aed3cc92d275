"""3D Gaussian parameter container (3DGS layout; Kerbl et al. 2023, "3D Gaussian Splatting for Real-Time
Radiance Field Rendering", Sec. 4). A container only: no algorithms (projection, rendering, densification
live in :mod:`meshlift.render.splat` and the training methods).

What is stored is the **unconstrained** parametrisation an optimiser works on, exactly as 3DGS stores it:

=================  ===============  ===========================================================
field              shape            meaning / activation
=================  ===============  ===========================================================
``means``          ``[N, 3]``       centres, world units (docs/conventions.md §1)
``quats``          ``[N, 4]``       rotations (w, x, y, z) (conventions §5), *not* necessarily unit:
                                    :attr:`rotations` normalises them
``log_scales``     ``[N, 3]``       log standard deviations along the Gaussian's local axes:
                                    :attr:`scales` ``= exp(log_scales)``
``opacity_logits`` ``[N]``          :attr:`opacities` ``= sigmoid(opacity_logits)``
``sh0``            ``[N, 1, 3]``    degree-0 SH coefficient per colour channel (3DGS ``f_dc``)
``shN``            ``[N, K-1, 3]``  higher-order SH coefficients, ``K = (degree + 1)^2`` (``f_rest``);
                                    ``[N, 0, 3]`` for degree 0
=================  ===============  ===========================================================

The SH basis, its ordering and the colour rule ``rgb = max(SH(d) + 0.5, 0)`` are those of 3DGS, written
in docs/conventions.md ("Gaussian splatting").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Dict

import torch

from meshlift.errors import RenderError

__all__ = ["Gaussians", "sh_degree_from_coeffs", "num_sh_coeffs"]


def num_sh_coeffs(degree: int) -> int:
    """Number of SH coefficients per channel up to ``degree``: ``(degree + 1)^2``."""
    return (int(degree) + 1) ** 2


def sh_degree_from_coeffs(k: int) -> int:
    """Inverse of :func:`num_sh_coeffs`; raises :class:`RenderError` if ``k`` is not a square number."""
    d = int(round(math.sqrt(k))) - 1
    if d < 0 or (d + 1) ** 2 != k:
        raise RenderError(f"SH coefficient count must be (degree+1)^2 (1, 4, 9, 16), got {k}")
    return d


@dataclass(eq=False)
class Gaussians:
    """``N`` 3D Gaussians in the 3DGS parametrisation (see the module docstring for the fields).

    Tensors may be leaf parameters (``requires_grad=True``); the activation properties are differentiable.
    Shapes are checked on construction (:class:`~meshlift.errors.RenderError` names the field).
    """

    means: torch.Tensor
    quats: torch.Tensor
    log_scales: torch.Tensor
    opacity_logits: torch.Tensor
    sh0: torch.Tensor
    shN: torch.Tensor

    def __post_init__(self) -> None:
        n = self.means.shape[0] if self.means.ndim == 2 else -1
        expect = {
            "means": (n, 3),
            "quats": (n, 4),
            "log_scales": (n, 3),
            "opacity_logits": (n,),
            "sh0": (n, 1, 3),
        }
        for name, shape in expect.items():
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor):
                raise RenderError(f"Gaussians.{name} must be a torch.Tensor, got {type(t).__name__}")
            if tuple(t.shape) != shape or n < 0:
                raise RenderError(f"Gaussians.{name} must have shape {list(shape)}, got {list(t.shape)}")
        if self.shN.ndim != 3 or self.shN.shape[0] != n or self.shN.shape[2] != 3:
            raise RenderError(f"Gaussians.shN must have shape [{n}, K-1, 3], got {list(self.shN.shape)}")
        sh_degree_from_coeffs(self.shN.shape[1] + 1)

    # ---- activations ---------------------------------------------------------------------------
    @property
    def num(self) -> int:
        """Number of Gaussians ``N``."""
        return int(self.means.shape[0])

    def __len__(self) -> int:
        return self.num

    @property
    def scales(self) -> torch.Tensor:
        """Standard deviations ``[N, 3] = exp(log_scales)`` (world units)."""
        return torch.exp(self.log_scales)

    @property
    def opacities(self) -> torch.Tensor:
        """Opacities ``[N] = sigmoid(opacity_logits)`` in (0, 1)."""
        return torch.sigmoid(self.opacity_logits)

    @property
    def rotations(self) -> torch.Tensor:
        """Unit quaternions ``[N, 4]`` (w, x, y, z)."""
        return self.quats / self.quats.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    @property
    def sh(self) -> torch.Tensor:
        """All SH coefficients ``[N, K, 3]`` (``sh0`` then ``shN``)."""
        return torch.cat([self.sh0, self.shN], dim=1)

    @property
    def sh_degree(self) -> int:
        """Largest SH degree stored (0..3)."""
        return sh_degree_from_coeffs(self.shN.shape[1] + 1)

    # ---- plumbing ------------------------------------------------------------------------------
    def tensors(self) -> Dict[str, torch.Tensor]:
        """The stored tensors by field name (e.g. for per-group optimiser learning rates)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to(self, device: torch.device | str) -> "Gaussians":
        """A copy with every tensor on ``device``."""
        return replace(self, **{k: v.to(device) for k, v in self.tensors().items()})

    def detach(self) -> "Gaussians":
        """A copy with every tensor detached from the autograd graph."""
        return replace(self, **{k: v.detach() for k, v in self.tensors().items()})

    def index(self, idx: torch.Tensor) -> "Gaussians":
        """The subset ``idx`` (bool mask ``[N]`` or integer indices), every field indexed alike."""
        return replace(self, **{k: v[idx] for k, v in self.tensors().items()})

    @classmethod
    def from_activated(cls, means: torch.Tensor, quats: torch.Tensor, scales: torch.Tensor,
                       opacities: torch.Tensor, sh: torch.Tensor) -> "Gaussians":
        """Build from activated values: ``scales [N,3] > 0``, ``opacities [N]`` in (0, 1), ``sh [N,K,3]``.

        Inverse activations: ``log``, ``logit`` (opacities are clamped to ``[1e-6, 1 - 1e-6]``).
        """
        if bool((scales <= 0).any()):
            raise RenderError("from_activated: scales must be > 0 (they are stored as log-scales)")
        op = opacities.clamp(1e-6, 1 - 1e-6)
        return cls(means=means, quats=quats, log_scales=torch.log(scales),
                   opacity_logits=torch.log(op) - torch.log1p(-op), sh0=sh[:, :1], shN=sh[:, 1:])
