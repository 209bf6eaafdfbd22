#!/usr/bin/env bash
# Run U: run T's call.sh with run U's parts added, run from the checkout with RESULTS and CALL set
# (see ../round3_run_t/call.sh for CACHE and its parts). Added parts:
#   ld      ld_lab.py: TN's 4-byte rows pinned at leading dimensions one below a power of two
#   fill    (first, once a call) python -m sgblas.warmup into one private copy of CACHE, which
#           every later part of the call then copies: calls 2 and 3 found that a cache built off
#           the device misses there (every variant compiled again, 130-180 s in each process;
#           see README.md), so without this each part pays that again
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; CALL=${CALL:?}; PARTS=${PARTS:-ld}
mkdir -p "$RESULTS/$CALL"
SITE=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .whl/*.whl || exit 1
python3 -m pip list 2>/dev/null | grep -E "^(numba|numba-cuda|llvmlite|numpy) " | tee "$RESULTS/$CALL/versions.txt"
KC=$(mktemp -d) && cp ${CACHE:-.kcache_t}/*.cubin $KC/ && chmod 700 $KC && chmod 600 $KC/*
export CACHE=$KC
py() { PYTHONPATH=$SITE:$PWD SGBLAS_CACHE_DIR=$KC NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1 "$@"; }
for part in $PARTS; do
  case $part in
  fill) echo "=== fill $(date -u +%H:%M:%S)"
      py timeout ${FILL_S:-240} python3 -m sgblas.warmup > $RESULTS/$CALL/fill.log 2>&1
      echo "fill rc=$? compiled: $(grep -c "compiled" $RESULTS/$CALL/fill.log)" ;;
  ld) echo "=== ld $(date -u +%H:%M:%S)"
      py timeout ${LD_S:-200} python3 perf/results/round3_run_u/ld_lab.py ${LD_CASES:-} 2>&1 | tee $RESULTS/$CALL/ld_lab.log ;;
  *) PARTS=$part bash perf/results/round3_run_t/call.sh ;;
  esac
done
