"""Compiling kernel variants to PTX and cubins and filling the cache, in worker processes.

A variant (anything with a ``name``, an ``abi``, ``launch_bounds``, ``min_cc``, a ``build(cc)``
that returns its plain Python kernel function and a ``code(cc)`` that returns the text that
makes its binary: :class:`sgblas.kernels.spec.KernelSpec`) is compiled by Numba with its
explicit signature and launch bounds for one compute capability (``numba.cuda.compile_ptx``,
no device needed) and linked to a cubin by ``cuda.core``'s linker, as Numba's own dispatcher
does. The PTX and the cubin are stored in sgblas's cache (:mod:`sgblas.runtime.cache`).

Keys (:mod:`sgblas.runtime.keys`). A variant's PTX key (:func:`variant_key`) is a digest of what makes its PTX: its
generated kernel text and the code of the modules it calls, both with comments and
docstrings dropped, its ABI, launch bounds and compute capability, and the compiler's package
versions. Its cubin key adds the linker's (:func:`cubin_key`). So an edit that changes one
variant's text recompiles that variant only, a comment recompiles none, and a new linker
relinks the kept PTX without Numba.

Workers. Numba's front end is single-threaded and takes seconds per variant, so missing
variants compile in persistent worker processes (``python -m sgblas.warmup --worker``, a job
per line on their standard input), the costliest first, each worker taking the next job as
it finishes one; a worker never touches a device (compiling and nvJitLink need none).
Processes that fill one cache at the same time share the work through
:mod:`sgblas.runtime.claims`: each variant is claimed by one process, the others wait for its
entry (and say so on the ``sgblas`` logger), and the compilers of all processes of a host
together hold at most one CPU slot each. When no location of the cache can be written, the
missing variants compile in this process instead and their cubins stay in memory (the
entries carry the bytes, without a path).

Compiling is announced on the ``sgblas`` logger (at WARNING when a library call has to
compile, so that a program learns why its set-up waits and which command does it ahead of
time; at INFO from the warm-up command) and so is its end; the library never configures
handlers.
"""

from __future__ import annotations

import logging
import math
import os
import re
import select
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

from sgblas.runtime import cache as kernel_cache
from sgblas.runtime import claims
from sgblas.runtime import driver
# The keys live apart so that the registry can name its rows' code without importing this
# module's machinery; they are re-exported here for the builder's callers.
from sgblas.runtime.keys import ModuleCode, cubin_key, key_and_size, variant_key

__all__ = ["CompileReport", "ModuleCode", "variant_key", "cubin_key", "compile_ptx", "link_ptx", "build_cubin",
           "compile_job", "compile_entry", "fill_cache", "runnable", "expected_seconds", "SECONDS_PER_VARIANT"]

log = logging.getLogger("sgblas")

# Seconds one cold compile of a variant takes in a worker, low and high (docs/design.md,
# "Building", has the measured table); parallel workers run one per CPU slot.
SECONDS_PER_VARIANT = (4.0, 12.0)

#: A process that has waited this long for another's claim compiles the variant itself.
MAX_WAIT_S = 600.0


class CompileReport(NamedTuple):
    """What loading one variant did: ``source`` is "cache", "compiled in a worker", "linked in a
    worker" (its PTX was in the cache: only the linker ran), "built by another process" (whose
    claim this process waited for), "compiled", "compiled, not stored" (no location of the
    cache could be written: kept in memory), "rebuilt" (a cached cubin the driver refused,
    compiled again) or "simulator"."""

    name: str
    source: str
    seconds: float


_ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.entry\s+([A-Za-z_$][\w$]*)\s*\(", re.MULTILINE)


def compile_ptx(spec: Any, cc: tuple[int, int]) -> str:
    """The PTX of ``spec`` for ``cc`` (Numba, with the ABI's signature and the launch bounds,
    through :func:`sgblas.runtime.frontend.sgblas_pipeline`)."""
    from numba import cuda

    from sgblas.runtime.frontend import sgblas_pipeline

    kernel = spec.build(cc)
    with sgblas_pipeline():
        ptx, _ = cuda.compile_ptx(kernel, spec.abi.signature().args, cc=cc,
                                  launch_bounds=spec.launch_bounds)
    return ptx


def _entry_name(spec: Any, ptx: str) -> str:
    entries = _ENTRY.findall(ptx)
    if len(entries) != 1:
        raise RuntimeError(f"the PTX of {spec.name} has {len(entries)} kernel entry points, not 1")
    return entries[0]


def link_ptx(spec: Any, ptx: str, cc: tuple[int, int], device: int | None = None) -> bytes:
    """``spec``'s PTX linked to a cubin for ``cc``.

    The linker uses nvJitLink when it is installed and otherwise the driver, which needs a
    context: when linking without one fails and ``device`` is given, that device's primary
    context is made current and the link retried (workers give none: they never touch a device).
    """
    from cuda.core import Linker, LinkerOptions, ObjectCode

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
    return bytes(linked.code)


def build_cubin(spec: Any, cc: tuple[int, int], device: int | None = None) -> tuple[str, bytes]:
    """Compile and link one variant for ``cc``: ``(entry-point name, cubin)``."""
    ptx = compile_ptx(spec, cc)
    return _entry_name(spec, ptx), link_ptx(spec, ptx, cc, device)


def compile_job(spec: Any, cc: tuple[int, int], rebuild: bool = False) -> CompileReport:
    """What a worker does for one variant: nothing when its cubin is in the cache (another
    process made it meanwhile), link its PTX when that is there, else compile and link; the
    PTX and the cubin are stored. Raises
    :class:`~sgblas.runtime.cache.CacheNotWritableError` when no location can take them."""
    t0 = time.perf_counter()
    key = variant_key(spec, cc)
    ckey = cubin_key(key)
    if not rebuild and kernel_cache.read(spec.name, cc, ckey) is not None:
        return CompileReport(spec.name, "cache", time.perf_counter() - t0)
    kept = None if rebuild else kernel_cache.read(spec.name, cc, key, kind="ptx")
    ptx = kept.cubin.decode() if kept is not None else compile_ptx(spec, cc)
    entry_name = _entry_name(spec, ptx)
    if kept is None:
        kernel_cache.write(spec.name, cc, key, entry_name, ptx.encode(), kind="ptx")
    kernel_cache.write(spec.name, cc, ckey, entry_name, link_ptx(spec, ptx, cc))
    source = "linked" if kept is not None else "compiled"
    return CompileReport(spec.name, source, time.perf_counter() - t0)


def compile_entry(spec: Any, cc: tuple[int, int], device: int | None = None) -> tuple[kernel_cache.CacheEntry,
                                                                                  CompileReport]:
    """Compile one variant for ``cc`` in this process and store its PTX and cubin if any
    location of the cache can take them: the cubin's entry (without a path when it could not
    be stored) and the report."""
    t0 = time.perf_counter()
    key = variant_key(spec, cc)
    ptx = compile_ptx(spec, cc)
    entry_name = _entry_name(spec, ptx)
    cubin = link_ptx(spec, ptx, cc, device)
    entry = kernel_cache.store(spec.name, cc, cubin_key(key), entry_name, cubin)
    if entry.path is not None:
        kernel_cache.store(spec.name, cc, key, entry_name, ptx.encode(), kind="ptx")
    source = "compiled" if entry.path is not None else "compiled, not stored"
    return entry, CompileReport(spec.name, source, time.perf_counter() - t0)


def expected_seconds(variants: int, workers: int) -> tuple[float, float]:
    """How long compiling ``variants`` takes with ``workers`` at once, low and high."""
    waves = math.ceil(variants / max(1, workers))
    return waves * SECONDS_PER_VARIANT[0], waves * SECONDS_PER_VARIANT[1]


def runnable(specs: Iterable[Any], cc: tuple[int, int]) -> list[Any]:
    """The variants a device of ``cc`` can run (``min_cc`` at most ``cc``): the only ones built
    and loaded for it, since the others may use instructions its PTX target lacks."""
    return [spec for spec in specs if tuple(cc) >= tuple(spec.min_cc)]


def _variants(count: int) -> str:
    return f"{count} kernel variant{'' if count == 1 else 's'}"


class _Worker:
    """A compile worker process: jobs as lines on its standard input, one report line each on
    its standard output (``python -m sgblas.warmup --worker``)."""

    def __init__(self, cc: tuple[int, int]) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen([sys.executable, "-m", "sgblas.warmup", "--worker", "--cc", f"{cc[0]}{cc[1]}"],
                                        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.job: tuple | None = None  # (name, claim, slot, t0)

    def send(self, name: str, rebuild: bool) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{name}{' rebuild' if rebuild else ''}\n")
        self.process.stdin.flush()

    def reply(self) -> list[str] | None:
        """The words of the worker's report, None when it died."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        return line.split(None, 3) if line else None

    def end_input(self) -> None:
        """Tell the worker there are no more jobs: it exits when its current one is done."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass

    def close(self) -> None:
        self.end_input()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _in_workers(jobs: list[tuple[Any, str]], cc: tuple[int, int], destination: Path, rebuild: bool,
                progress: Callable[[CompileReport], None] | None) -> dict[str, str]:
    """Bring ``jobs`` (``(spec, cubin key)``, costliest first) into the cache at ``destination``
    with worker processes, sharing them with other processes through claims and CPU slots:
    ``name -> source`` of those done (a job whose worker failed is left out)."""
    slots = claims.CpuSlots(destination)
    heartbeat = claims.Heartbeat()
    pending = deque(jobs)
    waiting: dict[str, tuple[Any, str, float]] = {}  # name -> (spec, cubin key, since)
    forced: set[str] = set()  # waited too long for another's claim: compiled here regardless
    idle: list[_Worker] = []
    busy: dict[int, _Worker] = {}  # stdout fd -> worker
    workers: list[_Worker] = []
    done: dict[str, str] = {}

    def finish(name: str, source: str, seconds: float) -> None:
        done[name] = source
        if progress is not None:
            progress(CompileReport(name, source, seconds))

    try:
        while pending or busy or waiting:
            for name, (spec, ckey, since) in list(waiting.items()):
                if kernel_cache.read(name, cc, ckey) is not None:
                    del waiting[name]
                    finish(name, "built by another process", time.monotonic() - since)
                    continue
                holder = claims.holder(claims.claim_path(destination, kernel_cache.entry_file_name(name, cc, ckey)))
                if holder is None or holder.stale is not None or time.monotonic() - since > MAX_WAIT_S:
                    if holder is not None and holder.stale is None:
                        log.warning("sgblas has waited %.0f s for %s, which %s claimed; compiling it here as well.",
                                    time.monotonic() - since, name, holder)
                        forced.add(name)
                    del waiting[name]
                    pending.appendleft((spec, ckey))
            while pending:
                spec, ckey = pending[0]
                if not rebuild and kernel_cache.read(spec.name, cc, ckey) is not None:
                    pending.popleft()
                    finish(spec.name, "built by another process", 0.0)
                    continue
                slot = slots.acquire()
                if slot is None:
                    break
                claim = None
                if spec.name not in forced:
                    got = claims.try_claim(destination, kernel_cache.entry_file_name(spec.name, cc, ckey))
                    if isinstance(got, claims.Holder):
                        slots.release(slot)
                        pending.popleft()
                        waiting[spec.name] = (spec, ckey, time.monotonic())
                        log.info("sgblas is waiting for %s: %s is compiling it into the same cache.", spec.name, got)
                        continue
                    claim = got
                    heartbeat.add(claim)
                pending.popleft()
                worker = idle.pop() if idle else None
                if worker is None:
                    worker = _Worker(cc)
                    workers.append(worker)
                worker.job = (spec.name, claim, slot, time.monotonic())
                try:
                    worker.send(spec.name, rebuild)
                except OSError:  # it died idle: the job goes back, the worker is dropped
                    pending.appendleft((spec, ckey))
                    _settle(worker, heartbeat, slots)
                    continue
                assert worker.process.stdout is not None
                busy[worker.process.stdout.fileno()] = worker
            if not busy:
                if pending or waiting:
                    time.sleep(0.2)
                continue
            ready, _, _ = select.select(list(busy), [], [], 0.5)
            for fd in ready:
                worker = busy.pop(fd)
                name = worker.job[0]
                words = worker.reply()
                _settle(worker, heartbeat, slots)
                if words is None or words[0] != "done" or len(words) < 4:
                    if words is not None:
                        idle.append(worker)
                    log.info("sgblas's compile worker failed on %s: %s", name,
                             " ".join(words[1:]) if words else "the worker exited")
                    continue
                idle.append(worker)
                source = {"compiled": "compiled in a worker", "linked": "linked in a worker"}.get(words[2], words[2])
                finish(words[1], source, float(words[3]))
    finally:
        for worker in workers:
            if worker.job is not None:
                _settle(worker, heartbeat, slots)
            worker.end_input()  # all of them first, so that they exit together
        for worker in workers:
            worker.close()
        heartbeat.stop()
        slots.release_all()
    return done


def _settle(worker: _Worker, heartbeat: claims.Heartbeat, slots: claims.CpuSlots) -> None:
    """Release what ``worker``'s job held: its claim and its CPU slot."""
    if worker.job is None:
        return
    _, claim, slot, _ = worker.job
    worker.job = None
    if claim is not None:
        heartbeat.discard(claim)
        claim.release()
    slots.release(slot)


def _cost(spec: Any, size: int, known: list[float]) -> tuple[float, int]:
    """The sort key that puts the costliest compile first: its measured seconds
    (``spec.compile_seconds``; a variant never measured counts as the costliest), then the size
    of its code."""
    seconds = getattr(spec, "compile_seconds", None)
    return (-(seconds if seconds is not None else max(known, default=0.0) + 1.0), -size)


def fill_cache(specs: Iterable[Any], cc: tuple[int, int], device: int | None = None,
               progress: Callable[[CompileReport], None] | None = None, parallel: bool = True,
               rebuild: bool = False, errors: list | None = None,
               announce: int = logging.WARNING) -> dict[str, tuple[kernel_cache.CacheEntry, str]]:
    """Every variant's cubin entry for ``cc``, compiling (or linking) the missing ones first:
    ``name -> (CacheEntry, source)``, source as :class:`CompileReport`'s. Every entry carries its
    cubin; one that could not be stored has no path and lives only in this process.

    Missing variants compile in worker processes when ``parallel`` and a location of the cache
    can be written (the workers hand their cubins over through it; other processes filling the
    same cache share the work); what they leave missing compiles in-process. ``progress`` hears
    of each compile, not of cache hits. ``rebuild`` compiles every variant whatever the cache
    holds. An in-process compile that fails raises, or, when ``errors`` is a list, is appended
    to it as ``(name, exception)`` and its variant left out. ``announce`` is the level of the
    log record that says what is compiled and how long it should take.
    """
    cc = tuple(cc)
    specs = runnable(specs, cc)
    keyed = {spec.name: key_and_size(spec, cc) for spec in specs}
    out: dict[str, tuple[kernel_cache.CacheEntry, str]] = {}
    if not rebuild:
        for spec in specs:
            entry = kernel_cache.read(spec.name, cc, cubin_key(keyed[spec.name][0]))
            if entry is not None:
                out[spec.name] = (entry, "cache")
    missing = [spec for spec in specs if spec.name not in out]
    if not missing:
        return out
    try:
        destination = kernel_cache.writable_location()
    except kernel_cache.CacheNotWritableError:
        destination = None  # kernel_cache.store says why, once, when the first compile is done
    cpus = claims.cpu_count()
    in_workers = parallel and destination is not None
    width = min(len(missing), cpus) if in_workers else 1
    low, high = expected_seconds(len(missing), width)
    log.log(announce, "sgblas is compiling %s for compute capability %d.%d (%s); this takes about %.0f-%.0f s (%s). "
            "`python -m sgblas.warmup` compiles them ahead of time.",
            _variants(len(missing)), cc[0], cc[1], "asked to rebuild" if rebuild else "missing from its kernel cache",
            low, high,
            f"up to {width} worker process{'es' if width != 1 else ''} at once on {cpus} CPUs" if in_workers
            else "one at a time in this process")
    t0 = time.perf_counter()
    known = [seconds for spec in missing if (seconds := getattr(spec, "compile_seconds", None)) is not None]
    if in_workers:
        jobs = sorted(((spec, cubin_key(keyed[spec.name][0])) for spec in missing),
                      key=lambda job: _cost(job[0], keyed[job[0].name][1], known))
        for name, source in _in_workers(jobs, cc, destination, rebuild, progress).items():
            entry = kernel_cache.read(name, cc, cubin_key(keyed[name][0]))
            if entry is not None:
                out[name] = (entry, source)
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
    done = [out[spec.name] for spec in missing if spec.name in out]
    stored = {str(entry.path.parent) for entry, _ in done if entry.path is not None}
    others = sum(source == "built by another process" for _, source in done)
    log.log(announce, "sgblas made %s for compute capability %d.%d ready in %.1f s (%d by other processes); %s.",
            _variants(len(done)), cc[0], cc[1], time.perf_counter() - t0, others,
            f"stored in {', '.join(sorted(stored))}" if stored else "kept in memory only, stored nowhere")
    return out
