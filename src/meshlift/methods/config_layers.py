"""How every method family builds its effective config (the one layering rule of ``meshlift reconstruct``).

Preset (CPU-sized with ``--quick``) → ``--config FILE`` → ``--set field=value``; with ``--resume`` the base is
the run's saved ``config.json`` (read strictly). Each family describes itself with a :class:`ConfigLayers`;
:func:`config_help` prints ``--help-config``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from meshlift.errors import ConfigError

__all__ = ["METHOD_KEY", "ConfigLayers", "build_layered_config", "config_help", "saved_config"]

#: The key of a run's ``config.json`` that records the ``--method`` that wrote the folder (not a config field:
#: it is taken out before the fields are applied). Folders written before it was recorded are recognised by
#: their fields (:func:`meshlift.methods.registry.method_of_run`).
METHOD_KEY = "method"


def saved_config(fields: dict, method: str) -> dict:
    """What a run writes to ``config.json``: the ``--method`` that wrote it (:data:`METHOD_KEY`), then
    ``fields`` (the effective config, ``config_to_dict``)."""
    return {METHOD_KEY: method, **{k: v for k, v in fields.items() if k != METHOD_KEY}}


def _method_of(cls: type) -> Optional[str]:
    """The ``--method`` whose config class is ``cls`` (its ``METHOD`` class attribute), or None."""
    return getattr(cls, "METHOD", None)


def _fields_only(values: dict, cls: type, source: str, what: str) -> dict:
    """``values`` without :data:`METHOD_KEY`; ConfigError when it names a method other than ``cls``'s (the
    file is another method's config: its fields would be refused one by one as unknown)."""
    if METHOD_KEY not in values:
        return values
    recorded, mine = values[METHOD_KEY], _method_of(cls)
    if mine is not None and recorded != mine:
        raise ConfigError(f"{source}: {what} of a --method {recorded} run, not of --method {mine}; run it with "
                          f"--method {recorded}, or give a config of --method {mine}")
    return {k: v for k, v in values.items() if k != METHOD_KEY}


@dataclass(frozen=True)
class ConfigLayers:
    """How one method family builds its effective config: its dataclass and its preset / config helpers."""

    cls: type
    """The config dataclass (a fresh instance is the base of a saved ``config.json``)."""
    apply: Callable
    """``apply(cfg, values, source=...) -> cfg``: validated, type-converted copy."""
    get_preset: Callable
    """``get_preset(name, quick=...) -> cfg``."""
    load_file: Callable
    """``load_file(path) -> dict`` of a JSON/TOML config file."""
    parse: Callable
    """``parse(["field=value", ...]) -> dict``."""
    default_preset: str | Callable[[str], str]
    """Preset used when none is named: a name, or ``default_preset(data) -> name`` (chosen from the input)."""
    no_data: str
    """The ConfigError message when no input is given."""


#: Fields added after runs were written whose default changes what a run trains on: a resumed run whose
#: ``config.json`` predates the field takes this value, the behaviour it was trained with (``undistort_crop``,
#: 2026-12-06: photos undistorted before then kept their black frame; resuming one with the crop would change its
#: images' size and principal point under it). ``--set`` still overrides.
RESUME_LEGACY_DEFAULTS = {"undistort_crop": False}


def build_layered_config(layers: ConfigLayers, data: str, preset: Optional[str], quick: bool,
                         config_file: Optional[Path], overrides: list, out: Optional[Path] = None,
                         resume: bool = False):
    """Preset (CPU-sized with ``quick``) → ``--config`` file → ``--set`` overrides; with ``resume`` the base is the
    run's saved ``config.json`` instead (read strictly: a corrupt file is one clear error, nothing rewritten).

    Raises:
        ConfigError: unknown preset or field, bad value, unreadable saved config, no input.
    """
    from meshlift.io.jsonfile import read_json

    saved_path = None if out is None else Path(out) / "config.json"
    if resume and saved_path is not None and saved_path.is_file():
        saved = read_json(saved_path, what="saved config of the run")
        if not isinstance(saved, dict):
            raise ConfigError(f"{saved_path}: expected a table of config fields; restore the file or start again "
                              "with --overwrite")
        saved = _fields_only(saved, layers.cls, str(saved_path), "the saved config")
        names = {f.name for f in dataclasses.fields(layers.cls)}
        legacy = {k: v for k, v in RESUME_LEGACY_DEFAULTS.items() if k in names and k not in saved}
        cfg = layers.apply(layers.cls(), {**legacy, **saved}, source=str(saved_path))
    else:
        if preset is None:
            preset = layers.default_preset(data) if callable(layers.default_preset) else layers.default_preset
        cfg = layers.get_preset(preset, quick=quick)
    if config_file is not None:
        values = _fields_only(layers.load_file(config_file), layers.cls, str(config_file), "the config")
        cfg = layers.apply(cfg, values, source=str(config_file))
    values = layers.parse(overrides)
    if data:  # absolute when it exists, so config.json (and --resume) does not depend on the working directory
        values["data"] = str(Path(data).resolve()) if Path(data).exists() else str(data)
    cfg = layers.apply(cfg, values, source="command line")
    if not cfg.data:
        if resume and not data:
            why = ("its config.json names no data (a `meshlift demo` folder: the demo keeps no checkpoint; "
                   "run `meshlift demo` again)" if out is not None and (Path(out) / "config.json").is_file()
                   else "no config.json there")
            raise ConfigError(f"--resume: there is no run to resume in {out} ({why}); give DATA to start one, "
                              "or the --out of an earlier run")
        raise ConfigError(layers.no_data)
    return cfg


def config_help(cfg, docs: dict, title: str, presets: list, note: str) -> str:
    """``--help-config`` text: every field of ``cfg`` (its defaults) with its docstring, then the presets."""
    defaults = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    lines = [title, ""]
    for name, doc in docs.items():
        default = defaults[name]
        lines.append(f"  {name} = {list(default) if isinstance(default, tuple) else default!r}\n      {doc}")
    lines += ["", "presets: " + ", ".join(presets) + f"  ({note})"]
    return "\n".join(lines)
