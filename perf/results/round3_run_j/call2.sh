#!/usr/bin/env bash
# Run J, call 2: the shipped registry built by two toolchains off the device (NVVM and
# nvJitLink 13.0.88, and 13.5.37; numba 0.68.0, numba-cuda 0.30.4, llvmlite 0.50.0, as the
# device has), each timed against cuBLAS: the kernels at square, odd, padded and offset shapes,
# the split-K slices on the long-K shapes; the rectangular set through the API (13.5); and
# rung 24's trial (the 4-byte class's k-major copies with 8 lanes a column), from a copy of the
# tree with that change (.trial) against the shipped 4-byte kernels.
set -u
RESULTS=${RESULTS:-out}; mkdir -p "$RESULTS"   # where the call's results go
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv
pip list 2>/dev/null | grep -iE "nvjitlink|nvvm|cuda-toolkit|numba|llvmlite|cupy" | tr -s ' '
for tc in 135 130 trial; do
  mkdir -p /tmp/kc$tc && cp .kcache$tc/*.cubin /tmp/kc$tc/ && chmod 700 /tmp/kc$tc && chmod 600 /tmp/kc$tc/*
done
A4=sgemm_simt_nn_128x128x16_2s_a4,sgemm_simt_tn_128x128x16_2s_a4,sgemm_simt_tt_128x128x16_2s_a4
mkdir -p $RESULTS/trial $RESULTS/a4
echo "=== rung 24: shipped 4-byte class (13.5), then the trial's"
SGBLAS_CACHE_DIR=/tmp/kc135 SGBLAS_NO_WARMUP=1 timeout 80 python3 -m perf.simt_lab --out $RESULTS/a4 --variants $A4 --pairs NN,TN,TT --budget-s 60 2>&1 | grep -E "^\| (sq|odd)|budget|rror"
(cd .trial && SGBLAS_CACHE_DIR=/tmp/kctrial SGBLAS_NO_WARMUP=1 PYTHONPATH=/tmp/site:$PWD timeout 80 python3 -m perf.simt_lab --out $RESULTS/trial --variants $A4 --pairs NN,TN,TT --budget-s 60 2>&1 | grep -E "^\| (sq|odd)|budget|rror")
for tc in 135 130; do
  export SGBLAS_CACHE_DIR=/tmp/kc$tc
  mkdir -p $RESULTS/tc$tc
  echo "=== toolchain $tc: simt_lab --big"
  timeout 150 python3 -m perf.simt_lab --out $RESULTS/tc$tc --big --budget-s 115 2>&1 | grep -E "^\| (sq|odd)|budget|rror" | tee $RESULTS/tc$tc/simt.log
  echo "=== toolchain $tc: split_lab --set long"
  timeout 100 python3 -m perf.split_lab --set long --out $RESULTS/tc$tc 2>&1 | grep -E "^\| [0-9]|rror" | tee $RESULTS/tc$tc/split_long.log
done
export SGBLAS_CACHE_DIR=/tmp/kc135
echo "=== toolchain 135: bench --shapes rect"
timeout 90 python3 -m perf.bench --shapes rect --pairs NN,NT,TN,TT --budget-s 60 --out $RESULTS/tc135 2>&1 | tail -24
ls /tmp/kc135 | wc -l; ls /tmp/kc130 | wc -l; ls /tmp/kctrial | wc -l
cd $RESULTS && tar czf call2.tgz trial a4 tc135 tc130 && rm -rf trial a4 tc135 tc130
