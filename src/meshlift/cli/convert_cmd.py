"""``meshlift convert IN``: clean, optionally decimate, and export a mesh as PLY / OBJ+MTL / GLB.

IN must hold a surface: a 3DGS ``point_cloud.ply``, a point cloud or an empty file is refused with one line
naming what it holds, and a result with no face left is not written.

Prints a before/after table (vertices, faces, components, watertight, manifold, bbox) and the files
written. Heavy imports happen inside the command.
"""

from __future__ import annotations

from pathlib import Path

import typer

_FORMATS = ("ply", "obj", "glb")


def convert(
    input: Path = typer.Argument(..., help="Mesh to convert: .ply, .obj (+.mtl), .glb/.gltf, .off or .stl."),
    out_dir: Path = typer.Option(None, "--out-dir", help="Output folder (default: next to IN)."),
    stem: str = typer.Option(None, "--stem", help="Output file name without suffix (default: IN's name)."),
    formats: str = typer.Option("ply,obj,glb", "--formats", help="Comma-separated output formats: ply, obj, glb."),
    simplify: int = typer.Option(None, "--simplify", help="Quadric decimation to at most N_FACES faces."),
    keep_components: float = typer.Option(
        0.02, "--keep-components",
        help="Remove connected components whose bbox diagonal is below FRAC of the whole mesh's (0 keeps all).",
    ),
    no_clean: bool = typer.Option(False, "--no-clean", metavar="", help="Skip cleaning (duplicates, degenerate faces, ...)."),
    up: str = typer.Option(
        "keep", "--up",
        help="The input's up axis (y, z, -y, -z, x, -x): rotate so it becomes +Y, as glTF expects. "
             "'keep' (default) writes the coordinates unchanged.",
    ),
    json_output: bool = typer.Option(False, "--json", metavar="", help="Print one JSON object instead of tables."),
) -> None:
    """Clean a mesh (merge duplicate vertices, drop degenerate/duplicate faces, repair non-manifold edges,
    remove small components, drop NaN vertices), optionally decimate it, and write PLY/OBJ/GLB."""
    from meshlift.io.jsonfile import dumps
    import warnings

    from meshlift.errors import ConfigError
    from meshlift.errors import MeshError
    from meshlift.io.mesh import load_surface_mesh, save_mesh
    from meshlift.geometry.transforms import UP_AXES
    from meshlift.mesh.clean import clean_mesh
    from meshlift.mesh.orient import to_y_up
    from meshlift.mesh.simplify import simplify_mesh
    from meshlift.mesh.stats import mesh_stats

    fmts = [f.strip().lower().lstrip(".") for f in formats.split(",") if f.strip()]
    bad = [f for f in fmts if f not in _FORMATS]
    if bad or not fmts:
        raise ConfigError(f"--formats: unknown format(s) {bad or formats!r}; choose from {', '.join(_FORMATS)}")
    if not 0.0 <= keep_components <= 1.0:
        raise ConfigError(f"--keep-components must be in [0, 1], got {keep_components}")
    if simplify is not None and simplify < 1:
        raise ConfigError(f"--simplify must be a positive face count, got {simplify}")
    if up != "keep" and up.lower().lstrip("+") not in UP_AXES:
        raise ConfigError(f"--up {up!r}: choose keep or one of {', '.join(UP_AXES)} (the input's up axis)")
    if out_dir is not None:  # a file or an unwritable --out-dir: one line, before anything is loaded
        from meshlift.methods.engine import prepare_output_dir

        prepare_output_dir(Path(out_dir), resume=False, overwrite=True, option="--out-dir")
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # a 3DGS point_cloud.ply or another file without faces: refused, not written out as 0-face files
        mesh = load_surface_mesh(input, "convert cleans and exports triangle meshes")
        before = mesh_stats(mesh)
        clean_info = None
        if not no_clean:
            mesh, rep = clean_mesh(mesh, keep_components=keep_components)
            clean_info = {k: v for k, v in vars(rep).items() if k != "notes"}
        simplify_info = None
        if simplify is not None:
            mesh, simplify_info = simplify_mesh(mesh, simplify)
        if up != "keep":
            mesh = to_y_up(mesh, up)
            if up.lstrip("+") != "y":
                notes.append(f"rotated from {up} up to +Y up (glTF's convention); the rotation is recorded in "
                             "the GLB's asset.extras.meshlift.up_axis_conversion")
        elif "glb" in fmts and Path(input).suffix.lower() not in (".glb", ".gltf"):  # a glTF input is +Y up
            notes.append("coordinates kept as in the input (--up keep); glTF expects +Y up: pass --up z for a "
                         "Z-up input (Blender, 3ds Max, most CAD)")
        after = mesh_stats(mesh)
        if after["faces"] == 0:
            step = "simplification" if clean_info is None else "cleaning"
            raise MeshError(f"{input}: {step} left no face of its {before['faces']:,} (degenerate, duplicate or "
                            f"tiny components?): nothing to write. Check the input; --no-clean or "
                            "--keep-components 0 keep more of it")
        out = Path(out_dir) if out_dir is not None else input.resolve().parent
        name = stem or input.stem
        targets = [out / f"{name}.{f}" for f in fmts]
        if any(t.resolve() == input.resolve() for t in targets):
            if stem is not None:
                raise ConfigError(f"--stem {stem!r} would overwrite the input {input}; choose another stem or --out-dir")
            name = f"{input.stem}_meshlift"
            targets = [out / f"{name}.{f}" for f in fmts]
        written: list[str] = []
        for t in targets:
            written += [str(p) for p in save_mesh(t, mesh)]
    notes += [str(w.message) for w in caught]
    if json_output:
        typer.echo(dumps({
            "input": str(input), "before": before, "after": after, "clean": clean_info,
            "simplify": simplify_info, "written": written, "notes": notes,
        }))
        return
    from rich.console import Console
    from rich.table import Table

    def bbox(s: dict) -> str:
        if s["bbox_min"] is None:
            return "empty"
        lo = ", ".join(f"{x:.4g}" for x in s["bbox_min"])
        hi = ", ".join(f"{x:.4g}" for x in s["bbox_max"])
        return f"[{lo}] .. [{hi}]"

    table = Table(title=f"meshlift convert {input}")
    table.add_column("")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    for key in ("vertices", "faces", "components"):
        table.add_row(key, f"{before[key]:,}", f"{after[key]:,}")
    for key in ("watertight", "manifold", "winding_consistent"):
        table.add_row(key.replace("_", " "), "yes" if before[key] else "no", "yes" if after[key] else "no")
    vol = lambda s: "n/a (not closed)" if s["signed_volume"] is None else (  # noqa: E731
        f"{s['signed_volume']:.4g} ({'outward' if s['signed_volume'] > 0 else 'INSIDE OUT'})")
    table.add_row("signed volume", vol(before), vol(after))
    table.add_row("up axis", before["up_axis"], after["up_axis"])
    table.add_row("bbox", bbox(before), bbox(after))
    console = Console(soft_wrap=True)  # no hard line breaks in logs and pipes (paths stay whole)
    console.print(table)
    if clean_info:
        changed = {k: v for k, v in clean_info.items() if v}
        console.print("cleaned: " + (", ".join(f"{k.replace('_', ' ')} {v}" for k, v in changed.items()) or "nothing to fix"))
    if simplify_info:
        console.print(f"simplified: {simplify_info['faces_before']:,} -> {simplify_info['faces_after']:,} faces"
                      + ("" if simplify_info["uv_kept"] is None else f", UVs {'kept' if simplify_info['uv_kept'] else 'dropped'}"))
    for n in notes:
        console.print(f"[yellow]note:[/yellow] {n}")
    for w in written:
        console.print(f"wrote {w}")


def register(app: typer.Typer) -> None:
    """Add the ``convert`` subcommand to ``app``."""
    app.command("convert")(convert)
