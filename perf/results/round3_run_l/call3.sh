#!/usr/bin/env bash
# Run L, call 3: the final tree (rung 27). The `gpu` suite on the 13.0 build (the device image's
# toolchain; call 2 ran it on the 13.5 build), then perf.bench's rectangular set in every pair
# under each toolchain.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call3"; R=$RESULTS/call3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for tc in 130 135; do
  mkdir -p /tmp/kc_l$tc && cp .kcache_l$tc/*.cubin /tmp/kc_l$tc/ && chmod 700 /tmp/kc_l$tc && chmod 600 /tmp/kc_l$tc/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
SGBLAS_CACHE_DIR=/tmp/kc_l130 timeout 330 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $R/pytest_gpu_130.log 2>&1
echo "pytest 13.0 rc=$?"; tail -3 $R/pytest_gpu_130.log
for tc in 130 135; do
  mkdir -p $R/tc$tc
  SGBLAS_CACHE_DIR=/tmp/kc_l$tc timeout 75 python3 -m perf.bench --shapes rect --pairs NN,NT,TN,TT --budget-s 55 \
    --out $R/tc$tc 2>&1 | grep -E "^\[|rror|wrote" | tee $R/tc$tc/bench_rect.log
done
cd $RESULTS && tar czf call3.tgz call3 && rm -rf call3
