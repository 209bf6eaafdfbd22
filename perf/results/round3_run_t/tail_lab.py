"""Run T: would a tail plan pay? python tail_lab.py

For each case the API's call (``sgblas.sgemm``, its own plan) and a composed call against cuBLAS
PEDANTIC on one stream: the same plan's tile kernel launched over the CTAs of its whole waves
only (``sgblas.dispatch.waves.tail_of``), then ``sgblas.sgemm`` on each rectangle of C that
leaves out, as views of the same arrays (those sub-problems have few tiles, so the API splits
their K). The three alternate in batches between CUDA events over rotating operand sets (at
least 4x the L2), 5 rounds, median. 16-byte aligned operands: the slice kernels that split K
are 16-byte ones. Printed: the kernels, the times, the ratios (cuBLAS's time over the call's)
and the composed result's relative difference from cuBLAS's."""
import math

import cupy as cp
import numpy as np

import sgblas
from lab_common import L2, cublas_gemm, stream, tbatch
from sgblas.dispatch.heuristic import slots
from sgblas.dispatch.plan import plan_for
from sgblas.dispatch.waves import tail_of
from sgblas.runtime.launch import launch

CASES = [("NN", 5000, 5000, 5000), ("NT", 5000, 5000, 5000), ("TN", 5000, 5000, 5000), ("TT", 5000, 5000, 5000),
         ("TN", 3000, 3000, 3000), ("NN", 3000, 3000, 3000), ("NN", 6000, 6000, 6000), ("TN", 6000, 6000, 6000),
         ("NN", 7000, 7000, 7000), ("NN", 2600, 2600, 2600), ("TN", 2600, 2600, 2600), ("NN", 5800, 5800, 5800),
         ("TT", 2900, 2900, 2900), ("NN", 4096, 4096, 4096), ("NN", 8192, 8192, 8192), ("TN", 8192, 8192, 8192),
         ("NN", 4096, 4096, 1024), ("NT", 6000, 6000, 1024)]
h = sgblas.Handle(stream=stream)
raw = h._stream[2]


rng = cp.random.default_rng(12)
print("imported", flush=True)
for pair, m, n, k in CASES:
    ta, tb = pair
    lda, ldb, ldc = (m if ta == "N" else k), (k if tb == "N" else n), m
    ext = (lda * (k if ta == "N" else m), ldb * (n if tb == "N" else k), ldc * n)
    sets = max(1, math.ceil(4 * L2 / (4 * sum(ext))))
    with stream:
        views = [tuple(rng.standard_normal(e, dtype=cp.float32) for e in ext) for _ in range(sets)]
    stream.use()
    a0, b0, c0 = views[0]
    plan = plan_for(h, ta, tb, m, n, k, True, a0.data.ptr, lda, b0.data.ptr, ldb, c0.data.ptr, ldc)
    spec = plan.spec
    if plan.role != "gemm" or plan.splits != 1:
        print(f"{pair} {m}x{n}x{k}: {spec.name} splits or packs; no tail plan", flush=True)
        continue
    s = slots(spec, h.properties)
    tail = tail_of(m, n, spec.tile[0], spec.tile[1], spec.config.group_m, s)
    if tail is None:
        print(f"{pair} {m}x{n}x{k}: whole waves, no tail", flush=True)
        continue
    total = plan.grid[0]
    subs = []
    for r0, c0_, rr, cc in tail.rects:
        aoff = r0 if ta == "N" else r0 * lda
        boff = c0_ * ldb if tb == "N" else c0_
        subs.append((rr, cc, aoff, boff, r0 + c0_ * ldc))

    def theirs(i, c=None):
        a, b, cc = views[i % sets]
        cublas_gemm(ta, tb, m, n, k, a, lda, b, ldb, cc if c is None else c, ldc)

    def ours(i):
        a, b, cc = views[i % sets]
        assert sgblas.sgemm(h, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, cc, ldc) == sgblas.Status.SUCCESS

    def composed(i, c=None):
        a, b, cc = views[i % sets]
        cc = cc if c is None else c
        launch(plan.kernel, (tail.ctas, 1, 1), raw, (m, n, k, 1.0, a.data.ptr, a.size, lda, b.data.ptr, b.size,
                                                     ldb, 0.0, cc.data.ptr, cc.size, ldc), plan.after)
        for rr, ncols, aoff, boff, coff in subs:
            st = sgblas.sgemm(h, ta, tb, rr, ncols, k, 1.0, a[aoff:], lda, b[boff:], ldb, 0.0, cc[coff:], ldc)
            assert st == sgblas.Status.SUCCESS, st

    ref = cp.empty_like(c0)
    got = cp.full_like(c0, cp.nan)
    theirs(0, ref)
    composed(0, got)
    stream.synchronize()
    rel = float(cp.linalg.norm(got - ref) / cp.linalg.norm(ref))
    names = [sgblas.explain(h, ta, tb, rr, cc, k, a0[ao:], lda, b0[bo:], ldb, c0[co:], ldc).kernel
             for rr, cc, ao, bo, co in subs]
    reps = max(2, min(100, int(0.05 / tbatch(theirs, 1))))
    t = {"api": [], "composed": [], "cublas": []}
    for _ in range(5):
        t["cublas"].append(tbatch(theirs, reps))
        t["api"].append(tbatch(ours, reps))
        t["cublas"].append(tbatch(theirs, reps))
        t["composed"].append(tbatch(composed, reps))
    med = {w: float(np.median(v)) * 1e6 for w, v in t.items()}
    print(f"{pair} {m}x{n}x{k} ({sets} sets, {reps} reps): {spec.name} {total} CTAs on {s} slots "
          f"({total / s:.2f} waves); tail plan {tail.ctas} CTAs + {[(r[2], r[3]) for r in tail.rects]} by {names}: "
          f"api {med['api']:.1f} us ({med['cublas'] / med['api']:.3f}), composed {med['composed']:.1f} us "
          f"({med['cublas'] / med['composed']:.3f}), cuBLAS {med['cublas']:.1f} us; difference {rel:.1e}", flush=True)
    del views, ref, got
    cp.get_default_memory_pool().free_all_blocks()
