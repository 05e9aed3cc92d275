"""Cameras: a batched container in the OpenCV convention, and named converters from other conventions.

Everything here follows docs/conventions.md §2 (OpenCV cameras, ``world_to_camera`` 4x4, ``K`` in pixels,
pixel centres at ``(j + 0.5, i + 0.5)``), §3 (clip space) and §4 (depth = camera z; rays unit length).
Data in another convention is converted at the boundary by the functions of this module:

=================================  ======================================================
source                             converter
=================================  ======================================================
OpenGL camera-to-world (NeRF,      :func:`opengl_c2w_to_world_to_camera`,
Blender, instant-ngp, nerfstudio)  :func:`world_to_camera_to_opengl_c2w`
COLMAP ``qvec`` (w,x,y,z) + tvec   :func:`colmap_to_world_to_camera`, :func:`world_to_camera_to_colmap`
LLFF ``poses_bounds.npy``          :func:`llff_to_world_to_camera`
field of view                      :func:`focal_from_fov`, :func:`fov_from_focal`
=================================  ======================================================

The one camera *rig* of the package lives here too: view directions (:func:`fibonacci_directions`,
:func:`orbit_directions`, :func:`random_directions`) and :func:`look_at_cameras`, which turns camera
positions into pinhole :class:`Cameras` looking at a target; :func:`cameras_on_sphere` combines them.
Every caller (synthetic datasets, turntables, hidden-face removal, tests) uses these. Image undistortion
(:func:`meshlift.data.undistort.undistort_image`) belongs to the data layer.

The container is thin: the maths (rotations, rigid transforms, lens distortion) lives in
:mod:`meshlift.geometry`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import torch

from meshlift.errors import CameraError
from meshlift.geometry.distortion import (
    CAMERA_MODELS,
    camera_model,
    distort,
    join_params,
    split_params,
    undistort_points,
)
from meshlift.geometry.rotations import matrix_to_quaternion, quaternion_to_matrix
from meshlift.geometry.transforms import invert_rigid, make_transform

__all__ = [
    "Cameras",
    "projection_from_K",
    "intrinsics_matrix",
    "opengl_c2w_to_world_to_camera",
    "opencv_c2w_to_world_to_camera",
    "world_to_camera_to_opengl_c2w",
    "colmap_to_world_to_camera",
    "world_to_camera_to_colmap",
    "llff_to_world_to_camera",
    "focal_from_fov",
    "fov_from_focal",
    "look_at",
    "look_at_cameras",
    "cameras_on_sphere",
    "fibonacci_directions",
    "orbit_directions",
    "random_directions",
    "distort",
    "undistort_points",
    "CAMERA_MODELS",
    "camera_model",
    "split_params",
    "join_params",
]

_OPENGL_FLIP = (1.0, -1.0, -1.0, 1.0)


# ----------------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------------


def intrinsics_matrix(fx, fy, cx, cy, dtype=torch.float32) -> torch.Tensor:
    """``K [..., 3, 3]`` from focal lengths and principal point (scalars or ``[...]`` tensors), pixels."""
    fx, fy, cx, cy = torch.broadcast_tensors(*(torch.as_tensor(v, dtype=dtype) for v in (fx, fy, cx, cy)))
    K = torch.zeros(fx.shape + (3, 3), dtype=dtype)
    K[..., 0, 0] = fx
    K[..., 1, 1] = fy
    K[..., 0, 2] = cx
    K[..., 1, 2] = cy
    K[..., 2, 2] = 1
    return K


def projection_from_K(K: torch.Tensor, width: int, height: int, near: float | torch.Tensor,
                      far: float | torch.Tensor) -> torch.Tensor:
    """Clip-space projection ``[..., 4, 4]`` from OpenCV intrinsics (docs/conventions.md §3).

    ``P = [[2fx/W, 0, 2cx/W - 1, 0], [0, 2fy/H, 2cy/H - 1, 0], [0, 0, (f+n)/(f-n), -2fn/(f-n)], [0, 0, 1, 0]]``:
    ``w = z_camera``, NDC z runs from -1 at ``near`` to +1 at ``far``, and pixel (i, j)'s centre lands at
    NDC ``(2(j + 0.5)/W - 1, 2(i + 0.5)/H - 1)``, so images come out upright (row 0 on top).

    Args:
        K: ``[..., 3, 3]`` intrinsics in pixels.
        width, height: image size in pixels.
        near, far: positive camera-space depths (floats or ``[...]`` tensors), ``0 < near < far``.
    """
    dtype, device = K.dtype, K.device
    n = torch.as_tensor(near, dtype=dtype, device=device).expand(K.shape[:-2])
    f = torch.as_tensor(far, dtype=dtype, device=device).expand(K.shape[:-2])
    if bool((n <= 0).any()) or bool((f <= n).any()):
        raise CameraError(f"projection needs 0 < near < far, got near={near}, far={far}")
    P = torch.zeros(K.shape[:-2] + (4, 4), dtype=dtype, device=device)
    P[..., 0, 0] = 2 * K[..., 0, 0] / width
    P[..., 0, 1] = 2 * K[..., 0, 1] / width
    P[..., 0, 2] = 2 * K[..., 0, 2] / width - 1
    P[..., 1, 1] = 2 * K[..., 1, 1] / height
    P[..., 1, 2] = 2 * K[..., 1, 2] / height - 1
    P[..., 2, 2] = (f + n) / (f - n)
    P[..., 2, 3] = -2 * f * n / (f - n)
    P[..., 3, 2] = 1
    return P


def _as_matrix_batch(x, name: str, shape: tuple[int, ...]) -> torch.Tensor:
    x = torch.as_tensor(x)
    if tuple(x.shape[-len(shape):]) != shape:
        raise CameraError(f"{name} must have shape [..., {', '.join(map(str, shape))}], got {list(x.shape)}")
    return x


# ----------------------------------------------------------------------------------------------------
# The container
# ----------------------------------------------------------------------------------------------------


@dataclass(eq=False, repr=False)
class Cameras:
    """A batch of ``N`` cameras sharing one image size (OpenCV convention, docs/conventions.md §2).

    All cameras of a scene share the image size *as loaded* (after downscaling). A dataset whose images
    truly have different sizes is refused by the readers with a :class:`~meshlift.errors.DatasetError`
    (resize the images to one size first); per-camera intrinsics ``K`` may differ freely.
    """

    K: torch.Tensor
    """``[N, 3, 3]`` float32 intrinsics in pixels of the image as loaded."""
    world_to_camera: torch.Tensor
    """``[N, 4, 4]`` float32 ``[R | t]`` with ``p_cam = R p_world + t``."""
    width: int
    """Image width in pixels."""
    height: int
    """Image height in pixels."""
    model: str = "PINHOLE"
    """COLMAP camera model name; ``"PINHOLE"`` once undistorted (then ``distortion`` is ``[N, 0]``)."""
    distortion: torch.Tensor | None = None
    """``[N, P]`` float32 distortion parameters in COLMAP order (the model's parameters after focal
    lengths and principal point, e.g. OPENCV ``k1, k2, p1, p2``). ``None`` -> ``[N, 0]``."""
    near: float | torch.Tensor = 0.01
    """Near plane (positive camera depth), float or ``[N]``."""
    far: float | torch.Tensor = 100.0
    """Far plane, float or ``[N]``."""

    def __post_init__(self) -> None:
        K = torch.as_tensor(self.K)
        w2c = torch.as_tensor(self.world_to_camera)
        if K.ndim == 2:
            K = K[None]
        if w2c.ndim == 2:
            w2c = w2c[None]
        if K.ndim != 3 or K.shape[-2:] != (3, 3):
            raise CameraError(f"Cameras.K must be [N, 3, 3], got {list(K.shape)}")
        if w2c.ndim != 3 or w2c.shape[-2:] != (4, 4):
            raise CameraError(f"Cameras.world_to_camera must be [N, 4, 4], got {list(w2c.shape)}")
        if K.shape[0] != w2c.shape[0]:
            raise CameraError(f"Cameras.K has {K.shape[0]} cameras but world_to_camera has {w2c.shape[0]}")
        if K.device != w2c.device:
            raise CameraError(f"Cameras.K is on {K.device} but world_to_camera on {w2c.device}")
        self.K = K.to(torch.float32)
        self.world_to_camera = w2c.to(torch.float32)
        self.width, self.height = int(self.width), int(self.height)
        if self.width <= 0 or self.height <= 0:
            raise CameraError(f"Cameras image size must be positive, got {self.width}x{self.height}")
        m = camera_model(self.model)
        self.model = m.name
        n = K.shape[0]
        if self.distortion is None:
            if not m.is_pinhole:
                raise CameraError(f"camera model {m.name} needs distortion parameters ({', '.join(m.extra)})")
            self.distortion = torch.zeros(n, 0, device=K.device)
        d = torch.as_tensor(self.distortion, dtype=torch.float32, device=K.device)
        if d.ndim == 1:
            d = d[None].expand(n, -1)
        if d.shape != (n, len(m.extra)):
            raise CameraError(
                f"camera model {m.name} needs distortion [N={n}, {len(m.extra)}] ({', '.join(m.extra)}), "
                f"got {list(d.shape)}"
            )
        self.distortion = d.contiguous()
        for name in ("near", "far"):
            v = getattr(self, name)
            if isinstance(v, torch.Tensor):
                v = v.to(device=K.device, dtype=torch.float32)
                if v.ndim == 0:
                    v = float(v)
                elif v.shape != (n,):
                    raise CameraError(f"Cameras.{name} must be a float or [N={n}], got {list(v.shape)}")
            else:
                v = float(v)
            setattr(self, name, v)

    # -- container protocol -------------------------------------------------------------------------
    def __repr__(self) -> str:
        return (f"Cameras(N={len(self)}, {self.width}x{self.height}, model={self.model}, "
                f"device={self.device}, fx[0]={float(self.K[0, 0, 0]) if len(self) else float('nan'):.3f})")

    def __len__(self) -> int:
        return int(self.K.shape[0])

    def __getitem__(self, idx) -> "Cameras":
        """Select cameras by int, slice, list or index/bool tensor; always returns a batch (an int gives N=1)."""
        if isinstance(idx, int):
            if not -len(self) <= idx < len(self):
                raise IndexError(f"camera index {idx} out of range for {len(self)} cameras")
            idx = slice(idx % len(self), idx % len(self) + 1)
        elif not isinstance(idx, slice):
            idx = torch.as_tensor(idx, device=self.K.device)
            if idx.dtype != torch.bool:
                idx = idx.long().reshape(-1)
        pick = lambda v: v[idx] if isinstance(v, torch.Tensor) else v  # noqa: E731
        return replace(self, K=self.K[idx], world_to_camera=self.world_to_camera[idx],
                       distortion=self.distortion[idx], near=pick(self.near), far=pick(self.far))

    @property
    def device(self) -> torch.device:
        return self.K.device

    def to(self, device) -> "Cameras":
        """A copy on ``device``."""
        mv = lambda v: v.to(device) if isinstance(v, torch.Tensor) else v  # noqa: E731
        return replace(self, K=self.K.to(device), world_to_camera=self.world_to_camera.to(device),
                       distortion=self.distortion.to(device), near=mv(self.near), far=mv(self.far))

    @staticmethod
    def cat(cameras: Sequence["Cameras"]) -> "Cameras":
        """Concatenate batches that share image size and camera model."""
        if not cameras:
            raise CameraError("Cameras.cat needs at least one Cameras")
        c0 = cameras[0]
        for c in cameras[1:]:
            if (c.width, c.height, c.model) != (c0.width, c0.height, c0.model):
                raise CameraError(
                    f"cannot concatenate cameras of size/model {c.width}x{c.height} {c.model} and "
                    f"{c0.width}x{c0.height} {c0.model}"
                )
        def cat_nf(name):
            vals = [getattr(c, name) for c in cameras]
            if all(not isinstance(v, torch.Tensor) for v in vals) and len(set(vals)) == 1:
                return vals[0]
            return torch.cat([v if isinstance(v, torch.Tensor) else torch.full((len(c),), v, device=c0.device)
                              for v, c in zip(vals, cameras)])
        return replace(c0, K=torch.cat([c.K for c in cameras]),
                       world_to_camera=torch.cat([c.world_to_camera for c in cameras]),
                       distortion=torch.cat([c.distortion for c in cameras]),
                       near=cat_nf("near"), far=cat_nf("far"))

    # -- intrinsics ---------------------------------------------------------------------------------
    @property
    def fx(self) -> torch.Tensor:
        return self.K[:, 0, 0]

    @property
    def fy(self) -> torch.Tensor:
        return self.K[:, 1, 1]

    @property
    def cx(self) -> torch.Tensor:
        return self.K[:, 0, 2]

    @property
    def cy(self) -> torch.Tensor:
        return self.K[:, 1, 2]

    @property
    def is_pinhole(self) -> bool:
        return CAMERA_MODELS[self.model].is_pinhole

    def rescale(self, sx: float, sy: float | None = None) -> "Cameras":
        """Cameras for images resized by ``sx`` (and ``sy``, default ``sx``): new size = factor x old size.

        ``fx, cx`` scale by ``sx`` and ``fy, cy`` by ``sy`` (docs/conventions.md §2, pixel centres at
        ``j + 0.5``). The new size is rounded to whole pixels; use :meth:`resize` to give it exactly.
        """
        sy = sx if sy is None else sy
        if sx <= 0 or sy <= 0:
            raise CameraError(f"rescale factors must be positive, got sx={sx}, sy={sy}")
        return self.resize(max(1, round(self.width * sx)), max(1, round(self.height * sy)), _factors=(sx, sy))

    def resize(self, width: int, height: int, _factors: tuple[float, float] | None = None) -> "Cameras":
        """Cameras for the same images resized to exactly ``width x height`` pixels."""
        if width <= 0 or height <= 0:
            raise CameraError(f"resize needs a positive size, got {width}x{height}")
        sx, sy = _factors if _factors is not None else (width / self.width, height / self.height)
        S = torch.diag(torch.tensor([sx, sy, 1.0], dtype=self.K.dtype, device=self.K.device))
        return replace(self, K=S @ self.K, width=int(width), height=int(height))

    def crop(self, x0: int, y0: int, width: int, height: int) -> "Cameras":
        """Cameras for the same images cut to the ``width x height`` window whose top-left pixel is
        ``(x0, y0)``: ``cx -= x0``, ``cy -= y0`` (pixels; conventions §2), focal lengths kept.

        Raises:
            CameraError: a window that is empty or leaves the image.
        """
        x0, y0, width, height = int(x0), int(y0), int(width), int(height)
        if width <= 0 or height <= 0 or x0 < 0 or y0 < 0 or x0 + width > self.width or y0 + height > self.height:
            raise CameraError(f"crop window x0={x0}, y0={y0}, {width}x{height} is empty or leaves the "
                              f"{self.width}x{self.height} image")
        K = self.K.clone()
        K[:, 0, 2] -= x0
        K[:, 1, 2] -= y0
        return replace(self, K=K, width=width, height=height)

    def with_pinhole(self) -> "Cameras":
        """The same cameras with the distortion removed (model PINHOLE, same ``K``). Use on undistorted images."""
        return replace(self, model="PINHOLE", distortion=None)

    # -- extrinsics ---------------------------------------------------------------------------------
    def camera_to_world(self) -> torch.Tensor:
        """``[N, 4, 4]`` inverse of ``world_to_camera`` (OpenCV axes)."""
        return invert_rigid(self.world_to_camera)

    def camera_centers(self) -> torch.Tensor:
        """``[N, 3]`` camera centres ``-Rᵀ t`` in world coordinates."""
        R = self.world_to_camera[:, :3, :3]
        t = self.world_to_camera[:, :3, 3]
        return -(R.transpose(-1, -2) @ t[..., None])[..., 0]

    def forward_directions(self) -> torch.Tensor:
        """``[N, 3]`` unit viewing directions (+z camera axis) in world coordinates."""
        return self.world_to_camera[:, 2, :3]

    def transform_world(self, similarity: torch.Tensor) -> "Cameras":
        """The same cameras after the world is mapped by ``similarity [4, 4]`` (``p' = s R_s p + t_s``,
        e.g. ``Scene.world_to_normalized``).

        The result stays rigid: ``world_to_camera' = [R Rₛᵀ | s (t - R Rₛᵀ tₛ / s)]``, i.e. camera-space
        coordinates (and ``near``/``far``) are scaled by ``s``, so every point projects to the same pixel.
        """
        from meshlift.geometry.similarity import decompose_similarity

        S = torch.as_tensor(similarity, dtype=torch.float64).cpu()
        scale, Rs = decompose_similarity(S)
        w2c = self.world_to_camera.double()
        S, Rs = S.to(w2c.device), Rs.to(w2c.device)
        R, t = w2c[:, :3, :3], w2c[:, :3, 3]
        R_new = R @ Rs.T
        t_new = scale * t - (R_new @ S[:3, 3])
        mul = lambda v: v * scale  # noqa: E731
        return replace(self, world_to_camera=make_transform(R_new, t_new), near=mul(self.near), far=mul(self.far))

    # -- projection ---------------------------------------------------------------------------------
    def projection(self, near: float | torch.Tensor | None = None,
                   far: float | torch.Tensor | None = None) -> torch.Tensor:
        """``[N, 4, 4]`` clip-space projection built from ``K`` (docs/conventions.md §3).

        ``near``/``far`` default to the cameras' own. Distortion is not representable in a 4x4 matrix:
        project undistorted (pinhole) cameras; a distorted model raises :class:`CameraError`.
        """
        if not self.is_pinhole:
            raise CameraError(
                f"Cameras.projection: model {self.model} has lens distortion, which a clip-space matrix "
                "cannot express; undistort the images first (undistort_image / load_scene(undistort=True))"
            )
        return projection_from_K(self.K, self.width, self.height,
                                 self.near if near is None else near, self.far if far is None else far)

    def world_to_clip(self, near: float | torch.Tensor | None = None,
                      far: float | torch.Tensor | None = None) -> torch.Tensor:
        """``[N, 4, 4]`` = ``projection(near, far) @ world_to_camera``; clip = this @ [p, 1]."""
        return self.projection(near, far) @ self.world_to_camera

    def project(self, points_world: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Project world points into every camera, with the lens distortion of the model.

        Args:
            points_world: ``[..., 3]`` world points (shared by all cameras).

        Returns:
            ``pixels [N, ..., 2]`` continuous pixel coordinates (pixel (i, j)'s centre is ``(j + 0.5, i + 0.5)``),
            ``depth [N, ...]`` camera-space z (negative behind the camera; pixels there are meaningless).
        """
        pts = torch.as_tensor(points_world)
        if pts.shape[-1] != 3:
            raise CameraError(f"points_world must be [..., 3], got {list(pts.shape)}")
        batch = pts.shape[:-1]
        flat = pts.reshape(-1, 3).to(self.world_to_camera)
        R = self.world_to_camera[:, :3, :3]
        t = self.world_to_camera[:, :3, 3]
        pc = torch.einsum("nij,pj->npi", R, flat) + t[:, None, :]  # [N, P, 3]
        z = pc[..., 2]
        safe = torch.where(z.abs() < 1e-12, torch.full_like(z, 1e-12), z)
        xy = pc[..., :2] / safe[..., None]
        if not self.is_pinhole:
            xy = distort(self.model, self.distortion[:, None, :], xy)
        K = self.K
        u = K[:, None, 0, 0] * xy[..., 0] + K[:, None, 0, 1] * xy[..., 1] + K[:, None, 0, 2]
        v = K[:, None, 1, 1] * xy[..., 1] + K[:, None, 1, 2]
        pix = torch.stack([u, v], dim=-1)
        n = len(self)
        return pix.reshape((n,) + batch + (2,)), z.reshape((n,) + batch)

    def pixel_to_normalized(self, pixels: torch.Tensor) -> torch.Tensor:
        """Undistorted normalised coordinates ``[N, ..., 2]`` of pixel positions ``[N, ..., 2]`` (inverse of
        :meth:`project`'s intrinsics and distortion)."""
        n = len(self)
        shape = pixels.shape
        p = pixels.reshape(n, -1, 2).to(self.K)
        K = self.K
        y = (p[..., 1] - K[:, None, 1, 2]) / K[:, None, 1, 1]
        x = (p[..., 0] - K[:, None, 0, 2] - K[:, None, 0, 1] * y) / K[:, None, 0, 0]
        xy = torch.stack([x, y], dim=-1)
        if not self.is_pinhole:
            xy = undistort_points(self.model, self.distortion[:, None, :], xy)
        return xy.reshape(shape)

    def pixel_rays(self, idx=None) -> tuple[torch.Tensor, torch.Tensor]:
        """World-space rays through every pixel centre (docs/conventions.md §4).

        Args:
            idx: optional camera selection (int, slice, index tensor); default all cameras.

        Returns:
            ``origins [N, H, W, 3]`` (camera centres), ``directions [N, H, W, 3]`` unit length. Ray distance
            ``t`` relates to depth by ``depth = t * dot(direction, forward)``. Memory is ``24 N H W`` bytes:
            select cameras with ``idx`` for large batches. Distorted models are undistorted per pixel.
        """
        cams = self if idx is None else self[idx]
        n, H, W = len(cams), cams.height, cams.width
        dev = cams.device
        jj = torch.arange(W, device=dev, dtype=torch.float32) + 0.5
        ii = torch.arange(H, device=dev, dtype=torch.float32) + 0.5
        grid = torch.stack(torch.meshgrid(jj, ii, indexing="xy"), dim=-1)  # [H, W, 2] (x, y)
        xy = cams.pixel_to_normalized(grid[None].expand(n, H, W, 2))
        d_cam = torch.cat([xy, torch.ones_like(xy[..., :1])], dim=-1)
        R = cams.world_to_camera[:, :3, :3]
        d_world = torch.einsum("nji,nhwj->nhwi", R, d_cam)  # Rᵀ d
        d_world = d_world / d_world.norm(dim=-1, keepdim=True)
        origins = cams.camera_centers()[:, None, None, :].expand(n, H, W, 3)
        return origins, d_world

    # -- conversions out ----------------------------------------------------------------------------
    def colmap_params(self, i: int) -> list[float]:
        """COLMAP parameter list of camera ``i`` for its model (focal, principal point, distortion)."""
        K = self.K[i].double()
        return join_params(self.model, float(K[0, 0]), float(K[1, 1]), float(K[0, 2]), float(K[1, 2]),
                           self.distortion[i].double().tolist())


# ----------------------------------------------------------------------------------------------------
# Convention converters
# ----------------------------------------------------------------------------------------------------


def opencv_c2w_to_world_to_camera(c2w) -> torch.Tensor:
    """OpenCV camera-to-world (x right, y down, z forward) -> OpenCV ``world_to_camera`` (a general inverse).

    For ``transforms.json`` files written with OpenCV axes (``camera_convention="opencv"``).
    """
    c2w = torch.as_tensor(c2w, dtype=torch.float64)
    if c2w.shape[-2:] == (3, 4):
        c2w = torch.cat([c2w, c2w.new_tensor([0, 0, 0, 1.0]).expand(c2w.shape[:-2] + (1, 4))], dim=-2)
    _as_matrix_batch(c2w, "c2w", (4, 4))
    return torch.linalg.inv(c2w)


def opengl_c2w_to_world_to_camera(c2w) -> torch.Tensor:
    """OpenGL camera-to-world (x right, y up, z back; NeRF/Blender/instant-ngp ``transform_matrix``) ->
    OpenCV ``world_to_camera``.

    Args:
        c2w: ``[..., 4, 4]`` (or ``[..., 3, 4]``) camera-to-world matrices.

    Returns:
        ``[..., 4, 4]`` float64 ``world_to_camera``: flip the camera's y and z axes, then invert (a general
        inverse, so slightly non-orthonormal rotations from text files are tolerated).
    """
    c2w = torch.as_tensor(c2w, dtype=torch.float64)
    if c2w.shape[-2:] == (3, 4):
        c2w = torch.cat([c2w, c2w.new_tensor([0, 0, 0, 1.0]).expand(c2w.shape[:-2] + (1, 4))], dim=-2)
    _as_matrix_batch(c2w, "c2w", (4, 4))
    flip = torch.diag(c2w.new_tensor(_OPENGL_FLIP))
    return torch.linalg.inv(c2w @ flip)


def world_to_camera_to_opengl_c2w(world_to_camera) -> torch.Tensor:
    """Inverse of :func:`opengl_c2w_to_world_to_camera`: ``[..., 4, 4]`` -> OpenGL camera-to-world (float64)."""
    w2c = _as_matrix_batch(torch.as_tensor(world_to_camera, dtype=torch.float64), "world_to_camera", (4, 4))
    flip = torch.diag(w2c.new_tensor(_OPENGL_FLIP))
    return torch.linalg.inv(w2c) @ flip


def colmap_to_world_to_camera(qvec, tvec) -> torch.Tensor:
    """COLMAP image pose -> ``world_to_camera [..., 4, 4]`` (float64).

    COLMAP stores world-to-camera already in OpenCV axes: ``qvec [..., 4]`` (w, x, y, z) and
    ``tvec [..., 3]`` with ``p_cam = R(q) p_world + t``.
    """
    q = _as_matrix_batch(torch.as_tensor(qvec, dtype=torch.float64), "qvec", (4,))
    t = _as_matrix_batch(torch.as_tensor(tvec, dtype=torch.float64), "tvec", (3,))
    return make_transform(quaternion_to_matrix(q), t)


def world_to_camera_to_colmap(world_to_camera) -> tuple[torch.Tensor, torch.Tensor]:
    """``world_to_camera [..., 4, 4]`` -> COLMAP ``(qvec [..., 4] (w, x, y, z, w >= 0), tvec [..., 3])``, float64."""
    w2c = _as_matrix_batch(torch.as_tensor(world_to_camera, dtype=torch.float64), "world_to_camera", (4, 4))
    return matrix_to_quaternion(w2c[..., :3, :3]), w2c[..., :3, 3].clone()


def llff_to_world_to_camera(poses) -> tuple[torch.Tensor, torch.Tensor]:
    """LLFF poses -> ``(world_to_camera [N, 4, 4] float64, hwf [N, 3])``.

    Args:
        poses: ``poses_bounds.npy`` rows ``[N, 17]`` (or ``[N, 15]``, or ``[N, 3, 5]``): ``[R | t | hwf]`` with
            R's columns the camera axes in LLFF order (down, right, backwards) and ``t`` the camera centre
            (camera-to-world); ``hwf`` = (height, width, focal) in the poses' own pixel units.

    The OpenGL axes are ``[R₁, −R₀, R₂]`` (right, up, back), as NeRF's ``load_llff_data`` reorders them;
    then :func:`opengl_c2w_to_world_to_camera`.
    """
    p = torch.as_tensor(poses, dtype=torch.float64)
    if p.ndim == 2 and p.shape[1] in (15, 17):
        p = p[:, :15].reshape(-1, 3, 5)
    if p.ndim != 3 or p.shape[1:] != (3, 5):
        raise CameraError(f"LLFF poses must be [N, 17], [N, 15] or [N, 3, 5], got {list(p.shape)}")
    R = p[:, :, :3]
    gl = torch.stack([R[:, :, 1], -R[:, :, 0], R[:, :, 2]], dim=-1)
    c2w = torch.cat([gl, p[:, :, 3:4]], dim=-1)
    return opengl_c2w_to_world_to_camera(c2w), p[:, :, 4].clone()


def focal_from_fov(fov, size):
    """Focal length in pixels ``0.5 · size / tan(fov / 2)`` of a full field of view ``fov`` (radians)."""
    if isinstance(fov, torch.Tensor):
        return 0.5 * size / torch.tan(0.5 * fov)
    if not 0 < float(fov) < math.pi:
        raise CameraError(f"field of view must be in (0, pi) radians, got {fov}")
    return 0.5 * float(size) / math.tan(0.5 * float(fov))


def fov_from_focal(focal, size):
    """Full field of view in radians ``2 · atan(0.5 · size / focal)`` of a focal length in pixels."""
    if isinstance(focal, torch.Tensor):
        return 2 * torch.atan(0.5 * size / focal)
    return 2.0 * math.atan(0.5 * float(size) / float(focal))


def look_at(eye, target, up=(0.0, 0.0, 1.0)) -> torch.Tensor:
    """OpenCV ``world_to_camera [..., 4, 4]`` (float64) of cameras at ``eye`` looking at ``target``.

    The camera's +z points at ``target``, +x = forward × up (right), +y = forward × right (image down, i.e.
    against ``up``). Raises :class:`CameraError` when ``eye == target``; when ``forward`` is parallel to
    ``up`` another up axis is used.
    """
    eye = torch.as_tensor(eye, dtype=torch.float64)
    target = torch.as_tensor(target, dtype=torch.float64)
    up = torch.as_tensor(up, dtype=torch.float64)
    eye, target, up = torch.broadcast_tensors(eye, target, up)
    fwd = target - eye
    dist = fwd.norm(dim=-1, keepdim=True)
    if bool((dist < 1e-12).any()):
        raise CameraError("look_at: eye and target coincide; the viewing direction is undefined")
    fwd = fwd / dist
    right = torch.linalg.cross(fwd, up)
    bad = right.norm(dim=-1, keepdim=True) < 1e-9
    if bool(bad.any()):
        alt = torch.where(fwd[..., :1].abs() < 0.9, fwd.new_tensor([1.0, 0, 0]), fwd.new_tensor([0, 1.0, 0]))
        right = torch.where(bad, torch.linalg.cross(fwd, alt.expand_as(fwd)), right)
    right = right / right.norm(dim=-1, keepdim=True)
    down = torch.linalg.cross(fwd, right)
    R = torch.stack([right, down, fwd], dim=-2)  # rows = camera axes in world
    t = -(R @ eye[..., None])[..., 0]
    return make_transform(R, t)


def fibonacci_directions(n: int, *, dtype=torch.float32, device=None) -> torch.Tensor:
    """``[n, 3]`` unit vectors spread evenly on the sphere (golden-angle spiral around +z; Gonzalez 2010).

    Raises CameraError when ``n < 1``."""
    if n < 1:
        raise CameraError(f"fibonacci_directions needs n >= 1, got {n}")
    i = torch.arange(n, dtype=torch.float64) + 0.5
    z = 1.0 - 2.0 * i / n
    r = torch.sqrt((1.0 - z * z).clamp_min(0.0))
    phi = i * math.pi * (3.0 - math.sqrt(5.0))
    return torch.stack([r * torch.cos(phi), r * torch.sin(phi), z], dim=-1).to(dtype=dtype, device=device)


def orbit_directions(n: int, elevation: float, up=(0.0, 1.0, 0.0)) -> torch.Tensor:
    """``[n, 3]`` float64 unit vectors on a ring around ``up`` at ``elevation`` radians, evenly spaced in azimuth.

    Azimuth ``a_k = 2 pi k / n`` from the axis ``e_b = e_a x up`` towards ``e_a`` (``e_a`` = +x, or +y when
    ``up`` is along x): ``d_k = cos(el) (sin a_k e_a + cos a_k e_b) + sin(el) up``. With ``up = +y`` the
    first direction is +z (the viewer in front of an OBJ/glTF model)."""
    upv = torch.as_tensor(up, dtype=torch.float64)
    upv = upv / upv.norm()
    e_a = torch.tensor([1.0, 0, 0] if abs(float(upv[0])) < 0.9 else [0, 1.0, 0], dtype=torch.float64)
    e_a = e_a - (e_a @ upv) * upv
    e_a = e_a / e_a.norm()
    e_b = torch.linalg.cross(e_a, upv)
    az = 2.0 * math.pi * torch.arange(n, dtype=torch.float64) / n
    c, s = math.cos(elevation), math.sin(elevation)
    return (c * torch.sin(az))[:, None] * e_a + (c * torch.cos(az))[:, None] * e_b + s * upv


def random_directions(n: int, seed: int) -> torch.Tensor:
    """``[n, 3]`` float64 unit vectors uniform on the sphere: normalised Gaussians, ``manual_seed(seed)``."""
    g = torch.Generator().manual_seed(int(seed))
    d = torch.randn(n, 3, generator=g, dtype=torch.float64)
    return d / d.norm(dim=1, keepdim=True).clamp_min(1e-12)


def look_at_cameras(eye, target, up, fov: float, size: int | tuple[int, int], *, near: float, far: float,
                    fov_side: str = "max") -> Cameras:
    """Pinhole cameras at ``eye [N, 3]`` looking at ``target`` (``[3]`` or ``[N, 3]``) with ``up`` (:func:`look_at`).

    Args:
        fov: full field of view in radians along ``fov_side``: ``"max"`` (the larger image side) or
            ``"height"`` (vertical, nvdiffrec's reference cameras).
        size: ``int`` (square) or ``(width, height)`` in pixels; principal point at the image centre.
        near, far: clip planes (camera depth).
    """
    eye = torch.as_tensor(eye, dtype=torch.float64)
    W, H = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    tgt = torch.as_tensor(target, dtype=torch.float64).expand_as(eye)
    w2c = look_at(eye, tgt, torch.as_tensor(up, dtype=torch.float64).expand_as(eye))
    f = focal_from_fov(fov, H if fov_side == "height" else max(W, H))
    K = intrinsics_matrix(f, f, W / 2, H / 2).expand(eye.shape[0], 3, 3)
    return Cameras(K=K, world_to_camera=w2c, width=W, height=H, near=near, far=far)


def cameras_on_sphere(
    n: int,
    radius: float,
    fov: float,
    size: int | tuple[int, int],
    seed: int | None = None,
    elevation_range: tuple[float, float] = (-math.pi / 2, math.pi / 2),
    *,
    target=(0.0, 0.0, 0.0),
    up=(0.0, 1.0, 0.0),
    near: float | None = None,
    far: float | None = None,
) -> Cameras:
    """``n`` pinhole cameras on a sphere looking at ``target`` (to render synthetic scenes).

    Positions: a Fibonacci sphere (deterministic, even coverage; Gonzalez 2010, "Measurement of areas on a
    sphere using Fibonacci and latitude-longitude lattices") when ``seed`` is None, else uniform random
    on the sphere from ``torch.Generator().manual_seed(seed)``. Both are uniform in ``sin(elevation)``,
    restricted to ``elevation_range`` (radians, measured from the plane orthogonal to ``up``).

    Args:
        n: number of cameras (> 0).
        radius: distance to ``target``.
        fov: full field of view in radians, applied to the larger image side (square pixels).
        size: image size, ``int`` (square) or ``(width, height)``.
        seed: ``None`` for the Fibonacci lattice, else a random seed.
        elevation_range: ``(min, max)`` elevation in radians within ``[-pi/2, pi/2]``.
        target, up: look-at centre and world up axis (default +Y, the mesh convention of OBJ/glTF).
        near, far: clip planes, default ``radius/100`` and ``radius*100`` bounded to keep precision.
    """
    if n <= 0 or radius <= 0:
        raise CameraError(f"cameras_on_sphere needs n > 0 and radius > 0, got n={n}, radius={radius}")
    lo, hi = elevation_range
    if not -math.pi / 2 <= lo <= hi <= math.pi / 2:
        raise CameraError(f"elevation_range must satisfy -pi/2 <= min <= max <= pi/2, got {elevation_range}")
    W, H = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    s_lo, s_hi = math.sin(lo), math.sin(hi)
    if seed is None:
        k = torch.arange(n, dtype=torch.float64)
        s = s_hi - (k + 0.5) / n * (s_hi - s_lo)
        golden = math.pi * (3.0 - math.sqrt(5.0))
        az = k * golden
    else:
        g = torch.Generator().manual_seed(int(seed))
        s = s_lo + (s_hi - s_lo) * torch.rand(n, generator=g, dtype=torch.float64)
        az = 2 * math.pi * torch.rand(n, generator=g, dtype=torch.float64)
    c = torch.sqrt((1 - s * s).clamp_min(0))
    upv = torch.as_tensor(up, dtype=torch.float64)
    upv = upv / upv.norm()
    helper = torch.tensor([1.0, 0, 0], dtype=torch.float64) if abs(float(upv[0])) < 0.9 else torch.tensor(
        [0, 0, 1.0], dtype=torch.float64)
    e1 = torch.linalg.cross(upv, helper)
    e1 = e1 / e1.norm()
    e2 = torch.linalg.cross(upv, e1)
    dirs = (c * torch.cos(az))[:, None] * e1 + (c * torch.sin(az))[:, None] * e2 + s[:, None] * upv
    tgt = torch.as_tensor(target, dtype=torch.float64)
    return look_at_cameras(tgt + radius * dirs, tgt, upv, fov, (W, H), near=radius / 100 if near is None else near,
                           far=radius * 100 if far is None else far)
