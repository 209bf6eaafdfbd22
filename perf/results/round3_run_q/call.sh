#!/usr/bin/env bash
# Run Q: one script for every call, run from the checkout with RESULTS set to an output folder,
# the caches in .kcache_q (this tree) and .kcache_base (the baseline tree, checked out in .base).
# nvJitLink 13.5 (what the README's install resolves). PARTS says what runs, in this order:
#   res    cuobjdump -res-usage of this tree's skinny cubins (registers, stack)
#   ab     fused_ab.py: one launch against the baseline's two, one process
#   bw     perf.accuracy --bandwidth, this tree then the baseline's, then this tree again
#   san    compute-sanitizer's four tools over the eight skinny kernels (tile, tail, short-K shapes)
#   gpu    every gpu test;  skinny  the skinny and split-K gpu tests
#   bench  perf.bench on the few-tile, long-K and square shapes in four pairs
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; CALL=${CALL:?}; PARTS=${PARTS:-ab bw}
mkdir -p "$RESULTS/$CALL"; R=$RESULTS/$CALL
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in base q; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
export SGBLAS_CACHE_DIR=/tmp/kc_q
bw() {  # bw TREE_DIR CACHE LOG
  (cd $1 && SGBLAS_CACHE_DIR=$2 PYTHONPATH=/tmp/site:$PWD timeout 100 python3 -m perf.accuracy --ks 1024 --dists normal \
     --bandwidth --pairs NN,NT,TN,TT 2>&1 | grep -E "skinny|copy|rror") | tee $3
}
for part in $PARTS; do
  echo "=== $part $(date -u +%H:%M:%S)"
  case $part in
  res) for f in /tmp/kc_q/sgemm_skinny_*.cubin; do
         tail -c +$(( $(head -1 $f | wc -c) + 1 )) $f > /tmp/one.cubin
         echo "$(basename $f .cubin): $(cuobjdump -res-usage /tmp/one.cubin 2>&1 | grep -E "REG:[0-9]+" | sed "s/^ *//" | tr "\n" " ")"
       done | tee $R/res_usage.txt ;;
  ab) timeout 150 python3 perf/results/round3_run_q/fused_ab.py /tmp/kc_base 2>&1 | tee $R/fused_ab.log ;;
  bw) bw $PWD /tmp/kc_q $R/bandwidth_q1.log; bw $PWD/.base /tmp/kc_base $R/bandwidth_base.log
      bw $PWD /tmp/kc_q $R/bandwidth_q2.log ;;
  san) for tool in memcheck initcheck racecheck synccheck; do
        extra=""; betas=0,0.75; uninit=""
        [ $tool = racecheck ] && extra="--racecheck-report all" && betas=0.75
        [ $tool = synccheck ] && betas=0.75
        [ $tool = initcheck ] && uninit="--uninitialised-c"
        timeout 100 compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
          python3 tests/sanitizer_cases.py --variant skinny --betas $betas --no-scale $uninit \
          > $R/sanitizer_${tool}.log 2>&1
        echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases|split" $R/sanitizer_${tool}.log | tail -3
      done ;;
  skinny) timeout 200 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/kernels/test_skinny.py \
        tests/test_splitk_gpu.py > $R/pytest_skinny.log 2>&1
      echo "pytest rc=$?"; tail -3 $R/pytest_skinny.log ;;
  gpu) timeout 330 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $R/pytest_gpu.log 2>&1
      echo "pytest rc=$?"; tail -3 $R/pytest_gpu.log ;;
  bench) mkdir -p $R/bench
      timeout 200 python3 -m perf.bench --pairs NN,NT,TN,TT --shape 128x8192x8192 --shape 8192x128x8192 \
        --shape 1000x1000x100000 --shape 512x512x65536 --shape 1024x1024x1024 --shape 1536x1536x1536 \
        --max-case-s 2 --budget-s 170 --out $R/bench > $R/bench.log 2>&1
      echo "bench rc=$?"; grep -E "^\| [0-9]" $R/bench.log | head -40 ;;
  esac
done
echo "=== end $(date -u +%H:%M:%S)"
