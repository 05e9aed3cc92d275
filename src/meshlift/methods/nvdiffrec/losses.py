"""Losses, regularisers and their schedules of the nvdiffrec method.

Source: nvdiffrec (Munkberg et al., CVPR 2022, Sec. 4 and its ``train.py``): log-L1 on tone-mapped HDR
colour (target premultiplied by the mask where masks exist) + MSE of the antialiased coverage against the
mask; the SDF sign-change regulariser (eq. 2) decaying over the first quarter of pass 1; the albedo
smoothness term warmed up over its first 500 steps; the uniform Laplacian on pass-2 vertex offsets
decaying to 0 over pass 2. Each ramp is a named :class:`meshlift.methods.engine.LinearSchedule` in
:class:`RegularizerSchedules`, saved with the checkpoint. With a random training background
(``train_background``, :mod:`~meshlift.methods.nvdiffrec.backgrounds`) the colour term compares the whole
composites (not premultiplied by the mask: premultiplying would hide the background wherever the mask is 0).
The occlusion regulariser (nvdiffrec's visibility term) pulls a learned occlusion ``ks[0]`` towards 0.
:func:`render_and_loss` is a training step's render and image loss (both passes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from meshlift.data.views import PosedViews
from meshlift.methods.engine import LinearSchedule
from meshlift.methods.nvdiffrec.config import SurfaceConfig

__all__ = ["OCCLUSION_REG_KEY", "RegularizerSchedules", "image_loss", "image_loss_terms", "make_laplacian_loss",
           "occlusion_reg_active", "occlusion_regularizer", "render_and_loss", "tonemapped_log_l1"]

#: The loss-history field (``TrainState.history`` rows) of the occlusion regulariser's unweighted value.
OCCLUSION_REG_KEY = "occlusion_reg"

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


def image_loss(out: dict, views: PosedViews, cfg: SurfaceConfig, background: Optional[torch.Tensor] = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Colour + mask loss of a rendered batch ``out`` (``render_mesh``'s dict) against ``views``' targets.

    ``background``: None (the views' own, the colour term premultiplied by the mask as nvdiffrec's), or the
    ``[B, H, W, 3]`` random background ``out`` was rendered over (:func:`~meshlift.methods.nvdiffrec.
    backgrounds.draw_background`): the targets are re-composited on it and the colour term compares the whole
    images. Returns ``(loss, srgb_mse)``; the MSE (no gradient) between sRGB-encoded clamped images gives the
    PSNR (on the step's background).
    """
    if background is None:
        return image_loss_terms(out["shaded"], out["alpha"], views.targets(), views.masks, cfg.mask_weight)
    from meshlift.methods.nvdiffrec.backgrounds import targets_on

    return image_loss_terms(out["shaded"], out["alpha"], targets_on(views, background), views.masks,
                            cfg.mask_weight, premultiply=False)


def image_loss_terms(pred: torch.Tensor, alpha: torch.Tensor, target: torch.Tensor, masks, mask_weight: float,
                     premultiply: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`image_loss` on tensors: ``pred``/``target [B, H, W, 3]`` linear HDR, ``alpha [B, H, W, 1]``, ``masks
    [B, H, W, 1]`` or None (then no mask term); ``premultiply``: the colour term on ``pred · masks`` and
    ``target · masks`` (nvdiffrec), else on the whole images. Returns ``(loss, srgb_mse)`` (the CUDA-graphed
    loss of ``pixel_graphs`` is this function)."""
    from meshlift.shading.color import linear_to_srgb, tonemapped_l1

    if masks is not None:  # the colour term is fused on CUDA (shading.color.tonemapped_l1), the same maths
        loss = (tonemapped_l1(pred, target, masks if premultiply else None)
                + mask_weight * F.mse_loss(alpha, masks))
    else:
        loss = tonemapped_l1(pred, target)
    with torch.no_grad():
        mse = F.mse_loss(linear_to_srgb(pred.clamp(0, 1)), linear_to_srgb(target.clamp(0, 1)))
    return loss, mse


def occlusion_reg_active(cfg: SurfaceConfig) -> bool:
    """Whether the occlusion regulariser acts: a positive ``occlusion_reg_weight`` and a learned occlusion
    (``ks_max[0] > ks_min[0]``; with the two equal ``ks[0]`` is a constant and the term has no gradient)."""
    return float(cfg.occlusion_reg_weight) > 0 and float(cfg.ks_max[0]) > float(cfg.ks_min[0])


def occlusion_regularizer(ks: torch.Tensor, coverage: torch.Tensor) -> torch.Tensor:
    """Mean occlusion amount over the covered pixels: ``Σ ks[..., 0] / Σ coverage`` (0-dim).

    Source: nvdiffrec's visibility regulariser (the mean of the learned occlusion channel; Munkberg et al. 2022,
    its ``train.py``), here normalised by the covered pixels, not the whole frame, so that its weight does not
    depend on the object's size in the image. Occlusion is nvdiffrec's amount occluded (conventions §7: 0 = open),
    so the term is 0 for an unoccluded surface and grows linearly with the occlusion (an L1 pull towards 0).

    Args:
        ks: ``[B, H, W, 3]`` rendered (occlusion, roughness, metallic), 0 where empty (``render_mesh``'s ``ks``).
        coverage: ``[B, H, W, 1]`` coverage in [0, 1] (``render_mesh``'s ``alpha``; no gradient is taken
            through it).
    """
    return ks[..., 0].sum() / coverage.detach().sum().clamp(min=1.0)


def render_and_loss(graphs, stages, mesh, views: PosedViews, light, light_trainable: bool, material,
                    cfg: SurfaceConfig, jitter: float) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """A training step's light mips, render and image loss: ``(out, loss, srgb_mse)``, by the CUDA graphs of
    ``graphs`` (a ``pixel_graphs.PixelGraphs``, which builds a learned light's mips itself) or eagerly
    (``evaluate.render_batch`` + :func:`image_loss`, over the step's ``train_background``; ``material`` None =
    the mesh's own). ``stages``: the step's stage timer (``loop.NO_STAGES``)."""
    from meshlift.methods.nvdiffrec.backgrounds import draw_background
    from meshlift.methods.nvdiffrec.evaluate import render_batch

    if light_trainable and (graphs is None or not graphs.builds_light):
        with stages("light"):
            light.build_mips()
    if graphs is not None:
        with stages("render"):  # the image loss is timed here too: it is replayed with the render
            return graphs.render(mesh, views)
    with stages("render"):
        background = draw_background(views, cfg.train_background)
        out = render_batch(mesh, views, light, material, cfg, jitter, background=background)
    with stages("loss"):
        loss, mse = image_loss(out, views, cfg, background)
    return out, loss, mse


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

