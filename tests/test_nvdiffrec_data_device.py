"""``data_device``: where the surface method keeps its training images (``auto`` resolution, errors)."""

import dataclasses
import types

import pytest
import torch

from meshlift.errors import ConfigError
from meshlift.methods.nvdiffrec import reconstruct as R
from meshlift.methods.nvdiffrec.config import SurfaceConfig


def _fake_gpu(monkeypatch, total_bytes):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(total_memory=total_bytes))


def test_auto_is_the_cpu_for_a_cpu_run():
    assert R.training_images_device(SurfaceConfig(), torch.device("cpu"), 10).type == "cpu"


def test_auto_keeps_images_on_the_gpu_only_when_they_fit_the_share(monkeypatch):
    _fake_gpu(monkeypatch, 8_000)
    cfg = SurfaceConfig()
    assert cfg.data_device == "auto"
    assert R.training_images_device(cfg, torch.device("cuda"), 1_000) == torch.device("cuda")
    assert R.training_images_device(cfg, torch.device("cuda"), 1_001).type == "cpu"
    assert R.training_images_device(dataclasses.replace(cfg, data_device="cpu"), torch.device("cuda"), 1).type == "cpu"


def test_estimate_counts_the_images_only_where_they_are_kept(monkeypatch):
    cfg = SurfaceConfig(batch=1, spp=1)
    pixels_only = R.estimate_training_bytes(cfg, 10, 8, 8, torch.device("cpu"))
    assert pixels_only == 8 * 8 * 40 * 4
    _fake_gpu(monkeypatch, 10**12)
    assert R.estimate_training_bytes(cfg, 10, 8, 8, torch.device("cuda")) == pixels_only + 10 * 8 * 8 * 16


def test_unknown_data_device_is_a_config_error(monkeypatch):
    with pytest.raises(ConfigError, match="data_device"):
        R.training_images_device(SurfaceConfig(data_device="gpu0"), torch.device("cpu"), 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="no CUDA device"):
        R.training_images_device(SurfaceConfig(data_device="cuda"), torch.device("cpu"), 1)


def test_place_moves_only_the_training_images():
    from meshlift.data.views import PosedViews, ProblemData

    v = PosedViews(world_to_clip=torch.eye(4)[None], camera_pos=torch.zeros(1, 3), images=torch.rand(1, 2, 2, 3),
                   masks=torch.ones(1, 2, 2, 1), background=torch.ones(3))
    data = ProblemData(train=v, test=v, world_to_normalized=torch.eye(4, dtype=torch.float64))
    out = R._place_training_images(data, SurfaceConfig(data_device="cpu"), torch.device("cpu"))
    assert out is data  # already where it belongs: nothing copied
    assert torch.equal(out.train.images, v.images)
