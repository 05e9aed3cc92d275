"""``meshlift inspect PATH [--json]``: detect a dataset's format and describe what loads.

Reads cameras and image headers only (no image is decoded), so it is fast on large datasets.
"""

from __future__ import annotations

from pathlib import Path

import typer


def inspect(
    path: Path = typer.Argument(..., help="Dataset folder (Blender, instant-ngp/nerfstudio, COLMAP, LLFF) or file."),
    json_output: bool = typer.Option(False, "--json", metavar="", help="Print one JSON object instead of a table."),
    format: str = typer.Option(None, "--format", help="Force a format: blender, instant-ngp, colmap, llff."),
    downscale: float = typer.Option(1.0, "--downscale", help="Inspect as loaded at 1/downscale resolution."),
    colmap_model: str = typer.Option(None, "--colmap-model", help="COLMAP model folder relative to PATH."),
    split_every: int = typer.Option(8, "--split-every", help="Every N-th image is test when the dataset has no splits."),
    camera_convention: str = typer.Option(
        "opengl", "--camera-convention",
        help="Axes of transforms.json camera-to-world matrices: opengl (the format's definition) or opencv."),
) -> None:
    """Describe a dataset: format, images, resolution, camera model, splits, masks, bounds, warnings."""
    from meshlift.data import load_scene
    from meshlift.io.jsonfile import dumps
    from meshlift.io.mesh import READ_SUFFIXES

    if path.is_file() and path.suffix.lower() in READ_SUFFIXES:
        _inspect_mesh(path, json_output)
        return
    if _inspect_run_folder(path, json_output):
        return
    scene = load_scene(path, format=format, downscale=downscale, colmap_model=colmap_model, split_every=split_every,
                       camera_convention=camera_convention)
    info = scene.summary()
    if json_output:
        typer.echo(dumps(info, indent=None))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"meshlift inspect {path}", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    sp = info["splits"]
    model = info["camera_model"]
    if info["undistorted"]:
        model += " (undistorted to PINHOLE on load)"
    res = f"{info['width']} x {info['height']} (W x H)"
    if info.get("undistort_crop"):
        x0, y0, x1, y1 = info["undistort_crop"]
        sw, sh = info["source_size"]
        res += f": the valid window x {x0}..{x1}, y {y0}..{y1} of the {sw} x {sh} photos after undistortion"
    b = info["bounds"]
    rows = [
        ("format", info["format"]),
        ("images", str(info["num_images"])),
        ("resolution", res),
        ("camera model", model),
        ("focal (px)", f"{info['focal'][0]:.2f}, {info['focal'][1]:.2f}"),
        ("splits", f"train {sp['train']}, val {sp['val']}, test {sp['test']}"),
        ("masks", "yes" if info["has_masks"] else "no"),
        ("bounds", "[" + ", ".join(f"{v:.3g}" for v in b["min"]) + "] .. [" + ", ".join(f"{v:.3g}" for v in b["max"]) + "]"),
        ("bounds from", info["normalization"].get("method", "")),
        ("SfM points", f"{info['sfm_points']:,}" if info["sfm_points"] else "none"),
        ("cameras", _camera_row(scene.metadata.get("camera_check", {}))),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console = Console(soft_wrap=True)  # no hard line breaks in logs and pipes (paths stay whole)
    console.print(table)
    for w in info["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {w}")


def _inspect_run_folder(path: Path, json_output: bool) -> bool:
    """A meshlift run folder (its ``config.json`` records the method) is not a dataset: summarise the run —
    method, input, headline metrics and warnings from ``metrics.json``, the outputs present and the images to
    look at — instead of "no dataset found". Returns False when ``path`` is not a run folder."""
    import json

    from meshlift.errors import DatasetError
    from meshlift.io.jsonfile import dumps
    from meshlift.methods.registry import method_of_run
    from meshlift.methods.spec import look_line

    if not path.is_dir() or not (path / "config.json").is_file():
        return False
    from meshlift.data import detect_format

    try:
        detect_format(path)
        return False  # a dataset that also holds a config.json
    except DatasetError:
        pass
    method = method_of_run(path)
    if method is None:
        return False
    try:
        data = json.loads((path / "config.json").read_text()).get("data")
    except (OSError, ValueError):
        data = None
    metrics, note = {}, None
    if (path / "metrics.json").is_file():
        try:
            metrics = json.loads((path / "metrics.json").read_text())
        except (OSError, ValueError) as e:
            note = f"metrics.json unreadable ({e})"
    else:
        note = "no metrics.json: the run has not finished (continue it with meshlift reconstruct --resume)"
    keys = ("psnr", "ssim", "lpips", "mesh_psnr", "mesh_psnr_diffuse", "mesh_psnr_unrefined", "gaussian_psnr",
            "gaussian_psnr_sh0", "fscore", "chamfer_l1", "steps", "gaussians", "faces", "scene_faces")
    head = {k: metrics[k] for k in keys if isinstance(metrics.get(k), (int, float))}
    files = [n for n in ("mesh.glb", "mesh/mesh.obj", "mesh.obj", "mesh.ply", "point_cloud.ply", "scene_mesh.ply",
                         "probe.hdr", "checkpoint.pt") if (path / n).is_file()]
    info = {"format": "meshlift_run", "path": str(path), "method": method, "data": data, "metrics": head,
            "warnings": list(metrics.get("warnings", [])), "outputs": files, "note": note}
    if json_output:
        typer.echo(dumps(info, indent=None))
        return True
    typer.echo(f"{path}: a meshlift run (--method {method}" + (f", data {data}" if data else "") + "), not a dataset")
    if head:
        typer.echo("metrics: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v:,}"
                                           for k, v in head.items()))
    for w in info["warnings"]:
        typer.echo(f"warning: {w}")
    if note:
        typer.echo(note)
    if files:
        typer.echo("outputs: " + ", ".join(files) + (f" (inspect one: meshlift inspect {path / files[0]})"))
    # a MILo run's side-by-side (what its summary names) where it has one, else the mesh render alone
    mesh_view = (("compare/*.png", "mesh | Gaussians | target at a test view") if any(path.glob("compare/*.png"))
                 else ("mesh_renders/*.png", "mesh at a test view"))
    look = look_line(path, [("images/end_*.png", "target | ours"), mesh_view,
                            ("images/preview_*.png", "latest preview"), ("loss_curve.png", "the losses")],
                     markup=False)
    if look:
        typer.echo(look)
    return True


def _inspect_mesh(path: Path, json_output: bool) -> None:
    """A mesh file is not a dataset: say what it holds (a mesh, a 3DGS point cloud, a point cloud, nothing)
    and what to run on it."""
    from meshlift.io.jsonfile import dumps
    from meshlift.io.mesh import load_mesh
    from meshlift.io.ply_header import ply_contents

    contents = ply_contents(path) if path.suffix.lower() == ".ply" else None
    if contents is not None and contents.kind == "gaussians":
        _inspect_gaussians(path, json_output)
        return
    mesh = load_mesh(path)
    kind = "mesh" if mesh.num_faces else ("point_cloud" if mesh.num_vertices else "empty")
    finite = mesh.v_pos[mesh.v_pos.isfinite().all(dim=1)] if mesh.num_vertices else mesh.v_pos
    lo, hi = (finite.amin(0).tolist(), finite.amax(0).tolist()) if len(finite) else (None, None)
    info = {"format": kind, "path": str(path), "vertices": int(mesh.num_vertices), "faces": int(mesh.num_faces),
            "uvs": mesh.v_tex is not None, "vertex_colors": mesh.v_color is not None,
            "material": mesh.material is not None, "bounds": {"min": lo, "max": hi}}
    if json_output:
        typer.echo(dumps(info, indent=None))
        return
    what = {"mesh": "a mesh", "point_cloud": "a point cloud (no faces)", "empty": "an empty file"}[kind]
    bounds = ("no vertices" if lo is None else "bounds [" + ", ".join(f"{v:.3g}" for v in lo) + "] .. ["
              + ", ".join(f"{v:.3g}" for v in hi) + "]")
    typer.echo(f"{path}: {what}, {info['vertices']:,} vertices, {info['faces']:,} faces; UVs "
               f"{'yes' if info['uvs'] else 'no'}, vertex colours {'yes' if info['vertex_colors'] else 'no'}, "
               f"material {'yes' if info['material'] else 'no'}; {bounds}")
    if kind == "mesh":
        typer.echo(f"Not a dataset of photos. To reconstruct it from rendered views: meshlift reconstruct {path} "
                   f"--out out/{Path(path).stem}; to clean or convert it: meshlift convert {path} --out-dir OUT")
    else:
        typer.echo("Not a dataset of photos, and no surface: meshlift's mesh commands (reconstruct from a mesh, "
                   "convert, render, eval mesh as the prediction) need faces")


def _inspect_gaussians(path: Path, json_output: bool) -> None:
    """A 3DGS point cloud: its Gaussians, SH degree, bounds, what the reader repaired, what to run."""
    import warnings

    from meshlift.errors import MeshliftWarning
    from meshlift.io.gaussian_ply import load_gaussian_ply
    from meshlift.io.jsonfile import dumps
    from meshlift.io.ply_header import counted

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MeshliftWarning)
        g = load_gaussian_ply(path)
    notes = [str(w.message) for w in caught if issubclass(w.category, MeshliftWarning)]
    k = g["shN"].shape[1] + 1
    degree = int(round(k ** 0.5)) - 1
    lo, hi = g["means"].amin(0).tolist(), g["means"].amax(0).tolist()
    info = {"format": "gaussians", "path": str(path), "gaussians": int(g["means"].shape[0]), "sh_degree": degree,
            "bounds": {"min": lo, "max": hi}, "warnings": notes}
    if json_output:
        typer.echo(dumps(info, indent=None))
        return
    typer.echo(f"{path}: a 3D Gaussian splatting point cloud, {counted(info['gaussians'], 'Gaussian')}, SH degree {degree}; "
               "bounds of the centres [" + ", ".join(f"{v:.3g}" for v in lo) + "] .. ["
               + ", ".join(f"{v:.3g}" for v in hi) + "]")
    for n in notes:
        typer.echo(f"warning: {n}")
    typer.echo(f"Not a dataset of photos, and not a mesh. To look at it: meshlift render {path} --turntable --out DIR; "
               f"from a dataset's cameras: meshlift render {path} --data DATA --out DIR")


def _camera_row(chk: dict) -> str:
    if not chk:
        return "not checked"
    if chk.get("facing_fraction") is None:
        return chk["verdict"]
    txt = f"{chk['verdict']}: {chk['facing_fraction']:.0%} face the scene centre ({chk['centre_source']})"
    if chk.get("up_spread_deg") is not None:
        txt += f", up vectors within {chk['up_spread_deg']:.0f}° (median)"
    return txt


def register(app: typer.Typer) -> None:
    """Add the ``inspect`` subcommand to ``app``."""
    app.command("inspect")(inspect)
