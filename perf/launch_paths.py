"""Host cost of one kernel launch through each path numba-cuda and cuda-python offer.

Times 2000 pipelined launches of the same loaded sgblas kernel at 64^3 through: Numba's
``kernel[grid, block, stream](...)``; ``cuda.core.launch`` with a prebuilt argument tuple;
``cuda.bindings.driver.cuLaunchKernel`` with a persistent packed parameter buffer; and a whole
``sgblas.sgemm`` call. Also the per-call cost of the pointer-attribute query. Prints
microseconds per call (median of 5 repeats). Usage: ``python -m perf.launch_paths``.
"""

from __future__ import annotations

import ctypes
import statistics
import time

import numpy as np


def _per_call(fn, calls=2000, repeats=5):
    from numba import cuda

    samples = []
    for _ in range(repeats):
        cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        cuda.synchronize()
        samples.append((t1 - t0) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    from cuda.bindings import driver
    from cuda.core import LaunchConfig, Stream, launch
    from numba import cuda

    import sgblas
    from sgblas.dispatch.table import select  # noqa: F401  (import cost outside the timing)
    from sgblas.kernels import general

    n = 64
    h = sgblas.Handle()
    loaded = h._kernels[(general.NAME, ("N", "N"))]
    a = cuda.to_device(np.random.rand(n * n).astype(np.float32))
    b = cuda.to_device(np.random.rand(n * n).astype(np.float32))
    c = cuda.device_array(n * n, np.float32)
    grid = general.grid(n, n)
    results = {}

    compiled = loaded.dispatcher.overloads[tuple(sgblas.kernels.abi.GEMM_SIGNATURE.args)]
    stream0 = cuda.default_stream()
    f32, i32 = np.float32, np.int32
    results["numba kernel[grid, block, stream](...)"] = _per_call(
        lambda: loaded.dispatcher[grid, loaded.block, stream0](
            i32(n), i32(n), i32(n), f32(1), a, i32(n), b, i32(n), f32(0), c, i32(n)))

    config = LaunchConfig(grid=grid, block=loaded.block)
    core_stream = Stream.from_handle(0)
    pa, pb, pc = a.device_ctypes_pointer.value, b.device_ctypes_pointer.value, c.device_ctypes_pointer.value
    ci, cf = ctypes.c_int32, ctypes.c_float
    results["cuda.core.launch, args built per call"] = _per_call(lambda: launch(
        core_stream, config, loaded.core_kernel,
        ci(n), ci(n), ci(n), cf(1), 0, 0, n * n, 4, pa, n * n, 4, ci(n),
        0, 0, n * n, 4, pb, n * n, 4, ci(n), cf(0), 0, 0, n * n, 4, pc, n * n, 4, ci(n)))

    class Params(ctypes.Structure):
        _fields_ = [("m", ctypes.c_int32), ("n", ctypes.c_int32), ("k", ctypes.c_int32), ("alpha", ctypes.c_float),
                    ("a", ctypes.c_int64 * 7), ("lda", ctypes.c_int32),
                    ("b", ctypes.c_int64 * 7), ("ldb", ctypes.c_int32), ("beta", ctypes.c_float),
                    ("c", ctypes.c_int64 * 7), ("ldc", ctypes.c_int32)]

    params = Params()
    fields = ["m", "n", "k", "alpha"] + [("a", i) for i in range(7)] + ["lda"] + [("b", i) for i in range(7)] + \
        ["ldb", "beta"] + [("c", i) for i in range(7)] + ["ldc"]
    addresses = (ctypes.c_void_p * len(fields))()
    base = ctypes.addressof(params)
    for i, f in enumerate(fields):
        if isinstance(f, tuple):
            addresses[i] = base + getattr(Params, f[0]).offset + 8 * f[1]
        else:
            addresses[i] = base + getattr(Params, f).offset
    params_ptr = ctypes.addressof(addresses)
    cufunc = compiled._codelibrary.get_cufunc()
    handle = getattr(cufunc, "handle", None)
    kernel_handle = int(loaded.core_kernel.handle) if hasattr(loaded.core_kernel, "handle") else None
    print("cufunc handle", handle, "core kernel handle", kernel_handle)

    def packed():
        params.m = params.n = params.k = n
        params.alpha, params.beta = 1.0, 0.0
        params.a[:] = (0, 0, n * n, 4, pa, n * n, 4)
        params.b[:] = (0, 0, n * n, 4, pb, n * n, 4)
        params.c[:] = (0, 0, n * n, 4, pc, n * n, 4)
        params.lda = params.ldb = params.ldc = n
        driver.cuLaunchKernel(kernel_handle, grid[0], grid[1], grid[2], loaded.block[0], 1, 1, 0, 0,
                              params_ptr, 0)

    try:
        results["cuLaunchKernel, packed buffer"] = _per_call(packed)
    except Exception as exc:  # report, keep going
        print("packed path failed:", type(exc).__name__, exc)

    for name, ptr in (("cuPointerGetAttributes x1", pa),):
        attrs = [driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                 driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL]
        results[name] = _per_call(lambda: driver.cuPointerGetAttributes(2, attrs, ptr))
    results["cuPointerGetAttribute(DEVICE_ORDINAL) x1"] = _per_call(
        lambda: driver.cuPointerGetAttribute(driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pa))
    results["cuCtxGetCurrent x1"] = _per_call(driver.cuCtxGetCurrent)
    results["__cuda_array_interface__ (Numba) x1"] = _per_call(lambda: a.__cuda_array_interface__)
    results["sgblas.sgemm, Numba arrays"] = _per_call(
        lambda: sgblas.sgemm(h, "N", "N", n, n, n, 1.0, a, n, b, n, 0.0, c, n))
    print(f"{'path':<45} us/call")
    for name, us in results.items():
        print(f"{name:<45} {us:7.2f}")


if __name__ == "__main__":
    main()
