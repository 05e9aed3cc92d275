"""`meshlift reconstruct`: any method of :mod:`meshlift.methods.registry` (``--method``; the surface method,
nvdiffrec, by default), called through its :class:`~meshlift.methods.spec.Method` spec: build its config,
check the output folder, pose unposed photos first (:func:`meshlift.poses.ensure_posed`), run it, print its
summary. Which options apply to a method (``--gpus``, ``--simplify``, ``--bbox``, ``--up``) is read from its
capabilities.

Configuration precedence: preset (``--preset``, CPU-sized with ``--quick``) → ``--config FILE`` (JSON/TOML)
→ ``--set field=value`` / trailing ``field=value`` arguments. With ``--resume`` the base is the run's saved
``config.json`` instead, still overridable (e.g. more iterations).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from meshlift._threads import thread_note
from meshlift.cli.clock import process_seconds


def _psnr_text(psnr: float) -> str:
    """``PSNR 31.20 dB`` for a finite value; empty when a pass has no PSNR (nan, e.g. MILo's occupancy
    refinement, whose loss is not photometric); ``PSNR inf dB`` for a perfect match."""
    if psnr != psnr:
        return ""
    return f"PSNR {psnr:5.2f} dB"


def make_monitor(console=None):
    """A :class:`meshlift.methods.engine.Monitor` drawing a rich progress bar per pass."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    import time

    from meshlift.methods.engine import Monitor

    console = console or Console(stderr=True, soft_wrap=True)

    class RichMonitor(Monitor):
        def __init__(self) -> None:
            self.progress = None
            self.task = None

        def start_pass(self, name: str, total: int, start: int = 0) -> None:
            self.name, self.total, self.start, self.t0 = name, total, start, time.perf_counter()
            self.last = (start, self.t0)  # the previous plain line's (iteration, time): its rate is the recent one
            if not console.is_terminal:  # logs / pipes: plain lines from update(), no live bar
                console.print(f"{name}: {total} steps" + (", done in an earlier session" if 0 < total <= start
                                                            else f", resuming at {start}" if start else ""))
                return
            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]:.4f}  {task.fields[psnr]}"),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                transient=False,
            )
            self.progress.start()
            self.task = self.progress.add_task(name, total=max(total, 1), completed=start, loss=0.0,
                                               psnr="", rate="-- it/s")
            if total == 0:
                self.progress.update(self.task, completed=1)

        def update(self, iteration: int, loss: float, psnr: float) -> None:
            if not console.is_terminal:
                if iteration % max(1, self.total // 10) == 0 or iteration == self.total:  # a line every 10 %
                    now = time.perf_counter()
                    recent = (iteration - self.last[0]) / max(now - self.last[1], 1e-9)  # since the last line
                    mean = max(1, iteration - self.start) / max(now - self.t0, 1e-9)
                    self.last = (iteration, now)
                    eta = (self.total - iteration) / max(recent, 1e-9)
                    console.print(f"{self.name}: {iteration}/{self.total}  loss {loss:.4f}  {_psnr_text(psnr)}  "
                                  f"{recent:.2f} it/s (mean {mean:.2f})  ETA {eta:.0f} s")
                return
            if self.progress is None:
                return
            self.progress.update(self.task, completed=iteration, loss=loss, psnr=_psnr_text(psnr))
            speed = self.progress.tasks[0].speed
            if speed:
                self.progress.update(self.task, rate=f"{speed:.1f} it/s")

        def end_pass(self) -> None:
            if self.progress is not None:
                self.progress.stop()
                self.progress = None

        def log(self, message: str) -> None:
            console.print(f"[dim]{message}[/dim]")

    return RichMonitor()


def resume_method(out: Path) -> Optional[str]:
    """The ``--method`` of the run ``--resume`` would continue in ``out`` (its ``config.json``), or None
    (:func:`meshlift.methods.registry.method_of_run`)."""
    from meshlift.methods.registry import method_of_run

    return method_of_run(out)


def check_run_method(out: Path, method: str, *, resume: bool, overwrite: bool) -> None:
    """Refuse to continue or replace a run of another method in ``out`` (the method its ``config.json``
    records, :func:`resume_method`), naming that method and the flags to use: ``--resume`` would read a config
    of other fields, a re-run or ``--overwrite`` would leave that method's files beside this one's (``render``
    of the folder would show the old asset). A folder whose other run never started training (a
    ``config.json`` alone) is not a run. Before anything is loaded.

    Raises:
        ConfigError: ``--resume`` of another method's run. OutputError: a re-run into it.
    """
    from meshlift.errors import ConfigError, OutputError
    from meshlift.methods.engine import CHECKPOINT_NAME, FINISHED_MARKER

    if not Path(out).is_dir():
        return
    saved = resume_method(out)
    if saved is None or saved == method:
        return
    if resume:
        raise ConfigError(f"--resume: {out} holds a --method {saved} run (its config.json); resume it with --method "
                          f"{saved} --resume, or write this --method {method} run to another --out")
    held = [n for n in (FINISHED_MARKER, CHECKPOINT_NAME) if (Path(out) / n).is_file()]
    if not held:
        return
    what = "a finished" if FINISHED_MARKER in held else "an unfinished"
    replace = ("--overwrite replaces a run of the same method only (the files of --method "
               f"{saved} would stay beside the new ones)" if overwrite else
               f"replacing it with --method {method} would mix the files of the two methods")
    raise OutputError(f"--out {out}: holds {what} --method {saved} run ({', '.join(held)}, config.json); {replace}. "
                      f"Write this --method {method} run to another --out, or continue that run with --method "
                      f"{saved} --resume (--method {saved} --overwrite starts it again)")


def _default_method() -> str:
    """The ``--method`` used when none is given: the registry's first."""
    from meshlift.methods.registry import METHODS

    return next(iter(METHODS))


def _method_help() -> str:
    """``--method``'s help: every registered method with what it makes."""
    from meshlift.methods.registry import METHODS
    from meshlift.methods.spec import joined

    return joined((f"{m.name} ({m.cli_help})" for m in METHODS.values()), "or") + "."


def _names_with(capability: str) -> str:
    """``nvdiffrec and gaussians``: the methods with ``capability`` (a :class:`~meshlift.methods.spec.
    Capabilities` field)."""
    from meshlift.methods.registry import METHODS
    from meshlift.methods.spec import joined

    return joined(m.name for m in METHODS.values() if getattr(m.capabilities, capability))



def _preset_help(spec, preset, quick: bool, data) -> str:
    """The fields ``--preset`` / ``--quick`` change from the defaults --help-config lists ('' when neither is
    given): the values a run with those options starts from (a fresh-user review read the defaults as those)."""
    import dataclasses

    if preset is None and not quick:
        return ""
    name = preset or spec.presets.default(str(data or ""))
    cfg, base = spec.presets.get(name, quick=quick), spec.config_cls()
    rows = [f"  {f.name} = {getattr(cfg, f.name)!r}   (default {getattr(base, f.name)!r})"
            for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != getattr(base, f.name)]
    head = f"--preset {name}" + (" --quick" if quick else "") + " sets (before any --set):"
    return "\n".join([head] + (rows or ["  nothing: the defaults below"])) + "\n\n"

def register(app: typer.Typer) -> None:
    """Add the `reconstruct` subcommand to ``app``; the methods and what applies to each come from
    :mod:`meshlift.methods.registry`."""

    @app.command("reconstruct")
    def reconstruct(
        data: Optional[str] = typer.Argument(
            None, help="Dataset folder (NeRF/Blender, COLMAP, LLFF/NeRD, ...) or a mesh file (.obj/.glb/.ply) to reconstruct from synthetic views."
        ),
        overrides: Optional[List[str]] = typer.Argument(None, help="Config overrides field=value (like --set)."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (created)."),
        preset: Optional[str] = typer.Option(
            None, "--preset", "-p", help="nvdiffrec (the default method): spot, bob, *_fixlight, *_metal, spot_flexi, "
            "nerf, nerd (default: spot for a mesh file, nerd for an LLFF folder, nerf for other folders); "
            "--method gaussians: gaussians, gaussians_tiny; --method milo: default, lowres, verylowres, milo_tiny."
        ),
        quick: bool = typer.Option(False, "--quick", metavar="", help="CPU-sized variant of the preset (minutes on a laptop)."),
        config: Optional[Path] = typer.Option(None, "--config", "-c", help="JSON or TOML file of config fields."),
        set_: Optional[List[str]] = typer.Option(None, "--set", "-s", help="Override a field: --set batch=4."),
        resume: bool = typer.Option(False, "--resume", metavar="", help="Continue from OUT/checkpoint.pt."),
        overwrite: bool = typer.Option(False, "--overwrite", metavar="", help="Replace a finished or unfinished run in OUT."),
        help_config: bool = typer.Option(False, "--help-config", metavar="", help="List every config field and exit."),
        camera_convention: Optional[str] = typer.Option(
            None, "--camera-convention", help="Axes of transforms.json camera-to-world matrices: opengl (the "
            "format's definition, default) or opencv (same as --set camera_convention=)."),
        up: Optional[str] = typer.Option(None, "--up", help="The dataset's up axis (z, -y, ...; milo also auto: from the cameras): exported meshes "
                                         f"are rotated so it becomes glTF's +Y ({_names_with('up_axis')}; same as "
                                         "--set up_axis=)."),
        method: str = typer.Option(_default_method(), "--method", "-m", help=_method_help()),
        simplify: Optional[int] = typer.Option(None, "--simplify", help=f"--method {_names_with('simplify')}: "
                                               "decimate the final mesh to at most this many faces (same as --set "
                                               "simplify=N)."),
        bbox: Optional[str] = typer.Option(None, "--bbox", help=f"--method {_names_with('region_of_interest')}: "
                                           "the region of interest x0,y0,z0,x1,y1,z1 (dataset world units); the asset "
                                           "is the mesh cut to it (default: found from where the cameras look; same "
                                           "as --set bbox=)."),
        gpus: int = typer.Option(1, "--gpus", help="Train on N GPUs: relaunches this command under torchrun "
                                 "(data parallel; `batch` is the global batch over all GPUs; "
                                 f"{_names_with('multi_gpu')})."),
        strict: bool = typer.Option(False, "--strict", metavar="", help="Fail with exit status "
                                    f"{STRICT_EXIT} when the run ends with a warning (a result far worse than its own "
                                    "diagnostics: test views that show nothing, a test PSNR far below the training "
                                    "one, a mesh far below its Gaussians); the outputs are written all the same."),
    ) -> None:
        """Reconstruct a textured PBR mesh (OBJ+MTL, GLB), an HDR light probe and metrics from posed images,
        train 3D Gaussians (--method gaussians), or Gaussians and a mesh from them (--method milo)."""
        from rich.console import Console

        from meshlift.errors import ConfigError
        from meshlift.methods.registry import METHODS, get_method
        from meshlift.methods.spec import joined

        console = Console(soft_wrap=True)  # no hard line breaks in logs and pipes (paths stay whole)
        spec = get_method(method)
        method, can = spec.name, spec.capabilities
        if simplify is not None and not can.simplify:
            raise ConfigError(f"--simplify applies to --method {_names_with('simplify')} only")
        if bbox is not None and not can.region_of_interest:
            raise ConfigError(f"--bbox applies to --method {_names_with('region_of_interest')} only (the region of "
                              "interest of its mesh)")
        if gpus != 1 and not can.multi_gpu:
            raise ConfigError(f"--gpus applies to --method {_names_with('multi_gpu')}; --method {method} trains in "
                              "one process (run it without --gpus)")
        if help_config:
            typer.echo(_preset_help(spec, preset, quick, data) + spec.help_config())
            raise typer.Exit()
        if out is None:
            raise ConfigError("--out DIR is required (the folder the asset and metrics are written to)")
        if resume and overwrite:
            raise ConfigError("--resume and --overwrite exclude each other: continue the run, or replace it")
        check_run_method(out, method, resume=resume, overwrite=overwrite)  # another method's folder
        spec.check_out_dir(out, resume=resume, overwrite=overwrite)  # before anything is loaded
        from meshlift.methods.distributed import env_rank, env_world_size, shutdown

        if gpus != 1 and env_world_size() == 1:  # not yet a rank: start the ranks and wait for them
            from meshlift.cli.launch import run_under_torchrun

            if data and not resume:  # an input the method cannot use: one line here, not one per rank
                spec.check_input(data, camera_convention)

            code = run_under_torchrun(gpus, echo=lambda line: console.print(f"[dim]{line}[/dim]"))
            if code == 0 and strict:  # the ranks ignore --strict (a failed rank is torchrun's error): its check here
                fail_if_warnings(spec, _saved_result(out), out)
            raise typer.Exit(code)
        main_rank = env_rank() == 0  # under torchrun rank 0 alone reports
        from meshlift.methods.loop import INTERRUPT
        items = list(set_ or []) + list(overrides or [])
        if camera_convention is not None:
            items.append(f"camera_convention={camera_convention}")
        if up is not None:
            if not can.up_axis:
                ups = [m for m in METHODS.values() if m.capabilities.up_axis]
                raise ConfigError(f"--up is implemented for {joined(m.title for m in ups)}'s exports (--method "
                                  f"{joined(m.name for m in ups)}); "
                                  f"{joined(m.name for m in METHODS.values() if m not in ups)} outputs stay in the "
                                  "dataset's world frame")
            items.append(f"up_axis={up}")
        if data is not None and "=" in data and not Path(data).exists():
            items.insert(0, data)
            data = None
        if data is not None:  # an unposed photo folder or a video: pose it first, kept in OUT/poses
            from meshlift.cli.poses_cmd import make_stage_progress
            from meshlift.poses import ensure_posed

            data = str(ensure_posed(data, out / "poses", progress=make_stage_progress(), log=console.print))
        if simplify is not None:
            items.append(f"simplify={simplify}")
        if bbox is not None:
            items.append(f"bbox={bbox}")
        cfg = spec.build_config(data or "", preset, quick, config, items, out=out, resume=resume)
        if main_rank and (note := thread_note()) is not None:
            console.print(f"[dim]{note}[/dim]")
        try:
            with INTERRUPT:  # Ctrl-C: a checkpoint of the current step, then exit 130
                result = spec.reconstruct(cfg, out, resume=resume, overwrite=overwrite,
                                          monitor=make_monitor() if main_rank else None)
        finally:
            shutdown()
        if main_rank:
            print_summary(console, result, method=method)
            if strict and env_world_size() == 1:
                fail_if_warnings(spec, result, out)


#: Exit status of ``reconstruct --strict`` when the run ended with a warning (2 is an error before or during
#: the run; here the outputs were written).
STRICT_EXIT = 3


def fail_if_warnings(spec, result, out) -> None:
    """``--strict``: exit with :data:`STRICT_EXIT`, naming every warning of ``result`` (``spec.warnings``, the
    method's :attr:`~meshlift.methods.spec.Method.warnings`) on stderr; return when there are none."""
    found = spec.warnings(result)
    if not found:
        return
    lines = "\n".join(f"  - {w}" for w in found)
    typer.secho(f"error: --strict: the run ended with {len(found)} warning{'s' if len(found) > 1 else ''} (its "
                f"outputs are in {out}):\n{lines}", err=True, fg=typer.colors.RED)
    raise typer.Exit(STRICT_EXIT)


def _saved_result(out: Path):
    """A result with the ``metrics`` of ``out/metrics.json`` (what the ranks of ``--gpus N`` wrote); metrics
    ``{}`` when there is none."""
    import json
    from types import SimpleNamespace

    try:
        metrics = json.loads((Path(out) / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        metrics = {}
    return SimpleNamespace(metrics=metrics if isinstance(metrics, dict) else {}, files={})


def print_summary(console, result, wall_s=None, method: Optional[str] = None) -> None:
    """Print the summary of a run of ``method`` (default: the default method; its
    :attr:`~meshlift.methods.spec.Method.summary_lines`):
    headline metrics, output paths and ``wall_s``, the command's wall time (default: since the process
    started, :func:`meshlift.cli.clock.process_seconds`: start-up, data, training, evaluation and export)."""
    from meshlift.methods.registry import get_method

    for line in get_method(method or _default_method()).summary_lines(
            result, process_seconds() if wall_s is None else wall_s):
        console.print(line)
