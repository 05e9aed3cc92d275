#!/usr/bin/env bash
# One device-machine session: GPU parity tests, `meshlift demo` on CUDA, and the four shared datasets
# reconstructed in parallel under a wall-clock budget each. Writes a tar of small result files to $OUT.
#
#   DATA=.devdata BUDGET=400 bash benchmarks/gpu_results.sh
#
# DATA holds copies of ../shared/data/{spot,bob,nerf_synthetic_lego_half,nerd_ethiopian_head}.
set -u
DATA=${DATA:-../shared/data}
BUDGET=${BUDGET:-400}
OUT=${OUT:-runs/gpu_out}
RUNS=runs/gpu
mkdir -p "$OUT" "$RUNS"
export OMP_NUM_THREADS=3 PYTHONUNBUFFERED=1
ml() { python3 -m meshlift.cli.main "$@"; }
common="--set device=cuda --set time_budget_s=$BUDGET --set batch=4 --set grid_res=64 --set iter_pass1=1500 --set iter_pass2=800 --set unwrap_max_faces=30000"

(ml reconstruct "$DATA/spot/spot.obj" --out $RUNS/spot --preset spot $common > $RUNS/spot.log 2>&1; echo "spot rc=$?" >> $RUNS/rc.txt) &
(ml reconstruct "$DATA/bob/bob_tri.obj" --out $RUNS/bob --preset bob $common > $RUNS/bob.log 2>&1; echo "bob rc=$?" >> $RUNS/rc.txt) &
(ml reconstruct "$DATA/nerf_synthetic_lego_half" --out $RUNS/lego --preset nerf $common --set train_res=400 > $RUNS/lego.log 2>&1; echo "lego rc=$?" >> $RUNS/rc.txt) &
(ml reconstruct "$DATA/nerd_ethiopian_head" --out $RUNS/ehead --preset nerd $common > $RUNS/ehead.log 2>&1; echo "ehead rc=$?" >> $RUNS/rc.txt) &

python3 -m pytest -m gpu -q -p no:cacheprovider tests > $RUNS/gpu_tests.log 2>&1
tail -3 $RUNS/gpu_tests.log
start=$SECONDS
ml demo --device cuda --out $RUNS/demo > $RUNS/demo.log 2>&1; echo "demo rc=$? wall=$((SECONDS - start)) s" >> $RUNS/rc.txt
wait
cat $RUNS/rc.txt
for r in spot bob lego ehead demo; do echo "== $r"; python3 -c "import json,sys; m=json.load(open('$RUNS/$r/metrics.json')); print({k: m.get(k) for k in ('psnr','ssim','chamfer_l1','fscore','threshold','iterations','timings')})" 2>&1 | tail -1; done
tar czf "$OUT/results.tgz" --exclude='checkpoint.pt' --exclude='*.obj' --exclude='texture_*.png' --exclude='preview_*' --exclude='mesh.glb' $RUNS 2>/dev/null
ls -la "$OUT"
