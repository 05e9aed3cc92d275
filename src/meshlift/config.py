"""Generic dataclass configuration: field docs, type coercion, ``field=value`` overrides, JSON/TOML files.

A meshlift config is a flat ``@dataclass`` with a docstring (a string literal) under every field; presets
are named instances. This module works on any such class:

- :func:`field_docs` reads the field docstrings from the class source (shown by ``--help-config``);
- :func:`config_to_dict` gives the JSON-ready effective config (saved with every output);
- :func:`apply_dict` returns a copy with values applied, each converted to its field's type
  (:func:`coerce`: bool, int, float, str, tuples of numbers, ``Optional``); unknown keys are an error;
- :func:`parse_overrides` parses ``["field=value", ...]`` (``--set``); :func:`load_config_file` reads a
  flat JSON or TOML table.

Standard library only (importing it is cheap). Errors are :class:`meshlift.errors.ConfigError` naming the
field or file and the fix.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import difflib
import json
import typing
from pathlib import Path
from typing import Any, Callable, Optional

from meshlift.errors import ConfigError

__all__ = ["apply_dict", "coerce", "config_to_dict", "field_docs", "load_config_file", "parse_overrides"]


def field_docs(cls: type) -> dict[str, str]:
    """Map field name -> its docstring (whitespace collapsed), read from the source of dataclass ``cls``."""
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and i + 1 < len(body):
            nxt = body[i + 1]
            if isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant):
                docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The config dataclass ``cfg`` as a JSON-serialisable dict (tuples become lists)."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


_KIND_NAMES = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
               "tuple": "a list of numbers such as 0,0.5,1"}


def coerce(name: str, value: Any, hint: Any) -> Any:
    """Convert ``value`` (from JSON/TOML or a command-line string) to the type ``hint`` of field ``name``.

    Raises:
        ConfigError: the value cannot be read as that type (the message says what is expected).
    """
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union and type(None) in args:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null", "")):
            return None
        hint = next(a for a in args if a is not type(None))
        origin = typing.get_origin(hint)
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            s = str(value).strip().lower()
            if s in ("1", "true", "yes", "on"):
                return True
            if s in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"not a boolean: {value!r}")
        if hint is int:
            if isinstance(value, bool):
                raise ValueError("boolean given")
            if isinstance(value, float) and not value.is_integer():
                raise ValueError("not an integer")
            return int(float(value)) if isinstance(value, str) and "e" in value.lower() else int(value)
        if hint is float:
            return float(value)
        if hint is str:
            if not isinstance(value, str):
                raise ValueError(f"expected a string, got {type(value).__name__}")
            return value
        if hint is tuple or origin is tuple:
            if isinstance(value, str):
                s = value.strip()
                if not s.startswith(("(", "[")):
                    s = f"({s},)"
                value = ast.literal_eval(s)
            if not isinstance(value, (list, tuple)):
                raise ValueError("expected a list of numbers")
            return tuple(float(x) for x in value)
    except (ValueError, TypeError, SyntaxError):
        kind = getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
        expected = _KIND_NAMES.get(kind, kind)
        raise ConfigError(f"config field {name!r}: cannot use {value!r}; expected {expected}") from None
    return value


def apply_dict(cfg: Any, values: dict[str, Any], *, source: str = "config",
               validate: Optional[Callable[[Any], Any]] = None, help_hint: str = "") -> Any:
    """A copy of the config dataclass ``cfg`` with ``values`` applied (types converted), then ``validate``d.

    Raises:
        ConfigError: an unknown key (``source`` and ``help_hint`` go into the message), a value of the
            wrong type, or whatever ``validate`` raises.
    """
    hints = typing.get_type_hints(type(cfg))
    known = {f.name for f in dataclasses.fields(cfg)}
    changes = {}
    for key, value in values.items():
        if key not in known:
            # only near spellings: a same-prefix fallback named unrelated fields (a fresh user's report, 2026-12-04)
            close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ConfigError(f"{source}: unknown config field {key!r}{hint}" + (f"; {help_hint}" if help_hint else ""))
        with _named_source(source):
            changes[key] = coerce(key, value, hints[key])
    out = dataclasses.replace(cfg, **changes)
    if validate is None:
        return out
    with _named_source(source):
        return validate(out)


@contextlib.contextmanager
def _named_source(source: str):
    """Re-raise a ConfigError with ``source`` (the config file, or "command line") in front of its message."""
    try:
        yield
    except ConfigError as exc:
        if not source or str(exc).startswith(source):
            raise
        raise type(exc)(f"{source}: {exc}") from exc


def parse_overrides(items: list[str]) -> dict[str, str]:
    """Parse ``["field=value", ...]`` into a dict (``-`` in names read as ``_``).

    Raises:
        ConfigError: an item without ``=``, or with nothing before it.
    """
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected field=value (e.g. batch=4)")
        key, value = item.split("=", 1)
        if not key.strip():
            raise ConfigError(f"override {item!r}: the field name before '=' is empty (e.g. batch=4)")
        out[key.strip().replace("-", "_")] = value.strip()
    return out


def load_config_file(path: str | Path, table: Optional[str] = None) -> dict[str, Any]:
    """Read a flat JSON or TOML table of config values (nested under ``[table]`` is also accepted).

    Raises:
        ConfigError: missing file, a syntax error, or not a table.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} not found; pass an existing .json or .toml file")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix.lower() == ".toml":
            try:
                import tomllib  # type: ignore[import-not-found]
            except ModuleNotFoundError:  # Python < 3.11
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # noqa: BLE001 - parser errors differ between libraries
        raise ConfigError(f"config file {p}: cannot parse ({exc}); fix the syntax") from None
    if table and isinstance(data, dict) and isinstance(data.get(table), dict):
        data = data[table]
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p}: expected a table of field = value")
    return data
