"""Tangent frames: the Triton kernels (meshlift.kernels.tangents_triton) against their torch twin
``geometry.mesh_ops.tangent_frames``, forward and backward (``v_pos`` and ``v_nrm``), plus a float64 gradcheck of
the twin in ``v_nrm`` (its ``v_pos`` / ``v_tex`` gradcheck is in tests/test_mesh_ops.py). Without a CUDA device
the kernels run under the Triton interpreter (``TRITON_INTERPRET=1``, set before triton is imported).
float32 tolerances: forward ``atol 1e-5``; gradient ``rtol 1e-4, atol 1e-4 · max|g|`` (atomic scatter-add order).
At collapsed triangles (UV-sphere poles) the float32 twin's gradient is rounding noise, so there the kernels are
compared with the float64 twin.
"""

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from meshlift.errors import MeshError  # noqa: E402
from meshlift.geometry import mesh_ops  # noqa: E402
from meshlift.kernels.tangents_triton import tangent_frames_triton  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _torus(nu: int, nv: int, seed: int = 0, extra: bool = True, dtype=torch.float32):
    """A torus (``2 nu nv`` faces) with UV seams along both grid directions and a mirrored chart (u runs back
    over the second half, so both handedness values appear and the mirror line splits the groups), noisy
    non-unit normals, and (``extra``) two detached triangles with collapsed UVs whose groups take the fixed-axis
    fallback: one with normal ±x (the y-axis branch) and one with normal +z (the x-axis branch)."""
    g = torch.Generator().manual_seed(seed)
    i = torch.arange(nu).repeat_interleave(nv)
    j = torch.arange(nv).repeat(nu)
    a, b = 2 * math.pi * i / nu, 2 * math.pi * j / nv
    r = 1.0 + 0.4 * torch.cos(b)
    v = torch.stack([r * torch.cos(a), r * torch.sin(a), 0.4 * torch.sin(b)], 1).double()
    v = v + 0.01 * torch.randn(v.shape, generator=g, dtype=torch.float64)
    ii, jj = torch.meshgrid(torch.arange(nu), torch.arange(nv), indexing="ij")
    ii, jj = ii.reshape(-1), jj.reshape(-1)

    def pid(x, y):
        return (x % nu) * nv + (y % nv)

    def tid(x, y):  # the UV grid has nu+1 by nv+1 points (seams at x = nu and y = nv)
        return x * (nv + 1) + y

    quads_p = [pid(ii, jj), pid(ii + 1, jj), pid(ii + 1, jj + 1), pid(ii, jj + 1)]
    quads_t = [tid(ii, jj), tid(ii + 1, jj), tid(ii + 1, jj + 1), tid(ii, jj + 1)]
    t = torch.cat([torch.stack([quads_p[0], quads_p[1], quads_p[2]], 1),
                   torch.stack([quads_p[0], quads_p[2], quads_p[3]], 1)])
    tt = torch.cat([torch.stack([quads_t[0], quads_t[1], quads_t[2]], 1),
                    torch.stack([quads_t[0], quads_t[2], quads_t[3]], 1)])
    ui = torch.arange(nu + 1).repeat_interleave(nv + 1).double()
    vj = torch.arange(nv + 1).repeat(nu + 1).double()
    half = nu // 2
    u = torch.where(ui <= half, ui, 2 * half - ui) / nu  # mirrored in u over the second half
    uv = torch.stack([u, vj / nv], 1)
    n = mesh_ops.vertex_normals(v, t)
    if extra:
        V, Vt = v.shape[0], uv.shape[0]
        v = torch.cat([v, torch.tensor([[3.0, 0, 0], [3.0, 1, 0], [3.0, 0, 1], [4.0, 0, 0], [5.0, 0, 0], [4.0, 1, 0]],
                                       dtype=torch.float64)])
        t = torch.cat([t, torch.tensor([[V, V + 1, V + 2], [V + 3, V + 4, V + 5]])])
        uv = torch.cat([uv, torch.tensor([[0.5, 0.5], [0.2, 0.3]], dtype=torch.float64)])
        tt = torch.cat([tt, torch.tensor([[Vt, Vt, Vt], [Vt + 1, Vt + 1, Vt + 1]])])
        n = torch.cat([n, torch.tensor([[1.0, 0, 0]] * 3 + [[0.0, 0, 1]] * 3, dtype=torch.float64)])
    n = n * (1 + 0.2 * torch.rand(n.shape[0], 1, generator=g, dtype=torch.float64))
    n = n + 0.05 * torch.randn(n.shape, generator=g, dtype=torch.float64)
    return v.to(dtype), t, uv.to(dtype), tt, n.to(dtype)


def _run(fn, v, t, uv, tt, n, tn, g_out):
    p = v.clone().requires_grad_()
    q = n.clone().requires_grad_()
    out, idx = fn(p, t, uv, tt, q, tn)
    gp, gq = torch.autograd.grad((out * g_out).sum(), [p, q])
    return out.detach(), idx, gp, gq


def _close_grad(b, a):
    torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4 * float(a.abs().max()))


@pytest.mark.parametrize("idx_dtype,normals", [(torch.int64, "shared"), (torch.int32, "split")])
def test_tangent_frames_triton_match_torch(idx_dtype, normals):
    v, t, uv, tt, n = _torus(16, 8)
    if normals == "split":  # per-face normals: own t_nrm_idx, every corner of a face shares one normal
        n = n[t].mean(1).repeat_interleave(3, 0)
        tn = torch.arange(3 * t.shape[0]).reshape(-1, 3).to(idx_dtype).to(DEV)
    else:
        tn = None
    v, uv, n = v.to(DEV), uv.to(DEV), n.to(DEV)
    t, tt = t.to(idx_dtype).to(DEV), tt.to(idx_dtype).to(DEV)
    K = mesh_ops.tangent_grouping(v, t, uv, tt, n, tn)[1]
    g_out = torch.randn(K, 4, generator=torch.Generator().manual_seed(5)).to(DEV)  # w column has no gradient
    a = _run(mesh_ops.tangent_frames, v, t, uv, tt, n, tn, g_out)
    b = _run(tangent_frames_triton, v, t, uv, tt, n, tn, g_out)
    assert b[1] is a[1]  # the same cached grouping, the same index tensor
    assert set(a[0][:, 3].tolist()) == {-1.0, 1.0}  # both handedness values occur
    torch.testing.assert_close(b[0], a[0], atol=1e-5, rtol=0)
    _close_grad(b[2], a[2])
    _close_grad(b[3], a[3])
    # the two collapsed-UV triangles take the fallback (their tangents are built from the y and the x axis)
    fb = a[1][-2:, 0]
    torch.testing.assert_close(b[0][fb, 3], torch.ones(2, device=DEV))
    assert float(b[0][fb[0], 1].abs()) > 0.9 and float(b[0][fb[1], 0].abs()) > 0.9
    assert float(b[3][-6:].abs().max()) > 0  # the fallback's gradient (a function of the normal) is there


def _uv_sphere(nu=16, nv=8):
    """A lat-long sphere whose pole rows are ``nu + 1`` copies of the pole (collapsed triangles with a zero
    edge, exactly as a UV-sphere export has them) and whose seam column is duplicated."""
    th = torch.linspace(0, math.pi, nv + 1, dtype=torch.float64)
    ph = torch.linspace(0, 2 * math.pi, nu + 1, dtype=torch.float64)
    T, P = torch.meshgrid(th, ph, indexing="ij")
    v = torch.stack([T.sin() * P.cos(), T.cos(), T.sin() * P.sin()], -1).reshape(-1, 3)
    v[: nu + 1] = torch.tensor([0.0, 1, 0], dtype=torch.float64)
    v[-(nu + 1):] = torch.tensor([0.0, -1, 0], dtype=torch.float64)
    uv = torch.stack([P / (2 * math.pi), T / math.pi], -1).reshape(-1, 2)
    a = (torch.arange(nv)[:, None] * (nu + 1) + torch.arange(nu)[None]).reshape(-1)
    f = torch.cat([torch.stack([a, a + nu + 1, a + 1], 1), torch.stack([a + 1, a + nu + 1, a + nu + 2], 1)])
    return v.float(), f, uv.float()


def test_tangent_frames_triton_at_collapsed_poles_match_the_float64_twin():
    """At a collapsed pole the corner angles are 0 and ``T_f = 0``: the float32 twin's gradient there is rounding
    noise (a ~1e-8 angle from the cross product's rounding, times ``safe_normalize``'s 1e10 floor factor at the
    zero tangent: hundreds where the gradient is ~0.1); the kernels give the float64 twin's value."""
    v, f, uv = _uv_sphere()
    n = mesh_ops.vertex_normals(v, f)
    K = mesh_ops.tangent_grouping(v, f, uv, f, n)[1]
    g_out = torch.randn(K, 4, generator=torch.Generator().manual_seed(1))
    ref = _run(mesh_ops.tangent_frames, v.double(), f, uv.double(), f, n.double(), None, g_out.double())
    b = _run(tangent_frames_triton, v.to(DEV), f.to(DEV), uv.to(DEV), f.to(DEV), n.to(DEV), None, g_out.to(DEV))
    torch.testing.assert_close(b[0].cpu().double(), ref[0], atol=1e-5, rtol=0)
    for x, y in ((b[2], ref[2]), (b[3], ref[3])):
        torch.testing.assert_close(x.cpu().double(), y, rtol=1e-4, atol=1e-4 * float(y.abs().max()))


def test_tangent_frames_twin_gradcheck_in_normals():
    """The twin in float64, in ``v_pos`` and ``v_nrm`` (incl. a fallback group), by finite differences."""
    v, t, uv, tt, n = _torus(4, 3, seed=2, dtype=torch.float64)
    vv, nn = v.clone().requires_grad_(), n.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: mesh_ops.tangent_frames(a, t, uv, tt, b)[0][:, :3], (vv, nn))


def test_tangent_frames_triton_rejects_what_it_does_not_do():
    v, t, uv, tt, n = _torus(4, 3)
    with pytest.raises(MeshError, match="v_tex"):
        tangent_frames_triton(v, t, uv.clone().requires_grad_(), tt, n)
    with pytest.raises(MeshError, match="float32"):
        tangent_frames_triton(v.double(), t, uv, tt, n)
    bad = tt.clone()
    bad[0, 0] = uv.shape[0]
    with pytest.raises(MeshError, match="t_tex_idx"):
        tangent_frames_triton(v, t, uv, bad, n)
    out, idx = tangent_frames_triton(v, t[:0], uv, tt[:0], n)
    assert out.shape == (0, 4) and idx.shape == (0, 3)


def _render(backend, kernels):
    """One normal-mapped render + loss of the torus through ``render_mesh`` with the shading backend ``backend``."""
    from meshlift.cameras import look_at, projection_from_K
    from meshlift.renderers.mesh_pbr import render_mesh
    from meshlift.shading.light import EnvironmentLight
    from meshlift.structures.mesh import Material, Mesh

    v, t, uv, tt, _ = _torus(12, 6, extra=False)
    g = torch.Generator().manual_seed(3)
    nmap = torch.nn.functional.normalize(torch.randn(8, 8, 3, generator=g) * 0.3 + torch.tensor([0.0, 0, 1]), dim=-1)
    material = Material(kd=torch.rand(8, 8, 3, generator=g).to(DEV), normal=nmap.to(DEV))
    p = (0.5 * v).to(DEV).requires_grad_()
    mesh = Mesh(p, t.to(DEV), v_tex=uv.to(DEV), t_tex_idx=tt.to(DEV))
    kernels(shading="torch")
    light = EnvironmentLight.random(8, seed=2, min_res=4, lut_resolution=32)
    light.build_mips()  # the same light for both paths
    kernels(shading=backend)
    eye = torch.tensor([[0.0, 1.2, 1.6]], dtype=torch.float64)
    w2c = look_at(eye, torch.zeros_like(eye), torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64)).float()
    f = 0.5 * 16 / math.tan(math.radians(25))
    K = torch.tensor([[[f, 0, 8.0], [0, f, 8.0], [0, 0, 1]]])
    w2clip = (projection_from_K(K, 16, 16, 0.1, 10.0) @ w2c).to(DEV)
    out = render_mesh(mesh, w2clip, eye.float().to(DEV), (16, 16), light=light, material=material)
    target = torch.rand(1, 16, 16, 3, generator=g).to(DEV)
    (gp,) = torch.autograd.grad((out["shaded"][..., :3] - target).abs().mean(), [p])
    return out["shaded"].detach(), gp


def test_render_mesh_takes_the_tangent_kernels(monkeypatch, kernels):
    import meshlift.kernels.tangents_triton as mod

    calls = []
    real = mod.tangent_frames_triton
    monkeypatch.setattr(mod, "tangent_frames_triton", lambda *a: calls.append(1) or real(*a))
    a = _render("torch", kernels)
    assert not calls
    b = _render("triton", kernels)
    assert calls  # the normal-mapped material with fixed UVs took the fast path
    assert float(a[1].abs().max()) > 0
    torch.testing.assert_close(b[0], a[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(b[1], a[1], rtol=1e-3, atol=1e-4 * float(a[1].abs().max()))


def _count(fn, v, t, uv, tt, n, monkeypatch):
    """``(autograd nodes, aten ops forward, aten ops backward)`` of one call (the grouping already cached); a
    kernel launch counts as one op (the interpreter's own host copies inside it are not counted)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from triton.runtime import interpreter

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n, self.inside = 0, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += self.inside == 0
            return func(*args, **(kwargs or {}))

    active = []
    launch = interpreter.GridExecutor.__call__

    def counted(self, *a, **k):
        if not active:
            return launch(self, *a, **k)
        mode = active[-1]
        mode.n += 1
        mode.inside += 1
        try:
            return launch(self, *a, **k)
        finally:
            mode.inside -= 1

    monkeypatch.setattr(interpreter.GridExecutor, "__call__", counted)
    p, q = v.clone().requires_grad_(), n.clone().requires_grad_()
    fn(p, t, uv, tt, q)  # fills the grouping cache
    with Count() as fwd:
        active.append(fwd)
        out, _ = fn(p, t, uv, tt, q)
    seen, stack = set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen or type(node).__name__ == "AccumulateGrad":
            continue
        seen.add(node)
        stack.extend(nf for nf, _ in node.next_functions)
    g = torch.ones_like(out)
    with Count() as bwd:
        active.append(bwd)
        torch.autograd.grad(out, [p, q], g)
    return len(seen), fwd.n, bwd.n


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="counts the interpreter's launches (CPU run)")
def test_tangent_frames_triton_op_counts(monkeypatch):
    """The counts quoted in the module docstring (10k-face torus; counts, never times)."""
    v, t, uv, tt, n = _torus(100, 50, extra=False)
    ref = _count(mesh_ops.tangent_frames, v, t, uv, tt, n, monkeypatch)
    fast = _count(tangent_frames_triton, v, t, uv, tt, n, monkeypatch)
    print(f"reference (nodes, fwd ops, bwd ops): {ref}; triton: {fast}")
    assert fast == (1, 4, 5) and ref[0] > 50


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_tangent_frames_triton_gpu_parity_at_preset_size():
    """A 50k-face torus (pass 2's mesh size) on the GPU, against the twin."""
    v, t, uv, tt, n = _torus(250, 100)
    v, t, uv, tt, n = (x.cuda() for x in (v, t, uv, tt, n))
    K = mesh_ops.tangent_grouping(v, t, uv, tt, n)[1]
    g_out = torch.randn(K, 4, device="cuda")
    a = _run(mesh_ops.tangent_frames, v, t, uv, tt, n, None, g_out)
    b = _run(tangent_frames_triton, v, t, uv, tt, n, None, g_out)
    assert b[1] is a[1]
    torch.testing.assert_close(b[0], a[0], atol=1e-5, rtol=0)
    _close_grad(b[2], a[2])
    _close_grad(b[3], a[3])
