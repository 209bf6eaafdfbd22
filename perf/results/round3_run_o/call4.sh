#!/usr/bin/env bash
# Run O, call 4: the final kernels (`f`, the checkout): every skinny kernel and the reduction
# against run N's (skinny_ab.py); the skinny shapes through the API; perf.bench's set in every
# pair; the four sanitizer tools over the changed kernels; the `gpu` tests. TC picks the
# toolchain's cache (135 default), CACHE the tree's (`f` default: call 4's tree, which had
# rung 38's reduction; `g`: the final tree, run N's reduction); SHORT=1 (call 5) runs the A/B,
# the bandwidth, TN through the dispatcher and the gpu tests.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; TC=${TC:-135}; CALL=${CALL:-call4}; CACHE=${CACHE:-f}
mkdir -p "$RESULTS/$CALL"; R=$RESULTS/$CALL
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in u$TC $CACHE$TC; do
  [ -d .kcache_$c ] || continue
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
P=perf/results/round3_run_o
export SGBLAS_CACHE_DIR=/tmp/kc_$CACHE$TC
if [ "${SHORT:-0}" = 1 ]; then
  timeout 100 python3 $P/skinny_ab.py /tmp/kc_u$TC 2>&1 | tee $R/skinny_ab.log
  mkdir -p $R/bw
  timeout 90 python3 -m perf.accuracy --ks 1024 --dists normal --bandwidth --pairs NN,NT,TN,TT --out $R/bw 2>&1 \
    | grep -E "skinny|copy|rror" | tee $R/bandwidth.log
  timeout 100 python3 -m perf.simt_lab --pairs TN --budget-s 70 --out $R/simt_tn 2>&1 | grep -E "^\| (odd|sq)|rror" \
    | tee $R/simt_tn.log
elif [ "${GPU_ONLY:-0}" != 1 ]; then
  echo "=== skinny and reduction A/B"
  timeout 100 python3 $P/skinny_ab.py /tmp/kc_u$TC 2>&1 | tee $R/skinny_ab.log
  mkdir -p $R/bw
  timeout 90 python3 -m perf.accuracy --ks 1024 --dists normal --bandwidth --pairs NN,NT,TN,TT --out $R/bw 2>&1 \
    | grep -E "skinny|copy|rror" | tee $R/bandwidth.log
  mkdir -p $R/bench
  timeout 170 python3 -m perf.bench --pairs NN,NT,TN,TT --shape 128x8192x8192 --shape 8192x128x8192 \
    --shape 1000x1000x100000 --shape 512x512x65536 --shape 5000x3000x1000 --shape 4096x4096x64 --shape 1024x1024x1024 \
    --shape 1536x1536x1536 --shape 2048x2048x2048 --shape 4096x4096x4096 --max-case-s 2 --budget-s 150 --out $R/bench \
    > $R/bench.log 2>&1
  echo "bench rc=$?"; grep -E "^\| [0-9]" $R/bench.log | head -50
  for v in skinny_axpy skinny_dot_tn splitk_nn_128x128x16_2s; do
    for tool in memcheck initcheck racecheck synccheck; do
      extra=""; betas=0,0.75; uninit=""
      [ $tool = racecheck ] && extra="--racecheck-report all" && betas=0.75
      [ $tool = synccheck ] && betas=0.75
      [ $tool = initcheck ] && uninit="--uninitialised-c"
      timeout 60 compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
        python3 tests/sanitizer_cases.py --variant $v --betas $betas --no-scale $uninit \
        > $R/sanitizer_${tool}_${v}_$TC.log 2>&1
      echo "$v $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases" $R/sanitizer_${tool}_${v}_$TC.log | tail -2
    done
  done
fi
timeout 330 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $R/pytest_gpu_$TC.log 2>&1
echo "pytest rc=$?"; tail -3 $R/pytest_gpu_$TC.log
cd $RESULTS && tar czf $CALL.tgz $CALL && rm -rf $CALL
