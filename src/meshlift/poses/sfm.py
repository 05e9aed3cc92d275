"""Structure from motion with pycolmap (BSD-3; COLMAP's SIFT, matching and incremental mapping as wheels).

Pipeline (Schönberger & Frahm, "Structure-from-Motion Revisited", CVPR 2016; COLMAP's documentation,
"Tutorial"): SIFT features per image -> feature matching of the chosen image pairs + two-view geometric
verification -> incremental mapping (initial pair, image registration by absolute pose, triangulation,
bundle adjustment). pycolmap is imported lazily (:func:`require_pycolmap`), so meshlift works without it
until this step is asked for.

Progress: feature extraction runs in chunks of images and matching in chunks of image pairs (pairs are
generated here and passed as a pair list), so each stage reports progress with an ETA; mapping reports
every registered image through pycolmap's callback.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from meshlift.errors import DatasetError, DependencyError, MeshliftError
from meshlift.poses.options import PosesOptions
from meshlift.poses.progress import StageProgress

__all__ = ["require_pycolmap", "pycolmap_available", "SfmResult", "run_sfm", "image_pairs", "INSTALL_HINT"]

INSTALL_HINT = "pip install 'meshlift[poses]'"
"""The command that installs the poses step's optional dependencies (pycolmap, imageio-ffmpeg)."""

_EXTRACT_CHUNK = 8


def pycolmap_available() -> bool:
    """True when pycolmap can be imported (the ``[poses]`` extra is installed)."""
    try:
        import pycolmap  # noqa: F401
    except ImportError:
        return False
    return True


def require_pycolmap():
    """Import and return pycolmap, or raise :class:`DependencyError` with the install command."""
    try:
        import pycolmap
    except ImportError as exc:
        raise DependencyError(
            "estimating camera poses needs pycolmap (COLMAP's structure from motion as a wheel, BSD-3), which "
            f"is not installed; install the optional extra with: {INSTALL_HINT}  (or: pip install pycolmap)"
        ) from exc
    return pycolmap


@dataclass
class SfmResult:
    """What :func:`run_sfm` produced."""

    reconstruction: object | None
    """The largest ``pycolmap.Reconstruction`` (None when mapping registered nothing)."""
    model_sizes: list[int]
    """Registered images of every model mapping produced, largest first."""
    other_model_images: dict[str, int] = field(default_factory=dict)
    """Image name -> size of the (smaller) model it was registered in instead of the main one."""
    database: Path | None = None
    matcher: str = ""
    num_pairs: int = 0
    timings_s: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def image_pairs(names: list[str], matcher: str, overlap: int = 10) -> list[tuple[str, str]]:
    """Image pairs to match: ``exhaustive`` = all ``n(n-1)/2``; ``sequential`` = each image with its next
    ``overlap`` images plus the images at distances ``2^k > overlap`` (COLMAP's quadratic overlap, which
    closes loops of a video cheaply). ``names`` are in capture order."""
    n = len(names)
    if matcher == "exhaustive":
        return [(names[i], names[j]) for i in range(n) for j in range(i + 1, n)]
    if matcher == "sequential":
        out = set()
        for i in range(n):
            for d in range(1, overlap + 1):
                if i + d < n:
                    out.add((i, i + d))
            d = 1
            while d < n:
                if d > overlap and i + d < n:
                    out.add((i, i + d))
                d *= 2
        return [(names[i], names[j]) for i, j in sorted(out)]
    raise DatasetError(f"image_pairs: no pair list for matcher {matcher!r} (use exhaustive or sequential)")


def _wrap(stage: str, exc: Exception) -> MeshliftError:
    return DatasetError(f"pycolmap failed during {stage}: {exc}")


def run_sfm(
    images_dir: Path,
    names: list[str],
    work_dir: Path,
    options: PosesOptions,
    *,
    is_video: bool = False,
    one_camera_likely: bool | None = None,
    masks_dir: Path | None = None,
    progress: StageProgress | None = None,
) -> SfmResult:
    """Extract, match and map ``names`` (files of ``images_dir``, in capture order) with pycolmap.

    Args:
        images_dir: folder of the (upright) images; only read.
        names: image file names in ``images_dir``, in capture order (sequential matching follows it).
        work_dir: folder for ``database.db``, pair lists and the raw models (created, emptied first).
        options: matcher, camera model, single camera, feature resolution, threads, seed.
        is_video: the images are video frames (``auto`` matcher -> sequential; ``single_camera=None`` -> True).
        one_camera_likely: with ``single_camera=None`` for photos: share one camera (all photos carry the
            same EXIF camera and focal length, or none) or not (None: COLMAP's AUTO mode).
        masks_dir: COLMAP masks (``<image name>.png``, features only where > 0), or None.
        progress: progress sink.

    Returns:
        :class:`SfmResult` (the largest model, the size of every model, timings).

    Raises:
        DependencyError: pycolmap missing. DatasetError: pycolmap failed (the message says in which stage).
    """
    pycolmap = require_pycolmap()
    progress = progress or StageProgress()
    work_dir = Path(work_dir)
    if work_dir.exists():
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True)
    db_path = work_dir / "database.db"
    res = SfmResult(reconstruction=None, model_sizes=[], database=db_path)
    matcher = options.matcher
    if matcher == "auto":
        matcher = "sequential" if is_video else "exhaustive"
    res.matcher = matcher
    if options.single_camera is not None:
        single = bool(options.single_camera)
    else:
        single = bool(is_video or one_camera_likely)
    if matcher == "exhaustive" and len(names) > 300:
        res.warnings.append(f"exhaustive matching of {len(names)} images is {len(names) * (len(names) - 1) // 2} pairs "
                            "and slow; --matcher sequential suits ordered captures")
    pycolmap.set_random_seed(int(options.seed))
    old_level = pycolmap.logging.minloglevel
    pycolmap.logging.minloglevel = 2  # errors only; meshlift reports progress itself
    try:
        # -- features ------------------------------------------------------------------------------
        t0 = time.perf_counter()
        reader = pycolmap.ImageReaderOptions()
        reader.camera_model = options.camera_model
        if masks_dir is not None:
            reader.mask_path = str(masks_dir)
        ext = pycolmap.FeatureExtractionOptions()
        ext.num_threads = int(options.num_threads)
        if options.max_image_size is not None:
            ext.max_image_size = int(options.max_image_size)
        ext.sift.max_num_features = int(options.max_num_features)
        mode = pycolmap.CameraMode.SINGLE if single else pycolmap.CameraMode.AUTO
        progress.start("features (SIFT)", len(names))
        for s in range(0, len(names), _EXTRACT_CHUNK):
            chunk = names[s:s + _EXTRACT_CHUNK]
            try:
                pycolmap.extract_features(db_path, images_dir, image_names=chunk, camera_mode=mode,
                                          reader_options=reader, extraction_options=ext,
                                          device=pycolmap.Device.cpu)
            except Exception as exc:  # noqa: BLE001  (pycolmap raises RuntimeError/ValueError)
                raise _wrap("feature extraction", exc) from exc
            if single and s == 0:  # later chunks share the first chunk's camera
                reader.existing_camera_id = 1
            progress.advance(len(chunk))
        progress.end()
        res.timings_s["features"] = time.perf_counter() - t0

        # -- matching ------------------------------------------------------------------------------
        t0 = time.perf_counter()
        mopts = pycolmap.FeatureMatchingOptions()
        mopts.num_threads = int(options.num_threads)
        if matcher == "vocabtree":
            progress.start("matching (vocab tree)", 0)
            vt = pycolmap.VocabTreePairingOptions()
            vt.vocab_tree_path = str(options.vocab_tree)
            vt.num_images = min(100, max(1, len(names) - 1))
            try:
                pycolmap.match_vocabtree(db_path, matching_options=mopts, pairing_options=vt,
                                         device=pycolmap.Device.cpu)
            except Exception as exc:  # noqa: BLE001
                raise _wrap(f"vocab-tree matching with {options.vocab_tree} (is it a vocabulary tree of this "
                            f"pycolmap version, {pycolmap.__version__}?)", exc) from exc
            progress.end()
        else:
            pairs = image_pairs(names, matcher, options.sequential_overlap)
            res.num_pairs = len(pairs)
            chunk = max(32, math.ceil(len(pairs) / 25))
            progress.start(f"matching ({matcher}, {len(pairs)} pairs)", len(pairs))
            for s in range(0, len(pairs), chunk):
                part = pairs[s:s + chunk]
                plist = work_dir / "pairs.txt"
                plist.write_text("".join(f"{a} {b}\n" for a, b in part))
                popts = pycolmap.ImportedPairingOptions()
                popts.match_list_path = str(plist)
                try:
                    pycolmap.match_image_pairs(db_path, matching_options=mopts, pairing_options=popts,
                                               device=pycolmap.Device.cpu)
                except Exception as exc:  # noqa: BLE001
                    raise _wrap("feature matching", exc) from exc
                progress.advance(len(part))
            progress.end()
        res.timings_s["matching"] = time.perf_counter() - t0

        # -- mapping -------------------------------------------------------------------------------
        t0 = time.perf_counter()
        mp = pycolmap.IncrementalPipelineOptions()
        mp.num_threads = int(options.num_threads)
        mp.random_seed = int(options.seed)
        mp.min_model_size = max(3, min(10, len(names) // 3))
        progress.start("mapping (registered images)", len(names))
        models_dir = work_dir / "models"
        models_dir.mkdir()
        try:
            recs = pycolmap.incremental_mapping(db_path, images_dir, models_dir, mp,
                                                initial_image_pair_callback=lambda: progress.advance(2),
                                                next_image_callback=lambda: progress.advance(1))
        except Exception as exc:  # noqa: BLE001
            raise _wrap("incremental mapping", exc) from exc
        progress.end()
        res.timings_s["mapping"] = time.perf_counter() - t0
    finally:
        pycolmap.logging.minloglevel = old_level
    models = sorted(recs.values(), key=lambda r: r.num_reg_images(), reverse=True)
    res.model_sizes = [int(r.num_reg_images()) for r in models]
    if models:
        res.reconstruction = models[0]
        for r in models[1:]:
            for iid in r.reg_image_ids():
                res.other_model_images[r.image(iid).name] = int(r.num_reg_images())
    return res
