"""Tests for meshlift.isosurface.dmtet (marching tetrahedra, nvdiffrec's SDF regulariser)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from meshlift.errors import MeshError
from meshlift.isosurface.dmtet import marching_tets, marching_tets_reference, sdf_reg_loss
from meshlift.isosurface.tetgrid import regular_tet_grid, tet_edges


def sphere_sdf(p, r=0.6):
    return p.norm(dim=-1) - r


def torus_sdf(p, big=0.5, small=0.2):
    q = torch.stack([torch.sqrt(p[..., 0] ** 2 + p[..., 2] ** 2) - big, p[..., 1]], dim=-1)
    return q.norm(dim=-1) - small


def check_closed_oriented(faces: torch.Tensor) -> None:
    """Every undirected edge in exactly 2 faces, and each directed edge once (consistent winding)."""
    f = faces.tolist()
    directed = Counter((t[i], t[(i + 1) % 3]) for t in f for i in range(3))
    assert max(directed.values()) == 1, "a directed edge repeats: inconsistent orientation or non-manifold"
    for (a, b) in directed:
        assert (b, a) in directed, f"edge {(a, b)} is a border edge (mesh not closed)"
    assert all(len(set(t)) == 3 for t in f), "degenerate face"


def area_volume(v, f):
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    area = torch.linalg.cross(b - a, c - a).norm(dim=1).sum() / 2
    vol = (a * torch.linalg.cross(b, c)).sum() / 6
    return float(area), float(vol)


@pytest.mark.parametrize(
    "sdf_fn, area, volume",
    [
        (sphere_sdf, 4 * math.pi * 0.36, 4 / 3 * math.pi * 0.216),
        (torus_sdf, 4 * math.pi**2 * 0.5 * 0.2, 2 * math.pi**2 * 0.5 * 0.04),
    ],
    ids=["sphere", "torus"],
)
def test_analytic_shapes(sdf_fn, area, volume):
    verts, tets = regular_tet_grid(32)
    v, f = marching_tets(verts, sdf_fn(verts), tets)
    assert v.dtype == torch.float32 and f.dtype == torch.int64
    check_closed_oriented(f)
    assert int(f.max()) == v.shape[0] - 1 and len(torch.unique(f)) == v.shape[0]  # no unused vertices
    a, vol = area_volume(v.double(), f)
    assert vol > 0  # outward orientation
    assert abs(a - area) / area < 0.02
    assert abs(vol - volume) / volume < 0.03
    # vertices lie on the surface up to the interpolation error of a coarse grid
    assert float(sdf_fn(v).abs().max()) < 0.02
    # Euler characteristic: sphere 2, torus 0
    edges = torch.cat([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]).sort(dim=1).values.unique(dim=0)
    chi = v.shape[0] - edges.shape[0] + f.shape[0]
    assert chi == (2 if sdf_fn is sphere_sdf else 0)


def test_deformed_grid_and_chunks_watertight():
    verts, tets = regular_tet_grid(12)
    h = 2.0 / 12
    deformed = verts + (torch.rand_like(verts) - 0.5) * 0.25 * h  # small: tets stay positive
    p = deformed.double()[tets]
    assert bool((torch.linalg.det(p[:, 1:] - p[:, :1]) > 0).all())
    sdf = torus_sdf(deformed) + 0.02 * torch.randn(verts.shape[0])
    v1, f1 = marching_tets(deformed, sdf, tets)
    v2, f2 = marching_tets(deformed, sdf, tets, chunk_tets=1000)
    torch.testing.assert_close(v1, v2)
    assert torch.equal(f1, f2)
    check_closed_oriented(f1)
    assert area_volume(v1.double(), f1)[1] > 0


def _canon(faces):
    out = []
    for r in faces.tolist():
        i = r.index(min(r))
        out.append(tuple(r[i:] + r[:i]))
    return sorted(out)


@pytest.mark.parametrize("seed", [0, 1])
def test_matches_reference_forward_backward(seed):
    g = torch.Generator().manual_seed(seed)
    verts, tets = regular_tet_grid(4)
    verts = verts.double()
    sdf = (sphere_sdf(verts, 0.5) + 0.3 * torch.randn(verts.shape[0], generator=g, dtype=torch.float64))
    v1 = verts.clone().requires_grad_(True)
    s1 = sdf.clone().requires_grad_(True)
    v2 = verts.clone().requires_grad_(True)
    s2 = sdf.clone().requires_grad_(True)
    p1, f1 = marching_tets(v1, s1, tets)
    p2, f2 = marching_tets_reference(v2, s2, tets)
    assert f1.shape[0] > 20
    torch.testing.assert_close(p1, p2)
    assert _canon(f1) == _canon(f2)
    w = torch.randn(p1.shape, generator=g, dtype=torch.float64)
    (p1 * w).sum().backward()
    (p2 * w).sum().backward()
    torch.testing.assert_close(v1.grad, v2.grad)
    torch.testing.assert_close(s1.grad, s2.grad)


def test_gradcheck_float64():
    verts, tets = regular_tet_grid(2)
    verts = verts.double()
    g = torch.Generator().manual_seed(3)
    sdf = sphere_sdf(verts, 0.7) + 0.1 * torch.randn(verts.shape[0], generator=g, dtype=torch.float64)
    sdf = torch.where(sdf.abs() < 0.05, sdf.sign() * 0.05, sdf)  # keep signs stable under the probe
    deform = torch.zeros_like(verts)

    def fn(s, d):
        v, f = marching_tets(verts + d, s, tets)
        return v

    s = sdf.clone().requires_grad_(True)
    d = deform.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(fn, (s, d), eps=1e-6, atol=1e-6)

    # gradients of a geometric loss reach the sdf values and the vertex deformations
    v, f = marching_tets(verts + d, s, tets)
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    torch.linalg.cross(b - a, c - a).norm(dim=1).sum().backward()
    assert float(s.grad.abs().sum()) > 0 and float(d.grad.abs().sum()) > 0


def test_volume_gradient_finite_differences():
    # d(volume)/d(sdf) by autograd against central differences (a scalar function of the whole mesh)
    verts, tets = regular_tet_grid(6)
    verts = verts.double()
    sdf = sphere_sdf(verts, 0.55)
    s = sdf.clone().requires_grad_(True)
    v, f = marching_tets(verts, s, tets)
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    (a * torch.linalg.cross(b, c)).sum().div(6).backward()
    idx = torch.nonzero(s.grad).flatten()[:5]
    assert idx.numel() == 5
    for i in idx.tolist():
        e = 1e-5
        vals = []
        for sign in (1, -1):
            sp = sdf.clone()
            sp[i] += sign * e
            vp, fp = marching_tets(verts, sp, tets)
            vals.append(area_volume(vp, fp)[1])
        fd = (vals[0] - vals[1]) / (2 * e)
        assert abs(fd - float(s.grad[i])) < 1e-6 + 1e-4 * abs(fd)
    # growing the sdf (moving the surface inwards) shrinks the volume
    assert float(s.grad[idx].max()) < 0


def test_optimisation_moves_the_surface():
    # gradients are usable: grow a sphere of radius 0.3 to radius 0.5 through sdf and deformation
    res = 8
    verts, tets = regular_tet_grid(res)
    sdf = torch.nn.Parameter(sphere_sdf(verts, 0.3))
    deform = torch.nn.Parameter(torch.zeros_like(verts))
    opt = torch.optim.Adam([sdf, deform], lr=0.005)  # larger steps jump the surface across grid edges
    edges = tet_edges(tets)
    for _ in range(60):
        v, f = marching_tets(verts + (1.0 / res) * torch.tanh(deform), sdf, tets)
        loss = (v.norm(dim=1) - 0.5).square().mean() + 0.01 * sdf_reg_loss(sdf, edges)
        opt.zero_grad()
        loss.backward()
        opt.step()
    v, f = marching_tets(verts + (1.0 / res) * torch.tanh(deform.detach()), sdf.detach(), tets)
    check_closed_oriented(f)
    r = v.norm(dim=1)
    assert abs(float(r.mean()) - 0.5) < 0.02 and float(r.min()) > 0.45 and float(r.max()) < 0.55
    assert float(deform.detach().abs().max()) > 0


@pytest.mark.parametrize("value", [1.0, -1.0, 0.0])
def test_empty_and_full_grids(value):
    verts, tets = regular_tet_grid(3)
    s = torch.full((verts.shape[0],), value, requires_grad=True)
    v, f = marching_tets(verts, s, tets)
    assert v.shape == (0, 3) and f.shape == (0, 3) and f.dtype == torch.int64


def test_zero_sdf_vertices_no_nan():
    verts, tets = regular_tet_grid(4)
    sdf = torch.round(sphere_sdf(verts, 0.5) * 4) / 4  # many exact zeros
    assert bool((sdf == 0).any())
    v, f = marching_tets(verts, sdf, tets)
    assert f.shape[0] > 0 and bool(torch.isfinite(v).all())


def test_inputs_not_modified_and_errors():
    verts, tets = regular_tet_grid(3)
    sdf = sphere_sdf(verts, 0.5)
    v0, s0, t0 = verts.clone(), sdf.clone(), tets.clone()
    marching_tets(verts, sdf, tets)
    assert torch.equal(verts, v0) and torch.equal(sdf, s0) and torch.equal(tets, t0)
    with pytest.raises(MeshError, match="sdf"):
        marching_tets(verts, sdf[:-1], tets)
    with pytest.raises(MeshError, match="verts"):
        marching_tets(verts[:, :2], sdf, tets)
    with pytest.raises(MeshError, match="tets"):
        marching_tets(verts, sdf, tets.float())
    with pytest.raises(MeshError, match="chunk_tets"):
        marching_tets(verts, sdf, tets, chunk_tets=0)


def test_sdf_reg_loss():
    verts, tets = regular_tet_grid(4)
    edges = tet_edges(tets)
    sdf = sphere_sdf(verts, 0.55) * 3  # no exact zeros, so -sdf has the same sign-changing edges
    s = sdf.clone().requires_grad_(True)
    loss = sdf_reg_loss(s, edges)
    # explicit formula over sign-changing edges
    bce = lambda x, y: -(y * torch.log(torch.sigmoid(x)) + (1 - y) * torch.log(1 - torch.sigmoid(x)))  # noqa: E731
    terms = []
    for a, b in edges.tolist():
        if (sdf[a] < 0) != (sdf[b] < 0):
            terms.append((bce(sdf[a], float(sdf[b] >= 0)), bce(sdf[b], float(sdf[a] >= 0))))
    expect = sum(t[0] for t in terms) / len(terms) + sum(t[1] for t in terms) / len(terms)
    torch.testing.assert_close(loss, expect)
    # symmetric under the sign convention, positive, and differentiable
    torch.testing.assert_close(sdf_reg_loss(-sdf, edges), loss.detach())
    loss.backward()
    assert float(loss.detach()) > 0 and float(s.grad.abs().sum()) > 0
    # sharper sign changes (larger |sdf| across the surface) cost more
    assert float(sdf_reg_loss(sdf * 3, edges)) > float(loss.detach())
    # no sign change: zero, still differentiable
    z = torch.ones(verts.shape[0], requires_grad=True)
    lz = sdf_reg_loss(z, edges)
    lz.backward()
    assert float(lz.detach()) == 0.0 and z.grad is not None
    with pytest.raises(MeshError, match="edges"):
        sdf_reg_loss(sdf, edges.float())
