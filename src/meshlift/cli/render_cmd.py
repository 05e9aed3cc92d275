"""``meshlift render ASSET --data DATA --out DIR``: render an asset from a dataset's cameras (and metrics),
or a turntable (GIF + contact sheet).

ASSET is a mesh file (.obj/.glb/.ply/...) or a reconstruction output folder (``mesh/mesh.obj`` or
``mesh.glb``, with ``probe.hdr``). Shading:

* ``pbr`` (default when a light is available: ``--light`` or the folder's ``probe.hdr``): the method's
  deferred split-sum renderer (``meshlift.methods.renderer.render_mesh``), linear radiance encoded to sRGB;
* ``unlit`` (otherwise): albedo texture or vertex colours as stored (sRGB-encoded), or — for a mesh with
  neither — a grey headlight shading so the geometry reads.

Renders are composited on the dataset's background (``--background``), written as PNGs named like the
dataset's images so ``meshlift eval images`` can pair them, and, where the dataset has images, compared
with PSNR / SSIM / LPIPS (``metrics.json``).
"""

from __future__ import annotations

from pathlib import Path

import typer


def _find_asset(asset: Path):
    """(mesh path, light path or None) of a mesh file or a reconstruction folder."""
    from meshlift.errors import MeshError
    from meshlift.io.mesh import READ_SUFFIXES

    if asset.is_file():
        return asset, None
    if not asset.is_dir():
        raise MeshError(f"{asset}: not a mesh file or a folder")
    for cand in (asset / "mesh" / "mesh.obj", asset / "mesh.glb", asset / "mesh.obj"):
        if cand.is_file():
            break
    else:
        found = sorted(p for p in asset.iterdir() if p.suffix.lower() in READ_SUFFIXES)
        if not found:
            raise MeshError(f"{asset}: no mesh found (expected mesh/mesh.obj or mesh.glb, as reconstructions write)")
        cand = found[0]
    probe = asset / "probe.hdr"
    return cand, (probe if probe.is_file() else None)


def _render_unlit(mesh, world_to_clip, forward, resolution, bg, kd_mip=None):
    """Unlit render of one batch: ``[B, H, W, 3]`` sRGB-encoded in [0, 1], antialiased silhouettes."""
    import torch

    from meshlift import render as R
    from meshlift.shading.color import linear_to_srgb

    H, W = resolution
    tri = mesh.t_pos_idx.to(torch.int32)
    pos = R.transform_pos(world_to_clip.float(), mesh.v_pos.float())
    rast, rast_db = R.rasterize(pos, tri, (H, W))
    cov = (rast[..., 3:4] > 0).float()
    mat = mesh.material
    if mat is not None and mesh.v_tex is not None:
        uv, uv_da = R.interpolate(mesh.v_tex.float(), rast, mesh.t_tex_idx.to(torch.int32), rast_db=rast_db, diff_attrs="all")
        if kd_mip is None:
            kd_mip = R.texture_construct_mip(mat.kd[None, ..., :3].float().contiguous())
        kd = R.texture(kd_mip[0], uv, uv_da, mip=kd_mip, filter_mode="linear-mipmap-linear")
        col = linear_to_srgb(kd.clamp(0, 1))
    elif mesh.v_color is not None:
        c, _ = R.interpolate(mesh.v_color[:, :3].float(), rast, tri)
        col = linear_to_srgb(c.clamp(0, 1))
    else:
        v = mesh.v_pos.float()
        fn = torch.nn.functional.normalize(torch.cross(v[tri[:, 1].long()] - v[tri[:, 0].long()],
                                                       v[tri[:, 2].long()] - v[tri[:, 0].long()], dim=-1), dim=-1)
        n = R.render_face_normals(fn, rast)
        facing = (n * forward[:, None, None, :]).sum(-1, keepdim=True).abs()
        col = (0.15 + 0.7 * facing).expand(*facing.shape[:3], 3)
    img = col * cov + bg * (1.0 - cov)
    return R.antialias(img.contiguous(), rast, pos, tri).clamp(0, 1)


def _render_views(mesh, cams, light, bg, mode: str, spp: int):
    """Render every camera of ``cams`` one view at a time; yields ``[H, W, 3]`` sRGB images."""
    import torch

    from meshlift.shading.color import linear_to_srgb

    H, W = cams.height, cams.width
    w2c_all = cams.world_to_clip()
    centers = cams.camera_centers()
    fwd = cams.forward_directions()
    bg_t = torch.tensor([bg] * 3, dtype=torch.float32)
    kd_mip = None
    if mode != "pbr" and mesh.material is not None and mesh.v_tex is not None:
        from meshlift import render as R

        kd_mip = R.texture_construct_mip(mesh.material.kd[None, ..., :3].float().contiguous())
    for i in range(len(cams)):
        if mode == "pbr":
            from meshlift.methods.renderer import render_mesh

            out = render_mesh(mesh, w2c_all[i: i + 1].float(), centers[i: i + 1].float(), (H, W), light=light,
                              background=torch.full((1, H, W, 3), float(bg)), spp=spp)
            yield linear_to_srgb(out["shaded"][0].clamp(0, 1))
        else:
            yield _render_unlit(mesh, w2c_all[i: i + 1], fwd[i: i + 1].float(), (H, W), bg_t, kd_mip)[0]


def _orbit_cameras(mesh, n: int, size: int, up: str, elevation_deg: float):
    import math

    import torch

    from meshlift.cameras import Cameras, intrinsics_matrix, look_at

    lo, hi = mesh.bbox()
    center = (lo + hi).double() / 2
    radius = float((hi - lo).double().norm()) / 2
    fov = math.radians(40.0)
    dist = radius / math.sin(fov / 2) * 1.05
    up_v = torch.tensor([0.0, 1.0, 0.0] if up == "y" else [0.0, 0.0, 1.0], dtype=torch.float64)
    a = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    b = torch.linalg.cross(up_v, a)
    el = math.radians(elevation_deg)
    eyes = []
    for k in range(n):
        t = 2 * math.pi * k / n
        d = math.cos(el) * (math.cos(t) * a + math.sin(t) * b) + math.sin(el) * up_v
        eyes.append(center + dist * d)
    w2c = look_at(torch.stack(eyes), center.expand(n, 3), up=tuple(up_v.tolist()))
    f = 0.5 * size / math.tan(fov / 2)
    K = intrinsics_matrix(f, f, size / 2, size / 2).expand(n, 3, 3)
    return Cameras(K=K, world_to_camera=w2c.float(), width=size, height=size,
                   near=max(dist - radius * 1.5, dist * 0.01), far=dist + radius * 1.5)


def render(
    asset: Path = typer.Argument(..., help="Mesh file, or a reconstruction output folder (mesh/mesh.obj, probe.hdr)."),
    data: Path = typer.Option(None, "--data", help="Dataset whose cameras to render from (any format `meshlift inspect` reads)."),
    split: str = typer.Option("test", "--split", help="Which split's cameras: train, val or test."),
    out: Path = typer.Option(..., "--out", help="Output folder."),
    light: Path = typer.Option(None, "--light", help="Lat-long HDR probe for PBR shading (default: ASSET/probe.hdr)."),
    mode: str = typer.Option("auto", "--mode", help="auto (pbr when a light exists), pbr or unlit."),
    background: str = typer.Option("white", "--background", help="white or black (also composites the dataset's RGBA images)."),
    downscale: float = typer.Option(1.0, "--downscale", help="Render (and compare) at 1/downscale of the dataset's resolution."),
    max_views: int = typer.Option(None, "--max-views", help="Render only the first N views of the split."),
    spp: int = typer.Option(1, "--spp", help="Supersampling per axis (pbr mode)."),
    turntable: bool = typer.Option(False, "--turntable", help="Also write a turntable GIF and a contact-sheet PNG."),
    frames: int = typer.Option(36, "--frames", help="Turntable frames."),
    size: int = typer.Option(512, "--size", help="Turntable image size in pixels."),
    up: str = typer.Option("y", "--up", help="Turntable up axis: y (OBJ/glTF) or z (Blender/COLMAP scenes)."),
    no_lpips: bool = typer.Option(False, "--no-lpips", help="Skip LPIPS."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Render an asset from a dataset's cameras (PNGs + PSNR/SSIM/LPIPS where the dataset has images)
    and/or as a turntable."""
    from meshlift.io.jsonfile import dumps, write_json

    import torch

    from meshlift.errors import ConfigError, DependencyError
    from meshlift.io.images import write_image
    from meshlift.io.mesh import load_mesh

    if data is None and not turntable:
        raise ConfigError("give --data DATASET (render its cameras) and/or --turntable")
    if background not in ("white", "black"):
        raise ConfigError(f"--background must be white or black, got {background!r}")
    if mode not in ("auto", "pbr", "unlit"):
        raise ConfigError(f"--mode must be auto, pbr or unlit, got {mode!r}")
    if up not in ("y", "z"):
        raise ConfigError(f"--up must be y or z, got {up!r}")
    mesh_path, probe = _find_asset(asset)
    probe = light or probe
    mesh = load_mesh(mesh_path)
    if mesh.num_faces == 0:
        raise ConfigError(f"{mesh_path}: the mesh has no faces; nothing to render")
    env = None
    if mode == "pbr" or (mode == "auto" and probe is not None):
        if probe is None:
            raise ConfigError("--mode pbr needs a light: --light PROBE.hdr (or probe.hdr in the asset folder)")
        try:
            from meshlift.shading.light import EnvironmentLight

            env = EnvironmentLight.load(probe, trainable=False)
            env.build_mips()
        except ImportError as exc:
            raise DependencyError(f"PBR rendering needs meshlift.io.hdr / shading.light ({exc}); use --mode unlit") from exc
        mode = "pbr"
    else:
        mode = "unlit"
    bg = 1.0 if background == "white" else 0.0
    out = Path(out)
    result: dict = {"asset": str(mesh_path), "mode": mode, "light": None if env is None else str(probe),
                    "background": background}
    with torch.no_grad():
        if data is not None:
            from meshlift.data import load_scene
            from meshlift.metrics.image import psnr, ssim

            scene = load_scene(data, downscale=downscale, background=background)
            cams = scene.split_cameras(split)
            idx = scene.splits[split].tolist()
            if max_views is not None:
                cams, idx = cams[: max_views], idx[: max_views]
            lp = None
            if not no_lpips:
                from meshlift.metrics.lpips import lpips as lp
            per = []
            for i, img in zip(idx, _render_views(mesh, cams, env, bg, mode, spp)):
                name = Path(scene.image_paths[i]).stem
                write_image(out / "renders" / f"{name}.png", img)
                row = {"name": name}
                gt_path = Path(scene.image_paths[i])
                if gt_path.is_file():
                    gt = scene.image(i).float()
                    row.update(psnr=float(psnr(img, gt)), ssim=float(ssim(img, gt)),
                               lpips=None if lp is None else float(lp(img, gt)))
                per.append(row)
            result["split"] = split
            result["num_views"] = len(per)
            scored = [r for r in per if "psnr" in r]
            if scored:
                for k in ("psnr", "ssim", "lpips"):
                    vals = [r[k] for r in scored if r.get(k) is not None]
                    result[k] = sum(vals) / len(vals) if vals else None
                result["per_image"] = per
                write_json(out / "metrics.json", result)
        if turntable:
            import imageio.v2 as imageio
            import numpy as np

            cams_t = _orbit_cameras(mesh, frames, size, up, elevation_deg=20.0)
            imgs = [(img.numpy() * 255 + 0.5).astype(np.uint8) for img in _render_views(mesh, cams_t, env, bg, mode, spp)]
            out.mkdir(parents=True, exist_ok=True)
            imageio.mimsave(out / "turntable.gif", imgs, duration=1.0 / 12, loop=0)
            pick = imgs[:: max(1, len(imgs) // 12)][:12]
            cols = min(4, len(pick))
            rows = (len(pick) + cols - 1) // cols
            sheet = np.full((rows * size, cols * size, 3), int(bg * 255), dtype=np.uint8)
            for k, im in enumerate(pick):
                r, c = divmod(k, cols)
                sheet[r * size:(r + 1) * size, c * size:(c + 1) * size] = im
            imageio.imwrite(out / "contact_sheet.png", sheet)
            result["turntable"] = str(out / "turntable.gif")
            result["contact_sheet"] = str(out / "contact_sheet.png")
    if json_output:
        typer.echo(dumps(result))
        return
    from rich.console import Console

    console = Console()
    console.print(f"rendered {mesh_path} ({mode}, background {background})")
    if "num_views" in result:
        console.print(f"{result['num_views']} views of split {split!r} -> {out / 'renders'}")
    if result.get("psnr") is not None:
        lpv = result.get("lpips")
        console.print(f"PSNR {result['psnr']:.2f} dB  SSIM {result['ssim']:.4f}  LPIPS "
                      + ("n/a" if lpv is None else f"{lpv:.4f}") + f"  -> {out / 'metrics.json'}")
    if turntable:
        console.print(f"turntable -> {result['turntable']}, contact sheet -> {result['contact_sheet']}")


def register(app: typer.Typer) -> None:
    """Add the ``render`` subcommand to ``app``."""
    app.command("render")(render)
