#!/usr/bin/env bash
# Issue 33's fox measurement in one warm device window: the fox alone, then the variants replayed on ITS checkpoint
# before the machine (and its disk) goes back. Session 25 lost a full run's checkpoint by leaving the replay of the
# old hole rule for later; this script makes the replay part of the run.
#
#   PHASE=run    WAIT=560 bash benchmarks/milo_fox_session.sh     # call 1: install, the fox alone (~505 s on an H100)
#   PHASE=replay WAIT=560 bash benchmarks/milo_fox_session.sh     # call 2 (within the 30 s idle window): replays
#
# PHASE=run starts `milo_results.py --only fox` (FOX_SETS, default `scene_contraction=log`) in its own process
# session and waits up to WAIT seconds; the run keeps going when the call ends. PHASE=replay waits for the run to
# finish, then on runs/fox/fox: `photo_refine_replay.py` once per REPLAY_SETS entry (';'-separated `--set` lists,
# default: the run's own extraction twice, under REPLAY_ENV (default `CUDA_LAUNCH_BLOCKING=1`): session 27's
# replays of the hole rules (64 edges, see-through refusal, ear clipping; measured) saw the refinement die on a
# CUDA fault in two of four runs, and blocking launches name the kernel; a group that
# no longer fits in WAIT is skipped), each with the variants REPLAY_VARIANTS and
# every test view's image; then `milo_fox_gap.py`. Everything small is packed into $OUT as it finishes: metrics.tgz,
# logs.tgz, images.tgz (milo_gpu.sh's), replay.tgz (replay_<i>.json/.log, gap.json/.log), replay_img.tgz (JPEG),
# fox_ckpt.tgz.part_* (the run's checkpoint.pt, config.json, metrics.json in 15 MB parts: replay it on the CPU later). DATA: the datasets
# (default .devrun/data); wheels from .whl go to /tmp/site. DRY=1 prints the commands.
# SLIM=path/fox_slim.tgz with PHASE=replay: replay a kept checkpoint instead of a run of this window (no run phase):
# it is unpacked into $RUNS (fox/checkpoint.pt, config.json, metrics.json: the session 32 recipe, e.g.
# benchmarks/results/raw_2026-12-07s34/fox_slim.tgz) and its config's `data` pointed at $DATA/fox; the checkpoint is not
# sent back again.
set -u
T0=$SECONDS
PHASE=${PHASE:-run}
WAIT=${WAIT:-560}
RUNS=${RUNS:-runs/fox}
FOX_SETS=${FOX_SETS-scene_contraction=log}
REPLAY_SETS=${REPLAY_SETS-";;"}
REPLAY_ENV=${REPLAY_ENV-CUDA_LAUNCH_BLOCKING=1}
REPLAY_VARIANTS=${REPLAY_VARIANTS-"base:photo_refine_steps=0 cw:"}
REPLAY_ARGS=${REPLAY_ARGS-"--train-views 5"}  # more photo_refine_replay.py arguments
export MESHLIFT_SHARED_DATA=${DATA:-$PWD/.devrun/data}
if [ -d .whl ] && [ ! -d /tmp/site/trimesh ] && [ -z "${DRY:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$PWD/src:/tmp/site:${PYTHONPATH:-} PYTHONUNBUFFERED=1
exec 3>&1  # DRY prints the commands here, past their log redirections
run() { if [ -n "${DRY:-}" ]; then echo "$ $*" >&3; else "$@"; fi; }

if [ "$PHASE" = run ]; then
  sets=()
  IFS=',' read -r -a kv <<< "$FOX_SETS"
  for s in ${kv[@]+"${kv[@]}"}; do [ -n "$s" ] && sets+=(--set "$s"); done
  run env OUT= WAIT=$((WAIT - (SECONDS - T0))) bash benchmarks/milo_gpu.sh --out "$RUNS" --only fox ${sets[@]+"${sets[@]}"}
  [ -z "${DRY:-}" ] && tail -3 "$RUNS/fox.log"
  echo "phase run: $((SECONDS - T0)) s"
  exit 0
fi

[ "$PHASE" = replay ] || { echo "PHASE must be run or replay, got $PHASE" >&2; exit 2; }
: "${OUT:?OUT must be set (the device tool output folder)}"
mkdir -p "$OUT/replay_img"
if [ -n "${SLIM:-}" ]; then
  run mkdir -p "$RUNS"
  run tar xzf "$SLIM" -C "$RUNS"
  run python3 -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); c['data'] = sys.argv[2]; \
json.dump(c, open(p, 'w'), indent=1)" "$RUNS/fox/config.json" "$MESHLIFT_SHARED_DATA/fox"
elif [ -z "${DRY:-}" ]; then
  while [ ! -f "$RUNS/milo_results.json" ] && [ $((SECONDS - T0)) -lt $((WAIT / 2)) ]; do sleep 3; done
  [ -f "$RUNS/milo_results.json" ] || echo "the fox run has not finished after $((SECONDS - T0)) s; replaying anyway"
  OUT=$OUT COLLECT=1 bash benchmarks/milo_gpu.sh --out "$RUNS" > "$OUT/pack_run.log" 2>&1
fi
i=0
IFS=';' read -r -a groups <<< "$REPLAY_SETS"
[ ${#groups[@]} -eq 0 ] && groups=("")
for g in "${groups[@]}"; do
  args=()
  IFS=',' read -r -a kv <<< "$g"
  for s in ${kv[@]+"${kv[@]}"}; do [ -n "$s" ] && args+=(--set "$s"); done
  for v in $REPLAY_VARIANTS; do args+=(--variant "$v"); done
  left=$((WAIT - 40 - (SECONDS - T0)))
  [ $left -gt 20 ] || { echo "no time left for replay $i ($g)"; break; }
  run env $REPLAY_ENV timeout $left python3 benchmarks/photo_refine_replay.py "$RUNS/fox" --device cuda ${args[@]+"${args[@]}"} \
    --images "$OUT/replay_img" --image-views all $REPLAY_ARGS --json "$OUT/replay_$i.json" > "$OUT/replay_$i.log" 2>&1
  [ -z "${DRY:-}" ] && grep -v "^tsdf\|^milo" "$OUT/replay_$i.log" | tail -4
  i=$((i + 1))
done
left=$((WAIT - 20 - (SECONDS - T0)))
[ $left -gt 20 ] && run timeout $left python3 benchmarks/milo_fox_gap.py "$RUNS/fox" --device cuda --json "$OUT/gap.json" \
  > "$OUT/gap.log" 2>&1
if [ -z "${DRY:-}" ]; then
  python3 - "$OUT/replay_img" <<'PY'
import sys
from pathlib import Path
from PIL import Image
for f in Path(sys.argv[1]).glob("*.png"):
    Image.open(f).convert("RGB").save(f.with_suffix(".jpg"), quality=85)
    f.unlink()
PY
  tar czf "$OUT/replay_img.tgz" -C "$OUT" replay_img && rm -rf "$OUT/replay_img"
  # at most 8 files come back: the replays' small outputs in one archive, and the run's checkpoint (a ~40k-Gaussian
  # fox is ~10 MB) so that later variants can be replayed on the CPU after the machine has gone back
  (cd "$OUT" && small=$(ls replay_*.json replay_*.log gap.json gap.log pack_run.log 2>/dev/null; true) \
    && [ -n "$small" ] && tar czf replay.tgz $small && rm -f $small)  # those that exist (a SLIM replay packs no run)
  # a file over 16 MiB does not come back (session 27: 26 MB): parts of 15 MB (cat fox_ckpt.tgz.part_* > fox_ckpt.tgz)
  [ -z "${SLIM:-}" ] && tar czf /tmp/fox_ckpt.tgz -C "$RUNS" fox/checkpoint.pt fox/config.json fox/metrics.json \
    2>/dev/null && split -b 15M /tmp/fox_ckpt.tgz "$OUT/fox_ckpt.tgz.part_" && rm -f /tmp/fox_ckpt.tgz
  ls -la "$OUT"
fi
echo "phase replay: $((SECONDS - T0)) s"
