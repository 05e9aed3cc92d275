"""meshlift.shading.cubemap: face layout, solid angles, seamless sampling, lat-long conversions."""

import math

import pytest
import torch

from meshlift.errors import RenderError
from meshlift.shading import cubemap as cm


def test_face_layout_matches_opengl_table():
    # Face centres point along (+x, -x, +y, -y, +z, -z); on +x columns run along -z and rows along -y
    # (OpenGL: s = -z / |x|, t = -y / |x|), so texel (row 0, col 0) leans towards (+y, +z).
    d = cm.cube_texel_directions(2)
    centres = d.mean(dim=(1, 2))
    centres = centres / centres.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(centres, torch.tensor([[1.0, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1],
                                                      [0, 0, -1]]), atol=1e-6, rtol=0)
    s = 1 / math.sqrt(1.5)
    h = 0.5 * s
    torch.testing.assert_close(d[0, 0, 0], torch.tensor([s, h, h]))  # +x: row 0 -> +y, col 0 -> +z
    torch.testing.assert_close(d[2, 0, 0], torch.tensor([-h, s, -h]))  # +y: row 0 -> -z, col 0 -> -x
    torch.testing.assert_close(d[4, 1, 1], torch.tensor([h, -h, s]))  # +z: row 1 -> -y, col 1 -> +x


def test_dir_to_cube_inverts_cube_to_dir():
    res = 7
    d = cm.cube_texel_directions(res, torch.float64)
    face, x, y = cm.dir_to_cube(d.reshape(-1, 3))
    c = (torch.arange(res, dtype=torch.float64) + 0.5) * 2 / res - 1
    yy, xx = torch.meshgrid(c, c, indexing="ij")
    assert torch.equal(face, torch.arange(6).repeat_interleave(res * res))
    torch.testing.assert_close(x, xx.reshape(-1).repeat(6))
    torch.testing.assert_close(y, yy.reshape(-1).repeat(6))


def test_solid_angles():
    for res in (1, 4, 9):
        w = cm.texel_solid_angles(res, torch.float64)
        assert abs(float(w.sum()) - 4 * math.pi) < 1e-12
    # One texel against a fine numerical integral of dA / (x^2 + y^2 + 1)^{3/2}.
    res = 4
    n = 400
    t = (torch.arange(n, dtype=torch.float64) + 0.5) / n * 0.5  # texel (row 0, col 0): x, y in [-1, -0.5]
    yy, xx = torch.meshgrid(t - 1, t - 1, indexing="ij")
    num = (1 / (xx ** 2 + yy ** 2 + 1) ** 1.5).sum() * (0.5 / n) ** 2
    assert abs(float(cm.texel_solid_angles(res, torch.float64)[0, 0, 0]) - float(num)) < 1e-6


def test_sample_exact_at_texel_centres():
    cube = torch.rand(6, 5, 5, 2, dtype=torch.float64)
    d = cm.cube_texel_directions(5, torch.float64)
    torch.testing.assert_close(cm.sample_cube(cube, d), cube)


def test_sampling_is_seamless():
    # A smooth function of direction is reproduced to O(h^2) everywhere, edges and corners included;
    # clamping within faces (no border) would leave an O(h) error along the edges.
    res = 32
    a = torch.tensor([0.3, -0.8, 0.5], dtype=torch.float64)
    f = lambda d: torch.exp(d @ a)[..., None]  # noqa: E731
    cube = f(cm.cube_texel_directions(res, torch.float64))
    g = torch.Generator().manual_seed(0)
    dirs = torch.randn(20000, 3, dtype=torch.float64, generator=g)
    # Directions near the edges and corners.
    edge = torch.tensor([[1.0, 1.0, 0.3], [1.0, -0.2, -1.0], [-1.0, 1.0, 1.0], [0.5, -1.0, 1.0], [1, 1, 1]],
                        dtype=torch.float64)
    dirs = torch.cat([dirs, edge + 1e-3 * torch.randn(5, 3, dtype=torch.float64, generator=g)])
    dirs = dirs / dirs.norm(dim=-1, keepdim=True)
    err = (cm.sample_cube(cube, dirs) - f(dirs)).abs().max()
    assert float(err) < 4e-3, float(err)


def test_sample_cube_gradients():
    cube = torch.rand(6, 3, 3, 2, dtype=torch.float64, requires_grad=True)
    dirs = torch.randn(40, 3, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda c: cm.sample_cube(c, dirs), (cube,))


def test_sample_cube_mip_interpolates_levels():
    l0 = torch.rand(6, 8, 8, 3, dtype=torch.float64)
    l1 = cm.avg_pool_cube(l0)
    l2 = cm.avg_pool_cube(l1)
    dirs = torch.randn(2, 50, 3, dtype=torch.float64)
    s0, s1, s2 = (cm.sample_cube(lv, dirs) for lv in (l0, l1, l2))
    for lvl, expected in ((0.0, s0), (1.0, s1), (2.0, s2), (5.0, s2), (-1.0, s0), (1.25, 0.75 * s1 + 0.25 * s2)):
        got = cm.sample_cube_mip([l0, l1, l2], dirs, torch.full((2, 50), lvl, dtype=torch.float64))
        torch.testing.assert_close(got, expected)


def test_sample_cube_mip_matches_per_level_twin_forward_backward():
    """One gather over all levels (sample_cube_mip) vs the per-level loop twin, values and gradients."""
    base = torch.rand(6, 8, 8, 3, dtype=torch.float64)
    levels = [base, cm.avg_pool_cube(base), cm.avg_pool_cube(cm.avg_pool_cube(base)), torch.rand(6, 1, 1, 3).double()]
    dirs = torch.randn(3, 40, 3, dtype=torch.float64)
    level = torch.rand(3, 40, dtype=torch.float64) * 3.6 - 0.3  # some below 0 / above L - 1 (clamped)
    level[0, :4] = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)  # exact levels: values agree
    ins_a = [lv.clone().requires_grad_() for lv in levels] + [dirs.clone().requires_grad_()]
    ins_b = [lv.clone().requires_grad_() for lv in levels] + [dirs.clone().requires_grad_()]
    la, lb = level.clone().requires_grad_(), level.clone().requires_grad_()
    a = cm.sample_cube_mip(ins_a[:4], ins_a[4], la)
    b = cm.sample_cube_mip_reference(ins_b[:4], ins_b[4], lb)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(a)
    ga = torch.autograd.grad((a * g).sum(), ins_a + [la])
    gb = torch.autograd.grad((b * g).sum(), ins_b + [lb])
    for u, v in zip(ga[:5], gb[:5]):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)
    inner = (level - level.round()).abs() > 1e-6  # the level derivative differs only at exact integers
    torch.testing.assert_close(ga[5][inner], gb[5][inner], rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda c0, c1, d, lv: cm.sample_cube_mip([c0, c1], d, lv),
        (levels[0][:, :4, :4].contiguous().requires_grad_(), levels[2].clone().requires_grad_(),
         dirs[0, :6].clone().requires_grad_(), (torch.rand(6, dtype=torch.float64) * 0.8 + 0.1).requires_grad_()),
    )
    one = cm.sample_cube_mip(levels[:1], dirs, level)
    torch.testing.assert_close(one, cm.sample_cube(levels[0], dirs))


def test_latlong_layout():
    d = cm.latlong_directions(4)
    assert d.shape == (4, 8, 3)
    assert float(d[0, :, 1].min()) > 0.9  # row 0 is near the zenith (+y)
    # phi = 2 pi (j + 0.5) / W - pi: column 0 is just past -pi (+z side), the middle of the image is -z,
    # the quarter points are -x and +x.
    d = cm.latlong_directions(64)
    assert float(d[32, 0, 2]) > 0.99
    assert float(d[32, 64, 2]) < -0.99 or float(d[32, 63, 2]) < -0.99
    assert float(d[32, 32, 0]) < -0.99 and float(d[32, 96, 0]) > 0.99
    uv = cm.dir_to_latlong_uv(d)
    h, w = 64, 128
    j = (torch.arange(w) + 0.5) / w
    i = (torch.arange(h) + 0.5) / h
    torch.testing.assert_close(uv[..., 0], j[None].expand(h, w), atol=1e-5, rtol=0)
    torch.testing.assert_close(uv[..., 1], i[:, None].expand(h, w), atol=1e-5, rtol=0)


def test_latlong_cube_roundtrip():
    a = torch.tensor([0.2, 0.9, -0.4])
    f = lambda d: torch.stack([torch.exp(d @ a), 1 + d[..., 0], 2 - d[..., 2]], -1)  # noqa: E731
    img = f(cm.latlong_directions(64))
    cube = cm.latlong_to_cube(img, 32)
    torch.testing.assert_close(cube, f(cm.cube_texel_directions(32)), atol=5e-3, rtol=0)
    back = cm.cube_to_latlong(cube, 64)
    torch.testing.assert_close(back, img, atol=1e-2, rtol=0)
    # Supersampling box-filters: a map far larger than the cube still reproduces a smooth function.
    big = f(cm.latlong_directions(256))
    torch.testing.assert_close(cm.latlong_to_cube(big, 8), f(cm.cube_texel_directions(8)), atol=2e-2, rtol=0)


def test_validation():
    with pytest.raises(RenderError, match=r"\[6, R, R, C\]"):
        cm.sample_cube(torch.zeros(5, 4, 4, 3), torch.zeros(1, 3))
    with pytest.raises(RenderError, match="even"):
        cm.avg_pool_cube(torch.zeros(6, 3, 3, 3))
    with pytest.raises(RenderError, match="dirs"):
        cm.sample_cube(torch.zeros(6, 4, 4, 3), torch.zeros(1, 2))
