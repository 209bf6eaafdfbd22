"""Run S: the packing copy's rate, and a packed call's parts. python copy_lab.py

1. The copy kernel of ``sgblas.kernels.pack_jit`` compiled here by Numba with 4, 8 and 16 rows
   a thread (its module constants set before each compile), on the copies a 2048^3 TN call with
   every leading dimension 2049 makes (A: 2048 x 2048 stored with lda 2049, likewise B), from
   rotating sources (6 sets, 100 MB each) into one destination, batches between CUDA events;
   rate = bytes read + written over the time, beside a 1 GiB CuPy copy in the same process.
   And both copies in one launch (a fused form, written here).
2. The packed plan of that call as sgblas makes it (``choose`` + ``make_plan``): the whole call,
   the two copies alone, and the GEMM alone on the copies left by the last call."""
import statistics

import cupy as cp
import numpy as np
from numba import cuda

import sgblas
from sgblas.dispatch import plan as plans
from sgblas.dispatch.plan import choose, make_plan
from sgblas.kernels import pack, pack_jit
from sgblas.kernels.problem import GemmProblem
from sgblas.runtime import driver
from sgblas.runtime.launch import launch


def batch(fn, reps=50):
    fn(0)
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for i in range(reps):
        fn(i)
    b.record()
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) * 1e-3 / reps


src = cp.ones(1 << 28, dtype=cp.float32)
dst = cp.empty_like(src)
rate = 2 * src.nbytes / statistics.median(batch(lambda i: dst.__setitem__(Ellipsis, src), 5) for _ in range(5))
del src, dst
print(f"copy: {rate / 1e12:.2f} TB/s (read + write), 1 GiB", flush=True)
m = n = k = 2048
ld = 2049
SETS = 6
rng = cp.random.default_rng(3)
srcs = [rng.standard_normal((m - 1) * ld + k, dtype=cp.float32) for _ in range(2 * SETS)]
ldd = pack.packed_rows(k)
dsts = [cp.empty(ldd * m, cp.float32) for _ in range(2)]
nbytes = 2 * 4 * ((m - 1) * ld + k + ldd * m)  # two copies, read + written
for per in (4, 8, 16):
    pack_jit.PER_THREAD, pack_jit.ROWS_PER_CTA = per, per * pack.THREADS
    kern = cuda.jit(pack_jit.build(False))
    grid = (-(-ldd // (per * pack.THREADS)), m, 1)

    def two(i):
        for j in range(2):
            kern[grid, pack.THREADS](k, m, srcs[(2 * i + j) % len(srcs)], ld, dsts[j], ldd)

    two(0)
    cuda.synchronize()
    full = cp.concatenate([srcs[1], cp.zeros(ld - k, cp.float32)]).reshape(m, ld)[:, :k]
    assert cp.array_equal(dsts[1].reshape(m, ldd)[:, :k], full), per
    t = statistics.median(batch(two, 20) for _ in range(5))
    print(f"{per} rows a thread, grid {grid}: two copies {t * 1e6:.1f} us = {nbytes / t / 1e12:.2f} TB/s "
          f"({nbytes / t / rate:.0%} of the copy rate)", flush=True)

# Both copies in one launch (blockIdx.z picks the operand), 8 rows a thread: what a fused form
# of the copy kernel would save (a launch, and one grid's tail).
from numba import float32, uint32, uint64  # noqa: E402


@cuda.jit
def fused(rows, cols, A, lda, DA, B, ldb, DB, ldd):
    per, threads = 8, 256
    z = cuda.blockIdx.z
    r0 = uint32(uint32(cuda.blockIdx.x) * uint32(per * threads) + uint32(cuda.threadIdx.x))
    col = uint32(cuda.blockIdx.y)
    while col < uint32(cols):
        ld = uint64(uint32(lda if z == 0 else ldb))
        src = uint64(col) * ld
        dst = uint64(col) * uint64(uint32(ldd))
        v = cuda.local.array(8, float32)
        for j in range(per):
            r = uint32(r0 + uint32(j * threads))
            v[j] = (A[src + r] if z == 0 else B[src + r]) if r < uint32(rows) else float32(0)
        for j in range(per):
            r = uint32(r0 + uint32(j * threads))
            if r < uint32(ldd):
                if z == 0:
                    DA[dst + r] = v[j]
                else:
                    DB[dst + r] = v[j]
        col = uint32(col + cuda.gridDim.y)


def both(i):
    fused[(-(-ldd // 2048), m, 2), 256](k, m, srcs[(2 * i) % len(srcs)], ld, dsts[0], srcs[(2 * i + 1) % len(srcs)],
                                        ld, dsts[1], ldd)


try:
    both(0)
    cuda.synchronize()
    full = cp.concatenate([srcs[1], cp.zeros(ld - k, cp.float32)]).reshape(m, ld)[:, :k]
    assert cp.array_equal(dsts[1].reshape(m, ldd)[:, :k], full)
    t = statistics.median(batch(both, 20) for _ in range(5))
    print(f"fused, 8 rows a thread: two copies in one launch {t * 1e6:.1f} us = {nbytes / t / 1e12:.2f} TB/s "
          f"({nbytes / t / rate:.0%} of the copy rate)", flush=True)
except Exception as exc:  # the lab's own kernel: report and go on to the plan's parts
    print(f"fused: failed: {type(exc).__name__}: {exc}", flush=True)

h = sgblas.Handle()
stream0 = driver.as_pointer(0)
C = cp.empty((n - 1) * ld + m, cp.float32)
p = GemmProblem(h.cc, h.math_mode, "T", "N", m, n, k, srcs[0].data.ptr, ld, srcs[1].data.ptr, ld, C.data.ptr, ld)
ch = choose(p, h.properties, h.workspace_bytes)
plan = make_plan(h, ch.spec, ch.split, m, n, k, C.data.ptr, ld)
print(f"plan: {ch.spec.name}, copies {plan.copies}", flush=True)
ext = (m - 1) * ld + k


def call(i):
    a, b = srcs[(2 * i) % len(srcs)], srcs[(2 * i + 1) % len(srcs)]
    plans.execute(h, plan, m, n, k, 1.0, a.data.ptr, ext, ld, b.data.ptr, ext, ld, 0.0, C.data.ptr, C.size, ld)


(ra, ca, la, ga), (rb, cb, lb, gb) = plan.copies
wa = h.workspace_ptr
wb = wa + 4 * la * ca


def copies(i):
    a, b = srcs[(2 * i) % len(srcs)], srcs[(2 * i + 1) % len(srcs)]
    launch(plan.pack, ga, stream0, (ra, ca, a.data.ptr, ext, ld, wa, la * ca, la), plan.after)
    launch(plan.pack, gb, stream0, (rb, cb, b.data.ptr, ext, ld, wb, lb * cb, lb), plan.after)


def gemm(i):
    launch(plan.kernel, plan.grid, stream0, (m, n, k, 1.0, wa, la * ca, la, wb, lb * cb, lb, 0.0, C.data.ptr, C.size,
                                            ld), plan.after)


for name, fn in (("call", call), ("copies", copies), ("gemm", gemm)):
    t = statistics.median(batch(fn, 20) for _ in range(5))
    extra = f" = {nbytes / t / 1e12:.2f} TB/s" if name == "copies" else ""
    print(f"packed plan, {name}: {t * 1e6:.1f} us{extra}", flush=True)
