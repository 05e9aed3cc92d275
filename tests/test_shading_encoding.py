"""meshlift.shading.encoding / material_field: hash grid vs its naive twin, indexing, MLP, material field."""

import math

import pytest
import torch

from meshlift.errors import ConfigError, RenderError
from meshlift.shading.encoding import HASH_PRIMES, MLP, HashGridEncoding, hash_grid_reference
from meshlift.shading.material_field import NVDIFFREC_KS_RANGE, MaterialField


def _small(**kw):
    args = dict(n_levels=6, n_features_per_level=2, log2_hashmap_size=10, base_resolution=4, per_level_scale=2.0)
    args.update(kw)
    return HashGridEncoding(3, **args)


def test_level_layout():
    enc = HashGridEncoding()  # nvdiffrec's configuration
    assert enc.resolutions[0] == 16 and enc.resolutions[-1] == 4096
    assert abs(enc.per_level_scale - math.exp(math.log(256) / 15)) < 1e-12
    assert enc.n_output_dims == 32
    # Levels whose (N + 1)^3 vertices fit in 2^19 entries are dense (16, 23, 33, 48, 70).
    assert enc.dense[:5] == [True] * 5 and not any(enc.dense[5:])
    small = _small()
    assert small.resolutions == [4, 8, 16, 32, 64, 128]
    assert small.dense == [True, True, False, False, False, False]
    assert small.embeddings.shape == (125 + 729 + 4 * 1024, 2)
    assert float(small.embeddings.detach().abs().max()) <= 1e-4


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_matches_reference_forward_backward(dims):
    enc = HashGridEncoding(dims, n_levels=5, n_features_per_level=3, log2_hashmap_size=8, base_resolution=3,
                           per_level_scale=1.8).double()
    with torch.no_grad():
        enc.embeddings.normal_()
    x = torch.rand(300, dims, dtype=torch.float64)
    x[:3] = torch.tensor([0.0, 1.0, 0.5], dtype=torch.float64)[:, None]  # borders included
    x.requires_grad_()
    a = enc(x)
    b = hash_grid_reference(enc, x)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(a)
    ga = torch.autograd.grad((a * g).sum(), (enc.embeddings, x))
    gb = torch.autograd.grad((b * g).sum(), (enc.embeddings, x))
    for u, v in zip(ga, gb):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)


def test_indexing_against_python_hash():
    enc = _small(n_features_per_level=1).double()
    with torch.no_grad():
        enc.embeddings.copy_(torch.arange(enc.embeddings.shape[0], dtype=torch.float64)[:, None])
    offsets = [0, 125, 125 + 729]
    for lvl, coord in ((0, (1, 2, 3)), (1, (7, 0, 5)), (2, (3, 9, 16)), (3, (31, 17, 2))):
        res = enc.resolutions[lvl]
        x = torch.tensor([coord], dtype=torch.float64) / res  # exactly on a grid vertex: weight 1 there
        if enc.dense[lvl]:
            idx = coord[0] + coord[1] * (res + 1) + coord[2] * (res + 1) ** 2
        else:
            h = 0
            for c, p in zip(coord, HASH_PRIMES):
                h ^= c * p
            idx = h % 1024
        off = offsets[lvl] if lvl < 3 else offsets[2] + 1024 * (lvl - 2)
        assert float(enc(x)[0, lvl].detach()) == off + idx, lvl


def test_trilinear_reproduces_linear_functions():
    enc = HashGridEncoding(3, n_levels=1, n_features_per_level=1, log2_hashmap_size=10, base_resolution=5).double()
    n = 6
    k = torch.arange(n, dtype=torch.float64)
    z, y, x = torch.meshgrid(k, k, k, indexing="ij")  # dense index = i + j (N+1) + k (N+1)^2
    f = 0.3 * x - 1.2 * y + 0.7 * z + 2.0
    with torch.no_grad():
        enc.embeddings.copy_(f.reshape(-1, 1))
    p = torch.rand(200, 3, dtype=torch.float64)
    expected = (0.3 * p[:, 0] - 1.2 * p[:, 1] + 0.7 * p[:, 2]) * 5 + 2.0
    torch.testing.assert_close(enc(p)[:, 0], expected)


def test_gradcheck_and_clamping():
    enc = HashGridEncoding(3, n_levels=2, n_features_per_level=2, log2_hashmap_size=4, base_resolution=2,
                           per_level_scale=2.0).double()
    x = torch.rand(5, 3, dtype=torch.float64) * 0.9 + 0.05
    e0 = enc.embeddings.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda e: torch.func.functional_call(enc, {"embeddings": e}, (x,)), (e0,))
    assert torch.autograd.gradcheck(lambda xx: enc(xx), (x.clone().requires_grad_(),))
    out_in = enc(torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64))
    out_far = enc(torch.tensor([[3.0, 7.0, 1.5]], dtype=torch.float64))
    torch.testing.assert_close(out_in, out_far)
    with pytest.raises(RenderError, match=r"\[N, 3\]"):
        enc(torch.zeros(4, 2, dtype=torch.float64))
    with pytest.raises(ConfigError):
        HashGridEncoding(4)


def test_mlp():
    m = MLP(32, 9, hidden=16, layers=3)
    linears = [l for l in m.net if isinstance(l, torch.nn.Linear)]
    assert len(linears) == 4 and all(l.bias is None for l in linears)
    assert m(torch.randn(7, 32)).shape == (7, 9)


def test_material_field_ranges_chunking_and_gradients():
    aabb = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])
    field = MaterialField(aabb, ks_min=NVDIFFREC_KS_RANGE[0], ks_max=NVDIFFREC_KS_RANGE[1], n_levels=4,
                          log2_hashmap_size=12, desired_resolution=64, chunk_size=100)
    x = torch.rand(2, 150, 3) * 3 - 1.5  # some points outside the box (clamped)
    out = field(x)
    assert set(out) == {"kd", "ks", "normal"}
    det = {k: v.detach() for k, v in out.items()}
    assert out["kd"].shape == (2, 150, 3)
    assert float(det["kd"].min()) >= 0 and float(det["kd"].max()) <= 1
    ks = det["ks"]
    assert float(ks[..., 0].abs().max()) == 0.0
    assert float(ks[..., 1].min()) >= 0.08 and float(ks[..., 1].max()) <= 1.0
    n = det["normal"]
    assert float(n[..., 2].min()) >= 0.0 and float(n[..., :2].abs().max()) <= 1.0
    # A fresh field is neutral: sigmoid(~0) = 0.5 -> the normal perturbation is ~(0, 0, 0.5).
    torch.testing.assert_close(n[..., :2], torch.zeros_like(n[..., :2]), atol=0.05, rtol=0)
    # Chunked evaluation equals one big chunk.
    field_big = MaterialField(aabb, n_levels=4, log2_hashmap_size=12, desired_resolution=64, chunk_size=10**6)
    field_big.load_state_dict(field.state_dict(), strict=False)
    field_big.out_min.copy_(field.out_min)
    field_big.out_max.copy_(field.out_max)
    torch.testing.assert_close(field_big(x)["kd"], out["kd"])
    (out["kd"].sum() + out["ks"].sum()).backward()
    assert float(field.encoder.embeddings.grad.abs().sum()) > 0
    with pytest.raises(ConfigError, match="aabb"):
        MaterialField(torch.zeros(2, 3))


@pytest.mark.gpu
def test_cuda_matches_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    enc = _small()
    x = torch.rand(500, 3)
    a = enc(x)
    a.sum().backward()
    ga = enc.embeddings.grad.clone()
    enc = enc.cuda()
    enc.embeddings.grad = None
    b = enc(x.cuda())
    b.sum().backward()
    torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(enc.embeddings.grad.cpu(), ga, rtol=1e-4, atol=1e-6)
