"""Loading every kernel variant for a device, and making it resident in a context.

Loading reads the cubins of the device's compute capability from sgblas's cache (compiling
the missing ones first, :mod:`sgblas.runtime.build`) and hands them to the driver as
context-independent ``CUlibrary``/``CUkernel`` handles, without importing Numba. Under the
simulator the variants are Numba's simulated dispatchers.

Residency. Under the driver's default lazy module loading (``CUDA_MODULE_LOADING=LAZY``), a
library is put into a context only when one of its kernels is first needed there, at its first
launch, and putting code into a context waits for the work of every stream of that context to
drain (``docs/design.md``, "Streams and loading", has the measurements). So
:func:`make_resident` puts every kernel into a context ahead of time (``cuKernelGetFunction``
then ``cuFuncLoad`` in that context); sgblas calls it where waiting is allowed, in a device's
set-up (``sgblas.initialize``, a handle's creation, or gemm's first call on the device), never
during a call.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, Callable, Iterable

from sgblas.runtime import cache as kernel_cache
from sgblas.runtime import driver
from sgblas.runtime.build import CompileReport, compile_entry, fill_cache, runnable
from sgblas.runtime.device import BACKEND, compute_capability, primary_context_handle
from sgblas.runtime.launch import LoadedKernel

__all__ = ["load_device", "loaded_kernels", "load_reports", "make_resident", "resident_contexts", "dispatcher"]

_lock = threading.RLock()
_loaded: dict[int, dict[str, LoadedKernel]] = {}
_reports: dict[int, list[CompileReport]] = {}
_libraries: dict[tuple[str, tuple[int, int]], int] = {}  # (variant, cc) -> CUkernel, shared by devices
_resident: set[int] = set()  # contexts every loaded kernel is resident in


@functools.cache
def dispatcher(spec: Any) -> Any:
    """A Numba dispatcher of ``spec`` (its signature and launch bounds on a device): what the
    simulator runs, and what tests launch a variant through directly."""
    from numba import cuda

    if BACKEND.simulated:
        return cuda.jit(spec.build())
    return cuda.jit(spec.abi.signature(), launch_bounds=spec.launch_bounds)(spec.build())


def _load_kernel(name: str, cc: tuple[int, int], entry: kernel_cache.CacheEntry) -> int:
    kernel = _libraries.get((name, cc))
    if kernel is None:
        kernel = _libraries[(name, cc)] = driver.library_kernel(driver.library_load(entry.cubin), entry.entry_name)
    return kernel


def load_device(device: int, specs: Iterable[Any], progress: Callable[[CompileReport], None] | None = None,
                parallel: bool = True, rebuild: bool = False,
                announce: int = logging.WARNING) -> dict[str, LoadedKernel]:
    """Load every variant of ``specs`` for ``device`` from the cache, compiling the missing ones
    first (idempotent, thread-safe): ``name -> LoadedKernel``.

    ``progress`` is called with each variant's :class:`CompileReport`. Missing variants are
    compiled in parallel worker processes when ``parallel`` and there are several; ``rebuild``
    compiles every variant again whatever the cache holds. ``announce`` is the level at which
    a compile is announced (:func:`sgblas.runtime.build.fill_cache`): WARNING for a library call,
    which has to tell the program why its set-up waits.
    """
    specs = list(specs)
    with _lock:
        table = _loaded.get(device)
        if table is not None and not rebuild:
            return table
        table = {}
        reports = _reports[device] = []

        def report(r: CompileReport) -> None:
            reports.append(r)
            if progress is not None:
                progress(r)

        if BACKEND.simulated:
            for spec in specs:
                t0 = time.perf_counter()
                table[spec.name] = LoadedKernel(spec.name, spec.abi, spec.block, 0, None, dispatcher(spec))
                report(CompileReport(spec.name, "simulator", time.perf_counter() - t0))
            _loaded[device] = table
            return table

        cc = compute_capability(device)
        specs = runnable(specs, cc)
        filled = fill_cache(specs, cc, device, report, parallel=parallel, rebuild=rebuild, announce=announce)
        for spec in specs:
            t0 = time.perf_counter()
            entry, source = filled[spec.name]
            if rebuild:
                _libraries.pop((spec.name, cc), None)
            try:
                function = _load_kernel(spec.name, cc, entry)
            except driver.DriverError:
                if source != "cache":
                    raise
                # A cubin this driver refuses (built by a newer toolkit, say): build it again,
                # and load the new cubin from memory whether or not the cache could store it.
                entry, _ = compile_entry(spec, cc, device)
                function = _load_kernel(spec.name, cc, entry)
                source = "rebuilt"
            table[spec.name] = LoadedKernel(spec.name, spec.abi, spec.block, function,
                                            driver.as_pointer(function), None)
            if source in ("cache", "rebuilt"):  # fill_cache reported the compiled ones
                report(CompileReport(spec.name, source, time.perf_counter() - t0))
        _loaded[device] = table
        _resident.discard(primary_context_handle(device))  # new libraries are not resident yet
        return table


def loaded_kernels(device: int, specs: Iterable[Any]) -> dict[str, LoadedKernel]:
    """The loaded variants of ``device``, loading them first if needed."""
    table = _loaded.get(device)
    return table if table is not None else load_device(device, specs)


def load_reports(device: int) -> list[CompileReport]:
    """How each variant of ``device`` was loaded (empty if it has not been)."""
    return list(_reports.get(device, ()))


def make_resident(device: int) -> bool:
    """Put every loaded kernel of ``device`` into its primary context now, so that no launch
    has to load code there. This waits for the context's streams to drain once; later calls
    return at once. Returns True when it did the work, False when it was already done (or
    under the simulator, where there is nothing to load)."""
    if BACKEND.simulated:
        return False
    context = primary_context_handle(device)
    if context in _resident:
        return False
    with _lock:
        if context in _resident:
            return False
        table = _loaded.get(device, {})
        with driver.made_current(context):
            for kernel in table.values():
                driver.function_load(driver.kernel_function(kernel.function))
        _resident.add(context)
        return True


def resident_contexts() -> frozenset[int]:
    """The contexts :func:`make_resident` has filled."""
    return frozenset(_resident)
