"""Per-image exposure compensation (methods/gaussians/exposure.py): the formula and its gradients against a
float64 reference, the trainer learning known per-view gains, the checkpoint round trip, off by default."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from _gaussian_problem import tiny_problem
from meshlift.errors import ConfigError
from meshlift.methods.gaussians.config import GaussiansConfig, apply_dict
from meshlift.methods.gaussians.exposure import ExposureCompensation
from meshlift.methods.gaussians.presets import get_preset
from meshlift.methods.gaussians.trainer import GaussianTrainer

CPU = torch.device("cpu")


def test_apply_is_the_identity_at_start_and_matches_a_float64_reference():
    ec = ExposureCompensation(4, 1e-2, CPU)
    img = torch.rand(2, 5, 6, 3)
    idx = torch.tensor([3, 1])
    full, bg = torch.ones(2, 5, 6, 1), torch.zeros(3)  # full coverage: exp(a) * image + b
    torch.testing.assert_close(ec.apply(img, idx, full, bg), img)
    with torch.no_grad():
        ec.params.copy_(torch.randn(4, 6) * 0.2)
    out = ec.apply(img, idx, full, bg)
    w = torch.randn_like(out)
    (out * w).sum().backward()
    p64 = ec.params.detach().double().requires_grad_(True)
    ref = img.double() * torch.exp(p64[idx][:, None, None, :3]) + p64[idx][:, None, None, 3:]
    (ref * w.double()).sum().backward()
    torch.testing.assert_close(out.double(), ref.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ec.params.grad.double(), p64.grad, rtol=1e-5, atol=1e-5)
    assert float(ec.params.grad[[0, 2]].abs().sum()) == 0.0  # images not in the batch get no gradient
    # float64 gradcheck of the same map
    assert torch.autograd.gradcheck(
        lambda p, x: x * torch.exp(p[idx][:, None, None, :3]) + p[idx][:, None, None, 3:],
        (p64.detach().clone().requires_grad_(True), img[:, :2, :2].double().requires_grad_(True)))


def test_only_the_gaussians_colour_is_compensated_and_the_shared_part_is_removed():
    """With coverage and background the map acts on the colour, not on the background under it; a step removes
    the parameters' mean over the photos (a shared gain would trade with the Gaussians' colours)."""
    ec = ExposureCompensation(3, 0.1, CPU)
    with torch.no_grad():
        ec.params.copy_(torch.tensor([[0.2, 0.1, -0.1, 0.05, 0.0, 0.02]] * 3))
    colour = torch.rand(1, 4, 4, 3)
    alpha = torch.rand(1, 4, 4, 1)
    bg = torch.tensor([1.0, 0.5, 0.0])
    img = colour * alpha + (1 - alpha) * bg  # premultiplied colour composited on bg
    out = ec.apply(img, torch.tensor([1]), alpha, bg)
    gain = torch.exp(torch.tensor([0.2, 0.1, -0.1]))
    ref = colour * alpha * gain + alpha * torch.tensor([0.05, 0.0, 0.02]) + (1 - alpha) * bg
    torch.testing.assert_close(out, ref)
    full_bg = ec.apply(bg.expand(1, 4, 4, 3).clone(), torch.tensor([0]), torch.zeros(1, 4, 4, 1), bg)
    torch.testing.assert_close(full_bg, bg.expand(1, 4, 4, 3))  # an empty render stays the background
    out.sum().backward()
    ec.step(0.1)
    torch.testing.assert_close(ec.params.detach().mean(0), torch.zeros(6), atol=1e-6, rtol=0)


def test_bad_arguments_raise():
    with pytest.raises(ConfigError, match="at least one training image"):
        ExposureCompensation(0, 1e-3, CPU)
    with pytest.raises(ConfigError, match="lr_exposure"):
        ExposureCompensation(3, 0.0, CPU)
    with pytest.raises(ConfigError, match="lr_exposure"):
        apply_dict(GaussiansConfig(), {"lr_exposure": "-1"})


def _cfg(**kw) -> GaussiansConfig:
    base = dataclasses.replace(get_preset("gaussians_tiny"), steps=160, num_random=80, densify=False,
                               sh_degree=0, checkpoint_every=0, preview_every=0, background="black")
    return dataclasses.replace(base, **kw)


def test_the_trainer_learns_each_photos_gain():
    """The training photos of a tiny scene, every other one at 0.7x and the rest at 1.3x exposure (black
    background, so the whole image scales): the learned gains separate the two groups, their shared part stays
    with the Gaussians (mean log-gain 0), and the state survives the checkpoint."""
    pb = tiny_problem(size=16, n_train=8, n_test=2)
    gains = torch.tensor([0.7 if i % 2 == 0 else 1.3 for i in range(8)])
    imgs = (pb.train.images.float() * gains[:, None, None, None]).clamp(0, 1)
    pb = dataclasses.replace(pb, train=dataclasses.replace(pb.train, images=imgs.to(pb.train.images.dtype)))
    tr = GaussianTrainer(_cfg(exposure_compensation=True, lr_exposure=0.02, steps=400), pb, CPU)
    tr.init_params()
    tr.train()
    learned = tr.exposure.gains().mean(-1)
    low, high = learned[0::2].mean(), learned[1::2].mean()
    # the true ratio 1.3 / 0.7 = 1.86 (bright pixels clipped at 1 make it smaller); without the model: 1.0
    assert 1.45 < float(high / low) < 2.2, learned
    ck = tr.payload()
    assert ck["exposure"]["params"].shape == (8, 6)
    tr2 = GaussianTrainer(_cfg(exposure_compensation=True, lr_exposure=0.02), pb, CPU)
    tr2.load_payload(ck)
    torch.testing.assert_close(tr2.exposure.params.detach(), tr.exposure.params.detach())
    assert float(tr.exposure.params.detach()[:, :3].mean().abs()) < 1e-5  # the shared gain stays with the Gaussians
    fewer = dataclasses.replace(pb, train=dataclasses.replace(pb.train, world_to_camera=pb.train.world_to_camera[:6],
                                                                K=pb.train.K[:6], images=pb.train.images[:6],
                                                                alpha=pb.train.alpha[:6], names=pb.train.names[:6]))
    with pytest.raises(ConfigError, match="for 8 training images, this run has 6"):
        GaussianTrainer(_cfg(exposure_compensation=True), fewer, CPU).load_payload(ck)
    # off (the default): no exposure state, the checkpoint says so
    off = GaussianTrainer(_cfg(steps=2), pb, CPU)
    off.init_params()
    off.train()
    assert off.exposure is None and off.payload()["exposure"] is None
    assert GaussiansConfig().exposure_compensation is False
