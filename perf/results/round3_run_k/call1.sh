#!/usr/bin/env bash
# Run K, call 1: rung 26 (the snaking FMA order on NT's 16 x 8 row and the 8- and 4-byte rows of
# NN, NT and TT) against the shipped rows, each built by both toolchains off the device. The
# shipped tree rides along in .lab_head; each tree runs on its own cache.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
ROOT=$PWD; export PYTHONPATH=/tmp/site:$ROOT
for c in h130 h135 c135 c130; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
# The candidate tree's 13.0 cache is finished here (16 CPUs; .kcache_c130 brings the 24 variants
# compiled off the device by 13.0.88 before that build was stopped) by the device image's toolchain; the
# shipped tree's 13.0 cache takes the 37 variants whose compiled input is the same from it, and
# brings the 8 that differ from the checkout (.kcache_h130, built off the device by 13.0.88).
SGBLAS_CACHE_DIR=/tmp/kc_c130 timeout 300 python3 -m sgblas.warmup 2>&1 | tail -3
python3 perf/results/round3_run_k/rekey.py $ROOT /tmp/kc_c130 $ROOT/.lab_head /tmp/kc_h130 python3
ls /tmp/kc_h130 | wc -l
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
for tc in 130 135; do
  for tree in h c; do
    if [ $tree = h ]; then dir=$ROOT/.lab_head; else dir=$ROOT; fi
    export SGBLAS_CACHE_DIR=/tmp/kc_$tree$tc PYTHONPATH=/tmp/site:$dir
    mkdir -p $RESULTS/$tree$tc
    echo "=== toolchain $tc, tree $tree: simt_lab --pairs NN,NT,TT"
    (cd $dir && timeout 90 python3 -m perf.simt_lab --out $RESULTS/$tree$tc --pairs NN,NT,TT --budget-s 70 2>&1 \
      | grep -E "^\| (sq|odd)|budget|rror" | tee $RESULTS/$tree$tc/simt.log)
    echo "=== toolchain $tc, tree $tree: bench, NT long K"
    (cd $dir && timeout 45 python3 -m perf.bench --pairs NT --shape 128x8192x8192 --shape 8192x128x8192 \
      --shape 1000x1000x100000 --shape 512x512x65536 --max-case-s 4 --out $RESULTS/$tree$tc 2>&1 \
      | grep -E "^\[|rror|wrote" | tee $RESULTS/$tree$tc/bench_nt_long.log)
  done
done
