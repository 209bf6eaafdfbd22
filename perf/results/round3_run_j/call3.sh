#!/usr/bin/env bash
# Run J, call 3: the shipped registry as a fresh README install links it today (nvJitLink and
# NVVM 13.5.37, compiled off the device and carried as .kcache135): the whole `gpu` suite,
# racecheck and synccheck over the SIMT variants at tail shapes, and the skinny shapes against a
# device-to-device copy.
set -u
RESULTS=${RESULTS:-out}; mkdir -p "$RESULTS"   # where the call's results go
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
mkdir -p /tmp/kc135 && cp .kcache135/*.cubin /tmp/kc135/ && chmod 700 /tmp/kc135 && chmod 600 /tmp/kc135/* && export SGBLAS_CACHE_DIR=/tmp/kc135
timeout 330 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $RESULTS/pytest_gpu_135.log 2>&1; echo "pytest rc=$?"; tail -6 $RESULTS/pytest_gpu_135.log
for tool in racecheck synccheck; do
  extra=""; [ $tool = racecheck ] && extra="--racecheck-report all"
  timeout 120 compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
    python3 tests/sanitizer_cases.py --variant simt --kinds tail --betas 0.75 --no-scale > $RESULTS/sanitizer_${tool}_135.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases|variants" $RESULTS/sanitizer_${tool}_135.log | tail -3
done
timeout 100 python3 -m perf.accuracy --ks 1024 --dists normal --bandwidth --pairs NN,NT,TN,TT --out $RESULTS 2>&1 | tail -16
