"""MILo's final mesh: refine the occupancy, marching tets, clean, colour, texture, export.

After training (Guédon et al. 2025; MILo's ``mesh_extract_sdf.py`` as described in the project notes §1):

1. :func:`refine_occupancy`: the Gaussians are frozen; their pivots are triangulated once more
   (synchronously) and only the pivots' occupancy shift is optimised for ``extract_steps`` steps (Adam,
   ``lr_occupancy``) with the four mesh terms of :class:`~meshlift.methods.milo.mesh_in_loop.MeshInTheLoop`,
   labels refreshed every ``extract_labels_every`` steps.
2. :func:`final_mesh`: marching tets + the large-edge filter, MILo's frustum culling (faces with a vertex
   inside no training view's frustum are dropped, :func:`in_any_frustum`), then meshlift's export cleaning
   (:func:`meshlift.mesh.clean.clean_mesh`: non-finite vertices, duplicates, degenerate / duplicate /
   non-manifold faces, winding, components smaller than ``keep_components``), components with fewer than
   ``min_component_faces`` × the largest one's faces (floater fragments), optional decimation
   (``simplify``, :func:`meshlift.mesh.simplify.simplify_mesh`).
3. Colour by **depth fusion of the training images** (:func:`fuse_colors`): a point takes the mean straight
   colour of the training views that see it — it projects inside the image, onto a covered pixel (alpha
   > 0.5), and the mesh's own depth there is within ``color_depth_tol × scene_scale`` of the point's depth
   (the mesh is rendered at every training view for this visibility test). Points no view sees get the mean
   colour. Used for the **vertex colours** (PLY) and for every texel of an **albedo texture baked on an
   xatlas atlas** (:func:`meshlift.mesh.uv.unwrap`, :func:`meshlift.mesh.bake.bake_field_to_textures`) that
   the OBJ+MTL+PNG and GLB carry. Images are sRGB; colours are stored linear (docs/conventions.md §6-7).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Optional

import torch

from meshlift.methods.engine import deadline_reached

__all__ = ["MAX_NONFINITE_STEPS", "ExtractedMesh", "MeshProduct", "color_and_texture", "final_mesh", "fuse_colors", "in_any_frustum", "refine_occupancy", "render_mesh_views", "texture_mesh", "write_meshes"]


@dataclass
class ExtractedMesh:
    """The final mesh (``v_color`` linear, no UVs), its textured twin (UVs + baked kd) and a report."""

    mesh: object
    textured: Optional[object]
    report: dict = field(default_factory=dict)


#: The occupancy refinement stops after this many consecutive steps with a non-finite loss or gradient
#: (each is skipped: the occupancy keeps its last finite value, as the trainer's divergence guard keeps the
#: Gaussians' last finite state).
MAX_NONFINITE_STEPS = 20


def refine_occupancy(reg, params: dict, steps: int, labels_every: int, *, sampler, monitor, seed: int = 0,
                     deadline=None) -> dict:
    """Step 1 of the module docstring. ``reg`` is the (started) :class:`MeshInTheLoop`; ``params`` the frozen
    Gaussians; ``deadline``: None, a :class:`~meshlift.methods.engine.PassDeadline` or a clock value
    (:func:`~meshlift.methods.engine.deadline_reached`).

    A step whose loss or occupancy gradient is not finite is **skipped** (no Adam step: the occupancy and
    the optimiser moments keep their last finite values) and logged with its per-term losses; after
    :data:`MAX_NONFINITE_STEPS` such steps in a row the refinement stops there (logged), so the mesh is
    extracted from the last finite occupancy instead of a NaN one.

    Returns:
        ``{"steps", "seconds", "loss_first", "loss_last", "skipped_nonfinite", "first_nonfinite"}`` (the last:
        None, or ``{"step", "terms", "diagnosis"}`` of the first skipped step, the diagnosis from
        :meth:`MeshInTheLoop.diagnose_nonfinite`; ``loss_*`` are over the finite steps).
    """
    import dataclasses
    import math

    from meshlift.methods.gaussians.trainer import render_params
    from meshlift.methods.milo.mesh_in_loop import surface_depth

    t0 = time.perf_counter()
    frozen = {k: v.detach() for k, v in params.items()}
    reg.triangulate_now(frozen)
    reg.refresh_labels(frozen)
    opt = torch.optim.Adam([reg.sdf.shift], lr=reg.cfg.lr_occupancy, eps=1e-15)
    settings = dataclasses.replace(reg.settings, outputs=("median_depth",))
    bg = torch.zeros(3, device=reg.device)
    first = last = None
    done = skipped = in_a_row = 0
    first_bad = None
    if steps > 0:
        monitor.start_pass("milo occupancy refinement", steps, 0)
    for s in range(steps):
        if s > 0 and s % labels_every == 0:
            reg.refresh_labels(frozen)
        batch = reg.problem.train.batch(sampler.next(), reg.device)
        with torch.no_grad():
            _, alpha, info = render_params(frozen, batch, 0, bg, reg.near, settings, reg.cfg.splat_backend)
        depth = surface_depth(info["median_depth"], alpha)
        terms = reg.mesh_losses(frozen, batch, depth)
        terms.pop("mesh")
        loss = reg.weighted(terms)
        opt.zero_grad(set_to_none=True)
        if loss.requires_grad:
            loss.backward()
        grad = reg.sdf.shift.grad
        finite = torch.isfinite(loss.detach())
        if grad is not None:
            finite = finite & torch.isfinite(grad).all()
        v = float(loss.detach())  # the step's one host sync (the progress line needs the value anyway)
        if bool(finite):
            if grad is not None:
                opt.step()
            first = v if first is None else first
            last, in_a_row = v, 0
        else:
            skipped, in_a_row = skipped + 1, in_a_row + 1
            opt.zero_grad(set_to_none=True)
            if first_bad is None:
                first_bad = {"step": s + 1, "terms": {k: float(t.detach()) for k, t in terms.items()}}
                bad = ", ".join(f"{k} {x:.4g}" for k, x in first_bad["terms"].items())
                monitor.log(f"occupancy refinement step {s + 1}: non-finite loss or gradient ({bad}; gradient "
                            f"{'finite' if grad is None or bool(torch.isfinite(grad).all()) else 'non-finite'}): "
                            "step skipped, the occupancy keeps its last finite value")
                first_bad["diagnosis"] = reg.diagnose_nonfinite(frozen, batch, depth)
                opt.zero_grad(set_to_none=True)
                monitor.log(f"occupancy refinement step {s + 1}: non-finite counts {first_bad['diagnosis']}")
        done = s + 1
        monitor.update(done, v if math.isfinite(v) else float("nan"), float("nan"))
        if in_a_row >= MAX_NONFINITE_STEPS:
            monitor.log(f"occupancy refinement: {in_a_row} non-finite steps in a row, stopped after {done} of {steps}"
                        " steps; the mesh is extracted from the last finite occupancy")
            break
        if deadline_reached(deadline):
            monitor.log(f"occupancy refinement: time budget reached after {done} of {steps} steps")
            break
    if steps > 0:
        monitor.end_pass()
    if skipped:
        monitor.log(f"occupancy refinement: {skipped} of {done} steps skipped for a non-finite loss or gradient")
    return {"steps": done, "seconds": time.perf_counter() - t0, "loss_first": first, "loss_last": last,
            "skipped_nonfinite": skipped, "first_nonfinite": first_bad}


@torch.no_grad()
def fuse_colors(points: torch.Tensor, views, mesh_depth: torch.Tensor, *, tol: float,
                chunk_pairs: int = 1 << 22, view_power: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean straight sRGB colour of ``points [P, 3]`` over the training views that see them (module docstring);
    with ``view_power > 0`` each view weighs ``(f_x / z) ** view_power`` (its pixels per world unit at the
    point), so that close views, which resolve the surface's detail, outweigh distant ones that blur it.

    Args:
        points: ``[P, 3]`` world points on the mesh (vertices, texel centres).
        views: :class:`~meshlift.methods.gaussians.views.SplatViews` (premultiplied sRGB + alpha).
        mesh_depth: ``[C, H, W]`` the mesh's depth at every view of ``views`` (0 where empty), on points' device.
        tol: depth tolerance (world units).

    Returns:
        ``(rgb [P, 3] sRGB in [0, 1], num_views [P] int64)``.
    """
    from meshlift.methods.milo.depth_fusion import project_points, sample_depth

    dev = points.device
    P = points.shape[0]
    acc = torch.zeros(P, 3, device=dev)
    wsum = torch.zeros(P, device=dev)  # sum of the view weights (the mean's denominator)
    cnt = torch.zeros(P, device=dev, dtype=torch.long)  # number of views that see each point
    H, W = views.height, views.width
    per = max(1, chunk_pairs // max(P, 1))
    for s in range(0, len(views), per):
        idx = torch.arange(s, min(s + per, len(views)))
        b = views.batch(idx, dev)
        xy, z = project_points(points, b.world_to_camera, b.K)
        d, seen = sample_depth(mesh_depth[idx.to(mesh_depth.device)].to(dev), xy, z)
        col = torch.floor(xy[..., 0]).clamp(0, W - 1).long()
        row = torch.floor(xy[..., 1]).clamp(0, H - 1).long()
        pix = row * W + col  # [c, P]
        img = b.images.reshape(len(idx), H * W, 3)
        alpha = b.alpha.reshape(len(idx), H * W) if b.alpha is not None else torch.ones(len(idx), H * W, device=dev)
        a = torch.gather(alpha, 1, pix)
        rgb = torch.gather(img, 1, pix[..., None].expand(-1, -1, 3)) / a.clamp(min=1e-3)[..., None]
        vis = seen & (d > 0) & ((z - d).abs() <= tol) & (a > 0.5)
        w = vis.float()
        if view_power > 0:  # pixels per world unit, relative to the first view's at unit depth (no overflow)
            dens = b.K[:, 0, 0, None].to(z) / (z.clamp(min=1e-6) * float(views.K[0, 0, 0]))
            w = w * dens.pow(view_power)
        acc += (rgb.clamp(0, 1) * w[..., None]).sum(0)
        wsum += w.sum(0)
        cnt += vis.sum(0)
    # divide by the weight sum itself: a clamp at 1 darkened every point whose weights summed below 1
    # (view_power > 0 gives weights < 1 to distant views)
    out = acc / wsum.clamp(min=1e-20)[:, None]
    seen_any = (cnt > 0) & (wsum > 0)
    if bool(seen_any.any()) and not bool(seen_any.all()):
        out[~seen_any] = out[seen_any].mean(0)
    elif not bool(seen_any.any()):
        out[:] = 0.5
    return out, cnt


@torch.no_grad()
def in_any_frustum(points: torch.Tensor, views, near: float) -> torch.Tensor:
    """Bool ``[P]``: the point is in front of some view (``z > near``) and projects inside its image."""
    from meshlift.methods.milo.depth_fusion import project_points

    ok = torch.zeros(points.shape[0], dtype=torch.bool, device=points.device)
    for s in range(0, len(views), 16):
        w2c = views.world_to_camera[s:s + 16].to(points)
        K = views.K[s:s + 16].to(points)
        xy, z = project_points(points, w2c, K)
        inside = (z > near) & (xy[..., 0] >= 0) & (xy[..., 0] < views.width) & (xy[..., 1] >= 0) & (
            xy[..., 1] < views.height)
        ok |= inside.any(0)
    return ok


def final_mesh(reg, params: dict, *, keep_components: float, simplify: int = 0, min_component_faces: float = 0.0):
    """Step 2: ``(Mesh, report)`` — marching tets + filter, cleaned (and decimated with ``simplify`` > 0).

    Raises:
        MeshError: the SDF has no zero crossing (empty mesh; the message names what to try), or the occupancy /
            Gaussians are not finite (never exported as a garbage mesh).
    """
    from meshlift.errors import MeshError
    from meshlift.mesh.clean import clean_mesh, drop_small_components
    from meshlift.structures.mesh import Mesh

    sdf = getattr(reg, "sdf", None)
    checks = [("pivot occupancy", sdf.logits())] if sdf is not None else []
    checks += [(name, params[key]) for name, key in (("Gaussian means", "means"), ("Gaussian scales", "log_scales"))
               if key in params]
    bad = [name for name, t in checks if not bool(torch.isfinite(t.detach()).all())]
    if bad:
        raise MeshError(f"milo extraction: the {' and '.join(bad)} hold NaN/inf values, the mesh would be garbage; "
                        "see the refinement's log lines (skipped non-finite steps) and re-run with --resume")
    with torch.no_grad():
        verts, faces = reg.mesh({k: v.detach() for k, v in params.items()}, grad=False)
    report = {"raw_vertices": int(verts.shape[0]), "raw_faces": int(faces.shape[0])}
    if faces.shape[0] == 0:
        raise MeshError("milo extraction: the pivot SDF has no zero crossing, the mesh is empty; train longer "
                        "(steps, mesh_start), or check that the object is seen by the training views")
    seen = in_any_frustum(verts, reg.problem.train, reg.near)
    faces = faces[seen[faces].all(dim=1)]
    report["frustum_culled_faces"] = report["raw_faces"] - int(faces.shape[0])
    if faces.shape[0] == 0:
        raise MeshError("milo extraction: no face of the mesh lies inside a training view's frustum; check the "
                        "cameras (meshlift inspect)")
    mesh, rep = clean_mesh(Mesh(verts.float().cpu(), faces.long().cpu()), keep_components=keep_components)
    report["clean"] = {k: v for k, v in vars(rep).items() if isinstance(v, (int, float, str, list))}
    mesh, report["small_fragment_faces"] = drop_small_components(mesh, min_component_faces)
    if simplify > 0 and mesh.num_faces > simplify:
        from meshlift.mesh.simplify import simplify_mesh

        mesh, info = simplify_mesh(mesh, simplify, keep_uv=False)
        report["simplify"] = {k: v for k, v in info.items() if isinstance(v, (int, float, str))}
    report["vertices"], report["faces"] = int(mesh.v_pos.shape[0]), int(mesh.num_faces)
    return mesh, report


def mesh_depth_all(mesh, views, device: torch.device, *, chunk_views: int, max_fragments: Optional[int]):
    """``[C, H, W]`` depth of ``mesh`` at every view of ``views`` (no grad)."""
    from meshlift.methods.milo.occupancy_labels import render_mesh_depth

    with torch.no_grad():
        return render_mesh_depth(mesh.v_pos.to(device), mesh.t_pos_idx.to(device),
                                 views.world_to_camera.to(device), views.K.to(device), (views.height, views.width),
                                 chunk_views=chunk_views, max_fragments=max_fragments)


def texture_mesh(mesh, views, device: torch.device, *, tol: float, texture_res: int, chunk_views: int = 8,
                 max_fragments: Optional[int] = None, max_unwrap_faces: Optional[int] = None,
                 unwrap_time_s: Optional[float] = None) -> tuple[object, object, dict]:
    """Step 3: ``(mesh with v_color, textured mesh (UVs + kd, no v_color), report)``; the textured mesh is
    decimated to ``max_unwrap_faces`` before the unwrap when it has more (None: the unwrap's default cap,
    :data:`meshlift.mesh.uv.DEFAULT_MAX_FACES_FOR_XATLAS`; a time-budgeted run passes what it affords,
    :meth:`meshlift.methods.milo.budget.MiloStageCosts.unwrap_faces`), and xatlas stopped after
    ``unwrap_time_s`` seconds (None: no limit) for a per-face atlas (:func:`meshlift.mesh.uv.face_atlas`;
    ``unwrap_method`` in the report). Report times: ``color_s`` (all), ``unwrap_s``, ``bake_s``."""
    from meshlift.mesh.bake import bake_field_to_textures
    from meshlift.mesh.uv import DecimationWarning, unwrap
    from meshlift.shading.color import srgb_to_linear
    from meshlift.structures.mesh import Material

    t0 = time.perf_counter()
    depth = mesh_depth_all(mesh, views, device, chunk_views=chunk_views, max_fragments=max_fragments)
    rgb, n = fuse_colors(mesh.v_pos.to(device), views, depth, tol=tol)
    colored = replace(mesh, v_color=srgb_to_linear(rgb).clamp(0, 1).cpu())
    report = {"vertices_seen_frac": float((n > 0).float().mean())}
    t_uv = time.perf_counter()
    kw = {} if max_unwrap_faces is None else {"max_faces_for_xatlas": int(max_unwrap_faces)}
    if unwrap_time_s is not None:
        kw["time_limit_s"] = float(unwrap_time_s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecimationWarning)  # the run logs the decimation itself
        uv = unwrap(replace(colored, v_color=None), resolution=texture_res, **kw)
    report["unwrap_s"] = time.perf_counter() - t_uv
    report["unwrap_faces"] = int(uv.num_faces)
    report["unwrap_method"] = uv.extras.get("uv_unwrap", {}).get("method", "xatlas")
    t_bake = time.perf_counter()

    def field_fn(x: torch.Tensor) -> dict:
        c, _ = fuse_colors(x.to(device), views, depth, tol=tol)
        return {"kd": srgb_to_linear(c).clamp(0, 1).to(x.device)}

    tex = bake_field_to_textures(uv, field_fn, texture_res)
    textured = replace(uv, material=Material(kd=tex["kd"].float().cpu(), name="milo_albedo"), v_color=None)
    report["bake_s"] = time.perf_counter() - t_bake
    report["texture_res"] = int(texture_res)
    report["color_s"] = time.perf_counter() - t0
    return colored, textured, report


def write_meshes(out, colored, textured) -> dict:
    """``mesh.ply`` (vertex colours), ``mesh.obj`` + MTL + PNG and ``mesh.glb`` (baked albedo) in ``out``."""
    from pathlib import Path

    from meshlift.io.mesh import save_mesh

    out = Path(out)
    files = {"mesh_ply": save_mesh(out / "mesh.ply", colored)[0]}
    if textured is not None:
        files["mesh_obj"] = save_mesh(out / "mesh.obj", textured, write_colors=False)[0]
        files["mesh_glb"] = save_mesh(out / "mesh.glb", textured)[0]
    return files


@torch.no_grad()
def render_mesh_views(mesh, views, device: torch.device, background: torch.Tensor,
                      indices: Optional[list[int]] = None, *, view_dependent: bool = True,
                      supersample: int = 1) -> torch.Tensor:
    """``[V, H, W, 3]`` unlit sRGB renders of ``mesh`` (texture, else vertex colours, else grey headlight); vertex
    colours with view-dependent terms (``extras["v_sh_rest"]`` on ``extras["v_sh_base"]``, else on ``v_color``;
    :mod:`meshlift.shading.view_colors`) are evaluated for each view's camera centre unless ``view_dependent`` is
    False (then ``v_color`` alone, the diffuse colours). Terms of another vertex count are ignored with a warning.
    ``supersample`` s > 1: rendered at s times the resolution, each pixel the mean of its s × s samples
    (:func:`meshlift.methods.milo.vertex_render.box_downsample`; MILo's ``mesh_supersample``)."""
    from meshlift.methods.milo.vertex_render import box_downsample, mesh_world_to_clip
    from meshlift.renderers.mesh_pbr import render_unlit
    from meshlift.shading.view_colors import camera_centres, view_dependent_colors

    m = mesh.to(device) if hasattr(mesh, "to") else mesh
    ex = getattr(m, "extras", {}) if view_dependent and m.v_color is not None else {}
    rest, base = ex.get("v_sh_rest"), ex.get("v_sh_base", m.v_color)
    if rest is not None and (rest.shape[0] != m.v_pos.shape[0] or base.shape[0] != m.v_pos.shape[0]):
        warnings.warn(f"render_mesh_views: view-dependent colour terms of {rest.shape[0]:,} vertices on a mesh of "
                      f"{m.v_pos.shape[0]:,} (an edit that re-indexed the vertices kept them): the view-independent "
                      "colours are rendered", stacklevel=2)
        rest = None
    if rest is not None:  # on the device once, not per view
        rest, base = rest.to(device).float(), base[:, :3].to(device).float()
    out, ss = [], max(1, int(supersample))
    for i in (range(len(views)) if indices is None else indices):
        b = views.batch(torch.tensor([i]), device)
        if m.num_faces == 0:
            out.append(background.reshape(1, 1, 1, 3).expand(1, views.height, views.width, 3).cpu())
            continue
        clip = mesh_world_to_clip(b.world_to_camera, b.K, views.width, views.height, m.v_pos.to(device).float())
        fwd = b.world_to_camera[:, 2, :3]
        mv = m if rest is None else replace(m, v_color=view_dependent_colors(
            base, rest, m.v_pos.float(), camera_centres(b.world_to_camera.float())[0]))
        # precise: the whole-scene mesh's sub-pixel triangles leave float32 pinholes (rasterize's docstring)
        out.append(box_downsample(render_unlit(mv, clip, fwd, (views.height * ss, views.width * ss),
                                               background.to(device), precise=True), ss).cpu())
    return torch.cat(out) if out else torch.zeros(0, views.height, views.width, 3)


@dataclass
class MeshProduct:
    """What an extraction path hands to the evaluation and the export."""

    colored: object
    """The asset with linear vertex colours (``mesh.ply``)."""
    textured: object
    """The asset with UVs and the baked albedo (``mesh.obj`` / ``mesh.glb``)."""
    eval_mesh: object
    """The mesh rendered at the test views for ``mesh_psnr`` (the whole-scene mesh of a capture)."""
    geometry: object
    """The uncoloured mesh scored against a known truth (Chamfer / F-score)."""
    report: dict
    """``mesh_report`` of metrics.json."""
    extra: dict = field(default_factory=dict)
    """Path-specific metrics (pivots, tets, refinement, region, ...)."""
    scene_colored: object = None
    """The whole-scene mesh with vertex colours (``scene_mesh.ply``), or None."""
    eval_unrefined: object = None
    """``eval_mesh`` before the photometric refinement (rendered for ``mesh_psnr_unrefined``), or None."""


def color_and_texture(cfg, mesh, problem, device, monitor, costs, budget) -> tuple:
    """``(colored, textured, report)`` of :func:`meshlift.methods.milo.extract.texture_mesh`, the unwrap's face
    cap and time limit following the time budget (:class:`~meshlift.methods.milo.budget.MiloStageCosts`)."""
    left = budget.t_start + cfg.time_budget_s - time.perf_counter() if cfg.time_budget_s > 0 else None
    unwrap_cap = costs.unwrap_faces(mesh.num_faces, left)
    unwrap_limit = costs.unwrap_time_limit(mesh.num_faces, left)
    if mesh.num_faces > unwrap_cap:
        monitor.log(f"unwrap: {mesh.num_faces:,} faces; decimated to {unwrap_cap:,} before xatlas ("
                    + (f"{left:.0f} s of the time budget left" if left is not None else "its face cap") + ")")
    colored, textured, crep = texture_mesh(
        mesh, problem.train, device, tol=cfg.color_depth_tol * problem.scene_scale,
        texture_res=cfg.texture_res, chunk_views=cfg.mesh_chunk_views, max_fragments=cfg.max_fragments or None,
        max_unwrap_faces=unwrap_cap, unwrap_time_s=unwrap_limit)
    crep["unwrap_face_cap"] = int(unwrap_cap)
    if crep.get("unwrap_method") == "face_atlas":
        monitor.log(f"unwrap: xatlas did not finish within {unwrap_limit:.0f} s; the texture uses a per-face "
                    "atlas (raise time_budget_s, or --simplify, for xatlas charts)")
    return colored, textured, crep
