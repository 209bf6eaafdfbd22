"""Run O: the skinny kernels (axpy and dot loops) of this checkout against another tree's (their cubins from
that tree's cache), in one process on the same buffers, alternating, so that no process-to-
process difference (run O's bandwidth runs moved 59% <-> 77% between processes) enters the
comparison. python skinny_ab.py OLD_CACHE_DIR. Each variant is launched as dispatch plans it
(grid, splits, k_chunk, workspace leading dimension), with the partials into a buffer of this
script; time per launch = the median over 7 rounds of a batch of 20 between CUDA events;
the fixed-order reduction of both trees likewise, on the new kernel's partials. "bits equal"
compares the outputs with NaN padding rows of the workspace counted as equal. Rates are the GEMM's bytes (A, B, C once)
over the time, as shares of a device-to-device copy measured in the same process."""
import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

import sgblas
from sgblas.dispatch.plan import choose, make_plan
from sgblas.kernels.problem import GemmProblem
from sgblas.runtime import driver
from sgblas.runtime.launch import LoadedKernel, launch

old_dir = Path(sys.argv[1])
CASES = [(pair, m, n, k) for (m, n, k), pairs in (((16, 16384, 4096), "NT TT NN TN"), ((16384, 16, 4096), "NN NT TN TT"),
                                                  ((3, 8192, 8192), "NT TT NN TN"), ((8192, 3, 8192), "NN NT TN TT"))
         for pair in pairs.split()]
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
    return old_named(spec.name, spec)


def old_named(name, spec):
    f = next(old_dir.glob(f"{name}.sm_90.*.cubin"))
    head, _, cubin = f.read_bytes().partition(b"\n")
    fn = driver.library_kernel(driver.library_load(cubin), json.loads(head)["entry_name"])
    return LoadedKernel(spec.name, spec.abi, spec.block, fn, driver.as_pointer(fn), None)


h = sgblas.Handle()
src = cp.ones(1 << 28, dtype=cp.float32)
dst = cp.empty_like(src)
for _ in range(3):
    dst[...] = src
copy = 2 * src.nbytes / float(np.median([batch(lambda: dst.__setitem__(Ellipsis, src), 5) for _ in range(5)]))
del src, dst
print(f"copy: {copy / 1e12:.2f} TB/s (read + write)", flush=True)
rng = cp.random.default_rng(11)
for pair, m, n, k in CASES:
    ta, tb = pair
    ar, ac = (m, k) if ta == "N" else (k, m)
    br, bc = (k, n) if tb == "N" else (n, k)
    A = cp.asfortranarray(rng.standard_normal((ar, ac), dtype=cp.float32))
    B = cp.asfortranarray(rng.standard_normal((br, bc), dtype=cp.float32))
    C = cp.zeros((m, n), dtype=cp.float32, order="F")
    p = GemmProblem(h.cc, h.math_mode, ta, tb, m, n, k, A.data.ptr, ar, B.data.ptr, br, C.data.ptr, m)
    ch = choose(p, h.properties, h.workspace_bytes)
    plan = make_plan(h, ch.spec, ch.split, m, n, k, C.data.ptr, m)
    W = cp.zeros(max(plan.splits * plan.ldw * n, m * n), dtype=cp.float32)
    if plan.splits > 1:
        wp, ldw, beta = W.data.ptr, plan.ldw, 0.0
    else:
        wp, ldw, beta = C.data.ptr, m, 0.0
    args = (m, n, k, 1.0, A.data.ptr, A.size, ar, B.data.ptr, B.size, br, beta, wp, W.size if plan.splits > 1 else C.size,
            ldw, plan.k_chunk)
    kernels = {"new": plan.kernel, "old": old_kernel(ch.spec)}
    outs = {}
    for who, kern in kernels.items():
        W.fill(cp.nan)
        launch(kern, plan.grid, stream0, args)
        cp.cuda.runtime.deviceSynchronize()
        outs[who] = cp.asnumpy(W if plan.splits > 1 else C)
    same = np.array_equal(outs["new"], outs["old"], equal_nan=True)
    ts = {w: [] for w in kernels}
    for _ in range(7):
        for who, kern in kernels.items():
            ts[who].append(batch(lambda: launch(kern, plan.grid, stream0, args)))
    t_red = {}
    if plan.splits > 1:
        from sgblas.kernels.spec import by_name
        red_spec = by_name(plan.reduce.name)
        reds = {"new": plan.reduce, "old": old_named(red_spec.name, red_spec)}
        red_args = (m, n, plan.splits, W.data.ptr, W.size, plan.ldw, 0.0, C.data.ptr, C.size, m, plan.c_vec)
        launch(plan.kernel, plan.grid, stream0, args)
        red_out = {}
        for who, kern in reds.items():
            C.fill(cp.nan)
            launch(kern, plan.reduce_grid, stream0, red_args)
            red_out[who] = cp.asnumpy(C)
        t_red = {w: [] for w in reds}
        for _ in range(5):
            for who, kern in reds.items():
                t_red[who].append(batch(lambda: launch(kern, plan.reduce_grid, stream0, red_args)))
        t_red = {w: float(np.median(v)) for w, v in t_red.items()}
        t_red["same"] = np.array_equal(red_out["new"], red_out["old"])
    nbytes = 4 * (m * k + k * n + m * n)
    line = f"{m}x{n}x{k} {pair} {ch.spec.name} ({plan.splits} splits, bits equal: {same}):"
    for who in kernels:
        t = float(np.median(ts[who]))
        line += f" {who} {t * 1e6:.1f} us = {nbytes / t / copy:.1%} of copy;"
    if plan.splits > 1:
        line += (f" reduction new {t_red['new'] * 1e6:.1f} us, old {t_red['old'] * 1e6:.1f} us "
                 f"(bits equal: {t_red['same']})")
    print(line, flush=True)
    del A, B, C, W
    cp.get_default_memory_pool().free_all_blocks()
