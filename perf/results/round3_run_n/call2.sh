#!/usr/bin/env bash
# Run N, call 2: rung 31 (TN's 4-byte row copies both k-major operands by 4-byte cp.async
# straight to their transposed slots, tree `r`) against rung 30's row (tree `s`, carried as
# .lab_q), both toolchains; NN's and NT's 8 x 8 and 16 x 8 16-byte rows side by side (tree `r`);
# TN's long-K slice kernels again under 13.0, run M's tree (`p`, .lab_head) and `r` alternating.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call2"; R=$RESULTS/call2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in p130 r130 r135 s130 s135; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
treedir() { case $1 in p) echo $PWD/.lab_head;; s) echo $PWD/.lab_q;; *) echo $PWD;; esac; }
for tc in 135 130; do
  for tree in s r; do
    dir=$(treedir $tree); O=$R/$tree$tc; mkdir -p $O
    echo "=== $tree $tc: simt_lab TN 4-byte row"
    (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_$tree$tc SGBLAS_NO_WARMUP=1 PYTHONPATH=/tmp/site:$dir timeout 60 python3 -m perf.simt_lab \
      --variants sgemm_simt_tn_128x128x16_2s_a4 --pairs TN --budget-s 30 --out $O/tn) \
      2>&1 | grep -E "^\| (odd|sq)|rror" | tee $O/simt_tn.log
  done
  O=$R/r$tc
  for pair in NN NT; do
    lp=$(echo $pair | tr A-Z a-z)
    echo "=== r $tc: simt_lab $pair 8 x 8 and 16 x 8 16-byte rows"
    SGBLAS_CACHE_DIR=/tmp/kc_r$tc SGBLAS_NO_WARMUP=1 timeout 60 python3 -m perf.simt_lab --big \
      --variants sgemm_simt_${lp}_128x128x16_2s_a16,sgemm_simt_${lp}_128x128x16t16x8_2s_a16 --pairs $pair --budget-s 30 \
      --out $O/$lp 2>&1 | grep -E "^\| (odd|sq)|rror" | tee $O/simt_${lp}_tiles.log
  done
done
for round in 1 2; do
  for tree in p r; do
    dir=$(treedir $tree); O=$R/${tree}130_long$round; mkdir -p $O
    echo "=== $tree 130 round $round: split_lab long TN"
    (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_${tree}130 PYTHONPATH=/tmp/site:$dir timeout 60 python3 -m perf.split_lab --set long \
      --pairs TN --out $O) 2>&1 | tee $O/split_long.log | grep -E "^\| [0-9]" | cut -d'|' -f2,5
  done
done
cd $RESULTS && tar czf call2.tgz call2 && rm -rf call2
