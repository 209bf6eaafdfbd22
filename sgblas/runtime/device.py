"""What the process can see of CUDA devices: presence, compute capability, contexts.

Everything goes through the driver (:mod:`sgblas.runtime.driver`), never through Numba, so none of it
imports Numba or creates a context unasked; all is cheap after the first call. The hot path of
:func:`sgblas.sgemm` only uses :func:`current_context_handle` (default streams) and
:func:`pointer_device` (once per array object).
"""

from __future__ import annotations

import functools

from sgblas.runtime import driver as _driver
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
    return _driver.device_count()


@functools.cache
def compute_capability(device: int) -> tuple[int, int]:
    """(major, minor) of ``device``; :data:`SIMULATED_CC` under the simulator."""
    if SIMULATOR:
        return SIMULATED_CC
    return _driver.device_cc(device)


def current_device() -> int:
    """Ordinal of the device of the calling thread's current context; 0 when it has none.

    Creates no context (as ``cudaGetDevice``, which also answers 0 before any work).
    """
    if SIMULATOR:
        return 0
    ordinal = _driver.context_device()
    return 0 if ordinal is None else ordinal


@functools.cache
def primary_context_handle(device: int) -> int:
    """The driver handle of ``device``'s primary context, retained once per process.

    It is the context Numba, CuPy and PyTorch use on that device, so their arrays and
    streams belong to it.
    """
    return _driver.primary_context_retain(device)


#: The calling thread's current driver context, 0 when it has none.
current_context_handle = _driver.current_context


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


push_context = _driver.push_context
pop_context = _driver.pop_context
