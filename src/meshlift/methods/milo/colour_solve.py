"""The refined mesh's vertex colours solved on its frozen geometry: full-batch L-BFGS on the training views' squared
error, stopped by held-out training views (issue 33).

Why (measured, 2026-12-07, session 32): the photometric refinement (:mod:`meshlift.methods.milo.photo_refine`) fits
the colours with Adam, two training views a step, an L1 loss, jointly with the vertex offsets. On the H100 fox's
whole-scene mesh (8.0M faces, session 31's checkpoint) that leaves the *training* views at 28.88 dB where the
Gaussians render them at 35.50: the colours are far from their optimum on this geometry (1,200 Adam steps instead of
300: training 29.67, test 26.10 from 25.82). Solving them with the geometry frozen, every training view in each
evaluation (session 32; benchmarks/results/raw_2026-12-07s32/solve.log): 100 L-BFGS iterations → training 31.02, **test 26.46** (+0.64 dB
over the refinement alone). On the CPU fox checkpoint (192k faces, 128-px photos) the test PSNR peaks at 40-80
iterations (24.84 → 25.29) and then falls (25.09 at 200) while the training PSNR keeps rising (28.74 → 33.06): the
colours over-fit; hence the held-out views.

Method:

- The geometry does not change, so each training view is rasterised once (float64 coverage: ``precise=True``) and
  the rasters are kept while they fit ``max_cache_bytes`` (16 bytes a pixel); the others are rasterised again in each
  evaluation. The clip positions are recomputed per view (a ``[V, 4]`` product): not kept.
- Parameters: the colours the evaluation renders: the view-dependent SH terms and their base
  (``extras["v_sh_rest"]`` / ``extras["v_sh_base"]``, :func:`meshlift.shading.view_colors.view_dependent_colors`)
  when the mesh has them, else ``v_color``. The diffuse ``v_color`` of a view-dependent mesh (what exports hold) is
  left as the refinement fitted it.
- Objective: the mean over the fitting views' covered pixels (inside the mask for views with alpha) of the squared
  sRGB error of the render exactly as :func:`meshlift.methods.milo.vertex_render.render_vertex_colors` makes it
  (interpolated linear colours, clamped, sRGB, antialiased silhouettes): the squared error is what PSNR scores.
- Colours out of [0, 1]: the evaluation clamps each vertex's colour (view-dependent colours: per view) before
  interpolating. The objective clamps too, first with the clamp's gradient passed straight through (a colour past
  the range still feels the pixels' pull). That can stall: a colour held past the clamp has a gradient the loss does
  not follow, and the line search then finds no step (the H100 fox of session 34: fitting MSE unchanged over 20
  iterations in three runs; a synthetic sphere from colours past the range stalls the same way:
  ``tests/test_milo_colour_solve.py``). So when the first chunk leaves the fitting MSE within 1e-4 of where it
  started, the solve starts again from the given colours with the clamp's own gradient plus ``range_penalty`` × the
  squared distance of each vertex colour to [0, 1] (weighted per view by the view's counted samples per vertex
  colour, so that a colour's pull back weighs about as much as its pixels): a colour a step took out of range comes
  back, the gradient is the objective's own, and while every colour is in range the objective is the evaluation's
  squared error. Not the penalty from the start: where straight-through moves it fits better (the H100 fox of
  session 35: test 26.68 against 26.44 dB with the penalty throughout; the CPU fox 26.73 against 26.63).
- L-BFGS (Nocedal & Wright, "Numerical Optimization", 2nd ed., Alg. 7.5, with the strong-Wolfe line search of
  Alg. 3.5; ``torch.optim.LBFGS``) on all fitting views at once, ``check_every`` iterations at a time.
- Supersampling (``supersample`` = s > 1): each view is rasterised at ``s`` times its resolution and the render's
  ``s × s`` samples are averaged per pixel (the pixel's area, as the camera integrates it); a pixel counts when at
  least half of its samples are covered. ``s²`` times the raster memory and shading work.
- Early stopping: ``holdout`` of the training views (evenly spaced, at least one; none with fewer than 4 views) are
  not fitted; after each chunk their PSNR is measured, the best parameters are kept, and the solve stops after
  ``patience`` chunks without a gain of ``min_gain_db``.

Memory: the rasters kept (bounded by ``max_cache_bytes``), the parameters ``P = V · 3 K`` floats (``K`` SH
coefficients; 27 at degree 2) with L-BFGS's ``2 · history · P`` (10 history pairs: 8.6 GB for the fox's 4.0M
vertices at degree 2 — lower ``history`` for larger meshes), one view's render graph at a time.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Optional

import torch

__all__ = ["ColourSolveSettings", "solve_colours"]


@dataclasses.dataclass(frozen=True)
class ColourSolveSettings:
    """Knobs of :func:`solve_colours` (MILo's ``photo_refine_solve_*`` config fields)."""

    iters: int = 100
    """Most L-BFGS iterations (0 = off)."""
    check_every: int = 10
    """Iterations between two measurements of the held-out views (a chunk)."""
    holdout: float = 0.1
    """Share of the training views held out to stop the solve (evenly spaced; at least one; none with fewer than 4
    views, then ``iters`` iterations run)."""
    patience: int = 2
    """Chunks without a gain before the solve stops."""
    min_gain_db: float = 0.01
    """Smallest held-out PSNR gain (dB) that counts as one."""
    history: int = 10
    """L-BFGS history pairs (memory: ``2 · history`` copies of the colour parameters)."""
    max_cache_bytes: int = 4 << 30
    """Budget of the rasters kept between evaluations (16 bytes a sample a view); views past it are rasterised again
    in each evaluation."""
    supersample: int = 1
    """Samples per pixel side of the render (``s × s`` samples averaged per pixel:
    :func:`meshlift.methods.milo.vertex_render.box_downsample`); the evaluation must render the same way."""
    range_penalty: float = 1.0
    """Weight of the pull of out-of-range colours back into [0, 1] in the solve that replaces a stalled
    straight-through one (module docstring); 0: no replacement (the solve before session 34)."""


def _split(n: int, holdout: float) -> tuple[list[int], list[int]]:
    """``(fit, held)`` view indices: ``round(holdout · n)`` (at least one) evenly spaced views held out when ``n`` ≥ 4
    and ``holdout`` > 0."""
    if n < 4 or holdout <= 0:
        return list(range(n)), []
    k = min(max(1, int(round(holdout * n))), n // 2)
    held = sorted({int((j + 0.5) * n / k) for j in range(k)})
    return [i for i in range(n) if i not in held], held


def solve_colours(mesh, views, device: torch.device, settings: ColourSolveSettings, *, monitor=None, deadline=None,
                  label: str = "mesh") -> tuple[object, dict]:
    """Solve the colours of ``mesh`` on its frozen geometry against the training ``views`` (module docstring).

    Args:
        mesh: a :class:`~meshlift.structures.mesh.Mesh` with ``v_color [V, 3]`` (linear RGB in [0, 1]) and optionally
            ``extras["v_sh_base"] [V, 3]`` / ``extras["v_sh_rest"] [V, K − 1, 3]`` (the view-dependent colours).
        views: the training views (:class:`~meshlift.methods.gaussians.views.SplatViews`: premultiplied sRGB,
            optional alpha; images stay on the CPU).
        device: where the solve runs.
        settings: :class:`ColourSolveSettings`.
        monitor: optional progress monitor (``start_pass`` / ``update`` / ``end_pass`` / ``log``).
        deadline: None, a :class:`~meshlift.methods.engine.PassDeadline` or a clock value, checked between chunks.
        label: name in the log lines.

    Returns:
        ``(mesh with the solved colours (geometry, faces and the diffuse ``v_color`` of a view-dependent mesh
        unchanged), report)``; report keys ``iters_kept`` (iterations of the kept state; 0: the colours as given),
        ``iters_run``, ``fit_views``, ``held_views``, ``held_psnr_first`` / ``held_psnr_best`` / ``held_psnr_last``
        (dB; NaN without held-out views), ``fit_mse_first`` / ``fit_mse_last``, ``cached_views``, ``stopped`` (``iterations``, ``held-out views``, ``time budget``,
        ``not finite``), ``range_penalty_from`` (the iterations run before the straight-through solve was found
        stalled and replaced by the penalised one; None: not replaced), ``seconds``. The input mesh is not modified.

    Raises:
        MeshError: the mesh has no faces or no vertex colours, or ``views`` is empty.
    """
    from meshlift import render as R
    from meshlift.errors import MeshError
    from meshlift.methods.engine import deadline_reached
    from meshlift.methods.milo.vertex_render import (box_downsample, mesh_world_to_clip, shade_vertex_colors,
                                                     straight_images)
    from meshlift.render.antialias import antialias_construct_topology
    from meshlift.shading.view_colors import camera_centres, view_dependent_colors

    t0 = time.perf_counter()
    s = settings
    if mesh.num_faces == 0 or mesh.v_pos.shape[0] == 0:
        raise MeshError(f"colour solve of the {label}: the mesh is empty")
    if mesh.v_color is None:
        raise MeshError(f"colour solve of the {label}: the mesh has no vertex colours to start from")
    if len(views) == 0:
        raise MeshError(f"colour solve of the {label}: no training views")
    V = int(mesh.v_pos.shape[0])
    v = mesh.v_pos.to(device=device, dtype=torch.float32)
    tri = mesh.t_pos_idx.to(device=device, dtype=torch.int32)
    topology = antialias_construct_topology(tri, V)
    ex = mesh.extras
    rest0, base0 = ex.get("v_sh_rest"), ex.get("v_sh_base")
    view_dep = (rest0 is not None and base0 is not None and tuple(rest0.shape[::2]) == (V, 3)
                and tuple(base0.shape) == (V, 3))
    base = (base0 if view_dep else mesh.v_color[:, :3]).to(device=device, dtype=torch.float32).clone()
    rest = rest0.to(device=device, dtype=torch.float32).clone() if view_dep else None
    params = [base.requires_grad_(True)] + ([rest.requires_grad_(True)] if view_dep else [])
    H, W = views.height, views.width
    ss = max(1, int(s.supersample))
    bg = torch.zeros(3, device=device)
    fit, held = _split(len(views), s.holdout)
    per_view = H * W * ss * ss * 16
    n_cache = min(len(views), int(s.max_cache_bytes // per_view))
    cache: dict[int, torch.Tensor] = {}
    to_clip: dict[int, torch.Tensor] = {}  # the frozen geometry's world-to-clip matrix of each view, computed once

    def raster(i: int) -> tuple[object, torch.Tensor, torch.Tensor]:
        b = views.batch(torch.tensor([i]), device)
        if i not in to_clip:
            to_clip[i] = mesh_world_to_clip(b.world_to_camera, b.K, W, H, v).float()
        clip_pos = R.transform_pos(to_clip[i], v)
        rast = cache.get(i)
        if rast is None:
            with torch.no_grad():
                rast, _ = R.rasterize(clip_pos, tri, (H * ss, W * ss), precise=True)
            if len(cache) < n_cache:
                cache[i] = rast
        return b, clip_pos, rast

    def counted(b, rast) -> tuple[torch.Tensor, torch.Tensor]:
        """``(straight target [1, H, W, 3], counted pixels [1, H, W, 1] float)``: covered, and inside the mask."""
        target, alpha = straight_images(b)
        m = box_downsample((rast[..., 3:4] > 0).float(), ss) >= 0.5
        if alpha is not None:
            m = m & (alpha > 0.5)
        return target, m.float()

    def view_error(i: int, as_evaluated: bool = False) -> tuple[torch.Tensor, float]:
        """``(the objective's sum over the view's counted values (differentiable), counted values)``; with
        ``as_evaluated`` the squared error of the render the evaluation makes, without the penalty."""
        b, clip_pos, rast = raster(i)
        col = (view_dependent_colors(base, rest, v, camera_centres(b.world_to_camera.float())[0], clamp=False)
               if view_dep else base)
        target, m = counted(b, rast)
        k = float(m.sum()) * 3
        pen = None
        if as_evaluated:
            col = col.clamp(0, 1)
        elif penalised:  # the clamp's own gradient, and the pull back into range
            pen = s.range_penalty * k / col.numel() * ((col - col.clamp(0, 1)) ** 2).sum()
            col = col.clamp(0, 1)
        else:  # the clamp's gradient straight through
            col = col + (col.clamp(0, 1) - col).detach()
        img = box_downsample(shade_vertex_colors(col, rast, clip_pos, tri, bg, topology), ss)
        err = (((img - target) ** 2) * m).sum()
        return (err if pen is None else err + pen), k

    penalised = False  # the straight-through clamp until it stalls (module docstring)
    n_fit = 0.0  # the counted values of the fitting views (this pass also fills the caches)
    for i in fit:
        b, _, rast = raster(i)
        n_fit += float(counted(b, rast)[1].sum()) * 3
    n_fit = max(n_fit, 1.0)

    def fit_loss() -> torch.Tensor:
        opt.zero_grad()
        total = torch.zeros((), device=device)
        for i in fit:
            err = view_error(i)[0] / n_fit
            err.backward()
            total = total + err.detach()
        return total

    def held_psnr() -> float:
        if not held:
            return math.nan
        with torch.no_grad():
            se, n = 0.0, 0.0
            for i in held:
                e, k = view_error(i, as_evaluated=True)
                se, n = se + float(e), n + k
        return -10.0 * math.log10(max(se / max(n, 1.0), 1e-12))

    def fit_value() -> float:
        with torch.no_grad():
            return float(sum(float(view_error(i)[0]) for i in fit) / n_fit)

    def lbfgs():
        return torch.optim.LBFGS(params, lr=1.0, max_iter=max(1, s.check_every), history_size=max(1, s.history),
                                 line_search_fn="strong_wolfe", tolerance_grad=0.0, tolerance_change=0.0)

    opt = lbfgs()
    # no gradient or change tolerance: a mean over ~1e5-1e8 values has gradients of 1e-7 and less per colour, under
    # torch's default tolerance_grad (1e-7), which ended every step after one iteration (measured on a 642-vertex
    # sphere: stuck at 33 dB where the exact fit is reachable); the iterations and the held-out views stop it
    best_psnr = first_psnr = last_psnr = held_psnr()
    best = [p.detach().clone() for p in params]
    best_iters, run, stall, stopped, penalty_from = 0, 0, 0, "iterations", None
    mse_first = mse_last = math.nan
    if monitor is not None and s.iters > 0:
        monitor.start_pass(f"colour solve ({label})", s.iters, 0)
    while run < s.iters:
        if deadline_reached(deadline):
            stopped = "time budget"
            break
        opt.param_groups[0]["max_iter"] = min(s.check_every, s.iters - run)
        loss = float(opt.step(fit_loss))
        run += opt.param_groups[0]["max_iter"]
        mse_first = loss if math.isnan(mse_first) else mse_first
        mse_last = loss
        if not all(bool(torch.isfinite(p).all()) for p in params):
            stopped = "not finite"
            break
        if penalty_from is None and s.range_penalty > 0 and run == opt.param_groups[0]["max_iter"] \
                and fit_value() >= mse_first * (1.0 - 1e-4):  # the first chunk did not move: start again, penalised
            penalised, penalty_from = True, run
            with torch.no_grad():
                for p, b0 in zip(params, best):
                    p.copy_(b0)
            opt = lbfgs()
            mse_first = math.nan
            continue
        if monitor is not None:
            monitor.update(run, loss, float("nan"))
        if not held:
            best, best_iters = [p.detach().clone() for p in params], run
            continue
        p_held = last_psnr = held_psnr()
        if p_held > best_psnr + s.min_gain_db:
            best_psnr, best, best_iters, stall = p_held, [p.detach().clone() for p in params], run, 0
        else:
            stall += 1
            if stall >= s.patience:
                stopped = "held-out views"
                break
    if monitor is not None and s.iters > 0:
        monitor.end_pass()
    if view_dep:  # the render clamps base + terms itself
        dev0 = mesh.v_pos.device
        out = dataclasses.replace(mesh, extras={**ex, "v_sh_base": best[0].to(dev0), "v_sh_rest": best[1].to(dev0)})
    else:
        out = dataclasses.replace(mesh, v_color=best[0].clamp(0, 1).to(mesh.v_pos.device, mesh.v_color.dtype))
    report = {"iters_kept": best_iters, "iters_run": run, "fit_views": len(fit), "held_views": len(held),
              "held_psnr_first": first_psnr, "held_psnr_best": best_psnr, "held_psnr_last": last_psnr,
              "fit_mse_first": mse_first, "fit_mse_last": mse_last, "cached_views": len(cache), "stopped": stopped,
              "view_dependent": view_dep, "range_penalty_from": penalty_from, "seconds": time.perf_counter() - t0}
    if monitor is not None:
        again = "" if penalty_from is None else f" (the straight-through clamp stalled: penalised after {penalty_from})"
        monitor.log(f"colour solve ({label}): {best_iters} of {run} L-BFGS iterations kept ({stopped}){again}, held-out "
                    f"views {first_psnr:.2f} -> {best_psnr:.2f} dB, {report['seconds']:.1f} s")
    return out, report
