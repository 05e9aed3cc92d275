"""meshlift.shading.procedural: procedural HDR environments."""

import pytest
import torch

from meshlift.errors import ConfigError
from meshlift.shading.light import EnvironmentLight
from meshlift.shading.procedural import ENVIRONMENT_KINDS, procedural_environment


@pytest.mark.parametrize("kind", ENVIRONMENT_KINDS)
def test_shape_range_determinism(kind):
    env = procedural_environment(32, kind, seed=3)
    assert env.shape == (32, 64, 3) and env.dtype == torch.float32
    assert float(env.min()) >= 0.0 and bool(torch.isfinite(env).all())
    assert float(env.max()) > 5.0  # bright emitters for highlights
    assert float(env.median()) < 1.0  # ... on a dim background
    assert torch.equal(env, procedural_environment(32, kind, seed=3))
    assert not torch.equal(env, procedural_environment(32, kind, seed=4))
    torch.testing.assert_close(procedural_environment(32, kind, seed=3, intensity=2.0), 2 * env)


def test_sky_layout():
    env = procedural_environment(64, "sky")
    top, horizon, ground = env[2].mean(0), env[30].mean(0), env[60].mean(0)
    assert float(top[2]) > float(top[0])  # blue zenith
    assert float(horizon.mean()) > float(top.mean()) * 0.9  # bright horizon
    assert float(ground.sum()) < float(horizon.sum())  # darker ground (row 0 = zenith, conventions §8)


def test_usable_as_light():
    light = EnvironmentLight.from_latlong(procedural_environment(32, "studio"), 16, min_res=4, lut_resolution=32)
    light.build_mips()
    n = torch.nn.functional.normalize(torch.randn(10, 3), dim=-1)
    out = light.shade(torch.zeros(10, 3), n, torch.full((10, 3), 0.5), torch.tensor([[0.0, 0.3, 0.0]]).expand(10, 3),
                      n * 3.0)
    assert bool((out > 0).all())


def test_validation():
    with pytest.raises(ConfigError, match="unknown kind"):
        procedural_environment(16, "forest")
    with pytest.raises(ConfigError, match="height"):
        procedural_environment(2)
