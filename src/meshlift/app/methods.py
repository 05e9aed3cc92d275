"""The methods, run sizes and pose step the web app offers: every method of :mod:`meshlift.methods.registry`.

A :class:`MethodSpec` is the app's view of a registry :class:`~meshlift.methods.spec.Method`: its name, the
inputs it accepts (``"mesh"``, ``"posed"``), its run sizes (``tiny``, ``quick``, ``full``: the method's
:class:`~meshlift.methods.spec.RunSize` list, with the wall time the page promises per device),
:meth:`MethodSpec.configure` (input, size, device → that method's config) and :meth:`MethodSpec.run`
(writes the asset folder). Nothing here names a method: a method added to the registry is in the page.

Photos without camera poses go through the registered pose step (:data:`POSE_STEP`; by default ``meshlift
poses``, pycolmap: :func:`meshlift.poses.ensure_posed`) inside the job, then to the method as posed photos.

No gradio or torch at import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Optional

from meshlift.errors import ConfigError
from meshlift.methods import registry
from meshlift.methods.spec import Method, RunSize

PresetSpec = RunSize
"""One run size of a method in the app (name, label, ``cpu_s``, ``gpu_s``, ``gpu_only``)."""

#: Share of the ``full`` size's promised GPU time given to the run as its time budget (the rest: export).
FULL_BUDGET_SHARE = 0.85


@dataclass(frozen=True)
class MethodSpec:
    """A reconstruction method offered by the app."""

    name: str
    """Key (the registry's ``--method`` name)."""
    label: str
    """What the method menu shows."""
    inputs: tuple[str, ...]
    """Input kinds it accepts: ``"mesh"`` (a reference mesh rendered on the fly), ``"posed"`` (photos + cameras)."""
    presets: tuple[PresetSpec, ...]
    """Its run sizes, in the order the page lists them (the first is preselected)."""
    configure: Callable[[str, str, str, str], object] = field(compare=False)
    """``configure(kind, data_path, preset_name, device) -> config``."""
    run: Callable[[object, Path, object], object] = field(compare=False)
    """``run(config, out_dir, monitor) -> result`` with ``.files`` and ``.metrics``."""
    summary: Optional[Callable[[object, float], list]] = field(default=None, compare=False)
    """``summary(result, wall_s) -> [str]``: the lines the CLI prints after a run (rich markup), or None."""

    def preset(self, name: str) -> PresetSpec:
        for p in self.presets:
            if p.name == name:
                return p
        raise ConfigError(f"method {self.name!r} has no preset {name!r}; choose one of "
                          f"{', '.join(p.name for p in self.presets)}")


METHODS: dict[str, MethodSpec] = {}
"""Registered methods by name, in the order the page lists them."""


def register_method(spec: MethodSpec) -> None:
    """Add (or replace) a method in the app's list."""
    if not isinstance(spec, MethodSpec):
        raise ConfigError(f"register_method: {spec!r} is not a MethodSpec")
    METHODS[spec.name] = spec


def get_method(name: str) -> MethodSpec:
    """The app's method ``name`` (a registry name or alias, e.g. ``surface`` for ``nvdiffrec``).

    Raises:
        ConfigError: no such method; the message lists the page's methods.
    """
    if name in METHODS:
        return METHODS[name]
    for m in registry.METHODS.values():
        if name in m.aliases and m.name in METHODS:
            return METHODS[m.name]
    raise ConfigError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}")


def configure(method: Method, kind: str, data_path: str, preset: str, device: str):
    """``method``'s config for the input ``data_path`` of ``kind`` at run size ``preset`` on ``device``: the
    size's preset (:meth:`~meshlift.methods.spec.Method.sized_config`), no step checkpoints, a preview image
    every eighth of the run, and for ``full`` a time budget within the size's GPU promise.

    Raises:
        ConfigError: the method does not take ``kind`` input, or has no such size.
    """
    method.check_kind(kind)
    cfg = method.sized_config(preset, data_path)
    changes: dict = {"data": data_path, "device": device, "checkpoint_every": 0}
    if preset == "full":
        changes["time_budget_s"] = method.presets.size("full").gpu_s * FULL_BUDGET_SHARE
    changes["preview_every"] = max(5, method.steps(cfg) // 8)  # live preview images
    return method.apply(cfg, changes, source=f"app preset {preset!r}")


def _run(method: Method, cfg, out_dir: Path, monitor):
    return method.reconstruct(cfg, out_dir, overwrite=True, monitor=monitor)


def from_registry(method: Method) -> MethodSpec:
    """The app's :class:`MethodSpec` of a registry method."""
    return MethodSpec(name=method.name, label=method.label, inputs=method.inputs, presets=method.presets.sizes,
                      configure=partial(configure, method), run=partial(_run, method),
                      summary=method.summary_lines)


for _method in registry.METHODS.values():
    register_method(from_registry(_method))


# ---------------------------------------------------------------------------------------------------------
# the pose step


@dataclass(frozen=True)
class PoseStep:
    """How the app poses photos uploaded without cameras."""

    name: str
    """What the page calls it."""
    run: Callable[[str, str, object], str] = field(compare=False)
    """``run(images_folder, work_folder, monitor) -> dataset folder`` (one :func:`meshlift.data.detect_format`
    reads); ``monitor`` receives its progress (a :class:`~meshlift.methods.engine.Monitor`)."""
    missing: Callable[[], Optional[str]] = field(default=lambda: None, compare=False)
    """``missing() -> None`` when it can run on this machine, else what it lacks (with the install command)."""


#: The pose step for unposed photos (at most one, by name). Empty: the app refuses unposed photos with the
#: COLMAP command to run instead.
POSE_STEP: dict[str, PoseStep] = {}


def register_pose_step(name: str, step: Callable[[str, str, object], str],
                       missing: Optional[Callable[[], Optional[str]]] = None) -> None:
    """Let the app pose unposed photos with ``step`` (see :class:`PoseStep`), replacing any other."""
    POSE_STEP.clear()
    POSE_STEP[name] = PoseStep(name, step, missing or (lambda: None))


_UNPOSED = ("These {n} photos have no camera poses (no transforms.json, COLMAP model or poses_bounds.npy "
            "found){why}: run COLMAP on them (`colmap automatic_reconstructor --workspace_path W --image_path "
            "W/images`) and upload a zip of the images with the `sparse/` folder, or add a transforms.json; or "
            "upload a mesh.")


def unposed_verdict(summary: str, n_images: int) -> tuple[bool, str]:
    """``(accepted, page text)`` for an upload of ``n_images`` photos without camera poses (``summary``: the
    upload's one-line description)."""
    if POSE_STEP:
        name, pose = next(iter(POSE_STEP.items()))
        lack = pose.missing()
        if lack is None:
            return True, f"**Ready:** {summary}; poses will be estimated first ({name})."
        return False, "**Cannot use yet:** " + _UNPOSED.format(n=n_images, why=f", and {name} {lack}")
    return False, "**Cannot use yet:** " + _UNPOSED.format(n=n_images, why=" and no pose step is registered")


def _stage_progress(monitor):
    """A :class:`meshlift.poses.StageProgress` that reports the pose step's stages to ``monitor`` as passes."""
    from meshlift.poses import StageProgress

    class MonitorStages(StageProgress):
        def __init__(self) -> None:
            self.done = 0

        def start(self, stage: str, total: int) -> None:
            self.done = 0
            monitor.start_pass(f"poses: {stage}", total)

        def advance(self, n: int = 1) -> None:
            self.done += n
            monitor.update(self.done, float("nan"), float("nan"))

        def end(self) -> None:
            monitor.end_pass()

        def log(self, message: str) -> None:
            monitor.log(message)

    return MonitorStages()


def colmap_pose_step(images: str, work: str, monitor) -> str:
    """``meshlift poses`` as the app's pose step: :func:`meshlift.poses.ensure_posed` (pycolmap SfM) of the
    photo folder ``images`` into ``work``; returns the posed dataset folder.

    Raises:
        DependencyError: pycolmap is missing. DatasetError: too few photos registered.
    """
    from meshlift.poses import ensure_posed

    return str(ensure_posed(images, work, progress=_stage_progress(monitor), log=monitor.log))


def _pycolmap_missing() -> Optional[str]:
    from meshlift import _deps

    if _deps.is_available("pycolmap"):
        return None
    from meshlift.poses import INSTALL_HINT

    return f"needs pycolmap, which is not installed here ({INSTALL_HINT})"


register_pose_step("meshlift poses", colmap_pose_step, _pycolmap_missing)


def describe_duration(p: PresetSpec, gpu: bool) -> str:
    """``"about 2.5 min on this machine's GPU"``-style text for the page."""
    s = p.gpu_s if gpu else p.cpu_s
    if s == float("inf"):
        return "needs a GPU"
    where = "on a GPU" if gpu else "on 2 CPU cores"
    return f"about {s / 60:.1f} min {where}" if s >= 90 else f"about {s:.0f} s {where}"


__all__ = ["FULL_BUDGET_SHARE", "METHODS", "POSE_STEP", "MethodSpec", "PoseStep", "PresetSpec", "colmap_pose_step",
           "configure", "describe_duration", "from_registry", "get_method", "register_method",
           "register_pose_step", "unposed_verdict"]
