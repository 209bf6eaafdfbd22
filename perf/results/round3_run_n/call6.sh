#!/usr/bin/env bash
# Run N, call 6: the skinny ring probe (ring_probe.py); TN's 128x128 slice kernel with B's k
# offset in a view as well (tree `v`, carried as .lab_v) against the committed one (`u`), on the
# long-K shapes: 13.5 one round, 13.0 two, alternating.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call6"; R=$RESULTS/call6
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in u130 u135 v130 v135; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
timeout 90 python3 perf/results/round3_run_n/ring_probe.py 2>&1 | tee $R/ring_probe.log
for run in 135_1 130_1 130_2; do
  tc=${run%_*}
  for tree in u v; do
    dir=$PWD; [ $tree = v ] && dir=$PWD/.lab_v
    O=$R/$tree$run; mkdir -p $O
    echo "=== $tree $run: split_lab long TN"
    (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_$tree$tc PYTHONPATH=/tmp/site:$dir timeout 60 python3 -m perf.split_lab --set long \
      --pairs TN --out $O) 2>&1 | tee $O/split_long.log | grep -E "^\| [0-9]" | cut -d'|' -f2,5
  done
done
cd $RESULTS && tar czf call6.tgz call6 && rm -rf call6
