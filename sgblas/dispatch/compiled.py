"""Compiling and loading every kernel variant the dispatcher can choose, per device.

A variant is compiled by Numba with its explicit signature for one compute capability
(``numba.cuda.compile_ptx`` with the kernel's launch bounds, then linked to a cubin) and
stored in sgblas's disk cache (:mod:`sgblas.runtime.cache`). Loading a device reads the
cubins of its compute capability and hands them to the driver as context-independent
kernels, without importing Numba; calls then launch those handles directly, so no call can
ever reach Numba's JIT. Under the simulator the variants are Numba's simulated dispatchers.
"""

from __future__ import annotations

import re
import threading
import time
from types import ModuleType
from typing import Any, Callable, NamedTuple

from sgblas.runtime import cache as kernel_cache, driver
from sgblas.runtime.device import SIMULATOR, compute_capability
from sgblas.dispatch.table import DISPATCH_TABLE, variant_name
from sgblas.kernels import scale

__all__ = ["LoadedKernel", "CompileReport", "variants", "build_cubin", "compile_variant", "compile_in_workers",
           "fill_cache", "load_device", "loaded_kernels", "load_reports"]


class LoadedKernel(NamedTuple):
    """One variant, ready to launch on one device."""

    name: str
    module: ModuleType
    pair: tuple[str, str] | None
    block: tuple[int, int, int]
    function: int  # the CUkernel handle cuLaunchKernel takes; 0 under the simulator
    dispatcher: Any  # the simulated dispatcher under the simulator; None on a device
    c_function: Any = None  # ``function`` as the ready ctypes argument of driver.launch


class CompileReport(NamedTuple):
    """What loading one variant did: ``source`` is "cache", "compiled", "compiled in a worker",
    "rebuilt" (a cached cubin the driver refused, compiled again) or "simulator"."""

    name: str
    source: str
    seconds: float


def variants() -> list[tuple[str, ModuleType, tuple[str, str] | None]]:
    """Every (name, module, transpose pair) the dispatcher can launch; pair None for scale."""
    out = [(variant_name(m, ta, tb), m, (ta, tb)) for m in DISPATCH_TABLE for ta, tb in m.TRANSPOSE_PAIRS]
    out.append((scale.NAME, scale, None))
    return out


def _variant(name: str) -> tuple[ModuleType, tuple[str, str] | None]:
    for variant, module, pair in variants():
        if variant == name:
            return module, pair
    raise KeyError(f"no kernel variant is named {name!r}")


def _dispatcher(module: ModuleType, pair: tuple[str, str] | None):
    return module.kernel(*pair) if pair is not None else module.kernel()


_ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.entry\s+([A-Za-z_$][\w$]*)\s*\(", re.MULTILINE)


def build_cubin(module: ModuleType, pair: tuple[str, str] | None, cc: tuple[int, int],
                device: int | None = None) -> tuple[str, bytes]:
    """Compile one variant for ``cc``: ``(entry-point name, cubin)``.

    Numba compiles the kernel's Python function with its explicit signature and launch
    bounds to PTX for ``cc`` (no device needed); the PTX is linked to a cubin with
    ``cuda.core``'s linker, as Numba's own dispatcher does. The linker uses nvJitLink when it
    is installed and otherwise the driver, which needs a context: when linking without one
    fails, ``device``'s primary context is made current and the link retried.
    """
    from cuda.core import Linker, LinkerOptions, ObjectCode
    from numba import cuda

    from sgblas.kernels.signatures import GEMM_SIGNATURE, SCALE_SIGNATURE

    signature = GEMM_SIGNATURE if pair is not None else SCALE_SIGNATURE
    ptx, _ = cuda.compile_ptx(_dispatcher(module, pair).py_func, signature.args, cc=cc,
                              launch_bounds=module.LAUNCH_BOUNDS)
    entries = _ENTRY.findall(ptx)
    if len(entries) != 1:
        raise RuntimeError(f"the PTX of {module.NAME} has {len(entries)} kernel entry points, not 1")
    options = LinkerOptions(arch=f"sm_{cc[0]}{cc[1]}")

    def link():
        return Linker(ObjectCode.from_ptx(ptx.encode(), name=f"{module.NAME}.ptx"), options=options).link("cubin")

    try:
        linked = link()
    except Exception:
        if device is None or driver.current_context() != 0:
            raise
        from sgblas.runtime.device import primary_context_handle

        driver.push_context(primary_context_handle(device))  # the driver's linker needs one
        try:
            linked = link()
        finally:
            driver.pop_context()
    return entries[0], bytes(linked.code)


def compile_variant(name: str, cc: tuple[int, int], device: int | None = None) -> CompileReport:
    """Compile one variant by name for ``cc`` and store it in the cache: what a warm-up
    worker does."""
    module, pair = _variant(name)
    t0 = time.perf_counter()
    entry_name, cubin = build_cubin(module, pair, cc, device)
    kernel_cache.write(name, cc, entry_name, cubin)
    return CompileReport(name, "compiled", time.perf_counter() - t0)


def compile_in_workers(jobs: list[tuple[str, tuple[int, int]]], device: int | None,
                       progress: Callable[[CompileReport], None] | None = None) -> list[CompileReport]:
    """Fill the cache for ``(variant, cc)`` jobs with one compiler process each, as many at
    once as there are CPUs: each takes tens of seconds of single-threaded Numba front end.

    Returns the workers' reports (source "compiled in a worker"); a job whose worker fails
    is left missing, for the caller to compile in-process (and report the error).
    """
    import os
    import subprocess
    import sys

    env = dict(os.environ, SGBLAS_NO_WARMUP="1")
    width = max(1, min(len(jobs), os.cpu_count() or 1))
    pending = list(jobs)
    running: list = []
    reports = []

    def reap(process):
        out, _ = process.communicate()
        words = out.split()
        if process.returncode == 0 and len(words) >= 3 and words[0] == "compiled":
            report = CompileReport(words[1], "compiled in a worker", float(words[2]))
            reports.append(report)
            if progress is not None:
                progress(report)

    while pending or running:
        while pending and len(running) < width:
            name, cc = pending.pop(0)
            command = [sys.executable, "-m", "sgblas.warmup", "--variant", name, "--cc", f"{cc[0]}{cc[1]}"]
            if device is not None:
                command += ["--device", str(device)]
            running.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL, text=True))
        reap(running.pop(0))
    return reports


def fill_cache(cc: tuple[int, int], device: int | None = None,
               progress: Callable[[CompileReport], None] | None = None, parallel: bool = True,
               rebuild: bool = False, errors: list | None = None) -> dict[str, tuple[Any, str]]:
    """Every variant's cache entry for ``cc``, compiling the missing ones first:
    ``name -> (CacheEntry, source)``, source "cache", "compiled in a worker" or "compiled".

    Several missing variants compile in parallel worker processes when ``parallel``; what they
    leave missing compiles in-process. ``progress`` hears of each compile, not of cache hits.
    ``rebuild`` compiles every variant whatever the cache holds. An in-process compile that
    fails raises, or, when ``errors`` is a list, is appended to it as ``(name, exception)``
    and its variant left out.
    """
    names = [name for name, _, _ in variants()]
    out = {}
    if not rebuild:
        for name in names:
            entry = kernel_cache.read(name, cc)
            if entry is not None:
                out[name] = (entry, "cache")
    missing = [name for name in names if name not in out]
    if parallel and len(missing) > 1:
        for report in compile_in_workers([(name, cc) for name in missing], device, progress):
            entry = kernel_cache.read(report.name, cc)
            if entry is not None:
                out[report.name] = (entry, "compiled in a worker")
    for name in missing:
        if name in out:
            continue
        try:
            report = compile_variant(name, cc, device)
            entry = kernel_cache.read(name, cc)
            if entry is None:
                raise RuntimeError(f"the compiled {name} could not be read back from {kernel_cache.cache_dir()}")
        except Exception as exc:
            if errors is None:
                raise
            errors.append((name, exc))
            continue
        out[name] = (entry, "compiled")
        if progress is not None:
            progress(report)
    return out


_lock = threading.Lock()
_loaded: dict[int, dict[Any, LoadedKernel]] = {}
_reports: dict[int, list[CompileReport]] = {}
_libraries: dict[tuple[str, tuple[int, int]], int] = {}  # (variant, cc) -> CUkernel, shared by devices


def _key(module: ModuleType, pair: tuple[str, str] | None):
    return (module.NAME, pair)


def _load_kernel(name: str, cc: tuple[int, int], entry: kernel_cache.CacheEntry) -> int:
    kernel = _libraries.get((name, cc))
    if kernel is None:
        kernel = _libraries[(name, cc)] = driver.library_kernel(driver.library_load(entry.cubin), entry.entry_name)
    return kernel


def load_device(device: int, progress: Callable[[CompileReport], None] | None = None,
                parallel: bool = True, rebuild: bool = False) -> dict:
    """Load every variant for ``device`` from the cache, compiling the missing ones first
    (idempotent, thread-safe).

    Returns the mapping ``(module NAME, (transa, transb) | None) -> LoadedKernel``.
    ``progress`` is called with each variant's :class:`CompileReport`. Missing variants are
    compiled in parallel worker processes when ``parallel`` and there are several; ``rebuild``
    compiles every variant again whatever the cache holds.
    """
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

        if SIMULATOR:
            for name, module, pair in variants():
                t0 = time.perf_counter()
                table[_key(module, pair)] = LoadedKernel(name, module, pair, module.BLOCK, 0,
                                                         _dispatcher(module, pair))
                report(CompileReport(name, "simulator", time.perf_counter() - t0))
            _loaded[device] = table
            return table

        cc = compute_capability(device)
        filled = fill_cache(cc, device, report, parallel=parallel, rebuild=rebuild)
        for name, module, pair in variants():
            t0 = time.perf_counter()
            entry, source = filled[name]
            if rebuild:
                _libraries.pop((name, cc), None)
            try:
                function = _load_kernel(name, cc, entry)
            except driver.DriverError:
                if source != "cache":
                    raise
                # A cubin this driver refuses (built by a newer toolkit, say): build it again.
                compile_variant(name, cc, device)
                entry = kernel_cache.read(name, cc)
                function = _load_kernel(name, cc, entry)
                source = "rebuilt"
            table[_key(module, pair)] = LoadedKernel(name, module, pair, module.BLOCK, function, None,
                                                     driver.as_pointer(function))
            if source in ("cache", "rebuilt"):  # fill_cache reported the compiled ones
                report(CompileReport(name, source, time.perf_counter() - t0))
        _loaded[device] = table
        return table


def loaded_kernels(device: int) -> dict:
    """The loaded variants of ``device``, loading them first if needed."""
    table = _loaded.get(device)
    return table if table is not None else load_device(device)


def load_reports(device: int) -> list[CompileReport]:
    """How each variant of ``device`` was loaded (empty if it has not been)."""
    return list(_reports.get(device, ()))
