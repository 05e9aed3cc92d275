"""GPU checks of meshlift.isosurface: CUDA results equal the CPU ones (run with ``pytest -m gpu``)."""

from __future__ import annotations

import pytest
import torch

from meshlift.isosurface import cube_grid, flexicubes, marching_tets, regular_tet_grid

pytestmark = pytest.mark.gpu

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def torus_sdf(p, big=0.5, small=0.2):
    q = torch.stack([torch.sqrt(p[..., 0] ** 2 + p[..., 2] ** 2) - big, p[..., 1]], dim=-1)
    return q.norm(dim=-1) - small


@cuda
@pytest.mark.parametrize("res", [32, 128])
def test_marching_tets_cuda_matches_cpu(res):
    verts, tets = regular_tet_grid(res)
    sdf = torus_sdf(verts) + 0.01 * torch.sin(40 * verts[:, 0])
    v_cpu, f_cpu = marching_tets(verts.double(), sdf.double(), tets)
    s = sdf.double().cuda().requires_grad_(True)
    v_gpu, f_gpu = marching_tets(verts.double().cuda(), s, tets.cuda())
    assert torch.equal(f_gpu.cpu(), f_cpu)
    torch.testing.assert_close(v_gpu.cpu(), v_cpu)
    v_gpu.sum().backward()
    assert bool(torch.isfinite(s.grad).all())


@cuda
@pytest.mark.parametrize("training", [False, True])
def test_flexicubes_cuda_matches_cpu(training):
    res = 64
    verts, cubes = cube_grid(res)
    g = torch.Generator().manual_seed(0)
    sdf = (torus_sdf(verts) + 0.01 * torch.sin(40 * verts[:, 0])).double()
    w = [torch.randn(res**3, 12, generator=g).double(), torch.randn(res**3, 8, generator=g).double(),
         torch.randn(res**3, generator=g).double()]
    out_cpu = flexicubes(verts.double(), sdf, cubes, res, *w, training=training)
    w_gpu = [x.cuda() for x in w]
    out_gpu = flexicubes(verts.double().cuda(), sdf.cuda(), cubes.cuda(), res, *w_gpu, training=training)
    torch.testing.assert_close(out_gpu[0].cpu(), out_cpu[0])
    assert torch.equal(out_gpu[1].cpu(), out_cpu[1])
    torch.testing.assert_close(out_gpu[2].cpu(), out_cpu[2])
