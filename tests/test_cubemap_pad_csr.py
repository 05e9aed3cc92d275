"""The padded cube-map table as one fixed CSR operator (``shading.cubemap._pad_operator``, applied by
``kernels.prefilter_triton.csr_apply_cat_triton``) against its twin, the per-level ``_pad_cube``.

Without a CUDA device the Triton kernel runs under the interpreter (``TRITON_INTERPRET=1``, set before
triton is imported) at small sizes; the ``gpu`` test repeats the comparison at the spot preset's light
(specular chain 128 -> 16, diffuse 16²). Tolerances: float32 forward ``atol 1e-6`` (a 4-term sum in another
order), gradients ``atol 1e-6 · max|g|``; the float64 operator matches ``_pad_cube`` to 1e-14.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from meshlift.shading.cubemap import (  # noqa: E402
    _pad_cube,
    _pad_operator,
    _padded_table,
    sample_cube,
    sample_cube_mip,
)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
SIZES = [(16, 8, 4, 2), (8,), (6, 3), (5, 2, 1), (1,)]


def _levels(sizes, c, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(6, r, r, c, generator=g, dtype=dtype).to(DEV) for r in sizes]


def _reference(levels):
    ch = levels[0].shape[-1]
    return torch.cat([_pad_cube(c).reshape(-1, ch) for c in levels])


@pytest.mark.parametrize("sizes", SIZES)
def test_operator_equals_pad_cube(sizes):
    """W @ cat(levels) is the _pad_cube table (float32 and float64); W^T is W's transpose; rows sum to 1."""
    for dtype, tol in ((torch.float32, 1e-6), (torch.float64, 1e-14)):
        levels = _levels(sizes, 3, sum(sizes), dtype)
        fwd, bwd = _pad_operator(sizes, dtype, str(levels[0].device))
        x = torch.cat([c.reshape(-1, 3) for c in levels])
        ref = _reference(levels)
        assert fwd.shape == (ref.shape[0], x.shape[0]) and fwd.crow_indices().dtype == torch.int32
        torch.testing.assert_close(fwd @ x, ref, rtol=0, atol=tol)
        dense = fwd.to_dense()
        torch.testing.assert_close(bwd.to_dense(), dense.T, rtol=0, atol=0)
        nnz = fwd.crow_indices().diff()
        assert bool(((nnz == 1) | (nnz == 4)).all())
        torch.testing.assert_close(dense.sum(1), torch.ones_like(dense[:, 0]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("sizes", [(16, 8, 4, 2), (6, 3), (1,)])
def test_triton_table_forward_backward(sizes):
    """The fused Triton apply: same table and same level gradients as autograd through _pad_cube."""
    levels = _levels(sizes, 3, 7)
    before = [c.clone() for c in levels]
    a_in = [c.clone().requires_grad_() for c in levels]
    b_in = [c.clone().requires_grad_() for c in levels]
    ref = _reference(a_in)
    out = _padded_table(b_in)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)
    g = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1)).to(DEV)
    ga = torch.autograd.grad(ref, a_in, g)
    gb = torch.autograd.grad(out, b_in, g)
    for x, y in zip(gb, ga):
        assert x.shape == y.shape
        torch.testing.assert_close(x, y, rtol=0, atol=1e-6 * float(y.abs().max()))
    for c, c0 in zip(levels, before):
        assert torch.equal(c, c0)  # inputs untouched


def test_gradient_only_to_levels_that_need_it():
    levels = _levels((4, 2), 2, 3)
    lv = [levels[0], levels[1].clone().requires_grad_()]
    out = _padded_table(lv)
    (g,) = torch.autograd.grad(out.square().sum(), [lv[1]])
    ref_in = [levels[0], levels[1].clone().requires_grad_()]
    (r,) = torch.autograd.grad(_reference(ref_in).square().sum(), [ref_in[1]])
    torch.testing.assert_close(g, r, rtol=0, atol=1e-5)


def _graph_nodes(out):
    seen, todo = set(), [out.grad_fn]
    while todo:
        f = todo.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        todo.extend(n for n, _ in f.next_functions)
    return sorted(type(f).__name__ for f in seen if type(f).__name__ != "AccumulateGrad")


def test_triton_lookup_graph_has_one_padding_node():
    """The Triton lookups record two nodes (padding, lookup) whatever the number of levels."""
    g = torch.Generator().manual_seed(4)
    levels = [c.requires_grad_() for c in _levels((8, 4, 2), 3, 4)]
    dirs = torch.randn(64, 3, generator=g).to(DEV).requires_grad_()
    level = (torch.rand(64, generator=g) * 2).to(DEV).requires_grad_()
    out = sample_cube_mip(levels, dirs, level, backend="triton")
    assert _graph_nodes(out) == ["_CsrApplyCatFnBackward", "_CubeFnBackward"]
    assert _graph_nodes(sample_cube(levels[0], dirs, backend="triton")) == ["_CsrApplyCatFnBackward",
                                                                            "_CubeFnBackward"]
    ref = sample_cube_mip(levels, dirs, level, backend="torch")
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    # batched leading shape still goes through reshapes, with the same values
    out2 = sample_cube_mip(levels, dirs.reshape(8, 8, 3), level.reshape(8, 8), backend="triton")
    torch.testing.assert_close(out2.reshape(64, 3), out, rtol=0, atol=0)


def test_float64_stays_on_torch():
    levels = _levels((4, 2), 3, 5, torch.float64)
    dirs = torch.randn(20, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5)).to(DEV)
    level = torch.full((20,), 0.5, dtype=torch.float64, device=DEV)
    out = sample_cube_mip(levels, dirs, level, backend="triton")
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, sample_cube_mip(levels, dirs, level, backend="torch"), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_pad_table_spot_light():
    """The spot preset's light (make_light, env_res=128): specular 128 -> 16 and the diffuse 16²."""
    for sizes in ((128, 64, 32, 16), (16,)):
        levels = _levels(sizes, 3, 11)
        a_in = [c.clone().requires_grad_() for c in levels]
        b_in = [c.clone().requires_grad_() for c in levels]
        ref = _reference(a_in)
        out = _padded_table(b_in)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)
        g = torch.randn_like(ref)
        for x, y in zip(torch.autograd.grad(out, b_in, g), torch.autograd.grad(ref, a_in, g)):
            torch.testing.assert_close(x, y, rtol=0, atol=1e-6 * float(y.abs().max()))


def test_short_rows_kernel_matches_torch_csr():
    """The row-blocked CSR kernel against torch's sparse matmul: rows of 0..9 entries, 300 rows (3 blocks)."""
    import warnings

    from meshlift.kernels.prefilter_triton import _apply

    g = torch.Generator().manual_seed(9)
    n_rows, n_src = 300, 50
    lengths = torch.randint(0, 10, (n_rows,), generator=g)
    lengths[:128] = 0  # an all-empty block
    crow = torch.zeros(n_rows + 1, dtype=torch.int64)
    crow[1:] = torch.cumsum(lengths, 0)
    col = torch.randint(0, n_src, (int(crow[-1]),), generator=g)
    val = torch.randn(int(crow[-1]), generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = torch.sparse_csr_tensor(crow.to(torch.int32), col.to(torch.int32), val, (n_rows, n_src)).to(DEV)
    x = torch.randn(n_src, 3, generator=g).to(DEV)
    torch.testing.assert_close(_apply(m, x, short_rows=True), (m.to_dense() @ x), rtol=1e-5, atol=1e-5)
