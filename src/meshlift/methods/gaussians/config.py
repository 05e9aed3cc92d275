"""Configuration of 3D Gaussian splatting training (``meshlift reconstruct --method gaussians``).

One flat dataclass, :class:`GaussiansConfig`, with a docstring under every field (shown by
``meshlift reconstruct --method gaussians --help-config``). Presets are named instances in
:mod:`meshlift.methods.gaussians.presets`. The machinery (type coercion, ``field=value`` overrides,
JSON/TOML files) is the generic :mod:`meshlift.config`; densification knobs are the fields of
:class:`~meshlift.methods.gaussians.strategy.DefaultStrategy` prefixed ``densify_`` (``--set
densify.grow_grad2d=0.0003`` is accepted as ``densify_grow_grad2d``).

Frame and units: Gaussians train in the **dataset's world frame** (docs/conventions.md §11, "training
frame"), so lengths are world units; ``scene_scale`` below is the camera extent radius of 3DGS (1.1 × the
largest distance of a training camera centre from their mean), and the position learning rate and the 3D
densification thresholds are relative to it. Learning rates are Adam step sizes (3DGS, Kerbl et al. 2023,
Sec. 7: ``train.py`` / ``arguments/__init__.py``). Steps count optimiser steps (one batch each).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from meshlift import config as _config
from meshlift.config import config_to_dict, parse_overrides
from meshlift.errors import ConfigError

__all__ = ["GaussiansConfig", "apply_dict", "config_to_dict", "densify_strategy", "field_docs",
           "load_config_file", "parse_overrides", "validate", "SHAPE_FIELDS"]


@dataclass
class GaussiansConfig:
    """3DGS training: init, photometric loss, Adam per parameter group, densification, evaluation."""

    #: The ``--method`` this config belongs to (recorded in a run's ``config.json``; the registry's name for
    #: it). A class attribute, not a field.
    METHOD: ClassVar[str] = "gaussians"

    # ---- data ----------------------------------------------------------------------------------------------
    data: str = ""
    """Dataset folder (anything ``meshlift.data.load_scene`` reads: Blender/NeRF, instant-ngp, COLMAP, LLFF)."""
    train_split: str = "train"
    """Split of the dataset used for training."""
    camera_convention: str = "opengl"
    """Axes of ``transforms.json`` camera-to-world matrices: ``opengl`` (the format's definition) or ``opencv``;
    other formats ignore it."""
    test_split: str = "test"
    """Split used for held-out metrics (falls back to ``val``, then to every 8th training view)."""
    undistort_crop: bool = True
    """Photos of a distorted lens are undistorted and cut to the window whose every pixel comes from inside the
    photo (:func:`meshlift.data.undistort.valid_crop`; COLMAP's undistorter and nerfstudio do the same); false
    keeps their size and ``K``, with black pixels along the borders that training fits and metrics score."""
    train_res: int = 0
    """Longest image side in pixels for training and evaluation (0 = as stored); images are loaded through
    the reader's ``downscale`` (COLMAP/LLFF use ``images_N`` folders when present)."""
    downscale: float = 1.0
    """Extra downscale factor on top of ``train_res`` (3DGS ``-r``); 1 = none."""
    max_test_views: int = 0
    """At most this many held-out views are evaluated (evenly spaced; 0 = all)."""
    background: str = "white"
    """Colour behind the Gaussians and under alpha / masks: ``white``, ``black`` or ``random`` (a fresh
    uniform colour per training step, 3DGS ``--random_background``; evaluation then uses white)."""
    use_masks: bool = True
    """Composite separate mask files (e.g. the statue's ``masks_2``) onto the background; alpha channels
    are always used. False trains on the full photos."""
    data_device: str = "auto"
    """Where the training images are kept: ``auto`` = on the GPU when they take at most 1/8 of its memory
    (no host-to-device copy per step), else the CPU; ``cpu`` streams one batch per step to ``device`` (saves
    GPU memory); ``cuda``."""
    device: str = "auto"
    """Compute device: ``auto`` (CUDA when available), ``cpu`` or ``cuda[:N]``."""
    splat_backend: str = "auto"
    """Gaussian rasterizer and fused SSIM: ``auto`` (Triton on CUDA, the PyTorch reference on CPU), ``torch``
    or ``triton``."""
    isect_readback: bool = False
    """True: read the number of tile-Gaussian pairs back in every training step to size the tile lists (one host
    wait per step, gsplat's way). False (the default; Triton on CUDA, plain 3DGS without a MILo regulariser, else
    the read-back): size them by 1.25x the largest count of the last 64 steps and check afterwards, rendering the
    rare step that did not fit again (:mod:`meshlift.methods.gaussians.isect_budget`; `redos` in metrics.json).
    Same results; lego steps 1000-3500 on an H100 (2026-12-07, alone, two runs each): 4.58 / 4.58 ms -> 4.30 / 4.38
    ms per step (docs/benchmarks.md, "The 3DGS step without its host wait")."""

    # ---- schedule ------------------------------------------------------------------------------------------
    steps: int = 30_000
    """Optimisation steps (3DGS: 30k)."""
    batch: int = 1
    """Views per step (3DGS: 1)."""
    time_budget_s: float = 0.0
    """Wall-clock budget in seconds for the whole run (0 = none): training stops once 90% of it has passed
    (the rest is left for evaluation and export); the steps actually run go into metrics.json. Learning-rate
    and densification schedules still follow ``steps``."""
    seed: int = 0
    """Random seed of the initialisation, view order, random backgrounds and splits."""

    # ---- initialisation ------------------------------------------------------------------------------------
    init: str = "auto"
    """``auto`` (SfM points when the dataset has them, else random), ``sfm`` (error without points) or
    ``random`` (uniform in the scene box, the NeRF-synthetic protocol)."""
    num_random: int = 100_000
    """Number of random initial Gaussians (3DGS: 100k)."""
    max_init_points: int = 0
    """Keep at most this many SfM points (random subset; 0 = all)."""
    init_opacity: float = 0.1
    """Initial opacity of every Gaussian (3DGS: 0.1)."""
    init_scale: float = 1.0
    """Multiplier on the initial kNN scale (mean distance to the 3 nearest neighbours)."""
    random_box_scale: float = 1.0
    """The random init fills the scene box (``Scene.bounds``) scaled by this about its centre (3DGS uses a
    2.6-wide cube for NeRF-synthetic: about 1.0 of the box here)."""

    # ---- appearance and loss -------------------------------------------------------------------------------
    sh_degree: int = 3
    """Largest SH degree (0..3); changes the parameter shapes (fixed on ``--resume``)."""
    sh_degree_interval: int = 1000
    """Raise the active SH degree by one every this many steps (3DGS: 1000)."""
    ssim_lambda: float = 0.2
    """Weight of the D-SSIM term: loss = (1 − λ) L1 + λ (1 − SSIM) (3DGS eq. 7)."""
    exposure_compensation: bool = False
    """Learn a colour gain and offset per training image, applied to its render before the loss (PGSR's exposure
    compensation, Chen et al. 2024 eq. 14; :mod:`meshlift.methods.gaussians.exposure`): a phone's exposure and
    white balance drift across a capture, which the Gaussians otherwise explain with view-dependent colour and
    floaters. Training only: test views, previews and the depth the mesh is fused from are rendered without it.
    Not with several GPUs. Off by default until a device run measures it on a real capture."""
    lr_exposure: float = 1e-3
    """Adam step of the exposure parameters (log-gain and offset per channel and training image)."""

    # ---- learning rates (Adam, eps 1e-15 as 3DGS) ----------------------------------------------------------
    lr_means: float = 1.6e-4
    """Initial position step, × ``scene_scale`` (3DGS ``position_lr_init``)."""
    lr_means_final: float = 1.6e-6
    """Final position step, × ``scene_scale``; the rate decays log-linearly over ``steps`` (3DGS)."""
    lr_sh0: float = 2.5e-3
    """Step of the degree-0 SH coefficients (3DGS ``feature_lr``)."""
    lr_shN: float = 2.5e-3 / 20
    """Step of the higher SH coefficients (3DGS: ``feature_lr / 20``)."""
    lr_opacity: float = 5e-2
    """Step of the opacity logits (3DGS ``opacity_lr``)."""
    lr_scales: float = 5e-3
    """Step of the log-scales (3DGS ``scaling_lr``)."""
    lr_quats: float = 1e-3
    """Step of the quaternions (3DGS ``rotation_lr``)."""

    # ---- densification (DefaultStrategy fields; gsplat's defaults) -----------------------------------------
    densify: bool = True
    """Run adaptive density control (clone / split / prune / opacity reset)."""
    densify_prune_opa: float = 0.005
    """Prune Gaussians whose opacity falls below this."""
    densify_grow_grad2d: float = 0.0002
    """Clone/split Gaussians whose mean screen-space gradient (NDC units) exceeds this."""
    densify_grow_scale3d: float = 0.01
    """Largest scale (× scene_scale) up to which a Gaussian is cloned; above it is split."""
    densify_prune_scale3d: float = 0.1
    """After the first opacity reset, prune Gaussians larger than this × scene_scale."""
    densify_refine_start: int = 500
    """First step at which density control runs."""
    densify_refine_stop: int = 15_000
    """Last step at which density control runs."""
    densify_refine_every: int = 100
    """Run clone/split/prune every this many steps."""
    densify_reset_every: int = 3000
    """Reset opacities every this many steps (0 = never)."""
    densify_max_gaussians: int = 6_000_000
    """Growth stops at this many Gaussians (a memory knob; pruning continues)."""

    # ---- rendering ----------------------------------------------------------------------------------------
    near_frac: float = 0.002
    """Near plane = this × scene_scale (world units; about 3DGS's 0.01 on NeRF-synthetic, scene_scale ≈ 4.4).
    Gaussians whose centre is nearer to a camera are not drawn in it."""
    chunk_elements: int = 1 << 22
    """PyTorch rasterizer memory budget: Gaussian×pixel pairs composited at once (lower it on OOM)."""

    # ---- checkpoints, logging, outputs --------------------------------------------------------------------
    checkpoint_every: int = 5000
    """Save a checkpoint for ``--resume`` every N steps (0 = only by time and at the end)."""
    checkpoint_every_s: float = 300.0
    """Also save a checkpoint once this many seconds have passed since the last one (0 = never by time)."""
    preview_every: int = 1000
    """Write a preview ``images/preview_<step>.png`` (render | target of a test view) every N steps (0 = never)."""
    readback_every: int = 0
    """Steps between host read-backs of the loss (progress, history, the divergence guard): each is a host
    sync on a GPU. 0 = every step on the CPU and 20 on a GPU. A non-finite loss is then found up to this many
    steps late and rolled back to the last checkpoint as at once; checkpoints and previews read back first."""
    render_test: bool = True
    """Write every evaluated test view to ``renders/`` (and ``gt/``) as PNG."""
    lpips: bool = True
    """Compute LPIPS (AlexNet) on the test views."""


#: Fields whose change alters the parameter shapes or the meaning of saved state: fixed on ``--resume``.
SHAPE_FIELDS = ("sh_degree", "data")

_CHOICES = {
    "camera_convention": ("opengl", "opencv"),
    "background": ("white", "black", "random"),
    "init": ("auto", "sfm", "random"),
    "splat_backend": ("auto", "torch", "triton"),
}

_POSITIVE = ("lr_means", "lr_means_final", "lr_sh0", "lr_shN", "lr_opacity", "lr_scales", "lr_quats", "lr_exposure",
             "init_opacity", "init_scale", "random_box_scale", "downscale", "near_frac", "densify_prune_opa",
             "densify_grow_grad2d", "densify_grow_scale3d", "densify_prune_scale3d")
_NONNEG = ("time_budget_s", "checkpoint_every_s", "ssim_lambda")
_COUNTS_GE1 = ("steps", "batch", "num_random", "sh_degree_interval", "densify_refine_every",
               "densify_max_gaussians", "chunk_elements")
_COUNTS_GE0 = ("train_res", "max_test_views", "max_init_points", "densify_refine_start", "densify_refine_stop",
               "densify_reset_every", "checkpoint_every", "preview_every", "readback_every")


def validate(cfg: GaussiansConfig) -> GaussiansConfig:
    """Check choices and ranges; raises ConfigError naming the field and the fix."""
    for name, choices in _CHOICES.items():
        if getattr(cfg, name) not in choices:
            raise ConfigError(f"config field {name!r} = {getattr(cfg, name)!r}; choose one of {', '.join(choices)}")
    for name in _POSITIVE:
        v = getattr(cfg, name)
        if not (math.isfinite(v) and v > 0):
            raise ConfigError(f"config field {name!r} must be a finite number > 0, got {v!r}")
    for name in _NONNEG:
        v = getattr(cfg, name)
        if not (math.isfinite(v) and v >= 0):
            raise ConfigError(f"config field {name!r} must be a finite number >= 0, got {v!r}")
    for name in _COUNTS_GE1:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"config field {name!r} must be >= 1, got {getattr(cfg, name)}")
    for name in _COUNTS_GE0:
        if getattr(cfg, name) < 0:
            raise ConfigError(f"config field {name!r} must be >= 0, got {getattr(cfg, name)}")
    for name in _POSITIVE:
        if name.startswith("lr_") and getattr(cfg, name) > 1e6:
            raise ConfigError(f"config field {name!r} = {getattr(cfg, name)!r} is absurdly large (> 1e6); "
                              "3DGS uses 1e-6 .. 5e-2")
    if not 0 <= cfg.sh_degree <= 3:
        raise ConfigError(f"config field 'sh_degree' = {cfg.sh_degree}; use 0..3")
    if not 0 < cfg.init_opacity < 1:
        raise ConfigError(f"config field 'init_opacity' = {cfg.init_opacity}; use a value in (0, 1)")
    if not 0 < cfg.densify_prune_opa < 0.5:
        raise ConfigError(f"config field 'densify_prune_opa' = {cfg.densify_prune_opa}; use a value in (0, 0.5)")
    if cfg.ssim_lambda > 1:
        raise ConfigError(f"config field 'ssim_lambda' = {cfg.ssim_lambda}; use 0..1")
    if cfg.train_res > 16384:
        raise ConfigError(f"config field 'train_res' = {cfg.train_res}; use at most 16384 (0 = as stored)")
    if cfg.num_random > 50_000_000:
        raise ConfigError(f"config field 'num_random' = {cfg.num_random}; use at most 50,000,000")
    return cfg


def densify_strategy(cfg: GaussiansConfig, scene_scale: float):
    """The :class:`~meshlift.methods.gaussians.strategy.DefaultStrategy` of ``cfg``'s ``densify_*`` fields."""
    from meshlift.methods.gaussians.strategy import DefaultStrategy

    kw = {f.name[len("densify_"):]: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
          if f.name.startswith("densify_")}
    s = DefaultStrategy(scene_scale=float(scene_scale), **kw)
    s.check()
    return s


# -------------------------------------------------------------------------------------------------------------
# the generic machinery (meshlift.config) bound to GaussiansConfig


def field_docs() -> dict[str, str]:
    """Map field name -> its docstring, read from the source of :class:`GaussiansConfig`."""
    return _config.field_docs(GaussiansConfig)


def apply_dict(cfg: GaussiansConfig, values: dict[str, Any], *, source: str = "config") -> GaussiansConfig:
    """A validated copy of ``cfg`` with ``values`` applied (``densify.x`` read as ``densify_x``); unknown keys
    raise ConfigError."""
    values = {k.replace("densify.", "densify_"): v for k, v in values.items()}
    return _config.apply_dict(cfg, values, source=source, validate=validate,
                              help_hint="see `meshlift reconstruct --method gaussians --help-config`")


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a flat JSON or TOML table of config values (a ``[gaussians]`` TOML table is also accepted)."""
    return _config.load_config_file(path, table="gaussians")
