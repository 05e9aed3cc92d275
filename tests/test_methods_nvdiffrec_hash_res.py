"""The material field's finest hash-grid resolution sized to the training images (``hash_max_res = 0``, auto;
issue 30: lego-half's pass-1 field at nvdiffrec's 4096 fits one view's residuals at sub-pixel scale and shows
them as speckle in held-out views)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from _surface_scenes import views_on_a_ring
from meshlift.errors import ConfigError
from meshlift.methods.nvdiffrec.config import SurfaceConfig, apply_dict, validate
from meshlift.methods.nvdiffrec.geometry import pixel_footprint
from meshlift.methods.nvdiffrec.materials import (HASH_AUTO_MAX, HASH_AUTO_MIN, BoundedMaterialField,
                                                  auto_hash_max_res, resolve_hash_max_res)
from meshlift.methods.nvdiffrec.presets import get_preset

#: views_on_a_ring: cameras at (2.2 cos a, 0.6, 2.2 sin a) looking at the origin, 50° field of view.
RING_DIST = math.hypot(2.2, 0.6)


def _ring_focal(res: int) -> float:
    return 0.5 * res / math.tan(math.radians(25))


@pytest.mark.parametrize("res", [64, 256, 800])
def test_pixel_footprint_is_distance_over_focal(res):
    views = views_on_a_ring(4, res)
    assert pixel_footprint(views) == pytest.approx(RING_DIST / _ring_focal(res), rel=1e-5)


@pytest.mark.parametrize("res,scale", [(256, 2.1), (512, 2.4), (800, 2.1)])
def test_auto_is_two_cells_per_pixel_at_the_object(res, scale):
    views = views_on_a_ring(2, res)
    want = math.ceil(2.0 * scale / (RING_DIST / _ring_focal(res)) - 1e-9)
    assert HASH_AUTO_MIN < want < HASH_AUTO_MAX  # the cases lie inside the clip
    assert auto_hash_max_res(SurfaceConfig(mesh_scale=scale), views) == want
    # twice the image size resolves twice as fine (within the ceil)
    if res == 256:
        assert abs(auto_hash_max_res(SurfaceConfig(mesh_scale=scale), views_on_a_ring(2, 512)) - 2 * want) <= 1


def test_auto_is_clipped():
    assert auto_hash_max_res(SurfaceConfig(mesh_scale=2.1), views_on_a_ring(2, 16)) == HASH_AUTO_MIN
    assert auto_hash_max_res(SurfaceConfig(mesh_scale=40.0), views_on_a_ring(2, 800)) == HASH_AUTO_MAX


def test_resolve_replaces_only_auto():
    views = views_on_a_ring(2, 256)
    fixed = SurfaceConfig(hash_max_res=4096)
    assert resolve_hash_max_res(fixed, views) is fixed
    auto = SurfaceConfig(hash_max_res=0, mesh_scale=2.1)
    done = resolve_hash_max_res(auto, views)
    assert done.hash_max_res == auto_hash_max_res(auto, views) and auto.hash_max_res == 0
    assert dataclasses.replace(done, hash_max_res=0) == auto  # nothing else changed


def test_config_accepts_auto_refuses_one_and_the_field_refuses_unresolved():
    assert validate(SurfaceConfig(hash_max_res=0)).hash_max_res == 0
    assert apply_dict(SurfaceConfig(), {"hash_max_res": "0"}).hash_max_res == 0
    with pytest.raises(ConfigError, match="hash_max_res"):
        validate(SurfaceConfig(hash_max_res=1))
    with pytest.raises(ConfigError, match="auto"):
        BoundedMaterialField(SurfaceConfig(hash_max_res=0, hash_levels=4, hash_log2_size=10), torch.device("cpu"))


def test_presets_nerf_auto_reference_meshes_unchanged():
    assert get_preset("nerf").hash_max_res == 0
    for name in ("spot", "bob", "spot_fixlight", "bob_fixlight", "spot_metal", "bob_metal", "spot_flexi", "nerd"):
        assert get_preset(name).hash_max_res == 4096, name
    for name in ("nerf", "spot"):  # --quick keeps its CPU-sized field
        assert get_preset(name, quick=True).hash_max_res == 512


def test_pass1_trainer_resolves_auto_from_its_training_views():
    """Callers of ``run_pass1`` other than ``reconstruct`` (benchmarks) get the same field as a full run."""
    from meshlift.data.views import ProblemData
    from meshlift.methods.checkpoints import Checkpointer
    from meshlift.methods.engine import Monitor, TrainState
    from meshlift.methods.nvdiffrec.passes import Pass1Trainer

    views = views_on_a_ring(3, 64)
    data = ProblemData(train=views, test=views, world_to_normalized=torch.eye(4, dtype=torch.float64))
    cfg = validate(SurfaceConfig(grid_res=8, hash_levels=4, hash_log2_size=10, hash_max_res=0, env_res=8,
                                 batch=1, iter_pass1=1, sdf_init="sphere", device="cpu", checkpoint_every=0,
                                 checkpoint_every_s=0.0))
    tr = Pass1Trainer(cfg, data, torch.device("cpu"), state=TrainState(), monitor=Monitor(),
                      checkpointer=Checkpointer(None))
    want = auto_hash_max_res(cfg, views)
    assert tr.cfg.hash_max_res == want
    assert tr.material.field.encoder.resolutions[-1] == pytest.approx(want, abs=1)


@pytest.mark.slow  # three tiny runs: ~3 min on a loaded 2-core machine
def test_reconstruct_records_the_resolved_value_and_resumes_with_auto(tmp_path, capsys):
    """``config.json`` holds the number auto resolved to; ``--resume`` with ``hash_max_res=0`` again is the same
    field (resolved from the same data), another number is refused."""
    import json

    from _run_helpers import TINY, write_torus_obj
    from meshlift.cli.main import main

    mesh = write_torus_obj(tmp_path)
    out = tmp_path / "out"
    args = ["reconstruct", str(mesh), "--out", str(out), "--preset", "spot", "--quick", "--set", "hash_max_res=0"]
    for item in TINY:
        args += ["--set", item]
    assert main(args) == 0
    resolved = json.loads((out / "config.json").read_text())["hash_max_res"]
    assert HASH_AUTO_MIN <= resolved <= HASH_AUTO_MAX
    assert main(args + ["--resume", "--set", "iter_pass2=3"]) == 0
    assert json.loads((out / "config.json").read_text())["hash_max_res"] == resolved
    capsys.readouterr()
    assert main(args + ["--resume", "--set", f"hash_max_res={resolved + 64}"]) != 0
    assert f"hash_max_res: {resolved} -> {resolved + 64}" in capsys.readouterr().err
