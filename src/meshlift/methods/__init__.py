"""Reconstruction methods: each composes data, renderers, isosurfaces, materials and light into a training loop.

- :mod:`meshlift.methods.engine`: what every method shares — progress ``Monitor``, ``TrainState`` and
  ``Checkpointer``, ``ViewSampler``, named schedules (every learning-rate schedule), device/OOM handling, time
  budget.
- :mod:`meshlift.methods.loop`: the one training-loop shape, ``TrainLoop`` (hooks per family; one loss
  read-back rule, one divergence guard with per-family ``GuardSettings``, one checkpoint path, Ctrl-C).
- :mod:`meshlift.methods.distributed`: data parallelism on torch.distributed (torchrun) for every method —
  the share of a global batch per rank, gradient all-reduce, broadcasts from rank 0, rank-0 writing, timeouts.
- :mod:`meshlift.methods.nvdiffrec`: two-pass surface reconstruction (DMTet / FlexiCubes, then fixed topology
  with textures), its config, presets and outputs.
- :mod:`meshlift.methods.gaussians`: 3D Gaussian splatting training (``point_cloud.ply``), config, presets,
  trainer, outputs.
- :mod:`meshlift.methods.milo`: MILo, Gaussians with a mesh (TSDF fusion or the mesh in the loop).
- :mod:`meshlift.methods.spec`: the contract of a method (``Method``: config, presets with their quick / tiny
  variants and run sizes, inputs, capabilities, the calls of a run); :mod:`meshlift.methods.registry`: the one
  list of methods (``METHODS``, ``get_method``) that the CLI, the web app and the benchmarks use.

A new method family gets its own package here (``methods/<family>/``: config, presets, a ``TrainLoop`` subclass, outputs, and a
``method.py`` declaring its ``Method``) plus one line in ``registry.py``. Nothing heavy is imported here.
"""
