#!/usr/bin/env bash
# Run O, call 2: rung 34's cheaper epilogue (tree `z`, the checkout: the axpy loop's outputs
# through shared memory, and TN's second 4-byte row with 8 lanes a column) against run N's
# (`u`, .lab_u): the skinny shapes' bandwidth; TN's two 4-byte rows over leading dimensions
# (ld_sweep.py); ncu on the dot loop (16x16384x4096 NN); the four sanitizer tools over the
# changed kernels; the skinny and TN gpu tests.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call2"; R=$RESULTS/call2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in u135 z135; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
P=perf/results/round3_run_o
for run in z135 u135 z135b; do
  c=${run:0:4}; dir=$PWD; [ $c = u135 ] && dir=$PWD/.lab_u
  mkdir -p $R/$run
  echo "=== $run: skinny bandwidth"
  (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_$c PYTHONPATH=/tmp/site:$dir timeout 90 python3 -m perf.accuracy --ks 1024 \
    --dists normal --bandwidth --pairs NN,NT,TN,TT --out $R/$run) 2>&1 | grep -E "skinny|copy|rror" | tee $R/$run/bandwidth.log
done
echo "=== TN 4-byte rows over leading dimensions"
SGBLAS_CACHE_DIR=/tmp/kc_z135 SGBLAS_NO_WARMUP=1 timeout 150 python3 $P/ld_sweep.py \
  --variants sgemm_simt_tn_128x128x16_2s_a4,sgemm_simt_tn_128x128x16kq8_2s_a4 --budget-s 120 --out $R/ld_sweep \
  2>&1 | grep -E "^\| ld|rror" | tee $R/ld_sweep.log
SECT="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section SourceCounters"
SGBLAS_CACHE_DIR=/tmp/kc_z135 timeout 120 ncu --clock-control none $SECT -k regex:"skinny|reduce" --launch-skip 2 \
  --launch-count 2 -o $R/ncu_nn_dot python3 $P/skinny_once.py NN > $R/ncu_nn_dot_run.log 2>&1
echo "ncu rc=$?"
ncu -i $R/ncu_nn_dot.ncu-rep --page details > $R/ncu_nn_dot.details.txt 2>&1
ncu -i $R/ncu_nn_dot.ncu-rep --page source --csv --print-source sass > $R/ncu_nn_dot.source.csv 2>&1
grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|No Eligible|Warp Cycles Per Issued" $R/ncu_nn_dot.details.txt
export SGBLAS_CACHE_DIR=/tmp/kc_z135
for v in skinny_axpy simt_tn_128x128x16kq8; do
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
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/kernels/test_skinny.py tests/test_splitk_gpu.py \
  > $R/pytest_skinny_135.log 2>&1
echo "pytest rc=$?"; tail -2 $R/pytest_skinny_135.log
cd $RESULTS && tar czf call2.tgz call2 && rm -rf call2
