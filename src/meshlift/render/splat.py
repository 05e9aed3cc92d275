"""Differentiable 3D Gaussian splatting: the public functional ops (gsplat-like call shape).

- :func:`rasterize_gaussians` — Gaussians + cameras → images, alpha and per-Gaussian info
  (colour or SH, expected / median depth, normal maps).
- :func:`gaussian_statistics` — no-grad per-Gaussian importance statistics (Σ αT, pixels touched,
  pixels where it is the largest contributor), Mini-Splatting / MILo's pruning signal.
- :func:`depth_to_normals` — normals from a depth map by central differences (2DGS, Huang et al. 2024,
  Sec. 4.2 "normal consistency").
- :func:`apply_filter_3d`, :func:`filter_3d_variance` — the Mip-Splatting 3D smoothing filter
  (Yu et al. 2024, "Mip-Splatting", Sec. 5.1, eq. 7-9).

Method: 3DGS (Kerbl et al. 2023, Sec. 4 and 6) with gsplat's (Ye et al. 2024, arXiv:2409.06765)
culling, opacity-aware bounding boxes and tile binning. Conventions: docs/conventions.md,
"Gaussian splatting" (OpenCV ``world_to_camera``, pixel centres at ``j + 0.5``, quaternions (w,x,y,z),
SH basis and order, low-pass, alpha rules).

Two implementations, one API, picked by ``backend`` (argument, else the current choice,
:func:`meshlift.kernels.choose_backend`, default ``"auto"``): ``"torch"`` — the readable reference in :mod:`meshlift.render.splat_reference` (CPU and
CUDA, autograd, memory bounded by ``SplatSettings.chunk_elements``); ``"triton"`` — the kernels of
:mod:`meshlift.kernels.splat_triton` (hand-written backward); ``"auto"`` = Triton on CUDA when it is
importable, else torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from meshlift.errors import RenderError
from meshlift.render import splat_reference as ref
from meshlift.render.splat_reference import spherical_harmonics, tile_grid

__all__ = [
    "SplatSettings",
    "rasterize_gaussians",
    "gaussian_statistics",
    "depth_to_normals",
    "unit_depth_rays",
    "plane_depth",
    "apply_filter_3d",
    "filter_3d_variance",
    "spherical_harmonics",
    "rgb_to_sh",
    "sh_to_rgb",
    "RENDER_MODES",
    "EXTRA_OUTPUTS",
]

#: ``render_mode`` values (gsplat's): channels of the returned image.
RENDER_MODES = ("RGB", "D", "ED", "RGB+D", "RGB+ED")
#: Names accepted in ``SplatSettings.outputs`` (returned in ``info``).
EXTRA_OUTPUTS = ("expected_depth", "median_depth", "normal", "plane_depth", "median_plane_depth")


@dataclass(frozen=True)
class SplatSettings:
    """Options of :func:`rasterize_gaussians` that rarely change between calls."""

    eps2d: float = 0.3
    """Screen-space low-pass: variance (pixels²) added to every projected 2D covariance (3DGS)."""
    antialiased: bool = False
    """Mip-Splatting 2D filter: scale opacity by ``sqrt(det Σ / det(Σ + eps2d I))`` (gsplat's
    ``rasterize_mode="antialiased"``)."""
    radius_clip: float = 0.0
    """Cull Gaussians whose screen radii (pixels) are both ``<=`` this."""
    tile_size: int = 16
    """Tile edge in pixels for binning and compositing."""
    ellipse_tiles: bool = True
    """Bin each Gaussian only to the tiles of its bounding box that its ellipse of reach touches (the pixels where it
    can pass the 1/255 cut; tile-accurate binning, Speedy-Splat's AccuTile, :func:`meshlift.render.splat_reference.
    ellipse_row_spans`): the same image with shorter tile lists (fox views: 32 % fewer pairs). False: whole
    bounding boxes, as gsplat 1.5 bins."""
    alpha_max: float = 0.99
    """Per-Gaussian alpha clamp ``min(alpha_max, o·exp(-σ))`` (3DGS 0.99; gsplat uses 0.999)."""
    outputs: Tuple[str, ...] = ()
    """Extra maps returned in ``info``: any of ``"expected_depth"``, ``"median_depth"``, ``"normal"``,
    ``"plane_depth"``, ``"median_plane_depth"``."""
    chunk_elements: int = 1 << 22
    """Torch backend memory budget: Gaussian×pixel pairs composited at once (lower it on OOM)."""
    check_inputs: bool = True
    """Raise on NaN/Inf inputs, negative scales, zero quaternions, opacities outside [0, 1]."""


SH_C0 = ref.SH_C0


def rgb_to_sh(rgb: torch.Tensor) -> torch.Tensor:
    """Degree-0 SH coefficient that renders as colour ``rgb``: ``(rgb - 0.5) / C0`` (3DGS)."""
    return (rgb - 0.5) / SH_C0


def sh_to_rgb(sh0: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`rgb_to_sh`."""
    return sh0 * SH_C0 + 0.5


# --------------------------------------------------------------------------------------------------
# Validation and backend choice
# --------------------------------------------------------------------------------------------------


def _check_inputs(means, quats, scales, opacities, colors, world_to_camera, K, width, height, near, far,
                  sh_degree, render_mode, settings, defer: bool = False):
    """Raise :class:`RenderError` on bad shapes, types, devices, sizes and modes; with
    ``settings.check_inputs`` also on bad values (one device pass). ``defer``: return the value checks'
    counts ``[5]`` (a device tensor) instead of reading them back here, for :func:`_raise_bad_inputs` at a
    later read-back (the Triton path reads them with the intersection count: no extra host sync);
    None when there is nothing to check."""
    for name, t in (("means", means), ("quats", quats), ("scales", scales), ("opacities", opacities),
                    ("colors", colors), ("world_to_camera", world_to_camera), ("K", K)):
        if not isinstance(t, torch.Tensor):
            raise RenderError(f"rasterize_gaussians: {name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise RenderError(f"rasterize_gaussians: {name} must be floating point, got {t.dtype}")
    if means.ndim != 2 or means.shape[1] != 3:
        raise RenderError(f"means must have shape [N, 3], got {list(means.shape)}")
    N = means.shape[0]
    for name, t, shape in (("quats", quats, (N, 4)), ("scales", scales, (N, 3)), ("opacities", opacities, (N,))):
        if tuple(t.shape) != shape:
            raise RenderError(f"{name} must have shape {list(shape)} (N = {N} from means), got {list(t.shape)}")
    if world_to_camera.ndim != 3 or tuple(world_to_camera.shape[1:]) != (4, 4):
        raise RenderError(f"world_to_camera must have shape [C, 4, 4], got {list(world_to_camera.shape)}")
    C = world_to_camera.shape[0]
    if tuple(K.shape) != (C, 3, 3):
        raise RenderError(f"K must have shape [C, 3, 3] with C = {C}, got {list(K.shape)}")
    if sh_degree is None:
        if not (colors.ndim == 2 and colors.shape[0] == N) and not (colors.ndim == 3 and colors.shape[:2] == (C, N)):
            raise RenderError(f"colors must be [N, D] or [C, N, D] (N={N}, C={C}) when sh_degree is None, "
                              f"got {list(colors.shape)}; pass sh_degree for SH coefficients [N, K, 3]")
    else:
        if colors.ndim != 3 or colors.shape[0] != N or colors.shape[2] != 3:
            raise RenderError(f"SH colors must have shape [N, K, 3], got {list(colors.shape)}")
        if not 0 <= int(sh_degree) <= 3 or colors.shape[1] < (int(sh_degree) + 1) ** 2:
            raise RenderError(f"sh_degree={sh_degree} needs 0..3 and (sh_degree+1)^2 <= K = {colors.shape[1]}")
    if int(width) <= 0 or int(height) <= 0:
        raise RenderError(f"width and height must be positive, got {width}x{height}")
    if not 0 < near < far:
        raise RenderError(f"need 0 < near < far, got near={near}, far={far}")
    if render_mode not in RENDER_MODES:
        raise RenderError(f"render_mode must be one of {RENDER_MODES}, got {render_mode!r}")
    for o in settings.outputs:
        if o not in EXTRA_OUTPUTS:
            raise RenderError(f"SplatSettings.outputs: unknown {o!r}; choose from {EXTRA_OUTPUTS}")
    devs = {t.device for t in (means, quats, scales, opacities, colors, world_to_camera, K)}
    if len(devs) > 1:
        raise RenderError(f"all tensors must be on one device, got {sorted(map(str, devs))}")
    if not settings.check_inputs or N == 0:
        return None
    # All value checks in one device pass (on CUDA with triton: one kernel), read back once.
    with torch.no_grad():
        from meshlift.kernels import choose_backend

        if means.is_cuda and choose_backend("splat", None, means.device) == "triton":
            from meshlift.kernels import splat_triton

            flags = splat_triton.count_bad_gaussians(means, quats, scales, opacities, colors)
        else:
            flags = torch.stack([
                (~torch.isfinite(means)).any(-1).sum(),
                ((~torch.isfinite(quats)).any(-1) | (quats == 0).all(-1)).sum(),
                ((~torch.isfinite(scales)).any(-1) | (scales < 0).any(-1)).sum(),
                ((~torch.isfinite(opacities)) | (opacities < 0) | (opacities > 1)).sum(),
                (~torch.isfinite(colors)).sum(),
            ])
    if defer:
        return flags
    _raise_bad_inputs(flags.tolist())
    return None


def _raise_bad_inputs(flags) -> None:
    """Raise :class:`RenderError` for the first non-zero count of :func:`_check_inputs`' value checks
    (means, quats, scales, opacities rows; colour entries)."""
    what = [("means", "NaN/Inf rows", "drop or fix those Gaussians"),
            ("quats", "NaN/Inf or zero-length rows", "use any non-zero quaternion (w, x, y, z)"),
            ("scales", "NaN/Inf or negative values", "pass activated scales, e.g. exp(log_scales)"),
            ("opacities", "values outside [0, 1] or NaN", "pass activated opacities, sigmoid(logits)"),
            ("colors", "NaN/Inf values", "check the colour / SH parameters")]
    for n_bad, (name, problem, fix) in zip(flags, what):
        if n_bad:
            raise RenderError(f"rasterize_gaussians: {name} has {int(n_bad)} entries with {problem}; {fix} "
                              "(or set SplatSettings(check_inputs=False) to skip these checks)")


def _resolve_backend(backend: Optional[str], device: torch.device, camera_grad: bool = False) -> str:
    """``"torch"`` or ``"triton"`` (:func:`meshlift.kernels.choose_backend`); ``auto`` keeps a call that needs
    gradients to the cameras on torch, and ``"triton"`` refuses it."""
    from meshlift.kernels import choose_backend

    name = choose_backend("splat", backend, device, prefer_torch=camera_grad)
    if camera_grad and name == "triton":
        raise RenderError("splat backend 'triton' gives no gradient to world_to_camera / K; use backend='torch' "
                          "for camera optimisation (or detach the cameras)")
    return name


def _ops(backend: str):
    if backend == "torch":
        return ref
    from meshlift.kernels import splat_triton

    return splat_triton


# --------------------------------------------------------------------------------------------------
# Shared stages
# --------------------------------------------------------------------------------------------------


def _camera_centres(world_to_camera: torch.Tensor) -> torch.Tensor:
    R = world_to_camera[:, :3, :3]
    t = world_to_camera[:, :3, 3]
    return -(R.transpose(-1, -2) @ t[..., None])[..., 0]  # [C,3]


def _gaussian_normals(means, quats, scales, world_to_camera) -> torch.Tensor:
    """World normals ``[C,N,3]``: the axis of the smallest scale, flipped to face each camera."""
    Rg = ref.quat_to_rotmat(quats)  # [N,3,3], columns = local axes
    idx = scales.detach().argmin(dim=-1)
    n = torch.gather(Rg, 2, idx[:, None, None].expand(-1, 3, 1))[..., 0]  # [N,3]
    view = means[None] - _camera_centres(world_to_camera)[:, None]  # [C,N,3]
    sign = torch.where((view * n[None]).sum(-1, keepdim=True) > 0, -1.0, 1.0).to(n.dtype)
    return n[None] * sign


def _plane_distances(means, normals, world_to_camera) -> torch.Tensor:
    """``[C,N,1]`` signed distance ``n · (μ − c)`` from each camera centre ``c`` to each Gaussian's plane
    (normal ``n`` of :func:`_gaussian_normals`, facing the camera, so the value is negative)."""
    view = means[None] - _camera_centres(world_to_camera)[:, None]  # [C,N,3]
    return (normals * view).sum(-1, keepdim=True)


def unit_depth_rays(K: torch.Tensor, world_to_camera: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """World-frame ray directions ``[C, H, W, 3]`` with **unit camera z** (not unit length, unlike
    :meth:`meshlift.cameras.Cameras.pixel_rays`; docs/conventions.md §4): ``Rᵀ K⁻¹ (j + 0.5, i + 0.5, 1)``
    through the pixel centres, so the point at depth ``z`` on the ray of pixel (i, j) is ``c + z · ray``."""
    dev, dtype = world_to_camera.device, world_to_camera.dtype
    K = K.to(dtype)
    jj = torch.arange(width, device=dev, dtype=dtype) + 0.5
    ii = torch.arange(height, device=dev, dtype=dtype) + 0.5
    x = (jj[None, None, :] - K[:, 0, 2, None, None]) / K[:, 0, 0, None, None]  # [C,1,W]
    y = (ii[None, :, None] - K[:, 1, 2, None, None]) / K[:, 1, 1, None, None]  # [C,H,1]
    C = world_to_camera.shape[0]
    d = torch.stack(torch.broadcast_tensors(x, y, torch.ones((C, 1, 1), device=dev, dtype=dtype)), dim=-1)
    return torch.einsum("cji,chwj->chwi", world_to_camera[:, :3, :3], d)  # Rᵀ d


def plane_depth(normal: torch.Tensor, distance: torch.Tensor, K: torch.Tensor, world_to_camera: torch.Tensor,
                eps: float = 1e-6) -> torch.Tensor:
    """Unbiased planar depth ``[C, H, W, 1]`` from the alpha-blended plane of the Gaussians (PGSR, Chen et
    al. 2024, Sec. 3.1, eq. 6-7): the rendered normal ``N = Σ wᵢ nᵢ`` and plane distance ``D = Σ wᵢ nᵢ·(μᵢ − c)``
    define the plane ``N · (x − c) = D``; its depth along the pixel's ray is ``z = D / (N · ray)``. The
    blending weights cancel, so neither map needs normalising by alpha. Pixels where the plane is seen
    edge-on or from behind (``N · ray >= −eps``) get depth 0 (empty).

    Args:
        normal: ``[C, H, W, 3]`` world normal map (``info["normal"]``, unnormalised);
        distance: ``[C, H, W, 1]`` blended plane distance (camera-centre to plane, negative in front);
        K, world_to_camera: ``[C, 3, 3]`` / ``[C, 4, 4]``.
    """
    C, H, W, _ = normal.shape
    ray = unit_depth_rays(K, world_to_camera, W, H).to(normal.dtype)
    denom = (normal * ray).sum(-1, keepdim=True)
    ok = denom < -eps * normal.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    safe = torch.where(ok, denom, -torch.ones_like(denom))
    z = distance / safe
    return torch.where(ok & (z > 0), z, torch.zeros_like(z))


def _colors(means, colors, world_to_camera, sh_degree, C, ops=ref):
    if sh_degree is None:
        return colors if colors.ndim == 3 else colors[None].expand(C, -1, -1)
    if ops is not ref:
        return ops.sh_colors(int(sh_degree), means, _camera_centres(world_to_camera), colors)
    dirs = means[None] - _camera_centres(world_to_camera)[:, None]  # [C,N,3]
    rgb = spherical_harmonics(int(sh_degree), dirs, colors[None])
    return torch.clamp_min(rgb + 0.5, 0.0)


# --------------------------------------------------------------------------------------------------
# Public ops
# --------------------------------------------------------------------------------------------------


def rasterize_gaussians(
    means: torch.Tensor,
    quats: torch.Tensor,
    scales: torch.Tensor,
    opacities: torch.Tensor,
    colors: torch.Tensor,
    world_to_camera: torch.Tensor,
    K: torch.Tensor,
    width: int,
    height: int,
    near: float = 0.01,
    far: float = 1e10,
    sh_degree: Optional[int] = None,
    background: Optional[torch.Tensor] = None,
    render_mode: str = "RGB",
    settings: Optional[SplatSettings] = None,
    backend: Optional[str] = None,
    isect_capacity: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor, dict]:
    """Render ``N`` 3D Gaussians into ``C`` cameras (3DGS; conventions "Gaussian splatting").

    Args:
        means: ``[N, 3]`` float centres (world units).
        quats: ``[N, 4]`` rotations (w, x, y, z); normalised here, any non-zero length accepted.
        scales: ``[N, 3]`` standard deviations (activated, ``>= 0``; 3DGS stores ``log``).
        opacities: ``[N]`` activated opacities in [0, 1].
        colors: ``[N, D]`` or ``[C, N, D]`` features when ``sh_degree`` is None, else SH coefficients
            ``[N, K, 3]`` (``K >= (sh_degree+1)^2``) evaluated towards the camera centre, then
            ``rgb = max(SH + 0.5, 0)``.
        world_to_camera: ``[C, 4, 4]`` OpenCV extrinsics; K: ``[C, 3, 3]`` intrinsics (pixels).
        width, height: image size in pixels.
        near, far: Gaussians whose centre depth is outside ``[near, far]`` are culled.
        sh_degree: SH degree to evaluate (0..3), or None for plain features.
        background: ``[D]`` or ``[C, D]`` colour composited behind (``+ (1 - alpha) · background``);
            applies to the colour channels only.
        render_mode: ``"RGB"``, ``"D"`` (accumulated depth Σ αT z), ``"ED"`` (expected depth
            Σ αT z / Σ αT), ``"RGB+D"``, ``"RGB+ED"``; depth is appended as the last channel.
        settings: :class:`SplatSettings` (low-pass, tile size, alpha clamp, extra outputs, budget).
        backend: ``"auto"``, ``"torch"`` or ``"triton"`` (default: the current choice,
            :func:`meshlift.kernels.use_kernels`, else ``"auto"``: Triton for CUDA tensors when triton imports and the cameras need no gradient).
            The Triton path composites in float32 whatever the input dtype.
        isect_capacity: Triton path: size the tile lists by this many (tile, Gaussian) pairs instead of reading
            the count back (no host wait in the call; :func:`meshlift.kernels.splat_triton.isect_tiles`).
            ``info`` then holds ``isect_needed`` (``[1]`` int64 device tensor, the true count): the render is
            right exactly when ``isect_needed <= isect_capacity``, which the caller checks later (and renders
            again without a capacity otherwise). Ignored by the PyTorch path (it always sizes exactly).

    Returns:
        ``(image [C, H, W, D'], alpha [C, H, W, 1], info)``; ``info`` holds ``means2d [C,N,2]`` (its
        ``.grad`` is kept after backward, for densification), ``radii [C,N,2]`` int32, ``depths [C,N]``
        (camera z), ``conics [C,N,3]``, ``opacities [C,N]`` (after the 2D filter), ``visible [C,N]``
        bool, the tile lists (``flatten_ids``, ``isect_offsets [C,th,tw]``, ``tile_size``,
        ``tile_width``, ``tile_height``), ``width``, ``height``, ``n_cameras``, ``backend``, and the maps
        named in ``settings.outputs``: ``expected_depth [C,H,W,1]``, ``median_depth [C,H,W,1]`` (depth
        of the Gaussian where T crosses 0.5), ``normal [C,H,W,3]`` (world frame, Σ αT n of each
        Gaussian's shortest axis oriented towards the camera; not renormalised), ``plane_depth [C,H,W,1]``
        (camera z of the blended Gaussian plane along each pixel's ray, PGSR's unbiased depth,
        :func:`plane_depth`; with it ``plane_distance [C,H,W,1]`` and ``normal``), ``median_plane_depth
        [C,H,W,1]`` (camera z of the plane of the Gaussian where T crosses 0.5 along each pixel's ray: RaDe-GS's
        median depth made exact for flat Gaussians, unaffected by the Gaussians behind). Empty pixels are 0.

    Raises:
        RenderError: bad shapes, dtypes, devices, sizes, modes; with ``settings.check_inputs``, NaN or Inf
            values, negative scales, zero quaternions, opacities outside [0, 1].

    Zero Gaussians give a background-only image and empty info tensors.
    """
    settings = settings or SplatSettings()
    pending = _check_inputs(means, quats, scales, opacities, colors, world_to_camera, K, width, height, near, far,
                            sh_degree, render_mode, settings, defer=True)
    width, height = int(width), int(height)
    C = world_to_camera.shape[0]
    cam_grad = torch.is_grad_enabled() and (world_to_camera.requires_grad or K.requires_grad)
    bname = _resolve_backend(backend, means.device, cam_grad)
    fused = bname == "triton"
    capped = fused and isect_capacity is not None
    if pending is not None and (not fused or capped):  # else carried by the tile lists' one read-back
        _raise_bad_inputs(pending.tolist())
    ops = _ops(bname)
    dtype = means.dtype
    w2c, Kc = world_to_camera.to(dtype), K.to(dtype)
    ts = int(settings.tile_size)
    tiles_w, tiles_h = tile_grid(width, height, ts)
    # Triton: the projection launch also writes the tile counts and screen records; the input checks are
    # read back with the intersection count (one host sync per call).
    proj = ops.project_gaussians(means, quats, scales, opacities, w2c, Kc, width, height, near, far,
                                 settings.eps2d, settings.antialiased, settings.radius_clip,
                                 **({"tile_size": ts, "tiles_w": tiles_w, "tiles_h": tiles_h,
                                     "ellipse_tiles": settings.ellipse_tiles} if fused else {}))
    means2d = proj["means2d"]
    if means2d.requires_grad:
        means2d.retain_grad()
    feats = [_colors(means, colors, w2c, sh_degree, C, ops)] if "RGB" in render_mode else []
    n_color = feats[0].shape[-1] if feats else 0
    want_ed = "ED" in render_mode or "expected_depth" in settings.outputs
    want_depth = want_ed or "D" in render_mode
    if want_depth:
        feats.append(proj["depths"][..., None])
    want_plane = "plane_depth" in settings.outputs
    want_normal = "normal" in settings.outputs or want_plane
    want_mplane = "median_plane_depth" in settings.outputs
    # the Gaussians' plane normals and camera distances, computed once for the maps that need them
    normals = _gaussian_normals(means, quats, scales, w2c).to(dtype) if want_normal or want_mplane else None
    distances = _plane_distances(means, normals, w2c).to(dtype) if want_plane or want_mplane else None
    if want_normal:
        feats.append(normals)
        if want_plane:
            feats.append(distances)
    if not feats:
        feats.append(proj["depths"][..., None])
    features = (feats[0].to(dtype) if len(feats) == 1 else torch.cat([f.to(dtype) for f in feats], dim=-1)).contiguous()
    isect_kw, comp_kw, counted = {}, {}, {}
    if fused:
        isect_kw = {"counts": proj["tile_counts"]}
        if settings.ellipse_tiles:
            isect_kw["records"] = proj["records"]
        if capped:  # no read-back: the lists get isect_capacity slots (the caller checks isect_needed later)
            isect_kw.update(capacity=int(isect_capacity), count_out=counted)
        elif pending is not None:
            isect_kw.update(readback_extra=pending, on_readback=_raise_bad_inputs)
        comp_kw = {"records": proj["records"]}
    ell = (proj["conics"], proj["opacities"]) if settings.ellipse_tiles else (None, None)
    _, flatten_ids, offsets = ops.isect_tiles(means2d, proj["radii"], proj["depths"], ts, tiles_w, tiles_h, False,
                                              *ell, **isect_kw)
    if counted:
        comp_kw["n_isect"] = counted["n_isect"]
    want_median = "median_depth" in settings.outputs or want_mplane
    med_in = None
    if want_median:  # values of the Gaussian where T crosses 0.5: its centre z (+ its plane for median_plane)
        med_in = proj["depths"][..., None]
        if want_mplane:
            med_in = torch.cat([med_in, distances, normals], dim=-1)
    out, alpha, median = ops.composite_tiles(
        means2d, proj["conics"], proj["opacities"], features, med_in, flatten_ids, offsets, width, height, ts,
        settings.alpha_max, settings.chunk_elements, **comp_kw)

    info = {"means2d": means2d, "radii": proj["radii"], "depths": proj["depths"], "conics": proj["conics"],
            "opacities": proj["opacities"], "visible": (proj["radii"] > 0).all(-1),
            "flatten_ids": flatten_ids, "isect_offsets": offsets, "tile_size": ts, "tile_width": tiles_w,
            "tile_height": tiles_h, "width": width, "height": height, "n_cameras": C, "backend": bname}
    if counted:
        info["isect_needed"] = counted["needed"]
        info["n_isect"] = counted["n_isect"]
    parts = []
    col = out if out.shape[-1] == n_color else out[..., :n_color]  # a full slice would cost a copy in backward
    if n_color:
        if background is not None:
            bg = background.to(dtype=dtype, device=means.device)
            if bg.shape not in ((n_color,), (C, n_color)):
                raise RenderError(f"background must be [{n_color}] or [{C}, {n_color}], got {list(bg.shape)}")
            bg = bg if bg.ndim == 2 else bg[None].expand(C, -1)
            col = col + (1.0 - alpha) * bg[:, None, None, :]
        parts.append(col)
    j = n_color
    if want_depth:
        acc_depth = out[..., j:j + 1]
        exp_depth = acc_depth / alpha.clamp_min(1e-10)
        if "expected_depth" in settings.outputs:
            info["expected_depth"] = exp_depth
        if "ED" in render_mode:
            parts.append(exp_depth)
        elif "D" in render_mode:
            parts.append(acc_depth)
        j += 1
    if want_normal:
        info["normal"] = out[..., j:j + 3]
        j += 3
    if want_plane:
        info["plane_distance"] = out[..., j:j + 1]
        info["plane_depth"] = plane_depth(info["normal"], info["plane_distance"], Kc, w2c)
    if want_median:
        info["median_depth"] = median[..., 0:1]
    if want_mplane:
        info["median_plane_depth"] = plane_depth(median[..., 2:5], median[..., 1:2], Kc, w2c)
    image = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]
    return image, alpha, info


def gaussian_statistics(
    means: torch.Tensor,
    quats: torch.Tensor,
    scales: torch.Tensor,
    opacities: torch.Tensor,
    world_to_camera: torch.Tensor,
    K: torch.Tensor,
    width: int,
    height: int,
    near: float = 0.01,
    far: float = 1e10,
    settings: Optional[SplatSettings] = None,
    backend: Optional[str] = None,
) -> dict:
    """Per-Gaussian, per-camera compositing statistics (no grad) with the alpha rules of
    :func:`rasterize_gaussians` (Mini-Splatting, Fang & Wang 2024, Sec. 4.2; used by MILo).

    Arguments as :func:`rasterize_gaussians`. Returns ``accum_weights [C,N]`` (Σ over pixels of the
    blending weight α·T), ``area_proj [C,N]`` int64 (pixels with a non-zero weight), ``area_max [C,N]``
    int64 (pixels where the Gaussian has the largest weight; ties to the front-most), plus ``radii`` and
    ``visible`` as in ``info``.
    """
    settings = settings or SplatSettings()
    dummy = means.new_zeros(means.shape[0], 3)
    _check_inputs(means, quats, scales, opacities, dummy, world_to_camera, K, width, height, near, far,
                  None, "RGB", settings)
    width, height = int(width), int(height)
    bname = _resolve_backend(backend, means.device)
    ops = _ops(bname)
    with torch.no_grad():
        dtype = means.dtype
        proj = ops.project_gaussians(means, quats, scales, opacities, world_to_camera.to(dtype),
                                     K.to(dtype), width, height, near, far, settings.eps2d,
                                     settings.antialiased, settings.radius_clip)
        ts = int(settings.tile_size)
        tiles_w, tiles_h = tile_grid(width, height, ts)
        ell = (proj["conics"], proj["opacities"]) if settings.ellipse_tiles else (None, None)
        _, flatten_ids, offsets = ops.isect_tiles(proj["means2d"], proj["radii"], proj["depths"], ts,
                                                  tiles_w, tiles_h, False, *ell)
        stats = ops.tile_statistics(proj["means2d"], proj["conics"], proj["opacities"], flatten_ids,
                                    offsets, width, height, ts, settings.alpha_max, settings.chunk_elements)
    stats["radii"] = proj["radii"]
    stats["visible"] = (proj["radii"] > 0).all(-1)
    return stats


def depth_to_normals(depth: torch.Tensor, K: torch.Tensor,
                     world_to_camera: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Unit normals ``[C, H, W, 3]`` of a depth map by central differences of the back-projected points.

    Pixel (i, j) is back-projected to ``depth · K⁻¹ (j + 0.5, i + 0.5, 1)`` (camera frame); the normal is
    ``normalize((P[i+1,j] − P[i−1,j]) × (P[i,j+1] − P[i,j−1]))``, which faces the camera. It is 0 on the
    image border and where the pixel or one of its four neighbours has depth ``<= 0`` (empty).
    With ``world_to_camera [C, 4, 4]`` the normals are rotated to the world frame (as the ``normal`` map of
    :func:`rasterize_gaussians`), else they stay in the camera frame.

    Args: ``depth [C, H, W, 1]`` camera z; ``K [C, 3, 3]``.
    """
    if depth.ndim != 4 or depth.shape[-1] != 1:
        raise RenderError(f"depth must have shape [C, H, W, 1], got {list(depth.shape)}")
    C, H, W, _ = depth.shape
    if tuple(K.shape) != (C, 3, 3):
        raise RenderError(f"K must have shape [{C}, 3, 3], got {list(K.shape)}")
    dev, dtype = depth.device, depth.dtype
    jj = torch.arange(W, device=dev, dtype=dtype) + 0.5
    ii = torch.arange(H, device=dev, dtype=dtype) + 0.5
    K = K.to(dtype)
    fx, fy, cx, cy = (K[:, 0, 0, None, None], K[:, 1, 1, None, None], K[:, 0, 2, None, None],
                      K[:, 1, 2, None, None])
    d = depth[..., 0]
    X = (jj[None, None, :] - cx) / fx * d
    Y = (ii[None, :, None] - cy) / fy * d
    P = torch.stack([X, Y, d], dim=-1)  # [C,H,W,3]
    n = torch.zeros_like(P)
    dy = P[:, 2:, 1:-1] - P[:, :-2, 1:-1]
    dx = P[:, 1:-1, 2:] - P[:, 1:-1, :-2]
    cr = torch.linalg.cross(dy, dx, dim=-1)
    cr = cr / cr.norm(dim=-1, keepdim=True).clamp_min(1e-20)
    ok = (d[:, 1:-1, 1:-1] > 0) & (d[:, 2:, 1:-1] > 0) & (d[:, :-2, 1:-1] > 0) & (d[:, 1:-1, 2:] > 0) & (
        d[:, 1:-1, :-2] > 0)
    n[:, 1:-1, 1:-1] = torch.where(ok[..., None], cr, torch.zeros_like(cr))
    if world_to_camera is not None:
        R = world_to_camera[:, :3, :3].to(dtype)
        n = torch.einsum("cji,chwj->chwi", R, n)  # Rᵀ n
    return n


def filter_3d_variance(means: torch.Tensor, world_to_camera: torch.Tensor, K: torch.Tensor, width: int,
                       height: int, near: float = 0.01, factor: float = 0.2) -> torch.Tensor:
    """Mip-Splatting 3D filter variance ``[N] = factor · (z / f)²`` at each Gaussian's highest sampling
    rate over the cameras that see its centre (Yu et al. 2024, eq. 7-8; ``f = fx``). Gaussians seen by no
    camera take the largest value over all cameras. No grad."""
    with torch.no_grad():
        R, t = world_to_camera[:, :3, :3], world_to_camera[:, :3, 3]
        mc = torch.einsum("cij,nj->cni", R.to(means.dtype), means) + t[:, None].to(means.dtype)
        z = mc[..., 2]
        fx = K[:, 0, 0, None].to(means.dtype)
        u = fx * mc[..., 0] / z.clamp_min(1e-12) + K[:, 0, 2, None]
        v = K[:, 1, 1, None] * mc[..., 1] / z.clamp_min(1e-12) + K[:, 1, 2, None]
        seen = (z > near) & (u >= -0.15 * width) & (u <= 1.15 * width) & (v >= -0.15 * height) & (
            v <= 1.15 * height)
        ratio = z / fx
        big = torch.where(seen, ratio, torch.full_like(ratio, float("inf"))).amin(0)
        fallback = ratio.abs().amax(0)
        r = torch.where(torch.isfinite(big), big, fallback)
        return factor * r * r


def apply_filter_3d(scales: torch.Tensor, opacities: torch.Tensor,
                    variance: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Convolve each Gaussian with an isotropic 3D Gaussian of ``variance [N]`` (Mip-Splatting eq. 9):
    ``scales' = sqrt(s² + v)``, ``opacities' = o · sqrt(Π s² / Π (s² + v))``. Differentiable."""
    s2 = scales * scales
    s2f = s2 + variance[:, None]
    coef = torch.sqrt((s2 / s2f).prod(-1))
    return torch.sqrt(s2f), opacities * coef
