"""3DGS training end to end on a tiny synthetic scene (views rendered by the splat renderer itself):
PSNR improves, densification keeps the optimiser aligned, PLY round trip, bit-exact --resume, the NaN
guard, config validation and the CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from _gaussian_problem import tiny_problem, write_blender_dataset
from meshlift.errors import ConfigError, OutputError
from meshlift.io.gaussian_ply import load_gaussian_ply
from meshlift.methods.gaussians.config import GaussiansConfig, apply_dict, densify_strategy
from meshlift.methods.gaussians.evaluate import image_metrics, render_views
from meshlift.methods.gaussians.presets import get_preset
from meshlift.methods.gaussians.reconstruct import reconstruct
from meshlift.methods.engine import LogLinearLR
from meshlift.methods.gaussians.trainer import (DivergenceError, GaussianTrainer, PARAM_NAMES, ShDegreeSchedule,
                                                TrainCallbacks)
from meshlift.methods.gaussians.views import camera_extent

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def problem():
    return tiny_problem(size=16, n_train=8, n_test=2)


def _cfg(**kw) -> GaussiansConfig:
    base = dataclasses.replace(get_preset("gaussians_tiny"), steps=24, num_random=80, densify_refine_start=4,
                               densify_refine_every=6, densify_refine_stop=20, sh_degree_interval=8,
                               checkpoint_every=8, preview_every=0)
    return dataclasses.replace(base, **kw)


def _test_psnr(trainer, problem, degree):
    ours, tg = render_views(trainer.params, problem.test, sh_degree=degree, background="white", near=trainer.near,
                            device=CPU)
    return image_metrics(ours, tg, with_lpips=False)["psnr"]


def test_training_improves_test_psnr_and_densifies(problem):
    """24 steps on 8 views of 60 known Gaussians: the test PSNR rises by more than 3 dB over the random
    init, the strategy grows the set, and every Adam moment stays aligned with its parameter."""
    tr = GaussianTrainer(_cfg(), problem, CPU)
    tr.init_params()
    before = _test_psnr(tr, problem, 0)
    n0 = tr.num_gaussians
    tr.step = 0
    tr.train(checkpoint=tr.payload())
    after = _test_psnr(tr, problem, tr.eval_sh_degree)
    assert after > before + 3.0, (before, after)
    hist = tr.strategy.history
    assert hist and sum(h[1] + h[2] for h in hist) > 0
    assert tr.num_gaussians != n0 and tr.num_gaussians == hist[-1][4]
    for name in PARAM_NAMES:
        p = tr.params[name]
        opt = tr.optimizers[name]
        assert opt.param_groups[0]["params"][0] is p
        st = opt.state[p]
        assert st["exp_avg"].shape == p.shape and st["exp_avg_sq"].shape == p.shape
        assert torch.isfinite(p).all()


def test_schedules_and_scene_scale():
    lr = LogLinearLR(1e-2, 1e-4, 100)
    assert lr(0) == pytest.approx(1e-2) and lr(100) == pytest.approx(1e-4) and lr(50) == pytest.approx(1e-3)
    assert lr(1000) == pytest.approx(1e-4)
    sh = ShDegreeSchedule(3, 1000)
    assert [sh(0), sh(999), sh(1000), sh(2500), sh(9999)] == [0, 0, 1, 2, 3]
    # two cameras at ±2 on x: mean at 0, max distance 2 -> extent 2.2
    w2c = torch.eye(4).repeat(2, 1, 1)
    w2c[0, 0, 3], w2c[1, 0, 3] = -2.0, 2.0
    assert camera_extent(w2c) == pytest.approx(2.2)
    box = torch.tensor([[-1.0] * 3, [1.0] * 3])
    assert camera_extent(torch.eye(4)[None], box) == pytest.approx(math.sqrt(3))


def test_outputs_ply_round_trip_and_metrics(problem, tmp_path):
    res = reconstruct(_cfg(steps=6), tmp_path / "run", problem=problem)
    back = load_gaussian_ply(tmp_path / "run" / "point_cloud.ply")
    for k, v in res.gaussians.tensors().items():
        torch.testing.assert_close(back[k], v, rtol=0, atol=0)
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["background"] == "white" and m["test_views"] == 2 and m["steps"] == 6
    assert math.isfinite(m["psnr"]) and m["frame"] == "dataset world frame"
    assert (tmp_path / "run" / "renders" / "v00.png").is_file() and (tmp_path / "run" / "gt" / "v01.png").is_file()
    assert (tmp_path / "run" / "loss_curve.png").is_file() and (tmp_path / "run" / "config.json").is_file()
    with pytest.raises(OutputError, match="holds a finished run"):  # the shared rule (engine.prepare_output_dir)
        reconstruct(_cfg(steps=6), tmp_path / "run", problem=problem)


class _Interrupt(Exception):
    pass


class _StopAt(TrainCallbacks):
    def __init__(self, step):
        self.at = step

    def after_step(self, step, trainer):
        if step + 1 == self.at:
            raise _Interrupt()


def test_resume_continues_bit_for_bit(problem, tmp_path):
    """A run killed after step 11 (checkpoint at 8, densification at 4 and 10) and resumed ends with
    exactly the parameters of an uninterrupted run."""
    cfg = _cfg(steps=16, densify_refine_every=5, densify_refine_stop=14, background="random")
    full = reconstruct(cfg, tmp_path / "a", problem=problem)
    with pytest.raises(_Interrupt):
        reconstruct(cfg, tmp_path / "b", problem=problem, callbacks=_StopAt(11))
    ck = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)
    assert ck["step"] == 8
    resumed = reconstruct(cfg, tmp_path / "b", problem=problem, resume=True)
    for k, v in full.gaussians.tensors().items():
        torch.testing.assert_close(resumed.gaussians.tensors()[k], v, rtol=0, atol=0)
    assert resumed.metrics["steps"] == 16


class _CtrlC(TrainCallbacks):
    """What the first SIGINT does (``GracefulInterrupt``), during step ``at`` (0-based)."""

    def __init__(self, at):
        self.at = at

    def after_backward(self, step, params):
        from meshlift.methods.loop import INTERRUPT

        if step == self.at:
            INTERRUPT.requested = True


def test_ctrl_c_writes_the_step_and_resume_continues_bit_for_bit(problem, tmp_path, monkeypatch):
    """The first Ctrl-C stops after the step it came in with a checkpoint of that step (not only the last
    cadence one, step 8); a resumed run ends with exactly the parameters of an uninterrupted one."""
    from meshlift.methods.loop import INTERRUPT

    cfg = _cfg(steps=16, densify_refine_every=5, densify_refine_stop=14, background="random")
    full = reconstruct(cfg, tmp_path / "a", problem=problem)
    monkeypatch.setattr(INTERRUPT, "requested", False)
    with pytest.raises(KeyboardInterrupt):
        reconstruct(cfg, tmp_path / "b", problem=problem, callbacks=_CtrlC(10))
    INTERRUPT.requested = False
    ck = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)
    assert ck["step"] == 11
    resumed = reconstruct(cfg, tmp_path / "b", problem=problem, resume=True)
    for k, v in full.gaussians.tensors().items():
        torch.testing.assert_close(resumed.gaussians.tensors()[k], v, rtol=0, atol=0)


class _NaNGrad(TrainCallbacks):
    """Poisons one position gradient at the given steps, at most ``times`` times; counts each step's runs."""

    def __init__(self, steps, times=1):
        self.steps, self.left, self.runs = set(steps), times, {}

    def after_backward(self, step, params):
        self.runs[step] = self.runs.get(step, 0) + 1
        if step in self.steps and self.left > 0:
            params["means"].grad[0, 0] = float("nan")
            self.left -= 1


def test_nan_guard_rolls_back_and_halves_lr(problem, tmp_path):
    cb = _NaNGrad({10})
    res = reconstruct(_cfg(steps=14), tmp_path / "r", problem=problem, callbacks=cb)
    # poisoned at step index 10; the checkpoint after 8 steps: steps 8..10 run twice, 7 once
    assert cb.runs[7] == 1 and cb.runs[8] == 2 and cb.runs[10] == 2 and cb.runs[13] == 1
    assert res.metrics["nan_recoveries"] == 1 and res.metrics["lr_factor"] == 0.5
    assert res.metrics["steps"] == 14
    assert all(torch.isfinite(t).all() for t in res.gaussians.tensors().values())


def test_nan_guard_stops_cleanly_on_recurrence(problem, tmp_path):
    out = tmp_path / "r"
    with pytest.raises(DivergenceError, match="diverged again at step 10.*checkpoint \\(step 8\\)"):
        reconstruct(_cfg(steps=14), out, problem=problem, callbacks=_NaNGrad(range(9, 14), times=100))
    assert not (out / "point_cloud.ply").exists() and not (out / "metrics.json").exists()
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ck["step"] == 8 and all(torch.isfinite(v).all() for v in ck["params"].values())


def test_deferred_readback_guard_rolls_back_to_the_checkpoint(problem):
    """readback_every=5 (the GPU mode, here on the CPU): the NaN of step index 10 is found at the read-back
    after the last step (14), the run goes back to the checkpoint after 8 steps (a checkpoint is always read
    back first) and redoes 8..13; the history is one row per step, each with its Gaussian count."""
    cb = _NaNGrad({10})
    tr = GaussianTrainer(_cfg(steps=14, readback_every=5), problem, CPU, callbacks=cb)
    tr.train()
    assert cb.runs[7] == 1 and cb.runs[8] == 2 and cb.runs[13] == 2
    assert tr.recoveries == 1 and tr.lr_factor == 0.5 and tr.step == 14
    assert all(torch.isfinite(p).all() for p in tr.params.values())
    hist = tr.state.history
    assert [h["iteration"] for h in hist] == list(range(1, 15))
    assert all(h["gaussians"] > 0 for h in hist) and hist[-1]["gaussians"] == tr.num_gaussians


def test_absurd_learning_rate_is_caught(problem, tmp_path):
    """A log-scale step of 1000 overflows exp(): NaN loss, rollback, halving, then the clean stop."""
    with pytest.raises(DivergenceError, match="Lower the learning rates"):
        reconstruct(_cfg(steps=6, lr_scales=1e3), tmp_path / "r", problem=problem)
    assert not (tmp_path / "r" / "point_cloud.ply").exists()


def test_config_validation_and_densify_alias():
    cfg = apply_dict(GaussiansConfig(), {"densify.grow_grad2d": "0.0003", "steps": "100"})
    assert cfg.densify_grow_grad2d == 0.0003 and cfg.steps == 100
    s = densify_strategy(cfg, 2.5)
    assert s.grow_grad2d == 0.0003 and s.scene_scale == 2.5
    for bad in ({"lr_means": "nan"}, {"lr_opacity": "-1"}, {"steps": "0"}, {"background": "green"},
                {"sh_degree": "4"}, {"checkpoint_every": "-3"}, {"nope": "1"}):
        with pytest.raises(ConfigError):
            apply_dict(GaussiansConfig(), bad)


def test_resume_refuses_shape_changes(problem, tmp_path):
    reconstruct(_cfg(steps=4), tmp_path / "r", problem=problem)
    with pytest.raises(ConfigError, match="sh_degree.*cannot change on resume"):
        reconstruct(_cfg(steps=4, sh_degree=2), tmp_path / "r", problem=problem, resume=True)
    (tmp_path / "r" / "checkpoint.pt").write_bytes(b"garbage")
    with pytest.raises(ConfigError, match="truncated or not a meshlift checkpoint"):  # engine.load_checkpoint
        reconstruct(_cfg(steps=4), tmp_path / "r", problem=problem, resume=True)


def test_cli_reconstruct_gaussians_tiny(tmp_path):
    """`meshlift reconstruct DATA --method gaussians --preset gaussians_tiny` on a NeRF-synthetic folder."""
    from meshlift.cli.main import main

    data = write_blender_dataset(tmp_path / "scene", size=16, n_train=6, n_test=2)
    out = tmp_path / "out"
    args = ["reconstruct", str(data), "--method", "gaussians", "--preset", "gaussians_tiny", "--out", str(out),
            "--set", "steps=6", "--set", "num_random=60", "--set", "train_res=0"]
    assert main(args) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["method"] == "gaussians" and m["steps"] == 6 and m["test_views"] == 2
    assert load_gaussian_ply(out / "point_cloud.ply")["means"].shape[0] == m["gaussians"]
    assert main(args) == 2  # a finished run is not replaced without --resume / --overwrite
    assert main(args + ["--resume", "steps=8"]) == 0
    assert json.loads((out / "metrics.json").read_text())["steps"] == 8
    assert main(["reconstruct", "--method", "gaussians", "--help-config"]) == 0


def test_cli_render_and_eval_a_gaussian_ply(tmp_path):
    """`meshlift render point_cloud.ply --data DATA` reproduces the run's own test renders (same cameras,
    background and metric), `--turntable` frames the splats, `meshlift eval images` scores the renders."""
    from meshlift.cli.main import main

    data = write_blender_dataset(tmp_path / "scene", size=16, n_train=6, n_test=2)
    out = tmp_path / "out"
    assert main(["reconstruct", str(data), "--method", "gaussians", "--preset", "gaussians_tiny", "--out", str(out),
                 "steps=8", "num_random=60", "train_res=0"]) == 0
    run = json.loads((out / "metrics.json").read_text())
    r = tmp_path / "render"
    assert main(["render", str(out / "point_cloud.ply"), "--data", str(data), "--out", str(r), "--no-lpips",
                 "--turntable", "--frames", "3", "--size", "32"]) == 0
    m = json.loads((r / "metrics.json").read_text())
    assert m["mode"] == "splat" and m["num_views"] == 2
    assert m["psnr"] == pytest.approx(run["psnr"], abs=0.1)
    assert (r / "turntable.gif").is_file() and (r / "renders" / "r_0.png").is_file()
    assert main(["render", str(out), "--data", str(data), "--out", str(tmp_path / "r2"), "--no-lpips"]) == 0
    assert main(["eval", "images", str(out / "renders"), str(out / "gt"), "--no-lpips", "--json"]) == 0


@pytest.mark.slow
def test_shared_scenes_load_and_train_a_few_steps(dataset):
    """lego: random init in the scene box, extent 1.1 × the camera spread; statue: SfM init, masks as alpha,
    undistorted pinhole cameras; a few steps stay finite on both."""
    from meshlift.methods.gaussians.reconstruct import build_config, load_problem

    for name, init in (("nerf_synthetic_lego_half", "random"), ("statue_of_liberty_colmap", "SfM")):
        cfg = build_config(str(dataset(name)), "gaussians", True, None, ["train_res=48", "steps=3", "max_test_views=1"])
        pb = load_problem(cfg)
        assert pb.train.alpha is not None and max(pb.train.width, pb.train.height) <= 96  # reader's downscale
        tr = GaussianTrainer(cfg, pb, CPU)
        how = tr.init_params()
        assert init in how
        if init == "SfM":
            assert pb.points is not None and tr.num_gaussians == min(len(pb.points), cfg.max_init_points)
        tr.train()
        assert tr.step == 3 and all(torch.isfinite(p).all() for p in tr.params.values())


@pytest.mark.gpu
def test_training_on_cuda_with_the_triton_backend(problem):
    """On a GPU: the auto backend picks Triton, the means2d gradient reaches the strategy (growth happens),
    the PSNR improves as on the CPU, and a resume payload round-trips on the device."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    dev = torch.device("cuda")
    tr = GaussianTrainer(_cfg(device="cuda"), problem, dev)
    tr.init_params()
    before = _test_psnr_on(tr, problem, 0, dev)
    tr.train(checkpoint=tr.payload())
    assert sum(h[1] + h[2] for h in tr.strategy.history) > 0
    assert _test_psnr_on(tr, problem, tr.eval_sh_degree, dev) > before + 3.0
    from meshlift.render.splat import _resolve_backend

    assert _resolve_backend("auto", dev) == "triton"


def _test_psnr_on(trainer, problem, degree, dev):
    ours, tg = render_views(trainer.params, problem.test, sh_degree=degree, background="white", near=trainer.near,
                            device=dev)
    return image_metrics(ours, tg, with_lpips=False)["psnr"]


class _SyncCounter(TrainCallbacks):
    """Counts the host synchronisations CUDA reports (``set_sync_debug_mode("warn")``) in steps
    ``start + 1 .. end`` (1-based), read-backs of those steps included."""

    def __init__(self, start, end):
        import warnings

        self.start, self.end, self.ctx, self.records, self.count = start, end, warnings.catch_warnings(record=True), \
            None, None

    def after_step(self, step, trainer):
        import warnings

        if step + 1 == self.start:
            self.records = self.ctx.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        elif step + 1 == self.end:
            self.stop()

    def stop(self) -> None:
        if self.records is not None and self.count is None:
            torch.cuda.set_sync_debug_mode("default")
            self.ctx.__exit__(None, None, None)
            self.count = sum("synchroniz" in str(w.message) for w in self.records)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_training_step_syncs(problem):
    """On CUDA a training step makes the host wait once (the render's intersection count); the loss and
    guard read-back adds two every ``readback_every`` steps; images stream from the CPU through pinned
    buffers. Steps 21..60 (after a 20-step warm-up): at most 1.25 synchronisations per step."""
    cfg = _cfg(steps=60, readback_every=20, densify=False, device="cuda", checkpoint_every=0,
               checkpoint_every_s=0.0, preview_every=0)
    cb = _SyncCounter(start=20, end=60)
    tr = GaussianTrainer(cfg, problem, torch.device("cuda"), callbacks=cb)
    try:
        tr.train()
    finally:
        cb.stop()
    assert tr.step == 60 and cb.count is not None and 30 <= cb.count <= 1.25 * 40, cb.count


def test_data_device_auto_places_a_copy_of_the_training_images(monkeypatch):
    """``data_device``: the trainer keeps the training images where ``resolve_data_device`` says (auto: the GPU
    when they fit) as a copy; the caller's problem is not touched. A CPU run keeps them where they are."""
    import meshlift.methods.gaussians.trainer as T
    from meshlift.methods.data_device import resolve_data_device

    problem = tiny_problem(size=16, n_train=3, n_test=1)
    assert problem.train.nbytes() == 3 * 16 * 16 * 3 * 2 + 3 * 16 * 16 * 1 * 2  # float16 images + alpha
    assert resolve_data_device("auto", CPU, 1).type == "cpu"
    tr = GaussianTrainer(_cfg(), problem, CPU)
    assert tr.problem.train is problem.train
    seen = {}

    def fake(name, device, nbytes):
        seen.update(name=name, nbytes=nbytes)
        return torch.device("meta")  # stands for "another device": a CPU machine has no GPU

    monkeypatch.setattr(T, "resolve_data_device", fake)
    tr = GaussianTrainer(_cfg(), problem, CPU)
    assert seen == {"name": "auto", "nbytes": problem.train.nbytes()}
    assert tr.problem.train.images.device.type == "meta" and tr.problem.train.alpha.device.type == "meta"
    assert problem.train.images.device.type == "cpu" and problem.train.alpha.device.type == "cpu"
    assert tr.problem.test is problem.test


def test_views_line_says_when_max_test_views_keeps_fewer(tmp_path):
    """The run's log names the test views the split held when max_test_views (e.g. --quick) keeps fewer
    (fresh-user report: "4 test views" where inspect said 7)."""
    from meshlift.methods.gaussians.views import load_splat_problem

    data = write_blender_dataset(tmp_path / "scene", size=16, n_train=4, n_test=5)
    every = load_splat_problem(data)
    assert every.test_available == 5 and every.views_line() == "4 training / 5 test views"
    some = load_splat_problem(data, max_test_views=2)
    assert len(some.test) == 2 and some.views_line() == "4 training / 2 of 5 test views (max_test_views)"
