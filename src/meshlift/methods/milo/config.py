"""Configuration of MILo (``meshlift reconstruct --method milo``): 3DGS fields + the mesh-in-the-loop fields.

:class:`MiloConfig` extends :class:`meshlift.methods.gaussians.config.GaussiansConfig` (the Gaussians are
trained by the same :class:`~meshlift.methods.gaussians.trainer.GaussianTrainer`), adding MILo's flags
(Guédon et al. 2025, "MILo: Mesh-In-the-Loop Gaussian Splatting"; the project notes §1 give the schedule:
densify to 3000, importance sampling at 3000, 0.99-cdf pruning at 8000, mesh in the loop 8000–18000,
Delaunay every 500 steps, SDF resets by depth fusion until 13000, labels every 200 steps, 1000 refinement
steps at extraction). Step fields count optimiser steps of this run (presets scale them with ``steps``).
The memory knobs MILo users patched in by hand are ordinary fields here: ``max_fragments`` (their
``MILO_RAST_TRI_CHUNK``), ``mesh_res_scale`` (their ``MILO_MESH_RES_SCALE``), ``data_device`` (their
``--data_device cpu``). docs/usage/milo.md maps every MILo command, flag and variable to these fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from meshlift import config as _config
from meshlift.config import config_to_dict, parse_overrides
from meshlift.errors import ConfigError
from meshlift.methods.gaussians.config import GaussiansConfig
from meshlift.methods.gaussians.config import validate as validate_gaussians

__all__ = ["MiloConfig", "SHAPE_FIELDS", "apply_dict", "config_to_dict", "field_docs", "load_config_file",
           "parse_overrides", "validate", "num_mesh_gaussians"]


@dataclass
class MiloConfig(GaussiansConfig):
    """MILo: 3DGS training (inherited fields) + importance sampling + mesh in the loop + extraction."""

    #: The ``--method`` this config belongs to (recorded in a run's ``config.json``; the registry's name for
    #: it). A class attribute, not a field.
    METHOD: ClassVar[str] = "milo"

    time_budget_s: float = 0.0
    """Wall-clock budget in seconds for the whole run (0 = none), shared by the Gaussian training (85 %) and the
    extraction (15 %: the occupancy refinement with ``extract=delaunay``; the TSDF fusion, colouring and
    texture with ``extract=tsdf``), each stopping when its share is spent; the time of the stages around them
    (colouring, unwrap, bake, evaluation, export) is estimated and kept free (``methods/milo/budget.py``). The
    steps actually run go into metrics.json; learning-rate and densification schedules still follow ``steps``."""

    # ---- synthetic views of a mesh file (spot, bob, bunny: known-truth geometry) ---------------------------
    ref_views: int = 100
    """Training views rendered when DATA is a mesh file (random directions on a sphere)."""
    ref_test_views: int = 8
    """Held-out views rendered when DATA is a mesh file (an orbit)."""
    ref_scene: str = "object"
    """What the views of a mesh file show: ``object`` = the mesh alone over black with masks (nvdiffrec's
    protocol); ``ground`` = an unmasked "phone capture": the mesh on a textured floor under a procedural HDR
    environment that fills the background, cameras on rings around it, no masks
    (:func:`meshlift.data.synthetic_scene.make_synthetic_scene`; F-score inside the object's box)."""

    # ---- depth re-initialisation (Mini-Splatting2, used by MILo at 2000) ------------------------------------
    reinit_step: int = 2000
    """Step of the depth re-initialisation: the Gaussians are replaced by new ones at points of their
    rendered surface (``methods/milo/depth_reinit.py``; MILo: 2000); 0 = never."""
    reinit_points: int = 0
    """Points drawn for the re-initialisation (0 = as many as there are Gaussians then)."""

    # ---- importance-based Gaussian sampling (Mini-Splatting2, used by MILo) --------------------------------
    imp_metric: str = "outdoor"
    """Importance of a Gaussian (MILo ``--imp_metric``): ``indoor`` = Σ over views of Σ αT; ``outdoor`` =
    Σ over views of Σ αT / pixels touched (views where it is nowhere the strongest count 0)."""
    sampling_factor: float = 0.6
    """At ``sampling_step`` keep ``sampling_factor × N × (fraction with non-zero importance)`` Gaussians,
    sampled without replacement ∝ importance (MILo ``--sampling_factor``)."""
    sampling_step: int = 3000
    """Step of the importance sampling (MILo: 3000, the end of densification); 0 = never."""
    prune_step: int = 8000
    """Step of the pruning to the ``prune_cdf`` cumulative importance (MILo: 8000); 0 = never."""
    prune_cdf: float = 0.99
    """Keep the most important Gaussians that together hold this fraction of the total importance."""
    depth_normal_start: int = 3000
    """First step of the depth–normal consistency loss (rendered normals vs normals of the median depth)."""
    depth_normal_weight: float = 0.05
    """Weight of the depth–normal consistency loss (MILo: 0.05; 0 = off)."""

    # ---- which mesh: TSDF fusion of surface-aligned Gaussians, or MILo's Delaunay mesh in the loop ----------
    extract: str = "tsdf"
    """How the mesh is made (docs/usage/milo.md, "which extraction"): ``tsdf`` = surface-aligned (flat)
    Gaussians, their unbiased depth fused into a sparse truncated-SDF grid, marching tets
    (``methods/milo/tsdf_mesh.py``; 2DGS / PGSR's extraction; no mesh in the loop, so the mesh fields below
    are unused); ``delaunay`` = MILo's Delaunay pivots with the mesh in the loop and occupancy refinement."""
    surface_depth: str = "median"
    """Depth of the ``tsdf`` path (its depth-normal loss and the fusion): ``median_plane`` = the depth of the
    plane of the Gaussian where transmittance crosses 0.5 along the pixel's ray; ``plane`` = PGSR's unbiased
    depth of the blended Gaussian plane; ``median`` = the centre depth of the Gaussian where transmittance
    crosses 0.5 (RaDe-GS / MILo)."""
    depth_min_alpha: float = 0.1
    """``tsdf`` path: a training pixel's depth is fused where the Gaussians' alpha exceeds this (0.5 = where
    transmittance crosses one half; lower keeps the faint parts of a capture: measured on the quick fox, the
    holes in the test views fell from 4.3% to 1.6% of the pixels going from 0.5 to 0.1, depth error unchanged)."""
    flatten_weight: float = 100.0
    """``tsdf`` path: weight of PGSR's scale loss ``mean(min scale) / scene_scale`` that flattens every Gaussian
    into a disc whose normal is its shortest axis (0 = off)."""
    flatten_start: int = 0
    """First step of the flattening loss."""
    multiview_weight: float = 0.0
    """``tsdf`` path: weight of PGSR's multi-view geometric consistency (Chen et al. 2024, Sec. 3.3, eq. 9-11,
    depth form; :func:`meshlift.geometry.reprojection.multiview_geometric_loss`): the surface depth of a
    neighbouring training view is rendered too and each pixel's forward-backward reprojection error through the
    two depth maps (pixels) is penalised, so the views agree on where the surface is (issue #33: the fox's mesh
    colours lose 5 dB to the surface's position error). 0 = off (the default until a GPU run measures it);
    PGSR uses 0.03."""
    multiview_start: int = 3000
    """First step of the multi-view term (scaled with the schedule; ``--quick``: 160)."""
    multiview_every: int = 1
    """Add the multi-view term every this many steps from ``multiview_start`` (>= 1; each use costs one extra
    render of the batch's size, depth only)."""
    multiview_neighbours: int = 4
    """Neighbours per training view for the multi-view term (nearest camera centres within 60 degrees of viewing
    direction, computed once); the steps cycle through them (>= 1)."""
    multiview_max_error: float = 1.0
    """Pixels whose reprojection error reaches this many pixels (occlusions, disagreeing surfaces) are left out
    of the multi-view term (PGSR: 1); the rest are weighted ``exp(-error)``."""
    depth_consistency_views: int = 0
    """``tsdf`` path: before fusion, drop a depth pixel that one of this many neighbouring training views sees
    through and none confirms (a floater, a noisy depth in front of the surface that would carve it away;
    :mod:`meshlift.isosurface.depth_consistency`); 0 = off."""
    depth_consistency_tol: float = 0.02
    """Relative depth tolerance of that check (``|D - z| <= tol z`` confirms)."""
    tsdf_resolution: int = 512
    """``tsdf`` path: voxels per axis of the finest fusion grid across the region (the object's box; with
    ``region=scene`` the contracted shell around it adds as many again, coarser with distance). A power of
    two. Memory grows with the surface area only (sparse, coarse-to-fine)."""
    scene_resolution: int = 0
    """``tsdf`` path on a capture: voxels per axis across the region of interest for the whole-scene mesh
    (the rest of the scene contracted around it; ``scene_mesh.ply``, the mesh rendered for ``mesh_psnr``); a
    power of two. 0 (the default; ``--quick`` uses 64) = from the images: the power of two whose voxel is closest to ``scene_voxel_pixels`` training pixels at
    the region's centre (benchmarks/results/log_milo.md, 2026-12-03: on one fox checkpoint the whole-scene mesh was best at ~2 pixels per
    voxel and lost 3 dB at 0.5), within [32, 1024]."""
    scene_voxel_pixels: float = 2.0
    """With ``scene_resolution=0``: the whole-scene voxel in training pixels at the region's centre."""
    scene_contraction: str = "inverse"
    """How the whole-scene grid covers the space around the region of interest: ``inverse`` (mip-NeRF 360's
    contraction; a voxel at ``r`` box half-sizes spans ``r^2`` box voxels: a wall at 3 half-sizes gets 9x the
    box's voxel, several training pixels) or ``log`` (``1 + ln r``, out to ``e^3`` half-sizes: a voxel spans ``r``
    box voxels, about as many pixels as in the box, since a pixel's footprint grows with the distance too;
    more faces in the shell). ``meshlift.methods.milo.tsdf_mesh``'s docstring has the fox's measurements."""
    max_asset_faces: int = 500_000
    """``tsdf`` path: decimate the exported asset to at most this many faces (quadrics; 0 = keep every face of
    the fusion, which makes ~4 faces per voxel of surface)."""
    unwrap_max_faces: int = 100_000
    """Faces xatlas unwraps at most: a larger asset is decimated to this many before the unwrap and the bake of
    its albedo (the exported mesh keeps its ``max_asset_faces``-face geometry only in ``mesh.ply``); a time
    budget may lower it (:meth:`meshlift.methods.milo.budget.MiloStageCosts.unwrap_faces`). xatlas's time
    grows with the faces (fused TSDF assets: ~4 s per 100k on the H200's host)."""
    tsdf_trunc_pixels: float = 4.0
    """Truncation of the fusion in training pixels at the region's centre (the Gaussians' depth error is a
    pixel or two: the band must be a few pixels wide whatever the grid; see ``tsdf_mesh.truncation_voxels``)."""
    scene_trunc_pixels: float = 2.0
    """The same for the whole-scene mesh: a narrower band (in clutter, a wide band lets foreground objects
    vote through the wall behind them: on the quick fox the test views' holes were 0.9% at 2 px, 1.1% at 4 px,
    8% at 6 px)."""
    tsdf_trunc_voxels: float = 3.0
    """... and at least this many voxels of the finest level (at that point in contracted space; below ~2 the
    mesh gets holes)."""
    tsdf_trunc_spread: float = 8.0
    """With masks (an object capture, or rendered views of a mesh): the band is also at least this many times
    the views' depth disagreement (world units: the median over the training views and their sampled pixels of
    the median distance to the depth the 4 nearest cameras saw there,
    :func:`meshlift.isosurface.depth_consistency.depth_disagreement`; ``tsdf_mesh.truncation_voxels``), still at
    most an eighth of the grid. Where the Gaussians' depths spread more than the pixel-based band, views carve
    each other's surface (holes, a thinned object). 0 = off (the fusion as before); unmasked scenes ignore it."""
    tsdf_min_views: float = 1.0
    """A grid corner seen by fewer training views than this is unknown (no surface is made through it)."""
    tsdf_carve_fraction: float = 0.5
    """``tsdf`` path on a capture with masks: a grid corner is free space when at least this share of the
    training views that vote on it see it outside their mask; below that those views do not vote and the
    depth decides (:func:`meshlift.isosurface.tsdf.tsdf_at_points`, step 6). 0 = every outside-mask view
    votes ``+1`` in the average (a view a pixel off then shrinks the silhouette and removes thin parts: on a
    CPU statue checkpoint 0.5 took the mesh from 18.65 to 19.11 dB, Gaussians 21.09). Rendered views of a
    mesh file (exact masks) always use 0 (quick spot checkpoint: F 0.817 at 0, 0.797 at 0.5)."""
    tsdf_unseen: str = "inside"
    """``tsdf`` path: a grid corner that no training view saw (hidden behind a surface, or outside every
    frustum) is ``inside`` (solid: Curless & Levoy's hole filling, so the surface is closed where seen free
    space meets it; :func:`meshlift.isosurface.sparse_grid.extract_tsdf_mesh`, step 5) or ``unknown`` (no
    surface through it: the mesh has holes wherever one view's depth carved through a surface). Measured on
    the CPU fox (docs/results.md, "Holes"): ``inside`` closed most of the whole-scene mesh's holes."""
    fill_hole_edges: int = 64
    """``tsdf`` path: after cleaning, close the border loops of at most this many edges of both meshes (the
    whole scene and the asset; :func:`meshlift.mesh.fill.fill_holes`: a fan around the loop's centroid); 0 =
    off. The open rims of the scene stay open (longer loops). Measured (docs/results.md, "Holes"): quick spot
    asset border edges 4,442 -> 2,112 at F 0.8876 -> 0.8854 (128 edges: F 0.8807); CPU fox +0.02 dB."""
    scene_fill_hole_edges: int = 4096
    """The whole-scene mesh's hole filling instead (``fill_hole_edges`` stays the asset's): loops of at most this
    many edges are closed, each connected component's longest loop (its outer rim: a fan there is a membrane
    across the view) never (:func:`meshlift.mesh.fill.fill_holes` ``skip_rims``); 0 = off. Measured on the CPU
    quick fox re-fused at 64 / 128 / 256 cells a side (2026-12-06; 64 edges before): 20.37 -> 20.34, 19.39 ->
    20.08 (empty test pixels 1.77 -> 0.26 %), 10.93 -> 13.08 dB; at 128 with no rim guard and 4096 edges 11.35 dB.
    The H200 fox's whole-scene mesh left 309 loops open at 64 edges (prediction: +0.2-0.6 dB there); the H100 fox
    of session 25 with 4096 scored 19.19 dB unrefined against session 24's 19.65 with 64, all of it in one test
    view (cause not separated from the run-to-run difference: benchmarks/results/2026-12-06_session25_device.md)."""
    scene_fill_see_through: int = 0
    """The whole-scene mesh's hole filling refuses a loop's fill that the training views see through: a fill
    triangle is free space where at least this many training views' depths lie beyond its centroid (all 2 x 2
    depths around its projection farther by more than ``scene_fill_see_through_tol``,
    :func:`meshlift.isosurface.depth_consistency.see_through`) and more views see through it than see a
    surface at it; a loop is left open when such triangles make up more than
    :data:`meshlift.methods.milo.tsdf_mesh.FILL_FREE_SHARE` of its fill's area (:func:`see_through_fill`).
    Why: a fan across a real opening (a doorway, the gap under furniture) is a membrane in front of what other
    views see through it; small holes in a wall are seen *at* the wall and still close. 0 = off (the default:
    on the CPU quick fox re-fused at 128 cells a side, 2 refused a few loops and cost 0.08 dB, 20.17 -> 20.09,
    empty test pixels 0.22 -> 0.60 %: where a view sees through a fill, the mesh lacks the surface behind it too,
    so the membrane was the better stand-in there; at 64 cells no change; the device replay is to come,
    ``benchmarks/milo_fox_session.sh``)."""
    scene_fill_see_through_tol: float = 0.05
    """Relative depth margin of that test (a view sees through a point when its depth there exceeds the point's
    camera z by more than this share)."""
    scene_fill_method: str = "fan"
    """How the whole-scene mesh's loops of more than 3 edges are closed (:func:`meshlift.mesh.fill.fill_holes`
    ``method``): ``fan`` = triangles around a new vertex at the loop's centroid; ``ear`` = ear clipping, the
    shortest new edge first, no new vertex (a long curved crack is zipped across its width; a fan throws
    triangles over the surface beside it). Measured on the CPU quick fox re-fused (2026-12-06, session 25;
    `photo_refine_replay.py --set scene_fill_method=ear`, 4096 edges): 64 / 128 cells a side 20.52 -> 20.52,
    20.17 -> 20.17 dB (a first version that could cut reflex corners: 20.23; 256 cells 9.15 -> 9.13): no
    difference at that size; the device replay is to come
    (`benchmarks/milo_fox_session.sh`), so ``fan`` stays the default."""
    region: str = "auto"
    """Fusion region: ``auto`` = ``object`` for a mesh input or a capture with masks, else ``scene``; ``scene`` = everything the
    cameras see (the box around the cameras and the object at full resolution, the rest of space contracted
    into it, mip-NeRF 360's contraction); ``object`` = only the region of interest (``bbox`` or the
    automatic one)."""
    bbox: str = ""
    """Region of interest ``x0,y0,z0,x1,y1,z1`` (world units of the dataset, ``--bbox``); empty = automatic
    (where the cameras look, refined by the SfM points). The exported asset is the mesh cut to it."""
    roi_masks: bool = True
    """Automatic region of interest of a capture **with masks**: replace the box from the cameras and SfM points
    by the box of the masks' visual hull (:func:`meshlift.data.roi.mask_hull_roi`; conservative: a mask dilated
    by a grid cell, a tenth of the views may disagree). The points' box cut the statue's torch and plinth
    (few SfM points on thin parts), and the asset with them."""
    object_asset: bool = True
    """``tsdf`` path on a dataset: export the mesh cut to the region of interest (closed at the cut) as the
    asset (``mesh.glb``/``mesh.obj``); the whole-scene mesh is ``scene_mesh.ply`` either way."""
    up_axis: str = "keep"
    """Up axis of the exported meshes (``mesh.glb``/``.obj``/``.ply``, ``scene_mesh.ply``): ``keep`` writes the
    dataset's world coordinates (a COLMAP or NeRF capture is often +Z up: sideways in glTF viewers); ``auto``
    turns them so the up of the region of interest (estimated from the cameras' roll,
    :func:`meshlift.data.roi.auto_roi`) becomes glTF's +Y, by the nearest axis (``nearest_up_axis``); ``z``,
    ``-y``, ``x``, ... name the dataset's up axis (``--up``). The rotation is recorded in the GLB and
    ``metrics.json`` (``up_axis_conversion``); metrics and ``point_cloud.ply`` (the Gaussians) stay in the
    dataset's frame (docs/conventions.md §9)."""
    remove_support: bool = True
    """``tsdf`` path on a capture without masks, with ``object_asset``: also cut away the plane the object
    stands on (the table or floor inside the region of interest; RANSAC, :mod:`meshlift.mesh.support_plane`,
    near-horizontal planes only), closing the cut; nothing is removed when no such plane is found."""
    floor_snap: float = 0.08
    """``tsdf`` path, with ``remove_support`` (a capture without masks, ``object_asset``): before the asset's
    fusion, find the floor plane in the training views' depth maps (RANSAC within the region of interest) and
    move every depth sample within ``floor_snap`` × the region's half-size (its longest side / 2) of it onto it
    along its ray, except just under something standing on the floor (a leg);
    :mod:`meshlift.methods.milo.floor_depth`. The floor then fuses as one flat sheet, and the support cut uses
    that plane and removes it cleanly (no bumpy skirt around the object's base, which cost the unmasked scenes
    their precision: spot P 0.65, bob 0.72 on the H200, 2026-12-04). 0 = off (the mesh-RANSAC cut alone)."""

    # ---- the mesh in the loop -----------------------------------------------------------------------------
    mesh_start: int = 8000
    """First step with the mesh in the loop (MILo: 8001)."""
    pivot_min_opacity: float = 0.1
    """Only Gaussians at least this opaque spawn pivots (near-transparent floaters would otherwise become
    closed blobs through the occupied-centres loss; our rule, MILo's sampled Gaussians are opaque)."""
    trunc_pixels: float = 2.0
    """Depth-fusion truncation: at least this many pixel footprints at the scene centre (MILo's
    ``2e-3 × scene_scale`` is about 2 px at its ~1000 px images; at small images it is under a pixel)."""
    num_pivots: int = 270_000
    """Mesh resolution budget: Delaunay vertices (9 per Gaussian; MILo ``n_max_points_in_delaunay``:
    verylowres 270k, lowres 540k, default 5.4M)."""
    mesh_res_scale: float = 1.0
    """Multiplies ``num_pivots`` (the MILo fork's ``MILO_MESH_RES_SCALE``): < 1 for less memory/time."""
    delaunay_every: int = 500
    """Re-triangulate the pivots every this many steps, in a background thread (topology fixed between)."""
    delaunay_memory_gb: float = 0.0
    """Host memory budget (GB) of one Delaunay call (0 = the host's available memory). Its estimated peak
    (:func:`meshlift.isosurface.delaunay_parallel.estimate_memory_gb`: ~13 GB for the ``default`` preset's
    5.4M pivots on 16 cores) is checked before the call; over it, the run stops with an OutOfMemoryError
    naming this field, ``num_pivots`` and ``mesh_res_scale``."""
    sdf_reset_every: int = 500
    """Reset the pivot SDF's base by depth fusion of the rendered median depths every this many steps ..."""
    sdf_reset_stop: int = 13_000
    """... up to this step (MILo: 13000); afterwards the SDF is only learned."""
    sdf_reset_blend: float = 0.4
    """Weight of the fused occupancy in a reset (MILo's EMA, 0.4)."""
    labels_every: int = 200
    """Recompute the occupancy labels (mesh rendered at every training view) every this many steps."""
    lr_occupancy: float = 0.025
    """Adam step of the pivots' learned occupancy shift (MILo: the opacity rate, 0.025)."""
    mesh_depth_weight: float = 0.05
    """Weight of ``log(1 + |D_mesh − D_gauss| / scene_scale)`` (MILo 0.05)."""
    mesh_normal_weight: float = 0.05
    """Weight of ``1 − |n_mesh · n_gauss|`` (MILo 0.05)."""
    occupied_centres_weight: float = 0.005
    """Weight of the penalty on Gaussian centres outside the occupied region (MILo 0.005)."""
    occupancy_label_weight: float = 0.005
    """Weight of the BCE on the 'inside' occupancy labels (MILo 0.005)."""
    max_fragments: int = 0
    """Mesh rasterizer fragment budget per call (MILo fork's ``MILO_RAST_TRI_CHUNK``; 0 = the rasterizer's
    default, 2^24). Lower it on out-of-memory in the mesh render."""
    raster_backend: str = "auto"
    """Mesh rasterizer implementation: ``auto`` (Triton kernels on CUDA when ``import triton`` works, else
    PyTorch), ``torch`` or ``triton``."""
    mesh_chunk_views: int = 8
    """Views per mesh-rasterizer call when labelling / fusing all training views (memory knob)."""
    tet_chunk: int = 1 << 22
    """Tetrahedra per marching-tets chunk (memory knob)."""

    # ---- final extraction ---------------------------------------------------------------------------------
    extract_steps: int = 1000
    """Occupancy refinement steps at extraction (Gaussians frozen; MILo ``mesh_extract_sdf.py``: 1000)."""
    extract_labels_every: int = 100
    """Label refresh interval during the refinement (MILo: 100)."""
    keep_components: float = 0.02
    """Cleaning: drop connected components whose bbox diagonal is below this × the mesh's (0 keeps all)."""
    min_component_faces: float = 0.01
    """Cleaning: also drop connected components with fewer faces than this × the largest component's
    (the fragments floaters leave; 0 keeps all)."""
    texture_res: int = 1024
    """Side of the baked albedo texture (texels)."""
    simplify: int = 0
    """Decimate the final mesh to at most this many faces before UV unwrapping (0 = keep; ``--simplify``)."""
    eval_samples: int = 200_000
    """Surface samples per mesh for Chamfer / F-score against a known truth (mesh-file inputs)."""
    color_depth_tol: float = 0.01
    """Vertex/texel colour fusion: a view sees a point when its depth is within this × scene_scale of the
    mesh's depth there."""
    scene_color_power: float = 0.0
    """Whole-scene mesh's vertex colours: each training view that sees a vertex weighs ``(f_x / z) ** this``
    (its pixels per world unit there), so close views' detail outweighs distant views' blur; 0 = the plain mean
    (:func:`meshlift.methods.milo.extract.fuse_colors`). Measured on the fox's re-fused CPU scene mesh (270×480,
    loaded machine, 2026-12-04): 0 -> 19.48 dB, 2 -> 17.43 dB (the close views disagree more: the mean wins), so
    the default stays 0."""
    photo_refine_steps: int = 300
    """Photometric refinement (:mod:`meshlift.methods.milo.photo_refine`): steps of moving the extracted mesh's
    vertices along their normals and fitting its vertex colours to the training photographs by differentiable
    rasterization (the colour term, nerf2mesh's stage 2, and cross-view photo-consistency); 0 = off (``--quick``).
    Runs on the whole-scene mesh (``extract=tsdf``, the mesh rendered for ``mesh_psnr``; ``mesh_psnr_unrefined``
    is kept) and, with ``photo_refine_asset``, on the asset before its texture bake."""
    photo_refine_asset: bool = False
    """Also refine the asset's geometry (before its colours are fused and baked), not only the whole-scene mesh.
    Off: on the H200 bunny (× 0.5 schedule, shared GPU, 2026-12-06) it cost F 0.9890 -> 0.9869 and the asset's
    render 31.79 -> 30.80 dB."""
    photo_refine_views: int = 2
    """Training views rendered per refinement step."""
    photo_refine_lr_offset: float = 0.02
    """Adam learning rate of the offset parameter (offset = ``photo_refine_max_offset · tanh(u)`` pixels)."""
    photo_refine_lr_color: float = 0.005
    """Adam learning rate of the linear vertex colours."""
    photo_refine_max_offset: float = 2.0
    """Largest move of a vertex along its normal, in pixels (one pixel's size at the vertex in the closest
    training view)."""
    photo_refine_smooth: float = 30.0
    """Weight of the offsets' uniform-Laplacian smoothness (per pixel). On a synthetic sphere (3 % radius error,
    16 views at 96², 2026-12-06) 0.1 / 1 / 10 / 30 / 100 gave radius errors 0.0038 / 0.0021 / 0.0017 / 0.0015 /
    0.0013 from 0.0107 and test PSNR 30.0 / 32.6 / 33.3 / 34.8 / 36.1 dB from 26.9; a real mesh's detail lives
    in the unmoved base mesh, only the offset is smoothed."""
    photo_refine_mask_weight: float = 1.0
    """Weight of the silhouette term for views with masks (alpha); unused without masks."""
    photo_refine_color_weight: float = 1.0
    """Weight of the colour term of the refinement (the vertex-coloured render against the photo, the vertex colours
    fitted with the geometry); 0 = the geometry follows the cross-view photo-consistency alone and the colours are
    fused again from the refined surface. Measured on one H200 fox checkpoint (whole 18k schedule, alone,
    2026-12-06; `benchmarks/photo_refine_replay.py`, 5 test views): unrefined 19.65 dB, consistency alone 19.66,
    colour weight 1 / 3: 19.97 / 19.99 (Gaussians 22.12). On the CPU `--quick` fox (300k faces for 64-px views,
    ~6 vertices a pixel) the colour term lost 0.5 dB, so `--quick` skips the refinement."""
    photo_refine_sh_degree: int = 2
    """SH degree of the whole-scene mesh's view-dependent vertex colours, fitted by the colour term of the
    refinement (:mod:`meshlift.shading.view_colors`; MILo's mesh-based NVS protocol fits a view-dependent colour
    field of degree 2 the same way); 0 = one colour per vertex. ``mesh_psnr`` renders the view-dependent colours and
    ``mesh_psnr_diffuse`` the same mesh with its view-independent term (what ``scene_mesh.ply``'s vertex colours and
    a GLB hold). The asset stays diffuse. CPU fox checkpoint (1200 steps at 71 × 127, 300 refinement steps,
    2026-12-07): 0 / 1 / 2 -> 22.80 / 23.89 / 24.86 dB at photo_refine_lr_sh 0.001, 3 -> 24.25 at 0.0025 (Gaussians
    27.28; docs/usage/milo.md). A diffuse colour is fitted beside the terms for the exports (``v_color``)."""
    photo_refine_lr_sh: float = 0.001
    """Adam learning rate of the view-dependent SH terms (``photo_refine_sh_degree`` > 0). Same checkpoint, degree
    2: 0.0004 / 0.001 / 0.0025 / 0.01 -> 24.34 / 24.86 / 24.64 / 22.54 dB (larger rates overfit the training
    views)."""
    photo_refine_subdivide_px: float = 0.0
    """Before the whole-scene mesh's refinement, split its edges longer than this many pixels in the closest
    training view (conforming; :func:`meshlift.mesh.subdivide.subdivide_long_edges`): the fitted colours get a vertex
    per pixel or two where the fusion grid is coarser than the photos (the fox at 256³: edges 1.6 px at the median,
    36 % over 2 px; 2 / 3 px make 25.2M / 14.2M of its 8.0M faces). 0 = off. Needs the refinement with its colour
    term (``photo_refine_steps`` > 0, which ``--quick`` sets to 0; ``photo_refine_color_weight`` > 0).
    The scene mesh, scene_mesh.ply and the refinement's time grow with the faces (``photo_refine_max_faces``)."""
    photo_refine_max_faces: int = 24_000_000
    """Face budget of ``photo_refine_subdivide_px``'s subdivision (the longest edges are split first): lower it if
    the refinement runs out of memory."""
    photo_refine_solve_iters: int = 100
    """After the refinement, its fitted colours (the view-dependent ones of the whole-scene mesh) solved on the frozen
    geometry: at most this many full-batch L-BFGS iterations on the training views' squared error, stopped by
    held-out training views (:mod:`meshlift.methods.milo.colour_solve`); the diffuse colours (scene_mesh.ply's) stay
    as the refinement fitted them (solved the same way on the CPU fox checkpoint they gained nothing: the held-out
    views kept 0 of 20 iterations). 0 = off. H100 fox (session 31's checkpoint, session 32): test 25.82 -> 26.38 dB (30 of 50
    iterations kept, 21 s); CPU fox checkpoint 24.84 -> 25.28; on the H100 fox of session 34 it kept 0 (stalled:
    ``photo_refine_solve_range_penalty``). Needs the colour term.
    Memory: the training views' rasters (up to 4 GiB) and 20 copies of the colour parameters (27 floats a vertex at
    SH degree 2): set 0 if it runs out of memory."""
    photo_refine_solve_range_penalty: float = 1.0
    """The colour solve passes the clamp's gradient straight through; when its first chunk does not move the fitting
    MSE (the H100 fox of session 34: unchanged over 20 iterations) it starts again with the clamp's own gradient and
    this weight × the pull of out-of-range colours back into [0, 1] (:mod:`meshlift.methods.milo.colour_solve`). 0: no
    second start (the solve before session 34). Penalised from the start it fitted less where straight-through moved
    (H100 fox, session 35: 26.44 against 26.68 dB)."""
    photo_refine_solve_holdout: float = 0.1
    """Share of the training views ``photo_refine_solve_iters``' solve holds out to stop it (at least one; none with
    fewer than 4 views): on the CPU fox checkpoint the test PSNR peaked at 40-80 iterations and fell after."""
    mesh_supersample: int = 2
    """Samples per pixel side of MILo's mesh renders: the evaluation (``mesh_psnr``, ``mesh_renders/``,
    ``compare/``), the whole-scene mesh's refinement colour terms and its colour solve rasterise at this many times
    the resolution and average each pixel's ``s × s`` samples (supersampling: the pixel's area, as a camera
    integrates it, where one sample at its centre aliases a whole-scene mesh's sub-pixel triangles and colours).
    Measured (CPU fox checkpoint, 192k faces at 71 × 127, 300 refinement steps and the solve,
    ``photo_refine_replay.py``, session 33): 1 / 2 / 3 / 4 → 25.28 / 26.16 / 26.42 / 26.63 dB (Gaussians 27.28),
    every test view better, 140 / 180 / 256 / 374 s. Cost: ``s²`` the raster memory and shading work of those
    renders (the solve's raster cache too). 1 = one sample a pixel; at most 4."""


#: Fields that cannot change on ``--resume``.
SHAPE_FIELDS = ("sh_degree", "data", "num_pivots", "mesh_res_scale", "ref_views", "train_res", "ref_scene", "extract")

_CHOICES = {"imp_metric": ("indoor", "outdoor"), "extract": ("tsdf", "delaunay"), "surface_depth": ("median_plane", "plane", "median"),
            "region": ("auto", "scene", "object"), "ref_scene": ("object", "ground"),
            "raster_backend": ("auto", "torch", "triton"), "tsdf_unseen": ("inside", "unknown"),
            "scene_contraction": ("inverse", "log"), "scene_fill_method": ("fan", "ear")}
_UNIT = ("sampling_factor", "prune_cdf", "sdf_reset_blend")
_NONNEG = ("floor_snap", "scene_voxel_pixels", "depth_consistency_views", "depth_consistency_tol", "scene_fill_see_through_tol", "flatten_weight", "tsdf_trunc_pixels", "scene_trunc_pixels", "tsdf_trunc_voxels", "tsdf_trunc_spread", "tsdf_min_views", "trunc_pixels", "depth_normal_weight", "multiview_weight", "mesh_depth_weight", "mesh_normal_weight", "occupied_centres_weight",
           "occupancy_label_weight", "keep_components", "min_component_faces", "color_depth_tol", "scene_color_power", "mesh_res_scale",
           "photo_refine_lr_offset", "photo_refine_lr_color", "photo_refine_max_offset", "photo_refine_smooth",
           "photo_refine_mask_weight", "photo_refine_color_weight", "photo_refine_lr_sh",
           "photo_refine_subdivide_px", "photo_refine_solve_iters", "photo_refine_solve_holdout",
           "photo_refine_solve_range_penalty", "delaunay_memory_gb")
_GE1 = ("mesh_supersample", "photo_refine_views", "photo_refine_max_faces", "multiview_every", "multiview_neighbours", "unwrap_max_faces", "num_pivots", "delaunay_every", "sdf_reset_every", "labels_every", "extract_labels_every",
        "mesh_chunk_views", "tet_chunk", "texture_res", "ref_views", "ref_test_views", "eval_samples")
_GE0 = ("max_asset_faces", "fill_hole_edges", "scene_fill_hole_edges", "scene_fill_see_through", "flatten_start", "reinit_step", "reinit_points", "sampling_step", "prune_step", "depth_normal_start", "multiview_start", "mesh_start", "sdf_reset_stop", "extract_steps", "photo_refine_steps",
        "simplify", "max_fragments")


#: Settings of the photometric refinement that do nothing while it is off (``photo_refine_steps=0``, ``--quick``).
_REFINE_ONLY = ("photo_refine_sh_degree", "photo_refine_lr_sh", "photo_refine_subdivide_px", "photo_refine_max_faces",
                "photo_refine_asset", "photo_refine_solve_iters", "photo_refine_solve_holdout",
                "photo_refine_solve_range_penalty", "photo_refine_views", "photo_refine_lr_offset", "photo_refine_lr_color", "photo_refine_max_offset",
                "photo_refine_smooth", "photo_refine_color_weight")


def inert_settings(cfg: MiloConfig) -> list[str]:
    """Warnings for settings the run never uses: the photometric refinement's, changed from their defaults, while
    ``photo_refine_steps`` is 0 (what ``--quick`` sets) or with ``extract=delaunay``; the edge splits without the
    colour term."""
    out = []
    if cfg.photo_refine_subdivide_px > 0 and cfg.photo_refine_color_weight == 0 and cfg.photo_refine_steps > 0:
        out.append(f"photo_refine_subdivide_px={cfg.photo_refine_subdivide_px:g} has no effect without the colour "
                   "term (photo_refine_color_weight=0): the splits are for the fitted colours")
    base = MiloConfig()
    changed = ", ".join(f"{k}={getattr(cfg, k)!r}" for k in _REFINE_ONLY if getattr(cfg, k) != getattr(base, k))
    if changed and cfg.extract != "tsdf":
        out.append(f"{changed} has no effect with extract={cfg.extract}: the photometric refinement belongs to "
                   "extract=tsdf")
    elif changed and cfg.photo_refine_steps == 0:
        out.append(f"{changed} has no effect: the photometric refinement is off (photo_refine_steps=0, as --quick "
                   "sets it); add --set photo_refine_steps=300 to run it")
    return out


def validate(cfg: MiloConfig) -> MiloConfig:
    """The Gaussian checks, then MILo's ranges and the schedule's order; raises ConfigError naming the field."""
    validate_gaussians(cfg)
    for name, choices in _CHOICES.items():
        if getattr(cfg, name) not in choices:
            raise ConfigError(f"config field {name!r} = {getattr(cfg, name)!r}; choose one of {', '.join(choices)}")
    for name in _UNIT:
        v = getattr(cfg, name)
        if not (math.isfinite(v) and 0 < v <= 1):
            raise ConfigError(f"config field {name!r} must be in (0, 1], got {v!r}")
    for name in _NONNEG:
        v = getattr(cfg, name)
        if not (math.isfinite(v) and v >= 0):
            raise ConfigError(f"config field {name!r} must be a finite number >= 0, got {v!r}")
    if not (math.isfinite(cfg.depth_min_alpha) and 0 <= cfg.depth_min_alpha < 1):
        raise ConfigError(f"config field 'depth_min_alpha' must be in [0, 1), got {cfg.depth_min_alpha!r}")
    if not (math.isfinite(cfg.tsdf_carve_fraction) and 0 <= cfg.tsdf_carve_fraction <= 1):
        raise ConfigError(f"config field 'tsdf_carve_fraction' must be in [0, 1] (0 = outside-mask views vote like "
                          f"any other), got {cfg.tsdf_carve_fraction!r}")
    if not (math.isfinite(cfg.pivot_min_opacity) and 0 <= cfg.pivot_min_opacity < 1):
        raise ConfigError(f"config field 'pivot_min_opacity' must be in [0, 1), got {cfg.pivot_min_opacity!r}")
    if not (math.isfinite(cfg.multiview_max_error) and cfg.multiview_max_error > 0):
        raise ConfigError(f"config field 'multiview_max_error' must be > 0 pixels, got {cfg.multiview_max_error!r}")
    if not cfg.mesh_res_scale > 0:
        raise ConfigError(f"config field 'mesh_res_scale' must be > 0, got {cfg.mesh_res_scale!r}")
    if not cfg.lr_occupancy > 0:
        raise ConfigError(f"config field 'lr_occupancy' must be > 0, got {cfg.lr_occupancy!r}")
    if not 0 <= cfg.photo_refine_sh_degree <= 3:
        raise ConfigError(f"config field 'photo_refine_sh_degree' must be in 0..3 (0 = one colour per vertex), got "
                          f"{cfg.photo_refine_sh_degree!r}")
    if not cfg.photo_refine_solve_holdout <= 0.5:
        raise ConfigError(f"config field 'photo_refine_solve_holdout' is the share of the training views held out "
                          f"to stop the colour solve: at most 0.5, got {cfg.photo_refine_solve_holdout!r}")
    if not cfg.mesh_supersample <= 4:
        raise ConfigError(f"config field 'mesh_supersample' is the samples per pixel side of MILo's mesh renders: "
                          f"at most 4 (s² times their memory), got {cfg.mesh_supersample!r}")
    for name in _GE1:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"config field {name!r} must be >= 1, got {getattr(cfg, name)}")
    for name in _GE0:
        if getattr(cfg, name) < 0:
            raise ConfigError(f"config field {name!r} must be >= 0, got {getattr(cfg, name)}")
    for name in ("tsdf_resolution", "scene_resolution"):
        v = getattr(cfg, name)
        if name == "scene_resolution" and v == 0:  # chosen from the images (scene_voxel_pixels)
            continue
        if not (16 <= v <= 4096 and v & (v - 1) == 0):
            raise ConfigError(f"config field {name!r} must be a power of two in [16, 4096], got {v}")
    if cfg.tsdf_trunc_voxels < 1:
        raise ConfigError(f"config field 'tsdf_trunc_voxels' must be >= 1 voxel, got {cfg.tsdf_trunc_voxels!r}")
    from meshlift.geometry.transforms import UP_AXES

    if cfg.up_axis not in ("keep", "auto") and str(cfg.up_axis).lower().lstrip("+") not in UP_AXES:
        raise ConfigError(f"config field 'up_axis' = {cfg.up_axis!r}; choose keep, auto or one of {', '.join(UP_AXES)}")
    if cfg.bbox:
        from meshlift.data.roi import parse_bbox

        parse_bbox(cfg.bbox)  # raises ConfigError naming the format
    if num_mesh_gaussians(cfg) < 4:
        raise ConfigError(f"num_pivots × mesh_res_scale = {cfg.num_pivots} × {cfg.mesh_res_scale} gives fewer than "
                          "4 Gaussians (9 pivots each); raise num_pivots")
    # The Gaussian set must be final before the mesh starts: the pivots index it.
    reinit = cfg.reinit_step if cfg.reinit_step < cfg.steps else 0  # a re-init after the last step never runs
    last_edit = max(cfg.densify_refine_stop if cfg.densify else 0, reinit, cfg.sampling_step, cfg.prune_step)
    if cfg.mesh_start < cfg.steps and cfg.mesh_start <= last_edit:
        raise ConfigError(
            f"config field 'mesh_start' = {cfg.mesh_start} must come after the last change of the Gaussian set "
            f"(densify_refine_stop={cfg.densify_refine_stop}, reinit_step={cfg.reinit_step}, sampling_step={cfg.sampling_step}, "
            f"prune_step={cfg.prune_step}): the pivots index a fixed set of Gaussians")
    if cfg.sampling_step and cfg.prune_step and cfg.prune_step <= cfg.sampling_step:
        raise ConfigError(f"config field 'prune_step' = {cfg.prune_step} must come after sampling_step = "
                          f"{cfg.sampling_step} (or set one of them to 0)")
    return cfg


def num_mesh_gaussians(cfg: MiloConfig) -> int:
    """How many Gaussians spawn pivots: ``num_pivots × mesh_res_scale / 9``."""
    return int(cfg.num_pivots * cfg.mesh_res_scale) // 9


def field_docs() -> dict[str, str]:
    """Map field name -> docstring (the inherited Gaussian fields first, then MILo's)."""
    return {**_config.field_docs(GaussiansConfig), **_config.field_docs(MiloConfig)}


def apply_dict(cfg: MiloConfig, values: dict[str, Any], *, source: str = "config") -> MiloConfig:
    """A validated copy of ``cfg`` with ``values`` applied (``densify.x`` read as ``densify_x``)."""
    values = {k.replace("densify.", "densify_"): v for k, v in values.items()}
    return _config.apply_dict(cfg, values, source=source, validate=validate,
                              help_hint="see `meshlift reconstruct --method milo --help-config`")


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a flat JSON or TOML table of config values (a ``[milo]`` TOML table is also accepted)."""
    return _config.load_config_file(path, table="milo")
