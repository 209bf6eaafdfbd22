#!/usr/bin/env bash
# Run K, call 1b: call 1's shipped-tree 13.0 timings again, on the same warm machine a minute
# later (call 1's h130 files did not come back: the device returns 8 files a call). The caches
# that call 1 left in /tmp are reused when present, else rebuilt as call 1 does.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
if [ "$(ls /tmp/kc_h130 2>/dev/null | wc -l)" != 45 ]; then
  for c in h130 c130; do mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*; done
  SGBLAS_CACHE_DIR=/tmp/kc_c130 timeout 300 python3 -m sgblas.warmup 2>&1 | tail -2
  python3 perf/results/round3_run_k/rekey.py $PWD /tmp/kc_c130 $PWD/.lab_head /tmp/kc_h130 python3
fi
R=$RESULTS/h130; mkdir -p $R
cd .lab_head && export SGBLAS_CACHE_DIR=/tmp/kc_h130 PYTHONPATH=/tmp/site:$PWD
timeout 90 python3 -m perf.simt_lab --out $R --pairs NN,NT,TT --budget-s 70 2>&1 | grep -E "^\| (sq|odd)|budget|rror" | tee $R/simt.log
timeout 45 python3 -m perf.bench --pairs NT --shape 128x8192x8192 --shape 8192x128x8192 --shape 1000x1000x100000 \
  --shape 512x512x65536 --max-case-s 4 --out $R 2>&1 | grep -E "^\[|rror|wrote" | tee $R/bench_nt_long.log
cd $RESULTS && tar czf h130.tgz h130 && rm -rf h130
