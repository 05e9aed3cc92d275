"""Cube-map lookups: Triton kernel (meshlift.kernels.cube_triton) against the torch path of
``shading.cubemap.sample_cube`` / ``sample_cube_mip`` (their twins; float64 gradchecks of those are in
tests/test_shading_cubemap.py). Without a CUDA device the kernel runs under the Triton interpreter
(``TRITON_INTERPRET=1``, set before triton is imported), at small sizes. float32 tolerances: forward
``atol 1e-6``; table gradient ``atol 1e-5 · max|g|`` (atomic scatter-add order); direction / level gradients
``rtol 1e-4, atol 1e-4 · max|g|``. The ``gpu`` test repeats the comparison at the spot preset's sizes.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from meshlift.shading.cubemap import sample_cube, sample_cube_mip  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _close_scaled(a, b, rtol, atol_rel):
    scale = float(b.detach().abs().max()) or 1.0
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol_rel * scale)


def _dirs(n, seed):
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(n, 3, generator=g) * torch.rand(n, 1, generator=g).add(0.2)
    return d.to(DEV)


def _levels(res, n_levels, c, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(6, res >> i, res >> i, c, generator=g).to(DEV) for i in range(n_levels)]


def _run(backend, levels, dirs, level, grad):
    lv = [x.clone().requires_grad_() for x in levels]
    d = dirs.clone().requires_grad_()
    if level is None:
        out = sample_cube(lv[0], d, backend=backend)
        ins = (lv[0], d)
    else:
        le = level.clone().requires_grad_()
        out = sample_cube_mip(lv, d, le, backend=backend)
        ins = (*lv, d, le)
    return out.detach(), torch.autograd.grad(out, ins, grad)


@pytest.mark.parametrize("res,c", [(4, 3), (8, 1), (6, 4)])
def test_sample_cube_matches_torch(res, c):
    levels = _levels(res, 1, c, res)
    dirs = _dirs(400, res + c)
    grad = torch.randn(400, c, generator=torch.Generator().manual_seed(2)).to(DEV)
    a, ga = _run("torch", levels, dirs, None, grad)
    b, gb = _run("triton", levels, dirs, None, grad)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    _close_scaled(gb[0], ga[0], 1e-5, 1e-5)
    _close_scaled(gb[1], ga[1], 1e-4, 1e-4)


@pytest.mark.parametrize("res,n_levels", [(16, 4), (8, 2)])
def test_sample_cube_mip_matches_torch(res, n_levels):
    levels = _levels(res, n_levels, 3, res)
    dirs = _dirs(500, res)
    g = torch.Generator().manual_seed(3)
    level = (torch.rand(500, generator=g) * (n_levels + 1) - 0.5).to(DEV)  # below 0 and above L - 1: clamped
    grad = torch.randn(500, 3, generator=g).to(DEV)
    a, ga = _run("torch", levels, dirs, level, grad)
    b, gb = _run("triton", levels, dirs, level, grad)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for x, y in zip(gb[:n_levels], ga[:n_levels]):
        _close_scaled(x, y, 1e-5, 1e-5)
    _close_scaled(gb[-2], ga[-2], 1e-4, 1e-4)
    _close_scaled(gb[-1], ga[-1], 1e-4, 1e-4)


def test_only_requested_gradients_and_empty():
    levels = _levels(8, 3, 3, 0)
    dirs = _dirs(50, 1)
    level = torch.full((50,), 0.7, device=DEV)
    lv = [x.clone().requires_grad_() for x in levels]
    out = sample_cube_mip(lv, dirs, level, backend="triton")
    gs = torch.autograd.grad(out.sum(), lv)
    ref = sample_cube_mip(lv, dirs, level, backend="torch")
    gr = torch.autograd.grad(ref.sum(), lv)
    for x, y in zip(gs, gr):
        _close_scaled(x, y, 1e-5, 1e-5)
    assert sample_cube(levels[0], dirs[:0], backend="triton").shape == (0, 3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_cube_parity_spot_light():
    """The spot preset's light: specular chain 128 -> 16 (4 levels), diffuse 16², at 600k pixels."""
    n = 600_000
    levels = _levels(128, 4, 3, 5)
    dirs = _dirs(n, 6)
    level = torch.rand(n, device=DEV) * 3.0
    grad = torch.randn(n, 3, device=DEV)
    for lv_set, lvl in ((levels, level), (levels[-1:], None)):
        a, ga = _run("torch", lv_set, dirs, lvl, grad)
        b, gb = _run("triton", lv_set, dirs, lvl, grad)
        # compiled float32 arithmetic (FMA contraction of the texel coordinates) moves a few samples next
        # to texel and level boundaries by a rounding step: bounded maximum, and rare beyond 1e-5
        # (first H200 run: 1,492 of 1.8M values beyond 1e-5, largest 4.8e-5)
        d = (b - a).abs()
        assert float(d.max()) < 2e-4
        assert float((d > 1e-5 + 1e-5 * a.abs()).float().mean()) < 5e-3
        for x, y in zip(gb[:len(lv_set)], ga[:len(lv_set)]):
            _close_scaled(x, y, 1e-4, 1e-5)
        for x, y in zip(gb[len(lv_set):], ga[len(lv_set):]):
            bad = ((x - y).abs() > 1e-3 * float(y.abs().max()) + 1e-3 * y.abs()).float().mean()
            assert float(bad) < 1e-4
