#!/usr/bin/env bash
# Run N, call 3: the tree of rungs 30 and 32 (`t`: rung 30's kernels, cache `q`, and the
# heuristic's 8 x 8 thread tile for every unsplit problem): the skinny read-pattern probe;
# compute-sanitizer's four tools over the four changed kernels (13.5); perf.bench through the
# API on issue 13's and 14's shapes under both toolchains.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call3"; R=$RESULTS/call3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in q130 q135; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
timeout 60 python3 perf/results/round3_run_n/read_patterns.py 2>&1 | tee $R/read_patterns.log
export SGBLAS_CACHE_DIR=/tmp/kc_q135
for v in simt_nn_128x128x16_2s_a16 simt_tn_128x128x16_2s_a8 simt_tn_128x128x16_2s_a4 splitk_tn_128x128x16_2s; do
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
for tc in 135 130; do
  mkdir -p $R/tc$tc
  echo "=== perf.bench $tc"
  SGBLAS_CACHE_DIR=/tmp/kc_q$tc timeout 200 python3 -m perf.bench --pairs NN,NT,TN,TT \
    --shape 128x8192x8192 --shape 8192x128x8192 --shape 1000x1000x100000 --shape 512x512x65536 \
    --shape 5000x3000x1000 --shape 4096x4096x64 --shape 1024x1024x1024 --shape 1536x1536x1536 \
    --shape 2048x2048x2048 --shape 4096x4096x4096 --max-case-s 2 --budget-s 150 --out $R/tc$tc \
    2>&1 | grep -E "^\[|rror|ratio" | tee $R/tc$tc/bench.log
done
cd $RESULTS && tar czf call3.tgz call3 && rm -rf call3
