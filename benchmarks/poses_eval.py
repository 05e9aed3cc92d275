"""`meshlift poses` on real captures with known cameras: registration, pose accuracy, wall time.

For each case the images are posed from scratch with :func:`meshlift.poses.run_poses`, then our cameras
are compared with the dataset's own cameras by name (:func:`meshlift.poses.evaluate.compare_cameras`:
Umeyama similarity on the camera centres, one trimmed re-fit, centre error as % of the diagonal of the
reference centres' bounding box, rotation error in degrees).

Cases (``--cases``, comma-separated):

- ``fox``: shared/data/fox/images (50 frames of a phone video, 540x960), reference = its transforms.json
  (COLMAP poses converted by instant-ngp). One shared OPENCV camera (the dataset's own model).
- ``fox640``: the same with ``max_image_size=640`` (features at 2/3 of the resolution).
- ``statue``: shared/data/statue_of_liberty_colmap/images_2 (40 internet photos, 400x600), reference =
  its COLMAP model sparse/0. One SIMPLE_RADIAL camera per image (different cameras).
- ``statue1``: the same with one shared SIMPLE_RADIAL camera, as the dataset's own COLMAP model has (the
  photos were cropped and resized upstream, so one focal length fits them all).

``--max-image-size 1000`` is not a separate case: both shared copies are at most 960 pixels on the long
side, so SIFT would see exactly the default input.

Usage::

    python benchmarks/poses_eval.py --cases fox,fox640,statue --threads 2 --json /tmp/poses_eval.json

Wall times are of this process on the machine it runs on (state the load when quoting them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _shared() -> Path:
    env = os.environ.get("MESHLIFT_SHARED_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"


def cases(shared: Path) -> dict:
    fox, statue = shared / "fox", shared / "statue_of_liberty_colmap"
    return {
        "fox": dict(input=fox / "images", reference=dict(path=fox), options=dict(camera_model="OPENCV", single_camera=True)),
        "fox640": dict(input=fox / "images", reference=dict(path=fox),
                       options=dict(camera_model="OPENCV", single_camera=True, max_image_size=640)),
        "statue": dict(input=statue / "images_2", reference=dict(path=statue, format="colmap"),
                       options=dict(camera_model="SIMPLE_RADIAL", single_camera=False)),
        "statue1": dict(input=statue / "images_2", reference=dict(path=statue, format="colmap"),
                        options=dict(camera_model="SIMPLE_RADIAL", single_camera=True)),
    }


def run_case(name: str, spec: dict, work: Path, threads: int, reuse: bool = False) -> dict:
    from meshlift.data import load_scene
    from meshlift.poses import PosesOptions, run_poses
    from meshlift.poses.evaluate import compare_cameras
    from meshlift.poses.report import PosesReport

    out = work / name
    opts = PosesOptions(num_threads=threads, **spec["options"])
    if reuse and (out / "poses_report.json").is_file():  # compare an earlier run again (no new timing)
        report = PosesReport(**json.loads((out / "poses_report.json").read_text()))
        wall = float("nan")
    else:
        t0 = time.perf_counter()
        report = run_poses(spec["input"], out, opts, overwrite=True)
        wall = time.perf_counter() - t0
    ref = load_scene(**spec["reference"])
    est = load_scene(out, format="colmap")
    ref_idx = {p.name: i for i, p in enumerate(ref.image_paths)}
    pairs = [(i, ref_idx[p.name]) for i, p in enumerate(est.image_paths) if p.name in ref_idx]
    cmp = compare_cameras(est.cameras.world_to_camera[[a for a, _ in pairs]],
                          ref.cameras.world_to_camera[[b for _, b in pairs]])
    row = {"case": name, "input": str(spec["input"]), "options": {k: str(v) for k, v in spec["options"].items()},
           "registered": report.registered, "total": report.total_images, "wall_s": wall,
           "timings_s": report.timings_s, "mean_reprojection_error_px": report.mean_reprojection_error_px,
           "mean_track_length": report.mean_track_length, "num_points3D": report.num_points3D,
           "compared_cameras": len(pairs), **cmp.summary(),
           "unregistered": report.unregistered}
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="fox,fox640,statue")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=None, help="Output folder of the posed datasets (default: a temp dir).")
    ap.add_argument("--json", type=Path, default=None, help="Write the rows as JSON here.")
    ap.add_argument("--reuse", action="store_true", help="Compare the results already in --work instead of re-running.")
    args = ap.parse_args(argv)
    shared = _shared()
    table = cases(shared)
    work = args.work or Path(tempfile.mkdtemp(prefix="poses_eval_"))
    rows = []
    for name in [c.strip() for c in args.cases.split(",") if c.strip()]:
        if name not in table:
            raise SystemExit(f"unknown case {name!r}; choose from {', '.join(table)}")
        row = run_case(name, table[name], work, args.threads, args.reuse)
        rows.append(row)
        print(f"{name}: registered {row['registered']}/{row['total']}, median centre error "
              f"{row['median_centre_error_pct_extent']:.3f}% of extent, median rotation error "
              f"{row['median_rotation_error_deg']:.3f} deg (constant camera-side part "
              f"{row['camera_offset_deg']:.3f} deg, rest {row['median_rotation_error_offset_removed_deg']:.3f} deg), reprojection {row['mean_reprojection_error_px']:.3f} px, "
              f"track {row['mean_track_length']:.2f}, wall {row['wall_s']:.0f} s "
              f"({', '.join(f'{k} {v:.0f} s' for k, v in row['timings_s'].items())})", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    print("| case | registered | median centre error (% extent) | median rotation error (°) | constant part / "
          "rest (°) | reproj. (px) | track length | wall time (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['registered']}/{r['total']} | {r['median_centre_error_pct_extent']:.3f} | "
              f"{r['median_rotation_error_deg']:.3f} | {r['camera_offset_deg']:.3f} / "
              f"{r['median_rotation_error_offset_removed_deg']:.3f} | {r['mean_reprojection_error_px']:.3f} | "
              f"{r['mean_track_length']:.2f} | {r['wall_s']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
