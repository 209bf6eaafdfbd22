"""Compiling and loading every kernel variant the dispatcher can choose, per device.

Variants are compiled with their explicit signature (or loaded from the on-disk cache) once per
device, before any call can need them; calls then launch the loaded ``cuda.core`` kernel
directly, so no call can ever reach Numba's JIT.
"""

from __future__ import annotations

import threading
import time
from types import ModuleType
from typing import Any, Callable, NamedTuple

from sgblas.device import SIMULATOR
from sgblas.dispatch.table import DISPATCH_TABLE, variant_name
from sgblas.kernel_cache import attach_cache
from sgblas.kernels import scale
from sgblas.kernels.abi import GEMM_SIGNATURE, SCALE_SIGNATURE

__all__ = ["LoadedKernel", "CompileReport", "variants", "load_device", "loaded_kernels", "load_reports",
           "compile_variant"]


class LoadedKernel(NamedTuple):
    """One compiled variant, ready to launch on one device."""

    name: str
    module: ModuleType
    dispatcher: Any
    core_kernel: Any  # cuda.core Kernel; None under the simulator
    block: tuple[int, int, int]
    function: int  # its driver handle (a CUkernel), what cuLaunchKernel takes; 0 simulated


class CompileReport(NamedTuple):
    """What loading one variant did: ``source`` is "cache", "compiled", "memory" or "simulator"."""

    name: str
    source: str
    seconds: float


def variants() -> list[tuple[str, ModuleType, tuple[str, str] | None]]:
    """Every (name, module, transpose pair) the dispatcher can launch; pair None for scale."""
    out = [(variant_name(m, ta, tb), m, (ta, tb)) for m in DISPATCH_TABLE for ta, tb in m.TRANSPOSE_PAIRS]
    out.append((scale.NAME, scale, None))
    return out


_lock = threading.Lock()
_loaded: dict[int, dict[Any, LoadedKernel]] = {}
_reports: dict[int, list[CompileReport]] = {}


def _key(module: ModuleType, pair: tuple[str, str] | None):
    return (module.NAME, pair)


def _dispatcher(module: ModuleType, pair: tuple[str, str] | None):
    return module.kernel(*pair) if pair is not None else module.kernel()


def _signature(pair):
    return GEMM_SIGNATURE if pair is not None else SCALE_SIGNATURE


def load_device(device: int, progress: Callable[[CompileReport], None] | None = None,
                parallel: bool = True) -> dict:
    """Compile or load every variant for ``device`` (idempotent, thread-safe).

    Returns the mapping ``(module NAME, (transa, transb) | None) -> LoadedKernel``. ``progress``
    is called with each variant's :class:`CompileReport` as it is loaded. Variants missing from
    the disk cache are compiled in parallel worker processes (``python -m sgblas.warmup
    --variant NAME``) when ``parallel`` and there are several, since each takes tens of seconds
    of single-threaded compiler time; the parent then loads them all from the cache.
    """
    with _lock:
        table = _loaded.get(device)
        if table is not None:
            return table
        table = {}
        reports = _reports[device] = []
        todo = variants()
        if not SIMULATOR and parallel:
            missing = [name for name, module, pair in todo if not _in_disk_cache(device, module, pair)]
            if len(missing) > 1:
                for report in _compile_in_workers(device, missing):
                    reports.append(report)
                    if progress is not None:
                        progress(report)
        for name, module, pair in todo:
            t0 = time.perf_counter()
            dispatcher = _dispatcher(module, pair)
            if SIMULATOR:
                loaded = LoadedKernel(name, module, dispatcher, None, module.BLOCK, 0)
                source = "simulator"
            else:
                loaded, source = _compile_on_device(device, name, module, dispatcher, pair)
            table[_key(module, pair)] = loaded
            reports.append(CompileReport(name, source, time.perf_counter() - t0))
            if progress is not None:
                progress(reports[-1])
        _loaded[device] = table
        return table


def _in_disk_cache(device: int, module: ModuleType, pair) -> bool:
    """Whether the variant's compiled code is in the disk cache for ``device``."""
    from numba import cuda

    dispatcher = _dispatcher(module, pair)
    attach_cache(dispatcher)
    with cuda.gpus[device]:
        return dispatcher._cache.load_overload(_signature(pair), dispatcher.targetctx) is not None


def _compile_in_workers(device: int, names: list[str]) -> list[CompileReport]:
    """Fill the disk cache for ``names`` with one compiler process per variant, all at once.

    Returns the workers' reports (source "compiled in a worker"). A worker that fails leaves
    its variant to the in-process compile that follows.
    """
    import os
    import subprocess
    import sys

    env = dict(os.environ, SGBLAS_NO_WARMUP="1")
    jobs = max(1, min(len(names), os.cpu_count() or 1))
    pending = list(names)
    running: list = []
    reports = []

    def reap(process):
        out, _ = process.communicate()
        words = out.split()
        if process.returncode == 0 and len(words) >= 3:
            reports.append(CompileReport(words[1], f"{words[0]} in a worker", float(words[2])))

    while pending or running:
        while pending and len(running) < jobs:
            running.append(subprocess.Popen(
                [sys.executable, "-m", "sgblas.warmup", "--device", str(device), "--variant", pending.pop(0)],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        reap(running.pop(0))
    return reports


def compile_variant(device: int, name: str) -> CompileReport:
    """Compile (or load) one variant by name for ``device``: what a warm-up worker does."""
    for variant, module, pair in variants():
        if variant == name:
            t0 = time.perf_counter()
            _, source = _compile_on_device(device, name, module, _dispatcher(module, pair), pair)
            return CompileReport(name, source, time.perf_counter() - t0)
    raise KeyError(f"no kernel variant is named {name!r}")


def _compile_on_device(device, name, module, dispatcher, pair):
    from numba import cuda

    attach_cache(dispatcher)
    hits_before = sum(dispatcher.stats.cache_hits.values())
    in_memory = tuple(_signature(pair).args) in dispatcher.overloads
    with cuda.gpus[device]:
        compiled = dispatcher.compile(_signature(pair))
        core_kernel = compiled._codelibrary.get_cufunc().kernel
    if in_memory:
        source = "memory"
    else:
        source = "cache" if sum(dispatcher.stats.cache_hits.values()) > hits_before else "compiled"
    return LoadedKernel(name, module, dispatcher, core_kernel, module.BLOCK, int(core_kernel.handle)), source


def loaded_kernels(device: int) -> dict:
    """The loaded variants of ``device``, loading them first if needed."""
    table = _loaded.get(device)
    return table if table is not None else load_device(device)


def load_reports(device: int) -> list[CompileReport]:
    """How each variant of ``device`` was loaded (empty if it has not been)."""
    return list(_reports.get(device, ()))
