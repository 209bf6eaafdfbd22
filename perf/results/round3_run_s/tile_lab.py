"""Run S: every legal tile row of a problem, pinned, through the API against cuBLAS PEDANTIC in the
same process. python tile_lab.py

Where does 5000^3 lose (TN 5000^3 with leading dimensions padded by 3 and pointers offset by
1-3 stayed at 0.84-0.85, packed or not)? 1600 tiles of 128x128 on 264 resident slots are 6.06
waves, 7 in practice, the last 6% full; 3160 tiles of 128x64 on 396 slots are 7.98 waves. Each
row the registry holds for the pair (split-K, skinny and general rows left out) is pinned on
its own handle (``plan_for(..., pin=)``) and timed as api_lab.py times: batches between CUDA
events on the call's stream, rotating operand sets (at least 4x the L2), 5 rounds, median,
alternating with cuBLAS. ``--wave`` (call 5): instead, TN's shapes where rule 3a of the
heuristic (written after call 4) takes the 128x64 row, padded by 3 (3000^3 by 1) and offset by
1-3. Printed: the heuristic's choice, then each row's time and its ratio.
The operands are drawn on the host (NumPy) and copied over, and each stage of the first case
prints the time since start: the first run of this lab (call 3) printed no line within its 130 s,
and CuPy's device generator, which compiles its kernels with NVRTC on a fresh machine, is one
suspect."""
import math
import sys
import time

T0 = time.perf_counter()


def stage(what):
    print(f"[{time.perf_counter() - T0:.1f} s] {what}", flush=True)


import cupy as cp
import numpy as np
from cupy.cuda import cublas

import sgblas
from sgblas.dispatch.plan import plan_for
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.spec import GEMM_KERNELS

stage("imported")

# (m, n, k, pad, offsets, pairs)
CASES = [(5000, 5000, 5000, 3, (1, 2, 3), "TN NN NT TT"), (5000, 5000, 5000, 0, (0, 0, 0), "TN NN"),
         (6000, 6000, 6000, 3, (1, 2, 3), "TN"), (4500, 4500, 4500, 3, (1, 2, 3), "TN"),
         (3000, 3000, 3000, 1, (0, 0, 0), "TN")]
if "--wave" in sys.argv:
    CASES = [(m, n, k, 3, (1, 2, 3), "TN") for m, n, k in ((2450, 2450, 2450), (3050, 3050, 3050), (4300, 4300, 4300),
                                                         (4700, 4700, 4700), (5000, 5000, 5000), (5800, 5800, 5800),
                                                         (2500, 5000, 3000), (3000, 2000, 4000), (12000, 1500, 2000))]
    CASES.insert(1, (3000, 3000, 3000, 1, (0, 0, 0), "TN"))
stream = cp.cuda.Stream(non_blocking=True)
stream.use()
cb = cublas.create()
cublas.setPointerMode(cb, cublas.CUBLAS_POINTER_MODE_HOST)
cublas.setStream(cb, stream.ptr)
one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
L2 = cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
OP = {"N": cublas.CUBLAS_OP_N, "T": cublas.CUBLAS_OP_T}


def tbatch(fn, reps):
    fn(0)
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record(stream)
    for i in range(reps):
        fn(i)
    b.record(stream)
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) * 1e-3 / reps


rng = np.random.default_rng(12)
for m, n, k, pad, offs, pairs in CASES:
    for ta, tb in pairs.split():
        ra, ca = (m, k) if ta == "N" else (k, m)
        rb, cbn = (k, n) if tb == "N" else (n, k)
        lda, ldb, ldc = ra + pad, rb + pad, m + pad
        ext = ((ca - 1) * lda + ra, (cbn - 1) * ldb + rb, (n - 1) * ldc + m)
        sets = max(1, math.ceil(4 * L2 / (4 * sum(ext))))
        with stream:
            bufs = [tuple(cp.asarray(rng.standard_normal(offs[i] + ext[i], dtype=np.float32)) for i in range(3))
                    for _ in range(sets)]
        stream.use()  # `with stream:` leaves the NULL stream current
        views = [tuple(b[i][offs[i]:] for i in range(3)) for b in bufs]
        stage("operands on the device")
        c_ref = cp.empty_like(views[0][2])
        ptrs = [v.data.ptr for v in views[0]]

        def theirs(i, c=None):
            a, b, cc = views[i % sets]
            cublas.gemmEx(cb, OP[ta], OP[tb], m, n, k, one.ctypes.data, a.data.ptr, 0, lda, b.data.ptr, 0, ldb,
                          zero.ctypes.data, (cc if c is None else c).data.ptr, 0, ldc,
                          cublas.CUBLAS_COMPUTE_32F_PEDANTIC, cublas.CUBLAS_GEMM_DEFAULT)

        theirs(0, c_ref)
        stream.synchronize()
        stage("cuBLAS's reference")
        base = sgblas.Handle(stream=stream)
        stage("handle")
        heur = sgblas.explain(base, ta, tb, m, n, k, views[0][0], lda, views[0][1], ldb, views[0][2], ldc).kernel
        p = GemmProblem(base.cc, base.math_mode, ta, tb, m, n, k, ptrs[0], lda, ptrs[1], ldb, ptrs[2], ldc)
        rows = [s for s in GEMM_KERNELS if s.role in ("gemm", "packed") and not s.name.startswith("sgemm_general_")
                and s.can_implement(p) is None]
        print(f"{ta}{tb} {m}x{n}x{k} pad {pad} offs {offs} ({sets} sets): heuristic {heur}", flush=True)
        for spec in rows:
            h = sgblas.Handle(stream=stream, workspace_bytes=max(32 << 20, spec.workspace(m, n, k)))
            if plan_for(h, ta, tb, m, n, k, True, ptrs[0], lda, ptrs[1], ldb, ptrs[2], ldc, pin=spec) is None:
                print(f"  {spec.name}: not pinnable", flush=True)
                h.close()
                continue

            def ours(i, h=h):
                a, b, cc = views[i % sets]
                status = sgblas.sgemm(h, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, cc, ldc)
                assert status == sgblas.Status.SUCCESS, status

            ours(0)
            stream.synchronize()
            rel = float(cp.linalg.norm(views[0][2] - c_ref) / cp.linalg.norm(c_ref))
            reps = max(2, min(50, int(0.05 / tbatch(theirs, 1))))
            t = {"sgblas": [], "cublas": []}
            for _ in range(5):
                t["cublas"].append(tbatch(theirs, reps))
                t["sgblas"].append(tbatch(ours, reps))
            med = {w: float(np.median(v)) for w, v in t.items()}
            print(f"  {spec.name}: {med['sgblas'] * 1e6:.1f} us, cuBLAS {med['cublas'] * 1e6:.1f} us, ratio "
                  f"{med['cublas'] / med['sgblas']:.3f} (difference from cuBLAS {rel:.1e})", flush=True)
            h.close()
        base.close()
        del bufs, views, c_ref
        cp.get_default_memory_pool().free_all_blocks()
