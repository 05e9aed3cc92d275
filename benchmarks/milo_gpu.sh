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
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT/metrics"
  for d in "$outdir"/*/; do n=$(basename "$d"); [ -f "$d/metrics.json" ] && cp "$d/metrics.json" "$OUT/metrics/$n.json"; done
  last=""
  for d in "$outdir"/*/images; do f=$(ls "$d"/preview_*.png 2>/dev/null | tail -1); last="$last $f"; done
  tar czf "$OUT/logs.tgz" "$outdir"/*.log 2>/dev/null
  tar czf "$OUT/images.tgz" "$outdir"/*/mesh_renders $last 2>/dev/null
  ls -la "$OUT" "$OUT/metrics"
fi
for f in "$outdir"/*.log; do echo "== $f"; tail -4 "$f"; done
