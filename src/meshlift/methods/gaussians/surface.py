"""Surface-aligned Gaussians: flat Gaussians whose rendered depth lies on the surface.

Round 3DGS Gaussians sit *inside* the surface and their blended depth is biased (Huang et al. 2024,
"2D Gaussian Splatting", Sec. 1; Chen et al. 2024, "PGSR", Sec. 3.1), so a mesh fused from it is
shrunk, noisy and full of floaters. :class:`SurfaceRegularizer` plugs into
:class:`~meshlift.methods.gaussians.trainer.GaussianTrainer` (its :class:`Regularizer` hooks) and adds
PGSR's single-view terms (Sec. 3.1-3.2):

- **flattening** (PGSR eq. 4, "scale loss"): ``mean_i min(s_i) / scene_scale`` — every Gaussian becomes
  a disc whose shortest axis is its normal (the ``normal`` map of :func:`meshlift.render.splat.rasterize_gaussians`);
- **unbiased depth**: the depth of the Gaussian *plane* along each pixel's ray, ``z = d / (n · ray)``, not of
  the Gaussian centre — of the Gaussian where transmittance crosses 0.5 (``median_plane``: RaDe-GS's median
  rule with PGSR's planar depth, ``info["median_plane_depth"]``; the default) or of the blended plane
  (``plane``: PGSR eq. 6-7, ``info["plane_depth"]``, which also averages in the Gaussians behind the first
  surface: measured +1.4 px behind the truth on the quick spot run where the median plane is closer);
- **depth-normal consistency** (PGSR eq. 8; 2DGS eq. 14): ``mean(1 − n̂_render · n_depth)`` between the
  rendered normal and the normal of the (plane) depth map by central differences, over opaque pixels;

and PGSR's multi-view term (Sec. 3.3, eq. 9-11, depth form; off unless ``multiview_weight > 0``):

- **multi-view geometric consistency**: every ``multiview_every`` steps from ``multiview_start``, the surface
  depth of one neighbouring training view per trained view is rendered too (the neighbours: the
  ``multiview_neighbours`` nearest camera centres within 60 degrees of viewing direction,
  :func:`meshlift.isosurface.depth_consistency.view_neighbours`, computed once; the step picks column
  ``(step // every) % k``, no random draw), and the forward-backward reprojection error of the two depth maps
  (:func:`meshlift.geometry.reprojection.multiview_geometric_loss`: ``mean exp(−φ) φ`` over pixels with
  ``φ < 1`` px) is added; its gradient reaches both renders. Cost: one extra render of the batch's size.

The depth used for the loss and later for the TSDF fusion is :func:`surface_depth` (0 where the pixel is
not opaque). Weights: PGSR uses 100 for the scale loss in scene units and 0.015 for the normal term; we
normalise the scale loss by ``scene_scale`` (so the weight does not depend on the capture's units) and
default to MILo's 0.05 for the normal term.
"""

from __future__ import annotations

from typing import Optional

import torch

from meshlift.methods.gaussians.trainer import Regularizer, render_params

__all__ = ["DEPTH_OUTPUTS", "SurfaceRegularizer", "depth_normal_loss", "flatten_loss", "surface_depth"]

#: The surface depths a run can use -> the ``SplatSettings.outputs`` name that renders it.
DEPTH_OUTPUTS = {"median_plane": "median_plane_depth", "plane": "plane_depth", "median": "median_depth"}


def depth_normal_loss(normal: torch.Tensor, depth: torch.Tensor, K: torch.Tensor,
                      world_to_camera: torch.Tensor) -> torch.Tensor:
    """``mean(1 − n̂_render · n_depth)`` over pixels where both normals exist (2DGS eq. 14, PGSR eq. 8, MILo).

    Args:
        normal: ``[B, H, W, 3]`` rendered normal map (world frame, not normalised; ``info["normal"]``).
        depth: ``[B, H, W, 1]`` rendered depth (camera z; median or plane depth; 0 = empty).
        K, world_to_camera: the views' ``[B, 3, 3]`` / ``[B, 4, 4]``.

    Returns a 0-dim tensor (no host sync: a masked mean without boolean indexing).
    """
    from meshlift.render.splat import depth_to_normals

    n_d = depth_to_normals(depth, K, world_to_camera)
    n_r = torch.nn.functional.normalize(normal, dim=-1, eps=1e-12)
    ok = (n_d.detach().norm(dim=-1) > 0) & (normal.detach().norm(dim=-1) > 1e-6)
    err = 1.0 - (n_r * n_d).sum(-1)
    return torch.where(ok, err, torch.zeros_like(err)).sum() / ok.sum().clamp(min=1)


def surface_depth(depth: torch.Tensor, alpha: torch.Tensor, min_alpha: float = 0.5) -> torch.Tensor:
    """The depth where the pixel is opaque (``alpha > min_alpha``; 0.5: transmittance crossed 0.5), else 0 (empty).

    The renderer's median depth falls back to the last contributor where T never crosses 0.5; for the
    depth fusion and the mesh depth loss such pixels hold no surface (faint floaters would otherwise
    become closed blobs: their far side gets no free-space vote). [our choice.] A non-finite depth is
    also empty. Shapes ``[B, H, W, 1]``.
    """
    ok = (alpha.detach() > min_alpha) & torch.isfinite(depth.detach())
    return torch.where(ok, depth, torch.zeros_like(depth))


def flatten_loss(log_scales: torch.Tensor, scene_scale: float) -> torch.Tensor:
    """PGSR's scale loss ``mean_i min_k s_ik`` divided by ``scene_scale`` (0-dim; 0 for no Gaussians).

    Args: ``log_scales [N, 3]`` (the stored parameter, ``s = exp``); ``scene_scale`` (world units, > 0).
    """
    if log_scales.shape[0] == 0:
        return log_scales.sum() * 0.0
    return torch.exp(log_scales.min(dim=-1).values).mean() / float(scene_scale)


class SurfaceRegularizer(Regularizer):
    """Flattening + plane depth + depth-normal consistency (module docstring) as trainer hooks.

    Args:
        scene_scale: the problem's scene scale (world units).
        flatten_weight, flatten_start: weight of :func:`flatten_loss` and its first step (0-based).
        depth_normal_weight, depth_normal_start: weight of :func:`depth_normal_loss` on the plane depth
            (``depth="plane"``) or the median depth (``depth="median"``) and its first step.
        depth: a key of :data:`DEPTH_OUTPUTS`: ``"median_plane"`` (the plane of the Gaussian where
            transmittance crosses 0.5), ``"plane"`` (PGSR's blended plane) or ``"median"`` (its centre depth).
        multiview_weight, multiview_start, multiview_every, multiview_neighbours, multiview_max_error: PGSR's
            multi-view geometric term (module docstring): its weight (0 = off), first step, period in steps
            (>= 1), neighbours per view (>= 1) and the error in pixels beyond which a pixel is dropped (> 0).

    Raises:
        ConfigError: an unknown ``depth``, a negative weight, ``multiview_every`` or ``multiview_neighbours``
            below 1, ``multiview_max_error <= 0``.
    """

    def __init__(self, scene_scale: float, *, flatten_weight: float = 100.0, flatten_start: int = 0,
                 depth_normal_weight: float = 0.05, depth_normal_start: int = 3000,
                 depth: str = "median_plane", multiview_weight: float = 0.0, multiview_start: int = 0,
                 multiview_every: int = 1, multiview_neighbours: int = 4, multiview_max_error: float = 1.0) -> None:
        from meshlift.errors import ConfigError

        if depth not in DEPTH_OUTPUTS:
            raise ConfigError(f"surface depth must be one of {', '.join(DEPTH_OUTPUTS)}, got {depth!r}")
        if flatten_weight < 0 or depth_normal_weight < 0:
            raise ConfigError(f"surface regulariser weights must be >= 0, got flatten {flatten_weight!r}, "
                              f"depth-normal {depth_normal_weight!r}")
        self.scene_scale = float(scene_scale)
        self.flatten_weight, self.flatten_start = float(flatten_weight), int(flatten_start)
        self.dn_weight, self.dn_start = float(depth_normal_weight), int(depth_normal_start)
        if not multiview_weight >= 0 or multiview_every < 1 or multiview_neighbours < 1 or not multiview_max_error > 0:
            raise ConfigError(f"multi-view term: multiview_weight must be >= 0, multiview_every and multiview_neighbours "
                              f">= 1, multiview_max_error > 0; got {multiview_weight!r}, {multiview_every!r}, "
                              f"{multiview_neighbours!r}, {multiview_max_error!r}")
        self.depth = depth
        self.mv_weight, self.mv_start, self.mv_every = float(multiview_weight), int(multiview_start), int(multiview_every)
        self.mv_k, self.mv_max_error = int(multiview_neighbours), float(multiview_max_error)
        self._neighbours: Optional[torch.Tensor] = None  # [V, k] of the training views, computed at first use
        self.mv_stats: dict = {}  # running sums of the multi-view term (device tensors): loss, used, calls
        self.last: dict = {}  # the last step's terms, device tensors (no per-step sync)

    @property
    def depth_output(self) -> str:
        """The ``SplatSettings.outputs`` name of the depth this regulariser uses."""
        return DEPTH_OUTPUTS[self.depth]

    def multiview_active(self, step: int) -> bool:
        """Whether step ``step`` adds the multi-view term."""
        return self.mv_weight > 0 and step >= self.mv_start and (step - self.mv_start) % self.mv_every == 0

    def render_outputs(self, step: int) -> tuple:
        if self.dn_weight > 0 and step >= self.dn_start:
            return ("normal", self.depth_output)
        if self.multiview_active(step):
            return (self.depth_output,)
        return ()

    def neighbours(self, views) -> torch.Tensor:
        """``[V, k]`` int64 neighbours of the training ``views`` (``-1`` = none; computed once)."""
        if self._neighbours is None or self._neighbours.shape[0] != len(views):
            from meshlift.isosurface.depth_consistency import view_neighbours

            self._neighbours = view_neighbours(views.world_to_camera, self.mv_k)
        return self._neighbours

    def multiview_loss(self, step: int, trainer, batch, info: dict) -> Optional[torch.Tensor]:
        """The multi-view term of this step (module docstring), or None (no neighbour, no view indices)."""
        import dataclasses

        from meshlift.geometry.reprojection import multiview_geometric_loss

        key = self.depth_output
        if batch.indices is None or key not in info:
            return None
        views = trainer.problem.train
        nb = self.neighbours(views)
        col = (step // self.mv_every) % nb.shape[1]
        rows, picks = [], []
        for r, i in enumerate(batch.indices.tolist()):
            j = int(nb[i, col]) if int(nb[i, col]) >= 0 else int(nb[i, 0])
            if j >= 0:
                rows.append(r)
                picks.append(j)
        if not picks:
            return None
        nbatch = views.batch(torch.tensor(picks), trainer.device)
        settings = dataclasses.replace(trainer.settings, outputs=(key,))
        bg = torch.zeros(3, device=trainer.device)
        _, a_n, info_n = render_params(trainer.params, nbatch, trainer.sh_schedule(step), bg, trainer.near, settings,
                                       trainer.cfg.splat_backend)
        d_n = surface_depth(info_n[key], a_n)[..., 0]
        d_r = info[key] if "alpha" not in info else surface_depth(info[key], info["alpha"])
        sel = torch.tensor(rows, device=d_r.device)
        loss, used = multiview_geometric_loss(d_r[sel][..., 0], d_n, batch.K[sel], batch.world_to_camera[sel],
                                              nbatch.K, nbatch.world_to_camera, max_error=self.mv_max_error)
        st = self.mv_stats
        st["loss"] = st.get("loss", 0.0) + loss.detach()
        st["used"] = st.get("used", 0.0) + used
        st["calls"] = st.get("calls", 0) + 1
        return loss

    def multiview_summary(self) -> dict:
        """``{"calls", "mean_loss_px", "mean_used_fraction"}`` of the multi-view term so far (floats; one host
        read-back; empty when it never ran)."""
        st = self.mv_stats
        if not st.get("calls"):
            return {}
        n = st["calls"]
        return {"calls": int(n), "mean_loss_px": float(st["loss"]) / n, "mean_used_fraction": float(st["used"]) / n}

    def loss(self, step: int, trainer, batch, image: torch.Tensor, info: dict) -> Optional[torch.Tensor]:
        total = None
        if self.flatten_weight > 0 and step >= self.flatten_start:
            fl = flatten_loss(trainer.params["log_scales"], self.scene_scale)
            self.last["flatten"] = fl.detach()
            total = self.flatten_weight * fl
        key = self.depth_output
        if self.dn_weight > 0 and step >= self.dn_start and "normal" in info and key in info:
            depth = info[key] if "alpha" not in info else surface_depth(info[key], info["alpha"])
            dn = depth_normal_loss(info["normal"], depth, batch.K, batch.world_to_camera)
            self.last["depth_normal"] = dn.detach()
            total = self.dn_weight * dn if total is None else total + self.dn_weight * dn
        if self.multiview_active(step):
            mv = self.multiview_loss(step, trainer, batch, info)
            if mv is not None:
                self.last["multiview"] = mv.detach()
                total = self.mv_weight * mv if total is None else total + self.mv_weight * mv
        return total
