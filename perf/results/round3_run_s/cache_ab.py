"""Run S: the skinny kernels of one kernel cache (SGBLAS_CACHE_DIR), timed in a process of
their own; call.sh alternates processes of the tree before a change and after it (part
``cab``). python cache_ab.py LABEL.

For each case the dispatcher plans the call as sgblas does. "call": the whole call (kernel and,
for a split, the reduction); "kernel": its first kernel alone. Time: the median over 15 rounds
of a batch of 20 launches between CUDA events; "single": the median of 100 calls each between
its own events, as ``perf.accuracy`` times. Rates are the GEMM's bytes (A, B, C once) over the
time, as shares of a device-to-device copy measured in the same process. "bits": a digest of C
for beta = 0 on a NaN C and beta = 0.5 on fixed data (seed 23), to compare across processes."""
import hashlib
import statistics
import sys

import cupy as cp
import numpy as np

import sgblas
from sgblas.dispatch import plan as plans
from sgblas.dispatch.plan import choose, make_plan
from sgblas.kernels.problem import GemmProblem
from sgblas.runtime import driver
from sgblas.runtime.launch import launch

LABEL = sys.argv[1] if len(sys.argv) > 1 else "?"
CASES = (((16, 16384, 4096), "NN"), ((3, 8192, 8192), "NN"), ((16384, 16, 4096), "TT"), ((8192, 3, 8192), "TT"),
         ((16, 16384, 4096), "TN"), ((16, 16384, 4096), "TT"))
stream0 = driver.as_pointer(0)


def batch(fn, reps=20):
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) * 1e-3 / reps


def single(fn, reps=100):
    events = [cp.cuda.Event() for _ in range(reps + 1)]
    events[0].record()
    for i in range(reps):
        fn()
        events[i + 1].record()
    events[-1].synchronize()
    return statistics.median(cp.cuda.get_elapsed_time(events[i], events[i + 1]) * 1e-3 for i in range(reps))


h = sgblas.Handle()
src = cp.ones(1 << 28, dtype=cp.float32)
dst = cp.empty_like(src)
for _ in range(3):
    dst[...] = src
copy = 2 * src.nbytes / float(np.median([batch(lambda: dst.__setitem__(Ellipsis, src), 5) for _ in range(5)]))
del src, dst
print(f"[{LABEL}] copy: {copy / 1e12:.2f} TB/s (read + write)", flush=True)
for (m, n, k), pair in CASES:
    rng = cp.random.default_rng(23)
    ta, tb = pair
    ar, ac = (m, k) if ta == "N" else (k, m)
    br, bc = (k, n) if tb == "N" else (n, k)
    A = cp.asfortranarray(rng.standard_normal((ar, ac), dtype=cp.float32))
    B = cp.asfortranarray(rng.standard_normal((br, bc), dtype=cp.float32))
    C0 = cp.asfortranarray(rng.standard_normal((m, n), dtype=cp.float32))
    C = cp.empty((m, n), dtype=cp.float32, order="F")
    p = GemmProblem(h.cc, h.math_mode, ta, tb, m, n, k, A.data.ptr, ar, B.data.ptr, br, C.data.ptr, m)
    ch = choose(p, h.properties, h.workspace_bytes)
    plan = make_plan(h, ch.spec, ch.split, m, n, k, C.data.ptr, m)
    splits = plan.splits

    def run(beta=0.0):
        plans.execute(h, plan, m, n, k, 1.0, A.data.ptr, A.size, ar, B.data.ptr, B.size, br, beta,
                      C.data.ptr, C.size, m)

    def kernel_only():
        if splits > 1:
            launch(plan.kernel, plan.grid, stream0, (m, n, k, 1.0, A.data.ptr, A.size, ar, B.data.ptr, B.size, br,
                                                    0.0, h.workspace_ptr, splits * plan.ldw * n, plan.ldw, plan.k_chunk))
        else:
            run()

    digest = hashlib.sha256()
    for beta in (0.0, 0.5):
        if beta == 0.0:
            C.fill(cp.nan)
        else:
            C[...] = C0
        run(beta)
        cp.cuda.runtime.deviceSynchronize()
        digest.update(cp.asnumpy(C).tobytes())
    ts = {"call": [], "kernel": []}
    singles = []
    for r in range(15):
        ts["call"].append(batch(run))
        ts["kernel"].append(batch(kernel_only))
        if r % 5 == 0:
            singles.append(single(run))
    nbytes = 4 * (m * k + k * n + m * n)
    line = f"[{LABEL}] {m}x{n}x{k} {pair} {ch.spec.name} ({splits} splits) bits {digest.hexdigest()[:16]}:"
    for who, v in ts.items():
        t = float(np.median(v))
        line += f" {who} {t * 1e6:.1f} us = {nbytes / t / copy:.1%};"
    t = float(np.median(singles))
    line += f" single {t * 1e6:.1f} us = {nbytes / t / copy:.1%}"
    print(line, flush=True)
    del A, B, C, C0
    cp.get_default_memory_pool().free_all_blocks()
