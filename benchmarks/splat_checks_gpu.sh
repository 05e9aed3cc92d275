#!/usr/bin/env bash
# One device call (alone on the machine) for issue 29's splat kernels: the splat tests on CUDA, then the binning A/B
# on lego's own training renders. Every output goes to $OUT (nothing only through a pipe: session 35 lost a call's
# output that way). Carry [".devrun/data/nerf_synthetic_lego_half", ".whl"] (.whl: trimesh, xatlas,
# fast-simplification, pypng and pytest's wheels for Python 3.12; benchmarks/README.md says how to make them).
#
#   WAIT=420 bash benchmarks/splat_checks_gpu.sh
#
# 1. pytest -rf of the splat test files on CUDA -> $OUT/cuda_tests.log (TESTS=0 skips; ~150 s on an H100);
# 2. gaussians_loop_profile.py on lego to STEPS (default 12000) with --kernel-ab of the bounding-box and ellipse
#    binnings (AB, default "4:0/8:2@box 4:0/8:2@ellipse") at AB_STEPS (default "6000 12000") -> $OUT/lp_ell.json/.md,
#    its log $OUT/lp_ell.log; stopped WAIT seconds after the call began (the profile keeps the windows it closed).
set -u
T0=$SECONDS
WAIT=${WAIT:-420}
: "${OUT:?OUT must be set (the device tool output folder)}"
DATA=${DATA:-.devrun/data/nerf_synthetic_lego_half}
STEPS=${STEPS:-12000}
AB=${AB:-"4:0/8:2@box 4:0/8:2@ellipse"}
AB_STEPS=${AB_STEPS:-"6000 12000"}
if [ -d .whl ] && [ ! -d /tmp/site/trimesh ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1
fi
export PYTHONPATH=$PWD/src:/tmp/site:${PYTHONPATH:-} PYTHONUNBUFFERED=1
if [ "${TESTS:-1}" != 0 ]; then
  timeout $((WAIT / 2)) python3 -m pytest -q -rf -p no:cacheprovider tests/test_render_splat_triton.py \
    tests/test_splat_composite_bwd_bands.py tests/test_splat_ellipse_tiles.py > "$OUT/cuda_tests.log" 2>&1
  tail -4 "$OUT/cuda_tests.log"
fi
left=$((WAIT - 15 - (SECONDS - T0)))
[ $left -gt 30 ] || { echo "no time left for the A/B"; exit 0; }
# shellcheck disable=SC2086
timeout $left python3 benchmarks/gaussians_loop_profile.py --device cuda --cases gaussians:$STEPS --window 2000 \
  --gaussians-data "$DATA" --no-syncs --kernel-ab $AB --ab-steps $AB_STEPS --total-time $((left - 10)) \
  --out "$OUT/lp_ell.json" > "$OUT/lp_ell.log" 2>&1
grep -A3 "kernel A/B" "$OUT/lp_ell.log" | head -12
echo "splat checks: $((SECONDS - T0)) s"
