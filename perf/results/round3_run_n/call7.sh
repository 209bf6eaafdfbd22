#!/usr/bin/env bash
# Run N, call 7: rung 33 (the skinny loops multiply every row block, no branch per block; tree
# `w`) against the committed tree (`u`, carried as .lab_u): the skinny shapes' bandwidth
# against a copy, 13.5 both trees, then 13.0 `w`; the GPU tests of the skinny kernels and
# compute-sanitizer's four tools over them (13.5, `w`).
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call7"; R=$RESULTS/call7
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in u135 w135 w130; do
  [ -d .kcache_$c ] || continue
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
for run in u135 w135 w130; do
  [ -d /tmp/kc_$run ] || continue
  tree=${run:0:1}; dir=$PWD; [ $tree = u ] && dir=$PWD/.lab_u
  mkdir -p $R/$run
  echo "=== $run: skinny bandwidth"
  (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_$run PYTHONPATH=/tmp/site:$dir timeout 90 python3 -m perf.accuracy --ks 1024 \
    --dists normal --bandwidth --pairs NN,NT,TN,TT --out $R/$run) 2>&1 | grep -E "skinny|copy|rror" | tee $R/$run/bandwidth.log
done
export SGBLAS_CACHE_DIR=/tmp/kc_w135
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/kernels/test_skinny.py tests/test_splitk_gpu.py \
  tests/test_precision_gpu.py > $R/pytest_skinny_135.log 2>&1
echo "pytest rc=$?"; tail -2 $R/pytest_skinny_135.log
for v in skinny_axpy skinny_dot; do
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
cd $RESULTS && tar czf call7.tgz call7 && rm -rf call7
