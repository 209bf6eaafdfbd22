"""The plain-call path of sgemm launches exactly what the documented validation would.

``sgblas.api._sgemm_plain`` checks a call's arguments without building a plan and launches,
or declines (returns None) so that ``validate`` decides. These tests hold the two paths
together: for thousands of random calls, valid and invalid, whenever the plain path launches,
the documented path launches the same kernel on the same grid with byte-identical parameters
and the same status. They run without a GPU: a child process (the CUDA simulator off) builds
real Numba DeviceNDArray objects over made-up device addresses and replaces the four driver
calls with recorders, so nothing is launched. The GPU counterpart, with CuPy and PyTorch
arrays and real launches, is tests/test_plain_path_gpu.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(r'''
    import os, random, sys
    import numpy as np
    from cuda.bindings import driver as cb
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    from numba.cuda.cudadrv.driver import MemoryPointer

    import sgblas
    from sgblas import api
    from sgblas.runtime import device, driver
    from sgblas.enums import MathMode, Status
    from sgblas.dispatch.plan import WorkspaceOrder
    from sgblas.handle import Handle
    from sgblas.kernels.abi import GEMM
    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime.device import DeviceProperties
    from sgblas.runtime.launch import LoadedKernel

    seed = int(sys.argv[1])
    rng = random.Random(seed)
    CTX = 0x5000
    DEVICE_BASE = {0: 0x7F0000000000, 1: 0x7F8000000000}
    HOST_BASE = 0x10000000

    def attributes(ptr):
        for ordinal, base in DEVICE_BASE.items():
            if base <= ptr < base + (1 << 39):
                return (2, ordinal)
        return (0, -1)  # memory the driver does not know

    launched = []

    def launch(function, grid, block, stream, params):
        launched.append((function.value, tuple(grid), tuple(block), stream.value, GEMM.layout.buffers()[0].raw))

    driver.pointer_attributes = attributes
    driver.current_context = lambda: CTX
    device.current_context_handle = lambda: CTX
    driver.launch = launch

    h = object.__new__(Handle)
    h.device, h.math_mode, h.cc, h._context, h._closed = 0, MathMode.FP32, (9, 0), CTX, False
    h._kernels = {spec.name: LoadedKernel(spec.name, spec.abi, spec.block, 1000 + i, driver.as_pointer(1000 + i), None)
                  for i, spec in enumerate(REGISTRY)}
    h.properties = DeviceProperties(132, 2048, 32, 65536, 233472)
    h._plans, h._workspace = {}, (0, 0, None)
    h._ws_order = WorkspaceOrder()
    h._stream = (None, 0x777, driver.as_pointer(0x777))

    def array(nbytes_base, shape, order="F", dtype=np.float32, offset_bytes=0):
        itemsize = np.dtype(dtype).itemsize
        if len(shape) == 1:
            strides = (itemsize,)
        elif order == "F":
            strides = (itemsize, itemsize * shape[0])
        else:
            strides = (itemsize * shape[1], itemsize)
        size = int(np.prod(shape)) * itemsize
        mp = MemoryPointer(None, cb.CUdeviceptr(nbytes_base + offset_bytes), size)
        return DeviceNDArray(shape, strides, np.dtype(dtype), gpu_data=mp)

    plain_bias = [0.0]

    def pick(*options):
        """A random option; in a "plain" trial mostly the first (a valid one)."""
        if rng.random() < plain_bias[0]:
            return options[0]
        return options[rng.randrange(len(options))]

    accepted = declined = 0
    for trial in range(int(sys.argv[2])):
        plain_bias[0] = 0.93 if trial % 2 else 0.0
        ta, tb = pick("N", "T", "n", "t", "x", None), pick("N", "T", "t", 3)
        m, n, k = (pick(pick(1, 3, 4, 5, 64, 129, 200), 0, np.int64(8), -1, 2**31) for _ in range(3))
        def sized(v):
            return int(v) if isinstance(v, (int, np.integer)) and 0 <= v < 10**6 else 3
        mm, nn, kk = sized(m), sized(n), sized(k)
        a_rows = mm if ta in ("N", "n") else kk
        b_rows = kk if tb in ("N", "n") else nn
        a_cols = kk if ta in ("N", "n") else mm
        b_cols = nn if tb in ("N", "n") else kk
        lda = pick(max(1, a_rows), max(1, a_rows) + pick(0, 1, 4), max(1, a_rows) - 1, float(max(1, a_rows)))
        ldb = pick(max(1, b_rows), max(1, b_rows) + pick(0, 3, 8), max(1, b_rows) - 1)
        ldc = pick(max(1, mm), max(1, mm) + pick(0, 1, 4), max(1, mm) - 1)
        alpha = pick(pick(1.0, -0.5, 2.0), 0.0, -0.0, 1e-40, 1e39, float("nan"), float("inf"), 1, np.float32(1.5))
        beta = pick(pick(0.0, -0.0, 1.0, 0.25), 1e-45, float("nan"), 2, np.float64(0.5))
        device_a = pick(0, 0, 0, 0, 1)
        def operand(rows, cols, ld, index, device=0):
            need = max(1, (max(cols, 1) - 1) * (ld if isinstance(ld, int) and ld > 0 else 1) + max(rows, 1))
            base = DEVICE_BASE.get(device, HOST_BASE) + index * (1 << 32)
            shape = pick((need,), (need + pick(0, 1, 7),), (need - 1,) if need > 1 else (need,),
                         (ld, max(cols, 1)) if isinstance(ld, int) and ld > 0 else (need,))
            order = pick("F", "F", "C")
            dtype = pick(np.float32, np.float32, np.float32, np.float64)
            offset = pick(0, 0, 0, 4, 16)
            if device == "host":
                base = HOST_BASE + index * (1 << 28)
            return array(base, shape, order, dtype, offset)
        A = operand(a_rows, a_cols, lda, 1, pick(device_a, "host") if rng.random() < 0.05 else device_a)
        B = operand(b_rows, b_cols, ldb, 2)
        C = operand(mm, nn, ldc, 3)
        if rng.random() < 0.05:
            A = C  # overlap
        args = (ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
        if rng.random() < 0.03:
            h._closed = True
        launched.clear()
        plain = api._sgemm_plain(h, *args)
        plain_launch = list(launched)
        launched.clear()
        documented = api._finish(api.validate(h, *args), h)
        documented_launch = list(launched)
        h._closed = False
        if plain is None:
            declined += 1
            assert not plain_launch, (seed, trial, args)
            continue
        accepted += 1
        assert plain == documented == Status.SUCCESS, (seed, trial, args, plain, documented)
        assert plain_launch == documented_launch and len(plain_launch) == 1, (seed, trial, args)
    print("ACCEPTED", accepted, "DECLINED", declined)

    # gemm: its plain path (shapes and memory orders of plain matrices give the BLAS call) must
    # launch what its documented path launches, or decline before launching anything.
    from sgblas import gemm_arrays
    real_plain = api.launch_plain
    taken = [0]

    def counting(*call):
        status = real_plain(*call)
        taken[0] += status is not None
        return status

    def outcome(call):
        launched.clear()
        try:
            result = call()
            return "ok", result is not None, list(launched)
        except Exception as exc:
            return type(exc).__name__, None, list(launched)

    accepted = declined = 0
    for trial in range(int(sys.argv[2])):
        plain_bias[0] = 0.8
        m, n, k = (pick(pick(1, 3, 4, 64, 129), 2) for _ in range(3))
        trans_a, trans_b = pick(False, True, 1, 0), pick(False, True)
        def matrix(rows, cols, index):
            rows, cols = pick(rows, rows + 1), cols
            order = pick("F", "C")
            return array(DEVICE_BASE[0] + index * (1 << 32), (rows, cols), order,
                         pick(np.float32, np.float32, np.float64), pick(0, 0, 4, 16))
        a = matrix(*((k, m) if trans_a else (m, k)), 1)
        b = matrix(*((n, k) if trans_b else (k, n)), 2)
        c = matrix(m, n, 3) if rng.random() < 0.95 else a
        alpha = pick(1.0, 0.0, 2, float("nan"), -0.75)
        beta = pick(0.0, 0.5, 1e-45)
        call = lambda: gemm_arrays.gemm(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b,
                                        handle=h)
        api.launch_plain = counting
        before = taken[0]
        plain = outcome(call)
        api.launch_plain = lambda *call: None
        documented = outcome(call)
        api.launch_plain = real_plain
        assert plain == documented, (seed, trial, m, n, k, trans_a, trans_b, plain, documented)
        if taken[0] > before:
            accepted += 1
            assert plain[0] == "ok" and len(plain[2]) == 1, (seed, trial, plain)
        else:
            declined += 1
    print("GEMM_ACCEPTED", accepted, "GEMM_DECLINED", declined)
''')


def test_plain_path_launches_what_validation_launches():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    for seed in (1, 2, 3):
        result = subprocess.run([sys.executable, "-c", CHILD, str(seed), "3000"], capture_output=True,
                                text=True, env=env, timeout=600)
        assert result.returncode == 0, f"seed {seed}:\n{result.stdout}\n{result.stderr[-4000:]}"
        words = result.stdout.split()
        accepted, declined = int(words[words.index("ACCEPTED") + 1]), int(words[words.index("DECLINED") + 1])
        # Both outcomes must be common, or the comparison proves nothing.
        assert accepted >= 100 and declined >= 100, result.stdout
        accepted = int(words[words.index("GEMM_ACCEPTED") + 1])
        declined = int(words[words.index("GEMM_DECLINED") + 1])
        assert accepted >= 100 and declined >= 100, result.stdout
