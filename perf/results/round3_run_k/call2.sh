#!/usr/bin/env bash
# Run K, call 2: the tree as shipped after rung 26, on its cache built off the device by
# nvJitLink and NVVM 13.5.37 (.kcache_f135, what a fresh README install links): the whole `gpu`
# suite; memcheck and racecheck over every SIMT variant at tail shapes, each buffer ending at
# its matrix's last element (call 3 runs initcheck, synccheck and NT's 16 x 8 slice kernel).
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for tc in 135; do
  mkdir -p /tmp/kc_f$tc && cp .kcache_f$tc/*.cubin /tmp/kc_f$tc/ && chmod 700 /tmp/kc_f$tc && chmod 600 /tmp/kc_f$tc/*
done
export SGBLAS_CACHE_DIR=/tmp/kc_f135
timeout 300 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $RESULTS/pytest_gpu_135.log 2>&1
echo "pytest 13.5 rc=$?"; tail -4 $RESULTS/pytest_gpu_135.log
for variant in simt; do
  for tool in memcheck racecheck; do
    extra=""; betas=0,0.75
    [ $tool = racecheck ] && extra="--racecheck-report all" && betas=0.75
    [ $tool = synccheck ] && betas=0.75
    uninit=""; [ $tool = initcheck ] && uninit="--uninitialised-c"
    timeout 125 compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
      python3 tests/sanitizer_cases.py --variant $variant --kinds tail --betas $betas --no-scale $uninit \
      > $RESULTS/sanitizer_${tool}_${variant}_135.log 2>&1
    echo "$variant $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases" $RESULTS/sanitizer_${tool}_${variant}_135.log | tail -2
  done
done
cd $RESULTS && tar czf call2.tgz *.log && rm -f *.log
