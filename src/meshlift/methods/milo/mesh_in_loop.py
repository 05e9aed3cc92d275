"""MILo's mesh in the loop as a :class:`~meshlift.methods.gaussians.trainer.Regularizer` of the Gaussian trainer.

Guédon et al. 2025, "MILo: Mesh-In-the-Loop Gaussian Splatting" (Sec. 3; schedule and constants from the
project notes §1; MILo's code is not copied). :class:`MeshInTheLoop` owns everything the mesh needs and
plugs into :class:`~meshlift.methods.gaussians.trainer.GaussianTrainer` through its four hooks:

- **Depth–normal consistency** from ``depth_normal_start``: ``mean(1 − n_render · n_depth)`` between the
  rendered Gaussian normals (``info["normal"]``, normalised) and the normals of the rendered median depth
  (:func:`meshlift.render.splat.depth_to_normals`), over pixels where both exist; weight 0.05.
- **Start of the mesh** at ``mesh_start``: the Gaussians that spawn pivots are drawn once, ∝ importance
  (:func:`~meshlift.methods.milo.strategy.importance_scores`, candidates seen by ≥ 2 views; MILo's
  "surface" sampling), at most ``num_pivots × mesh_res_scale / 9`` of them; the set is then fixed. Their
  9 pivots (:func:`~meshlift.methods.milo.pivots.gaussian_pivots`, boxes enlarged by ``ratio^(-1/3)``) are
  tetrahedralised (:func:`meshlift.isosurface.delaunay.delaunay_tets`) and the pivot SDF's base is set by
  fusing the median depths of **all** training views (:func:`~meshlift.methods.milo.depth_fusion.
  fuse_depth_at_pivots`, truncation ``max(2e-3 × scene_scale, trunc_pixels`` pixels),
  :func:`~meshlift.methods.milo.depth_fusion.fusion_truncation`). Only Gaussians at least
  ``pivot_min_opacity`` opaque are candidates (transparent floaters would become closed blobs).
- **Every step** with the mesh: pivots from the current Gaussians (differentiable), marching tets on the
  current tets with the large-edge filter (:func:`meshlift.isosurface.dmtet.marching_tets`), the mesh's
  depth and normals at the batch's views (:func:`~meshlift.methods.milo.occupancy_labels.render_mesh_maps`,
  meshlift's rasterizer, fragment budget ``max_fragments``) and four losses: depth
  ``log(1 + |D_mesh − D_gauss| / scene_scale)`` (pixels covered by both; ``D_gauss`` is the median depth
  where the Gaussians are opaque, :func:`surface_depth`, as in the fusion), normal ``1 − |n_mesh · n_gauss|``
  (``n_gauss`` from the Gaussian median depth, as MILo), occupied centres ``mean(max(0.5 − occ_centre, 0))``
  and BCE on the inside labels. Gradients reach the Gaussians (through the pivots and the Gaussian depth)
  and the occupancy shift (Adam, ``lr_occupancy``), stepped in :meth:`after_optimizer_step`.
- **Background Delaunay** every ``delaunay_every`` steps: the current pivots go to a
  :class:`~meshlift.isosurface.delaunay.DelaunayRunner` thread (Qhull releases the GIL); training keeps the
  previous tets and switches when the job is done (topology fixed in between, positions move).
- **SDF resets** every ``sdf_reset_every`` steps up to ``sdf_reset_stop``: depth fusion again, blended
  (``sdf_reset_blend`` = 0.4) into the occupancy; afterwards the SDF is only learned.
- **Labels** every ``labels_every`` steps: the mesh rendered at every training view (no grad) labels a
  pivot inside when it is behind the mesh in every view that sees it
  (:func:`~meshlift.methods.milo.occupancy_labels.occupancy_labels`).

State for checkpoints: the selected Gaussians, the SDF (base and shift), its Adam state, the tets (int32)
and the labels. A background triangulation still running at a checkpoint is not saved: a resumed run
keeps the saved tets and re-triangulates at the next interval (so resume is exact except for that).
"""

from __future__ import annotations

import time
from typing import Optional

import torch

from meshlift.methods.gaussians.surface import depth_normal_loss, surface_depth
from meshlift.methods.gaussians.trainer import Regularizer

__all__ = ["MeshInTheLoop", "depth_normal_loss", "surface_depth"]


class MeshInTheLoop(Regularizer):
    """MILo's mesh-in-the-loop regulariser (module docstring).

    Args:
        cfg: the validated :class:`~meshlift.methods.milo.config.MiloConfig`.
        problem: the :class:`~meshlift.methods.gaussians.views.SplatProblem` (training views for fusion/labels).
        device: compute device; monitor: progress sink (Delaunay status lines go to ``monitor.log``).
        settings: the trainer's :class:`~meshlift.render.splat.SplatSettings`; near: near plane (world).
    """

    def __init__(self, cfg, problem, device: torch.device, *, monitor, settings, near: float) -> None:
        from meshlift.isosurface.delaunay import DelaunayRunner
        from meshlift.methods.milo.depth_fusion import fusion_truncation

        self.cfg, self.problem, self.device, self.monitor = cfg, problem, device, monitor
        self.settings, self.near = settings, near
        self.scene_scale = problem.scene_scale
        tr = problem.train
        self.truncation = fusion_truncation(tr.world_to_camera, tr.K, problem.bounds.float().mean(0),
                                            trunc_pixels=cfg.trunc_pixels, scene_scale=self.scene_scale)
        self.runner = DelaunayRunner(memory_gb=cfg.delaunay_memory_gb or None)
        self.job = None
        self.active = False
        self.idx: Optional[torch.Tensor] = None
        self.sdf = None
        self.opt: Optional[torch.optim.Optimizer] = None
        self.tets: Optional[torch.Tensor] = None
        self.labels: Optional[torch.Tensor] = None
        self.subset_ratio = 1.0
        self.triangulations = 0
        self.last: dict = {}  # the last step's loss terms, device tensors (float() them to read: no per-step sync)
        self.mesh_size = (0, 0)

    # ---- schedule ---------------------------------------------------------------------------------------
    def mesh_on(self, step: int) -> bool:
        return self.cfg.mesh_start <= step < self.cfg.steps

    def _every(self, step: int, k: int) -> bool:
        return step > self.cfg.mesh_start and (step - self.cfg.mesh_start) % k == 0

    def render_outputs(self, step: int) -> tuple:
        dn = self.cfg.depth_normal_weight > 0 and step >= self.cfg.depth_normal_start
        return ("median_depth", "normal") if dn or self.mesh_on(step) else ()

    # ---- pieces -----------------------------------------------------------------------------------------
    def pivots(self, params: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``([G, 9, 3], [G, 9])`` pivots and pivot scales of the selected Gaussians (differentiable)."""
        from meshlift.methods.milo.pivots import gaussian_pivots

        i = self.idx
        return gaussian_pivots(params["means"][i], torch.exp(params["log_scales"][i]), params["quats"][i],
                               subset_ratio=self.subset_ratio)

    @torch.no_grad()
    def gaussian_depths(self, params: dict, sh_degree: int = 0) -> torch.Tensor:
        """``[C, H, W]`` surface depth (:func:`surface_depth`) of every training view (no grad), on the device."""
        import dataclasses

        from meshlift.methods.gaussians.trainer import render_params

        views = self.problem.train
        settings = dataclasses.replace(self.settings, outputs=("median_depth",))
        bg = torch.zeros(3, device=self.device)
        out = []
        for i in range(len(views)):
            b = views.batch(torch.tensor([i]), self.device)
            _, alpha, info = render_params(params, b, 0, bg, self.near, settings, self.cfg.splat_backend)
            out.append(surface_depth(info["median_depth"], alpha)[..., 0])
        return torch.cat(out)

    @torch.no_grad()
    def fuse(self, params: dict):
        """Depth fusion of the Gaussians' median depths at the current pivots (a ``FusedSDF``)."""
        from meshlift.methods.milo.depth_fusion import fuse_depth_at_pivots

        piv, _ = self.pivots(params)
        depth = self.gaussian_depths(params)
        views = self.problem.train
        return fuse_depth_at_pivots(piv, depth, views.world_to_camera.to(self.device), views.K.to(self.device),
                                    truncation=self.truncation)

    def mesh(self, params: dict, *, grad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Marching tets on the current tets: ``(verts [V, 3], faces [F, 3])`` (differentiable when ``grad``)."""
        from meshlift.isosurface.dmtet import marching_tets

        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            piv, ps = self.pivots(params)
            sdf = self.sdf.sdf()
            if not grad:
                piv, ps, sdf = piv.detach(), ps.detach(), sdf.detach()
            return marching_tets(piv.reshape(-1, 3), sdf.reshape(-1), self.tets, scales=ps.reshape(-1),
                                 chunk_tets=self.cfg.tet_chunk)

    def _max_fragments(self) -> Optional[int]:
        return self.cfg.max_fragments or None

    @torch.no_grad()
    def refresh_labels(self, params: dict, *, label_views=None) -> None:
        """Occupancy labels of every pivot from the mesh rendered at every training view."""
        from meshlift.methods.milo.occupancy_labels import occupancy_labels, render_mesh_depth

        views = self.problem.train
        verts, faces = self.mesh(params, grad=False)
        w2c, K = views.world_to_camera.to(self.device), views.K.to(self.device)
        depth = render_mesh_depth(verts, faces, w2c, K, (views.height, views.width),
                                  chunk_views=self.cfg.mesh_chunk_views, max_fragments=self._max_fragments())
        piv, _ = self.pivots(params)
        self.labels = occupancy_labels(piv, depth, w2c, K).inside

    def triangulate_now(self, params: dict) -> None:
        """Synchronous Delaunay of the current pivots (start of the mesh, extraction)."""
        from meshlift.isosurface.delaunay import delaunay_tets

        with torch.no_grad():
            piv, _ = self.pivots(params)
        pts = piv.reshape(-1, 3).detach()
        r = self._named(lambda: delaunay_tets(pts, memory_gb=self.cfg.delaunay_memory_gb or None))
        self.tets = r.tets.to(self.device)
        self.triangulations += 1
        self.monitor.log(f"delaunay: {r.num_points:,} pivots -> {r.tets.shape[0]:,} tets in {r.seconds:.1f} s")

    def _named(self, call):
        """Run a Delaunay call; its errors name MILo's knobs (the pivots come from the preset's
        ``num_pivots`` × ``mesh_res_scale``)."""
        from meshlift.errors import MeshError, OutOfMemoryError

        c = self.cfg
        where = (f"MILo's Delaunay of num_pivots={c.num_pivots:,} × mesh_res_scale={c.mesh_res_scale} "
                 f"(delaunay_memory_gb={c.delaunay_memory_gb or 'available'})")
        try:
            return call()
        except OutOfMemoryError as e:
            raise OutOfMemoryError(f"{where}: {e}; or use a smaller preset / --set mesh_res_scale=0.5, or "
                                   "--set delaunay_memory_gb=<GB this host can give>") from None
        except MeshError as e:
            raise MeshError(f"{where}: {e}; the pivots are degenerate (coplanar or duplicated Gaussians): "
                            "check the scene's Gaussians, or use --set extract=tsdf") from None

    def start(self, step: int, params: dict) -> None:
        """Select the pivot Gaussians, triangulate, initialise the SDF by depth fusion, label."""
        from meshlift.methods.milo.config import num_mesh_gaussians
        from meshlift.methods.milo.pivots import PivotSDF
        from meshlift.methods.milo.strategy import importance_scores, sample_by_importance

        cfg = self.cfg
        t0 = time.perf_counter()
        imp, seen = importance_scores(params, self.problem.train, cfg.imp_metric, near=self.near,
                                      device=self.device, settings=self.settings, backend=cfg.splat_backend)
        n = imp.numel()
        opaque = torch.sigmoid(params["opacity_logits"].detach().reshape(n)) >= cfg.pivot_min_opacity
        cand = torch.where((seen > 1) & opaque.to(imp.device), imp, torch.zeros_like(imp))
        budget = num_mesh_gaussians(cfg)
        if int((cand > 0).sum()) < 4:
            cand = torch.ones_like(imp)
        if int((cand > 0).sum()) <= budget:
            idx = (cand > 0).nonzero().squeeze(-1)
        else:
            idx = sample_by_importance(cand, budget, torch.Generator().manual_seed(cfg.seed + 7))
        self.idx = idx.to(self.device)
        self.subset_ratio = max(min(len(idx) / max(n, 1), 1.0), 1e-6)
        fused = self.fuse(params)
        self.sdf = PivotSDF(fused.occupancy.float()).to(self.device)
        self.opt = torch.optim.Adam([self.sdf.shift], lr=cfg.lr_occupancy, eps=1e-15)
        self.triangulate_now(params)
        self.refresh_labels(params)
        self.active = True
        self.monitor.log(f"mesh in the loop from step {step}: {len(idx):,} of {n:,} Gaussians spawn "
                         f"{9 * len(idx):,} pivots (budget {budget:,} Gaussians); start took "
                         f"{time.perf_counter() - t0:.1f} s")

    def _sync_from_main(self, dist) -> None:
        """Several processes: rank 0's whole state (pivot choice, SDF and its Adam moments, tets, labels) on
        every rank, after a topology change (start, new tets), as the Gaussians after density control."""
        if dist is None or not dist.enabled:
            return
        state = dist.broadcast_tree(self.state_dict() if dist.is_main else None)
        if not dist.is_main:
            self.load_state_dict(state)

    def _maintain(self, step: int, params: dict, dist=None) -> None:
        cfg = self.cfg
        done = self.job is not None and self.job.done()
        if dist is not None and dist.enabled:  # wall-time dependent: rank 0's decision (others wait for theirs)
            done = dist.agree(done) and self.job is not None
        if done:
            job, self.job = self.job, None
            try:
                self.tets = self._named(job.result).tets.to(self.device)
                self.triangulations += 1
            finally:
                self.monitor.log(f"step {step}: {job.status()} (background); switched to the new tets")
            self._sync_from_main(dist)
        if self._every(step, cfg.delaunay_every):
            if self.job is None:
                with torch.no_grad():
                    piv, _ = self.pivots(params)
                self.job = self.runner.submit(piv.reshape(-1, 3).detach())
                self.monitor.log(f"step {step}: {self.job.status()} in the background")
            else:
                self.monitor.log(f"step {step}: previous triangulation still running ({self.job.status()}); "
                                 "keeping the current tets")
        if step < cfg.sdf_reset_stop and self._every(step, cfg.sdf_reset_every):
            self.sdf.reset_base(self.fuse(params).occupancy.float(), blend=cfg.sdf_reset_blend)
        if self._every(step, cfg.labels_every):
            self.refresh_labels(params)

    def mesh_losses(self, params: dict, batch, median_depth: torch.Tensor) -> dict:
        """The four MILo terms at ``batch``'s views (unweighted), plus ``mesh`` = (verts, faces)."""
        from meshlift.methods.milo.mesh_losses import mesh_depth_loss, mesh_normal_loss
        from meshlift.methods.milo.occupancy_labels import (occupancy_label_loss, occupied_centres_loss,
                                                           render_mesh_maps)
        from meshlift.render.splat import depth_to_normals

        verts, faces = self.mesh(params)
        self.mesh_size = (int(verts.shape[0]), int(faces.shape[0]))  # host-side shapes (the budget reads them)
        H, W = median_depth.shape[1:3]
        d_mesh, n_mesh = render_mesh_maps(verts, faces, batch.world_to_camera, batch.K, (H, W),
                                          max_fragments=self._max_fragments())
        d_g = median_depth[..., 0]
        both = (d_g.detach() > 0) & (d_mesh.detach() > 0)
        d_mesh_m = torch.where(both, d_mesh, torch.zeros_like(d_mesh))
        n_g = depth_to_normals(median_depth, batch.K, batch.world_to_camera)
        mask = both & (n_g.detach().norm(dim=-1) > 0)  # (non-finite normals are left out by mesh_normal_loss)
        return {
            "depth": mesh_depth_loss(d_mesh_m, d_g, self.scene_scale),
            "normal": mesh_normal_loss(n_mesh, n_g, mask),
            "centres": occupied_centres_loss(self.sdf.occupancy()[:, 0]),
            "labels": occupancy_label_loss(self.sdf.logits(), self.labels),
            "mesh": (verts, faces),
        }

    def diagnose_nonfinite(self, params: dict, batch, median_depth: torch.Tensor) -> dict:
        """Where a non-finite loss or occupancy gradient at ``batch`` comes from (run once, on the first bad
        step of the refinement; costs one extra loss evaluation): the non-finite counts of the inputs (Gaussian
        surface depth and its normals, SDF, mesh vertices, the mesh's depth / normal maps), and per term its
        value, the non-finite counts of its gradient at the mesh vertices (``*_grad_verts``: the losses /
        rasterizer) and at the occupancy (``*_grad_shift``: adds marching tets), and the largest finite
        |gradient| at the occupancy (an overflow shows as a huge value next to an inf)."""
        from meshlift.methods.milo.occupancy_labels import render_mesh_maps
        from meshlift.render.splat import depth_to_normals

        def nf(t: torch.Tensor) -> int:
            return int((~torch.isfinite(t.detach())).sum())

        out = {"gauss_depth": nf(median_depth),
               "gauss_normals": nf(depth_to_normals(median_depth.detach(), batch.K, batch.world_to_camera)),
               "sdf": nf(self.sdf.sdf())}
        terms = self.mesh_losses(params, batch, median_depth)
        verts, faces = terms.pop("mesh")
        out["mesh_vertices"], out["mesh_faces"] = nf(verts), int(faces.shape[0])
        with torch.no_grad():
            d, n = render_mesh_maps(verts.detach(), faces, batch.world_to_camera, batch.K, median_depth.shape[1:3],
                                    max_fragments=self._max_fragments())
        out["mesh_depth"], out["mesh_normals"] = nf(d), nf(n)
        for k, t in terms.items():
            out[f"{k}_value"] = float(t.detach())
            if not t.requires_grad:
                continue
            wrt = [verts, self.sdf.shift] if verts.requires_grad else [self.sdf.shift]
            grads = torch.autograd.grad(t, wrt, retain_graph=True, allow_unused=True)
            gv, gs = (grads if len(grads) == 2 else (None, grads[0]))
            if gv is not None:
                out[f"{k}_grad_verts"] = nf(gv)
            if gs is not None:
                out[f"{k}_grad_shift"] = nf(gs)
                fin = gs[torch.isfinite(gs)]
                out[f"{k}_grad_max"] = float(fin.abs().max()) if fin.numel() else None
        return out

    def weighted(self, terms: dict) -> torch.Tensor:
        cfg = self.cfg
        return (cfg.mesh_depth_weight * terms["depth"] + cfg.mesh_normal_weight * terms["normal"]
                + cfg.occupied_centres_weight * terms["centres"] + cfg.occupancy_label_weight * terms["labels"])

    # ---- hooks ------------------------------------------------------------------------------------------
    def loss(self, step: int, trainer, batch, image: torch.Tensor, info: dict):
        cfg = self.cfg
        total = None
        if cfg.depth_normal_weight > 0 and step >= cfg.depth_normal_start and "normal" in info:
            dn = depth_normal_loss(info["normal"], info["median_depth"], batch.K, batch.world_to_camera)
            total = cfg.depth_normal_weight * dn if total is None else total + cfg.depth_normal_weight * dn
            self.last["depth_normal"] = dn.detach()
        if not self.mesh_on(step):
            return total
        dist = getattr(trainer, "dist", None)
        if not self.active:
            self.start(step, trainer.params)
            self._sync_from_main(dist)
        self._maintain(step, trainer.params, dist)
        md = info["median_depth"] if "alpha" not in info else surface_depth(info["median_depth"], info["alpha"])
        terms = self.mesh_losses(trainer.params, batch, md)
        verts, faces = terms.pop("mesh")
        self.mesh_size = (int(verts.shape[0]), int(faces.shape[0]))
        self.last.update({f"mesh_{k}": v.detach() for k, v in terms.items()})
        w = self.weighted(terms)
        return w if total is None else total + w

    def after_optimizer_step(self, step: int, trainer) -> None:
        dist = getattr(trainer, "dist", None)
        if self.opt is not None and self.active and dist is not None and dist.enabled:  # global-batch gradient
            dist.all_reduce_gradients([self.sdf.shift], trainer.share_weight)
        if self.opt is not None and self.active and self.sdf.shift.grad is not None:
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    def state_dict(self) -> dict:
        if not self.active:
            return {"active": False}
        return {"active": True, "idx": self.idx, "subset_ratio": self.subset_ratio, "base": self.sdf.base,
                "shift": self.sdf.shift.detach(), "opt": self.opt.state_dict(),
                "tets": self.tets.to(torch.int32), "labels": self.labels, "triangulations": self.triangulations}

    def load_state_dict(self, state: dict) -> None:
        from meshlift.methods.milo.pivots import PivotSDF, sdf_to_occupancy

        if not state.get("active"):
            self.active, self.idx, self.sdf, self.opt, self.tets, self.labels = False, None, None, None, None, None
            return
        dev = self.device
        self.idx = state["idx"].to(dev)
        self.subset_ratio = float(state["subset_ratio"])
        self.sdf = PivotSDF(sdf_to_occupancy(torch.zeros_like(state["base"]))).to(dev)
        with torch.no_grad():
            self.sdf.base.copy_(state["base"].to(dev))
            self.sdf.shift.copy_(state["shift"].to(dev))
        self.opt = torch.optim.Adam([self.sdf.shift], lr=self.cfg.lr_occupancy, eps=1e-15)
        self.opt.load_state_dict(state["opt"])
        self.tets = state["tets"].to(dev, torch.int64)
        self.labels = state["labels"].to(dev)
        self.triangulations = int(state.get("triangulations", 0))
        self.job = None
        self.active = True

    def close(self) -> None:
        """Stop the background Delaunay thread (waits for a running job)."""
        self.runner.shutdown(wait=True)
