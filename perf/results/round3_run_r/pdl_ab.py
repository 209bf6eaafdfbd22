"""Run R: a call as this tree plans it on sm_90 (every launch with programmatic stream
serialization, each kernel waiting for the grid ahead itself) against the same plan launched
plainly by ``cuLaunchKernel`` (``Plan.after`` False), in one process, on the same buffers,
alternating. python pdl_ab.py [--quick].

For each shape and pair the dispatcher plans the call (variant, splits); "plain" runs the plan
with ``after=False``; "pdl" runs it as made; "kernel" launches only its first kernel, plainly
(for a split call, what the reduction costs is the rest). Time per call: the median over 9 rounds of a batch of 20 calls between CUDA events,
and, as ``perf.accuracy`` times, the median of 100 single calls each between its own events
("single"). Skinny rates are the GEMM's bytes (A, B, C once) over the time, as shares of a
device-to-device copy measured in the same process; the others are ratios of time.
"bits equal": C of plain and pdl, beta = 0 on a NaN C and beta = 0.5 on the same C."""
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

QUICK = "--quick" in sys.argv
SKINNY = ((16, 16384, 4096), (16384, 16, 4096), (3, 8192, 8192), (8192, 3, 8192))
LONG = ((128, 8192, 8192), (8192, 128, 8192), (1000, 1000, 100000), (512, 512, 65536), (1024, 1024, 1024),
        (1536, 1536, 1536))
UNSPLIT = ((64, 64, 64), (256, 256, 256), (4096, 4096, 64), (5000, 3000, 1000), (2048, 2048, 2048))
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
print(f"programmatic launch: {h.properties.programmatic_launch}; driver {driver.driver_version()}", flush=True)
src = cp.ones(1 << 28, dtype=cp.float32)
dst = cp.empty_like(src)
for _ in range(3):
    dst[...] = src
copy = 2 * src.nbytes / float(np.median([batch(lambda: dst.__setitem__(Ellipsis, src), 5) for _ in range(5)]))
del src, dst
print(f"copy: {copy / 1e12:.2f} TB/s (read + write)", flush=True)
rng = cp.random.default_rng(23)
cases = ([(s, p) for s in SKINNY for p in ("NN", "NT", "TN", "TT")] + [(s, p) for s in LONG for p in ("NN", "TN")]
         + [(s, p) for s in UNSPLIT for p in ("NN", "TN")])
if QUICK:
    cases = [((16, 16384, 4096), "NN"), ((16384, 16, 4096), "TT"), ((3, 8192, 8192), "NN"), ((128, 8192, 8192), "NN"),
             ((256, 256, 256), "NN")]
for (m, n, k), pair in cases:
    ta, tb = pair
    ar, ac = (m, k) if ta == "N" else (k, m)
    br, bc = (k, n) if tb == "N" else (n, k)
    A = cp.asfortranarray(rng.standard_normal((ar, ac), dtype=cp.float32))
    B = cp.asfortranarray(rng.standard_normal((br, bc), dtype=cp.float32))
    C0 = cp.asfortranarray(rng.standard_normal((m, n), dtype=cp.float32))
    C = cp.empty((m, n), dtype=cp.float32, order="F")
    p = GemmProblem(h.cc, h.math_mode, ta, tb, m, n, k, A.data.ptr, ar, B.data.ptr, br, C.data.ptr, m)
    ch = choose(p, h.properties, h.workspace_bytes)
    pdl = make_plan(h, ch.spec, ch.split, m, n, k, C.data.ptr, m)
    plain = pdl._replace(after=False)
    splits = pdl.splits

    def run(plan, beta=0.0):
        plans.execute(h, plan, m, n, k, 1.0, A.data.ptr, A.size, ar, B.data.ptr, B.size, br, beta,
                      C.data.ptr, C.size, m)

    def kernel_only():
        if splits > 1:
            launch(pdl.kernel, pdl.grid, stream0, (m, n, k, 1.0, A.data.ptr, A.size, ar, B.data.ptr, B.size, br,
                                                  0.0, h.workspace_ptr, splits * pdl.ldw * n, pdl.ldw, pdl.k_chunk))
        else:
            run(plain)

    same = True
    for beta in (0.0, 0.5):
        outs = []
        for plan in (plain, pdl):
            if beta == 0.0:
                C.fill(cp.nan)
            else:
                C[...] = C0
            run(plan, beta)
            cp.cuda.runtime.deviceSynchronize()
            outs.append(cp.asnumpy(C).view(np.uint32))
        same = same and np.array_equal(outs[0], outs[1])
    fns = {"plain": lambda: run(plain), "pdl": lambda: run(pdl), "kernel": kernel_only}
    ts = {who: [] for who in fns}
    singles = {who: [] for who in ("plain", "pdl")}
    for r in range(9):
        for who, fn in fns.items():
            ts[who].append(batch(fn))
        if r % 3 == 0:
            for who in singles:
                singles[who].append(single(fns[who]))
    nbytes = 4 * (m * k + k * n + m * n)
    skinny = ch.spec.role == "skinny"
    line = f"{m}x{n}x{k} {pair} {ch.spec.name} ({splits} splits, bits equal: {same}):"
    med = {who: float(np.median(v)) for who, v in ts.items()}
    for who, t in med.items():
        line += f" {who} {t * 1e6:.1f} us" + (f" = {nbytes / t / copy:.1%}" if skinny else "") + ";"
    for who, v in singles.items():
        t = float(np.median(v))
        line += f" single {who} {t * 1e6:.1f} us" + (f" = {nbytes / t / copy:.1%}" if skinny else "") + ";"
    line += f" pdl/plain time {med['pdl'] / med['plain']:.3f}"
    print(line, flush=True)
    del A, B, C, C0
    cp.get_default_memory_pool().free_all_blocks()
