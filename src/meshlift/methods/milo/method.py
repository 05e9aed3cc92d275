"""MILo's spec (``--method milo``) for :mod:`meshlift.methods.registry`.

Light at import (config and presets only); the run's modules (torch) are imported when a call is made.
"""

from __future__ import annotations

from meshlift.methods.gaussians.method import check_input
from meshlift.methods.milo.config import MiloConfig, apply_dict
from meshlift.methods.milo.presets import get_preset, preset_names
from meshlift.methods.spec import Capabilities, Method, PresetTable, RunSize, lazy, wall_time_line

_RUN = "meshlift.methods.milo.reconstruct"

__all__ = ["METHOD", "help_config"]


def help_config() -> str:
    """Every :class:`MiloConfig` field with its default and docstring, and the presets (``--help-config``)."""
    from meshlift.methods.config_layers import config_help
    from meshlift.methods.milo.config import field_docs

    return config_help(MiloConfig(), field_docs(), "MiloConfig fields (override with --set field=value):",
                       preset_names(), "each with --quick for a CPU-sized run")


def _summary_lines(result, wall_s: float) -> list[str]:
    from meshlift.methods.milo.reconstruct import summary_lines

    return summary_lines(result) + [wall_time_line(wall_s)]


METHOD = Method(
    name="milo",
    title="MILo",
    label="MILo (Gaussians -> textured mesh, also from unmasked captures)",
    cli_help="Gaussians -> textured mesh, also from unmasked captures: fused surface-aligned Gaussians by default, "
             "--set extract=delaunay for MILo's mesh in the loop; presets verylowres, lowres, default, milo_tiny",
    config_cls=MiloConfig,
    apply=apply_dict,
    presets=PresetTable(
        names=tuple(preset_names()),
        quick=tuple(n for n in preset_names() if n != "milo_tiny"),
        get=get_preset,
        default=lambda data: "verylowres",
        tiny=lambda data: get_preset("milo_tiny"),
        # app promises: quick has a 280 s time budget (49-163 s measured on 2 cores, benchmarks/results/log_milo.md); tiny
        # took 28 s on a CPU; the GPU ones are guesses (an H200 spot run at 0.4 of the schedule: 246 s)
        sizes=(
            RunSize("quick", "quick: 64 px, 400 steps, 9k-pivot mesh, at most 280 s of training",
                    cpu_s=300, gpu_s=150),
            RunSize("full", "full: verylowres, 18k steps, time-budgeted", cpu_s=float("inf"), gpu_s=600,
                    gpu_only=True),
            RunSize("tiny", "tiny: 48 px, 100 steps (checks the set-up; coarse)", cpu_s=60, gpu_s=30),
        ),
    ),
    inputs=("mesh", "posed"),
    capabilities=Capabilities(multi_gpu=False, simplify=True, region_of_interest=True, up_axis=True,
                              mesh_output=True),
    build_config=lazy(_RUN, "build_config"),
    help_config=help_config,
    check_input=check_input,
    check_out_dir=lazy("meshlift.methods.gaussians.reconstruct", "check_out_dir"),
    reconstruct=lazy(_RUN, "reconstruct"),
    summary_lines=_summary_lines,
    steps=lambda cfg: cfg.steps,
)
"""MILo: Gaussians with a mesh (TSDF fusion by default, or the mesh in the loop)."""
