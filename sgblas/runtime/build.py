"""Compiling kernel variants to cubins and filling the cache, in worker processes when many.

A variant (anything with a ``name``, an ``abi``, ``launch_bounds`` and a ``build()`` that
returns its plain Python kernel function: :class:`sgblas.kernels.spec.KernelSpec`) is
compiled by Numba with its explicit signature and launch bounds for one compute capability
(``numba.cuda.compile_ptx``, no device needed) and linked to a cubin by ``cuda.core``'s linker,
as Numba's own dispatcher does. The cubin is stored in sgblas's cache
(:mod:`sgblas.runtime.cache`). Numba's front end is single-threaded and takes seconds per
variant, so several missing variants compile at once in worker processes
(``python -m sgblas.warmup --variant NAME --cc XY``), which store them in the cache. When no
location of the cache can be written, the missing variants compile in this process instead
and their cubins stay in memory (the entries carry the bytes, without a path).

Compiling is announced on the ``sgblas`` logger at INFO (how many variants, for which compute
capability, the expected time) and so is its end (the time it took); the library never
configures handlers, so this is silent unless the application enables it.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from typing import Any, Callable, Iterable, NamedTuple

from sgblas.runtime import cache as kernel_cache
from sgblas.runtime import driver

__all__ = ["CompileReport", "build_cubin", "compile_entry", "compile_variant", "compile_in_workers", "fill_cache",
           "runnable",
           "expected_seconds"]

log = logging.getLogger("sgblas")

# Seconds one cold compile of a variant takes, low and high: Numba's front end is
# single-threaded, and the generated GEMM variants dominate (docs/design.md gives the measured
# times); parallel workers run one per CPU.
SECONDS_PER_VARIANT = (30.0, 50.0)


class CompileReport(NamedTuple):
    """What loading one variant did: ``source`` is "cache", "compiled", "compiled in a worker",
    "compiled, not stored" (no location of the cache could be written: kept in memory),
    "rebuilt" (a cached cubin the driver refused, compiled again) or "simulator"."""

    name: str
    source: str
    seconds: float


_ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.entry\s+([A-Za-z_$][\w$]*)\s*\(", re.MULTILINE)


def compile_ptx(spec: Any, cc: tuple[int, int]) -> str:
    """The PTX of ``spec`` for ``cc`` (Numba, with the ABI's signature and the launch bounds)."""
    from numba import cuda

    ptx, _ = cuda.compile_ptx(spec.build(cc), spec.abi.signature().args, cc=cc,
                              launch_bounds=spec.launch_bounds)
    return ptx


def build_cubin(spec: Any, cc: tuple[int, int], device: int | None = None) -> tuple[str, bytes]:
    """Compile one variant for ``cc``: ``(entry-point name, cubin)``.

    The linker uses nvJitLink when it is installed and otherwise the driver, which needs a
    context: when linking without one fails, ``device``'s primary context is made current and
    the link retried.
    """
    from cuda.core import Linker, LinkerOptions, ObjectCode

    ptx = compile_ptx(spec, cc)
    entries = _ENTRY.findall(ptx)
    if len(entries) != 1:
        raise RuntimeError(f"the PTX of {spec.name} has {len(entries)} kernel entry points, not 1")
    options = LinkerOptions(arch=f"sm_{cc[0]}{cc[1]}")

    def link():
        return Linker(ObjectCode.from_ptx(ptx.encode(), name=f"{spec.name}.ptx"), options=options).link("cubin")

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


def compile_entry(spec: Any, cc: tuple[int, int], device: int | None = None) -> tuple[kernel_cache.CacheEntry,
                                                                                  CompileReport]:
    """Compile one variant for ``cc`` and store it in the cache if any location can take it:
    the entry (with its cubin; without a path when it could not be stored) and the report."""
    t0 = time.perf_counter()
    entry_name, cubin = build_cubin(spec, cc, device)
    entry = kernel_cache.store(spec.name, cc, entry_name, cubin)
    source = "compiled" if entry.path is not None else "compiled, not stored"
    return entry, CompileReport(spec.name, source, time.perf_counter() - t0)


def compile_variant(spec: Any, cc: tuple[int, int], device: int | None = None) -> CompileReport:
    """Compile one variant for ``cc`` and store it in the cache: what a warm-up worker does.
    Raises :class:`~sgblas.runtime.cache.CacheNotWritableError` when no location can take it."""
    t0 = time.perf_counter()
    entry_name, cubin = build_cubin(spec, cc, device)
    kernel_cache.write(spec.name, cc, entry_name, cubin)
    return CompileReport(spec.name, "compiled", time.perf_counter() - t0)


def expected_seconds(variants: int, workers: int) -> tuple[float, float]:
    """How long compiling ``variants`` takes with ``workers`` at once, low and high."""
    waves = math.ceil(variants / max(1, workers))
    return waves * SECONDS_PER_VARIANT[0], waves * SECONDS_PER_VARIANT[1]


def compile_in_workers(jobs: list[tuple[str, tuple[int, int]]], device: int | None,
                       progress: Callable[[CompileReport], None] | None = None) -> list[CompileReport]:
    """Fill the cache for ``(variant name, cc)`` jobs with one compiler process each, as many
    at once as there are CPUs.

    Returns the workers' reports (source "compiled in a worker"); a job whose worker fails
    is left missing, for the caller to compile in-process (and report the error).
    """
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


def runnable(specs: Iterable[Any], cc: tuple[int, int]) -> list[Any]:
    """The variants a device of ``cc`` can run (``min_cc`` at most ``cc``): the only ones built
    and loaded for it, since the others may use instructions its PTX target lacks."""
    return [spec for spec in specs if tuple(cc) >= tuple(spec.min_cc)]


def _variants(count: int) -> str:
    return f"{count} kernel variant{'' if count == 1 else 's'}"


def fill_cache(specs: Iterable[Any], cc: tuple[int, int], device: int | None = None,
               progress: Callable[[CompileReport], None] | None = None, parallel: bool = True,
               rebuild: bool = False, errors: list | None = None) -> dict[str, tuple[kernel_cache.CacheEntry, str]]:
    """Every variant's cache entry for ``cc``, compiling the missing ones first:
    ``name -> (CacheEntry, source)``, source "cache", "compiled in a worker", "compiled" or
    "compiled, not stored". Every entry carries its cubin; one that could not be stored has
    no path and lives only in this process.

    Several missing variants compile in parallel worker processes when ``parallel`` and a
    location of the cache can be written (the workers hand their cubins over through it);
    what they leave missing compiles in-process. ``progress`` hears of each compile, not of
    cache hits. ``rebuild`` compiles every variant whatever the cache holds. An in-process
    compile that fails raises, or, when ``errors`` is a list, is appended to it as
    ``(name, exception)`` and its variant left out.
    """
    specs = runnable(specs, cc)
    out: dict[str, tuple[kernel_cache.CacheEntry, str]] = {}
    if not rebuild:
        for spec in specs:
            entry = kernel_cache.read(spec.name, cc)
            if entry is not None:
                out[spec.name] = (entry, "cache")
    missing = [spec for spec in specs if spec.name not in out]
    if not missing:
        return out
    try:
        destination = kernel_cache.writable_location()
    except kernel_cache.CacheNotWritableError:
        destination = None  # kernel_cache.store says why, once, when the first compile is done
    cpus = os.cpu_count() or 1
    in_workers = parallel and len(missing) > 1 and destination is not None
    width = min(len(missing), cpus) if in_workers else 1
    low, high = expected_seconds(len(missing), width)
    log.info("sgblas is compiling %s for compute capability %d.%d (%s); this takes about %.0f-%.0f s (%s). "
             "`python -m sgblas.warmup` compiles them ahead of time.",
             _variants(len(missing)), cc[0], cc[1], "asked to rebuild" if rebuild else "missing from its kernel cache",
             low, high,
             f"{width} worker processes at once on {cpus} CPUs" if in_workers else "one at a time in this process")
    t0 = time.perf_counter()
    if in_workers:
        for report in compile_in_workers([(spec.name, cc) for spec in missing], device, progress):
            entry = kernel_cache.read(report.name, cc)
            if entry is not None:
                out[report.name] = (entry, "compiled in a worker")
    for spec in missing:
        if spec.name in out:
            continue
        try:
            entry, report = compile_entry(spec, cc, device)
        except Exception as exc:
            if errors is None:
                raise
            errors.append((spec.name, exc))
            continue
        out[spec.name] = (entry, report.source)
        if progress is not None:
            progress(report)
    done = [out[spec.name][0] for spec in missing if spec.name in out]
    stored = {str(entry.path.parent) for entry in done if entry.path is not None}
    log.info("sgblas compiled %s for compute capability %d.%d in %.1f s; %s.",
             _variants(len(done)), cc[0], cc[1], time.perf_counter() - t0,
             f"stored in {', '.join(sorted(stored))}" if stored else "kept in memory only, stored nowhere")
    return out
