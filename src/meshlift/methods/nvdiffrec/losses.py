"""Losses, regularisers and their schedules of the nvdiffrec method.

Source: nvdiffrec (Munkberg et al., CVPR 2022, Sec. 4 and its ``train.py``): log-L1 on tone-mapped HDR
colour (target premultiplied by the mask where masks exist) + MSE of the antialiased coverage against the
mask; the SDF sign-change regulariser (eq. 2) decaying over the first quarter of pass 1; the albedo
smoothness term warmed up over its first 500 steps; the uniform Laplacian on pass-2 vertex offsets
decaying to 0 over pass 2. Each ramp is a named :class:`meshlift.methods.engine.LinearSchedule` in
:class:`RegularizerSchedules`, saved with the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from meshlift.data.views import PosedViews
from meshlift.methods.engine import LinearSchedule
from meshlift.methods.nvdiffrec.config import SurfaceConfig

__all__ = ["RegularizerSchedules", "image_loss", "image_loss_terms", "make_laplacian_loss", "tonemapped_log_l1"]

#: Fraction of pass 1 over which the SDF regulariser decays from ``sdf_reg_weight`` to ``sdf_reg_final``.
SDF_REG_DECAY_FRACTION = 0.25
#: Pass-1 steps over which the albedo smoothness weight ramps from 0 to ``kd_smooth_weight``.
KD_SMOOTH_WARMUP_STEPS = 500


@dataclass(frozen=True)
class RegularizerSchedules:
    """The weight ramps of the regularisers (multiply the configured weights).

    Attributes:
        sdf_reg: SDF regulariser weight as a function of the fraction of pass 1 done.
        kd_smooth_warmup: albedo-smoothness factor in [0, 1] as a function of the pass-1 step.
        laplace: Laplacian factor in [1, 0] as a function of the fraction of pass 2 done.
    """

    sdf_reg: LinearSchedule
    kd_smooth_warmup: LinearSchedule
    laplace: LinearSchedule

    @classmethod
    def from_config(cls, cfg: SurfaceConfig) -> "RegularizerSchedules":
        return cls(
            sdf_reg=LinearSchedule(cfg.sdf_reg_weight, cfg.sdf_reg_final, SDF_REG_DECAY_FRACTION),
            kd_smooth_warmup=LinearSchedule(0.0, 1.0, float(KD_SMOOTH_WARMUP_STEPS)),
            laplace=LinearSchedule(1.0, 0.0, 1.0),
        )

    def state_dict(self) -> dict:
        return {"sdf_reg": self.sdf_reg.state_dict(), "kd_smooth_warmup": self.kd_smooth_warmup.state_dict(),
                "laplace": self.laplace.state_dict()}


def tonemapped_log_l1(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """nvdiffrec's ``logl1``: L1 between ``tonemap_srgb(log(x + 1))`` of HDR linear colours ``[..., 3]``."""
    from meshlift.shading.color import tonemap_srgb

    return F.l1_loss(tonemap_srgb(pred), tonemap_srgb(target))


def image_loss(out: dict, views: PosedViews, cfg: SurfaceConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Colour + mask loss of a rendered batch ``out`` (``render_mesh``'s dict) against ``views``' targets.

    Returns ``(loss, srgb_mse)``; the MSE (no gradient) between sRGB-encoded clamped images gives the PSNR.
    """
    return image_loss_terms(out["shaded"], out["alpha"], views.targets(), views.masks, cfg.mask_weight)


def image_loss_terms(pred: torch.Tensor, alpha: torch.Tensor, target: torch.Tensor, masks, mask_weight: float
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`image_loss` on tensors: ``pred``/``target [B, H, W, 3]`` linear HDR, ``alpha [B, H, W, 1]``, ``masks
    [B, H, W, 1]`` or None (then no mask term); returns ``(loss, srgb_mse)`` (the CUDA-graphed loss of
    ``pixel_graphs`` is this function)."""
    from meshlift.shading.color import linear_to_srgb, tonemapped_l1

    if masks is not None:  # the colour term is fused on CUDA (shading.color.tonemapped_l1), the same maths
        loss = tonemapped_l1(pred, target, masks) + mask_weight * F.mse_loss(alpha, masks)
    else:
        loss = tonemapped_l1(pred, target)
    with torch.no_grad():
        mse = F.mse_loss(linear_to_srgb(pred.clamp(0, 1)), linear_to_srgb(target.clamp(0, 1)))
    return loss, mse


def make_laplacian_loss(num_vertices: int, faces: torch.Tensor, device: torch.device) -> Callable:
    """``fn(x [V, 3]) -> scalar``: mean squared uniform Laplacian ``x_i − mean_{j ∈ N(i)} x_j`` for fixed faces.

    Equals ``meshlift.geometry.mesh_ops.laplacian_smoothness_loss(x, faces)`` (nvdiffrec's
    ``laplace_regularizer_const``) but builds the sparse ``L = D − A`` once, for the fixed topology of pass 2.
    """
    from meshlift.geometry.mesh_ops import laplacian_uniform

    lap = laplacian_uniform(num_vertices, faces).to(device)
    rows, cols = lap.indices()
    diag = torch.where(rows == cols, lap.values(), torch.zeros_like(lap.values()))
    deg = torch.zeros(num_vertices, device=device).index_add(0, rows, diag).clamp(min=1.0)[:, None]

    def loss(x: torch.Tensor) -> torch.Tensor:
        return (torch.sparse.mm(lap, x) / deg).pow(2).mean()

    return loss

