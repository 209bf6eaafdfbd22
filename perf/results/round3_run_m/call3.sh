#!/usr/bin/env bash
# Run M, call 3: the shipped tree of this run (rung 28's three slice kernels and the heuristic's
# 8 x 8 thread tile for splits of few tiles) through the API: perf.bench on the long-K, short-K
# and rectangular shapes of issues 13 and 14, all four pairs; then the `gpu` suite; on the build
# of one toolchain, TC=135 (call 3) or TC=130 (call 4, the same script).
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; C=${CALL:-call3}; mkdir -p "$RESULTS/$C"; R=$RESULTS/$C
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in o130 o135; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
TC=${TC:-135}
for tc in $TC; do
  mkdir -p $R/tc$tc
  echo "=== $tc: perf.bench"
  SGBLAS_CACHE_DIR=/tmp/kc_o$tc timeout 150 python3 -m perf.bench --pairs NN,NT,TN,TT \
    --shape 128x8192x8192 --shape 8192x128x8192 --shape 1000x1000x100000 --shape 512x512x65536 \
    --shape 5000x3000x1000 --shape 4096x4096x64 --shape 1024x1024x1024 --shape 1536x1536x1536 \
    --max-case-s 3 --budget-s 120 --out $R/tc$tc 2>&1 | grep -E "^\[|rror|wrote" | tee $R/tc$tc/bench.log
done
SGBLAS_CACHE_DIR=/tmp/kc_o$TC timeout 330 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests \
  > $R/pytest_gpu_$TC.log 2>&1
echo "pytest $TC rc=$?"; tail -3 $R/pytest_gpu_$TC.log
cd $RESULTS && tar czf $C.tgz $C && rm -rf $C
