"""The surface method's spec (``--method nvdiffrec``) for :mod:`meshlift.methods.registry`.

Light at import (config and presets only); the run's modules (torch) are imported when a call is made.
"""

from __future__ import annotations

from meshlift.methods.nvdiffrec.config import SurfaceConfig, apply_dict
from meshlift.methods.nvdiffrec.presets import default_preset_for, get_preset, preset_names, tiny_preset
from meshlift.methods.spec import Capabilities, Method, PresetTable, RunSize

__all__ = ["METHOD", "help_config"]


def help_config() -> str:
    """Every :class:`SurfaceConfig` field with its default and docstring, and the presets (``--help-config``)."""
    from meshlift.methods.config_layers import config_help
    from meshlift.methods.nvdiffrec.config import field_docs

    return config_help(SurfaceConfig(), field_docs(), "SurfaceConfig fields (override with --set field=value):",
                       preset_names(), "each with --quick for a CPU-sized run")


def _build_config(*args, **kwargs) -> SurfaceConfig:
    from meshlift.methods.nvdiffrec.reconstruct import build_config

    return build_config(*args, **kwargs)


def _check_input(data: str, camera_convention=None) -> None:
    from meshlift.methods.nvdiffrec.reconstruct import check_input

    check_input(data, camera_convention)


def _check_out_dir(out, *, resume: bool, overwrite: bool) -> None:
    from meshlift.methods.engine import prepare_output_dir

    prepare_output_dir(out, resume=resume, overwrite=overwrite)


def _reconstruct(cfg: SurfaceConfig, out, **kwargs):
    from meshlift.methods.nvdiffrec.reconstruct import reconstruct

    return reconstruct(cfg, out, **kwargs)


def _summary_lines(result, wall_s: float) -> list[str]:
    from meshlift.methods.nvdiffrec.reconstruct import summary_lines

    return summary_lines(result, wall_s)


METHOD = Method(
    name="nvdiffrec",
    title="the surface method",
    label="surface (DMTet + PBR materials + HDR light, nvdiffrec family)",
    cli_help="textured mesh, default",
    config_cls=SurfaceConfig,
    apply=apply_dict,
    presets=PresetTable(
        names=tuple(preset_names()),
        quick=tuple(n for n in preset_names() if n != "demo"),
        get=get_preset,
        default=default_preset_for,
        tiny=tiny_preset,
        # app promises: CPU measured on 2 cores (docs/app.md: quick 85-122 s, tiny 24-103 s by load); the GPU
        # quick/tiny ones are guesses, full is enforced by its time budget
        sizes=(
            RunSize("quick", "quick: 96 px, 300 + 100 steps", cpu_s=150, gpu_s=90),
            RunSize("full", "full: 512-800 px, up to 5000 + 5000 steps, time-budgeted", cpu_s=float("inf"),
                    gpu_s=360, gpu_only=True),
            RunSize("tiny", "tiny: 48 px, 60 + 15 steps (checks the set-up; coarse)", cpu_s=40, gpu_s=30),
        ),
    ),
    inputs=("mesh", "posed"),
    capabilities=Capabilities(multi_gpu=True, simplify=False, region_of_interest=False, up_axis=True,
                              mesh_output=True),
    build_config=_build_config,
    help_config=help_config,
    check_input=_check_input,
    check_out_dir=_check_out_dir,
    reconstruct=_reconstruct,
    summary_lines=_summary_lines,
    steps=lambda cfg: cfg.iter_pass1 + cfg.iter_pass2,
    aliases=("surface",),
)
"""The surface method (``surface`` is the web app's name for it)."""
