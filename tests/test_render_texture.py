"""texture: analytic values (ramp, checkerboard mips, boundaries), reference twin, cube maps, gradcheck."""

from __future__ import annotations

import math

import pytest
import torch

from meshlift.errors import RenderError
from meshlift.render import cube_to_face_uv, texture, texture_construct_mip
from meshlift.render.reference import texture_reference


def test_linear_ramp_is_reproduced_exactly():
    Wt = 16
    tex = torch.arange(Wt, dtype=torch.float64).view(1, 1, Wt, 1).expand(1, 4, Wt, 1).contiguous()
    u = torch.linspace(0.5 / Wt, 1 - 0.5 / Wt, 37, dtype=torch.float64)
    uv = torch.stack([u, torch.full_like(u, 0.3)], -1).view(1, 1, -1, 2)
    out = texture(tex, uv, filter_mode="linear", boundary_mode="clamp")
    torch.testing.assert_close(out[0, 0, :, 0], u * Wt - 0.5)
    near = texture(tex, uv, filter_mode="nearest", boundary_mode="clamp")
    torch.testing.assert_close(near[0, 0, :, 0], torch.floor(u * Wt))


@pytest.mark.parametrize("mode", ["wrap", "clamp", "zero"])
def test_boundary_modes_match_reference(mode):
    tex = torch.rand(2, 5, 7, 3, dtype=torch.float64)
    uv = torch.rand(2, 4, 6, 2, dtype=torch.float64) * 1.6 - 0.3
    torch.testing.assert_close(texture(tex, uv, boundary_mode=mode), texture_reference(tex, uv, mode))


def test_boundary_values():
    tex = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).view(1, 2, 2, 1)
    uv = torch.tensor([0.0, 0.25]).view(1, 1, 1, 2)  # half-way between column 1 (wrapped) and 0
    assert texture(tex, uv, boundary_mode="wrap").item() == pytest.approx(1.5)
    assert texture(tex, uv, boundary_mode="clamp").item() == pytest.approx(1.0)
    assert texture(tex, uv, boundary_mode="zero").item() == pytest.approx(0.5)


def test_checkerboard_mip_levels():
    n = 16
    r = torch.arange(n)
    checker = ((r.view(-1, 1) + r.view(1, -1)) % 2).double().view(1, n, n, 1)
    chain = texture_construct_mip(checker)
    assert [c.shape[1] for c in chain] == [16, 8, 4, 2, 1]
    for lvl in chain[1:]:
        torch.testing.assert_close(lvl, torch.full_like(lvl, 0.5))
    uv = torch.rand(1, 3, 5, 2, dtype=torch.float64)
    centre = (torch.floor(uv * n) + 0.5) / n  # texel centres: level 0 returns the texel itself
    want0 = texture(checker, centre, filter_mode="nearest")
    for bias, frac in [(0.0, 0.0), (0.25, 0.25), (1.0, 1.0), (3.0, 1.0), (10.0, 1.0)]:
        b = torch.full((1, 3, 5), bias, dtype=torch.float64)
        out = texture(checker, centre, mip_level_bias=b, filter_mode="linear-mipmap-linear")
        torch.testing.assert_close(out, want0 * (1 - frac) + 0.5 * frac)


def test_uv_da_selects_the_level_of_the_footprint():
    n = 32
    tex = torch.rand(1, n, n, 2, dtype=torch.float64)
    uv = torch.rand(1, 4, 4, 2, dtype=torch.float64)
    for texels_per_pixel, level in [(1.0, 0.0), (4.0, 2.0), (2 ** 1.5, 1.5)]:
        d = texels_per_pixel / n
        uv_da = torch.tensor([d, 0.0, 0.0, d * 0.5], dtype=torch.float64).expand(1, 4, 4, 4)  # major axis d
        got = texture(tex, uv, uv_da=uv_da)
        want = texture_reference(tex, uv, "wrap", level=torch.full((1, 4, 4), level, dtype=torch.float64))
        torch.testing.assert_close(got, want)
        # the major axis does not depend on the footprint's orientation
        a = 0.7
        rot = torch.tensor([d * math.cos(a), -d * 0.5 * math.sin(a), d * math.sin(a), d * 0.5 * math.cos(a)], dtype=torch.float64)
        torch.testing.assert_close(texture(tex, uv, uv_da=rot.expand(1, 4, 4, 4)), got)


def test_linear_mipmap_nearest_rounds_the_level():
    tex = torch.rand(1, 8, 8, 1, dtype=torch.float64)
    uv = torch.rand(1, 2, 2, 2, dtype=torch.float64)
    b = torch.full((1, 2, 2), 1.4, dtype=torch.float64)
    out = texture(tex, uv, mip_level_bias=b, filter_mode="linear-mipmap-nearest")
    want = texture_reference(tex, uv, "wrap", level=torch.ones(1, 2, 2, dtype=torch.float64))
    torch.testing.assert_close(out, want)


def test_cube_face_selection_and_orientation():
    # the documented OpenGL table (docs/conventions.md §8)
    dirs = torch.tensor(
        [[1.0, -0.5, 0.25], [-1, -0.5, 0.25], [0.25, 1, -0.5], [0.25, -1, -0.5], [0.25, -0.5, 1], [0.25, -0.5, -1]]
    )
    face, s, t = cube_to_face_uv(dirs)
    assert face.tolist() == [0, 1, 2, 3, 4, 5]
    sc = torch.tensor([-0.25, 0.25, 0.25, 0.25, 0.25, -0.25])
    tc = torch.tensor([0.5, 0.5, -0.5, 0.5, 0.5, 0.5])
    torch.testing.assert_close(s, (sc + 1) / 2)
    torch.testing.assert_close(t, (tc + 1) / 2)
    # texel-centre directions come back to their own texel
    R = 4
    tex = torch.rand(1, 6, R, R, 2)
    centres = (torch.arange(R) + 0.5) / R * 2 - 1
    tt, ss = torch.meshgrid(centres, centres, indexing="ij")
    one = torch.ones_like(ss)
    per_face = [
        torch.stack([one, -tt, -ss], -1),
        torch.stack([-one, -tt, ss], -1),
        torch.stack([ss, one, tt], -1),
        torch.stack([ss, -one, -tt], -1),
        torch.stack([ss, -tt, one], -1),
        torch.stack([-ss, -tt, -one], -1),
    ]
    d = torch.stack(per_face).view(1, 6 * R, R, 3) * 2.5  # any length
    out = texture(tex, d, filter_mode="nearest", boundary_mode="cube")
    torch.testing.assert_close(out.view(1, 6, R, R, 2), tex)
    out = texture(tex, d, filter_mode="linear", boundary_mode="cube")
    torch.testing.assert_close(out.view(1, 6, R, R, 2), tex)


def test_cube_mips_with_bias():
    tex = torch.rand(1, 6, 8, 8, 3, dtype=torch.float64)
    d = torch.randn(1, 5, 5, 3, dtype=torch.float64)
    chain = texture_construct_mip(tex, cube=True)
    assert [c.shape[2] for c in chain] == [8, 4, 2, 1]
    torch.testing.assert_close(chain[-1][0, :, 0, 0], tex.mean((2, 3))[0])
    for bias, lvl in [(10.0, 3), (1.0, 1), (0.0, 0)]:
        b = torch.full((1, 5, 5), bias, dtype=torch.float64)
        got = texture(tex, d, mip_level_bias=b, boundary_mode="cube")
        torch.testing.assert_close(got, texture(chain[lvl], d, filter_mode="linear", boundary_mode="cube"))


def test_gradcheck_2d():
    tex = torch.rand(1, 4, 5, 1, dtype=torch.float64, requires_grad=True)
    uv = (torch.rand(2, 2, 3, 2, dtype=torch.float64) * 1.2 - 0.1).requires_grad_(True)
    uv_da = (torch.rand(2, 2, 3, 4, dtype=torch.float64) * 0.4).requires_grad_(True)
    bias = torch.rand(2, 2, 3, dtype=torch.float64, requires_grad=True)
    for mode in ("wrap", "clamp", "zero"):
        assert torch.autograd.gradcheck(lambda t, u: texture(t, u, boundary_mode=mode), (tex, uv))
    assert torch.autograd.gradcheck(
        lambda t, u, da, b: texture(t, u, uv_da=da, mip_level_bias=b, filter_mode="linear-mipmap-linear"),
        (tex, uv, uv_da, bias),
    )


def test_gradcheck_cube():
    tex = torch.rand(1, 6, 2, 2, 1, dtype=torch.float64, requires_grad=True)
    d = torch.randn(1, 2, 3, 3, dtype=torch.float64).requires_grad_(True)
    bias = (torch.rand(1, 2, 3, dtype=torch.float64) * 0.9).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda t, u, b: texture(t, u, mip_level_bias=b, boundary_mode="cube"), (tex, d, bias)
    )


def test_bad_arguments():
    tex = torch.rand(1, 4, 4, 3)
    uv = torch.rand(1, 2, 2, 2)
    with pytest.raises(RenderError, match="filter_mode"):
        texture(tex, uv, filter_mode="cubic")
    with pytest.raises(RenderError, match="uv_da or mip_level_bias"):
        texture(tex, uv, filter_mode="linear-mipmap-linear")
    with pytest.raises(RenderError, match="cube"):
        texture(tex, torch.rand(1, 2, 2, 3), boundary_mode="cube")
    with pytest.raises(RenderError, match="batch"):
        texture(torch.rand(3, 4, 4, 3), uv)


def test_cube_taps_cross_face_seams():
    # constant value per face (= face index); on +x near its s = 0 edge the left taps land on +z
    R = 4
    tex = torch.arange(6, dtype=torch.float64).view(1, 6, 1, 1, 1).expand(1, 6, R, R, 1).contiguous()
    from meshlift.render.texture import face_uv_to_dir

    s = torch.tensor([0.05], dtype=torch.float64)
    t = torch.tensor([0.5 + 0.5 / R], dtype=torch.float64)  # a texel-centre row: no vertical blend
    d = face_uv_to_dir(torch.tensor([0]), s, t).view(1, 1, 1, 3)
    out = texture(tex, d, filter_mode="linear", boundary_mode="cube")
    fx = s.item() * R - 0.5 - math.floor(s.item() * R - 0.5)  # weight of the on-face tap (col 0)
    assert out.item() == pytest.approx((1 - fx) * 4 + fx * 0)
    # a smooth function of direction stays smooth across every seam
    n = 16
    tt, ss = torch.meshgrid((torch.arange(n) + 0.5) / n, (torch.arange(n) + 0.5) / n, indexing="ij")
    faces = torch.arange(6).view(6, 1, 1).expand(6, n, n)
    dirs = face_uv_to_dir(faces, ss.expand(6, n, n).double(), tt.expand(6, n, n).double())
    dirs = dirs / dirs.norm(dim=-1, keepdim=True)
    smooth = dirs[None]  # texel value = its own unit direction
    q = torch.randn(1, 40, 40, 3, dtype=torch.float64)
    got = texture(smooth, q, filter_mode="linear", boundary_mode="cube")
    want = q / q.norm(dim=-1, keepdim=True)
    assert (got - want).norm(dim=-1).max() < 0.05
