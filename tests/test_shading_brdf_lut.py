"""meshlift.shading.brdf_lut: the split-sum DFG table against closed forms and a brute-force integral."""

import math
import os

import pytest
import torch

from meshlift.errors import RenderError
from meshlift.shading import bsdf
from meshlift.shading.brdf_lut import _integrate, brdf_lut, hammersley, lookup_brdf_lut

RES = 32


@pytest.fixture(scope="module", autouse=True)
def _fresh_cache(tmp_path_factory):
    """Test the computation, not a table cached on disk by an earlier run."""
    from meshlift.shading import brdf_lut as mod

    old = os.environ.get("MESHLIFT_CACHE")
    os.environ["MESHLIFT_CACHE"] = str(tmp_path_factory.mktemp("lut_cache"))
    mod._brdf_lut_cpu.cache_clear()
    yield
    mod._brdf_lut_cpu.cache_clear()
    if old is None:
        os.environ.pop("MESHLIFT_CACHE", None)
    else:
        os.environ["MESHLIFT_CACHE"] = old


@pytest.fixture(scope="module")
def lut():
    return brdf_lut(RES, samples=1024)


def _centre(i):
    return (i + 0.5) / RES


def test_shape_range_determinism(lut):
    assert lut.shape == (RES, RES, 2) and lut.dtype == torch.float32
    assert float(lut.min()) >= 0.0 and float(lut.sum(-1).max()) <= 1.0 + 1e-4
    again = brdf_lut(RES, samples=1024)
    assert torch.equal(lut, again) and again.data_ptr() != lut.data_ptr()  # memoised, returned as a copy


def test_smooth_limit_is_schlick(lut):
    # roughness -> 0: l is the mirror direction, G -> 1, so A = 1 - (1 - n·v)^5 and B = (1 - n·v)^5.
    # Row 0 has roughness 1/64 (alpha 2.4e-4): the analytic limit holds to ~1e-3 away from grazing n·v.
    nv = (torch.arange(RES) + 0.5) / RES
    fc = (1 - nv) ** 5
    expected = torch.stack([1 - fc, fc], -1)
    torch.testing.assert_close(lut[0, 4:], expected[4:], atol=2e-3, rtol=0)


@pytest.mark.parametrize("geometry", ["smith_correlated", "schlick_ue4"])
def test_rough_normal_incidence_closed_form(geometry):
    # roughness 1, n·v = 1: h is cosine-distributed, n·l = 2 cos^2 θh - 1 and for both G models
    # G_vis = 2 n·l / (n·l + 1), so A + B = ∫_{1/2}^{1} (2 - 1/u) du = 1 - ln 2 (Karis 2013's table corner).
    one = torch.ones(1, dtype=torch.float64)
    ab = _integrate(one, one, hammersley(1 << 14), geometry)[0, 0]
    assert abs(float(ab.sum()) - (1 - math.log(2))) < 1e-3
    # The table's corner texel (roughness = n·v = 1 - 1/64) is close to it.
    t = brdf_lut(RES, samples=1024, geometry=geometry)
    assert abs(float(t[-1, -1].sum()) - (1 - math.log(2))) < 0.03


def _brute_force(n_dot_v, roughness, n_theta=300, n_phi=300):
    """∫ pbr_specular(F0, n, v, l) dl by midpoint quadrature over l: returns (A, B)."""
    th = (torch.arange(n_theta, dtype=torch.float64) + 0.5) * (math.pi / 2) / n_theta
    ph = (torch.arange(n_phi, dtype=torch.float64) + 0.5) * (2 * math.pi) / n_phi
    t, p = torch.meshgrid(th, ph, indexing="ij")
    ls = torch.stack([torch.sin(t) * torch.cos(p), torch.sin(t) * torch.sin(p), torch.cos(t)], -1).reshape(-1, 3)
    w = (torch.sin(t) * (math.pi / 2 / n_theta) * (2 * math.pi / n_phi)).reshape(-1, 1)
    n = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    v = torch.tensor([[math.sqrt(1 - n_dot_v ** 2), 0.0, n_dot_v]], dtype=torch.float64)
    alpha = torch.tensor([[roughness ** 2]], dtype=torch.float64)
    one = bsdf.pbr_specular(torch.ones(1, 1, dtype=torch.float64), n, v, ls, alpha, min_roughness=0.0)
    zero = bsdf.pbr_specular(torch.zeros(1, 1, dtype=torch.float64), n, v, ls, alpha, min_roughness=0.0)
    a_plus_b, b = float((one * w).sum()), float((zero * w).sum())
    return a_plus_b - b, b


@pytest.mark.parametrize("i,j", [(12, 20), (20, 8), (31, 16), (16, 30), (25, 3)])
def test_matches_brute_force_integral_of_pbr_specular(lut, i, j):
    a, b = _brute_force(_centre(j), _centre(i))
    assert abs(float(lut[i, j, 0]) - a) < 1e-2, (float(lut[i, j, 0]), a)
    assert abs(float(lut[i, j, 1]) - b) < 3e-3, (float(lut[i, j, 1]), b)


def test_hammersley():
    x = hammersley(8)
    torch.testing.assert_close(x[:, 1], torch.tensor([0, 0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875],
                                                     dtype=torch.float64))
    torch.testing.assert_close(x[:, 0], torch.arange(8, dtype=torch.float64) / 8)


def test_lookup_exact_at_texel_centres_and_clamped(lut):
    i, j = torch.tensor([[3], [17], [31]]), torch.tensor([[5], [0], [31]])
    got = lookup_brdf_lut(lut, (j + 0.5) / RES, (i + 0.5) / RES)
    torch.testing.assert_close(got, lut[i[:, 0], j[:, 0]])
    # Outside [0.5 / R, 1 - 0.5 / R] the edge texel is returned.
    edge = lookup_brdf_lut(lut, torch.tensor([[0.0], [1.0]]), torch.tensor([[0.0], [1.0]]))
    torch.testing.assert_close(edge, torch.stack([lut[0, 0], lut[-1, -1]]))
    # Midway between two texels: the average.
    mid = lookup_brdf_lut(lut, torch.tensor([[6.0 / RES]]), torch.tensor([[(3 + 0.5) / RES]]))
    torch.testing.assert_close(mid[0], 0.5 * (lut[3, 5] + lut[3, 6]))


def test_lookup_gradients(lut):
    nv = torch.tensor([[0.3], [0.71]], dtype=torch.float64, requires_grad=True)
    r = torch.tensor([[0.45], [0.2]], dtype=torch.float64, requires_grad=True)
    table = lut.double()
    assert torch.autograd.gradcheck(lambda a, b: lookup_brdf_lut(table, a, b), (nv, r))


def test_validation():
    with pytest.raises(RenderError, match="resolution"):
        brdf_lut(1)
    with pytest.raises(RenderError, match="geometry"):
        brdf_lut(8, geometry="beckmann")
    with pytest.raises(RenderError, match=r"\[R, R, 2\]"):
        lookup_brdf_lut(torch.zeros(4, 4), torch.zeros(1, 1), torch.zeros(1, 1))


def test_disk_cache(tmp_path, monkeypatch):
    from meshlift.shading import brdf_lut as mod

    monkeypatch.setenv("MESHLIFT_CACHE", str(tmp_path))
    mod._brdf_lut_cpu.cache_clear()
    a = brdf_lut(8, samples=64)
    files = list(tmp_path.glob("brdf_lut_*_8_64.npy"))
    assert len(files) == 1
    mod._brdf_lut_cpu.cache_clear()
    assert torch.equal(brdf_lut(8, samples=64), a)  # read back from disk
    files[0].write_bytes(b"garbage")
    mod._brdf_lut_cpu.cache_clear()
    assert torch.equal(brdf_lut(8, samples=64), a)  # a corrupt cache file is recomputed
    mod._brdf_lut_cpu.cache_clear()
