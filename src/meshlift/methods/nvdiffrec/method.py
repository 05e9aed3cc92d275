"""The surface method's spec (``--method nvdiffrec``) for :mod:`meshlift.methods.registry`.

Light at import (config and presets only); the run's modules (torch) are imported when a call is made.
"""

from __future__ import annotations

from meshlift.methods.nvdiffrec.config import SurfaceConfig, apply_dict
from meshlift.methods.nvdiffrec.presets import default_preset_for, get_preset, preset_names, tiny_preset
from meshlift.methods.spec import Capabilities, Method, PresetTable, RunSize, lazy

_RUN = "meshlift.methods.nvdiffrec.reconstruct"

__all__ = ["METHOD", "help_config"]


def help_config() -> str:
    """Every :class:`SurfaceConfig` field with its default and docstring, and the presets (``--help-config``)."""
    from meshlift.methods.config_layers import config_help
    from meshlift.methods.nvdiffrec.config import field_docs

    return config_help(SurfaceConfig(), field_docs(), "SurfaceConfig fields (override with --set field=value):",
                       preset_names(), "each with --quick for a CPU-sized run")


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
    build_config=lazy(_RUN, "build_config"),
    help_config=help_config,
    check_input=lazy(_RUN, "check_input"),
    check_out_dir=lazy("meshlift.methods.engine", "prepare_output_dir"),
    reconstruct=lazy(_RUN, "reconstruct"),
    summary_lines=lazy(_RUN, "summary_lines"),
    steps=lambda cfg: cfg.iter_pass1 + cfg.iter_pass2,
    aliases=("surface",),
)
"""The surface method (``surface`` is the web app's name for it)."""
