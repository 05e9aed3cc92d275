#!/usr/bin/env bash
# Issue 30: named arms of `meshlift reconstruct <lego> --preset nerf ARGS` in parallel on the device (quality, not
# speed: the arms share the GPUs), then each arm's metrics.json, config.json, log, loss curve and test-view images
# (images/end_XX.png: target | ours, as JPEGs) packed into one archive, $OUT/lego_arms.tgz, with summary.md (one
# row per arm) also printed. Results are packed also when some arms are still running after WAIT seconds (they
# keep running in their own process sessions, setsid, while the machine stays warm: call again with COLLECT=1 to
# pick up what finished since).
#
#   OUT=$OUT WAIT=540 bash benchmarks/lego_arms.sh \
#       "legoF:--set ks_min=0,0.25,0 --set ks_max=1,1,1 --set occlusion_reg_weight=0.03" \
#       "legoG:--set ks_min=0,0.25,0 --set ks_max=1,1,1 --set occlusion_reg_weight=0.03 --set train_background=random"
#   COLLECT=1 OUT=$OUT bash benchmarks/lego_arms.sh legoF legoG    # a later call: collect only
#   DRY=1 bash benchmarks/lego_arms.sh "legoF:--set ..."            # print the commands, run nothing
#   DEVICE=cpu QUICK=1 WAIT=900 OUT=/tmp/o bash benchmarks/lego_arms.sh "t:--set iter_pass1=20 --set iter_pass2=10"
#
# An arm is "NAME:ARGS" (ARGS split on spaces; no quoting inside). Environment:
#   DATA     the dataset (default .devrun/data/nerf_synthetic_lego_half, else ../shared/data/nerf_synthetic_lego_half)
#   RUNS     where the run folders go (runs/lego_arms; each arm in RUNS/NAME, replaced: --overwrite)
#   DEVICE   cuda (default) or cpu; with several GPUs the arms go round-robin over them (CUDA_VISIBLE_DEVICES)
#   WAIT     seconds to wait for the arms (540: under a 600 s device call, so that the packing is reached)
#   QUICK=1  the preset's --quick variant (a CPU check of this script)
#   STAGES=1 also benchmarks/surface_stages.py on each finished arm (stages.md + contact sheet; ~45 s per arm)
#   VAL_VIEWS test views written as images per arm (10: lego-half's whole test split)
# Wheels the device image lacks (trimesh, xatlas, fast-simplification, pypng) are installed from .whl/ into
# /tmp/site when it exists (benchmarks/README.md: carry [".devrun", ".whl"]).
set -u
T0=$SECONDS
if [ -z "${DATA:-}" ]; then
  DATA=.devrun/data/nerf_synthetic_lego_half
  [ -d "$DATA" ] || DATA=../shared/data/nerf_synthetic_lego_half
fi
RUNS=${RUNS:-runs/lego_arms}
DEVICE=${DEVICE:-cuda}
VAL_VIEWS=${VAL_VIEWS:-10}
if [ $# -eq 0 ]; then
  echo "usage: [OUT=DIR] [WAIT=540] bash benchmarks/lego_arms.sh \"NAME:ARGS\" ..." >&2
  exit 2
fi

if [ -z "${DRY:-}" ]; then
  if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/trimesh ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  fi
  [ -d /tmp/site ] && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} OMP_NUM_THREADS=${OMP_NUM_THREADS:-3} PYTHONUNBUFFERED=1
export MESHLIFT_PRECOMPILE_WORKERS=${MESHLIFT_PRECOMPILE_WORKERS:-2}
ngpu=1
if [ "$DEVICE" = cuda ] && command -v nvidia-smi >/dev/null 2>&1; then
  ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
  [ "$ngpu" -gt 0 ] || ngpu=1
fi

names=()
pids=()
i=0
[ -n "${DRY:-}" ] || mkdir -p "$RUNS"
for spec in "$@"; do
  name=${spec%%:*}
  sets=""
  [ "$spec" != "$name" ] && sets=${spec#*:}
  if ! [[ "$name" =~ ^[A-Za-z0-9_.-]+$ ]]; then
    echo "lego_arms.sh: arm name '$name' must be letters, digits, _ . - (as in \"legoF:--set ...\")" >&2
    exit 2
  fi
  names+=("$name")
  [ -n "${COLLECT:-}" ] && continue
  read -r -a extra <<< "$sets"
  cmd=(python3 -m meshlift.cli.main reconstruct "$DATA" --preset nerf)
  [ -n "${QUICK:-}" ] && cmd+=(--quick)
  cmd+=(--set "device=$DEVICE" --set "val_views=$VAL_VIEWS" "${extra[@]}" --out "$RUNS/$name" --overwrite)
  gpu=$((i % ngpu))
  i=$((i + 1))
  stages=()
  [ -n "${STAGES:-}" ] && stages=(python3 benchmarks/surface_stages.py "$RUNS/$name" --device "$DEVICE" --out
                                  "$RUNS/$name/stages")
  if [ -n "${DRY:-}" ]; then
    echo "CUDA_VISIBLE_DEVICES=$gpu ${cmd[*]} > $RUNS/$name.log 2>&1${stages:+; ${stages[*]} >> $RUNS/$name.log 2>&1}"
    continue
  fi
  # the arm's own session (setsid): it outlives this call when WAIT ends first; the stages run after it
  CUDA_VISIBLE_DEVICES=$gpu STAGES_CMD="${stages[*]}" setsid bash -c '"$@"; rc=$?
    echo "reconstruct exit status $rc"
    if [ "$rc" -eq 0 ] && [ -n "$STAGES_CMD" ]; then timeout 120 $STAGES_CMD; fi' _ "${cmd[@]}" \
    > "$RUNS/$name.log" 2>&1 < /dev/null &
  pids+=($!)
  echo "started $name (GPU $gpu): ${cmd[*]}"
done
[ -n "${DRY:-}" ] && exit 0

if [ -z "${COLLECT:-}" ]; then
  while [ $((SECONDS - T0)) -lt "${WAIT:-540}" ]; do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 1 ] || break
    sleep 5
  done
  for k in "${!pids[@]}"; do
    kill -0 "${pids[$k]}" 2>/dev/null && echo "${names[$k]} still running after $((SECONDS - T0)) s (collect later with COLLECT=1)"
  done
fi

pack=${OUT:-$RUNS}/lego_arms
rm -rf "$pack" && mkdir -p "$pack"
python3 - "$RUNS" "$pack" "${names[@]}" <<'PY'
import json, shutil, sys
from pathlib import Path

runs, pack, names = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
rows = ["| arm | test PSNR | SSIM | faces | occlusion_reg (pass 1 / 2) | wall s | status |", "|---|---:|---:|---:|---|---:|---|"]
for name in names:
    run, dst = runs / name, pack / name
    dst.mkdir(parents=True, exist_ok=True)
    log = runs / f"{name}.log"
    if log.is_file():
        shutil.copy(log, dst / "run.log")
    for f in ("metrics.json", "config.json"):
        if (run / f).is_file():
            shutil.copy(run / f, dst / f)
    for f in sorted((run / "stages").glob("*.md")) + sorted((run / "stages").glob("*.json")):
        shutil.copy(f, dst / f"stages_{f.name}")
    pngs = sorted((run / "images").glob("end_*.png")) + [run / "loss_curve.png", run / "stages" / "contact.png"]
    for f in pngs:
        if f.is_file():
            try:
                from PIL import Image

                im = Image.open(f).convert("RGB")
                im.thumbnail((2400, 2400))
                im.save(dst / (f.stem + ".jpg"), quality=90)
            except ImportError:  # no Pillow: the PNG itself
                shutil.copy(f, dst / f.name)
    m = json.loads((run / "metrics.json").read_text()) if (run / "metrics.json").is_file() else None
    if m is None:
        status = "running" if not log.is_file() or "exit status" not in log.read_text(errors="replace") else "failed"
        rows.append(f"| {name} | – | – | – | – | – | {status} |")
        continue
    occ = m.get("loss_terms", {}).get("occlusion_reg", {})
    occ_s = " / ".join(f"{occ[p]:.4f}" if p in occ else "–" for p in ("pass1", "pass2")) if occ else "–"
    rows.append(f"| {name} | {m.get('psnr', float('nan')):.2f} | {m.get('ssim', float('nan')):.4f} | "
                f"{m.get('faces', '–')} | {occ_s} | {m.get('timings', {}).get('total_s', float('nan')):.0f} | done |")
(pack / "summary.md").write_text("\n".join(rows) + "\n")
print("\n".join(rows))
PY
tar czf "$pack.tgz" -C "$(dirname "$pack")" "$(basename "$pack")" && rm -rf "$pack"
ls -la "$pack.tgz"
for n in "${names[@]}"; do
  [ -f "$RUNS/$n.log" ] && { echo "== $n"; grep -a "test PSNR\|Error\|error:" "$RUNS/$n.log" | tail -3; tail -2 "$RUNS/$n.log"; }
done
exit 0
