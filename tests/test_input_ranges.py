"""Camera ranges and renders that show nothing (issue 31, class 3): a dataset without near/far (a forward-facing
capture with parallel cameras) gets its depth range guessed from the camera layout by the reader; `meshlift
render` must not cull the asset with that guess (splats: no far plane; meshes: the mesh's own extent). A render
that is all background where the dataset's image is not is a warning in the summary, the JSON and
metrics.json."""

from __future__ import annotations

import json
import math

import pytest
import torch

from meshlift.cli.main import main

SIZE = 24
DEPTH = 40.0  # the scene's distance in front of the cameras, far beyond the camera layout's spread


def _splats(z: float) -> dict:
    g = torch.Generator().manual_seed(0)
    n = 200
    means = torch.randn(n, 3, generator=g) * torch.tensor([4.0, 4.0, 2.0]) + torch.tensor([0.0, 0.0, z])
    return {"means": means, "quats": torch.tensor([[1.0, 0, 0, 0]]).repeat(n, 1),
            "log_scales": torch.zeros(n, 3), "opacity_logits": torch.full((n,), 3.0),
            "sh0": torch.randn(n, 1, 3, generator=g), "shN": torch.zeros(n, 0, 3)}


def _forward_facing(root, render) -> None:
    """An instant-ngp transforms.json of 4 parallel cameras (x = -0.3 .. 0.3, looking down -z) with no
    near/far; its images come from ``render(cams)`` (true depth range)."""
    from meshlift.cameras import Cameras, intrinsics_matrix, opengl_c2w_to_world_to_camera
    from meshlift.io.images import write_image

    fov = math.radians(50)
    c2ws = []
    for x in (-0.3, -0.1, 0.1, 0.3):
        c2w = torch.eye(4, dtype=torch.float64)
        c2w[0, 3] = x
        c2ws.append(c2w)
    f = 0.5 * SIZE / math.tan(fov / 2)
    cams = Cameras(K=intrinsics_matrix(f, f, SIZE / 2, SIZE / 2).expand(4, 3, 3),
                   world_to_camera=torch.stack([opengl_c2w_to_world_to_camera(c) for c in c2ws]),
                   width=SIZE, height=SIZE, near=0.1, far=1000.0)
    (root / "images").mkdir(parents=True)
    for k, img in enumerate(render(cams)):
        write_image(root / "images" / f"f{k}.png", img)
    frames = [{"file_path": f"images/f{k}.png", "transform_matrix": c.tolist()} for k, c in enumerate(c2ws)]
    (root / "transforms.json").write_text(json.dumps({"camera_angle_x": fov, "frames": frames}))


def _guessed_far(root) -> float:
    from meshlift.data import load_scene

    scene = load_scene(root)
    assert "depth_bounds" not in scene.metadata  # the dataset gives none: the reader estimated them
    return float(scene.cameras.far.max())


def test_splats_of_a_forward_facing_capture_are_not_culled_by_a_guessed_far_plane(tmp_path, capsys):
    from meshlift.io.gaussian_ply import load_gaussian_ply, save_gaussian_ply
    from meshlift.renderers.gaussians import render_gaussian_views
    from meshlift.structures.gaussians import Gaussians

    ply = save_gaussian_ply(tmp_path / "splats.ply", _splats(-DEPTH))
    g = Gaussians(**load_gaussian_ply(ply))
    _forward_facing(tmp_path / "ds", lambda cams: render_gaussian_views(g, cams, 1.0, near=0.1, far=1000.0))
    assert _guessed_far(tmp_path / "ds") < DEPTH - 10  # the guess would cull every splat
    assert main(["render", str(ply), "--data", str(tmp_path / "ds"), "--split", "train", "--out", str(tmp_path / "r"),
                 "--no-lpips", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["depth_range"] == "asset" and res["blank_views"] == [] and res["warnings"] == []
    assert res["num_views"] == 3 and res["psnr"] > 40  # the dataset's own images, reproduced


def test_a_mesh_of_a_forward_facing_capture_is_not_clipped_by_a_guessed_depth_range(tmp_path, capsys):
    import trimesh

    from meshlift.io.mesh import load_mesh
    from meshlift.renderers.mesh_pbr import depth_range_around_mesh, render_views

    sphere = trimesh.creation.icosphere(subdivisions=3, radius=6.0)
    sphere.apply_translation([0.0, 0.0, -DEPTH])
    sphere.export(tmp_path / "far.ply")
    mesh = load_mesh(tmp_path / "far.ply")
    _forward_facing(tmp_path / "ds", lambda cams: render_views(mesh, depth_range_around_mesh(mesh, cams), None, 1.0,
                                                               "unlit", 1))
    assert _guessed_far(tmp_path / "ds") < DEPTH - 10
    assert main(["render", str(tmp_path / "far.ply"), "--data", str(tmp_path / "ds"), "--split", "train",
                 "--out", str(tmp_path / "r"), "--no-lpips", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["depth_range"] == "asset" and res["blank_views"] == [] and res["psnr"] > 40


def test_depth_range_around_mesh_encloses_it_from_every_camera():
    import trimesh

    from meshlift.cameras import look_at_cameras
    from meshlift.renderers.mesh_pbr import MAX_DEPTH_RATIO, depth_range_around_mesh
    from meshlift.structures.mesh import Mesh

    tm = trimesh.creation.box(extents=(2.0, 2.0, 2.0))
    mesh = Mesh(v_pos=torch.tensor(tm.vertices, dtype=torch.float32), t_pos_idx=torch.tensor(tm.faces))
    eyes = torch.tensor([[0.0, 0.0, 10.0], [0.0, 0.0, 0.5], [50.0, 0.0, 0.0]])  # outside, inside, far away
    cams = depth_range_around_mesh(mesh, look_at_cameras(eyes, (0.0, 0.0, 0.0), (0.0, 1.0, 0.0), 0.8, 16,
                                                         near=1.0, far=2.0))
    r = math.sqrt(3.0)
    d = eyes.norm(dim=-1)
    torch.testing.assert_close(cams.far, (d + 1.05 * r).float())
    assert float(cams.near[0]) == pytest.approx(10 - 1.05 * r, rel=1e-5)
    assert float(cams.near[1]) == pytest.approx(float(cams.far[1]) / MAX_DEPTH_RATIO, rel=1e-5)  # camera inside
    assert bool((cams.near > 0).all() and (cams.near < cams.far).all())


def test_a_render_that_shows_nothing_where_the_dataset_has_content_is_a_warning(tmp_path, capsys):
    from meshlift.io.gaussian_ply import load_gaussian_ply, save_gaussian_ply
    from meshlift.renderers.gaussians import render_gaussian_views
    from meshlift.structures.gaussians import Gaussians

    g = Gaussians(**load_gaussian_ply(save_gaussian_ply(tmp_path / "front.ply", _splats(-DEPTH))))
    _forward_facing(tmp_path / "ds", lambda cams: render_gaussian_views(g, cams, 1.0))
    behind = save_gaussian_ply(tmp_path / "behind.ply", _splats(+DEPTH))  # another frame: behind the cameras
    args = ["render", str(behind), "--data", str(tmp_path / "ds"), "--split", "train", "--out", str(tmp_path / "r"),
            "--no-lpips"]
    assert main(args + ["--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["blank_views"] == ["f1", "f2", "f3"]
    assert len(res["warnings"]) == 1 and "3 of 3 renders show only background" in res["warnings"][0]
    assert str(behind) in res["warnings"][0] and all(r["blank"] for r in res["per_image"])
    saved = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert saved["blank_views"] == res["blank_views"] and saved["warnings"] == res["warnings"]
    assert main(args) == 0
    assert "warning: 3 of 3 renders show only background" in capsys.readouterr().out


def test_blank_and_content_rules():
    from meshlift.renderers.blank import has_content, is_blank

    white = torch.ones(20, 20, 3)
    assert is_blank(white, 1.0) and not is_blank(white, 0.0) and not has_content(white, 1.0)
    speck = white.clone()
    speck[0, 0] = 0.0  # one pixel of 400: a render with it is not blank, a reference with it has no content
    assert not is_blank(speck, 1.0) and not has_content(speck, 1.0)
    spot = white.clone()
    spot[:3, :3] = 0.2  # 9 of 400 pixels
    assert has_content(spot, 1.0)
    assert is_blank(white - 1.5 / 255, 1.0)  # 8-bit rounding of the background


def test_eval_images_warns_about_background_only_renders(tmp_path, capsys):
    from meshlift.io.images import write_image

    (tmp_path / "pred").mkdir()
    (tmp_path / "gt").mkdir()
    g = torch.Generator().manual_seed(0)
    content = torch.ones(24, 24, 3)
    content[6:18, 6:18] = torch.rand(12, 12, 3, generator=g)
    for name, pred in (("blank", torch.ones(24, 24, 3)), ("fine", content)):
        write_image(tmp_path / "gt" / f"{name}.png", content)
        write_image(tmp_path / "pred" / f"{name}.png", pred)
    args = ["eval", "images", str(tmp_path / "pred"), str(tmp_path / "gt"), "--no-lpips"]
    assert main(args + ["--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["blank_images"] == ["blank"] and len(res["warnings"]) == 1
    assert "1 of 2 images in" in res["warnings"][0] and "background only (white)" in res["warnings"][0]
    assert {r["name"]: r.get("blank", False) for r in res["per_image"]} == {"blank": True, "fine": False}
    assert main(args) == 0
    assert "warning: 1 of 2 images" in capsys.readouterr().out
    # on a black background the same white render is not background
    assert main(args + ["--json", "--background", "black"]) == 0
    assert json.loads(capsys.readouterr().out)["blank_images"] == []
