"""The one batch-of-views record a method trains on: :class:`PosedViews`, and :class:`ProblemData` (train +
test views of one input, in the normalised frame).

Built here, in the data layer, from

- a dataset folder (:func:`scene_problem`, via :func:`meshlift.data.load_scene`): images resized by the
  reader's own ``downscale`` (conventions §6), decoded sRGB → linear, separate mask files composited on
  the background exactly like the reader composites alpha, cameras moved into the normalised frame with
  :meth:`meshlift.cameras.Cameras.transform_world` (conventions §1);
- a synthetic scene (:func:`synthetic_problem`, a :class:`meshlift.data.synthetic.SyntheticDataset`):
  straight linear renders plus their coverage, composited on the background when a batch is used.

:func:`sniff_input` is the one place that decides whether an input path is a mesh file or a dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from meshlift.errors import DatasetError, MeshError, shared_data_hint
from meshlift.structures.mesh import Mesh

__all__ = ["PosedViews", "ProblemData", "views_from_scene", "scene_problem", "split_indices", "synthetic_problem",
           "sniff_input", "is_mesh_path"]


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``; a CPU → CUDA copy goes through pinned memory and does not block the host (a copy
    from pageable memory makes the host wait for the device). Same values as ``t.to(device)``."""
    device = torch.device(device)
    if t.device == device or (device.type == "cuda" and t.device.type == "cuda" and device.index is None):
        return t
    if t.device.type == "cpu" and device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


@dataclass
class PosedViews:
    """Posed images in the normalised frame (conventions §1), ready for an optimiser; also one batch of them.

    Attributes:
        world_to_clip: ``[N, 4, 4]`` float32 normalised-frame → clip (conventions §3).
        camera_pos: ``[N, 3]`` camera centres in the normalised frame.
        images: ``[N, H, W, 3]`` float32 *linear* radiance (sRGB decoded), on the data device.
        masks: ``[N, H, W, 1]`` float32 coverage in [0, 1], or None when the dataset has none.
        background: ``[3]`` linear colour the images are (or are to be) composited on where masks exist.
        straight: True when ``images`` hold straight (un-premultiplied) colour that still has to be composited
            on ``background`` with the mask (synthetic renders); False when the reader already composited
            them (dataset folders, conventions §6). :meth:`targets` gives the composited images either way.
    """

    world_to_clip: torch.Tensor
    camera_pos: torch.Tensor
    images: torch.Tensor
    masks: Optional[torch.Tensor]
    background: torch.Tensor
    straight: bool = False

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def resolution(self) -> tuple[int, int]:
        """``(H, W)`` of every view."""
        return int(self.images.shape[1]), int(self.images.shape[2])

    def batch(self, idx: torch.Tensor, device: torch.device) -> "PosedViews":
        """Views ``idx`` (LongTensor ``[B]``) on ``device``, as a :class:`PosedViews` of ``B`` views."""
        device = torch.device(device)
        return PosedViews(
            world_to_clip=_to_device(self.world_to_clip[_to_device(idx, self.world_to_clip.device)], device),
            camera_pos=_to_device(self.camera_pos[_to_device(idx, self.camera_pos.device)], device),
            images=_to_device(self.images[_to_device(idx, self.images.device)], device),
            masks=None if self.masks is None else _to_device(self.masks[_to_device(idx, self.masks.device)], device),
            background=_to_device(self.background, device),
            straight=self.straight,
        )

    def targets(self) -> torch.Tensor:
        """``[N, H, W, 3]`` the images composited on ``background`` (a no-op when the reader already did it)."""
        if self.masks is None or not self.straight:
            return self.images
        bg = self.background.to(self.images).view(1, 1, 1, 3)
        return self.images * self.masks + bg * (1 - self.masks)

    def background_images(self) -> torch.Tensor:
        """``[N, H, W, 3]`` the background colour as images (what a renderer composites over)."""
        return self.background.to(self.images).view(1, 1, 1, 3).expand_as(self.images).contiguous()


@dataclass
class ProblemData:
    """Everything a reconstruction method needs from its input.

    Attributes:
        train / test: the training and held-out :class:`PosedViews`.
        world_to_normalized: ``[4, 4]`` float64 similarity world → normalised frame.
        gt_mesh: the ground-truth mesh in world units (synthetic scenes), else None.
        gt_light: the environment the synthetic views were rendered under, else None.
        name: a short name of the input for logs.
    """

    train: PosedViews
    test: PosedViews
    world_to_normalized: torch.Tensor
    gt_mesh: Optional[Mesh] = None
    gt_light: object = None
    name: str = ""


def is_mesh_path(path) -> bool:
    """Whether ``path`` names a mesh file by its suffix (one :mod:`meshlift.io.mesh` reads); no file access."""
    from meshlift.io.mesh import READ_SUFFIXES

    return Path(path).suffix.lower() in READ_SUFFIXES


def sniff_input(path: str | Path) -> str:
    """What an input path is: ``"mesh"`` (a mesh file suffix :mod:`meshlift.io.mesh` reads) or the dataset
    format :func:`meshlift.data.detect_format` finds (``"blender"``, ``"colmap"``, ...).

    A mesh suffix is recognised without reading the file (so a preset can be chosen before the input is
    checked), except that an existing ``.ply`` is judged from its header: one that holds no surface (a 3D
    Gaussian splatting point cloud, a point cloud, nothing) is refused here, for every method. Raises:
        DatasetError: the path does not exist, or is neither a mesh file nor a dataset.
        MeshError: a ``.ply`` without faces (the message names the file and what it holds).
    """
    from meshlift.io.mesh import READ_SUFFIXES

    p = Path(path)
    if is_mesh_path(p):
        if p.suffix.lower() == ".ply" and p.is_file():
            from meshlift.io.mesh import not_a_surface_message

            msg = not_a_surface_message(p, "reconstruct renders views of a mesh input's surface")
            if msg is not None:
                raise MeshError(msg)
        return "mesh"
    if not str(path) or not p.exists():
        raise DatasetError(f"input {str(path)!r} does not exist; give a dataset folder or a mesh file "
                           f"({', '.join(READ_SUFFIXES)}){shared_data_hint(path)}")
    from meshlift.data import detect_format

    return detect_format(p)


def _linear_background(name: str) -> torch.Tensor:
    from meshlift.shading.color import background_color, srgb_to_linear

    return srgb_to_linear(background_color(name if name in ("white", "black") else "white"))


def views_from_scene(scene, indices: list[int], *, data_device: str | torch.device = "cpu",
                     what: str = "dataset") -> PosedViews:
    """Views ``indices`` of a :class:`meshlift.data.Scene` at the scene's loaded size, in the normalised frame.

    Images are decoded to linear radiance; where a view has a separate mask file (not an alpha channel,
    which the reader composites itself) the image is composited on the scene's background with it, so
    targets, losses and metrics all see the object on the background (conventions §6). Cameras are moved
    with ``Cameras.transform_world(scene.world_to_normalized)``.

    Raises:
        DatasetError: ``indices`` is empty (``what`` names the input in the message).
    """
    from meshlift.shading.color import srgb_to_linear

    if not indices:
        raise DatasetError(f"{what}: a split has no views; check the dataset's split files")
    data_device = torch.device(data_device if data_device != "auto" else "cpu")
    cams = scene.cameras[indices].transform_world(torch.as_tensor(scene.world_to_normalized, dtype=torch.float64))
    bg = getattr(scene, "background", "white")
    bg_rgb = _linear_background(bg if isinstance(bg, str) else "white")
    has_alpha = getattr(scene, "image_has_alpha", None)
    imgs, masks = [], []
    have_masks = True
    for i in indices:
        img = srgb_to_linear(scene.image(i)[..., :3].float().clamp(0, 1))
        m = scene.mask(i)
        if m is None:
            have_masks = False
        else:
            m = m.float().clamp(0, 1)
            if not (has_alpha is not None and bool(has_alpha[i])):
                img = img * m + bg_rgb * (1 - m)
            masks.append(m.to(data_device))
        imgs.append(img.to(data_device))
    mask_t = torch.stack(masks) if have_masks and masks else None
    return PosedViews(cams.world_to_clip().float(), cams.camera_centers().float(), torch.stack(imgs), mask_t, bg_rgb)


def _split(scene, name: str) -> list[int]:
    splits = getattr(scene, "splits", {}) or {}
    if name not in splits and name not in ("train", "val", "test"):
        raise DatasetError(f"split {name!r} is not one of the dataset's splits ({', '.join(sorted(splits)) or 'none'}); "
                           "use train_split / test_split = train, val or test")
    idx = splits.get(name)
    return [int(i) for i in idx] if idx is not None else []


def split_indices(scene, train_split: str = "train", test_split: str = "test",
                  max_test_views: int = 0) -> tuple[list[int], list[int]]:
    """Training and held-out view indices of a :class:`meshlift.data.Scene`.

    The test split falls back to ``val``, then to every 8th training view (removed from training); no
    train split means every view; at most ``max_test_views`` evenly spaced test views are kept (0 = all).
    """
    train_idx = _split(scene, train_split)
    test_idx = _split(scene, test_split) or _split(scene, "val")
    if not train_idx:
        train_idx = list(range(len(scene.cameras)))
    if not test_idx:
        test_idx = train_idx[::8]
        train_idx = [i for i in train_idx if i not in set(test_idx)] or train_idx
    if len(test_idx) > max_test_views > 0:
        sel = np.linspace(0, len(test_idx) - 1, max_test_views).round().astype(int)
        test_idx = [test_idx[i] for i in sel]
    return train_idx, test_idx


def scene_problem(path: str | Path, *, background: str = "white", train_split: str = "train",
                  test_split: str = "test", max_test_views: int = 0, train_res: int = 0,
                  data_device: str = "cpu", camera_convention: str = "opengl",
                  undistort_crop: bool = True) -> ProblemData:
    """Read a dataset folder into a :class:`ProblemData`.

    Args:
        path: anything :func:`meshlift.data.load_scene` reads.
        background: ``white`` or ``black``; what alpha / masks are composited on.
        train_split, test_split: split names; the test split falls back to ``val``, then to every 8th
            training view (removed from training); no train split means every view.
        max_test_views: keep at most this many evenly spaced test views (0 = all).
        train_res: longest image side in pixels (0 = as stored); larger images are loaded through the
            reader's ``downscale``.
        data_device: where the images are kept.
        camera_convention, undistort_crop: as :func:`meshlift.data.load_scene`.

    Raises:
        DatasetError: unreadable dataset, or an empty split.
    """
    from meshlift.data import load_scene

    scene, downscale = load_scene(path, background=background, camera_convention=camera_convention,
                                  undistort_crop=undistort_crop), 1.0
    for _ in range(3):  # a reader may load below full size already (only images_N/ on disk): refine
        longest = max(scene.height, scene.width)
        if not 0 < train_res < longest:
            break
        downscale *= longest / train_res
        scene = load_scene(path, background=background, downscale=downscale, camera_convention=camera_convention,
                           undistort_crop=undistort_crop)
    train_idx, test_idx = split_indices(scene, train_split, test_split, max_test_views)
    what = f"dataset {path}"
    return ProblemData(
        train=views_from_scene(scene, train_idx, data_device=data_device, what=what),
        test=views_from_scene(scene, test_idx, data_device=data_device, what=what),
        world_to_normalized=torch.as_tensor(scene.world_to_normalized, dtype=torch.float64),
        name=Path(path).name,
    )


def synthetic_problem(ds, *, background: str = "white", data_device: str | torch.device = "cpu",
                      name: str = "mesh") -> ProblemData:
    """Training and held-out views of a :class:`meshlift.data.synthetic.SyntheticDataset` (renders on first
    use), with its gt mesh and light, as a :class:`ProblemData`."""
    data_device = torch.device(data_device)
    bg = _linear_background(background)

    def views(split: str) -> PosedViews:
        b = ds.views(split)
        return PosedViews(
            world_to_clip=b["world_to_clip"].float().cpu(),
            camera_pos=b["camera_pos"].float().cpu(),
            images=b["images"].float().to(data_device),
            masks=b["masks"].float().to(data_device),
            background=bg,
            straight=True,
        )

    return ProblemData(train=views("train"), test=views("test"),
                       world_to_normalized=ds.world_to_normalized.double().cpu(), gt_mesh=ds.gt_mesh,
                       gt_light=ds.light, name=name)
