"""`meshlift demo` end to end (about a minute on 2 CPU cores: marked slow)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_demo_meets_its_fscore_target(tmp_path, capsys):
    from meshlift.cli.main import main

    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["fscore"] >= 0.9
    assert m["threshold"] == pytest.approx(0.01 * m["gt_bbox_diagonal"])
    assert m["psnr"] > 24.0
    printed = capsys.readouterr().out
    assert "F-score" in printed and str(out / "mesh.glb") in printed


#: A demo small enough for the default test run (a few seconds): the command's own path, tiny settings.
TINY = ["--set", "iter_pass1=3", "--set", "iter_pass2=2", "--set", "ref_views=4", "--set", "ref_test_views=1",
        "--set", "hidden_res=64", "--set", "hidden_views=8", "--set", "texture_res=64", "--set", "eval_samples=2000"]


def test_a_demo_writes_no_checkpoint_and_a_rerun_clears_the_earlier_one(tmp_path, capsys):
    from meshlift.cli.main import main
    from meshlift.methods.nvdiffrec.outputs import clear_outputs

    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), *TINY]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"metrics.json", "config.json", "mesh.glb", "mesh", "images"} <= names and "checkpoint.pt" not in names
    (out / "notes.txt").write_text("mine")  # not a demo output: kept
    (out / "images" / "sketch.jpg").write_bytes(b"x")
    capsys.readouterr()
    assert main(["demo", "--out", str(out), *TINY]) == 0
    assert "replacing the earlier demo" in capsys.readouterr().out
    assert (out / "metrics.json").is_file() and (out / "notes.txt").read_text() == "mine"
    assert not (out / "checkpoint.pt").exists()
    clear_outputs(out)  # what a re-run does before it starts: a stopped re-run leaves no mixed folder
    assert {p.name for p in out.iterdir()} == {"notes.txt", "images"}
    assert [p.name for p in (out / "images").iterdir()] == ["sketch.jpg"]
