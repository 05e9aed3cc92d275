"""3D Gaussian splatting training (Kerbl et al. 2023; gsplat's default strategy): ``reconstruct --method gaussians``.

- :mod:`~meshlift.methods.gaussians.config` / :mod:`~meshlift.methods.gaussians.presets`: ``GaussiansConfig``
  and the named presets (``gaussians``, ``--quick``, ``gaussians_tiny``);
- :mod:`~meshlift.methods.gaussians.views`: world-frame cameras and premultiplied sRGB targets;
- :mod:`~meshlift.methods.gaussians.init`, :mod:`~meshlift.methods.gaussians.losses`,
  :mod:`~meshlift.methods.gaussians.strategy`: initial Gaussians, L1 + D-SSIM, density control with hooks;
- :mod:`~meshlift.methods.gaussians.trainer`: ``GaussianTrainer``, a :class:`~meshlift.methods.loop.TrainLoop`
  (Adam per group, schedules, the guard's settings, checkpoints);
- :mod:`~meshlift.methods.gaussians.evaluate`, :mod:`~meshlift.methods.gaussians.outputs`,
  :mod:`~meshlift.methods.gaussians.reconstruct`: test metrics, the run folder, the entry the CLI calls.

Nothing heavy is imported here.
"""
