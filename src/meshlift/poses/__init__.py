"""Camera poses from photos or a video, with pycolmap (the optional ``[poses]`` extra, imported lazily).

``run_poses(input, out_dir)`` writes a posed dataset in the standard COLMAP layout (``images/``,
``sparse/0/*.bin``) that :func:`meshlift.data.load_scene` and ``meshlift inspect`` read;
``ensure_posed(path, out_dir)`` is the step ``meshlift reconstruct`` runs on an unposed image folder.

Modules: :mod:`~meshlift.poses.frames` (photos / video frames, EXIF orientation, blur rejection),
:mod:`~meshlift.poses.sfm` (pycolmap extraction, matching, mapping), :mod:`~meshlift.poses.report`
(registered / total, reprojection error, track length, reasons), :mod:`~meshlift.poses.evaluate`
(comparison with known cameras up to a similarity), :mod:`~meshlift.poses.pipeline` (the whole step).
Importing this package imports neither torch nor pycolmap.
"""

from __future__ import annotations

from meshlift.poses.options import CAMERA_MODELS, MATCHERS, PosesOptions
from meshlift.poses.progress import StageProgress
from meshlift.poses.sfm import INSTALL_HINT, pycolmap_available

__all__ = ["PosesOptions", "MATCHERS", "CAMERA_MODELS", "StageProgress", "run_poses", "ensure_posed",
           "needs_poses", "pycolmap_available", "INSTALL_HINT"]


def run_poses(*args, **kwargs):
    """See :func:`meshlift.poses.pipeline.run_poses`."""
    from meshlift.poses.pipeline import run_poses as _run

    return _run(*args, **kwargs)


def ensure_posed(*args, **kwargs):
    """See :func:`meshlift.poses.pipeline.ensure_posed`."""
    from meshlift.poses.pipeline import ensure_posed as _ensure

    return _ensure(*args, **kwargs)


def needs_poses(path) -> bool:
    """See :func:`meshlift.poses.pipeline.needs_poses`."""
    from meshlift.poses.pipeline import needs_poses as _needs

    return _needs(path)
