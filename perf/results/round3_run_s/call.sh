#!/usr/bin/env bash
# Run S: one script for every call, run from the checkout with RESULTS set to an output folder
# and this tree's kernel cache in the folder CACHE (default .kcache_s). nvJitLink 13.5 (what the
# README's install resolves). PARTS says what runs, in this order:
#   cab     cache_ab.py in six processes, alternating the kernels of BEFORE (default .kcache_r,
#           the kernels of the package in BEFORE_TREE, default .tree_r: the tree before the
#           change) and of CACHE (this checkout's)
#   pack    pack_lab.py: would packing A and B pay for TN's 4-byte class?
#   api     api_lab.py: TN's unaligned cases through the API against cuBLAS (apiq: --quick)
#   copy    copy_lab.py: the packing copy's rate, and a packed call's parts
#   tile    tile_lab.py: every legal tile row of 5000^3 and its neighbours, pinned, against cuBLAS
#   wave    tile_lab.py --wave: the same on the TN shapes where rule 3a takes the 128x64 row
#   bw      perf.accuracy --bandwidth, twice (two processes)
#   split   the split-K, skinny, graph-capture and stream gpu tests
#   san     compute-sanitizer's four tools over the split calls (slice and skinny kernels, tail shapes)
#   sanall  compute-sanitizer's tools (SAN_TOOLS, default all four) over every variant of the
#           registry, or for each word of SAN_VARIANT the variants whose name holds it (tail
#           shapes, SAN_S seconds a tool; memcheck with beta 0 and 0.75)
#   gpu     every gpu test
#   bench   perf.bench on the few-tile, long-K and square shapes in four pairs
#   acc     perf.accuracy (long-K error against cuBLAS)
#   ovh     perf.overhead: host time per call (no fresh-process part)
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; CALL=${CALL:?}; PARTS=${PARTS:-cab bw}
mkdir -p "$RESULTS/$CALL"; R=$RESULTS/$CALL
# The packages the GPU machine lacks (numpy < 2.5 for numba-cuda), from wheels in .whl.
SITE=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .whl/*.whl \
  && export PYTHONPATH=$SITE:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
# The kernel cache built off the device, in a private directory (the cache refuses open ones).
private() { local d; d=$(mktemp -d) && cp "$1"/*.cubin $d/ && chmod 700 $d && chmod 600 $d/* && echo $d; }
KC=$(private ${CACHE:-.kcache_s}) || exit 1
export SGBLAS_CACHE_DIR=$KC
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
for part in $PARTS; do
  echo "=== $part $(date -u +%H:%M:%S)"
  case $part in
  cab) KB=$(private ${BEFORE:-.kcache_r}) || exit 1
      for i in 1 2 3; do
        PYTHONPATH=$SITE:$PWD/${BEFORE_TREE:-.tree_r} SGBLAS_CACHE_DIR=$KB timeout 100 python3 perf/results/round3_run_s/cache_ab.py before 2>&1 | tee -a $R/cache_ab.log
        timeout 100 python3 perf/results/round3_run_s/cache_ab.py after 2>&1 | tee -a $R/cache_ab.log
      done ;;
  pack) timeout 200 python3 perf/results/round3_run_s/pack_lab.py 2>&1 | tee $R/pack_lab.log ;;
  api) timeout 300 python3 perf/results/round3_run_s/api_lab.py 2>&1 | tee $R/api_lab.log ;;
  apiq) timeout 200 python3 perf/results/round3_run_s/api_lab.py --quick 2>&1 | tee $R/api_lab_quick.log ;;
  tile) timeout 200 python3 perf/results/round3_run_s/tile_lab.py 2>&1 | tee $R/tile_lab.log ;;
  wave) timeout 250 python3 perf/results/round3_run_s/tile_lab.py --wave 2>&1 | tee $R/tile_lab_wave.log ;;
  copy) timeout 150 python3 perf/results/round3_run_s/copy_lab.py 2>&1 | tee $R/copy_lab.log ;;
  bw) for i in 1 2; do
        timeout 100 python3 -m perf.accuracy --ks 1024 --dists normal --bandwidth --pairs NN,NT,TN,TT 2>&1 \
          | grep -E "skinny|copy|rror" | tee $R/bandwidth_$i.log
      done ;;
  split) timeout 300 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests/kernels/test_skinny.py \
        tests/test_splitk_gpu.py tests/test_graph_capture_gpu.py tests/test_streams_gpu.py > $R/pytest_split.log 2>&1
      echo "pytest rc=$?"; tail -3 $R/pytest_split.log ;;
  san) for tool in memcheck initcheck racecheck synccheck; do
        extra=""; betas=0,0.75; uninit=""
        [ $tool = racecheck ] && extra="--racecheck-report all" && betas=0.75
        [ $tool = synccheck ] && betas=0.75
        [ $tool = initcheck ] && uninit="--uninitialised-c"
        for v in splitk skinny; do
          timeout 120 compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
            python3 tests/sanitizer_cases.py --variant $v --kinds tail --betas $betas --no-scale $uninit \
            > $R/sanitizer_${tool}_$v.log 2>&1
          echo "$tool $v rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases" $R/sanitizer_${tool}_$v.log | tail -2
        done
      done ;;
  sanall) for only in ${SAN_VARIANT:-all}; do [ $only = all ] && only=""; for tool in ${SAN_TOOLS:-memcheck initcheck racecheck synccheck}; do
        extra=""; betas=0.75; uninit=""
        [ $tool = racecheck ] && extra="--racecheck-report all"
        [ $tool = memcheck ] && betas=0,0.75
        [ $tool = initcheck ] && uninit="--uninitialised-c" && betas=0
        timeout ${SAN_S:-110} compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
          python3 tests/sanitizer_cases.py --kinds tail --betas $betas $uninit ${only:+--variant $only} \
          > $R/sanitizer_${tool}_${only:-all}.log 2>&1
        echo "$tool ${only:-all} rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases" $R/sanitizer_${tool}_${only:-all}.log | tail -2
      done; done ;;
  gpu) timeout 450 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $R/pytest_gpu.log 2>&1
      echo "pytest rc=$?"; tail -3 $R/pytest_gpu.log ;;
  bench) mkdir -p $R/bench
      timeout 200 python3 -m perf.bench --pairs NN,NT,TN,TT --shape 128x8192x8192 --shape 8192x128x8192 \
        --shape 1000x1000x100000 --shape 512x512x65536 --shape 1024x1024x1024 --shape 1536x1536x1536 \
        --max-case-s 2 --budget-s 170 --out $R/bench > $R/bench.log 2>&1
      echo "bench rc=$?"; grep -E "^\| [0-9]" $R/bench.log | head -40 ;;
  ovh) timeout 200 python3 -m perf.overhead --no-startup --calls 1000 --repeats 3 --out $R > $R/overhead.log 2>&1
      echo "overhead rc=$?"; grep -E "^\|" $R/overhead.log | head -20 ;;
  acc) timeout 200 python3 -m perf.accuracy > $R/accuracy.log 2>&1; echo "accuracy rc=$?"; tail -30 $R/accuracy.log ;;
  esac
done
echo "=== end $(date -u +%H:%M:%S)"
