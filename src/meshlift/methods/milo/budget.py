"""How MILo's ``time_budget_s`` is shared: the estimated cost of the stages that are not training steps.

:class:`~meshlift.methods.engine.TimeBudget` gives the Gaussian training and the occupancy refinement
their shares of the time left after the estimated cost of the stages still to come
(:class:`MiloStageCosts`, as :class:`meshlift.methods.nvdiffrec.budget.SurfaceStageCosts` for the surface
method):

- between training and refinement: the final Delaunay of the pivots and the label refresh (the mesh
  rendered at every training view);
- after the refinement: colouring (the mesh rendered at every training view + the colour fusion), the
  decimation before the unwrap (faces above the unwrap cap), the xatlas unwrap (grows with the faces it
  gets), the bake of ``texture_res²`` texels (each fused over the training views), the evaluation (test
  views rendered twice, Chamfer/F-score samples) and the export.

Each is ``rate × size`` with per-device rates (:data:`RATES`) and the :data:`SAFETY` factor. The face count
follows the mesh at hand: before the mesh exists it is ``FACES_PER_PIVOT ×`` the pivot budget, then the
size of the current mesh in the loop or in the refinement (``faces_fn``). The unwrap is the stage that grows
fastest with the mesh (xatlas, about 0.5 s per 1k faces on one host core), so after the final mesh is
known the run also caps the faces the unwrap gets to what the time left affords
(:meth:`MiloStageCosts.unwrap_faces`; the mesh is decimated to that first, logged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from meshlift.methods.engine import StageCosts

__all__ = ["FACES_PER_PIVOT", "MIN_UNWRAP_FACES", "MIN_UNWRAP_S", "MiloRates", "MiloStageCosts", "RATES", "SAFETY",
           "TSDF_FACES_PER_CELL2", "TSDF_RATES", "TsdfRates", "tsdf_grids"]

#: Marching tets on the pivots' Delaunay gives about this many faces per pivot before cleaning (H200 runs of
#: 2026-12-01: statue 240,973 raw faces from 96,813 pivots = 2.5; CPU quick fox 26,596 from 9,000 = 3.0).
FACES_PER_PIVOT = 3.0
#: Raw faces of a fused TSDF mesh per (cells per axis)²: the H200 fox run of 2026-12-04 (main 7657254) had
#: 11.27M at 512³ (object, 43.0) and 6.20M at 512 cells a side (scene 256³ contracted, 23.7); the CPU quick
#: fox 290,792 at 128³ (17.7) and 293,760 at 128 a side (17.9); quick spot 320,080 at 128³ (19.5). Errs high.
TSDF_FACES_PER_CELL2 = 45.0
#: The unwrap cap never goes below this (a mesh this small unwraps in seconds).
MIN_UNWRAP_FACES = 5000
#: xatlas always gets at least this many seconds before the per-face fallback.
MIN_UNWRAP_S = 10.0
#: The estimates are multiplied by this (better to stop training a little early than to be killed in the export).
SAFETY = 1.25


@dataclass(frozen=True)
class MiloRates:
    """Seconds per unit of work of MILo's non-training stages on one kind of device.

    Attributes:
        delaunay_s_per_pivot: Qhull on the host (one core).
        render_s_per_pixel: the mesh rendered at a training view (labels, colour visibility), per pixel.
        decimate_s_per_face: quadric decimation before the unwrap, per input face.
        unwrap_s_per_face: xatlas, per face it gets (host CPU on every device).
        bake_s_per_texel: colour fusion of one texel over the training views (and the atlas raster).
        eval_s_per_pixel: a test view rendered (Gaussians and mesh), per pixel.
        eval_s_per_sample: Chamfer / F-score, per surface sample (mesh inputs only).
        export_s_per_face: PLY + OBJ + GLB writing, per face.
        fixed_s: constant overhead (file writes, allocations).
    """

    delaunay_s_per_pivot: float
    render_s_per_pixel: float
    decimate_s_per_face: float
    unwrap_s_per_face: float
    bake_s_per_texel: float
    eval_s_per_pixel: float
    eval_s_per_sample: float
    export_s_per_face: float
    fixed_s: float


#: Per-device rates. Sources: the Delaunay times in docs/usage/milo.md (270k pivots ≈ 21 s on one core; the
#: H200 host: 173,988 pivots in 9-10 s) and the xatlas rate of :func:`meshlift.mesh.uv.unwrap` (≈ 0.5 s per
#: 1k faces); the H200 fox run of 2026-12-01 (colouring, 43 views at 540×960 = 22 Mpx: 5.6 s with a tiny
#: mesh); the statue run killed during the unwrap + bake of 231k faces (decimated to 100k): more than 60 s
#: for those two with three processes sharing the host; the H200 runs of 2026-12-01 afternoon (four processes
#: sharing the host): xatlas on ~100k faces 29 s (bob, bunny, spot), 77 s (statue), over 300 s (fox: a noisy
#: unmasked mesh; hence :meth:`MiloStageCosts.unwrap_time_limit`). CUDA's xatlas rate from 6e-4 to 1e-4 s/face
#: on 2026-12-04: the fused TSDF assets unwrap 100k faces in 4.1 s (fox) and 3.4 s (statue), and the 60 s it
#: reserved stopped the fox's training at 3,486 of 9,000 steps with 201 s of its budget unspent; the time
#: limit, not this rate, guards a slow xatlas. The rest are guesses that err high; the measured
#: stage times of every run are in metrics.json (``timings``: ``extract_s``, ``color_s``, ``eval_s``).
RATES = {
    "cpu": MiloRates(delaunay_s_per_pivot=1.0e-4, render_s_per_pixel=2.0e-6, decimate_s_per_face=2.0e-5,
                     unwrap_s_per_face=2.0e-4, bake_s_per_texel=2.0e-5, eval_s_per_pixel=1.0e-5,
                     eval_s_per_sample=5.0e-5, export_s_per_face=2.0e-5, fixed_s=3.0),
    "cuda": MiloRates(delaunay_s_per_pivot=8.0e-5, render_s_per_pixel=3.0e-7, decimate_s_per_face=2.0e-5,
                      unwrap_s_per_face=1.0e-4, bake_s_per_texel=2.0e-6, eval_s_per_pixel=1.0e-6,
                      eval_s_per_sample=5.0e-6, export_s_per_face=1.0e-5, fixed_s=2.0),
}


@dataclass(frozen=True)
class TsdfRates:
    """Seconds per unit of work of the ``extract=tsdf`` stages (module docstring) on one kind of device.

    Attributes:
        fusion_s_per_cell2: depth fusion + marching tets, per (cells per axis)² of the grid.
        post_s_per_face: frustum cull, :func:`meshlift.mesh.clean.clean_mesh`, small components and
            :func:`meshlift.mesh.fill.fill_holes` of the fused mesh (host CPU), per raw face.
        crop_s_per_face: the asset cut to the region of interest and capped, with the support plane
            (:func:`meshlift.methods.milo.tsdf_mesh.object_asset`, host CPU), per face of the fused asset.
        decimate_s_per_face: the asset's decimation to ``max_asset_faces`` (host CPU), per face it gets.
        refine_s_per_pixel: one step of the photometric refinement (:mod:`meshlift.methods.milo.photo_refine`:
            render, backward, Adam), per pixel of the views it renders.
    """

    fusion_s_per_cell2: float
    post_s_per_face: float
    crop_s_per_face: float
    decimate_s_per_face: float
    refine_s_per_pixel: float = 1.0e-7


#: Sources: the H200 fox run of 2026-12-04 (main 7657254: fusion 0.77 s at 512² cells a side, 0.54 s at
#: 512²; decimation 18.1 s for 8.45M faces) and benchmarks/extract_stages.py on the host CPU of a 2-core machine
#: (loaded) before and after the packed-key uniques (clean + fill 148 -> 41 s, crop + support plane 194 -> 6 s
#: for 1.57M faces); the H200 host's post-processing rate is the measured 8.9 µs/face (scene 55 s for 6.2M,
#: object 101 s for 11.3M) divided by the CPU speed-up (3.6x), rounded up; its crop rate (17.6 µs/face before)
#: likewise. CPU rates: the quick fox (36×64 px) on the 2-core machine after these changes, measured at a load
#: that ran its training 5× slower than an idle machine (fusion 17.5 s for 128² cells a side, post-processing
#: 2e-5 s/face, crop 1.3e-5, decimation 1e-5), divided by ~3: the quick preset's 280 s budget is sized for an
#: idle machine (fox 164 s, spot 60 s end to end), and the loaded rates would stop its training early.
#: The CUDA rates re-measured on the H200 fox of 2026-12-04 18:00 UTC (d370813, host shared with 3 runs): scene
#: mesh 26.7 s for 6.47M raw faces and asset mesh 47.7 s for 11.66M (post-processing 4.1e-6 s/face), crop 23.0 s
#: for 10.8M faces (2.1e-6), decimation 17.8 s for 8.77M (2.0e-6); extraction 127.5 s in all.
#: The refinement's CUDA rate: the H200 fox of 2026-12-06 (whole-scene mesh of 9.2M faces, 2 views of 540×960 a
#: step) ran 300 steps in 28.9 s = 9.3e-8 s/px (predicted 1e-7); CPU: the 2-core machine's quick fox, 300k faces,
#: 2 views of 36×64 a step, 100 steps in 17 s = 3.7e-5 s/px (the rate rounds the per-pixel share; the faces dominate
#: at that size, and --quick skips the refinement).
#: 2026-12-06 (session 25): the CPU fusion and post-processing rates halved (4e-4 -> 2e-4 per cell², 1e-5 -> 5e-6
#: per face) and the CPU xatlas rate (``RATES["cpu"]``) 6e-4 -> 2e-4 s/face, the CUDA host's logic (the unwrap's time
#: limit, not its rate, guards a slow xatlas): an idle 2-core machine's quick fox measured fusion 1.06e-4 s per
#: cell², post-processing 3.9e-6 s/face, xatlas 4.6e-5 s/face, and the old rates reserved 103 s for the 21 s its
#: stages after training took, so a fresh user's `time_budget_s=110` was refused. The new reserve is ~54 s (2.6×).
TSDF_RATES = {
    "cpu": TsdfRates(fusion_s_per_cell2=2.0e-4, post_s_per_face=5.0e-6, crop_s_per_face=5.0e-6,
                     decimate_s_per_face=5.0e-6, refine_s_per_pixel=4.0e-5),
    "cuda": TsdfRates(fusion_s_per_cell2=3.0e-6, post_s_per_face=4.0e-6, crop_s_per_face=2.0e-6,
                      decimate_s_per_face=2.0e-6, refine_s_per_pixel=1.0e-7),
}


def tsdf_grids(cfg, problem, *, mesh_input: bool) -> tuple[int, ...]:
    """The (cells per axis)² of the fusions ``extract=tsdf`` will run, in order (last: the asset's), as
    :func:`meshlift.methods.milo.tsdf_mesh.extract_assets` picks them: views of a mesh file or a masked
    capture (``region=object``) one at ``tsdf_resolution``; an unmasked capture the whole scene (twice
    ``scene_resolution`` cells a side: the contraction's shell) and, with ``object_asset``, the asset."""
    res = int(cfg.tsdf_resolution)
    if mesh_input and problem.eval_box is None:
        return (res * res,)
    from meshlift.methods.milo.tsdf_mesh import fusion_kind

    if fusion_kind(cfg, problem) != "scene":
        return (res * res,)
    scene = int(cfg.scene_resolution)
    if scene <= 0:
        from meshlift.methods.milo.tsdf_mesh import fusion_region, region_of_interest, scene_resolution_from_pixels

        scene = scene_resolution_from_pixels(cfg, problem, fusion_region("scene", roi=region_of_interest(cfg, problem)))
    return ((2 * scene) ** 2,) + ((res * res,) if cfg.object_asset else ())


class MiloStageCosts:
    """Callable ``() -> StageCosts`` for the MILo run of ``cfg`` (module docstring).

    Args:
        cfg: the run's :class:`~meshlift.methods.milo.config.MiloConfig` (``num_pivots``, ``mesh_res_scale``,
            ``texture_res``, ``simplify``, ``eval_samples``).
        device_type: ``"cpu"`` or ``"cuda"`` (other types use the CUDA rates).
        train_pixels / test_pixels: pixels of all training / test views together (``len(views) · H · W``).
        known_truth: the run computes Chamfer / F-score (a mesh input).
        faces_fn: ``() -> int`` faces of the current mesh (0: none yet, the pivot-based estimate is used).
        pivots_fn: ``() -> int`` pivots of the current mesh (0: none yet, the preset's pivot budget is used).
        max_unwrap_faces: the unwrap's own cap (:data:`meshlift.mesh.uv.DEFAULT_MAX_FACES_FOR_XATLAS`).
        rates: override :data:`RATES` (tests).
        tsdf_grids: ``extract=tsdf``: the (cells per axis)² of the fusions to come (:func:`tsdf_grids`; the last
            is the asset's); their cost joins :meth:`final_s` (:meth:`tsdf_extract_s`). None: MILo's Delaunay.
        tsdf_rates: override :data:`TSDF_RATES` (tests).
        train_views: number of training views (the photometric refinement's pixels per view); 0 = one view.
    """

    def __init__(self, cfg, device_type: str, train_pixels: int, test_pixels: int, *, known_truth: bool = False,
                 faces_fn: Optional[Callable[[], int]] = None, pivots_fn: Optional[Callable[[], int]] = None,
                 max_unwrap_faces: Optional[int] = None,
                 rates: Optional[MiloRates] = None, tsdf_grids: Optional[tuple] = None,
                 tsdf_rates: Optional[TsdfRates] = None, train_views: int = 0) -> None:
        from meshlift.mesh.uv import DEFAULT_MAX_FACES_FOR_XATLAS
        from meshlift.methods.milo.config import num_mesh_gaussians

        self.cfg = cfg
        self.rates = rates if rates is not None else RATES["cpu" if device_type == "cpu" else "cuda"]
        self.train_pixels, self.test_pixels = int(train_pixels), int(test_pixels)
        self.view_pixels = self.train_pixels // max(1, int(train_views))
        self.known_truth = bool(known_truth)
        self.faces_fn, self.pivots_fn = faces_fn, pivots_fn
        self.max_unwrap_faces = int(DEFAULT_MAX_FACES_FOR_XATLAS if max_unwrap_faces is None else max_unwrap_faces)
        self.pivot_budget = 9 * num_mesh_gaussians(cfg)
        self.tsdf_grids = tuple(int(g) for g in tsdf_grids) if tsdf_grids else ()
        self.tsdf_rates = tsdf_rates if tsdf_rates is not None else TSDF_RATES["cpu" if device_type == "cpu" else "cuda"]

    @property
    def pivots(self) -> int:
        """Pivots of the current mesh, else the preset's budget (``9 × num_mesh_gaussians``)."""
        p = int(self.pivots_fn()) if self.pivots_fn is not None else 0
        return p if p > 0 else self.pivot_budget

    def faces(self) -> int:
        """Faces of the mesh the final stages will get: the current mesh's, else ``FACES_PER_PIVOT × pivots``;
        capped by ``cfg.simplify`` when set."""
        f = int(self.faces_fn()) if self.faces_fn is not None else 0
        if f <= 0 and self.tsdf_grids:  # the fused asset, decimated to max_asset_faces
            f = int(TSDF_FACES_PER_CELL2 * self.tsdf_grids[-1])
            cap = int(getattr(self.cfg, "max_asset_faces", 0) or 0)
            return min(f, cap) if cap > 0 else f
        if f <= 0:
            f = int(FACES_PER_PIVOT * self.pivots)
        return min(f, self.cfg.simplify) if self.cfg.simplify > 0 else f

    def between_s(self) -> float:
        """Estimated seconds of the final Delaunay + the label refresh."""
        r = self.rates
        return SAFETY * (r.delaunay_s_per_pivot * self.pivots + r.render_s_per_pixel * self.train_pixels)

    def unwrap_s(self, faces: int, cap: Optional[int] = None) -> float:
        """Estimated seconds of decimation (above ``cap``) + xatlas for a mesh of ``faces`` faces (no safety)."""
        r = self.rates
        cap = self.max_unwrap_faces if cap is None else int(cap)
        return (r.decimate_s_per_face * faces if faces > cap else 0.0) + r.unwrap_s_per_face * min(faces, cap)

    def rest_s(self, faces: int) -> float:
        """Estimated seconds of everything after the refinement except the unwrap (no safety)."""
        c, r = self.cfg, self.rates
        color = r.render_s_per_pixel * self.train_pixels + r.bake_s_per_texel * c.texture_res ** 2
        ev = 2 * r.eval_s_per_pixel * self.test_pixels + (r.eval_s_per_sample * 2 * c.eval_samples
                                                          if self.known_truth else 0.0)
        return color + ev + r.export_s_per_face * faces + r.fixed_s

    def after_refine_s(self, faces: int) -> float:
        """Estimated seconds, with :data:`SAFETY`, of what follows a photometric refinement: colours, unwrap,
        bake, evaluation and export of a ``faces``-face asset."""
        return SAFETY * (self.unwrap_s(faces) + self.rest_s(faces))

    def tsdf_extract_s(self) -> float:
        """Estimated seconds of the ``extract=tsdf`` stages before colouring (no safety; 0 without
        ``tsdf_grids``): the depth renders, each fusion with its post-processing, and for the asset of a
        whole-scene run its crop and the whole-scene mesh's vertex colours; the asset's decimation."""
        if not self.tsdf_grids:
            return 0.0
        t, r = self.tsdf_rates, self.rates
        s = r.render_s_per_pixel * self.train_pixels  # the Gaussians' depth at every training view
        for g in self.tsdf_grids:
            s += (t.fusion_s_per_cell2 + t.post_s_per_face * TSDF_FACES_PER_CELL2) * g
        asset = TSDF_FACES_PER_CELL2 * self.tsdf_grids[-1]
        if len(self.tsdf_grids) > 1:  # whole scene + asset: the cut, and the scene mesh's colours
            s += t.crop_s_per_face * asset + r.render_s_per_pixel * self.train_pixels
        cap = int(getattr(self.cfg, "max_asset_faces", 0) or 0)
        if cap > 0 and asset > cap:
            s += t.decimate_s_per_face * asset
        return s + self.photo_refine_s() * self.refined_meshes()

    def refined_meshes(self) -> int:
        """How many meshes the photometric refinement will run on: the whole-scene mesh of a two-fusion run,
        and the asset with ``photo_refine_asset``."""
        n = 1 if len(self.tsdf_grids) > 1 else 0
        return n + (1 if getattr(self.cfg, "photo_refine_asset", False) else 0)

    def photo_refine_s(self) -> float:
        """Estimated seconds of one photometric refinement (no safety; 0 when it is off)."""
        steps = int(getattr(self.cfg, "photo_refine_steps", 0) or 0)
        per_step = int(getattr(self.cfg, "photo_refine_views", 1)) * self.view_pixels
        return steps * per_step * self.tsdf_rates.refine_s_per_pixel

    def final_s(self) -> float:
        """Estimated seconds of the extraction (``extract=tsdf``: :meth:`tsdf_extract_s`), colouring, unwrap,
        bake, evaluation and export for the current face count."""
        f = self.faces()
        return SAFETY * (self.tsdf_extract_s() + self.unwrap_s(f) + self.rest_s(f))

    def unwrap_faces(self, faces: int, seconds_left: Optional[float]) -> int:
        """The face cap for the unwrap of a ``faces``-face mesh with ``seconds_left`` of the budget (None: no
        budget → the unwrap's own cap): the largest cap whose estimated unwrap fits what is left after the
        other final stages (with :data:`SAFETY`), at least :data:`MIN_UNWRAP_FACES`."""
        if seconds_left is None or not math.isfinite(seconds_left):
            return self.max_unwrap_faces
        r = self.rates
        spare = seconds_left / SAFETY - self.rest_s(faces) - r.decimate_s_per_face * faces
        cap = int(spare / r.unwrap_s_per_face) if spare > 0 else 0
        return max(MIN_UNWRAP_FACES, min(self.max_unwrap_faces, cap))

    def unwrap_time_limit(self, faces: int, seconds_left: Optional[float]) -> Optional[float]:
        """Seconds xatlas may take on a ``faces``-face mesh with ``seconds_left`` of the budget (None: no
        budget, no limit): what is left after the other final stages' estimates (with :data:`SAFETY`) and
        the decimation, at least :data:`MIN_UNWRAP_S`. xatlas's time is not only a matter of faces: on the
        noisy meshes of unmasked captures its chart growing is several times slower per face (the H200 fox
        run of 2026-12-01: over 300 s for 100k faces, against 29 s on bob), so the limit, not the face cap,
        is what keeps such a run inside its budget; over it :func:`meshlift.mesh.uv.unwrap` falls back to
        a per-face atlas."""
        if seconds_left is None or not math.isfinite(seconds_left):
            return None
        spare = seconds_left / SAFETY - self.rest_s(faces) - self.rates.decimate_s_per_face * faces
        return max(MIN_UNWRAP_S, spare)

    def __call__(self) -> StageCosts:
        return StageCosts(between_s=self.between_s(), final_s=self.final_s())
