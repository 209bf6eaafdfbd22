#!/usr/bin/env bash
# Run M, call 1: rung 28 (NT's 8 x 8 and TT's 128x128 slice kernels: the B view, and NT's in the
# snaking order) against the shipped ones, both toolchains, one session: perf.split_lab's long
# and api sets for NT and TT in the shipped tree (`m`, carried as .lab_head with this tree's
# perf/) and in this tree (`n`), interleaved; then compute-sanitizer's four tools over the two
# new kernels (13.5 build).
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call1"; R=$RESULTS/call1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in m130 m135 n130 n135; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
for set in long api; do
  for tc in 130 135; do
    for tree in m n; do
      dir=$PWD; [ $tree = m ] && dir=$PWD/.lab_head
      mkdir -p $R/$tree$tc
      echo "=== $tree $tc: split_lab --set $set --pairs NT,TT"
      (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_$tree$tc PYTHONPATH=/tmp/site:$dir timeout 110 \
        python3 -m perf.split_lab --set $set --pairs NT,TT --out $R/$tree$tc) 2>&1 | grep -E "^\| [0-9]|rror" \
        | tee $R/$tree$tc/split_$set.log
    done
  done
done
export SGBLAS_CACHE_DIR=/tmp/kc_n135
for v in splitk_nt_128x128x16_2s splitk_tt_128x128x16_2s; do
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
done
cd $RESULTS && tar czf call1.tgz call1 && rm -rf call1
