"""MILo end to end (``--method milo``): importance sampling / cdf pruning counts, the extraction on a known SDF,
the trainer hooks, resume, config checks, the OOM message, the CLI, and (slow) a run on a tiny sphere scene
scored by F-score against the true sphere."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from _milo_scene import SPHERE_RADIUS, sphere_problem, write_sphere_dataset
from meshlift.errors import ConfigError, OutOfMemoryError
from meshlift.methods.gaussians.strategy import DefaultStrategy
from meshlift.methods.gaussians.trainer import TrainCallbacks
from meshlift.methods.milo.config import MiloConfig, apply_dict, inert_settings, num_mesh_gaussians
from meshlift.methods.result_checks import budget_cut
from meshlift.methods.milo.presets import get_preset
from meshlift.methods.gaussians.outputs import CAPTION_HEIGHT
from meshlift.methods.milo.reconstruct import MiloResult, oom_error, reconstruct, summary_lines
from meshlift.methods.milo.strategy import (MiloStrategy, cdf_keep_mask, importance_scores, sample_by_importance)

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def scene():
    return sphere_problem(size=24, n_train=8, n_test=2)


def _micro(**kw) -> MiloConfig:
    """A run of a few steps that passes through every stage (densify, sample, prune, mesh, extraction)."""
    base = dataclasses.replace(
        get_preset("milo_tiny"), steps=14, num_random=200, densify_refine_start=2, densify_refine_every=2,
        densify_refine_stop=5, reinit_step=3, reinit_points=150, sampling_step=5, prune_step=7, depth_normal_start=5, mesh_start=8, delaunay_every=3,
        sdf_reset_every=3, sdf_reset_stop=12, labels_every=2, extract_steps=3, extract_labels_every=2,
        texture_res=32, eval_samples=2000, checkpoint_every=4, preview_every=7, render_test=True,
        extract="delaunay")
    return dataclasses.replace(base, **kw)


# ---- importance sampling / pruning ---------------------------------------------------------------------------

def test_cdf_keep_mask_and_sampling_rules():
    imp = torch.tensor([1.0, 5.0, 0.0, 3.0, 1.0])
    keep = cdf_keep_mask(imp, 0.8)  # 5 + 3 = 8 of 10 reaches 0.8
    assert keep.tolist() == [False, True, False, True, False]
    assert cdf_keep_mask(imp, 1.0).sum() == 4  # zero importance is never needed
    idx = sample_by_importance(imp, 10, torch.Generator().manual_seed(0))
    assert idx.tolist() == [0, 1, 3, 4]  # clamped to the non-zero entries, distinct, sorted
    # draws are proportional to importance: the first of one draw from (9, 1) is index 0 about 90% of the time
    g = torch.Generator().manual_seed(1)
    hits = sum(int(sample_by_importance(torch.tensor([9.0, 1.0]), 1, g)[0] == 0) for _ in range(2000))
    assert 0.87 < hits / 2000 < 0.93
    with pytest.raises(ConfigError):
        sample_by_importance(torch.tensor([1.0, -1.0]), 1)


def _toy_params(problem, n_hidden=5):
    """Gaussians on the sphere plus ``n_hidden`` fully transparent ones (culled: importance 0)."""
    g = torch.Generator().manual_seed(3)
    d = torch.nn.functional.normalize(torch.randn(120, 3, generator=g), dim=1) * SPHERE_RADIUS
    means = torch.cat([d, 0.5 * d[:n_hidden]])
    n = means.shape[0]
    opa = torch.cat([torch.full((120,), 1.0), torch.full((n_hidden,), -12.0)])
    t = {"means": means, "quats": torch.tensor([[1.0, 0, 0, 0]]).repeat(n, 1),
         "log_scales": torch.full((n, 3), math.log(0.08)), "opacity_logits": opa,
         "sh0": torch.zeros(n, 1, 3), "shN": torch.zeros(n, 0, 3)}
    params = {k: torch.nn.Parameter(v.clone()) for k, v in t.items()}
    opts = {k: torch.optim.Adam([p], lr=1e-3) for k, p in params.items()}
    for k, p in params.items():  # give every Adam a state whose rows must follow the Gaussians
        p.grad = torch.arange(p.shape[0], dtype=torch.float32).reshape(-1, *([1] * (p.ndim - 1))).expand_as(p).clone()
        opts[k].step()
    return params, opts


@pytest.mark.parametrize("metric", ["indoor", "outdoor"])
def test_importance_sampling_then_cdf_pruning_counts(scene, metric):
    """At sampling_step the set shrinks to floor(factor · N · nonzero/N) Gaussians, all with non-zero
    importance; at prune_step to the 0.99-cdf set; the Adam moments follow the kept rows."""
    problem, _ = scene
    params, opts = _toy_params(problem)
    imp_fn = lambda p: importance_scores(p, problem.train, metric, near=0.01, device=CPU)[0]  # noqa: E731
    imp0 = imp_fn(params)
    n0, nz0 = imp0.numel(), int((imp0 > 0).sum())
    assert nz0 <= n0 - 5 and (imp0[-5:] == 0).all()  # transparent Gaussians score 0
    s = MiloStrategy(refine_stop=0, reset_every=0, sampling_step=10, sampling_factor=0.5, prune_step=20,
                     prune_cdf=0.99, importance_fn=imp_fn)
    state = s.initialize_state()
    info = {"means2d": torch.zeros(1, n0, 2), "radii": torch.zeros(1, n0, 2), "width": 24, "height": 24,
            "n_cameras": 1}
    s.step_post_backward(params, opts, state, 9, info)
    assert params["means"].shape[0] == n0
    before_rows = params["means"].detach().clone()
    s.step_post_backward(params, opts, state, 10, info)
    k = int(0.5 * n0 * (nz0 / n0))
    assert params["means"].shape[0] == k
    # every kept Gaussian is one of the originals with non-zero importance
    match = (params["means"].detach()[:, None] == before_rows[None]).all(-1)
    src = match.float().argmax(1)
    assert match.any(1).all() and (imp0[src] > 0).all()
    for name, p in params.items():
        st = opts[name].state[p]
        assert st["exp_avg"].shape == p.shape
        if p[0].numel():
            assert torch.allclose(st["exp_avg"].reshape(len(src), -1)[:, 0], 0.1 * src.float())  # row r came from src[r]
    imp1 = imp_fn(params)
    expect = int(cdf_keep_mask(imp1, 0.99).sum())
    s.step_post_backward(params, opts, state, 20, {**info, "means2d": torch.zeros(1, k, 2),
                                                   "radii": torch.zeros(1, k, 2)})
    assert params["means"].shape[0] == expect <= k
    assert [e[1] for e in s.events] == ["sample", "prune"] and s.events[0][2:] == (n0, k)


# ---- extraction on a known SDF --------------------------------------------------------------------------------

class _KnownSDF:
    """Stands in for MeshInTheLoop: pivots around a sphere with the analytic SDF (what extraction reads)."""

    def __init__(self, problem, radius=SPHERE_RADIUS, n=6000):
        from meshlift.isosurface.delaunay import delaunay_tets

        g = torch.Generator().manual_seed(0)
        d = torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1)
        r = radius * (0.6 + 0.8 * torch.rand(n, 1, generator=g))
        self.points = torch.cat([d * r, torch.zeros(1, 3)])
        self.sdf_values = self.points.norm(dim=1) - radius
        self.tets = delaunay_tets(self.points).tets
        self.problem, self.near = problem, 0.01

    def mesh(self, params, grad=False):
        from meshlift.isosurface.dmtet import marching_tets

        return marching_tets(self.points, self.sdf_values, self.tets)


def test_extraction_on_known_sdf_is_closed_and_coloured(scene, tmp_path):
    from meshlift.io.mesh import load_mesh
    from meshlift.mesh.clean import face_areas
    from meshlift.methods.milo import extract

    problem, gt = scene
    reg = _KnownSDF(problem)
    mesh, rep = extract.final_mesh(reg, {}, keep_components=0.02)
    v, f = mesh.v_pos.double().numpy(), mesh.t_pos_idx.numpy()
    area = face_areas(v, f).sum()
    assert abs(area / (4 * math.pi * SPHERE_RADIUS**2) - 1) < 0.06, area
    # closed: every edge in exactly two faces
    e = torch.tensor(f)[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2).sort(1).values
    _, counts = torch.unique(e, dim=0, return_counts=True)
    assert (counts == 2).all()
    colored, textured, crep = extract.texture_mesh(mesh, problem.train, CPU, tol=0.05, texture_res=64)
    # the sphere's (linear) vertex colour is the gradient of _milo_scene.sphere_mesh: compare at the vertices
    p = colored.v_pos
    want = (0.25 + 0.5 * (p / SPHERE_RADIUS + 1) / 2).clamp(0, 1)
    got = colored.v_color[:, :3]
    seen = crep["vertices_seen_frac"]
    assert seen > 0.7 and (got - want).abs().mean() < 0.08
    assert textured.material is not None and textured.material.kd.shape == (64, 64, 3)
    files = extract.write_meshes(tmp_path, colored, textured)
    assert {p.name for p in files.values()} == {"mesh.ply", "mesh.obj", "mesh.glb"}
    back = load_mesh(files["mesh_glb"])
    assert back.num_faces == mesh.num_faces and back.v_tex is not None


# ---- config, OOM ---------------------------------------------------------------------------------------------

def test_config_checks_and_oom_message():
    cfg = get_preset("verylowres")
    assert num_mesh_gaussians(cfg) == 30_000
    assert num_mesh_gaussians(apply_dict(cfg, {"mesh_res_scale": "0.5"})) == 15_000
    with pytest.raises(ConfigError, match="mesh_start"):
        apply_dict(cfg, {"mesh_start": "5000"})  # before the 0.99-cdf pruning at 8000
    with pytest.raises(ConfigError, match="imp_metric"):
        apply_dict(cfg, {"imp_metric": "garden"})
    with pytest.raises(ConfigError, match="sampling_factor"):
        apply_dict(cfg, {"sampling_factor": "1.5"})
    cfg = apply_dict(cfg, {"max_fragments": "1000000", "data_device": "cpu"})
    msg = str(oom_error(cfg, "training", 12345))
    assert isinstance(oom_error(cfg, "x", 1), OutOfMemoryError)
    for knob in ("max_fragments=1000000", "mesh_res_scale=1.0", "num_pivots=270000", "data_device=cpu",
                 "train_res=1600", "MILO_RAST_TRI_CHUNK", "MILO_MESH_RES_SCALE", "photo_refine_views=2",
                 "photo_refine_max_faces=24000000"):
        assert knob in msg, (knob, msg)
    # settings the run would never use are named (a fresh-user report: SH terms set under --quick did nothing)
    assert inert_settings(get_preset("verylowres")) == []
    quiet = apply_dict(get_preset("verylowres", quick=True), {"photo_refine_sh_degree": "3"})
    (w,) = inert_settings(quiet)
    assert "photo_refine_sh_degree=3" in w and "photo_refine_steps=0" in w and "photo_refine_steps=300" in w
    assert inert_settings(apply_dict(quiet, {"photo_refine_steps": "300"})) == []
    (w,) = inert_settings(apply_dict(get_preset("verylowres"), {"extract": "delaunay", "photo_refine_subdivide_px": "2"}))
    assert "extract=delaunay" in w and "photo_refine_subdivide_px=2.0" in w
    assert budget_cut(400, 400, 280.0) is None and budget_cut(64, 400, 0.0) is None
    assert "64 of 400 steps (time_budget_s=280)" in budget_cut(64, 400, 280.0)
    (w,) = inert_settings(apply_dict(get_preset("verylowres"), {"photo_refine_subdivide_px": "2",
                                                                 "photo_refine_color_weight": "0"}))
    assert "photo_refine_color_weight=0" in w
    for name in ("verylowres", "lowres", "default", "milo_tiny"):
        q = get_preset(name, quick=True)
        assert q.steps <= 600 and q.train_res <= 64


# ---- end to end (micro) + resume -------------------------------------------------------------------------------

def test_view_independent_gaussian_psnr(scene, tmp_path):
    """With SH above degree 0 the run also scores the Gaussians' view-independent colour (SH degree 0, the
    reference a diffuse mesh is compared with); with degree 0 the two are the same figure (the micro run below)."""
    problem, gt = scene
    r = reconstruct(_micro(sh_degree=1, sh_degree_interval=4, extract="tsdf"), tmp_path / "sh1", problem=problem,
                    gt_mesh=gt)
    m = r.metrics
    assert math.isfinite(m["gaussian_psnr_sh0"]) and len(m["gaussian_psnr_sh0_per_view"]) == m["test_views"]
    assert m["gaussian_psnr_sh0"] != m["gaussian_psnr"]  # a render of its own, not a copy of the degree-1 figure
    # the colour-corrected figures: each view's best affine colour map never lowers its PSNR
    assert m["mesh_psnr_cc"] >= m["mesh_psnr"] - 1e-6 and m["gaussian_psnr_cc"] >= m["gaussian_psnr"] - 1e-6
    line = summary_lines(MiloResult(None, None, m, None, {}, []))[0]
    assert "SH degree 0" in line and f"{m['gaussian_psnr_sh0']:.2f}" in line


def test_micro_run_every_stage_then_resume(scene, tmp_path):
    """A 14-step run through densify → sample → prune → mesh in the loop (background Delaunay, resets,
    labels) → extraction; then --resume to more steps continues from the checkpoint with the mesh state."""
    problem, gt = scene
    out = tmp_path / "run"
    r = reconstruct(_micro(), out, problem=problem, gt_mesh=gt)
    m = r.metrics
    assert m["method"] == "milo" and m["steps"] == 14
    assert [e[1] for e in m["strategy_events"]] == ["reinit", "sample", "prune"]
    assert m["strategy_events"][0][3] == 150  # the re-init drew reinit_points surface points
    assert m["triangulations"] >= 2 and m["faces"] > 0 and m["vertices"] > 0
    assert m["mesh_psnr"] is not None and m["gaussian_psnr"] is not None and m["fscore"] is not None
    # SH degree 0 throughout (milo_tiny): the view-independent figure is the Gaussian one, and not printed twice
    assert m["gaussian_psnr_sh0"] == m["gaussian_psnr"]
    assert "SH degree 0" not in summary_lines(MiloResult(None, None, m, None, {}, []))[0]
    for name in ("mesh.glb", "mesh.obj", "mesh.mtl", "mesh.ply", "texture_kd.png", "point_cloud.ply",
                 "metrics.json", "config.json", "checkpoint.pt", "loss_curve.png"):
        assert (out / name).is_file(), name
    assert list((out / "images").glob("preview_*.png")) and list((out / "mesh_renders").glob("*.png"))
    panels = sorted((out / "compare").glob("*.png"))  # mesh | Gaussians | target, enlarged to be judged
    assert [p.name for p in panels] == [p.name for p in sorted((out / "mesh_renders").glob("*.png"))]
    from PIL import Image
    mesh_w, mesh_h = Image.open(sorted((out / "mesh_renders").glob("*.png"))[0]).size
    w, h = Image.open(panels[0]).size
    h -= CAPTION_HEIGHT  # the strip naming the three panels
    k = h // mesh_h
    assert h >= 270 and h == k * mesh_h and w == k * (3 * mesh_w + 4)
    pw, ph = Image.open(sorted((out / "images").glob("preview_*.png"))[-1]).size
    assert (pw, ph) == (w, h + CAPTION_HEIGHT)  # the training preview is enlarged the same way (Gaussians | mesh | target)
    ck = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ck["method"] == "milo" and ck["regularizer"]["active"] and ck["step"] == 14
    n_mesh = ck["regularizer"]["idx"].numel()
    r2 = reconstruct(_micro(steps=18), out, resume=True, problem=problem, gt_mesh=gt)
    assert r2.metrics["steps"] == 18 and r2.metrics["mesh_gaussians"] == n_mesh
    ck2 = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ck2["step"] == 18
    with pytest.raises(ConfigError, match="num_pivots"):
        reconstruct(_micro(steps=20, num_pivots=900), out, resume=True, problem=problem, gt_mesh=gt)


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_micro_run_under_a_time_budget(scene, tmp_path):
    """A budgeted run passes the budget's deadline objects into training and the occupancy refinement (a
    regression: the refinement compared the clock with a PassDeadline and crashed at its first step)."""
    problem, gt = scene
    r = reconstruct(_micro(time_budget_s=3600.0), tmp_path / "run", problem=problem, gt_mesh=gt)
    assert r.metrics["steps"] == 14 and r.metrics["faces"] > 0
    # a budgeted run unwraps in a time-limited worker; an hour is plenty, so xatlas charts come back
    assert r.metrics["mesh_report"]["unwrap_method"] == "xatlas"


class _Interrupt(Exception):
    pass


class _StopAt(TrainCallbacks):
    def __init__(self, step):
        self.at = step

    def after_step(self, step, trainer):
        if step + 1 == self.at:
            raise _Interrupt()


@pytest.mark.slow
def test_resume_continues_exactly(scene, tmp_path):
    """A run killed at step 11 (checkpoint at 10, mesh in the loop since 8) and resumed ends with the
    Gaussians, SDF and tets of an uninterrupted run (no background triangulation pending at the checkpoint)."""
    problem, gt = scene
    cfg = _micro(steps=13, delaunay_every=50, extract_steps=0, checkpoint_every=10)
    a = reconstruct(cfg, tmp_path / "a", problem=problem, gt_mesh=gt)
    with pytest.raises(_Interrupt):
        reconstruct(cfg, tmp_path / "b", problem=problem, gt_mesh=gt, callbacks=_StopAt(11))
    assert torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)["step"] == 10
    b = reconstruct(cfg, tmp_path / "b", resume=True, problem=problem, gt_mesh=gt)
    for k in ("means", "log_scales", "opacity_logits", "quats"):
        torch.testing.assert_close(getattr(b.gaussians, k), getattr(a.gaussians, k), rtol=0, atol=1e-6)
    ca = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=False)["regularizer"]
    cb = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)["regularizer"]
    torch.testing.assert_close(cb["shift"], ca["shift"], rtol=0, atol=1e-6)
    assert torch.equal(ca["tets"], cb["tets"]) and torch.equal(ca["idx"], cb["idx"])
    assert b.metrics["steps"] == 13


def test_default_strategy_hooks_unchanged_for_plain_gaussians():
    """MiloStrategy with no events behaves as DefaultStrategy (the 3DGS trainer is untouched)."""
    s = MiloStrategy(sampling_step=0, prune_step=0)
    assert isinstance(s, DefaultStrategy) and s.initialize_state() == DefaultStrategy().initialize_state()


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_cli_milo_smoke(tmp_path):
    """`meshlift reconstruct DATA --method milo --preset milo_tiny` on a NeRF-synthetic folder, --help-config."""
    from meshlift.cli.main import main

    data = write_sphere_dataset(tmp_path / "scene", size=24, n_train=8, n_test=2)
    out = tmp_path / "out"
    sets = ["steps=12", "num_random=150", "train_res=0", "densify_refine_start=2", "densify_refine_every=2",
            "densify_refine_stop=4", "sampling_step=4", "prune_step=6", "depth_normal_start=4", "mesh_start=7",
            "delaunay_every=3", "labels_every=2", "sdf_reset_every=3", "sdf_reset_stop=10", "extract_steps=2",
            "texture_res=32", "preview_every=0"]
    args = ["reconstruct", str(data), "--method", "milo", "--preset", "milo_tiny", "--out", str(out),
            "--simplify", "100000"] + [x for s in sets for x in ("--set", s)]
    assert main(args) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["method"] == "milo" and m["steps"] == 12 and m["faces"] > 0
    assert (out / "mesh.glb").is_file() and (out / "mesh.ply").is_file() and (out / "mesh.obj").is_file()
    assert main(["reconstruct", "--method", "milo", "--help-config"]) == 0
    assert main(["reconstruct", str(data), "--method", "nvdiffrec", "--simplify", "10", "--out",
                 str(tmp_path / "x")]) != 0


# ---- the slow end-to-end quality run ---------------------------------------------------------------------------

#: Bars for the slow tiny-scene run (200 CPU steps at 48 px, far from MILo's 18k): F-score and recall at 5% of
#: the bbox diagonal and Chamfer-L1. Measured on this test (2026-12-01, shared CPU): F 0.53, precision 0.50,
#: recall 0.57 at 5%, Chamfer-L1 0.156 (sphere radius 0.8). At 1% the F-score is near 0: the soft,
#: undertrained Gaussians' median depth lies ~0.15 behind the true surface, so the mesh is a shrunken,
#: partly holed sphere. The GPU target (F >= 0.97 at 1% on spot/bob/bunny) is benchmarks/milo_results.py's.
FSCORE_5PCT_BAR = 0.4
RECALL_5PCT_BAR = 0.45
CHAMFER_BAR = 0.25


@pytest.mark.slow
def test_tiny_sphere_end_to_end_fscore(tmp_path):
    from meshlift.metrics.geometry import mesh_metrics

    problem, gt = sphere_problem(size=48, n_train=16, n_test=2)
    cfg = dataclasses.replace(
        get_preset("milo_tiny"), steps=200, densify_refine_stop=60, densify_refine_every=15, sampling_step=60,
        prune_step=100, depth_normal_start=60, mesh_start=101, delaunay_every=40, sdf_reset_every=40,
        sdf_reset_stop=180, labels_every=20, extract_steps=40)
    r = reconstruct(cfg, tmp_path / "run", problem=problem, gt_mesh=gt)
    g = mesh_metrics(r.mesh, gt, threshold_frac=0.05, n_samples=20_000)
    assert g["fscore"] > FSCORE_5PCT_BAR and g["recall"] > RECALL_5PCT_BAR, g
    assert g["chamfer_l1"] < CHAMFER_BAR, g


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_micro_run_on_cuda(scene, tmp_path):
    """The micro run on the GPU (Triton splats, meshlift's rasterizer on CUDA) through every stage."""
    problem, gt = scene
    r = reconstruct(_micro(device="cuda"), tmp_path / "run", problem=problem, gt_mesh=gt)
    assert r.metrics["faces"] > 0 and r.metrics["peak_gpu_memory_gb"] is not None
    assert r.metrics["device"].startswith("cuda")


def test_outputs_of_a_mesh_input_return_to_its_frame():
    """A mesh input trains in its normalised frame; meshes and Gaussians go back by the inverse similarity."""
    from meshlift.methods.milo.reconstruct import _to_input_frame
    from meshlift.structures.gaussians import Gaussians
    from meshlift.structures.mesh import Mesh

    s, t = 0.25, torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    world_to_normalized = torch.eye(4, dtype=torch.float64)
    world_to_normalized[:3, :3] *= 1.0 / s
    world_to_normalized[:3, 3] = -t / s
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]])
    mesh = Mesh(v_pos=v, t_pos_idx=torch.tensor([[0, 1, 2]]))
    g = Gaussians(means=v.clone(), quats=torch.tensor([[1.0, 0, 0, 0]] * 3), log_scales=torch.zeros(3, 3),
                  opacity_logits=torch.zeros(3), sh0=torch.zeros(3, 1, 3), shN=torch.zeros(3, 0, 3))
    m2, none, g2 = _to_input_frame((mesh, None, g), world_to_normalized)
    expect = (v.double() * s + t).float()
    assert none is None and torch.allclose(m2.v_pos, expect) and torch.allclose(g2.means, expect)
    assert torch.allclose(g2.log_scales, torch.full((3, 3), math.log(s))) and torch.equal(g2.quats, g.quats)
    assert torch.equal(mesh.v_pos, v)  # the input is not modified


def test_one_training_view_is_refused_before_training(tmp_path):
    """Too few views: a clear DatasetError naming the counts and what to do, before any training (no checkpoint)."""
    from _milo_scene import sphere_problem
    from meshlift.errors import DatasetError

    problem, gt = sphere_problem(size=16, n_train=1, n_test=1)
    with pytest.raises(DatasetError, match=r"1 training view\(s\) \(1 held out as test views\).*add photos"):
        reconstruct(_micro(), tmp_path / "run", problem=problem, gt_mesh=gt)
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_summary_says_what_the_photometric_refinement_did():
    base = {"mesh_psnr": 19.97, "mesh_ssim": 0.7, "mesh_lpips": None, "gaussian_psnr": 22.1, "test_views": 5,
            "masked": False, "mesh_evaluated": "whole-scene mesh (vertex colours)", "vertices": 10, "faces": 20,
            "gaussians": 100, "steps": 18000, "extract": "tsdf", "scene_faces": 1000, "pivots": 0,
            "triangulations": 0, "mesh_report": {"scene_refine": {"steps": 300}}, "mesh_psnr_unrefined": 19.65,
            "wall_time_s": 461.0}

    def line(m):
        return [x for x in summary_lines(MiloResult(None, None, m, None, {}, [])) if "photometric" in x]

    assert line(base) == ["photometric refinement (and colour solve) of the whole-scene mesh: 19.65 -> 19.97 dB (+0.32)"]
    worse = line({**base, "mesh_psnr": 19.5})[0]
    assert "(-0.15)" in worse and "photo_refine_steps=0" in worse
    off = line({**base, "mesh_psnr_unrefined": None, "mesh_report": {}})[0]
    assert "off" in off and "--set photo_refine_steps=300" in off
