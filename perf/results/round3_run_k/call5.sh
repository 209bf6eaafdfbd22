#!/usr/bin/env bash
# Run K, call 5: NT's three 16-byte kernels on the rectangular set's 5000x3000x1000 (where the
# heuristic's 8 x 8 kernel is below 0.9 under 13.5) and two squares, by toolchain, on the
# shipped tree's builds. For the next heuristic rung; nothing shipped from it.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1 SGBLAS_NO_WARMUP=1
for tc in 130 135; do
  mkdir -p /tmp/kc_f$tc && cp .kcache_f$tc/*.cubin /tmp/kc_f$tc/ && chmod 700 /tmp/kc_f$tc && chmod 600 /tmp/kc_f$tc/*
done
for tc in 130 135; do
  mkdir -p $RESULTS/nt$tc; echo "=== toolchain $tc"
  SGBLAS_CACHE_DIR=/tmp/kc_f$tc timeout 60 python3 -m perf.simt_lab --out $RESULTS/nt$tc \
    --variants sgemm_simt_nt_128x128x16_2s_a16,sgemm_simt_nt_128x128x16t16x8_2s_a16,sgemm_simt_nt_128x64x16_2s_a16 \
    --shapes 5000x3000x1000,4096x4096x1024,2048x2048x2048 --pairs NT --budget-s 45 2>&1 | grep -E "^\| |budget|rror" \
    | tee $RESULTS/nt$tc/simt.log
done
cd $RESULTS && tar czf call5.tgz nt130 nt135 && rm -rf nt130 nt135
