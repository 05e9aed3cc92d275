"""interpolate: against a per-pixel reference, gradients (gradcheck), screen derivatives."""

from __future__ import annotations

import pytest
import torch

from meshlift.errors import RenderError
from meshlift.render import interpolate, rasterize, render_depth
from meshlift.render.reference import interpolate_reference

from _render_scenes import random_scene


@pytest.mark.parametrize("batched_attr", [False, True])
def test_matches_reference(batched_attr):
    pos, tri = random_scene(B=2, T=8, seed=11)
    rast, _ = rasterize(pos, tri, (12, 14))
    V = pos.shape[1]
    attr = torch.randn(2, V, 5) if batched_attr else torch.randn(V, 5)
    out, da = interpolate(attr, rast, tri)
    assert da is None
    torch.testing.assert_close(out, interpolate_reference(attr, rast, tri))
    assert torch.all(out[rast[..., 3] == 0] == 0)


def test_vertex_values_and_depth():
    # interpolating clip w gives camera depth; interpolating pos reproduces the plane
    pos, tri = random_scene(B=1, T=4, seed=12, dtype=torch.float64)
    rast, _ = rasterize(pos, tri, (16, 16))
    depth = render_depth(rast, pos, tri)
    cov = rast[..., 3] > 0
    # z/w of the rasterizer equals interpolated z / interpolated w (perspective-correct weights)
    zw, _ = interpolate(pos[..., 2:3].contiguous(), rast, tri)
    torch.testing.assert_close((zw / depth.clamp_min(1e-9))[cov], rast[..., 2:3][cov], rtol=1e-9, atol=1e-9)
    assert torch.all(depth[cov] > 0) and torch.all(depth[~cov] == 0)


def test_gradcheck_attr_and_rast():
    pos, tri = random_scene(B=1, T=4, seed=13, dtype=torch.float64)
    rast, db = rasterize(pos, tri, (6, 6))
    rast = rast.detach().requires_grad_(True)
    db = db.detach().requires_grad_(True)
    attr = torch.randn(pos.shape[1], 3, dtype=torch.float64, requires_grad=True)

    def f(a, r, d):
        # the id channel is discrete: perturbing it must not change the triangle
        r = torch.cat([r[..., :3], rast[..., 3:].detach()], -1)
        return interpolate(a, r, tri, rast_db=d, diff_attrs="all")

    assert torch.autograd.gradcheck(f, (attr, rast, db), eps=1e-6, atol=1e-6)


def test_gradient_to_pos_through_interpolate():
    pos, tri = random_scene(B=1, T=4, seed=14, dtype=torch.float64)
    pos = pos.requires_grad_(True)
    attr = torch.randn(pos.shape[1], 2, dtype=torch.float64)

    def f(p):
        r, _ = rasterize(p, tri, (8, 8))
        return interpolate(attr, r, tri)[0]

    assert torch.autograd.gradcheck(f, (pos,), eps=1e-6, atol=1e-6)


def test_out_da_matches_finite_differences_of_a_linear_attribute():
    # attribute = NDC x of the vertex / w -> screen-linear only for affine; use an orthographic scene
    pos = torch.tensor(
        [[[-0.9, -0.8, 0.1, 1.0], [0.9, -0.7, 0.2, 1.0], [0.0, 0.9, 0.3, 1.0]]], dtype=torch.float64
    )
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    H, W = 10, 12
    rast, db = rasterize(pos, tri, (H, W))
    attr = pos[0, :, :2].contiguous()  # NDC position itself: dx/dX = 2/W, dy/dY = 2/H
    out, da = interpolate(attr, rast, tri, rast_db=db, diff_attrs=[0, 1])
    cov = rast[0, ..., 3] > 0
    got = da[0][cov]
    torch.testing.assert_close(got[:, 0], torch.full_like(got[:, 0], 2 / W))
    torch.testing.assert_close(got[:, 1], torch.zeros_like(got[:, 1]), atol=1e-12, rtol=0)
    torch.testing.assert_close(got[:, 2], torch.zeros_like(got[:, 2]), atol=1e-12, rtol=0)
    torch.testing.assert_close(got[:, 3], torch.full_like(got[:, 3], 2 / H))


def test_bad_arguments():
    pos, tri = random_scene(B=1, T=2, seed=15)
    rast, db = rasterize(pos, tri, (4, 4))
    with pytest.raises(RenderError, match="attr"):
        interpolate(torch.zeros(6), rast, tri)
    with pytest.raises(RenderError, match="rast_db"):
        interpolate(torch.zeros(6, 2), rast, tri, diff_attrs="all")
    with pytest.raises(RenderError, match="vertices"):
        interpolate(torch.zeros(3, 2), rast, tri)
