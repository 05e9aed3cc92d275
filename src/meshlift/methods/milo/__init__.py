"""MILo: mesh-in-the-loop Gaussian splatting (Guédon et al. 2025), meshlift's own implementation.

Building blocks that do not need the Gaussian renderer (issue 11):

- :mod:`meshlift.methods.milo.pivots`: 9 pivots per Gaussian and the learnable pivot SDF (``PivotSDF``).
- :mod:`meshlift.methods.milo.depth_fusion`: truncated SDF at the pivots from depth maps (initialises and
  resets the pivot SDF's base).
- :mod:`meshlift.methods.milo.occupancy_labels`: mesh depth/normal maps (meshlift's rasterizer), the
  "behind the mesh in every view" occupancy labels, and the two occupancy losses.
- :mod:`meshlift.methods.milo.mesh_losses`: the depth and normal losses between mesh and Gaussian renders.

The Delaunay tetrahedralisation is :mod:`meshlift.isosurface.delaunay` and marching tetrahedra
:func:`meshlift.isosurface.dmtet.marching_tets`.

The method (``meshlift reconstruct --method milo``, docs/usage/milo.md), built on the Gaussian trainer of
:mod:`meshlift.methods.gaussians`: :mod:`~meshlift.methods.milo.config` / :mod:`~meshlift.methods.milo.presets`
(verylowres, lowres, default, milo_tiny), :mod:`~meshlift.methods.milo.strategy` (importance sampling and
cdf pruning), :mod:`~meshlift.methods.milo.mesh_in_loop` (the mesh-in-the-loop regulariser, ``extract=delaunay``),
:mod:`~meshlift.methods.milo.tsdf_mesh` (``extract=tsdf``, the default: surface-aligned Gaussians'
depth fused into a sparse TSDF grid; the whole scene and the object cut to its region of interest),
:mod:`~meshlift.methods.milo.extract` (final mesh, colours, texture) and
:mod:`~meshlift.methods.milo.reconstruct` (the run). Nothing heavy is imported here.
"""
