"""Forward-backward reprojection error of two depth maps: PGSR's multi-view geometric consistency.

Source: Chen et al. 2024, "PGSR: Planar-based Gaussian Splatting for Efficient and High-Fidelity Surface
Reconstruction", Sec. 3.3, eq. 9-11, in its depth form (the plane-induced homography of eq. 9 replaced by
back-projecting the rendered depth, which maps a pixel to the same point where the depth is that of the local
plane). Our own code from the paper's equations.

For a pixel ``p`` of the reference view ``r`` with depth ``d_r(p) > 0`` (docs/conventions.md §2: OpenCV
cameras, depth = camera z, pixel (row i, col j) centred at ``(j + 0.5, i + 0.5)``):

1. ``X = backproject_r(p, d_r(p))``; ``p_n = project_n(X)`` (pixels of the neighbour view ``n``);
2. ``d_n(p_n)``: the neighbour's depth map sampled **bilinearly** at ``p_n`` (the 2 x 2 pixel centres around it);
3. ``X' = backproject_n(p_n, d_n(p_n))``; ``p' = project_r(X')``;
4. ``φ(p) = ||p − p'||`` in pixels of ``r`` (eq. 10).

``φ`` is 0 when both depths see the same surface. A pixel is **valid** when ``d_r(p) > 0``, ``X`` is in front
of ``n``, every one of the 2 x 2 neighbour pixels that carries bilinear weight lies inside ``n``'s image and has
depth ``> 0`` (an empty pixel or the image edge would pull the sampled depth towards 0), and ``X'`` is in front
of ``r``. The loss (eq. 11) is the mean over valid pixels with ``φ < max_error`` of ``w(p) φ(p)``, with PGSR's
weight ``w = exp(−φ)`` (held constant: a confidence, not a term to optimise; [our choice]) and pixels with
``φ >= max_error`` (occlusions, disagreeing surfaces) dropped. Gradients reach both depth maps: ``d_r`` through
``X`` and the sampling position ``p_n``, ``d_n`` through the bilinear sample.

:func:`reprojection_error_reference` is the per-pixel loop twin of :func:`reprojection_error` (tests).
"""

from __future__ import annotations

import math

import torch

from meshlift.errors import CameraError

__all__ = ["multiview_geometric_loss", "project_pixels", "reprojection_error", "reprojection_error_reference"]

#: A bilinear sample counts as covered when the valid corners hold at least this share of its weight.
_FULL = 1.0 - 1e-6


def _check(depth_r, depth_n, K_r, w2c_r, K_n, w2c_n) -> None:
    if depth_r.ndim != 3 or depth_n.ndim != 3:
        raise CameraError(f"reprojection_error: depths must be [B, H, W], got {tuple(depth_r.shape)} and "
                          f"{tuple(depth_n.shape)}")
    B = depth_r.shape[0]
    if depth_n.shape[0] != B:
        raise CameraError(f"reprojection_error: {B} reference but {depth_n.shape[0]} neighbour depth maps")
    for name, t, shape in (("K_r", K_r, (B, 3, 3)), ("K_n", K_n, (B, 3, 3)), ("world_to_camera_r", w2c_r, (B, 4, 4)),
                           ("world_to_camera_n", w2c_n, (B, 4, 4))):
        if tuple(t.shape) != shape:
            raise CameraError(f"reprojection_error: {name} must be {list(shape)}, got {list(t.shape)}")


def _pixel_grid(B: int, H: int, W: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(u, v)`` ``[B, H, W]``: the pixel centres' coordinates (column + 0.5, row + 0.5)."""
    v, u = torch.meshgrid(torch.arange(H, dtype=dtype, device=device) + 0.5,
                          torch.arange(W, dtype=dtype, device=device) + 0.5, indexing="ij")
    return u.expand(B, H, W), v.expand(B, H, W)


def _unproject(u, v, d, K, w2c):
    """World points ``[B, H, W, 3]`` of depths ``d`` at pixel positions ``(u, v)`` (all ``[B, H, W]``)."""
    k = K[:, None, None]
    pc = torch.stack([(u - k[..., 0, 2]) / k[..., 0, 0] * d, (v - k[..., 1, 2]) / k[..., 1, 1] * d, d], -1)
    R, t = w2c[:, None, None, :3, :3], w2c[:, None, None, :3, 3]
    return ((pc - t)[..., None, :] @ R)[..., 0, :]  # R^T (pc - t)


def project_pixels(X: torch.Tensor, K: torch.Tensor, w2c: torch.Tensor):
    """``(u, v, z)`` ``[B, H, W]`` of world points ``X [B, H, W, 3]`` in the ``B`` cameras ``K [B, 3, 3]``,
    ``w2c [B, 4, 4]`` (OpenCV, pixels, pixel centres at ``+0.5``; z = camera depth; u, v only where z > 0).
    Differentiable in ``X``."""
    R, t = w2c[:, None, None, :3, :3], w2c[:, None, None, :3, 3]
    pc = (R @ X[..., None])[..., 0] + t
    z = pc[..., 2]
    zs = torch.where(z > 0, z, torch.ones_like(z))
    k = K[:, None, None]
    return k[..., 0, 0] * pc[..., 0] / zs + k[..., 0, 2], k[..., 1, 1] * pc[..., 1] / zs + k[..., 1, 2], z


def reprojection_error(depth_r: torch.Tensor, depth_n: torch.Tensor, K_r: torch.Tensor, world_to_camera_r: torch.Tensor,
                       K_n: torch.Tensor, world_to_camera_n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward-backward reprojection error ``φ`` of every pixel of the reference views (module docstring).

    Args:
        depth_r: ``[B, H, W]`` float depth maps of the reference views (camera z, world units; 0 = empty).
        depth_n: ``[B, Hn, Wn]`` depth maps of one neighbour view per reference view (same dtype).
        K_r, world_to_camera_r: ``[B, 3, 3]`` / ``[B, 4, 4]`` the reference cameras (OpenCV, pixels).
        K_n, world_to_camera_n: the neighbour cameras, same shapes.

    Returns:
        ``(phi [B, H, W], valid [B, H, W] bool)``: ``φ`` in pixels of the reference view (differentiable w.r.t.
        both depth maps; 0 where not valid, with no gradient there) and where it is defined.

    Raises:
        CameraError: mismatched shapes.
    """
    _check(depth_r, depth_n, K_r, world_to_camera_r, K_n, world_to_camera_n)
    B, H, W = depth_r.shape
    Hn, Wn = depth_n.shape[1:]
    dt, dev = depth_r.dtype, depth_r.device
    K_r, K_n = K_r.to(dt), K_n.to(dt)
    w2c_r, w2c_n = world_to_camera_r.to(dt), world_to_camera_n.to(dt)
    u, v = _pixel_grid(B, H, W, dt, dev)
    ok_r = depth_r.detach() > 0
    d_r = torch.where(ok_r, depth_r, torch.ones_like(depth_r))  # a harmless stand-in where empty (masked below)
    un, vn, zn = project_pixels(_unproject(u, v, d_r, K_r, w2c_r), K_n, w2c_n)
    front = zn.detach() > 0
    un = torch.where(front, un, torch.full_like(un, -1.0))  # behind n: sampled outside, masked
    vn = torch.where(front, vn, torch.full_like(vn, -1.0))
    # bilinear sample (grid_sample, align_corners=False: normalised -1 / +1 are the image's outer edges)
    grid = torch.stack([2.0 * un / Wn - 1.0, 2.0 * vn / Hn - 1.0], -1)
    filled = (depth_n.detach() > 0).to(dt)
    cover = torch.nn.functional.grid_sample(filled[:, None], grid.detach(), mode="bilinear", padding_mode="zeros",
                                            align_corners=False)[:, 0]
    dn = torch.nn.functional.grid_sample(depth_n[:, None], grid, mode="bilinear", padding_mode="zeros",
                                         align_corners=False)[:, 0]
    ok = ok_r & front & (cover >= _FULL)
    dn = torch.where(ok, dn, torch.ones_like(dn))
    ur, vr, zr = project_pixels(_unproject(un, vn, dn, K_n, w2c_n), K_r, w2c_r)
    ok = ok & (zr.detach() > 0)
    sq = (ur - u) ** 2 + (vr - v) ** 2
    sq = torch.where(ok, sq, torch.ones_like(sq))
    phi = torch.where(ok, torch.sqrt(sq.clamp_min(1e-20)), torch.zeros_like(sq))
    return phi, ok


def reprojection_error_reference(depth_r, depth_n, K_r, world_to_camera_r, K_n, world_to_camera_n):
    """Per-pixel loop twin of :func:`reprojection_error` (same arguments, same ``(phi, valid)``; no gradient;
    float64 inside). For tests on tiny images."""
    _check(depth_r, depth_n, K_r, world_to_camera_r, K_n, world_to_camera_n)
    B, H, W = depth_r.shape
    Hn, Wn = depth_n.shape[1:]
    phi = torch.zeros(B, H, W, dtype=torch.float64)
    valid = torch.zeros(B, H, W, dtype=torch.bool)

    def to_world(x, y, d, K, R, t):  # pixel position and depth -> world point
        pc = torch.tensor([(x - K[0, 2]) / K[0, 0] * d, (y - K[1, 2]) / K[1, 1] * d, d], dtype=torch.float64)
        return R.T @ (pc - t)

    def to_pixel(X, K, R, t):  # world point -> (u, v), None behind the camera
        q = R @ X + t
        if not q[2] > 0:
            return None
        return float(K[0, 0] * q[0] / q[2] + K[0, 2]), float(K[1, 1] * q[1] / q[2] + K[1, 2])

    for b in range(B):
        Kr, Kn = K_r[b].double().cpu(), K_n[b].double().cpu()
        Rr, tr = world_to_camera_r[b, :3, :3].double().cpu(), world_to_camera_r[b, :3, 3].double().cpu()
        Rn, tn = world_to_camera_n[b, :3, :3].double().cpu(), world_to_camera_n[b, :3, 3].double().cpu()
        Dn = depth_n[b].double().cpu()
        for i in range(H):
            for j in range(W):
                d = float(depth_r[b, i, j])
                if not d > 0:
                    continue
                x, y = j + 0.5, i + 0.5
                pn = to_pixel(to_world(x, y, d, Kr, Rr, tr), Kn, Rn, tn)
                if pn is None:
                    continue
                un, vn = pn
                # bilinear over the 2 x 2 centres around (un, vn)
                fx, fy = un - 0.5, vn - 0.5
                j0, i0 = math.floor(fx), math.floor(fy)
                ax, ay = fx - j0, fy - i0
                cover, val = 0.0, 0.0
                for di, wy in ((0, 1 - ay), (1, ay)):
                    for dj, wx in ((0, 1 - ax), (1, ax)):
                        ii, jj = i0 + di, j0 + dj
                        if 0 <= ii < Hn and 0 <= jj < Wn:
                            z = float(Dn[ii, jj])
                            val += wx * wy * z
                            cover += wx * wy * (1.0 if z > 0 else 0.0)
                if cover < _FULL:
                    continue
                pr = to_pixel(to_world(un, vn, val, Kn, Rn, tn), Kr, Rr, tr)
                if pr is None:
                    continue
                ur, vr = pr
                phi[b, i, j] = math.hypot(ur - x, vr - y)
                valid[b, i, j] = True
    return phi, valid


def multiview_geometric_loss(depth_r: torch.Tensor, depth_n: torch.Tensor, K_r: torch.Tensor,
                             world_to_camera_r: torch.Tensor, K_n: torch.Tensor, world_to_camera_n: torch.Tensor,
                             max_error: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """PGSR's multi-view geometric loss (eq. 11): mean over valid pixels with ``φ < max_error`` of ``exp(−φ) φ``.

    Args: as :func:`reprojection_error`; ``max_error`` in pixels (> 0; PGSR: 1).

    Returns:
        ``(loss, used)``: ``loss`` a 0-dim tensor in pixels (0 with no pixel used; no host sync: a masked mean
        without boolean indexing), ``used`` the 0-dim fraction of the reference pixels that entered it
        (detached, for logging).

    Raises:
        CameraError: mismatched shapes; ConfigError: ``max_error <= 0``.
    """
    from meshlift.errors import ConfigError

    if not (math.isfinite(max_error) and max_error > 0):
        raise ConfigError(f"multiview_geometric_loss: max_error must be > 0 pixels, got {max_error!r}")
    phi, valid = reprojection_error(depth_r, depth_n, K_r, world_to_camera_r, K_n, world_to_camera_n)
    use = valid & (phi.detach() < max_error)
    w = torch.exp(-phi.detach())
    term = torch.where(use, w * phi, torch.zeros_like(phi))
    n = use.sum()
    return term.sum() / n.clamp(min=1), (n.to(phi.dtype) / use.numel()).detach()
