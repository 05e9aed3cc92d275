"""Optional and external dependencies: one table, probes that do not import, imports with install hints.

Every third-party package meshlift imports lazily is listed in :data:`DEPENDENCIES` with its pip name,
the extra that installs it and what it is for. Library code imports such a package with
:func:`require` (a :class:`meshlift.errors.DependencyError` naming the package and the ``pip install``
line when it is missing, failing late: only when the feature is used); :func:`is_available` asks without
importing; :func:`report` is what a ``meshlift doctor`` command prints. Standard library only: importing
this module is cheap (no torch).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType
from typing import Optional

from meshlift.errors import DependencyError

__all__ = ["DEPENDENCIES", "Dependency", "is_available", "report", "require"]


@dataclass(frozen=True)
class Dependency:
    """One package meshlift can use.

    Attributes:
        module: the import name (``"OpenEXR"``).
        package: the pip requirement (``"OpenEXR"``, ``"xatlas"``).
        extra: the meshlift extra that installs it (``"exr"``), ``"core"`` for a core dependency, or None.
        purpose: what needs it, as a phrase (``"reading/writing .exr"``).
        hint: extra advice shown with the install line (an alternative), or ``""``.
    """

    module: str
    package: str
    extra: Optional[str]
    purpose: str
    hint: str = ""

    def install_line(self) -> str:
        """The shell line that installs it (``pip install OpenEXR``)."""
        return f"pip install {self.package}"


DEPENDENCIES: dict[str, Dependency] = {d.module: d for d in (
    Dependency("xatlas", "xatlas", "core", "UV unwrapping (meshlift.mesh.uv.unwrap)"),
    Dependency("fast_simplification", "fast-simplification", "core", "mesh decimation (meshlift.mesh.simplify)"),
    Dependency("trimesh", "trimesh>=4", "core", "reading PLY/OFF/STL and mesh utilities"),
    Dependency("scipy", "scipy", "core", "distance transforms and nearest neighbours"),
    Dependency("OpenEXR", "OpenEXR", "exr", "reading/writing .exr", "or convert the file to Radiance .hdr"),
    Dependency("pymeshlab", "pymeshlab", "gpl", "optional GPL mesh repair tools"),
    Dependency("triton", "triton", None, "GPU kernels (meshlift.kernels; ships with CUDA builds of torch)",
               "the pure-PyTorch paths are used without it"),
)}


def _dep(module: str) -> Dependency:
    if module not in DEPENDENCIES:
        return Dependency(module, module, None, f"the '{module}' module")
    return DEPENDENCIES[module]


def is_available(module: str) -> bool:
    """Whether ``module`` can be imported here (``importlib.util.find_spec``; nothing is imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, purpose: Optional[str] = None) -> ModuleType:
    """Import ``module`` and return it.

    Raises:
        DependencyError: it cannot be imported; the message says what needs it (``purpose`` or the table's)
            and the ``pip install`` line.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        d = _dep(module)
        hint = f" ({d.hint})" if d.hint else ""
        raise DependencyError(
            f"{purpose or d.purpose} needs the '{d.package}' package: {d.install_line()}{hint}"
        ) from None


def report() -> list[dict]:
    """One dict per known dependency: ``module``, ``package``, ``extra``, ``purpose``, ``available``, ``version``."""
    rows = []
    for d in DEPENDENCIES.values():
        version = None
        ok = is_available(d.module)
        if ok:
            try:
                from importlib.metadata import version as _version

                version = _version(d.package.split(">")[0].split("=")[0])
            except Exception:  # noqa: BLE001 - metadata may be missing for vendored builds
                version = None
        rows.append({"module": d.module, "package": d.package, "extra": d.extra, "purpose": d.purpose,
                     "available": ok, "version": version})
    return rows
