#!/usr/bin/env bash
# Run T: one script for every call, run from the checkout with RESULTS set to an output folder
# and this tree's kernel cache in the folder CACHE (default .kcache_t). PARTS says what runs:
#   tail    tail_lab.py: the tile kernel over its whole waves and the rest split, composed by hand
#   ab      tail_ab.py: the API's tail plans against the one launch of the same kernel, pinned
#   odd     perf.bench on odd sizes with tight leading dimensions, four pairs (issue 14's sweep)
#   padoff  perf.bench on even sizes, leading dimensions padded by 3, pointers offset by 1, 2, 3
#           (ODD, EVEN, PADOFF, ODD_NAME and PADOFF_NAME override the shape lists, the options and
#           the logs' names)
#   sq      perf.bench on the squares and the rectangular set, four pairs, up to SQ_MAX (8192)
#   gpu     every gpu test
#   sanall  compute-sanitizer's tools (SAN_TOOLS) over the variants whose names hold a word of
#           SAN_VARIANT (tail shapes, SAN_S seconds a tool)
#   santail compute-sanitizer's four tools over tail plans (tests/sanitizer_cases.py --tail-plans)
#   warm    python -m sgblas.warmup: every variant's registers and local memory on the device
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; CALL=${CALL:?}; PARTS=${PARTS:-tail}
mkdir -p "$RESULTS/$CALL"; R=$RESULTS/$CALL
SITE=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .whl/*.whl \
  && export PYTHONPATH=$SITE:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
private() { local d; d=$(mktemp -d) && cp "$1"/*.cubin $d/ && chmod 700 $d && chmod 600 $d/* && echo $d; }
KC=$(private ${CACHE:-.kcache_t}) || exit 1
export SGBLAS_CACHE_DIR=$KC
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
ODD=${ODD:-"2001x2001x2001 2101x2101x2101 2899x2899x2899 3001x3001x3001 4097x4097x4097 5001x5001x5001 5801x5801x5801 7001x7001x7001 8191x8191x8191 2001x7001x3001 7001x2001x5001"}
EVEN=${EVEN:-"2048x2048x2048 2100x2100x2100 2900x2900x2900 4096x4096x4096 5000x5000x5000 5800x5800x5800 8192x8192x8192"}
shapes() { for s in $1; do printf -- "--shape %s " $s; done; }
bench() { # name, limit, args...
  local name=$1 lim=$2; shift 2; mkdir -p $R/$name
  timeout $lim python3 -m perf.bench --pairs NN,NT,TN,TT --target-s ${TARGET_S:-0.15} --budget-s $((lim - 40)) \
    --out $R/$name "$@" > $R/$name.log 2>&1
  echo "$name rc=$?"; grep -E "^\| [0-9]" $R/$name.log | head -60; }
sanitize() { # tool, log name, sanitizer_cases.py arguments: beta 0 and 0.75 under memcheck,
  # 0 with C uninitialised under initcheck, 0.75 under racecheck (every report) and synccheck
  local tool=$1 log=$2 extra="" betas=0.75 uninit=""; shift 2
  [ $tool = racecheck ] && extra="--racecheck-report all"
  [ $tool = memcheck ] && betas=0,0.75
  [ $tool = initcheck ] && uninit="--uninitialised-c" && betas=0
  timeout ${SAN_S:-110} compute-sanitizer --tool $tool $extra --error-exitcode 99 --report-api-errors no \
    python3 tests/sanitizer_cases.py "$@" --betas $betas $uninit > $R/sanitizer_${tool}_$log.log 2>&1
  echo "$tool $log rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases" $R/sanitizer_${tool}_$log.log | tail -2; }
for part in $PARTS; do
  echo "=== $part $(date -u +%H:%M:%S)"
  case $part in
  tail) timeout ${TAIL_S:-300} python3 perf/results/round3_run_t/tail_lab.py 2>&1 | tee $R/tail_lab.log ;;
  ab) timeout ${AB_S:-150} python3 perf/results/round3_run_t/tail_ab.py 2>&1 | tee $R/tail_ab.log ;;
  odd) bench ${ODD_NAME:-odd} ${BENCH_S:-240} $(shapes "$ODD") ;;
  padoff) bench ${PADOFF_NAME:-padoff} ${BENCH_S:-240} ${PADOFF:---pad 3 --offset 1,2,3} $(shapes "$EVEN") ;;
  sq) bench sq ${SQ_S:-${BENCH_S:-240}} --shapes all --max-dim ${SQ_MAX:-8192} ;;
  warm) timeout 200 python3 -m sgblas.warmup > $R/warmup.log 2>&1; echo "warmup rc=$?"; grep -E "splitk_.*_a4" $R/warmup.log
      echo "variants with local memory: $(grep "local memory" $R/warmup.log | grep -vc " 0 bytes")" ;;
  santail) for tool in memcheck initcheck racecheck synccheck; do
        sanitize $tool tail_plans --variant none --tail-plans NN,NT,TN,TT; done ;;
  gpu) timeout 450 python3 -m pytest -q -m gpu -rs -p no:cacheprovider tests > $R/pytest_gpu.log 2>&1
      echo "pytest rc=$?"; tail -3 $R/pytest_gpu.log ;;
  sanall) for only in ${SAN_VARIANT:-all}; do [ $only = all ] && only=""
        for tool in ${SAN_TOOLS:-memcheck initcheck racecheck synccheck}; do
          sanitize $tool ${only:-all} --kinds tail ${only:+--variant $only}; done; done ;;
  esac
done
echo "=== end $(date -u +%H:%M:%S)"
