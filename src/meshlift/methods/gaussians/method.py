"""The Gaussian method's spec (``--method gaussians``) for :mod:`meshlift.methods.registry`.

Light at import (config and presets only); the run's modules (torch) are imported when a call is made.
"""

from __future__ import annotations

from meshlift.methods.gaussians.config import GaussiansConfig, apply_dict
from meshlift.methods.gaussians.presets import get_preset, preset_names
from meshlift.methods.spec import Capabilities, Method, PresetTable, RunSize, lazy, wall_time_line

_RUN = "meshlift.methods.gaussians.reconstruct"

__all__ = ["METHOD", "check_input", "help_config"]


def help_config() -> str:
    """Every :class:`GaussiansConfig` field with its default and docstring, and the presets (``--help-config``)."""
    from meshlift.methods.config_layers import config_help
    from meshlift.methods.gaussians.config import field_docs

    return config_help(GaussiansConfig(), field_docs(),
                       "GaussiansConfig fields (override with --set field=value; densify_x also as densify.x):",
                       preset_names(), "gaussians with --quick for a CPU-sized run")


def check_input(data: str, camera_convention=None) -> None:
    """Refuse a path that is neither a mesh nor a dataset (:func:`meshlift.data.views.sniff_input`; DatasetError)."""
    from meshlift.data.views import sniff_input

    sniff_input(data)


def _summary_lines(result, wall_s: float) -> list[str]:
    from meshlift.methods.gaussians.reconstruct import summary_lines

    return summary_lines(result) + [wall_time_line(wall_s)]


METHOD = Method(
    name="gaussians",
    title="the Gaussian method",
    label="Gaussians (3D Gaussian splatting: a splat point cloud, no mesh)",
    cli_help="3D Gaussian splatting: point_cloud.ply; presets gaussians, gaussians_tiny",
    config_cls=GaussiansConfig,
    apply=apply_dict,
    presets=PresetTable(
        names=tuple(preset_names()),
        quick=("gaussians",),
        get=get_preset,
        default=lambda data: "gaussians",
        tiny=lambda data: get_preset("gaussians_tiny"),
        # app promises: quick measured 52 s on an idle 2-core CPU (lego, docs/results.md), doubled for load;
        # tiny is seconds; full: the H200 reached 32.9-33.5 dB on lego in 128-263 s of training
        sizes=(
            RunSize("quick", "quick: 64 px, 200 steps, up to 5000 Gaussians", cpu_s=120, gpu_s=60),
            RunSize("full", "full: images as stored, up to 30k steps, time-budgeted", cpu_s=float("inf"),
                    gpu_s=360, gpu_only=True),
            RunSize("tiny", "tiny: 32 px, 20 steps (checks the set-up; coarse)", cpu_s=30, gpu_s=30),
        ),
    ),
    inputs=("posed",),
    capabilities=Capabilities(multi_gpu=True, simplify=False, region_of_interest=False, up_axis=False,
                              mesh_output=False),
    build_config=lazy(_RUN, "build_config"),
    help_config=help_config,
    check_input=check_input,
    check_out_dir=lazy(_RUN, "check_out_dir"),
    reconstruct=lazy(_RUN, "reconstruct"),
    summary_lines=_summary_lines,
    steps=lambda cfg: cfg.steps,
)
"""3D Gaussian splatting (``point_cloud.ply``)."""
