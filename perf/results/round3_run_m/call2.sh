#!/usr/bin/env bash
# Run M, call 2: NN's 8 x 8 slice kernel with the A view and the snaking order (rung 28, third
# row) against the one before (`n`: call 1's tree, carried as .lab_head with this tree's perf/),
# both toolchains: perf.split_lab's long set for NN and NT (NT only in this tree: its kernels did
# not change since call 1; the set now times both thread tiles on 2048x2048x16384 too) and the
# api set for NN; then compute-sanitizer's four tools over the new kernel (13.5 build).
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call2"; R=$RESULTS/call2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in n130 n135 o130 o135; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
for set in long api; do
  for tc in 130 135; do
    for tree in n o; do
      dir=$PWD; pairs=NN,NT; [ $tree = n ] && dir=$PWD/.lab_head && pairs=NN
      [ $set = api ] && pairs=NN
      mkdir -p $R/$tree$tc
      echo "=== $tree $tc: split_lab --set $set --pairs $pairs"
      (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_$tree$tc PYTHONPATH=/tmp/site:$dir timeout 150 \
        python3 -m perf.split_lab --set $set --pairs $pairs --out $R/$tree$tc) 2>&1 | grep -E "^\| [0-9]|rror" \
        | tee $R/$tree$tc/split_$set.log
    done
  done
done
export SGBLAS_CACHE_DIR=/tmp/kc_o135
v=splitk_nn_128x128x16_2s
for tool in memcheck initcheck racecheck synccheck; do
  extra=""; betas=0,0.75; uninit=""
  [ $tool = racecheck ] && extra="--racecheck-report all" && betas=0.75
  [ $tool = synccheck ] && betas=0.75
  [ $tool = initcheck ] && uninit="--uninitialised-c"
  timeout 60 compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
    python3 tests/sanitizer_cases.py --variant $v --betas $betas --no-scale $uninit \
    > $R/sanitizer_${tool}_${v}_135.log 2>&1
  echo "$v $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases" $R/sanitizer_${tool}_${v}_135.log | tail -2
done
cd $RESULTS && tar czf call2.tgz call2 && rm -rf call2
