"""The contract of a reconstruction method: what the CLI, the web app and the benchmarks may ask of one.

A family (``methods/<family>/``) describes itself with one :class:`Method` in its own ``method.py``;
:mod:`meshlift.methods.registry` lists those specs (one line per family) and is the only place that does.
Everything a caller needs goes through the spec, so no caller tests method names: the config class and its
presets (:class:`PresetTable`, with the ``--quick`` and ``tiny`` variants and the three run sizes the app
offers, :class:`RunSize`), the input kinds it accepts, what it can do (:class:`Capabilities`) and the calls
of a run (``build_config`` → ``check_out_dir`` → ``reconstruct`` → ``summary_lines``, ``warnings``). nerfstudio's
``method_configs`` is the model: one spec per method, the code behind it stays in the family.

This module imports no family and nothing heavy (no torch): a spec's callables import their modules
when called.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from meshlift.errors import ConfigError
from meshlift.methods.result_checks import metrics_warnings

__all__ = ["INPUT_KINDS", "Capabilities", "Method", "PresetTable", "RunSize", "SIZES", "joined", "lazy", "look_line", "wall_time_line"]

#: Input kinds a method may accept: a reference mesh file (views rendered from it, the mesh is the known
#: truth), or a dataset folder of photos with camera poses. Photos without poses are posed first (the
#: caller runs :func:`meshlift.poses.ensure_posed`) and are then ``"posed"``.
INPUT_KINDS = {"mesh": "a mesh", "posed": "posed photos"}

#: The run sizes every method offers, smallest first: ``tiny`` checks the whole path in seconds to a minute
#: on a CPU (coarse result), ``quick`` is the ``--quick`` (CPU-sized) variant of the default preset, ``full``
#: the default preset itself (sized for a GPU).
SIZES = ("tiny", "quick", "full")


def joined(words, last: str = "and") -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"`` (``last`` is the final conjunction)."""
    words = [str(w) for w in words]
    if len(words) <= 1:
        return "".join(words)
    return f"{', '.join(words[:-1])} {last} {words[-1]}"


def lazy(module: str, name: str) -> Callable:
    """``module.name`` imported at the first call, not at import: a family's ``method.py`` names the heavy
    calls of its run (torch) without loading them when the registry is imported."""
    def call(*args, **kwargs):
        import importlib

        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``{module}.{name}``, imported when called."
    return call


def wall_time_line(wall_s: float) -> str:
    """``wall time of this command N s``: the line a run's summary ends with (``wall_s``: the command's
    wall time, start-up, data, training, evaluation and export, all of it)."""
    return f"wall time of this command {wall_s:.1f} s"


def look_line(out, picks, *, markup: bool = True) -> Optional[str]:
    """``look at: PATH (what it shows), ...``: the images a run's summary points to before its numbers are read.

    Args:
        out: the run folder (``str`` or ``Path``).
        picks: ``(glob pattern relative to out, description)`` pairs; the last file (by name) that matches
            each pattern is named, patterns with no match are left out.
        markup: rich markup around "look at" (the summaries); False for plain text.

    Returns:
        The line, or None when nothing matched.
    """
    from pathlib import Path

    out = Path(out)
    named = []
    for pattern, what in picks:
        hits = sorted(out.glob(pattern))
        if hits:
            named.append(f"{hits[-1]} ({what})")
    if not named:
        return None
    return ("[bold]look at[/bold] " if markup else "look at ") + ", ".join(named)


@dataclass(frozen=True)
class RunSize:
    """One run size of a method as the app offers it, with the wall time it promises."""

    name: str
    """One of :data:`SIZES` (``tiny``, ``quick``, ``full``)."""
    label: str
    """What the page shows (resolution, steps)."""
    cpu_s: float
    """Expected wall time on 2 CPU cores, seconds (``inf``: too slow to offer on a CPU)."""
    gpu_s: float
    """Expected wall time on one datacentre GPU, seconds; the app's ZeroGPU ``duration``, and the ``full``
    size's time budget (85 % of it, the rest left for the export)."""
    gpu_only: bool = False
    """True when the app refuses it without a GPU (too slow on a CPU)."""


@dataclass(frozen=True)
class PresetTable:
    """A method's named presets and how its ``--quick``, ``tiny`` and run-size variants are made."""

    names: tuple[str, ...]
    """The names ``--preset`` accepts (the family's ``preset_names()``)."""
    quick: tuple[str, ...]
    """The presets that have a CPU-sized ``--quick`` variant."""
    get: Callable[..., Any] = field(compare=False)
    """``get(name, quick=False) -> config``: a validated copy (the family's ``get_preset``; ConfigError for
    an unknown name)."""
    default: Callable[[str], str] = field(compare=False)
    """``default(data) -> name``: the preset used when none is named, chosen from the input path."""
    tiny: Callable[[str], Any] = field(compare=False)
    """``tiny(data) -> config``: the smallest run that goes through every stage of the method (the CI and
    browser-test size; coarse), for the input ``data``."""
    sizes: tuple[RunSize, ...]
    """The run sizes the app offers, in the order it lists them (the first is its default)."""

    def size(self, name: str) -> RunSize:
        """The :class:`RunSize` ``name``; ConfigError naming the sizes there are."""
        for s in self.sizes:
            if s.name == name:
                return s
        raise ConfigError(f"preset {name!r}: choose one of {', '.join(s.name for s in self.sizes)}")


@dataclass(frozen=True)
class Capabilities:
    """What a method can do beyond training: decides which command-line options apply to it."""

    multi_gpu: bool
    """Data-parallel training on several GPUs (``--gpus N``, torchrun)."""
    simplify: bool
    """Decimates its final mesh to a face budget (``--simplify N``, config field ``simplify``)."""
    region_of_interest: bool
    """Cuts its asset to a region of interest (``--bbox``, config field ``bbox``)."""
    up_axis: bool
    """Rotates its exports so the dataset's up axis becomes glTF's +Y (``--up``, config field ``up_axis``)."""
    mesh_output: bool
    """Writes a textured mesh (``mesh.glb``); False: Gaussians only (``point_cloud.ply``)."""


@dataclass(frozen=True)
class Method:
    """One reconstruction method: its name, config, presets, inputs, capabilities and the calls of a run.

    The callables are the family's own functions (or thin wrappers that import them when called); this
    spec holds no logic of a method.
    """

    name: str
    """The ``--method`` name (``nvdiffrec``, ``gaussians``, ``milo``)."""
    title: str
    """How a sentence names it (``the surface method``)."""
    label: str
    """One line for lists and the app's method menu."""
    cli_help: str
    """What ``meshlift reconstruct --help`` says of it after its name, in brackets."""
    config_cls: type
    """Its config dataclass (a docstring per field)."""
    apply: Callable[..., Any] = field(compare=False)
    """``apply(cfg, {field: value}, source=...) -> cfg``: a validated, type-converted copy."""
    presets: PresetTable = field(compare=False)
    """Its presets with their ``--quick``, ``tiny`` and run-size variants."""
    inputs: tuple[str, ...]
    """The input kinds it accepts (keys of :data:`INPUT_KINDS`)."""
    capabilities: Capabilities
    """What it can do beyond training (which options apply)."""
    build_config: Callable[..., Any] = field(compare=False)
    """``build_config(data, preset, quick, config_file, overrides, out=None, resume=False) -> cfg``: preset
    → ``--config`` → ``--set`` (:func:`meshlift.methods.config_layers.build_layered_config`)."""
    help_config: Callable[[], str] = field(compare=False)
    """``help_config() -> str``: every config field with its default and docstring, and the presets."""
    check_input: Callable[..., None] = field(compare=False)
    """``check_input(data, camera_convention=None)``: refuse an input it cannot use, reading only what that
    needs (DatasetError); the CLI calls it before starting ``--gpus N`` ranks."""
    check_out_dir: Callable[..., None] = field(compare=False)
    """``check_out_dir(out, resume=..., overwrite=...)``: refuse an output folder before anything is loaded
    (OutputError)."""
    reconstruct: Callable[..., Any] = field(compare=False)
    """``reconstruct(cfg, out, resume=..., overwrite=..., monitor=...) -> result`` with ``.metrics`` and
    ``.files``: the whole run, writing the folder ``out``."""
    summary_lines: Callable[[Any, float], list] = field(compare=False)
    """``summary_lines(result, wall_s) -> [str]``: what the CLI prints after a run (rich markup), the
    command's wall time ``wall_s`` included."""
    steps: Callable[[Any], int] = field(compare=False)
    """``steps(cfg) -> int``: training steps of a run of ``cfg`` (both passes of the surface method)."""
    aliases: tuple[str, ...] = ()
    """Other names the web app accepts for it (``--method`` takes :attr:`name` only)."""
    warnings: Callable[[Any], list] = field(default=metrics_warnings, compare=False)
    """``warnings(result) -> [str]``: what the run found far worse than its own diagnostics (test views that
    show nothing, a test PSNR far below the training one, a mesh far below its Gaussians:
    :mod:`meshlift.methods.result_checks`), also in its summary and ``metrics.json``; ``meshlift reconstruct
    --strict`` fails on any. Default: ``result.metrics["warnings"]``."""

    def __post_init__(self) -> None:
        missing = [f.name for f in dataclasses.fields(self) if getattr(self, f.name) is None]
        if missing:
            raise ConfigError(f"Method {self.name!r}: {', '.join(missing)} is None; a method spec needs every "
                              "field")
        unknown = [k for k in self.inputs if k not in INPUT_KINDS]
        if not self.inputs or unknown:
            raise ConfigError(f"Method {self.name!r}: inputs {self.inputs!r}; give one or more of "
                              f"{', '.join(INPUT_KINDS)}")
        names = [s.name for s in self.presets.sizes]
        if sorted(names) != sorted(SIZES):
            raise ConfigError(f"Method {self.name!r}: run sizes {names}; give each of {', '.join(SIZES)} once")

    def sized_config(self, size: str, data: str) -> Any:
        """The preset config of run size ``size`` (:data:`SIZES`) for the input ``data``: the ``tiny``
        variant, or the default preset for ``data`` (CPU-sized for ``quick``). ``data`` is not set in it.

        Raises:
            ConfigError: ``size`` is not one of this method's sizes.
        """
        self.presets.size(size)
        if size == "tiny":
            return self.presets.tiny(data)
        return self.presets.get(self.presets.default(data), quick=size == "quick")

    def check_kind(self, kind: str) -> None:
        """Raise ConfigError when this method does not take input of ``kind`` (:data:`INPUT_KINDS`)."""
        if kind not in self.inputs:
            raise ConfigError(f"{self.title} needs {joined((INPUT_KINDS[k] for k in self.inputs), 'or')}, "
                              f"not {kind!r}")

