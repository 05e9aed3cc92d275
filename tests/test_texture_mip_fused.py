"""The mip stack as one autograd node (``render.texture._MipStackFn`` behind ``texture_mip_stack``).

Checked against its reference twin ``texture_mip_stack_reference`` (autograd-recorded
``adaptive_avg_pool2d`` chain + ``torch.cat``): forward values bitwise equal (the same kernels in the same
order), gradients for a random upstream gradient on ``flat`` within float32 rounding (``rtol 1e-6``),
float64 gradcheck, the graph is one node, and ``_sample_material`` gives the same values and gradients.
"""

import pytest
import torch

from meshlift.errors import RenderError
from meshlift.render.texture import texture_construct_mip, texture_mip_stack, texture_mip_stack_reference

SIZES = [(16, 16), (8, 32), (5, 7), (7, 1), (1, 6), (3, 3), (12, 10), (1, 1)]


def _maps(h, w, chans, dtype=torch.float32, seed=0, batched=False):
    g = torch.Generator().manual_seed(seed)
    out = []
    for c in chans:
        t = torch.randn(h, w, c, generator=g, dtype=torch.float64).to(dtype)
        out.append((t[None] if batched else t).requires_grad_())
    return out


def _grads(fn, maps, max_mip_level, seed=1):
    stack = fn(maps if len(maps) > 1 else maps[0], max_mip_level)
    g = torch.randn(stack.flat.shape, generator=torch.Generator().manual_seed(seed), dtype=stack.flat.dtype)
    g = g.to(stack.flat.device)
    return stack, torch.autograd.grad(stack.flat, maps, g)


@pytest.mark.parametrize("hw", SIZES)
@pytest.mark.parametrize("chans", [(3,), (9,), (3, 3, 3), (4, 1)])
@pytest.mark.parametrize("max_mip_level", [None, 0, 2])
def test_equals_reference(hw, chans, max_mip_level):
    maps = _maps(*hw, chans, batched=len(chans) == 2)
    st, g = _grads(texture_mip_stack, maps, max_mip_level)
    rs, rg = _grads(texture_mip_stack_reference, maps, max_mip_level)
    assert torch.equal(st.flat, rs.flat)
    for a, b in zip((st.offsets, st.heights, st.widths), (rs.offsets, rs.heights, rs.widths)):
        assert torch.equal(a, b)
    assert st.base_hw == rs.base_hw == hw
    for a, b, m in zip(g, rg, maps):
        assert a.shape == m.shape and a.dtype == m.dtype
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_levels_match_construct_mip_and_layout():
    """Level ``l`` occupies rows ``offsets[l] .. + heights[l]·widths[l]`` row-major, as the lookups read it."""
    tex = torch.randn(12, 10, 9)
    st = texture_mip_stack(tex)
    levels = texture_construct_mip(tex[None])
    assert len(levels) == len(st.offsets)
    for lv, o, h, w in zip(levels, st.offsets.tolist(), st.heights.tolist(), st.widths.tolist()):
        assert (h, w) == tuple(lv.shape[1:3])
        assert torch.equal(st.flat[o: o + h * w].view(h, w, 9), lv[0])


def test_mixed_dtypes_promote_and_grads_keep_dtype():
    a = torch.randn(8, 8, 3, dtype=torch.float32, requires_grad=True)
    b = torch.randn(8, 8, 2, dtype=torch.float64, requires_grad=True)
    st, g = _grads(texture_mip_stack, [a, b], None)
    rs, rg = _grads(texture_mip_stack_reference, [a, b], None)
    assert st.flat.dtype == torch.float64 and torch.equal(st.flat, rs.flat)
    assert g[0].dtype == torch.float32 and g[1].dtype == torch.float64
    for x, y in zip(g, rg):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("hw", [(4, 4), (5, 3), (2, 7)])
def test_gradcheck_float64(hw):
    maps = _maps(*hw, (2, 1), dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a, b: texture_mip_stack([a, b]).flat, maps)


def _nodes(t):
    """Autograd nodes reachable from ``t.grad_fn`` other than the leaves' AccumulateGrad."""
    seen, todo = set(), [t.grad_fn]
    while todo:
        n = todo.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        todo.extend(f for f, _ in n.next_functions)
    return [n for n in seen if type(n).__name__ != "AccumulateGrad"]


def test_one_autograd_node():
    maps = _maps(64, 64, (3, 3, 3))
    assert len(_nodes(texture_mip_stack(maps).flat)) == 1
    assert len(_nodes(texture_mip_stack_reference(maps).flat)) > 20  # the recorded chain it replaces


def test_no_grad_inputs_and_input_unmodified():
    tex = torch.randn(6, 6, 3)
    before = tex.clone()
    st = texture_mip_stack(tex)
    assert not st.flat.requires_grad and torch.equal(tex, before)
    assert torch.equal(st.flat, texture_mip_stack_reference(tex).flat)


def test_bad_input_raises():
    with pytest.raises(RenderError, match="tex must be"):
        texture_mip_stack(torch.randn(2, 4, 4, 3))
    with pytest.raises(RenderError, match="one size"):
        texture_mip_stack([torch.randn(4, 4, 3), torch.randn(8, 8, 3)])
    with pytest.raises(RenderError, match="floating-point"):
        texture_mip_stack(torch.zeros(4, 4, 3, dtype=torch.int64))
    with pytest.raises(RenderError, match="empty"):
        texture_mip_stack([])
    with pytest.raises(RenderError, match="no texels"):
        texture_mip_stack(torch.zeros(0, 4, 3))


def test_sample_material_same_values_and_fewer_nodes(monkeypatch):
    """``_sample_material`` (kd | ks | normal, one stack) equals its pre-fusion form (the reference stack of
    the ``torch.cat`` of the maps) and its graph has >= 5 nodes fewer per mip level."""
    from meshlift import render as R
    from meshlift.renderers import mesh_pbr
    from meshlift.structures.mesh import Material

    g = torch.Generator().manual_seed(3)
    kd, ks, nrm = (torch.rand(64, 64, c, generator=g).requires_grad_() for c in (3, 3, 3))
    mat = Material(kd=kd, ks=ks, normal=nrm)
    uv = torch.rand(300, 2, generator=g)
    uv_da = torch.randn(300, 4, generator=g) * 0.02

    def run():
        out = mesh_pbr._sample_material(mat, uv, uv_da, None)
        tot = sum((v * (i + 1)).sum() for i, v in enumerate(out.values()))
        return out, tot, torch.autograd.grad(tot, (kd, ks, nrm))

    out, tot, grads = run()
    fused_nodes = len(_nodes(tot))
    monkeypatch.setattr(R, "texture_mip_stack", lambda ts: texture_mip_stack_reference(torch.cat(ts, -1)))
    rout, rtot, rgrads = run()
    ref_nodes = len(_nodes(rtot))
    for k in out:
        assert torch.equal(out[k], rout[k])
    for a, b in zip(grads, rgrads):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert ref_nodes - fused_nodes >= 5 * 6, (fused_nodes, ref_nodes)  # >= 5 nodes per downsampling (6 here)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_equals_reference_cuda_pass2_size():
    """The spot preset's pass-2 stack (kd | ks | normal at 2048², C = 9) on CUDA: the out= kernels write the
    same values as the functional ones (forward bitwise), gradients within float32 rounding."""
    maps = [m.detach().cuda().requires_grad_() for m in _maps(2048, 2048, (3, 3, 3))]
    st, g = _grads(texture_mip_stack, maps, None)
    rs, rg = _grads(texture_mip_stack_reference, maps, None)
    assert torch.equal(st.flat, rs.flat)
    for a, b in zip(g, rg):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    odd = [m.detach().cuda().requires_grad_() for m in _maps(37, 22, (9,))]
    st, g = _grads(texture_mip_stack, odd, None)
    rs, rg = _grads(texture_mip_stack_reference, odd, None)
    assert torch.equal(st.flat, rs.flat)
    torch.testing.assert_close(g[0], rg[0], rtol=1e-6, atol=1e-7)


def test_pool_into_restores_a_relaid_out():
    """``_pool_into``'s fallback: an ``out`` whose layout the out= kernel re-lays (NCHW out, channels-last
    input) still ends with the functional values in ``out``'s own layout."""
    from meshlift.render.texture import _pool_into

    x = torch.randn(1, 5, 6, 3).permute(0, 3, 1, 2)  # channels-last [1, 3, 5, 6]
    for size in ((2, 3), (1, 1)):
        out = torch.zeros(1, 3, *size)  # NCHW-contiguous
        _pool_into(x, out)
        assert out.is_contiguous() and torch.equal(out, torch.nn.functional.adaptive_avg_pool2d(x, size))
