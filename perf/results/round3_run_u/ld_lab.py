"""Run U: TN's 4-byte rows at leading dimensions one below a power of two, pinned, through the
API against cuBLAS PEDANTIC in the same process. python ld_lab.py [MxNxK:PAD ...]

TN 8191^3 with tight leading dimensions (8191) ran 0.84-0.85 in run T on the 4-lane 128x128
row, which rung 36's rule (``heuristic.eight_lanes_pay``) takes at every leading dimension that
is neither a multiple of 32 nor one past a power of two. One past (4097, 8193) went with the
multiples of 32. Does one below? Each legal TN row (split-K, skinny and general rows left out;
the packed row on a handle whose workspace holds its copies) is pinned on its own handle
(``plan_for(..., pin=)``) and timed as run S's tile_lab.py timed: batches between CUDA events on
the call's stream, rotating operand sets (at least 4x the L2), 5 rounds, median, alternating
with cuBLAS (``lab_common.alternate`` and ``lab_common.pinned_handle`` took this loop and the
pinning over after call 1: the same calls, in the same order). Each case: leading dimensions = stored rows + PAD, pointers not offset."""
import math
import os
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "round3_run_t"))
from lab_common import L2, alternate, cublas_gemm, pinned_handle, stream  # noqa: E402

import sgblas  # noqa: E402
from sgblas.kernels.problem import GemmProblem  # noqa: E402
from sgblas.kernels.spec import GEMM_KERNELS  # noqa: E402

CASES = sys.argv[1:] or ["8191x8191x8191:0", "4095x4095x4095:0", "2047x2047x2047:0", "6143x6143x6143:0",
                         "8190x8190x8190:1"]
ta, tb = "T", "N"
rng = np.random.default_rng(21)
print(f"imported; seed 21; cases {CASES}", flush=True)
for case in CASES:
    dims, pad = case.split(":")
    m, n, k = map(int, dims.split("x"))
    pad = int(pad)
    lda, ldb, ldc = k + pad, k + pad, m + pad
    ext = ((m - 1) * lda + k, (n - 1) * ldb + k, (n - 1) * ldc + m)
    sets = max(1, math.ceil(4 * L2 / (4 * sum(ext))))
    bufs = [tuple(cp.asarray(rng.standard_normal(e, dtype=np.float32)) for e in ext) for _ in range(sets)]
    stream.use()
    c_ref = cp.empty_like(bufs[0][2])
    cublas_gemm(ta, tb, m, n, k, bufs[0][0], lda, bufs[0][1], ldb, c_ref, ldc)
    ptrs = [v.data.ptr for v in bufs[0]]
    base = sgblas.Handle(stream=stream)
    heur = sgblas.explain(base, ta, tb, m, n, k, bufs[0][0], lda, bufs[0][1], ldb, bufs[0][2], ldc).kernel
    p = GemmProblem(base.cc, base.math_mode, ta, tb, m, n, k, ptrs[0], lda, ptrs[1], ldb, ptrs[2], ldc)
    rows = [s for s in GEMM_KERNELS if s.role in ("gemm", "packed") and not s.name.startswith("sgemm_general_")
            and s.can_implement(p) is None]
    print(f"TN {m}x{n}x{k} ld +{pad} ({sets} sets): heuristic {heur}", flush=True)

    def theirs(i):
        a, b, c = bufs[i % sets]
        cublas_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc)

    for spec in rows:
        h = pinned_handle(spec, ta, tb, m, n, k, ptrs, lda, ldb, ldc)
        if h is None:
            print(f"  {spec.name}: not pinnable", flush=True)
            continue

        def ours(i, h=h):
            a, b, c = bufs[i % sets]
            assert sgblas.sgemm(h, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc) == sgblas.Status.SUCCESS

        ours(0)
        stream.synchronize()
        rel = float(cp.linalg.norm(bufs[0][2] - c_ref) / cp.linalg.norm(c_ref))
        t_cublas, t_ours = alternate(theirs, ours)
        print(f"  {spec.name}: {t_ours * 1e6:.1f} us, cuBLAS {t_cublas * 1e6:.1f} us, ratio "
              f"{t_cublas / t_ours:.3f} (difference from cuBLAS {rel:.1e})", flush=True)
        h.close()
    base.close()
    del bufs, c_ref
    cp.get_default_memory_pool().free_all_blocks()
