"""Remove faces that no outside viewer can see (interior sheets and pockets left by isosurfacing).

Marching tetrahedra / FlexiCubes on an optimised SDF often leave *interior* surface: sheets or bubbles
inside the object that the photos never constrain (they are hidden), so image losses cannot remove them.
They do not change renders but they add surface that is not there (Chamfer and F-score precision suffer)
and waste triangles in the asset.

Design: render the mesh with meshlift's own visibility pass from ``n_views`` orthographic directions
spread evenly on the sphere (a Fibonacci lattice), each view framing the mesh's bounding sphere. A face is
*seen* when it is the nearest surface at some pixel centre of some view. Faces smaller than a pixel can
be missed; to avoid opening pinholes in the visible surface, hidden faces with at least two kept
edge-neighbours are kept again (``fill_rounds`` rounds), and a face needs ``min_pixels`` sightings (a
single pixel can leak through a rounding gap of the float32 edge tests). Interior sheets have hidden neighbours and stay
removed. Deep cavities that no direction sees are removed as well (rare on reconstructed objects).

Memory: one ``[views_per_batch, R, R]`` int64 id buffer plus the rasterizer's fragment budget.

The second half of this module culls against the *training* views (:func:`view_cull`): geometry that no
training photo needs. A surface method fitted to masked photos can grow pieces that the image loss never
removes — bits seen only against the mask background while the mask loss is still small, or pieces that no
training camera sees at all (under the object, inside a concavity). Three tests, each from the masks alone:

1. *background-only faces*: the nearest surface at some training pixel, but never at a pixel inside any
   view's foreground mask (dilated by ``dilate_px``);
2. *outside the visual hull*: the face's centroid and its three vertices each project onto the background of
   some view (masks dilated by ``dilate_px``; :func:`visual_hull_occupancy`, the one home of the visual-hull
   test — the surface method's ``sdf_init=visual_hull`` uses it too). Asking it of the vertices as well keeps
   the faces along a silhouette that is a little fatter than the masks: each shares a vertex with the
   surface inside, so no strip is cut out along the object's edges;
3. *pieces without support*: a connected piece (faces sharing a vertex) of which no face is seen inside any
   training view's foreground mask, or most of whose points (its faces' vertices and centroids, counted per
   face) lie outside the visual hull — a sliver that reaches into the hull keeps the faces that touch it under
   test 2, but as a piece it is still mostly outside.

Removed faces with two or more kept edge-neighbours are kept again (``fill_rounds``), as for the hidden
faces, so a stray pixel outside a mask opens no pinhole in the object's surface.

Memory of :func:`view_cull`: one ``[views_per_batch, H, W]`` int64 id buffer at the training views' size,
plus the rasterizer's fragment budget (``max_fragments``).
"""

from __future__ import annotations

from typing import Optional

import torch

import torch.nn.functional as F

from meshlift.cameras import fibonacci_directions
from meshlift.errors import MeshError
from meshlift.structures.mesh import Mesh


def orthographic_clip(v_pos: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """Clip-space positions ``[B, V, 4]`` of ``v_pos [V, 3]`` seen from outside along each ``directions [B, 3]``.

    The viewer sits on the +d side looking towards −d; x, y span the bounding sphere (with 2% margin), the
    nearest point to the viewer has the smallest z/w (docs/conventions.md §3), w = 1.
    """
    c = 0.5 * (v_pos.min(0).values + v_pos.max(0).values)
    s = float((v_pos - c).norm(dim=-1).max()) * 1.02 + 1e-12
    d = torch.nn.functional.normalize(directions.to(v_pos), dim=-1)
    helper = torch.where(d[:, 2:3].abs() < 0.9, d.new_tensor([0.0, 0.0, 1.0]), d.new_tensor([1.0, 0.0, 0.0]))
    right = torch.nn.functional.normalize(torch.cross(helper.expand_as(d), d, dim=-1), dim=-1)
    up = torch.cross(d, right, dim=-1)
    p = (v_pos - c) / s  # [V, 3]
    x = p @ right.T  # [V, B]
    y = p @ up.T
    z = -(p @ d.T) * 0.5
    w = torch.ones_like(x)
    return torch.stack([x, y, z, w], dim=-1).permute(1, 0, 2).contiguous()


def seen_faces(mesh: Mesh, *, n_views: int = 64, resolution: int = 512, views_per_batch: int = 8,
               min_pixels: int = 2, max_fragments: Optional[int] = None) -> torch.Tensor:
    """``[T]`` bool: faces that are the nearest surface at ``min_pixels`` or more pixels over all views.

    ``min_pixels = 2`` ignores single-pixel sightings: float32 edge tests are not watertight at pixel
    centres that fall within rounding error of a vertex, so an interior face can show through one pixel.

    Args:
        mesh: the mesh (any device; the visibility pass runs there).
        n_views: number of view directions (Fibonacci sphere).
        resolution: square image size of each view, in pixels.
        views_per_batch: views rasterised together (memory knob).
        max_fragments: the rasterizer's fragment budget (None: its default).
    """
    from meshlift.render import visible_triangles

    if n_views < 1:
        raise MeshError(f"hidden-face removal needs n_views >= 1, got {n_views}")
    T = mesh.num_faces
    count = torch.zeros(T, dtype=torch.long, device=mesh.device)
    if T == 0:
        return count.bool()
    tri = mesh.t_pos_idx.to(torch.int32)
    dirs = fibonacci_directions(n_views, device=mesh.device)
    v = mesh.v_pos.detach().float()
    for s in range(0, n_views, views_per_batch):
        pos = orthographic_clip(v, dirs[s:s + views_per_batch])
        ids = visible_triangles(pos, tri, (resolution, resolution), max_fragments=max_fragments)
        ids = ids[ids >= 0]
        count += torch.bincount(ids, minlength=T)
    return count >= min_pixels


def _face_neighbours(faces: torch.Tensor) -> torch.Tensor:
    """``[P, 2]`` pairs of faces that share an edge (each pair listed in both orders)."""
    T = faces.shape[0]
    e = torch.cat([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]], 0)
    e = torch.sort(e, dim=1).values
    fid = torch.arange(T, device=faces.device).repeat(3)
    key = e[:, 0] * (int(faces.max()) + 1) + e[:, 1]
    order = torch.argsort(key)
    key, fid = key[order], fid[order]
    same = key[1:] == key[:-1]
    a, b = fid[:-1][same], fid[1:][same]
    return torch.cat([torch.stack([a, b], 1), torch.stack([b, a], 1)], 0)


def remove_hidden_faces(mesh: Mesh, *, n_views: int = 64, resolution: int = 512, fill_rounds: int = 2,
                        views_per_batch: int = 8, min_pixels: int = 2,
                        max_fragments: Optional[int] = None) -> tuple[Mesh, dict]:
    """Drop faces no outside view sees (see the module docstring); returns ``(new_mesh, info)``.

    Vertices no longer used are dropped and every per-vertex / per-corner attribute follows; the input mesh
    is not modified. ``info`` has ``faces_before``, ``faces_after``, ``removed``.

    Raises:
        MeshError: ``n_views`` < 1.
    """
    T = mesh.num_faces
    if T == 0:
        return mesh, {"faces_before": 0, "faces_after": 0, "removed": 0}
    keep = seen_faces(mesh, n_views=n_views, resolution=resolution, views_per_batch=views_per_batch,
                      min_pixels=min_pixels, max_fragments=max_fragments)
    keep = _regrow(keep, mesh.t_pos_idx, fill_rounds)
    info = {"faces_before": T, "faces_after": int(keep.sum()), "removed": int(T - keep.sum())}
    if bool(keep.all()):
        return mesh, info
    return _select_faces(mesh, keep), info


def _regrow(keep: torch.Tensor, faces: torch.Tensor, rounds: int) -> torch.Tensor:
    """``keep`` with removed faces that have two or more kept edge-neighbours kept again, ``rounds`` times
    (closes pinholes that a missed sighting would open; a removed sheet or piece has no kept neighbours)."""
    if rounds <= 0 or bool(keep.all()):
        return keep
    nb = _face_neighbours(faces)
    for _ in range(rounds):
        kept_nb = torch.zeros(keep.shape[0], dtype=torch.long, device=keep.device)
        kept_nb.index_add_(0, nb[:, 0], keep[nb[:, 1]].long())
        grow = (~keep) & (kept_nb >= 2)
        if not bool(grow.any()):
            break
        keep = keep | grow
    return keep


def _select_faces(mesh: Mesh, keep: torch.Tensor) -> Mesh:
    """A new mesh with the faces where ``keep`` holds, unused vertices removed, attributes following."""
    from dataclasses import replace

    f = mesh.t_pos_idx[keep]
    used = torch.zeros(mesh.num_vertices, dtype=torch.bool, device=f.device)
    used[f.reshape(-1)] = True
    remap = torch.full((mesh.num_vertices,), -1, dtype=torch.long, device=f.device)
    remap[used] = torch.arange(int(used.sum()), device=f.device)
    kw = dict(v_pos=mesh.v_pos[used], t_pos_idx=remap[f])
    if mesh.v_color is not None:
        kw["v_color"] = mesh.v_color[used]
    for attr_name, idx_name in (("v_tex", "t_tex_idx"), ("v_nrm", "t_nrm_idx")):
        attr, idx = getattr(mesh, attr_name), getattr(mesh, idx_name)
        if idx is not None:
            kw[idx_name] = idx[keep]
        elif attr is not None and attr.shape[0] == mesh.num_vertices:  # per-vertex, indexed like v_pos
            kw[attr_name] = attr[used]
    return replace(mesh, **kw)


# ---- culling against the training views (module docstring, second half) ------------------------------------

#: The modes of :func:`view_cull` (and of the surface method's ``view_cull`` field): ``off``; ``unseen`` =
#: background-only faces and faces outside the visual hull; ``floaters`` = those and the pieces without a
#: foreground-seen face.
VIEW_CULL_MODES = ("off", "unseen", "floaters")


def _check_views(world_to_clip: torch.Tensor, masks: Optional[torch.Tensor], what: str) -> None:
    if world_to_clip.ndim != 3 or tuple(world_to_clip.shape[1:]) != (4, 4):
        raise MeshError(f"{what}: world_to_clip must be [N, 4, 4], got {tuple(world_to_clip.shape)}")
    if masks is None:
        raise MeshError(f"{what} needs the views' masks ([N, H, W, 1] coverage); these views have none — "
                        "turn the visibility cull off (view_cull=off) for data without masks")
    if masks.ndim != 4 or masks.shape[-1] != 1 or masks.shape[0] != world_to_clip.shape[0]:
        raise MeshError(f"{what}: masks must be [N, H, W, 1] with N = {world_to_clip.shape[0]} views, got "
                        f"{tuple(masks.shape)}")


def dilate_masks(masks: torch.Tensor, px: int) -> torch.Tensor:
    """``masks [N, H, W, 1]`` (coverage in [0, 1]) dilated by ``px`` pixels: the maximum over the
    ``(2 px + 1)²`` square around each pixel (every pixel within Chebyshev distance ``px`` of the mask).
    ``px = 0`` returns ``masks`` itself. Float32, on ``masks``' device.

    Raises:
        MeshError: ``px`` < 0.
    """
    if px < 0:
        raise MeshError(f"dilate_masks: px must be >= 0 pixels, got {px}")
    if px == 0:
        return masks
    m = masks.permute(0, 3, 1, 2).float()
    return F.max_pool2d(m, 2 * px + 1, stride=1, padding=px).permute(0, 2, 3, 1)


def visual_hull_occupancy(points: torch.Tensor, world_to_clip: torch.Tensor, masks: torch.Tensor, *,
                          threshold: float = 0.5, dilate_px: int = 0, chunk: int = 1 << 18) -> torch.Tensor:
    """Inside-the-visual-hull test of ``points [N, 3]`` against the masks of posed views.

    A point is carved away when it projects inside some image (in front of its camera) onto a mask value
    (bilinear, after :func:`dilate_masks` by ``dilate_px``) below ``threshold``; points outside every image
    are kept (Laurentini 1994, "The visual hull concept").

    Args:
        points: ``[N, 3]`` in the frame of ``world_to_clip``.
        world_to_clip: ``[V, 4, 4]`` clip-space projections (docs/conventions.md §3).
        masks: ``[V, H, W, 1]`` coverage in [0, 1]; the test runs on their device.
        threshold: mask value below which a pixel is background.
        dilate_px: dilate the masks by this many pixels first (tolerance for a silhouette a little off).
        chunk: points per step (memory knob: a ``[chunk, 4]`` buffer per view).

    Returns:
        ``[N]`` bool on the CPU, True inside the hull.

    Raises:
        MeshError: bad shapes, no masks, ``dilate_px`` < 0.
    """
    _check_views(world_to_clip, masks, "visual_hull_occupancy")
    dev = masks.device
    inside = torch.ones(points.shape[0], dtype=torch.bool, device=dev)
    pts = points.detach().float().to(dev)
    w2c = world_to_clip.float().to(dev)
    n_views = w2c.shape[0]
    for v in range(n_views):
        # grid_sample with align_corners=False maps -1/+1 to the outer pixel edges: the NDC convention (§3)
        m = dilate_masks(masks[v:v + 1].float(), dilate_px).permute(0, 3, 1, 2)  # [1, 1, H, W]
        for s in range(0, pts.shape[0], chunk):
            p = pts[s:s + chunk]
            clip = torch.cat([p, torch.ones_like(p[:, :1])], -1) @ w2c[v].T  # [n, 4]
            w = clip[:, 3]
            front = w > 1e-6
            ndc = clip[:, :2] / w.clamp(min=1e-6)[:, None]
            in_img = front & (ndc.abs() <= 1).all(-1)
            val = F.grid_sample(m, ndc[None, None], mode="bilinear", align_corners=False)[0, 0, 0]
            inside[s:s + chunk] &= ~(in_img & (val < threshold))
    return inside.cpu()


def training_view_hits(mesh: Mesh, world_to_clip: torch.Tensor, masks: torch.Tensor, *, dilate_px: int = 2,
                       threshold: float = 0.5, views_per_batch: int = 4,
                       max_fragments: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """How often each face is the nearest surface at a pixel centre of the posed views, inside and outside
    their foreground masks.

    Args:
        mesh: the mesh, in the frame of ``world_to_clip`` (any device; the pass runs there).
        world_to_clip: ``[V, 4, 4]`` projections of the views (docs/conventions.md §3).
        masks: ``[V, H, W, 1]`` coverage in [0, 1] at the views' size (moved per batch to the mesh's device).
        dilate_px: a pixel counts as foreground within this many pixels of the mask (:func:`dilate_masks`).
        threshold: mask value (after dilation) from which a pixel is foreground.
        views_per_batch: views rasterised together (memory knob).
        max_fragments: the rasterizer's fragment budget (None: its default).

    Returns:
        ``(foreground [T], background [T])`` int64 pixel counts on the mesh's device.

    Raises:
        MeshError: bad shapes or no masks.
    """
    from meshlift.render import visible_triangles

    _check_views(world_to_clip, masks, "training_view_hits")
    T, dev = mesh.num_faces, mesh.device
    fg = torch.zeros(T, dtype=torch.long, device=dev)
    bg = torch.zeros(T, dtype=torch.long, device=dev)
    if T == 0:
        return fg, bg
    tri = mesh.t_pos_idx.to(torch.int32)
    v = mesh.v_pos.detach().float()
    homog = torch.cat([v, torch.ones_like(v[:, :1])], -1)  # [V, 4]
    H, W = int(masks.shape[1]), int(masks.shape[2])
    for s in range(0, world_to_clip.shape[0], max(1, int(views_per_batch))):
        w2c = world_to_clip[s:s + views_per_batch].to(dev).float()
        pos = torch.einsum("vj,bij->bvi", homog, w2c).contiguous()  # [B, V, 4]
        ids = visible_triangles(pos, tri, (H, W), max_fragments=max_fragments)
        fore = dilate_masks(masks[s:s + views_per_batch].to(dev).float(), dilate_px)[..., 0] >= threshold
        hit = ids >= 0
        fg += torch.bincount(ids[hit & fore], minlength=T)
        bg += torch.bincount(ids[hit & ~fore], minlength=T)
    return fg, bg


def view_cull(mesh: Mesh, world_to_clip: torch.Tensor, masks: torch.Tensor, *, mode: str = "floaters",
              dilate_px: int = 2, threshold: float = 0.5, min_pixels: int = 1, fill_rounds: int = 1,
              views_per_batch: int = 4, max_fragments: Optional[int] = None) -> tuple[Mesh, dict]:
    """Drop the geometry no training view needs (the tests of the module docstring); returns ``(mesh, info)``.

    Args:
        mesh: the mesh in the frame of ``world_to_clip`` (not modified).
        world_to_clip, masks: the training views, as for :func:`training_view_hits`.
        mode: one of :data:`VIEW_CULL_MODES`: ``off`` returns ``mesh``; ``unseen`` removes background-only
            faces and faces whose centroid and vertices are outside the visual hull; ``floaters`` also removes the
            connected pieces without a foreground-seen face or mostly outside the hull.
        dilate_px: mask dilation (pixels) of both the foreground test and the hull.
        threshold: mask value from which a pixel is foreground.
        min_pixels: sightings that make a face seen (in the foreground, or against the background).
        fill_rounds: rounds of keeping removed faces with two kept edge-neighbours again (no pinholes).
        views_per_batch, max_fragments: memory knobs of the visibility pass.

    Returns:
        The new mesh (unused vertices dropped, attributes following) and ``info``: ``faces_before``,
        ``background_only``, ``outside_hull`` (the two per-face tests; a face can fail both),
        ``regrown``, ``pieces_removed`` (of which ``pieces_outside_hull`` for being mostly outside),
        ``piece_faces_removed``, ``removed``, ``faces_after``.

    Raises:
        MeshError: unknown ``mode``; bad view shapes or no masks; every face would go (the masks do not
            cover the mesh: cameras in another convention, or another frame) — use ``mode="off"``.
    """
    if mode not in VIEW_CULL_MODES:
        raise MeshError(f"view_cull: mode {mode!r} is not one of {', '.join(VIEW_CULL_MODES)}")
    T = mesh.num_faces
    info = {"faces_before": T, "background_only": 0, "outside_hull": 0, "regrown": 0, "pieces_removed": 0,
            "pieces_outside_hull": 0, "piece_faces_removed": 0, "removed": 0, "faces_after": T}
    if mode == "off" or T == 0:
        return mesh, info
    _check_views(world_to_clip, masks, "view_cull")
    dev = mesh.device
    fg, bg = training_view_hits(mesh, world_to_clip, masks, dilate_px=dilate_px, threshold=threshold,
                                views_per_batch=views_per_batch, max_fragments=max_fragments)
    seen_fg = fg >= min_pixels
    bg_only = (~seen_fg) & (bg >= min_pixels)
    v = mesh.v_pos.detach().float()
    points = torch.cat([v, v[mesh.t_pos_idx].mean(1)])  # vertices, then face centroids
    out_pt = ~visual_hull_occupancy(points, world_to_clip, masks, threshold=threshold, dilate_px=dilate_px).to(dev)
    corner_out, centroid_out = out_pt[:mesh.num_vertices][mesh.t_pos_idx], out_pt[mesh.num_vertices:]  # [T, 3], [T]
    outside = centroid_out & corner_out.all(1)
    out_count = corner_out.sum(1) + centroid_out.long()  # of 4
    keep0 = ~(bg_only | outside)
    keep = _regrow(keep0, mesh.t_pos_idx, fill_rounds)
    info.update(background_only=int(bg_only.sum()), outside_hull=int(outside.sum()),
                regrown=int((keep & ~keep0).sum()))
    if mode == "floaters" and bool(keep.any()):
        import numpy as np

        from meshlift.mesh.clean import face_components

        kept = torch.nonzero(keep).squeeze(1)
        n, lab = face_components(mesh.t_pos_idx[kept].cpu().numpy(), mesh.num_vertices)
        support = np.bincount(lab, weights=seen_fg[kept].cpu().numpy().astype(np.float64), minlength=n)
        out_frac = (np.bincount(lab, weights=out_count[kept].cpu().numpy().astype(np.float64), minlength=n)
                    / (4.0 * np.bincount(lab, minlength=n)))
        bad = (support == 0) | (out_frac > 0.5)
        lost = torch.from_numpy(bad[lab]).to(dev)
        keep[kept[lost]] = False
        info.update(pieces_removed=int(bad.sum()), pieces_outside_hull=int((out_frac > 0.5).sum()),
                    piece_faces_removed=int(lost.sum()))
    n_keep = int(keep.sum())
    if n_keep == 0:
        raise MeshError(
            f"view_cull: all {T} faces would go — no face is seen inside the training views' masks. The masks "
            "do not cover the mesh (poses in the other convention? see `meshlift inspect DATA`); to keep the "
            "mesh anyway turn the cull off (--set view_cull=off)")
    info.update(removed=T - n_keep, faces_after=n_keep)
    if n_keep == T:
        return mesh, info
    return _select_faces(mesh, keep), info
