"""The registry of reconstruction methods: the one place that lists them.

Each family describes itself with a :class:`~meshlift.methods.spec.Method` in its own ``method.py``
(``methods/<family>/method.py``); the lines below list those specs, in the order the CLI's help and the
app's menu show them. The CLI (``meshlift reconstruct``, ``--help-config``), the web app and the
benchmarks find a method here by name (:func:`get_method`) and call it through its spec, so a new method is
a new family folder plus one line here.

Importing this module imports the families' ``method.py``, their config and preset modules: plain
dataclasses, no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from meshlift.errors import ConfigError
from meshlift.methods.gaussians.method import METHOD as GAUSSIANS
from meshlift.methods.milo.method import METHOD as MILO
from meshlift.methods.nvdiffrec.method import METHOD as NVDIFFREC
from meshlift.methods.spec import Capabilities, Method, PresetTable, RunSize, joined

__all__ = ["METHODS", "Capabilities", "Method", "PresetTable", "RunSize", "get_method", "method_of_config",
           "method_of_run"]

METHODS: dict[str, Method] = {m.name: m for m in (NVDIFFREC, GAUSSIANS, MILO)}
"""Every method by its ``--method`` name; the first is the default."""


def get_method(name: str, what: str = "--method") -> Method:
    """The method called ``name`` (its ``--method`` name; the web app also accepts its aliases).

    Raises:
        ConfigError: no such method; the message (``what`` names the argument) lists the known ones.
    """
    if name in METHODS:
        return METHODS[name]
    raise ConfigError(f"{what} {name!r}: choose {joined(METHODS, 'or')}")


def method_of_config(cfg) -> str:
    """The ``--method`` name of a config object (the method whose :attr:`~meshlift.methods.spec.Method.
    config_cls` is its class).

    Raises:
        ConfigError: no registered method has that config class.
    """
    for m in METHODS.values():
        if type(cfg) is m.config_cls:
            return m.name
    fits = [(len(type(cfg).__mro__) - len(m.config_cls.__mro__), m.name) for m in METHODS.values()
            if isinstance(cfg, m.config_cls)]  # a subclass: the nearest registered class
    if fits:
        return min(fits)[1]
    raise ConfigError(f"{type(cfg).__name__} is the config of no registered method")


def method_of_run(out: Path) -> Optional[str]:
    """The name of the method that wrote the run folder ``out`` (the run a ``--resume`` would continue), or
    None when there is no readable saved config or no method fits: the ``method`` recorded in
    ``out/config.json`` (:data:`meshlift.methods.config_layers.METHOD_KEY`), or for a folder written before
    it was recorded the method whose config class holds every field there (the smallest fitting class wins:
    MILo's config extends the Gaussian one)."""
    import json

    from meshlift.methods.config_layers import METHOD_KEY

    try:
        saved = json.loads((Path(out) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict):
        return None
    if isinstance(saved.get(METHOD_KEY), str):
        return saved[METHOD_KEY] if saved[METHOD_KEY] in METHODS else None
    saved = saved.get("config", saved)
    keys = {k.replace("densify.", "densify_") for k in saved}
    fits = [(len(m.config_cls.__dataclass_fields__), m.name) for m in METHODS.values()
            if keys <= set(m.config_cls.__dataclass_fields__)]
    return min(fits)[1] if fits else None
