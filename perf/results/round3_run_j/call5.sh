#!/usr/bin/env bash
# Run J, call 5: stall reasons of the same PTX assembled by nvJitLink 13.0 and 13.5 (TT and TN
# 8 x 8, NT 16 x 8 at 4096^3), to see where the toolchain's 2-4% goes.
set -u
RESULTS=${RESULTS:-out}; mkdir -p "$RESULTS"   # where the call's results go
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.per_cycle_active
for r in barrier dispatch_stall long_scoreboard math_pipe_throttle mio_throttle no_instruction not_selected selected short_scoreboard wait lg_throttle branch_resolving; do
  M=$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
done
V=sgemm_simt_nt_128x128x16t16x8_2s_a16,sgemm_simt_tn_128x128x16_2s_a16,sgemm_simt_tt_128x128x16_2s_a16
for tc in 130 135; do
  mkdir -p /tmp/kc$tc && cp .kcache$tc/*.cubin /tmp/kc$tc/ && chmod 700 /tmp/kc$tc && chmod 600 /tmp/kc$tc/*
  SGBLAS_CACHE_DIR=/tmp/kc$tc SGBLAS_NO_WARMUP=1 timeout 200 ncu --clock-control none -k regex:sgemm_simt --launch-count 6 \
    --metrics $M python3 -m perf.simt_lab --profile --variants $V --shapes 4096x4096x4096 --pairs NT,TN,TT > $RESULTS/ncu_toolchain_$tc.txt 2>&1
  echo "tc $tc rc=$?"
done
