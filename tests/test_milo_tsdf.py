"""MILo's ``extract=tsdf`` path: surface-aligned Gaussians, fusion of their depth, the scene and object meshes.

Micro runs on tiny scenes (CPU, seconds): the object path (a masked sphere), a capture path (the unmasked
synthetic scene: floor + environment, region of interest found from the cameras), and the fusion of the
*true* depth of the synthetic scene scored in the object's box (the generator, the fusion, the region of
interest and the evaluation box together, with no training noise).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from meshlift.errors import ConfigError, MeshError
from meshlift.methods.engine import Monitor
from meshlift.methods.gaussians.surface import SurfaceRegularizer, depth_normal_loss, flatten_loss
from meshlift.methods.milo.config import apply_dict
from meshlift.methods.milo.presets import get_preset
from meshlift.methods.milo.reconstruct import reconstruct

from _milo_scene import sphere_mesh, sphere_problem


def _tiny(**kw):
    base = dataclasses.replace(get_preset("milo_tiny"), steps=30, num_random=300, densify_refine_start=5,
                               densify_refine_every=5, densify_refine_stop=15, reinit_step=0, sampling_step=0,
                               prune_step=0, depth_normal_start=10, mesh_start=1000, texture_res=32,
                               eval_samples=3000, checkpoint_every=0, preview_every=15, render_test=True,
                               tsdf_resolution=32, scene_resolution=16, max_asset_faces=3000)
    return dataclasses.replace(base, **kw)


def test_config_fields_and_validation():
    cfg = get_preset("verylowres")
    assert cfg.extract == "tsdf" and cfg.surface_depth == "median"
    assert cfg.tsdf_unseen == "inside" and cfg.fill_hole_edges == 64  # the measured best (docs/results.md, "Holes")
    for field, bad in (("extract", "poisson"), ("surface_depth", "mean"), ("region", "room"),
                       ("tsdf_resolution", "300"), ("scene_resolution", "8"), ("tsdf_trunc_voxels", "0.5"),
                       ("ref_scene", "table"), ("bbox", "1,2,3"), ("bbox", "0,0,0,1,1,x"), ("tsdf_unseen", "outside"),
                       ("fill_hole_edges", "-1"), ("scene_contraction", "square")):
        with pytest.raises(ConfigError, match=field if field != "bbox" else "--bbox|bbox"):
            apply_dict(cfg, {field: bad})
    ok = apply_dict(cfg, {"bbox": "-1,-1,0,1,1,2", "extract": "delaunay", "tsdf_resolution": "1024"})
    assert ok.bbox == "-1,-1,0,1,1,2" and ok.extract == "delaunay" and ok.tsdf_resolution == 1024
    assert cfg.scene_contraction == "inverse" and apply_dict(cfg, {"scene_contraction": "log"}).scene_contraction == "log"


def test_flatten_and_depth_normal_terms():
    log_scales = torch.log(torch.tensor([[0.1, 0.2, 0.01], [0.3, 0.05, 0.4]]))
    assert math.isclose(float(flatten_loss(log_scales, 2.0)), (0.01 + 0.05) / 2 / 2.0, rel_tol=1e-6)
    assert float(flatten_loss(torch.zeros(0, 3), 1.0)) == 0.0
    # a tilted plane's depth and its true normal: zero loss; a wrong normal: positive
    W, H = 20, 16
    K = torch.tensor([[[20.0, 0, W / 2], [0, 20.0, H / 2], [0, 0, 1]]])
    w2c = torch.eye(4)[None]
    jj = (torch.arange(W) + 0.5 - W / 2) / 20.0
    depth = (2.0 / (1 - 0.5 * jj))[None, None, :, None].expand(1, H, W, 1).contiguous()
    n = torch.nn.functional.normalize(torch.tensor([0.5, 0.0, -1.0]), dim=0).expand(1, H, W, 3)
    assert float(depth_normal_loss(n, depth, K, w2c)) < 1e-5
    assert float(depth_normal_loss(torch.tensor([0.0, 0.0, -1.0]).expand(1, H, W, 3), depth, K, w2c)) > 1e-2
    reg = SurfaceRegularizer(1.0, depth_normal_start=5, depth="median_plane")
    assert reg.render_outputs(4) == () and reg.render_outputs(5) == ("normal", "median_plane_depth")
    with pytest.raises(ConfigError):
        SurfaceRegularizer(1.0, depth="blended")


@pytest.fixture(scope="module")
def sphere():
    return sphere_problem(size=24, n_train=10, n_test=2)


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_object_run_writes_a_scored_textured_asset(sphere, tmp_path):
    problem, gt = sphere
    r = reconstruct(_tiny(), tmp_path / "run", problem=problem, gt_mesh=gt)
    m = r.metrics
    assert m["extract"] == "tsdf" and m["steps"] == 30 and m["pivots"] == 0
    assert m["faces"] > 0 and m["fscore"] is not None and m["mesh_psnr"] is not None
    assert m["mesh_report"]["object"]["resolution"] == 32 and m["region"]["kind"] == "object"
    assert m["faces"] <= 3000  # max_asset_faces
    for name in ("mesh.glb", "mesh.obj", "mesh.ply", "metrics.json", "point_cloud.ply"):
        assert (tmp_path / "run" / name).is_file(), name
    assert not (tmp_path / "run" / "scene_mesh.ply").exists()  # an object input has no whole scene
    # the flattening acted: the (isotropic at initialisation) Gaussians lean towards discs
    s = torch.exp(r.gaussians.log_scales).sort(dim=-1).values
    assert float((s[:, 0] / s[:, 1]).median()) < 0.9


def test_asset_refinement_refines_what_is_exported_and_scored(sphere, tmp_path):
    """``photo_refine_asset``: the asset's geometry is refined before its bake, and that refined asset is the
    exported and scored mesh (``mesh_report.asset_refine``)."""
    problem, gt = sphere
    r = reconstruct(_tiny(photo_refine_asset=True, photo_refine_steps=4, render_test=False), tmp_path / "run",
                    problem=problem, gt_mesh=gt)
    ref = r.metrics["mesh_report"]["asset_refine"]
    assert ref["steps"] == 4 and ref["colors_fitted"] and r.metrics["fscore"] is not None
    assert r.mesh.v_pos.shape[0] == r.metrics["vertices"] and r.metrics["faces"] > 0


def _ground_problem(size=48, n_train=16, n_test=2):
    from meshlift.data.synthetic_scene import make_synthetic_scene
    from meshlift.methods.gaussians.views import STORE_DTYPE, SplatProblem, SplatViews

    sc = make_synthetic_scene(sphere_mesh(subdivisions=2), n_train=n_train, n_test=n_test, resolution=size, seed=3)

    def views(split):
        v = sc.views(split)
        return SplatViews(v.world_to_camera, v.K, v.images.to(STORE_DTYPE), None, list(v.names))

    box = torch.stack([sc.eval_box_min.float(), sc.eval_box_max.float()])
    pb = SplatProblem(train=views("train"), test=views("test"), bounds=sc.scene_bounds.float(), name="ground",
                      eval_box=box)
    return sc, pb


def test_true_depth_of_the_unmasked_scene_fuses_to_the_object():
    """The generator, the region of interest, the fusion and the evaluation box, without training noise: the
    true depth (object + floor) of the training views fused over the automatic region of interest gives the
    object within the F-score threshold."""
    import dataclasses as dc

    from meshlift.metrics.geometry import mesh_metrics
    from meshlift.methods.milo import tsdf_mesh
    from meshlift.methods.milo.occupancy_labels import render_mesh_depth
    from meshlift.structures.mesh import Mesh

    sc, pb = _ground_problem(size=64, n_train=20)
    tr = pb.train
    both = Mesh(torch.cat([sc.gt_mesh.v_pos, sc.ground_mesh.v_pos]),
                torch.cat([sc.gt_mesh.t_pos_idx, sc.ground_mesh.t_pos_idx + sc.gt_mesh.num_vertices]))
    depth = render_mesh_depth(both.v_pos, both.t_pos_idx, tr.world_to_camera, tr.K, (tr.height, tr.width))
    cfg = dc.replace(get_preset("milo_tiny"), tsdf_resolution=64)
    region = tsdf_mesh.fusion_region("object", roi=tsdf_mesh.region_of_interest(cfg, pb))
    lo, hi = (t.float() for t in region.roi.world_aabb())
    assert bool((lo <= sc.eval_box_min).all() and (hi >= sc.eval_box_max).all()), "the region of interest holds the object"
    near = 0.01
    mesh, rep = tsdf_mesh.fused_mesh(cfg, depth.cpu(), pb, region, 64, near=near, device=torch.device("cpu"),
                                     monitor=Monitor())
    g = mesh_metrics(mesh, sc.gt_mesh, threshold_frac=0.01, n_samples=20_000, crop_box=sc.eval_box)
    assert g["fscore"] > 0.9, g
    cut, crep = tsdf_mesh.object_asset(mesh, region.roi, monitor=Monitor())
    assert cut.num_faces > 0 and crep["faces_split"] > 0
    # the floor under the object: in the uncut asset, gone with the support plane (scored in a box that
    # reaches below the floor, the floor counts against the precision)
    voxel = float((region.roi.box_max - region.roi.box_min).max()) / 64
    obj, orep = tsdf_mesh.object_asset(mesh, region.roi, monitor=Monitor(), support_voxel=voxel)
    sp = orep["support_plane"]
    assert sp["found"] and sp["tilt_deg"] < 3.0 and abs(sp["offset"]) < 2 * voxel, sp
    assert float(obj.v_pos[:, 1].min()) > 0.5 * voxel, "nothing of the floor is left"
    low = (sc.eval_box_min.clone(), sc.eval_box_max)
    low[0][1] = -0.2
    p_cut = mesh_metrics(cut, sc.gt_mesh, threshold_frac=0.01, n_samples=20_000, crop_box=low)["precision"]
    p_obj = mesh_metrics(obj, sc.gt_mesh, threshold_frac=0.01, n_samples=20_000, crop_box=low)["precision"]
    assert p_obj > 0.9 and p_obj > p_cut + 0.2, (p_obj, p_cut)


def test_capture_run_writes_the_scene_mesh_and_the_object_asset(tmp_path):
    sc, pb = _ground_problem()
    gt = sc.gt_mesh
    cfg = _tiny(ref_scene="ground")
    r = reconstruct(cfg, tmp_path / "run", problem=pb, gt_mesh=gt)
    m = r.metrics
    assert (tmp_path / "run" / "scene_mesh.ply").is_file() and (tmp_path / "run" / "mesh.glb").is_file()
    assert m["mesh_evaluated"].startswith("whole-scene") and m["scene_faces"] > 0
    assert m["region"]["roi"]["source"] == "cameras" and m["eval_box"] is not None
    assert m["fscore"] is not None and "crop" in m["mesh_report"]
    # the whole-scene mesh's view-dependent colours (photo_refine_sh_degree = 2): scored with and without them
    from meshlift.methods.milo.reconstruct import summary_lines

    assert m["mesh_report"]["scene_refine"]["sh_degree"] == 2 and m["mesh_sh_degree"] == 2
    assert m["mesh_evaluated"].endswith("view-dependent)") and m["mesh_psnr_diffuse"] not in (None, m["mesh_psnr"])
    assert any("view-independent colours alone" in line for line in summary_lines(r))


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_an_empty_region_of_interest_is_a_clear_error(sphere, tmp_path):
    problem, gt = sphere
    pb = dataclasses.replace(problem, eval_box=torch.tensor([[-1.0] * 3, [1.0] * 3]))
    # seen by no camera (a box behind the only training camera): refused before training
    from meshlift.methods.gaussians.views import SplatViews

    t = pb.train
    one = dataclasses.replace(pb, train=SplatViews(t.world_to_camera[:1], t.K[:1], t.images[:1], t.alpha[:1], t.names[:1]))
    R, tt = t.world_to_camera[0, :3, :3].double(), t.world_to_camera[0, :3, 3].double()
    behind = -(R.T @ tt) - 3.0 * R[2]  # 3 units behind the camera centre, against its viewing direction
    box = ",".join(f"{x:.3f}" for x in torch.cat([behind - 0.1, behind + 0.1]).tolist())
    with pytest.raises(ConfigError, match="no training camera sees this box"):
        reconstruct(_tiny(bbox=box, ref_scene="ground"), tmp_path / "a", problem=one, gt_mesh=gt)
    assert not (tmp_path / "a" / "checkpoint.pt").exists()
    # seen, but empty (a box beside the sphere): the extraction names --bbox
    with pytest.raises(MeshError, match="bbox"):
        reconstruct(_tiny(bbox="1.2,1.2,1.2,1.5,1.5,1.5", ref_scene="ground"), tmp_path / "b", problem=pb, gt_mesh=gt)


def test_resume_names_the_method_that_wrote_the_folder(tmp_path):
    """``--resume`` into another method's folder says which method wrote it (not an unknown-field error)."""
    from meshlift.cli.reconstruct_cmd import resume_method
    from meshlift.io.jsonfile import write_json
    from meshlift.methods.gaussians.config import GaussiansConfig
    from meshlift.methods.milo.config import MiloConfig, config_to_dict
    from meshlift.methods.nvdiffrec.config import SurfaceConfig
    from meshlift.methods.nvdiffrec.config import config_to_dict as surface_dict

    for name, cfg in (("milo", config_to_dict(MiloConfig())), ("gaussians", config_to_dict(GaussiansConfig())),
                      ("nvdiffrec", surface_dict(SurfaceConfig()))):
        d = tmp_path / name
        d.mkdir()
        write_json(d / "config.json", cfg)
        assert resume_method(d) == name
    assert resume_method(tmp_path / "nothing") is None


def test_extract_cannot_change_on_resume(sphere, tmp_path):
    problem, gt = sphere
    out = tmp_path / "run"
    reconstruct(_tiny(steps=12, checkpoint_every=6, render_test=False), out, problem=problem, gt_mesh=gt)
    with pytest.raises(ConfigError, match="extract"):
        reconstruct(_tiny(steps=12, extract="delaunay", mesh_start=8), out, problem=problem, gt_mesh=gt, resume=True)


def test_masked_capture_without_the_crop_exports_the_region_uncut(sphere, tmp_path):
    """A capture with masks (no scene mesh) and ``object_asset=false``: the fused region is the asset."""
    problem, _ = sphere
    r = reconstruct(_tiny(object_asset=False, render_test=False), tmp_path / "run", problem=problem)
    m = r.metrics
    assert m["mesh_evaluated"].startswith("the asset") and "crop" not in m["mesh_report"]
    assert m["faces"] > 0 and (tmp_path / "run" / "mesh.glb").is_file()
    assert not (tmp_path / "run" / "scene_mesh.ply").exists()


def test_scene_resolution_from_the_pixel_footprint():
    """``scene_resolution=0``: the voxel closest to ``scene_voxel_pixels`` training pixels at the region's centre
    (a camera 4 units in front of the centre with a 400 px focal: a pixel is 0.01 units there)."""
    from types import SimpleNamespace

    from meshlift.methods.milo import tsdf_mesh

    w2c = torch.eye(4)[None].clone()
    w2c[0, 2, 3] = 4.0  # the origin at camera z = 4
    K = torch.tensor([[[400.0, 0.0, 100.0], [0.0, 400.0, 100.0], [0.0, 0.0, 1.0]]])
    problem = SimpleNamespace(train=SimpleNamespace(world_to_camera=w2c, K=K))
    region = tsdf_mesh.FusionRegion(box_min=torch.full((3,), -1.28, dtype=torch.float64),
                                    box_max=torch.full((3,), 1.28, dtype=torch.float64), contract=True)
    cfg = dataclasses.replace(get_preset("milo_tiny"), scene_resolution=0, scene_voxel_pixels=2.0)
    assert tsdf_mesh.scene_resolution_from_pixels(cfg, problem, region) == 128  # 2.56 / (2 x 0.01)
    cfg = dataclasses.replace(cfg, scene_voxel_pixels=0.5)
    assert tsdf_mesh.scene_resolution_from_pixels(cfg, problem, region) == 512
    cfg = dataclasses.replace(cfg, scene_voxel_pixels=0.01)
    assert tsdf_mesh.scene_resolution_from_pixels(cfg, problem, region) == 1024  # clamped
    apply_dict(get_preset("milo_tiny"), {"scene_resolution": 0})  # 0 is valid
    with pytest.raises(ConfigError):
        apply_dict(get_preset("milo_tiny"), {"scene_resolution": 100})


def test_a_tilted_plane_is_not_taken_for_the_support():
    """The asset's support-plane cut keeps to planes within SUPPORT_MAX_TILT_DEG of the region's up: a floor
    tilted by 8 degrees (a blotchy floor's bad fit) is left alone, a level one is cut away."""
    import trimesh

    from meshlift.data.roi import RegionOfInterest
    from meshlift.methods.milo import tsdf_mesh
    from meshlift.structures.mesh import Mesh

    def scene(tilt_deg):
        obj = trimesh.creation.box(extents=(0.6, 0.6, 0.6)).subdivide().subdivide()
        obj.update_faces(obj.face_normals[:, 2] > -0.5)  # no bottom: a capture never sees it
        obj.apply_translation((0, 0, 0.3))
        floor = trimesh.creation.box(extents=(2.0, 2.0, 0.02))
        floor.apply_translation((0, 0, -0.01))
        floor.apply_transform(trimesh.transformations.rotation_matrix(math.radians(tilt_deg), (1, 0, 0)))
        floor = floor.subdivide().subdivide().subdivide()
        both = trimesh.util.concatenate([obj, floor])
        return Mesh(v_pos=torch.tensor(both.vertices, dtype=torch.float32), t_pos_idx=torch.tensor(both.faces))

    d = torch.float64
    roi = RegionOfInterest(box_min=torch.tensor([-0.9, -0.9, -0.2], dtype=d), box_max=torch.tensor([0.9, 0.9, 1.0], dtype=d),
                           center=torch.zeros(3, dtype=d), up=torch.tensor([0.0, 0.0, 1.0], dtype=d), source="explicit")
    _, rep = tsdf_mesh.object_asset(scene(0.0), roi, monitor=Monitor(), support_voxel=0.005)
    assert rep["support_plane"]["found"], rep["support_plane"]
    _, rep = tsdf_mesh.object_asset(scene(8.0), roi, monitor=Monitor(), support_voxel=0.005)
    sp = rep["support_plane"]
    assert not sp["found"], (sp["tilt_deg"], sp["inlier_area_frac"])
