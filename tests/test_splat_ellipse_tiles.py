"""Ellipse binning (``SplatSettings.ellipse_tiles``, issue 29): a Gaussian is listed only in the tiles of its bounding
box that its ellipse of reach touches.

- the reference (:func:`meshlift.render.splat_reference.isect_tiles` with conics and opacities) lists every
  (tile, Gaussian) pair where the Gaussian passes the compositing cut at a pixel centre (brute force over all
  pixels), only pairs of the bounding-box lists, and fewer of them when the Gaussians are thin and tilted;
- the Triton twin (count kernel, key writer, and the counts the projection launch writes) gives the same lists
  (Triton's interpreter on a CPU, ``TRITON_INTERPRET=1``);
- the render and every gradient are those of bounding-box binning (the torch backend's render bit for bit: the
  entries left out add nothing; gradients, and Triton's render, to float32 rounding: sums over other chunks and
  batches).
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from meshlift.errors import RenderError  # noqa: E402
from meshlift.render import splat_reference as ref  # noqa: E402
from meshlift.render.splat import SplatSettings, rasterize_gaussians  # noqa: E402

from _splat_scenes import assert_same_bits, camera, random_scene  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _thin_scene(n=300, seed=5, W=96, H=80, C=2):
    """Projected Gaussians of two cameras: round, thin (one axis at 5 %) and tilted ones, some faint."""
    w2c, K = (t.to(DEV, torch.float32) for t in camera(W, H, 60.0, C=C))
    m, q, s, o, _ = random_scene(n, seed=seed, scale=(0.01, 0.3))
    m, q, s, o = (t.to(DEV, torch.float32) for t in (m, q, s, o))
    s[::3, 0] *= 0.05
    o[::7] *= 0.02  # faint: a small ellipse of reach inside a box sized by the same opacity
    pr = ref.project_gaussians(m, q, s, o, w2c, K, W, H, 0.01, 1e10)
    tw, th = ref.tile_grid(W, H, 16)
    return (m, q, s, o, w2c, K), pr, (W, H, tw, th)


def _pairs(lists):
    """The set of (global tile, flat Gaussian id) pairs of ``(isect_ids, flatten_ids, offsets)``."""
    _, fid, off = lists
    off = off.reshape(-1).tolist() + [fid.numel()]
    f = fid.tolist()
    return {(t, f[j]) for t in range(len(off) - 1) for j in range(off[t], off[t + 1])}


def test_reference_lists_cover_every_pixel_that_passes_the_cut_and_only_bounding_box_pairs():
    _, pr, (W, H, tw, th) = _thin_scene()
    box = ref.isect_tiles(pr["means2d"], pr["radii"], pr["depths"], 16, tw, th)
    ell = ref.isect_tiles(pr["means2d"], pr["radii"], pr["depths"], 16, tw, th, conics=pr["conics"],
                          opacities=pr["opacities"])
    C, N = pr["depths"].shape
    py, px = torch.meshgrid(torch.arange(H, device=DEV) + 0.5, torch.arange(W, device=DEV) + 0.5, indexing="ij")
    need = set()
    for c in range(C):
        mm, cn, op = pr["means2d"][c], pr["conics"][c], pr["opacities"][c]
        vis = (pr["radii"][c] > 0).all(-1)
        dx = mm[:, 0, None, None] - px
        dy = mm[:, 1, None, None] - py
        sig = 0.5 * (cn[:, 0, None, None] * dx * dx + cn[:, 2, None, None] * dy * dy) + cn[:, 1, None, None] * dx * dy
        ok = vis[:, None, None] & (sig >= 0) & (op[:, None, None] * torch.exp(-sig) >= ref.ALPHA_THRESHOLD)
        g, yy, xx = torch.nonzero(ok, as_tuple=True)
        need |= {((c * th + ty) * tw + tx, c * N + gi)
                 for gi, ty, tx in zip(g.tolist(), (yy // 16).tolist(), (xx // 16).tolist())}
    have, boxed = _pairs(ell), _pairs(box)
    assert len(need) > 500
    assert not need - have, sorted(need - have)[:5]  # every pair a pixel needs is listed
    assert have <= boxed  # never a tile outside the bounding box
    assert len(have) < 0.92 * len(boxed), (len(have), len(boxed))  # thin, tilted ones leave corners out
    # sorted by (tile, depth) as the bounding-box lists
    keys = ell[0]
    assert bool((keys[1:] >= keys[:-1]).all())


def test_row_spans_of_an_axis_aligned_ellipse_are_its_extent():
    """A round Gaussian of radius r (conic 1/σ², full opacity) at (40, 40): the row through its centre spans its
    whole width; a row of tiles beyond its reach is empty; a non-positive-definite conic keeps the box row."""
    sig2 = 4.0
    r2 = ref.ellipse_reach2(torch.tensor([1 / sig2, 0, 1 / sig2]), torch.tensor(1.0))
    reach = float(torch.sqrt(r2 * sig2))  # ≈ 6.67 px
    one = lambda x: torch.tensor([x], dtype=torch.float32)  # noqa: E731
    args = (one(40.0), one(40.0), one(1 / sig2), one(0.0), one(1 / sig2), r2.reshape(1))
    x0, x1 = torch.tensor([0]), torch.tensor([10])
    tx0, tx1 = ref.ellipse_row_spans(*args, torch.tensor([2]), 16, x0, x1)  # the centre's row (32..48)
    assert (int(tx0), int(tx1)) == (int((40 - reach) // 16), int(-(-(40 + reach) // 16)))
    tx0, tx1 = ref.ellipse_row_spans(*args, torch.tensor([0]), 16, x0, x1)  # rows 0..16: beyond 40 - 6.7
    assert int(tx1) <= int(tx0)
    bad = (one(40.0), one(40.0), one(1.0), one(2.0), one(1.0), r2.reshape(1))  # b² > ac: not positive definite
    assert tuple(int(t) for t in ref.ellipse_row_spans(*bad, torch.tensor([0]), 16, x0, x1)) == (0, 10)


def test_isect_tiles_wants_both_conics_and_opacities():
    _, pr, (W, H, tw, th) = _thin_scene(n=20)
    with pytest.raises(RenderError, match="conics and opacities"):
        ref.isect_tiles(pr["means2d"], pr["radii"], pr["depths"], 16, tw, th, conics=pr["conics"])
    with pytest.raises(RenderError, match=r"must be \[C, N, 3\]"):
        ref.isect_tiles(pr["means2d"], pr["radii"], pr["depths"], 16, tw, th, conics=pr["conics"][..., :2],
                        opacities=pr["opacities"])


triton = pytest.importorskip("triton")
from meshlift.kernels import splat_triton as kt  # noqa: E402


@pytest.mark.skipif(not kt.is_available(torch.device(DEV)), reason="triton cannot run here (no CUDA, no interpreter)")
def test_triton_ellipse_lists_match_the_reference():
    """The count kernel + key writer, and the projection's own counts and records, give the reference's lists."""
    (m, q, s, o, w2c, K), pr, (W, H, tw, th) = _thin_scene()
    want = ref.isect_tiles(pr["means2d"], pr["radii"], pr["depths"], 16, tw, th, conics=pr["conics"],
                           opacities=pr["opacities"])
    got = kt.isect_tiles(pr["means2d"], pr["radii"], pr["depths"], 16, tw, th, conics=pr["conics"],
                         opacities=pr["opacities"])
    pt = kt.project_gaussians(m, q, s, o, w2c, K, W, H, 0.01, 1e10, tile_size=16, tiles_w=tw, tiles_h=th,
                              ellipse_tiles=True)
    fused = kt.isect_tiles(pt["means2d"], pt["radii"], pt["depths"], 16, tw, th, True, pt["conics"],
                           pt["opacities"], records=pt["records"], counts=pt["tile_counts"])
    want_t = ref.isect_tiles(pt["means2d"], pt["radii"], pt["depths"], 16, tw, th, conics=pt["conics"],
                             opacities=pt["opacities"])
    if DEV == "cpu":  # the interpreter runs numpy's IEEE float32: the same bits
        for a, b in zip(want, got):
            assert torch.equal(a, b)
        for a, b in zip(want_t, fused):
            assert torch.equal(a, b)
    else:  # a GPU's log and division round differently: a tile at the very edge of a span may differ
        for a, b in ((want, got), (want_t, fused)):
            pa, pb = _pairs(a), _pairs(b)
            assert len(pa ^ pb) <= 0.002 * len(pa), len(pa ^ pb)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_render_and_gradients_match_bounding_box_binning(backend):
    if backend == "triton" and not kt.is_available(torch.device(DEV)):
        pytest.skip("triton cannot run here")
    (m, q, s, o, w2c, K), _, (W, H, _, _) = _thin_scene(n=120, W=48, H=40)
    sh = (torch.randn(m.shape[0], 4, 3, generator=torch.Generator().manual_seed(3)) * 0.3).to(DEV)
    out = []
    for ellipse in (False, True):
        leaves = [t.clone().requires_grad_(True) for t in (m, q, s, o, sh)]
        st = SplatSettings(ellipse_tiles=ellipse, outputs=("median_depth",))
        img, alpha, info = rasterize_gaussians(*leaves, w2c, K, W, H, sh_degree=1, settings=st, backend=backend)
        (img.square().sum() + alpha.sum() + 0.1 * info["median_depth"].sum()).backward()
        out.append(([img.detach(), alpha.detach(), info["median_depth"].detach()] + [t.grad for t in leaves],
                    info["flatten_ids"].numel()))
    (box, n_box), (ell, n_ell) = out
    assert n_ell < n_box
    for i, (a, b, name) in enumerate(zip(box, ell, ("image", "alpha", "median", "means", "quats", "scales",
                                                      "opacities", "sh"))):
        if i < 3 and backend == "torch":  # the forward: the entries left out add nothing
            assert torch.equal(a, b), name
        elif name == "median":
            assert_same_bits(a, b, name)
        else:  # the gradients are summed over other chunks (torch) or batches (Triton): rounding only
            scale = float(a.abs().max().clamp_min(1.0))
            assert float((a - b).abs().max()) <= 1e-5 * scale, (name, float((a - b).abs().max()), scale)


def test_kernel_ab_variants_name_the_binning():
    """``gaussians_loop_profile.py --kernel-ab 4:0/8:2@box 4:0/8:2@ellipse`` times the two binnings side by side:
    the suffix sets the render's ``SplatSettings.ellipse_tiles`` (positional or keyword), none keeps it."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _kernel_ab import _with_tiles, parse_variants

    assert parse_variants(["4:0/8:2", "4:0/8:2:8:2@box", "1:0/4:2@ellipse"]) == [
        ((4, 0), (8, 2), None), ((4, 0), (8, 2, 8, 2), False), ((1, 0), (4, 2), True)]
    for bad in ("4:0/8:2@boxes", "4:0/8:2@"):
        with pytest.raises(SystemExit, match="--kernel 4:0/8:2@.*: the binning suffix is @box or @ellipse"):
            parse_variants([bad], "--kernel")
    with pytest.raises(SystemExit, match="band splits must be at least 1"):
        parse_variants(["0:0/8:2"])
    args, kw = _with_tiles((1, SplatSettings()), {"settings": SplatSettings()}, False)
    assert args[0] == 1 and not args[1].ellipse_tiles and not kw["settings"].ellipse_tiles
    assert _with_tiles((SplatSettings(),), {}, None)[0][0].ellipse_tiles
