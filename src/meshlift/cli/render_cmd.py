"""``meshlift render ASSET --data DATA --out DIR``: render an asset from a dataset's cameras (and metrics),
or a turntable (GIF + contact sheet).

ASSET is a mesh file (.obj/.glb/.ply/...), a 3D Gaussian splatting PLY (``point_cloud.ply``, the 3DGS
layout), or a reconstruction output folder (``mesh/mesh.obj`` or ``mesh.glb``, with ``probe.hdr``; or
``point_cloud.ply`` of ``--method gaussians``). Shading:

* ``splat`` (a Gaussian PLY): :func:`meshlift.renderers.gaussians.render_gaussian_views` at the stored SH
  degree (sRGB colours as trained), from the dataset's cameras in the PLY's world frame;

* ``pbr`` (default when a light is available: ``--light`` or the folder's ``probe.hdr``): the method's
  deferred split-sum renderer (``meshlift.renderers.mesh_pbr.render_mesh``), linear radiance encoded to sRGB;
* ``unlit`` (otherwise): albedo texture or vertex colours as stored (sRGB-encoded), or — for a mesh with
  neither — a grey headlight shading so the geometry reads.

Renders are composited on the dataset's background (``--background``), written as PNGs named like the
dataset's images so ``meshlift eval images`` can pair them, and, where the dataset has images, compared
with PSNR / SSIM / LPIPS (``metrics.json``).

Depth range: the dataset's own near/far when it has them (LLFF bounds); otherwise the asset's (a mesh's
bounding sphere; splats have no far plane), never the reader's estimate from the camera layout, which can
clip the asset. Warnings (the summary, ``warnings`` in the JSON and ``metrics.json``): invalid Gaussians
dropped from the PLY, values that look like another convention, renders that show only background where
the dataset's image does not (``blank_views``), a turntable with nothing visible. A file without faces
that is not a 3DGS PLY (a point cloud) is refused naming what it holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def render(
    asset: Path = typer.Argument(..., help="Mesh file, a 3DGS point_cloud.ply, or a reconstruction output folder "
                                 "(mesh/mesh.obj + probe.hdr, or point_cloud.ply)."),
    data: Path = typer.Option(None, "--data", help="Dataset whose cameras to render from (any format `meshlift inspect` reads)."),
    split: str = typer.Option("test", "--split", help="Which split's cameras: train, val or test."),
    out: Path = typer.Option(..., "--out", help="Output folder."),
    light: Path = typer.Option(None, "--light", help="Lat-long HDR probe for PBR shading (default: the run folder's probe.hdr, for the folder or a mesh file in it)."),
    mode: str = typer.Option("auto", "--mode", help="auto (pbr when a light exists; splats for a Gaussian PLY), "
                             "pbr or unlit."),
    background: str = typer.Option("white", "--background", help="white or black (also composites the dataset's RGBA images)."),
    downscale: float = typer.Option(1.0, "--downscale", help="Render (and compare) at 1/downscale of the dataset's resolution."),
    max_views: int = typer.Option(None, "--max-views", help="Render only the first N views of the split."),
    spp: int = typer.Option(1, "--spp", help="Supersampling per axis (pbr mode)."),
    turntable: bool = typer.Option(False, "--turntable", metavar="", help="Also write a turntable GIF and a contact-sheet PNG."),
    frames: int = typer.Option(36, "--frames", help="Turntable frames."),
    size: int = typer.Option(512, "--size", help="Turntable image size in pixels."),
    up: str = typer.Option("auto", "--up", help="Turntable up axis: y (OBJ/glTF), z (Blender/COLMAP scenes), or "
                           "auto (z when the asset's run trained on a Blender scene and kept its frame, else y)."),
    no_lpips: bool = typer.Option(False, "--no-lpips", metavar="", help="Skip LPIPS."),
    json_output: bool = typer.Option(False, "--json", metavar="", help="Print one JSON object."),
) -> None:
    """Render an asset from a dataset's cameras (PNGs + PSNR/SSIM/LPIPS where the dataset has images)
    and/or as a turntable."""
    import torch

    from meshlift.errors import ConfigError
    from meshlift.io.images import write_image
    from meshlift.io.jsonfile import dumps, write_json
    from meshlift.io.mesh import find_asset
    from meshlift.renderers.mesh_pbr import render_views, turntable_cameras

    if not Path(asset).exists():
        raise ConfigError(f"{asset} does not exist; give a mesh file (.obj, .glb, .ply, ...), a 3DGS "
                          "point_cloud.ply or a run's output folder")
    if data is None and not turntable:
        raise ConfigError("give --data DATASET (render its cameras) and/or --turntable")
    from meshlift.data.views import is_mesh_path

    if data is not None and is_mesh_path(data):
        raise ConfigError(f"--data {data}: is a mesh file; --data takes a photo dataset (a folder, a transforms "
                          ".json or poses_bounds.npy) whose cameras and images to compare with. For a run made "
                          "from a mesh, use --turntable, or `meshlift eval mesh ASSET MESH` for its geometry")
    if spp < 1:
        raise ConfigError(f"--spp must be >= 1 (samples per pixel axis), got {spp}")
    if turntable and (size < 8 or frames < 1):
        raise ConfigError(f"--size must be >= 8 pixels and --frames >= 1, got --size {size} --frames {frames}")
    if background not in ("white", "black"):
        raise ConfigError(f"--background must be white or black, got {background!r}")
    if mode not in ("auto", "pbr", "unlit"):
        raise ConfigError(f"--mode must be auto, pbr or unlit, got {mode!r}")
    if up not in ("y", "z", "auto"):
        raise ConfigError(f"--up must be y, z or auto, got {up!r}")
    up_note = None
    if up == "auto":
        up, up_note = _auto_up(Path(asset))
    from meshlift.methods.engine import prepare_output_dir

    prepare_output_dir(Path(out), resume=False, overwrite=True)  # a file or read-only --out: before loading
    bg = 1.0 if background == "white" else 0.0
    splats = _gaussian_asset(asset)
    env = None
    notes: list[str] = []  # warnings for the summary and the JSON (input repaired, nothing visible, ...)
    if splats is not None:  # a 3DGS point cloud: its own (sRGB) colours, no light
        from meshlift.renderers.gaussians import gaussian_turntable_cameras, render_gaussian_views
        from meshlift.structures.gaussians import Gaussians

        if mode == "pbr":
            raise ConfigError(f"{splats} is a Gaussian point cloud: it carries its own colours; use --mode auto")
        mesh_path, probe, mode = splats, None, "splat"
        gaussians = Gaussians(**_load_gaussians(splats, notes))
        # no far plane, a near plane from the Gaussians' extent: never the dataset's guessed depth range
        views_of = lambda cams: render_gaussian_views(gaussians, cams, bg)  # noqa: E731
        turntable_of = lambda: gaussian_turntable_cameras(gaussians, frames, size, up, elevation_deg=20.0)  # noqa: E731
        own_range = lambda cams: cams  # noqa: E731
    else:
        from meshlift.io.mesh import load_surface_mesh
        from meshlift.renderers.mesh_pbr import depth_range_around_mesh

        mesh_path, probe = find_asset(asset)
        probe = light or probe
        mesh = load_surface_mesh(mesh_path, "render draws meshes (or 3DGS point clouds), not bare points")
        if mode == "pbr" or (mode == "auto" and probe is not None):
            if probe is None:
                raise ConfigError("--mode pbr needs a light: --light PROBE.hdr (or probe.hdr in the asset folder)")
            from meshlift.io.hdr import read_hdr
            from meshlift.shading.light import EnvironmentLight

            latlong = read_hdr(probe)
            # cube faces of half the probe's height: its own angular resolution (a 90° face of H/2 texels
            # against H rows over 180°); more only adds prefilter memory
            res = max(16, min(256, int(latlong.shape[0]) // 2))
            env = EnvironmentLight.from_latlong(latlong, res, trainable=False)
            env.build_mips()
            mode = "pbr"
        else:
            mode = "unlit"
        views_of = lambda cams: render_views(mesh, cams, env, bg, mode, spp)  # noqa: E731
        turntable_of = lambda: turntable_cameras(mesh, frames, size, up, elevation_deg=20.0)  # noqa: E731
        own_range = lambda cams: depth_range_around_mesh(mesh, cams)  # noqa: E731
    out = Path(out)
    result: dict = {"asset": str(mesh_path), "mode": mode, "light": None if env is None else str(probe),
                    "background": background}
    from meshlift.renderers.blank import has_content, is_blank

    with torch.no_grad():
        if data is not None:
            from meshlift.data import load_scene
            from meshlift.metrics.image import psnr, ssim

            scene = load_scene(data, downscale=downscale, background=background)
            cams = scene.split_cameras(split)
            idx = scene.splits[split].tolist()
            if max_views is not None:
                cams, idx = cams[: max_views], idx[: max_views]
            if "depth_bounds" not in scene.metadata:
                # the dataset gives no depth range: the reader's estimate from the camera layout must not clip
                # the asset, so the range is the asset's own
                cams = own_range(cams)
            result["depth_range"] = "dataset" if "depth_bounds" in scene.metadata else "asset"
            lp = None
            if not no_lpips:
                from meshlift.metrics.lpips import lpips as lp
            per = []
            blank: list[str] = []
            for i, img in zip(idx, views_of(cams)):
                name = Path(scene.image_paths[i]).stem
                write_image(out / "renders" / f"{name}.png", img)
                row = {"name": name}
                gt_path = Path(scene.image_paths[i])
                if gt_path.is_file():
                    gt = scene.image(i).float()
                    row.update(psnr=float(psnr(img, gt)), ssim=float(ssim(img, gt)),
                               lpips=None if lp is None else float(lp(img, gt)))
                    if is_blank(img, bg) and has_content(gt, bg):
                        row["blank"] = True
                        blank.append(name)
                per.append(row)
            result["split"] = split
            result["num_views"] = len(per)
            if blank:
                notes.append(_blank_warning(blank, len(per), mesh_path, data))
            result["blank_views"] = blank
            scored = [r for r in per if "psnr" in r]
            if scored:
                for k in ("psnr", "ssim", "lpips"):
                    vals = [r[k] for r in scored if r.get(k) is not None]
                    result[k] = sum(vals) / len(vals) if vals else None
                result["per_image"] = per
        if turntable:
            from meshlift.io.images import write_turntable

            imgs = list(views_of(turntable_of()))
            if all(is_blank(img, bg) for img in imgs):
                notes.append(f"{mesh_path}: every turntable frame is background only: nothing of the asset is "
                             "visible (fully transparent or degenerate?)")
            gif, sheet = write_turntable(out, [img.numpy() for img in imgs], bg)
            result["turntable"] = str(gif)
            result["contact_sheet"] = str(sheet)
    result["warnings"] = notes
    if "per_image" in result:
        write_json(out / "metrics.json", result)
    if json_output:
        typer.echo(dumps(result))
        return
    from rich.console import Console

    console = Console(soft_wrap=True)  # no hard line breaks in logs and pipes (paths stay whole)
    lit = f", light {probe}" if env is not None else ""
    console.print(f"rendered {mesh_path} ({mode}{lit}, background {background})")
    if "num_views" in result:
        console.print(f"{result['num_views']} views of split {split!r} -> {out / 'renders'}")
    if result.get("psnr") is not None:
        lpv = result.get("lpips")
        console.print(f"PSNR {result['psnr']:.2f} dB  SSIM {result['ssim']:.4f}  LPIPS "
                      + ("n/a" if lpv is None else f"{lpv:.4f}") + f"  -> {out / 'metrics.json'}")
    if turntable:
        if up_note:
            console.print(up_note)
        console.print(f"turntable -> {result['turntable']}, contact sheet -> {result['contact_sheet']}")
    for n in notes:
        console.print(f"[yellow]warning:[/yellow] {n}")


def _load_gaussians(path: Path, notes: list) -> dict:
    """:func:`meshlift.io.gaussian_ply.load_gaussian_ply`, its warnings (invalid Gaussians dropped, values in
    another convention) appended to ``notes``."""
    import warnings

    from meshlift.errors import MeshliftWarning
    from meshlift.io.gaussian_ply import load_gaussian_ply

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MeshliftWarning)
        tensors = load_gaussian_ply(path)
    for w in caught:
        if issubclass(w.category, MeshliftWarning):
            notes.append(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return tensors


def _blank_warning(blank: list, total: int, asset, data) -> str:
    shown = ", ".join(blank[:6]) + (f", ... ({len(blank)} in all)" if len(blank) > 6 else "")
    return (f"{len(blank)} of {total} renders show only background where the dataset's images do not ({shown}): "
            f"{asset} is not in these cameras' view, so their scores measure the background. Check that the asset "
            f"was made from {data} (same world frame and scale; an asset exported with --up or rescaled is not)")


def _auto_up(asset: Path) -> tuple[str, Optional[str]]:
    """``--up auto``: ``("z", note)`` when the run that wrote ``asset`` (its ``config.json``, in the asset's
    folder or one of its two parents) trained on a Blender scene (Z-up world) and did not turn its exports
    to +Y (the surface method's ``up_axis``); else ``("y", None)``."""
    import json

    from meshlift.data import detect_format

    start = asset if asset.is_dir() else asset.parent
    for folder in (start, start.parent, start.parent.parent):
        cfg_path = folder / "config.json"
        if not cfg_path.is_file():
            continue
        try:
            cfg = json.loads(cfg_path.read_text())
            data = Path(cfg.get("data") or "")
            kept = str(cfg.get("up_axis", "keep")) == "keep"
            fmt = detect_format(data) if kept and str(data) and data.exists() else None
        except Exception:  # noqa: BLE001 - an unreadable config or dataset: the plain default
            return "y", None
        if fmt == "blender":
            return "z", (f"turntable up axis z: {cfg_path} says the run trained on a Blender scene ({data}), "
                         "whose world is Z-up (pass --up y to override)")
        return "y", None
    return "y", None


def _gaussian_asset(asset: Path):
    """The 3DGS PLY that ``asset`` names (the file, or ``point_cloud.ply`` in a folder without a mesh), or None."""
    from meshlift.io.gaussian_ply import is_gaussian_ply

    asset = Path(asset)
    if asset.is_file() and asset.suffix.lower() == ".ply" and is_gaussian_ply(asset):
        return asset
    if asset.is_dir() and not (asset / "mesh").is_dir() and not (asset / "mesh.glb").is_file():
        p = asset / "point_cloud.ply"
        if p.is_file() and is_gaussian_ply(p):
            return p
    return None


def register(app: typer.Typer) -> None:
    """Add the ``render`` subcommand to ``app``."""
    app.command("render")(render)
