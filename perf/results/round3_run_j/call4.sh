#!/usr/bin/env bash
# Run J, call 4: memcheck and initcheck over the SIMT variants at tail shapes on the 13.5 build;
# 1024^3 and 1536^3 through the API (split-K) with each build.
set -u
RESULTS=${RESULTS:-out}; mkdir -p "$RESULTS"   # where the call's results go
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for tc in 135 130; do
  mkdir -p /tmp/kc$tc && cp .kcache$tc/*.cubin /tmp/kc$tc/ && chmod 700 /tmp/kc$tc && chmod 600 /tmp/kc$tc/*
done
export SGBLAS_CACHE_DIR=/tmp/kc135
for tool in memcheck initcheck; do
  extra=""; [ $tool = initcheck ] && extra="--uninitialised-c"
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 99 --report-api-errors no \
    python3 tests/sanitizer_cases.py --variant simt --kinds tail --betas 0,0.75 --no-scale $extra > $RESULTS/sanitizer_${tool}_135.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|cases" $RESULTS/sanitizer_${tool}_135.log | tail -2
done
for tc in 135 130; do
  mkdir -p $RESULTS/tc$tc
  SGBLAS_CACHE_DIR=/tmp/kc$tc timeout 120 python3 -m perf.bench --shape 1024x1024x1024 --shape 1536x1536x1536 \
    --pairs NN,NT,TN,TT --out $RESULTS/tc$tc 2>&1 | grep -E "^\| [0-9]"
done
