"""``meshlift poses INPUT --out DIR``: photos or a video without poses -> a posed COLMAP dataset (pycolmap)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def make_stage_progress(console=None):
    """A :class:`meshlift.poses.StageProgress` drawing one rich bar with ETA per stage (plain lines when the
    output is not a terminal)."""
    import time

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from meshlift.poses import StageProgress

    console = console or Console(stderr=True)

    class RichStageProgress(StageProgress):
        def __init__(self) -> None:
            self.progress = None
            self.task = None
            self.name, self.total, self.done, self.t0, self.last = "", 0, 0, 0.0, 0.0

        def start(self, stage: str, total: int) -> None:
            self.name, self.total, self.done, self.t0, self.last = stage, total, 0, time.perf_counter(), 0.0
            if not console.is_terminal:
                console.print(f"{stage}: {total if total else 'unknown number of'} steps")
                return
            self.progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                                     TimeRemainingColumn(), console=console, transient=False)
            self.progress.start()
            self.task = self.progress.add_task(stage, total=total or None)

        def advance(self, n: int = 1) -> None:
            n = min(n, self.total - self.done) if self.total else n  # mapping may re-register an image
            if n <= 0:
                return
            self.done += n
            if self.progress is not None:
                self.progress.update(self.task, advance=n)
                return
            now = time.perf_counter()
            if now - self.last >= 5.0 or (self.total and self.done >= self.total):
                self.last = now
                el = now - self.t0
                eta = f"  ETA {el / self.done * max(self.total - self.done, 0):.0f} s" if self.total and self.done else ""
                console.print(f"{self.name}: {self.done}/{self.total or '?'}  {el:.0f} s{eta}")

        def end(self) -> None:
            if self.progress is not None:
                if self.total:
                    self.progress.update(self.task, completed=max(self.done, self.total))
                else:
                    self.progress.update(self.task, total=max(self.done, 1), completed=max(self.done, 1))
                self.progress.stop()
                self.progress = None
            else:
                console.print(f"{self.name}: done in {time.perf_counter() - self.t0:.1f} s")

        def log(self, message: str) -> None:
            style = "yellow" if message.startswith("warning") else "dim"
            console.print(f"[{style}]{message}[/{style}]")

    return RichStageProgress()


def poses(
    input: Path = typer.Argument(..., help="Folder of photos (or with an images/ subfolder), or a video file."),
    out: Path = typer.Option(..., "--out", "-o", help="Output dataset folder (created; the input is never written)."),
    matcher: str = typer.Option("auto", "--matcher", help="auto, exhaustive, sequential (videos) or vocabtree."),
    camera_model: str = typer.Option("SIMPLE_RADIAL", "--camera-model",
                                     help="SIMPLE_PINHOLE, PINHOLE, SIMPLE_RADIAL, RADIAL, OPENCV, FULL_OPENCV, "
                                          "OPENCV_FISHEYE."),
    single_camera: Optional[bool] = typer.Option(None, "--single-camera/--per-image-camera",
                                                 help="One shared camera (default: for a video, and for photos "
                                                      "with one EXIF camera and focal length or none)."),
    max_image_size: Optional[int] = typer.Option(None, "--max-image-size",
                                                 help="Longest side for feature extraction (default 3200)."),
    fps: float = typer.Option(2.0, "--fps", help="Video: frames sampled per second."),
    max_frames: int = typer.Option(300, "--max-frames", help="Video: at most this many frames."),
    mask_dir: Optional[Path] = typer.Option(None, "--mask-dir",
                                            help="Masks named like the images; features only where white."),
    vocab_tree: Optional[Path] = typer.Option(None, "--vocab-tree", help="COLMAP vocabulary tree (--matcher vocabtree)."),
    transforms: bool = typer.Option(False, "--transforms", metavar="", help="Also write transforms.json (instant-ngp format)."),
    overwrite: bool = typer.Option(False, "--overwrite", metavar="", help="Replace an earlier poses result in --out."),
    json_output: bool = typer.Option(False, "--json", metavar="", help="Print the report as one JSON object."),
) -> None:
    """Estimate camera poses (pycolmap: SIFT, matching, incremental mapping) and write images/ +
    sparse/0/{cameras,images,points3D}.bin, a dataset every meshlift reader loads."""
    import json

    from rich.console import Console

    from meshlift.poses import PosesOptions, run_poses

    opts = PosesOptions(matcher=matcher, camera_model=camera_model, single_camera=single_camera,
                        max_image_size=max_image_size, fps=fps, max_frames=max_frames, mask_dir=mask_dir,
                        vocab_tree=vocab_tree, write_transforms=transforms)
    console = Console(soft_wrap=True)  # no hard line breaks in logs and pipes (paths stay whole)
    report = run_poses(input, out, opts, progress=make_stage_progress(), overwrite=overwrite)
    if json_output:
        typer.echo(json.dumps(report.to_dict()))
        return
    for line in report.lines():
        console.print(line)
    for w in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    console.print(f"[bold]dataset[/bold] {out}  (meshlift inspect {out}; meshlift reconstruct {out} --out RUN)")


def register(app: typer.Typer) -> None:
    """Add the ``poses`` subcommand to ``app``."""
    app.command("poses")(poses)
