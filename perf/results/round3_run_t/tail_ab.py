"""Run T: the tail plan against the one launch it replaces, through the API. python tail_ab.py

For each case three calls alternate with cuBLAS PEDANTIC on one stream, in batches between
CUDA events over rotating operand sets (at least 4x the L2), 5 rounds, median: ``sgblas.sgemm``
on a handle with its own choice (the tail plan where rule 6 takes one), and on a handle pinned
to the same tile kernel (``plan_for(..., pin=)``: one launch, no tail). Printed: the kernels,
the tail's rectangles, times and ratios (cuBLAS's time over the call's)."""
import math
import sys

import cupy as cp
import numpy as np

import sgblas
from lab_common import L2, cublas_gemm, stream, tbatch
from sgblas.dispatch.plan import plan_for
from sgblas.kernels.spec import by_name

CASES = [(p, 5000, 3000, 1000, 0, (0, 0, 0)) for p in ("NN", "NT", "TN", "TT")] + [
    ("TN", 5000, 5000, 5000, 3, (1, 2, 3)), ("TN", 2100, 2100, 2100, 3, (1, 2, 3))]


rng = cp.random.default_rng(13)
print("imported", flush=True)
for pair, m, n, k, pad, offs in CASES:
    ta, tb = pair
    lda, ldb, ldc = (m if ta == "N" else k) + pad, (k if tb == "N" else n) + pad, m + pad
    ext = ((k if ta == "N" else m) - 1) * lda + (m if ta == "N" else k), \
        ((n if tb == "N" else k) - 1) * ldb + (k if tb == "N" else n), (n - 1) * ldc + m
    sets = max(1, math.ceil(4 * L2 / (4 * sum(ext))))
    with stream:
        bufs = [tuple(rng.standard_normal(offs[i] + ext[i], dtype=cp.float32) for i in range(3)) for _ in range(sets)]
    stream.use()
    views = [tuple(b[i][offs[i]:] for i in range(3)) for b in bufs]
    a0, b0, c0 = views[0]
    chosen, pinned = sgblas.Handle(stream=stream), sgblas.Handle(stream=stream)
    ex = sgblas.explain(chosen, ta, tb, m, n, k, a0, lda, b0, ldb, c0, ldc)
    plan_for(pinned, ta, tb, m, n, k, True, a0.data.ptr, lda, b0.data.ptr, ldb, c0.data.ptr, ldc,
             pin=by_name(ex.kernel))

    def theirs(i):
        a, b, cc = views[i % sets]
        cublas_gemm(ta, tb, m, n, k, a, lda, b, ldb, cc, ldc)

    def ours(h):
        def call(i):
            a, b, cc = views[i % sets]
            assert sgblas.sgemm(h, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, cc, ldc) == sgblas.Status.SUCCESS
        return call

    reps = max(2, min(100, int(0.05 / tbatch(theirs, 1))))
    t = {"tail": [], "one": [], "cublas": []}
    for _ in range(5):
        t["cublas"].append(tbatch(theirs, reps))
        t["tail"].append(tbatch(ours(chosen), reps))
        t["cublas"].append(tbatch(theirs, reps))
        t["one"].append(tbatch(ours(pinned), reps))
    med = {w: float(np.median(v)) * 1e6 for w, v in t.items()}
    print(f"{pair} {m}x{n}x{k} pad {pad} offs {offs} ({sets} sets, {reps} reps): {ex.kernel} tail "
          f"{[(r[2], r[3], r[4]) for r in ex.tail]}: chosen {med['tail']:.1f} us ({med['cublas'] / med['tail']:.3f}), "
          f"one launch {med['one']:.1f} us ({med['cublas'] / med['one']:.3f}), cuBLAS {med['cublas']:.1f} us",
          flush=True)
    chosen.close()
    pinned.close()
    del bufs, views
    cp.get_default_memory_pool().free_all_blocks()
sys.exit(0)
