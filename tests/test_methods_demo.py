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


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_a_demo_writes_no_checkpoint_and_a_rerun_clears_the_earlier_one(tmp_path, capsys):
    from meshlift.cli.main import main
    from meshlift.cli.demo_cmd import clear_demo_outputs

    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), *TINY]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"metrics.json", "config.json", "mesh.glb", "mesh", "images", "gt_mesh.ply"} <= names
    assert "checkpoint.pt" not in names
    (out / "notes.txt").write_text("mine")  # not a demo output: kept
    (out / "images" / "sketch.jpg").write_bytes(b"x")
    capsys.readouterr()
    assert main(["demo", "--out", str(out), *TINY]) == 0
    assert "replacing the earlier demo" in capsys.readouterr().out
    assert (out / "metrics.json").is_file() and (out / "notes.txt").read_text() == "mine"
    assert not (out / "checkpoint.pt").exists()
    clear_demo_outputs(out)  # what a re-run does before it starts: a stopped re-run leaves no mixed folder
    assert {p.name for p in out.iterdir()} == {"notes.txt", "images"}
    assert [p.name for p in (out / "images").iterdir()] == ["sketch.jpg"]


def test_the_demo_writes_the_ground_truth_its_eval_hint_names(tmp_path, capsys):
    """The summary's `meshlift eval mesh GLB GT --samples N` hint names files that exist, and running it
    measures the F-score the demo reported (same meshes and sample count; only the sampling seed differs)."""
    import re
    import shlex

    from meshlift.cli.main import main
    from meshlift.io.mesh import load_mesh

    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), *TINY]) == 0
    printed = capsys.readouterr().out
    hints = [h for h in re.findall(r"`(meshlift eval mesh [^`]+)`", printed) if "gt_mesh.ply" in h]
    assert len(hints) == 1, printed
    args = shlex.split(hints[0])[1:]
    assert args[2] == str(out / "mesh.glb") and args[3] == str(out / "gt_mesh.ply")
    assert load_mesh(out / "gt_mesh.ply").num_faces > 1000  # the ring itself, not a stand-in
    assert main(args + ["--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    m = json.loads((out / "metrics.json").read_text())
    assert res["gt_bbox_diagonal"] == pytest.approx(m["gt_bbox_diagonal"], rel=1e-5)
    assert res["chamfer_l1"] == pytest.approx(m["chamfer_l1"], rel=0.1)
