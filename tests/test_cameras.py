"""Cameras, converters, projection, rays, distortion (docs/conventions.md §2-5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from meshlift.cameras import (
    CAMERA_MODELS,
    Cameras,
    cameras_on_sphere,
    colmap_to_world_to_camera,
    distort,
    focal_from_fov,
    fov_from_focal,
    intrinsics_matrix,
    llff_to_world_to_camera,
    look_at,
    opengl_c2w_to_world_to_camera,
    undistort_points,
    world_to_camera_to_colmap,
    world_to_camera_to_opengl_c2w,
)
from _camera_params import MODEL_PARAMS
from meshlift.data.undistort import undistort_image, undistortion_grid
from meshlift.errors import CameraError
from meshlift.geometry.rotations import (
    axis_angle_to_matrix,
    matrix_to_quaternion,
    quaternion_multiply,
    quaternion_to_matrix,
)



def random_rotations(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return axis_angle_to_matrix(torch.randn(n, 3, generator=g, dtype=torch.float64))


# -- rotations --------------------------------------------------------------------------------------


def test_quaternion_matrix_round_trip_and_order():
    R = random_rotations(64)
    q = matrix_to_quaternion(R)
    assert torch.all(q[:, 0] >= 0)
    torch.testing.assert_close(q.norm(dim=-1), torch.ones(64, dtype=torch.float64))
    torch.testing.assert_close(quaternion_to_matrix(q), R, atol=1e-12, rtol=0)
    # 90 degrees about z, scalar first: (cos 45, 0, 0, sin 45) maps x to y
    qz = torch.tensor([math.cos(math.pi / 4), 0, 0, math.sin(math.pi / 4)], dtype=torch.float64)
    torch.testing.assert_close(quaternion_to_matrix(qz) @ torch.tensor([1.0, 0, 0], dtype=torch.float64),
                               torch.tensor([0.0, 1, 0], dtype=torch.float64), atol=1e-12, rtol=0)
    # Hamilton product composes rotations: R(a ⊗ b) = R(a) R(b)
    a, b = matrix_to_quaternion(R[:32]), matrix_to_quaternion(R[32:])
    torch.testing.assert_close(quaternion_to_matrix(quaternion_multiply(a, b)), R[:32] @ R[32:], atol=1e-12, rtol=0)


def test_matrix_to_quaternion_all_branches_and_grad():
    # rotations by ~180 degrees about each axis exercise the x, y, z branches
    for axis in torch.eye(3, dtype=torch.float64):
        R = axis_angle_to_matrix(axis * (math.pi - 0.1))
        torch.testing.assert_close(quaternion_to_matrix(matrix_to_quaternion(R)), R, atol=1e-12, rtol=0)
    q = torch.tensor([0.8, 0.1, -0.3, 0.5], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(quaternion_to_matrix, (q,))


def test_rotation_bad_shape_raises():
    with pytest.raises(CameraError, match="q must have shape"):
        quaternion_to_matrix(torch.zeros(3))


# -- converters -------------------------------------------------------------------------------------


def test_focal_fov_round_trip():
    f = focal_from_fov(0.6911112070083618, 400)
    assert f == pytest.approx(555.5555, abs=1e-3)  # the lego README's number
    assert fov_from_focal(f, 400) == pytest.approx(0.6911112070083618)
    with pytest.raises(CameraError):
        focal_from_fov(4.0, 100)


def test_blender_camera_looking_at_origin_puts_it_at_centre_through_every_converter():
    # A Blender/OpenGL camera at (0, -4, 2) looking at the origin, Z up.
    eye = torch.tensor([0.0, -4.0, 2.0], dtype=torch.float64)
    fwd = -eye / eye.norm()
    right = torch.linalg.cross(fwd, torch.tensor([0, 0, 1.0], dtype=torch.float64))
    right = right / right.norm()
    up = torch.linalg.cross(right, fwd)
    c2w_gl = torch.eye(4, dtype=torch.float64)
    c2w_gl[:3, 0], c2w_gl[:3, 1], c2w_gl[:3, 2], c2w_gl[:3, 3] = right, up, -fwd, eye
    w2c = opengl_c2w_to_world_to_camera(c2w_gl)
    K = intrinsics_matrix(500.0, 500.0, 200.0, 150.0)
    pts = torch.tensor([[0.0, 0, 0], [0.3, -0.2, 0.5], [-0.4, 0.1, -0.3]])
    ref_pix, ref_depth = Cameras(K, w2c, 400, 300).project(pts)
    torch.testing.assert_close(ref_pix[0, 0], torch.tensor([200.0, 150.0]), atol=1e-4, rtol=0)
    assert ref_depth[0, 0] == pytest.approx(float(eye.norm()), abs=1e-5)
    # point above the origin (world +Z) appears above the centre (smaller row) in the upright image
    pix_up, _ = Cameras(K, w2c, 400, 300).project(torch.tensor([0.0, 0, 0.5]))
    assert pix_up[0, 1] < 150
    # look_at gives the same camera
    torch.testing.assert_close(look_at(eye, torch.zeros(3, dtype=torch.float64)), w2c, atol=1e-12, rtol=0)
    # OpenGL round trip
    torch.testing.assert_close(world_to_camera_to_opengl_c2w(w2c), c2w_gl, atol=1e-12, rtol=0)
    # COLMAP round trip
    q, t = world_to_camera_to_colmap(w2c)
    w2c_colmap = colmap_to_world_to_camera(q, t)
    # LLFF: columns (down, right, back) = (-up, right, back) of the OpenGL camera
    llff = torch.cat([torch.stack([-c2w_gl[:3, 1], c2w_gl[:3, 0], c2w_gl[:3, 2], c2w_gl[:3, 3],
                                   torch.tensor([300.0, 400.0, 500.0], dtype=torch.float64)], dim=1).reshape(-1),
                      torch.tensor([1.0, 10.0], dtype=torch.float64)])[None]
    w2c_llff, hwf = llff_to_world_to_camera(llff)
    torch.testing.assert_close(hwf[0], torch.tensor([300.0, 400.0, 500.0], dtype=torch.float64))
    for other in (w2c_colmap, w2c_llff[0]):
        pix, depth = Cameras(K, other, 400, 300).project(pts)
        torch.testing.assert_close(pix, ref_pix, atol=1e-3, rtol=0)
        torch.testing.assert_close(depth, ref_depth, atol=1e-5, rtol=0)


def test_colmap_converter_batch_round_trip():
    R = random_rotations(20, seed=3)
    t = torch.randn(20, 3, dtype=torch.float64)
    w2c = torch.eye(4, dtype=torch.float64).repeat(20, 1, 1)
    w2c[:, :3, :3], w2c[:, :3, 3] = R, t
    q, tt = world_to_camera_to_colmap(w2c)
    torch.testing.assert_close(colmap_to_world_to_camera(q, tt), w2c, atol=1e-12, rtol=0)


# -- container --------------------------------------------------------------------------------------


def test_cameras_indexing_and_validation():
    cams = cameras_on_sphere(10, 3.0, 0.8, (64, 48))
    assert len(cams) == 10 and cams.width == 64 and cams.height == 48
    assert len(cams[3]) == 1 and len(cams[2:5]) == 3 and len(cams[torch.tensor([0, 9])]) == 2
    torch.testing.assert_close(cams[-1].K, cams.K[9:10])
    assert len(Cameras.cat([cams[:4], cams[4:]])) == 10
    with pytest.raises(IndexError):
        cams[10]
    with pytest.raises(CameraError, match="K must be"):
        Cameras(torch.eye(4)[None], torch.eye(4)[None], 10, 10)
    with pytest.raises(CameraError, match="unknown camera model"):
        Cameras(torch.eye(3)[None], torch.eye(4)[None], 10, 10, model="PANORAMA")
    with pytest.raises(CameraError, match="needs distortion"):
        Cameras(torch.eye(3)[None], torch.eye(4)[None], 10, 10, model="OPENCV", distortion=torch.zeros(1, 3))


def test_projection_matches_pixel_convention_and_depth_range():
    cams = cameras_on_sphere(4, 3.0, 0.8, (64, 48), seed=1, near=0.5, far=20.0)
    pts = torch.randn(100, 3) * 0.5
    pix, depth = cams.project(pts)
    clip = torch.einsum("nij,pj->npi", cams.world_to_clip(), torch.cat([pts, torch.ones(100, 1)], -1))
    ndc = clip[..., :3] / clip[..., 3:]
    torch.testing.assert_close(clip[..., 3], depth, atol=1e-4, rtol=0)  # w = camera z
    # NDC x = 2 x_pix / W - 1 (pixel (i, j) centre (j + 0.5) -> 2(j + 0.5)/W - 1)
    torch.testing.assert_close(ndc[..., 0], 2 * pix[..., 0] / 64 - 1, atol=1e-4, rtol=0)
    torch.testing.assert_close(ndc[..., 1], 2 * pix[..., 1] / 48 - 1, atol=1e-4, rtol=0)
    # z/w is -1 at near and +1 at far
    P = cams.projection()[0]
    for z, expect in ((0.5, -1.0), (20.0, 1.0)):
        c = P @ torch.tensor([0.0, 0.0, z, 1.0])
        assert float(c[2] / c[3]) == pytest.approx(expect, abs=1e-5)


def test_pixel_rays_pass_through_pixel_centres():
    cams = cameras_on_sphere(3, 2.0, 0.9, (16, 12), seed=2)
    origins, dirs = cams.pixel_rays()
    assert origins.shape == (3, 12, 16, 3) and dirs.shape == (3, 12, 16, 3)
    torch.testing.assert_close(dirs.norm(dim=-1), torch.ones(3, 12, 16), atol=1e-5, rtol=0)
    torch.testing.assert_close(origins[:, 0, 0], cams.camera_centers())
    for k in range(3):
        pix, depth = cams[k].project(origins[k] + 1.7 * dirs[k])
        jj, ii = torch.meshgrid(torch.arange(16) + 0.5, torch.arange(12) + 0.5, indexing="xy")
        torch.testing.assert_close(pix[0], torch.stack([jj, ii], -1), atol=2e-3, rtol=0)
        # depth = distance * dot(direction, forward)
        torch.testing.assert_close(depth[0], 1.7 * (dirs[k] @ cams.forward_directions()[k]), atol=1e-4, rtol=0)


def test_rescale_scales_pixels():
    cams = cameras_on_sphere(5, 3.0, 0.8, (80, 60), seed=4)
    pts = torch.randn(20, 3) * 0.3
    pix, _ = cams.project(pts)
    half = cams.rescale(0.5)
    assert (half.width, half.height) == (40, 30)
    pix_half, _ = half.project(pts)
    torch.testing.assert_close(pix_half, pix * 0.5, atol=1e-4, rtol=0)
    aniso = cams.resize(40, 20)
    torch.testing.assert_close(aniso.project(pts)[0], pix * torch.tensor([0.5, 1 / 3]), atol=1e-4, rtol=0)


def test_cameras_on_sphere_look_at_target_and_respect_elevation():
    lo, hi = math.radians(10), math.radians(60)
    for seed in (None, 7):
        cams = cameras_on_sphere(50, 2.5, 0.7, 32, seed=seed, elevation_range=(lo, hi), target=(1.0, 0, 0))
        pix, depth = cams.project(torch.tensor([1.0, 0, 0]))
        torch.testing.assert_close(pix, torch.full((50, 2), 16.0), atol=1e-3, rtol=0)
        torch.testing.assert_close(depth, torch.full((50,), 2.5), atol=1e-4, rtol=0)
        elev = torch.asin((cams.camera_centers()[:, 1] / 2.5).clamp(-1, 1))
        assert float(elev.min()) >= lo - 1e-4 and float(elev.max()) <= hi + 1e-4
    a = cameras_on_sphere(8, 1.0, 0.7, 32)
    b = cameras_on_sphere(8, 1.0, 0.7, 32)
    torch.testing.assert_close(a.world_to_camera, b.world_to_camera)


def test_look_at_degenerate():
    with pytest.raises(CameraError, match="coincide"):
        look_at([0, 0, 0], [0, 0, 0])
    w2c = look_at([0, 0, 3.0], [0, 0, 0], up=(0, 0, 1))  # forward parallel to up: still a rotation
    R = w2c[:3, :3]
    torch.testing.assert_close(R @ R.T, torch.eye(3, dtype=torch.float64), atol=1e-12, rtol=0)


# -- distortion -------------------------------------------------------------------------------------


def test_all_colmap_models_known_with_param_counts():
    counts = {"SIMPLE_PINHOLE": 3, "PINHOLE": 4, "SIMPLE_RADIAL": 4, "RADIAL": 5, "OPENCV": 8, "OPENCV_FISHEYE": 8,
              "FULL_OPENCV": 12, "FOV": 5, "SIMPLE_RADIAL_FISHEYE": 4, "RADIAL_FISHEYE": 5, "THIN_PRISM_FISHEYE": 12}
    assert {k: m.num_params for k, m in CAMERA_MODELS.items()} == counts
    assert [CAMERA_MODELS[k].model_id for k in counts] == list(range(11))


def test_opencv_distortion_matches_hand_formula():
    k1, k2, p1, p2 = MODEL_PARAMS["OPENCV"]
    u, v = 0.3, -0.2
    r2 = u * u + v * v
    rad = 1 + k1 * r2 + k2 * r2 * r2
    expect = [u * rad + 2 * p1 * u * v + p2 * (r2 + 2 * u * u), v * rad + 2 * p2 * u * v + p1 * (r2 + 2 * v * v)]
    out = distort("OPENCV", torch.tensor(MODEL_PARAMS["OPENCV"], dtype=torch.float64),
                  torch.tensor([u, v], dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor(expect, dtype=torch.float64))
    # fisheye: equidistant theta_d = theta (1 + k1 theta^2 ...)
    r = math.hypot(u, v)
    th = math.atan(r)
    k = MODEL_PARAMS["OPENCV_FISHEYE"]
    thd = th * (1 + k[0] * th**2 + k[1] * th**4 + k[2] * th**6 + k[3] * th**8)
    out = distort("OPENCV_FISHEYE", torch.tensor(k, dtype=torch.float64), torch.tensor([u, v], dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor([u * thd / r, v * thd / r], dtype=torch.float64))
    # FOV
    w = 0.9
    f = math.atan(2 * r * math.tan(w / 2)) / (r * w)
    out = distort("FOV", torch.tensor([w], dtype=torch.float64), torch.tensor([u, v], dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor([u * f, v * f], dtype=torch.float64))


@pytest.mark.parametrize("model", list(MODEL_PARAMS))
def test_undistort_then_distort_round_trip_within_1e3_px(model):
    focal = 600.0
    g = torch.Generator().manual_seed(0)
    pix = torch.rand(2000, 2, generator=g, dtype=torch.float64) * torch.tensor([640.0, 480.0])
    xy_d = (pix - torch.tensor([320.0, 240.0], dtype=torch.float64)) / focal
    params = torch.tensor(MODEL_PARAMS[model], dtype=torch.float64)
    xy_u = undistort_points(model, params, xy_d)
    back = distort(model, params, xy_u) * focal + torch.tensor([320.0, 240.0], dtype=torch.float64)
    assert float((back - pix).abs().max()) < 1e-3


@pytest.mark.parametrize("model", ["OPENCV", "FULL_OPENCV", "OPENCV_FISHEYE", "THIN_PRISM_FISHEYE", "FOV"])
def test_distort_gradcheck(model):
    xy = (torch.rand(6, 2, dtype=torch.float64) - 0.5)
    xy.requires_grad_(True)
    params = torch.tensor(MODEL_PARAMS[model], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: distort(model, b, a), (xy, params))


def test_distorted_projection_and_rays_are_consistent():
    K = intrinsics_matrix(300.0, 300.0, 40.0, 30.0)
    cams = Cameras(K[None], look_at([0, 0, -3.0], [0, 0, 0.0], up=(0, -1, 0))[None], 80, 60, model="OPENCV",
                   distortion=torch.tensor([MODEL_PARAMS["OPENCV"]]))
    origins, dirs = cams.pixel_rays()
    pix, _ = cams.project(origins[0] + 2.0 * dirs[0])
    jj, ii = torch.meshgrid(torch.arange(80) + 0.5, torch.arange(60) + 0.5, indexing="xy")
    torch.testing.assert_close(pix[0], torch.stack([jj, ii], -1), atol=1e-3, rtol=0)
    with pytest.raises(CameraError, match="undistort"):
        cams.projection()


def _pattern(xy):
    """A smooth test pattern over normalised coordinates [..., 2] -> [..., 3]."""
    return torch.stack([0.5 + 0.5 * torch.sin(7 * xy[..., 0]), 0.5 + 0.5 * torch.cos(5 * xy[..., 1]),
                        0.5 + 0.25 * torch.sin(4 * (xy[..., 0] + xy[..., 1]))], dim=-1)


def test_undistort_image_recovers_pinhole_image():
    W, H = 96, 72
    K = intrinsics_matrix(80.0, 80.0, 48.0, 36.0)
    cam = Cameras(K[None], torch.eye(4)[None], W, H, model="SIMPLE_RADIAL", distortion=torch.tensor([[-0.2]]))
    jj, ii = torch.meshgrid(torch.arange(W) + 0.5, torch.arange(H) + 0.5, indexing="xy")
    grid_pix = torch.stack([jj, ii], -1).double()
    xy_d = (grid_pix - torch.tensor([48.0, 36.0], dtype=torch.float64)) / 80.0
    distorted_img = _pattern(undistort_points("SIMPLE_RADIAL", torch.tensor([-0.2], dtype=torch.float64), xy_d)).float()
    out, pin = undistort_image(distorted_img, cam)
    assert pin.model == "PINHOLE" and pin.width == W
    expect = _pattern(xy_d).float()
    _, valid = undistortion_grid(cam)
    inner = valid[2:-2, 2:-2, 0] > 0
    err = (out - expect)[2:-2, 2:-2][inner].abs().max()
    assert float(err) < 0.02
    # reference twin: scipy's bilinear map_coordinates on the same grid
    from scipy.ndimage import map_coordinates

    grid, _ = undistortion_grid(cam)
    u = (grid[..., 0].numpy() + 1) * W / 2 - 0.5
    v = (grid[..., 1].numpy() + 1) * H / 2 - 0.5
    ref = np.stack([map_coordinates(distorted_img[..., c].numpy(), [v, u], order=1, mode="constant", cval=0.0)
                    for c in range(3)], -1)
    np.testing.assert_allclose(out.numpy()[2:-2, 2:-2], ref[2:-2, 2:-2], atol=1e-4)


def test_valid_crop_leaves_no_pixel_sampled_outside_the_photo():
    """A pincushion lens (k1 > 0): undistorting to the same K leaves black corners and edges; the crop window
    has none, every pixel of it samples the photo at least half a pixel inside, and the cropped cameras
    project world points to the same image content (cx, cy shifted by the window's corner)."""
    from meshlift.data.undistort import valid_crop

    W, H = 120, 90
    K = intrinsics_matrix(100.0, 100.0, 60.0, 45.0)
    cam = Cameras(K[None], torch.eye(4)[None], W, H, model="OPENCV",
                  distortion=torch.tensor([[0.08, -0.02, 0.0, 0.0]]))
    x0, y0, x1, y1 = valid_crop(cam)
    assert 0 < x0 < 10 and 0 < y0 < 10 and W - 10 < x1 < W and H - 10 < y1 < H
    grid, valid = undistortion_grid(cam)
    assert float(valid[..., 0].min()) == 0.0  # the uncropped image has pixels from outside the photo
    u = (grid[..., 0] + 1) * W / 2
    v = (grid[..., 1] + 1) * H / 2
    inside = (u >= 0.5) & (u <= W - 0.5) & (v >= 0.5) & (v <= H - 0.5)
    assert bool(inside[y0:y1, x0:x1].all())
    # nearly the largest window: one more row or column on any side would take an invalid pixel
    assert not bool(inside[y0 - 1:y1, x0:x1].all()) or not bool(inside[y0:y1 + 1, x0:x1].all()) \
        or not bool(inside[y0:y1, x0 - 1:x1].all()) or not bool(inside[y0:y1, x0:x1 + 1].all())
    pin = cam.with_pinhole()
    cut = pin.crop(x0, y0, x1 - x0, y1 - y0)
    assert (cut.width, cut.height) == (x1 - x0, y1 - y0)
    pts = torch.tensor([[0.1, -0.05, 2.0], [-0.2, 0.1, 3.0]])
    a, _ = pin.project(pts)
    b, _ = cut.project(pts)
    torch.testing.assert_close(b, a - torch.tensor([x0, y0], dtype=a.dtype))
    # the cropped camera's grid is the full one's window: the same pixels, no resampling difference
    g2, _ = undistortion_grid(cam, cut)
    torch.testing.assert_close(g2, grid[y0:y1, x0:x1])
    with pytest.raises(CameraError, match="crop window"):
        pin.crop(x0, y0, W, H)
    # a camera without distortion keeps its whole frame
    assert valid_crop(Cameras(K[None], torch.eye(4)[None], W, H, model="OPENCV",
                              distortion=torch.zeros(1, 4))) == (0, 0, W, H)


def test_undistort_image_size_mismatch_raises():
    cam = Cameras(intrinsics_matrix(10.0, 10.0, 5.0, 5.0)[None], torch.eye(4)[None], 10, 10,
                  model="SIMPLE_RADIAL", distortion=torch.tensor([[0.1]]))
    with pytest.raises(CameraError, match="does not match"):
        undistort_image(torch.zeros(8, 10, 3), cam)


def test_undistort_points_under_inference_mode():
    with torch.inference_mode():
        xy = torch.tensor([[0.2, -0.1], [0.0, 0.0]])
        params = torch.tensor(MODEL_PARAMS["OPENCV"])
        back = distort("OPENCV", params, undistort_points("OPENCV", params, xy))
    torch.testing.assert_close(back, xy, atol=1e-6, rtol=0)


def test_transform_world_keeps_pixels():
    cams = cameras_on_sphere(4, 3.0, 0.8, 32, seed=5, near=0.5, far=9.0)
    R = axis_angle_to_matrix(torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64))
    S = torch.eye(4, dtype=torch.float64)
    S[:3, :3] = 0.25 * R
    S[:3, 3] = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    moved = cams.transform_world(S)
    pts = torch.randn(30, 3, dtype=torch.float64)
    pts_new = (S[:3, :3] @ pts.T).T + S[:3, 3]
    pix, depth = cams.project(pts.float())
    pix2, depth2 = moved.project(pts_new.float())
    torch.testing.assert_close(pix2, pix, atol=1e-3, rtol=0)
    torch.testing.assert_close(depth2, 0.25 * depth, atol=1e-5, rtol=0)
    assert moved.near == pytest.approx(0.125) and moved.far == pytest.approx(2.25)
    Rm = moved.world_to_camera[:, :3, :3]
    torch.testing.assert_close(Rm @ Rm.transpose(1, 2), torch.eye(3).expand(4, 3, 3), atol=1e-5, rtol=0)
    with pytest.raises(CameraError, match="similarity"):
        cams.transform_world(torch.diag(torch.tensor([1.0, 2.0, 1.0, 1.0])))
