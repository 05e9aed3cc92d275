"""``reconstruct``: the whole nvdiffrec run — input → views → pass 1 → pass 2 → evaluation → asset folder.

Source: Munkberg et al., "Extracting Triangular 3D Models, Materials, and Lighting From Images", CVPR 2022.
The input (``cfg.data``) is sniffed once (:func:`meshlift.data.views.sniff_input`): a mesh file becomes a
synthetic scene rendered on the fly (:func:`synthetic_problem`), a dataset folder is read by
:func:`meshlift.data.views.scene_problem`. Checkpoints make ``--resume`` possible; the asset folder is
written by :mod:`meshlift.methods.nvdiffrec.outputs`. Nothing here prints: progress goes through a
:class:`meshlift.methods.engine.Monitor`.

Under torchrun (several processes, :mod:`meshlift.methods.distributed`) every rank loads the input and
trains its share of each batch; rank 0 alone checks the output folder, reads the checkpoint (sent to the
others), writes, reports progress, evaluates and exports.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from meshlift.data.views import ProblemData, scene_problem, sniff_input
from meshlift.errors import ConfigError, MeshliftError, OutOfMemoryError
from meshlift.kernels import precompile
from meshlift.methods.distributed import DistContext, init_from_env, make_checkpointer
from meshlift.methods.engine import (CHECKPOINT_NAME, Checkpointer, Monitor, TimeBudget, TrainState,
                                     check_memory, check_resume_compatible, is_oom, kernel_backends,
                                     prepare_output_dir, resolve_device)
from meshlift.methods.data_device import resolve_data_device
from meshlift.methods.nvdiffrec.config import RESUME_FIXED, SurfaceConfig, config_to_dict
from meshlift.methods.nvdiffrec.evaluate import geometry_metrics, image_metrics, render_views, to_world
from meshlift.methods.nvdiffrec.budget import SurfaceStageCosts
from meshlift.methods.nvdiffrec.passes import prepare_pass2_mesh, run_pass1, run_pass2
from meshlift.methods.spec import look_line, wall_time_line
from meshlift.structures.mesh import Mesh

__all__ = ["ReconstructionResult", "budget_for", "build_config", "load_problem", "oom_error", "reconstruct",
           "summary_lines", "synthetic_problem"]


def build_config(data: str, preset: Optional[str], quick: bool, config_file: Optional[Path], overrides: list,
                 out: Optional[Path] = None, resume: bool = False) -> SurfaceConfig:
    """The effective :class:`SurfaceConfig`: preset (default from the input:
    :func:`~meshlift.methods.nvdiffrec.presets.default_preset_for`; CPU-sized with ``quick``) → file →
    overrides (:func:`meshlift.methods.config_layers.build_layered_config`, the rule every family shares).

    Raises:
        ConfigError: unknown preset or field, bad value, a corrupt saved ``config.json`` on ``resume``
            (nothing is rewritten), no input.
    """
    from meshlift.methods.config_layers import ConfigLayers, build_layered_config
    from meshlift.methods.nvdiffrec.config import apply_dict, load_config_file, parse_overrides
    from meshlift.methods.nvdiffrec.presets import default_preset_for, get_preset

    layers = ConfigLayers(SurfaceConfig, apply_dict, get_preset, load_config_file, parse_overrides,
                          default_preset_for, "no input: give DATA (a dataset folder or a mesh file)")
    return build_layered_config(layers, data, preset, quick, config_file, overrides, out, resume)


def budget_for(cfg: SurfaceConfig) -> TimeBudget:
    """The run's :class:`~meshlift.methods.engine.TimeBudget`: ``time_budget_s`` shared by the two passes as
    ``budget_pass2_share`` says, after the estimated non-training stages (:mod:`.budget`)."""
    share = float(cfg.budget_pass2_share)
    return TimeBudget(cfg.time_budget_s, {"pass1": 1.0 - share, "pass2": share})


def oom_error(cfg: SurfaceConfig, where: str) -> OutOfMemoryError:
    """The OutOfMemoryError to raise, naming the memory knobs and their current values."""
    return OutOfMemoryError(
        f"out of memory during {where}. Lower the memory knobs: batch={cfg.batch} (e.g. --set batch="
        f"{max(1, cfg.batch // 2)}), train_res={cfg.train_res} (e.g. --set train_res={max(64, cfg.train_res // 2)}), "
        f"data_device={cfg.data_device} (keep images on the CPU: --set data_device=cpu), max_fragments="
        f"{cfg.max_fragments} (rasterizer fragment budget, e.g. --set max_fragments=4000000), "
        f"grid_res={cfg.grid_res}, texture_res={cfg.texture_res}, spp={cfg.spp}"
    )


def training_images_device(cfg: SurfaceConfig, device: torch.device, image_bytes: int) -> torch.device:
    """Where the training images live: :func:`meshlift.methods.data_device.resolve_data_device` of
    ``cfg.data_device``. Raises ConfigError for a device name torch does not know."""
    return resolve_data_device(cfg.data_device, device, image_bytes)


def _images_bytes(views) -> int:
    n = views.images.numel() * views.images.element_size()
    return n + (0 if views.masks is None else views.masks.numel() * views.masks.element_size())


def _place_training_images(data: ProblemData, cfg: SurfaceConfig, device: torch.device) -> ProblemData:
    """``data`` with its training images (and masks) moved where :func:`training_images_device` says; the
    held-out views stay where they were loaded (the evaluation moves them per view)."""
    where = training_images_device(cfg, device, _images_bytes(data.train))
    tr = data.train
    if tr.images.device == where:
        return data
    moved = dataclasses.replace(tr, images=tr.images.to(where),
                                masks=None if tr.masks is None else tr.masks.to(where))
    return dataclasses.replace(data, train=moved)


def _no_masks_error(data: str):
    from meshlift.errors import DatasetError

    return DatasetError(
        f"{data}: the images have neither masks nor an alpha channel; the surface method (nvdiffrec) "
        "needs the object separated from its background. For a real scene without masks use the Gaussian "
        "method (--method gaussians), or add masks (a masks/ folder, or RGBA images)")


def check_input(data: str, camera_convention: Optional[str] = None) -> None:
    """Refuse an input the surface method cannot use, reading only what that needs (file names, image
    headers): a path that is neither a mesh nor a dataset, or a dataset without masks or alpha. The CLI
    calls it before starting ``--gpus N`` ranks, so a bad input is one error, not one per rank.

    Raises:
        DatasetError: as :func:`load_problem` would for the same input.
    """
    if sniff_input(data) == "mesh":
        return
    from meshlift.data import load_scene

    kwargs = {} if camera_convention is None else {"camera_convention": camera_convention}
    if not load_scene(data, **kwargs).has_masks:
        raise _no_masks_error(data)


def load_problem(cfg: SurfaceConfig, device: torch.device) -> ProblemData:
    """Read ``cfg.data`` (dataset folder or mesh file) into a :class:`ProblemData`.

    Raises:
        ConfigError: no input given. DatasetError / MeshError: unreadable input.
    """
    if not cfg.data:
        raise ConfigError("no input: give DATA (a dataset folder or a mesh file)")
    training_images_device(cfg, device, 0)  # a bad data_device fails here, before any reading
    if sniff_input(cfg.data) == "mesh":
        from meshlift.io.mesh import load_surface_mesh

        # a 3DGS point_cloud.ply or a point cloud is refused naming what it holds
        mesh = load_surface_mesh(cfg.data, "reconstruct renders views of a mesh input's surface")
        # a scan's holes closed before its views are rendered and for scoring, as MILo does
        # (:func:`meshlift.data.synthetic.close_scan_holes`: views of the open bunny show its inside)
        from meshlift.data.synthetic import close_scan_holes

        closed, holes = close_scan_holes(mesh)
        mesh = dataclasses.replace(closed, extras={**closed.extras, "truth_holes": holes})
        return synthetic_problem(mesh, cfg, device, name=Path(cfg.data).name)
    data = scene_problem(cfg.data, background="black" if cfg.background == "black" else "white",
                         train_split=cfg.train_split, test_split=cfg.test_split, max_test_views=cfg.max_test_views,
                         train_res=cfg.train_res, camera_convention=cfg.camera_convention,
                         undistort_crop=cfg.undistort_crop)  # read into host memory
    if data.train.masks is None:
        raise _no_masks_error(cfg.data)
    return _place_training_images(data, cfg, device)


def synthetic_problem(mesh: Mesh, cfg: SurfaceConfig, device: torch.device, name: str = "mesh") -> ProblemData:
    """Training and held-out views of a gt ``mesh`` (world units) rendered as ``cfg``'s ``ref_*`` fields say."""
    from meshlift.data.synthetic import SyntheticDataset
    from meshlift.data.views import synthetic_problem as views_of

    if cfg.ref_ks is not None and mesh.material is not None:
        ks = torch.tensor(cfg.ref_ks, dtype=torch.float32).expand(1, 1, 3).clone()
        mesh = dataclasses.replace(mesh, material=dataclasses.replace(mesh.material, ks=ks, kd=mesh.material.kd))
    ds = SyntheticDataset(
        mesh,
        env=cfg.ref_env,
        env_kind=cfg.ref_env_kind,
        env_res=max(64, cfg.env_res),
        n_train=cfg.ref_views,
        n_test=cfg.ref_test_views,
        resolution=cfg.train_res or 512,  # 0 = "as loaded", which a mesh input does not have
        fov=math.radians(cfg.ref_fov_deg),
        radius=cfg.ref_camera_radius,
        seed=cfg.seed,
        background="black" if cfg.background == "black" else "white",
        device=device,
    )
    # rendered views land in host memory; the training ones then go where data_device says (the demo, which
    # calls this directly, too)
    return _place_training_images(views_of(ds, background=cfg.background, name=name), cfg, device)


@dataclass
class ReconstructionResult:
    """What :func:`reconstruct` produced.

    Attributes:
        mesh: final textured mesh in the dataset's world frame and units.
        dmtet_mesh: pass-1 mesh in world units.
        metrics: the dict written to ``metrics.json``.
        out_dir: the output folder (None when not writing).
        files: paths of the main outputs (``glb``, ``obj``, ``probe``, ``metrics``...).
        history: per-iteration dicts (pass, iteration, loss, psnr) of both passes.
    """

    mesh: Mesh
    dmtet_mesh: Mesh
    metrics: dict
    out_dir: Optional[Path]
    files: dict
    history: list = field(default_factory=list)


def estimate_training_bytes(cfg: SurfaceConfig, n_views: int, height: int, width: int, device: torch.device) -> int:
    """A floor on the training memory: the training images (float32 RGBA) when they are kept on the GPU
    (:func:`training_images_device` on ``device``) plus about 40 float32 buffers per rendered pixel of a
    batch (G-buffer, shading, their gradients) — what grows with resolution × batch × views before any
    allocation happens."""
    per_pixel = 40 * 4
    batch_px = cfg.batch * cfg.spp * height * width
    images = n_views * height * width * 4 * 4
    on_gpu = training_images_device(cfg, device, images).type != "cpu"
    return int(batch_px * per_pixel + (images if on_gpu else 0))


@kernel_backends
def reconstruct(
    cfg: SurfaceConfig,
    out_dir: Optional[str | Path],
    *,
    resume: bool = False,
    overwrite: bool = False,
    monitor: Optional[Monitor] = None,
    data: Optional[ProblemData] = None,
    dist: Optional[DistContext] = None,
    checkpoints: bool = True,
) -> ReconstructionResult:
    """Run both passes on ``cfg.data`` (or on ``data`` when given) and write the asset folder ``out_dir``.

    Args:
        cfg: the effective configuration (validated).
        out_dir: output folder (created), or None to write nothing (tests).
        resume: continue from ``out_dir/checkpoint.pt``; a finished run is re-exported. The checkpoint is
            read and checked (readable; no change of a :data:`~meshlift.methods.nvdiffrec.config.RESUME_FIXED`
            field) before anything in ``out_dir`` is touched.
        overwrite: replace a finished or unfinished run in ``out_dir`` (without it, such a folder is refused).
        monitor: progress sink (default: silent).
        data: pre-built :class:`ProblemData` (skips loading ``cfg.data``; used by ``meshlift demo``).
        dist: the process's place in a multi-process run (default: :func:`~meshlift.methods.distributed.
            init_from_env`, one process unless started by torchrun). Ranks other than 0 write nothing,
            report nothing, skip the evaluation and return ``metrics = {}`` and ``out_dir = None``.
        checkpoints: False writes no ``checkpoint.pt`` (``meshlift demo``, which cannot resume); the run
            then cannot be continued or re-exported with ``resume``.

    Raises:
        ConfigError, DatasetError, MeshError: bad configuration or input; an unreadable or incompatible
            checkpoint on resume.
        OutputError: ``out_dir`` is a file, not writable, or holds a run (without ``resume``/``overwrite``).
        OutOfMemoryError: memory ran out, or the estimate exceeds the free memory; the message names the knobs.
        TrainingError: the run diverged twice (non-finite loss); nothing was written.
        DistributedError: another rank died or stopped answering (collective timeout).
    """
    from meshlift.methods.nvdiffrec import outputs

    device = resolve_device(cfg.device)
    dist = init_from_env(device) if dist is None else dist
    device = dist.device_for(device)
    monitor = (monitor or Monitor()) if dist.is_main else Monitor()
    out = Path(out_dir) if out_dir is not None else None

    def check_and_load() -> Optional[dict]:  # rank 0 only; the others receive its result (or its error)
        prepare_output_dir(out, resume=resume, overwrite=overwrite)
        ckpt = Checkpointer(out)
        loaded = ckpt.load() if resume else None
        if resume and loaded is None:
            raise ConfigError(f"--resume: no {CHECKPOINT_NAME} in {out}; run without --resume first")
        if loaded is not None:
            mine = config_to_dict(cfg)
            if cfg.hash_max_res == 0:  # auto: resolved from the same data (itself fixed) when it was saved
                mine["hash_max_res"] = loaded["config"].get("hash_max_res", 0)
            check_resume_compatible(loaded["config"], mine, RESUME_FIXED, str(ckpt.path))
        return loaded

    checkpoint = dist.from_main(check_and_load)
    # first run on an empty Triton cache: the kernel variants compile in background processes meanwhile
    warmup = precompile.start("nvdiffrec", device, log=monitor.log) if dist.is_main else None
    # checkpoints written off the training thread
    checkpointer = make_checkpointer(out if checkpoints else None, dist, background=True)
    torch.manual_seed(cfg.seed)

    budget = budget_for(cfg)
    t_start = budget.t_start
    where = "loading the data"
    try:
        knobs = f"batch={cfg.batch}, train_res={cfg.train_res}, spp={cfg.spp}, data_device={cfg.data_device}"
        if data is None:
            if cfg.data and sniff_input(cfg.data) == "mesh" and cfg.train_res > 0:
                # synthetic views are rendered at train_res: refuse before rendering them
                n_views = cfg.ref_views + cfg.ref_test_views
                check_memory(estimate_training_bytes(cfg, n_views, cfg.train_res, cfg.train_res, device), device,
                             "rendering the synthetic views and training", knobs + f", ref_views={cfg.ref_views}")
            monitor.log(f"loading {cfg.data}")
            data = load_problem(cfg, device)
        if cfg.hash_max_res == 0:
            from meshlift.methods.nvdiffrec.materials import resolve_hash_max_res

            cfg = resolve_hash_max_res(cfg, data.train)
            monitor.log(f"material field: finest hash-grid resolution {cfg.hash_max_res} (auto: 2 cells per "
                        "training pixel at the object)")
        if cfg.train_background != "fixed":
            monitor.log(f"training background: {cfg.train_background} (evaluation on {cfg.background})"
                        if data.train.masks is not None else f"train_background={cfg.train_background} needs "
                        "masks, which this input has none of: training on the fixed background")
        h, w = data.train.resolution
        check_memory(estimate_training_bytes(cfg, len(data.train), h, w, device), device, "training", knobs)
        if out is not None and dist.is_main:  # only once the input has loaded: a bad input leaves no folder
            out.mkdir(parents=True, exist_ok=True)
            if overwrite and not resume:  # the old run's files must not outlive it (nor mix with a stopped new one)
                outputs.clear_outputs(out)
            outputs.write_config(out, cfg)
        monitor.log(
            f"{len(data.train)} training / {len(data.test)} test views at "
            f"{data.train.resolution[1]}x{data.train.resolution[0]}, device {device}"
            + (f", {dist.describe()}, {min(cfg.batch, len(data.train))} views per step over all ranks"
               if dist.enabled else "")
        )
        state = TrainState()
        if checkpoint is not None:
            state = TrainState(**checkpoint["state"])
        preview = outputs.preview_writer(out, data, cfg, device) if dist.is_main else None
        th, tw = data.test.resolution
        costs = SurfaceStageCosts(cfg, device.type, len(data.test) * th * tw, measured=state.timings,
                                  train_pixels=len(data.train) * h * w)
        where = "pass 1"
        p1 = run_pass1(cfg, data, device, state=state, monitor=monitor, checkpointer=checkpointer,
                       checkpoint=checkpoint, preview=preview, deadline=budget.deadline("pass1", costs), dist=dist)
        cull_info = None
        if cfg.view_cull != "off":
            where = "the view cull"
            p1, cull_info = _cull_pass1(p1, data, cfg, state, monitor, device, dist)
        prepared = None
        if checkpoint is None or checkpoint.get("pass2") is None:
            where = "UV unwrap and bake"
            t_stage = time.perf_counter()
            prepared = dist.from_main(lambda: prepare_pass2_mesh(p1, cfg))  # xatlas: rank 0's on all
            state.timings["unwrap_bake_s"] = time.perf_counter() - t_stage
        where = "pass 2"
        p2 = run_pass2(cfg, data, device, p1, state=state, monitor=monitor, checkpointer=checkpointer,
                       checkpoint=checkpoint, preview=preview, deadline=budget.deadline("pass2", costs),
                       prepared=prepared, dist=dist)
        if not dist.is_main:  # rank 0 evaluates and exports
            return ReconstructionResult(to_world(p2.mesh, data.world_to_normalized),
                                        to_world(p1.mesh, data.world_to_normalized), {}, None, {},
                                        list(state.history))
        where = "evaluation"
        monitor.log("evaluating held-out views")
        t_stage = time.perf_counter()
        ours, targets = render_views(p2.mesh, data.test, p2.light, None, cfg, device)
        metrics = image_metrics(ours, targets)
        metrics["test_views"] = len(data.test)
        mesh_world = to_world(p2.mesh, data.world_to_normalized)
        dmtet_world = to_world(p1.mesh, data.world_to_normalized)
        if data.gt_mesh is not None:
            metrics.update(geometry_metrics(mesh_world, data.gt_mesh, cfg))
            if (holes := data.gt_mesh.extras.get("truth_holes")) is not None:
                metrics["truth_holes"] = holes
            g1 = geometry_metrics(dmtet_world, data.gt_mesh, cfg)
            metrics["pass1_chamfer_l1"] = g1.get("chamfer_l1")
            metrics["pass1_fscore"] = g1.get("fscore")
        metrics["iterations"] = {"pass1": state.iterations.get("pass1", cfg.iter_pass1),
                                 "pass2": state.iterations.get("pass2", cfg.iter_pass2)}
        metrics["iterations_configured"] = {"pass1": cfg.iter_pass1, "pass2": cfg.iter_pass2}
        metrics.update(loss_term_means(state.history))
        if cull_info is not None:
            metrics["view_cull"] = {"mode": cfg.view_cull, **cull_info}
        metrics["faces"] = mesh_world.num_faces
        metrics["vertices"] = mesh_world.num_vertices
        metrics["device"] = str(device)
        state.timings["eval_s"] = time.perf_counter() - t_stage
        state.timings["total_s"] = time.perf_counter() - t_start
        metrics["timings"] = dict(state.timings)
        _check_results(metrics, data, ours, targets, state.history)
        files: dict = {}
        if out is not None:
            where = "export"
            t_stage = time.perf_counter()
            files = outputs.write_outputs(out, mesh_world, dmtet_world, p2.light, metrics, state.history, cfg,
                                          ours=ours, targets=targets)
            state.timings["export_s"] = time.perf_counter() - t_stage
    except MeshliftError:
        raise
    except Exception as exc:  # noqa: BLE001 - only memory errors are translated, the rest re-raised
        if is_oom(exc):
            raise oom_error(cfg, where) from exc
        raise
    finally:  # the last checkpoint is on disk when this returns or raises (--resume can use it)
        checkpointer.flush()
        if warmup is not None:
            warmup.close()
    return ReconstructionResult(mesh_world, dmtet_world, metrics, out, files, list(state.history))


def loss_term_means(history, window: int = 100) -> dict:
    """``{"loss_terms": {name: {"pass1": mean, "pass2": mean}}}``: the mean of each named loss term of the
    history rows (beyond pass, iteration, loss and psnr; e.g. ``occlusion_reg``) over the last ``window`` rows of
    each pass that has it, or ``{}`` when the rows hold none."""
    import math

    plain = {"pass", "iteration", "loss", "psnr"}
    terms: dict = {}
    for name in sorted({k for h in history for k in h} - plain):
        for p in (1, 2):
            vals = [h[name] for h in history if h.get("pass") == p and isinstance(h.get(name), float)][-window:]
            if vals:
                terms.setdefault(name, {})[f"pass{p}"] = math.fsum(vals) / len(vals)
    return {"loss_terms": terms} if terms else {}


def _cull_pass1(p1, data: ProblemData, cfg: SurfaceConfig, state: TrainState, monitor: Monitor,
                device: torch.device, dist: DistContext):
    """``(p1, info)``: ``p1`` with its mesh view-culled (:func:`~meshlift.methods.nvdiffrec.geometry.view_cull_mesh`,
    timed as ``cull_s``) and the cull's ``info``. Rank 0 culls and sends the mesh to the others. A resumed run
    culls the saved pass-1 mesh again (the checkpoint keeps it as pass 1 left it; the cull is deterministic)."""
    from meshlift.methods.nvdiffrec.geometry import view_cull_mesh

    t_stage = time.perf_counter()
    mesh, info = dist.from_main(lambda: view_cull_mesh(p1.mesh, data.train, cfg))
    state.timings["cull_s"] = time.perf_counter() - t_stage
    if info["removed"]:
        monitor.log(f"pass 1: view cull ({cfg.view_cull}) removed {info['removed']} of {info['faces_before']} "
                    f"faces ({info['background_only']} seen only against the mask background, "
                    f"{info['outside_hull']} outside the visual hull, {info['pieces_removed']} pieces "
                    f"({info['piece_faces_removed']} faces) no training view sees in its mask or mostly outside the "
                    f"hull; masks dilated {info['dilate_px']} px)")
    return dataclasses.replace(p1, mesh=mesh.to(device)), info


def _check_results(metrics: dict, data: ProblemData, ours: torch.Tensor, targets: torch.Tensor, history) -> None:
    """Test renders that show nothing, a test PSNR far below the training one: ``warnings`` in ``metrics``
    (:mod:`meshlift.methods.result_checks`)."""
    from meshlift.methods.result_checks import check_test_views
    from meshlift.shading.color import linear_to_srgb

    background = float(linear_to_srgb(data.test.background.float().cpu().clamp(0, 1)).mean())
    check_test_views(
        metrics, renders=ours, targets=targets, background=background,
        names=[f"test_{i:02d}" for i in range(len(ours))], history=history, test_psnr=metrics.get("psnr"),
        subject="the mesh", blank_hint="the test cameras are not in the training views' world frame (the dataset's "
        "poses, --camera-convention), or the mesh was lost in training; look at images/end_*.png",
        gap_hint="check that the test split's poses are in the training views' frame (meshlift inspect) and that "
        "the training views surround the object; look at images/end_*.png")


def summary_lines(result: ReconstructionResult, wall_s: float) -> list[str]:
    """The lines the CLI prints after a run (rich markup): headline metrics, the command's wall time
    ``wall_s`` beside the training time of both passes, and the output paths."""
    from meshlift.methods.result_checks import warning_lines

    m = result.metrics
    lines = [f"[bold]test PSNR[/bold] {m['psnr']:.2f} dB   [bold]SSIM[/bold] {m['ssim']:.4f}"]
    if "fscore" in m:
        lines.append(
            f"[bold]Chamfer-L1[/bold] {m['chamfer_l1']:.5f}   [bold]F-score[/bold] {m['fscore']:.4f} "
            f"(threshold {m.get('threshold', float('nan')):.5f}, 1% of the gt bbox diagonal; "
            f"{m.get('n_samples', 0):,} samples per surface: `meshlift eval mesh --samples` the same to compare)"
        )
    lines += warning_lines(m)
    t = m.get("timings", {})
    if t:
        lines.append(f"{wall_time_line(wall_s)}; training time over all sessions "
                     f"(a resumed run adds up): pass 1 {t.get('pass1_s', 0):.1f} s, pass 2 {t.get('pass2_s', 0):.1f} s")
    if result.files:
        lines.append(f"[bold]GLB[/bold] {result.files['glb']}")
        lines.append(f"OBJ {result.files['obj']}   metrics {result.files['metrics']}")
        look = look_line(Path(result.files["metrics"]).parent, [
            ("images/end_*.png", "a held-out view: target | ours"), ("images/asset.png", "the exported asset"),
            ("loss_curve.png", "the losses")])
        if look:
            lines.append(look)
    return lines
