"""Marching tetrahedra on Delaunay tetrahedralisations (MILo's mesh extraction) and the Delaunay wrapper."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from meshlift.errors import MeshError
from meshlift.isosurface.delaunay import DelaunayRunner, delaunay_tets, signed_volumes
from meshlift.isosurface.dmtet import marching_tets, marching_tets_reference


def closed_oriented_defects(faces: torch.Tensor) -> tuple[int, int]:
    """(directed edges used twice, directed edges without their twin): (0, 0) for a closed oriented mesh."""
    directed = Counter((t[i], t[(i + 1) % 3]) for t in faces.tolist() for i in range(3))
    repeated = sum(c > 1 for c in directed.values())
    border = sum((b, a) not in directed for (a, b) in directed)
    return repeated, border


def area_volume(v: torch.Tensor, f: torch.Tensor) -> tuple[float, float]:
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    area = torch.linalg.cross(b - a, c - a).norm(dim=1).sum() / 2
    return float(area), float((a * torch.linalg.cross(b, c)).sum() / 6)


def oriented_faces_coherent(tets: torch.Tensor) -> bool:
    """Each tet's 4 outward boundary triangles; coherent orientation <=> no oriented triangle appears twice
    (an interior face is seen once from each side, in opposite orientations)."""
    t = tets
    faces = torch.cat([t[:, [1, 2, 3]], t[:, [0, 3, 2]], t[:, [0, 1, 3]], t[:, [0, 2, 1]]])
    rot = faces.argmin(dim=1, keepdim=True)
    idx = (rot + torch.arange(3)) % 3
    canon = torch.gather(faces, 1, idx)  # same cycle, smallest index first
    return torch.unique(canon, dim=0).shape[0] == canon.shape[0]


def shell_points(n: int, r: float, seed: int = 0) -> torch.Tensor:
    """Points concentrated around a sphere of radius r (as pivots are around a surface) plus a uniform box."""
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(n, 3, generator=g, dtype=torch.float64)
    d = d / d.norm(dim=1, keepdim=True)
    rad = r + 0.08 * torch.randn(n, 1, generator=g, dtype=torch.float64)
    box = torch.rand(n // 4, 3, generator=g, dtype=torch.float64) * 2.4 - 1.2
    return torch.cat([d * rad, box])


def lattice(k: int) -> torch.Tensor:
    a = torch.linspace(-1, 1, k, dtype=torch.float64)
    return torch.stack(torch.meshgrid(a, a, a, indexing="ij"), dim=-1).reshape(-1, 3)


def test_delaunay_orientation_random():
    pts = torch.rand(2000, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    res = delaunay_tets(pts)
    assert res.tets.dtype == torch.int32 and res.tets.shape[1] == 4
    vol = signed_volumes(pts, res.tets)
    assert bool((vol > 0).all())
    assert res.num_flipped > 0.3 * res.tets.shape[0]  # Qhull gives both orientations; the fix was needed
    assert res.num_degenerate == 0 and res.num_unused_points == 0
    assert oriented_faces_coherent(res.tets)
    assert not oriented_faces_coherent(torch.from_numpy(np.ascontiguousarray(np.sort(res.tets.numpy(), axis=1))))
    # a Delaunay triangulation tiles the convex hull: volumes sum to the hull volume
    from scipy.spatial import ConvexHull

    assert abs(float(vol.sum()) - ConvexHull(pts.numpy()).volume) < 1e-9
    # same tets as scipy, up to the swap
    from scipy.spatial import Delaunay

    raw = np.sort(Delaunay(pts.numpy()).simplices, axis=1)
    assert np.array_equal(np.sort(res.tets.numpy(), axis=1), raw)


def test_delaunay_degenerate_lattice_is_coherent():
    """A lattice is maximally co-spherical: Qhull's triangulated output has flat tets. Kept and oriented
    from their neighbours, marching tets still gives a closed, consistently oriented, outward mesh."""
    pts = lattice(9)
    res = delaunay_tets(pts)
    vol = signed_volumes(pts, res.tets)
    assert res.num_degenerate > 0  # the case this test is about
    assert int((vol.abs() <= 1e-12).sum()) == res.num_degenerate
    assert bool((vol[vol.abs() > 1e-12] > 0).all())
    assert oriented_faces_coherent(res.tets)
    v, f = marching_tets(pts, pts.norm(dim=1) - 0.63, res.tets)
    assert closed_oriented_defects(f) == (0, 0)
    assert area_volume(v, f)[1] > 0
    # dropping them instead leaves only positive tets (and holes)
    dropped = delaunay_tets(pts, drop_degenerate=True)
    assert dropped.num_dropped == res.num_degenerate
    assert dropped.tets.shape[0] == res.tets.shape[0] - res.num_degenerate
    assert bool((signed_volumes(pts, dropped.tets) > 0).all())


def test_delaunay_near_degenerate_jitter():
    """Lattice jittered by 1e-9: tiny but nonzero volumes, the geometric sign decides, all positive."""
    pts = lattice(7) + 1e-9 * torch.randn(343, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    res = delaunay_tets(pts, degenerate_tol=0.0)
    assert bool((signed_volumes(pts, res.tets) > 0).all())


@pytest.mark.parametrize(
    "bad",
    [
        torch.rand(10, 2),
        torch.rand(3, 3),
        torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [float("nan"), 0, 1]]),
        [[0, 0, 0]],
    ],
    ids=["2d", "too-few", "nan", "list"],
)
def test_delaunay_bad_input(bad):
    with pytest.raises(MeshError, match="delaunay_tets"):
        delaunay_tets(bad)
    with pytest.raises(MeshError, match="degenerate_tol"):
        delaunay_tets(torch.rand(10, 3), degenerate_tol=-1.0)


def test_delaunay_does_not_modify_input():
    pts = torch.rand(50, 3, generator=torch.Generator().manual_seed(0))
    before = pts.clone()
    delaunay_tets(pts)
    assert torch.equal(pts, before)


def test_marching_tets_sphere_on_delaunay():
    r = 0.6
    pts = shell_points(6000, r)
    tets = delaunay_tets(pts).tets
    v, f = marching_tets(pts, pts.norm(dim=1) - r, tets)
    assert closed_oriented_defects(f) == (0, 0)  # watertight: every edge in exactly two faces, coherent
    assert len(torch.unique(f)) == v.shape[0]
    area, vol = area_volume(v, f)
    assert vol > 0  # outward orientation
    assert abs(area - 4 * math.pi * r * r) / (4 * math.pi * r * r) < 0.03
    assert abs(vol - 4 / 3 * math.pi * r**3) / (4 / 3 * math.pi * r**3) < 0.03
    edges = torch.cat([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]).sort(dim=1).values.unique(dim=0)
    assert v.shape[0] - edges.shape[0] + f.shape[0] == 2  # a sphere


def test_marching_tets_matches_reference_on_delaunay():
    pts = shell_points(100, 0.6, seed=2)
    tets = delaunay_tets(pts).tets
    sdf = pts.norm(dim=1) - 0.6
    scales = 0.15 + 0.25 * torch.rand(pts.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    n_all = marching_tets(pts, sdf, tets)[1].shape[0]
    assert 0 < marching_tets(pts, sdf, tets, scales=scales)[1].shape[0] < n_all  # the filter is exercised
    for kw in ({}, {"scales": scales}):
        v, f = marching_tets(pts, sdf, tets, **kw)
        vr, fr = marching_tets_reference(pts, sdf, tets, **kw)
        torch.testing.assert_close(v, vr)
        canon = lambda ff: sorted(tuple(t[i:] + t[:i]) for t in ff.tolist() for i in [t.index(min(t))])  # noqa: E731
        assert canon(f) == canon(fr)


def test_marching_tets_chunked_equals_unchunked_on_delaunay():
    pts = shell_points(1500, 0.6, seed=5)
    tets = delaunay_tets(pts).tets
    sdf = pts.norm(dim=1) - 0.6
    v1, f1, e1 = marching_tets(pts, sdf, tets, return_edges=True)
    v2, f2, e2 = marching_tets(pts, sdf, tets, chunk_tets=97, return_edges=True)
    assert torch.equal(f1, f2) and torch.equal(e1, e2)
    torch.testing.assert_close(v1, v2)
    # each vertex lies on its tet edge, and the edge changes sign
    a, b = pts[e1[:, 0]], pts[e1[:, 1]]
    tpar = ((v1 - a) * (b - a)).sum(1) / ((b - a) ** 2).sum(1)
    assert bool(((tpar >= 0) & (tpar <= 1)).all())
    torch.testing.assert_close(a + tpar[:, None] * (b - a), v1)
    assert bool(((sdf[e1[:, 0]] < 0) != (sdf[e1[:, 1]] < 0)).all())


def test_marching_tets_face_filter():
    pts = shell_points(800, 0.6, seed=6)
    tets = delaunay_tets(pts).tets
    sdf = pts.norm(dim=1) - 0.6
    v0, f0 = marching_tets(pts, sdf, tets)
    big = torch.full((pts.shape[0],), 1e3, dtype=torch.float64)
    v1, f1 = marching_tets(pts, sdf, tets, scales=big)
    assert torch.equal(f0, f1) and torch.equal(v0, v1)
    v2, f2 = marching_tets(pts, sdf, tets, scales=torch.zeros_like(big))
    assert v2.shape == (0, 3) and f2.shape == (0, 3)
    s = torch.full_like(big, 0.06)
    v3, f3, e3 = marching_tets(pts, sdf, tets, scales=s, return_edges=True)
    assert 0 < f3.shape[0] < f0.shape[0]
    assert len(torch.unique(f3)) == v3.shape[0]  # unused vertices removed
    length = (pts[e3[:, 0]] - pts[e3[:, 1]]).norm(dim=1)
    assert bool((length <= 0.12).all())
    with pytest.raises(MeshError, match="scales"):
        marching_tets(pts, sdf, tets, scales=s[:-1])


def test_marching_tets_gradients_finite_differences():
    pts = shell_points(48, 0.6, seed=7)
    tets = delaunay_tets(pts).tets
    sdf0 = pts.norm(dim=1) - 0.6
    sdf0 = torch.where(sdf0.abs() < 1e-3, sdf0 + 2e-3, sdf0)  # keep signs away from the FD step
    _, f = marching_tets(pts, sdf0, tets)
    assert f.shape[0] > 0

    def fn(p, s):
        return marching_tets(p, s, tets)[0]

    inputs = (pts.clone().requires_grad_(), sdf0.clone().requires_grad_())
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6)


def test_background_runner_matches_direct_call():
    pts = shell_points(2000, 0.6, seed=8)
    orig = pts.clone()
    direct = delaunay_tets(pts)
    with DelaunayRunner() as runner:
        assert runner.status() == "delaunay: idle" and not runner.busy()
        job = runner.submit(pts)
        pts.add_(1.0)  # the runner copied the points: moving them now does not change the job
        res = job.result(timeout=120)
        assert job.done() and not job.running() and not runner.busy()
        assert torch.equal(res.tets, direct.tets)
        assert runner.status().startswith(f"delaunay: {pts.shape[0]:,} points -> {res.tets.shape[0]:,} tets in ")
        job2 = runner.submit(orig)  # a second job reuses the worker
        assert torch.equal(job2.result(timeout=120).tets, direct.tets)
        assert job2.elapsed_s() > 0 and job2.exception() is None
    with pytest.raises(MeshError, match="shut down"):
        runner.submit(pts)
    with pytest.raises(MeshError, match="DelaunayRunner.submit"):
        DelaunayRunner().submit(torch.rand(3, 3))
