"""The two passes of the nvdiffrec method: topology (pass 1) and fixed-topology textures (pass 2).

Source: Munkberg et al., "Extracting Triangular 3D Models, Materials, and Lighting From Images", CVPR 2022
(nvdiffrec), Sec. 4-5. Pass 1 (:class:`Pass1Trainer`, :func:`run_pass1`) optimises a DMTet/FlexiCubes surface
(:mod:`~meshlift.methods.nvdiffrec.geometry`), the material field and the light
(:mod:`~meshlift.methods.nvdiffrec.materials`); the mesh is extracted, hidden faces removed, unwrapped and
the field baked into textures (:func:`prepare_pass2_mesh`). Pass 2 (:class:`Pass2Trainer`, :func:`run_pass2`)
optimises kd/ks/normal textures, vertex offsets and light. Losses and regulariser ramps:
:mod:`~meshlift.methods.nvdiffrec.losses`. Both passes are :class:`~meshlift.methods.loop.TrainLoop` s
(read-back, divergence guard, checkpoints, progress, time budget, Ctrl-C) through :class:`SurfacePass`, which
holds what they share (the step's shape: views → forward → backward → probe → Adam pair with
:class:`~meshlift.methods.engine.ExponentialLR` → projections; the guard's rollback); each resumes from a
checkpoint dict it saved.

With several processes (``dist``, :mod:`meshlift.methods.distributed`) each rank renders its share of the
step's ``batch`` views (the global batch, drawn by the same seeded sampler on every rank), the gradients are
averaged over the global batch after ``backward``, the logged loss/PSNR are all-reduced, and the pass-2 UV
mesh is made on rank 0 and broadcast; with one process nothing changes.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from meshlift.data.views import ProblemData
from meshlift.errors import MeshError
from meshlift.methods.diagnose import NonfiniteProbe
from meshlift.methods.distributed import SINGLE, DistContext
from meshlift.methods.engine import Checkpointer, ExponentialLR, Monitor, TrainState, ViewSampler
from meshlift.methods.loop import NO_STAGES, GuardSettings, StageClock, TrainLoop, readback_every
from meshlift.methods.optim import Adam, LambdaLR
from meshlift.methods.nvdiffrec.config import SurfaceConfig, config_to_dict
from meshlift.methods.nvdiffrec.geometry import init_sdf, make_geometry
from meshlift.methods.nvdiffrec.losses import (OCCLUSION_REG_KEY, RegularizerSchedules, make_laplacian_loss,
                                               occlusion_reg_active, occlusion_regularizer, render_and_loss)
from meshlift.methods.nvdiffrec.materials import BoundedMaterialField, make_light, resolve_hash_max_res
from meshlift.methods.nvdiffrec.pixel_graphs import PixelGraphs
from meshlift.structures.mesh import Material, Mesh

__all__ = ["CUDA_READBACK_EVERY", "Pass1Result", "Pass1Trainer", "Pass2Result", "Pass2Trainer", "SurfacePass",
           "detach_mesh", "prepare_pass2_mesh", "run_pass1", "run_pass2"]

#: Scale of the albedo-smoothness jitter in pass 2 relative to ``kd_smooth_jitter`` (UV units, nvdiffrec).
PASS2_JITTER_SCALE = 0.5
#: Render outputs the ``diagnose_nonfinite`` probe checks, in the order they are made (rast → depth, normals,
#: material → shade → composite).
PROBED_RENDER_OUTPUTS = ("depth", "normal", "kd", "ks", "alpha", "shaded")
#: Appended to the divergence error: how to find where the NaN comes from.
DIAGNOSE_HINT = ("; --set diagnose_nonfinite=true runs again checking every step and names the tensor and op "
                 "that went non-finite first")

#: Pass-2 normal maps keep a tangent-space z of at least this (no normals flipped into the surface).
NORMAL_MAP_MIN_Z = 0.05

#: Default steps between loss read-backs on a GPU (``readback_every = 0``, :func:`meshlift.methods.loop.
#: readback_every`): progress updates arrive in groups of this many steps, and a NaN is caught at most this
#: many steps late (then rolled back as before).
CUDA_READBACK_EVERY = 10

#: The passes' divergence guard: a snapshot every 50 steps (parameters, material, light and Adam moments,
#: checked finite first), one rollback with halved learning rates; the step count goes on after a rollback
#: (the steps since the snapshot are redone as later steps).
SURFACE_GUARD = GuardSettings(snapshot_every=50, max_rollbacks=1)


@dataclass
class Pass1Result:
    """Output of pass 1: the extracted mesh (normalised frame, detached), the field and the light."""

    mesh: Mesh
    geometry: nn.Module
    material: BoundedMaterialField
    light: object
    light_trainable: bool
    checkpoint_state: Optional[dict] = None


def _adam(params, device: torch.device, **kwargs) -> Adam:
    """Adam (:class:`meshlift.methods.optim.Adam`: torch's update without ``torch.optim``'s import of
    ``torch._dynamo``); on CUDA the fused implementation (one kernel per parameter group and step instead of a
    few per tensor list, and the step counters on the device). Same update rule: results differ by float
    rounding (measured on the CPU demo, where fused Adam also exists: benchmarks/notes_reconstruct_speed.md)."""
    return Adam(params, fused=torch.device(device).type == "cuda", **kwargs)


def _geometry_groups(geom: nn.Module, cfg: SurfaceConfig) -> list[dict]:
    """The pass-1 geometry's Adam parameter groups: one at ``lr_pos``, or with ``lr_deform > 0`` (and
    different from ``lr_pos``) the deformation in a second group at ``lr_deform`` (two groups only then, so that
    checkpoints of the one-group runs still load)."""
    params = list(geom.parameters())
    if cfg.lr_deform <= 0 or cfg.lr_deform == cfg.lr_pos:
        return [{"params": params, "lr": cfg.lr_pos}]
    rest = [p for p in params if p is not geom.deform]
    return [{"params": rest, "lr": cfg.lr_pos}, {"params": [geom.deform], "lr": cfg.lr_deform}]


class SurfacePass(TrainLoop):
    """What the two passes share (a :class:`~meshlift.methods.loop.TrainLoop`): the step (views → the pass's
    :meth:`forward` → backward and gradient all-reduce → the ``diagnose_nonfinite`` probe →
    :meth:`step_optimizers`, the :class:`~meshlift.methods.engine.ExponentialLR` schedules, :meth:`project`, the
    light clamped ≥ 0), the rollback (:meth:`restore` a snapshot, halve every learning rate), the divergence
    error, the read-back and checkpoint cadences from the config.

    The occlusion regulariser (``occlusion_reg_weight``, when the occlusion is learnt) is added by
    :meth:`occlusion_term`; its unweighted value goes into the step's history row (:meth:`after_train_step`).
    A pass sets, before :meth:`run`: ``optimizers`` (zeroed and stepped in this order), ``schedulers``
    (:meth:`_schedules`), ``sampler``, ``train_params`` (the gradients all-reduced), ``weight``
    (:meth:`DistContext.share_weight`), ``light``, ``light_trainable``, ``lr_fields`` (named in the error),
    and in :meth:`begin` ``probe`` and ``graphs``.
    """

    guard = SURFACE_GUARD
    lr_fields = ""

    def __init__(self, cfg: SurfaceConfig, data: ProblemData, device: torch.device, *, state: TrainState,
                 monitor: Monitor, checkpointer: Checkpointer, checkpoint: Optional[dict], preview, stages,
                 dist: DistContext) -> None:
        super().__init__(state=state, monitor=monitor, checkpointer=checkpointer)
        self.cfg, self.data, self.device, self.checkpoint = cfg, data, device, checkpoint
        self.preview, self.preview_every = preview, cfg.preview_every
        self.stages, self.dist = stages, dist
        self.readback_steps = readback_every(cfg.readback_every, device, CUDA_READBACK_EVERY)
        self.checkpoint_every, self.checkpoint_every_s = cfg.checkpoint_every, cfg.checkpoint_every_s
        self.graphs: Optional[PixelGraphs] = None  # the per-pixel half replayed as CUDA graphs (pixel_graphs)
        self.probe: Optional[NonfiniteProbe] = None
        self.occlusion_reg = occlusion_reg_active(cfg)
        self.terms: dict = {}  # the step's named loss terms (0-dim device tensors) for its history row

    def _schedules(self) -> list:
        """The learning-rate schedules of ``self.optimizers`` (nvdiffrec's warm-up and decay)."""
        lr = ExponentialLR(self.cfg.warmup, self.cfg.lr_decay)
        return [LambdaLR(o, lr) for o in self.optimizers]

    def _use_graphs(self) -> bool:
        return PixelGraphs.wanted(self.cfg, self.device, self.sampler.batch, self.dist.enabled,
                                  self.data.train.resolution)

    # ---- the pass's parts ----------------------------------------------------------------------------------
    def forward(self, it: int, views) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """The step's forward: ``(total loss, srgb mse, named forward tensors for the probe)``."""
        raise NotImplementedError

    def step_optimizers(self) -> None:
        """The Adam steps (gradients are in ``.grad``)."""
        for o in self.optimizers:
            o.step()

    def project(self) -> None:
        """Keep the parameters in their range after the step (before the light's clamp)."""

    def restore(self, snapshot: dict) -> None:
        """Put a :meth:`capture` back."""
        raise NotImplementedError

    def occlusion_term(self, out: dict):
        """The step's weighted occlusion regulariser of the render ``out`` (``losses.occlusion_regularizer``),
        0 when it does not act; the unweighted value is kept for the step's history row."""
        if not self.occlusion_reg:
            return 0.0
        occ = occlusion_regularizer(out["ks"], out["alpha"])
        self.terms[OCCLUSION_REG_KEY] = occ.detach()
        return self.cfg.occlusion_reg_weight * occ

    # ---- TrainLoop hooks --------------------------------------------------------------------------------
    def after_train_step(self, it: int) -> Optional[dict]:
        terms, self.terms = self.terms, {}
        if terms and self.dist.enabled:  # the global batch's value, as the loss
            terms = dict(zip(terms, self.dist.weighted_sum(list(terms.values()), self.weight)))
        return terms or None

    def train_step(self, it: int) -> tuple[torch.Tensor, torch.Tensor]:
        stages, dist = self.stages, self.dist
        with stages("views"):
            views = self.data.train.batch(dist.share(self.sampler.next()), self.device)
        total_loss, mse, named = self.forward(it, views)
        with stages("backward"):
            for o in self.optimizers:
                o.zero_grad(set_to_none=True)
            total_loss.backward()
            dist.all_reduce_gradients(self.train_params, self.weight)
        self.probe.check(it, named, lambda: self.forward(it, views)[0])
        with stages("optimizer"):
            self.step_optimizers()
            for s in self.schedulers:
                s.step()
            self.project()
            if self.light_trainable:
                self.light.clamp_(min=0.0)
        total_loss, mse = dist.weighted_sum([total_loss, mse], self.weight)
        return total_loss, mse

    def on_rollback(self, snapshot: dict) -> None:
        self.restore(snapshot)
        for opt in self.optimizers:
            for g in opt.param_groups:
                g["lr"] = g["lr"] * 0.5
                if "initial_lr" in g:
                    g["initial_lr"] = g["initial_lr"] * 0.5
        for sch in self.schedulers:  # LambdaLR recomputes lr from base_lrs
            sch.base_lrs = [b * 0.5 for b in sch.base_lrs]

    def divergence_message(self, step: int, loss: float) -> str:
        return (f"{self.name}: the loss or parameters became non-finite (NaN/inf) at step {step} again after a "
                f"rollback with halved learning rates; stopped without writing outputs. Lower the learning rates "
                f"({self.lr_fields}) or check the input; the last good checkpoint is kept{DIAGNOSE_HINT}")


class Pass1Trainer(SurfacePass):
    """Pass 1 (topology): DMTet/FlexiCubes + material field + light, ``cfg.iter_pass1`` steps.

    Built as :func:`run_pass1` describes; :meth:`train` runs it and returns the :class:`Pass1Result`.

    Raises:
        ConfigError: ``batch`` smaller than the number of ranks. MeshError: the surface vanished.
    """

    name, title, pass_no = "pass 1", "pass 1 (topology)", 1
    timing_key, iterations_key = "pass1_s", "pass1"
    lr_fields = "lr_pos, lr_deform, lr_mat, lr_light"

    def __init__(self, cfg: SurfaceConfig, data: ProblemData, device: torch.device, *, state: TrainState,
                 monitor: Monitor, checkpointer: Checkpointer, checkpoint: Optional[dict] = None,
                 preview: Optional[Callable[[str, int, Mesh, object, object], None]] = None, stages=NO_STAGES,
                 dist: DistContext = SINGLE) -> None:
        cfg = resolve_hash_max_res(cfg, data.train)  # auto (0): from the views (reconstruct() resolves it first)
        super().__init__(cfg, data, device, state=state, monitor=monitor, checkpointer=checkpointer,
                         checkpoint=checkpoint, preview=preview, stages=stages, dist=dist)
        gen = torch.Generator().manual_seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.geom = geom = make_geometry(cfg, device)
        self.material = material = BoundedMaterialField(cfg, device)
        self.light, self.light_trainable = make_light(cfg, device, data.gt_light, gen)
        if checkpoint is None:
            how = init_sdf(geom, cfg, data.train, gen)
            monitor.log(f"pass 1: SDF initialised from {how}")
        if cfg.diagnose_nonfinite:
            monitor.log("diagnose_nonfinite: every step checks the render, the loss and the gradients (slower)")

        self.opt_geom = _adam(_geometry_groups(geom, cfg), device)
        groups = [{"params": list(material.parameters()), "lr": cfg.lr_mat}]
        if self.light_trainable:
            groups.append({"params": list(self.light.parameters()), "lr": cfg.lr_light})
        self.opt_mat = _adam(groups, device)
        self.optimizers = [self.opt_geom, self.opt_mat]
        self.schedulers = self._schedules()
        self.sampler = ViewSampler(len(data.train), cfg.batch, cfg.seed)
        dist.check_batch(self.sampler.batch)
        self.ramps = RegularizerSchedules.from_config(cfg)

        start = 0
        if checkpoint is not None and checkpoint.get("pass1") is not None:
            ck = checkpoint["pass1"]
            self.restore(ck)
            for s, sd in zip(self.schedulers, ck["sched"]):
                s.load_state_dict(sd)
            self.sampler.load_state_dict(ck["sampler"])
            start = int(ck["iteration"])
        modules = [geom, material] + ([self.light] if self.light_trainable else [])
        dist.broadcast_modules(modules)  # every rank starts from rank 0's parameters
        dist.decorrelate_rng(cfg.seed + 1 + start)  # ranks > 0: their own noise (jitter) from here on
        self.train_params = [p for m in modules for p in m.parameters()]
        self.weight = dist.share_weight(self.sampler.batch)
        self.step = start
        self.jitter = cfg.kd_smooth_jitter if cfg.kd_smooth_weight > 0 else 0.0
        self.mesh_out: Optional[Mesh] = None  # the pass's output mesh, once extracted (rides in the checkpoint)
        self._mesh: Optional[Mesh] = None  # the last step's mesh (for its preview)

    def begin(self) -> None:
        cfg, light, checkpoint = self.cfg, self.light, self.checkpoint
        self.total = cfg.iter_pass1
        if checkpoint is not None and checkpoint.get("pass2") is not None:
            self.total = self.step  # pass 2 already started from this pass-1 state: keep it
        if self.step == 0 and self.preview is not None:
            with torch.no_grad():
                if self.light_trainable:
                    light.build_mips()
                self.preview("start", 0, detach_mesh(self.geom.get_mesh()[0]), light, self.material)
        self._observe = getattr(self.deadline, "observe", None)
        if self._use_graphs():
            self.graphs = PixelGraphs(cfg, light, self.material, self.jitter, self.monitor.log,
                                      light_trainable=self.light_trainable)
        self.probe = NonfiniteProbe("pass 1", [(f"{k}.{n}", p) for k, m in (
            ("geometry", self.geom), ("material", self.material), ("light", light))
            if k != "light" or self.light_trainable for n, p in m.named_parameters()], cfg.diagnose_nonfinite)

    def forward(self, it: int, views) -> tuple[torch.Tensor, torch.Tensor, dict]:
        cfg, stages, light = self.cfg, self.stages, self.light
        with stages("marching_tets"):
            mesh, extra_reg = self.geom.get_mesh()
        # num_faces is a shape: known on the host once marching tets has sized its output (no extra sync)
        if mesh.num_faces == 0:
            raise MeshError(
                f"pass 1, iteration {it}: the surface vanished (the SDF has one sign everywhere). Use "
                "--set sdf_init=sphere or visual_hull, lower lr_pos, or check that the object is inside the grid "
                f"(mesh_scale={cfg.mesh_scale})"
            )
        if self._observe is not None:
            self._observe(faces=mesh.num_faces)
        self._mesh = mesh
        out, loss, mse = render_and_loss(self.graphs, stages, mesh, views, light, self.light_trainable,
                                         self.material, cfg, self.jitter)
        with stages("loss"):
            reg = self.ramps.sdf_reg(it / max(1, self.total)) * self.geom.reg_loss() + self.occlusion_term(out)
            if cfg.isosurface == "flexicubes":
                reg = reg + cfg.flexi_dev_weight * extra_reg
            if "kd_grad" in out and cfg.kd_smooth_weight > 0:
                reg = reg + cfg.kd_smooth_weight * self.ramps.kd_smooth_warmup(it) * out["kd_grad"].mean()
            if self.light_trainable and cfg.light_reg_weight > 0:
                reg = reg + cfg.light_reg_weight * light.regularizer()
            total_loss = loss + reg
        named = {"vertices": mesh.v_pos, **{k: out.get(k) for k in PROBED_RENDER_OUTPUTS},
                 "image loss": loss, "regularisers": reg}
        return total_loss, mse, named

    def preview_step(self, step: int) -> None:
        self.preview("pass1", step, detach_mesh(self._mesh), self.light, self.material)

    def capture(self) -> dict:
        return {"geometry": self.geom.state_dict(), "material": self.material.state_dict(),
                "light": self.light.state_dict() if self.light_trainable else None,
                "opt_geom": self.opt_geom.state_dict(), "opt_mat": self.opt_mat.state_dict()}

    def restore(self, snapshot: dict) -> None:
        self.geom.load_state_dict(snapshot["geometry"])
        self.material.load_state_dict(snapshot["material"])
        if self.light_trainable:
            self.light.load_state_dict(snapshot["light"])
        self.opt_geom.load_state_dict(snapshot["opt_geom"])
        self.opt_mat.load_state_dict(snapshot["opt_mat"])

    def payload(self) -> dict:
        ck = {"iteration": self.step, **self.capture(),
              "sched": [s.state_dict() for s in self.schedulers],
              "sampler": self.sampler.state_dict(),
              "schedules": self.ramps.state_dict()}
        if self.mesh_out is not None:
            # the output mesh rides along (pass-2 checkpoints keep this dict), so a resume in pass 2 need not
            # extract it and remove its hidden faces again
            ck["mesh"] = {"v_pos": self.mesh_out.v_pos.detach().cpu(),
                          "t_pos_idx": self.mesh_out.t_pos_idx.detach().cpu()}
        return {"config": config_to_dict(self.cfg), "state": self.state.state_dict(), "pass1": ck, "pass2": None}

    def train(self, deadline=None) -> Pass1Result:
        """Run the pass (:meth:`~meshlift.methods.loop.TrainLoop.run`), extract its mesh, checkpoint it."""
        cfg, state, device, checkpoint = self.cfg, self.state, self.device, self.checkpoint
        start = self.step
        total = self.run(deadline)
        saved_mesh = None if checkpoint is None or checkpoint.get("pass2") is None else \
            (checkpoint.get("pass1") or {}).get("mesh")
        with torch.no_grad():
            if saved_mesh is not None:  # resumed in pass 2: the pass-1 output as it was (no re-extraction)
                mesh = Mesh(v_pos=saved_mesh["v_pos"].to(device), t_pos_idx=saved_mesh["t_pos_idx"].to(device))
            else:
                mesh = _pass1_output(self.geom.get_mesh()[0], cfg, state, self.monitor, device)
        if self.light_trainable:
            self.light.build_mips()
        state.stage = "pass2"
        state.iteration = 0
        self.mesh_out = mesh
        final = self.payload()
        if start < total or checkpoint is None:
            self.save_checkpoint(final)
        return Pass1Result(detach_mesh(mesh), self.geom, self.material, self.light, self.light_trainable,
                           final["pass1"])


def run_pass1(
    cfg: SurfaceConfig,
    data: ProblemData,
    device: torch.device,
    *,
    state: TrainState,
    monitor: Monitor,
    checkpointer: Checkpointer,
    checkpoint: Optional[dict] = None,
    preview: Optional[Callable[[str, int, Mesh, object, object], None]] = None,
    deadline=None,
    stages=NO_STAGES,
    dist: DistContext = SINGLE,
) -> Pass1Result:
    """Pass 1 (topology): DMTet/FlexiCubes + material field + light, ``cfg.iter_pass1`` steps
    (:class:`Pass1Trainer`).

    Resumes from ``checkpoint`` (a dict saved by this pass) when given. ``deadline``: a
    ``time.perf_counter()`` value or an ``engine.PassDeadline`` (told the current face count each step);
    ``stages``: a stage timer (``loop.NO_STAGES``; the benchmark passes a timing one). ``dist``: this
    process's place in a multi-process run (:data:`~meshlift.methods.distributed.SINGLE` for one process);
    the deadline is then rank 0's decision on every rank (each rank observes its own clock and costs).

    Raises:
        ConfigError: ``batch`` smaller than the number of ranks. MeshError: the surface vanished.
        TrainingError: the loss diverged again after a rollback.
    """
    return Pass1Trainer(cfg, data, device, state=state, monitor=monitor, checkpointer=checkpointer,
                        checkpoint=checkpoint, preview=preview, stages=stages, dist=dist).train(deadline)


def _pass1_output(mesh: Mesh, cfg: SurfaceConfig, state: TrainState, monitor: Monitor,
                  device: torch.device) -> Mesh:
    """The extracted pass-1 mesh without the faces no outside view sees (``remove_hidden``) and without the
    components under ``min_component_faces`` of the largest one's faces."""
    if cfg.remove_hidden and mesh.num_faces > 0:
        from meshlift.mesh.visibility import remove_hidden_faces

        hidden = StageClock(state, "hidden_s")
        mesh, info = remove_hidden_faces(mesh, n_views=cfg.hidden_views, resolution=cfg.hidden_res,
                                         max_fragments=cfg.max_fragments)
        hidden.flush()
        monitor.log(f"pass 1: removed {info['removed']} of {info['faces_before']} faces no outside view sees")
    if cfg.min_component_faces > 0 and mesh.num_faces > 0:
        from meshlift.mesh.clean import drop_small_components

        mesh, dropped = drop_small_components(mesh, cfg.min_component_faces)
        mesh = mesh.to(device)
        if dropped:
            monitor.log(f"pass 1: removed {dropped} faces in components under min_component_faces="
                        f"{cfg.min_component_faces:g} of the largest one's faces")
    return mesh


def detach_mesh(mesh: Mesh) -> Mesh:
    """A copy of ``mesh`` whose positions and material textures are detached from the autograd graph."""
    return dataclasses.replace(
        mesh,
        v_pos=mesh.v_pos.detach(),
        material=None if mesh.material is None else Material(
            kd=mesh.material.kd.detach(),
            ks=None if mesh.material.ks is None else mesh.material.ks.detach(),
            normal=None if mesh.material.normal is None else mesh.material.normal.detach(),
            name=mesh.material.name,
        ),
    )


# =============================================================================================================
# pass 2


@dataclass
class Pass2Result:
    """Output of pass 2: the final textured mesh (normalised frame, detached) and the light."""

    mesh: Mesh
    light: object


def prepare_pass2_mesh(p1: Pass1Result, cfg: SurfaceConfig) -> tuple[Mesh, dict]:
    """Unwrap the pass-1 mesh (xatlas, decimating above ``unwrap_max_faces``) and bake the field.

    Returns the UV mesh and the baked textures ``dict(kd, ks)`` (``[R, R, 3]`` each).
    """
    from meshlift.mesh.bake import bake_field_to_textures
    from meshlift.mesh.uv import DecimationWarning, unwrap

    mesh = p1.mesh
    if mesh.num_faces == 0:
        raise MeshError("pass 2: the pass-1 mesh is empty; nothing to texture")
    with warnings.catch_warnings():  # unwrap logs a decimation as well: print it once
        warnings.simplefilter("ignore", DecimationWarning)
        uv_mesh = unwrap(
            Mesh(v_pos=mesh.v_pos.detach(), t_pos_idx=mesh.t_pos_idx),
            max_faces_for_xatlas=int(cfg.unwrap_max_faces),
            resolution=int(cfg.texture_res),
        )

    def field_fn(x: torch.Tensor) -> dict:
        out = p1.material(x)
        return {"kd": out["kd"], "ks": out["ks"]}

    tex = bake_field_to_textures(uv_mesh, field_fn, int(cfg.texture_res))
    return uv_mesh, tex


class Pass2Trainer(SurfacePass):
    """Pass 2 (fixed topology): kd/ks/normal textures, vertex offsets and light, ``cfg.iter_pass2`` steps.

    Built as :func:`run_pass2` describes; :meth:`train` runs it and returns the :class:`Pass2Result`.
    """

    name, title, pass_no = "pass 2", "pass 2 (textures)", 2
    timing_key, iterations_key = "pass2_s", "pass2"
    lr_fields = "lr_mat, lr_light, lr_vertex"

    def __init__(self, cfg: SurfaceConfig, data: ProblemData, device: torch.device, p1: Pass1Result, *,
                 state: TrainState, monitor: Monitor, checkpointer: Checkpointer, checkpoint: Optional[dict] = None,
                 preview: Optional[Callable[[str, int, Mesh, object, object], None]] = None, stages=NO_STAGES,
                 prepared: Optional[tuple[Mesh, dict]] = None, dist: DistContext = SINGLE) -> None:
        super().__init__(cfg, data, device, state=state, monitor=monitor, checkpointer=checkpointer,
                         checkpoint=checkpoint, preview=preview, stages=stages, dist=dist)
        ck = None if checkpoint is None else checkpoint.get("pass2")
        if ck is not None:
            base = Mesh(
                v_pos=ck["base_v_pos"].to(device),
                t_pos_idx=ck["t_pos_idx"].to(device),
                v_tex=ck["v_tex"].to(device),
                t_tex_idx=ck["t_tex_idx"].to(device),
            )
            tex = {"kd": ck["kd"].to(device), "ks": ck["ks"].to(device)}
        else:
            base, tex = prepared if prepared is not None else dist.from_main(lambda: prepare_pass2_mesh(p1, cfg))
            base = base.to(device)
        self.base, self.tex, self.pass1_ck = base, tex, p1.checkpoint_state
        self.light, self.light_trainable = light, light_trainable = p1.light, p1.light_trainable

        R = tex["kd"].shape[0]
        self.kd = kd = nn.Parameter(tex["kd"][..., :3].to(device).contiguous())
        self.ks = ks = nn.Parameter(tex["ks"][..., :3].to(device).contiguous())
        nrm0 = torch.zeros(R, R, 3, device=device)
        nrm0[..., 2] = 1.0
        self.normal = normal = nn.Parameter(nrm0)
        self.offset = offset = nn.Parameter(torch.zeros_like(base.v_pos))
        self.laplacian_loss = make_laplacian_loss(base.num_vertices, base.t_pos_idx, device)

        tex_params = [kd, ks] + ([normal] if cfg.perturb_normal else [])
        groups = [{"params": tex_params, "lr": cfg.lr_mat}]
        if light_trainable:
            groups.append({"params": list(light.parameters()), "lr": cfg.lr_light})
        self.opt = _adam(groups, device)
        self.opt_v = _adam([offset], device, lr=cfg.lr_vertex)
        self.optimizers = [self.opt, self.opt_v]
        self.schedulers = self._schedules()
        self.ramps = RegularizerSchedules.from_config(cfg)
        self.sampler = ViewSampler(len(data.train), cfg.batch, cfg.seed + 1)
        dist.check_batch(self.sampler.batch)
        self.kd_min = torch.tensor(cfg.kd_min, device=device)
        self.kd_max = torch.tensor(cfg.kd_max, device=device)
        self.ks_min = torch.tensor(cfg.ks_min, device=device)
        self.ks_max = torch.tensor(cfg.ks_max, device=device)

        start = 0
        if ck is not None:
            with torch.no_grad():
                kd.copy_(ck["kd_param"].to(device))
                ks.copy_(ck["ks_param"].to(device))
                normal.copy_(ck["normal"].to(device))
                offset.copy_(ck["offset"].to(device))
            if light_trainable and ck.get("light") is not None:
                light.load_state_dict(ck["light"])
            self.opt.load_state_dict(ck["opt"])
            self.opt_v.load_state_dict(ck["opt_v"])
            for s, sd in zip(self.schedulers, ck["sched"]):
                s.load_state_dict(sd)
            self.sampler.load_state_dict(ck["sampler"])
            start = int(ck["iteration"])
        self.train_params = [kd, ks, normal, offset] + (list(light.parameters()) if light_trainable else [])
        dist.broadcast_tensors(self.train_params)  # every rank starts from rank 0's parameters
        self.weight = dist.share_weight(self.sampler.batch)
        self.params = {"kd": kd, "ks": ks, "normal": normal, "offset": offset}
        self.step = start
        self.jitter = PASS2_JITTER_SCALE * cfg.kd_smooth_jitter if cfg.kd_smooth_weight > 0 else 0.0

    def current_mesh(self) -> Mesh:
        """The base mesh moved by the offsets (``optimize_vertices``) with the current textures."""
        cfg, base = self.cfg, self.base
        v = base.v_pos + self.offset if cfg.optimize_vertices else base.v_pos
        mat = Material(kd=self.kd, ks=self.ks, normal=self.normal if cfg.perturb_normal else None, name="meshlift")
        return Mesh(v_pos=v, t_pos_idx=base.t_pos_idx, v_tex=base.v_tex, t_tex_idx=base.t_tex_idx, material=mat)

    def begin(self) -> None:
        cfg, light = self.cfg, self.light
        self.total = cfg.iter_pass2
        named_params = list(self.params.items()) + (
            [(f"light.{n}", p) for n, p in light.named_parameters()] if self.light_trainable else [])
        self.probe = NonfiniteProbe("pass 2", named_params, cfg.diagnose_nonfinite)
        if self._use_graphs():
            self.graphs = PixelGraphs(cfg, light, self.current_mesh().material, self.jitter, self.monitor.log,
                                      light_trainable=self.light_trainable, name="pass 2")

    def forward(self, it: int, views) -> tuple[torch.Tensor, torch.Tensor, dict]:
        cfg, stages, light = self.cfg, self.stages, self.light
        out, loss, mse = render_and_loss(self.graphs, stages, self.current_mesh(), views, light,
                                         self.light_trainable, None, cfg, self.jitter)
        with stages("loss"):
            reg = loss.new_zeros(()) + self.occlusion_term(out)
            if cfg.optimize_vertices and cfg.laplace_weight > 0:
                reg = reg + (cfg.laplace_weight * self.ramps.laplace(it / max(1, self.total))
                             * self.laplacian_loss(self.offset))
            if "kd_grad" in out and cfg.kd_smooth_weight > 0:
                reg = reg + cfg.kd_smooth_weight * out["kd_grad"].mean()
            if self.light_trainable and cfg.light_reg_weight > 0:
                reg = reg + cfg.light_reg_weight * light.regularizer()
            total_loss = loss + reg
        named = {**{k: out.get(k) for k in PROBED_RENDER_OUTPUTS}, "image loss": loss, "regularisers": reg}
        return total_loss, mse, named

    def step_optimizers(self) -> None:
        self.opt.step()
        if self.cfg.optimize_vertices:
            self.opt_v.step()

    def project(self) -> None:
        kd, ks, normal = self.kd, self.ks, self.normal
        with torch.no_grad():  # clamp(max) then clamp(min): the same as maximum(minimum(x, max), min)
            kd.clamp_(max=self.kd_max).clamp_(min=self.kd_min)
            ks.clamp_(max=self.ks_max).clamp_(min=self.ks_min)
            normal[..., 2].clamp_(min=NORMAL_MAP_MIN_Z)
            normal.copy_(F.normalize(normal.clamp(-1, 1), dim=-1))

    def preview_step(self, step: int) -> None:
        self.preview("pass2", step, detach_mesh(self.current_mesh()), self.light, None)

    def capture(self) -> dict:
        return {"params": {k: p.detach() for k, p in self.params.items()},
                "light": self.light.state_dict() if self.light_trainable else None,
                "opt": self.opt.state_dict(), "opt_v": self.opt_v.state_dict()}

    def restore(self, snapshot: dict) -> None:
        with torch.no_grad():
            for k, p in self.params.items():
                p.copy_(snapshot["params"][k])
        if self.light_trainable:
            self.light.load_state_dict(snapshot["light"])
        self.opt.load_state_dict(snapshot["opt"])
        self.opt_v.load_state_dict(snapshot["opt_v"])

    def payload(self) -> dict:
        base, tex = self.base, self.tex
        return {
            "config": config_to_dict(self.cfg),
            "state": self.state.state_dict(),
            "pass1": self.pass1_ck,
            "pass2": {
                "iteration": self.step,
                "base_v_pos": base.v_pos.detach().cpu(),
                "t_pos_idx": base.t_pos_idx.cpu(),
                "v_tex": base.v_tex.cpu(),
                "t_tex_idx": base.t_tex_idx.cpu(),
                "kd": tex["kd"].cpu(),
                "ks": tex["ks"].cpu(),
                "kd_param": self.kd.detach().cpu(),
                "ks_param": self.ks.detach().cpu(),
                "normal": self.normal.detach().cpu(),
                "offset": self.offset.detach().cpu(),
                "light": self.light.state_dict() if self.light_trainable else None,
                "opt": self.opt.state_dict(),
                "opt_v": self.opt_v.state_dict(),
                "sched": [s.state_dict() for s in self.schedulers],
                "sampler": self.sampler.state_dict(),
                "schedules": self.ramps.state_dict(),
            },
        }

    def train(self, deadline=None) -> Pass2Result:
        """Run the pass (:meth:`~meshlift.methods.loop.TrainLoop.run`) and checkpoint its final state."""
        total = self.run(deadline)
        if self.light_trainable:
            self.light.build_mips()
        self.state.stage = "done"
        self.state.iteration = total
        self.save_checkpoint()
        with torch.no_grad():
            final = detach_mesh(self.current_mesh())
        return Pass2Result(final, self.light)


def run_pass2(
    cfg: SurfaceConfig,
    data: ProblemData,
    device: torch.device,
    p1: Pass1Result,
    *,
    state: TrainState,
    monitor: Monitor,
    checkpointer: Checkpointer,
    checkpoint: Optional[dict] = None,
    preview: Optional[Callable[[str, int, Mesh, object, object], None]] = None,
    deadline=None,
    stages=NO_STAGES,
    prepared: Optional[tuple[Mesh, dict]] = None,
    dist: DistContext = SINGLE,
) -> Pass2Result:
    """Pass 2 (fixed topology): optimise kd/ks/normal textures, vertex offsets and light (:class:`Pass2Trainer`).

    ``prepared``: the ``(uv_mesh, textures)`` of :func:`prepare_pass2_mesh` when the caller ran it (to time
    it as its own stage); otherwise this function runs it (not when resuming: the checkpoint holds them).
    ``deadline``, ``stages``: as for :func:`run_pass1`.

    The vertex offsets from the pass-1 mesh are regularised by nvdiffrec's relative uniform Laplacian
    (``meshlift.geometry.mesh_ops.laplacian_smoothness_loss`` of the offsets), weighted by
    ``laplace_weight`` and decaying linearly to 0 over the pass. With several processes (``dist``) rank 0
    unwraps and bakes the pass-1 mesh and sends it to the others (xatlas need not be deterministic).

    Raises:
        MeshError: the pass-1 mesh is empty. TrainingError: the loss diverged again after a rollback.
    """
    return Pass2Trainer(cfg, data, device, p1, state=state, monitor=monitor, checkpointer=checkpointer,
                        checkpoint=checkpoint, preview=preview, stages=stages, prepared=prepared,
                        dist=dist).train(deadline)
