"""What run T's and run U's labs share: one non-blocking stream, current for CuPy; a cuBLAS
handle on it (host pointer mode); an sgblas handle pinned to one variant; a timed batch between
CUDA events; two calls timed in alternating batches; cuBLAS PEDANTIC's call on one operand set;
the L2 size that the rotating operand sets must exceed four times."""
import cupy as cp
import numpy as np
from cupy.cuda import cublas

import sgblas
from sgblas.dispatch.plan import plan_for

stream = cp.cuda.Stream(non_blocking=True)
stream.use()
handle = cublas.create()
cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
cublas.setStream(handle, stream.ptr)
ONE, ZERO = np.ones(1, np.float32), np.zeros(1, np.float32)
OPS = {"N": cublas.CUBLAS_OP_N, "T": cublas.CUBLAS_OP_T}
L2 = cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]


def tbatch(fn, reps):
    """Seconds per call of ``fn(i)``, i = 0..reps-1, after one untimed call."""
    fn(0)
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record(stream)
    for i in range(reps):
        fn(i)
    b.record(stream)
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) * 1e-3 / reps


def cublas_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc):
    """C = op(A) op(B) by cuBLAS PEDANTIC on the stream (CuPy arrays)."""
    cublas.gemmEx(handle, OPS[ta], OPS[tb], m, n, k, ONE.ctypes.data, a.data.ptr, 0, lda, b.data.ptr, 0, ldb,
                  ZERO.ctypes.data, c.data.ptr, 0, ldc, cublas.CUBLAS_COMPUTE_32F_PEDANTIC,
                  cublas.CUBLAS_GEMM_DEFAULT)


def alternate(theirs, ours, rounds=5, most=50):
    """Median seconds per call of ``theirs`` and of ``ours`` (each ``fn(i)``), timed in batches
    that alternate, ``rounds`` of each, a batch about 50 ms of ``theirs`` (2 to ``most`` calls)."""
    reps = max(2, min(most, int(0.05 / tbatch(theirs, 1))))
    times = ([], [])
    for _ in range(rounds):
        times[0].append(tbatch(theirs, reps))
        times[1].append(tbatch(ours, reps))
    return float(np.median(times[0])), float(np.median(times[1]))


def pinned_handle(spec, ta, tb, m, n, k, ptrs, lda, ldb, ldc):
    """An sgblas handle on the stream whose plan for this problem (A, B, C at ``ptrs``) runs
    ``spec`` (``plan_for(..., pin=)``), with the workspace ``spec`` needs (32 MiB at least); None,
    the handle closed, when the plan cannot take that pin."""
    h = sgblas.Handle(stream=stream, workspace_bytes=max(32 << 20, spec.workspace(m, n, k)))
    if plan_for(h, ta, tb, m, n, k, True, ptrs[0], lda, ptrs[1], ldb, ptrs[2], ldc, pin=spec) is None:
        h.close()
        return None
    return h
