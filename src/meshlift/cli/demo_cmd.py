"""`meshlift demo`: reconstruct a procedural object end to end, on the CPU by default (no files, no downloads).

The object (``meshlift.data.demo_object.make_demo_object``) is a genus-1 ring with surface bumps and a
procedural texture; it is rendered from cameras on a sphere under a procedural environment, reconstructed with
the ``demo`` preset (DMTet from the visual hull, material field, learned light, then textures), and compared
with the true shape (Chamfer-L1, F-score at 1% of its bounding-box diagonal). The true shape is written as
``OUT/gt_mesh.ply`` (world units, the mesh the metrics used), and the summary prints the
``meshlift eval mesh`` command that measures the GLB against it.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

#: The demo's ground-truth mesh in OUT.
GT_NAME = "gt_mesh.ply"


def clear_demo_outputs(out: Path) -> None:
    """What a demo re-run removes before it starts: the run's outputs
    (:func:`meshlift.methods.nvdiffrec.outputs.clear_outputs`) and :data:`GT_NAME`; other files stay."""
    from meshlift.methods.nvdiffrec.outputs import clear_outputs

    clear_outputs(Path(out))
    (Path(out) / GT_NAME).unlink(missing_ok=True)


def register(app: typer.Typer) -> None:
    """Add the `demo` subcommand to ``app``."""

    @app.command("demo")
    def demo(
        out: Path = typer.Option(Path("meshlift_demo"), "--out", "-o", help="Output folder (created)."),
        device: str = typer.Option("cpu", "--device", help="cpu, cuda or auto."),
        set_: Optional[List[str]] = typer.Option(None, "--set", "-s", help="FIELD=VALUE: override a field of the demo's config (repeatable; `meshlift reconstruct --help-config` lists them)."),
    ) -> None:
        """Reconstruct a procedural textured ring (on the CPU unless --device says cuda) and print PSNR, Chamfer, F-score and the GLB path."""
        from meshlift.cli import process

        process.pause_during_imports()  # until process.imports_done() below (console script only; cli/process.py)
        if device.strip().lower().startswith("cuda"):
            from meshlift.kernels.precompile import prime_in_background

            prime_in_background()  # Triton's install hash on a thread while the rest loads (kernels/precompile.py)
        from rich.console import Console

        from meshlift._threads import thread_note
        from meshlift.cli.reconstruct_cmd import make_monitor, print_summary
        from meshlift.data.demo_object import make_demo_object
        from meshlift.kernels import precompile
        from meshlift.methods.engine import resolve_device
        from meshlift.methods.nvdiffrec.config import apply_dict, parse_overrides
        from meshlift.methods.nvdiffrec.presets import get_preset
        from meshlift.methods.nvdiffrec.reconstruct import reconstruct, synthetic_problem

        from meshlift.methods.engine import prepare_output_dir

        console = Console(soft_wrap=True)  # no hard line breaks in logs and pipes (paths stay whole)
        # The demo regenerates the same deterministic result: it replaces an earlier demo in OUT, but a file
        # or an unwritable folder given as --out is refused before anything is built.
        if (Path(out) / "metrics.json").is_file():
            console.print(f"replacing the earlier demo in {out} (give --out DIR to keep it)")
        prepare_output_dir(out, resume=False, overwrite=True)  # reconstruct(overwrite=True) clears the old one
        (Path(out) / GT_NAME).unlink(missing_ok=True)  # and the demo's own ground truth (written again below)
        cfg = apply_dict(get_preset("demo"), {"device": device, **parse_overrides(list(set_ or []))})
        dev = resolve_device(cfg.device)
        monitor = make_monitor()
        if (note := thread_note()) is not None:
            monitor.log(note)
        # on an empty Triton cache the GPU kernels compile in background processes from here on
        warmup = precompile.start("nvdiffrec", dev, log=monitor.log)  # on CUDA: imports Triton and the kernels
        process.imports_done()  # the import-time heap leaves the collector's traversals (cli/process.py)
        monitor.log("building the demo object and rendering its target views")
        mesh = make_demo_object()
        data = synthetic_problem(mesh, cfg, dev, name="demo ring")
        # no checkpoint: the demo cannot resume (it is short and rebuilds its own input)
        result = reconstruct(cfg, out, overwrite=True, monitor=monitor, data=data, checkpoints=False)
        if warmup is not None:
            warmup.close()
        gt = _write_ground_truth(data.gt_mesh, out)  # what Chamfer and F-score were measured against
        print_summary(console, result)  # wall time since the process started
        glb = result.files.get("glb", Path(out) / "mesh.glb")
        samples = result.metrics.get("n_samples")
        console.print(f"ground truth {gt}: `meshlift eval mesh {glb} {gt}"
                      + (f" --samples {samples}" if samples else "") + "` measures the same")


def _write_ground_truth(gt_mesh, out: Path) -> Path:
    """Write the demo's true shape (positions and faces, world units: what the metrics compare with) as
    ``OUT/gt_mesh.ply``, so the summary's `meshlift eval mesh` hint has a file to compare with."""
    from meshlift.io.mesh import save_mesh
    from meshlift.structures.mesh import Mesh

    path = Path(out) / GT_NAME
    geometry = Mesh(v_pos=gt_mesh.v_pos.detach().cpu(), t_pos_idx=gt_mesh.t_pos_idx.cpu())
    save_mesh(path, geometry)
    return path
