#!/usr/bin/env bash
# Run O, call 1: the skinny axpy loop bisected on the probe (ring_bisect.py); the axpy loop's
# epilogue through shared memory (tree `y`, the checkout) against run N's (tree `u`, .lab_u),
# by the bandwidth benchmark and by ncu; TN's 4-byte row with 8 lanes a column (tree `x`,
# .lab_x) against run N's.
set -u
RESULTS=${RESULTS:?set RESULTS to the output folder}; mkdir -p "$RESULTS/call1"; R=$RESULTS/call1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
for c in u135 x135 y135; do
  mkdir -p /tmp/kc_$c && cp .kcache_$c/*.cubin /tmp/kc_$c/ && chmod 700 /tmp/kc_$c && chmod 600 /tmp/kc_$c/*
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
P=perf/results/round3_run_o
timeout 100 python3 $P/ring_bisect.py 2>&1 | tee $R/ring_bisect.log
for run in u135 y135; do
  dir=$PWD; [ $run = u135 ] && dir=$PWD/.lab_u
  mkdir -p $R/$run
  echo "=== $run: skinny bandwidth"
  (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_$run PYTHONPATH=/tmp/site:$dir timeout 90 python3 -m perf.accuracy --ks 1024 \
    --dists normal --bandwidth --pairs NN,NT,TN,TT --out $R/$run) 2>&1 | grep -E "skinny|copy|rror" | tee $R/$run/bandwidth.log
done
SECT="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section SourceCounters"
for run in u135 y135; do
  dir=$PWD; [ $run = u135 ] && dir=$PWD/.lab_u
  (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_$run PYTHONPATH=/tmp/site:$dir timeout 120 ncu --clock-control none $SECT \
    -k regex:"skinny|reduce" --launch-skip 2 --launch-count 2 -o $R/ncu_$run python3 $PWD/$P/skinny_once.py NT) > $R/ncu_${run}_run.log 2>&1
  echo "ncu $run rc=$?"; tail -3 $R/ncu_${run}_run.log
done
for v in probe kernel-like; do
  timeout 90 ncu --clock-control none $SECT -k regex:probe --launch-skip 1 --launch-count 1 -o "$R/ncu_${v}" \
    python3 $P/ring_bisect.py --one "$v" 8 > "$R/ncu_${v}_run.log" 2>&1
  echo "ncu $v rc=$?"
done
for f in $R/*.ncu-rep; do
  b=${f%.ncu-rep}
  ncu -i "$f" --page details > $b.details.txt 2>&1
  ncu -i "$f" --page source --csv --print-source sass > $b.source.csv 2>&1 || true
  grep -E "Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible" $b.details.txt | head -30
done
for tree in u x; do
  dir=$PWD/.lab_$tree; O=$R/${tree}135; mkdir -p $O
  echo "=== $tree 135: simt_lab TN 4-byte row"
  (cd $dir && SGBLAS_CACHE_DIR=/tmp/kc_${tree}135 SGBLAS_NO_WARMUP=1 PYTHONPATH=/tmp/site:$dir timeout 70 python3 -m perf.simt_lab \
    --variants sgemm_simt_tn_128x128x16_2s_a4 --pairs TN --budget-s 35 --out $O/tn) \
    2>&1 | grep -E "^\| (odd|sq)|rror" | tee $O/simt_tn.log
done
cd $RESULTS && tar czf call1.tgz call1 && rm -rf call1
