"""Named configurations mirroring nvdiffrec's ``configs/*.json``, each with a CPU-sized ``--quick`` variant.

- ``spot``, ``bob``: a mesh file rendered on the fly as a synthetic scene (the gt mesh), learned light.
- ``spot_fixlight``, ``bob_fixlight``: the same with the environment the gt mesh was rendered under given as
  known light.
- ``spot_metal``, ``bob_metal``: metallic gt material (``ref_ks = (0, 0.2, 1)``), a high-frequency
  environment, metallic range opened.
- ``spot_flexi``: ``spot`` with FlexiCubes instead of DMTet.
- ``nerf``: NeRF-synthetic (Blender) scenes, white background; the material field's finest resolution sized
  to the training images (``hash_max_res = 0``, auto).
- ``nerd``: NeRD / LLFF captures with masks.
- ``demo``: the CPU demo (``meshlift demo``): ``spot`` with the ``--quick`` changes and :data:`DEMO_CHANGES`.
- the ``tiny`` run (:func:`tiny_preset`, not a ``--preset`` name): an input's default preset, ``--quick``, with
  :data:`TINY_CHANGES` — every stage in under a minute on 2 CPU cores (the app's ``tiny`` size).

The full presets are sized for one 24 GB GPU (nvdiffrec's: 5000 iterations per pass, batch 8, 512-800 px,
2048² textures; our Kuhn grid 96 has about 3x the vertices of nvdiffrec's "128" tet grid). SDF learning
rates are in normalised length units per Adam step: about 0.04 grid cells per step is stable; larger steps
flip SDF signs faster than the images can correct them and grow interior sheets. ``get_preset(name,
quick=True)`` returns the CPU-sized variant (grid 32, 96 px, 300 + 100 iterations, small light, hash grid and
textures).
"""

from __future__ import annotations

import dataclasses

from meshlift.errors import ConfigError
from meshlift.methods.nvdiffrec.config import SurfaceConfig, validate

_BASE_REF = SurfaceConfig(
    train_res=512,
    batch=8,
    grid_res=96,
    mesh_scale=2.4,
    iter_pass1=5000,
    iter_pass2=5000,
    ref_views=200,
    ref_test_views=16,
    texture_res=2048,
    env_res=128,
    ks_min=(0.0, 0.08, 0.0),
    ks_max=(0.0, 1.0, 0.0),
    background="white",
    sdf_init="visual_hull",
    lr_pos=0.002,
    preview_every=500,
)

#: Shared by the photo-capture presets (NeRF-synthetic, NeRD).
_BASE_CAPTURE = SurfaceConfig(
    train_res=512,
    batch=8,
    grid_res=96,
    mesh_scale=2.1,
    iter_pass1=5000,
    iter_pass2=5000,
    texture_res=2048,
    background="white",
    ks_min=(0.0, 0.08, 0.0),
    ks_max=(0.0, 1.0, 1.0),
    sdf_init="visual_hull",
    lr_pos=0.002,
)

PRESETS: dict[str, SurfaceConfig] = {
    "spot": _BASE_REF,
    "bob": dataclasses.replace(_BASE_REF),
    "spot_fixlight": dataclasses.replace(_BASE_REF, light="fixed"),
    "bob_fixlight": dataclasses.replace(_BASE_REF, light="fixed"),
    "spot_metal": dataclasses.replace(
        _BASE_REF, ref_ks=(0.0, 0.2, 1.0), ks_max=(0.0, 1.0, 1.0), ref_env_kind="high_frequency"
    ),
    "bob_metal": dataclasses.replace(
        _BASE_REF, ref_ks=(0.0, 0.2, 1.0), ks_max=(0.0, 1.0, 1.0), ref_env_kind="high_frequency"
    ),
    "spot_flexi": dataclasses.replace(_BASE_REF, isosurface="flexicubes", grid_res=80),
    # the field's finest level sized to the images (auto): 840 on lego-half at 400², where 4096 fits one view's
    # residuals below a pixel and shows them as speckle in the others (issue 30)
    "nerf": dataclasses.replace(_BASE_CAPTURE, train_res=800, laplace_weight=3000.0, hash_max_res=0),
    "nerd": dataclasses.replace(_BASE_CAPTURE, train_res=512),
}

#: What ``--quick`` changes in every preset: CPU-sized grid, images, iterations, light and textures.
QUICK_CHANGES = dict(
    train_res=96,
    batch=2,
    grid_res=32,
    iter_pass1=300,
    iter_pass2=100,
    ref_views=24,
    ref_test_views=4,
    max_test_views=4,
    texture_res=256,
    env_res=16,
    eval_samples=50000,
    val_views=2,
    lr_decay=0.001,
    lr_pos=0.003,
    sdf_init="visual_hull",
    hash_levels=12,
    hash_log2_size=15,
    hash_max_res=512,
    preview_every=0,
)


#: What the ``demo`` preset changes on top of ``spot`` + :data:`QUICK_CHANGES`: shorter passes (a couple of
#: minutes on one CPU core), CPU, no intermediate checkpoints, faster material/light steps, no albedo
#: smoothness regulariser.
DEMO_CHANGES = dict(
    iter_pass1=200,
    iter_pass2=50,
    device="cpu",
    checkpoint_every=0,
    checkpoint_every_s=0.0,
    lr_mat=0.02,
    lr_light=0.02,
    kd_smooth_weight=0.0,
    # the demo's ring is one piece: drop pass-1 floaters (one-thread run: a 24-face one; PSNR 27.39 -> 27.68,
    # F 0.9829 -> 0.9831 with it removed)
    min_component_faces=0.01,
)

PRESETS["demo"] = dataclasses.replace(_BASE_REF, **{**QUICK_CHANGES, **DEMO_CHANGES})


#: What the ``tiny`` run (:func:`tiny_preset`) changes on top of a ``--quick`` preset: the smallest run that
#: still goes through every stage (both passes, UV atlas, baked textures, export), so that the browser test
#: and a fresh install check the whole path in well under a minute on 2 CPU cores; its asset is coarse.
TINY_CHANGES = dict(
    train_res=48,
    batch=1,
    grid_res=24,
    iter_pass1=60,
    iter_pass2=15,
    ref_views=8,
    ref_test_views=2,
    max_test_views=2,
    val_views=1,
    texture_res=64,
    env_res=8,
    eval_samples=5000,
    hash_levels=8,
    hash_log2_size=12,
    hash_max_res=128,
    hidden_views=16,
    hidden_res=128,
)


def preset_names() -> list[str]:
    """Names accepted by :func:`get_preset` (each also as ``NAME`` + ``quick=True``)."""
    return sorted(PRESETS)


def get_preset(name: str, *, quick: bool = False) -> SurfaceConfig:
    """The preset ``name`` (a copy), CPU-sized when ``quick``; raises ConfigError for an unknown name."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r} for --method nvdiffrec; choose one of {', '.join(preset_names())} "
                          "(a preset of MILo or of Gaussian splatting needs --method milo or --method gaussians)")
    cfg = dataclasses.replace(PRESETS[name])
    if quick and name != "demo":
        changes = dict(QUICK_CHANGES)
        if cfg.isosurface == "flexicubes":
            changes["grid_res"] = 24
        cfg = dataclasses.replace(cfg, **changes)
    return validate(cfg)


def tiny_preset(data: str) -> SurfaceConfig:
    """The ``tiny`` run for the input ``data``: its default preset (:func:`default_preset_for`), CPU-sized, with
    :data:`TINY_CHANGES` (``data`` itself is not set)."""
    return validate(dataclasses.replace(get_preset(default_preset_for(data), quick=True), **TINY_CHANGES))


__all__ = ["DEMO_CHANGES", "PRESETS", "QUICK_CHANGES", "TINY_CHANGES", "default_preset_for", "get_preset",
           "preset_names", "tiny_preset"]


def default_preset_for(data: str) -> str:
    """The preset used when none is named: ``spot`` for a mesh file, ``nerd`` for a folder with LLFF poses
    (``poses_bounds.npy``, also beside a COLMAP model: NeRD-style captures with masks), else ``nerf`` (also
    when ``data`` is not readable: the input's own error comes later, after the config has been checked)."""
    from pathlib import Path

    from meshlift.data.views import sniff_input
    from meshlift.errors import DatasetError

    try:
        kind = sniff_input(data)
    except DatasetError:
        return "nerf"
    if kind == "mesh":
        return "spot"
    return "nerd" if kind == "llff" or (Path(data) / "poses_bounds.npy").is_file() else "nerf"
