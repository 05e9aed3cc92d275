"""Named MILo configurations (MILo's mesh presets), each with a CPU-sized ``--quick`` variant.

MILo's schedule (project notes §1): 18k steps; densification 500–3000 every 100; importance sampling at
3000; depth–normal loss from 3000; 0.99-cdf pruning at 8000; mesh in the loop 8001–18000 with a
Delaunay every 500 steps, depth-fusion SDF resets until 13000 and labels every 200; 1000 refinement steps
at extraction. The presets differ in the mesh resolution budget (Delaunay vertices = 9 × Gaussians):

- ``verylowres``: 270k pivots (30k Gaussians; Qhull ≈ 21 s per call on one core, hidden in a thread);
- ``lowres``: 540k pivots (60k Gaussians; ≈ 45 s per call);
- ``default``: 5.4M pivots (600k Gaussians). Qhull needs ≈ 10 min per call (extrapolated), longer than
  500 training steps: the run keeps the previous tets until a triangulation is done (logged), and the
  first and final triangulations block. It runs, slowly; a faster Delaunay is not implemented.

``--quick`` (:data:`QUICK_CHANGES`): 64 px images (16 rendered views of a mesh input), at most 4000
Gaussians, 400 steps with the schedule compressed (densify to 160, depth re-init at 80 with 3000 points,
sample at 160, prune at 200, mesh from 201, Delaunay / SDF resets every 50, labels every 20, 40 refinement
steps), a 9k-pivot mesh, and a 280 s time budget (shared between training and refinement by
:class:`~meshlift.methods.engine.TimeBudget`, keeping 15% for colouring, evaluation and export), so it
ends within 5 minutes on two CPU cores on a small object (a loaded machine stops training early).
``milo_tiny``: the CI preset (48 px, a few hundred Gaussians, ~100 steps).
"""

from __future__ import annotations

import dataclasses

from meshlift.errors import ConfigError
from meshlift.methods.gaussians.presets import QUICK_CHANGES as GAUSSIAN_QUICK
from meshlift.methods.milo.config import MiloConfig, validate

#: The MILo schedule of 18k steps shared by the three mesh presets.
_SCHEDULE = dict(
    steps=18_000,
    densify_refine_start=500,
    densify_refine_stop=3000,
    densify_refine_every=100,
    densify_reset_every=3000,
    densify_max_gaussians=2_000_000,
    sampling_step=3000,
    prune_step=8000,
    depth_normal_start=3000,
    mesh_start=8001,
    delaunay_every=500,
    sdf_reset_every=500,
    sdf_reset_stop=13_000,
    labels_every=200,
    extract_steps=1000,
    extract_labels_every=100,
    train_res=1600,
    checkpoint_every=2000,
    preview_every=1000,
)

PRESETS: dict[str, MiloConfig] = {
    "verylowres": MiloConfig(**_SCHEDULE, num_pivots=270_000),
    "lowres": MiloConfig(**_SCHEDULE, num_pivots=540_000),
    "default": MiloConfig(**{**_SCHEDULE, "densify_max_gaussians": 4_000_000}, num_pivots=5_400_000),
}

#: What ``--quick`` changes (module docstring): the Gaussian quick preset's resolution, SH schedule, raised
#: position/colour steps and compositing chunk (taken from it, not copied), a 300-step MILo schedule.
QUICK_CHANGES = dict(
    **{k: GAUSSIAN_QUICK[k] for k in ("train_res", "max_test_views", "sh_degree", "sh_degree_interval", "lr_means",
                                     "lr_means_final", "lr_scales", "lr_sh0", "init_scale", "chunk_elements")},
    ref_views=16,
    ref_test_views=4,
    steps=400,
    time_budget_s=280.0,
    num_random=1500,
    max_init_points=1500,
    init_opacity=0.3,
    densify_refine_start=20,
    densify_refine_stop=160,
    densify_refine_every=20,
    densify_reset_every=0,
    densify_max_gaussians=4000,
    reinit_step=80,
    reinit_points=3000,
    sampling_step=160,
    prune_step=200,
    depth_normal_start=160,
    multiview_start=160,
    mesh_start=201,
    num_pivots=9000,
    delaunay_every=50,
    sdf_reset_every=50,
    sdf_reset_stop=300,
    labels_every=20,
    extract_steps=40,
    photo_refine_steps=0,  # at 64 px the whole-scene mesh has ~6 vertices a pixel: the refinement lost 0.5 dB
    extract_labels_every=20,
    texture_res=512,  # 256 gave ~1 texel a face at 60k faces: speckled atlas (spot 21.97 dB; 512: 23.07 dB)
    tsdf_resolution=128,
    scene_resolution=64,
    max_asset_faces=60_000,
    checkpoint_every=100,
    checkpoint_every_s=60.0,
    preview_every=50,
    lpips=False,
    background="random",
    eval_samples=50_000,
)

PRESETS["milo_tiny"] = dataclasses.replace(
    MiloConfig(), train_res=48, ref_views=16, ref_test_views=2, steps=100, num_random=800, max_init_points=800,
    max_test_views=2, sh_degree=0, sh_degree_interval=1000, init_opacity=0.3, lr_means=4e-3, lr_means_final=4e-4,
    lr_sh0=2e-2, lr_opacity=0.05, lr_scales=1e-2, densify_refine_start=10, densify_refine_stop=30,
    densify_refine_every=10, densify_reset_every=0, densify_max_gaussians=2000, reinit_step=20, sampling_step=30,
    sampling_factor=0.8, prune_step=45, depth_normal_start=30, multiview_start=30, mesh_start=46, num_pivots=4500, delaunay_every=20,
    sdf_reset_every=20, sdf_reset_stop=80, labels_every=10, extract_steps=20, extract_labels_every=10,
    texture_res=64, tsdf_resolution=64, scene_resolution=32, max_asset_faces=20_000, background="random", eval_samples=20_000, checkpoint_every=50, checkpoint_every_s=0.0, preview_every=50, lpips=False, device="cpu",
    chunk_elements=1 << 18)


#: Config fields that are step numbers or step counts of the schedule (scaled together by :func:`scale_schedule`).
STEP_FIELDS = ("steps", "densify_refine_start", "densify_refine_stop", "densify_refine_every", "densify_reset_every",
               "reinit_step", "sampling_step", "prune_step", "depth_normal_start", "multiview_start", "mesh_start",
               "delaunay_every", "sdf_reset_every", "sdf_reset_stop", "labels_every", "extract_steps",
               "extract_labels_every", "sh_degree_interval", "checkpoint_every", "preview_every")


def scale_schedule(cfg: MiloConfig, factor: float) -> dict:
    """``{field: value}`` of :data:`STEP_FIELDS` scaled by ``factor`` (> 0; intervals at least 1, a 0 —
    "never" — stays 0; ``mesh_start`` stays after the last change of the Gaussian set), for ``--set``
    overrides: MILo's schedule in fewer (or more) steps.

    Raises:
        ConfigError: ``factor <= 0``.
    """
    if not factor > 0:
        raise ConfigError(f"scale_schedule: factor must be > 0, got {factor!r}")
    out = {}
    for name in STEP_FIELDS:
        v = int(getattr(cfg, name))
        out[name] = 0 if v == 0 else max(1, int(round(v * factor)))
    last_edit = max(out["densify_refine_stop"], out["reinit_step"], out["sampling_step"], out["prune_step"])
    if cfg.mesh_start > max(cfg.densify_refine_stop, cfg.reinit_step, cfg.sampling_step, cfg.prune_step):
        out["mesh_start"] = max(out["mesh_start"], last_edit + 1)  # rounding must not reorder the schedule
    return out


def preset_names() -> list[str]:
    """Names accepted by :func:`get_preset`."""
    return sorted(PRESETS)


def get_preset(name: str, *, quick: bool = False) -> MiloConfig:
    """The preset ``name`` (a copy), CPU-sized when ``quick`` (keeping the preset's name only for the
    mesh budget ratio: verylowres/lowres/default quick variants use 9k / 18k / 36k pivots)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown milo preset {name!r}; choose one of {', '.join(preset_names())}")
    cfg = dataclasses.replace(PRESETS[name])
    if quick and name != "milo_tiny":
        changes = dict(QUICK_CHANGES)
        changes["num_pivots"] = {"verylowres": 9000, "lowres": 18_000}.get(name, 36_000)
        cfg = dataclasses.replace(cfg, **changes)
    return validate(cfg)


__all__ = ["PRESETS", "QUICK_CHANGES", "STEP_FIELDS", "get_preset", "preset_names", "scale_schedule"]
