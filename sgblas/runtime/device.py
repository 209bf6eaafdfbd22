"""The backend: where kernels run, and what the process can see of its devices.

One object, :data:`BACKEND`, answers every question whose answer differs between a real GPU
(the CUDA driver, through :mod:`sgblas.runtime.driver`) and Numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``): device count, compute capability and properties, contexts,
which device a pointer lives on, how a stream is named at launch, how a kernel is loaded and
launched. Code above the runtime asks the backend instead of testing for the simulator itself;
the kernels' code generators read :data:`SIMULATOR` only to choose plain-Python helpers where
the simulator cannot run an intrinsic.

Nothing here imports Numba, opens the driver library at import, or creates a context unasked.
The hot path of a call only uses :func:`current_context_handle` (default streams) and
:func:`pointer_device` (once per array object).
"""

from __future__ import annotations

import functools
import os
from typing import Any, NamedTuple

from sgblas.runtime import driver as _driver

__all__ = [
    "SIMULATOR",
    "SIMULATED_CC",
    "BACKEND",
    "DeviceProperties",
    "GRID_WAIT_MIN_CC",
    "device_count",
    "compute_capability",
    "device_properties",
    "current_device",
    "primary_context_handle",
    "current_context_handle",
    "pointer_device",
    "push_context",
    "pop_context",
    "stream_capturing",
    "made_current",
    "event_create",
    "event_record",
    "stream_wait_event",
]

#: True when Numba's CUDA simulator is active (read once, at import, as Numba does).
SIMULATOR: bool = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")

#: Compute capability reported for the simulated device, so guards can tell it apart.
SIMULATED_CC: tuple[int, int] = (0, 0)


#: From this compute capability on, every sgblas kernel is built to begin with
#: ``griddepcontrol.wait`` (an instruction Hopper introduced), so that a plan may launch it with
#: programmatic stream serialization: its CTAs are placed as the kernel ahead of it in the
#: stream finishes, and the wait holds them until that kernel's writes are visible
#: (docs/design.md, "Launches behind the kernel ahead"). Launched plainly, the wait returns at once.
GRID_WAIT_MIN_CC: tuple[int, int] = (9, 0)


class DeviceProperties(NamedTuple):
    """What the dispatcher reads of a device (from the driver, never from constants)."""

    sm_count: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int
    shared_bytes_per_sm: int
    #: Kernels may be launched with programmatic stream serialization: the device is at least
    #: :data:`GRID_WAIT_MIN_CC` and its driver CUDA 12.3 or later (the first to capture such a
    #: launch into a graph).
    programmatic_launch: bool = False
    #: The SM clock, the memory clock (kHz) and the memory bus width (bits), as the driver
    #: reports them: what the cost model's defaults scale by on a device it has no
    #: calibration for (:mod:`sgblas.dispatch.model`); 0 when unknown.
    clock_khz: int = 0
    memory_clock_khz: int = 0
    memory_bus_bits: int = 0


class _Driver:
    """A real GPU through the CUDA driver."""

    simulated = False
    name = "cuda"

    def device_count(self) -> int:
        return _driver.device_count()

    def compute_capability(self, device: int) -> tuple[int, int]:
        return _driver.device_cc(device)

    def device_properties(self, device: int) -> DeviceProperties:
        a = _driver.device_attribute
        return DeviceProperties(
            a(device, _driver.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            a(device, _driver.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
            a(device, _driver.CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR),
            a(device, _driver.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
            a(device, _driver.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
            self.compute_capability(device) >= GRID_WAIT_MIN_CC and _driver.driver_version() >= 12030,
            a(device, _driver.CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
            a(device, _driver.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
            a(device, _driver.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH))

    def current_device(self) -> int:
        ordinal = _driver.context_device()
        return 0 if ordinal is None else ordinal

    def primary_context(self, device: int) -> int:
        return _driver.primary_context_retain(device)

    def pointer_device(self, ptr: int) -> int | None:
        attributes = _driver.pointer_attributes(ptr)
        if attributes is None or attributes[0] not in _DEVICE_MEMORY:
            return None
        return attributes[1]

    def launch_stream(self, stream: Any, raw: int) -> Any:
        """The stream as the launch takes it: a ready ``c_void_p`` of the raw handle."""
        return _driver.as_pointer(raw)


class _Simulator:
    """Numba's CUDA simulator: one device, host memory, synchronous streams."""

    simulated = True
    name = "simulator"

    def device_count(self) -> int:
        return 1

    def compute_capability(self, device: int) -> tuple[int, int]:
        return SIMULATED_CC

    def device_properties(self, device: int) -> DeviceProperties:
        # A small notional device, so that the dispatcher's choices are exercised on the CPU.
        return DeviceProperties(4, 2048, 32, 65536, 228 * 1024, False, 1_500_000, 1_000_000, 256)

    def current_device(self) -> int:
        return 0

    def primary_context(self, device: int) -> int:
        return 0

    def pointer_device(self, ptr: int) -> int | None:
        return 0

    def launch_stream(self, stream: Any, raw: int) -> Any:
        """The simulated launch takes the stream object itself (0 for the default stream)."""
        return stream if stream is not None and not isinstance(stream, int) else 0


_DEVICE_MEMORY = (_driver.CU_MEMORYTYPE_DEVICE, _driver.CU_MEMORYTYPE_UNIFIED)

#: The backend of this process.
BACKEND: _Driver | _Simulator = _Simulator() if SIMULATOR else _Driver()


@functools.cache
def device_count() -> int:
    """Number of usable CUDA devices (1 under the simulator, 0 without a driver or GPU)."""
    return BACKEND.device_count()


@functools.cache
def compute_capability(device: int) -> tuple[int, int]:
    """(major, minor) of ``device``; :data:`SIMULATED_CC` under the simulator."""
    return BACKEND.compute_capability(device)


@functools.cache
def device_properties(device: int) -> DeviceProperties:
    """SM count and per-SM limits of ``device``, read once from the driver."""
    return BACKEND.device_properties(device)


def current_device() -> int:
    """Ordinal of the device of the calling thread's current context; 0 when it has none.

    Creates no context (as ``cudaGetDevice``, which also answers 0 before any work).
    """
    return BACKEND.current_device()


@functools.cache
def primary_context_handle(device: int) -> int:
    """The driver handle of ``device``'s primary context, retained once per process (0 under
    the simulator). It is the context Numba, CuPy and PyTorch use on that device, so their
    arrays and streams belong to it."""
    return BACKEND.primary_context(device)


#: The calling thread's current driver context, 0 when it has none.
current_context_handle = _driver.current_context


def pointer_device(ptr: int) -> int | None:
    """The ordinal of the device whose memory ``ptr`` points into, or None for host memory.

    Managed (unified) memory counts as device memory of the device it was allocated on.
    """
    return BACKEND.pointer_device(ptr)


push_context = _driver.push_context
pop_context = _driver.pop_context
#: What a call that uses a handle's workspace needs to order itself behind the last such call
#: on another stream (:func:`sgblas.dispatch.plan.execute`).
stream_capturing = _driver.stream_capturing
made_current = _driver.made_current
event_create = _driver.event_create
event_record = _driver.event_record
stream_wait_event = _driver.stream_wait_event
