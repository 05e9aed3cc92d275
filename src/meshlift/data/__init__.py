"""Dataset readers: one module per format, all returning one typed :class:`Scene` record.

``load_scene(path)`` detects the format and dispatches:

==============  =====================================================  ==============================
format          detected by                                            module
==============  =====================================================  ==============================
blender         ``transforms_train.json``                              :mod:`meshlift.data.transforms`
instant-ngp     ``transforms.json`` (or a ``*.json`` file path)        :mod:`meshlift.data.transforms`
colmap          ``sparse/`` (``sparse/N/``) or a folder with           :mod:`meshlift.data.colmap`
                ``cameras.bin``/``cameras.txt``
llff            ``poses_bounds.npy``                                   :mod:`meshlift.data.llff`
==============  =====================================================  ==============================

A folder with both a COLMAP model and ``poses_bounds.npy`` is read as COLMAP (the richer source);
pass ``format="llff"`` to choose LLFF. Conventions are converted at this boundary
(docs/conventions.md §2); the dataset folder is never written to.
"""

from __future__ import annotations

from pathlib import Path

from meshlift.data._common import LoadOptions
from meshlift.data.scene import BACKGROUNDS, Scene, estimate_normalization, every_nth_splits
from meshlift.errors import DatasetError, shared_data_hint

__all__ = ["Scene", "load_scene", "detect_format", "LoadOptions", "FORMATS", "BACKGROUNDS",
           "estimate_normalization", "every_nth_splits"]

FORMATS = ("blender", "instant-ngp", "colmap", "llff")
"""Dataset formats :func:`load_scene` reads."""


def detect_format(path: str | Path) -> str:
    """Name the format of a dataset folder (or file); raises DatasetError saying what was looked for."""
    from meshlift.data.colmap import find_model_dirs

    p = Path(path)
    if not p.exists():
        raise DatasetError(f"dataset path {p} does not exist; check the path (a relative one starts from the current "
                           f"folder, {Path.cwd()}){shared_data_hint(p)}")
    if p.is_file():
        if p.suffix.lower() == ".json":
            return "blender" if p.name.startswith("transforms_") and (p.parent / "transforms_train.json").is_file() \
                else "instant-ngp"
        if p.name == "poses_bounds.npy":
            return "llff"
        raise DatasetError(f"{p}: a dataset file must be a transforms .json or poses_bounds.npy; "
                           "or give the dataset folder, or a mesh file (.obj, .glb, .ply, ...) to reconstruct "
                           "from rendered views")
    if (p / "transforms_train.json").is_file():
        return "blender"
    if (p / "transforms.json").is_file():
        return "instant-ngp"
    if find_model_dirs(p):
        return "colmap"
    if (p / "poses_bounds.npy").is_file():
        return "llff"
    raise DatasetError(
        f"{p}: no dataset found. Looked for transforms_train.json (Blender), transforms.json (instant-ngp/"
        "nerfstudio), sparse/[N/]cameras.{bin,txt} or cameras.{bin,txt} here (COLMAP), poses_bounds.npy (LLFF); "
        "`meshlift reconstruct` also takes a folder of photos (.jpg/.png) without poses and poses them first "
        "(`meshlift poses`)"
    )


def load_scene(
    path: str | Path,
    *,
    format: str | None = None,
    downscale: float = 1,
    background: str = "white",
    split_every: int = 8,
    undistort: bool = True,
    undistort_crop: bool = True,
    keep_distortion: bool = False,
    preload: bool = False,
    data_device: str = "cpu",
    images_folder: str | None = None,
    masks_folder: str | None = None,
    colmap_model: str | None = None,
    camera_convention: str = "opengl",
) -> Scene:
    """Read a dataset folder into a :class:`Scene` (images decoded lazily unless ``preload``).

    Args:
        path: dataset folder, a ``transforms*.json``, ``poses_bounds.npy``, or a COLMAP model folder.
        format: force a format (one of :data:`FORMATS`) instead of detecting it.
        downscale: load at ``1/downscale`` of the full resolution (COLMAP/LLFF use ``images_N`` when present).
        background: ``"white"``, ``"black"`` or ``"random"`` under alpha (recorded in ``Scene.background``).
        split_every: datasets without splits: every ``split_every``-th image is test (Mip-NeRF 360 / 3DGS).
        undistort: undistort distorted cameras' images to pinhole on load (same focal lengths; the original
            model is ``Scene.metadata["source_camera_model"]`` and ``Scene.source_cameras``).
        undistort_crop: with ``undistort``, cut the images to the window whose every pixel comes from inside
            the photo (``Scene.metadata["undistort_crop"]`` = ``[x0, y0, x1, y1]`` when it cuts;
            :func:`meshlift.data.undistort.valid_crop`); False keeps the size, with black borders.
        keep_distortion: with ``undistort=False``, keep the distorted model instead of raising.
        preload: decode all images into memory on ``data_device``.
        data_device: device of preloaded images (``"cpu"``: stream per batch).
        images_folder, masks_folder: override the image/mask folder (relative to the root).
        colmap_model: COLMAP model folder relative to the root (e.g. ``"sparse_alt_txt/0"``).
        camera_convention: axes of ``transforms.json`` camera-to-world matrices, ``"opengl"`` (the
            format's definition) or ``"opencv"``; every reader also runs
            :func:`meshlift.data.camera_check.check_cameras` and adds its warnings to ``Scene.warnings``.

    Raises:
        DatasetError: unknown layout, missing or malformed files (the message names the file and the fix).
    """
    opts = LoadOptions(downscale=downscale, background=background, split_every=split_every, undistort=undistort,
                       undistort_crop=undistort_crop, keep_distortion=keep_distortion, preload=preload,
                       data_device=data_device, images_folder=images_folder, masks_folder=masks_folder,
                       colmap_model=colmap_model, camera_convention=camera_convention)
    p = Path(path)
    fmt = format or ("colmap" if colmap_model else detect_format(p))
    if fmt == "blender":
        from meshlift.data.transforms import read_blender

        return read_blender(p.parent if p.is_file() else p, opts)
    if fmt in ("instant-ngp", "nerfstudio"):
        from meshlift.data.transforms import read_instant_ngp

        return read_instant_ngp(p, opts)
    if fmt == "colmap":
        from meshlift.data.colmap import read_colmap

        return read_colmap(p, opts)
    if fmt == "llff":
        from meshlift.data.llff import read_llff

        return read_llff(p.parent if p.is_file() else p, opts)
    raise DatasetError(f"unknown dataset format {fmt!r}; choose one of {FORMATS}")
