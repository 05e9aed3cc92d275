"""Isosurface extraction: tetrahedral grids, DMTet marching tetrahedra, FlexiCubes.

* :mod:`meshlift.isosurface.tetgrid`: ``regular_tet_grid`` (Kuhn-split cube lattice made in code),
  ``tet_edges``.
* :mod:`meshlift.isosurface.dmtet`: ``marching_tets`` on any tet mesh (Shen et al. 2021; MILo's Delaunay),
  ``sdf_reg_loss`` (nvdiffrec Eq. 2).
* :mod:`meshlift.isosurface.delaunay`: ``delaunay_tets`` (Qhull via scipy, positively oriented tets),
  ``DelaunayRunner`` (background thread).
* :mod:`meshlift.isosurface.flexicubes`: ``FlexiCubes`` / ``flexicubes``, ``cube_grid``, ``cube_edges``
  (Shen et al. 2023);
  Dual Marching Cubes tables derived in code in :mod:`meshlift.isosurface.tables`.
* :mod:`meshlift.isosurface.tsdf` / :mod:`meshlift.isosurface.sparse_grid`: ``tsdf_at_points`` (streamed TSDF
  fusion of depth maps, Curless & Levoy 1996), ``empty_pixel_views``, ``contract`` / ``uncontract`` (mip-NeRF
  360 Eq. 10, L-inf), ``extract_tsdf_mesh`` (sparse coarse-to-fine grid + marching tets; 2DGS / GOF mesh
  extraction; ``unseen="inside"``: Curless & Levoy's hole filling).

Sign convention everywhere: ``sdf < 0`` inside, faces counter-clockwise seen from outside.
"""

from meshlift.isosurface.delaunay import DelaunayResult, DelaunayRunner, delaunay_tets, delaunay_tets_parallel
from meshlift.isosurface.dmtet import marching_tets, sdf_reg_loss
from meshlift.isosurface.flexicubes import FlexiCubes, cube_edges, cube_grid, flexicubes
from meshlift.isosurface.sparse_grid import extract_tsdf_mesh
from meshlift.isosurface.tetgrid import regular_tet_grid, tet_edges
from meshlift.isosurface.tsdf import contract, tsdf_at_points, uncontract

__all__ = [
    "DelaunayResult",
    "DelaunayRunner",
    "delaunay_tets",
    "delaunay_tets_parallel",
    "FlexiCubes",
    "cube_edges",
    "contract",
    "cube_grid",
    "extract_tsdf_mesh",
    "flexicubes",
    "marching_tets",
    "regular_tet_grid",
    "sdf_reg_loss",
    "tet_edges",
    "tsdf_at_points",
    "uncontract",
]
