#!/usr/bin/env bash
# One device call of MILo quality runs: the cases in parallel on the one GPU (quality, not speed), then a tar of
# the small result files (metrics, logs, renders, previews; no checkpoints or large meshes) in $OUT.
#
#   MESHLIFT_SHARED_DATA=.devrun/data bash benchmarks/milo_gpu.sh --out runs/milo --only fox spot --schedule-scale 0.4 --set time_budget_s=420
#
# Wheels the device image lacks (trimesh, xatlas, fast-simplification, pypng) are installed from .whl/ when it exists.
set -u
if [ -d .whl ] && [ ! -d /tmp/site/trimesh ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} OMP_NUM_THREADS=${OMP_NUM_THREADS:-3} PYTHONUNBUFFERED=1
python3 benchmarks/milo_results.py --parallel "$@"
rc=$?
outdir=$(python3 - "$@" <<'PY'
import sys
a = sys.argv[1:]
print(a[a.index("--out") + 1])
PY
)
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/milo_results.tgz" --exclude='checkpoint.pt' --exclude='*.obj' --exclude='*.ply' --exclude='point_cloud*' \
    --exclude='*.glb' "$outdir" 2>/dev/null
  for f in "$outdir"/*/mesh.glb; do [ -f "$f" ] && [ "$(stat -c %s "$f")" -lt 15000000 ] && cp "$f" "$OUT/$(basename "$(dirname "$f")")_mesh.glb"; done
  ls -la "$OUT"
fi
exit $rc
