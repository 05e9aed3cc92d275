"""How a time budget is shared: the estimated cost of the nvdiffrec stages that are not training steps.

``time_budget_s`` is shared by :class:`meshlift.methods.engine.TimeBudget`: when a pass starts, the time
left minus the estimated cost of the stages still to come is the training time left, and the pass gets its
share of it (``budget_pass2_share``). This module estimates those stages (:class:`SurfaceStageCosts`):

- between the passes: hidden-face removal (``hidden_views`` renders at ``hidden_res²``), the view cull
  (``view_cull``: one visibility pass over every training view at its size, the same per-pixel rate), the UV unwrap
  (xatlas, after decimation to ``unwrap_max_faces``; grows with the faces) and the bake of the material
  field into ``texture_res²`` kd/ks textures;
- after pass 2: rendering the held-out views, image metrics, Chamfer/F-score (``eval_samples`` surface
  samples per mesh, twice: pass-1 and final mesh) and the export (textures encoded as PNG).

Each is ``rate × size`` with per-device rates (:data:`RATES`) and a safety factor; the pass-1 face count is
observed while pass 1 runs (:meth:`SurfaceStageCosts.observe`), so the reserve follows the mesh. A resumed
run uses the stage times it measured before (``TrainState.timings``) instead of the estimate. The rates are
rough by design: an overestimate shortens pass 1 a little, an underestimate shortens pass 2 (its deadline is
set when it starts, from what actually elapsed); the measured times of every run are in metrics.json
(``timings``: ``hidden_s``, ``cull_s``, ``unwrap_bake_s``, ``eval_s``; the export is timed after metrics.json is
written) to check them against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from meshlift.methods.engine import StageCosts
from meshlift.methods.nvdiffrec.config import SurfaceConfig

__all__ = ["RATES", "SAFETY", "StageRates", "SurfaceStageCosts"]


@dataclass(frozen=True)
class StageRates:
    """Seconds per unit of work of the non-training stages on one kind of device.

    Attributes:
        hidden_s_per_pixel: hidden-face removal, per rendered pixel (``hidden_views · hidden_res²``).
        unwrap_s_per_face: decimation + xatlas unwrap, per face of the pass-1 mesh (CPU work on any device).
        bake_s_per_texel: rasterising the UV layout and evaluating the field, per texel of ``texture_res²``.
        eval_s_per_pixel: rendering a held-out view, per pixel.
        eval_s_per_sample: Chamfer / F-score, per surface sample (``eval_samples``, two meshes).
        export_s_per_texel: encoding the textures (kd, ks, normal as PNG) and writing the asset, per texel.
        fixed_s: constant overhead of the two stages (file writes, allocations).
    """

    hidden_s_per_pixel: float
    unwrap_s_per_face: float
    bake_s_per_texel: float
    eval_s_per_pixel: float
    eval_s_per_sample: float
    export_s_per_texel: float
    fixed_s: float


#: Per-device rates. CPU: the shared 2-core development machine under load (``meshlift demo`` on 2026-12-01:
#: hidden-face removal of 64 × 512² renders 89 s, unwrap + bake of 13.7k faces at 256² 9.4 s, evaluation
#: with 2 × 50k samples 7.4 s). CUDA: the H200 runs of 2026-11-30 (benchmarks/results/log_surface_method.md; spot, ≤ 30k faces, 2048² textures:
#: about 5 s between the passes and 7 s of evaluation and export) and issue 9's budgeted lego run (nerf preset,
#: grid 96, 380 s budget: pass 2 got 31 steps of its 95 s window, so hidden-face removal + decimation of the
#: ~10^5-face pass-1 mesh + xatlas + bake took ~90 s). Decimation and xatlas run on the host CPU on both,
#: so the per-face rate is the one that matters most; it errs high (pass 1 a little shorter rather than
#: pass 2 starved). Check them against ``timings`` in metrics.json.
RATES = {
    "cpu": StageRates(hidden_s_per_pixel=4.0e-6, unwrap_s_per_face=5.0e-4, bake_s_per_texel=3.0e-6,
                      eval_s_per_pixel=3.0e-6, eval_s_per_sample=5.0e-5, export_s_per_texel=2.0e-7, fixed_s=2.0),
    "cuda": StageRates(hidden_s_per_pixel=2.0e-8, unwrap_s_per_face=4.0e-4, bake_s_per_texel=1.0e-7,
                       eval_s_per_pixel=5.0e-8, eval_s_per_sample=5.0e-6, export_s_per_texel=3.0e-7, fixed_s=1.0),
}

#: The estimates are multiplied by this (better to leave pass 2 a little more time than to cut it short).
SAFETY = 1.25


class SurfaceStageCosts:
    """Callable ``() -> StageCosts`` for the nvdiffrec run of ``cfg`` on ``device_type``.

    Args:
        cfg: the run's configuration (sizes: ``hidden_*``, ``unwrap_max_faces``, ``texture_res``,
            ``eval_samples``, ``remove_hidden``, ``view_cull``).
        device_type: ``"cpu"`` or ``"cuda"`` (other types use the CUDA rates).
        test_pixels: pixels of all held-out views together (``len(test) · H · W``).
        measured: stage times already measured in this run (``TrainState.timings``): ``hidden_s``, ``cull_s``
            and ``unwrap_bake_s`` replace the between estimate, ``eval_s`` + ``export_s`` the final one.
        faces: the pass-1 face count to assume until :meth:`observe` is called (default: ``unwrap_max_faces``).
        rates: override :data:`RATES` (tests).
        train_pixels: pixels of all training views together (``len(train) · H · W``): the view cull's size
            (0: not counted).
    """

    def __init__(self, cfg: SurfaceConfig, device_type: str, test_pixels: int, measured: Optional[dict] = None,
                 faces: Optional[int] = None, rates: Optional[StageRates] = None, train_pixels: int = 0) -> None:
        self.cfg = cfg
        self.rates = rates if rates is not None else RATES["cpu" if device_type == "cpu" else "cuda"]
        self.test_pixels = int(test_pixels)
        self.train_pixels = int(train_pixels)
        self.measured = measured if measured is not None else {}  # live: later measurements count
        self.faces = int(cfg.unwrap_max_faces if faces is None else faces)

    def observe(self, faces: int) -> None:
        """The current pass-1 mesh has ``faces`` faces (a host-side shape; no sync)."""
        self.faces = int(faces)

    def between_s(self) -> float:
        """Estimated seconds of hidden-face removal + view cull + unwrap + bake for the current face count."""
        m = self.measured
        if "unwrap_bake_s" in m:
            return float(m["unwrap_bake_s"]) + float(m.get("hidden_s", 0.0)) + float(m.get("cull_s", 0.0))
        c, r = self.cfg, self.rates
        hidden = r.hidden_s_per_pixel * c.hidden_views * c.hidden_res ** 2 if c.remove_hidden else 0.0
        # the cull is the same visibility pass over the training views, plus a mask test per pixel
        hidden += r.hidden_s_per_pixel * self.train_pixels if c.view_cull != "off" else 0.0
        unwrap = r.unwrap_s_per_face * self.faces  # decimation to unwrap_max_faces also scales with the input
        bake = r.bake_s_per_texel * c.texture_res ** 2
        return SAFETY * (hidden + unwrap + bake)

    def final_s(self) -> float:
        """Estimated seconds of evaluation + export."""
        m = self.measured
        if "eval_s" in m and "export_s" in m:
            return float(m["eval_s"]) + float(m["export_s"])
        c, r = self.cfg, self.rates
        ev = r.eval_s_per_pixel * self.test_pixels + r.eval_s_per_sample * 2 * c.eval_samples
        export = r.export_s_per_texel * 3 * c.texture_res ** 2
        return SAFETY * (ev + export + r.fixed_s)

    def __call__(self) -> StageCosts:
        return StageCosts(between_s=self.between_s(), final_s=self.final_s())
