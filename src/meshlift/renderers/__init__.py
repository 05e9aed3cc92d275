"""Renderers: a scene object + cameras -> images.

- :mod:`meshlift.renderers.mesh_pbr`: triangle meshes, deferred split-sum PBR (``render_mesh``) and unlit
  (``render_unlit``); ``render_views`` / ``turntable_cameras`` for the CLI.

A renderer composes the ops of :mod:`meshlift.render` with materials and lights of :mod:`meshlift.shading`;
it knows no dataset, no optimiser and no file format. Nothing heavy is imported here.
"""
