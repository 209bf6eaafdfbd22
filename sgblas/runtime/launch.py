"""The lowest-level launch path: a loaded kernel, its grid, a stream, its ABI's arguments.

Numba's ``kernel[grid, block, stream](...)`` wraps every argument on every call; here the
arguments are packed by the kernel's :class:`~sgblas.runtime.abi.Abi` into a reused per-thread
buffer whose ``void**`` array is built once, and ``cuLaunchKernel`` is called through ctypes
with every pointer argument a ready ``c_void_p`` (``perf/launch_paths.py`` compares the
launch paths; ``docs/design.md`` gives the figures). Under the simulator the same call runs
Numba's simulated dispatcher on views of host memory.
"""

from __future__ import annotations

import ctypes
from typing import Any, NamedTuple

from sgblas.runtime import driver
from sgblas.runtime.device import SIMULATOR

__all__ = ["LoadedKernel", "launch", "zero_int32"]


class LoadedKernel(NamedTuple):
    """One kernel variant, ready to launch on one device."""

    name: str
    abi: Any  # sgblas.runtime.abi.Abi
    block: tuple[int, int, int]
    function: int  # the CUkernel handle cuLaunchKernel takes; 0 under the simulator
    c_function: Any  # ``function`` as the ready ctypes argument of driver.launch
    dispatcher: Any  # the simulated dispatcher under the simulator; None on a device


def launch(kernel: LoadedKernel, grid: tuple, stream: Any, args: tuple, after: bool = False) -> None:
    """Enqueue ``kernel`` over ``grid`` on ``stream`` (what the handle holds: a ready
    ``c_void_p``, or under the simulator a stream object or 0) with ``args`` as its ABI's
    packer takes them. Raises :class:`~sgblas.runtime.driver.DriverError` on failure.

    ``after``: with programmatic stream serialization (``cuLaunchKernelEx``): ``kernel``'s CTAs
    may be placed while the kernel ahead of it on ``stream`` finishes, so ``kernel`` must wait
    for that grid (``griddepcontrol.wait``, what sgblas's sm_90 builds begin with) before it
    touches memory. Under the simulator launches run one after another, and it changes nothing."""
    _, abi, block, _, c_function, dispatcher = kernel
    if dispatcher is not None:
        abi.simulate(dispatcher, grid, block, stream, args)
        return
    if after:
        driver.launch_programmatic(c_function, grid, block, stream, abi.pack(*args))
    else:
        driver.launch(c_function, grid, block, stream, abi.pack(*args))


def zero_int32(ptr: int, count: int, raw_stream: int, context: int) -> None:
    """Zero ``count`` int32 words of device memory at ``ptr`` in order on ``raw_stream`` (the
    raw ``CUstream``) with ``context`` current (a memset, unlike a launch on a stream, needs its
    context current, and a thread that launches on its own stream may have none); under the
    simulator, where device memory is host memory and launches run at once, at once."""
    if SIMULATOR:
        ctypes.memset(ptr, 0, 4 * count)
        return
    with driver.made_current(context):
        driver.memset_d32_async(ptr, 0, count, raw_stream)
