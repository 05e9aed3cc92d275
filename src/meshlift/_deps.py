"""Optional and external dependencies: one table, probes that do not import, imports with install hints.

Every third-party package meshlift imports lazily is listed in :data:`DEPENDENCIES` with its pip name,
the extra that installs it and what it is for. Library code imports such a package with
:func:`require` (a :class:`meshlift.errors.DependencyError` naming the package and the ``pip install``
line when it is missing, failing late: only when the feature is used); :func:`is_available` asks without
importing; :func:`report` is what a ``meshlift doctor`` command prints. Standard library only: importing
this module is cheap (no torch). :func:`probe` really imports a package (or only looks, with
``import_module=False``) and returns why it failed: ``meshlift doctor`` classifies the failures of the
third-party CUDA extensions listed here (:data:`THIRD_PARTY_EXTENSIONS`), none of which meshlift needs.
"""

from __future__ import annotations

import importlib
import importlib.util
import importlib.metadata
from dataclasses import dataclass
from types import ModuleType
from typing import NamedTuple, Optional

from meshlift.errors import DependencyError

__all__ = ["DEPENDENCIES", "DepStatus", "Dependency", "EXTRAS", "THIRD_PARTY_EXTENSIONS", "is_available", "probe",
           "report", "require"]


@dataclass(frozen=True)
class Dependency:
    """One package meshlift can use.

    Attributes:
        module: the import name (``"OpenEXR"``).
        package: the pip requirement (``"OpenEXR"``, ``"xatlas"``).
        extra: the meshlift extra that installs it (``"exr"``), ``"core"`` for a core dependency, or None.
        purpose: what needs it, as a phrase (``"reading/writing .exr"``).
        hint: extra advice shown with the install line (an alternative), or ``""``.
        needed: False for third-party extensions ``meshlift doctor`` only diagnoses (meshlift has its own
            implementation of what they do).
    """

    module: str
    package: str
    extra: Optional[str]
    purpose: str
    hint: str = ""
    needed: bool = True

    def install_line(self) -> str:
        """The shell line that installs it (``pip install OpenEXR``; an extra's is named too)."""
        if not self.needed:
            return "(not needed by meshlift)"
        line = f"pip install {self.package}"
        if self.extra not in (None, "core"):
            line += f'  (or pip install "meshlift[{self.extra}]")'
        return line


DEPENDENCIES: dict[str, Dependency] = {d.module: d for d in (
    Dependency("xatlas", "xatlas", "core", "UV unwrapping (meshlift.mesh.uv.unwrap)"),
    Dependency("fast_simplification", "fast-simplification", "core", "mesh decimation (meshlift.mesh.simplify)"),
    Dependency("trimesh", "trimesh>=4", "core", "reading PLY/OFF/STL and mesh utilities"),
    Dependency("scipy", "scipy", "core", "distance transforms and nearest neighbours"),
    Dependency("OpenEXR", "OpenEXR", "exr", "reading/writing .exr", "or convert the file to Radiance .hdr"),
    Dependency("pymeshlab", "pymeshlab", "gpl", "GPL-licensed mesh repair tools"),
    Dependency("triton", "triton", None, "GPU kernels (meshlift.kernels; ships with CUDA builds of torch)",
               "the pure-PyTorch paths are used without it"),
    Dependency("gradio", "gradio", "app", "the web app (meshlift app)"),
    Dependency("spaces", "spaces", "app", "GPU allocation on Hugging Face ZeroGPU hosting (a no-op elsewhere)"),
    Dependency("pycolmap", "pycolmap", "poses", "COLMAP models and pose estimation for unposed photos"),
    Dependency("selenium", "selenium", "dev", "the web app's browser test"),
    # Third-party CUDA extensions users often have installed; meshlift needs none of them.
    Dependency("nvdiffrast.torch", "nvdiffrast", None, "", needed=False),
    Dependency("gsplat", "gsplat", None, "", needed=False),
    Dependency("tinycudann", "tinycudann", None, "", needed=False),
    Dependency("diff_gaussian_rasterization", "diff_gaussian_rasterization", None, "", needed=False),
)}

EXTRAS = ("OpenEXR", "gradio", "spaces", "pycolmap", "pymeshlab")
"""Optional packages meshlift uses; ``meshlift doctor`` lists each with its install line."""

THIRD_PARTY_EXTENSIONS = ("nvdiffrast.torch", "gsplat", "tinycudann", "diff_gaussian_rasterization")
"""Compiled extensions ``meshlift doctor`` imports when installed, to classify why they fail."""


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


class DepStatus(NamedTuple):
    """Result of :func:`probe`."""

    available: bool
    """True when the module imported (with ``import_module=False``: when it is installed)."""
    version: Optional[str]
    """Installed distribution version, or None."""
    error: Optional[str]
    """``"ExceptionType: message"`` of a failed import, ``"not installed"``, or None."""
    install_hint: str
    """:meth:`Dependency.install_line`."""


def _dist_version(package: str) -> Optional[str]:
    name = package.split(">")[0].split("=")[0].split("<")[0].split("[")[0]
    try:
        return importlib.metadata.version(name)
    except Exception:  # noqa: BLE001 - not installed, or broken metadata
        return None


def probe(module: str, *, import_module: bool = True) -> DepStatus:
    """Whether ``module`` can be used, its version and, when its import fails, the error text.

    Args:
        module: import name (a key of :data:`DEPENDENCIES` or any module).
        import_module: really import it, catching every exception (compiled extensions raise ImportError,
            OSError or RuntimeError); False only looks whether it is installed (no import side effects).

    Returns:
        :class:`DepStatus`. Never raises.
    """
    d = _dep(module)
    version = _dist_version(d.package)
    if not is_available(module.split(".")[0]):
        return DepStatus(False, version, "not installed", d.install_line())
    if not import_module:
        return DepStatus(True, version, None, d.install_line())
    try:
        mod = importlib.import_module(module)
    except BaseException as exc:  # noqa: BLE001 - extensions fail in many ways; SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        return DepStatus(False, version, f"{type(exc).__name__}: {exc}", d.install_line())
    if version is None and getattr(mod, "__version__", None) is not None:
        version = str(mod.__version__)
    return DepStatus(True, version, None, d.install_line())
