"""benchmarks/surface_stages.py on a tiny finished run: every stage rendered, pass 2 = the run's own PSNR."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_stages_of_a_tiny_run(tmp_path):
    import trimesh

    from meshlift.methods.nvdiffrec.reconstruct import reconstruct
    from test_methods_nvdiffrec_e2e import small_config

    obj = tmp_path / "torus.obj"
    trimesh.creation.torus(0.6, 0.25, 16, 8).export(obj)
    cfg = small_config(data=str(obj), iter_pass1=6, iter_pass2=2, train_res=24, grid_res=12, ref_views=4,
                       ref_test_views=2, texture_res=16, eval_samples=2000, light="learned", env_res=4)
    res = reconstruct(cfg, tmp_path / "run")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import surface_stages
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert surface_stages.main([str(tmp_path / "run"), "--device", "cpu", "--out", str(tmp_path / "st"),
                                "--cell", "32"]) == 0
    out = json.loads((tmp_path / "st" / "stages.json").read_text())
    names = [s["stage"] for s in out["stages"]]
    assert names == ["pass1", "cleaned", "view_cull", "decimated", "baked", "pass2", "glb"]
    by = {s["stage"]: s for s in out["stages"]}
    assert by["pass2"]["psnr"] == pytest.approx(res.metrics["psnr"], abs=1e-3)
    assert by["view_cull"]["faces"] == res.metrics["view_cull"]["faces_after"]
    assert by["glb"]["faces"] == by["pass2"]["faces"] == res.metrics["faces"]
    assert abs(by["glb"]["psnr"] - by["pass2"]["psnr"]) < 1.0
    for s in out["stages"]:
        assert 0.0 <= s["iou"] <= 1.0 and s["extra_pct"] >= 0 and s["missing_pct"] >= 0
    for name in ("stages.md", "contact.png", "masks.png"):
        assert (tmp_path / "st" / name).stat().st_size > 0
