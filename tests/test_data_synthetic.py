"""data.synthetic: normalisation, cameras on a sphere / orbit, on-the-fly renders of a gt mesh."""

from __future__ import annotations

import math

import pytest
import torch

from meshlift.errors import ConfigError, DatasetError, MeshError
from meshlift.data.demo_object import make_demo_object
from meshlift.data.synthetic import (
    SyntheticDataset,
    load_normalized_mesh,
    normalization_transform,
)
from meshlift.geometry.similarity import transform_mesh
from meshlift.structures.mesh import Mesh


def _importable(*modules: str) -> bool:
    import importlib

    try:
        for m in modules:
            importlib.import_module(m)
    except ImportError:
        return False
    return True


_CAN_RENDER = _importable("meshlift.renderers.mesh_pbr", "meshlift.shading.light", "meshlift.shading.normals")
needs_render = pytest.mark.skipif(not _CAN_RENDER, reason="meshlift.shading light/normals not built yet")
needs_procedural = pytest.mark.skipif(
    not (_CAN_RENDER and _importable("meshlift.shading.procedural")), reason="meshlift.shading.procedural not built yet"
)


def _light():
    """A small fixed light with some directional variation (sky brighter than ground)."""
    from meshlift.shading.light import EnvironmentLight

    lat = torch.linspace(1.5, 0.2, 16)[:, None, None].expand(16, 32, 3).contiguous()
    return EnvironmentLight.from_latlong(lat, 16, trainable=False, lut_resolution=64)


def _world_ring() -> Mesh:
    """The demo ring moved into arbitrary world units (scaled by 5, shifted)."""
    ring = make_demo_object(resolution=32, texture_resolution=32)
    T = torch.eye(4, dtype=torch.float64)
    T[:3, :3] *= 5.0
    T[:3, 3] = torch.tensor([10.0, -3.0, 2.0], dtype=torch.float64)
    return transform_mesh(ring, T)


class _NoLight:
    """Placeholder light for tests that never render (rendering is lazy)."""


def test_normalization_transform_unit_cube():
    mesh = _world_ring()
    T = normalization_transform(mesh)
    assert T.dtype == torch.float64 and T.shape == (4, 4)
    n = transform_mesh(mesh, T)
    lo, hi = n.bbox()
    assert float((hi - lo).max()) == pytest.approx(2.0, abs=1e-5)
    torch.testing.assert_close(((lo + hi) / 2).double(), torch.zeros(3, dtype=torch.float64), atol=1e-5, rtol=0)
    assert float(n.v_pos.abs().max()) <= 1.0 + 1e-5
    # inverse maps back to the world units
    back = transform_mesh(n, torch.linalg.inv(T))
    torch.testing.assert_close(back.v_pos, mesh.v_pos, atol=1e-4, rtol=0)
    # faces/UVs/material shared, input not modified
    assert n.t_pos_idx is mesh.t_pos_idx and n.material is mesh.material
    with pytest.raises(MeshError, match="mirror"):
        transform_mesh(mesh, torch.diag(torch.tensor([-1.0, 1.0, 1.0, 1.0])))
    with pytest.raises(MeshError, match="same point"):
        normalization_transform(Mesh(torch.ones(3, 3), torch.tensor([[0, 1, 2]])))


def test_load_normalized_mesh_spot(dataset):
    path = dataset("spot") / "spot.obj"
    mesh, T = load_normalized_mesh(path)
    assert mesh.num_faces == 5856 and mesh.v_tex is not None and mesh.material is not None
    lo, hi = mesh.bbox()
    assert float((hi - lo).max()) == pytest.approx(2.0, abs=1e-5)
    # spot.mtl is nvdiffrec's `bsdf pbr`: Ks = (occlusion, roughness, metallic) = (0, 0.25, 0)
    ks = mesh.material.ks.reshape(-1, 3)[0]
    torch.testing.assert_close(ks, torch.tensor([0.0, 0.25, 0.0]))
    # README: bounding box ~[-0.47,-0.74,-0.67]..[0.47,0.95,1.05] -> longest side z (1.72)
    assert float(T[0, 0]) == pytest.approx(2.0 / 1.718, rel=0.01)
    torch.testing.assert_close(mesh.extras["world_to_normalized"], T)


def test_cameras_train_random_test_orbit():
    mesh = _world_ring()
    ds = SyntheticDataset(mesh, light=_NoLight(), n_train=10, n_test=6, resolution=(24, 32), radius=3.0,
                              fov=math.radians(45), test_elevation=0.4, seed=3)
    assert len(ds) == 16 and ds.resolution == (24, 32)
    assert ds.splits["train"].tolist() == list(range(10)) and ds.splits["test"].tolist() == list(range(10, 16))
    cn = ds.cameras_normalized
    centres = cn.camera_centers().double()
    torch.testing.assert_close(centres.norm(dim=1), torch.full((16,), 3.0, dtype=torch.float64), atol=1e-5, rtol=0)
    # every camera looks at the origin
    fwd = cn.forward_directions().double()
    torch.testing.assert_close((fwd * -centres / 3.0).sum(1), torch.ones(16, dtype=torch.float64), atol=1e-5, rtol=0)
    # test orbit: constant elevation, evenly spaced azimuths
    test_c = centres[10:]
    torch.testing.assert_close(test_c[:, 1] / 3.0, torch.full((6,), math.sin(0.4), dtype=torch.float64),
                               atol=1e-5, rtol=0)
    az = torch.atan2(test_c[:, 0], test_c[:, 2])
    steps = torch.remainder(az[1:] - az[:-1], 2 * math.pi)
    torch.testing.assert_close(steps, torch.full((5,), 2 * math.pi / 6, dtype=torch.float64), atol=1e-5, rtol=0)
    # the vertical field of view is fov: fy = H / (2 tan(fov/2)), principal point centred
    assert float(cn.fy[0]) == pytest.approx(24 / (2 * math.tan(math.radians(22.5))), rel=1e-5)
    assert float(cn.cx[0]) == 16.0 and float(cn.cy[0]) == 12.0
    # same seed -> same cameras, other seed -> other training cameras, same test orbit
    again = SyntheticDataset(mesh, light=_NoLight(), n_train=10, n_test=6, resolution=(24, 32), seed=3)
    other = SyntheticDataset(mesh, light=_NoLight(), n_train=10, n_test=6, resolution=(24, 32), seed=4)
    assert torch.equal(again.cameras_normalized.world_to_camera, cn.world_to_camera)
    assert not torch.allclose(other.cameras_normalized.world_to_camera[:10], cn.world_to_camera[:10])
    torch.testing.assert_close(other.cameras_normalized.world_to_camera[10:], cn.world_to_camera[10:])


def test_world_cameras_see_world_mesh_like_normalised_cameras():
    mesh = _world_ring()
    ds = SyntheticDataset(mesh, light=_NoLight(), n_train=5, n_test=3, resolution=32)
    pix_w, z_w = ds.cameras.project(mesh.v_pos[::17])
    pix_n, z_n = ds.cameras_normalized.project(ds.mesh_normalized.v_pos[::17])
    torch.testing.assert_close(pix_w, pix_n, atol=2e-3, rtol=0)
    s = float(ds.world_to_normalized[0, 0])
    torch.testing.assert_close(z_w * s, z_n, atol=1e-4, rtol=0)
    assert ds.gt_mesh is mesh
    # world cameras sit at radius / s from the world bounding-box centre
    lo, hi = mesh.bbox()
    dist = (ds.cameras.camera_centers() - (lo + hi) / 2).norm(dim=1)
    torch.testing.assert_close(dist, torch.full((8,), 3.0 / s), atol=1e-4, rtol=0)


def test_dataset_argument_errors():
    mesh = _world_ring()
    with pytest.raises(DatasetError, match="n_train"):
        SyntheticDataset(mesh, light=_NoLight(), n_train=0)
    with pytest.raises(DatasetError, match="background"):
        SyntheticDataset(mesh, light=_NoLight(), background="pink")
    with pytest.raises(DatasetError, match="radius"):
        SyntheticDataset(mesh, light=_NoLight(), radius=1.0)
    with pytest.raises(MeshError, match="no faces"):
        SyntheticDataset(Mesh(torch.zeros(3, 3), torch.zeros(0, 3, dtype=torch.long)), light=_NoLight())
    ds = SyntheticDataset(mesh, light=_NoLight(), n_train=2, n_test=1, resolution=8)
    with pytest.raises(DatasetError, match="split"):
        ds.views("val")
    with pytest.raises(IndexError):
        ds.load_batch([5])


@needs_render
def test_missing_env_file_is_a_config_error(tmp_path):
    from meshlift.data.synthetic import make_synthetic_light

    with pytest.raises(ConfigError, match="hdr"):
        make_synthetic_light(tmp_path / "nope.hdr")


@needs_render
def test_renders_match_renderer_and_composite_consistently():
    from meshlift.renderers.mesh_pbr import render_mesh
    from meshlift.shading.color import linear_to_srgb

    mesh = _world_ring()
    light = _light()
    light.build_mips()
    ds = SyntheticDataset(mesh, light=light, n_train=3, n_test=2, resolution=32, spp=1)
    assert ds.light is light
    b = ds.load_batch([0, 4])
    assert b["rgb"].shape == (2, 32, 32, 3) and b["mask"].shape == (2, 32, 32, 1)
    assert b["rgb_linear"].shape == (2, 32, 32, 3)
    m = b["mask"]
    # the object is in view and fits in the frame (background all around the border)
    assert 0.05 < float(m.mean()) < 0.8
    assert float(m[:, 0].max()) == 0.0 and float(m[:, -1].max()) == 0.0
    # straight colour x mask reproduces the renderer's output over black
    cams = ds.cameras_normalized[[0, 4]]
    ref = render_mesh(ds.mesh_normalized, cams.world_to_clip(), cams.camera_centers(), (32, 32), light=ds.light)
    torch.testing.assert_close(b["rgb_linear"] * m, ref["shaded"], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(m, ref["alpha"].clamp(0, 1), atol=1e-4, rtol=0)
    # rgb is the sRGB composite on white
    torch.testing.assert_close(b["rgb"], linear_to_srgb((b["rgb_linear"] * m + (1 - m)).clamp(0, 1)))
    assert float(b["rgb"][:, 0, 0].min()) == pytest.approx(1.0)
    # views(): normalised-frame matrices and linear images for the training loop
    v = ds.views("test")
    assert v["images"].shape == (2, 32, 32, 3) and v["masks"].shape == (2, 32, 32, 1)
    torch.testing.assert_close(v["world_to_clip"], ds.cameras_normalized[[3, 4]].world_to_clip())
    torch.testing.assert_close(ds.image(4), b["rgb"][1])


@needs_procedural
@pytest.mark.gpu
def test_reference_renders_on_cuda_match_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    mesh = _world_ring()
    kw = dict(n_train=2, n_test=1, resolution=48, spp=1, env_res=16)
    cpu = SyntheticDataset(mesh, **kw).load_batch([0, 2], "cpu")
    gpu = SyntheticDataset(mesh, device="cuda", **kw).load_batch([0, 2], "cpu")
    assert float((gpu["mask"] - cpu["mask"]).abs().mean()) < 1e-3
    assert float((gpu["rgb"] - cpu["rgb"]).abs().mean()) < 5e-3


@needs_procedural
def test_default_procedural_light_renders():
    ds = SyntheticDataset(_world_ring(), n_train=1, n_test=1, resolution=24, spp=1, env_res=16)
    assert not ds.light.base.requires_grad
    b = ds.load_batch([0, 1])
    m = b["mask"] > 0.99
    lit = b["rgb_linear"][m.expand_as(b["rgb_linear"])]
    assert float(lit.mean()) > 0.01 and bool(torch.isfinite(b["rgb_linear"]).all())
