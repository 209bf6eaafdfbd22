#!/usr/bin/env bash
# Run K, call 4: TN's kernels after rung 25 under both toolchains (run J's 13.0 figures at
# 2048-8192 and on the odd set were lost), on the shipped tree's two builds.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for tc in 130 135; do
  mkdir -p /tmp/kc_f$tc && cp .kcache_f$tc/*.cubin /tmp/kc_f$tc/ && chmod 700 /tmp/kc_f$tc && chmod 600 /tmp/kc_f$tc/*
done
for tc in 130 135; do
  mkdir -p $RESULTS/tn$tc; echo "=== toolchain $tc: simt_lab --pairs TN --big"
  SGBLAS_CACHE_DIR=/tmp/kc_f$tc timeout 60 python3 -m perf.simt_lab --out $RESULTS/tn$tc --pairs TN --big --budget-s 45 2>&1 \
    | grep -E "^\| (sq|odd)|budget|rror" | tee $RESULTS/tn$tc/simt.log
done
cd $RESULTS && tar czf call4.tgz tn130 tn135 && rm -rf tn130 tn135
