"""Depth re-initialisation of the Gaussians (Mini-Splatting2's ``depth_reinit``, used by MILo at step 2000).

MILo (Guédon et al. 2025) trains its Gaussians with Mini-Splatting2's schedule (Fang & Wang 2024; project
notes §1): once, during densification, the current Gaussians are rendered at every training view and
**replaced** by new Gaussians at points back-projected from the rendered depth. The new cloud lies on the
surface the views agree on, free-space floaters are gone, and every new Gaussian starts small (its kNN
scale in the dense point cloud), so the later median depth — the depth of a Gaussian *centre* — is close to
the surface instead of a fat blob's centre behind it.

Here (:func:`depth_points`): per view, the pixels whose rendered opacity exceeds ``min_alpha`` (the
transmittance crossed 0.5 there, :func:`meshlift.methods.milo.mesh_in_loop.surface_depth`) and whose target
pixel is not empty (alpha > 0.5 when the views have masks) are candidates; ``num_points`` of all views'
candidates are drawn uniformly without replacement (seeded; a view with more than
``CANDIDATES_PER_POINT × num_points / views`` candidates keeps a random subset of that size, whose
members are drawn with the weight of the candidates they stand for), back-projected at a uniformly jittered
position inside the pixel at the rendered median depth (OpenCV pinhole, docs/conventions.md §2), and take
the target's straight sRGB colour there. [Sampling details are our reading of the notes: Mini-Splatting2
weights its draw by the accumulated alpha; with ``min_alpha`` = 0.5 every candidate is opaque.]
:meth:`meshlift.methods.milo.strategy.MiloStrategy` turns the points into Gaussians
(:func:`meshlift.methods.gaussians.init.init_gaussians`) and swaps them in with fresh Adam moments.
"""

from __future__ import annotations

import dataclasses
import torch

from meshlift.errors import ConfigError

__all__ = ["CANDIDATES_PER_POINT", "backproject", "depth_points"]

#: Each view keeps at most ``CANDIDATES_PER_POINT × num_points / views`` candidate pixels (a uniform random
#: subset, weighted by how many it stands for), so memory is O(num_points), not O(views × pixels).
CANDIDATES_PER_POINT = 4


def backproject(xy: torch.Tensor, depth: torch.Tensor, world_to_camera: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """World points of pixel positions ``xy [P, 2]`` (``(x, y)``, pixel (i, j)'s centre at ``(j + .5, i + .5)``)
    at camera depths ``depth [P]`` for one camera (``world_to_camera [4, 4]``, ``K [3, 3]``): ``[P, 3]``.

    The inverse of :func:`meshlift.methods.milo.depth_fusion.project_points` (tested against it)."""
    Kd = K.to(xy.dtype)
    y = (xy[:, 1] - Kd[1, 2]) / Kd[1, 1]
    x = (xy[:, 0] - Kd[0, 2] - Kd[0, 1] * y) / Kd[0, 0]
    pc = torch.stack([x * depth, y * depth, depth], dim=1)
    R = world_to_camera[:3, :3].to(xy.dtype)
    t = world_to_camera[:3, 3].to(xy.dtype)
    return (pc - t) @ R  # R^T (pc - t)


@torch.no_grad()
def depth_points(params: dict, views, num_points: int, *, near: float, device: torch.device, settings,
                 backend: str = "auto", min_alpha: float = 0.5,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(points [P, 3], colours [P, 3] sRGB in [0, 1])`` on the rendered surface of ``params`` (module docstring).

    Args:
        params: the trainer's stored tensors; views: :class:`~meshlift.methods.gaussians.views.SplatViews`.
        num_points: points to draw (fewer when there are fewer candidate pixels), >= 1.
        near: near plane (world units); settings: the trainer's :class:`~meshlift.render.splat.SplatSettings`.
        min_alpha: rendered opacity a pixel needs to hold a surface.
        generator: CPU generator of the draw and the jitter.

    Returns:
        Float32 CPU tensors; ``P = 0`` when no pixel is covered.

    Raises:
        ConfigError: ``num_points < 1`` or ``min_alpha`` outside (0, 1).
    """
    from meshlift.methods.gaussians.trainer import render_params

    if isinstance(num_points, bool) or not isinstance(num_points, int) or num_points < 1:
        raise ConfigError(f"depth re-init: reinit_points must be an int >= 1, got {num_points!r}")
    if not 0.0 < float(min_alpha) < 1.0:
        raise ConfigError(f"depth re-init: min_alpha must be in (0, 1), got {min_alpha!r}")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    st = dataclasses.replace(settings, outputs=("median_depth",))
    bg = torch.zeros(3, device=device)
    W = views.width
    cap = max(1, -(-CANDIDATES_PER_POINT * num_points // max(len(views), 1)))
    cand = []  # (view, pixel index) [n, 2], depth [n], weight [n] of the kept candidate pixels
    for i in range(len(views)):
        b = views.batch(torch.tensor([i]), device)
        _, alpha, info = render_params(params, b, 0, bg, near, st, backend)
        d = info["median_depth"][0, ..., 0].reshape(-1).float().cpu()
        ok = (alpha[0, ..., 0].reshape(-1).float().cpu() > min_alpha) & (d > 0)
        if b.alpha is not None:
            ok &= b.alpha[0, ..., 0].reshape(-1).float().cpu() > 0.5
        pix = ok.nonzero().squeeze(-1)
        w = 1.0
        if pix.numel() > cap:  # memory bound: a random subset stands for the view's candidates
            w = pix.numel() / cap
            pix = pix[torch.randperm(pix.numel(), generator=gen)[:cap]]
        cand.append((torch.stack([torch.full_like(pix, i), pix], dim=1), d[pix], torch.full((pix.numel(),), w)))
    idx = torch.cat([c[0] for c in cand]) if cand else torch.zeros(0, 2, dtype=torch.int64)
    dep = torch.cat([c[1] for c in cand]) if cand else torch.zeros(0)
    wts = torch.cat([c[2] for c in cand]) if cand else torch.zeros(0)
    if idx.shape[0] == 0:
        return torch.zeros(0, 3), torch.zeros(0, 3)
    if idx.shape[0] > num_points:
        if idx.shape[0] < (1 << 24):  # torch.multinomial's category limit
            pick = torch.multinomial(wts.double(), num_points, replacement=False, generator=gen)
        else:  # very large draws: uniform over the kept candidates (ignores the views' weights)
            pick = torch.randperm(idx.shape[0], generator=gen)[:num_points]
        idx, dep = idx[pick], dep[pick]
    jitter = torch.rand(idx.shape[0], 2, generator=gen)
    pts = torch.zeros(idx.shape[0], 3)
    rgb = torch.zeros(idx.shape[0], 3)
    for i in torch.unique(idx[:, 0]).tolist():
        m = idx[:, 0] == i
        pix = idx[m, 1]
        xy = torch.stack([(pix % W).float(), (pix // W).float()], dim=1) + jitter[m]
        pts[m] = backproject(xy, dep[m], views.world_to_camera[i].float().cpu(), views.K[i].float().cpu())
        img = views.images[i].float().cpu().reshape(-1, 3)[pix]
        a = views.alpha[i].float().cpu().reshape(-1)[pix] if views.alpha is not None else torch.ones(pix.shape[0])
        rgb[m] = (img / a.clamp(min=1e-3)[:, None]).clamp(0, 1)
    return pts, rgb
