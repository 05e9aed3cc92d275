"""antialias: exact edge coverage, reference twin, finite differences on silhouette vertices, gradcheck."""

from __future__ import annotations

import pytest
import torch

from meshlift.errors import RenderError
from meshlift.render import antialias, antialias_construct_topology, coverage_mask, interpolate, rasterize
from meshlift.render.reference import antialias_reference

from _render_scenes import random_scene


def _pix_to_ndc(X, W):
    return 2 * X / W - 1


def test_topology_opposite_vertices():
    tri = torch.tensor([[0, 1, 2], [2, 1, 3], [3, 1, 4]])
    opp = antialias_construct_topology(tri)
    # edge (1,2) opposite vertex 0 in tri 0 is shared with tri 1 whose opposite vertex is 3
    assert opp[0].tolist() == [3, -1, -1]
    assert opp[1].tolist() == [4, -1, 0]
    assert opp[2].tolist() == [-1, -1, 2]


def test_vertical_edge_gives_exact_box_coverage():
    # a big quad whose right edge is the vertical line X = 10.3 px: the pixel column j = 10 must get
    # coverage 0.3, columns left of it 1, right of it 0
    H, W = 8, 16
    xe = _pix_to_ndc(10.3, W)
    pos = torch.tensor([[[-2.0, -2, 0, 1], [xe, -2, 0, 1], [xe, 2, 0, 1], [-2, 2, 0, 1]]], dtype=torch.float64)
    tri = torch.tensor([[0, 1, 2], [0, 2, 3]], dtype=torch.int32)
    rast, _ = rasterize(pos, tri, (H, W))
    aa = antialias(coverage_mask(rast), rast, pos, tri)[0, :, :, 0]
    want = torch.zeros(W, dtype=torch.float64)
    want[:10] = 1
    want[10] = 0.3
    for i in range(H):
        torch.testing.assert_close(aa[i], want)


def test_slanted_edge_coverage_is_close_to_area():
    # nearly vertical slanted edge: AA coverage approximates the exact pixel-area coverage
    H, W = 32, 32
    x_top, x_bot = 12.2, 17.9  # pixel x of the edge at Y = 0 and Y = H
    pos = torch.tensor(
        [[[-2.0, -1, 0, 1], [_pix_to_ndc(x_top, W), -1, 0, 1], [_pix_to_ndc(x_bot, W), 1, 0, 1], [-2, 1, 0, 1]]],
        dtype=torch.float64,
    )
    tri = torch.tensor([[0, 1, 2], [0, 2, 3]], dtype=torch.int32)
    rast, _ = rasterize(pos, tri, (H, W))
    aa = antialias(coverage_mask(rast), rast, pos, tri)[0, :, :, 0]
    # exact coverage of pixel (i, j): integrate the edge position over the row, clip to the pixel
    Y = torch.linspace(0, H, H * 64 + 1, dtype=torch.float64)[:-1] + 0.5 / 64
    xe = x_top + (x_bot - x_top) * Y / H
    cov = (xe.view(H, 64, 1) - torch.arange(W, dtype=torch.float64).view(1, 1, W)).clamp(0, 1).mean(1)
    assert (aa - cov).abs().max() < 0.07
    assert (aa - cov).abs().mean() < (coverage_mask(rast)[0, :, :, 0] - cov).abs().mean() / 4


@pytest.mark.parametrize("seed", [0, 1])
def test_matches_reference(seed):
    pos, tri = random_scene(B=2, T=10, seed=seed, dtype=torch.float64)
    rast, _ = rasterize(pos, tri, (24, 28))
    color = torch.rand(2, 24, 28, 3, dtype=torch.float64)
    out = antialias(color, rast, pos, tri)
    ref = antialias_reference(color, rast, pos, tri)
    assert (out - color).abs().sum() > 0.5  # edges were antialiased
    torch.testing.assert_close(out, ref)


def _sphere_like():
    # a closed octahedron: only silhouette edges (not interior edges) are antialiased
    v = torch.tensor(
        [[0.6, 0, 0], [-0.6, 0, 0], [0, 0.55, 0], [0, -0.6, 0], [0, 0, 0.5], [0, 0, -0.5]], dtype=torch.float64
    )
    v = v @ torch.tensor([[0.9, 0.3, 0.2], [-0.3, 0.95, 0.1], [-0.15, -0.1, 0.98]], dtype=torch.float64)
    tri = torch.tensor(
        [[0, 2, 4], [2, 1, 4], [1, 3, 4], [3, 0, 4], [2, 0, 5], [1, 2, 5], [3, 1, 5], [0, 3, 5]], dtype=torch.int32
    )
    pos = torch.cat([v[:, :2] * 0.9 + 0.03, v[:, 2:] * 0.3 + 0.5, torch.ones(6, 1, dtype=torch.float64)], 1)
    pos[:, 3] += v[:, 2] * 0.2  # mild perspective
    return pos.unsqueeze(0), tri


def test_interior_edges_are_left_alone():
    pos, tri = _sphere_like()
    rast, _ = rasterize(pos, tri, (20, 20))
    color = torch.rand(1, 20, 20, 3, dtype=torch.float64)
    out = antialias(color, rast, pos, tri)
    ids = rast[0, ..., 3]
    inner = torch.zeros(20, 20, dtype=torch.bool)
    # pixels whose 4-neighbourhood is fully covered are never the target of a silhouette blend
    cov = ids > 0
    inner[1:-1, 1:-1] = cov[1:-1, 1:-1] & cov[:-2, 1:-1] & cov[2:, 1:-1] & cov[1:-1, :-2] & cov[1:-1, 2:]
    assert torch.equal(out[0][inner], color[0][inner])
    assert (out - color).abs().sum() > 0.1


def test_finite_differences_on_silhouette_vertices():
    pos, tri = _sphere_like()
    H = W = 24
    rast, _ = rasterize(pos, tri, (H, W))
    g = torch.Generator().manual_seed(0)
    vc = torch.rand(6, 3, dtype=torch.float64, generator=g)
    weights = torch.rand(1, H, W, 3, dtype=torch.float64, generator=g)

    def loss(p):
        r, _ = rasterize(p, tri, (H, W))
        col, _ = interpolate(vc, r, tri)
        return (antialias(col, r, p, tri) * weights).sum(), r

    p = pos.clone().requires_grad_(True)
    L, _ = loss(p)
    L.backward()
    grad = p.grad[0]
    h = 1e-6
    checked = 0
    for v in range(6):
        for c in range(2):  # x and y of the vertex: moves silhouettes
            pp, pm = pos.clone(), pos.clone()
            pp[0, v, c] += h
            pm[0, v, c] -= h
            Lp, rp = loss(pp)
            Lm, rm = loss(pm)
            if not torch.equal(rp[..., 3], rm[..., 3]):
                continue  # a pixel centre changed triangle: not differentiable at this step
            fd = (Lp - Lm) / (2 * h)
            torch.testing.assert_close(grad[v, c], fd, rtol=1e-4, atol=1e-6)
            checked += 1
    assert checked >= 8
    # the silhouette term matters: without antialias the gradient is clearly different
    q = pos.clone().requires_grad_(True)
    r, _ = rasterize(q, tri, (H, W))
    (interpolate(vc, r, tri)[0] * weights).sum().backward()
    assert (q.grad[0, :, :2] - grad[:, :2]).abs().max() > 0.1 * grad[:, :2].abs().max()


def test_gradcheck_color_and_pos():
    pos, tri = _sphere_like()
    rast, _ = rasterize(pos, tri, (8, 8))
    color = torch.rand(1, 8, 8, 1, dtype=torch.float64, requires_grad=True)
    p = pos.clone().requires_grad_(True)
    out = antialias(color, rast, p, tri)
    assert torch.autograd.grad(out.sum(), p)[0].abs().sum() > 0
    assert torch.autograd.gradcheck(lambda c, q: antialias(c, rast, q, tri), (color, p), eps=1e-7, atol=1e-5)


def test_range_mode_and_topology_reuse():
    pos, tri = _sphere_like()
    rast, _ = rasterize(pos, tri, (16, 16))
    color = torch.rand(1, 16, 16, 3, dtype=torch.float64)
    a = antialias(color, rast, pos, tri)
    rast_r, _ = rasterize(pos[0], tri, (16, 16), ranges=torch.tensor([[0, 8]], dtype=torch.int32))
    topo = antialias_construct_topology(tri)
    b = antialias(color, rast_r, pos[0], tri, topology=topo)
    torch.testing.assert_close(a, b)


def test_bad_arguments():
    pos, tri = _sphere_like()
    rast, _ = rasterize(pos, tri, (8, 8))
    with pytest.raises(RenderError, match="color"):
        antialias(torch.rand(1, 4, 4, 3, dtype=torch.float64), rast, pos, tri)
    with pytest.raises(RenderError, match="topology"):
        antialias(torch.rand(1, 8, 8, 3), rast, pos, tri, topology=torch.zeros(2, 3, dtype=torch.long))
