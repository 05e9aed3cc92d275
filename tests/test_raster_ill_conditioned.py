"""Slivers and edge-on triangles: covered pixels whose edge values disagree in sign or sum to 0 (found by a
random search on 2026-12-01; one such pixel made the ethiopian-head run's pass 1 diverge on the H200, step
1824: NaN barycentrics → NaN positions → NaN material). docs/conventions.md §3: such a pixel keeps its
triangle, takes the clamped-edge barycentrics and passes no gradient; every other pixel is unchanged."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from meshlift.render import rasterize  # noqa: E402
from meshlift.render.rasterize import barycentrics_at, clamped_barycentrics, well_conditioned  # noqa: E402

#: Triangles (clip space) alone in a 64² image, each covering one pixel (row, col) whose float edge values disagree
#: in sign: covered by the snapped watertight test (docs/conventions.md §3), ill-conditioned for the barycentrics
#: (found by a random search of near-degenerate triangles, 2026-12-07; 14 of 8,000 at 1/4096 px snapping, 87 of 4,000
#: at 1/256 px; the search of 2026-12-01 found such pixels under the float coverage test before it).
SLIVERS = [
    ([[0.18272049725055695, 0.05725431069731712, 0.12113886326551437, 0.9260021448135376],
      [-1.255428433418274, 0.4091945290565491, -0.12695936858654022, 1.1870598793029785],
      [-0.7965747714042664, 0.305982768535614, -0.9147685766220093, 1.1940405368804932]], (42, 0)),
    ([[0.3376668691635132, -0.9908375144004822, 0.7902773022651672, 1.159915804862976],
      [0.32886359095573425, 0.053226735442876816, 0.2698935270309448, 0.473419189453125],
      [0.6508909463882446, -0.6503579020500183, 0.0848696231842041, 1.4247379302978516]], (19, 47)),
    ([[-1.1869924068450928, 1.4877783060073853, -0.35455042123794556, 1.6968176364898682],
      [0.9784498810768127, -1.0692747831344604, 0.5816222429275513, 1.6603624820709229],
      [0.04926685243844986, -0.026672810316085815, 0.04145006462931633, 0.6085184216499329]], (42, 24)),
    ([[-0.8917403817176819, 0.3042394816875458, 0.5026056170463562, 0.775684118270874],
      [0.521475076675415, -0.35697081685066223, 0.8065164089202881, 1.012607455253601],
      [0.3150959610939026, -0.22483481466770172, 0.33063510060310364, 0.6859855651855469]], (39, 6)),
]


#: A well-conditioned triangle, rendered as a fifth image (its pixels carry the gradient).
REGULAR = [[-0.6, -0.5, 0.1, 1.0], [0.7, -0.4, 0.2, 1.2], [0.0, 0.6, 0.3, 0.9]]


def _scene():
    """Each sliver alone in one image (it covers the one pixel listed), then the regular triangle."""
    pos = torch.tensor([v for verts, _ in SLIVERS for v in verts] + REGULAR, dtype=torch.float32)
    tri = torch.arange(3 * len(SLIVERS) + 3, dtype=torch.int32).view(-1, 3)
    ranges = torch.tensor([[k, 1] for k in range(len(SLIVERS) + 1)], dtype=torch.int32)
    return pos, tri, ranges


def _check_valid(rast):
    cov = rast[..., 3] > 0
    u, v, zw = rast[..., 0][cov], rast[..., 1][cov], rast[..., 2][cov]
    assert torch.isfinite(rast).all()
    assert (u >= 0).all() and (v >= 0).all() and (u + v <= 1 + 1e-6).all()
    assert (zw.abs() <= 1 + 1e-5).all()
    return cov


DEV = "cuda" if torch.cuda.is_available() else "cpu"  # the Triton backend runs on CUDA or under the interpreter


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("grad_db", [False, True])
def test_sliver_pixels_get_valid_barycentrics_and_finite_gradients(backend, grad_db):
    if backend == "triton":
        pytest.importorskip("triton")
    pos, tri, ranges = (t.to(DEV) for t in _scene())
    pos = pos.requires_grad_(True)
    rast, db = rasterize(pos, tri, (64, 64), ranges=ranges, grad_db=grad_db, backend=backend)
    cov = _check_valid(rast.detach())
    for k, (_, (i, j)) in enumerate(SLIVERS):
        assert int(rast[k, i, j, 3]) == k + 1  # the pixel stays covered by its triangle
    loss = (rast[..., :3] * torch.randn_like(rast[..., :3])).sum() + (db * 1.0).sum()
    (g,) = torch.autograd.grad(loss, pos)
    n = 3 * len(SLIVERS)
    assert torch.isfinite(g).all() and g[n:].abs().sum() > 0
    assert torch.equal(g[:n], torch.zeros_like(g[:n]))  # each sliver's one pixel is ill-conditioned
    assert cov[-1].sum() > 200


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_triton_matches_torch_on_slivers():
    pytest.importorskip("triton")
    pos, tri, ranges = (t.to(DEV) for t in _scene())
    out = {}
    for be in ("torch", "triton"):
        p = pos.clone().requires_grad_(True)
        rast, db = rasterize(p, tri, (64, 64), ranges=ranges, grad_db=True, backend=be)
        w = torch.linspace(-1, 1, rast[..., :3].numel(), device=rast.device).view_as(rast[..., :3])
        (g,) = torch.autograd.grad((rast[..., :3] * w).sum() + db.sum(), p)
        out[be] = (rast.detach(), db.detach(), g)
    ra, da, ga = out["torch"]
    rb, dbb, gb = out["triton"]
    assert torch.equal(ra[..., 3], rb[..., 3])
    torch.testing.assert_close(ra, rb, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(da, dbb, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ga, gb, atol=1e-3, rtol=1e-4)


def test_edge_on_point_gets_the_centroid_and_no_gradient():
    # collinear vertices, the point on their line: every edge value is 0 (before: 0/0 = NaN)
    verts = torch.tensor([[[-0.5, 0.0, 0.1, 1.0], [0.5, 0.0, 0.2, 1.0], [0.0, 0.0, 0.3, 1.0]]],
                         dtype=torch.float64, requires_grad=True)
    px, py = torch.tensor([0.1], dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64)
    uvz, db = barycentrics_at(verts, px, py, True)
    torch.testing.assert_close(uvz, torch.tensor([[1 / 3, 1 / 3, 0.2]], dtype=torch.float64))
    assert torch.equal(db, torch.zeros_like(db))
    (g,) = torch.autograd.grad(uvz.sum() + db.sum(), verts)
    assert torch.equal(g, torch.zeros_like(g))


def test_well_conditioned_points_are_unchanged_bitwise():
    torch.manual_seed(3)
    P = 500
    verts = torch.randn(P, 3, 4)
    verts[..., 3] = verts[..., 3].abs() + 0.5
    lam = torch.rand(P, 3)
    lam = lam / lam.sum(1, keepdim=True)
    ndc = (lam.unsqueeze(2) * (verts[..., :2] / verts[..., 3:])).sum(1)  # a point inside each triangle
    px, py = ndc[:, 0], ndc[:, 1]
    uvz, _ = barycentrics_at(verts, px, py, False)
    x, y, z, w = verts.unbind(-1)
    a, c = x - px[:, None] * w, y - py[:, None] * w
    e = torch.stack([a[:, 1] * c[:, 2] - a[:, 2] * c[:, 1], a[:, 2] * c[:, 0] - a[:, 0] * c[:, 2],
                     a[:, 0] * c[:, 1] - a[:, 1] * c[:, 0]], 1)
    ok, _, _ = well_conditioned(e, w)
    assert ok.float().mean() > 0.95
    S = (e[:, 0] + e[:, 1]) + e[:, 2]
    exact = torch.stack([e[:, 0] * (1.0 / S), e[:, 1] * (1.0 / S),
                         (e[:, 0] * z[:, 0] + e[:, 1] * z[:, 1] + e[:, 2] * z[:, 2])
                         / (e[:, 0] * w[:, 0] + e[:, 1] * w[:, 1] + e[:, 2] * w[:, 2])], 1)
    assert torch.equal(uvz[ok], exact[ok])
    clamped = clamped_barycentrics(e, z, w)
    torch.testing.assert_close(clamped[ok], exact[ok], atol=1e-5, rtol=1e-5)
