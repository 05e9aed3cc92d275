"""``meshlift eval mesh PRED GT`` (Chamfer, F-score, normal consistency) and
``meshlift eval images PRED_DIR GT_DIR`` (PSNR, SSIM, LPIPS). Definitions: ``meshlift.metrics``."""

from __future__ import annotations

from pathlib import Path

import typer

eval_app = typer.Typer(help="Evaluate meshes (geometry) or renders (images) against ground truth.", no_args_is_help=True)


def _load_alignment(path: Path):
    import json

    import numpy as np

    from meshlift.errors import ConfigError

    try:
        if path.suffix.lower() == ".npy":
            m = np.load(path, allow_pickle=False)
        elif path.suffix.lower() == ".json":
            m = np.asarray(json.loads(path.read_text()), dtype=np.float64)
        else:
            m = np.loadtxt(path, dtype=np.float64)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--alignment {path}: cannot read a 4x4 matrix ({exc}); use .npy, .json or text") from exc
    if m.shape != (4, 4):
        raise ConfigError(f"--alignment {path}: expected a 4x4 matrix, got shape {m.shape}")
    return m


def _load_gt(gt: Path):
    """The ground truth of ``eval mesh``: a mesh or a point cloud (a scan), not 3DGS splats, not empty."""
    from meshlift.errors import MeshError
    from meshlift.io.mesh import load_mesh, not_a_surface_message
    from meshlift.io.ply_header import ply_contents

    need = "the ground truth of eval mesh is a surface or a scanned point cloud"
    info = ply_contents(gt) if gt.suffix.lower() == ".ply" and gt.is_file() else None
    if info is not None and info.kind in ("gaussians", "empty"):
        raise MeshError(not_a_surface_message(gt, need))
    mesh = load_mesh(gt)
    if mesh.num_vertices == 0:
        raise MeshError(f"{gt}: holds no vertices and no faces (an empty file); {need}. Export it again")
    return mesh


def _load_pred(pred: Path):
    """The prediction of ``eval mesh``: a surface; an empty file (a reconstruction that produced nothing) is
    scored (F-score 0, with a message), a point cloud or 3DGS splats are refused."""
    import torch

    from meshlift.io.mesh import load_surface_mesh
    from meshlift.io.ply_header import ply_contents
    from meshlift.structures.mesh import Mesh

    info = ply_contents(pred) if pred.suffix.lower() == ".ply" and pred.is_file() else None
    if info is not None and info.kind == "empty":
        return Mesh(v_pos=torch.zeros(0, 3), t_pos_idx=torch.zeros(0, 3, dtype=torch.int64))
    return load_surface_mesh(pred, "eval mesh samples the predicted surface")


@eval_app.command("mesh")
def eval_mesh(
    pred: Path = typer.Argument(..., help="Predicted mesh with faces (.ply/.obj/.glb/.off/.stl; not a point cloud "
                                "or a 3DGS point_cloud.ply)."),
    gt: Path = typer.Argument(..., help="Ground-truth mesh, or a point cloud (PLY without faces)."),
    threshold: float = typer.Option(None, "--threshold", help="F-score distance, absolute, in GT units."),
    threshold_frac: float = typer.Option(None, "--threshold-frac", help="F-score distance as a fraction of GT's bbox diagonal (default 0.01)."),
    samples: int = typer.Option(200_000, "--samples", help="Uniform surface samples per mesh."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed."),
    alignment: Path = typer.Option(None, "--alignment", help="4x4 matrix (.npy/.json/.txt) applied to PRED first."),
    crop_box: str = typer.Option(None, "--crop-box", help="Evaluate inside 'xmin,ymin,zmin,xmax,ymax,zmax' (GT frame) only."),
    json_output: bool = typer.Option(False, "--json", metavar="", help="Print one JSON object."),
) -> None:
    """Chamfer L1/L2, precision, recall, F-score and normal consistency from uniform surface samples."""
    from meshlift.io.jsonfile import dumps
    from meshlift.errors import ConfigError
    from meshlift.metrics.geometry import mesh_metrics

    if threshold is not None and threshold_frac is not None:
        raise ConfigError("give either --threshold or --threshold-frac, not both")
    if samples <= 0:
        raise ConfigError(f"--samples {samples}: must be a positive number of surface samples (default 200000)")
    box = None
    if crop_box is not None:
        try:
            vals = [float(x) for x in crop_box.split(",")]
        except ValueError as exc:
            raise ConfigError(f"--crop-box {crop_box!r}: not six comma-separated numbers") from exc
        if len(vals) != 6:
            raise ConfigError(f"--crop-box {crop_box!r}: need six numbers xmin,ymin,zmin,xmax,ymax,zmax")
        box = (vals[:3], vals[3:])
    res = mesh_metrics(
        _load_pred(pred), _load_gt(gt), threshold=threshold,
        threshold_frac=0.01 if threshold_frac is None else threshold_frac, n_samples=samples, seed=seed,
        alignment=None if alignment is None else _load_alignment(alignment), crop_box=box,
    )
    res = {"pred": str(pred), "gt": str(gt), **res}
    if json_output:
        typer.echo(dumps(res))
        return
    from rich.console import Console
    from rich.table import Table

    fmt = lambda v: "n/a" if v is None else f"{v:.6g}"  # noqa: E731
    table = Table(title=f"meshlift eval mesh {pred.name} vs {gt.name}", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    for k in ("chamfer_l1", "chamfer_l2", "precision", "recall", "fscore", "normal_consistency"):
        table.add_row(k, fmt(res[k]))
    how = "absolute" if res["threshold_frac"] is None else f"{res['threshold_frac']:g} x bbox diagonal {res['gt_bbox_diagonal']:.4g}"
    table.add_row("threshold", f"{res['threshold']:.6g} ({how})")
    table.add_row("samples", f"pred {res['n_pred_points']:,}, gt {res['n_gt_points']:,} (seed {res['seed']})")
    console = Console(soft_wrap=True)  # no hard line breaks in logs and pipes (paths stay whole)
    console.print(table)
    if res["message"]:
        console.print(f"[yellow]note:[/yellow] {res['message']}")


def _list_images(folder: Path) -> dict:
    from meshlift.errors import ImageError
    from meshlift.io.images import IMAGE_EXTENSIONS

    if not folder.is_dir():
        raise ImageError(f"{folder}: not a folder of images; give a folder holding the PNG/JPG files (e.g. a run's "
                         "renders/ folder)")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())
    out: dict = {}
    for p in files:
        out.setdefault(p.stem, p)
    return out


def _to_rgb(img, bg: float):
    """[H, W, C] -> [H, W, 3]: alpha composited on ``bg`` (straight alpha), grey expanded."""
    c = img.shape[-1]
    if c in (2, 4):
        a = img[..., -1:]
        img = img[..., :-1] * a + bg * (1.0 - a)
    if img.shape[-1] == 1:
        img = img.expand(*img.shape[:-1], 3)
    return img


@eval_app.command("images")
def eval_images(
    pred_dir: Path = typer.Argument(..., help="Folder of rendered images."),
    gt_dir: Path = typer.Argument(..., help="Folder of ground-truth images (matched by file name without suffix)."),
    background: str = typer.Option("white", "--background", help="Background for RGBA images: white or black."),
    no_lpips: bool = typer.Option(False, "--no-lpips", metavar="", help="Skip LPIPS (faster)."),
    json_output: bool = typer.Option(False, "--json", metavar="", help="Print one JSON object."),
) -> None:
    """PSNR (mean of per-image values), SSIM (11x11 Gaussian, sigma 1.5) and LPIPS (AlexNet) of matched images.
    JSON output is strict: the PSNR of identical images (infinite) is written as null. A rendered image that is
    background only where its ground truth is not is a warning (``blank_images``, ``warnings``)."""
    from meshlift.io.jsonfile import dumps
    from meshlift.errors import ConfigError, ImageError
    from meshlift.io.images import read_image
    from meshlift.metrics.image import psnr, ssim
    from meshlift.renderers.blank import has_content, is_blank

    if background not in ("white", "black"):
        raise ConfigError(f"--background must be white or black, got {background!r}")
    bg = 1.0 if background == "white" else 0.0
    preds, gts = _list_images(pred_dir), _list_images(gt_dir)
    names = sorted(set(preds) & set(gts))
    if not names:
        raise ImageError(
            f"no image names in {pred_dir} match {gt_dir} ({len(preds)} vs {len(gts)} images); "
            "images are matched by file name without suffix"
        )
    lp = None
    if not no_lpips:
        from meshlift.metrics.lpips import lpips as lp
    per = []
    for n in names:
        a = _to_rgb(read_image(preds[n]), bg)
        b = _to_rgb(read_image(gts[n]), bg)
        if a.shape != b.shape:
            raise ImageError(
                f"{preds[n].name}: {a.shape[1]}x{a.shape[0]} but the ground truth {gts[n]} is "
                f"{b.shape[1]}x{b.shape[0]}; render at the ground truth's resolution"
            )
        row = {"name": n, "psnr": float(psnr(a, b)), "ssim": float(ssim(a, b))}
        row["lpips"] = None if lp is None else float(lp(a.float(), b.float()))
        if is_blank(a, bg) and has_content(b, bg):
            row["blank"] = True
        per.append(row)
    mean = lambda k: None if per[0][k] is None else sum(r[k] for r in per) / len(per)  # noqa: E731
    res = {
        "psnr": mean("psnr"), "ssim": mean("ssim"), "lpips": mean("lpips"), "background": background,
        "num_images": len(per), "unmatched_pred": len(preds) - len(names), "unmatched_gt": len(gts) - len(names),
        "per_image": per,
    }
    blank = [r["name"] for r in per if r.get("blank")]
    res["blank_images"] = blank
    res["warnings"] = [] if not blank else [
        f"{len(blank)} of {len(per)} images in {pred_dir} are background only ({background}) where the ground truth "
        f"is not ({', '.join(blank[:6])}{' ...' if len(blank) > 6 else ''}): the asset was not in view when they "
        "were rendered (another world frame or scale, or clipped), so their scores measure the background"]
    if json_output:
        typer.echo(dumps(res))
        return
    from rich.console import Console
    from rich.table import Table

    fmt = lambda v, d: "n/a" if v is None else f"{v:.{d}f}"  # noqa: E731
    table = Table(title=f"meshlift eval images ({len(per)} images, background {background})")
    for c in ("image", "PSNR", "SSIM", "LPIPS"):
        table.add_column(c, justify="left" if c == "image" else "right")
    if len(per) <= 30:
        for r in per:
            table.add_row(r["name"], fmt(r["psnr"], 2), fmt(r["ssim"], 4), fmt(r["lpips"], 4))
    table.add_row("[bold]mean[/bold]", fmt(res["psnr"], 2), fmt(res["ssim"], 4), fmt(res["lpips"], 4))
    console = Console(soft_wrap=True)  # no hard line breaks in logs and pipes (paths stay whole)
    console.print(table)
    if res["unmatched_pred"] or res["unmatched_gt"]:
        console.print(f"[yellow]note:[/yellow] unmatched images: {res['unmatched_pred']} in {pred_dir}, {res['unmatched_gt']} in {gt_dir}")
    for w in res["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {w}")


def register(app: typer.Typer) -> None:
    """Add the ``eval`` command group (``eval mesh``, ``eval images``) to ``app``."""
    app.add_typer(eval_app, name="eval")
