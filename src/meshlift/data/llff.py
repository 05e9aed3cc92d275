"""LLFF / NeRD reader: ``poses_bounds.npy`` + ``images/`` (+ ``masks/``).

``poses_bounds.npy`` is ``[N, 17]`` float64: row i belongs to the i-th image in sorted file-name order;
values 0-14 reshape to ``[R | t | hwf]`` (3x5) with R's columns in LLFF order (down, right, backwards),
``t`` the camera centre, ``hwf`` = (H, W, focal) in the pixels of the camera that was posed; values 15-16
are near/far depth bounds (Mildenhall et al. 2019, "Local Light Field Fusion", ``imgs2poses.py``).
Converted with :func:`meshlift.cameras.llff_to_world_to_camera`; the focal length is scaled by the actual
image size (``fx = f·W_img/W_hwf``, ``fy = f·H_img/H_hwf``), the principal point is the image centre, and
no distortion is stored. ``cameras.near``/``far`` are the per-image bounds.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from meshlift.cameras import Cameras, intrinsics_matrix, llff_to_world_to_camera
from meshlift.data._common import LoadOptions, check_sizes, find_masks, finish_scene
from meshlift.data.scene import Scene
from meshlift.errors import CameraError, DatasetError
from meshlift.io.images import IMAGE_EXTENSIONS

__all__ = ["read_llff"]


def _list_images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
                  and not p.name.startswith("."))


def read_llff(root: Path, options: LoadOptions) -> Scene:
    """Read an LLFF / NeRD folder (see the module docstring)."""
    root = Path(root)
    pb = root / "poses_bounds.npy"
    if not pb.is_file():
        raise DatasetError(f"{root}: poses_bounds.npy is missing")
    try:
        arr = np.load(pb, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DatasetError(f"{pb} is not a readable .npy array ({exc}); regenerate it with imgs2poses") from exc
    if arr.ndim != 2 or arr.shape[1] not in (15, 17) or arr.shape[0] == 0:
        raise DatasetError(f"{pb}: expected a [N, 17] array (poses + near/far bounds), got shape {list(arr.shape)}")
    if not np.isfinite(arr).all():
        raise DatasetError(f"{pb} holds NaN or inf values")

    d = float(options.downscale)
    if options.images_folder:
        img_dir = root / options.images_folder
    elif d > 1 and float(d).is_integer() and (root / f"images_{int(d)}").is_dir():
        img_dir = root / f"images_{int(d)}"
    elif (root / "images").is_dir():
        img_dir = root / "images"
    else:
        cands = sorted((int(m.group(1)), p) for p in root.glob("images_*")
                       if p.is_dir() and (m := re.fullmatch(r"images_(\d+)", p.name)))
        if not cands:
            raise DatasetError(f"{root}: no images/ folder next to poses_bounds.npy")
        img_dir = cands[0][1]
    if not img_dir.is_dir():
        raise DatasetError(f"{img_dir}: image folder does not exist")
    paths = _list_images(img_dir)
    if len(paths) != arr.shape[0]:
        raise DatasetError(
            f"{pb} has {arr.shape[0]} poses but {img_dir} holds {len(paths)} images; LLFF pairs them by sorted "
            "file name, so the counts must match — remove extra files or regenerate the poses"
        )
    W, H = check_sizes(paths, str(img_dir))
    try:
        w2c, hwf = llff_to_world_to_camera(arr)
    except CameraError as exc:
        raise DatasetError(f"{pb}: {exc}") from exc
    h0, w0, f0 = hwf[:, 0], hwf[:, 1], hwf[:, 2]
    sx, sy = W / w0, H / h0
    if bool(((sx - sy).abs() > 0.01 * sx).any()):
        raise DatasetError(f"{pb}: hwf says {int(w0[0])}x{int(h0[0])} (WxH) but the images are {W}x{H}, a "
                           "different aspect ratio; the focal length cannot be rescaled")
    fx, fy = f0 * sx, f0 * sy
    near = torch.as_tensor(arr[:, 15], dtype=torch.float32) if arr.shape[1] == 17 else 0.01
    far = torch.as_tensor(arr[:, 16], dtype=torch.float32) if arr.shape[1] == 17 else 100.0
    if isinstance(near, torch.Tensor) and bool((near <= 0).any() | (far <= near).any()):
        raise DatasetError(f"{pb}: near/far bounds must satisfy 0 < near < far")
    cams = Cameras(K=intrinsics_matrix(fx, fy, W / 2, H / 2), world_to_camera=w2c, width=W, height=H,
                   near=near, far=far)
    metadata = {"poses": str(pb), "images_folder": img_dir.name, "hwf": [float(h0[0]), float(w0[0]), float(f0[0])],
                "focal_scale": float(sx[0]), "source_camera_model": "PINHOLE"}
    mask_paths = None
    mdir = root / options.masks_folder if options.masks_folder else next(
        (c for c in (root / img_dir.name.replace("images", "masks"), root / "masks") if c.is_dir()), None)
    warnings: list[str] = []
    if mdir is not None:
        if not mdir.is_dir():
            raise DatasetError(f"{mdir}: mask folder does not exist")
        mask_paths = find_masks(mdir, [p.name for p in paths], warnings)
        metadata["masks_folder"] = mdir.name
    m = re.fullmatch(r"images_(\d+)", img_dir.name)
    factor = int(m.group(1)) if m else 1
    target_size = (W, H) if d <= factor else (max(1, round(W * factor / d)), max(1, round(H * factor / d)))
    return finish_scene(format="llff", root=root, cameras=cams, image_paths=paths, options=options,
                        mask_paths=mask_paths, metadata=metadata, warnings=warnings, target_size=target_size)
