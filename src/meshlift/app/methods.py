"""The methods and presets the web app offers (a registry: the Gaussian methods add themselves here).

A :class:`MethodSpec` names a reconstruction method, the inputs it accepts (``"mesh"``, ``"posed"``) and its
presets; :meth:`MethodSpec.configure` turns (input, preset, device) into that method's config object and
:meth:`MethodSpec.run` runs it, writing the asset folder. Durations are what the page promises, per device:
the CPU numbers are measured on 2 cores (``docs/results.md``: the ``--quick`` runs took 85-122 s; the
``tiny`` preset is the browser test's, see ``docs/app.md``), the GPU ones are the preset's time budget plus
the export.

No gradio or torch at import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from meshlift.errors import ConfigError


@dataclass(frozen=True)
class PresetSpec:
    """One preset of a method in the app."""

    name: str
    """Key (``quick``, ``full``, ``tiny``)."""
    label: str
    """What the page shows."""
    cpu_s: float
    """Expected wall time on 2 CPU cores, seconds (shown in the page)."""
    gpu_s: float
    """Expected wall time on one datacentre GPU, seconds; also the ZeroGPU ``duration`` asked for."""
    gpu_only: bool = False
    """True when the page refuses it without a GPU (too slow on a CPU)."""


@dataclass(frozen=True)
class MethodSpec:
    """A reconstruction method offered by the app."""

    name: str
    label: str
    inputs: tuple[str, ...]
    """Input kinds it accepts: ``"mesh"`` (a reference mesh rendered on the fly), ``"posed"`` (photos + cameras)."""
    presets: tuple[PresetSpec, ...]
    configure: Callable[[str, str, str, str], object] = field(compare=False)
    """``configure(kind, data_path, preset_name, device) -> config``."""
    run: Callable[[object, Path, object], object] = field(compare=False)
    """``run(config, out_dir, monitor) -> result`` with ``.mesh`` (world units) and ``.files``/``.metrics``."""

    def preset(self, name: str) -> PresetSpec:
        for p in self.presets:
            if p.name == name:
                return p
        raise ConfigError(f"method {self.name!r} has no preset {name!r}; choose one of "
                          f"{', '.join(p.name for p in self.presets)}")


METHODS: dict[str, MethodSpec] = {}
"""Registered methods by name, in the order the page lists them."""


def register_method(spec: MethodSpec) -> None:
    """Add (or replace) a method in the app's list."""
    if not isinstance(spec, MethodSpec):
        raise ConfigError(f"register_method: {spec!r} is not a MethodSpec")
    METHODS[spec.name] = spec


#: The pose step for unposed photos, when one is registered: ``step(images_folder, work_folder) -> dataset
#: folder`` (a folder :func:`meshlift.data.detect_format` recognises). None: the app refuses unposed photos
#: with the COLMAP command to run instead.
POSE_STEP: dict[str, Callable[[str, str], str]] = {}


def register_pose_step(name: str, step: Callable[[str, str], str]) -> None:
    """Let the app estimate camera poses for unposed photos with ``step`` (see :data:`POSE_STEP`)."""
    POSE_STEP.clear()
    POSE_STEP[name] = step


def get_method(name: str) -> MethodSpec:
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}")
    return METHODS[name]


# ---------------------------------------------------------------------------------------------------------
# the surface method (nvdiffrec family)

#: The ``tiny`` preset: the smallest run that still goes through every stage (both passes, UV atlas,
#: baked textures, export). It exists so that the browser test and a fresh install can check the whole
#: path in well under a minute on 2 CPU cores; its asset is coarse.
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


def _surface_configure(kind: str, data_path: str, preset: str, device: str):
    from meshlift.methods.nvdiffrec.config import apply_dict
    from meshlift.methods.nvdiffrec.presets import get_preset

    if kind == "mesh":
        base = "spot"
    elif kind == "posed":
        base = "nerd" if (Path(data_path) / "poses_bounds.npy").is_file() else "nerf"
    else:
        raise ConfigError(f"the surface method needs a mesh or posed photos, not {kind!r}")
    cfg = get_preset(base, quick=preset in ("quick", "tiny"))
    changes: dict = {"data": data_path, "device": device, "checkpoint_every": 0}
    if preset == "tiny":
        changes.update(TINY_CHANGES)
    elif preset == "full":
        changes["time_budget_s"] = SURFACE_PRESETS[1].gpu_s * 0.85  # leave time for export within the promise
    total = cfg.iter_pass1 + cfg.iter_pass2 if preset != "tiny" else TINY_CHANGES["iter_pass1"]
    changes["preview_every"] = max(5, total // 8)  # live preview images
    return apply_dict(cfg, changes, source=f"app preset {preset!r}")


def _surface_run(cfg, out_dir: Path, monitor):
    from meshlift.methods.nvdiffrec.reconstruct import reconstruct

    return reconstruct(cfg, out_dir, overwrite=True, monitor=monitor)


SURFACE_PRESETS = (
    PresetSpec("quick", "quick: 96 px, 300 + 100 steps", cpu_s=150, gpu_s=90),
    PresetSpec("full", "full: 512-800 px, up to 5000 + 5000 steps, time-budgeted", cpu_s=float("inf"), gpu_s=360,
               gpu_only=True),
    PresetSpec("tiny", "tiny: 48 px, 60 + 15 steps (checks the set-up; coarse)", cpu_s=40, gpu_s=30),
)

register_method(MethodSpec(
    name="surface",
    label="surface (DMTet + PBR materials + HDR light, nvdiffrec family)",
    inputs=("mesh", "posed"),
    presets=SURFACE_PRESETS,
    configure=_surface_configure,
    run=_surface_run,
))


def describe_duration(p: PresetSpec, gpu: bool) -> str:
    """``"about 2.5 min on this machine's GPU"``-style text for the page."""
    s = p.gpu_s if gpu else p.cpu_s
    if s == float("inf"):
        return "needs a GPU"
    where = "on a GPU" if gpu else "on 2 CPU cores"
    return f"about {s / 60:.1f} min {where}" if s >= 90 else f"about {s:.0f} s {where}"


__all__ = ["METHODS", "POSE_STEP", "MethodSpec", "PresetSpec", "TINY_CHANGES", "describe_duration", "get_method",
           "register_method", "register_pose_step"]
