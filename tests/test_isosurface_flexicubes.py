"""Tests for meshlift.isosurface.flexicubes and its derived Dual Marching Cubes tables."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from meshlift.errors import MeshError
from meshlift.isosurface import tables
from meshlift.isosurface.flexicubes import FlexiCubes, cube_edges, cube_grid, flexicubes, flexicubes_reference


def sphere_sdf(p, r=0.6):
    return p.norm(dim=-1) - r


def torus_sdf(p, big=0.5, small=0.2):
    q = torch.stack([torch.sqrt(p[..., 0] ** 2 + p[..., 2] ** 2) - big, p[..., 1]], dim=-1)
    return q.norm(dim=-1) - small


def check_closed_manifold(faces: torch.Tensor) -> None:
    """Closed, consistently oriented, edge- and vertex-manifold triangle mesh."""
    f = faces.tolist()
    assert all(len(set(t)) == 3 for t in f), "degenerate face"
    directed = Counter((t[i], t[(i + 1) % 3]) for t in f for i in range(3))
    assert max(directed.values()) == 1, "a directed edge repeats: non-manifold or inconsistent winding"
    for a, b in directed:
        assert (b, a) in directed, f"border edge {(a, b)}"
    # vertex links: the opposite edges of the faces around each vertex form one cycle
    link: dict[int, dict[int, int]] = {}
    for t in f:
        for i in range(3):
            link.setdefault(t[i], {})[t[(i + 1) % 3]] = t[(i + 2) % 3]
    for v, nxt in link.items():
        start = next(iter(nxt))
        cur, steps = nxt[start], 1
        while cur != start:
            cur, steps = nxt[cur], steps + 1
        assert steps == len(nxt), f"vertex {v} is non-manifold (its link has several cycles)"


def area_volume(v, f):
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    area = torch.linalg.cross(b - a, c - a).norm(dim=1).sum() / 2
    vol = (a * torch.linalg.cross(b, c)).sum() / 6
    return float(area), float(vol)


def boundary_mask(res):
    ar = torch.arange(res + 1)
    ijk = torch.stack(torch.meshgrid(ar, ar, ar, indexing="ij"), dim=-1).reshape(-1, 3)
    return ((ijk == 0) | (ijk == res)).any(1)


# ---------------------------------------------------------------------------------------- tables
def test_table_properties():
    patch_table, num_patches, problem_face = tables.build_tables()
    assert patch_table.shape == (256, 2, 12) and num_patches.shape == (256, 2)
    assert int(num_patches[0, 0]) == 0 and int(num_patches[255, 0]) == 0
    sizes = Counter()
    for case in range(256):
        inside = [case >> k & 1 for k in range(8)]
        crossing = [inside[p] != inside[q] for p, q in tables.EDGES]
        for fl in range(2):
            p = patch_table[case, fl].tolist()
            assert [x >= 0 for x in p] == crossing  # exactly the crossing edges get a dual vertex
            for d in range(int(num_patches[case, fl])):
                sizes[sum(1 for x in p if x == d)] += 1
        # complementary cases cross the same edges
        assert (patch_table[case, 0] >= 0).tolist() == (patch_table[255 - case, 0] >= 0).tolist()
    assert min(sizes) == 3 and max(sizes) == 7  # a patch boundary visits 3..7 edges
    assert int(num_patches.max()) == 4
    # one inside corner: a single triangle-like patch on its 3 edges
    assert int(num_patches[1, 0]) == 1 and sum(x >= 0 for x in patch_table[1, 0].tolist()) == 3
    # the checkerboard (inside corners 0, 3, 5, 6): four isolated corners, four patches
    assert int(num_patches[1 | 8 | 32 | 64, 0]) == 4
    # 36 cases have one ambiguous face whose two segments share a patch; flipping separates them
    probs = [c for c in range(256) if int(problem_face[c]) >= 0]
    assert len(probs) == 36
    for c in probs:
        f = int(problem_face[c])
        segs = tables._face_segments(c, f, True)
        p = patch_table[c, 1].tolist()
        assert len(segs) == 2 and p[segs[0][0]] != p[segs[1][0]]
        segs0 = tables._face_segments(c, f, False)
        p0 = patch_table[c, 0].tolist()
        assert p0[segs0[0][0]] == p0[segs0[1][0]]
        # it is the cube's only ambiguous face, so flipping it = resolving the cube as its complement
        assert [g for g in range(6) if len(tables._face_segments(c, g, False)) == 2] == [f]
        assert patch_table[c, 1].tolist() == patch_table[255 - c, 0].tolist()


def test_cube_grid_layout():
    verts, cubes = cube_grid(3, bounds=(0.0, 3.0))
    assert verts.shape == (64, 3) and cubes.shape == (27, 8) and cubes.dtype == torch.int64
    offs = torch.tensor(tables.CORNERS, dtype=torch.float32)
    torch.testing.assert_close(verts[cubes] - verts[cubes[:, :1]], offs.expand(27, 8, 3))
    # cube (i, j, k) = (1, 2, 0) has index (1*3 + 2)*3 + 0 and low corner (1, 2, 0)
    torch.testing.assert_close(verts[cubes[15, 0]], torch.tensor([1.0, 2.0, 0.0]))
    # unique grid edges: 3 R (R+1)^2 axis-aligned edges of unit length
    e = cube_edges(cubes)
    assert e.shape == (3 * 3 * 16, 2) and bool((e[:, 0] < e[:, 1]).all())
    torch.testing.assert_close((verts[e[:, 0]] - verts[e[:, 1]]).norm(dim=1), torch.ones(e.shape[0]))
    # edges run from start to start + e_axis
    for e, (p, q) in enumerate(tables.EDGES):
        d = offs[q] - offs[p]
        assert d.tolist() == [float(a == tables.EDGE_AXIS[e]) for a in range(3)]


# ---------------------------------------------------------------------------------- extraction
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize(
    "sdf_fn, area, volume, chi",
    [
        (sphere_sdf, 4 * math.pi * 0.36, 4 / 3 * math.pi * 0.216, 2),
        (torus_sdf, 4 * math.pi**2 * 0.5 * 0.2, 2 * math.pi**2 * 0.5 * 0.04, 0),
    ],
    ids=["sphere", "torus"],
)
def test_analytic_shapes(sdf_fn, area, volume, chi, training):
    fc = FlexiCubes()
    verts, cubes = fc.cube_grid(32)
    v, f, l_dev = fc(verts, sdf_fn(verts), cubes, 32, training=training)
    assert v.dtype == torch.float32 and f.dtype == torch.int64
    check_closed_manifold(f)
    assert len(torch.unique(f)) == v.shape[0]
    a, vol = area_volume(v.double(), f)
    assert vol > 0  # outward
    assert abs(a - area) / area < 0.02
    assert abs(vol - volume) / volume < 0.04  # plain DMC (mean dual vertices) shrinks curved shapes a little
    edges = torch.cat([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]).sort(dim=1).values.unique(dim=0)
    assert v.shape[0] - edges.shape[0] + f.shape[0] == chi
    assert l_dev.ndim == 1 and bool((l_dev >= 0).all()) and float(l_dev.mean()) < 0.01
    assert float(sdf_fn(v).abs().max()) < 0.03


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_fields_are_manifold(seed):
    # noise fields hit every case, including the ambiguous faces that need the C16/C19-style fix
    res = 10
    g = torch.Generator().manual_seed(seed)
    verts, cubes = cube_grid(res)
    sdf = torch.randn(verts.shape[0], generator=g)
    sdf[boundary_mask(res)] = 1.0
    beta = torch.randn(res**3, 12, generator=g)
    alpha = torch.randn(res**3, 8, generator=g)
    gamma = torch.randn(res**3, generator=g)
    for training in (False, True):
        v, f, _ = flexicubes(verts, sdf, cubes, res, beta, alpha, gamma, training=training)
        check_closed_manifold(f)
        assert bool(torch.isfinite(v).all())
    # chunked surface-cube search gives the same mesh
    v2, f2, _ = flexicubes(verts, sdf, cubes, res, beta, alpha, gamma, training=True, chunk_cubes=77)
    torch.testing.assert_close(v, v2)
    assert torch.equal(f, f2)


@pytest.mark.parametrize("training", [False, True])
def test_matches_reference_forward_backward(training):
    res = 3
    g = torch.Generator().manual_seed(7)
    verts, cubes = cube_grid(res)
    verts = verts.double()
    sdf = torch.randn(verts.shape[0], generator=g, dtype=torch.float64)
    raw = [
        torch.randn(res**3, 12, generator=g, dtype=torch.float64),
        torch.randn(res**3, 8, generator=g, dtype=torch.float64),
        torch.randn(res**3, generator=g, dtype=torch.float64),
    ]
    grads = []
    outs = []
    for fn in (flexicubes, flexicubes_reference):
        ins = [t.clone().requires_grad_(True) for t in (verts, sdf, *raw)]
        v, f, l_dev = fn(ins[0], ins[1], cubes, res, ins[2], ins[3], ins[4], training=training)
        outs.append((v, f, l_dev))
        w = torch.linspace(-1, 1, v.numel(), dtype=torch.float64).reshape(v.shape)
        ((v * w).sum() + l_dev.sum()).backward()
        grads.append([t.grad for t in ins])
    (v1, f1, l1), (v2, f2, l2) = outs
    assert f1.shape[0] > 20
    torch.testing.assert_close(v1, v2)
    assert torch.equal(f1, f2)
    torch.testing.assert_close(l1, l2)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_gradcheck_float64():
    res = 2
    verts, cubes = cube_grid(res)
    verts = verts.double()
    g = torch.Generator().manual_seed(1)
    sdf = 0.5 + 0.2 * torch.rand(verts.shape[0], generator=g, dtype=torch.float64)
    sdf[13] = -0.6  # the only interior vertex inside: an octahedron-like closed surface
    args = [
        sdf,
        torch.zeros_like(verts),
        0.5 * torch.randn(res**3, 12, generator=g, dtype=torch.float64),
        0.5 * torch.randn(res**3, 8, generator=g, dtype=torch.float64),
        0.5 * torch.randn(res**3, generator=g, dtype=torch.float64),
    ]
    args = [a.requires_grad_(True) for a in args]

    def fn(s, d, beta, alpha, gamma):
        v, f, l_dev = flexicubes(verts + d, s, cubes, res, beta, alpha, gamma, training=True)
        return v, l_dev

    assert torch.autograd.gradcheck(fn, tuple(args), eps=1e-6, atol=1e-6, fast_mode=True)
    v, f, l_dev = flexicubes(verts + args[1], args[0], cubes, res, *args[2:], training=True)
    check_closed_manifold(f)
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    (torch.linalg.cross(b - a, c - a).norm(dim=1).sum() + l_dev.mean()).backward()
    for t in args:  # every input receives gradient
        assert float(t.grad.abs().sum()) > 0


def test_weights():
    res = 6
    verts, cubes = cube_grid(res)
    sdf = sphere_sdf(verts, 0.55)
    c = res**3
    v0, f0, l0 = flexicubes(verts, sdf, cubes, res)
    z = flexicubes(verts, sdf, cubes, res, torch.zeros(c, 12), torch.zeros(c, 8), None)
    torch.testing.assert_close(v0, z[0])  # raw zero weights = plain DMC
    assert torch.equal(f0, z[1])
    # alpha and beta move the dual vertices; gamma only changes the diagonal choice in inference
    va = flexicubes(verts, sdf, cubes, res, None, torch.randn(c, 8), None)[0]
    vb = flexicubes(verts, sdf, cubes, res, torch.randn(c, 12), None, None)[0]
    assert float((va - v0).abs().max()) > 1e-3 and float((vb - v0).abs().max()) > 1e-3
    vg, fg, _ = flexicubes(verts, sdf, cubes, res, None, None, torch.randn(c))
    torch.testing.assert_close(vg, v0)
    assert not torch.equal(fg, f0)
    check_closed_manifold(fg)


def test_optimisation_moves_the_surface():
    # gradients are usable: fit a sphere of radius 0.3 to radius 0.5 through sdf and weights
    res = 8
    fc = FlexiCubes()
    verts, cubes = fc.cube_grid(res)
    sdf = torch.nn.Parameter(sphere_sdf(verts, 0.3))
    beta = torch.nn.Parameter(torch.zeros(res**3, 12))
    opt = torch.optim.Adam([sdf, beta], lr=0.02)
    for _ in range(60):
        v, f, l_dev = fc(verts, sdf, cubes, res, beta=beta, training=True)
        loss = (v.norm(dim=1) - 0.5).square().mean() + 0.1 * l_dev.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    v, f, _ = fc(verts, sdf.detach(), cubes, res, beta=beta.detach())
    check_closed_manifold(f)
    assert abs(float(v.norm(dim=1).mean()) - 0.5) < 0.02


@pytest.mark.parametrize("value", [1.0, -1.0])
def test_empty_and_full(value):
    verts, cubes = cube_grid(3)
    v, f, l_dev = flexicubes(verts, torch.full((64,), value), cubes, 3, training=True)
    assert v.shape == (0, 3) and f.shape == (0, 3) and l_dev.shape == (0,)


def test_surface_leaving_the_grid():
    verts, cubes = cube_grid(6)
    sdf = sphere_sdf(verts, 1.2)  # cut by the grid box: open mesh, no crash, valid indices
    v, f, _ = flexicubes(verts, sdf, cubes, 6)
    assert f.shape[0] > 0 and int(f.max()) < v.shape[0]


def test_inputs_not_modified_and_errors():
    verts, cubes = cube_grid(3)
    sdf = sphere_sdf(verts, 0.5)
    beta = torch.randn(27, 12)
    copies = [t.clone() for t in (verts, sdf, cubes, beta)]
    flexicubes(verts, sdf, cubes, 3, beta, training=True)
    for a, b in zip((verts, sdf, cubes, beta), copies):
        assert torch.equal(a, b)
    with pytest.raises(MeshError, match="verts"):
        flexicubes(verts, sdf, cubes, 4)
    with pytest.raises(MeshError, match="sdf"):
        flexicubes(verts, sdf[:-1], cubes, 3)
    with pytest.raises(MeshError, match="cubes"):
        flexicubes(verts, sdf, cubes[:-1], 3)
    with pytest.raises(MeshError, match="beta"):
        flexicubes(verts, sdf, cubes, 3, beta[:, :8])
    with pytest.raises(MeshError, match="resolution"):
        cube_grid(0)
    with pytest.raises(MeshError, match="weight_scale"):
        FlexiCubes(weight_scale=1.5)
    with pytest.raises(MeshError, match="chunk_cubes"):
        flexicubes(verts, sdf, cubes, 3, chunk_cubes=0)
    with pytest.raises(MeshError, match="cubes"):
        cube_edges(cubes.float())
