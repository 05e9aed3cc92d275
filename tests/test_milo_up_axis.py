"""MILo exports turned to glTF's +Y (``up_axis``): the axis from the cameras' up, the rotation, the hint."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from meshlift.errors import ConfigError, MeshError
from meshlift.mesh.orient import nearest_up_axis
from meshlift.structures.mesh import Mesh


def _tri() -> Mesh:
    v = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    return Mesh(v_pos=v, t_pos_idx=torch.tensor([[0, 1, 2]]))


def test_nearest_up_axis():
    axis, angle = nearest_up_axis([0.0068, -0.0956, 0.9954])  # the fox's up from its cameras
    assert axis == "z" and 5.0 < angle < 6.0
    assert nearest_up_axis([-2.0, 0.3, 0.0])[0] == "-x"
    assert nearest_up_axis(np.array([0.0, -1.0, 0.0])) == ("-y", 0.0)
    for bad in ([0, 0, 0], [1, 2], [float("nan"), 0, 1]):
        with pytest.raises(MeshError, match="up must be"):
            nearest_up_axis(bad)


def test_config_up_axis_values():
    import dataclasses

    from meshlift.methods.milo.config import validate
    from meshlift.methods.milo.presets import get_preset

    base = get_preset("verylowres")
    for ok in ("keep", "auto", "z", "-y"):
        validate(dataclasses.replace(base, data="x", up_axis=ok))
    with pytest.raises(ConfigError, match="up_axis"):
        validate(dataclasses.replace(base, data="x", up_axis="up"))


def test_exports_up_auto_turns_by_the_nearest_axis():
    from meshlift.methods.milo.config import MiloConfig
    from meshlift.methods.milo.reconstruct import _exports_up

    m = _tri()
    metrics = {"region": {"roi": {"up": [0.01, -0.09, 0.99]}}}
    a, b, c = _exports_up(MiloConfig(data="x", up_axis="auto"), metrics, (m, m, None))
    assert c is None
    # z-up world -> +Y: the vertex on +Z goes to +Y, the input is not modified
    assert torch.allclose(a.v_pos[0], torch.tensor([0.0, 1.0, 0.0]), atol=1e-6)
    assert torch.equal(m.v_pos[0], torch.tensor([0.0, 0.0, 1.0]))
    assert metrics["up_axis_conversion"]["from"] == "+z" and metrics["up_axis_estimate"]["axis"] == "z"
    assert metrics["frame"].startswith("exported meshes turned +z -> +Y")
    assert math.isclose(float(torch.det(torch.tensor(metrics["up_axis_conversion"]["matrix"]))), 1.0)


def test_exports_up_keep_and_auto_without_estimate():
    from meshlift.methods.milo.config import MiloConfig
    from meshlift.methods.milo.reconstruct import _exports_up

    m = _tri()
    metrics: dict = {}
    assert _exports_up(MiloConfig(data="x"), metrics, (m,))[0] is m and "up_axis_conversion" not in metrics
    assert _exports_up(MiloConfig(data="x", up_axis="auto"), metrics, (m,))[0] is m
    assert metrics["up_axis_conversion"]["applied"] is False
    turned = _exports_up(MiloConfig(data="x", up_axis="z"), {}, (m,))[0]
    assert torch.allclose(turned.v_pos[0], torch.tensor([0.0, 1.0, 0.0]), atol=1e-6)


def test_summary_hints_the_up_axis_when_kept():
    from meshlift.methods.milo.reconstruct import MiloResult, summary_lines

    metrics = {"mesh_psnr": 20.0, "mesh_ssim": 0.5, "mesh_lpips": None, "gaussian_psnr": 21.0, "test_views": 2,
               "extract": "tsdf", "vertices": 3, "faces": 1, "background": "white", "masked": False, "gaussians": 10, "steps": 5, "wall_time_s": 1.0,
               "region": {"roi": {"up": [0.0, 0.05, 1.0]}}}
    r = MiloResult(None, None, metrics, None, {}, [])
    assert any("--up auto" in line and "about z" in line for line in summary_lines(r))
    metrics["up_axis_conversion"] = {"from": "+z"}
    assert not any("--up auto" in line for line in summary_lines(r))
    assert any("exports turned +z -> +Y" in line for line in summary_lines(r))
    metrics.pop("up_axis_conversion")
    metrics["region"]["roi"]["up"] = [0.0, 1.0, 0.02]
    assert not any("--up auto" in line for line in summary_lines(r))
