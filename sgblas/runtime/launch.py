"""The lowest-level launch path: parameters packed once into a reused buffer, one
``cuLaunchKernel`` through ctypes.

Numba's ``kernel[grid, block, stream](...)`` wraps every argument on every call (73-91 us on
the H200's host), ``cuda.core.launch`` 13-15 us, ``cuda.bindings``' ``cuLaunchKernel`` with a
packed buffer 8-10 us (``perf/launch_paths.py``). Here the arguments, already in Numba's kernel
ABI, are packed with one ``struct.pack_into`` into a per-thread buffer whose ``void**`` array
is built once, and ``cuLaunchKernel`` is called through ctypes with every pointer argument a
ready ``c_void_p`` (7.6 us). Under the simulator the same call goes through Numba's simulated launch on views of
host memory.
"""

from __future__ import annotations

import ctypes
from typing import Any

from sgblas.runtime import driver
from sgblas.runtime.device import SIMULATOR

__all__ = ["launch_gemm", "launch_scale", "GEMM_PARAMS", "SCALE_PARAMS"]


def _array_offsets(start: int) -> tuple[int, ...]:
    # Numba's ABI for a 1-D contiguous array: meminfo, parent, nitems, itemsize, data,
    # shape[0], strides[0] (bytes), each pointer-sized.
    return tuple(start + 8 * i for i in range(7))


#: (m, n, k, alpha, A[7], lda, B[7], ldb, beta, C[7], ldc): GEMM_SIGNATURE's 29 parameters.
GEMM_PARAMS = driver.ParamLayout(
    "<iiif7qi4x7qif7qi",
    (0, 4, 8, 12) + _array_offsets(16) + (72,) + _array_offsets(80) + (136, 140) + _array_offsets(144) + (200,))
#: (m, n, beta, C[7], ldc): SCALE_SIGNATURE's 11 parameters.
SCALE_PARAMS = driver.ParamLayout("<iif4x7qi", (0, 4, 8) + _array_offsets(16) + (72,))


def _host_view(ptr: int, extent: int):
    """A simulator device array over ``extent`` float32 elements of host memory at ``ptr``."""
    import numpy as np
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    if extent == 0:
        return FakeCUDAArray(np.empty(0, np.float32))
    view = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(extent,))
    return FakeCUDAArray(view)


def launch_gemm(stream: Any, loaded: Any, grid: tuple, m: int, n: int, k: int, alpha: float,
                a_ptr: int, a_extent: int, lda: int, b_ptr: int, b_extent: int, ldb: int,
                beta: float, c_ptr: int, c_extent: int, ldc: int) -> None:
    """Enqueue ``loaded`` (a GEMM variant) on ``stream`` over ``grid``; ``stream`` is what the
    handle holds: a ``ctypes.c_void_p`` (the simulator: a stream object or 0)."""
    if SIMULATOR:
        loaded.dispatcher[grid, loaded.block, stream or 0](
            m, n, k, alpha, _host_view(a_ptr, a_extent), lda, _host_view(b_ptr, b_extent), ldb,
            beta, _host_view(c_ptr, c_extent), ldc)
        return
    params = GEMM_PARAMS.pack(m, n, k, alpha,
                              0, 0, a_extent, 4, a_ptr, a_extent, 4, lda,
                              0, 0, b_extent, 4, b_ptr, b_extent, 4, ldb, beta,
                              0, 0, c_extent, 4, c_ptr, c_extent, 4, ldc)
    driver.launch(loaded.c_function, grid, loaded.block, stream, params)


def launch_scale(stream: Any, loaded: Any, grid: tuple, m: int, n: int, beta: float,
                 c_ptr: int, c_extent: int, ldc: int) -> None:
    """Enqueue the C = beta*C kernel on ``stream`` (as in :func:`launch_gemm`) over ``grid``."""
    if SIMULATOR:
        loaded.dispatcher[grid, loaded.block, stream or 0](m, n, beta, _host_view(c_ptr, c_extent), ldc)
        return
    params = SCALE_PARAMS.pack(m, n, beta, 0, 0, c_extent, 4, c_ptr, c_extent, 4, ldc)
    driver.launch(loaded.c_function, grid, loaded.block, stream, params)
