"""Mesh edits on :class:`meshlift.structures.mesh.Mesh`: each returns a new mesh, every per-vertex attribute follows.

- :mod:`meshlift.mesh.clean`: merge close vertices, drop degenerate / duplicate faces, non-manifold edges,
  small components, unreferenced vertices (``clean_mesh``);
- :mod:`meshlift.mesh.simplify`: decimation (fast-simplification), keeping UVs (``simplify_mesh``);
- :mod:`meshlift.mesh.uv`: UV unwrapping with xatlas (``unwrap``);
- :mod:`meshlift.mesh.bake`: UV rasterisation and baking a volumetric field into textures;
- :mod:`meshlift.mesh.visibility`: removing faces no outside view sees (``remove_hidden_faces``);
- :mod:`meshlift.mesh.stats`: counts and sizes for reports (``mesh_stats``).

Nothing heavy is imported here.
"""
