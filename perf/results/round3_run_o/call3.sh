#!/usr/bin/env bash
# Run O, call 3: every skinny kernel of the checkout (`z2`: rung 34's axpy epilogue, rung 35's
# dot loop changes) against run N's (`u`), in one process on the same buffers (skinny_ab.py,
# twice); the bandwidth benchmark through the API (z2, u, z2); TN's two 4-byte rows over leading
# dimensions under 13.0; TN through the dispatcher at kernel level (simt_lab, 13.5); the four
# sanitizer tools over the dot loops.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call3"; R=$RESULTS/call3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in u135 z2_135 sw130; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
P=perf/results/round3_run_o
for i in 1 2; do
  echo "=== skinny A/B, process $i"
  SGBLAS_CACHE_DIR=/tmp/kc_z2_135 timeout 100 python3 $P/skinny_ab.py /tmp/kc_u135 2>&1 | tee $R/skinny_ab_$i.log
done
for run in z2_135 u135 z2_135b; do
  c=${run%b}; dir=$PWD; [ $c = u135 ] && dir=$PWD/.lab_u
  mkdir -p $R/$run
  echo "=== $run: skinny bandwidth"
  (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_$c PYTHONPATH=/tmp/site:$dir timeout 90 python3 -m perf.accuracy --ks 1024 \
    --dists normal --bandwidth --pairs NN,NT,TN,TT --out $R/$run) 2>&1 | grep -E "skinny|copy|rror" | tee $R/$run/bandwidth.log
done
echo "=== TN 4-byte rows over leading dimensions, 13.0"
SGBLAS_CACHE_DIR=/tmp/kc_sw130 SGBLAS_NO_WARMUP=1 timeout 130 python3 $P/ld_sweep.py \
  --variants sgemm_simt_tn_128x128x16_2s_a4,sgemm_simt_tn_128x128x16kq8_2s_a4 --budget-s 100 --out $R/ld_sweep130 \
  2>&1 | grep -E "^\| ld|rror" | tee $R/ld_sweep130.log
echo "=== TN through the dispatcher, kernel level, 13.5"
SGBLAS_CACHE_DIR=/tmp/kc_z2_135 timeout 100 python3 -m perf.simt_lab --pairs TN --budget-s 70 --out $R/simt_tn \
  2>&1 | grep -E "^\| (odd|sq)|rror" | tee $R/simt_tn.log
export SGBLAS_CACHE_DIR=/tmp/kc_z2_135
for v in skinny_dot; do
  for tool in memcheck initcheck racecheck synccheck; do
    extra=""; betas=0,0.75; uninit=""
    [ $tool = racecheck ] && extra="--racecheck-report all" && betas=0.75
    [ $tool = synccheck ] && betas=0.75
    [ $tool = initcheck ] && uninit="--uninitialised-c"
    timeout 80 compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
      python3 tests/sanitizer_cases.py --variant $v --betas $betas --no-scale $uninit \
      > $R/sanitizer_${tool}_${v}_135.log 2>&1
    echo "$v $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases" $R/sanitizer_${tool}_${v}_135.log | tail -2
  done
done
cd $RESULTS && tar czf call3.tgz call3 && rm -rf call3
