"""TSDF fusion of depth maps (meshlift.isosurface.tsdf) and the sparse coarse-to-fine mesh extraction
(meshlift.isosurface.sparse_grid), on depth maps ray-cast analytically in the test."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from meshlift.errors import MeshError
from meshlift.isosurface.sparse_grid import extract_tsdf_mesh
from meshlift.isosurface.tsdf import (LOG_CONTRACTION_SPAN, contract, contract_log, empty_pixel_views, tsdf_at_points,
                                      uncontract, uncontract_log, uncontract_log_scale, uncontract_scale)

RADIUS = 0.5
SIZE = 64  # image side, pixels
FOV = 0.6  # full field of view, radians
DIST = 3.0  # camera distance from the origin
FOCAL = 0.5 * SIZE / math.tan(FOV / 2)
#: World size of one pixel at the farthest depth a point of the sphere can have (DIST + RADIUS).
FOOTPRINT = (DIST + RADIUS) / FOCAL


# ---------------------------------------------------------------- analytic scenes ---------------------------


def look_at(eye: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
    """OpenCV world_to_camera [4, 4] (float64) of a camera at ``eye`` looking at ``target``."""
    target = torch.zeros(3, dtype=torch.float64) if target is None else target
    f = (target - eye) / (target - eye).norm()
    up = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    if abs(float(f @ up)) > 0.99:
        up = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    r = torch.linalg.cross(f, up)
    r = r / r.norm()
    rot = torch.stack([r, torch.linalg.cross(f, r), f])  # rows: x right, y down, z forward (det +1)
    m = torch.eye(4, dtype=torch.float64)
    m[:3, :3] = rot
    m[:3, 3] = -rot @ eye
    return m


def intrinsics(n: int, size: int = SIZE, focal: float = FOCAL) -> torch.Tensor:
    k = torch.tensor([[focal, 0, size / 2], [0, focal, size / 2], [0, 0, 1.0]], dtype=torch.float64)
    return k.expand(n, 3, 3).clone()


def pixel_rays(w2c: torch.Tensor, k: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Camera centre [3] and world directions [H, W, 3] scaled so that the camera z of ``o + t d`` is ``t``."""
    jj, ii = torch.meshgrid(torch.arange(size) + 0.5, torch.arange(size) + 0.5, indexing="xy")
    x = (jj - k[0, 2]) / k[0, 0]
    y = (ii - k[1, 2]) / k[1, 1]
    d_cam = torch.stack([x, y, torch.ones_like(x)], dim=-1).double()
    rot, t = w2c[:3, :3], w2c[:3, 3]
    return -rot.T @ t, d_cam @ rot  # d_world = R^T d_cam


def fibonacci(n: int, radius: float) -> torch.Tensor:
    i = torch.arange(n, dtype=torch.float64) + 0.5
    z = 1 - 2 * i / n
    r = torch.sqrt(1 - z * z)
    phi = math.pi * (3 - math.sqrt(5)) * i
    return torch.stack([r * torch.cos(phi), r * torch.sin(phi), z], dim=1) * radius


def sphere_depth(n_views: int = 12, size: int = SIZE, radius: float = RADIUS):
    """Depth maps (camera z, 0 = background) of a sphere at the origin, cameras on a Fibonacci sphere."""
    w2c = torch.stack([look_at(e) for e in fibonacci(n_views, DIST)])
    k = intrinsics(n_views, size, 0.5 * size / math.tan(FOV / 2))
    depth = []
    for v in range(n_views):
        o, d = pixel_rays(w2c[v], k[v], size)
        a, b, c = (d * d).sum(-1), (d * o).sum(-1), o @ o - radius**2
        disc = b * b - a * c
        depth.append(torch.where(disc > 0, (-b - disc.clamp_min(0).sqrt()) / a, 0))
    return torch.stack(depth).float(), w2c.float(), k.float()


def plane_views(z_plane: float, eyes: list[tuple[float, float, float]], size: int = 32, focal: float = 12.0):
    """Cameras at ``eyes`` looking along +z (fronto-parallel) at the plane ``z = z_plane``."""
    w2c = torch.eye(4, dtype=torch.float64).repeat(len(eyes), 1, 1)
    w2c[:, :3, 3] = -torch.tensor(eyes, dtype=torch.float64)
    depth = torch.full((len(eyes), size, size), 0.0, dtype=torch.float64)
    for v, e in enumerate(eyes):
        depth[v] = z_plane - e[2]
    return depth.float(), w2c.float(), intrinsics(len(eyes), size, focal).float()


@pytest.fixture(scope="module")
def sphere():
    return sphere_depth(12)


def sphere_points(n: int, band: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random points within ``band`` of the sphere and their true signed distance."""
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(n, 3, generator=g, dtype=torch.float64)
    d = d / d.norm(dim=1, keepdim=True)
    s = (torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1) * band
    return (d * (RADIUS + s[:, None])).float(), s.float()


# ---------------------------------------------------------------- mesh checks -------------------------------


def closed_oriented_defects(faces: torch.Tensor) -> tuple[int, int]:
    """(directed edges used twice, directed edges without their twin): (0, 0) for a closed oriented mesh."""
    directed = Counter((t[i], t[(i + 1) % 3]) for t in faces.tolist() for i in range(3))
    repeated = sum(c > 1 for c in directed.values())
    border = sum((b, a) not in directed for (a, b) in directed)
    return repeated, border


def signed_volume(v: torch.Tensor, f: torch.Tensor) -> float:
    a, b, c = v[f[:, 0]].double(), v[f[:, 1]].double(), v[f[:, 2]].double()
    return float((a * torch.linalg.cross(b, c)).sum() / 6)


def face_set(v: torch.Tensor, f: torch.Tensor) -> set:
    """Faces as position triples, rotated to start at the smallest position (orientation kept)."""
    out = set()
    for tri in v[f].tolist():
        tri = [tuple(p) for p in tri]
        i = tri.index(min(tri))
        out.add(tuple(tri[i:] + tri[:i]))
    return out


# ---------------------------------------------------------------- fusion ------------------------------------


def test_plane_fronto_parallel_is_exact():
    """Fronto-parallel views of z = 2: every depth pixel is exactly 2 - eye_z, so d = 2 - z exactly."""
    depth, w2c, k = plane_views(2.0, [(0.0, 0.0, 0.0), (0.1, -0.05, 0.5)])
    conf = torch.ones_like(depth)
    conf[1] = 0.5
    g = torch.Generator().manual_seed(3)
    pts = torch.rand(500, 3, generator=g) * torch.tensor([0.4, 0.4, 2.0]) + torch.tensor([-0.2, -0.2, 1.0])
    trunc = 0.3
    tsdf, weight = tsdf_at_points(pts, [(depth, w2c, k, conf)], trunc)
    d = 2.0 - pts[:, 2]
    seen = d >= -trunc
    torch.testing.assert_close(weight, torch.where(seen, 1.5, 0.0))
    want = torch.where(seen, d.clamp(max=trunc) / trunc, 1.0)  # +1 = the documented filler where unknown
    torch.testing.assert_close(tsdf, want, atol=1e-5, rtol=0)


def test_sphere_tsdf_matches_signed_distance(sphere):
    """Against the true signed distance s of random points near the sphere.

    Why these bounds: in any view that sees a point, the camera ray through it meets the sphere at a point
    q with |p - q| >= |s| (q lies on the sphere), and the projective distance D - z is that ray distance
    times cos(angle to the optical axis) >= cos(half-diagonal FOV) = 0.91. Reading the nearest pixel moves
    the ray by at most half a pixel diagonal; we allow 2 pixel footprints for it (steep depth near
    silhouettes). So every view's term, hence the fused one, is >= 0.9 min(|s|, trunc) - 2 px in the
    direction of s, and the sign is right beyond 2 px. Grazing views overestimate |s| (up to the clamp),
    which is the known bias of projective TSDFs and does not move the zero crossing.
    """
    depth, w2c, k = sphere
    trunc = 0.1
    pts, s = sphere_points(4000, 0.08)
    tsdf, weight = tsdf_at_points(pts, [(depth, w2c, k)], trunc)
    assert tsdf.shape == (4000,) and weight.shape == (4000,) and tsdf.dtype == torch.float32
    assert float(tsdf.abs().max()) <= 1.0
    seen = weight > 0
    assert float(seen.float().mean()) > 0.99
    slack = 2 * FOOTPRINT
    along = tsdf * trunc * torch.sign(s)
    assert bool((along[seen] >= 0.9 * s.abs().clamp(max=trunc)[seen] - slack).all())
    far = seen & (s.abs() > slack)
    assert bool(((tsdf[far] < 0) == (s[far] < 0)).all())
    # near the surface the fused value is never far off (overestimate bounded by 1 / cos of grazing)
    near = seen & (s.abs() < 0.02)
    assert float((tsdf[near] * trunc - s[near]).abs().median()) < 0.02


def test_points_hidden_in_every_view_have_weight_zero(sphere):
    """A point deeper than trunc / 0.9 (+ 1 px) inside is more than trunc behind the surface in every view
    (same argument as above), so no view knows it: weight 0 and the +1 filler."""
    depth, w2c, k = sphere
    trunc = 0.1
    g = torch.Generator().manual_seed(1)
    d = torch.randn(300, 3, generator=g)
    r_max = RADIUS - trunc / 0.9 - FOOTPRINT
    pts = d / d.norm(dim=1, keepdim=True) * torch.rand(300, 1, generator=g) * r_max
    tsdf, weight = tsdf_at_points(pts, [(depth, w2c, k)], trunc)
    assert bool((weight == 0).all()) and bool((tsdf == 1).all())
    # points far outside every frustum are unknown too
    _, w_out = tsdf_at_points(torch.tensor([[50.0, 0.0, 0.0]]), [(depth, w2c, k)], trunc)
    assert float(w_out[0]) == 0.0


def test_fusion_is_chunk_invariant_and_streams(sphere):
    depth, w2c, k = sphere
    pts, _ = sphere_points(1000, 0.1, seed=2)
    trunc = torch.full((1000,), 0.1)
    ref = tsdf_at_points(pts, [(depth, w2c, k)], trunc)
    split = [(depth[i : i + 5], w2c[i : i + 5], k[i : i + 5]) for i in range(0, 12, 5)]
    for source, budget in [((depth, w2c, k), 7), (iter(split), 1000), (lambda: split, 33), (split, 4)]:
        got = tsdf_at_points(pts, source, trunc, chunk_elements=budget)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


def test_fusion_float64_and_per_point_trunc(sphere):
    depth, w2c, k = sphere
    pts, _ = sphere_points(200, 0.05, seed=4)
    t32, w32 = tsdf_at_points(pts, [(depth, w2c, k)], 0.1)
    t64, w64 = tsdf_at_points(pts.double(), [(depth, w2c, k)], torch.full((200,), 0.1, dtype=torch.float64))
    assert t64.dtype == torch.float64
    assert torch.equal(w32.double(), w64)
    torch.testing.assert_close(t64.float(), t32, atol=1e-4, rtol=0)


# ---------------------------------------------------------------- mesh extraction ---------------------------


@pytest.fixture(scope="module")
def sphere_mesh(sphere):
    return extract_tsdf_mesh([sphere], [-1, -1, -1], [1, 1, 1], 32)


def test_sphere_mesh_accurate_watertight_outward(sphere_mesh):
    v, f, report = sphere_mesh
    voxel = 2 / 32
    assert v.dtype == torch.float32 and f.dtype == torch.int64 and f.shape[0] > 1000
    assert float((v.double().norm(dim=1) - RADIUS).abs().max()) < voxel
    assert closed_oriented_defects(f) == (0, 0)
    vol = signed_volume(v, f)
    assert vol == pytest.approx(4 / 3 * math.pi * RADIUS**3, rel=0.05)
    assert report["faces"] == f.shape[0] and report["vertices"] == v.shape[0] and not report["empty"]
    assert [lv["cells_per_axis"] for lv in report["levels"]] == [16, 32]
    assert report["views"] == 12 and report["corners_evaluated"] > 0
    assert report["peak_points_in_flight"] <= 33**3 and report["peak_elements_in_flight"] > 0
    assert set(report["seconds"]) == {"levels", "mesh", "total"}


def test_sphere_mesh_chunk_invariant(sphere, sphere_mesh):
    depth, w2c, k = sphere
    split = [(depth[i : i + 4], w2c[i : i + 4], k[i : i + 4]) for i in range(0, 12, 4)]
    v, f, report = extract_tsdf_mesh(lambda: iter(split), [-1, -1, -1], [1, 1, 1], 32, chunk_elements=5000)
    assert torch.equal(v, sphere_mesh[0]) and torch.equal(f, sphere_mesh[1])
    assert report["peak_elements_in_flight"] <= 5000


def test_coarse_to_fine_equals_dense_reference(sphere, sphere_mesh):
    """levels=1 evaluates every finest cell (the dense reference twin); the sparse grid must find the
    same surface: identical vertices and the same oriented faces."""
    v_dense, f_dense, rep = extract_tsdf_mesh([sphere], [-1, -1, -1], [1, 1, 1], 32, levels=1)
    assert rep["levels"][0]["evaluated_cells"] == 32**3
    v, f, rep_sparse = sphere_mesh
    assert rep_sparse["corners_evaluated"] < 0.6 * rep["corners_evaluated"]
    assert torch.equal(torch.unique(v, dim=0), torch.unique(v_dense, dim=0))
    assert face_set(v, f) == face_set(v_dense, f_dense)


def test_three_levels_match_two(sphere):
    """A deeper hierarchy (12 -> 24 -> 48 cells per axis) finds the same surface as the dense grid at 48."""
    v3, f3, rep = extract_tsdf_mesh([sphere], [-1, -1, -1], [1, 1, 1], 48, levels=3)
    assert [lv["cells_per_axis"] for lv in rep["levels"]] == [12, 24, 48]
    v1, f1, _ = extract_tsdf_mesh([sphere], [-1, -1, -1], [1, 1, 1], 48, levels=1)
    assert face_set(v3, f3) == face_set(v1, f1)
    assert closed_oriented_defects(f3) == (0, 0)
    assert float((v3.double().norm(dim=1) - RADIUS).abs().max()) < 2 / 48


def test_thin_truncation_still_finds_the_whole_surface(sphere):
    """trunc_voxels below the keep band (1.5 sqrt(3) = 2.6 voxels): coarse levels widen their own truncation,
    so nothing is lost. (2 voxels is about the least that stays watertight: the corners of a crossing tet
    can be sqrt(3) voxels inside, and a corner deeper than trunc in every view is unknown.)"""
    v, f, _ = extract_tsdf_mesh([sphere], [-1, -1, -1], [1, 1, 1], 32, trunc_voxels=2.0)
    v1, f1, _ = extract_tsdf_mesh([sphere], [-1, -1, -1], [1, 1, 1], 32, trunc_voxels=2.0, levels=1)
    assert face_set(v, f) == face_set(v1, f1)
    assert closed_oriented_defects(f) == (0, 0)


def test_contract_keeps_the_inner_box_at_full_resolution(sphere, sphere_mesh):
    """Inside the box the contracted lattice is the plain one (2 x 32 cells over [-2, 2]^3 vs 32 over
    [-1, 1]^3), with the same truncation: the sphere's mesh is the same."""
    v, f, report = extract_tsdf_mesh([sphere], [-1, -1, -1], [1, 1, 1], 32, contract=True)
    assert report["cells_per_axis"] == 64
    v0, f0, _ = sphere_mesh
    assert f.shape == f0.shape and closed_oriented_defects(f) == (0, 0)
    torch.testing.assert_close(torch.unique(v, dim=0), torch.unique(v0, dim=0), atol=1e-6, rtol=0)


def test_min_weight_removes_surfaces_seen_by_few_views(sphere):
    v, f, _ = extract_tsdf_mesh([sphere], [-1, -1, -1], [1, 1, 1], 16, min_weight=100.0)
    assert f.shape[0] == 0


def carved_sphere():
    """The sphere's 12 views, but view 0 sees through it along a 5-pixel disk at the image centre (depth 8,
    far behind it): the noisy depth of one view carving a tunnel through a surface."""
    depth, w2c, k = sphere_depth(12)
    jj, ii = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="xy")
    disk = (jj - SIZE // 2) ** 2 + (ii - SIZE // 2) ** 2 <= 4
    depth[0][disk] = 8.0
    return depth, w2c, k


def test_unseen_inside_closes_a_carved_pinhole():
    """The tunnel's walls are free space (view 0) next to corners no view knows (behind the surface for the
    others): with unseen="unknown" their tets are dropped and the sphere has a hole; "inside" (Curless & Levoy
    Sec. 5) meshes the tunnel's walls and the mesh is closed and outward; the dense twin agrees."""
    src = [carved_sphere()]
    v, f, rep = extract_tsdf_mesh(src, [-1, -1, -1], [1, 1, 1], 32)
    assert closed_oriented_defects(f)[1] > 0 and rep["unseen"] == "unknown" and rep["unseen_inside_corners"] == 0
    v, f, rep = extract_tsdf_mesh(src, [-1, -1, -1], [1, 1, 1], 32, unseen="inside")
    assert closed_oriented_defects(f) == (0, 0) and rep["unseen_inside_corners"] > 0
    assert signed_volume(v, f) > 0.9 * 4 / 3 * math.pi * RADIUS**3
    v1, f1, _ = extract_tsdf_mesh(src, [-1, -1, -1], [1, 1, 1], 32, unseen="inside", levels=1)
    assert face_set(v, f) == face_set(v1, f1)


def test_unseen_inside_leaves_an_observed_surface_and_empty_pixels_alone(sphere, sphere_mesh):
    """Every corner near the sphere is observed, and the space around it is seen through the views' empty
    background pixels, so it stays unknown: the mesh is exactly the plain rule's (without the empty-pixel
    exception it grows fins along the silhouettes)."""
    v, f, rep = extract_tsdf_mesh([sphere], [-1, -1, -1], [1, 1, 1], 32, unseen="inside")
    assert face_set(v, f) == face_set(sphere_mesh[0], sphere_mesh[1])
    assert rep["unseen_inside_corners"] > 0  # corners deep inside the sphere: hidden, now solid


def test_empty_pixel_views_counts_views_that_look_through_a_point():
    """Two fronto-parallel views of z = 2 (32 px, focal 12, pixel centres at j + 0.5); view 0 has no depth in
    its left half (columns 0..15). A point on its optical axis at z = 1 projects to column 16 of both views."""
    depth, w2c, k = plane_views(2.0, [(0.0, 0.0, 0.0), (0.0, 0.0, 0.0)])
    depth[0, :, :16] = 0.0
    pts = torch.tensor([[0.0, 0.0, 1.0],  # column 16 in both: depth in both
                        [-0.5, 0.0, 1.0],  # column 16 - 6 = 10: empty in view 0
                        [-0.5, 0.0, -1.0],  # behind both cameras
                        [50.0, 0.0, 1.0]])  # outside both images
    assert empty_pixel_views(pts, [(depth, w2c, k)]).tolist() == [0, 1, 0, 0]
    assert empty_pixel_views(pts, [(depth, w2c, k, torch.zeros_like(depth))]).tolist() == [2, 2, 0, 0]
    split = [(depth[:1], w2c[:1], k[:1]), (depth[1:], w2c[1:], k[1:])]
    assert empty_pixel_views(pts, split, chunk_elements=1).tolist() == [0, 1, 0, 0]
    with pytest.raises(MeshError, match="points"):
        empty_pixel_views(torch.zeros(3, 2), [(depth, w2c, k)])
    with pytest.raises(MeshError, match="no views"):
        empty_pixel_views(pts, [])


# ---------------------------------------------------------------- contraction -------------------------------


def test_contract_roundtrip_and_inner_identity():
    g = torch.Generator().manual_seed(0)
    scale = torch.logspace(-1, 3, 2000, dtype=torch.float64)[:, None]  # 0.1 .. 1000 box sizes
    x = torch.randn(2000, 3, generator=g, dtype=torch.float64) * scale
    for norm in ("inf", "l2"):
        y = contract(x, norm=norm)
        lim = y.abs().amax(1) if norm == "inf" else y.norm(dim=1)
        assert bool((lim < 2).all())
        torch.testing.assert_close(uncontract(y, norm=norm), x, rtol=1e-9, atol=1e-12)
    inner = torch.rand(100, 3, generator=g, dtype=torch.float64) * 2 - 1  # the whole box, corners included
    assert torch.equal(contract(inner), inner) and torch.equal(uncontract(inner), inner)
    # the stretch estimate is the radial derivative of uncontract (finite difference along the ray)
    y = torch.tensor([[1.5, 0.3, -0.2]], dtype=torch.float64)
    h = 1e-6
    fd = (uncontract(y * (1 + h)) - uncontract(y * (1 - h))).abs().amax() / (2 * h * 1.5)
    assert float(uncontract_scale(y)) == pytest.approx(float(fd), rel=1e-5)
    with pytest.raises(MeshError, match="norm"):
        contract(x, norm="l1")


def test_contracted_grid_meshes_a_plane_far_outside_the_box():
    """Fronto-parallel views of the plane z = 3.7, the box [-1, 1]^3: only contract=True reaches it."""
    views = [plane_views(3.7, [(0.0, 0.0, -0.5), (0.2, 0.1, 0.0)], size=48, focal=20.0)]
    v, f, report = extract_tsdf_mesh(views, [-1, -1, -1], [1, 1, 1], 16, contract=True)
    assert report["cells_per_axis"] == 32 and not report["empty"] and f.shape[0] > 50
    # d = 3.7 - z exactly at every corner and the world-space interpolation is linear: vertices on the plane
    assert float((v[:, 2] - 3.7).abs().max()) < 1e-3
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    n = torch.linalg.cross(b - a, c - a)
    assert bool((n[:, 2] < 0).all())  # outward = towards the cameras (-z)
    v_box, f_box, rep_box = extract_tsdf_mesh(views, [-1, -1, -1], [1, 1, 1], 16)
    assert f_box.shape[0] == 0 and rep_box["empty"] and "no cell" in rep_box["empty_reason"]


def test_log_contraction_roundtrip_continuity_and_stretch():
    """contract_log is the identity in the box, inverts exactly, is continuous at |x| = 1, and its stretch is
    |x| (a finite difference of uncontract_log along the ray): voxels grow like a pixel's footprint."""
    g = torch.Generator().manual_seed(1)
    scale = torch.logspace(-1, 1.2, 2000, dtype=torch.float64)[:, None]  # 0.1 .. 16 box sizes
    x = torch.randn(2000, 3, generator=g, dtype=torch.float64) * scale
    y = contract_log(x)
    torch.testing.assert_close(uncontract_log(y), x, rtol=1e-9, atol=1e-12)
    inner = torch.rand(100, 3, generator=g, dtype=torch.float64) * 2 - 1
    assert torch.equal(contract_log(inner), inner) and torch.equal(uncontract_log(inner), inner)
    edge = torch.tensor([[1.0, 0.4, -0.3]], dtype=torch.float64)
    torch.testing.assert_close(contract_log(edge * (1 + 1e-9)), edge, atol=1e-8, rtol=0)
    far = torch.tensor([[math.exp(LOG_CONTRACTION_SPAN), 0.0, 0.0]], dtype=torch.float64)
    assert float(contract_log(far)[0, 0]) == pytest.approx(1 + LOG_CONTRACTION_SPAN)
    for yy in ([1.5, 0.3, -0.2], [3.2, -1.0, 2.0]):
        yt = torch.tensor([yy], dtype=torch.float64)
        m, h = float(yt.abs().amax()), 1e-6
        fd = (uncontract_log(yt * (1 + h)) - uncontract_log(yt * (1 - h))).abs().amax() / (2 * h * m)
        assert float(uncontract_log_scale(yt)) == pytest.approx(float(fd), rel=1e-5)
        assert float(uncontract_log_scale(yt)) == pytest.approx(float(uncontract_log(yt).abs().amax()), rel=1e-9)


def test_log_contracted_grid_keeps_the_box_and_meshes_a_far_plane_finer():
    """contraction="log": 4 x resolution cells per axis, the sphere inside the box meshed exactly as without
    contraction, and a plane at 3.7 box half-sizes meshed with finer triangles than the mip-NeRF 360 grid
    gives it (its voxel there spans 3.7 box voxels instead of 3.7^2)."""
    v, f, report = extract_tsdf_mesh([sphere_depth(12)], [-1, -1, -1], [1, 1, 1], 32, contract=True,
                                     contraction="log")
    v0, f0, _ = extract_tsdf_mesh([sphere_depth(12)], [-1, -1, -1], [1, 1, 1], 32)
    assert report["cells_per_axis"] == 128 and report["contraction"] == "log"
    assert f.shape == f0.shape and closed_oriented_defects(f) == (0, 0)
    torch.testing.assert_close(torch.unique(v, dim=0), torch.unique(v0, dim=0), atol=1e-6, rtol=0)
    views = [plane_views(3.7, [(0.0, 0.0, -0.5), (0.2, 0.1, 0.0)], size=48, focal=20.0)]
    vi, fi, _ = extract_tsdf_mesh(views, [-1, -1, -1], [1, 1, 1], 16, contract=True)
    vl, fl, rl = extract_tsdf_mesh(views, [-1, -1, -1], [1, 1, 1], 16, contract=True, contraction="log")
    assert not rl["empty"] and float((vl[:, 2] - 3.7).abs().max()) < 1e-3
    assert fl.shape[0] > 2 * fi.shape[0]
    with pytest.raises(MeshError, match="contraction"):
        extract_tsdf_mesh(views, [-1, -1, -1], [1, 1, 1], 16, contract=True, contraction="square")


# ---------------------------------------------------------------- bad input and empty scenes ----------------


def test_views_that_see_nothing_give_an_empty_mesh(sphere):
    depth, w2c, k = sphere
    v, f, report = extract_tsdf_mesh([(torch.zeros_like(depth), w2c, k)], [-1, -1, -1], [1, 1, 1], 16)
    assert v.shape == (0, 3) and f.shape == (0, 3)
    assert report["empty"] and "observed" in report["empty_reason"]
    # a box far from the sphere and behind every camera's view
    v, f, report = extract_tsdf_mesh([sphere], [20, 20, 20], [21, 21, 21], 16)
    assert f.shape == (0, 3) and report["empty"]


def test_bad_inputs_name_the_argument(sphere):
    depth, w2c, k = sphere
    pts = torch.zeros(4, 3)
    with pytest.raises(MeshError, match="points"):
        tsdf_at_points(torch.zeros(4, 2), [sphere], 0.1)
    with pytest.raises(MeshError, match="trunc"):
        tsdf_at_points(pts, [sphere], -1.0)
    with pytest.raises(MeshError, match="trunc"):
        tsdf_at_points(pts, [sphere], torch.ones(3))
    with pytest.raises(MeshError, match=r"depth .*\[B, H, W\]"):
        tsdf_at_points(pts, [(depth[0], w2c[:1], k[:1])], 0.1)
    with pytest.raises(MeshError, match="world_to_camera"):
        tsdf_at_points(pts, [(depth, w2c[:, :3], k)], 0.1)
    with pytest.raises(MeshError, match="K"):
        tsdf_at_points(pts, [(depth, w2c, k[:2])], 0.1)
    with pytest.raises(MeshError, match="weight"):
        tsdf_at_points(pts, [(depth, w2c, k, torch.ones(2, 2))], 0.1)
    with pytest.raises(MeshError, match="item 0"):
        tsdf_at_points(pts, [depth], 0.1)
    with pytest.raises(MeshError, match="no views"):
        tsdf_at_points(pts, [], 0.1)
    with pytest.raises(MeshError, match="no views"):
        tsdf_at_points(pts, [(depth[:0], w2c[:0], k[:0])], 0.1)
    with pytest.raises(MeshError, match="chunk_elements"):
        tsdf_at_points(pts, [sphere], 0.1, chunk_elements=0)
    box = ([-1, -1, -1], [1, 1, 1])
    with pytest.raises(MeshError, match="resolution"):
        extract_tsdf_mesh([sphere], *box, 2)
    with pytest.raises(MeshError, match="levels"):
        extract_tsdf_mesh([sphere], *box, 24, levels=5)
    with pytest.raises(MeshError, match="bounds_max"):
        extract_tsdf_mesh([sphere], [1, 1, 1], [-1, -1, -1], 16)
    with pytest.raises(MeshError, match="bounds_min"):
        extract_tsdf_mesh([sphere], [0, 0], [1, 1, 1], 16)
    with pytest.raises(MeshError, match="trunc_voxels"):
        extract_tsdf_mesh([sphere], *box, 16, trunc_voxels=0)
    with pytest.raises(MeshError, match="min_weight"):
        extract_tsdf_mesh([sphere], *box, 16, min_weight=0)
    with pytest.raises(MeshError, match="unseen"):
        extract_tsdf_mesh([sphere], *box, 16, unseen="outside")
    with pytest.raises(MeshError, match="one-shot"):
        extract_tsdf_mesh(iter([sphere]), *box, 16)
    with pytest.raises(MeshError, match="no views"):
        extract_tsdf_mesh([], *box, 16)


# ---------------------------------------------------------------- GPU ---------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu(sphere, sphere_mesh):
    pts, _ = sphere_points(2000, 0.1)
    t_cpu, w_cpu = tsdf_at_points(pts, [sphere], 0.1)
    t_gpu, w_gpu = tsdf_at_points(pts.cuda(), [sphere], 0.1)
    torch.testing.assert_close(t_gpu.cpu(), t_cpu, atol=1e-5, rtol=0)
    torch.testing.assert_close(w_gpu.cpu(), w_cpu)
    v, f, _ = extract_tsdf_mesh([sphere], [-1, -1, -1], [1, 1, 1], 32, device="cuda")
    assert v.is_cuda and closed_oriented_defects(f.cpu()) == (0, 0)
    assert float((v.double().norm(dim=1) - RADIUS).abs().max()) < 2 / 32


# ---------------------------------------------------------------- carving with masks (thin parts) ----------


def rod_views(n_views: int = 12, size: int = 96, radius: float = 0.04, half: float = 0.6, shift: int = 2,
              shifted: int = 3):
    """A thin rod (|x, y| = ``radius``, |z| <= ``half``) seen from a Fibonacci sphere: depth where a ray meets
    it, the mask's background (free space, depth 1e4) elsewhere; the first ``shifted`` views are a few pixels
    off (their images rolled by ``shift`` columns: a pose or mask error, as the statue's internet photos)."""
    w2c = torch.stack([look_at(e) for e in fibonacci(n_views, DIST)])
    k = intrinsics(n_views, size, 0.5 * size / math.tan(FOV / 2))
    depth = []
    for v in range(n_views):
        o, d = pixel_rays(w2c[v], k[v], size)
        a = d[..., 0] ** 2 + d[..., 1] ** 2
        b = d[..., 0] * o[0] + d[..., 1] * o[1]
        c = o[0] ** 2 + o[1] ** 2 - radius ** 2
        disc = b * b - a * c
        t = (-b - disc.clamp_min(0).sqrt()) / a.clamp_min(1e-12)
        hit = (disc > 0) & ((o[2] + t * d[..., 2]).abs() <= half)
        dv = torch.where(hit, t, torch.full_like(t, 1e4))
        depth.append(torch.roll(dv, shift, dims=1) if v < shifted else dv)
    return torch.stack(depth).float(), w2c.float(), k.float()


def test_majority_carving_keeps_a_thin_rod_that_averaging_loses():
    """Step 6 of meshlift.isosurface.tsdf: a rod 3.2 voxels thick, three of twelve views 2 px off. Averaging
    their saturated free-space votes (carve_fraction=0) shrinks the rod; the majority rule keeps it whole and
    about its true width; both agree where every view is right (a sphere seen through its exact masks)."""
    depth, w2c, k = rod_views()
    lo, hi = torch.full((3,), -0.8), torch.full((3,), 0.8)

    def rod_mesh(frac):
        v, f, rep = extract_tsdf_mesh([(depth, w2c, k)], lo, hi, 64, trunc_voxels=3.0, unseen="inside",
                                      free_depth=5e3, carve_fraction=frac)
        return v[torch.unique(f)] if f.numel() else v[:0]

    kept = rod_mesh(0.5)
    assert kept.shape[0] > 0 and float(kept[:, 2].min()) < -0.5 and float(kept[:, 2].max()) > 0.5
    r = kept[:, :2].norm(dim=1)
    assert float(r.median()) == pytest.approx(0.04, abs=0.0125)  # within half a voxel of the true radius
    z = kept[:, 2]
    bins = torch.histc(z[z.abs() < 0.55], bins=11, min=-0.55, max=0.55)
    assert bool((bins > 0).all())  # no gap along the rod
    lost = rod_mesh(0.0)
    assert float(lost[:, :2].norm(dim=1).median()) < float(r.median()) - 0.001  # averaging shrinks the rod
    # exact masks: the majority rule and plain averaging give the same sphere
    sd, sw, sk = sphere_depth(12)
    sd = torch.where(sd > 0, sd, torch.full_like(sd, 1e4))
    a = extract_tsdf_mesh([(sd, sw, sk)], lo, hi, 32, unseen="inside", free_depth=5e3, carve_fraction=0.5)
    b = extract_tsdf_mesh([(sd, sw, sk)], lo, hi, 32, unseen="inside", free_depth=5e3, carve_fraction=0.0)
    ra, rb = a[0].norm(dim=1), b[0].norm(dim=1)
    assert float((ra - RADIUS).abs().max()) < 0.05 and float((ra.mean() - rb.mean()).abs()) < 0.01


def test_carving_options_are_checked(sphere):
    depth, w2c, k = sphere
    pts = torch.zeros(1, 3)
    with pytest.raises(MeshError, match="carve_fraction must be"):
        tsdf_at_points(pts, [(depth, w2c, k)], 0.1, free_depth=5e3, carve_fraction=1.5)
    with pytest.raises(MeshError, match="needs free_depth"):
        tsdf_at_points(pts, [(depth, w2c, k)], 0.1, carve_fraction=0.5)
    with pytest.raises(MeshError, match="free_depth must be"):
        extract_tsdf_mesh([(depth, w2c, k)], torch.full((3,), -1.0), torch.ones(3), 16, free_depth=-1.0,
                          carve_fraction=0.5)
