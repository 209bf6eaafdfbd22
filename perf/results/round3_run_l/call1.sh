#!/usr/bin/env bash
# Run L, call 1: rung 27 (TN's 128x128 slice kernel) under the device image's toolchain
# (13.0.88). The 13.0 cache is built here (16 CPUs) and comes back packed, for later calls;
# then perf.split_lab's long, short and api sets in every pair, and perf.bench's long-K shapes.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call1"; R=$RESULTS/call1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv,noheader
pip list 2>/dev/null | grep -iE "nvjitlink|nvvm|numba|llvmlite|cupy" | tr -s ' ' | tr '\n' ';'; echo
mkdir -p /tmp/kc_l130 && chmod 700 /tmp/kc_l130
export SGBLAS_CACHE_DIR=/tmp/kc_l130
timeout 240 python3 -m sgblas.warmup 2>&1 | tail -2
(cd /tmp && tar czf $RESULTS/kcache_l130.tgz kc_l130)
for set in long short api; do
  echo "=== split_lab --set $set"
  timeout 150 python3 -m perf.split_lab --set $set --out $R 2>&1 | grep -E "^\| [0-9]|rror" | tee $R/split_$set.log
done
timeout 60 python3 -m perf.bench --pairs TN --shape 128x8192x8192 --shape 8192x128x8192 --shape 1000x1000x100000 \
  --shape 512x512x65536 --shape 1024x1024x1024 --shape 1536x1536x1536 --max-case-s 4 --out $R 2>&1 \
  | grep -E "^\[|rror|wrote" | tee $R/bench_tn.log
cd $RESULTS && tar czf call1.tgz call1 && rm -rf call1
