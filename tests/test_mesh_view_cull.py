"""view_cull: floaters that only the mask background or no training view shows go, the object stays whole.

The scene: a sphere (the object) seen by cameras in the upper hemisphere whose masks show the sphere alone,
plus two floaters a surface method can leave behind — a small cube beside the object (seen against the
background, outside the visual hull) and a small cube under it (inside the hull, seen by no training view).
"""

from __future__ import annotations

import math

import pytest
import torch
import trimesh

from meshlift.errors import MeshError
from meshlift.mesh.visibility import (dilate_masks, training_view_hits, view_cull, visual_hull_occupancy)
from meshlift.structures.mesh import Mesh

RES = 96


def _mesh(tm: trimesh.Trimesh) -> Mesh:
    return Mesh(v_pos=torch.tensor(tm.vertices, dtype=torch.float32),
                t_pos_idx=torch.tensor(tm.faces, dtype=torch.int64))


def _views(obj: Mesh, n: int = 20):
    """``(world_to_clip [n, 4, 4], masks [n, RES, RES, 1])`` of cameras above the object, masks = its coverage."""
    from meshlift.cameras import cameras_on_sphere
    from meshlift.render import visible_triangles

    cams = cameras_on_sphere(n, 3.0, math.radians(40), RES, elevation_range=(math.radians(20), math.radians(70)))
    w2clip = cams.world_to_clip().float()
    homog = torch.cat([obj.v_pos, torch.ones(obj.num_vertices, 1)], 1)
    pos = torch.einsum("vj,bij->bvi", homog, w2clip).contiguous()
    masks = (visible_triangles(pos, obj.t_pos_idx.int(), (RES, RES)) >= 0).float()[..., None]
    return w2clip, masks


def _scene():
    obj = trimesh.creation.icosphere(subdivisions=3, radius=0.6)
    beside = trimesh.creation.box(extents=(0.12, 0.12, 0.12))
    beside.apply_translation((1.0, 0.4, 0.0))
    under = trimesh.creation.box(extents=(0.1, 0.1, 0.1))
    under.apply_translation((0.0, -0.62, 0.0))  # tucked under the sphere: the cameras above never see it
    return obj, beside, under


def test_floaters_removed_object_kept():
    obj, beside, under = _scene()
    w2clip, masks = _views(_mesh(obj))
    mesh = _mesh(trimesh.util.concatenate([obj, beside, under]))
    before = mesh.v_pos.clone()
    culled, info = view_cull(mesh, w2clip, masks, mode="floaters")
    assert torch.equal(mesh.v_pos, before)  # input untouched
    assert info["faces_before"] == len(obj.faces) + 24
    assert culled.num_faces == len(obj.faces) == info["faces_after"]  # both cubes gone, every sphere face kept
    assert float(culled.v_pos.norm(dim=1).max()) < 0.601
    tm = trimesh.Trimesh(culled.v_pos.numpy(), culled.t_pos_idx.numpy(), process=False)
    assert tm.is_watertight  # no pinhole in the object
    assert info["pieces_removed"] >= 1 and info["outside_hull"] >= 12  # the cube beside fails the hull test


def test_unseen_keeps_pieces_inside_the_hull_and_off_keeps_everything():
    obj, beside, under = _scene()
    w2clip, masks = _views(_mesh(obj))
    mesh = _mesh(trimesh.util.concatenate([obj, beside, under]))
    culled, info = view_cull(mesh, w2clip, masks, mode="unseen")
    # the cube under the object projects inside every mask and no view sees it: only "floaters" removes it
    assert culled.num_faces == len(obj.faces) + 12 and info["pieces_removed"] == 0
    same, info = view_cull(mesh, w2clip, masks, mode="off")
    assert same is mesh and info["removed"] == 0


def test_background_only_faces():
    """A floater inside the hull of the few views that see it against the background still goes: a cube seen
    by one camera only, beside the object's silhouette in that view, outside the dilated mask."""
    obj, _, _ = _scene()
    w2clip, masks = _views(_mesh(obj), n=3)
    cube = trimesh.creation.box(extents=(0.15, 0.15, 0.15))
    cube.apply_translation((0.0, 1.2, 0.0))
    mesh = _mesh(trimesh.util.concatenate([obj, cube]))
    fg, bg = training_view_hits(mesh, w2clip, masks)
    n_obj = len(obj.faces)
    assert int(fg[n_obj:].sum()) == 0 and int(bg[n_obj:].sum()) > 0  # the cube: seen, never in a mask
    assert int(bg[:n_obj].sum()) == 0  # the object: never outside its own (dilated) mask
    seen = int((bg[n_obj:] > 0).sum())
    culled, info = view_cull(mesh, w2clip, masks, mode="unseen")
    assert info["background_only"] == seen and culled.num_faces <= n_obj + 12 - seen  # the seen faces go
    culled, info = view_cull(mesh, w2clip, masks, mode="floaters")  # and the unseen rest of the cube with them
    assert culled.num_faces == n_obj


def test_visual_hull_dilation_and_points_outside_the_images():
    obj, _, _ = _scene()
    w2clip, masks = _views(_mesh(obj), n=8)
    pts = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.3, 0.0], [2.0, 0.0, 0.0], [0.0, 100.0, 0.0]])
    inside = visual_hull_occupancy(pts, w2clip, masks)
    assert inside.tolist() == [True, True, False, True]  # far above: outside every image, kept
    # a point just outside the silhouette: carved without dilation, kept with it
    r = 0.6 * 1.015
    edge = torch.tensor([[r, 0.0, 0.0]])
    assert not bool(visual_hull_occupancy(edge, w2clip, masks)[0])
    assert bool(visual_hull_occupancy(edge, w2clip, masks, dilate_px=3)[0])
    d = dilate_masks(masks, 1)
    assert bool((d >= masks).all()) and float(d.sum()) > float(masks.sum())
    assert dilate_masks(masks, 0) is masks


def test_errors_name_the_fix():
    obj, _, _ = _scene()
    mesh = _mesh(obj)
    w2clip, masks = _views(mesh, n=4)
    with pytest.raises(MeshError, match="mode"):
        view_cull(mesh, w2clip, masks, mode="everything")
    with pytest.raises(MeshError, match="view_cull=off"):
        view_cull(mesh, w2clip, None)
    with pytest.raises(MeshError, match="view_cull=off"):  # masks that cover nothing: every face would go
        view_cull(mesh, w2clip, torch.zeros_like(masks))
    with pytest.raises(MeshError, match="N, H, W, 1"):
        view_cull(mesh, w2clip, masks[:2])


def test_a_silhouette_a_little_fatter_than_the_masks_is_not_eroded():
    """Masks of a sphere 4 % smaller than the mesh (about 1.3 px at this size): with the dilation over that
    margin nothing goes; with a dilation under it, asking the hull test of the vertices as well as the centroid
    keeps all but a few faces (centroids alone would cut a strip along every view's rim: 396 of 1280 faces)."""
    obj = trimesh.creation.icosphere(subdivisions=3, radius=0.6)
    w2clip, masks = _views(_mesh(trimesh.creation.icosphere(subdivisions=3, radius=0.6 * 0.96)))
    mesh = _mesh(obj)
    same, info = view_cull(mesh, w2clip, masks, dilate_px=2)
    assert same is mesh and info["removed"] == 0
    _, info = view_cull(mesh, w2clip, masks, dilate_px=1)
    assert info["outside_hull"] <= 0.05 * mesh.num_faces


def test_auto_tolerance_is_half_a_grid_cell_in_pixels():
    from meshlift.data.views import PosedViews
    from meshlift.methods.nvdiffrec.config import SurfaceConfig
    from meshlift.methods.nvdiffrec.geometry import view_cull_tolerance_px

    from meshlift.cameras import cameras_on_sphere

    w2clip, masks = _views(_mesh(trimesh.creation.icosphere(subdivisions=1)), n=4)
    cams = cameras_on_sphere(4, 3.0, math.radians(40), RES, elevation_range=(math.radians(20), math.radians(70)))
    views = PosedViews(world_to_clip=w2clip, camera_pos=cams.camera_centers().float(),
                       images=torch.zeros(4, RES, RES, 3), masks=masks, background=torch.ones(3))
    focal = 0.5 * RES / math.tan(math.radians(20))  # 40° over the image side
    for grid, scale in ((32, 2.1), (8, 2.4), (96, 2.1)):
        cell_px = scale / grid * focal / 3.0
        want = max(2, math.ceil(0.5 * cell_px - 1e-9))
        assert view_cull_tolerance_px(views, SurfaceConfig(grid_res=grid, mesh_scale=scale)) == want
    assert view_cull_tolerance_px(views, SurfaceConfig(view_cull_dilate_px=5)) == 5


def test_a_sliver_reaching_into_the_hull_goes_as_a_piece():
    """A two-triangle sliver from the sphere's surface out into empty space (what the lego --quick run left
    beside the model): each triangle touches the hull with a vertex, so the per-face test keeps both, but the
    piece is mostly outside (5 of its 8 points): ``floaters`` removes it, ``unseen`` does not."""
    obj, _, _ = _scene()
    w2clip, masks = _views(_mesh(obj))
    quad = torch.tensor([[0.55, 0.0, 0.0], [1.2, 0.0, 0.0], [1.2, 0.1, 0.0], [0.55, 0.1, 0.0]])
    sphere = _mesh(obj)
    n = sphere.num_vertices
    mesh = Mesh(v_pos=torch.cat([sphere.v_pos, quad]),
                t_pos_idx=torch.cat([sphere.t_pos_idx, torch.tensor([[n, n + 1, n + 2], [n, n + 2, n + 3]])]))
    kept, info = view_cull(mesh, w2clip, masks, mode="unseen")
    assert kept.num_faces == sphere.num_faces + 2 and info["outside_hull"] == 0
    culled, info = view_cull(mesh, w2clip, masks, mode="floaters")
    assert culled.num_faces == sphere.num_faces and info["pieces_outside_hull"] == 1
