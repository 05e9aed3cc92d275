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

Sign convention everywhere: ``sdf < 0`` inside, faces counter-clockwise seen from outside.
"""

from meshlift.isosurface.delaunay import DelaunayResult, DelaunayRunner, delaunay_tets
from meshlift.isosurface.dmtet import marching_tets, sdf_reg_loss
from meshlift.isosurface.flexicubes import FlexiCubes, cube_edges, cube_grid, flexicubes
from meshlift.isosurface.tetgrid import regular_tet_grid, tet_edges

__all__ = [
    "DelaunayResult",
    "DelaunayRunner",
    "delaunay_tets",
    "FlexiCubes",
    "cube_edges",
    "cube_grid",
    "flexicubes",
    "marching_tets",
    "regular_tet_grid",
    "sdf_reg_loss",
    "tet_edges",
]
