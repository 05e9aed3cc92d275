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
