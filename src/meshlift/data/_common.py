"""Shared steps of every reader: image-size checks, undistortion policy, downscaling, splits, normalisation."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from meshlift.cameras import Cameras
from meshlift.data.camera_check import check_cameras
from meshlift.data.scene import BACKGROUNDS, Scene, estimate_normalization, every_nth_splits
from meshlift.data.undistort import valid_crop
from meshlift.errors import DatasetError, ImageError


@dataclass
class LoadOptions:
    """Options of :func:`meshlift.data.load_scene` that every reader shares."""

    downscale: float = 1
    """Load images at ``1 / downscale`` of the dataset's full resolution (COLMAP/LLFF: an ``images_N``
    folder with N = downscale is used when it exists)."""
    background: str = "white"
    """Colour composited under alpha: ``"white"``, ``"black"`` or ``"random"``."""
    split_every: int = 8
    """When the dataset has no splits: every ``split_every``-th image is a test image (0 = none)."""
    undistort: bool = True
    """Undistort images of distorted cameras to pinhole images on load (same focal lengths)."""
    undistort_crop: bool = True
    """With ``undistort``: cut the undistorted images to the window in which every pixel comes from inside
    the photo (:func:`meshlift.data.undistort.valid_crop`; ``cx``, ``cy`` shift, the size shrinks), as COLMAP's
    undistorter and nerfstudio do; False keeps ``K`` and the size, with black pixels along the borders."""
    keep_distortion: bool = False
    """With ``undistort=False``: keep the distorted camera model in ``Scene.cameras`` instead of refusing."""
    preload: bool = False
    """Decode every image into memory at load time."""
    data_device: str = "cpu"
    """Device of preloaded images (``"cpu"`` streams batches to the GPU)."""
    images_folder: str | None = None
    """Image folder relative to the dataset root, overriding the reader's choice (COLMAP / LLFF)."""
    masks_folder: str | None = None
    """Mask folder relative to the dataset root, overriding the reader's choice (COLMAP / LLFF)."""
    colmap_model: str | None = None
    """COLMAP model folder relative to the root (e.g. ``"sparse_alt_txt/0"``), overriding the search."""
    camera_convention: str = "opengl"
    """Axes of the camera-to-world matrices in ``transforms.json`` files: ``"opengl"`` (NeRF/Blender/
    instant-ngp: x right, y up, z back — the format's definition) or ``"opencv"`` (x right, y down,
    z forward, as some exporters write). COLMAP and LLFF define their own and ignore this."""

    def __post_init__(self) -> None:
        if self.background not in BACKGROUNDS:
            raise DatasetError(f"background must be one of {BACKGROUNDS}, got {self.background!r}")
        if self.camera_convention not in ("opengl", "opencv"):
            raise DatasetError(f"camera_convention must be 'opengl' or 'opencv', got {self.camera_convention!r}")
        if not float(self.downscale) >= 1:
            raise DatasetError(f"downscale must be >= 1 (a shrink factor), got {self.downscale}")


_HEADER_CACHE: dict[tuple[str, int, int], tuple[int, int, int]] = {}


def _header(p: Path) -> tuple[int, int, int]:
    """(width, height, channels) of an image file, cached by path, size and mtime (one header read)."""
    from meshlift.io.images import image_info

    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _HEADER_CACHE:
        if len(_HEADER_CACHE) > 100_000:
            _HEADER_CACHE.clear()
        _HEADER_CACHE[key] = image_info(p)
    return _HEADER_CACHE[key]


def check_sizes(paths: list[Path], what: str) -> tuple[int, int]:
    """Read every image header; return the common ``(width, height)`` or raise DatasetError."""
    sizes: dict[tuple[int, int], list[Path]] = {}
    for p in paths:
        try:
            sizes.setdefault(_header(p)[:2], []).append(p)
        except ImageError as exc:
            raise DatasetError(f"{what}: {exc}") from exc
    if not sizes:
        raise DatasetError(f"{what}: no images")
    if len(sizes) > 1:
        desc = "; ".join(f"{w}x{h}: {len(v)} images (e.g. {v[0].name})" for (w, h), v in sizes.items())
        raise DatasetError(
            f"{what}: images have different sizes ({desc}); meshlift needs one image size per scene — "
            "resize the images to one size (intrinsics are rescaled from the stated sizes) or drop the odd ones"
        )
    return next(iter(sizes))


def has_alpha(paths: list[Path]) -> list[bool]:
    return [_header(p)[2] in (2, 4) for p in paths]


def finish_scene(
    *,
    format: str,
    root: Path,
    cameras: Cameras,
    image_paths: list[Path],
    options: LoadOptions,
    mask_paths: list[Path | None] | None = None,
    splits: dict[str, torch.Tensor] | None = None,
    metadata: dict | None = None,
    warnings: list[str] | None = None,
    points: torch.Tensor | None = None,
    points_rgb: torch.Tensor | None = None,
    aabb: torch.Tensor | None = None,
    target_size: tuple[int, int] | None = None,
) -> Scene:
    """Apply the shared policies to cameras given at the on-disk image size and build the Scene.

    ``target_size``: the loaded size (default: on-disk size / downscale, rounded).
    """
    metadata = dict(metadata or {})
    warnings = list(warnings or [])
    metadata.setdefault("source_camera_model", cameras.model)
    metadata.setdefault("file_size", [cameras.width, cameras.height])
    if target_size is None:
        d = float(options.downscale)
        target_size = (max(1, round(cameras.width / d)), max(1, round(cameras.height / d)))
    cams = cameras.resize(*target_size) if target_size != (cameras.width, cameras.height) else cameras
    source = None
    if not cams.is_pinhole:
        if options.undistort:
            source = cams
            cams = cams.with_pinhole()
            metadata["undistorted_from"] = cameras.model
        elif not options.keep_distortion:
            raise DatasetError(
                f"{root}: the camera model is {cameras.model} with distortion "
                f"{cameras.distortion[0].tolist()}; meshlift's methods need pinhole images. Load with "
                "undistort=True (default) to undistort them, or keep_distortion=True to keep the distorted "
                "model (then the caller must handle it)"
            )
    if splits is None:
        splits = every_nth_splits(len(cams), options.split_every)
        metadata.setdefault("splits_from", f"every {options.split_every}th image is test")
    else:
        metadata.setdefault("splits_from", "dataset")
    T, box, info = estimate_normalization(cams, points=points, aabb=aabb)
    metadata["normalization"] = info
    if source is not None and options.undistort_crop:  # after the frame: a crop never moves it
        cams = _crop_to_valid(source, cams, metadata, warnings)
    near, far = near_far_from_bounds(cams, box)
    if isinstance(cams.near, torch.Tensor) and isinstance(cams.far, torch.Tensor):  # the dataset's own bounds
        metadata["depth_bounds"] = [float(cams.near.min()), float(cams.far.max())]
        near = torch.minimum(near, 0.9 * cams.near)
        far = torch.maximum(far, 1.1 * cams.far)
    cams = replace(cams, near=near, far=far)
    hint = {"blender": "OpenGL camera-to-world (transforms.json)", "instant-ngp": "OpenGL camera-to-world (transforms.json)",
            "colmap": "COLMAP world-to-camera", "llff": "LLFF poses"}.get(format, format)
    if format in ("blender", "instant-ngp") and options.camera_convention == "opencv":
        hint = "OpenCV camera-to-world (camera_convention='opencv')"
    check = check_cameras(cams, points, convention_hint=hint)
    metadata["camera_check"] = check.as_dict()
    warnings += check.warnings
    if source is not None:
        source = replace(source, near=near, far=far)
    scene = Scene(
        format=format,
        root=root,
        cameras=cams,
        image_paths=list(image_paths),
        mask_paths=mask_paths,
        splits=splits,
        background=options.background,
        world_to_normalized=T,
        bounds=box,
        metadata=metadata,
        warnings=warnings,
        source_cameras=source,
        data_device=options.data_device,
        image_has_alpha=has_alpha(image_paths),
        points=None if points is None else torch.as_tensor(points, dtype=torch.float32),
        points_rgb=None if points_rgb is None else torch.as_tensor(points_rgb, dtype=torch.float32),
    )
    if options.preload:
        scene.preload()
    return scene


def _crop_to_valid(source: Cameras, pinhole: Cameras, metadata: dict, warnings: list) -> Cameras:
    """``pinhole`` cut to the window of :func:`~meshlift.data.undistort.valid_crop` (recorded in
    ``metadata["undistort_crop"]``; a warning when less than half the photo is left)."""
    x0, y0, x1, y1 = valid_crop(source, pinhole)
    if (x0, y0, x1, y1) == (0, 0, pinhole.width, pinhole.height):
        return pinhole
    metadata["undistort_crop"] = [x0, y0, x1, y1]
    if (x1 - x0) * (y1 - y0) < 0.5 * source.width * source.height:
        warnings.append(f"undistortion keeps only the {x1 - x0}x{y1 - y0} window of the {source.width}x"
                        f"{source.height} images (strong distortion); load with undistort_crop=False to keep the "
                        "whole frame with black borders (reconstruct: --set undistort_crop=false)")
    return pinhole.crop(x0, y0, x1 - x0, y1 - y0)


def near_far_from_bounds(cameras: Cameras, box: torch.Tensor, margin: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-camera clip planes ``[N]`` that enclose the scene box with room to spare.

    With ``R`` the radius of the box's circumscribed sphere and ``d`` the camera's distance to its centre:
    ``far = d + margin·R`` and ``near = max(d - margin·R, far / 100)`` (a near/far ratio of at most 100
    keeps float32 depth precise). These are in world units, so they follow the dataset's scale.
    """
    c = box.mean(0)
    R = float((box[1] - box[0]).norm()) / 2
    d = (cameras.camera_centers().double() - c).norm(dim=-1)
    far = d + margin * R
    near = torch.maximum(d - margin * R, far / 100)
    return near.to(torch.float32), far.to(torch.float32)


def find_mask(folder: Path, image_name: str) -> Path | None:
    """Mask file for an image: same name, ``name.png``, ``stem.png``, ``stem.jpg`` (first that exists)."""
    stem = Path(image_name).stem
    for cand in (image_name, image_name + ".png", stem + ".png", stem + ".jpg", stem + ".jpeg", stem + ".JPG"):
        p = folder / cand
        if p.is_file():
            return p
    return None


def find_masks(folder: Path, image_names: list[str], warnings: list[str]) -> list[Path | None] | None:
    """Mask file per image name in ``folder`` (see :func:`find_mask`), or None when no name matches.

    Appends a warning to ``warnings`` when no mask or only some masks are found.
    """
    paths = [find_mask(folder, name) for name in image_names]
    n_missing = sum(m is None for m in paths)
    if n_missing == len(paths):
        warnings.append(f"{folder}: no mask file matches the image names; masks ignored")
        return None
    if n_missing:
        warnings.append(f"{folder}: {n_missing} of {len(paths)} images have no mask file")
    return paths


def missing_warning(source: str, listed: int, missing: list[str]) -> str:
    shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
    return (f"{source} lists {listed} frames but {len(missing)} image files are missing ({shown}); "
            f"those frames were skipped, {listed - len(missing)} remain")
