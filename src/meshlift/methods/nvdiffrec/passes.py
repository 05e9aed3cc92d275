"""The two passes of the nvdiffrec method: topology (pass 1) and fixed-topology textures (pass 2).

Source: Munkberg et al., "Extracting Triangular 3D Models, Materials, and Lighting From Images", CVPR 2022
(nvdiffrec), Sec. 4-5. Pass 1 (:func:`run_pass1`) optimises a DMTet/FlexiCubes surface
(:mod:`~meshlift.methods.nvdiffrec.geometry`), the material field and the light
(:mod:`~meshlift.methods.nvdiffrec.materials`); the mesh is extracted, hidden faces removed, unwrapped and
the field baked into textures (:func:`prepare_pass2_mesh`). Pass 2 (:func:`run_pass2`) optimises kd/ks/normal
textures, vertex offsets and light. Losses and regulariser ramps: :mod:`~meshlift.methods.nvdiffrec.losses`;
the shared loop machinery (sampler, schedules, checkpoints, progress, time budget):
:mod:`meshlift.methods.engine`. Both passes resume from a checkpoint dict they saved.

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
from meshlift.methods.distributed import SINGLE, DistContext, SyncedCadence
from meshlift.methods.engine import (NO_STAGES, CheckpointCadence, Checkpointer, DivergenceGuard, ExponentialLR,
                                     LossReadback, Monitor, StageClock, TrainState, ViewSampler, end_step)
from meshlift.methods.optim import Adam, LambdaLR
from meshlift.methods.nvdiffrec.config import SurfaceConfig, config_to_dict
from meshlift.methods.nvdiffrec.evaluate import render_batch
from meshlift.methods.nvdiffrec.geometry import init_sdf, make_geometry
from meshlift.methods.nvdiffrec.losses import RegularizerSchedules, image_loss, make_laplacian_loss
from meshlift.methods.nvdiffrec.materials import BoundedMaterialField, make_light
from meshlift.methods.nvdiffrec.pixel_graphs import PixelGraphs
from meshlift.structures.mesh import Material, Mesh

__all__ = ["Pass1Result", "Pass2Result", "detach_mesh", "prepare_pass2_mesh", "run_pass1", "run_pass2"]

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

def readback_every(cfg: SurfaceConfig, device: torch.device) -> int:
    """Steps between loss read-backs (``cfg.readback_every``; 0 = every step on the CPU, where a read-back
    costs nothing, and every :data:`CUDA_READBACK_EVERY` steps elsewhere)."""
    if cfg.readback_every > 0:
        return int(cfg.readback_every)
    return 1 if torch.device(device).type == "cpu" else CUDA_READBACK_EVERY


#: Default steps between loss read-backs on a GPU (``readback_every = 0``): progress updates arrive in groups
#: of this many steps, and a NaN is caught at most this many steps late (then rolled back as before).
CUDA_READBACK_EVERY = 10


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


def _render_and_loss(graphs: Optional[PixelGraphs], stages, mesh: Mesh, views, light, light_trainable: bool,
                     material, cfg: SurfaceConfig, jitter: float) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """A step's light mips, render and image loss: ``(out, loss, srgb_mse)``, by the CUDA graphs of
    ``pixel_graphs`` (which build a learned light's mips themselves) or eagerly (``render_batch`` +
    ``image_loss``; ``material`` None = the mesh's own)."""
    if light_trainable and (graphs is None or not graphs.builds_light):
        with stages("light"):
            light.build_mips()
    if graphs is not None:
        with stages("render"):  # the image loss is timed here too: it is replayed with the render
            return graphs.render(mesh, views)
    with stages("render"):
        out = render_batch(mesh, views, light, material, cfg, jitter)
    with stages("loss"):
        loss, mse = image_loss(out, views, cfg)
    return out, loss, mse


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
    """Pass 1 (topology): DMTet/FlexiCubes + material field + light, ``cfg.iter_pass1`` steps.

    Resumes from ``checkpoint`` (a dict saved by this function) when given. ``deadline``: a
    ``time.perf_counter()`` value or an ``engine.PassDeadline`` (told the current face count each step);
    ``stages``: a stage timer (``engine.NO_STAGES``; the benchmark passes a timing one). ``dist``: this
    process's place in a multi-process run (:data:`~meshlift.methods.distributed.SINGLE` for one process);
    the deadline is then rank 0's decision on every rank (each rank observes its own clock and costs).

    Raises:
        ConfigError: ``batch`` smaller than the number of ranks. MeshError: the surface vanished.
    """
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    geom = make_geometry(cfg, device)
    material = BoundedMaterialField(cfg, device)
    light, light_trainable = make_light(cfg, device, data.gt_light, gen)
    if checkpoint is None:
        how = init_sdf(geom, cfg, data.train, gen)
        monitor.log(f"pass 1: SDF initialised from {how}")
    if cfg.diagnose_nonfinite:
        monitor.log("diagnose_nonfinite: every step checks the render, the loss and the gradients (slower)")

    opt_geom = _adam(geom.parameters(), device, lr=cfg.lr_pos)
    groups = [{"params": list(material.parameters()), "lr": cfg.lr_mat}]
    if light_trainable:
        groups.append({"params": list(light.parameters()), "lr": cfg.lr_light})
    opt_mat = _adam(groups, device)
    lr = ExponentialLR(cfg.warmup, cfg.lr_decay)
    sched = [LambdaLR(o, lr) for o in (opt_geom, opt_mat)]
    sampler = ViewSampler(len(data.train), cfg.batch, cfg.seed)
    dist.check_batch(sampler.batch)
    ramps = RegularizerSchedules.from_config(cfg)

    start = 0
    if checkpoint is not None and checkpoint.get("pass1") is not None:
        ck = checkpoint["pass1"]
        geom.load_state_dict(ck["geometry"])
        material.load_state_dict(ck["material"])
        if light_trainable:
            light.load_state_dict(ck["light"])
        opt_geom.load_state_dict(ck["opt_geom"])
        opt_mat.load_state_dict(ck["opt_mat"])
        for s, sd in zip(sched, ck["sched"]):
            s.load_state_dict(sd)
        sampler.load_state_dict(ck["sampler"])
        start = int(ck["iteration"])
    modules = [geom, material] + ([light] if light_trainable else [])
    dist.broadcast_modules(modules)  # every rank starts from rank 0's parameters
    dist.decorrelate_rng(cfg.seed + 1 + start)  # ranks > 0: their own noise (jitter) from here on
    params = [p for m in modules for p in m.parameters()]
    weight = dist.share_weight(sampler.batch)

    def payload(it: int) -> dict:
        return {
            "config": config_to_dict(cfg),
            "state": state.state_dict(),
            "pass1": {
                "iteration": it,
                "geometry": geom.state_dict(),
                "material": material.state_dict(),
                "light": light.state_dict() if light_trainable else None,
                "opt_geom": opt_geom.state_dict(),
                "opt_mat": opt_mat.state_dict(),
                "sched": [s.state_dict() for s in sched],
                "sampler": sampler.state_dict(),
                "schedules": ramps.state_dict(),
            },
            "pass2": None,
        }

    total = cfg.iter_pass1
    if checkpoint is not None and checkpoint.get("pass2") is not None:
        total = start  # pass 2 already started from this pass-1 state: keep it
    if start == 0 and preview is not None:
        with torch.no_grad():
            if light_trainable:
                light.build_mips()
            preview("start", 0, detach_mesh(geom.get_mesh()[0]), light, material)
    monitor.start_pass("pass 1 (topology)", total, start)
    clock = StageClock(state, "pass1_s")
    cadence = _cadence(cfg, dist)

    def capture() -> dict:
        return {"geometry": geom.state_dict(), "material": material.state_dict(),
                "light": light.state_dict() if light_trainable else None,
                "opt_geom": opt_geom.state_dict(), "opt_mat": opt_mat.state_dict()}

    def restore(snap: dict) -> None:
        geom.load_state_dict(snap["geometry"])
        material.load_state_dict(snap["material"])
        if light_trainable:
            light.load_state_dict(snap["light"])
        opt_geom.load_state_dict(snap["opt_geom"])
        opt_mat.load_state_dict(snap["opt_mat"])

    guard = DivergenceGuard("pass 1", capture, restore, [opt_geom, opt_mat], "lr_pos, lr_mat, lr_light",
                            schedulers=sched, hint=DIAGNOSE_HINT)
    guard.start(start)

    def save_mid(n: int) -> None:
        clock.flush()
        checkpointer.save(payload(n))

    readback = LossReadback(readback_every(cfg, device))
    observe = getattr(deadline, "observe", None)
    jitter = cfg.kd_smooth_jitter if cfg.kd_smooth_weight > 0 else 0.0
    graphs = None  # the per-pixel half replayed as CUDA graphs on small GPU frames (pixel_graphs)
    if PixelGraphs.wanted(cfg, device, sampler.batch, dist.enabled, data.train.resolution):
        graphs = PixelGraphs(cfg, light, material, jitter, monitor.log, light_trainable=light_trainable)
    probe = NonfiniteProbe("pass 1", [(f"{k}.{n}", p) for k, m in (("geometry", geom), ("material", material),
                                      ("light", light)) if k != "light" or light_trainable
                                      for n, p in m.named_parameters()], cfg.diagnose_nonfinite)

    def forward(it: int, views):
        """The step's forward: ``(mesh, out, total_loss, mse, forward tensors for the probe)``."""
        with stages("marching_tets"):
            mesh, extra_reg = geom.get_mesh()
        # num_faces is a shape: known on the host once marching tets has sized its output (no extra sync)
        if mesh.num_faces == 0:
            raise MeshError(
                f"pass 1, iteration {it}: the surface vanished (the SDF has one sign everywhere). Use "
                "--set sdf_init=sphere or visual_hull, lower lr_pos, or check that the object is inside the grid "
                f"(mesh_scale={cfg.mesh_scale})"
            )
        if observe is not None:
            observe(faces=mesh.num_faces)
        out, loss, mse = _render_and_loss(graphs, stages, mesh, views, light, light_trainable, material, cfg, jitter)
        with stages("loss"):
            reg = ramps.sdf_reg(it / max(1, total)) * geom.reg_loss()
            if cfg.isosurface == "flexicubes":
                reg = reg + cfg.flexi_dev_weight * extra_reg
            if "kd_grad" in out and cfg.kd_smooth_weight > 0:
                reg = reg + cfg.kd_smooth_weight * ramps.kd_smooth_warmup(it) * out["kd_grad"].mean()
            if light_trainable and cfg.light_reg_weight > 0:
                reg = reg + cfg.light_reg_weight * light.regularizer()
            total_loss = loss + reg
        named = {"vertices": mesh.v_pos, **{k: out.get(k) for k in PROBED_RENDER_OUTPUTS},
                 "image loss": loss, "regularisers": reg}
        return mesh, out, total_loss, mse, named

    for it in range(start, total):
        with stages("views"):
            views = data.train.batch(dist.share(sampler.next()), device)
        mesh, out, total_loss, mse, named = forward(it, views)
        with stages("backward"):
            opt_geom.zero_grad(set_to_none=True)
            opt_mat.zero_grad(set_to_none=True)
            total_loss.backward()
            dist.all_reduce_gradients(params, weight)
        probe.check(it, named, lambda: forward(it, views)[2])
        with stages("optimizer"):
            opt_geom.step()
            opt_mat.step()
            for s in sched:
                s.step()
            if light_trainable:
                light.clamp_(min=0.0)
        total_loss, mse = dist.weighted_sum([total_loss, mse], weight)
        with stages("bookkeeping"):
            stop = end_step(1, it, total, total_loss, mse, state=state, monitor=monitor,
                            preview_every=cfg.preview_every, cadence=cadence, deadline=deadline,
                            save=lambda: save_mid(it + 1), guard=guard, readback=readback,
                            agree=dist.agree if dist.enabled else None,
                            preview=None if preview is None else
                            lambda: preview("pass1", it + 1, detach_mesh(mesh), light, material))
        if stop:
            total = it + 1
            break
    monitor.end_pass()
    state.iterations["pass1"] = total
    if total > start:  # a resume with nothing left to train adds no time
        clock.flush()

    saved_mesh = None if checkpoint is None or checkpoint.get("pass2") is None else \
        (checkpoint.get("pass1") or {}).get("mesh")
    with torch.no_grad():
        if saved_mesh is not None:  # resumed in pass 2: the pass-1 output as it was (no re-extraction)
            mesh = Mesh(v_pos=saved_mesh["v_pos"].to(device), t_pos_idx=saved_mesh["t_pos_idx"].to(device))
        else:
            mesh = _pass1_output(geom.get_mesh()[0], cfg, state, monitor, device)
    if light_trainable:
        light.build_mips()
    state.stage = "pass2"
    state.iteration = 0
    final = payload(total)
    # the output mesh rides along (pass-2 checkpoints keep this dict), so a resume in pass 2 need not
    # extract it and remove its hidden faces again
    final["pass1"]["mesh"] = {"v_pos": mesh.v_pos.detach().cpu(), "t_pos_idx": mesh.t_pos_idx.detach().cpu()}
    if start < total or checkpoint is None:
        checkpointer.save(final)
    return Pass1Result(detach_mesh(mesh), geom, material, light, light_trainable, final["pass1"])


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


def _cadence(cfg: SurfaceConfig, dist: DistContext):
    """The mid-pass checkpoint cadence; rank 0's decision on every rank when several processes run."""
    cadence = CheckpointCadence(cfg.checkpoint_every, cfg.checkpoint_every_s)
    return SyncedCadence(cadence, dist) if dist.enabled else cadence


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
    """Pass 2 (fixed topology): optimise kd/ks/normal textures, vertex offsets and light.

    ``prepared``: the ``(uv_mesh, textures)`` of :func:`prepare_pass2_mesh` when the caller ran it (to time
    it as its own stage); otherwise this function runs it (not when resuming: the checkpoint holds them).
    ``deadline``, ``stages``: as for :func:`run_pass1`.

    The vertex offsets from the pass-1 mesh are regularised by nvdiffrec's relative uniform Laplacian
    (``meshlift.geometry.mesh_ops.laplacian_smoothness_loss`` of the offsets), weighted by
    ``laplace_weight`` and decaying linearly to 0 over the pass. With several processes (``dist``) rank 0
    unwraps and bakes the pass-1 mesh and sends it to the others (xatlas need not be deterministic).
    """
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
    light, light_trainable = p1.light, p1.light_trainable

    R = tex["kd"].shape[0]
    kd = nn.Parameter(tex["kd"][..., :3].to(device).contiguous())
    ks = nn.Parameter(tex["ks"][..., :3].to(device).contiguous())
    nrm0 = torch.zeros(R, R, 3, device=device)
    nrm0[..., 2] = 1.0
    normal = nn.Parameter(nrm0)
    offset = nn.Parameter(torch.zeros_like(base.v_pos))
    laplacian_loss = make_laplacian_loss(base.num_vertices, base.t_pos_idx, device)

    tex_params = [kd, ks] + ([normal] if cfg.perturb_normal else [])
    groups = [{"params": tex_params, "lr": cfg.lr_mat}]
    if light_trainable:
        groups.append({"params": list(light.parameters()), "lr": cfg.lr_light})
    opt = _adam(groups, device)
    opt_v = _adam([offset], device, lr=cfg.lr_vertex)
    lr = ExponentialLR(cfg.warmup, cfg.lr_decay)
    sched = [LambdaLR(o, lr) for o in (opt, opt_v)]
    ramps = RegularizerSchedules.from_config(cfg)
    sampler = ViewSampler(len(data.train), cfg.batch, cfg.seed + 1)
    dist.check_batch(sampler.batch)
    kd_min = torch.tensor(cfg.kd_min, device=device)
    kd_max = torch.tensor(cfg.kd_max, device=device)
    ks_min = torch.tensor(cfg.ks_min, device=device)
    ks_max = torch.tensor(cfg.ks_max, device=device)

    start = 0
    if ck is not None:
        with torch.no_grad():
            kd.copy_(ck["kd_param"].to(device))
            ks.copy_(ck["ks_param"].to(device))
            normal.copy_(ck["normal"].to(device))
            offset.copy_(ck["offset"].to(device))
        if light_trainable and ck.get("light") is not None:
            light.load_state_dict(ck["light"])
        opt.load_state_dict(ck["opt"])
        opt_v.load_state_dict(ck["opt_v"])
        for s, sd in zip(sched, ck["sched"]):
            s.load_state_dict(sd)
        sampler.load_state_dict(ck["sampler"])
        start = int(ck["iteration"])
    train_params = [kd, ks, normal, offset] + (list(light.parameters()) if light_trainable else [])
    dist.broadcast_tensors(train_params)  # every rank starts from rank 0's parameters
    weight = dist.share_weight(sampler.batch)

    def current_mesh() -> Mesh:
        v = base.v_pos + offset if cfg.optimize_vertices else base.v_pos
        mat = Material(kd=kd, ks=ks, normal=normal if cfg.perturb_normal else None, name="meshlift")
        return Mesh(v_pos=v, t_pos_idx=base.t_pos_idx, v_tex=base.v_tex, t_tex_idx=base.t_tex_idx, material=mat)

    def payload(it: int, pass1_ck: Optional[dict]) -> dict:
        return {
            "config": config_to_dict(cfg),
            "state": state.state_dict(),
            "pass1": pass1_ck,
            "pass2": {
                "iteration": it,
                "base_v_pos": base.v_pos.detach().cpu(),
                "t_pos_idx": base.t_pos_idx.cpu(),
                "v_tex": base.v_tex.cpu(),
                "t_tex_idx": base.t_tex_idx.cpu(),
                "kd": tex["kd"].cpu(),
                "ks": tex["ks"].cpu(),
                "kd_param": kd.detach().cpu(),
                "ks_param": ks.detach().cpu(),
                "normal": normal.detach().cpu(),
                "offset": offset.detach().cpu(),
                "light": light.state_dict() if light_trainable else None,
                "opt": opt.state_dict(),
                "opt_v": opt_v.state_dict(),
                "sched": [s.state_dict() for s in sched],
                "sampler": sampler.state_dict(),
                "schedules": ramps.state_dict(),
            },
        }

    pass1_ck = p1.checkpoint_state

    total = cfg.iter_pass2
    monitor.start_pass("pass 2 (textures)", total, start)
    clock = StageClock(state, "pass2_s")
    cadence = _cadence(cfg, dist)
    params = {"kd": kd, "ks": ks, "normal": normal, "offset": offset}

    def capture() -> dict:
        return {"params": {k: p.detach() for k, p in params.items()},
                "light": light.state_dict() if light_trainable else None,
                "opt": opt.state_dict(), "opt_v": opt_v.state_dict()}

    def restore(snap: dict) -> None:
        with torch.no_grad():
            for k, p in params.items():
                p.copy_(snap["params"][k])
        if light_trainable:
            light.load_state_dict(snap["light"])
        opt.load_state_dict(snap["opt"])
        opt_v.load_state_dict(snap["opt_v"])

    guard = DivergenceGuard("pass 2", capture, restore, [opt, opt_v], "lr_mat, lr_light, lr_vertex",
                            schedulers=sched, hint=DIAGNOSE_HINT)
    guard.start(start)

    def save_mid(n: int) -> None:
        clock.flush()
        checkpointer.save(payload(n, pass1_ck))

    readback = LossReadback(readback_every(cfg, device))
    jitter = PASS2_JITTER_SCALE * cfg.kd_smooth_jitter if cfg.kd_smooth_weight > 0 else 0.0
    named_params = [(n, p) for n, p in params.items()] + (
        [(f"light.{n}", p) for n, p in light.named_parameters()] if light_trainable else [])
    probe = NonfiniteProbe("pass 2", named_params, cfg.diagnose_nonfinite)
    graphs = None  # the per-pixel half replayed as CUDA graphs on small GPU frames (pixel_graphs)
    if PixelGraphs.wanted(cfg, device, sampler.batch, dist.enabled, data.train.resolution):
        graphs = PixelGraphs(cfg, light, current_mesh().material, jitter, monitor.log,
                             light_trainable=light_trainable, name="pass 2")

    def forward(it: int, views):
        """The step's forward: ``(out, total_loss, mse, forward tensors for the probe)``."""
        out, loss, mse = _render_and_loss(graphs, stages, current_mesh(), views, light, light_trainable, None, cfg,
                                          jitter)
        with stages("loss"):
            reg = loss.new_zeros(())
            if cfg.optimize_vertices and cfg.laplace_weight > 0:
                reg = reg + cfg.laplace_weight * ramps.laplace(it / max(1, total)) * laplacian_loss(offset)
            if "kd_grad" in out and cfg.kd_smooth_weight > 0:
                reg = reg + cfg.kd_smooth_weight * out["kd_grad"].mean()
            if light_trainable and cfg.light_reg_weight > 0:
                reg = reg + cfg.light_reg_weight * light.regularizer()
            total_loss = loss + reg
        named = {**{k: out.get(k) for k in PROBED_RENDER_OUTPUTS}, "image loss": loss, "regularisers": reg}
        return out, total_loss, mse, named

    for it in range(start, total):
        with stages("views"):
            views = data.train.batch(dist.share(sampler.next()), device)
        out, total_loss, mse, named = forward(it, views)
        with stages("backward"):
            opt.zero_grad(set_to_none=True)
            opt_v.zero_grad(set_to_none=True)
            total_loss.backward()
            dist.all_reduce_gradients(train_params, weight)
        probe.check(it, named, lambda: forward(it, views)[1])
        with stages("optimizer"):
            opt.step()
            if cfg.optimize_vertices:
                opt_v.step()
            for s in sched:
                s.step()
            with torch.no_grad():  # clamp(max) then clamp(min): the same as maximum(minimum(x, max), min)
                kd.clamp_(max=kd_max).clamp_(min=kd_min)
                ks.clamp_(max=ks_max).clamp_(min=ks_min)
                normal[..., 2].clamp_(min=NORMAL_MAP_MIN_Z)
                normal.copy_(F.normalize(normal.clamp(-1, 1), dim=-1))
            if light_trainable:
                light.clamp_(min=0.0)
        total_loss, mse = dist.weighted_sum([total_loss, mse], weight)
        with stages("bookkeeping"):
            stop = end_step(2, it, total, total_loss, mse, state=state, monitor=monitor,
                            preview_every=cfg.preview_every, cadence=cadence, deadline=deadline,
                            save=lambda: save_mid(it + 1), guard=guard, readback=readback,
                            agree=dist.agree if dist.enabled else None,
                            preview=None if preview is None else
                            lambda: preview("pass2", it + 1, detach_mesh(current_mesh()), light, None))
        if stop:
            total = it + 1
            break
    monitor.end_pass()
    state.iterations["pass2"] = total
    if total > start:  # a resume with nothing left to train adds no time
        clock.flush()
    if light_trainable:
        light.build_mips()
    state.stage = "done"
    state.iteration = total
    checkpointer.save(payload(total, pass1_ck))
    with torch.no_grad():
        final = detach_mesh(current_mesh())
    return Pass2Result(final, light)
