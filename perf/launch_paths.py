"""Host cost of one kernel launch through each path numba-cuda and cuda-python offer.

Times 2000 pipelined launches of the general NN kernel at 64^3 through: Numba's
``kernel[grid, block, stream](...)``; ``cuda.core.launch`` (arguments built per call) of the
cubin sgblas caches; ``cuda.bindings``' and sgblas's ctypes ``cuLaunchKernel`` with the packed
parameter buffer; and a whole ``sgblas.sgemm`` call. Also the pieces of a call: packing, the
pointer query and the context query through either binding, and reading a Numba array.
Prints microseconds per call (median of 5 repeats). Usage: ``python -m perf.launch_paths``.
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
    from cuda.core import LaunchConfig, ObjectCode, Stream, launch
    from numba import cuda

    import sgblas
    from sgblas.runtime import cache as kernel_cache, driver as sg_driver
    from sgblas.runtime.build import cubin_key, variant_key
    from sgblas.kernels import general
    from sgblas.kernels.abi import GEMM
    from sgblas.kernels.spec import GEMM_KERNELS
    from sgblas.operands import read_device_span
    from sgblas.runtime.loader import dispatcher as jit_dispatcher

    n = 64
    h = sgblas.Handle()
    spec = next(s for s in GEMM_KERNELS if s.name.startswith("sgemm_general_nn_"))
    loaded = h._kernels[spec.name]
    a = cuda.to_device(np.random.rand(n * n).astype(np.float32))
    b = cuda.to_device(np.random.rand(n * n).astype(np.float32))
    c = cuda.device_array(n * n, np.float32)
    grid = general.grid(n, n)
    results = {}

    dispatcher = jit_dispatcher(spec)
    stream0 = cuda.default_stream()
    f32, i32 = np.float32, np.int32
    results["numba kernel[grid, block, stream](...)"] = _per_call(
        lambda: dispatcher[grid, loaded.block, stream0](
            i32(n), i32(n), i32(n), f32(1), a, i32(n), b, i32(n), f32(0), c, i32(n)))

    # The same cubin sgblas launches, loaded through cuda.core.
    entry = kernel_cache.read(loaded.name, h.cc, cubin_key(variant_key(spec, h.cc)))
    core_kernel = ObjectCode.from_cubin(entry.cubin).get_kernel(entry.entry_name)
    config = LaunchConfig(grid=grid, block=loaded.block)
    core_stream = Stream.from_handle(0)
    pa, pb, pc = a.device_ctypes_pointer.value, b.device_ctypes_pointer.value, c.device_ctypes_pointer.value
    ci, cf = ctypes.c_int32, ctypes.c_float
    results["cuda.core.launch, args built per call"] = _per_call(lambda: launch(
        core_stream, config, core_kernel,
        ci(n), ci(n), ci(n), cf(1), 0, 0, n * n, 4, pa, n * n, 4, ci(n),
        0, 0, n * n, 4, pb, n * n, 4, ci(n), cf(0), 0, 0, n * n, 4, pc, n * n, 4, ci(n)))

    def pack():
        return GEMM.pack(n, n, n, 1.0, pa, n * n, n, pb, n * n, n, 0.0, pc, n * n, n)

    results["cuda.bindings cuLaunchKernel, packed buffer"] = _per_call(
        lambda: driver.cuLaunchKernel(loaded.function, grid[0], grid[1], grid[2], loaded.block[0], 1, 1, 0, 0,
                                      pack().value, 0))
    results["ctypes cuLaunchKernel, ready c_void_p arguments (sgblas)"] = _per_call(
        lambda: sg_driver.launch(loaded.c_function, grid, loaded.block, None, pack()))
    results["  of which struct packing"] = _per_call(pack)

    # The same libcuda calls through ctypes.PyDLL, which keeps the GIL (CDLL releases and
    # retakes it around every call), and through CDLL without argtypes conversions.
    pydll = ctypes.PyDLL("libcuda.so.1")
    sg_driver._bind(pydll)
    cdll_raw = ctypes.CDLL("libcuda.so.1")
    raw_launch = cdll_raw.cuLaunchKernel
    f_ptr, params_ptr = ctypes.c_void_p(loaded.function), pack()
    g0, g1, g2, b0 = (ctypes.c_uint(v) for v in (grid[0], grid[1], grid[2], loaded.block[0]))
    one, zero, null = ctypes.c_uint(1), ctypes.c_uint(0), ctypes.c_void_p(0)
    results["PyDLL cuLaunchKernel, packed buffer"] = _per_call(
        lambda: pydll.cuLaunchKernel(loaded.function, grid[0], grid[1], grid[2], loaded.block[0], 1, 1, 0, 0,
                                     pack(), None))
    results["CDLL cuLaunchKernel, prebuilt ctypes arguments"] = _per_call(
        lambda: raw_launch(f_ptr, g0, g1, g2, b0, one, one, zero, null, params_ptr, null))
    ctx_out = ctypes.c_void_p()
    ctx_ref = ctypes.byref(ctx_out)
    results["cuCtxGetCurrent, PyDLL"] = _per_call(lambda: pydll.cuCtxGetCurrent(ctx_ref))
    mem_type, ordinal = ctypes.c_uint(), ctypes.c_int()
    data = (ctypes.c_void_p * 2)(ctypes.addressof(mem_type), ctypes.addressof(ordinal))
    results["cuPointerGetAttributes, PyDLL"] = _per_call(
        lambda: pydll.cuPointerGetAttributes(2, sg_driver._ATTRIBUTES, data, pa))

    attrs = [driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
             driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL]
    results["cuPointerGetAttributes, cuda.bindings"] = _per_call(lambda: driver.cuPointerGetAttributes(2, attrs, pa))
    results["cuPointerGetAttributes, ctypes (sgblas)"] = _per_call(lambda: sg_driver.pointer_attributes(pa))
    results["cuCtxGetCurrent, cuda.bindings"] = _per_call(driver.cuCtxGetCurrent)
    results["cuCtxGetCurrent, ctypes (sgblas)"] = _per_call(sg_driver.current_context)
    results["__cuda_array_interface__ (Numba)"] = _per_call(lambda: a.__cuda_array_interface__)
    results["read_device_span (Numba), incl. pointer query"] = _per_call(lambda: read_device_span(a))
    results["sgblas.sgemm, Numba arrays"] = _per_call(
        lambda: sgblas.sgemm(h, "N", "N", n, n, n, 1.0, a, n, b, n, 0.0, c, n))
    import weakref

    for label, make in (("cupy", lambda: __import__("cupy").zeros(4, "float32")),
                        ("torch", lambda: __import__("torch").zeros(4, device="cuda"))):
        try:
            weakref.ref(make())
            print(f"{label} arrays accept weak references")
        except TypeError as exc:
            print(f"{label} arrays refuse weak references: {exc}")
        except ImportError:
            print(f"{label} is not installed")
    print(f"{'path (64^3 general NN kernel, default stream)':<48} us/call")
    for name, us in results.items():
        print(f"{name:<48} {us:7.2f}")


if __name__ == "__main__":
    main()
