"""Strict JSON in and out (RFC 8259: no ``NaN``/``Infinity``), and atomic JSON files.

Every JSON meshlift prints or writes goes through :func:`dumps` (docs/conventions.md, "JSON output"): non-finite
floats become ``null`` (PSNR of identical images, an undefined metric), tensors and numpy values become
lists and numbers, paths become strings. Files are written to a temporary name in the same folder and
renamed (:func:`write_json`), so a kill mid-write leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["to_json_safe", "dumps", "write_json", "write_text_atomic", "read_json"]


def to_json_safe(x: Any) -> Any:
    """A copy of ``x`` that ``json.dumps(..., allow_nan=False)`` accepts: NaN/±inf → None, tensors and
    numpy arrays → (nested) lists, numpy scalars → Python numbers, paths → str, tuples → lists."""
    if isinstance(x, dict):
        return {str(k): to_json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json_safe(v) for v in x]
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    if isinstance(x, os.PathLike):
        return str(x)
    if hasattr(x, "tolist"):  # torch tensors, numpy arrays and scalars
        return to_json_safe(x.tolist())
    if hasattr(x, "item"):
        return to_json_safe(x.item())
    return str(x)


def dumps(obj: Any, **kwargs) -> str:
    """``json.dumps`` of :func:`to_json_safe` (``obj``) with ``allow_nan=False``."""
    return json.dumps(to_json_safe(obj), allow_nan=False, **kwargs)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file + rename (atomic on one filesystem)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def write_json(path: str | Path, obj: Any, *, indent: int = 2) -> Path:
    """Write ``obj`` as strict, indented JSON to ``path`` atomically (see the module docstring)."""
    return write_text_atomic(path, dumps(obj, indent=indent) + "\n")


def read_json(path: str | Path, *, what: str = "JSON file") -> Any:
    """Read a JSON file; a missing, unreadable or corrupt file raises :class:`ConfigError` naming it."""
    from meshlift.errors import ConfigError

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path}: the {what} is not valid JSON ({exc}); restore it or start a new run "
                          "in another folder") from None
