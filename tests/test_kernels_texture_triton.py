"""Trilinear texture lookup: Triton kernel (meshlift.kernels.texture_triton) against its PyTorch twin.

The twin is the torch path of ``render.texture_rows``, itself checked here to equal ``render.texture``'s
``'linear-mipmap-linear'`` mode exactly; ``texture``'s float64 gradcheck is in tests/test_render_texture.py
(``test_gradcheck_2d``), and one of ``texture_rows``'s torch path is here. Without a CUDA device the kernel
runs under the Triton interpreter (``TRITON_INTERPRET=1``, set before triton is imported), at small sizes.
float32 tolerances (the kernel accumulates in another order; the texture gradient is an atomic
scatter-add): forward ``atol 1e-6``; texture gradient ``atol 1e-5 · max|g|``; uv / uv_da gradients
``rtol 1e-4, atol 1e-4 · max|g|`` (``log2`` and the footprint's square root in float32).
The ``gpu`` test repeats the comparison at the spot preset's pass-2 sizes on CUDA.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from meshlift.errors import RenderError  # noqa: E402
from meshlift.render.texture import texture, texture_mip_stack, texture_rows  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _close_scaled(a, b, rtol, atol_rel):
    scale = float(b.detach().abs().max()) or 1.0
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol_rel * scale)


def _inputs(n, h, w, c, seed=0, device=DEV):
    g = torch.Generator().manual_seed(seed)
    tex = torch.randn(h, w, c, generator=g)
    uv = torch.rand(n, 2, generator=g) * 3.0 - 1.0  # outside [0, 1]: wrap / clamp addressing
    # footprints from far below one texel (level 0, clamped) to beyond the whole texture (last level)
    scale = torch.logspace(-3.5, 0.8, n)[:, None]
    uv_da = torch.randn(n, 4, generator=g) * scale
    uv_da[:3] = 0.0  # zero derivatives: level 0 through the lambda floor
    return tex.to(device), uv.to(device), uv_da.to(device)


def _run(backend, tex, uv, uv_da, mode, channels, grad):
    t = tex.clone().requires_grad_()
    u = uv.clone().requires_grad_()
    d = uv_da.clone().requires_grad_()
    out = texture_rows(texture_mip_stack(t), u, d, boundary_mode=mode, channels=channels, backend=backend)
    grads = torch.autograd.grad(out, (t, u, d), grad)
    return out.detach(), grads


def test_torch_rows_equal_texture_exactly():
    tex, uv, uv_da = _inputs(200, 12, 20, 3, device="cpu")
    for mode in ("wrap", "clamp"):
        ref = texture(tex[None], uv[None, None], uv_da[None, None], filter_mode="linear-mipmap-linear",
                      boundary_mode=mode)[0, 0]
        out = texture_rows(texture_mip_stack(tex), uv, uv_da, boundary_mode=mode, backend="torch")
        assert torch.equal(out, ref)


def test_torch_rows_gradcheck():
    tex, uv, uv_da = _inputs(12, 4, 6, 2, seed=3, device="cpu")
    uv_da = uv_da[3:] * 8.0
    uv = uv[3:]

    def f(t, u, d):
        return texture_rows(texture_mip_stack(t), u, d, boundary_mode="wrap", backend="torch")

    args = (tex.double().requires_grad_(), uv.double().requires_grad_(), uv_da.double().requires_grad_())
    assert torch.autograd.gradcheck(f, args)


@pytest.mark.parametrize("mode", ["wrap", "clamp"])
@pytest.mark.parametrize("shape,channels", [((16, 32, 9), None), ((16, 32, 9), 3), ((8, 8, 1), None),
                                            ((5, 7, 4), None)])
def test_triton_matches_torch(mode, shape, channels):
    h, w, c = shape
    tex, uv, uv_da = _inputs(300, h, w, c, seed=h + c)
    grad = torch.randn(300, channels or c, generator=torch.Generator().manual_seed(1)).to(DEV)
    a, ga = _run("torch", tex, uv, uv_da, mode, channels, grad)
    b, gb = _run("triton", tex, uv, uv_da, mode, channels, grad)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    _close_scaled(gb[0], ga[0], 1e-5, 1e-5)
    _close_scaled(gb[1], ga[1], 1e-4, 1e-4)
    _close_scaled(gb[2], ga[2], 1e-4, 1e-4)


def test_triton_only_requested_gradients():
    tex, uv, uv_da = _inputs(40, 8, 8, 3)
    t = tex.clone().requires_grad_()
    out = texture_rows(texture_mip_stack(t), uv, uv_da, backend="triton")
    (g,) = torch.autograd.grad(out.sum(), (t,))
    ref = texture_rows(texture_mip_stack(t), uv, uv_da, backend="torch")
    (gr,) = torch.autograd.grad(ref.sum(), (t,))
    _close_scaled(g, gr, 1e-5, 1e-5)
    empty = texture_rows(texture_mip_stack(tex), uv[:0], uv_da[:0], backend="triton")
    assert empty.shape == (0, 3)


def test_bad_arguments():
    tex, uv, uv_da = _inputs(10, 8, 8, 3, device="cpu")
    st = texture_mip_stack(tex)
    with pytest.raises(RenderError, match="channels"):
        texture_rows(st, uv, uv_da, channels=4)
    with pytest.raises(RenderError, match="boundary_mode"):
        texture_rows(st, uv, uv_da, boundary_mode="zero")
    with pytest.raises(RenderError, match="uv_da"):
        texture_rows(st, uv, uv_da[:, :2])
    with pytest.raises(RenderError, match="tex"):
        texture_mip_stack(tex[None].expand(2, -1, -1, -1))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_texture_parity_spot_pass2():
    """The spot preset's pass-2 lookup: kd|ks|normal 2048² × 9 at ~600k covered pixels, and the kd columns."""
    n = 600_000
    tex, uv, uv_da = _inputs(n, 2048, 2048, 9, seed=7, device="cuda")
    uv = uv * 0.5 + 0.25
    uv_da = uv_da * 0.05
    grad = torch.randn(n, 9, device="cuda")
    for channels in (None, 3):
        g = grad if channels is None else grad[:, :3].contiguous()
        a, ga = _run("torch", tex, uv, uv_da, "wrap", channels, g)
        b, gb = _run("triton", tex, uv, uv_da, "wrap", channels, g)
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
        _close_scaled(gb[0], ga[0], 1e-4, 1e-5)
        # uv / uv_da: float32 log2 / sqrt may round differently on the GPU; a level near an integer can
        # flip between the two backends' floors only in gradients of measure zero, so compare in bulk
        for x, y in ((gb[1], ga[1]), (gb[2], ga[2])):
            bad = ((x - y).abs() > 1e-3 * float(y.abs().max()) + 1e-3 * y.abs()).float().mean()
            assert float(bad) < 1e-4


def _textured_sphere(res=16):
    import math

    from meshlift.structures import Material
    from meshlift.structures.mesh import Mesh

    nu, nv = 16, 8
    th = torch.linspace(0, math.pi, nv + 1)
    ph = torch.linspace(0, 2 * math.pi, nu + 1)
    T, P = torch.meshgrid(th, ph, indexing="ij")
    v = (torch.stack([T.sin() * P.cos(), T.cos(), T.sin() * P.sin()], -1).reshape(-1, 3) * 0.6).to(DEV)
    uvs = torch.stack([P / (2 * math.pi), T / math.pi], -1).reshape(-1, 2).to(DEV)
    f = []
    for i in range(nv):
        for j in range(nu):
            a = i * (nu + 1) + j
            # the pole rows are copies of one point: leave out the triangles with two corners there (zero
            # area; their float32 tangent gradients are rounding noise, see tests/test_kernels_tangents_triton.py)
            if i > 0:
                f.append([a, a + nu + 1, a + 1])
            if i < nv - 1:
                f.append([a + 1, a + nu + 1, a + nu + 2])
    f = torch.tensor(f, device=DEV)
    g = torch.Generator().manual_seed(0)
    kd = torch.rand(res, res, 3, generator=g).to(DEV).requires_grad_()
    ks = torch.rand(res, res, 3, generator=g).to(DEV).requires_grad_()
    nrm = torch.nn.functional.normalize(torch.randn(res, res, 3, generator=g) * 0.2 + torch.tensor([0, 0, 1.0]), dim=-1)
    nrm = nrm.to(DEV).requires_grad_()
    off = torch.zeros_like(v, requires_grad=True)
    mesh = Mesh(v_pos=v + off, t_pos_idx=f, v_tex=uvs, t_tex_idx=f, material=Material(kd=kd, ks=ks, normal=nrm))
    return mesh, (kd, ks, nrm, off)


def test_render_mesh_pass2_triton_matches_torch(kernels):
    """Pass 2's render (textured material, jittered kd, split-sum light) with the Triton lookups vs torch."""
    import math

    from meshlift.renderers.mesh_pbr import render_mesh
    from meshlift.shading.light import EnvironmentLight

    def persp(fov=0.8, n=0.1, fa=10.0):
        t = 1 / math.tan(fov / 2)
        return torch.tensor([[t, 0, 0, 0], [0, t, 0, 0], [0, 0, -(fa + n) / (fa - n), -2 * fa * n / (fa - n)],
                             [0, 0, -1, 0]])

    view = torch.eye(4)
    view[2, 3] = -2.2
    w2c = (persp() @ view)[None].to(DEV)
    cam = torch.tensor([[0.0, 0.0, 2.2]], device=DEV)
    results = {}
    for name in ("torch", "triton"):
        kernels(shading="torch")  # the prefilter's kernels are tested elsewhere
        mesh, params = _textured_sphere()
        light = EnvironmentLight.random(8, seed=1).to(DEV)
        light.build_mips()
        kernels(shading=name)
        torch.manual_seed(5)
        out = render_mesh(mesh, w2c, cam, (24, 24), light=light, field_jitter=0.01)
        g = torch.Generator().manual_seed(9)
        loss = sum((out[k] * torch.randn(out[k].shape, generator=g).to(DEV)).sum() for k in sorted(out))
        grads = torch.autograd.grad(loss, (*params, light.base))
        results[name] = ({k: v.detach() for k, v in out.items()}, grads)
    (oa, ga), (ob, gb) = results["torch"], results["triton"]
    for k in oa:
        torch.testing.assert_close(ob[k], oa[k], rtol=1e-4, atol=1e-5)
    for x, y in zip(gb, ga):
        _close_scaled(x, y, 1e-3, 1e-4)
