"""``reconstruct --method milo``: photos (or a mesh's rendered views) → Gaussians with the mesh in the loop → mesh.

The run (Guédon et al. 2025, "MILo"; docs/usage/milo.md):

1. :func:`build_config` (preset → ``--config`` → overrides; on ``--resume`` the saved ``config.json``);
2. :func:`load_problem`: a dataset folder (:func:`~meshlift.methods.gaussians.views.load_splat_problem`,
   world frame) or a mesh file (views rendered by :class:`meshlift.data.synthetic.SyntheticDataset` in its
   normalised frame; the mesh is then the known truth for Chamfer / F-score);
3. training by the **Gaussian trainer** (:class:`~meshlift.methods.gaussians.trainer.GaussianTrainer`) with
   :class:`~meshlift.methods.milo.strategy.MiloStrategy` as its density control and
   :class:`~meshlift.methods.milo.mesh_in_loop.MeshInTheLoop` as its regulariser;
4. extraction (:mod:`meshlift.methods.milo.extract`): occupancy refinement, marching tets, cleaning,
   vertex colours + baked albedo texture; PLY, OBJ+MTL+PNG, GLB;
5. evaluation: the Gaussian render and the textured **mesh render** of the test views (PSNR / SSIM /
   LPIPS, MILo's mesh-based novel view synthesis), and with a known truth Chamfer-L1 / F-score at 1% of
   its bounding-box diagonal; vertex/face counts, wall time, peak GPU memory in ``metrics.json``; also
   ``gaussian_psnr_sh0``, the Gaussians at SH degree 0 (view-independent: the reference a diffuse mesh can
   reach; docs/usage/milo.md "What a diffuse mesh can be compared with"), and ``mesh_psnr_cc`` /
   ``gaussian_psnr_cc``, both after each view's best affine colour map (a photo's own exposure and white
   balance, which no asset with fixed colours can show: :func:`meshlift.metrics.image.psnr_color_corrected`).

Nothing here prints; progress goes to the :class:`~meshlift.methods.engine.Monitor`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from meshlift.errors import ConfigError, MeshliftError, OutOfMemoryError
from meshlift.kernels import precompile
from meshlift.methods.engine import (CHECKPOINT_NAME, Checkpointer, Monitor, TimeBudget, check_pass_time, is_oom,
                                     kernel_backends, resolve_device)
from meshlift.methods.milo.config import SHAPE_FIELDS, MiloConfig, apply_dict, inert_settings, num_mesh_gaussians
from meshlift.methods.milo.extract import render_mesh_views

__all__ = ["BUDGET_FRACTIONS", "MiloResult", "budget_costs", "build_config", "load_problem", "oom_error",
           "reconstruct", "summary_lines"]

#: With ``time_budget_s``: shares of the *training* time (:class:`~meshlift.methods.engine.TimeBudget`) of
#: the Gaussian training and the occupancy refinement; the stages around them (the final triangulation
#: before the refinement; colouring, unwrap, bake, evaluation and export after it) are estimated for the
#: mesh at hand by :class:`~meshlift.methods.milo.budget.MiloStageCosts` (:func:`budget_costs`).
BUDGET_FRACTIONS = {"train": 0.85, "extract": 0.15}


def budget_costs(cfg: MiloConfig, problem, device: torch.device, reg=None, *, known_truth: bool = False):
    """The :class:`~meshlift.methods.milo.budget.MiloStageCosts` of a ``time_budget_s`` run; the face count
    follows ``reg``'s current mesh (:attr:`MeshInTheLoop.mesh_size`) once there is one."""
    from meshlift.methods.milo.budget import MiloStageCosts

    tr, te = problem.train, problem.test
    faces_fn = (lambda: reg.mesh_size[1] if reg.active else 0) if reg is not None else None
    pivots_fn = (lambda: 9 * int(reg.idx.numel()) if reg.active else 0) if reg is not None else None
    grids = None
    if cfg.extract == "tsdf" and cfg.time_budget_s > 0:  # the fusions' cost joins the reserve (budget.py)
        from meshlift.methods.milo.budget import tsdf_grids

        grids = tsdf_grids(cfg, problem, mesh_input=known_truth)
    return MiloStageCosts(cfg, device.type, len(tr) * tr.height * tr.width, len(te) * te.height * te.width,
                          known_truth=known_truth, faces_fn=faces_fn, pivots_fn=pivots_fn, tsdf_grids=grids,
                          max_unwrap_faces=cfg.unwrap_max_faces, train_views=len(tr))


@dataclass
class MiloResult:
    """What :func:`reconstruct` produced."""

    mesh: object
    """The textured :class:`~meshlift.structures.mesh.Mesh` (training frame)."""
    gaussians: object
    metrics: dict
    out_dir: Optional[Path]
    files: dict
    history: list = field(default_factory=list)


def build_config(data: str, preset: Optional[str], quick: bool, config_file: Optional[Path],
                 overrides: list[str], out: Optional[Path] = None, resume: bool = False) -> MiloConfig:
    """Preset (default ``verylowres``; CPU-sized with ``quick``) → file → overrides (saved config on resume;
    :func:`meshlift.methods.config_layers.build_layered_config`).

    Raises:
        ConfigError: unknown preset / field, bad value, unreadable saved config, no input.
    """
    from meshlift.methods.config_layers import ConfigLayers, build_layered_config
    from meshlift.methods.milo.config import load_config_file, parse_overrides
    from meshlift.methods.milo.presets import get_preset

    layers = ConfigLayers(MiloConfig, apply_dict, get_preset, load_config_file, parse_overrides, "verylowres",
                          "no input: give DATA (a dataset folder or a mesh file)")
    return build_layered_config(layers, data, preset, quick, config_file, overrides, out, resume)


def load_problem(cfg: MiloConfig):
    """``(SplatProblem, gt_mesh or None)``: a dataset folder, or views of a mesh file (gt in the training frame).

    Raises:
        DatasetError / MeshError: unreadable input.
    """
    from meshlift.data.views import sniff_input
    from meshlift.errors import DatasetError

    try:
        kind = sniff_input(cfg.data)
    except DatasetError:
        kind = "dataset"
    if kind == "mesh":
        return _mesh_problem(cfg)
    from meshlift.methods.gaussians.reconstruct import load_problem as load_dataset

    return load_dataset(cfg), None  # the Gaussians' reader: the same split, size, mask, camera and crop fields


def _mesh_problem(cfg: MiloConfig):
    from meshlift.data.synthetic import SyntheticDataset, close_scan_holes
    from meshlift.io.mesh import load_mesh
    from meshlift.methods.gaussians.views import STORE_DTYPE, SplatProblem, SplatViews
    from meshlift.shading.color import linear_to_srgb

    # the views are rendered from the truth as scored (a scan's holes closed): views of the open scan show its
    # inside through the holes, and fusing even their TRUE depth scores the bunny F 0.968 against the closed
    # truth (1.000 from the closed one's depth; benchmarks/truth_fusion.py, 512², 100 views, 2026-12-06)
    mesh, holes = close_scan_holes(load_mesh(cfg.data))
    if cfg.ref_scene == "ground":
        return _ground_scene_problem(cfg, mesh, holes)
    # rendered on the compute device (100 views at 512² took minutes on the CPU of a GPU run), kept on data_device
    ds = SyntheticDataset(mesh, n_train=cfg.ref_views, n_test=cfg.ref_test_views, resolution=cfg.train_res or 256,
                          seed=cfg.seed, background="black", device=resolve_device(cfg.device))
    dev = torch.device("cpu" if cfg.data_device == "auto" else cfg.data_device)

    def views(split: str) -> SplatViews:
        idx = ds.splits[split]
        b = ds.load_batch(idx, "cpu")
        a = b["mask"].clamp(0, 1)
        img = linear_to_srgb(b["rgb_linear"].clamp(0, 1)) * a  # premultiplied sRGB
        cams = ds.cameras_normalized[idx]
        return SplatViews(cams.world_to_camera.float().cpu(), cams.K.float().cpu(), img.to(STORE_DTYPE).to(dev),
                          a.to(STORE_DTYPE).to(dev), [f"{split}_{int(i):03d}" for i in idx])

    pb = SplatProblem(train=views("train"), test=views("test"), bounds=torch.tensor([[-1.0] * 3, [1.0] * 3]),
                      name=Path(cfg.data).name, world_to_normalized=ds.world_to_normalized)
    return pb, _with_holes(ds.mesh_normalized.to("cpu"), holes)


def _with_holes(gt, holes: dict):
    """The known truth (already closed by :func:`meshlift.data.synthetic.close_scan_holes` before its views were
    rendered) with what the closing did in ``gt.extras["truth_holes"]`` (``metrics.json`` ``truth_holes``)."""
    import dataclasses as _dc

    return _dc.replace(gt, extras={**gt.extras, "truth_holes": holes})


def _ground_scene_problem(cfg: MiloConfig, mesh, holes: dict):
    """``(SplatProblem, gt object mesh)`` of an unmasked synthetic capture of ``mesh`` (``ref_scene=ground``):
    scene frame (+Y up, floor y = 0), no masks, the F-score box in ``eval_box``."""
    from meshlift.data.synthetic_scene import make_synthetic_scene
    from meshlift.methods.gaussians.views import STORE_DTYPE, SplatProblem, SplatViews

    sc = make_synthetic_scene(mesh, n_train=cfg.ref_views, n_test=cfg.ref_test_views, resolution=cfg.train_res or 256,
                              seed=cfg.seed, device=resolve_device(cfg.device))
    dev = torch.device("cpu" if cfg.data_device == "auto" else cfg.data_device)

    def views(split: str) -> SplatViews:
        v = sc.views(split)
        return SplatViews(v.world_to_camera, v.K, v.images.to(STORE_DTYPE).to(dev), None, list(v.names))

    box = torch.stack([sc.eval_box_min.float(), sc.eval_box_max.float()])
    pb = SplatProblem(train=views("train"), test=views("test"), bounds=sc.scene_bounds.float(), name=Path(cfg.data).name,
                      world_to_normalized=sc.world_to_normalized, eval_box=box)
    return pb, _with_holes(sc.gt_mesh.to("cpu"), holes)


def oom_error(cfg: MiloConfig, where: str, n: int) -> OutOfMemoryError:
    """The OutOfMemoryError naming MILo's memory knobs with their current values."""
    return OutOfMemoryError(
        f"out of memory during {where} with {n:,} Gaussians. Lower the memory knobs: max_fragments="
        f"{cfg.max_fragments} (mesh rasterizer fragment budget, MILo's MILO_RAST_TRI_CHUNK; e.g. --set "
        f"max_fragments={1 << 22}), mesh_res_scale={cfg.mesh_res_scale} with num_pivots={cfg.num_pivots} "
        f"(MILO_MESH_RES_SCALE; e.g. --set mesh_res_scale={cfg.mesh_res_scale / 2:g}), data_device="
        f"{cfg.data_device} (keep images on the CPU), train_res={cfg.train_res}, densify_max_gaussians="
        f"{cfg.densify_max_gaussians}, chunk_elements={cfg.chunk_elements} (splat compositing), "
        f"mesh_chunk_views={cfg.mesh_chunk_views}, tet_chunk={cfg.tet_chunk}, batch={cfg.batch}, "
        f"photo_refine_views={cfg.photo_refine_views} (views a step of the mesh's photometric refinement; "
        f"--set photo_refine_steps=0 skips it), photo_refine_max_faces={cfg.photo_refine_max_faces} (its edge "
        f"splits, photo_refine_subdivide_px={cfg.photo_refine_subdivide_px:g})")


def _load_checkpoint(checkpointer: Checkpointer, cfg: MiloConfig) -> dict:
    path = checkpointer.path
    try:
        ck = checkpointer.load()
    except Exception as exc:  # noqa: BLE001 - torch.load raises many types on corrupt files
        raise ConfigError(f"--resume: {path} is unreadable or corrupt ({type(exc).__name__}); start again "
                          "without --resume (use --overwrite) or restore the file") from None
    if ck is None:
        raise ConfigError(f"--resume: no {CHECKPOINT_NAME} in {path.parent if path else None}; run without "
                          "--resume first")
    if not isinstance(ck, dict) or ck.get("method") != "milo" or "params" not in ck:
        raise ConfigError(f"--resume: {path} is not a checkpoint of --method milo")
    saved = ck.get("config", {})
    for name in SHAPE_FIELDS:
        if name in saved and saved[name] != getattr(cfg, name):
            raise ConfigError(f"--resume: config field {name!r} was {saved[name]!r} in the checkpoint and is "
                              f"{getattr(cfg, name)!r} now; it cannot change on resume (fixed: "
                              f"{', '.join(SHAPE_FIELDS)})")
    return ck


def _preview_writer(out: Optional[Path], problem, cfg: MiloConfig, device, trainer, reg):
    if out is None or len(problem.test) == 0:
        return None

    def write(step: int, params: dict, sh_degree: int) -> None:
        from meshlift.io.images import write_image
        from meshlift.methods.gaussians.evaluate import render_views
        from meshlift.methods.gaussians.outputs import comparison_panel
        from meshlift.structures.mesh import Mesh

        ours, target = render_views(params, problem.test, sh_degree=sh_degree, background=cfg.background,
                                    near=trainer.near, device=device, backend=cfg.splat_backend, indices=[0])
        bg = torch.ones(3) if cfg.background != "black" else torch.zeros(3)
        if cfg.extract == "delaunay" and reg.active:
            v, f = reg.mesh(params, grad=False)
            mesh_img = render_mesh_views(Mesh(v.float(), f), problem.test, device, bg, indices=[0])[0]
        else:  # the tsdf path: the depth it will fuse, near = bright
            mesh_img = _depth_preview(params, problem.test, cfg, device, trainer)
        img = comparison_panel([ours[0], mesh_img, target[0]],  # enlarged like compare/: small views stay readable
                               ["Gaussians", "mesh" if cfg.extract == "delaunay" and reg.active else "depth", "target"])
        write_image(Path(out) / "images" / f"preview_{step:06d}.png", img)

    return write


def _depth_preview(params: dict, views, cfg: MiloConfig, device, trainer) -> torch.Tensor:
    """``[H, W, 3]`` grey image of the first view's surface depth (1/z normalised; empty pixels black)."""
    from meshlift.methods.milo.tsdf_mesh import render_depths

    d = render_depths(params, views, near=trainer.near, device=device, settings=trainer.settings,
                      backend=cfg.splat_backend, depth=cfg.surface_depth, indices=[0])[0]
    inv = torch.where(d > 0, 1.0 / d.clamp_min(1e-12), torch.zeros_like(d))
    inv = inv / inv.max().clamp_min(1e-12)
    return inv[..., None].expand(-1, -1, 3).contiguous()


def _reinit_function(cfg: MiloConfig, problem, trainer, device):
    """``params -> (points, colours)`` of the depth re-initialisation (``reinit_points``; 0 = the current count)."""
    from meshlift.methods.milo.depth_reinit import depth_points

    gen = torch.Generator().manual_seed(cfg.seed + 11)

    def fn(params: dict):
        n = cfg.reinit_points or int(params["means"].shape[0])
        return depth_points(params, problem.train, n, near=trainer.near, device=device, settings=trainer.settings,
                            backend=cfg.splat_backend, generator=gen)

    return fn


def _peak_gpu_gb(device: torch.device) -> Optional[float]:
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**30


@kernel_backends
def reconstruct(cfg: MiloConfig, out_dir: Optional[str | Path], *, resume: bool = False, overwrite: bool = False,
                monitor: Optional[Monitor] = None, problem=None, gt_mesh=None, callbacks=None) -> MiloResult:
    """Run MILo on ``cfg.data`` (or ``problem``), write ``out_dir`` (module docstring).

    Args:
        cfg: the validated configuration; out_dir: output folder, or None (write nothing).
        resume: continue from ``out_dir/checkpoint.pt`` (a finished run is extracted and exported again).
        overwrite: replace a previous run; monitor: progress sink.
        problem, gt_mesh: pre-loaded views and known truth (tests), instead of reading ``cfg.data``.
        callbacks: :class:`~meshlift.methods.gaussians.trainer.TrainCallbacks`.

    Raises:
        ConfigError, DatasetError, MeshError: bad configuration, folder, checkpoint or input; an empty mesh.
        DivergenceError: training diverged twice. OutOfMemoryError: with the knobs and their values.
    """
    from meshlift.methods.gaussians import outputs
    from meshlift.methods.gaussians.config import densify_strategy
    from meshlift.methods.gaussians.reconstruct import check_out_dir
    from meshlift.methods.gaussians.trainer import GaussianTrainer
    from meshlift.methods.gaussians.surface import SurfaceRegularizer
    from meshlift.methods.milo import extract
    from meshlift.methods.milo.mesh_in_loop import MeshInTheLoop
    from meshlift.methods.milo.strategy import MiloStrategy, importance_function

    monitor = monitor or Monitor()
    out = Path(out_dir) if out_dir is not None else None
    check_out_dir(out, resume=resume, overwrite=overwrite)
    device = resolve_device(cfg.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    # first run on an empty Triton cache: the recorded kernel variants compile in background processes
    warmup = precompile.start("milo", device, log=monitor.log)
    checkpointer = Checkpointer(out)
    checkpoint = _load_checkpoint(checkpointer, cfg) if resume else None
    torch.manual_seed(cfg.seed)
    budget = TimeBudget(cfg.time_budget_s, BUDGET_FRACTIONS)
    for w in inert_settings(cfg):  # at the start as well as in the summary: before the run spends its time
        monitor.log(f"warning: {w}")
    where, trainer, reg = "loading the data", None, None
    try:
        if problem is None:
            monitor.log(f"loading {cfg.data}")
            problem, gt_mesh = load_problem(cfg)
        if len(problem.train) < 2:  # before training: no fusion, no Delaunay of pivots seen twice, no region
            from meshlift.errors import DatasetError

            raise DatasetError(
                f"{cfg.data}: {len(problem.train)} training view(s) ({len(problem.test)} held out as test views): a "
                "mesh needs at least 2 views of every surface, and several for a usable one (8 or more); add photos "
                "(without a test split in the dataset, every 8th photo is held out for testing)")
        if cfg.extract == "tsdf":
            from meshlift.methods.milo.tsdf_mesh import check_bbox

            check_bbox(cfg, problem)  # before training: a box no camera sees is an error now, not in 10 minutes
        # the stages' costs (the tsdf path's for good; the Delaunay path's follow its mesh once it exists, below)
        costs = budget_costs(cfg, problem, device, None, known_truth=gt_mesh is not None)
        if checkpoint is None or int(checkpoint.get("step", 0)) < cfg.steps:  # training to do: it must get time
            check_pass_time(budget.deadline("train", costs), cfg.time_budget_s, "training")  # before out/ is written
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            if overwrite and not resume:
                for name in (CHECKPOINT_NAME, "metrics.json"):
                    (out / name).unlink(missing_ok=True)
            outputs.write_config(out, cfg)
        monitor.log(f"{problem.views_line()} at {problem.train.width}x"
                    f"{problem.train.height}, device {device}; "
                    + (_fusion_line(cfg, problem, gt_mesh is not None) if cfg.extract == "tsdf" else
                       f"mesh budget {num_mesh_gaussians(cfg):,} Gaussians ({9 * num_mesh_gaussians(cfg):,} pivots)"))
        base = densify_strategy(cfg, problem.scene_scale) if cfg.densify else None
        kw = {} if base is None else {k: getattr(base, k) for k in base.__dataclass_fields__ if k != "history"}
        if base is None:  # no 3DGS densification: only MILo's events
            kw = dict(refine_stop=0, reset_every=0, scene_scale=float(problem.scene_scale))
        strategy = MiloStrategy(**kw, sampling_step=cfg.sampling_step, sampling_factor=cfg.sampling_factor,
                                prune_step=cfg.prune_step, prune_cdf=cfg.prune_cdf, seed=cfg.seed,
                                reinit_step=cfg.reinit_step, reinit_opacity=cfg.init_opacity,
                                reinit_scale=cfg.init_scale)
        strategy.check()
        trainer = GaussianTrainer(cfg, problem, device, monitor=monitor, checkpointer=checkpointer,
                                  callbacks=callbacks, strategy=strategy, method="milo")
        strategy.reinit_fn = _reinit_function(cfg, problem, trainer, device)
        strategy.importance_fn = importance_function(problem.train, cfg.imp_metric, near=trainer.near,
                                                     device=device, settings=trainer.settings,
                                                     backend=cfg.splat_backend)
        tsdf = cfg.extract == "tsdf"
        if tsdf:  # surface-aligned Gaussians; the mesh is fused from their depth after training
            reg = SurfaceRegularizer(problem.scene_scale, flatten_weight=cfg.flatten_weight,
                                     flatten_start=cfg.flatten_start, depth_normal_weight=cfg.depth_normal_weight,
                                     depth_normal_start=cfg.depth_normal_start, depth=cfg.surface_depth,
                                     multiview_weight=cfg.multiview_weight, multiview_start=cfg.multiview_start,
                                     multiview_every=cfg.multiview_every, multiview_neighbours=cfg.multiview_neighbours,
                                     multiview_max_error=cfg.multiview_max_error)
        else:
            reg = MeshInTheLoop(cfg, problem, device, monitor=monitor, settings=trainer.settings, near=trainer.near)
        trainer.regularizer = reg
        trainer.preview = _preview_writer(out, problem, cfg, device, trainer, reg)
        where = "training (surface-aligned Gaussians)" if tsdf else "training (Gaussians + mesh in the loop)"
        if not tsdf:
            costs = budget_costs(cfg, problem, device, reg, known_truth=gt_mesh is not None)
        trainer.train(checkpoint=checkpoint, deadline=budget.deadline("train", costs))
        state = trainer.state
        where = "mesh extraction"
        t_ex = time.perf_counter()
        if tsdf:
            from meshlift.methods.milo.tsdf_mesh import extract_assets

            product = extract_assets(cfg, trainer, problem, device, monitor, costs=costs, budget=budget,
                                     mesh_input=gt_mesh is not None)
        else:
            product = _delaunay_assets(cfg, trainer, problem, device, monitor, reg, costs, budget)
        state.timings["extract_s"] = time.perf_counter() - t_ex
        reg.close()
        where = "evaluation"
        t_eval = time.perf_counter()
        metrics, ours, targets, mesh_imgs = _evaluate(cfg, trainer, problem, device, strategy, product, gt_mesh)
        state.timings["eval_s"] = time.perf_counter() - t_eval
        if tsdf and (mv := reg.multiview_summary()):  # PGSR's multi-view term ran: its mean error and coverage
            metrics["multiview"] = mv
            monitor.log("multi-view term: {calls} uses, mean loss {mean_loss_px:.4f} px, mean used fraction "
                        "{mean_used_fraction:.3f}".format(**metrics["multiview"]))
        state.timings["total_s"] = time.perf_counter() - budget.t_start
        metrics["timings"] = dict(state.timings)
        metrics["wall_time_s"] = state.timings["total_s"]
        metrics["peak_gpu_memory_gb"] = _peak_gpu_gb(device)
        gaussians = trainer.gaussians()
        colored, textured, scene_colored = product.colored, product.textured, product.scene_colored
        if gt_mesh is not None:  # a mesh input trains in its normalised frame: export in the input's frame
            colored, textured, scene_colored, gaussians = _to_input_frame(
                (colored, textured, scene_colored, gaussians), problem.world_to_normalized)
            metrics["frame"] = ("exported mesh, PLY and Gaussians in the input mesh's frame; Chamfer-L1 in its "
                                "normalised frame (longest side 2)")
        colored, textured, scene_colored = _exports_up(cfg, metrics, (colored, textured, scene_colored))
        files: dict = {}
        if out is not None:
            where = "export"
            files = extract.write_meshes(out, colored, textured)
            if scene_colored is not None:
                from meshlift.io.mesh import save_mesh

                files["scene_mesh_ply"] = save_mesh(out / "scene_mesh.ply", scene_colored)[0]
            if cfg.render_test:
                from meshlift.methods.gaussians.outputs import _write_png_atomic

                (out / "mesh_renders").mkdir(parents=True, exist_ok=True)
                for name, img in zip(problem.test.names, mesh_imgs):
                    _write_png_atomic(out / "mesh_renders" / f"{name}.png", img)
                files["mesh_renders"] = out / "mesh_renders"
                if ours is not None and targets is not None and len(ours) == len(mesh_imgs):
                    from meshlift.methods.gaussians.outputs import comparison_panel

                    (out / "compare").mkdir(parents=True, exist_ok=True)
                    for name, m_img, g_img, t_img in zip(problem.test.names, mesh_imgs, ours, targets):
                        _write_png_atomic(out / "compare" / f"{name}.png",
                                          comparison_panel([m_img, g_img, t_img], ["mesh", "Gaussians", "target"]))
                    files["compare"] = out / "compare"
            files.update(outputs.write_outputs(out, gaussians, metrics, state.history, cfg, ours=ours,
                                               targets=targets, names=problem.test.names))
            from meshlift.io.jsonfile import write_json

            metrics["outputs"] = {k: str(Path(v).relative_to(out)) for k, v in files.items()}
            write_json(out / "metrics.json", metrics)
    except MeshliftError:
        if reg is not None:
            reg.close()
        raise
    except Exception as exc:  # noqa: BLE001 - only memory errors are translated, the rest re-raised
        if reg is not None:
            reg.close()
        if is_oom(exc):
            raise oom_error(cfg, where, trainer.num_gaussians if trainer is not None else 0) from exc
        raise
    finally:
        if warmup is not None:
            warmup.close()
    return MiloResult(textured, gaussians, metrics, out, files, list(state.history))


def _delaunay_assets(cfg: MiloConfig, trainer, problem, device, monitor, reg, costs, budget):
    """MILo's extraction (``extract=delaunay``): occupancy refinement, marching tets, cleaning, colours, texture."""
    from meshlift.methods.milo import extract

    if not reg.active:
        monitor.log(f"the mesh was not in the loop yet (step {trainer.step} < mesh_start {cfg.mesh_start}); "
                    "starting it for the extraction")
        reg.start(trainer.step, trainer.params)
    refine = extract.refine_occupancy(reg, trainer.params, cfg.extract_steps, cfg.extract_labels_every,
                                      sampler=trainer.sampler, monitor=monitor, seed=cfg.seed,
                                      deadline=budget.deadline("extract", costs))
    mesh, mrep = extract.final_mesh(reg, trainer.params, keep_components=cfg.keep_components,
                                    simplify=cfg.simplify, min_component_faces=cfg.min_component_faces)
    monitor.log(f"mesh: {mrep['vertices']:,} vertices, {mrep['faces']:,} faces (raw {mrep['raw_faces']:,}); "
                "colouring and baking the albedo texture")
    colored, textured, crep = extract.color_and_texture(cfg, mesh, problem, device, monitor, costs, budget)
    extra = {"occupancy_refinement": refine, "mesh_gaussians": int(reg.idx.numel()), "pivots": int(9 * reg.idx.numel()),
             "tets": int(reg.tets.shape[0]), "triangulations": reg.triangulations}
    return extract.MeshProduct(colored, textured, textured, mesh, {**mrep, **crep}, extra)


def _evaluate(cfg: MiloConfig, trainer, problem, device, strategy, product, gt_mesh) -> tuple:
    """``(metrics, gaussian renders, targets, mesh renders)`` of the test views (module docstring, step 5)."""
    from meshlift.methods.gaussians.evaluate import eval_background, image_metrics, render_views

    ours, targets = render_views(trainer.params, problem.test, sh_degree=trainer.eval_sh_degree,
                                 background=cfg.background, near=trainer.near, device=device,
                                 settings=trainer.settings, backend=cfg.splat_backend)
    gauss = image_metrics(ours, targets, with_lpips=cfg.lpips, with_cc=True)
    sh0 = gauss  # the view-independent render (SH degree 0): what a diffuse mesh is compared with (step 5)
    if trainer.eval_sh_degree > 0:
        sh0 = image_metrics(render_views(trainer.params, problem.test, sh_degree=0, background=cfg.background,
                                         near=trainer.near, device=device, settings=trainer.settings,
                                         backend=cfg.splat_backend)[0], targets, with_lpips=False)
    bg = torch.ones(3) if eval_background(cfg.background) == "white" else torch.zeros(3)
    mesh_imgs = render_mesh_views(product.eval_mesh, problem.test, device, bg, supersample=cfg.mesh_supersample)
    mesh_m = image_metrics(mesh_imgs, targets, with_lpips=cfg.lpips, with_cc=True)
    rep = product.report
    metrics = {
        "method": "milo", "extract": cfg.extract,
        "mesh_psnr": mesh_m["psnr"], "mesh_ssim": mesh_m["ssim"], "mesh_lpips": mesh_m["lpips"],
        "gaussian_psnr": gauss["psnr"], "gaussian_ssim": gauss["ssim"], "gaussian_lpips": gauss["lpips"],
        "mesh_psnr_per_view": mesh_m["psnr_per_view"], "gaussian_psnr_per_view": gauss["psnr_per_view"],
        "gaussian_psnr_sh0": sh0["psnr"], "gaussian_psnr_sh0_per_view": sh0["psnr_per_view"],
        "mesh_psnr_cc": mesh_m["psnr_cc"], "gaussian_psnr_cc": gauss["psnr_cc"],  # per-view colour map (metrics)
        "mesh_evaluated": ("whole-scene mesh (vertex colours" + (", view-dependent)" if "v_sh_rest" in getattr(
            product.eval_mesh, "extras", {}) else ")")) if product.eval_mesh is product.scene_colored
        else "the asset (baked albedo texture)",
        "vertices": int(product.colored.v_pos.shape[0]), "faces": int(product.colored.num_faces),
        "mesh_report": rep, "background": eval_background(cfg.background), "masked": problem.test.alpha is not None,
        "test_views": len(problem.test), "resolution": [problem.train.width, problem.train.height],
        "gaussians": trainer.num_gaussians, "mesh_gaussians": 0, "pivots": 0, "tets": 0, "triangulations": 0,
        "occupancy_refinement": None, "mesh_supersample": cfg.mesh_supersample,  # samples per pixel side
        "steps": trainer.step, "steps_configured": cfg.steps, "scene_scale": trainer.scene_scale,
        "frame": "normalised frame of the mesh" if gt_mesh is not None else "dataset world frame",
        "nan_recoveries": trainer.recoveries, "device": str(device), "splat_backend": cfg.splat_backend,
        "strategy_events": [list(e) for e in strategy.events], "warnings": [],
    }
    metrics["warnings"] += product.extra.get("warnings", []) + inert_settings(cfg)
    metrics.update({k: v for k, v in product.extra.items() if k != "warnings"})
    if "v_sh_rest" in getattr(product.eval_mesh, "extras", {}):  # view-dependent colours: also without them
        from meshlift.shading.view_colors import sh_degree_of

        diffuse = image_metrics(render_mesh_views(product.eval_mesh, problem.test, device, bg, view_dependent=False,
                                                  supersample=cfg.mesh_supersample), targets, with_lpips=False)
        metrics.update(mesh_psnr_diffuse=diffuse["psnr"], mesh_psnr_diffuse_per_view=diffuse["psnr_per_view"],
                       mesh_sh_degree=sh_degree_of(product.eval_mesh.extras["v_sh_rest"]))
    if product.eval_unrefined is not None:  # the same views, the mesh before the photometric refinement
        before = image_metrics(render_mesh_views(product.eval_unrefined, problem.test, device, bg,
                                                 supersample=cfg.mesh_supersample), targets, with_lpips=False)
        metrics["mesh_psnr_unrefined"] = before["psnr"]
        metrics["mesh_ssim_unrefined"] = before["ssim"]
        metrics["mesh_psnr_unrefined_per_view"] = before["psnr_per_view"]
    if product.scene_colored is not None:
        metrics["scene_vertices"] = int(product.scene_colored.v_pos.shape[0])
        metrics["scene_faces"] = int(product.scene_colored.num_faces)
    _check_results(metrics, cfg, problem, trainer, ours, targets, mesh_imgs, float(bg[0]))
    if gt_mesh is not None:
        from meshlift.metrics.geometry import mesh_metrics

        box = product.extra.get("eval_box")  # an object in an unmasked scene: both sides cut to its box
        g = mesh_metrics(product.geometry, gt_mesh, threshold_frac=0.01, n_samples=cfg.eval_samples,
                         crop_box=None if box is None else (box[0], box[1]))
        metrics.update({"chamfer_l1": g["chamfer_l1"], "fscore": g["fscore"], "precision": g["precision"],
                        "recall": g["recall"], "normal_consistency": g["normal_consistency"],
                        "fscore_threshold": g["threshold"],
                        "truth_holes": gt_mesh.extras.get("truth_holes")})
    return metrics, ours, targets, mesh_imgs


def _check_results(metrics: dict, cfg: MiloConfig, problem, trainer, ours, targets, mesh_imgs, bg: float) -> None:
    """A mesh far below its Gaussians, test renders that show nothing (mesh or Gaussians), a test PSNR far
    below the training one: ``warnings`` in ``metrics`` (:mod:`meshlift.methods.result_checks`)."""
    from meshlift.methods.result_checks import add_warnings, blank_views, blank_views_warning, check_test_views
    from meshlift.methods.result_checks import budget_cut, mesh_below_gaussians

    names = problem.test.names
    hint = "look at mesh_renders/ and try " + ("--set extract=tsdf" if cfg.extract == "delaunay" else "more steps, a "
                                               "wider fusion band (tsdf_trunc_pixels, scene_trunc_pixels), or --bbox around the object")
    add_warnings(metrics, [budget_cut(metrics.get("steps", cfg.steps), cfg.steps, cfg.time_budget_s),
                           mesh_below_gaussians(metrics["mesh_psnr"], metrics["gaussian_psnr"], hint=hint,
                                                gaussian_psnr_sh0=metrics.get("gaussian_psnr_sh0"),
                                                mesh_psnr_diffuse=metrics.get("mesh_psnr_diffuse"))])
    blank = metrics["blank_views"] = blank_views(mesh_imgs, targets, bg, names)
    add_warnings(metrics, [blank_views_warning(blank, len(names), subject="the mesh", hint="the mesh lies outside "
                                               "what the test cameras see; look at mesh_renders/ and try --bbox "
                                               "around the object")])
    check_test_views(
        metrics, renders=ours, targets=targets, background=bg, names=names, history=trainer.state.history,
        test_psnr=metrics["gaussian_psnr"], subject="the Gaussians", blank_key="gaussian_blank_views",
        blank_hint="the test cameras are not in the training views' world frame (the dataset's poses), or "
        "training removed the Gaussians they look at; compare renders/ with gt/",
        gap_hint="check that the test split's poses are in the training views' frame (meshlift inspect), that the "
        "training views surround what the test views see, and compare renders/ with gt/")


def _fusion_line(cfg: MiloConfig, problem, mesh_input: bool) -> str:
    """The run header's words on the fusion grids (:func:`meshlift.methods.milo.budget.tsdf_grids`): one grid
    for an object, the whole scene's (plus its contracted shell) and the asset's for an unmasked capture."""
    import math

    from meshlift.methods.milo.budget import tsdf_grids
    from meshlift.methods.milo.tsdf_mesh import fusion_kind

    res = int(cfg.tsdf_resolution)
    if (mesh_input and problem.eval_box is None) or fusion_kind(cfg, problem) != "scene":
        return f"mesh by TSDF fusion at {res}³"
    grids = tsdf_grids(cfg, problem, mesh_input=mesh_input)
    scene = math.isqrt(int(grids[0])) // 2
    return (f"mesh by TSDF fusion: whole scene at {scene}³ (+ its contracted shell)"
            + (f", asset at {res}³" if cfg.object_asset else ""))


def _exports_up(cfg: MiloConfig, metrics: dict, meshes: tuple) -> tuple:
    """The exported meshes turned so the up axis of ``cfg.up_axis`` becomes glTF's +Y (``keep``: unchanged).

    ``auto`` takes the nearest axis to the region of interest's up estimated from the cameras
    (``metrics["region"]["roi"]["up"]``); without one (a mesh input, an explicit ``bbox``) the exports are kept
    as they are, with a note. Records ``metrics["up_axis_conversion"]`` (from, to, matrix) or the reason it
    was not applied. Metrics are computed before, in the dataset's frame."""
    from meshlift.mesh.orient import nearest_up_axis, to_y_up

    axis = cfg.up_axis
    if axis == "keep":
        return meshes
    if axis == "auto":
        up = ((metrics.get("region") or {}).get("roi") or {}).get("up")
        if up is None:
            metrics["up_axis_conversion"] = {"applied": False, "reason": "up_axis=auto: no up estimated from the "
                                             "cameras (a mesh input or an explicit bbox); pass --up AXIS"}
            return meshes
        axis, angle = nearest_up_axis(up)
        metrics["up_axis_estimate"] = {"up": [float(x) for x in up], "axis": axis, "angle_deg": angle}
    turned = tuple(None if m is None else to_y_up(m, axis) for m in meshes)
    metrics["up_axis_conversion"] = next(m.extras["up_axis_conversion"] for m in turned if m is not None)
    metrics["frame"] = (f"exported meshes turned {metrics['up_axis_conversion']['from']} -> +Y (up_axis="
                        f"{cfg.up_axis}); metrics and point_cloud.ply in the {metrics.get('frame', 'dataset world frame')}")
    return turned


def _to_input_frame(items: tuple, world_to_normalized: torch.Tensor) -> tuple:
    """Meshes and :class:`~meshlift.structures.gaussians.Gaussians` of the normalised frame mapped back by
    the inverse of ``world_to_normalized`` (a uniform scale + translation for mesh inputs,
    :mod:`meshlift.data.synthetic`): positions and means by the similarity, Gaussian log-scales shifted by
    its log scale (rotations unchanged: the normalisation has none; anything else raises ConfigError)."""
    import dataclasses as dc
    import math as _math

    from meshlift.geometry.similarity import transform_mesh
    from meshlift.structures.gaussians import Gaussians

    S = torch.linalg.inv(torch.as_tensor(world_to_normalized, dtype=torch.float64).cpu())
    A = S[:3, :3]
    s = float(torch.det(A).abs()) ** (1.0 / 3.0)
    if not torch.allclose(A, s * torch.eye(3, dtype=torch.float64), atol=1e-9 * max(s, 1.0)):
        raise ConfigError("MILo: the normalisation of a mesh input must be a uniform scale + translation")
    out = []
    for x in items:
        if isinstance(x, Gaussians):
            means = (x.means.double() * s + S[:3, 3]).to(x.means.dtype)
            out.append(dc.replace(x, means=means, log_scales=x.log_scales + _math.log(s)))
        elif x is None:
            out.append(None)
        else:
            out.append(transform_mesh(x, S))
    return tuple(out)


def summary_lines(result: MiloResult) -> list[str]:
    """The lines the CLI prints after a run (rich markup)."""
    m = result.metrics

    def f(x, spec):
        return "n/a" if x is None else format(x, spec)

    lines = [f"[bold]mesh render PSNR[/bold] {f(m['mesh_psnr'], '.2f')} dB  SSIM {f(m['mesh_ssim'], '.4f')}"
             f"  LPIPS {'off (lpips=false)' if m['mesh_lpips'] is None else f(m['mesh_lpips'], '.4f')}"
             f"   [bold]Gaussian PSNR[/bold] {f(m['gaussian_psnr'], '.2f')} dB"
             + (f" (their SH degree 0 term alone, view-independent: {m['gaussian_psnr_sh0']:.2f})"
                if m.get("gaussian_psnr_sh0") is not None and m["gaussian_psnr_sh0"] != m["gaussian_psnr"] else "")
             + f"   ({m['test_views']} views" + (f" on {m['background']}" if m.get("masked", True) else "")
             + (f"; mesh: {m['mesh_evaluated']})" if m.get("mesh_evaluated") else ")"),
             (f"{m['vertices']:,} vertices, {m['faces']:,} faces from {m['pivots']:,} pivots; {m['gaussians']:,} "
              f"Gaussians, {m['steps']} steps, {m['triangulations']} Delaunay runs" if m.get("extract") != "tsdf" else
              f"asset {m['vertices']:,} vertices, {m['faces']:,} faces"
              + (f" (whole scene {m['scene_faces']:,} faces)" if m.get("scene_faces") else "")
              + f"; {m['gaussians']:,} Gaussians, {m['steps']} steps; mesh by TSDF fusion")]
    if m.get("mesh_psnr_unrefined") is not None and m.get("mesh_psnr") is not None:
        d = m["mesh_psnr"] - m["mesh_psnr_unrefined"]
        lines.append(f"photometric refinement (and colour solve) of the whole-scene mesh: "
                     f"{m['mesh_psnr_unrefined']:.2f} -> {m['mesh_psnr']:.2f} dB ({d:+.2f})" + ("" if d >= 0 else
                     "; it lowered the score here: --set photo_refine_steps=0 keeps the fused mesh"))
    elif m.get("extract") == "tsdf" and m.get("scene_faces") and not (m.get("mesh_report") or {}).get("scene_refine"):
        lines.append("[dim]photometric refinement of the whole-scene mesh: off (photo_refine_steps=0; --quick "
                     "skips it: --set photo_refine_steps=300 runs it)[/dim]")
    if m.get("mesh_psnr_diffuse") is not None:
        lines.append(f"view-dependent colours (SH degree {m['mesh_sh_degree']}) of the whole-scene mesh: its "
                     "view-independent colours alone (scene_mesh.ply, what a GLB holds) render "
                     f"{m['mesh_psnr_diffuse']:.2f} dB")
    for w in m.get("warnings", []):
        lines.append(f"[bold red]warning[/bold red] {w}")
    conv = m.get("up_axis_conversion") or {}
    if conv.get("from"):
        lines.append(f"[dim]exports turned {conv['from']} -> +Y for glTF viewers (--up); metrics and "
                     "point_cloud.ply stay in the dataset's frame[/dim]")
    up = ((m.get("region") or {}).get("roi") or {}).get("up")
    if up is not None and m.get("up_axis_conversion") is None:  # kept in the dataset frame: say which way is up
        from meshlift.mesh.orient import nearest_up_axis

        axis, angle = nearest_up_axis(up)
        if axis != "y":
            lines.append(f"[dim]exports in the dataset's frame, where up is about {axis} (from the cameras, "
                         f"{angle:.0f}° off): glTF viewers show +Y up; --up auto (or --up {axis}) turns them[/dim]")
    if m.get("fscore") is not None:
        lines.append(f"[bold]F-score[/bold] (1% of bbox diagonal) {m['fscore']:.4f}   Chamfer-L1 "
                     f"{f(m['chamfer_l1'], '.5f')}")
    lines.append(f"reconstruction {m['wall_time_s']:.1f} s" + (f", peak GPU memory {m['peak_gpu_memory_gb']:.2f} GB"
                                                          if m.get("peak_gpu_memory_gb") is not None else ""))
    if result.files:
        lines.append(f"[bold]GLB[/bold] {result.files.get('mesh_glb')}   PLY {result.files.get('mesh_ply')}   "
                     f"metrics {result.files.get('metrics')}")
        if result.files.get("scene_mesh_ply"):
            lines.append(f"whole-scene mesh {result.files['scene_mesh_ply']}")
        if result.files.get("metrics"):
            from meshlift.methods.spec import look_line

            look = look_line(Path(result.files["metrics"]).parent, [
                ("compare/*.png", "mesh | Gaussians | target at a test view"),
                ("images/preview_*.png", "Gaussians | depth | target"), ("loss_curve.png", "the losses")])
            if look:
                lines.append(look)
    return lines
