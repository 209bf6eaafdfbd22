#!/usr/bin/env bash
# Run N, call 1: rung 30 (TN's 4- and 8-byte rows and its 128x128 slice kernel in the swapped
# snaking order with tile origins in views; NN's 8 x 8 16-byte row in the snaking order with B's
# origin in a view) against the committed tree of run M (`p`, carried as .lab_head with this
# tree's perf/), both toolchains, interleaved; and the read-pattern probe of the skinny loops.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call1"; R=$RESULTS/call1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in p130 p135 q130 q135; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
timeout 60 python3 perf/results/round3_run_n/read_patterns.py 2>&1 | tee $R/read_patterns.log
for tc in 135 130; do
  for tree in p q; do
    dir=$PWD; [ $tree = p ] && dir=$PWD/.lab_head
    O=$R/$tree$tc; mkdir -p $O
    export SGBLAS_CACHE_DIR=/tmp/kc_$tree$tc
    echo "=== $tree $tc: simt_lab TN 4- and 8-byte rows"
    (cd $dir && SGBLAS_NO_WARMUP=1 PYTHONPATH=/tmp/site:$dir timeout 60 python3 -m perf.simt_lab \
      --variants sgemm_simt_tn_128x128x16_2s_a4,sgemm_simt_tn_128x128x16_2s_a8 --pairs TN --budget-s 35 --out $O/tn) \
      2>&1 | grep -E "^\| (odd|sq)|rror" | tee $O/simt_tn.log
    echo "=== $tree $tc: simt_lab NN 8 x 8 16-byte row"
    (cd $dir && SGBLAS_NO_WARMUP=1 PYTHONPATH=/tmp/site:$dir timeout 40 python3 -m perf.simt_lab \
      --variants sgemm_simt_nn_128x128x16_2s_a16 --shapes 5000x3000x1000,4096x4096x64,2048x2048x2048,4096x4096x4096 \
      --pairs NN --budget-s 20 --out $O/nn) 2>&1 | grep -E "^\|.*NN|rror" | tee $O/simt_nn.log
    echo "=== $tree $tc: split_lab long TN"
    (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 60 python3 -m perf.split_lab --set long --pairs TN --out $O) \
      2>&1 | tee $O/split_long.log | grep -vE "^\s*$" | tail -12
  done
done
cd $RESULTS && tar czf call1.tgz call1 && rm -rf call1
