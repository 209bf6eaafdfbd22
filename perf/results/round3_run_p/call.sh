#!/usr/bin/env bash
# Run P: one script for every call, run from the checkout with RESULTS set to an output folder and
# the caches in .kcache_*. TC picks the toolchain's caches (135: nvJitLink 13.5, what the
# README's install resolves; 130: 13.0); BASE the baseline tree's cache (g: run O's committed
# kernels), CACHE this tree's (p). PARTS says what runs, in this order:
#   ab     every skinny kernel and the reduction against the baseline's, one process (skinny_ab.py)
#   bw     the skinny shapes through the API against a device copy, four pairs
#   san    compute-sanitizer's four tools over the dot kernels at tile, tail and short-K shapes
#   bench  perf.bench on the few-tile, long-K and square shapes in four pairs
#   acc    perf.accuracy's sweep (K 1024-262144, normal and uniform) against cuBLAS
#   bw2    bw again in another process (the API's spread between processes)
#   ncu    ncu on the dot loop, 16x16384x4096 NN and TN (one launch each; details and SASS source pages)
#   skinny the skinny and split-K gpu tests;  gpu  every gpu test
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; TC=${TC:-135}; CALL=${CALL:?}; CACHE=${CACHE:-p}
BASE=${BASE:-g}; PARTS=${PARTS:-ab bw}; ALSO=${ALSO:-}  # ALSO: more baseline caches for ab
mkdir -p "$RESULTS/$CALL"; R=$RESULTS/$CALL
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in $BASE$TC $CACHE$TC $(for a in $ALSO; do echo $a$TC; done); do
  [ -d .kcache_$c ] || continue
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
export SGBLAS_CACHE_DIR=/tmp/kc_$CACHE$TC
for part in $PARTS; do
  echo "=== $part ($TC) $(date -u +%H:%M:%S)"
  case $part in
  ab) for b in $BASE $ALSO; do
        timeout 110 python3 perf/results/round3_run_o/skinny_ab.py /tmp/kc_$b$TC 2>&1 | tee $R/skinny_ab_${b}_$TC.log
      done ;;
  bw) mkdir -p $R/bw_$TC
      timeout 90 python3 -m perf.accuracy --ks 1024 --dists normal --bandwidth --pairs NN,NT,TN,TT --out $R/bw_$TC 2>&1 \
        | grep -E "skinny|copy|rror" | tee $R/bandwidth_$TC.log ;;
  san) for v in skinny_dot; do
      for tool in memcheck initcheck racecheck synccheck; do
        extra=""; betas=0,0.75; uninit=""
        [ $tool = racecheck ] && extra="--racecheck-report all" && betas=0.75
        [ $tool = synccheck ] && betas=0.75
        [ $tool = initcheck ] && uninit="--uninitialised-c"
        timeout 80 compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
          python3 tests/sanitizer_cases.py --variant $v --betas $betas --no-scale $uninit \
          > $R/sanitizer_${tool}_${v}_$TC.log 2>&1
        echo "$v $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases" $R/sanitizer_${tool}_${v}_$TC.log | tail -2
      done
    done ;;
  bench) mkdir -p $R/bench_$TC
      timeout 200 python3 -m perf.bench --pairs NN,NT,TN,TT --shape 128x8192x8192 --shape 8192x128x8192 \
        --shape 1000x1000x100000 --shape 512x512x65536 --shape 1024x1024x1024 --shape 1536x1536x1536 \
        --shape 2048x2048x2048 --shape 4096x4096x4096 --max-case-s 2 --budget-s 170 --out $R/bench_$TC \
        > $R/bench_$TC.log 2>&1
      echo "bench rc=$?"; grep -E "^\| [0-9]" $R/bench_$TC.log | head -50 ;;
  acc) mkdir -p $R/acc_$TC
      timeout 200 python3 -m perf.accuracy --out $R/acc_$TC > $R/accuracy_$TC.log 2>&1
      echo "accuracy rc=$?"; tail -40 $R/accuracy_$TC.log ;;
  bw2) timeout 90 python3 -m perf.accuracy --ks 1024 --dists normal --bandwidth --pairs NN,NT,TN,TT 2>&1 \
        | grep -E "skinny|copy|rror" | tee $R/bandwidth_${TC}_b.log ;;
  ncu) SECT="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section SourceCounters"
      for pr in NN TN; do
        timeout 120 ncu --clock-control none $SECT -k regex:"skinny" --launch-skip 2 --launch-count 1 \
          -o $R/ncu_${pr}_dot_$TC python3 perf/results/round3_run_o/skinny_once.py $pr > $R/ncu_${pr}_run_$TC.log 2>&1
        echo "ncu $pr rc=$?"
        ncu -i $R/ncu_${pr}_dot_$TC.ncu-rep --page details > $R/ncu_${pr}_dot_$TC.details.txt 2>&1
        ncu -i $R/ncu_${pr}_dot_$TC.ncu-rep --page source --csv --print-source sass > $R/ncu_${pr}_dot_$TC.source.csv 2>&1
        rm -f $R/ncu_${pr}_dot_$TC.ncu-rep
        grep -E "Duration|DRAM Throughput|Achieved Occupancy|No Eligible|Warp Cycles Per Issued|Issued Ipc" $R/ncu_${pr}_dot_$TC.details.txt
      done ;;
  skinny) timeout 200 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/kernels/test_skinny.py \
        tests/test_splitk_gpu.py > $R/pytest_skinny_$TC.log 2>&1
      echo "pytest rc=$?"; tail -3 $R/pytest_skinny_$TC.log ;;
  gpu) timeout 330 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $R/pytest_gpu_$TC.log 2>&1
      echo "pytest rc=$?"; tail -3 $R/pytest_gpu_$TC.log ;;
  esac
done
echo "=== end $(date -u +%H:%M:%S)"
