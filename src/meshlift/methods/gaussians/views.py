"""The posed images Gaussian splatting trains on: world-frame cameras and sRGB targets.

3DGS fits the images as stored (sRGB values, not linear radiance) in the dataset's **world frame**
(docs/conventions.md §11, "training frame"), so this record differs from the surface method's
:class:`meshlift.data.views.PosedViews` (normalised frame, linear colour). Built from a
:class:`meshlift.data.Scene` by :func:`load_splat_problem`: the reader undistorts and downscales; the
images are kept **premultiplied** (``rgb · alpha``, loaded on a black background) with their alpha, so a
training step composites them on any background colour ``bg`` exactly: ``target = P + bg · (1 − alpha)``
(3DGS's white / black / random backgrounds).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from meshlift.errors import DatasetError

__all__ = ["SplatBatch", "SplatProblem", "SplatViews", "camera_extent", "load_splat_problem", "to_device"]

#: Images and alpha are stored in this dtype (half the memory of float32; error < 1/4000 on [0, 1]).
STORE_DTYPE = torch.float16


@dataclass
class SplatBatch:
    """One batch of views on the compute device (float32)."""

    world_to_camera: torch.Tensor
    """``[B, 4, 4]`` OpenCV extrinsics, world frame."""
    K: torch.Tensor
    """``[B, 3, 3]`` intrinsics in pixels."""
    images: torch.Tensor
    """``[B, H, W, 3]`` premultiplied sRGB in [0, 1]."""
    alpha: Optional[torch.Tensor]
    """``[B, H, W, 1]`` coverage, or None (opaque photos)."""
    indices: Optional[torch.Tensor] = None
    """``[B]`` int64 CPU indices of these views in their :class:`SplatViews` (None when not known)."""

    def targets(self, background: torch.Tensor) -> torch.Tensor:
        """``[B, H, W, 3]`` the images composited on ``background`` (``[3]`` or ``[B, 3]``, sRGB)."""
        if self.alpha is None:
            return self.images
        bg = background.to(self.images).reshape(-1, 1, 1, 3)
        return self.images + bg * (1.0 - self.alpha)


@dataclass
class SplatViews:
    """``N`` posed views of one size. Images stay on the data device; :meth:`batch` moves a batch."""

    world_to_camera: torch.Tensor
    """``[N, 4, 4]`` float32 OpenCV extrinsics in the dataset's world frame (CPU)."""
    K: torch.Tensor
    """``[N, 3, 3]`` float32 pinhole intrinsics in pixels of the stored images (CPU)."""
    images: torch.Tensor
    """``[N, H, W, 3]`` premultiplied sRGB (``rgb · alpha``), :data:`STORE_DTYPE`."""
    alpha: Optional[torch.Tensor] = None
    """``[N, H, W, 1]`` coverage (alpha channel or mask file), :data:`STORE_DTYPE`, or None."""
    names: list = field(default_factory=list)
    """Image file stems (output names of renders)."""

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def width(self) -> int:
        return int(self.images.shape[2])

    @property
    def height(self) -> int:
        return int(self.images.shape[1])

    def batch(self, idx: torch.Tensor, device: torch.device) -> SplatBatch:
        """Views ``idx`` (LongTensor ``[B]``) as float32 on ``device``.

        On CUDA nothing here makes the host wait: host tensors go through pinned buffers with
        ``non_blocking`` copies (a copy from pageable memory synchronises the stream first), and the
        cameras are indexed from a copy kept on the device.
        """
        device = torch.device(device)
        idx = torch.as_tensor(idx, dtype=torch.long).reshape(-1)
        di = to_device(idx, self.images.device)
        w2c, K = self._cameras_on(device)
        ci = to_device(idx, device)
        return SplatBatch(
            world_to_camera=w2c[ci],
            K=K[ci],
            images=to_device(self.images[di], device).float(),
            alpha=None if self.alpha is None else to_device(self.alpha[di], device).float(),
            indices=idx.cpu(),
        )

    def nbytes(self) -> int:
        """Bytes of the stored images and alpha (what :func:`meshlift.methods.data_device.resolve_data_device` weighs)."""
        n = self.images.numel() * self.images.element_size()
        return n + (0 if self.alpha is None else self.alpha.numel() * self.alpha.element_size())

    def to(self, device: torch.device) -> "SplatViews":
        """A copy with the images and alpha on ``device`` (the cameras stay on the CPU; this record is unchanged)."""
        device = torch.device(device)
        return dataclasses.replace(self, images=self.images.to(device),
                                   alpha=None if self.alpha is None else self.alpha.to(device))

    def _cameras_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(world_to_camera, K)`` on ``device`` (copied once per device; the CPU originals are kept)."""
        if device.type == "cpu":
            return self.world_to_camera, self.K
        cache = self.__dict__.setdefault("_device_cameras", {})
        key = str(device)
        hit = cache.get(key)
        if hit is None or hit[0] is not self.world_to_camera or hit[1] is not self.K:
            hit = (self.world_to_camera, self.K, self.world_to_camera.to(device), self.K.to(device))
            cache[key] = hit
        return hit[2], hit[3]


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device`` without a host wait when it is a CPU tensor bound for CUDA (pinned buffer,
    ``non_blocking`` copy; the pinned copy is a new tensor, so later edits of ``t`` cannot race it)."""
    device = torch.device(device)
    if t.device == device or (device.type == "cuda" and t.is_cuda and device.index is None):
        return t
    if t.device.type == "cpu" and device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


@dataclass
class SplatProblem:
    """Train and test views of one input plus what initialisation and densification need."""

    train: SplatViews
    test: SplatViews
    bounds: torch.Tensor
    """``[2, 3]`` float32 world box of the scene of interest (the random init fills it)."""
    points: Optional[torch.Tensor] = None
    """``[P, 3]`` float32 SfM points (world frame), or None."""
    points_rgb: Optional[torch.Tensor] = None
    """``[P, 3]`` float32 colours of ``points`` in [0, 1] (sRGB)."""
    name: str = ""
    """Short name of the input for logs."""
    world_to_normalized: torch.Tensor = field(default_factory=lambda: torch.eye(4, dtype=torch.float64))
    """``[4, 4]`` the dataset's normalising similarity (recorded in metrics; training does not use it)."""
    eval_box: Optional[torch.Tensor] = None
    """``[2, 3]`` box (min, max) to which a known-truth mesh and the reconstruction are both cut before
    Chamfer / F-score (an object in an unmasked synthetic scene: the ground is not part of it), or None."""
    test_available: int = 0
    """Test views the split held before ``max_test_views`` kept some of them (0: as many as ``test``)."""

    def views_line(self) -> str:
        """``"43 training / 4 of 7 test views (max_test_views)"`` for the run's log."""
        n = len(self.test)
        of = f" of {self.test_available}" if self.test_available > n else ""
        return f"{len(self.train)} training / {n}{of} test views" + (" (max_test_views)" if of else "")

    @property
    def scene_scale(self) -> float:
        """The camera extent radius of the training cameras (:func:`camera_extent`)."""
        return camera_extent(self.train.world_to_camera, self.bounds)


def camera_extent(world_to_camera: torch.Tensor, bounds: Optional[torch.Tensor] = None) -> float:
    """3DGS's scene extent: ``1.1 ×`` the largest distance of a camera centre from the centres' mean
    (``getNerfppNorm`` in the 3DGS code). With fewer than two distinct centres it falls back to half the
    diagonal of ``bounds`` (``[2, 3]``), else 1.

    Args:
        world_to_camera: ``[N, 4, 4]`` OpenCV extrinsics.
    """
    R = world_to_camera[:, :3, :3].double()
    t = world_to_camera[:, :3, 3].double()
    centres = -(R.transpose(-1, -2) @ t[..., None])[..., 0]
    r = float((centres - centres.mean(0)).norm(dim=-1).max()) if len(centres) else 0.0
    if r > 1e-9 and math.isfinite(r):
        return 1.1 * r
    if bounds is not None:
        half = 0.5 * float((bounds[1].double() - bounds[0].double()).norm())
        if half > 0 and math.isfinite(half):
            return half
    return 1.0


def _views(scene, indices: list[int], use_masks: bool, data_device: torch.device, what: str) -> SplatViews:
    if not indices:
        raise DatasetError(f"{what}: a split has no views; check the dataset's split files")
    has_alpha = getattr(scene, "image_has_alpha", None) or [False] * len(scene)
    imgs, alphas = [], []
    for i in indices:
        img = scene.image(i)[..., :3].float().clamp(0, 1)  # alpha composited on black = premultiplied
        m = scene.mask(i)
        if m is not None and not has_alpha[i] and not use_masks:
            m = None
        if m is not None:
            m = m.float().clamp(0, 1)
            if not has_alpha[i]:  # a separate mask file: premultiply here
                img = img * m
        imgs.append(img.to(STORE_DTYPE).to(data_device))
        alphas.append(m)
    alpha = None
    if any(a is not None for a in alphas):
        ones = torch.ones(scene.height, scene.width, 1)
        alpha = torch.stack([(ones if a is None else a).to(STORE_DTYPE).to(data_device) for a in alphas])
    cams = scene.cameras[indices]
    names = [Path(scene.image_paths[i]).stem for i in indices]
    return SplatViews(cams.world_to_camera.float().cpu(), cams.K.float().cpu(), torch.stack(imgs), alpha, names)


def load_splat_problem(path: str | Path, *, train_split: str = "train", test_split: str = "test",
                       max_test_views: int = 0, train_res: int = 0, downscale: float = 1.0,
                       use_masks: bool = True, data_device: str = "cpu",
                       camera_convention: str = "opengl", undistort_crop: bool = True) -> SplatProblem:
    """Read a dataset folder for Gaussian splatting.

    Args:
        path: anything :func:`meshlift.data.load_scene` reads.
        train_split, test_split, max_test_views: as :func:`meshlift.data.views.split_indices`.
        train_res: longest image side in pixels (0 = as stored); ``downscale``: a further factor.
        use_masks: premultiply by separate mask files (alpha channels are always used).
        data_device: where the images are kept.
        camera_convention, undistort_crop: as :func:`meshlift.data.load_scene`.

    Raises:
        DatasetError: unreadable dataset, or an empty split.
    """
    from meshlift.data import load_scene
    from meshlift.data.views import split_indices

    scene = load_scene(path, background="black", camera_convention=camera_convention, undistort_crop=undistort_crop)
    longest = max(scene.height, scene.width)
    factor = (longest / train_res if 0 < train_res < longest else 1.0) * float(downscale)
    if factor > 1.0:
        scene = load_scene(path, background="black", downscale=factor, camera_convention=camera_convention,
                           undistort_crop=undistort_crop)
    train_idx, test_idx = split_indices(scene, train_split, test_split, max_test_views)
    available = len(split_indices(scene, train_split, test_split, 0)[1]) if max_test_views else len(test_idx)
    dev = torch.device("cpu" if data_device == "auto" else data_device)
    what = f"dataset {path}"
    return SplatProblem(
        train=_views(scene, train_idx, use_masks, dev, what),
        test=_views(scene, test_idx, use_masks, dev, what),
        bounds=torch.as_tensor(scene.bounds, dtype=torch.float32),
        points=None if scene.points is None else scene.points.float(),
        points_rgb=None if scene.points_rgb is None else scene.points_rgb.float(),
        name=Path(path).name,
        world_to_normalized=torch.as_tensor(scene.world_to_normalized, dtype=torch.float64),
        test_available=available,
    )
