"""The poses step's report: registered / total, reprojection error, track length, and why images failed.

Reasons for an image that did not register are read from the COLMAP database (keypoints per image,
verified two-view geometries and their inlier counts) and from the frames' sharpness:

- unreadable or odd-sized input (skipped before matching; see :mod:`meshlift.poses.frames`);
- few features (fewer than ``MIN_FEATURES`` SIFT keypoints: textureless, dark, tiny);
- blurry (sharpness below ``BLUR_FRACTION`` of the median);
- no verified pair at all (the image does not overlap the others);
- too few inlier matches with registered images (below COLMAP's ``abs_pose_min_num_inliers`` = 30);
- registered in a separate, smaller model (a group of images with no link to the main one);
- otherwise: the absolute pose failed despite matches (repetitive texture, a different scene, ...).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["PosesReport", "build_report", "MIN_FEATURES", "BLUR_FRACTION", "MIN_POSE_INLIERS"]

MIN_FEATURES = 100
"""Fewer SIFT keypoints than this is reported as "few features"."""
BLUR_FRACTION = 0.35
"""Sharpness below this fraction of the median is reported as "blurry"."""
MIN_POSE_INLIERS = 30
"""COLMAP's ``abs_pose_min_num_inliers``: fewer inlier matches with registered images cannot register."""


@dataclass
class PosesReport:
    """Summary of one ``meshlift poses`` run (written as ``DIR/poses_report.json``)."""

    input: str
    output: str
    total_images: int
    """Images given to structure from motion (after skipping unreadable / odd-sized inputs)."""
    registered: int
    """Images with a pose in the written model (``sparse/0``)."""
    mean_reprojection_error_px: float = float("nan")
    mean_track_length: float = float("nan")
    """Mean number of images observing a 3D point."""
    num_points3D: int = 0
    num_cameras: int = 0
    camera_model: str = ""
    matcher: str = ""
    num_pairs: int = 0
    model_sizes: list[int] = field(default_factory=list)
    """Registered images of every model mapping produced (the largest is written)."""
    unregistered: list[dict] = field(default_factory=list)
    """``{"name", "reason"}`` per image that has no pose."""
    skipped_inputs: list[dict] = field(default_factory=list)
    """``{"name", "reason"}`` per input file or video frame not used at all."""
    timings_s: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2, default=float) + "\n", encoding="utf-8")
        return path

    def lines(self) -> list[str]:
        """Human-readable summary lines (what the CLI prints)."""
        out = [f"registered {self.registered} / {self.total_images} images"
               + (f" (models: {self.model_sizes})" if len(self.model_sizes) > 1 else ""),
               f"mean reprojection error {self.mean_reprojection_error_px:.3f} px, mean track length "
               f"{self.mean_track_length:.2f}, {self.num_points3D} points, {self.num_cameras} camera(s) "
               f"{self.camera_model}, matcher {self.matcher}"
               + (f" ({self.num_pairs} pairs)" if self.num_pairs else "")]
        if self.timings_s:
            out.append("time: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings_s.items()))
        for u in self.unregistered:
            out.append(f"not registered: {u['name']}: {u['reason']}")
        return out


def _pair_stats(pycolmap, db) -> tuple[dict[int, int], dict[int, list[tuple[int, int]]], dict[int, str]]:
    """(keypoints per image id, verified partners [(other id, inliers)] per image id, name per id)."""
    names = {im.image_id: im.name for im in db.read_all_images()}
    kps = {iid: int(db.num_keypoints_for_image(iid)) for iid in names}
    partners: dict[int, list[tuple[int, int]]] = {iid: [] for iid in names}
    pair_ids, counts = db.read_two_view_geometry_num_inliers()
    for pid, n in zip(pair_ids, counts):
        if int(n) <= 0:
            continue
        a, b = pycolmap.pair_id_to_image_pair(int(pid))
        partners.setdefault(int(a), []).append((int(b), int(n)))
        partners.setdefault(int(b), []).append((int(a), int(n)))
    return kps, partners, names


def build_report(
    *,
    input: Path,
    output: Path,
    sfm,
    frames,
    camera_model: str,
    min_pair_inliers: int = 15,
) -> PosesReport:
    """Assemble the :class:`PosesReport` of a run from the :class:`~meshlift.poses.sfm.SfmResult` and the
    :class:`~meshlift.poses.frames.FramesResult` (reads the COLMAP database for the failure reasons)."""
    from meshlift.poses.sfm import require_pycolmap

    pycolmap = require_pycolmap()
    rec = sfm.reconstruction
    names_all = [r.name for r in frames.records]
    sharp = {r.name: r.sharpness for r in frames.records}
    med_sharp = float(np.median(list(sharp.values()))) if sharp else 0.0
    reg_names: set[str] = set()
    report = PosesReport(input=str(input), output=str(output), total_images=len(names_all), registered=0,
                         camera_model=camera_model, matcher=sfm.matcher, num_pairs=sfm.num_pairs,
                         model_sizes=list(sfm.model_sizes), timings_s=dict(sfm.timings_s),
                         skipped_inputs=[{"name": n, "reason": r} for n, r in frames.skipped],
                         warnings=list(frames.warnings) + list(sfm.warnings))
    if rec is not None:
        reg_names = {rec.image(i).name for i in rec.reg_image_ids()}
        report.registered = len(reg_names)
        report.mean_reprojection_error_px = float(rec.compute_mean_reprojection_error())
        report.mean_track_length = float(rec.compute_mean_track_length())
        report.num_points3D = int(rec.num_points3D())
        report.num_cameras = int(rec.num_cameras())
    db = pycolmap.Database.open(str(sfm.database))
    try:
        kps, partners, id_names = _pair_stats(pycolmap, db)
    finally:
        db.close()
    name_to_id = {v: k for k, v in id_names.items()}
    reg_ids = {name_to_id[n] for n in reg_names if n in name_to_id}
    for name in names_all:
        if name in reg_names:
            continue
        iid = name_to_id.get(name)
        reasons = []
        if iid is None:
            reasons.append("no features were extracted (COLMAP could not read the image)")
        else:
            k = kps.get(iid, 0)
            if k < MIN_FEATURES:
                reasons.append(f"few features ({k} SIFT keypoints): textureless, dark or tiny")
            if med_sharp > 0 and sharp.get(name, med_sharp) < BLUR_FRACTION * med_sharp:
                reasons.append(f"blurry (sharpness {100 * sharp[name] / med_sharp:.0f}% of the median)")
            ps = [(o, n) for o, n in partners.get(iid, []) if n >= min_pair_inliers]
            with_reg = max((n for o, n in ps if o in reg_ids), default=0)
            if name in sfm.other_model_images:
                reasons.append(f"registered only in a separate model of {sfm.other_model_images[name]} images, "
                               "which shares too few matches with the main model (a disconnected part of the "
                               "capture: add photos linking the two)")
            elif not ps:
                reasons.append("too few matches: no other image shares enough verified matches with it (it does "
                               "not overlap the others)")
            elif with_reg < MIN_POSE_INLIERS:
                reasons.append(f"too few matches with registered images (best pair {with_reg} inlier matches; "
                               f"{MIN_POSE_INLIERS} needed)")
            elif not reasons:
                reasons.append(f"the absolute pose failed despite {with_reg} inlier matches with a registered "
                               "image (repetitive texture, a moving object or a different scene?)")
        report.unregistered.append({"name": name, "reason": "; ".join(reasons)})
    if report.unregistered:
        shown = ", ".join(u["name"] for u in report.unregistered[:8])
        more = f", ... ({len(report.unregistered)} in all)" if len(report.unregistered) > 8 else ""
        report.warnings.append(f"{len(report.unregistered)} of {report.total_images} images did not register: "
                               f"{shown}{more} (reasons in poses_report.json)")
    return report
