"""Configuration of the two-pass surface reconstruction (``meshlift reconstruct``).

One flat dataclass, :class:`SurfaceConfig`, with a docstring under every field (shown by
``meshlift reconstruct --help-config``). Presets are named instances in :mod:`meshlift.methods.nvdiffrec.presets`.
A config can be loaded from a JSON or TOML file (a flat table of field = value; unknown keys are an error)
and overridden field by field with ``field=value`` strings; :func:`config_to_dict` gives the effective config
that is saved with every output as ``config.json``. The machinery is the generic :mod:`meshlift.config`.

Units: lengths are in the *normalised* frame (object inside roughly [-1, 1]³, conventions §1) unless a field
says otherwise; learning rates are Adam step sizes; iterations count optimiser steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from meshlift import config as _config
from meshlift.config import config_to_dict, parse_overrides
from meshlift.errors import ConfigError


@dataclass
class SurfaceConfig:
    """Two-pass surface reconstruction: DMTet/FlexiCubes + material field + light, then fixed topology."""

    #: The ``--method`` this config belongs to (recorded in a run's ``config.json``; the registry's name for
    #: it). A class attribute, not a field.
    METHOD: ClassVar[str] = "nvdiffrec"

    # ---- data ----------------------------------------------------------------------------------------------
    data: str = ""
    """Dataset folder (anything ``meshlift.data.load_scene`` reads) or a mesh file (OBJ, GLB, PLY) rendered as a
    synthetic scene."""
    train_split: str = "train"
    """Split of the dataset used for training."""
    camera_convention: str = "opengl"
    """Axes of ``transforms.json`` camera-to-world matrices: ``opengl`` (the format's definition) or ``opencv``
    (exporters that write OpenCV axes); other formats ignore it. ``meshlift inspect`` says which fits."""
    test_split: str = "test"
    """Split used for held-out metrics (falls back to ``val``, then to every 8th training view)."""
    undistort_crop: bool = True
    """Photos of a distorted lens are undistorted and cut to the window whose every pixel comes from inside the
    photo (:func:`meshlift.data.undistort.valid_crop`; COLMAP's undistorter and nerfstudio do the same); false
    keeps their size and ``K``, with black pixels along the borders that training fits and metrics score."""
    train_res: int = 512
    """Longest image side in pixels used for training and evaluation (images are resized; 0 = as loaded, or 512
    for the rendered views of a mesh input)."""
    max_test_views: int = 16
    """At most this many held-out views are evaluated (evenly spaced)."""
    background: str = "white"
    """Background that images are composited on where masks/alpha exist (and metrics use): ``white`` or ``black``."""
    train_background: str = "fixed"
    """Background behind the object in the training steps (views with masks only; evaluation, previews and
    metrics keep ``background``): ``fixed`` = ``background``; ``random`` = a new uniform random linear colour per
    pixel every step, ``random_view`` = one per view every step, behind both the render and the target
    (re-composited with the mask, ``methods.nvdiffrec.backgrounds``), with the colour term on the whole
    composite instead of premultiplied by the mask, so that coverage must be learnt and a floater cannot hide
    against a known background (NeRF-synthetic practice: nvdiffrec, instant-ngp). Not with the CUDA-graph step
    (``cuda_graph_pixels``), which such runs skip; without masks it stays ``fixed`` (logged)."""
    data_device: str = "auto"
    """Where the training images are kept: ``auto`` = on the compute device when it is a GPU and they take at
    most 1/8 of its memory (no host-to-device copy per step), else the CPU; ``cpu`` saves GPU memory
    (each step's batch is copied to ``device``); ``cuda`` (or ``cuda:N``) keeps them on the GPU."""
    device: str = "auto"
    """Compute device: ``auto`` (CUDA when available), ``cpu`` or ``cuda[:N]``."""

    # ---- synthetic scene (DATA is a mesh file; the ``ref_`` prefix is kept for saved configs) ---------------
    ref_views: int = 64
    """Number of training views rendered of the gt mesh (cameras on a sphere)."""
    ref_test_views: int = 8
    """Number of held-out views rendered of the gt mesh."""
    ref_env: str = "procedural"
    """Environment the gt mesh is rendered under: ``procedural`` or a path to an ``.hdr``/``.exr`` lat-long map."""
    ref_env_kind: str = "studio"
    """Kind of procedural environment (``meshlift.shading.procedural.procedural_environment``)."""
    ref_ks: Optional[tuple] = None
    """Override the gt mesh material's (occlusion, roughness, metallic), e.g. ``(0, 0.2, 1)`` for the metal presets."""
    ref_camera_radius: float = 3.0
    """Distance of the synthetic cameras from the object centre (normalised units)."""
    ref_fov_deg: float = 45.0
    """Full vertical field of view of the synthetic cameras, degrees."""

    # ---- geometry (pass 1) ---------------------------------------------------------------------------------
    isosurface: str = "dmtet"
    """Isosurface of pass 1: ``dmtet`` (deformable marching tetrahedra) or ``flexicubes``."""
    grid_res: int = 64
    """Tetrahedral grid / FlexiCubes grid resolution (cells per axis), 32 to 256."""
    mesh_scale: float = 2.1
    """Side of the cube (centred at the origin, normalised frame) that the grid spans."""
    sdf_init: str = "sphere"
    """Initial SDF: ``random`` (nvdiffrec), ``sphere`` or ``visual_hull`` (carved from the training masks)."""
    hull_max_fill: float = 0.5
    """With ``sdf_init=visual_hull``: stop with an error when the hull fills more than this fraction of the grid
    (correct captures fill a few %; cameras in the wrong convention fill most of it); 1 disables the check."""
    deform_scale: float = 1.0
    """Maximum vertex deformation in units of half a grid cell (tanh-bounded, nvdiffrec uses 1)."""
    iter_pass1: int = 5000
    """Optimisation steps of pass 1 (topology)."""
    iter_pass2: int = 5000
    """Optimisation steps of pass 2 (fixed topology, textures)."""
    remove_hidden: bool = True
    """After pass 1, drop faces that no outside orthographic view sees (interior sheets left by marching
    tetrahedra; they never show in renders but add false surface). See ``meshlift.mesh.visibility``."""
    hidden_views: int = 64
    """Number of outside view directions used by ``remove_hidden``."""
    hidden_res: int = 512
    """Image size (pixels) of each ``remove_hidden`` view; raise it for meshes with many tiny faces."""
    min_component_faces: float = 0.0
    """After pass 1 (and the hidden-face removal), drop connected components with fewer faces than this
    fraction of the largest component's (floaters: small bits that no training view rules out); 0 keeps
    every component. ``meshlift.mesh.clean.drop_small_components``."""
    view_cull: str = "floaters"
    """After pass 1 (and the cleaning above), drop the geometry no training view needs, judged from the training
    masks (``meshlift.mesh.visibility.view_cull``): ``off``; ``unseen`` = faces the training views show only
    against the mask background, and faces whose centroid lies outside the visual hull of the masks; ``floaters``
    (default) = those and every connected piece with no face seen inside a training view's mask (bits under or
    behind the object that no photo sees). The masks are dilated by ``view_cull_dilate_px`` for both tests."""
    view_cull_dilate_px: int = 0
    """Tolerance of ``view_cull`` in training-view pixels: a pixel within this distance of a mask counts as
    foreground (a silhouette a little off is not cut). 0 = auto: half a grid cell as the cameras see it, at
    least 2 px (``methods.nvdiffrec.geometry.view_cull_tolerance_px``; nerf preset about 4 px, --quick 2 px)."""
    time_budget_s: float = 0.0
    """Wall-clock budget in seconds for the whole run (0 = none). The time left when a pass starts, minus the
    estimated cost of the stages still to come (after pass 1: hidden-face removal, the view cull, UV unwrap and
    bake; after pass 2: evaluation and export; ``meshlift.methods.nvdiffrec.budget``), is the training time left;
    pass 1 gets ``1 - budget_pass2_share`` of it, pass 2 all that is left when it starts. The steps actually run
    are recorded in metrics.json (``iterations``), the measured stage times in ``timings``. Learning-rate
    schedules still follow ``iter_pass1``/``iter_pass2``."""
    budget_pass2_share: float = 0.4
    """With ``time_budget_s``: the share of the training time that pass 2 gets (0 to 1; the default 0.4 is
    the cost share of equal step counts on an H200, 0.15 s vs 0.22 s per step at the full presets). A pass
    that finishes its iterations early leaves its time to the next stage."""
    batch: int = 8
    """Views per optimisation step."""
    spp: int = 1
    """Supersampling per axis during training (renders at spp × train_res)."""

    # ---- learning rates -----------------------------------------------------------------------------------
    lr_pos: float = 0.03
    """Adam step of the geometry parameters (SDF, deformation; FlexiCubes weights) in pass 1."""
    lr_deform: float = 0.0
    """Adam step of the pass-1 vertex deformation (the argument of its tanh, so in units of ``deform_scale`` half
    cells: about ``lr_deform`` half cells per step near rest); 0 = ``lr_pos``. nvdiffrec steps the deformation
    like its SDF, at 0.03; ``lr_pos`` is sized for a metric SDF (0.002 at grid 96 is 0.09 cells per step), which
    leaves the deformation 15× slower than nvdiffrec's in tanh units (about 7× in world length on lego)."""
    lr_mat: float = 0.01
    """Adam step of the material field (pass 1) and textures (pass 2)."""
    lr_light: float = 0.01
    """Adam step of the learned environment light."""
    lr_vertex: float = 0.003
    """Adam step of the vertex offsets in pass 2 (normalised units)."""
    lr_decay: float = 0.0002
    """Exponential decay: the rate is multiplied by 10^(-lr_decay · iteration) (nvdiffrec's schedule)."""
    warmup: int = 0
    """Linear warm-up steps of every learning rate."""

    # ---- losses and regularisers --------------------------------------------------------------------------
    mask_weight: float = 1.0
    """Weight of the mask loss (MSE between rendered alpha and the mask), where masks exist."""
    sdf_reg_weight: float = 0.2
    """Initial weight of the SDF sign-change regulariser (nvdiffrec eq. 2), decays linearly to sdf_reg_final."""
    sdf_reg_final: float = 0.01
    """SDF regulariser weight after the first quarter of pass 1."""
    kd_smooth_weight: float = 0.03
    """Weight of the albedo smoothness regulariser (difference of kd at jittered positions)."""
    kd_smooth_jitter: float = 0.01
    """Jitter (normalised units in pass 1, UV units / 2 in pass 2) of the albedo smoothness regulariser."""
    light_reg_weight: float = 0.005
    """Weight of the light regulariser (white balance, nvdiffrec's ``regularizer()``)."""
    laplace_weight: float = 3000.0
    """Weight of the Laplacian regulariser on the pass-2 vertex offsets (relative to the pass-1 mesh)."""
    flexi_dev_weight: float = 0.5
    """Weight of FlexiCubes' dual-vertex deviation regulariser (L_dev)."""
    occlusion_reg_weight: float = 0.03
    """Weight of the occlusion regulariser: the mean learned occlusion amount ``ks[0]`` over the covered pixels
    of each training render (both passes), pulling it towards 0 (unoccluded) so that albedo and occlusion do not
    trade freely (nvdiffrec's visibility regulariser; ``methods.nvdiffrec.losses.occlusion_regularizer``). Acts
    only when the occlusion is learnt (``ks_max[0] > ks_min[0]``; the presets fix it at 0); its value is in the
    loss history (``occlusion_reg``). Also not with the CUDA-graph step, which such runs skip. 0 = off."""

    # ---- materials ----------------------------------------------------------------------------------------
    kd_min: tuple = (0.0, 0.0, 0.0)
    """Lower bound of the albedo (linear RGB)."""
    kd_max: tuple = (1.0, 1.0, 1.0)
    """Upper bound of the albedo (linear RGB)."""
    ks_min: tuple = (0.0, 0.08, 0.0)
    """Lower bound of (occlusion, roughness, metallic)."""
    ks_max: tuple = (0.0, 1.0, 1.0)
    """Upper bound of (occlusion, roughness, metallic)."""
    hash_levels: int = 16
    """Levels of the material field's hash-grid encoding (nvdiffrec: 16)."""
    hash_log2_size: int = 19
    """log2 of the entries per hash-grid level (nvdiffrec: 19; 14-16 is plenty on the CPU)."""
    hash_max_res: int = 4096
    """Finest resolution of the hash grid over the grid's box (nvdiffrec: 4096). 0 = auto: 2 cells per
    training-image pixel at the object, at most 4096 (``methods.nvdiffrec.materials.auto_hash_max_res``; lego
    at 400²: 840), resolved when the data is loaded and recorded in ``config.json``. Levels finer than the
    images resolve fit one view's noise and show as speckle in the others (sparse or low-resolution captures)."""
    perturb_normal: bool = True
    """Learn a tangent-space normal map in pass 2 (pass 1 shades with the geometric normals)."""
    texture_res: int = 1024
    """Side of the baked kd/ks/normal textures (pixels)."""

    # ---- light --------------------------------------------------------------------------------------------
    light: str = "learned"
    """``learned`` (initialised grey, optimised), ``fixed`` (synthetic scenes: the environment the gt mesh was
    rendered under)
    or a path to an ``.hdr``/``.exr`` lat-long map used as known, fixed lighting."""
    env_res: int = 128
    """Side of each face of the learned environment cube map (pixels)."""
    env_init: float = 0.5
    """Initial radiance of the learned environment (plus small noise)."""

    # ---- pass 2 --------------------------------------------------------------------------------------------
    unwrap_max_faces: int = 50000
    """Meshes with more faces are decimated to this count before the xatlas UV unwrap."""
    optimize_vertices: bool = True
    """Optimise vertex positions (offsets with the Laplacian regulariser) in pass 2."""

    # ---- memory, logging, outputs -------------------------------------------------------------------------
    max_fragments: Optional[int] = None
    """Rasterizer fragment budget (bounds its peak memory); None = the rasterizer's default."""
    raster_backend: str = "auto"
    """Rasterizer implementation: ``auto`` (Triton kernels on CUDA when ``import triton`` works, else
    PyTorch), ``torch`` (the pure-PyTorch reference: a broken Triton install, debugging) or ``triton``."""
    shading_backend: str = "auto"
    """Shading fast paths (hash grid, cube maps, textures, normals, PBR shading, image loss): ``auto`` (Triton
    kernels for float32 CUDA tensors), ``torch`` (the pure-PyTorch references) or ``triton``."""
    seed: int = 0
    """Random seed of parameter initialisation, view sampling and noise."""
    preview_every: int = 0
    """Save a preview image (target | ours) every N iterations (0 = never)."""
    checkpoint_every: int = 500
    """Save a checkpoint for ``--resume`` every N iterations (and at the end of each pass; 0 = by time only)."""
    checkpoint_every_s: float = 60.0
    """Also save a checkpoint once this many seconds have passed since the last one (0 = by count only), so
    short runs are saved too."""
    val_views: int = 4
    """Validation views written to ``images/`` at start and end."""
    readback_every: int = 0
    """Steps between reading the loss back from the device (each read-back is a host sync); progress, the
    loss history and the NaN guard see the values at that cadence (and at previews, checkpoints, the end).
    0 = every step on the CPU (no cost there), every 10 steps on a GPU. The recorded values do not depend
    on it."""
    cuda_graph_pixels: int = 1 << 18
    """On CUDA, steps of either pass with at most this many pixels (batch × spp² × the training views' H × W)
    evaluate their per-pixel half (material field or textures, light prefilter, shading, composite, image loss)
    at every pixel and replay it as CUDA graphs (``methods/nvdiffrec/pixel_graphs.py``): fewer launches where
    the host, not the GPU, bounds a step (the demo: 21 → 17 ms per pass-1 step on an H200). 0 = never (the
    covered-pixel path). Larger frames keep the covered-pixel path (the dense half's work on empty pixels would
    cost more device time than the launches it saves)."""
    diagnose_nonfinite: bool = False
    """Diagnosis of a diverging run: check the loss terms, the render and every gradient each step (one host
    sync per step, slower), and at the first NaN/inf repeat the step under PyTorch's anomaly detection and stop
    with an error naming the tensor and the op (``meshlift.methods.diagnose``)."""
    eval_samples: int = 200000
    """Surface samples per mesh for Chamfer / F-score."""
    fscore_threshold_frac: float = 0.01
    """F-score threshold as a fraction of the gt mesh's bounding-box diagonal."""
    up_axis: str = "keep"
    """Up axis of the dataset's world frame for the exported meshes: ``keep`` writes world coordinates as they
    are; ``z`` (or ``-y``, ``x``, ...) rotates the OBJ/GLB so that axis becomes glTF's +Y (recorded in the GLB,
    docs/conventions.md §9). Metrics are computed in the world frame either way."""


# -------------------------------------------------------------------------------------------------------------
# the generic machinery (meshlift.config) bound to SurfaceConfig


def field_docs() -> dict[str, str]:
    """Map field name -> its docstring, read from the source of :class:`SurfaceConfig`."""
    return _config.field_docs(SurfaceConfig)


def apply_dict(cfg: SurfaceConfig, values: dict[str, Any], *, source: str = "config") -> SurfaceConfig:
    """Return a validated copy of ``cfg`` with ``values`` applied (types converted); unknown keys raise ConfigError."""
    return _config.apply_dict(cfg, values, source=source, validate=validate,
                              help_hint="see `meshlift reconstruct --help-config`")


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a flat JSON or TOML table of config values (a ``[surface]`` TOML table is also accepted)."""
    return _config.load_config_file(path, table="surface")


#: The choices of ``train_background``: the views' own colour, random per pixel, random per view.
TRAIN_BACKGROUNDS = ("fixed", "random", "random_view")

_CHOICES = {
    "camera_convention": ("opengl", "opencv"),
    "isosurface": ("dmtet", "flexicubes"),
    "sdf_init": ("random", "sphere", "visual_hull"),
    "view_cull": ("off", "unseen", "floaters"),
    "background": ("white", "black"),
    "train_background": TRAIN_BACKGROUNDS,
    "raster_backend": ("auto", "torch", "triton"),
    "shading_backend": ("auto", "torch", "triton"),
}


#: Numeric ranges ``(low, high, low_inclusive)``: every int/float field is finite and inside its range.
#: The upper bounds stop values that would exhaust memory (a hash table of 2^30 entries, a 64k texture).
RANGES: dict[str, tuple[float, float, bool]] = {
    "train_res": (0, 8192, True), "max_test_views": (0, 10_000, True), "ref_views": (1, 10_000, True),
    "ref_test_views": (0, 10_000, True), "ref_camera_radius": (0, 1e6, False), "ref_fov_deg": (0, 180, False),
    "mesh_scale": (0, 1e6, False), "deform_scale": (0, 100, True), "iter_pass1": (0, 10_000_000, True),
    "iter_pass2": (0, 10_000_000, True), "hidden_views": (1, 10_000, True), "hidden_res": (8, 8192, True),
    "min_component_faces": (0, 1, True), "view_cull_dilate_px": (0, 64, True),
    "time_budget_s": (0, 1e9, True), "batch": (1, 1024, True), "spp": (1, 16, True),
    "lr_pos": (0, 10, False), "lr_deform": (0, 10, True), "lr_mat": (0, 10, False), "lr_light": (0, 10, False),
    "lr_vertex": (0, 10, True),
    "lr_decay": (0, 1, True), "warmup": (0, 10_000_000, True), "mask_weight": (0, 1e6, True),
    "sdf_reg_weight": (0, 1e6, True), "sdf_reg_final": (0, 1e6, True), "kd_smooth_weight": (0, 1e6, True),
    "kd_smooth_jitter": (0, 1, True), "light_reg_weight": (0, 1e6, True), "laplace_weight": (0, 1e9, True),
    "flexi_dev_weight": (0, 1e6, True), "occlusion_reg_weight": (0, 1e6, True),
    "hash_levels": (1, 32, True), "hash_log2_size": (8, 24, True),
    "hash_max_res": (0, 1 << 16, True), "texture_res": (8, 16384, True), "env_res": (4, 2048, True),
    "env_init": (0, 1e4, True), "unwrap_max_faces": (100, 10_000_000, True), "max_fragments": (1, 1 << 34, True),
    "preview_every": (0, 10_000_000, True), "checkpoint_every": (0, 10_000_000, True),
    "checkpoint_every_s": (0, 1e7, True), "budget_pass2_share": (0, 1, True),
    "readback_every": (0, 1_000_000, True), "cuda_graph_pixels": (0, 1 << 40, True), "hull_max_fill": (0, 1, False), "val_views": (0, 1000, True), "eval_samples": (1000, 100_000_000, True),
    "fscore_threshold_frac": (0, 1, False),
}

#: Fields that fix the shapes of the saved parameters (``lr_deform``: the pass-1 optimizer's groups): they cannot
#: change on ``--resume``.
RESUME_FIXED = ("isosurface", "grid_res", "hash_levels", "hash_log2_size", "hash_max_res", "texture_res",
                "env_res", "light", "kd_min", "kd_max", "ks_min", "ks_max", "mesh_scale", "data", "train_res",
                "seed", "lr_deform")


def _check_ranges(cfg: SurfaceConfig) -> None:
    import math

    def num(x) -> str:  # whole bounds as integers (1099511627776, not 1.09951e+12)
        return str(int(x)) if float(x).is_integer() else f"{x:g}"

    for name, (lo, hi, lo_incl) in RANGES.items():
        v = getattr(cfg, name)
        if v is None:
            continue
        interval = f"{'[' if lo_incl else '('}{num(lo)}, {num(hi)}]"
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"config field {name!r} = {v!r} must be a finite number in {interval}")
        if v > hi or v < lo or (v == lo and not lo_incl):
            raise ConfigError(f"config field {name!r} = {v!r} is out of range: use a value in {interval}")


def validate(cfg: SurfaceConfig) -> SurfaceConfig:
    """Check ranges and choices; raises ConfigError naming the field and the fix."""
    _check_ranges(cfg)
    from meshlift.geometry.transforms import UP_AXES

    if cfg.up_axis != "keep" and str(cfg.up_axis).lower().lstrip("+") not in UP_AXES:
        raise ConfigError(f"config field 'up_axis' = {cfg.up_axis!r}; choose keep or one of {', '.join(UP_AXES)}")
    for name, choices in _CHOICES.items():
        if getattr(cfg, name) not in choices:
            raise ConfigError(f"config field {name!r} = {getattr(cfg, name)!r}; choose one of {', '.join(choices)}")
    if not 8 <= cfg.grid_res <= 512:
        raise ConfigError(f"config field 'grid_res' = {cfg.grid_res}; use 8..512 (32 to 256 are typical)")
    for name in ("iter_pass1", "iter_pass2", "max_test_views", "ref_test_views", "val_views"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"config field {name!r} must be >= 0, got {getattr(cfg, name)}")
    if cfg.hash_max_res == 1:
        raise ConfigError("config field 'hash_max_res' = 1; use 0 (auto: from the training images) or >= 2")
    for name in ("batch", "spp", "env_res", "texture_res", "ref_views", "hash_levels"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"config field {name!r} must be >= 1, got {getattr(cfg, name)}")
    for name in ("kd_min", "kd_max", "ks_min", "ks_max"):
        vals = getattr(cfg, name)
        if len(vals) != 3:
            raise ConfigError(f"config field {name!r} needs 3 values, got {vals!r}")
        if not all(isinstance(v, (int, float)) and 0.0 <= v <= 1.0 for v in vals):
            raise ConfigError(f"config field {name!r} = {vals!r}: each value must be a number in [0, 1]")
    if cfg.ref_ks is not None and len(cfg.ref_ks) != 3:
        raise ConfigError(f"config field 'ref_ks' needs 3 values (occlusion, roughness, metallic), got {cfg.ref_ks!r}")
    if cfg.max_fragments is not None and cfg.max_fragments < 1:
        raise ConfigError("config field 'max_fragments' must be a positive count or None")
    return cfg


__all__ = [
    "RANGES",
    "RESUME_FIXED",
    "SurfaceConfig",
    "TRAIN_BACKGROUNDS",
    "apply_dict",
    "config_to_dict",
    "field_docs",
    "load_config_file",
    "parse_overrides",
    "validate",
]
