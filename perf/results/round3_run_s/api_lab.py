"""Run S: TN's unaligned cases through the API (``sgblas.sgemm`` on CuPy arrays) against cuBLAS
PEDANTIC in the same process. python api_lab.py [--quick]

Every case is TN with every leading dimension padded by ``pad`` and the pointers offset by
``offs`` elements; the issue's 4-byte cases at 2000-8192. Two handles: the default workspace
(32 MiB) and 1 GiB, enough for the copies of every case here. Each call runs on the handle's
stream, cuBLAS on the same stream; the two alternate in batches between CUDA events over
rotating operand sets (at least 4x the L2 in all), 5 rounds, median. Printed: the kernel
``explain`` names, sgblas's and cuBLAS's times, their ratio (cuBLAS's time over sgblas's), and
the relative Frobenius difference of the two results. Where the 1 GiB handle packs and the
default one does not, a third handle with 1 GiB runs the default's 4-byte row, pinned
(``plan_for(..., pin=)``), so that both choices are timed with the same workspace.
``--quick``: the cases at 2000-4096 but 3000."""
import math
import sys

import cupy as cp
import numpy as np
from cupy.cuda import cublas

import sgblas
from sgblas.dispatch.plan import plan_for
from sgblas.kernels.spec import by_name

CASES = [(2048, 2048, 2048, 1, (0, 0, 0)), (2048, 2048, 2048, 0, (1, 1, 1)), (2000, 2000, 2000, 3, (1, 2, 3)),
         (4096, 4096, 4096, 1, (0, 0, 0)), (4096, 4096, 4096, 0, (1, 1, 1)), (5000, 5000, 5000, 3, (1, 2, 3)),
         (3000, 3000, 3000, 1, (0, 0, 0)), (4097, 4097, 4097, 3, (1, 2, 3)), (8192, 8192, 8192, 1, (0, 0, 0)),
         (8191, 8190, 8193, 2, (3, 1, 2)), (2048, 2048, 2048, 0, (0, 0, 0))]
if "--quick" in sys.argv:  # the 2000-4096 cases only
    CASES = [c for c in CASES if c[0] <= 4096 and c[0] != 3000]
stream = cp.cuda.Stream(non_blocking=True)
stream.use()
handles = {"32MiB": sgblas.Handle(stream=stream), "1GiB": sgblas.Handle(stream=stream, workspace_bytes=1 << 30)}
cb = cublas.create()
cublas.setPointerMode(cb, cublas.CUBLAS_POINTER_MODE_HOST)
cublas.setStream(cb, stream.ptr)
one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
L2 = cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]


def tbatch(fn, reps):
    fn(0)
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record(stream)
    for i in range(reps):
        fn(i)
    b.record(stream)
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) * 1e-3 / reps


rng = cp.random.default_rng(11)
for m, n, k, pad, offs in CASES:
    lda, ldb, ldc = k + pad, k + pad, m + pad
    ext = ((m - 1) * lda + k, (n - 1) * ldb + k, (n - 1) * ldc + m)
    sets = max(1, math.ceil(4 * L2 / (4 * sum(ext))))
    with stream:
        bufs = [tuple(rng.standard_normal(offs[i] + ext[i], dtype=cp.float32) for i in range(3)) for _ in range(sets)]
    stream.use()  # `with stream:` leaves the NULL stream current
    views = [tuple(b[i][offs[i]:] for i in range(3)) for b in bufs]
    c_ref = cp.empty_like(views[0][2])

    def theirs(i, c=None):
        a, b, cc = views[i % sets]
        cublas.gemmEx(cb, cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N, m, n, k, one.ctypes.data, a.data.ptr, 0, lda,
                      b.data.ptr, 0, ldb, zero.ctypes.data, (cc if c is None else c).data.ptr, 0, ldc,
                      cublas.CUBLAS_COMPUTE_32F_PEDANTIC, cublas.CUBLAS_GEMM_DEFAULT)

    theirs(0, c_ref)
    chosen = {label: sgblas.explain(h, "T", "N", m, n, k, views[0][0], lda, views[0][1], ldb, views[0][2], ldc).kernel
              for label, h in handles.items()}
    runs = dict(handles)
    if chosen["1GiB"] != chosen["32MiB"]:
        pinned = sgblas.Handle(stream=stream, workspace_bytes=1 << 30)
        plan_for(pinned, "T", "N", m, n, k, True, views[0][0].data.ptr, lda, views[0][1].data.ptr, ldb,
                 views[0][2].data.ptr, ldc, pin=by_name(chosen["32MiB"]))
        runs["1GiB pinned"] = pinned
        chosen["1GiB pinned"] = chosen["32MiB"]
    for label, h in runs.items():
        kernel = chosen[label]

        def ours(i, h=h):
            a, b, cc = views[i % sets]
            status = sgblas.sgemm(h, "T", "N", m, n, k, 1.0, a, lda, b, ldb, 0.0, cc, ldc)
            assert status == sgblas.Status.SUCCESS, status

        ours(0)
        stream.synchronize()
        got, ref = views[0][2], c_ref
        rel = float(cp.linalg.norm(got - ref) / cp.linalg.norm(ref))
        reps = max(2, min(100, int(0.05 / tbatch(theirs, 1))))
        t = {"sgblas": [], "cublas": []}
        for _ in range(5):
            t["cublas"].append(tbatch(theirs, reps))
            t["sgblas"].append(tbatch(ours, reps))
        med = {w: float(np.median(v)) for w, v in t.items()}
        print(f"TN {m}x{n}x{k} pad {pad} offs {offs} workspace {label} ({sets} sets, {reps} reps): {kernel} "
              f"{med['sgblas'] * 1e6:.1f} us, cuBLAS {med['cublas'] * 1e6:.1f} us, ratio {med['cublas'] / med['sgblas']:.3f} "
              f"(difference from cuBLAS {rel:.1e})", flush=True)
    if "1GiB pinned" in runs:
        runs["1GiB pinned"].close()
    del bufs, views, c_ref
    cp.get_default_memory_pool().free_all_blocks()
