"""Photometric refinement of an extracted mesh: its vertices moved along their normals and its vertex colours
fitted to the training photographs by differentiable rasterization.

Why (measured, issue 33; docs/benchmarks.md "The fox's gap decomposed"): on the H200 fox the whole-scene mesh
rendered 18.93 dB where its Gaussians rendered 21.62; the *same geometry* coloured from the test photograph
itself rendered 24.29 dB, while colours fused from the training photographs (per vertex, per pixel, or from
the three nearest frames only) stayed at 18.8-19.0 dB. The surface is right along the test camera's rays and
off along the training cameras' rays, so every training view gives a surface point the colour of a slightly
different scene point; a fused mean cannot undo that, moving the surface can. The stage-2 mesh refinement of
nerf2mesh (Tang et al. 2023, "Delicate Textured Mesh Recovery from NeRF via Adaptive Surface Refinement",
§3.3: vertex offsets and appearance optimised against the training images through a differentiable
rasterizer) does exactly this; here with vertex colours (the whole-scene mesh's colours) and a bounded,
smooth offset along the normal.

Parameterisation (each vertex ``i``):

- position ``v_i = v0_i + n0_i · h_i · s_i`` with ``s_i = max_offset · tanh(u_i)``: ``n0_i`` the initial unit
  vertex normal, ``h_i`` the world size of one pixel at the vertex in the closest training view that has it in
  its frustum (:func:`pixel_footprint`: the fused surface's error is about a pixel whatever the mesh's edge
  lengths; they are often far below a pixel), ``u_i`` free (initially 0). Moving along the normal
  only keeps the triangles from sliding over each other (no fold-overs from tangential drift).
- colour ``c_i`` linear RGB, initialised from the fused colours, clamped to [0, 1] after each step; with
  ``sh_degree`` > 0 also view-dependent SH terms ``r_i`` ``[K − 1, 3]`` (initially 0, or the mesh's
  ``extras["v_sh_rest"]``), each view rendering the colours of :func:`meshlift.shading.view_colors.view_dependent_colors`
  for its camera centre: the surface gets the Gaussians' freedom to follow exposure and sheen along the capture
  (MILo's mesh-based NVS protocol fits such a field on its meshes). A separate diffuse colour is fitted beside
  them on the same renders (its own L1 term, no gradient to the geometry): the mesh's ``v_color``, what exports
  hold; the terms and their base go to ``extras["v_sh_rest"]`` / ``extras["v_sh_base"]``.

Loss of one step (a batch of ``views_per_step`` training views, each paired with one of its ``neighbours`` nearest
views; every term is divided by the batch's pixel count, or the consistency by its valid pixels):

- colour (``color_weight``; 0 = off, and the caller fuses the colours again from the moved surface): L1 between
  the mesh rendered exactly as the evaluation renders it
  (:func:`meshlift.methods.milo.vertex_render.render_vertex_colors` = :func:`meshlift.renderers.mesh_pbr.render_unlit`
  with vertex colours) and the photograph (sRGB), over the pixels
  the mesh covers (and, for views with alpha, inside the mask); the vertex colours are fitted with the geometry;
  with ``supersample`` s > 1 this render (and the diffuse colour's) is rasterised at s times the resolution and
  each pixel is the mean of its s × s samples, as the evaluation renders with MILo's ``mesh_supersample`` (a
  pixel counts when half its samples are covered; the other terms keep one sample a pixel);
- cross-view photo-consistency (``consistency_weight``, :func:`consistency_terms`): each covered pixel's surface
  point projected into the neighbour view, the neighbour's photo sampled there bilinearly, occlusion-tested
  against the neighbour's mesh depth and exposure-normalised, L1 against the reference pixel; both photos
  blurred by ``blur_px`` in the first half of the steps (a wider basin). The multi-view stereo form of the
  surface's position error (Vu et al. 2012, "High Accuracy and Visibility-Consistent Dense Multiview Stereo");
- silhouette (views with alpha only): ``mask_weight`` × L1 between the antialiased coverage and the alpha;
- smoothness: ``smooth_weight`` × Σ_i (s_i − mean of its neighbours' s)² (the uniform Laplacian of the offset
  in pixels; per-pixel normalisation keeps the weight meaningful whatever the vertex count).

Adam on ``u`` (``lr_offset``), ``c`` (``lr_color``, with the colour term) and ``r`` (``lr_sh``). Views are visited in a shuffled order, epoch by epoch.
Memory: one batch of views is rendered at a time (the rasterizer's buffers for ``views_per_step`` images);
the parameters are ``4 × V`` floats plus Adam's moments, with SH terms of degree ``d`` ``(3 (d + 1)² + 4) × V``
(the terms, their base, the diffuse colour: 31 V at degree 2).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Optional

import torch

from meshlift.methods.milo.vertex_render import (box_downsample, mesh_world_to_clip, shade_vertex_colors,
                                                 straight_images)

__all__ = ["PhotoRefineSettings", "consistency_terms", "photometric_refine", "subdivided"]


@dataclasses.dataclass(frozen=True)
class PhotoRefineSettings:
    """Knobs of :func:`photometric_refine` (MILo's ``photo_refine_*`` config fields)."""

    steps: int = 300
    """Optimisation steps (0 = off)."""
    views_per_step: int = 2
    """Training views rendered per step."""
    lr_offset: float = 0.02
    """Adam learning rate of the offset parameter ``u`` (``s = max_offset · tanh(u)``, pixels)."""
    lr_color: float = 0.005
    """Adam learning rate of the linear vertex colours."""
    max_offset: float = 2.0
    """Largest offset along the normal, in pixels: the size of one pixel at the vertex in the closest training view
    that has it in its frustum (:func:`pixel_footprint`; the vertex's mean edge length where none has)."""
    smooth_weight: float = 30.0
    """Weight of the offset's uniform-Laplacian smoothness (per pixel, module docstring)."""
    mask_weight: float = 1.0
    """Weight of the silhouette term for views with alpha (ignored without alpha)."""
    consistency_weight: float = 1.0
    """Weight of the cross-view photo-consistency term (0 = off)."""
    color_weight: float = 1.0
    """Weight of the colour term (the render against the photo, vertex colours fitted too); 0 = off: the colours
    are kept as given (the caller re-fuses them from the refined surface)."""
    neighbours: int = 4
    """Candidate neighbour views per reference view (nearest camera centres, optical axes within 60°)."""
    occlusion_tol: float = 0.02
    """A surface point counts as seen by the neighbour when its depth is within this fraction of the
    neighbour's mesh depth at its pixel."""
    blur_px: float = 1.0
    """Gaussian blur (pixels) of both images in the first half of the steps (a wider basin), none after."""
    sh_degree: int = 0
    """SH degree of view-dependent vertex colours fitted with the colour term (0 = one colour per vertex; 1..3:
    :mod:`meshlift.shading.view_colors`, the refined mesh's ``extras["v_sh_rest"]``); needs ``color_weight`` > 0."""
    lr_sh: float = 0.001
    """Adam learning rate of the view-dependent SH terms (linear colour per unit of the SH basis)."""
    subdivide_px: float = 0.0
    """Before the fit, split the edges longer than this many pixels in the closest training view that sees both ends
    (:func:`meshlift.mesh.subdivide.subdivide_long_edges`: conforming, up to 4 passes), so the fitted colours have
    a vertex per pixel or two; 0 = off; needs ``color_weight`` > 0."""
    max_faces: int = 24_000_000
    """Face budget of that subdivision (the longest edges go first); bounds its memory."""
    solve_iters: int = 0
    """After the steps, the fitted colours solved on the frozen geometry (:mod:`meshlift.methods.milo.colour_solve`,
    at most this many L-BFGS iterations; 0 = off); needs ``color_weight`` > 0."""
    solve_holdout: float = 0.1
    """Share of the training views that solve holds out to stop it."""
    solve_range_penalty: float = 1.0
    """The weight of the solve's pull of out-of-range colours into [0, 1] when its straight-through start stalls
    (``ColourSolveSettings.range_penalty``)."""
    supersample: int = 1
    """Samples per pixel side of the colour term's render and the solve's (``s × s`` averaged per pixel:
    :func:`meshlift.methods.milo.vertex_render.box_downsample`; the evaluation must render the same way); the
    consistency and silhouette terms use one sample a pixel."""
    seed: int = 0
    """Seed of the view order."""

    @classmethod
    def from_config(cls, cfg, *, view_dependent: bool = True) -> "PhotoRefineSettings":
        """The settings of a :class:`~meshlift.methods.milo.config.MiloConfig` (its ``photo_refine_*`` fields);
        ``view_dependent=False`` keeps one colour per vertex (the asset: what a GLB holds)."""
        return cls(sh_degree=int(cfg.photo_refine_sh_degree) if view_dependent else 0,
                   lr_sh=float(cfg.photo_refine_lr_sh), steps=int(cfg.photo_refine_steps),
                   views_per_step=int(cfg.photo_refine_views),
                   lr_offset=float(cfg.photo_refine_lr_offset), lr_color=float(cfg.photo_refine_lr_color),
                   max_offset=float(cfg.photo_refine_max_offset), smooth_weight=float(cfg.photo_refine_smooth),
                   mask_weight=float(cfg.photo_refine_mask_weight),
                   color_weight=float(cfg.photo_refine_color_weight), seed=int(cfg.seed),
                   subdivide_px=float(cfg.photo_refine_subdivide_px) if view_dependent else 0.0,
                   max_faces=int(cfg.photo_refine_max_faces),
                   solve_iters=int(cfg.photo_refine_solve_iters) if view_dependent else 0,
                   solve_holdout=float(cfg.photo_refine_solve_holdout),
                   solve_range_penalty=float(cfg.photo_refine_solve_range_penalty),
                   supersample=int(cfg.mesh_supersample) if view_dependent else 1)


def pixel_footprint(points: torch.Tensor, views, *, fallback: torch.Tensor, chunk: int = 8) -> torch.Tensor:
    """``[P]`` world size of one pixel at each point: the smallest ``z / f_x`` over the views in whose image it
    projects (in front of the camera); ``fallback [P]`` where no view has it in its frustum."""
    from meshlift.methods.milo.depth_fusion import project_points

    best = torch.full((points.shape[0],), float("inf"), device=points.device)
    for s in range(0, len(views), chunk):
        K = views.K[s:s + chunk].to(points)
        xy, z = project_points(points, views.world_to_camera[s:s + chunk].to(points), K)
        ok = (z > 1e-8) & (xy >= 0).all(-1) & (xy[..., 0] < views.width) & (xy[..., 1] < views.height)
        fp = torch.where(ok, z / K[:, None, 0, 0], torch.full_like(z, float("inf")))
        best = torch.minimum(best, fp.min(0).values)
    return torch.where(torch.isfinite(best), best, fallback)


def subdivided(mesh, views, device: torch.device, max_px: float, max_faces: int) -> tuple[object, dict]:
    """``(mesh, report)``: ``mesh`` with its edges longer than ``max_px`` pixels (in the closest training view
    that has both ends in its frustum: :func:`pixel_footprint`; unseen vertices never split) split conformingly,
    at most ``max_faces`` faces (:func:`meshlift.mesh.subdivide.subdivide_long_edges`, on ``device``; the result on
    the mesh's device). Report: the subdivision's plus ``seconds``."""
    from meshlift.mesh.subdivide import subdivide_long_edges

    t0 = time.perf_counter()
    m = mesh.to(device)
    h = pixel_footprint(m.v_pos.float(), views, fallback=torch.full((m.num_vertices,), float("inf"), device=device))
    out, rep = subdivide_long_edges(m, h, float(max_px), max_faces=int(max_faces))
    rep["seconds"] = time.perf_counter() - t0
    return out.to(mesh.v_pos.device), rep


def _blur(img: torch.Tensor, sigma: float) -> torch.Tensor:
    """``[B, H, W, C]`` separable Gaussian blur (``sigma`` pixels, radius ``ceil(2 sigma)``; replicate edges)."""
    if sigma <= 0:
        return img
    r = max(1, int(math.ceil(2 * sigma)))
    x = torch.arange(-r, r + 1, dtype=img.dtype, device=img.device)
    k = torch.exp(-0.5 * (x / sigma) ** 2)
    k = k / k.sum()
    B, H, W, C = img.shape
    t = img.permute(0, 3, 1, 2).reshape(B * C, 1, H, W)
    t = torch.nn.functional.pad(t, (r, r, 0, 0), mode="replicate")
    t = torch.nn.functional.conv2d(t, k.reshape(1, 1, 1, -1))
    t = torch.nn.functional.pad(t, (0, 0, r, r), mode="replicate")
    t = torch.nn.functional.conv2d(t, k.reshape(1, 1, -1, 1))
    return t.reshape(B, C, H, W).permute(0, 2, 3, 1)


def consistency_terms(X: torch.Tensor, covered: torch.Tensor, image_r: torch.Tensor, image_n: torch.Tensor,
                      depth_n: torch.Tensor, world_to_camera_n: torch.Tensor, K_n: torch.Tensor, *,
                      occlusion_tol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-view photo-consistency of the surface seen by reference views (module docstring).

    Args:
        X: ``[B, H, W, 3]`` world points of the reference views' pixels on the mesh (differentiable).
        covered: ``[B, H, W]`` bool, the pixels the mesh covers (and, with masks, inside the mask).
        image_r / image_n: ``[B, H, W, 3]`` straight sRGB of the reference / neighbour views.
        depth_n: ``[B, H, W]`` the mesh's camera-z depth at the neighbour views (0 where empty; no gradient).
        world_to_camera_n / K_n: ``[B, 4, 4]`` / ``[B, 3, 3]`` the neighbours' cameras (OpenCV, pixels).
        occlusion_tol: a point is seen by the neighbour when its depth there is within this fraction of the
            neighbour's mesh depth at its pixel.

    Returns:
        ``(|image_r − gain · image_n(project_n(X))| summed over channels [B, H, W], valid [B, H, W] bool)``,
        the neighbour sampled bilinearly at the projection (pixel centres at ``+0.5``, docs/conventions.md §2),
        ``gain`` the per-pair, per-channel ratio of the two views' mean colours over the valid pixels (detached:
        an exposure change is not a surface error).
    """
    from meshlift.geometry.reprojection import project_pixels

    B, H, W, _ = X.shape
    u, v, z = project_pixels(X, K_n, world_to_camera_n)
    inside = (z > 1e-8) & (u >= 0.5) & (u <= W - 0.5) & (v >= 0.5) & (v <= H - 0.5)
    col = torch.floor(u.detach()).clamp(0, W - 1).long()
    row = torch.floor(v.detach()).clamp(0, H - 1).long()
    dn = torch.gather(depth_n.reshape(B, -1), 1, (row * W + col).reshape(B, -1)).reshape(B, H, W)
    seen = (dn > 0) & ((z.detach() - dn).abs() <= occlusion_tol * dn)
    valid = covered & inside & seen
    grid = torch.stack([2 * u / W - 1, 2 * v / H - 1], -1)
    sampled = torch.nn.functional.grid_sample(image_n.permute(0, 3, 1, 2), grid, mode="bilinear",
                                              padding_mode="border", align_corners=False).permute(0, 2, 3, 1)
    with torch.no_grad():
        m = valid[..., None].float()
        cnt = m.sum((1, 2)).clamp(min=1)
        gain = ((image_r * m).sum((1, 2)) / cnt + 1e-3) / ((sampled * m).sum((1, 2)) / cnt + 1e-3)
        gain = gain.clamp(0.5, 2.0)
    diff = (image_r - gain[:, None, None, :] * sampled).abs().sum(-1)
    return torch.where(valid, diff, torch.zeros_like(diff)), valid


def photometric_refine(mesh, views, device: torch.device, settings: PhotoRefineSettings, *, monitor=None,
                       deadline=None, label: str = "mesh") -> tuple[object, dict]:
    """Refine ``mesh`` (a :class:`~meshlift.structures.mesh.Mesh`, optionally with linear ``v_color``) against
    ``views`` (:class:`~meshlift.methods.gaussians.views.SplatViews`: premultiplied sRGB, optional alpha), module
    docstring.

    Args:
        mesh: the mesh; its ``v_color`` ``[V, 3]`` (linear, in [0, 1]) is the initial colour of the colour term
            (grey without) and is returned unchanged when ``color_weight`` is 0.
        views: the training views (images stay on the CPU; a batch is moved to ``device`` per step).
        device: where the optimisation runs.
        settings: :class:`PhotoRefineSettings`.
        monitor: optional progress monitor (``start_pass`` / ``update`` / ``end_pass`` / ``log``).
        deadline: None, a :class:`~meshlift.methods.engine.PassDeadline` or a clock value: the refinement stops
            there (logged) and returns what it has.
        label: name in the log lines.

    Returns:
        ``(refined mesh (new v_pos, v_color fitted or kept; faces, UVs and material kept, stored normals
        dropped), report dict)``: report keys ``steps`` (done), ``loss_first`` / ``loss_last`` (the data terms,
        mean of the first / last 10 % of the steps), ``consistency_valid`` (mean share of the reference pixels
        with a valid neighbour sample), ``offset_mean`` / ``offset_max`` (|s| in pixels),
        ``offset_world_mean``, ``seconds``, ``stopped``. The input mesh is not modified.

    Raises:
        MeshError: the mesh has no faces, or ``views`` is empty.
    """
    from meshlift import render as R
    from meshlift.errors import MeshError
    from meshlift.geometry.mesh_ops import edge_lengths, edges, neighbour_mean, vertex_normals
    from meshlift.isosurface.depth_consistency import view_neighbours
    from meshlift.methods.engine import deadline_reached
    from meshlift.methods.milo.occupancy_labels import render_mesh_depth
    from meshlift.render.antialias import antialias_construct_topology
    from meshlift.shading.view_colors import camera_centres, sh_rest_count, view_dependent_colors

    t0 = time.perf_counter()
    if mesh.num_faces == 0 or mesh.v_pos.shape[0] == 0:
        raise MeshError(f"photometric refinement of the {label}: the mesh is empty")
    if len(views) == 0:
        raise MeshError(f"photometric refinement of the {label}: no training views")
    s = settings
    sub_rep = None
    if s.subdivide_px > 0 and s.color_weight > 0:
        mesh, sub_rep = subdivided(mesh, views, device, s.subdivide_px, s.max_faces)
        if monitor is not None:
            passes = f"{sub_rep['passes']} pass{'' if sub_rep['passes'] == 1 else 'es'}"
            monitor.log(f"photometric refinement ({label}): edges over {s.subdivide_px:g} px split in {passes}: "
                        f"{sub_rep['faces_before']:,} -> {sub_rep['faces_after']:,} faces"
                        + (f" (capped by photo_refine_max_faces={s.max_faces:,})" if sub_rep["capped"] else ""))
    V = int(mesh.v_pos.shape[0])
    v0 = mesh.v_pos.to(device=device, dtype=torch.float32)
    tri = mesh.t_pos_idx.to(device=device, dtype=torch.int32)
    e = edges(tri.long())  # once: the smoothness term runs every step
    deg = torch.bincount(e.reshape(-1), minlength=V)
    n0 = vertex_normals(v0, tri.long())
    length = edge_lengths(v0, e)
    mean_edge = (torch.zeros(V, device=device).index_add(0, e[:, 0], length).index_add(0, e[:, 1], length)
                 / deg.clamp(min=1))
    h = pixel_footprint(v0, views, fallback=mean_edge)
    topology = antialias_construct_topology(tri, V)
    init = mesh.v_color if mesh.v_color is not None else torch.full((V, 3), 0.5)
    fit_color = s.color_weight > 0
    color = init[:, :3].to(device=device, dtype=torch.float32).clone().requires_grad_(fit_color)
    u = torch.zeros(V, device=device, requires_grad=True)
    groups = [{"params": [u], "lr": s.lr_offset}] + ([{"params": [color], "lr": s.lr_color}] if fit_color else [])
    n_rest = sh_rest_count(s.sh_degree) if fit_color else 0
    rest = diffuse = None
    if n_rest:  # view-dependent terms (and their base colour), from a previous fit or zero (the diffuse colours)
        prev, prev_base = mesh.extras.get("v_sh_rest"), mesh.extras.get("v_sh_base")
        fits = (prev is not None and tuple(prev.shape) == (V, n_rest, 3)  # stale terms of other vertices: not used
                and prev_base is not None and tuple(prev_base.shape) == (V, 3))
        rest = (prev.to(device=device, dtype=torch.float32).clone() if fits
                else torch.zeros(V, n_rest, 3, device=device)).requires_grad_(True)
        # ``color`` becomes the terms' base; ``diffuse``, fitted beside it on the same renders (its own term, no
        # gradient to the geometry), is the one colour per vertex a GLB or PLY holds: the base alone is a worse
        # diffuse colour (CPU fox checkpoint, session 30: 22.62 dB against 22.80 for a diffuse fit)
        diffuse = color.detach().clone().requires_grad_(True)
        if fits:
            color = prev_base.to(device=device, dtype=torch.float32).clone().requires_grad_(True)
            groups[1]["params"] = [color]
        groups += [{"params": [rest], "lr": s.lr_sh}, {"params": [diffuse], "lr": s.lr_color}]
    opt = torch.optim.Adam(groups, betas=(0.9, 0.99), eps=1e-15)
    H, W = views.height, views.width
    use_consistency = s.consistency_weight > 0 and len(views) > 1
    nbrs = view_neighbours(views.world_to_camera, s.neighbours) if use_consistency else None
    bg = torch.zeros(3, device=device)
    gen = torch.Generator().manual_seed(int(s.seed))
    order: list[int] = []
    losses: list[float] = []
    valid_sum, valid_n = torch.zeros((), device=device), 0
    done, stopped = 0, "steps"
    if monitor is not None:
        monitor.start_pass(f"photometric refinement ({label})", s.steps, 0)
    for step in range(s.steps):
        if deadline_reached(deadline):
            stopped = "time budget"
            break
        if len(order) < s.views_per_step:
            order += torch.randperm(len(views), generator=gen).tolist()
        idx, order = order[:s.views_per_step], order[s.views_per_step:]
        b = views.batch(torch.tensor(idx), device)
        off = s.max_offset * torch.tanh(u)
        pos = v0 + n0 * (h * off)[:, None]
        clip = mesh_world_to_clip(b.world_to_camera, b.K, W, H, pos)
        clip_pos = R.transform_pos(clip.float(), pos)
        rast, _ = R.rasterize(clip_pos, tri, (H, W), precise=True)  # no float32 pinholes (rasterize)
        cov = rast[..., 3] > 0
        image_r, alpha_r = straight_images(b)
        npx = float(len(idx) * H * W)
        data = torch.zeros((), device=device)
        if alpha_r is not None:
            cov = cov & (alpha_r[..., 0] > 0.5)
            cov_aa = R.antialias((rast[..., 3:4] > 0).float().contiguous(), rast, clip_pos, tri, topology=topology)
            data = data + s.mask_weight * (cov_aa - alpha_r).abs().sum() / npx
        if use_consistency:
            cand = nbrs[torch.tensor(idx)]
            pick = torch.randint(0, cand.shape[1], (len(idx),), generator=gen)
            nb = cand[torch.arange(len(idx)), pick]
            nb = torch.where(nb >= 0, nb, torch.tensor(idx))  # a view with no neighbour pairs with itself
            bn = views.batch(nb, device)
            image_n, _ = straight_images(bn)
            with torch.no_grad():
                depth_n = render_mesh_depth(pos.detach(), tri, bn.world_to_camera, bn.K, (H, W))
            X, _ = R.interpolate(pos, rast, tri)
            sigma = s.blur_px if step < s.steps // 2 else 0.0
            diff, valid = consistency_terms(X, cov, _blur(image_r, sigma), _blur(image_n, sigma), depth_n,
                                            bn.world_to_camera, bn.K, occlusion_tol=s.occlusion_tol)
            data = data + s.consistency_weight * diff.sum() / valid.sum().clamp(min=1)
            valid_sum = valid_sum + (valid.float().mean() / cov.float().mean().clamp(min=1e-6)).detach()
            valid_n += 1
        if fit_color:
            rast_c, cov_c, ss = rast, cov, max(1, int(s.supersample))
            if ss > 1:  # the colour terms' render at ss x ss samples a pixel, averaged (the evaluation's render)
                rast_c, _ = R.rasterize(clip_pos, tri, (H * ss, W * ss), precise=True)
                cov_c = box_downsample((rast_c[..., 3:4] > 0).float(), ss)[..., 0] >= 0.5
                if alpha_r is not None:
                    cov_c = cov_c & (alpha_r[..., 0] > 0.5)
            if rest is None:
                img = box_downsample(shade_vertex_colors(color, rast_c, clip_pos, tri, bg, topology), ss)
            else:  # each view its own vertex colours (the SH of the direction from its centre)
                centres = camera_centres(b.world_to_camera.float())
                img = torch.cat([shade_vertex_colors(view_dependent_colors(color, rest, pos.detach(), centres[j]),
                                                     rast_c[j:j + 1], clip_pos[j:j + 1], tri, bg, topology)
                                 for j in range(len(idx))])
                img = box_downsample(img, ss)
                flat = box_downsample(shade_vertex_colors(diffuse, rast_c.detach(), clip_pos.detach(), tri, bg,
                                                          topology), ss)
                diffuse_term = ((flat - image_r).abs() * cov_c[..., None].float()).sum() / npx
            data = data + s.color_weight * ((img - image_r).abs() * cov_c[..., None].float()).sum() / npx
        lap = off - neighbour_mean(off, e, deg)
        loss = data + s.smooth_weight * (lap * lap).sum() / npx
        if diffuse is not None:
            loss = loss + s.color_weight * diffuse_term
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if fit_color:
            with torch.no_grad():
                color.clamp_(0, 1)
                if diffuse is not None:
                    diffuse.clamp_(0, 1)
        losses.append(float(data.detach()))  # the step's one host sync (the progress line shows it)
        done = step + 1
        if monitor is not None:
            monitor.update(done, losses[-1], float("nan"))
    if monitor is not None:
        if s.steps > 0:
            monitor.end_pass()
        if stopped != "steps":
            monitor.log(f"photometric refinement ({label}): {stopped} reached after {done} of {s.steps} steps")
    with torch.no_grad():
        off = s.max_offset * torch.tanh(u)
        pos = v0 + n0 * (h * off)[:, None]
        ok = torch.isfinite(pos).all(dim=1) & torch.isfinite(color).all(dim=1)
        pos = torch.where(ok[:, None], pos, v0)
        col = torch.where(ok[:, None], color, init[:, :3].to(color))
        view_dependent = rest is not None and done > 0  # no step done (time budget): no terms, one colour
        if view_dependent:
            keep = (ok & torch.isfinite(rest).all(dim=(1, 2)) & torch.isfinite(diffuse).all(dim=1))[:, None]
            rest_out = torch.where(keep[..., None], rest, torch.zeros_like(rest))
            base, col = col, torch.where(keep, diffuse, col)  # v_color: the diffuse fit (what exports hold)
    k = max(1, len(losses) // 10)
    report = {
        "steps": done, "steps_configured": int(s.steps), "views_per_step": int(s.views_per_step),
        "loss_first": float(sum(losses[:k]) / k) if losses else math.nan,
        "loss_last": float(sum(losses[-k:]) / k) if losses else math.nan,
        "consistency_valid": float(valid_sum) / valid_n if valid_n else math.nan,
        "offset_mean": float(off.abs().mean()), "offset_max": float(off.abs().max()),
        "offset_world_mean": float((off.abs() * h).mean()), "nonfinite_vertices": int((~ok).sum()),
        "colors_fitted": bool(fit_color), "sh_degree": int(s.sh_degree) if view_dependent else 0,
        "seconds": time.perf_counter() - t0, "stopped": stopped,
    }
    if sub_rep is not None:
        report["subdivide"] = sub_rep
    # the stored normals no longer match the moved vertices: dropped (exports recompute them)
    v_color = col.to(mesh.v_pos.device) if (fit_color or mesh.v_color is not None) else None
    extras = {k: v for k, v in mesh.extras.items() if k not in ("v_sh_rest", "v_sh_base")}  # stale: dropped
    if view_dependent:  # the view-dependent colours (shading.view_colors) beside the diffuse v_color
        extras["v_sh_base"] = base.detach().to(mesh.v_pos.device)
        extras["v_sh_rest"] = rest_out.detach().to(mesh.v_pos.device)
    refined = dataclasses.replace(mesh, v_pos=pos.to(mesh.v_pos.device, mesh.v_pos.dtype), v_color=v_color,
                                  v_nrm=None, t_nrm_idx=None, extras=extras)
    if monitor is not None:  # before the colour solve's own line
        monitor.log(f"photometric refinement ({label}): {report['steps']} steps in {report['seconds']:.1f} s, loss "
                    f"{report['loss_first']:.4f} -> {report['loss_last']:.4f} (the data terms of the first / last "
                    f"10 % of the steps), mean offset {report['offset_mean']:.3f} px")
    if fit_color and done > 0 and s.solve_iters > 0 and stopped == "steps":
        from meshlift.methods.milo.colour_solve import ColourSolveSettings, solve_colours

        refined, report["colour_solve"] = solve_colours(
            refined, views, device, ColourSolveSettings(iters=s.solve_iters, holdout=s.solve_holdout,
                                                     supersample=s.supersample, range_penalty=s.solve_range_penalty),
            monitor=monitor, deadline=deadline, label=label)
    return refined, report
