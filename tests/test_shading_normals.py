"""meshlift.shading.normals: tangent-space perturbation, two-sided flip, bent normals."""

import pytest
import torch

from meshlift.errors import RenderError
from meshlift.shading.normals import prepare_shading_normal

Z = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
X = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
ORIGIN = torch.zeros(1, 3, dtype=torch.float64)
ABOVE = torch.tensor([[0.0, 0.0, 5.0]], dtype=torch.float64)


def test_tangent_frame_orientation():
    # N = +z, T = +x -> B = N x T = +y: OpenGL maps +Y along B, DirectX along -B.
    p = torch.tensor([[0.0, 0.6, 0.8]], dtype=torch.float64)
    gl = prepare_shading_normal(ORIGIN, ABOVE, p, Z, X, Z)
    dx = prepare_shading_normal(ORIGIN, ABOVE, p, Z, X, Z, opengl=False)
    torch.testing.assert_close(gl, torch.tensor([[0.0, 0.6, 0.8]], dtype=torch.float64))
    torch.testing.assert_close(dx, torch.tensor([[0.0, -0.6, 0.8]], dtype=torch.float64))
    px = torch.tensor([[0.6, 0.0, 0.8]], dtype=torch.float64)
    torch.testing.assert_close(prepare_shading_normal(ORIGIN, ABOVE, px, Z, X, Z), px)
    # No perturbation = (0, 0, 1); the smooth normal and tangent are normalised first.
    torch.testing.assert_close(prepare_shading_normal(ORIGIN, ABOVE, None, 3 * Z, 2 * X, Z), Z)
    torch.testing.assert_close(prepare_shading_normal(ORIGIN, ABOVE, Z, Z, X, Z), Z)


def test_two_sided_and_bent_normals():
    below = -ABOVE
    n = prepare_shading_normal(ORIGIN, below, None, Z, X, Z)
    torch.testing.assert_close(n, -Z)  # seen from behind: flipped
    one_sided = prepare_shading_normal(ORIGIN, below, None, Z, X, Z, two_sided=False)
    torch.testing.assert_close(one_sided, Z)  # v·n < 0: fully bent to the (unflipped) geometric normal
    # A shading normal tilted away from the viewer is blended towards the geometric normal.
    tilt = torch.tensor([[0.0, 0.99, 0.141]], dtype=torch.float64)
    grazing_view = torch.tensor([[0.0, -5.0, 0.5]], dtype=torch.float64)
    bent = prepare_shading_normal(ORIGIN, grazing_view, tilt, Z, X, Z)
    v = grazing_view / grazing_view.norm()
    assert float((bent * v).sum()) > float((tilt / tilt.norm() * v).sum())


def _nvdiffrec_twin(pos, view_pos, p, n, t, g):
    """Literal transcription of the published formula: T p.x - (T x N) p.y + N max(p.z, 0), two-sided, bend."""
    nrm = lambda x: x / x.norm(dim=-1, keepdim=True)  # noqa: E731
    n, t, v = nrm(n), nrm(t), nrm(view_pos - pos)
    b = nrm(torch.cross(t, n, dim=-1))
    s = nrm(t * p[..., :1] - b * p[..., 1:2] + n * p[..., 2:3].clamp(min=0))
    front = (g * v).sum(-1, keepdim=True) > 0
    s, g = torch.where(front, s, -s), torch.where(front, g, -g)
    w = ((v * s).sum(-1, keepdim=True) / 0.1).clamp(0, 1)
    return g + (s - g) * w


def test_matches_twin_and_gradcheck():
    gen = torch.Generator().manual_seed(0)
    k = 16
    pos = torch.randn(k, 3, dtype=torch.float64, generator=gen) * 0.1
    view = torch.randn(k, 3, dtype=torch.float64, generator=gen) * 3
    p = torch.randn(k, 3, dtype=torch.float64, generator=gen)
    p[:, 2] = p[:, 2].abs() + 0.5
    n = torch.randn(k, 3, dtype=torch.float64, generator=gen)
    t = torch.randn(k, 3, dtype=torch.float64, generator=gen)
    g = torch.nn.functional.normalize(n + 0.2 * torch.randn(k, 3, dtype=torch.float64, generator=gen), dim=-1)
    torch.testing.assert_close(prepare_shading_normal(pos, view, p, n, t, g), _nvdiffrec_twin(pos, view, p, n, t, g))
    args = [a.clone().requires_grad_() for a in (pos, p, n, t)]
    assert torch.autograd.gradcheck(lambda a, b, c, d: prepare_shading_normal(a, view, b, c, d, g), args)


def test_validation():
    with pytest.raises(RenderError, match="smooth_tng"):
        prepare_shading_normal(ORIGIN, ABOVE, None, Z, torch.zeros(1, 2), Z)


def test_handedness_flips_the_bitangent():
    """glTF TANGENT.w = -1 (a mirrored UV chart): B = w (N x T), so +Y of the map still points along B."""
    p = torch.tensor([[0.0, 0.6, 0.8]], dtype=torch.float64)
    minus_x_mirrored = torch.tensor([[-1.0, 0.0, 0.0, -1.0]], dtype=torch.float64)  # mirrored chart: T = -x, w = -1
    plus_x = torch.tensor([[1.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    want = torch.tensor([[0.0, 0.6, 0.8]], dtype=torch.float64)  # B = +y on both charts
    torch.testing.assert_close(prepare_shading_normal(ORIGIN, ABOVE, p, Z, minus_x_mirrored, Z), want)
    torch.testing.assert_close(prepare_shading_normal(ORIGIN, ABOVE, p, Z, plus_x, Z), want)
    # without the handedness the mirrored chart would show (0, -0.6, 0.8), the bug of issue 15
    torch.testing.assert_close(prepare_shading_normal(ORIGIN, ABOVE, p, Z, minus_x_mirrored[:, :3], Z),
                               torch.tensor([[0.0, -0.6, 0.8]], dtype=torch.float64))
    # 4-component tangents with w = +1 equal the 3-component form, gradients included
    gen = torch.Generator().manual_seed(1)
    n = torch.randn(8, 3, dtype=torch.float64, generator=gen)
    t = torch.randn(8, 3, dtype=torch.float64, generator=gen)
    pp = torch.randn(8, 3, dtype=torch.float64, generator=gen)
    pp[:, 2] = pp[:, 2].abs() + 0.5
    g = torch.nn.functional.normalize(n, dim=-1)
    ones = torch.ones(8, 1, dtype=torch.float64)
    torch.testing.assert_close(prepare_shading_normal(ORIGIN, ABOVE, pp, n, torch.cat([t, ones], -1), g),
                               prepare_shading_normal(ORIGIN, ABOVE, pp, n, t, g))
    tt = torch.cat([t, -ones], -1).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: prepare_shading_normal(ORIGIN, ABOVE, pp, n, x, g), (tt,))
