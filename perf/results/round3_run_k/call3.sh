#!/usr/bin/env bash
# Run K, call 3: the shipped tree after rung 26. With the 13.5 build (.kcache_f135): initcheck and
# synccheck over every SIMT variant, and all four tools over NT's 16 x 8 slice kernel, at tail
# shapes. With the 13.0 build (.kcache_f130, the device image's toolchain): the whole `gpu`
# suite. With each: perf.bench's rectangular set in every pair.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call3"; R=$RESULTS/call3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for tc in 135 130; do
  mkdir -p /tmp/kc_f$tc && cp .kcache_f$tc/*.cubin /tmp/kc_f$tc/ && chmod 700 /tmp/kc_f$tc && chmod 600 /tmp/kc_f$tc/*
done
export SGBLAS_CACHE_DIR=/tmp/kc_f135
for variant in simt splitk_nt_128x128x16t16x8; do
  tools="initcheck synccheck"; [ $variant != simt ] && tools="memcheck initcheck racecheck synccheck"
  for tool in $tools; do
    extra=""; betas=0,0.75
    [ $tool = racecheck ] && extra="--racecheck-report all" && betas=0.75
    [ $tool = synccheck ] && betas=0.75
    uninit=""; [ $tool = initcheck ] && uninit="--uninitialised-c"
    timeout 100 compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
      python3 tests/sanitizer_cases.py --variant $variant --kinds tail --betas $betas --no-scale $uninit \
      > $R/sanitizer_${tool}_${variant}_135.log 2>&1
    echo "$variant $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases" $R/sanitizer_${tool}_${variant}_135.log | tail -2
  done
done
export SGBLAS_CACHE_DIR=/tmp/kc_f130
timeout 280 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $R/pytest_gpu_130.log 2>&1
echo "pytest 13.0 rc=$?"; tail -3 $R/pytest_gpu_130.log
for tc in 130 135; do
  mkdir -p $R/tc$tc
  SGBLAS_CACHE_DIR=/tmp/kc_f$tc timeout 75 python3 -m perf.bench --shapes rect --pairs NN,NT,TN,TT --budget-s 55 \
    --out $R/tc$tc 2>&1 | grep -E "^\[|rror|wrote" | tee $R/tc$tc/bench_rect.log
done
cd $RESULTS && tar czf call3.tgz call3 && rm -rf call3
