"""The Triton compositing backward split into row bands (``_SPLIT_BWD``) with band culling (``_CULL_BWD``)
against the torch reference, forward and backward, and the culling test ``_reaches_box`` against a brute-force
scan of the pixel centres (issue 29: the slowest tiles' long lists bound the backward).

Runs in Triton's interpreter on a CPU (``TRITON_INTERPRET=1``), at small sizes.
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

from meshlift.kernels import splat_triton as kt  # noqa: E402
from meshlift.kernels._splat_raster_jit import _load_rec, _reaches_box  # noqa: E402
from meshlift.render import splat_reference as ref  # noqa: E402

from _splat_scenes import assert_same_bits, camera, random_scene  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(not kt.is_available(torch.device(DEV)),
                                reason="triton cannot run here (no CUDA and interpreter not enabled)")


@triton.jit
def _reach_kernel(rec, box, out, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    gx, gy, ca, cb, cc, go = _load_rec(rec, i, m)  # the kernels' own record layout
    r = _reaches_box(gx, gy, ca, cb, cc, go, m, tl.load(box), tl.load(box + 1), tl.load(box + 2), tl.load(box + 3))
    tl.store(out + i, r.to(tl.int32), mask=m)


def _records(n, seed):
    """``[n, 6]`` float32 records (u, v, conic, opacity) around a 16×16 tile at the origin: round, thin and
    tilted ellipses (covariances with eigenvalues 0.3..30 px², as after the 0.3 px² blur), opacities on both
    sides of the 1/255 cut."""
    g = torch.Generator().manual_seed(seed)
    ang = torch.rand(n, generator=g) * math.pi
    l1 = 0.3 + 30 * torch.rand(n, generator=g) ** 2
    l2 = 0.3 + 3 * torch.rand(n, generator=g)
    c, s = torch.cos(ang), torch.sin(ang)
    sxx, syy, sxy = c * c * l1 + s * s * l2, s * s * l1 + c * c * l2, c * s * (l1 - l2)
    det = sxx * syy - sxy * sxy
    uv = torch.rand(n, 2, generator=g) * 40 - 12
    op = torch.where(torch.rand(n, generator=g) < 0.1, torch.rand(n, generator=g) / 255.0,
                     torch.rand(n, generator=g) ** 2)
    return torch.stack([uv[:, 0], uv[:, 1], syy / det, -sxy / det, sxx / det, op], -1).float().contiguous()


@pytest.mark.parametrize("box", [(0.5, 15.5, 0.5, 3.5), (0.5, 15.5, 8.5, 11.5), (0.5, 15.5, 0.5, 15.5),
                                 (0.5, 6.5, 12.5, 15.5)])
def test_reaches_box_never_culls_a_gaussian_that_passes_the_cut_at_a_pixel_and_culls_far_ones(box):
    """Conservative: a Gaussian passing the compositing kernels' cut (``sig >= 0``, ``o e^-sig >= 1/255`` in
    float32) at some pixel centre of the box always reaches it. Tight: one whose minimum over the box (a
    1/8-px grid) is well past the cut is culled; a faint one (opacity < 1/255) is culled everywhere."""
    n = 256
    rec = _records(n, seed=int(box[2] * 10 + box[1]))
    out = torch.zeros(n, dtype=torch.int32, device=DEV)  # written on DEV (a CPU tensor's .to("cuda") is a copy)
    _reach_kernel[(1,)](rec.to(DEV), torch.tensor(box, dtype=torch.float32, device=DEV), out, n, BLOCK=n)
    reach = out.cpu().bool()
    x0, x1, y0, y1 = box

    def sig_min(step):
        xs = torch.arange(x0, x1 + 1e-6, step)
        ys = torch.arange(y0, y1 + 1e-6, step)
        py, px = torch.meshgrid(ys, xs, indexing="ij")
        dx = rec[:, 0, None] - px.reshape(1, -1)
        dy = rec[:, 1, None] - py.reshape(1, -1)
        sig = 0.5 * (rec[:, 2, None] * dx * dx + rec[:, 4, None] * dy * dy) + rec[:, 3, None] * dx * dy
        return sig

    sig = sig_min(1.0)  # the pixel centres, as the kernels test them
    passes = ((sig >= 0) & (rec[:, 5, None] * torch.exp(-sig) >= 1.0 / 255.0)).any(1)
    assert bool(passes.any()) and not bool((passes & ~reach).any()), torch.nonzero(passes & ~reach)
    fine = sig_min(0.125).min(1).values.double()
    lim = torch.log(rec[:, 5].double() * 255.0)
    far = (fine > 1.05 * lim + 0.1) | (rec[:, 5] < 1.0 / 255.0)
    assert bool(far.any()) and not bool((reach & far).any()), torch.nonzero(reach & far)
    assert int(reach.sum()) < n  # something is culled


def _band_scene(seed, W=32, H=32, f=40.0):
    """Long lists and Gaussians that reach one band only: big translucent Gaussians over the whole view, then
    small ones (≈ 1 px) placed in known rows of the 16-px tiles (bands of 4 rows at split 4) in front of and
    behind them."""
    g = torch.Generator().manual_seed(seed)
    big = random_scene(24, seed=seed, spread=0.5, scale=(0.15, 0.4))
    n = 40
    u = torch.rand(n, generator=g, dtype=torch.float64) * (W - 4) + 2
    band_row = torch.randint(0, 8, (n,), generator=g) * 4 + 2.0  # centre rows of 4-row bands of the two tile rows
    z = 2.0 + 2.0 * torch.rand(n, generator=g, dtype=torch.float64)
    means = torch.stack([(u - W / 2) * z / f, (band_row.double() - H / 2) * z / f, z], -1)
    small = (means, torch.randn(n, 4, generator=g, dtype=torch.float64),
             0.004 + 0.01 * torch.rand(n, 3, generator=g, dtype=torch.float64),
             0.5 + 0.45 * torch.rand(n, generator=g, dtype=torch.float64))
    return [torch.cat([a, b]).to(DEV, torch.float32) for a, b in zip(big[:4], small)]


def _composite(mod, scene, W, H, ts, C=1, D=4, seed=0):
    w2c, K = (t.to(DEV, torch.float32) for t in camera(W, H, 40.0, C=C))
    means, quats, scales, opac = scene
    n = means.shape[0]
    pr = ref.project_gaussians(means, quats, scales, opac, w2c, K, W, H, 0.01, 1e10)
    tw, th = ref.tile_grid(W, H, ts)
    _, fid, off = ref.isect_tiles(pr["means2d"], pr["radii"], pr["depths"], ts, tw, th)
    feats = torch.rand(C, n, D, generator=torch.Generator().manual_seed(seed)).to(DEV).requires_grad_(True)
    leaves = [pr[k].detach().clone().requires_grad_(True) for k in ("means2d", "conics", "opacities", "depths")]
    img, alpha, med = mod.composite_tiles(leaves[0], leaves[1], leaves[2], feats, leaves[3], fid, off, W, H, ts,
                                          0.99, 1 << 20)
    wi = torch.linspace(-1, 1, img.numel(), device=DEV).reshape(img.shape)
    loss = (img * wi).sum() + (alpha * alpha).sum() + 0.3 * med.sum()
    grads = torch.autograd.grad(loss, leaves + [feats])
    per_tile = torch.diff(torch.cat([off.reshape(-1), off.new_tensor([fid.numel()])]))
    return (img.detach(), alpha.detach(), med.detach()), grads, int(per_tile.max())


def _assert_matches(a, b, rtol_g=1e-4, atol_img=2e-6):
    (ir, ar, mr), gr = a[:2]
    (it, at, mt), gt = b[:2]
    assert torch.allclose(ir, it, atol=atol_img), (ir - it).abs().max()
    assert torch.allclose(ar, at, atol=atol_img)
    assert torch.equal(mr, mt)
    for x, y, name in zip(gr, gt, ("means2d", "conics", "opacities", "depths", "features")):
        scale = x.abs().max().clamp_min(1.0)
        assert (x - y).abs().max() <= rtol_g * scale, (name, (x - y).abs().max(), scale)


# (scene, W, H, tile size, cameras, channels): a long-list tile (70 overlapping Gaussians, early stops), the
# band scene (small Gaussians in one band of a tile behind and in front of big ones), 8-px tiles with two
# cameras, 7 channels (two channel groups) and a partial last tile row
_CASES = {
    "long_list": (lambda: [t.to(DEV, torch.float32) for t in random_scene(70, seed=4, spread=0.3,
                                                                          scale=(0.1, 0.4))[:4]], 20, 18, 16, 1, 4),
    "one_band": (lambda: _band_scene(seed=2), 32, 30, 16, 1, 3),
    "tile8_two_cameras": (lambda: [t.to(DEV, torch.float32) for t in random_scene(30, seed=9)[:4]], 19, 13, 8, 2, 7),
}


# the interpreter compiles every (split, cull) variant: 55-110 s a case on 2 cores, so two cases run with -m slow
_SLOW_CASES = ("long_list", "tile8_two_cameras")


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in _SLOW_CASES else c
                                  for c in sorted(_CASES)])
def test_band_split_and_culling_match_the_reference(monkeypatch, case):
    """Every ``_SPLIT_BWD`` in {1, 2, 4} with culling off, by batches and compacted (``_CULL_BWD`` 0, 1, 2), and the
    default 8 compacted, gives
    the reference's image, alpha, median and gradients; culling by batches changes no bit of the gradients (it
    skips only batches that would add nothing; compaction regroups the batches: float32 rounding only)."""
    make, W, H, ts, C, D = _CASES[case]
    scene = make()
    want = _composite(ref, scene, W, H, ts, C, D)
    if case == "long_list":
        assert want[2] >= 60  # the tile list is long: several batches per band
    for split in (1, 2, 4):
        got = {}
        for cull in (0, 1, 2):
            monkeypatch.setattr(kt, "_SPLIT_BWD", split)
            monkeypatch.setattr(kt, "_CULL_BWD", cull)
            got[cull] = _composite(kt, scene, W, H, ts, C, D)
            _assert_matches(want, got[cull])
        for x, y in zip(got[0][1], got[1][1]):
            assert_same_bits(x, y, split)
    monkeypatch.setattr(kt, "_SPLIT_BWD", 8)  # the default (bands of 2 rows in a 16-px tile, 1 in an 8-px one)
    monkeypatch.setattr(kt, "_CULL_BWD", 2)
    _assert_matches(want, _composite(kt, scene, W, H, ts, C, D))


def _forward(mod, scene, W, H, ts, C=1, D=4, seed=0):
    """The compositing forward alone: ``(image, alpha, median)`` and the saved per-pixel transmittance and last
    index (what the backward reads)."""
    w2c, K = (t.to(DEV, torch.float32) for t in camera(W, H, 40.0, C=C))
    means, quats, scales, opac = scene
    pr = ref.project_gaussians(means, quats, scales, opac, w2c, K, W, H, 0.01, 1e10)
    tw, th = ref.tile_grid(W, H, ts)
    _, fid, off = ref.isect_tiles(pr["means2d"], pr["radii"], pr["depths"], ts, tw, th)
    feats = torch.rand(C, means.shape[0], D, generator=torch.Generator().manual_seed(seed)).to(DEV)
    with torch.no_grad():
        return mod.composite_tiles(pr["means2d"], pr["conics"], pr["opacities"], feats, pr["depths"], fid, off, W, H,
                                   ts, 0.99, 1 << 20)


@pytest.mark.parametrize("case", ["one_band", pytest.param("tile8_two_cameras", marks=pytest.mark.slow)])
def test_forward_bands_and_culling_give_the_same_bits(monkeypatch, case):
    """``_SPLIT_FWD`` row bands per tile, with and without ``_CULL_FWD`` (a band skips the entries that cannot reach
    it), give exactly the one-program-a-tile forward's image, alpha and median, which match the reference."""
    make, W, H, ts, C, D = _CASES[case]
    scene = make()
    want = _forward(ref, scene, W, H, ts, C, D)
    monkeypatch.setattr(kt, "_SPLIT_FWD", 1)
    base = _forward(kt, scene, W, H, ts, C, D)
    assert torch.allclose(base[0], want[0], atol=2e-6) and torch.equal(base[2], want[2])
    for split, cull in ((2, 0), (4, 0), (4, 1), (16, 1)):
        monkeypatch.setattr(kt, "_SPLIT_FWD", split)
        monkeypatch.setattr(kt, "_CULL_FWD", cull)
        got = _forward(kt, scene, W, H, ts, C, D)
        for x, y in zip(base, got):
            assert_same_bits(x, y, (split, cull))


@pytest.mark.parametrize("fwd_batch,bwd_batch,chunk", [(4, 8, 32), (16, 16, 64), (2, 2, 16)])
def test_other_batch_and_chunk_sizes_match_the_reference(monkeypatch, fwd_batch, bwd_batch, chunk):
    """The block shapes ``benchmarks/_kernel_ab.py`` sweeps (forward ``_BATCH``, backward ``_BATCH_BWD`` and
    ``_CULL_CHUNK``, at the default bands and compacted culling) change only how many list entries a step takes:
    the reference's image, alpha, median and gradients."""
    make, W, H, ts, C, D = _CASES["one_band"]
    scene = make()
    want = _composite(ref, scene, W, H, ts, C, D)
    monkeypatch.setattr(kt, "_BATCH", fwd_batch)
    monkeypatch.setattr(kt, "_BATCH_BWD", bwd_batch)
    monkeypatch.setattr(kt, "_CULL_CHUNK", chunk)
    _assert_matches(want, _composite(kt, scene, W, H, ts, C, D))
