#!/usr/bin/env bash
# One device call of benchmarks/gsplat_compare.py: bring gsplat from the git-ignored source tarball
# (.whl/gsplat-1.5.3-src.tar.gz, see gsplat_compare.py's docstring) or a wheel (.whl/gsplat-*.whl), then run the
# comparison in its own process session and return after WAIT seconds with what has finished ($OUT gets the
# JSON and the logs). The run goes on while the machine stays warm: a call made within 30 s with COLLECT=1
# waits again and collects. Carry [".whl", ".devrun/data"].
#
#   WAIT=540 bash benchmarks/gsplat_compare_gpu.sh --data .devrun/data/nerf_synthetic_lego_half --out runs/cmp/lego.json
#   COLLECT=1 WAIT=540 bash benchmarks/gsplat_compare_gpu.sh --out runs/cmp/lego.json
#
# Every argument goes to gsplat_compare.py (e.g. --gsplat-opacity-reset auto|on|off: gsplat 1.5.3's
# DefaultStrategy never resets opacities; auto, the default, makes the loop do it with gsplat's reset_opa).
# Gaussian caps: meshlift's densify_max_gaussians (6M in the preset), none on the gsplat side (1.5.3 has none);
# neither binds on lego / statue / fox (~0.1-0.3M). Carry [".devrun", ".whl"] works too (28 MB).
#
# GSPLAT_INSTALL=jit (default): gsplat's source on PYTHONPATH; its CUDA extension is JIT-built at the first
# rasterization (ANCHORS.md: 58-68 s on 16 cores), timed by the script's gsplat check. GSPLAT_INSTALL=pip:
# `pip install --no-build-isolation --no-deps --no-index` of the source first (log: <out dir>/gsplat_build.log).
set -u
T0=$SECONDS
args=("$@")
out=runs/cmp/compare.json
for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[$i]}" = "--out" ] && out=${args[$((i + 1))]}; done
dir=$(dirname "$out"); mkdir -p "$dir"
name=$(basename "$out" .json)
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-14} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
if [ -z "${COLLECT:-}" ]; then
  if ! python3 -c "import gsplat" 2>/dev/null; then
    if ls .whl/gsplat-*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-cache-dir .whl/gsplat-*.whl
    elif [ -f .whl/gsplat-1.5.3-src.tar.gz ]; then
      rm -rf /tmp/gsplat-src && mkdir -p /tmp/gsplat-src && tar xzf .whl/gsplat-1.5.3-src.tar.gz -C /tmp/gsplat-src
      if [ "${GSPLAT_INSTALL:-jit}" = pip ]; then
        t=$SECONDS
        python3 -m pip install --no-build-isolation --no-deps --no-index --no-cache-dir /tmp/gsplat-src/gsplat-1.5.3 \
          > "$dir/gsplat_build.log" 2>&1
        echo "gsplat pip build rc=$? in $((SECONDS - t)) s"; tail -3 "$dir/gsplat_build.log"
      fi
    else
      echo "no gsplat in .whl/: the meshlift side only"
    fi
  fi
  python3 -c "import gsplat" 2>/dev/null || export PYTHONPATH=$PYTHONPATH:/tmp/gsplat-src/gsplat-1.5.3
  nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader
  setsid python3 benchmarks/gsplat_compare.py --device cuda "$@" > "$dir/$name.log" 2>&1 &
  echo $! > "$dir/$name.pid"
fi
pid=$(cat "$dir/$name.pid" 2>/dev/null || echo 0)
while [ "$pid" != 0 ] && kill -0 "$pid" 2>/dev/null && [ $((SECONDS - T0)) -lt ${WAIT:-540} ]; do sleep 5; done
if [ "$pid" != 0 ] && kill -0 "$pid" 2>/dev/null; then
  echo "still running after $((SECONDS - T0)) s: call again within 30 s with COLLECT=1"
else
  echo "finished"
fi
if [ -n "${OUT:-}" ]; then
  cp "$dir/$name.log" "$OUT/" 2>/dev/null; cp "$out" "$OUT/" 2>/dev/null
  [ -f "$dir/gsplat_build.log" ] && cp "$dir/gsplat_build.log" "$OUT/"
fi
tail -40 "$dir/$name.log"
