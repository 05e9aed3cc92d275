"""`meshlift reconstruct`: two-pass surface reconstruction (DMTet/FlexiCubes + PBR materials + HDR light), or
3D Gaussian splatting with ``--method gaussians`` (:mod:`meshlift.methods.gaussians.reconstruct`), or MILo
(Gaussians → a textured mesh, by TSDF fusion or MILo's mesh in the loop) with ``--method milo``
(:mod:`meshlift.methods.milo.reconstruct`).

Configuration precedence: preset (``--preset``, CPU-sized with ``--quick``) → ``--config FILE`` (JSON/TOML)
→ ``--set field=value`` / trailing ``field=value`` arguments. With ``--resume`` the base is the run's saved
``config.json`` instead, still overridable (e.g. more iterations).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

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
                    elapsed = time.perf_counter() - self.t0
                    done = max(1, iteration - self.start)
                    eta = elapsed / done * (self.total - iteration)
                    console.print(f"{self.name}: {iteration}/{self.total}  loss {loss:.4f}  {_psnr_text(psnr)}  "
                                  f"{done / max(elapsed, 1e-9):.2f} it/s  ETA {eta:.0f} s")
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


def _help_config() -> str:
    from meshlift.methods.nvdiffrec.config import SurfaceConfig, config_to_dict, field_docs
    from meshlift.methods.nvdiffrec.presets import preset_names

    docs = field_docs()
    defaults = config_to_dict(SurfaceConfig())
    lines = ["SurfaceConfig fields (override with --set field=value):", ""]
    for name, doc in docs.items():
        lines.append(f"  {name} = {defaults[name]!r}\n      {doc}")
    lines.append("")
    lines.append("presets: " + ", ".join(preset_names()) + "  (each with --quick for a CPU-sized run)")
    return "\n".join(lines)


def resume_method(out: Path) -> Optional[str]:
    """The ``--method`` whose config class holds every field of ``out/config.json`` (the run ``--resume``
    would continue), or None when there is no readable saved config or no method fits. The smallest fitting
    class wins (milo's config extends the Gaussian one)."""
    import json

    path = Path(out) / "config.json"
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict):
        return None
    saved = saved.get("config", saved)
    from meshlift.methods.gaussians.config import GaussiansConfig
    from meshlift.methods.milo.config import MiloConfig
    from meshlift.methods.nvdiffrec.config import SurfaceConfig

    keys = {k.replace("densify.", "densify_") for k in saved}
    fits = [(len(c.__dataclass_fields__), name) for name, c in
            (("nvdiffrec", SurfaceConfig), ("gaussians", GaussiansConfig), ("milo", MiloConfig))
            if keys <= set(c.__dataclass_fields__)]
    return min(fits)[1] if fits else None


def register(app: typer.Typer) -> None:
    """Add the `reconstruct` subcommand to ``app``."""

    @app.command("reconstruct")
    def reconstruct(
        data: Optional[str] = typer.Argument(
            None, help="Dataset folder (NeRF/Blender, COLMAP, LLFF/NeRD, ...) or a mesh file (.obj/.glb/.ply) to reconstruct from synthetic views."
        ),
        overrides: Optional[List[str]] = typer.Argument(None, help="Config overrides field=value (like --set)."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (created)."),
        preset: Optional[str] = typer.Option(
            None, "--preset", "-p", help="spot, bob, *_fixlight, *_metal, spot_flexi, nerf, nerd (default: spot for "
            "a mesh file, nerd for an LLFF folder, nerf for other folders)."
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
        up: Optional[str] = typer.Option(None, "--up", help="The dataset's up axis (z, -y, ...): exported meshes "
                                         "are rotated so it becomes glTF's +Y (nvdiffrec; same as --set up_axis=)."),
        method: str = typer.Option("nvdiffrec", "--method", "-m", help="nvdiffrec (textured mesh, default), "
                                   "gaussians (3D Gaussian splatting: point_cloud.ply; presets gaussians, "
                                   "gaussians_tiny) or milo (Gaussians -> textured mesh, also from unmasked "
                                   "captures: fused surface-aligned Gaussians by default, --set extract=delaunay "
                                   "for MILo's mesh in the loop; presets verylowres, lowres, default, milo_tiny)."),
        simplify: Optional[int] = typer.Option(None, "--simplify", help="--method milo: decimate the final mesh "
                                               "to at most this many faces (same as --set simplify=N)."),
        bbox: Optional[str] = typer.Option(None, "--bbox", help="--method milo: the region of interest "
                                           "x0,y0,z0,x1,y1,z1 (dataset world units); the asset is the mesh cut to "
                                           "it (default: found from where the cameras look; same as --set bbox=)."),
        gpus: int = typer.Option(1, "--gpus", help="Train on N GPUs: relaunches this command under torchrun "
                                 "(data parallel; `batch` is the global batch over all GPUs; nvdiffrec and "
                                 "gaussians)."),
    ) -> None:
        """Reconstruct a textured PBR mesh (OBJ+MTL, GLB), an HDR light probe and metrics from posed images,
        train 3D Gaussians (--method gaussians), or Gaussians and a mesh from them (--method milo)."""
        from rich.console import Console

        from meshlift.errors import ConfigError

        console = Console(soft_wrap=True)  # no hard line breaks in logs and pipes (paths stay whole)
        if method not in ("nvdiffrec", "gaussians", "milo"):
            raise ConfigError(f"--method {method!r}: choose nvdiffrec, gaussians or milo")
        if simplify is not None and method != "milo":
            raise ConfigError("--simplify applies to --method milo only")
        if bbox is not None and method != "milo":
            raise ConfigError("--bbox applies to --method milo only (the region of interest of its mesh)")
        if gpus != 1 and method == "milo":
            raise ConfigError("--gpus applies to --method nvdiffrec and gaussians; --method milo trains in one "
                              "process (run it without --gpus)")
        if help_config:
            if method == "milo":
                from meshlift.methods.milo.reconstruct import help_config as milo_help

                typer.echo(milo_help())
            elif method == "gaussians":
                from meshlift.methods.gaussians.reconstruct import help_config as gaussians_help

                typer.echo(gaussians_help())
            else:
                typer.echo(_help_config())
            raise typer.Exit()
        if out is None:
            raise ConfigError("--out DIR is required (the folder the asset and metrics are written to)")
        if resume and overwrite:
            raise ConfigError("--resume and --overwrite exclude each other: continue the run, or replace it")
        from meshlift.methods.engine import prepare_output_dir

        prepare_output_dir(out, resume=resume, overwrite=overwrite)  # before anything is loaded
        if resume:
            saved_method = resume_method(out)
            if saved_method is not None and saved_method != method:
                raise ConfigError(f"--resume: {out} holds a --method {saved_method} run (its config.json); resume it "
                                  f"with --method {saved_method}, or write this --method {method} run to another --out")
        from meshlift.methods.distributed import env_rank, env_world_size, shutdown

        if gpus != 1 and env_world_size() == 1:  # not yet a rank: start the ranks and wait for them
            from meshlift.cli.launch import run_under_torchrun

            if data and not resume:  # an input the method cannot use: one line here, not one per rank
                if method == "nvdiffrec":
                    from meshlift.methods.nvdiffrec.reconstruct import check_input

                    check_input(data, camera_convention)
                else:
                    from meshlift.data.views import sniff_input

                    sniff_input(data)

            code = run_under_torchrun(gpus, echo=lambda line: console.print(f"[dim]{line}[/dim]"))
            raise typer.Exit(code)
        main_rank = env_rank() == 0  # under torchrun rank 0 alone reports
        from meshlift.methods.engine import INTERRUPT
        items = list(set_ or []) + list(overrides or [])
        if camera_convention is not None:
            items.append(f"camera_convention={camera_convention}")
        if up is not None:
            if method != "nvdiffrec":
                raise ConfigError("--up is implemented for the surface method's exports (--method nvdiffrec); "
                                  "gaussians and milo outputs stay in the dataset's world frame")
            items.append(f"up_axis={up}")
        if data is not None and "=" in data and not Path(data).exists():
            items.insert(0, data)
            data = None
        if data is not None:  # an unposed photo folder or a video: pose it first, kept in OUT/poses
            from meshlift.cli.poses_cmd import make_stage_progress
            from meshlift.poses import ensure_posed

            data = str(ensure_posed(data, out / "poses", progress=make_stage_progress(), log=console.print))
        if method == "milo":
            from meshlift.methods.gaussians.reconstruct import check_out_dir
            from meshlift.methods.milo import reconstruct as milo

            if simplify is not None:
                items.append(f"simplify={simplify}")
            if bbox is not None:
                items.append(f"bbox={bbox}")
            mcfg = milo.build_config(data or "", preset, quick, config, items, out=out, resume=resume)
            check_out_dir(out, resume=resume, overwrite=overwrite)
            with INTERRUPT:  # Ctrl-C: a checkpoint of the current step, then exit 130
                result = milo.reconstruct(mcfg, out, resume=resume, overwrite=overwrite, monitor=make_monitor())
            for line in milo.summary_lines(result):
                console.print(line)
            console.print(_wall_line())
            return
        if method == "gaussians":
            from meshlift.methods.gaussians import reconstruct as gs

            gcfg = gs.build_config(data or "", preset, quick, config, items, out=out, resume=resume)
            gs.check_out_dir(out, resume=resume, overwrite=overwrite)
            try:
                with INTERRUPT:
                    result = gs.reconstruct(gcfg, out, resume=resume, overwrite=overwrite,
                                            monitor=make_monitor() if main_rank else None)
            finally:
                shutdown()
            if main_rank:
                for line in gs.summary_lines(result):
                    console.print(line)
                console.print(_wall_line())
            return
        from meshlift.methods.nvdiffrec.reconstruct import build_config
        from meshlift.methods.nvdiffrec.reconstruct import reconstruct as run

        cfg = build_config(data or "", preset, quick, config, items, out=out, resume=resume)

        try:
            with INTERRUPT:
                result = run(cfg, out, resume=resume, overwrite=overwrite, monitor=make_monitor() if main_rank else None)
        finally:
            shutdown()
        if main_rank:
            print_summary(console, result)


def _wall_line(wall_s=None) -> str:
    """``wall time of this command N s``: ``wall_s``, or since the process started (start-up, data, training,
    evaluation and export, all of it; :func:`meshlift.cli.clock.process_seconds`)."""
    return f"wall time of this command {process_seconds() if wall_s is None else wall_s:.1f} s"


def print_summary(console, result, wall_s=None) -> None:
    """Print the headline metrics and output paths of a :class:`ReconstructionResult`; ``wall_s``: the
    command's wall time (default: since the process started, :func:`meshlift.cli.clock.process_seconds`:
    start-up, data, training, evaluation and export, all of it)."""

    m = result.metrics
    console.print(f"[bold]test PSNR[/bold] {m['psnr']:.2f} dB   [bold]SSIM[/bold] {m['ssim']:.4f}")
    if "fscore" in m:
        console.print(
            f"[bold]Chamfer-L1[/bold] {m['chamfer_l1']:.5f}   [bold]F-score[/bold] {m['fscore']:.4f} "
            f"(threshold {m.get('threshold', float('nan')):.5f}, 1% of the gt bbox diagonal; "
            f"{m.get('n_samples', 0):,} samples per surface: `meshlift eval mesh --samples` the same to compare)"
        )
    t = m.get("timings", {})
    if t:
        console.print(f"{_wall_line(wall_s)}; training time over all sessions "
                      f"(a resumed run adds up): pass 1 {t.get('pass1_s', 0):.1f} s, pass 2 {t.get('pass2_s', 0):.1f} s")
    if result.files:
        console.print(f"[bold]GLB[/bold] {result.files['glb']}")
        console.print(f"OBJ {result.files['obj']}   metrics {result.files['metrics']}")
