"""meshlift.data.synthetic_scene: unmasked synthetic captures (object on a floor, environment background).

Small scenes (16-40 px, a box built here, a 16² light) so each test takes about a second on one core.
"""

from __future__ import annotations

import pytest
import torch

from meshlift.data.synthetic_scene import (EVAL_CLEARANCE, GroundConfig, OrbitConfig,
                                           make_synthetic_scene)
from meshlift.errors import ConfigError, MeshError
from meshlift.shading.color import linear_to_srgb
from meshlift.structures.mesh import Material, Mesh

# unit cube corners (index 4x + 2y + z), faces counter-clockwise seen from outside
_CUBE_F = [[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
           [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]]


def box_mesh(size=(0.6, 1.0, 0.8), offset=(3.0, -2.0, 1.0), material=None) -> Mesh:
    """A box in arbitrary units and position (the generator normalises it)."""
    c = torch.tensor([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], dtype=torch.float32)
    v = (c - 0.5) * torch.tensor(size) + torch.tensor(offset)
    return Mesh(v_pos=v, t_pos_idx=torch.tensor(_CUBE_F), material=material)


def _ray_box_hit(o: torch.Tensor, d: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """Slab test: which rays ``o + t d`` (t > 0) meet the box ``[lo, hi]``."""
    inv = 1.0 / torch.where(d.abs() < 1e-9, torch.full_like(d, 1e-9), d)
    t0, t1 = (lo - o) * inv, (hi - o) * inv
    tmin = torch.minimum(t0, t1).amax(-1)
    tmax = torch.maximum(t0, t1).amin(-1)
    return (tmax >= tmin.clamp_min(0.0))


def _ground_hit(o: torch.Tensor, d: torch.Tensor, half: float) -> torch.Tensor:
    t = -o[..., 1] / d[..., 1].clamp(max=-1e-9)
    p = o + t[..., None] * d
    return (d[..., 1] < -1e-6) & (p[..., 0].abs() <= half) & (p[..., 2].abs() <= half)


@pytest.fixture(scope="module")
def scene():
    return make_synthetic_scene(box_mesh(), n_train=5, n_test=2, resolution=(32, 40), seed=3, env_res=16)


def test_record_shapes_frame_and_split(scene):
    V = 7
    assert scene.images.shape == (V, 32, 40, 3) and scene.images.dtype == torch.float32
    assert float(scene.images.min()) >= 0.0 and float(scene.images.max()) <= 1.0
    assert scene.world_to_camera.shape == (V, 4, 4) and scene.K.shape == (V, 3, 3)
    assert scene.images_train.shape[0] == 5 and scene.images_test.shape[0] == 2
    tr, te = set(scene.splits["train"].tolist()), set(scene.splits["test"].tolist())
    assert not tr & te and tr | te == set(range(V))
    lo, hi = scene.gt_mesh.bbox()
    assert float((hi - lo).max()) == pytest.approx(2.0, abs=1e-5)  # longest side 2
    assert float(lo[1]) == pytest.approx(0.0, abs=1e-5)  # resting on the ground y = 0
    assert float(lo[0] + hi[0]) == pytest.approx(0.0, abs=1e-5) and float(lo[2] + hi[2]) == pytest.approx(0.0, abs=1e-5)
    # world_to_normalized maps the file's mesh onto gt_mesh
    v = box_mesh().v_pos.double()
    T = scene.world_to_normalized
    assert torch.allclose((v @ T[:3, :3].T + T[:3, 3]).float(), scene.gt_mesh.v_pos, atol=1e-5)
    w2c, K, imgs, names = scene.views("test")
    assert w2c.shape == (2, 4, 4) and K.shape == (2, 3, 3) and imgs.shape == (2, 32, 40, 3) and len(names) == 2
    assert 0 < scene.near < scene.far
    b = scene.scene_bounds
    assert bool((b[0] <= lo).all() and (b[1] >= hi).all())
    with pytest.raises(ConfigError, match="split"):
        scene.views("val")


def test_background_pixels_are_the_environment(scene):
    """A ray that misses floor and object shows the env radiance along it, through the same tone mapping."""
    _, dirs = scene.cameras.pixel_rays()
    o = scene.cameras.camera_centers()[:, None, None, :].expand_as(dirs)
    lo, hi = scene.gt_mesh.bbox()
    pad = 0.1 * (hi - lo).norm()
    sky = (dirs[..., 1] > 0.05) & ~_ray_box_hit(o, dirs, lo - pad, hi + pad)
    assert int(sky.sum()) > 100
    expected = linear_to_srgb((scene.environment.radiance(dirs[sky]) * scene.exposure).clamp(0, 1))
    got = scene.images[sky]
    assert torch.allclose(got, expected, atol=1e-5)
    assert float(got.std(0).mean()) > 0.02  # not flat
    assert float(got.mean()) > 0.2  # not black


def test_ground_below_object_in_every_view_and_object_in_view(scene):
    cams = scene.cameras
    assert bool((cams.camera_centers()[:, 1] > scene.ground_height).all())  # no camera below the ground
    lo, hi = scene.gt_mesh.bbox()
    pix, depth = cams.project(0.5 * (lo + hi))
    assert bool((depth > 0).all())
    assert bool(((pix[:, 0] > 0) & (pix[:, 0] < cams.width) & (pix[:, 1] > 0) & (pix[:, 1] < cams.height)).all())
    _, dirs = cams.pixel_rays()
    o = cams.camera_centers()[:, None, None, :].expand_as(dirs)
    half = 0.5 * scene.metadata["ground"].size * 2.0
    floor = _ground_hit(o, dirs, half) & (scene.object_coverage[..., 0] == 0)
    H = cams.height
    for v in range(len(cams)):  # the floor fills the lower image rows, under the object
        assert float(floor[v, H // 2:].float().mean()) > 0.5, f"view {v}"
        assert float(scene.object_coverage[v].float().sum()) > 10, f"view {v}: object not visible"


def test_occlusion_object_over_ground():
    """Red object, green floor, grey constant light: the object's pixels are red, the floor's green."""
    from meshlift.shading.light import EnvironmentLight

    red = Material(kd=torch.tensor([[[0.8, 0.05, 0.05]]]), ks=torch.tensor([[[0.0, 0.9, 0.0]]]))
    sc = make_synthetic_scene(box_mesh(material=red), n_train=2, n_test=1, resolution=32, seed=1,
                              ground=GroundConfig(texture="constant", color=(0.05, 0.6, 0.05)),
                              environment=EnvironmentLight.constant(16, 0.8, trainable=False))
    img, cov = sc.images, sc.object_coverage[..., 0].float()
    _, dirs = sc.cameras.pixel_rays()
    o = sc.cameras.camera_centers()[:, None, None, :].expand_as(dirs)
    behind = _ground_hit(o, dirs, 15.0)
    obj = (cov > 0.999) & behind  # pixels where the object stands in front of the floor
    assert int(obj.sum()) > 20
    assert bool((img[obj][:, 0] > img[obj][:, 1] + 0.2).all())
    flo = (cov == 0) & behind & (dirs[..., 1] < -0.2)  # away from the floor's far edge (antialiased)
    assert int(flo.sum()) > 20
    assert bool((img[flo][:, 1] > img[flo][:, 0] + 0.2).all())
    sky = (cov == 0) & (dirs[..., 1] > 0.05)
    assert torch.allclose(img[sky], linear_to_srgb(torch.tensor(0.8)).expand(int(sky.sum()), 3), atol=1e-4)


def test_deterministic_with_seed():
    kw = dict(n_train=2, n_test=1, resolution=16, env_res=16)
    a = make_synthetic_scene(box_mesh(), seed=5, **kw)
    b = make_synthetic_scene(box_mesh(), seed=5, **kw)
    c = make_synthetic_scene(box_mesh(), seed=6, **kw)
    assert torch.equal(a.images, b.images) and torch.equal(a.world_to_camera, b.world_to_camera)
    assert not torch.equal(a.world_to_camera, c.world_to_camera)
    assert not torch.equal(a.images, c.images)


def test_test_views_interleaved_on_the_rings():
    from meshlift.data.synthetic_scene import phone_orbit_cameras

    n = 16
    cams = phone_orbit_cameras(n, torch.tensor([0.0, 0.5, 0.0]), OrbitConfig(), (16, 16), 0, 0.01, 100.0)
    el = torch.rad2deg(torch.asin((cams.camera_centers()[:, 1] - 0.5) / (cams.camera_centers() - torch.tensor(
        [0.0, 0.5, 0.0])).norm(dim=-1)))
    assert bool((el[:8] - 15).abs().max() < 3.5) and bool((el[8:] - 35).abs().max() < 3.5)
    sc_test = ((torch.arange(2) + 0.5) * n / 2).floor().long()
    assert sc_test.tolist() == [4, 12]  # one held-out view per ring


def test_eval_box_contains_object_and_excludes_ground(scene):
    lo, hi = scene.eval_box
    v = scene.gt_mesh.v_pos
    assert float(lo[1]) == pytest.approx(scene.ground_height + EVAL_CLEARANCE)
    assert scene.ground_height < float(lo[1])
    # the whole object except the clearance slab at its base lies in the box
    assert bool(((v[:, [0, 2]] >= lo[[0, 2]]) & (v[:, [0, 2]] <= hi[[0, 2]])).all()) and bool((v[:, 1] <= hi[1]).all())
    above = v[:, 1] >= lo[1]
    assert bool(((v[above] >= lo) & (v[above] <= hi)).all())
    from meshlift.mesh.crop import crop_mesh

    assert crop_mesh(scene.ground_mesh, lo, hi, cap=False)[0].num_faces == 0  # the floor is cut away
    assert crop_mesh(scene.gt_mesh, lo, hi, cap=False)[0].num_faces > 0.9 * scene.gt_mesh.num_faces


@pytest.mark.parametrize("kwargs, err, name", [
    (dict(mesh_or_path=Mesh(v_pos=torch.zeros(0, 3), t_pos_idx=torch.zeros(0, 3, dtype=torch.long))), MeshError,
     "mesh_or_path"),
    (dict(n_train=1), ConfigError, "n_train"),
    (dict(n_test=0), ConfigError, "n_test"),
    (dict(resolution=4), ConfigError, "resolution"),
    (dict(resolution=(32, 7)), ConfigError, "resolution"),
    (dict(orbit=OrbitConfig(elevations_deg=(-10.0,))), ConfigError, "orbit"),
    (dict(orbit=OrbitConfig(distance=(1.0, 1.2))), ConfigError, "orbit"),
    (dict(ground=GroundConfig(texture="marble")), ConfigError, "texture"),
    (dict(environment=42), ConfigError, "environment"),
])
def test_bad_input_raises_naming_the_argument(kwargs, err, name):
    args = dict(mesh_or_path=box_mesh(), n_train=2, n_test=1, resolution=16, env_res=16)
    args.update(kwargs)
    with pytest.raises(err, match=name):
        make_synthetic_scene(args.pop("mesh_or_path"), **args)


def test_spot_textured_views_feed_splat_views(dataset):
    from meshlift.methods.gaussians.views import STORE_DTYPE, SplatViews

    sc = make_synthetic_scene(dataset("spot") / "spot.obj", n_train=2, n_test=1, resolution=32, env_res=16)
    assert bool(torch.isfinite(sc.images).all())
    v = sc.views("train")
    sv = SplatViews(v.world_to_camera, v.K, v.images.to(STORE_DTYPE), None, v.names)
    b = sv.batch(torch.tensor([0, 1]), torch.device("cpu"))
    assert torch.allclose(b.targets(torch.zeros(3)), sc.images_train, atol=2e-3)
