"""The one typed record every reader returns: :class:`Scene`.

A scene holds the cameras of all frames (OpenCV, docs/conventions.md §2), the image and mask paths,
the splits, the background choice and the normalising similarity. Images are decoded lazily, one at a
time (:meth:`Scene.image`), or all at once into memory with ``preload=True``; :meth:`Scene.load_batch`
stacks a batch and moves it to the compute device, so images may stay on the CPU (``data_device="cpu"``)
and stream to the GPU per batch.

Image pipeline of :meth:`Scene.image` (docs/conventions.md §6): read (EXIF orientation applied) ->
resize to the scene's size when downscaling -> undistort to the pinhole camera when the dataset's camera
has lens distortion -> composite straight alpha on the background ``rgb·a + bg·(1 − a)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from meshlift.cameras import Cameras
from meshlift.data.undistort import undistortion_grid
from meshlift.errors import DatasetError, ImageError
from meshlift.geometry.transforms import similarity_transform

__all__ = ["Scene", "BACKGROUNDS", "every_nth_splits", "estimate_normalization"]

_MAX_GRIDS = 8
"""Undistortion grids kept per scene (one per distinct camera intrinsics; oldest dropped first)."""

BACKGROUNDS = ("white", "black", "random")
"""Background choices for compositing alpha (``random``: a fresh uniform colour per image and call)."""


@dataclass(eq=False, repr=False)
class Scene:
    """A posed image collection, as loaded by :func:`meshlift.data.load_scene`."""

    format: str
    """Detected dataset format: ``"blender"``, ``"instant-ngp"``, ``"colmap"`` or ``"llff"``."""
    root: Path
    """Dataset folder (never written to)."""
    cameras: Cameras
    """All frames' cameras at the loaded image size; PINHOLE after undistortion."""
    image_paths: list[Path]
    """One image file per camera (only images that exist)."""
    mask_paths: list[Path | None] | None = None
    """Mask file per camera (``None`` entries: no file), or ``None`` when the dataset has no mask files."""
    splits: dict[str, torch.Tensor] = field(default_factory=dict)
    """``"train"``, ``"val"``, ``"test"`` -> LongTensor of camera indices."""
    background: str = "white"
    """Colour composited under alpha: ``"white"``, ``"black"`` or ``"random"``."""
    world_to_normalized: torch.Tensor = field(default_factory=lambda: torch.eye(4, dtype=torch.float64))
    """``[4, 4]`` float64 similarity mapping world points into the normalised frame (scene of interest in
    about [-1, 1]³); see :func:`estimate_normalization` and ``metadata["normalization"]``."""
    bounds: torch.Tensor = field(default_factory=lambda: torch.tensor([[-1.0] * 3, [1.0] * 3], dtype=torch.float64))
    """``[2, 3]`` float64 world-space axis-aligned box (min, max) of the scene of interest (an estimate)."""
    metadata: dict = field(default_factory=dict)
    """Source facts: file names, original camera model and size, hints (``aabb_scale``), folder factors."""
    warnings: list[str] = field(default_factory=list)
    """Human-readable warnings raised while reading (missing files, model choices, ...)."""
    source_cameras: Cameras | None = None
    """The cameras as the files describe them at the loaded size (with distortion), when undistorting."""
    data_device: str | torch.device = "cpu"
    """Where preloaded images are kept (``"cpu"`` streams batches to the compute device)."""
    image_has_alpha: list[bool] | None = None
    """Per image: whether the file has an alpha channel (read from the header)."""
    points: torch.Tensor | None = None
    """``[P, 3]`` float32 SfM points in the world frame (COLMAP ``points3D``), or None."""
    points_rgb: torch.Tensor | None = None
    """``[P, 3]`` float32 colours of ``points`` in [0, 1] (sRGB as stored by COLMAP), or None."""

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        if self.background not in BACKGROUNDS:
            raise DatasetError(f"background must be one of {BACKGROUNDS}, got {self.background!r}")
        if len(self.image_paths) != len(self.cameras):
            raise DatasetError(f"{len(self.image_paths)} image paths for {len(self.cameras)} cameras")
        self._cache: dict[int, tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]] = {}
        self._grids: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    # -- sizes --------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        sp = ", ".join(f"{k} {len(v)}" for k, v in self.splits.items())
        return (f"Scene(format={self.format!r}, root={str(self.root)!r}, images={len(self)}, "
                f"{self.width}x{self.height}, model={self.cameras.model}, splits=({sp}), "
                f"masks={self.has_masks}, warnings={len(self.warnings)})")

    def __len__(self) -> int:
        return len(self.cameras)

    @property
    def width(self) -> int:
        return self.cameras.width

    @property
    def height(self) -> int:
        return self.cameras.height

    @property
    def has_masks(self) -> bool:
        """True when every image has a mask (mask file, or an alpha channel)."""
        if self.mask_paths is not None and all(p is not None for p in self.mask_paths):
            return True
        return bool(self.image_has_alpha) and all(self.image_has_alpha)

    # -- loading ------------------------------------------------------------------------------------
    def _grid(self, i: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        src = self.source_cameras
        if src is None or src.is_pinhole:
            return None
        key = tuple(src.K[i].flatten().tolist()) + tuple(src.distortion[i].tolist())
        if key not in self._grids:
            if len(self._grids) >= _MAX_GRIDS:  # per-image intrinsics: bound the memory (8 bytes/pixel each)
                self._grids.pop(next(iter(self._grids)))
            self._grids[key] = undistortion_grid(src[i], self.cameras[i])
        return self._grids[key]

    def _remap(self, x: torch.Tensor, i: int) -> torch.Tensor:
        g = self._grid(i)
        if g is None:
            return x
        src = x.permute(2, 0, 1)[None]
        out = torch.nn.functional.grid_sample(src, g[0][None], mode="bilinear", padding_mode="zeros",
                                              align_corners=False)
        return out[0].permute(1, 2, 0).contiguous()

    def _load_raw(self, i: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(straight rgb [H,W,3], alpha [H,W,1] or None, mask [H,W,1] or None) at the scene size.

        Raises DatasetError (naming the file) when an image or mask is unreadable or changed size."""
        if i in self._cache:
            return self._cache[i]
        try:
            return self._decode(i)
        except ImageError as exc:
            raise DatasetError(f"{self.format} dataset {self.root}: {exc}") from exc

    def _decode(self, i: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        from meshlift.io.images import read_image, resize_image

        path = self.image_paths[i]
        img = read_image(path)
        src = self.source_cameras  # undistorted scenes: decode at the photo's size, then remap to the pinhole
        H, W = (src.height, src.width) if src is not None else (self.height, self.width)
        h, w = img.shape[:2]
        if abs(h * W / w - H) > 1.0 + 0.01 * H:  # same aspect ratio up to rounding to whole pixels
            raise ImageError(
                f"image {path} is {w}x{h} but the scene's cameras are {W}x{H} (different aspect ratio); "
                "the file changed since the dataset was read, or the folder mixes image sizes"
            )
        img = resize_image(img, W, H)
        c = img.shape[2]
        if c == 1:
            rgb, alpha = img.expand(H, W, 3), None
        elif c == 2:
            rgb, alpha = img[..., :1].expand(H, W, 3), img[..., 1:2]
        else:
            rgb, alpha = img[..., :3], (img[..., 3:4] if c == 4 else None)
        rgb = rgb.contiguous()
        mask = None
        if self.mask_paths is not None and self.mask_paths[i] is not None:
            mask = _read_mask(self.mask_paths[i], W, H)
        if self._grid(i) is not None:
            rgb = self._remap(rgb, i)
            if alpha is not None:
                alpha = self._remap(alpha, i)
            if mask is not None:
                mask = self._remap(mask, i)
        return rgb, alpha, mask

    def _composite(self, rgb: torch.Tensor, alpha: torch.Tensor | None) -> torch.Tensor:
        if alpha is None:
            return rgb
        from meshlift.shading.color import background_color

        bg = background_color(self.background, dtype=rgb.dtype, device=rgb.device)
        return rgb * alpha + bg * (1 - alpha)

    def image(self, i: int) -> torch.Tensor:
        """Image ``i`` as ``[H, W, 3]`` float32 in [0, 1], sRGB as in the file, alpha composited on the
        background, undistorted when the dataset's camera has distortion.

        Raises:
            IndexError: ``i`` out of range. ImageError: unreadable or resized file.
        """
        i = self._index(i)
        rgb, alpha, _ = self._load_raw(i)
        return self._composite(rgb, alpha)

    def alpha(self, i: int) -> torch.Tensor | None:
        """Alpha channel ``[H, W, 1]`` of image ``i``, or None when the file has none."""
        return self._load_raw(self._index(i))[1]

    def mask(self, i: int) -> torch.Tensor | None:
        """Foreground mask ``[H, W, 1]`` float in [0, 1]: the mask file when there is one, else the image's
        alpha, else None. JPEG masks are thresholded at 0.5."""
        _, alpha, mask = self._load_raw(self._index(i))
        return mask if mask is not None else alpha

    def load_batch(self, indices, device: str | torch.device | None = None) -> dict[str, torch.Tensor | None]:
        """Stack images (and masks) of ``indices`` and move them to ``device``.

        Returns:
            ``{"rgb": [B, H, W, 3], "mask": [B, H, W, 1] or None, "indices": LongTensor [B]}``; ``mask`` is
            None unless every selected image has one.
        """
        idx = torch.as_tensor(indices).long().reshape(-1)
        device = torch.device(device) if device is not None else torch.device(self.data_device)
        rgbs, masks = [], []
        for i in idx.tolist():
            i = self._index(i)
            rgb, alpha, mask = self._load_raw(i)
            rgbs.append(self._composite(rgb, alpha).to(device, non_blocking=True))
            m = mask if mask is not None else alpha
            masks.append(None if m is None else m.to(device, non_blocking=True))
        out_mask = torch.stack(masks) if masks and all(m is not None for m in masks) else None
        return {"rgb": torch.stack(rgbs) if rgbs else torch.zeros(0, self.height, self.width, 3, device=device),
                "mask": out_mask, "indices": idx}

    def preload(self) -> "Scene":
        """Decode every image into memory (on ``data_device``) so later calls do no file I/O."""
        dev = torch.device(self.data_device)
        for i in range(len(self)):
            rgb, alpha, mask = self._load_raw(i)
            mv = lambda t: None if t is None else t.to(dev)  # noqa: E731
            self._cache[i] = (rgb.to(dev), mv(alpha), mv(mask))
        return self

    def _index(self, i: int) -> int:
        i = int(i)
        if not -len(self) <= i < len(self):
            raise IndexError(f"image index {i} out of range for a scene of {len(self)} images")
        return i % len(self)

    # -- summaries ----------------------------------------------------------------------------------
    def normalized_cameras(self) -> Cameras:
        """``cameras`` in the normalised frame (``world_to_normalized`` applied; still rigid, depths scaled)."""
        return self.cameras.transform_world(self.world_to_normalized)

    def split_cameras(self, name: str) -> Cameras:
        """Cameras of split ``name``."""
        if name not in self.splits:
            raise DatasetError(f"scene has no split {name!r} (has {sorted(self.splits)})")
        return self.cameras[self.splits[name]]

    def summary(self) -> dict:
        """JSON-ready description (what ``meshlift inspect --json`` prints)."""
        b = self.bounds.tolist()
        return {
            "format": self.format,
            "root": str(self.root),
            "num_images": len(self),
            "width": self.width,
            "height": self.height,
            "camera_model": self.metadata.get("source_camera_model", self.cameras.model),
            "loaded_camera_model": self.cameras.model,
            "undistorted": self.source_cameras is not None and not self.source_cameras.is_pinhole,
            "undistort_crop": self.metadata.get("undistort_crop"),
            "source_size": None if self.source_cameras is None else [self.source_cameras.width,
                                                                     self.source_cameras.height],
            "splits": {k: int(len(self.splits.get(k, ()))) for k in ("train", "val", "test")},
            "has_masks": self.has_masks,
            "sfm_points": 0 if self.points is None else int(len(self.points)),
            "background": self.background,
            "focal": [float(self.cameras.fx.mean()), float(self.cameras.fy.mean())],
            "bounds": {"min": b[0], "max": b[1]},
            "normalization": self.metadata.get("normalization", {}),
            "warnings": list(self.warnings),
        }


def _read_mask(path: Path, width: int, height: int) -> torch.Tensor:
    from meshlift.io.images import read_image, resize_image

    m = read_image(path)
    c = m.shape[2]
    m = m[..., 3:4] if c == 4 and float(m[..., 3].min()) < 1.0 else m[..., :1]
    h, w = m.shape[:2]
    if abs(h * width / w - height) > 1.0 + 0.01 * height:
        raise ImageError(f"mask {path} is {w}x{h} but its image is {width}x{height} (different aspect ratio)")
    m = resize_image(m.contiguous(), width, height)
    if path.suffix.lower() in (".jpg", ".jpeg"):
        m = (m >= 0.5).to(torch.float32)
    return m.contiguous()


def every_nth_splits(n: int, split_every: int = 8) -> dict[str, torch.Tensor]:
    """Splits when the dataset has none: every ``split_every``-th image (indices 0, k, 2k, ...) is a test
    image, the rest train (the Mip-NeRF 360 / 3DGS ``llffhold`` convention); ``val`` is empty.
    ``split_every <= 0`` puts every image in train."""
    idx = torch.arange(n)
    if split_every <= 0:
        test = torch.zeros(n, dtype=torch.bool)
    else:
        test = idx % split_every == 0
    return {"train": idx[~test], "val": idx[:0].clone(), "test": idx[test]}


def estimate_normalization(
    cameras: Cameras,
    *,
    points: torch.Tensor | None = None,
    aabb: torch.Tensor | None = None,
    quantile: float = 0.02,
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Estimate the world-space box of the scene of interest and the similarity into ``[-1, 1]³``.

    Sources, in order of preference:

    1. ``aabb [2, 3]``: a box the dataset states (e.g. instant-ngp's unit cube mapped back to the world).
    2. ``points [P, 3]`` (COLMAP ``points3D``): the per-axis ``quantile``..``1 - quantile`` range, which
       drops far outliers.
    3. Camera rays: the point closest to all optical axes in the least-squares sense (cameras that look
       at an object), with radius = median camera distance x tan(half the narrower field of view), i.e.
       what fills the frame at that distance. When the axes are near parallel (forward-facing captures)
       the centre falls back to the camera centroid pushed forward by the median (near + far) / 2.

    Returns:
        ``world_to_normalized [4, 4]`` float64 (``p_n = s (p_w - c)`` with ``s = 1 / max half-extent``),
        ``bounds [2, 3]`` float64 world box, and a ``dict`` describing the method (stored in
        ``Scene.metadata["normalization"]``).
    """
    if aabb is not None:
        box = torch.as_tensor(aabb, dtype=torch.float64).reshape(2, 3)
        method = "aabb hint from the dataset"
    elif points is not None and len(points) >= 8:
        p = torch.as_tensor(points, dtype=torch.float64)
        lo = torch.quantile(p, quantile, dim=0)
        hi = torch.quantile(p, 1 - quantile, dim=0)
        box = torch.stack([lo, hi])
        method = f"points3D {quantile:.0%}-{1 - quantile:.0%} quantiles"
    else:
        centers = cameras.camera_centers().double()
        dirs = cameras.forward_directions().double()
        A = torch.eye(3, dtype=torch.float64)[None] - dirs[:, :, None] * dirs[:, None, :]
        lhs = A.sum(0)
        rhs = (A @ centers[..., None]).sum(0)[:, 0]
        eig = torch.linalg.eigvalsh(lhs)
        half_fov = min(
            math.atan(0.5 * cameras.width / float(cameras.fx.double().median())),
            math.atan(0.5 * cameras.height / float(cameras.fy.double().median())),
        )
        if len(cameras) >= 2 and float(eig[0]) > 1e-3 * float(eig[-1]):
            c = torch.linalg.solve(lhs, rhs)
            in_front = ((c - centers) * dirs).sum(-1)
            if float((in_front > 0).double().mean()) >= 0.5:
                dist = (centers - c).norm(dim=-1).median()
                r = float(dist) * math.tan(half_fov)
                box = torch.stack([c - r, c + r])
                method = "camera optical axes (least-squares focus point)"
            else:
                box = None
        else:
            box = None
        if box is None:
            near = cameras.near if isinstance(cameras.near, float) else float(cameras.near.double().median())
            far = cameras.far if isinstance(cameras.far, float) else float(cameras.far.double().median())
            depth = 0.5 * (near + far) if far < 1e3 * max(near, 1e-6) else 1.0
            c = centers.mean(0) + dirs.mean(0) * depth
            r = max(depth * math.tan(half_fov), float((centers - centers.mean(0)).norm(dim=-1).max()))
            box = torch.stack([c - r, c + r])
            method = "camera centroid + forward x mid depth (forward-facing fallback)"
    center = box.mean(0)
    half = float((box[1] - box[0]).max()) / 2
    if not math.isfinite(half) or half <= 0:
        half = 1.0
    s = 1.0 / half
    T = similarity_transform(s, -center)
    info = {"method": method, "center": center.tolist(), "scale": s}
    return T, box, info
