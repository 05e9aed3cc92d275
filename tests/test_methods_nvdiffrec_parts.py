"""Pieces of the nvdiffrec method that do not need a full training run."""

from __future__ import annotations

import math

import pytest
import torch

from meshlift.data.views import PosedViews
from meshlift.methods.engine import ViewSampler
from meshlift.methods.nvdiffrec.config import SurfaceConfig
from meshlift.methods.nvdiffrec.evaluate import to_world
from meshlift.methods.nvdiffrec.geometry import DMTetGeometry, init_sdf, occupancy_to_sdf, visual_hull_occupancy
from meshlift.structures.mesh import Mesh


def _icosphere(radius: float = 0.5, subdivisions: int = 3) -> Mesh:
    import trimesh

    s = trimesh.creation.icosphere(subdivisions=subdivisions, radius=radius)
    return Mesh(v_pos=torch.tensor(s.vertices, dtype=torch.float32), t_pos_idx=torch.tensor(s.faces, dtype=torch.int64))


def _mask_views(mesh: Mesh, n: int = 16, res: int = 48) -> PosedViews:
    from meshlift.cameras import cameras_on_sphere
    from meshlift.render import rasterize

    cams = cameras_on_sphere(n, 3.0, math.radians(40), res)
    w2c = cams.world_to_clip()
    v = mesh.v_pos
    pos = torch.einsum("vj,bij->bvi", torch.cat([v, torch.ones_like(v[:, :1])], -1), w2c)
    rast, _ = rasterize(pos.contiguous(), mesh.t_pos_idx.int(), (res, res), grad_db=False)
    masks = (rast[..., 3:4] > 0).float()
    return PosedViews(w2c, cams.camera_centers(), torch.zeros(n, res, res, 3), masks, torch.ones(3))


def test_visual_hull_of_a_sphere_contains_it_and_carves_the_far_points():
    views = _mask_views(_icosphere(0.5))
    g = torch.linspace(-1, 1, 21)
    pts = torch.stack(torch.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    occ = visual_hull_occupancy(pts, views)
    r = pts.norm(dim=-1)
    assert bool(occ[r < 0.45].all())
    assert float(occ[r > 0.75].float().mean()) < 0.05


def test_visual_hull_needs_masks():
    from meshlift.errors import DatasetError

    views = PosedViews(torch.eye(4)[None], torch.zeros(1, 3), torch.zeros(1, 4, 4, 3), None, torch.ones(3))
    with pytest.raises(DatasetError, match="masks"):
        visual_hull_occupancy(torch.zeros(2, 3), views)


def test_occupancy_to_sdf_is_a_signed_distance():
    n = 33
    g = torch.linspace(-1, 1, n)
    pts = torch.stack(torch.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    occ = pts.norm(dim=-1) < 0.5
    sdf = occupancy_to_sdf(occ, (n, n, n), spacing=2.0 / (n - 1))
    exact = pts.norm(dim=-1) - 0.5
    assert bool(((sdf < 0) == occ).all())
    assert float((sdf - exact).abs().max()) < 2.0 / (n - 1) * 1.01


def test_dmtet_geometry_sphere_init_gives_a_closed_mesh_with_gradients():
    cfg = SurfaceConfig(grid_res=16, mesh_scale=2.0, sdf_init="sphere")
    geom = DMTetGeometry(cfg, torch.device("cpu"))
    views = PosedViews(torch.eye(4)[None], torch.zeros(1, 3), torch.zeros(1, 4, 4, 3), None, torch.ones(3))
    init_sdf(geom, cfg, views, torch.Generator().manual_seed(0))
    mesh, _ = geom.get_mesh()
    assert mesh.num_faces > 100
    r = mesh.v_pos.detach().norm(dim=-1)
    assert float((r - 0.6).abs().max()) < 2.0 / 16
    edges = torch.sort(torch.cat([mesh.t_pos_idx[:, [0, 1]], mesh.t_pos_idx[:, [1, 2]], mesh.t_pos_idx[:, [2, 0]]]), 1)[0]
    _, counts = torch.unique(edges, dim=0, return_counts=True)
    assert bool((counts == 2).all())  # watertight
    mesh.v_pos.sum().backward()
    assert geom.sdf.grad is not None and float(geom.sdf.grad.abs().sum()) > 0
    assert geom.deform.grad is not None and float(geom.deform.grad.abs().sum()) > 0


def test_fixed_topology_laplacian_matches_mesh_ops():
    from meshlift.geometry.mesh_ops import laplacian_smoothness_loss
    from meshlift.methods.nvdiffrec.losses import make_laplacian_loss

    mesh = _icosphere(1.0, 2)
    x = torch.randn(mesh.num_vertices, 3, requires_grad=True)
    fn = make_laplacian_loss(mesh.num_vertices, mesh.t_pos_idx, torch.device("cpu"))
    a, b = fn(x), laplacian_smoothness_loss(x, mesh.t_pos_idx)
    assert float(a.detach()) == pytest.approx(float(b.detach()), rel=1e-5)
    ga, = torch.autograd.grad(a, x)
    gb, = torch.autograd.grad(b, x)
    assert torch.allclose(ga, gb, rtol=1e-4, atol=1e-7)


def test_to_world_inverts_the_normalisation():
    mesh = _icosphere(0.5, 1)
    s, t = 0.25, torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
    w2n = torch.eye(4, dtype=torch.float64)
    w2n[:3, :3] *= s
    w2n[:3, 3] = -s * t  # p_n = s (p_w - t)
    world = to_world(mesh, w2n)
    back = (world.v_pos.double() - t) * s
    assert torch.allclose(back.float(), mesh.v_pos, atol=1e-5)


def test_view_sampler_covers_every_view_before_repeating_and_resumes():
    s = ViewSampler(10, 3, seed=1)
    seen = torch.cat([s.next() for _ in range(3)])
    assert len(set(seen.tolist())) == 9
    state = s.state_dict()
    a = [s.next().tolist() for _ in range(4)]
    s2 = ViewSampler(10, 3, seed=99)
    s2.load_state_dict(state)
    assert [s2.next().tolist() for _ in range(4)] == a


class _FakeScene:
    """Duck-typed Scene: two 8x8 photos with a red background clutter and a mask on the left half."""

    def __init__(self, has_alpha: bool):
        from meshlift.cameras import cameras_on_sphere

        self.cameras = cameras_on_sphere(2, 3.0, math.radians(40), 8)
        self.background = "white"
        self.world_to_normalized = torch.eye(4, dtype=torch.float64) * 0.5
        self.world_to_normalized[3, 3] = 1.0
        self.image_has_alpha = [has_alpha, has_alpha]

    def image(self, i):
        img = torch.zeros(8, 8, 3)
        img[..., 0] = 1.0  # red clutter everywhere
        img[:, :4] = 0.5  # the object on the left half
        return img

    def mask(self, i):
        m = torch.zeros(8, 8, 1)
        m[:, :4] = 1.0
        return m


def test_scene_views_composite_separate_masks_and_map_cameras_to_the_normalised_frame():
    from meshlift.data.views import views_from_scene
    from meshlift.shading.color import srgb_to_linear

    v = views_from_scene(_FakeScene(has_alpha=False), [0, 1])
    assert torch.allclose(v.images[:, :, 4:], torch.ones(2, 8, 4, 3))  # clutter replaced by the white background
    assert torch.allclose(v.images[:, :, :4], srgb_to_linear(torch.tensor(0.5)).expand(2, 8, 4, 3))
    v2 = views_from_scene(_FakeScene(has_alpha=True), [0, 1])
    assert torch.allclose(v2.images[:, :, 4:, 0], torch.ones(2, 8, 4))  # alpha images: the reader composited
    assert torch.allclose(v2.images[:, :, 4:, 1], torch.zeros(2, 8, 4))
    scene = _FakeScene(False)
    centres = scene.cameras.camera_centers()
    assert torch.allclose(v.camera_pos, 0.5 * centres, atol=1e-5)
    # a world point and its normalised image project to the same pixel
    p_w = torch.tensor([0.3, -0.2, 0.1, 1.0])
    clip_w = scene.cameras.world_to_clip()[0] @ p_w
    p_n = torch.cat([0.5 * p_w[:3], torch.ones(1)])
    clip_n = v.world_to_clip[0] @ p_n
    assert torch.allclose(clip_w[:2] / clip_w[3], clip_n[:2] / clip_n[3], atol=1e-5)


def test_make_light_learned_fixed_file_and_errors(tmp_path):
    from meshlift.errors import ConfigError
    from meshlift.io.hdr import write_hdr
    from meshlift.methods.nvdiffrec.materials import make_light

    dev = torch.device("cpu")
    learned, trainable = make_light(SurfaceConfig(env_res=16), dev)
    assert trainable and learned.base.requires_grad and learned.base.shape == (6, 16, 16, 3)
    env = torch.ones(16, 32, 3) * torch.tensor([2.0, 1.0, 0.5])
    write_hdr(tmp_path / "env.hdr", env)
    fixed, trainable = make_light(SurfaceConfig(env_res=16, light=str(tmp_path / "env.hdr")), dev)
    assert not trainable and not fixed.base.requires_grad
    assert torch.allclose(fixed.base.mean((0, 1, 2)), torch.tensor([2.0, 1.0, 0.5]), rtol=0.02)
    with pytest.raises(ConfigError, match="reference environment"):
        make_light(SurfaceConfig(light="fixed"), dev)
    with pytest.raises(ConfigError, match="light"):
        make_light(SurfaceConfig(light=str(tmp_path / "missing.hdr")), dev)


@pytest.mark.parametrize("isosurface", ["dmtet", "flexicubes"])
def test_lr_deform_puts_the_deformation_in_its_own_group(isosurface):
    """``lr_deform`` (issue 30): 0 or equal to ``lr_pos`` keeps one group (old checkpoints load); otherwise the
    deformation alone steps at ``lr_deform`` and every other geometry parameter at ``lr_pos``."""
    from meshlift.methods.nvdiffrec.config import validate
    from meshlift.methods.nvdiffrec.geometry import make_geometry
    from meshlift.methods.nvdiffrec.passes import _geometry_groups

    cfg = validate(SurfaceConfig(isosurface=isosurface, grid_res=8, lr_pos=0.002))
    geom = make_geometry(cfg, torch.device("cpu"))
    for lr_deform in (0.0, 0.002):
        groups = _geometry_groups(geom, SurfaceConfig(lr_pos=0.002, lr_deform=lr_deform))
        assert len(groups) == 1 and groups[0]["lr"] == 0.002
        assert len(groups[0]["params"]) == len(list(geom.parameters()))
    groups = _geometry_groups(geom, SurfaceConfig(lr_pos=0.002, lr_deform=0.01))
    assert [g["lr"] for g in groups] == [0.002, 0.01]
    assert groups[1]["params"] == [geom.deform]
    assert {id(p) for p in groups[0]["params"]} == {id(p) for p in geom.parameters()} - {id(geom.deform)}
    # one Adam step with equal gradients: the deformation moves lr_deform, the SDF lr_pos
    from meshlift.methods.optim import Adam

    opt = Adam(groups)
    sdf0 = geom.sdf.detach().clone()
    for p in geom.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    assert torch.allclose(geom.deform.detach(), torch.full_like(geom.deform, -0.01), atol=1e-6)
    assert torch.allclose(geom.sdf.detach(), sdf0 - 0.002, atol=1e-6)
