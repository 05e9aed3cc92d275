#!/usr/bin/env bash
# One device call of MILo quality runs: the cases in parallel on the one GPU (quality, not speed), then the
# small result files (metrics.json per case, logs, mesh renders, the last preview) copied to $OUT — also when
# the runs are still going when WAIT seconds have passed (they keep running in their own process session
# while the machine stays warm; call again within 30 s with COLLECT=1 to pick up what finished since).
#
#   MESHLIFT_SHARED_DATA=.devrun/data WAIT=520 bash benchmarks/milo_gpu.sh --out runs/milo --only fox spot \
#       --schedule-scale 0.4 --set time_budget_s=300
#   COLLECT=1 bash benchmarks/milo_gpu.sh --out runs/milo        # a later call: collect only
#
# FLOOR=1 (with OUT): before packing, benchmarks/floor_snap_rerun.py on every finished `_ground` case's checkpoint
# (FLOOR_RULES, default `new standing nosnap`; results $OUT/floor_CASE.json, logs in the run folder's logs.tgz).
#
# Wheels the device image lacks (trimesh, xatlas, fast-simplification, pypng) are installed from .whl/ when it
# exists (python3 -m pip download ... -d .whl, see the device tool's notes). Lesson of session 14: a call that
# ends at its time limit returns nothing unless the results were copied before: hence WAIT < the call's limit.
set -u
T0=$SECONDS
if [ -d .whl ] && [ ! -d /tmp/site/trimesh ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} OMP_NUM_THREADS=${OMP_NUM_THREADS:-3} PYTHONUNBUFFERED=1
# the datasets: the device copy in .devrun/data unless set (session 27: a launch without it looked for
# ../shared/data, absent on the device, and every case failed at once)
if [ -z "${MESHLIFT_SHARED_DATA:-}" ] && [ -d "$PWD/.devrun/data" ]; then export MESHLIFT_SHARED_DATA=$PWD/.devrun/data; fi
export MESHLIFT_PRECOMPILE_WORKERS=${MESHLIFT_PRECOMPILE_WORKERS:-2}
outdir=$(python3 - "$@" <<'PY'
import sys
a = sys.argv[1:]
print(a[a.index("--out") + 1] if "--out" in a else "runs/milo")
PY
)
mkdir -p "$outdir"
if [ -z "${COLLECT:-}" ]; then
  setsid python3 benchmarks/milo_results.py --parallel "$@" > "$outdir/milo_results.log" 2>&1 &
  pid=$!
  while kill -0 $pid 2>/dev/null && [ $((SECONDS - T0)) -lt ${WAIT:-520} ]; do sleep 5; done
  kill -0 $pid 2>/dev/null && echo "still running after $((SECONDS - T0)) s (collect later with COLLECT=1)"
fi
if [ -n "${OUT:-}" ] && [ -n "${FLOOR:-}" ]; then
  # FLOOR=1: the floor rules replayed on each finished `_ground` case's checkpoint before the machine goes back
  # (benchmarks/floor_snap_rerun.py; session 25: the bunny's floor, rejected in one run, was worth +0.12 F in another)
  for d in "$outdir"/*ground*/; do
    n=$(basename "$d")
    [ -f "$d/metrics.json" ] && [ -f "$d/checkpoint.pt" ] || continue
    timeout ${FLOOR_TIMEOUT:-200} python3 benchmarks/floor_snap_rerun.py "$d" --device cuda --rules ${FLOOR_RULES:-new standing nosnap} \
      --json "$OUT/floor_$n.json" > "$outdir/floor_$n.log" 2>&1 &
  done
  wait
fi
if [ -n "${OUT:-}" ]; then
  # at most 8 files of 16 MB come back: metrics in one archive, images as small JPEGs (first two mesh renders
  # and the last preview of each case; session 15's PNG archive was 19.7 MB and did not come back)
  mkdir -p "$OUT/metrics"
  for d in "$outdir"/*/; do n=$(basename "$d"); [ -f "$d/metrics.json" ] && cp "$d/metrics.json" "$OUT/metrics/$n.json"; done
  tar czf "$OUT/metrics.tgz" -C "$OUT" metrics && rm -rf "$OUT/metrics"
  tar czf "$OUT/logs.tgz" "$outdir"/*.log 2>/dev/null
  python3 - "$outdir" "$OUT/images" <<'PY'
import sys
from pathlib import Path
from PIL import Image
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
for case in sorted(p for p in src.iterdir() if p.is_dir()):
    renders = sorted((case / "compare").glob("*.png")) or sorted((case / "mesh_renders").glob("*.png"))
    picks = renders[:2] + sorted((case / "images").glob("preview_*.png"))[-1:]
    for f in picks:
        im = Image.open(f).convert("RGB")
        im.thumbnail((1600, 1600))
        (dst / case.name).mkdir(parents=True, exist_ok=True)
        im.save(dst / case.name / (f.parent.name + "_" + f.stem + ".jpg"), quality=85)
PY
  tar czf "$OUT/images.tgz" -C "$OUT" images && rm -rf "$OUT/images"
  if [ -n "${MESHES:-}" ]; then  # MESHES=1: each case's asset and whole-scene mesh, decimated to MESH_FACES (60k)
    MESH_FACES=${MESH_FACES:-60000} python3 - "$outdir" "$OUT/meshes" <<'PY'
import os, sys
from pathlib import Path
import fast_simplification, numpy as np, trimesh
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
for case in sorted(p for p in src.iterdir() if p.is_dir()):
    for name in ("mesh.ply", "scene_mesh.ply"):
        if not (case / name).is_file():
            continue
        m = trimesh.load(case / name, process=False)
        keep = int(os.environ["MESH_FACES"])
        if len(m.faces) > keep:
            v, f = fast_simplification.simplify(np.asarray(m.vertices, np.float32), np.asarray(m.faces), 1 - keep / len(m.faces))
            m = trimesh.Trimesh(v, f, process=False)
        (dst / case.name).mkdir(parents=True, exist_ok=True)
        m.export(dst / case.name / name)
PY
    tar czf "$OUT/meshes.tgz" -C "$OUT" meshes && rm -rf "$OUT/meshes"
  fi
  ls -la "$OUT"
fi
for f in "$outdir"/*.log; do echo "== $f"; tail -4 "$f"; done
