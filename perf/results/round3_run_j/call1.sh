#!/usr/bin/env bash
# Run J, call 1: the k-major copies by 4-byte cp.async (the `_kcp` trial rows) against the
# shipped register-staged kernels, kernel level and as split-K slices, and the skinny split sweep.
# The cubins come from a cache compiled off the device with the same numba, numba-cuda and
# llvmlite (carried as .kcache); the loader recompiles any the driver refuses.
set -u
RESULTS=${RESULTS:-out}; mkdir -p "$RESULTS"   # where the call's results go
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1
mkdir -p /tmp/kc && cp .kcache/*.cubin /tmp/kc/ && chmod 700 /tmp/kc && chmod 600 /tmp/kc/* && export SGBLAS_CACHE_DIR=/tmp/kc
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,driver_version --format=csv
python3 -c "import numba, numba_cuda, llvmlite, cupy; print('numba', numba.__version__, 'numba-cuda', numba_cuda.__version__, 'llvmlite', llvmlite.__version__, 'cupy', cupy.__version__)"
V=sgemm_simt_nn_128x128x16t16x8_2s_a16,sgemm_simt_nn_128x128x16t16x8_kcp_2s_a16,sgemm_simt_nn_128x128x16_2s_a16,sgemm_simt_nn_128x128x16_kcp_2s_a16
V=$V,sgemm_simt_tn_128x128x16_2s_a16,sgemm_simt_tn_128x128x16_kcp_2s_a16,sgemm_simt_tn_128x128x16t16x8_kcp_2s_a16
V=$V,sgemm_simt_tt_128x128x16_2s_a16,sgemm_simt_tt_128x128x16_kcp_2s_a16,sgemm_simt_tt_128x128x16t16x8_kcp_2s_a16
mkdir -p $RESULTS/sq $RESULTS/odd
SGBLAS_NO_WARMUP=1 timeout 200 python3 -m perf.simt_lab --out $RESULTS/sq --variants $V \
  --shapes 2048x2048x2048,4096x4096x4096,8192x8192x8192,5000x3000x1000 --pairs NN,TN,TT 2>&1 | grep -v "^| " | tee $RESULTS/simt_sq.log
W=sgemm_simt_tn_128x128x16_2s_a4,sgemm_simt_tn_128x128x16_kcp_2s_a4,sgemm_simt_tn_128x128x16_2s_a8,sgemm_simt_tn_128x128x16_2s_a16,sgemm_simt_tn_128x128x16_kcp_2s_a16
SGBLAS_NO_WARMUP=1 timeout 120 python3 -m perf.simt_lab --out $RESULTS/odd --variants $W --pairs TN 2>&1 | grep -v "^| " | tee $RESULTS/simt_odd.log
timeout 150 python3 -m perf.split_lab --set kcopy --out $RESULTS 2>&1 | tee $RESULTS/split_kcopy.log | tail -15
timeout 90 python3 -m perf.split_lab --set skinny --out $RESULTS 2>&1 | tee $RESULTS/split_skinny.log | tail -14
ls -la /tmp/kc | head -3; ls /tmp/kc | wc -l
