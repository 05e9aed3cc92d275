"""Face + vertex normals: Triton kernels (meshlift.kernels.normals_triton) against their torch twins
``geometry.mesh_ops.face_normals`` / ``vertex_normals`` (float64-gradchecked in tests/test_geometry_*), forward and
backward. Without a CUDA device the kernels run under the Triton interpreter (``TRITON_INTERPRET=1``, set before
triton is imported). float32 tolerances: forward ``rtol 1e-5, atol 1e-6``; gradient ``rtol 1e-4,
atol 1e-4 · max|g|`` (atomic scatter-add order).
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from meshlift.geometry import mesh_ops  # noqa: E402
from meshlift.kernels.normals_triton import mesh_normals_triton  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _mesh(V, T, seed):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(V, 3, generator=g)
    # distinct corners (a repeated corner gives a rounding-noise normal that differs between implementations);
    # the last vertex is isolated (+z rule)
    n = V - 1
    a = torch.randint(0, n, (T,), generator=g)
    b = (a + torch.randint(1, n // 2, (T,), generator=g)) % n  # offsets in [1, n/2) and [n/2, n): distinct
    c = (a + torch.randint(n // 2, n, (T,), generator=g)) % n
    f = torch.stack([a, b, c], 1)
    f[0] = torch.tensor([1, 1, 2])  # a degenerate face with an exactly zero cross product
    return v.to(DEV), f.to(DEV)


@pytest.mark.parametrize("V,T,seed,idx", [(40, 60, 0, torch.int32), (300, 500, 1, torch.int64)])
@pytest.mark.parametrize("face_grad", [True, False])
def test_mesh_normals_match_torch(V, T, seed, idx, face_grad):
    v, f = _mesh(V, T, seed)
    f = f.to(idx)
    g = torch.Generator().manual_seed(seed + 1)
    gf = torch.randn(T, 3, generator=g)
    # no gradient at the zero-area face's unit normal: safe_normalize's gradient there is g / sqrt(1e-20), and the
    # cancelling ±1e10 contributions it scatters onto its repeated corner are rounding noise in either order
    gf[0] = 0.0
    gf = gf.to(DEV)
    gv = torch.randn(V, 3, generator=g).to(DEV)

    def run(fn):
        p = v.clone().requires_grad_()
        fn_, vn = fn(p)
        loss = (vn * gv).sum() + ((fn_ * gf).sum() if face_grad else 0.0)
        (gp,) = torch.autograd.grad(loss, [p])
        return fn_.detach(), vn.detach(), gp

    a = run(lambda p: (mesh_ops.face_normals(p, f), mesh_ops.vertex_normals(p, f)))
    b = run(lambda p: mesh_normals_triton(p, f))
    torch.testing.assert_close(b[0], a[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b[1], a[1], rtol=1e-5, atol=1e-6)
    assert torch.equal(b[1][-1], torch.tensor([0.0, 0.0, 1.0], device=DEV))  # the isolated vertex
    torch.testing.assert_close(b[2], a[2], rtol=1e-4, atol=1e-4 * float(a[2].abs().max()))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_mesh_normals_gpu_parity_at_preset_size():
    """Marching tets at grid 96 gives ~120k faces; the kernels against the twins on the GPU."""
    v, f = _mesh(60_000, 120_000, 3)
    gv = torch.randn(60_000, 3, device=DEV)
    gf = torch.randn(120_000, 3, device=DEV)
    gf[0] = 0.0

    def run(fn):
        p = v.clone().requires_grad_()
        fn_, vn = fn(p)
        (gp,) = torch.autograd.grad((vn * gv).sum() + (fn_ * gf).sum(), [p])
        return fn_.detach(), vn.detach(), gp

    a = run(lambda p: (mesh_ops.face_normals(p, f), mesh_ops.vertex_normals(p, f)))
    b = run(lambda p: mesh_normals_triton(p, f))
    torch.testing.assert_close(b[0], a[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b[1], a[1], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(b[2], a[2], rtol=1e-4, atol=1e-4 * float(a[2].abs().max()))
