"""What run T's labs share: one non-blocking stream, current for CuPy; a cuBLAS handle on it
(host pointer mode); a timed batch between CUDA events; cuBLAS PEDANTIC's call on one operand
set; the L2 size that the rotating operand sets must exceed four times."""
import cupy as cp
import numpy as np
from cupy.cuda import cublas

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
