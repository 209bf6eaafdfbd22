"""Run Q: a skinny call that splits K as this tree plans it (one launch where the tiles' last
CTAs add the partials, else the kernel and the fixed-order reduction) against the baseline's
two launches (the baseline tree's skinny kernel, then the reduction), in one process on the
same buffers, alternating. python fused_ab.py OLD_CACHE_DIR.

For each skinny shape and pair: the plan the dispatcher makes here (variant, splits, k_chunk);
"old" launches the baseline's cubin of that variant (ABI GEMM_SPLIT, partials into a workspace
buffer) and then the reduction kernel over them, as the baseline's plan did; "new" launches
this tree's kernel through the same plan (plan.execute); "api" is sgblas.sgemm. Time per call:
the median over 7 rounds of a batch of 20 between CUDA events. The large operand (256 MiB)
is read from memory, not L2, in every call. Rates are the GEMM's bytes (A, B, C once) over the
time, as shares of a device-to-device copy measured in the same process. "bits equal" compares
C of old and new, beta = 0 on a NaN C and beta = 0.5 on the same C."""
import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

import sgblas
from sgblas.dispatch import plan as plans
from sgblas.dispatch.plan import choose, make_plan
from sgblas.kernels import abi, reduce
from sgblas.kernels.problem import GemmProblem
from sgblas.runtime import driver
from sgblas.runtime.launch import LoadedKernel, launch

old_dir = Path(sys.argv[1])
SHAPES = ((16, 16384, 4096), (16384, 16, 4096), (3, 8192, 8192), (8192, 3, 8192))
PAIRS = ("NN", "NT", "TN", "TT")
stream0 = driver.as_pointer(0)


def batch(fn, reps=20):
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) * 1e-3 / reps


def old_kernel(spec):
    f = next(old_dir.glob(f"{spec.name}.sm_90.*.cubin"))
    head, _, cubin = f.read_bytes().partition(b"\n")
    fn = driver.library_kernel(driver.library_load(cubin), json.loads(head)["entry_name"])
    return LoadedKernel(spec.name, abi.GEMM_SPLIT, spec.block, fn, driver.as_pointer(fn), None)


h = sgblas.Handle()
src = cp.ones(1 << 28, dtype=cp.float32)
dst = cp.empty_like(src)
for _ in range(3):
    dst[...] = src
copy = 2 * src.nbytes / float(np.median([batch(lambda: dst.__setitem__(Ellipsis, src), 5) for _ in range(5)]))
del src, dst
print(f"copy: {copy / 1e12:.2f} TB/s (read + write)", flush=True)
red = h._kernels[reduce.NAME]
rng = cp.random.default_rng(17)
for (m, n, k) in SHAPES:
    for pair in PAIRS:
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
        old = old_kernel(ch.spec)
        W = cp.empty(max(1, plan.splits * plan.ldw * n), dtype=cp.float32)
        c_vec = int(C.data.ptr % 16 == 0 and m % 4 == 0)

        def run_old(beta):
            if plan.splits > 1:
                launch(old, plan.grid, stream0, (m, n, k, 1.0, A.data.ptr, A.size, ar, B.data.ptr, B.size, br,
                                                 0.0, W.data.ptr, W.size, plan.ldw, plan.k_chunk))
                launch(red, reduce.grid(m, n), stream0, (m, n, plan.splits, W.data.ptr, W.size, plan.ldw, beta,
                                                        C.data.ptr, C.size, m, c_vec))
            else:
                launch(old, plan.grid, stream0, (m, n, k, 1.0, A.data.ptr, A.size, ar, B.data.ptr, B.size, br,
                                                 beta, C.data.ptr, C.size, m, plan.k_chunk))

        def run_new(beta):
            plans.execute(h, plan, m, n, k, 1.0, A.data.ptr, A.size, ar, B.data.ptr, B.size, br, beta,
                          C.data.ptr, C.size, m)

        def run_api(beta):
            sgblas.sgemm(h, ta, tb, m, n, k, 1.0, A, ar, B, br, beta, C, m)

        same = True
        for beta in (0.0, 0.5):
            outs = []
            for fn in (run_old, run_new, run_api):
                if beta == 0.0:
                    C.fill(cp.nan)
                else:
                    C[...] = C0
                fn(beta)
                cp.cuda.runtime.deviceSynchronize()
                outs.append(cp.asnumpy(C).view(np.uint32))
            same = same and np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
        ts = {"old": [], "new": [], "api": []}
        fns = {"old": run_old, "new": run_new, "api": run_api}
        for _ in range(7):
            for who, fn in fns.items():
                ts[who].append(batch(lambda: fn(0.0)))
        nbytes = 4 * (m * k + k * n + m * n)
        launches = "one launch" if plan.reduce is None else "two launches"
        line = f"{m}x{n}x{k} {pair} {ch.spec.name} ({plan.splits} splits, new: {launches}, bits equal: {same}):"
        for who in fns:
            t = float(np.median(ts[who]))
            line += f" {who} {t * 1e6:.1f} us = {nbytes / t / copy:.1%};"
        print(line, flush=True)
        del A, B, C, C0, W
        cp.get_default_memory_pool().free_all_blocks()
