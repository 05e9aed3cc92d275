"""Reconstruction methods: each composes rendering, isosurfaces, materials and light into a training loop.

- :mod:`meshlift.renderers.mesh_pbr`: ``render_mesh`` — deferred PBR rendering of a mesh (nvdiffrec pipeline).
- :mod:`meshlift.methods.config`: ``SurfaceConfig`` and its parts (dataclasses, a docstring per field).
- :mod:`meshlift.methods.presets`: named configs (``spot``, ``bob``, ``nerf``, ... and their ``--quick`` variants).
- :mod:`meshlift.methods.surface`: the two-pass surface reconstruction (DMTet / FlexiCubes, then fixed topology).
- :mod:`meshlift.methods.outputs`: writing the asset folder (mesh, GLB, probe, images, metrics).

Nothing heavy is imported here.
"""
