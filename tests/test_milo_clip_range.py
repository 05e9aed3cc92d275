"""The automatic near/far clip range of the milo mesh renders (:func:`meshlift.methods.milo.occupancy_labels.clip_range`).

A whole-scene mesh surrounds its cameras; the near plane taken over every vertex fell to ``1e-3 far`` and the
float32 depth of the rasterizer cracked on the fox (module docstring of ``clip_range``). These tests pin the
rule: near comes from what the view sees, the depth renders agree with the old rule where it was fine."""

from __future__ import annotations

import torch

from meshlift.methods.milo.occupancy_labels import (NEAR_FRACTION_OF_FAR, NEAR_FRACTION_OF_MIN_Z, clip_range,
                                                    render_mesh_depth)
from meshlift.methods.milo.vertex_render import mesh_world_to_clip as _world_to_clip


def _camera():
    w2c = torch.eye(4)[None]
    w2c[0, 2, 3] = 3.0  # camera at z = -3 looking down +z (OpenCV)
    K = torch.tensor([[[100.0, 0.0, 32.0], [0.0, 100.0, 32.0], [0.0, 0.0, 1.0]]])
    return w2c, K


def _room_and_quad():
    """A unit quad 3 units in front of the camera, plus vertices behind and beside the camera (a room)."""
    quad = torch.tensor([[-0.5, -0.5, 0.0], [0.5, -0.5, 0.0], [0.5, 0.5, 0.0], [-0.5, 0.5, 0.0]])
    room = torch.tensor([[-6.0, -6.0, -9.0], [6.0, -6.0, -9.0], [0.0, 6.0, -9.0],   # behind the camera
                         [-6.0, 0.0, -3.0 + 1e-4], [6.0, 0.0, -2.9], [0.0, 6.0, -2.95],  # beside it, z ~ 0
                         [-6.0, -6.0, 4.0], [6.0, -6.0, 4.0], [0.0, 6.0, 4.0]])  # a far wall
    v = torch.cat([quad, room])
    f = torch.tensor([[0, 1, 2], [0, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]])
    return v, f


def test_near_comes_from_the_vertices_in_the_view():
    v, _ = _room_and_quad()
    w2c, K = _camera()
    near, far = clip_range(v, w2c, K, (64, 64))
    z = v[:, 2] + 3.0
    assert torch.allclose(far, 1.01 * z.max()[None])
    # the vertices behind and beside the camera are out of the view: near = half the quad's depth
    assert torch.allclose(near, torch.tensor([NEAR_FRACTION_OF_MIN_Z * 3.0]))
    # the old rule (every vertex) fell to the far fraction
    assert float(max(NEAR_FRACTION_OF_MIN_Z * z.min(), NEAR_FRACTION_OF_FAR * far)) < 0.01


def test_near_keeps_the_far_fraction_and_handles_an_empty_view():
    w2c, K = _camera()
    close = torch.tensor([[0.0, 0.0, -3.0 + 1e-6], [0.0, 0.0, 10.0]])  # one vertex at the camera, in the view
    near, far = clip_range(close, w2c, K, (64, 64))
    assert torch.allclose(near, NEAR_FRACTION_OF_FAR * far)
    behind = torch.tensor([[0.0, 0.0, -5.0], [1.0, 0.0, -6.0]])  # nothing in front: a valid range anyway
    near, far = clip_range(behind, w2c, K, (64, 64))
    assert bool((near > 0).all()) and bool((far > 0).all()) and bool((near < far).all())


def test_depth_renders_see_the_quad_with_the_room_around_the_camera():
    v, f = _room_and_quad()
    w2c, K = _camera()
    d = render_mesh_depth(v, f, w2c, K, (64, 64))[0]
    centre = d[24:40, 24:40]
    assert bool((centre > 0).all()) and torch.allclose(centre, torch.full_like(centre, 3.0), atol=1e-4)
    clip = _world_to_clip(w2c, K, 64, 64, v)
    ref = render_mesh_depth(v, f, w2c, K, (64, 64), near=1.5, far=float(1.05 * (v[:, 2] + 3).max()))[0]
    assert torch.allclose(d, ref, atol=1e-4)
    # the evaluation's clip matrix uses the same near: z/w of the quad well inside (-1, 1)
    p = torch.cat([v[:4], torch.ones(4, 1)], 1) @ clip[0].T
    zw = p[:, 2] / p[:, 3]
    assert bool((zw.abs() < 0.99).all())


def test_fuse_colors_view_power_favours_the_close_view():
    from meshlift.methods.gaussians.views import SplatViews
    from meshlift.methods.milo.extract import fuse_colors

    H = W = 16
    w2c = torch.eye(4)[None].repeat(2, 1, 1)
    w2c[0, 2, 3], w2c[1, 2, 3] = 1.0, 4.0  # the point (origin) at depth 1 in view 0, 4 in view 1
    K = torch.tensor([[20.0, 0.0, 8.0], [0.0, 20.0, 8.0], [0.0, 0.0, 1.0]])[None].repeat(2, 1, 1)
    img = torch.zeros(2, H, W, 3)
    img[0, ..., 0] = 1.0  # the close view sees red, the far one blue
    img[1, ..., 2] = 1.0
    views = SplatViews(w2c, K, img, torch.ones(2, H, W, 1), ["a", "b"])
    depth = torch.tensor([1.0, 4.0])[:, None, None].expand(2, H, W).contiguous()
    pt = torch.zeros(1, 3)
    mean, n = fuse_colors(pt, views, depth, tol=0.01)
    assert int(n[0]) == 2 and torch.allclose(mean[0], torch.tensor([0.5, 0.0, 0.5]))
    close, _ = fuse_colors(pt, views, depth, tol=0.01, view_power=2.0)  # weights 1 : 1/16
    assert torch.allclose(close[0], torch.tensor([16 / 17, 0.0, 1 / 17]), atol=1e-6)


def test_fuse_colors_weighted_mean_keeps_the_colour_of_distant_views():
    """Weights below 1 (distant views with ``view_power``) must not darken the mean (it once divided by max(1, sum))."""
    from meshlift.methods.gaussians.views import SplatViews
    from meshlift.methods.milo.extract import fuse_colors

    H = W = 16
    w2c = torch.eye(4)[None].repeat(2, 1, 1)
    w2c[0, 2, 3], w2c[1, 2, 3] = 4.0, 5.0  # both views far: weights (1/4)^2 and (1/5)^2 of the unit-depth view
    K = torch.tensor([[20.0, 0.0, 8.0], [0.0, 20.0, 8.0], [0.0, 0.0, 1.0]])[None].repeat(2, 1, 1)
    img = torch.full((2, H, W, 3), 0.6)
    views = SplatViews(w2c, K, img, torch.ones(2, H, W, 1), ["a", "b"])
    depth = torch.tensor([4.0, 5.0])[:, None, None].expand(2, H, W).contiguous()
    mean, n = fuse_colors(torch.zeros(1, 3), views, depth, tol=0.01, view_power=2.0)
    assert int(n[0]) == 2 and n.dtype == torch.int64
    assert torch.allclose(mean[0], torch.full((3,), 0.6), atol=1e-6)
