"""The nvdiffrec method family: two-pass surface reconstruction with PBR materials and an HDR light.

Source: Munkberg et al., "Extracting Triangular 3D Models, Materials, and Lighting From Images", CVPR 2022
(nvdiffrec); FlexiCubes: Shen et al., SIGGRAPH 2023. One module per job, imports pointing down the list:

- :mod:`.reconstruct`: ``reconstruct(cfg, out_dir)`` — the whole run, input sniffing, OOM translation;
- :mod:`.outputs`: the asset folder (mesh, GLB, probe, images, metrics, loss curve);
- :mod:`.passes`: ``Pass1Trainer`` (topology) and ``Pass2Trainer`` (fixed topology, textures), the
  ``TrainLoop`` s of :mod:`meshlift.methods.loop` behind ``run_pass1`` / ``run_pass2``;
- :mod:`.evaluate`: rendering a batch / the held-out views, image and geometry metrics, back to world units;
- :mod:`.losses`: image loss, Laplacian, the regulariser ramps (named schedules);
- :mod:`.materials`: the pass-1 material field and the environment light;
- :mod:`.geometry`: DMTet / FlexiCubes modules and SDF initialisation (sphere, random, visual hull);
- :mod:`.presets`: named configs (``spot``, ``nerf``, ``demo``...); :mod:`.config`: ``SurfaceConfig``.

Shared machinery: the training loop :mod:`meshlift.methods.loop`; progress, checkpoints, schedules, device/OOM,
time budget :mod:`meshlift.methods.engine`;
the views come from :mod:`meshlift.data.views`. Nothing heavy is imported here.
"""
