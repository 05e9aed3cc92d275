"""Occupancy labels from mesh depth maps, and the occupancy losses (MILo, Guédon et al. 2025).

MILo renders the current mesh at every training view (every 200 steps) and labels a pivot **inside**
(label 1) when it lies *behind the mesh* in every view that sees it: for each view ``c`` whose image the
pivot projects into, in front of the camera, the mesh depth ``D_c`` at its pixel is positive (the ray
hits the mesh) and the pivot's depth ``z_c > D_c + margin``. A pivot seen by no view is labelled inside
(vacuously; this matches depth fusion, where unseen pivots start occupied); ``num_seen`` lets callers
treat those differently. The pixel lookup and projection are those of
:mod:`meshlift.methods.milo.depth_fusion` (nearest pixel, OpenCV cameras).

Losses (MILo's weights, applied by the caller: 0.005 each):

* :func:`occupancy_label_loss`: mean over the label-1 pivots of ``BCE(logit, 1) = softplus(-logit)``
  (only the inside labels are enforced).
* :func:`occupied_centres_loss`: ``mean(max(0.5 - occ_centre, 0))`` over the Gaussians' centre pivots,
  which pushes every Gaussian centre into the occupied region.

:func:`render_mesh_maps` / :func:`render_mesh_depth` render the mesh's depth (and face-normal) maps with
meshlift's rasterizer (:func:`meshlift.render.rasterize` + :func:`meshlift.render.interpolate`), chunked
over views; the depth and normal losses that use them are in :mod:`meshlift.methods.milo.mesh_losses`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from meshlift.errors import CameraError, MeshError, RenderError
from meshlift.methods.milo.depth_fusion import (
    DEFAULT_CHUNK_PAIRS,
    _check_points,
    _chunk_size,
    check_cameras,
    project_points,
    sample_depth,
)

#: Views rendered per rasterizer call by :func:`render_mesh_depth`.
DEFAULT_CHUNK_VIEWS = 8
#: ``near = max(NEAR_FRACTION_OF_MIN_Z * min z, NEAR_FRACTION_OF_FAR * far)`` when near is automatic
#: (:func:`clip_range`; ``min z`` over the vertices in front of the camera that project into the image).
NEAR_FRACTION_OF_MIN_Z = 0.5
NEAR_FRACTION_OF_FAR = 1e-3

#: :func:`clip_range` takes ``min z`` over the vertices projecting within this many image sizes of the image
#: (a triangle reaching into the image from a vertex just outside it must not be clipped).
NEAR_IMAGE_MARGIN = 0.5


@torch.no_grad()
def clip_range(verts: torch.Tensor, world_to_camera: torch.Tensor, K: torch.Tensor, resolution: Sequence[int],
               *, far_scale: float = 1.01) -> tuple[torch.Tensor, torch.Tensor]:
    """Automatic ``(near [C], far [C])`` camera-z clip distances of a mesh's vertices ``verts [V, 3]`` at ``C``
    cameras (``world_to_camera [C, 4, 4]``, ``K [C, 3, 3]``, ``resolution (H, W)``).

    ``far = far_scale × max z``; ``near = max(NEAR_FRACTION_OF_MIN_Z × min z, NEAR_FRACTION_OF_FAR × far)``
    with ``min z`` over the vertices **in front of the camera that project into the image** (within
    :data:`NEAR_IMAGE_MARGIN` image sizes of it), not over all vertices.

    Why: the rasterizer's depth is ``z/w = a + b / w``, which for ``near ≪ w`` sits within ``2 near / w`` of
    1 and is recomputed per pixel from the triangle's plane in float32; with ``near = 1e-3 far`` small
    triangles at ``w`` lose that difference to rounding and fragments land beyond the far clip (holes) or
    behind their neighbours. A whole-scene mesh surrounds its cameras (vertices behind them, beside them at
    ``z ≈ 0``), so ``min z`` over every vertex always fell to ``1e-3 far``: measured on the fox's
    whole-scene mesh (4.2M faces, test view 0110 at 270×480) 4.6 % of the pixels rendered empty and 8.5 %
    saw through the surface; with ``min z`` over the vertices in the view (near 1.0) 0.06 % (float64: 0.05 %).
    """
    z_all = torch.einsum("cj,vj->cv", world_to_camera[:, 2, :3].to(verts), verts) + world_to_camera[:, 2, 3:4].to(verts)
    far = (far_scale * z_all.max(dim=1).values).clamp(min=1e-6)
    H, W = int(resolution[0]), int(resolution[1])
    Kd = K.to(verts)
    x = torch.einsum("cj,vj->cv", world_to_camera[:, 0, :3].to(verts), verts) + world_to_camera[:, 0, 3:4].to(verts)
    y = torch.einsum("cj,vj->cv", world_to_camera[:, 1, :3].to(verts), verts) + world_to_camera[:, 1, 3:4].to(verts)
    zp = z_all.clamp(min=1e-12)
    u = Kd[:, 0, 0, None] * x / zp + Kd[:, 0, 2, None]
    v = Kd[:, 1, 1, None] * y / zp + Kd[:, 1, 2, None]
    m = NEAR_IMAGE_MARGIN
    ok = (z_all > 0) & (u >= -m * W) & (u <= (1 + m) * W) & (v >= -m * H) & (v <= (1 + m) * H)
    zmin = torch.where(ok, z_all, torch.full_like(z_all, float("inf"))).min(dim=1).values
    zmin = torch.where(torch.isfinite(zmin), zmin, far)  # nothing in the view: any near works
    near = torch.maximum(NEAR_FRACTION_OF_MIN_Z * zmin, NEAR_FRACTION_OF_FAR * far)
    return torch.minimum(near, 0.5 * far), far


@dataclass(frozen=True)
class OccupancyLabels:
    """Labels at points (shapes ``points.shape[:-1]``).

    Attributes:
        inside: bool, True where the point is behind the mesh in every view that sees it.
        num_seen: int64 number of views that see the point (0: labelled inside vacuously).
    """

    inside: torch.Tensor
    num_seen: torch.Tensor


@torch.no_grad()
def occupancy_labels(
    points: torch.Tensor,
    mesh_depth: torch.Tensor,
    world_to_camera: torch.Tensor,
    K: torch.Tensor,
    *,
    margin: float = 0.0,
    chunk_pairs: int = DEFAULT_CHUNK_PAIRS,
) -> OccupancyLabels:
    """MILo's occupancy labels: inside iff behind the mesh in every view that sees the point.

    Args:
        points: ``[..., 3]`` float points (pivots ``[G, 9, 3]``).
        mesh_depth: ``[C, H, W]`` float mesh depth maps (camera z, 0 where no mesh), e.g. from
            :func:`render_mesh_depth`.
        world_to_camera: ``[C, 4, 4]`` float (OpenCV, docs/conventions.md §2).
        K: ``[C, 3, 3]`` float intrinsics in pixels of the depth maps.
        margin: a point must lie more than ``margin`` (scene units, >= 0) behind the mesh.
        chunk_pairs: (point, view) pairs processed at once (memory knob).

    Returns:
        :class:`OccupancyLabels`.

    Raises:
        MeshError / CameraError: bad shapes, devices, margin or chunk size.
    """
    fn = "occupancy_labels"
    _check_points(points, fn)
    check_cameras(mesh_depth, world_to_camera, K, fn, name="mesh_depth")
    if not float(margin) >= 0:
        raise MeshError(f"{fn}: margin must be >= 0 (scene units), got {margin!r}")
    if points.device != mesh_depth.device:
        raise MeshError(f"{fn}: points ({points.device}) and mesh_depth ({mesh_depth.device}) must be on one device")
    lead = points.shape[:-1]
    pts = points.reshape(-1, 3)
    chunk = _chunk_size(chunk_pairs, mesh_depth.shape[0], fn)
    inside = torch.empty(pts.shape[0], dtype=torch.bool, device=pts.device)
    seen_n = torch.empty(pts.shape[0], dtype=torch.int64, device=pts.device)
    for s in range(0, pts.shape[0], chunk):
        xy, z = project_points(pts[s : s + chunk], world_to_camera, K)
        d, seen = sample_depth(mesh_depth, xy, z)
        behind = (d > 0) & (z > d + margin)
        inside[s : s + chunk] = ~(seen & ~behind).any(0)
        seen_n[s : s + chunk] = seen.sum(0)
    return OccupancyLabels(inside=inside.reshape(lead), num_seen=seen_n.reshape(lead))


def occupancy_label_loss(logits: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:
    """Mean over ``inside`` points of ``BCE(sigmoid(logit), 1)`` (MILo's label loss, weight 0.005 there).

    Args:
        logits: ``[...]`` float occupancy logits (:meth:`PivotSDF.logits`).
        inside: bool tensor of the same shape (:func:`occupancy_labels`).

    Returns:
        Scalar; 0 (with a gradient path) when no point is labelled inside.

    Raises:
        MeshError: shapes differ or ``inside`` is not bool.
    """
    if inside.dtype != torch.bool or inside.shape != logits.shape:
        raise MeshError(
            f"occupancy_label_loss: inside must be a bool tensor shaped like logits {tuple(logits.shape)}, "
            f"got {tuple(inside.shape)} {inside.dtype}"
        )
    # a masked mean without boolean indexing (no host sync: this runs every step with the mesh in the loop)
    bce = torch.nn.functional.softplus(-logits)
    return torch.where(inside, bce, torch.zeros_like(bce)).sum() / inside.sum().clamp(min=1)


def occupied_centres_loss(centre_occupancy: torch.Tensor) -> torch.Tensor:
    """``mean(max(0.5 - occ, 0))`` over the Gaussians' centre pivots (MILo's weight: 0.005).

    Args:
        centre_occupancy: ``[G]`` float occupancy of each Gaussian's centre pivot
            (``PivotSDF.occupancy()[:, 0]``).
    """
    if not centre_occupancy.dtype.is_floating_point:
        raise MeshError(f"occupied_centres_loss: centre_occupancy must be float, got {centre_occupancy.dtype}")
    if centre_occupancy.numel() == 0:
        return centre_occupancy.sum() * 0.0
    return (0.5 - centre_occupancy).clamp(min=0).mean()


def render_mesh_depth(
    verts: torch.Tensor,
    faces: torch.Tensor,
    world_to_camera: torch.Tensor,
    K: torch.Tensor,
    resolution: Sequence[int],
    *,
    near: float | None = None,
    far: float | None = None,
    chunk_views: int = DEFAULT_CHUNK_VIEWS,
    max_fragments: int | None = None,
) -> torch.Tensor:
    """Depth maps of a mesh at ``C`` cameras, ``[C, H, W]`` (0 where empty); see :func:`render_mesh_maps`."""
    return render_mesh_maps(
        verts, faces, world_to_camera, K, resolution, near=near, far=far, chunk_views=chunk_views,
        max_fragments=max_fragments, normals=False,
    )[0]


def render_mesh_maps(
    verts: torch.Tensor,
    faces: torch.Tensor,
    world_to_camera: torch.Tensor,
    K: torch.Tensor,
    resolution: Sequence[int],
    *,
    near: float | None = None,
    far: float | None = None,
    chunk_views: int = DEFAULT_CHUNK_VIEWS,
    max_fragments: int | None = None,
    normals: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Depth and face-normal maps of a mesh at ``C`` cameras with meshlift's rasterizer, chunked over views.

    Uses :func:`meshlift.render.rasterize` + :func:`meshlift.render.interpolate` (depth = the clip ``w``
    interpolated perspective-correctly = camera z, docs/conventions.md §4). Differentiable w.r.t.
    ``verts`` (MILo's depth and normal losses); wrap in ``torch.no_grad()`` for labels. With
    ``near``/``far`` None they are set per view from the vertices' camera depths
    (:func:`clip_range`: ``far = 1.01 max z``, ``near = max(0.5 min z, 1e-3 far)``, ``min z`` over the
    vertices in the view), so nothing in the view is clipped unless it reaches within ``1e-3 far`` of the camera.

    Args:
        verts: ``[V, 3]`` float vertices; faces: ``[F, 3]`` int (counter-clockwise from outside).
        world_to_camera: ``[C, 4, 4]``; K: ``[C, 3, 3]`` (OpenCV, pixels of ``resolution``).
        resolution: ``(H, W)``.
        near, far: clip distances (camera z, ``0 < near < far``) or None (automatic, above).
        chunk_views: views per rasterizer call (memory knob: the rasterizer keeps ~250 bytes per pixel of
            a chunk for the backward on a GPU).
        max_fragments: the rasterizer's fragment budget (None: its default / env).
        normals: also return the normal maps.

    Returns:
        depth: ``[C, H, W]`` camera z, 0 where empty.
        normals: ``[C, H, W, 3]`` unit world-space outward face normals (flat shading), 0 where empty;
            None when ``normals`` is False.

    Raises:
        RenderError / CameraError: bad shapes, resolution or chunk size.
    """
    from meshlift.cameras import projection_from_K
    from meshlift.geometry.mesh_ops import face_normals
    from meshlift.render import interpolate, rasterize, render_face_normals, transform_pos

    if verts.ndim != 2 or verts.shape[1] != 3 or not verts.dtype.is_floating_point:
        raise RenderError(f"render_mesh_maps: verts must be a float [V, 3] tensor, got {tuple(verts.shape)}")
    if faces.ndim != 2 or faces.shape[1] != 3 or faces.dtype.is_floating_point:
        raise RenderError(f"render_mesh_maps: faces must be an integer [F, 3] tensor, got {tuple(faces.shape)}")
    if len(resolution) != 2 or min(int(resolution[0]), int(resolution[1])) < 1:
        raise RenderError(f"render_mesh_maps: resolution must be (H, W) with H, W >= 1, got {resolution!r}")
    if isinstance(chunk_views, bool) or not isinstance(chunk_views, int) or chunk_views < 1:
        raise RenderError(f"render_mesh_maps: chunk_views must be an int >= 1, got {chunk_views!r}")
    H, W = int(resolution[0]), int(resolution[1])
    C = world_to_camera.shape[0]
    if world_to_camera.ndim != 3 or world_to_camera.shape[1:] != (4, 4) or K.shape != (C, 3, 3):
        raise CameraError(
            f"render_mesh_maps: world_to_camera must be [C, 4, 4] and K [C, 3, 3], got "
            f"{tuple(world_to_camera.shape)} and {tuple(K.shape)}"
        )
    if faces.shape[0] == 0 or verts.shape[0] == 0:
        return verts.new_zeros((C, H, W)), (verts.new_zeros((C, H, W, 3)) if normals else None)
    w2c = world_to_camera.to(verts)
    Kd = K.to(verts)
    fn = face_normals(verts, faces) if normals else None
    depths, norms = [], []
    for s in range(0, C, chunk_views):
        w = w2c[s : s + chunk_views]
        with torch.no_grad():
            n_auto, f_auto = clip_range(verts.detach(), w, Kd[s : s + chunk_views], (H, W))
            f = far if far is not None else f_auto
            n = near if near is not None else torch.maximum(
                n_auto, NEAR_FRACTION_OF_FAR * torch.as_tensor(f, dtype=verts.dtype, device=verts.device))
        mvp = projection_from_K(Kd[s : s + chunk_views], W, H, n, f) @ w
        pos = transform_pos(mvp, verts.expand(w.shape[0], -1, -1))
        rast, _ = rasterize(pos.contiguous(), faces, (H, W), grad_db=False, max_fragments=max_fragments)
        d, _ = interpolate(pos[..., 3:4].contiguous(), rast, faces)
        depths.append(d[..., 0])
        if normals:
            norms.append(render_face_normals(fn, rast))
    return torch.cat(depths), (torch.cat(norms) if normals else None)
