"""`meshlift reconstruct` / `meshlift demo` command lines: config precedence, saved config, resume, errors."""

from __future__ import annotations

import json

import pytest

from meshlift.cli.main import main

from _run_helpers import TINY, write_torus_obj


@pytest.fixture(scope="module")
def torus_obj(tmp_path_factory):
    return write_torus_obj(tmp_path_factory.mktemp("torus"))


def test_help_config_lists_every_field(capsys):
    assert main(["reconstruct", "--help-config"]) == 0
    text = capsys.readouterr().out
    assert "grid_res" in text and "laplace_weight" in text and "presets:" in text


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_reconstruct_cli_with_file_and_overrides_then_resume(tmp_path, torus_obj):
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('batch = 2\nlr_mat = 0.05\n')
    out = tmp_path / "out"
    args = ["reconstruct", str(torus_obj), "--out", str(out), "--preset", "spot", "--quick", "--config", str(cfg_file)]
    for item in TINY:
        args += ["--set", item]
    args += ["batch=1"]  # trailing field=value wins over the file
    assert main(args) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["batch"] == 1 and saved["lr_mat"] == 0.05 and saved["grid_res"] == 12
    assert saved["data"] == str(torus_obj)
    m = json.loads((out / "metrics.json").read_text())
    assert {"psnr", "ssim", "chamfer_l1", "fscore", "threshold"} <= set(m)
    assert (out / "mesh.glb").is_file() and (out / "mesh" / "texture_kd.png").is_file()
    # resume from the saved config with more pass-2 iterations
    assert main(["reconstruct", "--out", str(out), "--resume", "--set", "iter_pass2=3"]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["iter_pass2"] == 3 and saved["grid_res"] == 12
    import torch

    assert torch.load(out / "checkpoint.pt", weights_only=False)["pass2"]["iteration"] == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["reconstruct", "missing.obj", "--out", "X", "--set", "batch=0"], "batch"),
        (["reconstruct", "missing.obj", "--out", "X", "--set", "nope=1"], "unknown config field"),
        (["reconstruct", "missing.obj", "--out", "X", "--preset", "nope"], "unknown preset"),
        (["reconstruct", "missing.obj"], "--out"),
        (["reconstruct", "missing_dir_xyz", "--out", "X"], "does not exist"),
        # the README's example paths from a clone that has no ../shared beside it: the remedy is named
        (["reconstruct", "../shared/data/nope_xyz", "--out", "X"], "ln -s PATH/TO/shared ../shared"),
        (["inspect", "../shared/data/nope_xyz"], "ln -s PATH/TO/shared ../shared"),
    ],
)
def test_reconstruct_cli_errors_are_one_line(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_exit_codes_of_commands_reach_the_shell(monkeypatch, capsys):
    """typer returns (not raises) a command's `typer.Exit(code)` without standalone mode: main passes it on,
    and Ctrl-C (typer's 130) says how to go on."""
    import typer

    from meshlift.cli import main as cli

    app = typer.Typer()

    @app.command()
    def fail(code: int = 3, interrupt: bool = False) -> None:
        if interrupt:
            raise KeyboardInterrupt
        raise typer.Exit(code)

    @app.command()
    def ok() -> None:
        pass

    monkeypatch.setattr(cli, "app", app)
    assert cli.main(["fail", "--code", "3"]) == 3
    assert cli.main(["fail", "--code", "0"]) == 0
    assert cli.main(["ok"]) == 0
    assert cli.main(["fail", "--interrupt"]) == cli.INTERRUPTED
    assert "--resume" in capsys.readouterr().err


def test_plain_progress_lines_show_the_recent_rate_beside_the_mean(monkeypatch):
    """In a log (no terminal) each 10 % line gives the step rate since the previous line and the mean since the
    start: a mean alone hid a step-rate fall (spot at 1600²: 'mean 74 it/s' while the last stretches ran 65)."""
    import io

    from rich.console import Console

    from meshlift.cli import reconstruct_cmd

    clock = iter([0.0, 10.0, 30.0])  # start, after 100 steps (10 it/s), after 200 (5 it/s over the last 100)
    monkeypatch.setattr("time.perf_counter", lambda: next(clock))
    buf = io.StringIO()
    mon = reconstruct_cmd.make_monitor(Console(file=buf, force_terminal=False, width=200))
    mon.start_pass("train", 1000)
    mon.update(100, 0.5, 20.0)
    mon.update(200, 0.4, 21.0)
    lines = buf.getvalue().splitlines()
    assert "100/1000" in lines[1] and "10.00 it/s (mean 10.00)" in lines[1] and "ETA 90 s" in lines[1]
    assert "200/1000" in lines[2] and "5.00 it/s (mean 6.67)" in lines[2] and "ETA 160 s" in lines[2]


def test_help_shows_no_type_beside_the_help_flag():
    """typer's rich help printed ``--help  <bool>`` (fresh-user report): the flag's line carries no type."""
    from typer.testing import CliRunner

    from meshlift.cli.main import app

    for args in (["--help"], ["reconstruct", "--help"], ["inspect", "--help"]):
        out = CliRunner().invoke(app, args, env={"COLUMNS": "120"}).output
        line = next(ln for ln in out.splitlines() if "--help " in ln and "Show this message" in ln)
        assert "<bool>" not in line, line
