"""``extract=tsdf``: the mesh of surface-aligned Gaussians by truncated-SDF fusion of their rendered depth.

Why (measured, docs/results.md "MILo on real captures"): on a real, unmasked capture MILo's Delaunay mesh
(pivots of the Gaussians, a learned occupancy, marching tets) rendered 11 dB where its own Gaussians
rendered 22.6 dB — a shard field of large spiky triangles — because its occupancy is only constrained where
pivots are, and the background of a room gives pivots everywhere. The extraction 2DGS, GOF and PGSR use is
robust to that: every training view's depth votes for free space in front of the surface and for the
surface itself, and a surface is only made where views agree. The steps:

1. **Surface-aligned Gaussians** during training (:class:`~meshlift.methods.gaussians.surface.SurfaceRegularizer`):
   flat Gaussians (PGSR's scale loss), their unbiased plane depth and depth-normal consistency, so the depth
   lies on the surface rather than inside it.
2. **Depth maps** of the trained Gaussians at every training view (:func:`render_depths`): the plane depth
   (or median depth) where the pixel is opaque enough (alpha > ``depth_min_alpha``), else empty. Kept on the CPU (4 bytes a pixel)
   and streamed to the device in chunks of ``chunk_views``.
3. **The region** (:func:`fusion_region`): for a bounded input (a mesh's rendered views) the object box; for
   a capture, the region of interest (explicit ``bbox``, else :func:`meshlift.data.roi.auto_roi`: where the
   cameras look, refined by the SfM points; with masks, the box of their visual hull,
   :func:`meshlift.data.roi.mask_hull_roi`) at full resolution and the rest of space contracted into a
   shell around it (mip-NeRF 360's contraction), so the room is kept at a resolution that falls off with
   distance (``region=scene``); or the region of interest alone (``region=object``).
4. **Fusion + extraction** (:func:`meshlift.isosurface.sparse_grid.extract_tsdf_mesh`): a sparse, coarse-to-fine voxel
   grid (memory grows with the surface area), corners seen by fewer than ``tsdf_min_views`` views are
   unknown, corners no view saw are solid (``tsdf_unseen=inside``: Curless & Levoy's hole filling), marching
   tets on the active cells.
5. **Cleaning**: faces wholly outside every training frustum and small components are dropped
   (:func:`meshlift.methods.milo.extract.in_any_frustum`, :func:`meshlift.mesh.clean.clean_mesh`; a face with
   one vertex in a frustum stays: the rim of what the views see), then border loops of at most
   ``fill_hole_edges`` edges are closed (:func:`meshlift.mesh.fill.fill_holes`; the whole-scene mesh: up to
   ``scene_fill_hole_edges``, never a component's longest loop, its rim; with ``scene_fill_see_through`` not a
   loop whose fill the training views see through, :func:`see_through_fill`). Where the holes came from and
   what each rule did, on a CPU fox checkpoint (docs/results.md, "Holes of the whole-scene mesh"): 68 % of the
   hole pixels of the whole-scene mesh were tets with a corner no view saw, 19 % wall no training view saw,
   10 % small components; unseen = inside, the frustum rule, neighbour colours for unseen vertices
   (:func:`vertex_colors`) and the loop filling took it from 17.67 to 19.72 dB (Gaussians 20.12 dB), its
   holes from 1.64 % to 0.24 % of the test pixels.
   **Where the H200 fox's 4.6 dB went** (9000 steps, 5.8M faces, 17.49 vs 22.06 dB; re-fused on the CPU from
   depth maps of its decimated copy at 270×480, which reproduced it: 17.44 dB, per view [19.37, 20.44, 18.53,
   14.73, 14.13] vs [19.18, 20.38, 18.45, 14.92, 14.54]): the mesh was watertight there, but test views 0073
   and 0110 rendered 5-7 % of their pixels empty and 7-8 % through the surface — the renders' near plane
   was ``1e-3 far`` (every vertex, also those behind the camera, set it) and the float32 depth cracked on
   the small triangles (:func:`meshlift.methods.milo.occupancy_labels.clip_range`); the same cracks hid
   vertices from the colour fusion. Near from the vertices in the view: 19.42 dB with the old colours
   ([19.37, 20.45, 18.74, 18.90, 19.64]), 19.51 dB with the colours re-fused through the crack-free depth. The rest is colour on covered pixels, and the strip at the image border
   of view 0001 that no fused surface covers (0.6 % of its pixels, white on a dark wall: a third of its
   squared error); the other views are > 99.8 % covered.
   **Decomposing the gap per test view** (``benchmarks/milo_fox_gap.py``, issue 33, 2026-12-05, branch
   ``foxgap2``): (a) the mesh render, (b) the same geometry with ORACLE vertex colours fused from the test view
   itself, (e) every covered test pixel coloured from the training views at the mesh's surface point there
   (the bound of a per-texel bake), (c) empty pixels and their share of the squared error, (d) pixels within
   2 px of a depth edge against flat ones, and pixels in the contracted shell. On a CPU fox checkpoint
   (180×320, 275 steps: too short, its Gaussians score 13.07 dB, below the mesh's 13.96, so it says where the
   *mesh* loses, not the H200's gap) the means over the 5 test views were: mesh 13.96, oracle vertex colours
   15.48 (+1.5; +3.7 on view 0042), per-pixel training colour 13.94 (+0.0), the same with
   ``scene_color_power=2`` 14.07 (+0.1), from the 3 training views nearest the test camera only 14.02 (+0.06;
   per view −0.6 to +1.0); empty pixels 10 % (views 0001/0027/0073 15-26 %, where the Gaussians
   fail as badly: a border the training views barely see), edges 20 % of the pixels and 10 % of the error.
   So on this geometry the colour's *sampling* (per vertex vs per texel) costs nothing, while the training
   views' colours at the mesh's points disagree with the test view's by 1.5 dB: the surface is off by
   a pixel or more where the views meet it (or the views' exposure differs), which a finer texture
   cannot fix. ``scene_contraction=log`` (shell voxels ∝ distance, as a pixel's footprint, instead of
   mip-NeRF 360's ∝ distance², which gives the fox's wallpaper ~8 training pixels per voxel on the H200 at
   256³) made 16 % more faces and 13.89 dB (−0.07; shell pixels 17.90 vs 17.82 dB): no gain on this proxy,
   so it is off by default until the H200 measures it (the paired re-extraction of one checkpoint with both
   contractions, docs/usage/milo.md).
6. **Photometric refinement** (:mod:`meshlift.methods.milo.photo_refine`, ``photo_refine_steps``): the
   whole-scene mesh's vertices move along their normals and its vertex colours are re-fitted to the training
   photographs by differentiable rasterization (the surface is off along the *other* views' rays, step 5's
   decomposition); the unrefined mesh is still rendered for ``mesh_psnr_unrefined``. With
   ``photo_refine_asset`` the asset's geometry is refined the same way before its colours are fused and baked
   (:func:`refined_asset`), and that refined asset is what a known truth scores.
7. **The asset** (:func:`object_asset`): the whole-scene mesh cut to the region of interest, closed at the cut
   (:func:`meshlift.mesh.crop.crop_mesh`), optionally without the support plane it stands on. Before its fusion the
   floor in the depth maps is flattened onto one plane (``floor_snap``, :mod:`meshlift.methods.milo.floor_depth`),
   so the floor fuses as a flat sheet that the support cut removes whole (no bumpy skirt around the base).

Nothing here prints; progress goes to the monitor.
"""

from __future__ import annotations

import dataclasses
import time
import torch

from meshlift.render.rasterize import MAX_FLOAT32_IDS

__all__ = ["FREE_SPACE_DEPTH", "SCENE_MAX_RADIUS", "FusionRegion", "check_bbox", "decimated", "extract_assets",
           "carving", "depth_spread", "floor_flattened", "fused_mesh", "fusion_kind", "fusion_region", "object_asset", "region_of_interest", "render_depths", "scene_resolution_from_pixels", "surface_depths",
           "truncation_voxels", "vertex_colors"]


#: The pixel-based band is capped at ``resolution / MAX_TRUNC_FRACTION`` voxels (an eighth of the region: a
#: small ``--bbox`` seen in coarse images must not get a band wider than itself).
MAX_TRUNC_FRACTION = 8

#: Fewer training views than this give a warning (``metrics.json`` ``warnings``): a surface needs several.
MIN_FUSION_VIEWS = 8

#: The whole-scene mesh keeps what lies within this many half-sizes of the region of interest around it (L-inf):
#: the contraction's far rim (up to ~100 half-sizes at 512³) holds only a few large, unreliable triangles.
SCENE_MAX_RADIUS = 16.0

#: The support plane's RANSAC inlier distance in voxels of the asset's grid (the fused floor is smooth to about a
#: voxel); the cut lies twice this above the plane (:func:`object_asset`).
SUPPORT_INLIER_VOXELS = 2.0

#: With a known floor (``floor_snap``: the plane the depth maps were flattened onto) the asset is cut this many voxels
#: above it (the flattened floor fuses flat to about a voxel).
FLOOR_CUT_VOXELS = 2.0

#: The support plane must be within this many degrees of the region's up (from the cameras' right axes: bob's floor
#: was found at 0.1°). The spot of the unmasked scene (an H200 run of 2026-12-03) took a 7.6° plane holding 5 % of
#: the area from its blotchy floor; across the region such a tilt rises ~0.3 units, into the object (its recall fell
#: from 0.876 to 0.775 between the call without the cut and the one with it, which also trained fewer steps).
SUPPORT_MAX_TILT_DEG = 5.0

#: Depth (× scene_scale) given to pixels outside a view's mask: the whole ray in front of it is free space,
#: so the fusion carves the visual hull (used only when the views have masks / alpha).
FREE_SPACE_DEPTH = 1e4


@dataclasses.dataclass
class FusionRegion:
    """Where the TSDF grid lies: an axis-aligned box (world units) and whether space beyond it is contracted."""

    box_min: torch.Tensor
    """``[3]`` float64 world corner of the full-resolution box."""
    box_max: torch.Tensor
    """``[3]`` float64 opposite corner."""
    contract: bool
    """True: the grid spans the contracted cube [-2, 2]³ around the box (everything the cameras see)."""
    roi: object = None
    """The :class:`meshlift.data.roi.RegionOfInterest` the box came from (None for a mesh input)."""
    kind: str = "object"
    """``object`` or ``scene``."""

    def to_dict(self) -> dict:
        from meshlift.data.roi import roi_to_dict

        return {"box_min": [float(x) for x in self.box_min], "box_max": [float(x) for x in self.box_max],
                "contract": bool(self.contract), "kind": self.kind,
                "roi": None if self.roi is None else roi_to_dict(self.roi)}


@torch.no_grad()
def render_depths(params: dict, views, *, near: float, device: torch.device, settings, backend: str,
                  depth: str = "median", chunk_views: int = 4, min_alpha: float = 0.5,
                  indices=None) -> torch.Tensor:
    """``[V, H, W]`` float32 CPU depth maps (camera z; 0 = empty) of the Gaussians ``params`` at ``views``
    (the views ``indices`` only, when given).

    ``depth``: a key of :data:`~meshlift.methods.gaussians.surface.DEPTH_OUTPUTS`; a pixel is empty where the render is not
    opaque enough (alpha <= ``min_alpha``, :func:`~meshlift.methods.gaussians.surface.surface_depth`; below
    0.5 the median depth is that of the last Gaussian along the ray).
    """
    from meshlift.methods.gaussians.surface import DEPTH_OUTPUTS, surface_depth
    from meshlift.methods.gaussians.trainer import render_params

    key = DEPTH_OUTPUTS[depth]
    st = dataclasses.replace(settings, outputs=(key,))
    bg = torch.zeros(3, device=device)
    which = torch.arange(len(views)) if indices is None else torch.as_tensor(indices, dtype=torch.long).reshape(-1)
    out = torch.zeros(len(which), views.height, views.width, dtype=torch.float32)
    for s in range(0, len(which), chunk_views):
        idx = which[s:s + chunk_views]
        b = views.batch(idx, device)
        _, alpha, info = render_params(params, b, 0, bg, near, st, backend)
        out[s:s + len(idx)] = surface_depth(info[key], alpha, min_alpha)[..., 0].float().cpu()
    return out


def region_of_interest(cfg, problem):
    """The :class:`meshlift.data.roi.RegionOfInterest` of a capture: ``--bbox`` when given, else
    :func:`meshlift.data.roi.auto_roi` (cameras, refined by the SfM points), its box replaced by the box of
    the masks' visual hull when the training views have masks (``roi_masks``,
    :func:`meshlift.data.roi.mask_hull_roi`).

    Raises:
        ConfigError: a bad ``bbox``.
    """
    from meshlift.data.roi import auto_roi, mask_hull_roi, parse_bbox

    if cfg.bbox:
        return parse_bbox(cfg.bbox)
    tr = problem.train
    roi = auto_roi(tr.world_to_camera, tr.K, tr.width, tr.height, points=problem.points)
    if cfg.roi_masks and tr.alpha is not None:
        roi = mask_hull_roi(roi, tr.world_to_camera, tr.K, tr.alpha)
    return roi


def fusion_kind(cfg, problem) -> str:
    """``"scene"`` or ``"object"``: what a capture fuses (``region``; ``auto`` = ``object`` with masks, a masked
    capture has no scene around the object to mesh, else ``scene``). Views of a mesh file without a ground
    scene fuse their object box whatever this says (:func:`extract_assets`)."""
    if cfg.region != "auto":
        return cfg.region
    return "object" if problem.train.alpha is not None else "scene"


def fusion_region(kind: str, *, roi=None, bounds=None, pad: float = 0.0) -> FusionRegion:
    """The :class:`FusionRegion` of ``kind`` (module docstring, step 3): ``object`` = the world box around
    ``roi`` (or ``bounds [2, 3]`` of a mesh input), each side grown by ``pad`` × its length; ``scene`` = the
    cube around it as the inner box of the contraction."""
    if roi is not None:
        lo, hi = (t.double() for t in roi.world_aabb())
    else:
        lo, hi = bounds[0].double(), bounds[1].double()
    if pad:
        lo, hi = lo - pad * (hi - lo), hi + pad * (hi - lo)
    if kind == "scene":
        c, half = 0.5 * (lo + hi), 0.5 * float((hi - lo).max())
        lo, hi = c - half, c + half
    return FusionRegion(lo, hi, contract=kind == "scene", roi=roi, kind=kind)


def surface_depths(cfg, params: dict, problem, *, near: float, device: torch.device, settings, monitor) -> tuple:
    """Step 2: ``(depths [V, H, W] CPU, coverage)`` of the training views; with masks, pixels outside the
    object are free space (:data:`FREE_SPACE_DEPTH`).

    Raises:
        MeshError: the Gaussians render no opaque pixel at all (nothing to fuse).
    """
    from meshlift.errors import MeshError

    tr = problem.train
    monitor.log(f"tsdf: rendering the {cfg.surface_depth} depth of {len(tr)} training views")
    depths = render_depths(params, tr, near=near, device=device, settings=settings, backend=cfg.splat_backend,
                           depth=cfg.surface_depth, chunk_views=max(1, cfg.mesh_chunk_views // 2),
                           min_alpha=cfg.depth_min_alpha)
    if cfg.depth_consistency_views > 0:
        from meshlift.isosurface.depth_consistency import consistent_depth, view_neighbours

        nb = view_neighbours(tr.world_to_camera, cfg.depth_consistency_views)
        depths, crep = consistent_depth(depths, tr.world_to_camera, tr.K, nb, tol=cfg.depth_consistency_tol,
                                        device=device)
        monitor.log(f"tsdf: multi-view check dropped {100 * crep['dropped_frac']:.1f}% of the depth pixels "
                    f"(seen through by a neighbouring view, confirmed by none)")
    coverage = float((depths > 0).float().mean())
    if coverage == 0.0:
        raise MeshError("milo tsdf extraction: the Gaussians render no opaque pixel in any training view, so "
                        "there is no depth to fuse; check the training log (did it diverge?) and the cameras "
                        "(meshlift inspect)")
    if tr.alpha is not None:  # masks: a pixel outside the object is free space all along its ray
        for s in range(0, len(tr), 16):
            a = tr.alpha[s:s + 16, ..., 0].float().cpu()
            depths[s:s + 16][a < 0.5] = FREE_SPACE_DEPTH * problem.scene_scale
    return depths, coverage


def check_bbox(cfg, problem) -> None:
    """Before training: an explicit ``--bbox`` must be seen by at least one training view (its centre or a
    corner in front of the camera and inside the image), else a ConfigError naming ``--bbox``.

    Raises:
        ConfigError: a malformed box, or a box no training camera sees.
    """
    from meshlift.data.roi import parse_bbox
    from meshlift.errors import ConfigError
    from meshlift.geometry.transforms import invert_rigid
    from meshlift.methods.milo.depth_fusion import project_points

    if not cfg.bbox:
        return
    roi = parse_bbox(cfg.bbox)
    pts = torch.cat([roi.corners(), 0.5 * (roi.box_min + roi.box_max)[None]]).float()
    tr = problem.train
    xy, z = project_points(pts, tr.world_to_camera.float(), tr.K.float())
    seen = (z > 0) & (xy[..., 0] >= 0) & (xy[..., 0] < tr.width) & (xy[..., 1] >= 0) & (xy[..., 1] < tr.height)
    if not bool(seen.any()):
        centres = invert_rigid(tr.world_to_camera.double())[:, :3, 3]
        lo, hi = centres.min(0).values, centres.max(0).values
        raise ConfigError(f"--bbox {cfg.bbox}: no training camera sees this box (world units of the dataset; the "
                          f"cameras are within {[round(float(x), 2) for x in lo]} .. "
                          f"{[round(float(x), 2) for x in hi]}); give a box around the object, or leave --bbox out "
                          "for the automatic region of interest (metrics.json region.roi records it)")


def fused_mesh(cfg, depths: torch.Tensor, problem, region: FusionRegion, resolution: int, *, near: float,
               device: torch.device, monitor) -> tuple:
    """Steps 4 and 5 of the module docstring: ``(Mesh, report)`` in the training frame from the depth maps.

    Raises:
        MeshError: no surface was found (the message names the cause and the knobs).
    """
    from meshlift.errors import MeshError
    from meshlift.isosurface.sparse_grid import extract_tsdf_mesh
    from meshlift.mesh.clean import clean_mesh, drop_small_components
    from meshlift.mesh.fill import fill_holes
    from meshlift.methods.milo.extract import in_any_frustum
    from meshlift.structures.mesh import Mesh

    t0 = time.perf_counter()
    tr = problem.train
    chunk = max(1, cfg.mesh_chunk_views)

    def source():
        for s in range(0, len(tr), chunk):
            idx = torch.arange(s, min(s + chunk, len(tr)))
            yield (depths[s:s + len(idx)].to(device), tr.world_to_camera[idx].to(device), tr.K[idx].to(device), None)

    spread, srep = (0.0, {}) if region.contract else depth_spread(cfg, depths, problem, device)
    trunc_voxels, footprint = truncation_voxels(cfg, problem, region, resolution, disagreement=spread)
    if srep:
        monitor.log(f"tsdf: the views' depths disagree by {spread:.3g} (median; band >= {cfg.tsdf_trunc_spread:g} x that)")
    monitor.log(f"tsdf: fusing into a sparse grid of {resolution}³ over the "
                f"{'region of interest, the rest of the scene contracted around it' if region.contract else 'region'}"
                f" (truncation {trunc_voxels:.1f} voxels)")
    v, f, rep = extract_tsdf_mesh(source, region.box_min.to(device), region.box_max.to(device), resolution,
                                  trunc_voxels=trunc_voxels, contract=region.contract,
                                  contraction=cfg.scene_contraction if region.contract else "inverse",
                                  min_weight=cfg.tsdf_min_views, unseen=cfg.tsdf_unseen,
                                  chunk_elements=cfg.chunk_elements, **carving(cfg, problem))
    report: dict = {"region": region.to_dict(), "resolution": int(resolution), "trunc_voxels": trunc_voxels,
                    "pixel_footprint": footprint, "depth_spread": srep,
                    "fusion": {k: val for k, val in rep.items() if isinstance(val, (int, float, str, list, dict))},
                    "fusion_s": time.perf_counter() - t0, "raw_vertices": int(v.shape[0]), "raw_faces": int(f.shape[0])}
    if f.shape[0] == 0:
        if region.kind == "object":
            raise MeshError("milo tsdf extraction: no surface in the region of interest: check --bbox (it must hold "
                            "the object, world units of the dataset; metrics.json region.roi of a run without it "
                            "shows the automatic one), or the views' depths do not agree on one (too few views or "
                            f"too little overlap?): more steps, a wider band (tsdf_trunc_pixels, now "
                            f"{cfg.tsdf_trunc_pixels:g}; {trunc_voxels:.1f} voxels). The trained Gaussians are kept in OUT/"
                            "checkpoint.pt: `--resume` with a corrected --bbox re-extracts without training again")
        raise MeshError("milo tsdf extraction: no surface in the scene: the training views' depths do not agree "
                        "on one (too few views or too little overlap?); train more steps or widen the band "
                        f"(scene_trunc_pixels, now {cfg.scene_trunc_pixels:g}; {trunc_voxels:.1f} voxels)")
    if region.contract:  # drop what lies beyond SCENE_MAX_RADIUS box half-sizes (the contraction's far rim)
        c = 0.5 * (region.box_min + region.box_max).to(v)
        half = 0.5 * float((region.box_max - region.box_min).max())
        near_enough = ((v - c).abs().amax(-1) <= SCENE_MAX_RADIUS * half)
        f = f[near_enough[f].all(dim=1)]
    seen = in_any_frustum(v, tr, near)
    n0 = int(f.shape[0])
    f = f[seen[f].any(dim=1)]  # a face touching a frustum stays: the rim of what the views see (module doc, 5)
    report["culled_faces"] = report["raw_faces"] - int(f.shape[0])
    report["frustum_culled_faces"] = n0 - int(f.shape[0])
    mesh, crep = clean_mesh(Mesh(v.float().cpu(), f.long().cpu()), keep_components=cfg.keep_components)
    report["clean"] = {k: val for k, val in vars(crep).items() if isinstance(val, (int, float, str, list))}
    mesh, report["small_fragment_faces"] = drop_small_components(mesh, cfg.min_component_faces)
    if mesh.num_faces == 0:
        raise MeshError("milo tsdf extraction: every face was removed by cleaning (only small fragments); lower "
                        "keep_components / min_component_faces or train longer")
    max_edges = cfg.scene_fill_hole_edges if region.contract else cfg.fill_hole_edges
    if max_edges > 0:
        accept = None
        if region.contract and cfg.scene_fill_see_through > 0:
            accept = see_through_fill(depths, tr, min_views=cfg.scene_fill_see_through,
                                      tol=cfg.scene_fill_see_through_tol, device=device,
                                      chunk_elements=cfg.chunk_elements)
        mesh, frep = fill_holes(mesh, max_edges=max_edges, skip_rims=region.contract,
                                method=cfg.scene_fill_method if region.contract else "fan", accept=accept)
        report["holes"] = {"loops": frep.loops, "filled": frep.filled, "left_open": frep.skipped_large,
                           "seen_through": frep.refused,
                           "rims_left_open": frep.skipped_rims, "largest_filled": frep.largest_filled,
                           "faces_added": frep.faces_added}
    report["vertices"], report["faces"] = int(mesh.v_pos.shape[0]), int(mesh.num_faces)
    report["seconds"] = time.perf_counter() - t0
    monitor.log(f"tsdf mesh: {report['vertices']:,} vertices, {report['faces']:,} faces (raw {report['raw_faces']:,}) "
                f"in {report['seconds']:.1f} s")
    return mesh, report


#: :func:`see_through_fill`: a loop is left open when more than this share of its fill's area is free space.
FILL_FREE_SHARE = 0.2


def see_through_fill(depths: torch.Tensor, views, *, min_views: int, tol: float, device: torch.device,
                     chunk_elements: int = 1 << 24):
    """The ``accept`` rule of :func:`meshlift.mesh.fill.fill_holes` for the whole-scene mesh (config
    ``scene_fill_see_through``): a fill triangle is *free* where at least ``min_views`` of the training views'
    depth maps ``depths [V, H, W]`` (camera z, 0 = none) see beyond its centroid (and more of them see through
    it than confirm a surface there; :func:`meshlift.isosurface.depth_consistency.see_through`, relative margin
    ``tol``); a loop is refused when its free triangles hold more than :data:`FILL_FREE_SHARE` of its fill's
    area. Space carving's rule (Kutulakos & Seitz 2000, "A Theory of Shape by Space Carving": a point a view
    sees past is empty) applied to the surface no depth made."""
    import numpy as np

    from meshlift.isosurface.depth_consistency import see_through

    def accept(tris, owner, loops: int):
        t = torch.as_tensor(tris, dtype=torch.float64)
        centroids = t.mean(1)
        contra, confirm = see_through(centroids.to(device), depths, views.world_to_camera, views.K, tol=tol,
                                      device=device, chunk_elements=chunk_elements)
        free = ((contra >= min_views) & (contra > confirm)).cpu().numpy()
        area = 0.5 * torch.linalg.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]).norm(dim=-1).numpy()
        total = np.bincount(owner, weights=area, minlength=loops)
        freed = np.bincount(owner, weights=area * free, minlength=loops)
        return freed <= FILL_FREE_SHARE * np.maximum(total, 1e-300)

    return accept


def carving(cfg, problem) -> dict:
    """The mask-carving options of the fusion (:func:`meshlift.isosurface.tsdf.tsdf_at_points`, its step 6):
    with masks, pixels outside them hold :data:`FREE_SPACE_DEPTH` (:func:`surface_depths`) and a point is
    free where at least the share ``tsdf_carve_fraction`` of its voting views see it there; 0: the fusion
    averages those views' ``+1`` with the rest."""
    if problem.train.alpha is None or cfg.tsdf_carve_fraction <= 0:
        return {}
    return {"free_depth": 0.5 * FREE_SPACE_DEPTH * float(problem.scene_scale),
            "carve_fraction": float(cfg.tsdf_carve_fraction)}


def _footprint_and_side(problem, region: FusionRegion) -> tuple[float, float]:
    """``(size of one training pixel at the region's centre, the region's longest side)``, world units
    (:func:`meshlift.methods.milo.depth_fusion.pixel_footprint`)."""
    from meshlift.methods.milo.depth_fusion import pixel_footprint

    tr = problem.train
    centre = 0.5 * (region.box_min + region.box_max)
    return (pixel_footprint(tr.world_to_camera, tr.K, centre.float()),
            float((region.box_max - region.box_min).max()))


def truncation_voxels(cfg, problem, region: FusionRegion, resolution: int, *,
                      disagreement: float = 0.0) -> tuple[float, float]:
    """``(truncation in voxels, pixel footprint)``: ``max(tsdf_trunc_voxels, P × footprint / voxel,
    tsdf_trunc_spread × disagreement / voxel)`` with
    ``P = scene_trunc_pixels`` for the contracted whole scene and ``tsdf_trunc_pixels`` otherwise, the footprint being the median size of one training pixel at the region's centre
    (:func:`meshlift.methods.milo.depth_fusion.pixel_footprint`) and the voxel the region's finest one; the two
    bands at most ``resolution / MAX_TRUNC_FRACTION`` voxels. ``disagreement`` (world units, >= 0; 0 = none):
    the views' depth disagreement (:func:`depth_spread`), which :func:`fused_mesh` measures for views with masks.

    Why pixels: the Gaussians' depth error is about a pixel or two (measured on spot: median |error| 1.5
    footprints at 64-128 px), so the band must be a few pixels wide whatever the grid. On the quick spot run
    (64 px, 128³) the F-score was 0.63 at 4 voxels (1.5 px), 0.94 at 12 voxels (4.5 px); on the GPU spot run
    (512 px, 512³) 4 voxels were already ~4 px (F 0.995)."""
    foot, side = _footprint_and_side(problem, region)
    voxel = side / float(resolution)
    px = cfg.scene_trunc_pixels if region.contract else cfg.tsdf_trunc_pixels
    band = max(float(px) * foot, float(cfg.tsdf_trunc_spread) * float(disagreement)) / max(voxel, 1e-12)
    band = min(band, resolution / MAX_TRUNC_FRACTION)
    return max(float(cfg.tsdf_trunc_voxels), band), foot


def depth_spread(cfg, depths: torch.Tensor, problem, device: torch.device) -> tuple[float, dict]:
    """``(disagreement, report)``: how far the training views' depths lie from each other's, world units — the
    median over the sampled pixels of all views of
    :func:`meshlift.isosurface.depth_consistency.depth_disagreement` (4 nearest cameras, at most
    :data:`~meshlift.isosurface.depth_consistency.DISAGREEMENT_SAMPLES` pixels a view; the free-space depth
    outside masks is no depth). 0 when ``tsdf_trunc_spread`` is 0, the views have no masks (unmasked scenes
    keep their band) or no pixel could be judged.
    """
    if cfg.tsdf_trunc_spread <= 0 or problem.train.alpha is None:
        return 0.0, {}
    from meshlift.isosurface.depth_consistency import depth_disagreement, view_neighbours

    t0 = time.perf_counter()
    tr = problem.train
    nb = view_neighbours(tr.world_to_camera, 4)
    dis, _ = depth_disagreement(depths, tr.world_to_camera, tr.K, nb, device=device,
                                max_depth=0.5 * FREE_SPACE_DEPTH * float(problem.scene_scale))
    judged = dis[torch.isfinite(dis)]
    value = float(judged.median()) if judged.numel() else 0.0
    return value, {"disagreement": value, "judged_pixels": int(judged.numel()),
                   "views": int(torch.isfinite(dis).any(1).sum()), "seconds": time.perf_counter() - t0}


def scene_resolution_from_pixels(cfg, problem, region: FusionRegion) -> int:
    """``scene_resolution=0``: the power of two in [32, 1024] whose voxel (the region's longest side /
    resolution) is closest, in log scale, to ``scene_voxel_pixels`` × the training pixel's footprint at the
    region's centre (:func:`meshlift.methods.milo.depth_fusion.pixel_footprint`)."""
    import math

    foot, side = _footprint_and_side(problem, region)
    want = side / max(float(cfg.scene_voxel_pixels) * foot, 1e-12)
    return int(2 ** min(10, max(5, round(math.log2(max(want, 1.0))))))


def decimated(mesh, max_faces: int, monitor):
    """``(mesh, report)``: ``mesh`` decimated to at most ``max_faces`` faces (quadrics; 0 keeps it)."""
    if max_faces <= 0 or mesh.num_faces <= max_faces:
        return mesh, None
    from meshlift.mesh.simplify import simplify_mesh

    t0 = time.perf_counter()
    out, info = simplify_mesh(mesh, max_faces, keep_uv=False)
    monitor.log(f"asset: decimated {mesh.num_faces:,} -> {out.num_faces:,} faces (max_asset_faces)")
    return out, {k: v for k, v in info.items() if isinstance(v, (int, float, str))} | {"seconds": time.perf_counter() - t0}


def floor_flattened(cfg, depths: torch.Tensor, problem, roi, device: torch.device, monitor) -> tuple:
    """``(depths, FloorPlane or None, report dict)``: the depth maps with the floor under the object flattened
    onto one plane for the asset's fusion (``floor_snap`` × the region's half-size;
    :func:`meshlift.methods.milo.floor_depth.snap_floor_depths`, planes within :data:`SUPPORT_MAX_TILT_DEG` of the
    region's up); unchanged, with a note, when no floor is found."""
    from meshlift.methods.milo.floor_depth import snap_floor_depths

    tr = problem.train
    snap = float(cfg.floor_snap) * 0.5 * float((roi.box_max - roi.box_min).max())
    out, plane, frep = snap_floor_depths(depths, tr.world_to_camera, tr.K, roi, snap=snap,
                                         max_tilt_deg=SUPPORT_MAX_TILT_DEG, device=device,
                                         chunk_views=max(1, cfg.mesh_chunk_views))
    if plane is None:
        monitor.log(f"asset: no floor plane in the depth maps ({'; '.join(frep.notes)})")
    else:
        monitor.log(f"asset: flattened {100 * frep.snapped_frac:.1f}% of the depth pixels onto the floor plane "
                    f"(tilt {frep.tilt_deg:.1f}°, band ±{snap:.3g}, {frep.protected_cells} cells kept where something "
                    f"stands) in {frep.seconds:.1f} s; floor cover {100 * frep.floor_cover:.0f}% of the "
                    f"{100 * frep.open_share:.0f}% of the footprint outside the object (all of it: "
                    f"{100 * frep.footprint_cover:.0f}%; cells {frep.cover_cell:.3g}), {100 * frep.below_frac:.1f}% "
                    "of the points below it")
    return out, plane, frep.to_dict()


def object_asset(mesh, roi, *, monitor, support_voxel: float = 0.0, floor=None) -> tuple:
    """Step 6: ``(Mesh, report)`` — ``mesh`` cut to the region of interest ``roi`` (a
    :class:`meshlift.data.roi.RegionOfInterest`) and closed at the cut; with ``support_voxel > 0`` (world
    units: the fusion grid's voxel) also without the plane the object stands on
    (:func:`meshlift.mesh.support_plane.remove_support_plane` along ``roi.up``: inliers within
    ``SUPPORT_INLIER_VOXELS`` voxels, cut ``2 ×`` that above the plane, closed), so that the asset is the
    object and not a square of the table under it. A ``floor`` (:class:`meshlift.methods.milo.floor_depth.FloorPlane`:
    the plane the depth maps were flattened onto, ``floor_snap``) is cut at directly, ``FLOOR_CUT_VOXELS``
    voxels above it (the flattened floor is flat to about a voxel), instead of the mesh's own RANSAC plane.

    Raises:
        MeshError: nothing of the mesh lies in the region of interest (the message names ``--bbox``).
    """
    from meshlift.errors import MeshError
    from meshlift.mesh.crop import crop_mesh
    from meshlift.mesh.support_plane import remove_support_plane

    cut, rep = crop_mesh(mesh, roi.box_min, roi.box_max, cap=True, rotation=roi.rotation)
    if cut.num_faces == 0:
        lo, hi = roi.world_aabb()
        raise MeshError(f"milo: the region of interest (world box {[round(float(x), 3) for x in lo]} .. "
                        f"{[round(float(x), 3) for x in hi]}) "
                        f"({roi.source}) holds no part of the mesh; give the object's box with --bbox "
                        "x0,y0,z0,x1,y1,z1, or --set object_asset=false to export the whole scene")
    monitor.log(f"asset: the mesh cut to the region of interest ({roi.source}): {cut.num_faces:,} of "
                f"{mesh.num_faces:,} faces")
    out = rep.to_dict()
    if support_voxel > 0:
        dist = SUPPORT_INLIER_VOXELS * float(support_voxel)
        plane = None if floor is None else (floor.normal, floor.offset)
        cut_offset = FLOOR_CUT_VOXELS * float(support_voxel) if plane else 2.0 * dist
        kept, srep = remove_support_plane(cut, roi.up, distance=dist, cut_offset=cut_offset,
                                          max_tilt_deg=SUPPORT_MAX_TILT_DEG, plane=plane)
        out["support_plane"] = dataclasses.asdict(srep)
        if srep.found and kept.num_faces > 0:
            monitor.log(f"asset: removed the support plane under the object (tilt {srep.tilt_deg:.1f}°, "
                        f"{100 * srep.inlier_area_frac:.0f}% of the area, {srep.faces_removed:,} faces)")
            cut = kept
    return cut, out


def vertex_colors(cfg, mesh, problem, device) -> tuple:
    """``(mesh with linear v_color, report)``: depth-tested fusion of the training images at the vertices
    (:func:`meshlift.methods.milo.extract.fuse_colors`; no UVs, no texture: for the whole-scene mesh). A vertex
    no training view sees (hidden, e.g. the surfaces that close holes, module docstring step 4) takes the mean
    colour of its seen neighbours along the mesh (:func:`meshlift.mesh.fill.fill_vertex_values`): on the CPU
    fox +0.14 dB over one global mean colour (docs/results.md, "Holes")."""
    from meshlift.mesh.fill import fill_vertex_values
    from meshlift.methods.milo.extract import fuse_colors, mesh_depth_all
    from meshlift.shading.color import srgb_to_linear

    t0 = time.perf_counter()
    depth = mesh_depth_all(mesh, problem.train, device, chunk_views=cfg.mesh_chunk_views,
                           max_fragments=cfg.max_fragments or None)
    rgb, n = fuse_colors(mesh.v_pos.to(device), problem.train, depth, tol=cfg.color_depth_tol * problem.scene_scale,
                         view_power=cfg.scene_color_power)
    rgb, _ = fill_vertex_values(mesh.t_pos_idx.to(rgb.device), rgb, n > 0)
    colored = dataclasses.replace(mesh, v_color=srgb_to_linear(rgb).clamp(0, 1).cpu())
    return colored, {"vertices_seen_frac": float((n > 0).float().mean()), "color_s": time.perf_counter() - t0}


def _refine_deadline(cfg, costs, budget, faces: int):
    """The clock value at which a photometric refinement must stop so that what follows it (colours, unwrap,
    bake, evaluation, export of a ``faces``-face asset, with the budget's safety) still fits; None without a
    time budget."""
    if cfg.time_budget_s <= 0 or costs is None or budget is None:
        return None
    return budget.t_start + cfg.time_budget_s - costs.after_refine_s(faces)


def refined(cfg, colored, problem, device, monitor, costs, budget, *, label: str, view_dependent=True) -> tuple:
    """``(mesh, report)``: :func:`meshlift.methods.milo.photo_refine.photometric_refine` of a mesh against the
    training views with the ``photo_refine_*`` settings (``view_dependent=False``: no SH terms, the asset), stopped by
    the time budget; a vertex-coloured mesh whose colours the refinement did not fit gets them fused again from the
    refined surface (:func:`vertex_colors`)."""
    from meshlift.methods.milo.photo_refine import PhotoRefineSettings, photometric_refine

    deadline = _refine_deadline(cfg, costs, budget, min(colored.num_faces, cfg.max_asset_faces or colored.num_faces))
    mesh, rep = photometric_refine(colored, problem.train, device,
                                   PhotoRefineSettings.from_config(cfg, view_dependent=view_dependent),
                                   monitor=monitor, deadline=deadline, label=label)
    if not rep["colors_fitted"] and colored.v_color is not None:  # the colours fused again on the moved surface
        mesh, crep = vertex_colors(cfg, mesh, problem, device)
        rep["color_s"] = crep["color_s"]
    return mesh, rep


def refined_asset(cfg, asset, geometry, rep: dict, problem, device, monitor, costs, budget) -> tuple:
    """``(asset, geometry)``: with ``photo_refine_asset`` (and steps), the asset's geometry after :func:`refined`,
    without colours (they are then fused and baked from the refined surface by
    :func:`meshlift.methods.milo.extract.color_and_texture`), as both: the refined asset is what is exported, so it
    is what a known truth scores (``rep["asset_refine"]`` gets the report); else both unchanged."""
    if not (cfg.photo_refine_steps > 0 and cfg.photo_refine_asset):
        return asset, geometry
    if cfg.photo_refine_color_weight > 0:  # the colour term starts from the fused colours
        asset, _ = vertex_colors(cfg, asset, problem, device)
    out, rep["asset_refine"] = refined(cfg, asset, problem, device, monitor, costs, budget, label="asset",
                                       view_dependent=False)
    return (dataclasses.replace(out, v_color=None),) * 2  # the asset and its geometry: the same mesh


def extract_assets(cfg, trainer, problem, device: torch.device, monitor, *, costs, budget, mesh_input: bool):
    """The ``extract=tsdf`` path end to end: ``MeshProduct`` for the evaluation and the export.

    Views of a mesh file (``mesh_input`` without an ``eval_box``): one fusion over the object's box at
    ``tsdf_resolution``; that mesh is scored, and (decimated to ``max_asset_faces``, coloured, textured) it
    is the asset. A capture without masks (``region=scene``, what ``auto`` picks; also a known truth in an
    unmasked scene, ``ref_scene=ground``): the **whole-scene** mesh (the region of interest at
    ``scene_resolution``, the rest contracted around it; vertex colours, ``scene_mesh.ply``) is rendered for
    ``mesh_psnr``; the **asset** is a second fusion over the region of interest alone at ``tsdf_resolution``,
    cut to it and closed (:func:`object_asset`), decimated, coloured and textured, and it is what a known
    truth is scored against (both cut to the object's box); before that fusion the floor in the depth maps is
    flattened onto one plane and the asset is cut at it (``floor_snap``, :func:`floor_flattened`; without masks,
    with ``remove_support``). ``region=object`` (what ``auto`` picks for a
    capture with masks): only the second, which is then also the mesh rendered for ``mesh_psnr``.
    ``object_asset=false``: the asset is not cut (the whole scene, or the whole region).
    """
    from meshlift.methods.milo.extract import MeshProduct, color_and_texture

    t0 = time.perf_counter()
    depths, coverage = surface_depths(cfg, trainer.params, problem, near=trainer.near, device=device,
                                      settings=trainer.settings, monitor=monitor)
    kw = dict(near=trainer.near, device=device, monitor=monitor)
    rep: dict = {"depth": cfg.surface_depth, "depth_coverage": coverage, "depth_s": time.perf_counter() - t0}
    extra: dict = {"warnings": []}
    if len(problem.train) < MIN_FUSION_VIEWS:
        extra["warnings"].append(
            f"only {len(problem.train)} training views: the fusion needs several views of every surface "
            f"(at least {MIN_FUSION_VIEWS}); expect holes, or capture more views")
    if coverage < 0.05:
        extra["warnings"].append(
            f"the Gaussians cover {100 * coverage:.1f}% of the training pixels: little depth to fuse (did "
            "training stop early? see the loss curve)")
    if problem.eval_box is not None:
        extra["eval_box"] = problem.eval_box.tolist()
    if mesh_input and problem.eval_box is None:  # views of a mesh file: its box, one fusion
        region = (fusion_region("object", bounds=problem.bounds, pad=0.05) if not cfg.bbox
                  else fusion_region("object", roi=region_of_interest(cfg, problem)))
        # rendered views of a mesh have exact masks: the plain average (on one quick spot checkpoint the
        # majority carving kept some Gaussian fat: F 0.797 against 0.817)
        mesh, rep["object"] = fused_mesh(dataclasses.replace(cfg, tsdf_carve_fraction=0.0), depths, problem, region,
                                         cfg.tsdf_resolution, **kw)
        extra["region"] = region.to_dict()
        asset, rep["decimate"] = decimated(mesh, cfg.max_asset_faces, monitor)
        asset, mesh = refined_asset(cfg, asset, mesh, rep, problem, device, monitor, costs, budget)
        colored, textured, crep = color_and_texture(cfg, asset, problem, device, monitor, costs, budget)
        return MeshProduct(colored, textured, textured, mesh, {**rep, **crep}, extra)
    masked = problem.train.alpha is not None
    kind = fusion_kind(cfg, problem)
    roi = region_of_interest(cfg, problem)
    extra["region"] = fusion_region("object", roi=roi).to_dict()
    scene = scene_colored = scene_unrefined = None
    if kind == "scene":
        scene_region = fusion_region("scene", roi=roi)
        res = cfg.scene_resolution or scene_resolution_from_pixels(cfg, problem, scene_region)
        rep["scene_resolution"] = res
        scene, rep["scene"] = fused_mesh(cfg, depths, problem, scene_region, res, **kw)
        if scene.num_faces > MAX_FLOAT32_IDS:  # the rasterizer's float32 triangle ids (colouring, evaluation)
            scene, rep["scene_decimate"] = decimated(scene, MAX_FLOAT32_IDS, monitor)
        scene_colored, rep["scene_colors"] = vertex_colors(cfg, scene, problem, device)
        if cfg.photo_refine_steps > 0:
            scene_unrefined = scene_colored
            scene_colored, rep["scene_refine"] = refined(cfg, scene_colored, problem, device, monitor, costs, budget,
                                                         label="whole-scene mesh")
    if cfg.object_asset or scene is None:
        support = cfg.object_asset and cfg.remove_support and not masked
        obj_depths, floor = depths, None
        if support and cfg.floor_snap > 0:
            obj_depths, floor, rep["floor"] = floor_flattened(cfg, depths, problem, roi, device, monitor)
        # a little beyond the box, so that the cut is clean
        obj, rep["object"] = fused_mesh(cfg, obj_depths, problem, fusion_region("object", roi=roi, pad=0.02),
                                        cfg.tsdf_resolution, **kw)
        del obj_depths
        asset = obj
        if cfg.object_asset:
            voxel = float((roi.box_max - roi.box_min).max()) / cfg.tsdf_resolution
            t0 = time.perf_counter()
            asset, rep["crop"] = object_asset(obj, roi, monitor=monitor, support_voxel=voxel if support else 0.0,
                                              floor=floor)
            rep["crop"]["seconds"] = time.perf_counter() - t0  # host CPU: crop, caps, support plane (untimed before)
        geometry = asset  # what a known truth scores: the asset as exported, before decimation
    else:
        asset = geometry = scene
    asset, rep["decimate"] = decimated(asset, cfg.max_asset_faces, monitor)
    asset, geometry = refined_asset(cfg, asset, geometry, rep, problem, device, monitor, costs, budget)
    colored, textured, crep = color_and_texture(cfg, asset, problem, device, monitor, costs, budget)
    eval_mesh = scene_colored if scene_colored is not None else textured
    return MeshProduct(colored, textured, eval_mesh, geometry, {**rep, **crep}, extra, scene_colored=scene_colored,
                       eval_unrefined=scene_unrefined)
