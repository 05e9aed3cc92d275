"""Region of interest (meshlift.data.roi) and clean mesh crops (meshlift.mesh.crop)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

trimesh = pytest.importorskip("trimesh")

from meshlift.cameras import look_at  # noqa: E402
from meshlift.data.roi import auto_roi, parse_bbox, roi_from_dict, roi_to_dict  # noqa: E402
from meshlift.errors import CameraError, ConfigError, MeshError  # noqa: E402
from meshlift.mesh.crop import crop_mesh, ear_clip, is_watertight  # noqa: E402
from meshlift.mesh.support_plane import remove_support_plane  # noqa: E402
from meshlift.structures.mesh import Mesh  # noqa: E402


def _mesh(t, *, color=None, uv=None) -> Mesh:
    v = torch.tensor(np.asarray(t.vertices), dtype=torch.float32)
    f = torch.tensor(np.asarray(t.faces), dtype=torch.int64)
    kw = {}
    if color is not None:
        kw["v_color"] = color(v)
    if uv is not None:
        kw["v_tex"] = uv(v)
        kw["t_tex_idx"] = f.clone()
    return Mesh(v, f, **kw)


def _tm(m: Mesh):
    return trimesh.Trimesh(m.v_pos.double().numpy(), m.t_pos_idx.numpy(), process=False)


# -- crop --------------------------------------------------------------------------------------------------------
def test_crop_sphere_cap_closed_with_analytic_volume():
    sphere = trimesh.creation.icosphere(subdivisions=4, radius=1.0)
    out, rep = crop_mesh(_mesh(sphere), [-2, -2, -2], [2, 2, 0.5])
    v = out.v_pos.double().numpy()
    assert (v[:, 2] <= 0.5 + 1e-6).all()
    on = np.abs(v[:, 2] - 0.5) < 1e-6
    assert on.sum() > 20 and np.allclose(v[on, 2], 0.5, atol=1e-7)  # cut vertices exactly on the plane
    assert rep.watertight_before and rep.watertight_after and rep.loops_capped == 1
    assert rep.faces_split > 0 and rep.faces_out > 0 and rep.faces_in > 0
    tm = _tm(out)
    assert tm.is_watertight and tm.volume > 0
    h = 0.5  # sphere minus the cap of height 0.5; the icosphere's own error is ~0.5 %
    exact = 4 / 3 * math.pi - math.pi * h * h * (3 - h) / 3
    assert tm.volume == pytest.approx(exact, rel=1e-2)
    # the cut keeps exactly the icosphere's part below the plane: same as its volume minus the cut-off part
    top, _ = crop_mesh(_mesh(sphere), [-2, -2, 0.5], [2, 2, 2])
    assert tm.volume + _tm(top).volume == pytest.approx(_tm(_mesh(sphere)).volume, rel=1e-9)


def test_crop_torus_through_ring_bridges_the_hole():
    torus = trimesh.creation.torus(major_radius=1.0, minor_radius=0.3)
    out, rep = crop_mesh(_mesh(torus), [-2, -2, -2], [2, 2, 0.0])  # cap is an annulus: outer + hole
    assert rep.holes_bridged == 1 and rep.loops_capped == 2 and rep.watertight_after
    tm = _tm(out)
    assert tm.is_watertight and tm.volume == pytest.approx(torus.volume / 2, rel=1e-6)
    out, rep = crop_mesh(_mesh(torus), [-2, -2, -2], [0.0, 2, 2])  # two separate disks
    assert rep.loops_capped == 2 and rep.holes_bridged == 0 and _tm(out).is_watertight


def test_crop_cube_by_rotated_box_volume():
    cube = trimesh.creation.box(extents=[2, 2, 2]).subdivide().subdivide()
    c, s = math.cos(math.pi / 4), math.sin(math.pi / 4)
    R = np.array([[c, s, 0], [-s, c, 0], [0, 0, 1.0]])  # slab |(x + y)/√2| <= 0.5
    out, rep = crop_mesh(_mesh(cube), [-0.5, -5, -5], [0.5, 5, 5], rotation=R)
    pb = out.v_pos.double().numpy() @ R.T
    assert (np.abs(pb[:, 0]) <= 0.5 + 1e-6).all()
    tm = _tm(out)
    assert rep.watertight_after and tm.is_watertight
    assert tm.volume == pytest.approx(2 * (2 * math.sqrt(2) - 0.5), rel=1e-6)  # slab area in the square × 2
    out, rep = crop_mesh(_mesh(cube), [-0.5, -5, -5], [0.5, 5, 5])
    assert _tm(out).volume == pytest.approx(4.0, rel=1e-9) and rep.loops_capped == 2


def test_crop_interpolates_attributes_linearly():
    sphere = trimesh.creation.icosphere(subdivisions=3)
    A = torch.tensor([[0.2, -0.1, 0.05], [0.1, 0.3, -0.2], [-0.15, 0.05, 0.25]])
    color = lambda v: v @ A.T + 0.5  # noqa: E731
    uv = lambda v: v[:, :2] * torch.tensor([0.3, -0.2]) + 0.5  # noqa: E731
    m = _mesh(sphere, color=color, uv=uv)
    m.v_nrm, m.t_nrm_idx = m.v_pos.clone(), m.t_pos_idx.clone()
    out, rep = crop_mesh(m, [-0.7, -0.6, -0.5], [0.8, 0.9, 0.4], cap=False)
    assert rep.faces_split > 0 and not rep.watertight_after
    v = out.v_pos.double()
    assert ((v >= torch.tensor([-0.7, -0.6, -0.5]).double() - 1e-6) & (v <= torch.tensor([0.8, 0.9, 0.4]).double() + 1e-6)).all()
    assert torch.allclose(out.v_color.double(), color(v.float()).double(), atol=1e-5)
    p_corner = out.v_pos[out.t_pos_idx]
    assert torch.allclose(out.v_tex[out.t_tex_idx], uv(p_corner.reshape(-1, 3)).reshape(-1, 3, 2), atol=1e-5)
    n = out.v_nrm[out.t_nrm_idx]
    assert torch.allclose(n.norm(dim=-1), torch.ones(()), atol=1e-5)
    # capped: cap faces get the box face's outward normal, and the mesh closes
    out, rep = crop_mesh(m, [-2.0, -2.0, -0.5], [2.0, 2.0, 2.0])
    assert rep.watertight_after and rep.cap_faces > 0 and out.t_tex_idx.shape == out.t_pos_idx.shape
    assert torch.allclose(out.v_nrm[out.t_nrm_idx[-1]], torch.tensor([0.0, 0.0, -1.0]).expand(3, 3), atol=1e-6)


def test_crop_outside_and_whole():
    m = _mesh(trimesh.creation.icosphere(subdivisions=2))
    out, rep = crop_mesh(m, [5, 5, 5], [6, 6, 6])
    assert out.num_faces == 0 and out.num_vertices == 0 and rep.faces_out == m.num_faces
    out, rep = crop_mesh(m, [-2, -2, -2], [2, 2, 2])
    assert out is m and rep.faces_in == m.num_faces and rep.watertight_after


def test_crop_across_box_corner_is_reported_open():
    cube = trimesh.creation.box(extents=[2, 2, 2]).subdivide()
    out, rep = crop_mesh(_mesh(cube), [0, 0, 0], [5, 5, 5])  # the loop runs over three box faces
    assert rep.open_loops == 1 and not rep.watertight_after
    assert _tm(out).area == pytest.approx(3.0)  # three outer quarter faces kept, nothing invented


def test_crop_bad_box():
    m = _mesh(trimesh.creation.icosphere(subdivisions=1))
    with pytest.raises(MeshError, match="below box_max"):
        crop_mesh(m, [0, 0, 1], [1, 1, 0])
    with pytest.raises(MeshError, match="orthonormal"):
        crop_mesh(m, [0, 0, 0], [1, 1, 1], rotation=np.eye(3) * 2)


def test_ear_clip_collinear_and_concave():
    # an L shape with collinear points on its edges: n - 2 triangles, total area preserved
    xy = np.array([[0, 0], [1, 0], [2, 0], [2, 1], [1, 1], [1, 2], [0.5, 2], [0, 2], [0, 1]], dtype=float)
    tri, fb = ear_clip(xy)
    assert fb == 0 and len(tri) == len(xy) - 2
    a = xy[tri]
    area = 0.5 * ((a[:, 1, 0] - a[:, 0, 0]) * (a[:, 2, 1] - a[:, 0, 1]) - (a[:, 1, 1] - a[:, 0, 1]) * (a[:, 2, 0] - a[:, 0, 0]))
    assert (area > 0).all() and area.sum() == pytest.approx(3.0)
    assert is_watertight(np.array([[0, 1, 2], [0, 2, 3], [0, 3, 1], [1, 3, 2]]))


def test_remove_support_plane_cuts_the_table():
    obj = trimesh.creation.box(extents=[1, 1, 1]).subdivide().subdivide()
    obj.apply_translation([0, 0, 0.5])  # stands on z = 0
    g = np.linspace(-2, 2, 21)
    X, Y = np.meshgrid(g, g)
    tv = np.stack([X.ravel(), Y.ravel(), np.zeros(X.size)], 1)
    q = np.arange(21 * 21).reshape(21, 21)
    a, b, c, d = q[:-1, :-1].ravel(), q[:-1, 1:].ravel(), q[1:, 1:].ravel(), q[1:, :-1].ravel()
    table = trimesh.Trimesh(tv, np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)]), process=False)
    scene = trimesh.util.concatenate([obj, table])
    out, rep = remove_support_plane(_mesh(scene), [0, 0.05, 1.0])
    assert rep.found and abs(rep.offset) < 1e-6 and rep.tilt_deg < 5
    z = out.v_pos[:, 2]
    assert float(z.min()) == pytest.approx(rep.cut_offset, abs=1e-6)
    assert float(out.v_pos[:, :2].abs().max()) <= 0.5 + 1e-6  # the table is gone
    assert rep.crop["watertight_after"] and _tm(out).volume == pytest.approx(1 - rep.cut_offset, rel=1e-6)
    same, rep = remove_support_plane(_mesh(trimesh.creation.icosphere(subdivisions=2)), [0, 0, 1])
    assert not rep.found and same.num_faces == 320


# -- ROI ---------------------------------------------------------------------------------------------------------
def _orbit(center, up, n=30, radius=4.0, seed=0):
    rng = np.random.default_rng(seed)
    up = np.asarray(up, float) / np.linalg.norm(up)
    e1 = np.cross(up, [1.0, 0, 0])
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(up, e1)
    ang = np.linspace(0, 2 * np.pi, n, endpoint=False)
    elev = np.radians(25 + 10 * rng.standard_normal(n))
    eyes = center + radius * (np.cos(elev)[:, None] * (np.cos(ang)[:, None] * e1 + np.sin(ang)[:, None] * e2)
                              + np.sin(elev)[:, None] * up)
    targets = np.repeat(np.asarray(center, float)[None], n, 0)
    targets[:6] += 0.15 * rng.standard_normal((6, 3))  # jittered aim
    targets[-3:] = eyes[-3:] + (eyes[-3:] - center)  # three cameras look away
    w2c = look_at(torch.tensor(eyes), torch.tensor(targets), torch.tensor(up).expand(n, 3))
    K = torch.tensor([[300.0, 0, 200], [0, 300.0, 150], [0, 0, 1]]).expand(n, 3, 3)
    return w2c, K


def test_auto_roi_orbit_recovers_centre_and_up():
    c0, up0 = np.array([1.0, -2.0, 0.5]), np.array([0.1, 0.2, 1.0])
    w2c, K = _orbit(c0, up0)
    roi = auto_roi(w2c, K, 400, 300)
    assert roi.source == "cameras"
    assert np.linalg.norm(roi.center.numpy() - c0) < 0.05
    ang = math.degrees(math.acos(float(roi.up.numpy() @ (up0 / np.linalg.norm(up0)))))
    assert ang < 2.0
    assert roi.report["look_at"]["cameras_behind"] >= 3 and roi.report["cameras_used"] <= 27
    assert bool(roi.contains(torch.tensor(c0)[None])[0])
    r = roi.report["camera_box_radius"]
    assert 0.5 < r < 2.0 and torch.allclose(roi.extent, torch.full((3,), 2 * r, dtype=torch.float64))
    # the box axes follow up: the third row of the rotation is up
    assert torch.allclose(roi.rotation[2], roi.up) and torch.allclose(roi.rotation @ roi.rotation.T,
                                                                       torch.eye(3, dtype=torch.float64), atol=1e-9)


def test_auto_roi_points_hug_the_cluster():
    c0, up0 = np.array([1.0, -2.0, 0.5]), np.array([0.0, 0.0, 1.0])
    w2c, K = _orbit(c0, up0)
    rng = np.random.default_rng(1)
    d = rng.standard_normal((3000, 3))
    cluster = c0 + 0.4 * d / np.linalg.norm(d, axis=1, keepdims=True) * rng.random((3000, 1)) ** (1 / 3)
    wall = rng.standard_normal((600, 3))
    room = c0 + 8.0 * wall / np.linalg.norm(wall, axis=1, keepdims=True)
    stray = c0 + rng.uniform(-3, 3, (150, 3))
    pts = torch.tensor(np.concatenate([cluster, room, stray]))
    roi = auto_roi(w2c, K, 400, 300, pts)
    cams_only = auto_roi(w2c, K, 400, 300)
    assert roi.source == "cameras+points"
    assert float(roi.contains(torch.tensor(cluster)).double().mean()) > 0.97
    assert float(roi.contains(torch.tensor(room)).double().mean()) == 0.0
    assert (roi.extent < 1.1).all() and (roi.extent > 0.7).all()  # cluster diameter 0.8 + padding
    assert (roi.extent < cams_only.extent).all()


def test_parse_bbox_and_dict_round_trip():
    roi = parse_bbox("-1, -2,0  1,2,3")
    assert roi.source == "explicit" and roi.box_min.tolist() == [-1, -2, 0] and roi.box_max.tolist() == [1, 2, 3]
    back = roi_from_dict(json.loads(json.dumps(roi_to_dict(roi))))
    assert torch.equal(back.box_min, roi.box_min) and torch.equal(back.rotation, roi.rotation)
    for bad, what in (("1,2,3", "got 3 value"), ("a,b,c,d,e,f", "not six numbers"), ("0,0,0,1,nan,1", "non-finite"),
                      ("0,0,0,1,-1,1", "not on y"), ("", "got 0 value")):
        with pytest.raises(ConfigError, match=what) as ei:
            parse_bbox(bad)
        assert "--bbox" in str(ei.value) and "x0,y0,z0,x1,y1,z1" in str(ei.value)
    with pytest.raises(ConfigError, match="missing key 'box_max'"):
        roi_from_dict({"box_min": [0, 0, 0]})


# -- real captures -----------------------------------------------------------------------------------------------
def _centre_offsets(scene, roi):
    pix, z = scene.cameras.project(roi.center.float()[None])
    size = torch.tensor([scene.width, scene.height], dtype=torch.float32)
    return ((pix[:, 0] - size / 2) / size).abs().max(1).values, z[:, 0]


def test_auto_roi_fox(dataset):
    from meshlift.data import load_scene

    scene = load_scene(dataset("fox"))
    cams = scene.cameras
    roi = auto_roi(cams.world_to_camera, cams.K, cams.width, cams.height, scene.points)
    off, z = _centre_offsets(scene, roi)
    assert (z > 0).all() and float((off < 0.2).float().mean()) > 0.9  # the centre is near the middle
    cc = cams.camera_centers().double()
    assert (roi.extent < (cc.max(0).values - cc.min(0).values).max()).all()  # the room is cut away
    assert not bool(roi.contains(cc).any())  # no camera inside the box
    # colmap2nerf made +z the mean camera up; the right-axes estimate is ~6° from it
    assert float(roi.up[2]) > math.cos(math.radians(10))


def test_auto_roi_statue_covers_the_mask(dataset):
    from PIL import Image, ImageDraw
    from scipy.spatial import ConvexHull

    from meshlift.data import load_scene
    from meshlift.io.images import read_image

    scene = load_scene(dataset("statue_of_liberty_colmap"))
    cams = scene.cameras
    assert scene.points is not None
    roi = auto_roi(cams.world_to_camera, cams.K, cams.width, cams.height, scene.points)
    assert roi.source == "cameras+points"
    off, z = _centre_offsets(scene, roi)
    assert (z > 0).all() and float((off < 0.2).float().mean()) > 0.8
    cc = cams.camera_centers().double()
    assert (roi.extent < (cc.max(0).values - cc.min(0).values).max()).all()
    assert not bool(roi.contains(cc).any())
    corners, _ = cams.project(roi.corners().float())
    cover = []
    for i in range(0, len(scene), 4):
        mask = read_image(scene.mask_paths[i])[..., 0].numpy() > 0.5
        hull = ConvexHull(corners[i].numpy())
        im = Image.new("L", (cams.width, cams.height), 0)
        ImageDraw.Draw(im).polygon([tuple(corners[i, j].tolist()) for j in hull.vertices], fill=1)
        cover.append((mask & (np.asarray(im) > 0)).sum() / max(mask.sum(), 1))
    assert np.mean(cover) > 0.9 and np.min(cover) > 0.8  # the statue is inside the box in every view


def _thin_object_views(n=30):
    """A ball (radius 0.4 at the origin) with a thin raised arm (a rod of radius 0.03 from z = 0.3 to 1.2): an
    orbit of ``n`` 400 x 300 cameras, the masks (dense samples of both solids splatted), SfM-like points on the
    ball only (the statue's torch had few SfM points)."""
    w2c, K = _orbit(np.zeros(3), [0.0, 0, 1], n=n, radius=4.0)
    rng = np.random.default_rng(3)
    d = rng.standard_normal((30_000, 3))
    ball = 0.4 * d / np.linalg.norm(d, axis=1, keepdims=True) * rng.random((30_000, 1)) ** (1 / 3)
    a = rng.uniform(0, 2 * np.pi, 8_000)
    rr = 0.03 * np.sqrt(rng.random(8_000))
    rod = np.stack([rr * np.cos(a), rr * np.sin(a), rng.uniform(0.3, 1.2, 8_000)], 1)
    pts = torch.tensor(np.concatenate([ball, rod]), dtype=torch.float64)
    pc = torch.einsum("nij,pj->npi", w2c[:, :3, :3].double(), pts) + w2c[:, None, :3, 3].double()
    uv = torch.einsum("nij,npj->npi", K.double(), pc)
    col = torch.floor(uv[..., 0] / uv[..., 2]).long()
    row = torch.floor(uv[..., 1] / uv[..., 2]).long()
    masks = torch.zeros(n, 300, 400)
    for v in range(n):
        ok = (pc[v, :, 2] > 0) & (col[v] >= 0) & (col[v] < 400) & (row[v] >= 0) & (row[v] < 300)
        masks[v, row[v, ok], col[v, ok]] = 1.0
    masks = torch.nn.functional.max_pool2d(masks[:, None], 3, 1, 1)[:, 0]  # close the gaps between samples
    return w2c, K, masks, torch.tensor(ball[:3000]), rod


def test_mask_hull_roi_keeps_a_thin_part_the_points_miss():
    """The statue's failure in small: the SfM points' box cuts the thin raised arm; the box of the masks' visual
    hull holds it (and stays close to the object), even with two views whose mask lost the arm."""
    from meshlift.data.roi import mask_hull_roi

    w2c, K, masks, ball_pts, rod = _thin_object_views()
    roi = auto_roi(w2c, K, 400, 300, ball_pts)
    assert roi.source == "cameras+points"
    top = torch.tensor([[0.0, 0.0, 1.19]], dtype=torch.float64)
    assert not bool(roi.contains(top)[0])  # the points' box cuts the arm
    masks[:2, :, :] *= 0  # two views see nothing (a bad mask): tolerated (HULL_MISS_FRACTION)
    out = mask_hull_roi(roi, w2c, K, masks)
    assert out.source == "cameras+points+masks" and torch.equal(out.rotation, roi.rotation)
    assert float(out.contains(torch.tensor(rod)).double().mean()) == 1.0
    assert float(out.contains(ball_pts).double().mean()) == 1.0
    pb_lo, pb_hi = out.box_min, out.box_max  # box frame: the third axis is up (z here)
    assert float(pb_hi[2]) < 1.2 + 0.25 and float(pb_lo[2]) > -0.4 - 0.25  # conservative, not loose
    assert (out.extent[:2] < 0.8 + 0.4).all()
    assert out.report["masks"]["hull_cells"] > 0 and not out.report["masks"]["reaches_border"]


def test_mask_hull_roi_without_a_hull_keeps_the_box_and_says_so():
    from meshlift.data.roi import mask_hull_roi

    w2c, K, masks, ball_pts, _ = _thin_object_views(n=12)
    roi = auto_roi(w2c, K, 400, 300, ball_pts)
    out = mask_hull_roi(roi, w2c, K, torch.zeros_like(masks), cells=16)
    assert out.source == roi.source and torch.equal(out.box_min, roi.box_min)
    assert any("visual hull" in n for n in out.report["notes"])
    with pytest.raises(CameraError, match="masks must be"):
        mask_hull_roi(roi, w2c, K, masks[:3])
    with pytest.raises(ConfigError, match="cells"):
        mask_hull_roi(roi, w2c, K, masks, cells=2)


@pytest.mark.slow
def test_mask_hull_roi_statue_holds_the_torch(dataset):
    """The statue (an H200 run of 2026-12-04): the points' box cut the torch and the plinth; the masks' hull box
    covers every training mask (the box's projection holds >= 99.5 % of each view's mask pixels)."""
    from PIL import Image, ImageDraw
    from scipy.spatial import ConvexHull

    from meshlift.data import load_scene
    from meshlift.data.roi import mask_hull_roi
    from meshlift.io.images import read_image

    scene = load_scene(dataset("statue_of_liberty_colmap"))
    cams = scene.cameras
    roi = auto_roi(cams.world_to_camera, cams.K, cams.width, cams.height, scene.points)
    masks = torch.stack([read_image(p)[..., 0] for p in scene.mask_paths])
    out = mask_hull_roi(roi, cams.world_to_camera, cams.K, masks)

    def cover(box):
        corners, _ = cams.project(box.corners().float())
        c = []
        for i in range(len(scene)):
            mask = masks[i].numpy() > 0.5
            im = Image.new("L", (cams.width, cams.height), 0)
            hull = ConvexHull(corners[i].numpy())
            ImageDraw.Draw(im).polygon([tuple(corners[i, j].tolist()) for j in hull.vertices], fill=1)
            c.append((mask & (np.asarray(im) > 0)).sum() / max(mask.sum(), 1))
        return np.array(c)

    before, after = cover(roi), cover(out)
    assert before.min() < 0.99  # the torch / plinth outside the points' box in some view
    assert after.min() > 0.995, after.min()
    assert (out.extent < 1.35 * roi.extent.max()).all()  # not the whole search cube
