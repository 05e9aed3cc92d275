"""CPU vs CUDA agreement of the rendering ops (run on a GPU machine: ``pytest -m gpu tests/test_render_gpu.py``)."""

from __future__ import annotations

import pytest
import torch

from meshlift.render import antialias, interpolate, rasterize, texture, visible_triangles

from _render_scenes import random_scene

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_rasterize_interpolate_parity_float64():
    pos, tri = random_scene(B=3, T=200, seed=21, dtype=torch.float64)
    attr = torch.randn(pos.shape[1], 4, dtype=torch.float64)
    res = (96, 128)
    outs = {}
    for dev in ("cpu", "cuda"):
        # fresh leaves per device (pos.to("cpu") would return pos itself, making the CUDA copy a non-leaf)
        p = pos.detach().clone().to(dev).requires_grad_(True)
        a = attr.detach().clone().to(dev).requires_grad_(True)
        rast, db = rasterize(p, tri.to(dev), res)
        out, da = interpolate(a, rast, tri.to(dev), rast_db=db, diff_attrs="all")
        w = torch.linspace(0, 1, out.numel(), dtype=torch.float64).view_as(out).to(dev)
        ((out * w).sum() + (da * 0.01).sum() + rast[..., 2].sum()).backward()
        outs[dev] = [t.detach().cpu() for t in (rast, db, out, da, p.grad, a.grad)]
    c, g = outs["cpu"], outs["cuda"]
    assert torch.equal(c[0][..., 3], g[0][..., 3])
    for x, y in zip(c, g):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-9)


def test_rasterize_parity_float32():
    pos, tri = random_scene(B=2, T=500, seed=22, dtype=torch.float32)
    ids_c = visible_triangles(pos, tri, (256, 256))
    ids_g = visible_triangles(pos.cuda(), tri.cuda(), (256, 256)).cpu()
    agree = (ids_c == ids_g).float().mean().item()
    assert agree > 0.999, agree
    rc, _ = rasterize(pos, tri, (256, 256))
    rg, _ = rasterize(pos.cuda(), tri.cuda(), (256, 256))
    same = (rc[..., 3] == rg.cpu()[..., 3]) & (rc[..., 3] > 0)
    torch.testing.assert_close(rc[same], rg.cpu()[same], rtol=1e-4, atol=1e-5)


def test_chunking_parity_on_gpu():
    pos, tri = random_scene(B=2, T=3000, seed=23)
    pos, tri = pos.cuda(), tri.cuda()
    big = visible_triangles(pos, tri, (300, 200), max_fragments=2**24)
    small = visible_triangles(pos, tri, (300, 200), max_fragments=5000)
    assert torch.equal(big, small)


def test_texture_parity():
    tex = torch.rand(2, 37, 64, 3, dtype=torch.float64)
    uv = torch.rand(2, 20, 30, 2, dtype=torch.float64) * 1.4 - 0.2
    uv_da = torch.rand(2, 20, 30, 4, dtype=torch.float64) * 0.1
    cube = torch.rand(1, 6, 16, 16, 3, dtype=torch.float64)
    d = torch.randn(2, 20, 30, 3, dtype=torch.float64)
    bias = torch.rand(2, 20, 30, dtype=torch.float64) * 4
    res = {}
    for dev in ("cpu", "cuda"):
        t = tex.detach().clone().to(dev).requires_grad_(True)
        u = uv.detach().clone().to(dev).requires_grad_(True)
        c = cube.detach().clone().to(dev).requires_grad_(True)
        o1 = texture(t, u, uv_da=uv_da.to(dev), boundary_mode="wrap")
        o2 = texture(t, u, boundary_mode="zero")
        o3 = texture(c, d.to(dev), mip_level_bias=bias.to(dev), boundary_mode="cube")
        (o1.sum() + (o2 * o2).sum() + o3.sum()).backward()
        res[dev] = [x.detach().cpu() for x in (o1, o2, o3, t.grad, u.grad, c.grad)]
    for x, y in zip(res["cpu"], res["cuda"]):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-9)


def test_antialias_parity():
    pos, tri = random_scene(B=2, T=50, seed=24, dtype=torch.float64)
    color = torch.rand(2, 64, 64, 3, dtype=torch.float64)
    res = {}
    for dev in ("cpu", "cuda"):
        p = pos.detach().clone().to(dev).requires_grad_(True)
        c = color.detach().clone().to(dev).requires_grad_(True)
        rast, _ = rasterize(p, tri.to(dev), (64, 64))
        out = antialias(c, rast, p, tri.to(dev))
        (out * out).sum().backward()
        res[dev] = [x.detach().cpu() for x in (out, p.grad, c.grad)]
    for x, y in zip(res["cpu"], res["cuda"]):
        torch.testing.assert_close(x, y, rtol=1e-8, atol=1e-9)


def test_benchmark_scene_parity_float32():
    """The bucketed stamp/tile paths on a benchmark-like mesh (all buckets, batch 2): same ids as the CPU."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _scenes import bumpy_sphere, camera_mvp

    from meshlift.render import transform_pos

    v, tri = bumpy_sphere(20_000)
    for dist in (1.5, 3.5):
        pos = transform_pos(camera_mvp(dist, batch=2), v)
        ids_c = visible_triangles(pos, tri, (200, 300))
        ids_g = visible_triangles(pos.cuda(), tri.cuda(), (200, 300)).cpu()
        assert (ids_c == ids_g).float().mean().item() > 0.999
