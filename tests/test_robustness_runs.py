"""Issue 16: nothing lost, nothing silently wrong, one clear line — output folders, resume states, the NaN guard,
config ranges, memory, masks and implausible visual hulls."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from _run_helpers import TINY, blender_copy_with_opencv_axes, write_torus_obj
from meshlift.cli.main import main
from meshlift.errors import OutOfMemoryError
from meshlift.methods import engine, loop


@pytest.fixture(scope="module")
def torus_obj(tmp_path_factory):
    return write_torus_obj(tmp_path_factory.mktemp("torus"))


def _run(torus_obj, out, *extra):
    args = ["reconstruct", str(torus_obj), "--out", str(out), "--preset", "spot", "--quick"]
    for item in TINY:
        args += ["--set", item]
    return main(args + list(extra))


@pytest.fixture(scope="module")
def finished_run(torus_obj, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "out"
    assert _run(torus_obj, out) == 0
    return out


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- output folders -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", ["reconstruct", "render", "demo"])
def test_out_is_a_file(tmp_path, capsys, torus_obj, cmd):
    f = tmp_path / "taken"
    f.write_text("not a folder")
    args = {"reconstruct": ["reconstruct", str(torus_obj), "--out", str(f)],
            "render": ["render", str(torus_obj), "--turntable", "--out", str(f)],
            "demo": ["demo", "--out", str(f)]}[cmd]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "is an existing file" in err and str(f) in err
    assert f.read_text() == "not a folder"


def test_out_not_writable(tmp_path, capsys, torus_obj, monkeypatch):
    real = os.access
    monkeypatch.setattr(engine.os, "access", lambda p, mode: False if Path(p) == tmp_path else real(p, mode))
    assert main(["reconstruct", str(torus_obj), "--out", str(tmp_path / "new")]) == 2
    assert "is not writable" in capsys.readouterr().err


def test_out_that_cannot_be_created_is_one_error_line_and_leaves_nothing(tmp_path, capsys, torus_obj, monkeypatch):
    # permission bits allow it (as for root, or /proc) but creating the folder fails
    real_mkdir = Path.mkdir

    def mkdir(self, *a, **k):
        if self.name == "leaf":
            raise OSError(30, "Read-only file system")
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    assert main(["reconstruct", str(torus_obj), "--out", str(tmp_path / "mid" / "leaf")]) == 2
    err = capsys.readouterr().err
    assert "cannot be created (Read-only file system)" in err and "Traceback" not in err
    assert not (tmp_path / "mid").exists()  # the parent it created for the check is gone again


def test_finished_run_is_not_replaced_without_resume_or_overwrite(finished_run, torus_obj, capsys):
    before = _snapshot(finished_run)
    assert _run(torus_obj, finished_run) == 2
    err = capsys.readouterr().err
    assert "finished run" in err and "--overwrite" in err and "--resume" in err
    assert _snapshot(finished_run) == before


def test_overwrite_replaces_and_metrics_are_strict_json(finished_run, torus_obj, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(finished_run, out)
    assert _run(torus_obj, out, "--overwrite", "--set", "iter_pass2=1") == 0
    m = json.loads((out / "metrics.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-strict {c}"))
    assert m["iterations"]["pass2"] == 1
    assert not list(out.glob(".*.tmp")), "temporary export folders left behind"


def test_unfinished_run_needs_resume(tmp_path, torus_obj, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(b"x")
    assert _run(torus_obj, out) == 2
    assert "unfinished run" in capsys.readouterr().err


# ---- resume states ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "config_json"])
def test_corrupt_resume_state_is_one_line_and_nothing_is_rewritten(finished_run, tmp_path, capsys, damage):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(finished_run, out)
    ck = out / "checkpoint.pt"
    if damage == "truncated":
        ck.write_bytes(ck.read_bytes()[: ck.stat().st_size // 2])
    elif damage == "empty":
        ck.write_bytes(b"")
    elif damage == "garbage":
        ck.write_bytes(os.urandom(4096))
    else:
        (out / "config.json").write_text("{ not json")
    before = _snapshot(out)
    assert main(["reconstruct", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ("checkpoint" in err or "config.json" in err) and ("--overwrite" in err or "restore" in err)
    assert _snapshot(out) == before


def test_resume_with_shape_changing_field_is_refused_before_anything_changes(finished_run, tmp_path, capsys):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(finished_run, out)
    before = _snapshot(out)
    assert main(["reconstruct", "--out", str(out), "--resume", "--set", "grid_res=16"]) == 2
    err = capsys.readouterr().err
    assert "grid_res: 12 -> 16" in err and "cannot change on resume" in err
    assert _snapshot(out) == before
    assert main(["reconstruct", "--out", str(out), "--resume", "--set", "iter_pass2=3"]) == 0  # allowed change


def test_checkpoints_by_time_carry_timings(tmp_path, torus_obj):
    out = tmp_path / "out"
    # checkpoint_every=0: only the time cadence saves mid-pass (every step here, 1e-6 s)
    assert _run(torus_obj, out, "--set", "checkpoint_every=0", "--set", "checkpoint_every_s=0.000001",
                "--set", "iter_pass1=4") == 0
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ck["state"]["timings"]["pass1_s"] > 0 and ck["state"]["timings"]["pass2_s"] > 0


# ---- the NaN guard ----------------------------------------------------------------------------------------


def _nan_loss_from(monkeypatch, first_bad: int, last_bad: int = 10**9):
    import meshlift.methods.nvdiffrec.losses as losses  # render_and_loss looks image_loss up there

    real = losses.image_loss
    calls = {"n": 0}

    def fake(out, views, cfg, *args, **kwargs):
        loss, mse = real(out, views, cfg, *args, **kwargs)
        calls["n"] += 1
        if first_bad <= calls["n"] <= last_bad:
            loss = loss * float("nan")
        return loss, mse

    monkeypatch.setattr(losses, "image_loss", fake)
    return calls


def test_one_nan_step_rolls_back_and_finishes(tmp_path, torus_obj, monkeypatch, capsys):
    _nan_loss_from(monkeypatch, 3, 3)
    out = tmp_path / "out"
    assert _run(torus_obj, out, "--set", "iter_pass1=5") == 0
    assert "rolled back" in capsys.readouterr().err
    m = json.loads((out / "metrics.json").read_text())
    assert all(math.isfinite(v) for v in (m["psnr"], m["fscore"]))
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    assert not engine.nonfinite_tensors(ck)


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_divergence_stops_cleanly_and_keeps_the_good_checkpoint(tmp_path, torus_obj, monkeypatch, capsys):
    out = tmp_path / "out"
    assert _run(torus_obj, out, "--set", "iter_pass1=4", "--set", "checkpoint_every=2") == 0
    good = (out / "checkpoint.pt").read_bytes()
    (out / "metrics.json").unlink()  # pretend the run stopped mid-way: resume it with NaN losses
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    ck["state"]["stage"], ck["pass2"] = "pass1", None
    ck["pass1"]["iteration"] = 2
    torch.save(ck, out / "checkpoint.pt")
    good = (out / "checkpoint.pt").read_bytes()
    glb = (out / "mesh.glb").read_bytes()
    _nan_loss_from(monkeypatch, 1)
    assert main(["reconstruct", "--out", str(out), "--resume", "--set", "iter_pass1=8"]) == 2
    err = capsys.readouterr().err
    assert "non-finite" in err and "lr_pos" in err and "Traceback" not in err
    assert "--set diagnose_nonfinite=true" in err
    assert (out / "checkpoint.pt").read_bytes() == good
    assert (out / "mesh.glb").read_bytes() == glb and not (out / "metrics.json").exists()


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled", "ignore:Error detected in")
def test_diagnose_nonfinite_names_the_backward_op(tmp_path, torus_obj, monkeypatch, capsys):
    """A finite forward whose backward makes a NaN (sqrt'(0) · 0) at the 3rd loss: the probe stops at that
    step and names the gradient and PyTorch's backward function."""
    import meshlift.methods.nvdiffrec.losses as losses  # render_and_loss looks image_loss up there

    real, calls = losses.image_loss, {"n": 0}

    def fake(out, views, cfg, *args, **kwargs):
        loss, mse = real(out, views, cfg, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] >= 3:
            loss = loss + 0.0 * torch.sqrt(out["shaded"] - out["shaded"].detach()).sum()
        return loss, mse

    monkeypatch.setattr(losses, "image_loss", fake)
    out = tmp_path / "out"
    assert _run(torus_obj, out, "--set", "iter_pass1=6", "--set", "diagnose_nonfinite=true") == 2
    err = capsys.readouterr().err
    assert "pass 1, step 2: non-finite values: gradient of " in err, err
    assert "SqrtBackward0" in err and "rolled back" not in err


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled", "ignore:Error detected in")
def test_diagnose_nonfinite_names_a_forward_tensor(tmp_path, torus_obj, monkeypatch, capsys):
    _nan_loss_from(monkeypatch, 2)
    out = tmp_path / "out"
    assert _run(torus_obj, out, "--set", "iter_pass1=6", "--set", "diagnose_nonfinite=true") == 2
    err = capsys.readouterr().err
    assert "pass 1, step 1: non-finite values: forward image loss (1 NaN, 0 inf)" in err, err
    assert "non-finite in the forward" in err


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_diagnose_nonfinite_leaves_a_finite_run_alone(tmp_path, torus_obj):
    out = tmp_path / "out"
    assert _run(torus_obj, out, "--set", "iter_pass1=3", "--set", "diagnose_nonfinite=true") == 0
    assert math.isfinite(json.loads((out / "metrics.json").read_text())["psnr"])


def test_ctrl_c_saves_a_checkpoint_of_the_step_and_resume_finishes(tmp_path, torus_obj, monkeypatch, capsys):
    """The first Ctrl-C (GracefulInterrupt) stops after the step it came in, with a checkpoint of that step;
    exit 130; --resume continues from there to a finished run."""
    import meshlift.methods.nvdiffrec.losses as losses  # render_and_loss looks image_loss up there

    real, calls = losses.image_loss, {"n": 0}

    def fake(out, views, cfg, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            loop.INTERRUPT.requested = True  # what the SIGINT handler does
        return real(out, views, cfg, *args, **kwargs)

    monkeypatch.setattr(losses, "image_loss", fake)
    out = tmp_path / "out"
    assert _run(torus_obj, out, "--set", "iter_pass1=6", "--set", "checkpoint_every=0",
                "--set", "checkpoint_every_s=0") == 130
    err = capsys.readouterr().err
    assert "stopped by Ctrl-C after step 3; its checkpoint is written" in err and "--resume" in err
    assert not loop.INTERRUPT.requested  # reset when the command ends
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ck["pass1"]["iteration"] == 3 and not (out / "metrics.json").exists()
    monkeypatch.setattr(losses, "image_loss", real)
    assert main(["reconstruct", "--out", str(out), "--resume"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["iterations"]["pass1"] == 6 and math.isfinite(m["psnr"])


def test_graceful_interrupt_handler():
    import signal

    # as in the CLI's process (an earlier test or plugin of this session may have replaced Python's handler)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _graceful_interrupt_round_trip(signal)
    finally:
        signal.signal(signal.SIGINT, previous)


def _graceful_interrupt_round_trip(signal):
    before = signal.getsignal(signal.SIGINT)
    with loop.INTERRUPT as flag:
        os.kill(os.getpid(), signal.SIGINT)
        assert flag.requested
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # the second one stops at once
    assert signal.getsignal(signal.SIGINT) is before and not loop.INTERRUPT.requested



def test_graceful_interrupt_leaves_torchrun_ranks_alone(monkeypatch):
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    monkeypatch.setenv("WORLD_SIZE", "2")
    try:
        with loop.INTERRUPT:
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_resume_from_another_working_directory(tmp_path, torus_obj, monkeypatch):
    """DATA given relative is stored absolute, so --resume works from anywhere; a run saved with a relative
    path (before that) resumes when DATA names the same file again."""
    from meshlift.methods.checkpoints import same_input

    monkeypatch.chdir(torus_obj.parent)
    out = tmp_path / "out"
    args = ["reconstruct", torus_obj.name, "--out", str(out), "--preset", "spot", "--quick"]
    for item in TINY:
        args += ["--set", item]
    assert main(args + ["--set", "iter_pass1=4"]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["data"] == str(torus_obj.resolve())
    (out / "metrics.json").unlink()
    monkeypatch.chdir(tmp_path)
    assert main(["reconstruct", "--out", str(out), "--resume"]) == 0
    assert (out / "metrics.json").is_file()
    # the older relative form, from a directory where it does not resolve
    assert same_input("../elsewhere/" + torus_obj.name, str(torus_obj))
    assert not same_input("../elsewhere/other.obj", str(torus_obj))
    assert not same_input(str(tmp_path), str(torus_obj))


def test_checkpointer_refuses_nonfinite_payload(tmp_path):
    c = engine.Checkpointer(tmp_path)
    assert c.save({"state": {}, "config": {}, "w": torch.ones(2)})
    good = (tmp_path / "checkpoint.pt").read_bytes()
    assert not c.save({"state": {}, "config": {}, "w": torch.tensor([1.0, float("nan")])})
    assert (tmp_path / "checkpoint.pt").read_bytes() == good


# ---- config ranges, memory -------------------------------------------------------------------------------


@pytest.mark.parametrize("item, field", [
    ("lr_pos=nan", "lr_pos"), ("lr_mat=-0.1", "lr_mat"), ("mesh_scale=nan", "mesh_scale"),
    ("mesh_scale=0", "mesh_scale"), ("hash_log2_size=40", "hash_log2_size"),
    ("checkpoint_every=-3", "checkpoint_every"), ("train_res=100000", "train_res"), ("kd_max=0,2,1", "kd_max"),
])
def test_out_of_range_fields(tmp_path, capsys, torus_obj, item, field):
    assert main(["reconstruct", str(torus_obj), "--out", str(tmp_path / "o"), "--set", item]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_cpu_oom_is_recognised_and_estimate_refuses():
    assert engine.is_oom(RuntimeError("[enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: "
                                      "can't allocate memory: you tried to allocate 1099511627776 bytes."))
    assert engine.is_oom(MemoryError())
    assert not engine.is_oom(RuntimeError("shape mismatch"))
    with pytest.raises(OutOfMemoryError, match="batch=9"):
        engine.check_memory(1 << 60, torch.device("cpu"), "training", "batch=9")


def test_memory_estimate_refuses_before_allocating(tmp_path, capsys, torus_obj):
    args = ["reconstruct", str(torus_obj), "--out", str(tmp_path / "o"), "--preset", "spot", "--quick",
            "--set", "train_res=8192", "--set", "batch=1024", "--set", "ref_views=2", "--set", "device=cpu"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "GiB" in err and "batch=1024" in err and "train_res=8192" in err


# ---- methods that need masks, implausible hulls ----------------------------------------------------------


@pytest.mark.shared_data
def test_surface_method_on_unmasked_fox_names_the_gaussian_method(dataset, tmp_path, capsys):
    assert main(["reconstruct", str(dataset("fox")), "--out", str(tmp_path / "o"), "--quick"]) == 2
    err = capsys.readouterr().err
    assert "neither masks nor an alpha" in err and "--method gaussians" in err


@pytest.mark.shared_data
def test_flipped_cameras_stop_at_the_visual_hull(dataset, tmp_path, capsys):
    data = blender_copy_with_opencv_axes(dataset("nerf_synthetic_lego_half"), tmp_path / "lego_opencv")
    args = ["reconstruct", str(data), "--out", str(tmp_path / "o"), "--quick", "--set", "iter_pass1=2",
            "--set", "iter_pass2=1", "--set", "train_res=48"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "visual hull" in err and "camera-convention opencv" in err


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_reconstruct_up_axis_rotates_exports_only(finished_run, torus_obj, tmp_path):
    """--up z: the GLB/OBJ are turned so world +z becomes glTF's +Y (recorded); metrics stay world-frame."""
    from meshlift.io.mesh import load_mesh

    out = tmp_path / "up"
    assert _run(torus_obj, out, "--up", "z") == 0
    m = json.loads((out / "metrics.json").read_text())
    ref = json.loads((finished_run / "metrics.json").read_text())
    assert m["up_axis_conversion"]["from"] == "+z" and m["fscore"] == pytest.approx(ref["fscore"])
    a, b = load_mesh(finished_run / "mesh.glb"), load_mesh(out / "mesh.glb")
    torch.testing.assert_close(b.v_pos[:, 1], a.v_pos[:, 2])
    torch.testing.assert_close(b.v_pos[:, 2], -a.v_pos[:, 1])
    raw = (out / "mesh.glb").read_bytes()
    js = json.loads(raw[20:20 + int.from_bytes(raw[12:16], "little")])
    assert js["asset"]["extras"]["meshlift"]["up_axis_conversion"]["from"] == "+z"


def test_background_checkpointer_writes_a_snapshot_of_the_payload(tmp_path):
    c = engine.Checkpointer(tmp_path, background=True)
    w = torch.ones(4)
    payload = {"state": {"it": 3}, "config": {"a": [1, 2]}, "w": w, "pair": (torch.zeros(2), "x")}
    assert c.save(payload)
    w.add_(5.0)  # training goes on changing its tensors while the file is written
    payload["state"]["it"] = 99
    c.flush()
    got = engine.load_checkpoint(tmp_path / "checkpoint.pt")
    assert torch.equal(got["w"], torch.ones(4)) and got["state"]["it"] == 3 and got["pair"][1] == "x"
    assert not (tmp_path / "checkpoint.tmp").exists()
    assert c.save({"state": {}, "config": {}, "w": torch.full((2,), 7.0)})
    assert c.load()["w"].tolist() == [7.0, 7.0]  # load waits for the write


def test_background_checkpointer_reports_a_failed_write(tmp_path):
    c = engine.Checkpointer(tmp_path / "gone", background=True)  # the folder does not exist
    assert c.save({"w": torch.ones(1)})
    with pytest.raises((OSError, RuntimeError), match="gone"):  # torch.save: "Parent directory ... does not exist"
        c.flush()
    c.flush()  # the error is reported once


def test_a_second_ctrl_c_waits_for_the_checkpoint_being_written(tmp_path, monkeypatch):
    """Ctrl-C while a background checkpoint is written (the user pressed it twice): the file is completed,
    then KeyboardInterrupt is raised (a half-written checkpoint would lose the run)."""
    import os
    import signal
    import threading
    import time

    from meshlift.methods.checkpoints import CHECKPOINT_NAME, Checkpointer

    ck = Checkpointer(tmp_path, background=True)
    real = ck._write
    started = threading.Event()

    def slow_write(payload):  # the Ctrl-C arrives while this write is under way
        started.wait(5)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)
        real(payload)

    class WaitSignals(threading.Event):  # tells the writer when flush() has begun to wait
        def wait(self, timeout=None):
            started.set()
            return super().wait(timeout)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever an earlier test left
    try:
        monkeypatch.setattr(ck, "_write", slow_write)
        ck.save({"x": torch.ones(3)})
        ck._done = WaitSignals()  # the writer waits for `started` before it sets this
        with pytest.raises(KeyboardInterrupt):
            ck.flush()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (tmp_path / CHECKPOINT_NAME).is_file()
    assert torch.equal(torch.load(tmp_path / CHECKPOINT_NAME)["x"], torch.ones(3))


def test_an_existing_folder_where_no_file_can_be_written_is_refused_before_loading(tmp_path, monkeypatch):
    import tempfile

    from meshlift.errors import OutputError
    from meshlift.methods.engine import prepare_output_dir

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)  # as root in /sys: access() says yes
    with pytest.raises(OutputError, match=r"--out .*cannot write a file there \(Permission denied\)"):
        prepare_output_dir(tmp_path, resume=False, overwrite=False)
    assert list(tmp_path.iterdir()) == []
