"""Tone-mapped log-L1 loss: Triton kernel (meshlift.kernels.loss_triton) against its torch twin
(``shading.color.tonemapped_l1``'s torch path, which is ``methods.nvdiffrec.losses.tonemapped_log_l1`` of the
masked images), forward and backward, plus a float64 gradcheck of the twin. Without a CUDA device the kernel
runs under the Triton interpreter (``TRITON_INTERPRET=1``, set before triton is imported), at small sizes.
float32 tolerances: loss ``rtol 1e-5`` (block partial sums in another order); gradient ``rtol 1e-4,
atol 1e-4 · max|g|`` (``exp2(log2(u) / 2.4)`` for the power).
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from meshlift.errors import ImageError  # noqa: E402
from meshlift.methods.nvdiffrec.losses import tonemapped_log_l1  # noqa: E402
from meshlift.shading.color import tonemapped_l1  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _images(shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    pred = torch.rand(*shape, 3, generator=g) * 3.0 - 0.3  # some negative (clamped) values
    pred.view(-1)[:7] = torch.tensor([0.0, 1e-4, 0.003, 70000.0, -1.0, 2.0, 0.5])  # knees and clamps
    target = torch.rand(*shape, 3, generator=g) * 2.0
    target.view(-1)[5:7] = pred.view(-1)[5:7]  # equal values: sign(0) = 0
    mask = (torch.rand(*shape, 1, generator=g) > 0.3).to(torch.float32) * torch.rand(*shape, 1, generator=g)
    return [t.to(DEV, dtype) for t in (pred, target, mask)]


def _run(backend, pred, target, mask, grad):
    p = pred.clone().requires_grad_()
    loss = tonemapped_l1(p, target, mask, backend=backend)
    (g,) = torch.autograd.grad(loss * grad, [p])
    return loss.detach(), g


@pytest.mark.parametrize("shape", [(2, 9, 11), (1, 40, 40), (3, 1, 1)])
@pytest.mark.parametrize("masked", [True, False])
def test_tonemapped_l1_matches_torch(shape, masked):
    pred, target, mask = _images(shape, sum(shape), torch.float32)
    mask = mask if masked else None
    a, ga = _run("torch", pred, target, mask, 1.7)
    b, gb = _run("triton", pred, target, mask, 1.7)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)
    scale = float(ga.abs().max()) or 1.0
    torch.testing.assert_close(gb, ga, rtol=1e-4, atol=1e-4 * scale)


def test_torch_path_is_the_nvdiffrec_loss():
    pred, target, mask = _images((2, 5, 6), 1)
    torch.testing.assert_close(tonemapped_l1(pred, target, mask, backend="torch"),
                               tonemapped_log_l1(pred * mask, target * mask), rtol=0, atol=0)


def test_twin_gradcheck():
    pred, target, mask = _images((1, 3, 4), 2, torch.float64)
    pred = pred[..., :].clamp(0.01, 60000.0).requires_grad_()  # away from the clamps' kinks
    assert torch.autograd.gradcheck(lambda p: tonemapped_l1(p, target, mask, backend="torch"), [pred],
                                    eps=1e-7, atol=1e-6)


def test_bad_shapes_raise():
    pred, target, mask = _images((1, 3, 4), 3)
    with pytest.raises(ImageError, match="target"):
        tonemapped_l1(pred, target[:, :2])
    with pytest.raises(ImageError, match="mask"):
        tonemapped_l1(pred, target, mask[..., 0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_tonemapped_l1_gpu_parity_at_preset_size():
    pred, target, mask = _images((8, 512, 512), 4)
    a, ga = _run("torch", pred, target, mask, 1.0)
    b, gb = _run("triton", pred, target, mask, 1.0)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(gb, ga, rtol=1e-4, atol=1e-4 * float(ga.abs().max()))
