#!/usr/bin/env bash
# Run M, call 5: rung 29 (NT's 8 x 8 16-byte row in the snaking order with B's tile origin in a
# view of B) against the committed tree of rung 28 (`o`, carried as .lab_head with this tree's
# perf/), both toolchains, interleaved: perf.bench on the NT shapes that row runs; then
# compute-sanitizer's four tools over the row and the `gpu` suite (13.5 build).
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call5"; R=$RESULTS/call5
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in o130 o135 p130 p135; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
for tc in 130 135; do
  for tree in o p; do
    dir=$PWD; [ $tree = o ] && dir=$PWD/.lab_head
    mkdir -p $R/$tree$tc
    echo "=== $tree $tc: perf.bench NT"
    (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_$tree$tc PYTHONPATH=/tmp/site:$dir timeout 40 python3 -m perf.bench --pairs NT \
      --shape 5000x3000x1000 --shape 4096x4096x1024 --shape 6144x6144x1536 \
      --max-case-s 2 --budget-s 20 --out $R/$tree$tc) 2>&1 | grep -E "^\[|rror" | tee $R/$tree$tc/bench.log
  done
done
export SGBLAS_CACHE_DIR=/tmp/kc_p135
v=simt_nt_128x128x16_2s_a16
for tool in memcheck initcheck racecheck synccheck; do
  extra=""; betas=0,0.75; uninit=""
  [ $tool = racecheck ] && extra="--racecheck-report all" && betas=0.75
  [ $tool = synccheck ] && betas=0.75
  [ $tool = initcheck ] && uninit="--uninitialised-c"
  timeout 40 compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
    python3 tests/sanitizer_cases.py --variant $v --betas $betas --no-scale $uninit \
    > $R/sanitizer_${tool}_${v}_135.log 2>&1
  echo "$v $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases" $R/sanitizer_${tool}_${v}_135.log | tail -2
done
timeout 270 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $R/pytest_gpu_135.log 2>&1
echo "pytest 13.5 rc=$?"; tail -3 $R/pytest_gpu_135.log
cd $RESULTS && tar czf call5.tgz call5 && rm -rf call5
