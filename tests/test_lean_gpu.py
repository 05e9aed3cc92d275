"""GPU checks of the launch-lean training step (run on a CUDA machine: ``pytest -m gpu tests/test_lean_gpu.py``)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
def test_batch_through_pinned_memory_equals_a_plain_copy():
    from meshlift.data.views import PosedViews

    g = torch.Generator().manual_seed(0)
    views = PosedViews(world_to_clip=torch.rand(6, 4, 4, generator=g), camera_pos=torch.rand(6, 3, generator=g),
                       images=torch.rand(6, 8, 9, 3, generator=g), masks=torch.rand(6, 8, 9, 1, generator=g),
                       background=torch.ones(3), straight=True)
    idx = torch.tensor([4, 1, 3])
    b = views.batch(idx, torch.device("cuda"))
    torch.cuda.synchronize()
    ref = views.batch(idx, torch.device("cpu"))
    for name in ("world_to_clip", "camera_pos", "images", "masks", "background"):
        got, want = getattr(b, name), getattr(ref, name)
        assert got.is_cuda and torch.equal(got.cpu(), want), name
    assert torch.equal(b.targets().cpu(), ref.targets())


@cuda
def test_material_field_unchunked_on_triton_equals_chunked_torch():
    from meshlift.kernels import triton_importable as triton_available
    from meshlift.shading.material_field import MaterialField

    if not triton_available():
        pytest.skip("needs triton")
    torch.manual_seed(0)
    f = MaterialField(torch.tensor([[-1.0] * 3, [1.0] * 3]), n_levels=8, log2_hashmap_size=14, desired_resolution=256,
                      chunk_size=1000).cuda()
    x = torch.rand(5000, 3, device="cuda") * 2 - 1
    fast = f(x)["kd"]  # auto backend: Triton, one call
    f.encoder.backend = "torch"
    ref = f(x)["kd"]  # PyTorch encoding, 5 chunks
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-6)
