"""rasterize: visibility vs a brute-force reference, barycentrics/z vs an independent solve, gradients."""

from __future__ import annotations

import pytest
import torch

from meshlift.errors import RenderError
from meshlift.render import barycentrics_at, rasterize, transform_pos, visible_triangles
from meshlift.render.reference import rasterize_reference, visibility_reference

from _render_scenes import camera_points_to_clip, random_scene


def _check_against_reference(pos, tri, res, ranges=None, atol=2e-5, **kw):
    rast, _ = rasterize(pos, tri, res, ranges=ranges, **kw)
    ref = rasterize_reference(pos, tri, res, ranges=ranges)
    assert torch.equal(rast[..., 3], ref[..., 3])
    torch.testing.assert_close(rast[..., :3], ref[..., :3], atol=atol, rtol=1e-4)
    return rast


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_random_overlaps_match_reference(dtype):
    pos, tri = random_scene(B=2, T=30, seed=1, dtype=dtype)
    rast = _check_against_reference(pos, tri, (24, 32))
    ids = rast[..., 3]
    assert (ids > 0).float().mean() > 0.3  # the scene is not trivially empty
    assert len(torch.unique(ids)) > 10  # many triangles visible, overlaps resolved


def test_chunking_does_not_change_the_result():
    pos, tri = random_scene(B=2, T=40, seed=2)
    big = visible_triangles(pos, tri, (33, 27), max_fragments=2**22)
    for budget in (1, 64, 500):
        assert torch.equal(visible_triangles(pos, tri, (33, 27), max_fragments=budget), big)


def test_deprecated_env_budget_still_applies_with_a_warning(monkeypatch):
    from meshlift import _env
    from meshlift.render.rasterize import resolve_max_fragments

    monkeypatch.setattr(_env, "_WARNED", set())
    pos, tri = random_scene(B=1, T=10, seed=3)
    want = visible_triangles(pos, tri, (16, 16))
    monkeypatch.setenv("MESHLIFT_RASTER_MAX_FRAGMENTS", "70")
    with pytest.warns(FutureWarning, match="MESHLIFT_RASTER_MAX_FRAGMENTS is deprecated.*config field max_fragments"):
        assert resolve_max_fragments(None) == 70
    assert torch.equal(visible_triangles(pos, tri, (16, 16)), want)
    assert resolve_max_fragments(5) == 5  # the argument wins
    monkeypatch.setenv("MESHLIFT_RASTER_MAX_FRAGMENTS", "lots")
    with pytest.raises(RenderError, match="MESHLIFT_RASTER_MAX_FRAGMENTS='lots' \\(deprecated\\) is not a number"):
        visible_triangles(pos, tri, (16, 16))
    monkeypatch.delenv("MESHLIFT_RASTER_MAX_FRAGMENTS")
    assert resolve_max_fragments(None) == 2**24


def test_slivers():
    g = torch.Generator().manual_seed(4)
    a = torch.rand(20, 3, dtype=torch.float64, generator=g) * 2 - 1
    d = torch.randn(20, 3, dtype=torch.float64, generator=g) * 1.5
    n = torch.randn(20, 3, dtype=torch.float64, generator=g) * 0.01
    pts = torch.stack([a, a + d, a + 0.5 * d + n], 1)  # long thin triangles
    pts[..., 2] = pts[..., 2].abs() + 2
    pos = camera_points_to_clip(pts.reshape(1, -1, 3)).float()
    tri = torch.arange(60, dtype=torch.int32).view(20, 3)
    rast = _check_against_reference(pos, tri, (40, 40), atol=5e-4)
    assert (rast[..., 3] > 0).sum() > 20


def test_tie_goes_to_lower_index():
    pts = torch.tensor([[-1.0, -1, 2], [1, -1, 2], [0, 1, 2]], dtype=torch.float64)
    pos = camera_points_to_clip(torch.cat([pts, pts, pts]).unsqueeze(0)).float()
    tri = torch.tensor([[6, 7, 8], [0, 1, 2], [3, 4, 5]], dtype=torch.int32)
    rast, _ = rasterize(pos, tri, (16, 16))
    ids = rast[..., 3][rast[..., 3] > 0]
    assert ids.numel() > 20 and torch.all(ids == 1)  # triangle index 0 wins every tie


def test_nearest_wins():
    near = torch.tensor([[-1.0, -1, 2], [1, -1, 2], [0, 1, 2]], dtype=torch.float64)
    far = near * torch.tensor([3.0, 3.0, 2.0])
    pos = camera_points_to_clip(torch.cat([far, near]).unsqueeze(0)).float()
    tri = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32)
    rast, _ = rasterize(pos, tri, (16, 16))
    ids = rast[..., 3]
    assert torch.all(ids[ids > 0] >= 1) and (ids == 2).sum() > 20
    # where only the far one shows, it is the far one, with larger z/w
    assert rast[..., 2][ids == 1].min() > rast[..., 2][ids == 2].max()


def _clip_polygon_near(v):
    """Sutherland-Hodgman clip of a clip-space polygon against z >= -w (independent of the rasterizer)."""
    out = []
    n = len(v)
    for k in range(n):
        a, b = v[k], v[(k + 1) % n]
        da, db = float(a[2] + a[3]), float(b[2] + b[3])
        if da >= 0:
            out.append(a)
        if (da >= 0) != (db >= 0):
            out.append(a + (da / (da - db)) * (b - a))
    return out


def test_near_plane_crossing_is_clipped_not_dropped():
    # a floor quad running from behind the camera to far in front (crosses w = 0 and the near plane)
    pts = torch.tensor(
        [[-3.0, 0.5, -2.0], [3.0, 0.5, -2.0], [3.0, 0.5, 8.0], [-3.0, 0.5, 8.0], [0.3, -2.0, -1.0], [0.0, 0.0, 0.05], [0.5, 1.0, 3.0]],
        dtype=torch.float64,
    )
    pos = camera_points_to_clip(pts.unsqueeze(0), near=0.1, far=20.0)
    tri = torch.tensor([[0, 1, 2], [0, 2, 3], [4, 5, 6]], dtype=torch.int32)
    H, W = 32, 40
    rast = _check_against_reference(pos, tri, (H, W), atol=1e-9)
    ids = rast[0, ..., 3]
    assert (ids == 1).any() and (ids == 2).any() and (ids == 3).any()
    # independent coverage check: clip each triangle geometrically, project, point-in-polygon
    for t in range(2):  # the floor triangles (no occlusion between them)
        poly = torch.stack(_clip_polygon_near(list(pos[0][tri[t].long()])))
        xy = poly[:, :2] / poly[:, 3:4]
        for i in range(H):
            for j in range(W):
                p = torch.tensor([2 * (j + 0.5) / W - 1, 2 * (i + 0.5) / H - 1], dtype=torch.float64)
                e = xy.roll(-1, 0) - xy
                r = p - xy
                cr = e[:, 0] * r[:, 1] - e[:, 1] * r[:, 0]
                inside = bool((cr >= -1e-9).all() or (cr <= 1e-9).all())
                strict = bool((cr > 1e-6).all() or (cr < -1e-6).all())
                if strict:
                    assert ids[i, j] in (t + 1, 3), (i, j)
                if not inside:
                    assert ids[i, j] != t + 1, (i, j)


def test_edge_on_and_empty():
    # a triangle whose plane contains the eye projects to a line: covers nothing
    pts = torch.tensor([[0.0, -1, 1], [0.0, 1, 2], [0.0, 0, 3]], dtype=torch.float64)
    # and one wholly behind the camera, one beyond the far plane, one off-screen
    behind = torch.tensor([[-1.0, -1, -2], [1, -1, -2], [0, 1, -2]], dtype=torch.float64)
    beyond = torch.tensor([[-1.0, -1, 50], [1, -1, 50], [0, 1, 50]], dtype=torch.float64)
    off = torch.tensor([[5.0, 5, 2], [6, 5, 2], [5, 6, 2]], dtype=torch.float64)
    pos = camera_points_to_clip(torch.cat([pts, behind, beyond, off]).unsqueeze(0), far=10.0).float()
    tri = torch.arange(12, dtype=torch.int32).view(4, 3)
    rast, db = rasterize(pos, tri, (20, 20))
    assert torch.count_nonzero(rast) == 0 and torch.count_nonzero(db) == 0
    assert torch.equal(visibility_reference(pos, tri, (20, 20)), torch.full((1, 20, 20), -1))
    # no triangles at all
    rast, db = rasterize(torch.zeros(2, 0, 4), torch.zeros(0, 3, dtype=torch.int32), (5, 6))
    assert rast.shape == (2, 5, 6, 4) and torch.count_nonzero(rast) == 0


def test_one_triangle_covering_everything():
    pos = torch.tensor([[[-50.0, -50, 0.2, 1], [50, -50, 0.4, 1], [0, 50, 0.3, 1]]])
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    rast = _check_against_reference(pos, tri, (17, 23))
    assert torch.all(rast[..., 3] == 1)


def test_range_mode_matches_instanced():
    pos, tri = random_scene(B=3, T=12, seed=5)
    rast_i, db_i = rasterize(pos, tri, (20, 24))
    V = pos.shape[1]
    pos_r = pos.reshape(-1, 4)
    tri_r = torch.cat([tri + b * V for b in range(3)])
    ranges = torch.tensor([[0, 12], [12, 12], [24, 12]], dtype=torch.int32)
    rast_r, db_r = rasterize(pos_r, tri_r, (20, 24), ranges=ranges)
    offs = torch.tensor([0.0, 12, 24]).view(3, 1, 1)
    torch.testing.assert_close(rast_r[..., :3], rast_i[..., :3])
    torch.testing.assert_close(db_r, db_i)
    assert torch.equal(rast_r[..., 3], torch.where(rast_i[..., 3] > 0, rast_i[..., 3] + offs, 0))
    ref = rasterize_reference(pos_r, tri_r, (20, 24), ranges=ranges)
    assert torch.equal(ref[..., 3], rast_r[..., 3])


def test_rast_db_matches_finite_differences():
    pos, tri = random_scene(B=1, T=5, seed=6, dtype=torch.float64)
    H, W = 24, 24
    rast, db = rasterize(pos, tri, (H, W))
    ids = rast[0, ..., 3].long() - 1
    cov = (ids >= 0).nonzero()
    verts = pos[0][tri.long()[ids[cov[:, 0], cov[:, 1]]]]
    px = (2 * cov[:, 1] + 1).double() / W - 1
    py = (2 * cov[:, 0] + 1).double() / H - 1
    h = 1e-5
    for k, (dx, dy) in enumerate([(1, 0), (0, 1)]):
        up, _ = barycentrics_at(verts, px + dx * h * 2 / W, py + dy * h * 2 / H, False)
        dn, _ = barycentrics_at(verts, px - dx * h * 2 / W, py - dy * h * 2 / H, False)
        fd = (up - dn) / (2 * h)
        got = db[0][cov[:, 0], cov[:, 1]]
        torch.testing.assert_close(got[:, k], fd[:, 0], rtol=1e-5, atol=1e-7)  # du/dX, du/dY
        torch.testing.assert_close(got[:, 2 + k], fd[:, 1], rtol=1e-5, atol=1e-7)  # dv/dX, dv/dY


def test_gradients_match_reference():
    pos, tri = random_scene(B=1, T=6, seed=7, dtype=torch.float64)
    w = torch.randn(1, 16, 16, 3, dtype=torch.float64)
    p1 = pos.clone().requires_grad_(True)
    p2 = pos.clone().requires_grad_(True)
    (rasterize(p1, tri, (16, 16))[0][..., :3] * w).sum().backward()
    (rasterize_reference(p2, tri, (16, 16))[..., :3] * w).sum().backward()
    assert p1.grad.abs().sum() > 0
    torch.testing.assert_close(p1.grad, p2.grad, rtol=1e-7, atol=1e-9)
    p3 = pos.clone().requires_grad_(True)  # grad_db=False takes the analytic-backward fast path
    (rasterize(p3, tri, (16, 16), grad_db=False)[0][..., :3] * w).sum().backward()
    torch.testing.assert_close(p3.grad, p2.grad, rtol=1e-7, atol=1e-9)


def test_gradcheck_barycentrics_and_db():
    pos = torch.tensor(
        [[[-0.7, -0.6, 0.3, 1.1], [0.8, -0.5, 0.5, 1.4], [0.1, 0.9, 0.2, 0.9], [-0.9, 0.8, 0.6, 1.2]]],
        dtype=torch.float64,
        requires_grad=True,
    )
    tri = torch.tensor([[0, 1, 2], [0, 2, 3]], dtype=torch.int32)

    def f(p):
        r, d = rasterize(p, tri, (6, 7))
        return r[..., :3], d

    assert torch.autograd.gradcheck(f, (pos,), eps=1e-6, atol=1e-6)


def test_transform_pos_and_dtypes():
    m = torch.eye(4).repeat(2, 1, 1)
    p = torch.rand(5, 3)
    out = transform_pos(m, p)
    assert out.shape == (2, 5, 4) and torch.allclose(out[..., :3], p.expand(2, 5, 3)) and torch.all(out[..., 3] == 1)


def test_bad_arguments_raise():
    pos = torch.zeros(1, 3, 4)
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    with pytest.raises(RenderError, match="pos"):
        rasterize(pos[0], tri, (4, 4))
    with pytest.raises(RenderError, match="tri"):
        rasterize(pos, tri.float(), (4, 4))
    with pytest.raises(RenderError, match="vertex 5"):
        rasterize(pos, tri + 3, (4, 4))
    with pytest.raises(RenderError, match="resolution"):
        rasterize(pos, tri, (0, 4))
    with pytest.raises(RenderError, match="ranges"):
        rasterize(pos[0], tri, (4, 4), ranges=torch.tensor([[0, 2]], dtype=torch.int32))
    with pytest.raises(RenderError, match="backend"):
        rasterize(pos, tri, (4, 4), backend="nope")


@pytest.mark.slow
def test_memory_is_bounded_by_the_fragment_budget():
    """1M triangles at 2048²: the visibility pass's peak RSS growth stays under the documented bound."""
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc (Linux) to read peak RSS")
    code = textwrap.dedent(
        """
        import sys, torch
        sys.path.insert(0, "benchmarks")
        from _scenes import bumpy_sphere, camera_mvp
        from meshlift.render import transform_pos, visible_triangles
        v, tri = bumpy_sphere(1_000_000)
        pos = transform_pos(camera_mvp(3.5), v)
        def field(name):
            for line in open("/proc/self/status"):
                if line.startswith(name):
                    return int(line.split()[1]) * 1024
        base = field("VmRSS")
        open("/proc/self/clear_refs", "w").write("5")
        ids = visible_triangles(pos, tri, (2048, 2048), max_fragments=2**20)
        assert (ids >= 0).float().mean() > 0.2
        print(field("VmHWM") - base)
        """
    )
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True)
    grown = int(out.stdout.strip().splitlines()[-1])
    pixels = 2048 * 2048
    bound = 170 * 2**20 + 500 * (2**20 // 8) + 24 * pixels + 64 * 2**20  # doc formula + 64 MiB slack
    assert grown < bound, (grown / 2**20, bound / 2**20)


def test_fast_barycentric_backward_matches_autograd_twin():
    from meshlift.render.rasterize import _Barycentrics

    g = torch.Generator().manual_seed(9)
    verts = torch.randn(50, 3, 4, dtype=torch.float64, generator=g)
    verts[..., 3] = verts[..., 3].abs() + 1
    px = torch.rand(50, dtype=torch.float64, generator=g) - 0.5
    py = torch.rand(50, dtype=torch.float64, generator=g) - 0.5
    w1 = torch.randn(50, 3, dtype=torch.float64, generator=g)
    w2 = torch.randn(50, 4, dtype=torch.float64, generator=g)
    for use_db in (False, True):
        v1 = verts.clone().requires_grad_(True)
        v2 = verts.clone().requires_grad_(True)
        uvz, db = _Barycentrics.apply(v1, px, py, use_db)
        uvz2, db2 = barycentrics_at(v2, px, py, True)
        torch.testing.assert_close(uvz, uvz2, rtol=1e-12, atol=1e-14)
        loss1, loss2 = (uvz * w1).sum(), (uvz2 * w1).sum()
        if use_db:
            loss1, loss2 = loss1 + (db * w2).sum(), loss2 + (db2 * w2).sum()
        else:
            assert db.shape == (50, 0)
        loss1.backward()
        loss2.backward()
        torch.testing.assert_close(v1.grad, v2.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("grad_db", [False, True])
def test_dense_variant_matches_compacted(grad_db, kernels):
    """The sync-free dense variant (GPU default) gives the same rast and gradients as the compacted one."""
    from meshlift.render import interpolate

    pos, tri = random_scene(B=2, T=60, seed=31, dtype=torch.float64)
    pos[:, :3, 3] = -0.2  # one triangle crossing w = 0 (near-plane bucket)
    attr = torch.randn(pos.shape[1], 3, dtype=torch.float64)
    res = []
    for dense in ("0", "1"):
        kernels(raster_dense=dense == "1")
        p = pos.clone().requires_grad_(True)
        a = attr.clone().requires_grad_(True)
        rast, db = rasterize(p, tri, (37, 45), grad_db=grad_db)
        out, _ = interpolate(a, rast, tri)
        (out.sum() + rast[..., :3].pow(2).sum() + db.sum()).backward()
        res.append([rast.detach(), db.detach(), p.grad, a.grad])
    assert torch.equal(res[0][0][..., 3], res[1][0][..., 3])
    for x, y in zip(*res):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    assert torch.isfinite(res[1][2]).all()


@pytest.mark.parametrize("dense", ["0", "1"])
@pytest.mark.parametrize("fold", [0, 2**40])
def test_stamp_buckets_match_reference(monkeypatch, dense, fold, kernels):
    """Tiny, small and large triangles through every bucket (2x2, 4x4 stamps, tiles; folded or not)."""
    from meshlift.kernels import torch_backend

    kernels(raster_dense=dense == "1")
    monkeypatch.setattr(torch_backend, "_FOLD_DENSE", fold)
    monkeypatch.setattr(torch_backend, "_FOLD_COMPACT", fold)
    pos, tri = random_scene(B=2, T=80, seed=41)
    v = pos.view(2, 80, 3, 4)
    c = v.mean(2, keepdim=True)
    scale = torch.logspace(-2.3, 0, 80).view(1, 80, 1, 1)  # boxes from sub-pixel to most of the image
    pos = (c + (v - c) * scale).reshape(2, 240, 4)
    ids = visible_triangles(pos, tri, (61, 70), max_fragments=3000)
    assert torch.equal(ids, visibility_reference(pos, tri, (61, 70)))
    assert len(torch.unique(ids)) > 40


def test_more_triangles_than_float32_ids_hold_is_refused():
    """``rast`` keeps the triangle id in the positions' float type: above 2^24 triangles float32 ids would be
    rounded (the wrong triangle interpolated), so the call is refused naming the limit; float64 is exact."""
    from meshlift.render.rasterize import MAX_FLOAT32_IDS

    pos = torch.tensor([[[-1.0, -1.0, 0.0, 1.0], [1.0, -1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0]]])
    tri = torch.tensor([[0, 1, 2]], dtype=torch.int32).expand(MAX_FLOAT32_IDS + 1, 3)
    with pytest.raises(RenderError, match="2\\^24"):
        rasterize(pos, tri, (4, 4))
    rast, _ = rasterize(pos[:, :, :].double(), tri[:8], (4, 4))  # under the limit: fine
    assert rast.shape == (1, 4, 4, 4)
