#!/usr/bin/env bash
# Run L, call 2: rung 27 under the install's toolchain (13.5.37, cache built off the device with
# the device's numba, numba-cuda and llvmlite): perf.split_lab's long and api sets and
# perf.bench's TN long-K shapes; the api set again under 13.0 (call 1 ran it before the set
# timed the TN 128x64 slice kernel at its old splits); compute-sanitizer's four tools over TN's
# 128x128 slice kernel (13.5); then the `gpu` suite on the 13.5 build.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call2"; R=$RESULTS/call2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for tc in 130 135; do
  mkdir -p /tmp/kc_l$tc && cp .kcache_l$tc/*.cubin /tmp/kc_l$tc/ && chmod 700 /tmp/kc_l$tc && chmod 600 /tmp/kc_l$tc/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
export SGBLAS_CACHE_DIR=/tmp/kc_l135
for set in long api; do
  echo "=== 13.5: split_lab --set $set"; mkdir -p $R/tc135
  timeout 100 python3 -m perf.split_lab --set $set --out $R/tc135 2>&1 | grep -E "^\| [0-9]|rror" | tee $R/tc135/split_$set.log
done
timeout 40 python3 -m perf.bench --pairs TN --shape 128x8192x8192 --shape 8192x128x8192 --shape 1000x1000x100000 \
  --shape 512x512x65536 --shape 1024x1024x1024 --shape 1536x1536x1536 --max-case-s 4 --out $R/tc135 2>&1 \
  | grep -E "^\[|rror|wrote" | tee $R/tc135/bench_tn.log
echo "=== 13.0: split_lab --set api"; mkdir -p $R/tc130
SGBLAS_CACHE_DIR=/tmp/kc_l130 timeout 60 python3 -m perf.split_lab --set api --out $R/tc130 2>&1 | grep -E "^\| [0-9]|rror" \
  | tee $R/tc130/split_api.log
for tool in memcheck initcheck racecheck synccheck; do
  extra=""; betas=0,0.75; uninit=""
  [ $tool = racecheck ] && extra="--racecheck-report all" && betas=0.75
  [ $tool = synccheck ] && betas=0.75
  [ $tool = initcheck ] && uninit="--uninitialised-c"
  timeout 60 compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
    python3 tests/sanitizer_cases.py --variant splitk_tn_128x128x16 --betas $betas --no-scale $uninit \
    > $R/sanitizer_${tool}_splitk_tn_128x128x16_135.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases" $R/sanitizer_${tool}_splitk_tn_128x128x16_135.log | tail -2
done
timeout 300 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $R/pytest_gpu_135.log 2>&1
echo "pytest 13.5 rc=$?"; tail -3 $R/pytest_gpu_135.log
cd $RESULTS && tar czf call2.tgz call2 && rm -rf call2
