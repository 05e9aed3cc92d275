"""``meshlift poses``: photos or a video -> a posed dataset in the standard COLMAP layout.

Output folder ``DIR`` (the input is only read)::

    DIR/images/                 the images used (upright copies; sampled frames for a video)
    DIR/masks/<image>.png       with ``mask_dir``: the masks, as COLMAP and meshlift's readers find them
    DIR/sparse/0/{cameras,images,points3D}.bin   the largest model (COLMAP binary format)
    DIR/transforms.json         with ``write_transforms``: the same cameras, instant-ngp / nerfstudio format
    DIR/poses_report.json       :class:`~meshlift.poses.report.PosesReport`
    DIR/colmap/database.db      COLMAP's feature / match database (kept to inspect or re-run COLMAP)

:func:`ensure_posed` is the hook ``meshlift reconstruct`` calls: a dataset with poses passes through, a
folder of photos or a video is posed first.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

from meshlift.errors import DatasetError
from meshlift.poses.frames import FramesResult, is_video, list_images, prepare_frames
from meshlift.poses.options import PosesOptions
from meshlift.poses.progress import StageProgress
from meshlift.poses.report import PosesReport, build_report
from meshlift.poses.sfm import run_sfm

__all__ = ["run_poses", "ensure_posed", "needs_poses", "write_transforms_json", "OUTPUT_ENTRIES"]

OUTPUT_ENTRIES = ("images", "masks", "sparse", "colmap", "transforms.json", "poses_report.json")
"""What :func:`run_poses` writes in ``DIR`` (and removes first with ``overwrite=True``)."""


def _check_paths(src: Path, out: Path, overwrite: bool) -> None:
    s, o = src.resolve(), out.resolve()
    if o == s or s in o.parents or (src.is_dir() and o in s.parents):
        raise DatasetError(f"--out {out} overlaps the input {src}; the input is never written to, so choose an "
                           "output folder outside it (and not one that contains it)")
    if out.is_file():
        raise DatasetError(f"--out {out} is a file; give a folder")
    present = [e for e in OUTPUT_ENTRIES if (out / e).exists()]
    if present and not overwrite:
        raise DatasetError(f"{out} already holds poses output ({', '.join(present)}); pass --overwrite to replace "
                           "it, or choose another --out folder")
    for e in present:
        p = out / e
        shutil.rmtree(p) if p.is_dir() else p.unlink()


def _write_masks(frames: FramesResult, mask_dir: Path, out_masks: Path) -> list[str]:
    """COLMAP masks ``<image name>.png`` (255 = use, 0 = ignore) for every written image; returns warnings."""
    import numpy as np
    from PIL import Image

    from meshlift.data._common import find_mask

    out_masks.mkdir(parents=True, exist_ok=True)
    missing, resized = [], []
    for r in frames.records:
        src_name = Path(r.source).name
        mp = find_mask(mask_dir, src_name)
        W, H = r.size
        if mp is None:
            missing.append(src_name)
            m = np.full((H, W), 255, np.uint8)
        else:
            try:
                with Image.open(mp) as im:
                    g = im.convert("L")
                    if g.size != (W, H):
                        if abs(g.size[1] * W / g.size[0] - H) > 1 + 0.01 * H:
                            raise DatasetError(f"mask {mp} is {g.size[0]}x{g.size[1]} but its image {src_name} is "
                                               f"{W}x{H} (another aspect ratio); fix or remove the mask")
                        g = g.resize((W, H), Image.NEAREST)
                        resized.append(src_name)
                    m = np.where(np.asarray(g) > 127, 255, 0).astype(np.uint8)
            except OSError as exc:
                raise DatasetError(f"mask {mp} is not a readable image ({exc}); fix or remove it") from exc
        Image.fromarray(m).save(out_masks / f"{r.name}.png")
    warnings = []
    if missing:
        warnings.append(f"{len(missing)} image(s) have no mask in {mask_dir} (features taken everywhere): "
                        + ", ".join(missing[:6]) + (" ..." if len(missing) > 6 else ""))
    if resized:
        warnings.append(f"{len(resized)} mask(s) resized to their image's size")
    return warnings


def write_transforms_json(dataset: Path, model_dir: Path | None = None) -> tuple[Path | None, str | None]:
    """Write ``dataset/transforms.json`` (instant-ngp / nerfstudio: OpenGL camera-to-world per frame,
    per-frame ``fl_x fl_y cx cy w h`` and distortion ``k1 k2 p1 p2`` / fisheye ``k1..k4``) from the COLMAP
    model ``dataset/sparse/0``. Returns ``(path, None)``, or ``(None, why)`` when the model cannot be
    expressed (FULL_OPENCV with k4..k6)."""
    import torch

    from meshlift.cameras import colmap_to_world_to_camera, world_to_camera_to_opengl_c2w
    from meshlift.data.colmap import read_model
    from meshlift.geometry.distortion import split_params

    model = read_model(model_dir or dataset / "sparse" / "0", points=False)
    keys = {"SIMPLE_RADIAL": ["k1"], "RADIAL": ["k1", "k2"], "OPENCV": ["k1", "k2", "p1", "p2"],
            "OPENCV_FISHEYE": ["k1", "k2", "k3", "k4"], "FULL_OPENCV": ["k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6"]}
    frames = []
    for im in sorted(model.images.values(), key=lambda i: i.name):
        cam = model.cameras[im.camera_id]
        fx, fy, cx, cy, extra = split_params(cam.model, cam.params)
        w2c = colmap_to_world_to_camera(torch.tensor(im.qvec, dtype=torch.float64), torch.tensor(im.tvec, dtype=torch.float64))
        fr = {"file_path": f"images/{im.name}", "transform_matrix": world_to_camera_to_opengl_c2w(w2c).tolist(),
              "fl_x": fx, "fl_y": fy, "cx": cx, "cy": cy, "w": cam.width, "h": cam.height}
        d = dict(zip(keys.get(cam.model, []), extra))
        if cam.model == "FULL_OPENCV":
            if any(d[k] != 0 for k in ("k4", "k5", "k6")):
                return None, "FULL_OPENCV cameras with k4..k6 have no transforms.json form (use the COLMAP model)"
            d = {k: d[k] for k in ("k1", "k2", "p1", "p2", "k3")}
        if cam.model == "OPENCV_FISHEYE":
            fr["camera_model"] = "OPENCV_FISHEYE"
        fr.update(d)
        frames.append(fr)
    path = dataset / "transforms.json"
    path.write_text(json.dumps({"frames": frames, "meshlift_source": "meshlift poses (COLMAP model sparse/0)"},
                               indent=1) + "\n", encoding="utf-8")
    return path, None


def run_poses(
    input: str | Path,
    out_dir: str | Path,
    options: PosesOptions | None = None,
    *,
    progress: StageProgress | None = None,
    overwrite: bool = False,
) -> PosesReport:
    """Estimate camera poses for a folder of photos or a video and write a posed COLMAP dataset.

    Args:
        input: folder of photos (or with an ``images/`` subfolder), or a video file. Never written to.
        out_dir: output folder (created; see the module docstring for its layout).
        options: :class:`PosesOptions`.
        progress: progress sink (silent by default); the CLI passes rich bars.
        overwrite: replace an earlier poses output in ``out_dir`` (only the entries of :data:`OUTPUT_ENTRIES`).

    Returns:
        The :class:`PosesReport` (also written to ``out_dir/poses_report.json``).

    Raises:
        DatasetError: missing input, fewer than 3 usable images, an undecodable video, images that do not
            overlap (no model), an output folder overlapping the input or holding an earlier result.
        DependencyError: pycolmap (or imageio-ffmpeg for a video) is not installed; the message gives
            ``pip install 'meshlift[poses]'``.
        ConfigError: bad options.
    """
    from meshlift.poses.sfm import require_pycolmap

    require_pycolmap()  # fail before any file is written
    opts = options or PosesOptions()
    progress = progress or StageProgress()
    src, out = Path(input), Path(out_dir)
    if not src.exists():
        raise DatasetError(f"input {src} does not exist; give a folder of photos or a video file")
    _check_paths(src, out, overwrite)
    if opts.mask_dir is not None and src.is_file():
        raise DatasetError("--mask-dir applies to a folder of photos, not to a video (masks are matched by image name)")
    out.mkdir(parents=True, exist_ok=True)
    frames = prepare_frames(src, out / "images", opts, progress)
    masks_dir = None
    if opts.mask_dir is not None:
        masks_dir = out / "masks"
        frames.warnings += _write_masks(frames, opts.mask_dir, masks_dir)
    for w in frames.warnings:
        progress.log(f"warning: {w}")
    names = [r.name for r in frames.records]
    keys = {r.camera_key for r in frames.records}
    one_camera = len(keys) == 1
    if opts.single_camera is None and not frames.is_video:
        progress.log("one shared camera: every photo has the same EXIF camera and focal length"
                     + (" (none)" if keys == {""} else "") if one_camera else
                     f"one camera per photo: {len(keys)} different EXIF cameras / focal lengths")
    sfm = run_sfm(out / "images", names, out / "colmap", opts, is_video=frames.is_video,
                  one_camera_likely=one_camera, masks_dir=masks_dir, progress=progress)
    if sfm.reconstruction is None or sfm.reconstruction.num_reg_images() < 3:
        report = build_report(input=src, output=out, sfm=sfm, frames=frames, camera_model=opts.camera_model)
        report.save(out / "poses_report.json")
        raise DatasetError(f"{src}: structure from motion found no model (models: {sfm.model_sizes or 'none'}): "
                           f"{_no_model_cause(report, names)}; details in {out / 'poses_report.json'}")
    sparse = out / "sparse" / "0"
    sparse.mkdir(parents=True)
    sfm.reconstruction.write(str(sparse))
    files = {"images": str(out / "images"), "sparse": str(sparse), "database": str(sfm.database)}
    if masks_dir is not None:
        files["masks"] = str(masks_dir)
    report = build_report(input=src, output=out, sfm=sfm, frames=frames, camera_model=opts.camera_model)
    if opts.write_transforms:
        path, why = write_transforms_json(out, sparse)
        if path is not None:
            files["transforms"] = str(path)
        else:
            report.warnings.append(f"transforms.json not written: {why}")
    files["report"] = str(out / "poses_report.json")
    report.files = files
    report.save(out / "poses_report.json")
    return report


def _no_model_cause(report, names: list[str]) -> str:
    """Why no model was built, from the per-image reasons of the report: too few features, no overlap, or
    (the images match but nothing could be triangulated) too little parallax."""
    from meshlift.poses.report import MIN_FEATURES

    def short(xs: list[str]) -> str:
        return ", ".join(xs[:6]) + (" ..." if len(xs) > 6 else "")

    few = [u["name"] for u in report.unregistered if "few features" in u["reason"]]
    alone = [u["name"] for u in report.unregistered if "does not overlap" in u["reason"]]
    if few and 2 * len(few) >= len(names):
        return (f"too few features: {len(few)} of {len(names)} images have fewer than {MIN_FEATURES} SIFT keypoints "
                f"({short(few)}): blank, dark, blurred, textureless or tiny pictures. Photograph a textured subject "
                "in good light and in focus, at full resolution")
    if alone:
        return (f"the images do not overlap enough to be matched ({len(alone)} of {len(names)} share no verified "
                f"matches with any other: {short(alone)}). Take photos of one scene from nearby viewpoints "
                "(60-80% overlap between neighbours)")
    return ("the images match one another, but nothing could be triangulated from them: too little parallax (the "
            "camera turned in place or barely moved between shots: a panorama from one spot, or near-identical "
            "photos). Move the camera around the subject between shots (60-80% overlap between neighbours)")


# ----------------------------------------------------------------------------------------------------
# the hook for `meshlift reconstruct`
# ----------------------------------------------------------------------------------------------------


def needs_poses(path: str | Path) -> bool:
    """True when ``path`` is a video file, or a folder with image files (directly or in ``images/``) but no
    dataset format :func:`meshlift.data.detect_format` recognises."""
    from meshlift.data import detect_format

    p = Path(path)
    if is_video(p):
        return True
    if not p.is_dir():
        return False
    try:
        detect_format(p)
        return False
    except DatasetError:
        return bool(list_images(p))


def ensure_posed(
    path: str | Path,
    out_dir: str | Path,
    options: PosesOptions | None = None,
    *,
    progress: StageProgress | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """A path every dataset reader loads: ``path`` itself when it is already a dataset (or not an image
    folder / video at all, e.g. a mesh file), else the posed dataset :func:`run_poses` writes to ``out_dir``.

    An earlier result in ``out_dir`` for the same input (its ``poses_report.json`` names ``path`` and
    ``sparse/0`` exists) is reused, so a resumed run does not pose again.

    Raises:
        DependencyError: poses are needed and pycolmap is missing (the message gives the install command).
        DatasetError: see :func:`run_poses`.
    """
    p, out = Path(path), Path(out_dir)
    if not needs_poses(p):
        return p
    say = log or (lambda m: None)
    rep = out / "poses_report.json"
    if rep.is_file() and (out / "sparse" / "0").is_dir():
        try:
            prev = json.loads(rep.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            prev = {}
        if prev.get("input") == str(p):
            say(f"{p} has no camera poses; reusing the poses estimated earlier in {out}")
            return out
    from meshlift.poses.frames import require_enough_images
    from meshlift.poses.sfm import require_pycolmap

    if p.is_dir() and (photos := list_images(p)):  # too few photos first: no install would help
        require_enough_images(p, photos)
    try:
        require_pycolmap()
    except Exception as exc:
        raise type(exc)(f"{p} is a folder of images without camera poses, and {exc}") from exc
    say(f"{p} has no camera poses: estimating them with pycolmap (meshlift poses) into {out}")
    report = run_poses(p, out, options, progress=progress, overwrite=True)
    for line in report.lines():
        say(line)
    for w in report.warnings:
        say(f"warning: {w}")
    return out
