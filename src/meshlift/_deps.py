"""Optional-dependency probes with install hints (stdlib only at import).

Every optional package meshlift can use is named once in :data:`KNOWN`, with the pip command that installs
it and what it is for. :func:`probe` says whether it is importable, its version and, when the import failed,
the error text (third-party CUDA extensions fail in characteristic ways; :mod:`meshlift.doctor` classifies
them). :func:`require` imports a package or raises :class:`meshlift.errors.DependencyError` naming the
install command.

Usage::

    from meshlift import _deps
    status = _deps.probe("gradio")          # DepStatus(available, version, error, install_hint)
    gr = _deps.require("gradio", "the web app")
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from typing import NamedTuple, Optional


@dataclass(frozen=True)
class Dependency:
    """One optional package: import name, distribution name, install command, why meshlift uses it."""

    module: str
    """Name passed to ``import`` (e.g. ``nvdiffrast.torch``)."""
    dist: str
    """Distribution name on PyPI, for the version (``importlib.metadata``)."""
    install: str
    """The command that installs it."""
    purpose: str
    """What meshlift uses it for, or ``""`` for third-party packages meshlift does not need."""
    needed_by_meshlift: bool = True
    """False for third-party extensions doctor only diagnoses (meshlift has its own implementation)."""


KNOWN: dict[str, Dependency] = {
    "triton": Dependency("triton", "triton", "pip install triton  (included with the CUDA torch wheels on Linux)",
                         "fast GPU kernels, compiled at run time (no nvcc)"),
    "OpenEXR": Dependency("OpenEXR", "OpenEXR", 'pip install "meshlift[exr]"', ".exr environment maps"),
    "gradio": Dependency("gradio", "gradio", 'pip install "meshlift[app]"', "the web app: meshlift app"),
    "spaces": Dependency("spaces", "spaces", "pip install spaces  (only on Hugging Face ZeroGPU hosting)",
                         "ZeroGPU GPU allocation in the web app"),
    "pycolmap": Dependency("pycolmap", "pycolmap", "pip install pycolmap", "reading COLMAP models; pose estimation for unposed photos"),
    "pymeshlab": Dependency("pymeshlab", "pymeshlab", 'pip install "meshlift[gpl]"  (GPL)',
                            "mesh-repair comparisons"),
    "selenium": Dependency("selenium", "selenium", 'pip install "meshlift[dev]"', "the browser test of the app"),
    # Third-party CUDA extensions users often have installed; meshlift needs none of them.
    "nvdiffrast": Dependency("nvdiffrast.torch", "nvdiffrast", "(not needed by meshlift)", "", False),
    "gsplat": Dependency("gsplat", "gsplat", "(not needed by meshlift)", "", False),
    "tinycudann": Dependency("tinycudann", "tinycudann", "(not needed by meshlift)", "", False),
    "diff_gaussian_rasterization": Dependency("diff_gaussian_rasterization", "diff_gaussian_rasterization",
                                              "(not needed by meshlift)", "", False),
}
"""Every optional or diagnosed package, by short name."""

EXTRAS = ("triton", "OpenEXR", "gradio", "spaces", "pycolmap", "pymeshlab")
"""Optional packages meshlift uses (doctor lists them with their install command)."""

THIRD_PARTY_EXTENSIONS = ("nvdiffrast", "gsplat", "tinycudann", "diff_gaussian_rasterization")
"""Compiled extensions doctor diagnoses when installed (meshlift needs none of them)."""


class DepStatus(NamedTuple):
    """Result of :func:`probe`."""

    available: bool
    """True when the module imported (or, with ``import_module=False``, when it is installed)."""
    version: Optional[str]
    """Installed distribution version, or None."""
    error: Optional[str]
    """``"ExceptionType: message"`` of a failed import, ``"not installed"``, or None."""
    install_hint: str
    """The command that installs it (from :data:`KNOWN`)."""


def _dist_version(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - a broken metadata folder is reported as "unknown version"
        return None


def probe(name: str, *, import_module: bool = True) -> DepStatus:
    """Whether the optional package ``name`` (a key of :data:`KNOWN`, or any module name) can be used.

    Args:
        name: short name from :data:`KNOWN` (``"gradio"``, ``"nvdiffrast"``) or a plain module name.
        import_module: really import it (catches every exception: compiled extensions raise ImportError,
            OSError or RuntimeError). False only checks that it is installed (fast; no import side effects).

    Returns:
        :class:`DepStatus`. Never raises.
    """
    dep = KNOWN.get(name) or Dependency(name, name, f"pip install {name}", "")
    version = _dist_version(dep.dist)
    top = dep.module.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        spec, err = None, f"{type(exc).__name__}: {exc}"
        return DepStatus(False, version, err, dep.install)
    if spec is None:
        return DepStatus(False, version, "not installed", dep.install)
    if not import_module:
        return DepStatus(True, version, None, dep.install)
    try:
        mod = importlib.import_module(dep.module)
    except BaseException as exc:  # noqa: BLE001 - extensions fail in many ways; SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        return DepStatus(False, version, f"{type(exc).__name__}: {exc}", dep.install)
    if version is None:
        version = getattr(mod, "__version__", None)
    return DepStatus(True, None if version is None else str(version), None, dep.install)


def require(name: str, purpose: str = ""):
    """Import and return the optional module ``name``, or raise DependencyError with the install command.

    Raises:
        meshlift.errors.DependencyError: not installed, or its import failed (the message quotes the error).
    """
    from meshlift.errors import DependencyError

    status = probe(name)
    if not status.available:
        dep = KNOWN.get(name)
        why = purpose or (dep.purpose if dep else "") or "this feature"
        raise DependencyError(f"{name} is needed for {why} but {status.error}; install it with: {status.install_hint}")
    return importlib.import_module(KNOWN[name].module if name in KNOWN else name)


__all__ = ["DepStatus", "Dependency", "EXTRAS", "KNOWN", "THIRD_PARTY_EXTENSIONS", "probe", "require"]
