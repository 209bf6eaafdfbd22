#!/usr/bin/env bash
# Run N, call 4 (TC=135; call 5 is TC=130 GPU_ONLY=1): the final tree (`u`: the kernels of
# rung 30 and the heuristic of rung 32) under one toolchain: the `gpu` suite, then
# perf.simt_lab --big (every pair and alignment class, the variant the heuristic picks).
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; TC=${TC:-135}; CALL=${CALL:-call4}
mkdir -p "$RESULTS/$CALL"; R=$RESULTS/$CALL
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
mkdir -p /tmp/kc_u$TC && cp .kcache_u$TC/*.cubin /tmp/kc_u$TC/ && chmod 700 /tmp/kc_u$TC && chmod 600 /tmp/kc_u$TC/*
export SGBLAS_CACHE_DIR=/tmp/kc_u$TC
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
timeout 300 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $R/pytest_gpu_$TC.log 2>&1
echo "pytest $TC rc=$?"; tail -3 $R/pytest_gpu_$TC.log
if [ -z "${GPU_ONLY:-}" ]; then
  for tc in 135 130; do
    [ -d .kcache_u$tc ] || continue
    mkdir -p /tmp/kc_u$tc && cp .kcache_u$tc/*.cubin /tmp/kc_u$tc/ && chmod 700 /tmp/kc_u$tc && chmod 600 /tmp/kc_u$tc/*
    SGBLAS_CACHE_DIR=/tmp/kc_u$tc timeout 130 python3 -m perf.simt_lab --big --budget-s 100 --out $R/simt$tc 2>&1 \
      | grep -E "^\| (odd|sq)|rror" | tee $R/simt$tc.log
  done
fi
cd $RESULTS && tar czf $CALL.tgz $CALL && rm -rf $CALL
