"""Run S: would packing pay for TN's 4-byte class? Kernel level, against cuBLAS PEDANTIC.
python pack_lab.py

For each TN case (every leading dimension padded by ``pad``, pointers offset by ``offs``
elements), three timings alternate over rotating operand sets (at least 4x the L2 in all):
cuBLAS on the problem as it is; the 4-byte row the heuristic picks, on the same; and "packed":
A and B copied by a plain copy kernel (CuPy RawKernel, one float a thread) into buffers whose
leading dimension is k rounded up to 4, then the 16-byte TN kernel on those, C written to an
aligned buffer of the same shape (an estimate: the shipped form would write C itself, with a
4-byte epilogue). Ratios are cuBLAS's time over ours; "the 16-byte kernel" is the packed
form's last launch alone, on the packed copies of the last sets (L2-warm). The packed result is checked against
cuBLAS's (relative Frobenius error)."""
import math

import cupy as cp
import numpy as np
from cupy.cuda import cublas

from perf import simt_lab
from sgblas.runtime import driver
from sgblas.runtime.launch import launch

CASES = [(2048, 2048, 2048, 1, (0, 0, 0)), (2048, 2048, 2048, 0, (1, 1, 1)), (2000, 2000, 2000, 3, (1, 2, 3)),
         (4096, 4096, 4096, 1, (0, 0, 0)), (4096, 4096, 4096, 0, (1, 1, 1)), (5000, 5000, 5000, 3, (1, 2, 3)),
         (3000, 3000, 3000, 1, (0, 0, 0)), (4097, 4097, 4097, 3, (1, 2, 3)), (8192, 8192, 8192, 1, (0, 0, 0))]
A16 = "sgemm_simt_tn_128x128x16_2s_a16"
A4 = ("sgemm_simt_tn_128x128x16_2s_a4", "sgemm_simt_tn_128x128x16kq8_2s_a4")
pack = cp.RawKernel(r"""
extern "C" __global__ void pack(const float* src, long long lds, float* dst, long long ldd, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    long long c = blockIdx.y;
    if (r < rows) dst[c * ldd + r] = src[c * lds + r];
}""", "pack")
kerns, props = simt_lab._load_simt([A16, *A4])
stream0 = driver.as_pointer(0)
cb = cublas.create()
cublas.setPointerMode(cb, cublas.CUBLAS_POINTER_MODE_HOST)
one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
L2 = cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]


def tbatch(fn, reps):
    fn(0)
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for i in range(reps):
        fn(i)
    b.record()
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) * 1e-3 / reps


rng = cp.random.default_rng(5)
for m, n, k, pad, offs in CASES:
    lda, ldb, ldc = k + pad, k + pad, m + pad
    ext = ((m - 1) * lda + k, (n - 1) * ldb + k, (n - 1) * ldc + m)
    ws = 4 * sum(ext)
    sets = max(1, math.ceil(4 * L2 / ws))
    bufs = [tuple(rng.standard_normal(offs[i] + ext[i], dtype=cp.float32) for i in range(3)) for _ in range(sets)]
    ptrs = [tuple(int(b[i].data.ptr) + 4 * offs[i] for i in range(3)) for b in bufs]
    kp = -(-k // 4) * 4
    pa = [cp.empty(kp * m, cp.float32) for _ in range(min(sets, 2))]
    pb = [cp.empty(kp * n, cp.float32) for _ in range(min(sets, 2))]
    cc = [cp.empty(m * n, cp.float32) for _ in range(min(sets, 2))]
    p = simt_lab._problem(props, "T", "N", m, n, k, (ptrs[0][0], lda), (ptrs[0][1], ldb), (ptrs[0][2], ldc))
    a4 = simt_lab._simt_choice(props, p)
    assert a4 in A4, a4

    def theirs(i):
        a, b, c = ptrs[i % sets]
        cublas.gemmEx(cb, cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N, m, n, k, one.ctypes.data, a, 0, lda, b, 0, ldb,
                      zero.ctypes.data, c, 0, ldc, cublas.CUBLAS_COMPUTE_32F_PEDANTIC, cublas.CUBLAS_GEMM_DEFAULT)

    def ours_a4(i):
        a, b, c = ptrs[i % sets]
        launch(kerns[a4], (-(-m // 128) * -(-n // 128), 1, 1), stream0,
               (m, n, k, 1.0, a, ext[0], lda, b, ext[1], ldb, 0.0, c, ext[2], ldc))

    def ours_packed(i):
        a, b, c = ptrs[i % sets]
        j = i % len(pa)
        pack((-(-k // 256), m), (256,), (a, cp.int64(lda), pa[j], cp.int64(kp), cp.int32(k)))
        pack((-(-k // 256), n), (256,), (b, cp.int64(ldb), pb[j], cp.int64(kp), cp.int32(k)))
        launch(kerns[A16], (-(-m // 128) * -(-n // 128), 1, 1), stream0,
               (m, n, k, 1.0, int(pa[j].data.ptr), kp * m, kp, int(pb[j].data.ptr), kp * n, kp, 0.0,
                int(cc[j].data.ptr), m * n, m))

    theirs(0)
    ours_packed(0)
    cp.cuda.runtime.deviceSynchronize()
    full = cp.zeros(n * ldc, cp.float32)
    full[:ext[2]] = bufs[0][2][offs[2]:]
    ref = full.reshape(n, ldc)[:, :m]
    got = cc[0].reshape(n, m)
    rel = float(cp.linalg.norm(got - ref) / cp.linalg.norm(ref))
    t1 = tbatch(theirs, 1)
    reps = max(2, min(100, int(0.05 / t1)))
    def a16_alone(i):
        j = i % len(pa)
        launch(kerns[A16], (-(-m // 128) * -(-n // 128), 1, 1), stream0,
               (m, n, k, 1.0, int(pa[j].data.ptr), kp * m, kp, int(pb[j].data.ptr), kp * n, kp, 0.0,
                int(cc[j].data.ptr), m * n, m))

    t = {"cublas": [], "a4": [], "packed": [], "a16": []}
    for _ in range(5):
        t["cublas"].append(tbatch(theirs, reps))
        t["a4"].append(tbatch(ours_a4, reps))
        t["packed"].append(tbatch(ours_packed, reps))
        t["a16"].append(tbatch(a16_alone, reps))
    med = {w: float(np.median(v)) for w, v in t.items()}
    print(f"TN {m}x{n}x{k} pad {pad} offs {offs} ({sets} sets, {reps} reps): cublas {med['cublas'] * 1e6:.1f} us; "
          f"{a4} {med['a4'] * 1e6:.1f} us = {med['cublas'] / med['a4']:.3f}; packed {med['packed'] * 1e6:.1f} us = "
          f"{med['cublas'] / med['packed']:.3f}, of which the 16-byte kernel {med['a16'] * 1e6:.1f} us (rel err vs cuBLAS {rel:.1e})", flush=True)
    del bufs, pa, pb, cc
    cp.get_default_memory_pool().free_all_blocks()
