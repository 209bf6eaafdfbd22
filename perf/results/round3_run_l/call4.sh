#!/usr/bin/env bash
# Run L, call 4: TN's 4-byte row in the snaking order with its loops swapped (j outer, i
# snaking), a trial tree carried as .lab_trial, against the shipped row, kernel level, by
# toolchain. Nothing ships from it: under 13.0 that order keeps an 8-byte stack frame (two
# registers spilled in the K loop). It tells whether the static count's fall (main K loop
# 1368 -> 276 under 13.5) is worth a spill-free way to the same allocation.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call4"; R=$RESULTS/call4
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1 SGBLAS_NO_WARMUP=1
ROOT=$PWD
for c in m130 m135 t130 t135; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
for tc in 130 135; do
  for tree in m t; do
    if [ $tree = t ]; then dir=$ROOT/.lab_trial; else dir=$ROOT; fi
    mkdir -p $R/$tree$tc; echo "=== toolchain $tc, tree $tree"
    (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_$tree$tc PYTHONPATH=/tmp/site:$dir timeout 60 python3 -m perf.simt_lab \
      --out $R/$tree$tc --variants sgemm_simt_tn_128x128x16_2s_a4 --pairs TN --budget-s 45 2>&1 \
      | grep -E "^\| |budget|rror" | tee $R/$tree$tc/simt.log)
  done
done
cd $RESULTS && tar czf call4.tgz call4 && rm -rf call4
