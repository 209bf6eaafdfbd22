#!/usr/bin/env bash
# Run J, call 6: rung 25 (the FMA block's order) built by both toolchains off the device: the
# kernels and the long-K shapes against cuBLAS with each; with the 13.5 build, the whole `gpu`
# suite and racecheck, synccheck and memcheck over the SIMT variants at tail shapes.
set -u
RESULTS=${RESULTS:-out}; mkdir -p "$RESULTS"   # where the call's results go
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for tc in 135 130; do
  mkdir -p /tmp/kc$tc && cp .kcache$tc/*.cubin /tmp/kc$tc/ && chmod 700 /tmp/kc$tc && chmod 600 /tmp/kc$tc/*
done
for tc in 130 135; do
  export SGBLAS_CACHE_DIR=/tmp/kc$tc
  mkdir -p $RESULTS/tc$tc
  echo "=== rung 25, toolchain $tc: simt_lab --big"
  timeout 120 python3 -m perf.simt_lab --out $RESULTS/tc$tc --big --budget-s 100 2>&1 | grep -E "^\| (sq|odd)|budget|rror" | tee $RESULTS/tc$tc/simt.log
  echo "=== rung 25, toolchain $tc: split_lab --set long"
  timeout 90 python3 -m perf.split_lab --set long --out $RESULTS/tc$tc 2>&1 | grep -E "^\| [0-9]|rror" | tee $RESULTS/tc$tc/split_long.log
done
export SGBLAS_CACHE_DIR=/tmp/kc135
timeout 320 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $RESULTS/pytest_gpu_rung25_135.log 2>&1; echo "pytest rc=$?"; tail -3 $RESULTS/pytest_gpu_rung25_135.log
for tool in racecheck synccheck memcheck; do
  extra=""; betas=0.75; [ $tool = racecheck ] && extra="--racecheck-report all"; [ $tool = memcheck ] && betas=0,0.75
  timeout 60 compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
    python3 tests/sanitizer_cases.py --variant simt --kinds tail --betas $betas --no-scale > $RESULTS/sanitizer_${tool}_rung25_135.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases" $RESULTS/sanitizer_${tool}_rung25_135.log | tail -2
done
cd $RESULTS && tar czf call6.tgz tc130 tc135 && rm -rf tc130 tc135
