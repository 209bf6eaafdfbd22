"""What the process can see of CUDA devices: presence, compute capability, contexts.

Everything here is cheap after the first call; the hot path of :func:`sgblas.sgemm` only uses
:func:`current_context_handle` and :func:`pointer_device`.
"""

from __future__ import annotations

import functools

from sgblas import driver as _driver
from sgblas.kernels.abi import SIMULATOR

__all__ = [
    "SIMULATOR",
    "device_count",
    "compute_capability",
    "current_device",
    "primary_context_handle",
    "current_context_handle",
    "pointer_device",
    "push_context",
    "pop_context",
]

#: Compute capability reported for the simulated device, so guards can tell it apart.
SIMULATED_CC: tuple[int, int] = (0, 0)


@functools.cache
def device_count() -> int:
    """Number of usable CUDA devices (1 under the simulator, 0 without a driver or GPU)."""
    if SIMULATOR:
        return 1
    try:
        from numba import cuda

        if not cuda.is_available():
            return 0
        return len(cuda.gpus)
    except Exception:  # a broken driver is "no device" to the caller, not a crash
        return 0


@functools.cache
def compute_capability(device: int) -> tuple[int, int]:
    """(major, minor) of ``device``; :data:`SIMULATED_CC` under the simulator."""
    if SIMULATOR:
        return SIMULATED_CC
    from numba import cuda

    return tuple(cuda.gpus[device].compute_capability)


def current_device() -> int:
    """Ordinal of the calling thread's current device (initialising its primary context)."""
    if SIMULATOR:
        return 0
    from numba import cuda

    return cuda.get_current_device().id


@functools.cache
def primary_context_handle(device: int) -> int:
    """The driver handle of ``device``'s primary context, retained through Numba."""
    from numba import cuda

    with cuda.gpus[device]:
        return int(cuda.current_context().handle)


def current_context_handle() -> int:
    """The calling thread's current driver context, 0 when it has none."""
    return _driver.current_context()


_DEVICE_MEMORY = (_driver.CU_MEMORYTYPE_DEVICE, _driver.CU_MEMORYTYPE_UNIFIED)


def pointer_device(ptr: int) -> int | None:
    """The ordinal of the device whose memory ``ptr`` points into, or None for host memory.

    Managed (unified) memory counts as device memory of the device it was allocated on.
    """
    if SIMULATOR:
        return 0
    attributes = _driver.pointer_attributes(ptr)
    if attributes is None or attributes[0] not in _DEVICE_MEMORY:
        return None
    return attributes[1]


def push_context(context: int) -> None:
    """Make ``context`` current for the calling thread (undo with :func:`pop_context`)."""
    from cuda.bindings import driver

    (err,) = driver.cuCtxPushCurrent(driver.CUcontext(context))
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuCtxPushCurrent failed with {err!r}")


def pop_context() -> None:
    """Restore the context that was current before :func:`push_context`."""
    from cuda.bindings import driver

    driver.cuCtxPopCurrent()
