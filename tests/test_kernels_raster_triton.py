"""Triton rasterizer (meshlift.kernels.raster_triton) against its PyTorch twins, forward and backward.

Without a CUDA device the kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``, set here before
triton is first used), at small sizes; there they must agree bit for bit with the torch backend. The
``gpu``-marked tests at the end repeat the comparisons at realistic sizes on CUDA.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

triton = pytest.importorskip("triton")

import triton.language as tl  # noqa: E402

from meshlift.errors import RenderError  # noqa: E402
from meshlift.kernels._raster_triton_kernels import _tri_off  # noqa: E402
from meshlift.kernels import raster_triton as rt  # noqa: E402
from meshlift.render import interpolate, rasterize, visible_triangles  # noqa: E402
from meshlift.kernels import RasterTuning, get_backend, use_kernels  # noqa: E402
from meshlift.render.reference import interpolate_reference, rasterize_reference  # noqa: E402

from _render_scenes import camera_points_to_clip, random_scene  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tests (CPU); the gpu tests cover CUDA")


def _both(pos, tri, res, ranges=None, grad_db=False):
    """(torch, triton) outputs of rasterize on the same inputs."""
    a = rasterize(pos, tri, res, ranges=ranges, grad_db=grad_db, backend="torch")
    b = rasterize(pos, tri, res, ranges=ranges, grad_db=grad_db, backend="triton")
    return a, b


def _assert_same_rast(a, b, exact=True, atol=1e-6):
    assert torch.equal(a[..., 3], b[..., 3])
    if exact:
        assert torch.equal(a, b)
    else:
        torch.testing.assert_close(a, b, atol=atol, rtol=1e-5)


@cpu_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_matches_torch_backend_bitwise(dtype):
    pos, tri = random_scene(B=2, T=24, seed=1, dtype=dtype)
    (ra, _), (rb, _) = _both(pos, tri, (20, 28))
    assert (ra[..., 3] > 0).float().mean() > 0.3 and len(torch.unique(ra[..., 3])) > 10
    _assert_same_rast(ra, rb)
    # grad_db=True: the torch path switches to barycentrics_at (u = e0 · (1/S)): equal to rounding
    (ra, da), (rb, db) = _both(pos, tri, (20, 28), grad_db=True)
    tol = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-10)
    _assert_same_rast(ra, rb, exact=False, atol=tol["atol"])
    torch.testing.assert_close(da, db, **tol)
    ref = rasterize_reference(pos, tri, (20, 28))
    assert torch.equal(rb[..., 3], ref[..., 3])
    torch.testing.assert_close(rb[..., :3], ref[..., :3], atol=2e-5, rtol=1e-4)


@cpu_only
def test_ties_nearest_edge_on_and_empty():
    pts = torch.tensor([[-1.0, -1, 2], [1, -1, 2], [0, 1, 2]], dtype=torch.float64)
    far = pts * torch.tensor([3.0, 3.0, 2.0])
    flat = torch.tensor([[-1.0, 0, 2], [1.0, 0, 2], [0.0, 0, 2]], dtype=torch.float64)  # edge-on (zero area)
    P = torch.cat([pts, pts, pts, far, flat]).unsqueeze(0)
    pos = camera_points_to_clip(P).float()
    tri = torch.tensor([[6, 7, 8], [0, 1, 2], [3, 4, 5], [9, 10, 11], [12, 13, 14]], dtype=torch.int32)
    ra, rb = (r[0] for r in _both(pos, tri, (16, 16)))
    _assert_same_rast(ra, rb)
    ids = rb[..., 3]
    near_ids = ids[(ids > 0) & (ids != 4)]
    assert near_ids.numel() > 20 and torch.all(near_ids == 1)  # three coincident: index 0 wins the ties
    assert (ids == 4).sum() > 10  # the far one shows around the near ones
    # empty image: everything behind the camera
    behind = camera_points_to_clip((pts * torch.tensor([1.0, 1, -1])).unsqueeze(0)).float()
    r = rasterize(behind, torch.tensor([[0, 1, 2]], dtype=torch.int32), (8, 12), backend="triton")[0]
    assert torch.equal(r, torch.zeros(1, 8, 12, 4))
    r = rasterize(behind, torch.zeros(0, 3, dtype=torch.int32), (8, 12), backend="triton")[0]
    assert torch.equal(r, torch.zeros(1, 8, 12, 4))


@cpu_only
def test_near_plane_crossing_and_far_clip():
    pts = torch.tensor(
        [[-3.0, 0.5, -2.0], [3.0, 0.5, -2.0], [3.0, 0.5, 8.0], [-3.0, 0.5, 8.0], [0.3, -2.0, -1.0], [0.0, 0.0, 0.05],
         [0.5, 1.0, 3.0], [-1, -1, 5.0], [1, -1, 30.0], [0, 1, 30.0]],
        dtype=torch.float64,
    )
    tri = torch.tensor([[0, 1, 2], [0, 2, 3], [4, 5, 6], [7, 8, 9]], dtype=torch.int32)
    for dtype in (torch.float64, torch.float32):
        pos = camera_points_to_clip(pts.unsqueeze(0), near=0.1, far=20.0).to(dtype)
        ra, rb = (r[0] for r in _both(pos, tri, (32, 40)))
        _assert_same_rast(ra, rb)
        ids = rb[0, ..., 3]
        assert all((ids == k).any() for k in (1, 2, 3, 4))


@cpu_only
def test_range_mode_and_batch():
    pos, tri = random_scene(B=3, T=10, seed=5)
    pos_r = pos.reshape(-1, 4)
    tri_r = torch.cat([tri + 30 * b for b in range(3)])
    ranges = torch.tensor([[0, 10], [10, 10], [16, 14]], dtype=torch.int32)  # overlapping ranges too
    (ra, da), (rb, db) = _both(pos_r, tri_r, (16, 20), ranges=ranges, grad_db=True)
    _assert_same_rast(ra, rb, exact=False)
    torch.testing.assert_close(da, db, atol=1e-6, rtol=1e-5)
    # instanced batch of 3 with a different resolution aspect
    (ra, _), (rb, _) = _both(pos, tri, (13, 21))
    _assert_same_rast(ra, rb)


@cpu_only
@pytest.mark.parametrize("tile,stamp", [("8x8", "0"), ("4x16", "2"), ("32x8", "8")])
def test_tile_sizes_do_not_change_the_result(kernels, tile, stamp):
    # small triangles (T=25 in a 23x31 image: boxes of a few pixels up to the whole image) take the
    # stamp path up to `stamp` pixels a side, the others the tiles; both meet in the key buffer
    pos, tri = random_scene(B=1, T=25, seed=6)
    pos = torch.cat([pos, random_scene(B=1, T=12, seed=16, spread=3.0)[0] * torch.tensor([1.0, 1, 1, 3])], 1)
    tri = torch.cat([tri, tri[:12] + 75])
    want = rasterize(pos, tri, (23, 31), grad_db=False, backend="torch")[0]
    kernels(raster_tuning=RasterTuning(tile=tuple(int(s) for s in tile.split("x")), stamp=int(stamp)))
    _assert_same_rast(want, rasterize(pos, tri, (23, 31), grad_db=False, backend="triton")[0])
    assert torch.equal(visible_triangles(pos, tri, (23, 31), backend="triton"), visible_triangles(pos, tri, (23, 31), backend="torch"))


@cpu_only
def test_fragment_budget_chunks_give_the_same_result():
    pos, tri = random_scene(B=2, T=12, seed=11)
    want = rasterize(pos, tri, (16, 20), grad_db=False, backend="torch")[0]
    for budget in (12,):  # a few chunks
        got = rasterize(pos, tri, (16, 20), grad_db=False, backend="triton", max_fragments=budget)[0]
        _assert_same_rast(want, got)
    pos_r = pos.reshape(-1, 4)
    tri_r = torch.cat([tri, tri + pos.shape[1]])
    ranges = torch.tensor([[0, 12], [12, 12]])
    want = rasterize(pos_r, tri_r, (16, 20), ranges=ranges, grad_db=False, backend="torch")[0]
    _assert_same_rast(want, rasterize(pos_r, tri_r, (16, 20), ranges=ranges, grad_db=False, backend="triton", max_fragments=12)[0])


# --- 32-bit overflow guards (the H200 crash: 8,970,259 faces x 8 views at 512², "illegal memory access") ---


class _BinSpy:
    """Stands in for the bin kernel in ``rt._K``: runs the real one, records the pair lists it fills, checks
    that every emit gets a list its cursors fit in (instead of writing past it, as the GPU did), and
    optionally inflates the counts of the first count pass by ``inflate`` per (image, tile)."""

    def __init__(self, real, inflate: int = 0):
        self.real, self.inflate, self.emitted, self.counts = real, inflate, [], 0

    def __getitem__(self, grid):
        def launch(*a, **kw):
            if kw["EMIT"]:
                cursor, pairs = a[4], a[5]
                assert int(cursor.min()) >= 0 and int(cursor.max()) <= pairs.numel(), "pair list too short"
                self.emitted.append(pairs.numel())
            out = self.real[grid](*a, **kw)
            if not kw["EMIT"]:
                if self.counts == 0 and self.inflate:
                    a[4][1:] += self.inflate  # every count fits int32; their sum passes 2^31
                self.counts += 1
            return out

        return launch


def _spy(monkeypatch, inflate=0) -> _BinSpy:
    K = rt._kernels()
    spy = _BinSpy(K["bin"], inflate)
    monkeypatch.setattr(rt, "_K", {**K, "bin": spy})
    return spy


@triton.jit
def _tri_off_probe(t_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    t = tl.load(t_ptr + i, mask=m, other=0)  # int32, as the ids the kernels load
    tl.store(out_ptr + i, _tri_off(t, 2), mask=m)


@cpu_only
def test_tri_offsets_are_int64_past_2_31():
    """``3 t + k`` into the index buffer for t past 2^31 / 3: Triton types the loaded int32 ids (and
    ``program_id`` / ``tl.arange``) as int32, so ``t * 3`` wrapped before it reached the pointer."""
    t = torch.tensor([0, 5, 715_827_882, 715_827_883, 1_000_000_000, 2**31 - 1], dtype=torch.int32)
    out = torch.zeros(8, dtype=torch.int64)
    _tri_off_probe[(1,)](t, out, t.numel(), BLOCK=8)
    assert out[: t.numel()].tolist() == [3 * int(x) + 2 for x in t]


def test_tile_offsets_sum_past_int32():
    # counts that each fit int32 but sum past 2^31 (negative in int32) and past 2^32 (small positive)
    for n, extra in ((8, 5), (16, 5)):
        cnt = torch.tensor([0] + [2**28] * n + [extra], dtype=torch.int32)
        offs, total = rt.tile_offsets(cnt)
        assert offs.dtype == torch.int64 and total == n * 2**28 + extra
        assert offs.tolist() == [i * 2**28 for i in range(n + 1)] + [total]


@cpu_only
def test_pair_total_past_int32_chunks_instead_of_a_short_list(monkeypatch):
    """End to end at a small size: the first count is inflated so that its pair total passes 2^31 (12
    (image, tile) counters of 2^28 = 3.2e9 pairs). An int32 cumsum read that as -1.07e9, under the budget,
    and emitted into a 1-element list; now the total is exact, over the budget, and the triangles run in
    chunks (recounted, not inflated) with the same result as the torch backend."""
    pos, tri = random_scene(B=2, T=12, seed=11)
    want = rasterize(pos, tri, (16, 20), grad_db=False, backend="torch")[0]
    spy = _spy(monkeypatch, inflate=2**28)
    got = rasterize(pos, tri, (16, 20), grad_db=False, backend="triton")[0]
    assert spy.counts > 2 and len(spy.emitted) > 1  # the chunked path, not one pass
    _assert_same_rast(want, got)


def _heavy_tail_scene():
    """20 pixel-sized triangles in front, then 4 triangles covering the whole 16x20 frame (6 tiles of 8x8
    each): the pair-heavy triangles all sit in the last chunk of an even split."""
    g = torch.Generator().manual_seed(3)
    small = []
    for _ in range(20):
        c = torch.rand(2, generator=g, dtype=torch.float64) * 1.8 - 0.9
        small.append([[c[0], c[1], -0.5], [c[0] + 0.12, c[1], -0.5], [c[0], c[1] + 0.12, -0.5]])
    big = [[[-1.5, -1.5, 0.1 * k], [4.0, -1.5, 0.1 * k + 0.3 * (-1) ** k], [-1.5, 4.0, 0.05]] for k in range(1, 5)]
    xyz = torch.tensor(small + big, dtype=torch.float64).reshape(1, -1, 3)
    pos = torch.cat([xyz, torch.ones_like(xyz[..., :1])], -1).float()
    return pos, torch.arange(pos.shape[1], dtype=torch.int32).view(-1, 3)


@cpu_only
def test_uneven_chunks_are_halved_to_the_budget(monkeypatch):
    """Over the fragment budget, every binned chunk holds at most ``max_fragments`` pairs even when the
    pair-heavy triangles cluster in one chunk of the even split (which used to be binned whole)."""
    pos, tri = _heavy_tail_scene()
    want = rasterize(pos, tri, (16, 20), grad_db=False, backend="torch")[0]
    assert len(torch.unique(want[..., 3])) > 10
    _assert_same_rast(want, rasterize(pos, tri, (16, 20), grad_db=False, backend="triton")[0])
    spy = _spy(monkeypatch)
    got = rasterize(pos, tri, (16, 20), grad_db=False, backend="triton", max_fragments=6)[0]
    _assert_same_rast(want, got)
    assert spy.emitted and max(spy.emitted) <= 6, spy.emitted
    assert sum(spy.emitted) >= 24  # the 4 full-frame triangles' pairs were all binned


def test_default_tile_by_frame_size(kernels):
    assert rt.tile_config(1024, 1024, 1)[:2] == (8, 8) and rt.tile_config(256, 256, 4)[:2] == (8, 8)
    assert rt.tile_config(2048, 2048, 1)[:2] == (16, 16) and rt.tile_config(512, 512, 8)[:2] == (16, 16)
    assert rt.tile_config()[4] == 4 and rt.describe_config(1024, 1024, 1) == "tile 8x8, warps 4, unroll 2, stamp 4, bwd ids 8"
    kernels(raster_tuning=RasterTuning(tile=(8, 32)))
    assert rt.tile_config(2048, 2048, 1)[:2] == (8, 32)  # the tuning wins
    assert rt.describe_config(64, 64, 1) == "tile 8x32, warps 4, unroll 2, stamp 4, bwd ids 8"


def test_tuning_is_validated():
    with pytest.raises(RenderError, match=r"RasterTuning.tile=\(12, 16\): give two powers of two"):
        RasterTuning(tile=(12, 16))
    with pytest.raises(RenderError, match="RasterTuning.stamp=3: use 0, 2, 4 or 8"):
        RasterTuning(stamp=3)
    with pytest.raises(RenderError, match="RasterTuning.warps=3"):
        RasterTuning(warps=3)
    with pytest.raises(RenderError, match="RasterTuning.bwd_ids=-1: use an integer 0-64"):
        RasterTuning(bwd_ids=-1)


def _loss_grads(backend, pos, attr, tri, res, ranges=None, grad_db=False, use_db=False, seed=0):
    p = pos.detach().clone().requires_grad_(True)
    a = attr.detach().clone().requires_grad_(True)
    rast, db = rasterize(p, tri, res, ranges=ranges, grad_db=grad_db, backend=backend)
    if backend == "triton":
        out = rt.interpolate_triton(a, rast, tri)
    else:
        out, _ = interpolate(a, rast, tri)
    g = torch.Generator().manual_seed(seed)
    w_out = torch.rand(out.shape, generator=g, dtype=out.dtype).to(out.device)
    w_r = torch.rand(rast.shape, generator=g, dtype=rast.dtype).to(rast.device)
    loss = (out * w_out).sum() + (rast[..., :3] * w_r[..., :3]).sum()
    if use_db:
        loss = loss + (db * db).sum() * 1e-3
    loss.backward()
    return rast.detach(), out.detach(), p.grad, a.grad


@cpu_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_backward_matches_torch_path(dtype, kernels):
    kernels(raster="torch")  # the torch twin's interpolate must not fuse
    pos, tri = random_scene(B=2, T=20, seed=7, dtype=dtype)
    attr = torch.randn(2, pos.shape[1], 5, dtype=dtype)  # per-image attributes
    res = (20, 26)
    ta = _loss_grads("torch", pos, attr, tri, res)
    tb = _loss_grads("triton", pos, attr, tri, res)
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-9)
    assert torch.equal(ta[0][..., 3], tb[0][..., 3])
    for x, y in zip(ta[1:], tb[1:]):
        torch.testing.assert_close(x, y, **tol)
    assert ta[2].abs().sum() > 0 and ta[3].abs().sum() > 0


def _big_and_small_scene(dtype):
    """Two images of two large triangles and a dozen small ones: in image 0 one large one is in front
    of everything (whole 16x16 backward tiles of one id), in image 1 behind the small ones (tiles of mixed ids); both
    leave pixels empty."""
    near = torch.tensor([[-5.0, -5.0, 1.2], [15.0, -5.0, 1.2], [-5.0, 15.0, 1.2], [6.0, 6.0, 8.0]], dtype=torch.float64)
    far = torch.tensor([[-3.0, -3.0, 4.0], [2.5, -3.0, 4.0], [-3.0, 1.5, 4.0], [2.5, 1.5, 4.5]], dtype=torch.float64)
    big = camera_points_to_clip(torch.stack([near, far]))
    pos_s, tri_s = random_scene(B=2, T=12, seed=21, dtype=torch.float64, spread=0.9)
    pos = torch.cat([big, pos_s], 1)
    tri = torch.cat([torch.tensor([[0, 1, 2], [1, 3, 2]], dtype=torch.int32), tri_s + 4])
    return pos.to(dtype), tri


@cpu_only
@pytest.mark.parametrize(
    "configs",
    [
        pytest.param((("8", 3, dict()),), id="default"),
        pytest.param((("8", 3, dict(grad_db=True, use_db=True)), ("0", 3, dict()), ("8", 37, dict())), id="db-off-37ch",
                     marks=pytest.mark.slow),  # ~40 s in the interpreter
    ],
)
def test_backward_pre_reduction_uniform_mixed_and_empty_tiles(configs, kernels):
    # the backward sums each triangle's pixels of a 16x16 tile in registers before its atomics; uniform
    # tiles, mixed ones, empty pixels, tiles past the image border, two images, with and without rast_db,
    # 37 channels (two channel blocks): equal to the torch twin within float64 reassociation (1e-10 abs /
    # 1e-9 rel; float32 runs the same code, covered at 1e-5 / 1e-4 by test_backward_matches_torch_path),
    # with the pre-reduction on (8) and off (0 = one atomic per pixel)
    kernels(raster="torch")
    pos, tri = _big_and_small_scene(torch.float64)
    res = (18, 17)
    ids = rasterize(pos, tri, res, backend="torch")[0][..., 3]
    uniform = ids[:, :16, :16].reshape(2, -1)
    assert bool(((uniform == uniform[:, :1]).all(1) & (uniform[:, 0] > 0)).any())  # a whole tile of one id
    assert (ids == 0).any() and len(torch.unique(ids[1])) > 6
    tol = dict(atol=1e-10, rtol=1e-9)
    for k, C, kw in configs:
        attr = torch.randn(pos.shape[1], C, dtype=torch.float64)
        want = _loss_grads("torch", pos, attr, tri, res, **kw)
        with use_kernels(raster_tuning=RasterTuning(bwd_ids=int(k))):
            assert rt.bwd_ids() == int(k)
            got = _loss_grads("triton", pos, attr, tri, res, **kw)
        assert torch.equal(want[0][..., 3], got[0][..., 3])
        for x, y in zip(want[1:], got[1:]):
            torch.testing.assert_close(x, y, **tol)


@cpu_only
def test_backward_through_rast_db_and_range_mode(kernels):
    kernels(raster="torch")
    pos, tri = random_scene(B=2, T=10, seed=8, dtype=torch.float64)
    pos_r = pos.reshape(-1, 4)
    tri_r = torch.cat([tri, tri + pos.shape[1]])
    ranges = torch.tensor([[0, 10], [10, 10]], dtype=torch.int64)
    attr = torch.randn(pos_r.shape[0], 3, dtype=torch.float64)
    for kw in (dict(grad_db=True, use_db=True), dict(grad_db=True, use_db=False)):
        ta = _loss_grads("torch", pos_r, attr, tri_r, (16, 20), ranges=ranges, **kw)
        tb = _loss_grads("triton", pos_r, attr, tri_r, (16, 20), ranges=ranges, **kw)
        for x, y in zip(ta, tb):
            torch.testing.assert_close(x, y, atol=1e-10, rtol=1e-9)


@cpu_only
def test_gradcheck_float64():
    pts = torch.tensor([[-0.8, -0.7, 2.0], [0.9, -0.5, 2.5], [0.1, 0.8, 3.0], [0.7, 0.6, 1.8]], dtype=torch.float64)
    pos = camera_points_to_clip(pts.unsqueeze(0)).requires_grad_(True)
    tri = torch.tensor([[0, 1, 2], [1, 3, 2]], dtype=torch.int32)
    attr = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    w = torch.rand(1, 8, 10, 2, dtype=torch.float64)

    def f(p, a):
        rast, _ = rt.rasterize_triton(p, tri, (8, 10))
        return (rt.interpolate_triton(a, rast, tri) * w).sum() + rast[..., 2].sum()

    assert torch.autograd.gradcheck(f, (pos, attr), eps=1e-6, atol=1e-6, fast_mode=True)
    wd = torch.rand(1, 8, 10, 4, dtype=torch.float64)

    def g(p):  # through rast_db too (the analytic derivative of the screen derivatives)
        rast, db = rt.rasterize_triton(p, tri, (8, 10), grad_db=True)
        return (db * wd).sum() + (rast[..., :3] * wd[..., :3]).sum()

    assert torch.autograd.gradcheck(g, (pos,), eps=1e-6, atol=1e-6, fast_mode=True)


@cpu_only
def test_interpolate_kernel_matches_twins():
    pos, tri = random_scene(B=2, T=15, seed=9)
    rast, _ = rasterize(pos, tri, (14, 18), backend="torch")
    for attr in (torch.randn(pos.shape[1], 37), torch.randn(2, pos.shape[1], 3), torch.randn(1, pos.shape[1], 1)):
        want, _ = interpolate(attr, rast, tri)
        got = rt.interpolate_triton(attr, rast, tri)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    attr = torch.randn(pos.shape[1], 2)
    torch.testing.assert_close(rt.interpolate_triton(attr, rast, tri), interpolate_reference(attr, rast, tri), atol=1e-6, rtol=1e-5)
    # backward with an expanded (stride-0) output gradient, as out.sum() gives
    grads = []
    for f in (lambda a, r: interpolate(a, r, tri)[0], lambda a, r: rt.interpolate_triton(a, r, tri)):
        a = attr.clone().requires_grad_(True)
        r = rast.clone().requires_grad_(True)
        f(a, r).sum().backward()
        grads.append((a.grad, r.grad))
    for x, y in zip(*grads):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


@cpu_only
def test_backend_selection(monkeypatch, kernels):
    assert get_backend("auto", torch.device("cpu")).name == "torch"  # never the interpreter by default
    assert get_backend("triton", torch.device("cpu")).name == "triton"
    kernels(raster="triton")
    pos, tri = random_scene(B=1, T=8, seed=10)
    attr = torch.randn(pos.shape[1], 3, requires_grad=True)
    rast, _ = rasterize(pos, tri, (12, 12), grad_db=False)
    out, _ = interpolate(attr, rast, tri)  # fused kernel through the public op
    assert out.grad_fn is not None and "Interpolate" in type(out.grad_fn).__name__
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RenderError, match="not available"):
        rasterize(pos, tri, (12, 12))


# ----------------------------------------------------------------------------------------------- GPU


def _sphere(n_tri: int, device, dtype=torch.float32):
    nv = max(3, int(round(math.sqrt(n_tri / 4))))
    nu = 2 * nv
    th = torch.linspace(0, math.pi, nv + 1, dtype=torch.float64)[1:-1]
    ph = torch.arange(nu, dtype=torch.float64) * (2 * math.pi / nu)
    T_, P_ = torch.meshgrid(th, ph, indexing="ij")
    r = 1 + 0.05 * torch.sin(8 * T_) * torch.cos(6 * P_)
    ring = torch.stack([r * torch.sin(T_) * torch.cos(P_), r * torch.cos(T_), r * torch.sin(T_) * torch.sin(P_) + 2.2], -1)
    v = torch.cat([torch.tensor([[0, 1.0, 2.2]], dtype=torch.float64), ring.reshape(-1, 3), torch.tensor([[0, -1.0, 2.2]], dtype=torch.float64)])
    nr = nv - 1
    j = torch.arange(nu)
    idx = lambda i, jj: 1 + i * nu + (jj % nu)  # noqa: E731
    tris = [torch.stack([torch.zeros_like(j), idx(0, j + 1), idx(0, j)], -1)]
    for i in range(nr - 1):
        tris += [torch.stack([idx(i, j), idx(i, j + 1), idx(i + 1, j + 1)], -1), torch.stack([idx(i, j), idx(i + 1, j + 1), idx(i + 1, j)], -1)]
    tris.append(torch.stack([idx(nr - 1, j), idx(nr - 1, j + 1), torch.full_like(j, v.shape[0] - 1)], -1))
    pos = camera_points_to_clip(v.unsqueeze(0), fov_y=0.9, near=0.05, far=10.0)
    return pos.to(device=device, dtype=dtype).contiguous(), torch.cat(tris).to(torch.int32).to(device)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("n_tri,res,batch", [(100_000, 512, 1), (1_000_000, 1024, 1), (20_000, 256, 4)])
def test_gpu_forward_parity(n_tri, res, batch):
    pos, tri = _sphere(n_tri, "cuda")
    pos = pos.expand(batch, -1, -1).contiguous() * torch.tensor([1.0, 1, 1, 1], device="cuda")
    pos[1:, :, 0] += 0.1  # different images
    assert get_backend("auto", torch.device("cuda")).name == "triton"
    (ra, da), (rb, db) = _both(pos, tri, (res, res), grad_db=True)
    # both backends round every edge function op by op (no fma; see the raster_triton docstring); ids may
    # still differ where a rounding-accepted pixel centre lies outside a triangle's slack box (candidate
    # sets differ: tiles / stamps), expected on a handful of pixels, so 1e-3 of the pixels are allowed
    same = ra[..., 3] == rb[..., 3]
    assert same.float().mean() > 0.999, same.float().mean()
    cov = same & (ra[..., 3] > 0)
    assert cov.float().mean() > 0.1
    torch.testing.assert_close(ra[cov], rb[cov], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(da[cov], db[cov], atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_backward_parity_float64(kernels):
    pos, tri = _sphere(20_000, "cuda", torch.float64)
    pos = torch.cat([pos, pos * torch.tensor([1.0, 1.0, 1.0, 1.0], device="cuda", dtype=torch.float64) + 0.01])
    attr = torch.randn(pos.shape[1], 4, dtype=torch.float64, device="cuda")
    kernels(raster="torch")
    ta = _loss_grads("torch", pos, attr, tri, (256, 256))
    tb = _loss_grads("triton", pos, attr, tri, (256, 256))
    assert (ta[0][..., 3] == tb[0][..., 3]).float().mean() > 0.9999
    for x, y in zip(ta[1:], tb[1:]):
        torch.testing.assert_close(x, y, atol=1e-7, rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_random_scene_and_ranges():
    pos, tri = random_scene(B=3, T=3000, seed=31)
    pos, tri = pos.cuda(), tri.cuda()
    (ra, _), (rb, _) = _both(pos, tri, (300, 200))
    assert (ra[..., 3] == rb[..., 3]).float().mean() > 0.999
    pos_r = pos.reshape(-1, 4)
    tri_r = torch.cat([tri + pos.shape[1] * b for b in range(3)])
    ranges = torch.tensor([[0, 3000], [3000, 3000], [6000, 3000]], dtype=torch.int32)
    (rc, _), (rd, _) = _both(pos_r, tri_r, (300, 200), ranges=ranges)
    assert (rc[..., 3] == rd[..., 3]).float().mean() > 0.999
    off = (torch.arange(3, device="cuda") * 3000).view(3, 1, 1).float()
    same = torch.where(rd[..., 3] > 0, rd[..., 3] - off, 0.0)
    assert (rb[..., 3] == same).float().mean() > 0.999


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_matches_cpu_torch_backend_bitwise():
    # no FMA contraction + correctly rounded division + pixel-centre tables built on the CPU: the CUDA
    # kernels round op by op as the torch backend on the CPU (whose planes avoid linalg.cross's fma)
    pos, tri = random_scene(B=2, T=2000, seed=33)
    want = rasterize(pos, tri, (192, 256), grad_db=False, backend="torch")[0]
    got = rasterize(pos.cuda(), tri.cuda(), (192, 256), grad_db=False, backend="triton")[0].cpu()
    n_diff = (want[..., 3] != got[..., 3]).sum().item()
    assert n_diff == 0, f"{n_diff} pixels with other triangle ids"
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


_COMPILE_CHECK = r'''
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from meshlift.kernels import _raster_triton_kernels as k

P = "*fp32"
I = "*i32"
kernels = [
    (k._bin_kernel, dict(pos_ptr=P, tri_ptr=I, first_ptr=I, count_ptr=I, cnt_ptr=I, list_ptr=I, key_ptr="*i64", xtab_ptr=P,
        ytab_ptr=P, T="i32", vstride="i32",
        H="i32", W="i32", n_tx="i32", n_ty="i32", hw="fp32", hh="fp32", big="fp32", slack="fp32", t_lo="i32", t_hi="i32"),
        dict(RANGE=False, EMIT=True, TILE_H=16, TILE_W=16, STAMP=4, BLOCK=128)),
    (k._raster_kernel, dict(pos_ptr=P, tri_ptr=I, offs_ptr=I, list_ptr=I, xtab_ptr=P, ytab_ptr=P, scale_ptr=P, rast_ptr=P,
        db_ptr=P, key_ptr="*i64", vstride="i32", H="i32", W="i32", n_tx="i32", n_tiles="i32"),
        dict(RANGE=True, GRAD_DB=True, TILE_H=16, TILE_W=16, UNROLL=2, FINAL=True)),
    (k._raster_kernel, dict(pos_ptr=P, tri_ptr=I, offs_ptr=I, list_ptr=I, xtab_ptr=P, ytab_ptr=P, scale_ptr=P, rast_ptr=P,
        db_ptr=P, key_ptr="*i64", vstride="i32", H="i32", W="i32", n_tx="i32", n_tiles="i32"),
        dict(RANGE=False, GRAD_DB=False, TILE_H=8, TILE_W=32, UNROLL=1, FINAL=False)),
    (k._raster_bwd_kernel, dict(pos_ptr=P, tri_ptr=I, rast_ptr=P, grast_ptr=P, gdb_ptr=P, xtab_ptr=P, ytab_ptr=P, scale_ptr=P,
        gpos_ptr=P, vstride="i32", H="i32", W="i32", n_tx="i32", gsb="i32", gsh="i32", gsw="i32", gsc="i32", dsb="i32",
        dsh="i32", dsw="i32", dsc="i32"), dict(RANGE=False, HAS_G=True, HAS_DB=True, BH=16, BW=16, MAX_IDS=8, MIN_PIX=8)),
    (k._interp_fwd_kernel, dict(attr_ptr=P, rast_ptr=P, tri_ptr=I, out_ptr=P, N="i32", C="i32", HW="i32", astride="i32"),
        dict(BLOCK=256, BLOCK_C=4)),
    (k._interp_bwd_kernel, dict(attr_ptr=P, rast_ptr=P, tri_ptr=I, gout_ptr=P, gattr_ptr=P, grast_ptr=P, C="i32",
        H="i32", W="i32", n_tx="i32", astride="i32", gsb="i32", gsh="i32", gsw="i32", gsc="i32"),
        dict(NEED_ATTR=True, NEED_RAST=True, BH=16, BW=16, BLOCK_C=4, MAX_IDS=8, MIN_PIX=8)),
]
# the other constexpr branches, and float64
kernels += [
    (kernels[0][0], kernels[0][1], dict(RANGE=True, EMIT=False, TILE_H=8, TILE_W=32, STAMP=0, BLOCK=128)),
    (kernels[3][0], kernels[3][1], dict(RANGE=True, HAS_G=True, HAS_DB=False, BH=16, BW=16, MAX_IDS=0, MIN_PIX=8)),
    (kernels[3][0], kernels[3][1], dict(RANGE=False, HAS_G=False, HAS_DB=True, BH=16, BW=16, MAX_IDS=8, MIN_PIX=8)),
    (kernels[5][0], kernels[5][1], dict(NEED_ATTR=True, NEED_RAST=False, BH=16, BW=16, BLOCK_C=32, MAX_IDS=8, MIN_PIX=8)),
    (kernels[5][0], kernels[5][1], dict(NEED_ATTR=False, NEED_RAST=True, BH=16, BW=16, BLOCK_C=1, MAX_IDS=0, MIN_PIX=8)),
]
f64 = lambda sig: {n: ("*fp64" if t == P else t) for n, t in sig.items()}  # noqa: E731
kernels += [(fn, f64(sig), cx) for fn, sig, cx in kernels[:6]]
for fn, sig, cx in kernels:
    sig = dict(sig, **{c: "constexpr" for c in cx})
    c = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=cx), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "enable_fp_fusion": False})
    assert "cubin" in c.asm or "ptx" in c.asm
print("compiled", len(kernels))
'''


@pytest.mark.slow
def test_kernels_compile_for_sm90_without_a_gpu():
    """The interpreter accepts code the compiler rejects: compile every kernel for an H100/H200 (sm_90)
    with Triton's bundled toolchain (no GPU needed) in a fresh process without TRITON_INTERPRET."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", _COMPILE_CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "compiled 17" in r.stdout, r.stderr[-3000:]


def test_precise_rasterize_on_the_triton_backend():
    """``rasterize(..., precise=True)`` through the Triton backend (float64 kernels): the same winners and values
    as its float64 raster, float32 outputs, gradients to the float32 positions (the torch backend's case:
    tests/test_raster_watertight.py)."""
    from test_raster_watertight import _sheet

    pos, tri, _ = _sheet(40, torch.float32)
    pos = pos.requires_grad_(True)
    a, da = rasterize(pos, tri, (32, 32), precise=True, backend="triton")
    b, db = rasterize(pos.detach().double(), tri, (32, 32), backend="triton")
    assert a.dtype == da.dtype == torch.float32 and torch.equal(a, b.float()) and torch.equal(da, db.float())
    a[..., :2].sum().backward()
    assert pos.grad.dtype == torch.float32 and float(pos.grad.abs().sum()) > 0
