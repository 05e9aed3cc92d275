"""Input frames of the poses step: a folder of photos or a video file -> upright images in ``DIR/images/``.

- Photos: every readable image file of the folder (its ``images/`` subfolder when the folder itself has
  none), sorted by name. EXIF orientation is applied (COLMAP reads raw pixels, meshlift's readers rotate
  by EXIF: writing upright pixels without the tag makes both agree); files without an orientation tag are
  copied byte for byte. Unreadable files are skipped with a warning naming them; images whose size
  differs from the most common size (after orientation) are skipped too, because a meshlift scene has
  one image size (the warning names them). Mixed EXIF orientations are reported.
- Video (imageio's ffmpeg plugin, from the ``imageio-ffmpeg`` wheel): the video is cut into windows of
  ``1 / fps`` seconds (fewer when ``max_frames`` would be exceeded) and the sharpest frame of each window
  is kept; kept frames whose sharpness is below ``blur_threshold`` x their median are dropped as blurry.
- Duplicates: images whose grey 64x64 thumbnails differ by less than :data:`DUPLICATE_RMS` (RMS, 0-255
  units) are near-identical (the same picture copied, or the camera did not move): they add no parallax.
  Fewer than 3 distinct pictures is an error naming the cause before structure from motion runs; fewer
  duplicates are a warning naming them.
- Sharpness is the variance of the Laplacian of the grey image scaled to a 512-pixel longest side
  (Pech-Pacheco et al., "Diatom autofocusing in brightfield microscopy: a comparative study", ICPR 2000),
  so scores of differently sized images are roughly comparable (within a few x).

The input is only read, never written to.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from meshlift.errors import DatasetError, DependencyError
from meshlift.poses.options import PosesOptions
from meshlift.poses.progress import StageProgress

__all__ = ["FrameRecord", "FramesResult", "prepare_frames", "list_images", "is_video", "sharpness",
           "require_enough_images",
           "thumbnail", "near_duplicate_groups", "VIDEO_EXTENSIONS", "MIN_IMAGES", "DUPLICATE_RMS"]

VIDEO_EXTENSIONS = (".mp4", ".mov", ".m4v", ".avi", ".mkv", ".webm", ".mpg", ".mpeg", ".wmv", ".3gp")
"""File extensions (lower case) read as videos."""

MIN_IMAGES = 3
"""Structure from motion needs at least this many images."""

DUPLICATE_RMS = 1.5
"""Two images whose 64x64 grey thumbnails differ by less than this RMS (0-255 units) are near-identical: a
re-encoded copy, or the same view (a camera that did not move; sensor noise averages out at that size).
Any camera movement that gives parallax shifts textured content by pixels of the thumbnail, far above it."""

_THUMB = 64
_SHARPNESS_SIDE = 512
_COPY_SUFFIXES = (".jpg", ".jpeg", ".png")  # COLMAP reads these as they are; others are re-encoded to PNG


@dataclass
class FrameRecord:
    """One image written to ``DIR/images``."""

    name: str
    """File name in ``DIR/images``."""
    source: str
    """The input file, or ``"<video> @ t s"`` for a video frame."""
    sharpness: float
    """Variance of the Laplacian at a 512-pixel longest side (higher = sharper)."""
    size: tuple[int, int]
    """``(width, height)`` as written (upright)."""
    orientation: int = 1
    """EXIF orientation tag of the source (1 = upright; applied before writing)."""
    camera_key: str = ""
    """EXIF camera make, model and focal length (``""`` when the file has none): images with one key are
    taken to share a camera."""


@dataclass
class FramesResult:
    """What :func:`prepare_frames` wrote and skipped."""

    images_dir: Path
    records: list[FrameRecord]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """``(input name, reason)`` of inputs not written (unreadable, odd size, blurry video frame, thinned)."""
    warnings: list[str] = field(default_factory=list)
    is_video: bool = False
    source: Path | None = None


def is_video(path: str | Path) -> bool:
    """True for a file with a video extension (:data:`VIDEO_EXTENSIONS`)."""
    p = Path(path)
    return p.is_file() and p.suffix.lower() in VIDEO_EXTENSIONS


def list_images(folder: str | Path) -> list[Path]:
    """Image files directly in ``folder`` (or in ``folder/images`` when ``folder`` has none), sorted by name."""
    from meshlift.io.images import IMAGE_EXTENSIONS

    folder = Path(folder)
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
    if not found and (folder / "images").is_dir():
        return list_images(folder / "images")
    return found


def sharpness(gray: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian of a grey image ``[H, W]`` (uint8 or float in [0, 255] units),
    after scaling its longest side to 512 pixels. Higher is sharper; 0 for a flat image."""
    from PIL import Image

    g = np.asarray(gray)
    if g.ndim != 2:
        raise DatasetError(f"sharpness: expected a grey image [H, W], got shape {list(g.shape)}")
    h, w = g.shape
    scale = _SHARPNESS_SIDE / max(h, w)
    if scale < 1.0:
        im = Image.fromarray(np.clip(g, 0, 255).astype(np.uint8))
        im = im.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.BILINEAR)
        g = np.asarray(im)
    g = g.astype(np.float64)
    if min(g.shape) < 3:
        return 0.0
    lap = g[1:-1, :-2] + g[1:-1, 2:] + g[:-2, 1:-1] + g[2:, 1:-1] - 4.0 * g[1:-1, 1:-1]
    return float(lap.var())


def thumbnail(gray: np.ndarray) -> np.ndarray:
    """The ``[64, 64]`` float32 grey thumbnail (box-filtered, 0-255 units) :func:`near_duplicate_groups`
    compares; ``gray`` is ``[H, W]`` uint8 or float in 0-255 units."""
    from PIL import Image

    g = np.clip(np.asarray(gray, dtype=np.float32), 0, 255)
    im = Image.fromarray(g.astype(np.uint8)).resize((_THUMB, _THUMB), Image.BOX)
    return np.asarray(im, dtype=np.float32)


def near_duplicate_groups(thumbs: list[np.ndarray], rms: float = DUPLICATE_RMS) -> list[list[int]]:
    """Groups (index lists, each of 2 or more, sorted) of images whose thumbnails (:func:`thumbnail`) are
    within ``rms`` of one another, directly or through a chain of such pairs. Pairwise RMS differences by
    one matrix product (``|a − b|² = |a|² + |b|² − 2ab``), so hundreds of images take well under a second."""
    n = len(thumbs)
    if n < 2:
        return []
    x = np.stack([t.reshape(-1) for t in thumbs]).astype(np.float64)
    sq = (x * x).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (x @ x.T), 0.0) / x.shape[1]
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in zip(*np.nonzero(np.triu(d2 < rms * rms, k=1))):
        parent[find(int(i))] = find(int(j))
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    return sorted((g for g in groups.values() if len(g) > 1), key=lambda g: g[0])


def _check_duplicates(names: list[str], thumbs: list[np.ndarray], where: Path, what: str,
                      res: "FramesResult") -> None:
    """Refuse fewer than :data:`MIN_IMAGES` distinct pictures naming the cause; warn about duplicates."""
    groups = near_duplicate_groups(thumbs)
    if not groups:
        return
    distinct = len(names) - sum(len(g) - 1 for g in groups)
    shown = "; ".join(" = ".join(names[i] for i in g[:4]) + (f" (+{len(g) - 4} more)" if len(g) > 4 else "")
                      for g in groups[:4])
    more = f"; ... ({len(groups)} groups)" if len(groups) > 4 else ""
    if distinct < MIN_IMAGES:
        raise DatasetError(
            f"{where}: the {len(names)} {what} show only {distinct} distinct picture(s) ({shown}{more}): they are "
            "identical or near-identical (the same picture copied, or the camera did not move between shots), so "
            "there is no parallax to triangulate. Structure from motion needs views from different positions: "
            "walk around the subject, 60-80% overlap between neighbouring shots")
    res.warnings.append(
        f"{sum(len(g) - 1 for g in groups)} of the {len(names)} {what} are near-identical copies of others ({shown}"
        f"{more}): they add no parallax (the camera did not move); remove the copies or move the camera between "
        "shots")


def _short_list(names: list[str], k: int = 6) -> str:
    return ", ".join(names[:k]) + (f", ... ({len(names)} in all)" if len(names) > k else "")


# ----------------------------------------------------------------------------------------------------
# photos
# ----------------------------------------------------------------------------------------------------


def _orientation(im) -> int:
    try:
        return int(im.getexif().get(0x0112, 1) or 1)
    except Exception:  # noqa: BLE001  (broken EXIF blocks are common: treat as upright)
        return 1


def _camera_key(im) -> str:
    try:
        exif = im.getexif()
        focal = exif.get_ifd(0x8769).get(0x920A)
        parts = [exif.get(0x010F), exif.get(0x0110), focal]
    except Exception:  # noqa: BLE001
        return ""
    return "" if all(p is None for p in parts) else " ".join(str(p).strip() for p in parts)


def _load_photo(path: Path):
    """(PIL image upright and fully decoded, EXIF orientation, EXIF camera key); raises DatasetError if
    unreadable."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            orient = _orientation(im)
            key = _camera_key(im)
            im.load()
            up = ImageOps.exif_transpose(im) if orient != 1 else im.copy()
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise DatasetError(f"{path.name}: not a readable image ({exc})") from exc
    return up, orient, key


def _write_upright(im, path: Path, fmt_suffix: str) -> None:
    """Save an EXIF-transposed image without the orientation tag (other EXIF, e.g. focal length, kept)."""
    exif = im.getexif()
    if 0x0112 in exif:
        del exif[0x0112]
    if fmt_suffix in (".jpg", ".jpeg"):
        rgb = im.convert("RGB") if im.mode not in ("RGB", "L") else im
        rgb.save(path, quality=95, subsampling=0, exif=exif.tobytes())
    else:
        im.save(path, exif=exif.tobytes())


def require_enough_images(folder: Path, paths: list) -> None:
    """Raise :class:`DatasetError` naming ``folder`` when ``paths`` (its images) are fewer than :data:`MIN_IMAGES`."""
    if len(paths) < MIN_IMAGES:
        raise DatasetError(f"{folder}: only {len(paths)} image(s) ({_short_list([p.name for p in paths])}); structure "
                           f"from motion needs at least {MIN_IMAGES} overlapping photos (20-100 is typical)")


def _prepare_photos(folder: Path, images_dir: Path, progress: StageProgress) -> FramesResult:
    paths = list_images(folder)
    res = FramesResult(images_dir=images_dir, records=[], source=folder)
    if not paths:
        raise DatasetError(f"{folder}: no image files ({', '.join(_image_exts())}) in the folder or its images/ "
                           "subfolder; give a folder of photos or a video file")
    require_enough_images(folder, paths)
    progress.start("reading images", len(paths))
    loaded = []
    thumbs: dict[Path, np.ndarray] = {}
    for p in paths:
        try:
            im, orient, key = _load_photo(p)
        except DatasetError as exc:
            res.skipped.append((p.name, str(exc).split(": ", 1)[-1]))
            progress.advance()
            continue
        grey = np.asarray(im.convert("L"))
        thumbs[p] = thumbnail(grey)
        loaded.append((p, im.size, orient, sharpness(grey), im if orient != 1 else None, key))
        progress.advance()
    progress.end()
    if res.skipped:
        res.warnings.append(f"{len(res.skipped)} unreadable file(s) skipped: "
                            + "; ".join(f"{n} ({r})" for n, r in res.skipped[:6]))
    sizes: dict[tuple[int, int], list] = {}
    for item in loaded:
        sizes.setdefault(item[1], []).append(item)
    if not sizes:
        raise DatasetError(f"{folder}: none of the {len(paths)} image files could be read")
    main_size = max(sizes, key=lambda s: len(sizes[s]))
    for s, items in sizes.items():
        if s == main_size:
            continue
        for p, _, orient, _, _, _ in items:
            why = f"size {s[0]}x{s[1]} differs from the {main_size[0]}x{main_size[1]} of most images"
            if orient != 1:
                why += f" (EXIF orientation {orient} rotated it)"
            res.skipped.append((p.name, why))
        res.warnings.append(
            f"{len(items)} image(s) of size {s[0]}x{s[1]} skipped ({_short_list([it[0].name for it in items])}): a "
            f"meshlift scene has one image size and most images are {main_size[0]}x{main_size[1]}; resize or "
            "rotate them to match to use them"
        )
    kept = sizes[main_size]
    orients: dict[int, list[str]] = {}
    for p, _, orient, _, _, _ in kept:
        orients.setdefault(orient, []).append(p.name)
    if len(orients) > 1:
        desc = "; ".join(f"orientation {o}: {_short_list(v, 4)}" for o, v in sorted(orients.items()))
        res.warnings.append(f"the images carry different EXIF orientations ({desc}); each was rotated upright "
                            "before matching, so check that the rotated ones look right in images/")
    if len(kept) < MIN_IMAGES:
        raise DatasetError(f"{folder}: only {len(kept)} usable image(s) of {len(paths)}; structure from motion needs "
                           f"at least {MIN_IMAGES}. Skipped: " + "; ".join(f"{n} ({r})" for n, r in res.skipped[:6]))
    _check_duplicates([it[0].name for it in kept], [thumbs[it[0]] for it in kept], folder, "photos", res)
    images_dir.mkdir(parents=True, exist_ok=True)
    progress.start("writing images", len(kept))
    used: set[str] = set()
    for p, size, orient, sharp, upright, key in kept:
        suffix = p.suffix.lower()
        name = p.name if suffix in _COPY_SUFFIXES else p.stem + ".png"
        if name in used:  # e.g. a.tif and a.png
            name = f"{p.stem}_{len(used)}{Path(name).suffix}"
        used.add(name)
        dst = images_dir / name
        if upright is None and suffix in _COPY_SUFFIXES:
            shutil.copyfile(p, dst)
        else:
            im = upright if upright is not None else _load_photo(p)[0]
            _write_upright(im, dst, Path(name).suffix.lower())
        res.records.append(FrameRecord(name=name, source=str(p), sharpness=sharp, size=size, orientation=orient,
                                       camera_key=key))
        progress.advance()
    progress.end()
    return res


def _image_exts() -> tuple[str, ...]:
    from meshlift.io.images import IMAGE_EXTENSIONS

    return IMAGE_EXTENSIONS


# ----------------------------------------------------------------------------------------------------
# video
# ----------------------------------------------------------------------------------------------------


def _video_reader(path: Path):
    try:
        import imageio.v2 as iio
        import imageio_ffmpeg  # noqa: F401
    except ImportError as exc:
        raise DependencyError(
            f"reading the video {path.name} needs imageio's ffmpeg plugin (the imageio-ffmpeg wheel, which ships "
            "ffmpeg); install it with: pip install 'meshlift[poses]'  (or pip install imageio-ffmpeg)"
        ) from exc
    try:
        reader = iio.get_reader(str(path), format="ffmpeg")
        meta = reader.get_meta_data()
    except Exception as exc:  # noqa: BLE001  (ffmpeg reports every decoding problem as a generic error)
        raise DatasetError(f"{path}: cannot decode the video ({str(exc).strip().splitlines()[-1] if str(exc).strip() else exc}); "
                           "check that the file is complete and a common format (H.264/H.265 mp4 or mov), or "
                           "extract frames yourself and give the folder") from exc
    return reader, meta


def _prepare_video(path: Path, images_dir: Path, opts: PosesOptions, progress: StageProgress) -> FramesResult:
    from PIL import Image

    reader, meta = _video_reader(path)
    res = FramesResult(images_dir=images_dir, records=[], is_video=True, source=path)
    vfps = float(meta.get("fps") or 0.0)
    if not vfps > 0 or not math.isfinite(vfps):
        vfps = 30.0
        res.warnings.append(f"{path.name}: the video states no frame rate; assumed 30 fps")
    duration = float(meta.get("duration") or 0.0)
    total = int(round(duration * vfps)) if duration > 0 and math.isfinite(duration) else 0
    fps = float(opts.fps)
    if duration > 0 and duration * fps > opts.max_frames:
        fps = opts.max_frames / duration
        res.warnings.append(f"{path.name}: {duration:.1f} s at {opts.fps:g} fps would give more than "
                            f"{opts.max_frames} frames; sampling at {fps:.3g} fps instead (--max-frames)")
    images_dir.mkdir(parents=True, exist_ok=True)
    progress.start("decoding video", total)
    best: tuple[float, int, np.ndarray] | None = None
    thumbs: dict[str, np.ndarray] = {}
    window = -1
    n_decoded = 0

    def flush() -> None:
        if best is None:
            return
        s, k, frame = best
        name = f"frame_{window:05d}.jpg"
        Image.fromarray(frame).save(images_dir / name, quality=95, subsampling=0)
        grey = frame if frame.ndim == 2 else frame[..., :3] @ np.array([0.299, 0.587, 0.114])
        thumbs[name] = thumbnail(grey)
        res.records.append(FrameRecord(name=name, source=f"{path.name} @ {k / vfps:.2f} s", sharpness=s,
                                       size=(frame.shape[1], frame.shape[0])))

    try:
        for k, frame in enumerate(reader):
            n_decoded += 1
            w = int(math.floor(k / vfps * fps + 1e-9))
            if w != window:
                flush()
                best, window = None, w
            frame = np.asarray(frame)
            if frame.ndim == 3 and frame.shape[2] > 3:
                frame = frame[..., :3]
            gray = frame if frame.ndim == 2 else (frame[..., :3] @ np.array([0.299, 0.587, 0.114])).astype(np.float32)
            s = sharpness(gray)
            if best is None or s > best[0]:
                best = (s, k, np.ascontiguousarray(frame))
            progress.advance()
        flush()
    except Exception as exc:  # noqa: BLE001
        if n_decoded == 0:
            raise DatasetError(f"{path}: cannot decode the video ({exc}); check that the file is complete and "
                               "a common format (H.264/H.265 mp4 or mov)") from exc
        res.warnings.append(f"{path.name}: decoding stopped after {n_decoded} frames ({exc}); the rest of the "
                            "video (truncated or corrupt?) was not used")
        flush()
    finally:
        reader.close()
    progress.end()
    if n_decoded == 0:
        raise DatasetError(f"{path}: the video has no decodable frames")
    # blur rejection relative to the sampled frames' median sharpness
    if opts.blur_threshold > 0 and res.records:
        med = float(np.median([r.sharpness for r in res.records]))
        keep = []
        for r in res.records:
            if r.sharpness < opts.blur_threshold * med:
                (images_dir / r.name).unlink()
                res.skipped.append((r.source, f"blurry (sharpness {r.sharpness:.0f} < {opts.blur_threshold:g} x "
                                              f"median {med:.0f})"))
            else:
                keep.append(r)
        if len(keep) < len(res.records):
            res.warnings.append(f"{len(res.records) - len(keep)} blurry video frame(s) dropped: "
                                + _short_list([r.source for r in res.records if r not in keep]))
        res.records = keep
    if len(res.records) > opts.max_frames:  # duration unknown up front: thin evenly now
        idx = set(np.linspace(0, len(res.records) - 1, opts.max_frames).round().astype(int).tolist())
        for i, r in enumerate(res.records):
            if i not in idx:
                (images_dir / r.name).unlink()
                res.skipped.append((r.source, f"thinned to --max-frames {opts.max_frames}"))
        res.records = [r for i, r in enumerate(res.records) if i in idx]
    if len(res.records) < MIN_IMAGES:
        raise DatasetError(f"{path}: only {len(res.records)} usable frame(s) from {n_decoded} decoded at {fps:g} "
                           f"fps; structure from motion needs at least {MIN_IMAGES}: raise --fps, or give a "
                           "longer video")
    _check_duplicates([r.name for r in res.records], [thumbs[r.name] for r in res.records], path,
                      "sampled video frames", res)
    return res


# ----------------------------------------------------------------------------------------------------


def prepare_frames(input: str | Path, images_dir: str | Path, options: PosesOptions | None = None,
                   progress: StageProgress | None = None) -> FramesResult:
    """Write the images the poses step will use to ``images_dir`` (created) from a photo folder or a video.

    Args:
        input: a folder of photos (or with an ``images/`` subfolder) or a video file. Only read.
        images_dir: output folder of the upright images (``DIR/images``).
        options: :class:`PosesOptions` (``fps``, ``max_frames``, ``blur_threshold`` for videos).
        progress: progress sink (silent by default).

    Returns:
        :class:`FramesResult` with one :class:`FrameRecord` per written image.

    Raises:
        DatasetError: missing input, fewer than 3 usable images, an undecodable video (the message names
            the file). DependencyError: a video without the imageio-ffmpeg wheel.
    """
    opts = options or PosesOptions()
    progress = progress or StageProgress()
    src = Path(input)
    images_dir = Path(images_dir)
    if not src.exists():
        raise DatasetError(f"input {src} does not exist; give a folder of photos or a video file")
    if src.is_file():
        if src.suffix.lower() not in VIDEO_EXTENSIONS:
            raise DatasetError(f"input {src} is a file but not a video ({', '.join(VIDEO_EXTENSIONS)}); give a "
                               "video file or a folder of photos")
        return _prepare_video(src, images_dir, opts, progress)
    return _prepare_photos(src, images_dir, progress)
