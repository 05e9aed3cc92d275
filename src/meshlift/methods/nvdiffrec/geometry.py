"""Pass-1 geometry of the nvdiffrec method: DMTet / FlexiCubes modules and SDF initialisation.

Sources: Shen et al., "Deep Marching Tetrahedra", NeurIPS 2021 and nvdiffrec (Munkberg et al., CVPR 2022,
Sec. 3-4) for DMTet with a learned SDF and bounded deformation; Shen et al., "Flexible Isosurface
Extraction for Gradient-Based Mesh Optimization" (FlexiCubes), SIGGRAPH 2023; Laurentini 1994, "The visual
hull concept" for the visual-hull initialisation. Sign convention: ``sdf < 0`` inside (docs/conventions.md §10).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from meshlift.data.views import PosedViews
from meshlift.errors import DatasetError
from meshlift.methods.nvdiffrec.config import SurfaceConfig
from meshlift.structures.mesh import Mesh

__all__ = ["DMTetGeometry", "FlexiGeometry", "grid_bounds", "init_sdf", "make_geometry", "occupancy_to_sdf",
           "pixel_footprint", "sphere_sdf", "view_cull_mesh", "view_cull_tolerance_px", "visual_hull_occupancy"]

#: Radius of the ``sphere`` SDF initialisation, as a fraction of ``mesh_scale``.
SPHERE_INIT_RADIUS = 0.3


def grid_bounds(cfg: SurfaceConfig) -> tuple[float, float]:
    """``(lo, hi)`` of the cube ``[-mesh_scale/2, mesh_scale/2]³`` the grid spans (normalised frame)."""
    half = 0.5 * float(cfg.mesh_scale)
    return -half, half


class _GridGeometry(nn.Module):
    """Shared part of the pass-1 geometries: a vertex grid with a learnable SDF and bounded deformation.

    Deformed vertices are ``v + deform_scale · (cell / 2) · tanh(deform)``; ``sdf < 0`` inside
    (docs/conventions.md §10). Subclasses set ``verts`` and ``edges`` and implement ``get_mesh``.
    """

    def _init_grid(self, cfg: SurfaceConfig, verts: torch.Tensor, edges: torch.Tensor) -> None:
        self.grid_res = int(cfg.grid_res)
        self.register_buffer("verts", verts, persistent=False)
        self.register_buffer("edges", edges, persistent=False)
        self.max_offset = float(cfg.deform_scale) * 0.5 * float(cfg.mesh_scale) / self.grid_res
        self.sdf = nn.Parameter(torch.zeros(verts.shape[0], device=verts.device))
        self.deform = nn.Parameter(torch.zeros_like(verts))

    @property
    def grid_points(self) -> torch.Tensor:
        """``[N, 3]`` undeformed grid vertices (for SDF initialisation)."""
        return self.verts

    @property
    def grid_shape(self) -> tuple[int, int, int]:
        n = self.grid_res + 1
        return n, n, n  # tet grid and cube grid index vertices alike (conventions §10)

    def set_sdf(self, sdf: torch.Tensor) -> None:
        """Overwrite the SDF values (``[N]``, negative inside) without recording gradients."""
        with torch.no_grad():
            self.sdf.copy_(sdf.to(self.sdf))

    def deformed_verts(self) -> torch.Tensor:
        return self.verts + self.max_offset * torch.tanh(self.deform)

    def reg_loss(self) -> torch.Tensor:
        """nvdiffrec's SDF sign-change regulariser (Eq. 2) over the grid edges."""
        from meshlift.isosurface.dmtet import sdf_reg_loss

        return sdf_reg_loss(self.sdf, self.edges)


class DMTetGeometry(_GridGeometry):
    """DMTet surface: SDF and bounded deformation per tet-grid vertex (Shen et al. 2021; nvdiffrec).

    The grid is ``regular_tet_grid(grid_res)`` over ``[-mesh_scale/2, mesh_scale/2]³``. Deformed vertices are
    ``v + deform_scale · (cell / 2) · tanh(deform)``. Sign convention of ``meshlift.isosurface.dmtet``:
    ``sdf < 0`` inside.
    """

    def __init__(self, cfg: SurfaceConfig, device: torch.device) -> None:
        super().__init__()
        from meshlift.isosurface.tetgrid import regular_tet_grid, tet_edges

        verts, tets = regular_tet_grid(int(cfg.grid_res), bounds=grid_bounds(cfg), device=device)
        self.register_buffer("tets", tets, persistent=False)
        self._init_grid(cfg, verts, tet_edges(tets))

    def get_mesh(self) -> tuple[Mesh, torch.Tensor]:
        """Extract the current surface: ``(Mesh, extra regulariser loss)`` (0 for DMTet)."""
        from meshlift.isosurface.dmtet import marching_tets

        v, f = marching_tets(self.deformed_verts(), self.sdf, self.tets)
        return Mesh(v_pos=v, t_pos_idx=f), v.new_zeros(())


class FlexiGeometry(_GridGeometry):
    """FlexiCubes surface (Shen et al. 2023): SDF, deformation and per-cube weights on a voxel grid."""

    def __init__(self, cfg: SurfaceConfig, device: torch.device) -> None:
        super().__init__()
        from meshlift.isosurface.flexicubes import FlexiCubes

        self.fc = FlexiCubes()
        verts, cubes = self.fc.cube_grid(int(cfg.grid_res), bounds=grid_bounds(cfg), device=device)
        self.register_buffer("cubes", cubes, persistent=False)
        self._init_grid(cfg, verts, self.fc.cube_edges(cubes))
        self.weight = nn.Parameter(torch.zeros(cubes.shape[0], 21, device=device))

    def get_mesh(self) -> tuple[Mesh, torch.Tensor]:
        """Extract the current surface: ``(Mesh, mean developability regulariser L_dev)``."""
        v, f, l_dev = self.fc(
            self.deformed_verts(),
            self.sdf,
            self.cubes,
            self.grid_res,
            beta=self.weight[:, :12],
            alpha=self.weight[:, 12:20],
            gamma=self.weight[:, 20],
            training=True,
        )
        return Mesh(v_pos=v, t_pos_idx=f.long()), l_dev.mean() if l_dev.numel() else v.new_zeros(())


def make_geometry(cfg: SurfaceConfig, device: torch.device) -> nn.Module:
    """The pass-1 geometry module of ``cfg.isosurface``."""
    if cfg.isosurface == "flexicubes":
        return FlexiGeometry(cfg, device)
    return DMTetGeometry(cfg, device)


# ---- SDF initialisation --------------------------------------------------------------------------------------


def sphere_sdf(points: torch.Tensor, radius: float) -> torch.Tensor:
    """Signed distance to a centred sphere (negative inside)."""
    return points.norm(dim=-1) - radius


def visual_hull_occupancy(points: torch.Tensor, views: PosedViews, threshold: float = 0.5,
                          chunk: int = 1 << 18, dilate_px: int = 0) -> torch.Tensor:
    """Inside-the-visual-hull test of ``points [N, 3]`` (normalised frame) against the masks of ``views``:
    :func:`meshlift.mesh.visibility.visual_hull_occupancy` (the one home of the test) on their projections and
    masks. A point is carved away when it projects inside some image (in front of the camera) onto a mask value
    below ``threshold`` (masks dilated by ``dilate_px`` pixels first); points outside every image are kept.

    Returns:
        ``[N]`` bool on the CPU, True inside the hull (computed on the masks' device).

    Raises:
        DatasetError: ``views`` has no masks.
    """
    from meshlift.mesh.visibility import visual_hull_occupancy as hull

    if views.masks is None:
        raise DatasetError("visual_hull init needs masks; the dataset has none (use --set sdf_init=sphere)")
    return hull(points, views.world_to_clip, views.masks, threshold=threshold, dilate_px=dilate_px, chunk=chunk)


#: ``view_cull_dilate_px = 0`` (auto): the masks are dilated by this fraction of a pass-1 grid cell as the cameras
#: see it, at least :data:`VIEW_CULL_MIN_PX` pixels — the isosurface puts the silhouette within about half a
#: cell of where the masks say (nerf preset: grid 96 at 800 px, a cell is about 7 px, so 4 px; ``--quick``: 2 px).
VIEW_CULL_CELL_FRACTION = 0.5
VIEW_CULL_MIN_PX = 2


def view_cull_tolerance_px(views: PosedViews, cfg: SurfaceConfig) -> int:
    """The mask dilation (pixels) of the view cull: ``cfg.view_cull_dilate_px`` when > 0, else (auto)
    ``max(VIEW_CULL_MIN_PX, ceil(VIEW_CULL_CELL_FRACTION × cell px))`` where ``cell px`` is a grid cell
    (``mesh_scale / grid_res``) projected at the median camera's distance from the origin with its focal length
    (read from ``world_to_clip``: the norm of row 0's rotation part is ``2 fx / W`` for a centred principal
    point)."""
    if cfg.view_cull_dilate_px > 0:
        return int(cfg.view_cull_dilate_px)
    import math

    cell_px = float(cfg.mesh_scale) / cfg.grid_res / pixel_footprint(views)
    return max(VIEW_CULL_MIN_PX, math.ceil(VIEW_CULL_CELL_FRACTION * cell_px))


def pixel_footprint(views: PosedViews) -> float:
    """Side of one image pixel at the origin of the normalised frame (normalised length units), for the median
    view of ``views``: ``distance / focal``, the camera's distance from the origin over its focal length in
    pixels (read from ``world_to_clip``: the norm of row 0's rotation part is ``2 fx / W`` for a centred
    principal point; the larger of x and y). Used to size things in pixels: the view cull's tolerance
    (:func:`view_cull_tolerance_px`), the material field's finest resolution
    (:func:`meshlift.methods.nvdiffrec.materials.auto_hash_max_res`)."""
    h, w = views.resolution
    m = views.world_to_clip.double().cpu()
    focal = torch.maximum(m[:, 0, :3].norm(dim=1) * w / 2, m[:, 1, :3].norm(dim=1) * h / 2)
    dist = views.camera_pos.double().cpu().norm(dim=1).clamp(min=1e-9)
    return float(1.0 / (focal / dist).median())


def view_cull_mesh(mesh: Mesh, views: PosedViews, cfg: SurfaceConfig) -> tuple[Mesh, dict]:
    """The pass-1 mesh without the geometry no training view needs: :func:`meshlift.mesh.visibility.view_cull`
    of ``mesh`` (normalised frame) against ``views``' projections and masks, as ``cfg.view_cull`` says, masks
    dilated by :func:`view_cull_tolerance_px` (memory: ``cfg.max_fragments``). Returns ``(mesh, info)``;
    ``info["dilate_px"]`` is the dilation used.

    Raises:
        MeshError: no masks (the method needs them), or the cull would leave nothing (the message says to
            use ``view_cull=off``).
    """
    from meshlift.mesh.visibility import view_cull

    px = view_cull_tolerance_px(views, cfg)
    mesh, info = view_cull(mesh, views.world_to_clip, views.masks, mode=cfg.view_cull, dilate_px=px,
                           max_fragments=cfg.max_fragments)
    return mesh, {**info, "dilate_px": px}


def occupancy_to_sdf(occ: torch.Tensor, grid_shape: tuple[int, int, int], spacing: float) -> torch.Tensor:
    """Signed Euclidean distance (negative inside) of a boolean occupancy on a regular grid (scipy EDT)."""
    from scipy.ndimage import distance_transform_edt

    o = occ.reshape(grid_shape).cpu().numpy()
    d_out = distance_transform_edt(~o) * spacing
    d_in = distance_transform_edt(o) * spacing
    sdf = np.where(o, -(d_in - 0.5 * spacing), d_out - 0.5 * spacing)
    return torch.from_numpy(sdf.reshape(-1).astype(np.float32))


def init_sdf(geom: nn.Module, cfg: SurfaceConfig, views: PosedViews, generator: torch.Generator) -> str:
    """Initialise the geometry's SDF as ``cfg.sdf_init`` says; returns what was done (for the log)."""
    pts = geom.grid_points
    kind = cfg.sdf_init
    if kind == "visual_hull" and views.masks is None:
        kind = "sphere"
    if kind == "visual_hull":
        occ = visual_hull_occupancy(pts, views)
        frac = float(occ.float().mean())
        if frac > cfg.hull_max_fill:
            from meshlift.errors import DatasetError

            raise DatasetError(
                f"the visual hull of the masks fills {100 * frac:.0f}% of the reconstruction grid (correct "
                f"captures fill a few %): the cameras probably do not look at the object — poses in the other "
                "convention (see the camera warnings of `meshlift inspect DATA`; transforms.json written with "
                "OpenCV axes needs --camera-convention opencv) or masks that do not cover it. To go on anyway, "
                f"--set hull_max_fill=1 (now {cfg.hull_max_fill})")
        if frac == 0.0 or frac == 1.0:
            kind = "sphere"
        else:
            shape = geom.grid_shape
            if shape is not None and int(np.prod(shape)) == pts.shape[0]:
                spacing = float(cfg.mesh_scale) / cfg.grid_res
                sdf = occupancy_to_sdf(occ, shape, spacing)
            else:
                sdf = torch.where(occ, -1.0, 1.0) * (0.5 * cfg.mesh_scale / cfg.grid_res)
            geom.set_sdf(sdf.to(pts.device))
            return f"visual hull ({100 * frac:.1f}% of the grid inside)"
    if kind == "random":
        sdf = 0.1 - torch.rand(pts.shape[0], generator=generator)  # nvdiffrec's rand - 0.1, negated (sdf<0 inside)
        geom.set_sdf(sdf.to(pts.device))
        return "random"
    geom.set_sdf(sphere_sdf(pts, SPHERE_INIT_RADIUS * cfg.mesh_scale))
    return "sphere"
