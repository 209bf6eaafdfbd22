"""Does the linker that turns a kernel's PTX into a cubin change its speed?

sgblas builds each variant's cubin from Numba's PTX with ``cuda.core``'s linker, which uses
nvJitLink when it is installed (it needs no GPU, so ``--cc`` can cache cubins for absent
devices) and the driver's JIT linker otherwise. The two embed different ``ptxas`` builds. This
script links the same PTX both ways for the current device, prints each cubin's registers and
local memory, and times both kernels on the same data in the same process (CUDA events,
alternating, median of ``--reps``), at the sizes given. Usage::

    python -m perf.linkers --variant sgemm_simt_nn_128x128x16_2s_a16 --sizes 4096,8192,16384
"""

from __future__ import annotations

import argparse
import ctypes
import statistics


def driver_link(ptx: str) -> bytes:
    """The cubin the driver's JIT linker makes of ``ptx`` for the current context's device."""
    from sgblas.runtime import driver

    lib = driver._lib()
    state = ctypes.c_void_p()
    code = lib.cuLinkCreate_v2(0, None, None, ctypes.byref(state))
    if code:
        raise driver.DriverError("cuLinkCreate", code)
    try:
        data = ptx.encode() + b"\0"
        code = lib.cuLinkAddData_v2(state, 1, data, len(data), b"kernel.ptx", 0, None, None)  # CU_JIT_INPUT_PTX
        if code:
            raise driver.DriverError("cuLinkAddData", code)
        out, size = ctypes.c_void_p(), ctypes.c_size_t()
        code = lib.cuLinkComplete(state, ctypes.byref(out), ctypes.byref(size))
        if code:
            raise driver.DriverError("cuLinkComplete", code)
        return ctypes.string_at(out, size.value)
    finally:
        lib.cuLinkDestroy(state)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m perf.linkers", description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="sgemm_simt_nn_128x128x16_2s_a16")
    parser.add_argument("--sizes", default="4096,8192,16384")
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()

    import numpy as np
    from cuda.core import Linker, LinkerOptions, ObjectCode
    from numba import cuda

    import sgblas
    from sgblas.runtime import driver
    from sgblas.handle import stream_handle
    from sgblas.kernels.abi import GEMM
    from sgblas.kernels.spec import by_name
    from sgblas.runtime.build import _ENTRY, compile_ptx

    h = sgblas.Handle()
    cuda.current_context()  # the driver's linker needs a current context
    cc = h.cc
    spec = by_name(args.variant)
    ptx = compile_ptx(spec, cc)
    entry = _ENTRY.findall(ptx)[0]
    cubins = {
        "cuda.core Linker (nvJitLink)": bytes(Linker(ObjectCode.from_ptx(ptx.encode()),
                                                     options=LinkerOptions(arch=f"sm_{cc[0]}{cc[1]}")).link("cubin").code),
        "driver JIT linker (cuLink)": driver_link(ptx),
    }
    kernels = {}
    for label, cubin in cubins.items():
        k = driver.library_kernel(driver.library_load(cubin), entry)
        regs = driver.kernel_attribute(k, driver.CU_FUNC_ATTRIBUTE_NUM_REGS, h.device)
        local = driver.kernel_attribute(k, driver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, h.device)
        print(f"{label:<30} {len(cubin):7d} bytes, {regs} registers, {local} bytes local")
        kernels[label] = driver.as_pointer(k)
    rng = np.random.default_rng(0)
    stream = cuda.stream()
    raw_stream = driver.as_pointer(stream_handle(stream))
    for n in (int(s) for s in args.sizes.split(",")):
        a, b = (cuda.to_device(rng.standard_normal(n * n, dtype=np.float32)) for _ in range(2))
        c = cuda.device_array(n * n, np.float32)
        pa, pb, pc = (x.device_ctypes_pointer.value for x in (a, b, c))
        grid = spec.grid(n, n, n)

        def launch(kernel):
            params = GEMM.pack(n, n, n, 1.0, pa, n * n, n, pb, n * n, n, 0.0, pc, n * n, n)
            driver.launch(kernel, grid, spec.block, raw_stream, params)

        times = {label: [] for label in kernels}
        for label in kernels:  # warm-up
            launch(kernels[label])
        stream.synchronize()
        for _ in range(args.reps):
            for label, kernel in kernels.items():
                start, stop = cuda.event(), cuda.event()
                start.record(stream)
                launch(kernel)
                stop.record(stream)
                stop.synchronize()
                times[label].append(cuda.event_elapsed_time(start, stop) / 1e3)
        results = []
        for label, samples in times.items():
            median = statistics.median(samples)
            results.append(f"{label}: {2 * n ** 3 / median / 1e12:.2f} TFLOP/s")
        print(f"{n}^3 {args.variant}: " + "; ".join(results))


if __name__ == "__main__":
    main()
