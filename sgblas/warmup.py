"""``python -m sgblas.warmup``: compile and cache every kernel variant, the install-time step.

For the current device (or ``--device N``) every variant the dispatcher can choose is compiled
with its explicit signature and stored as PTX and a cubin in sgblas's cache (or found there),
one line per kernel with its time; variants missing from the cache compile in parallel worker
processes, the costliest first, and several warm-ups of one cache at once share the work (each
variant is compiled by one of them; :mod:`sgblas.runtime.claims`).
``--cc 80,89,90`` does the same for other compute capabilities, which needs no device when
nvJitLink is installed (it comes with ``numba-cuda[cu13]``); without it an absent
compute capability is compiled to PTX only and reported as "checked, not cached".
``--rebuild`` ignores what the cache holds; ``--timings FILE`` writes the seconds each compile
took, the form of ``sgblas/kernels/compile_seconds.json``. A second run finds everything cached.
Entries are looked up in ``$SGBLAS_CACHE_DIR`` (when set), then in the per-user cache, and
written to the first of them that is trusted and writable (:mod:`sgblas.runtime.cache`).

Exit status: 0 every variant is in the cache; 1 a variant for a ``--cc`` compute capability
failed to compile; 2 no device is present and no ``--cc`` was given; 3 something had to be
compiled and no location of the cache can store it (the reason is printed for each location,
and nothing is compiled).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

#: The exit status when something must be compiled and no location of the cache can store it.
EXIT_NOWHERE_TO_STORE = 3


class _ProgressLog:
    """While the command runs, print the ``sgblas`` logger's INFO records (waiting for another
    process's claim, say): the command is an application, so it may give the library's logger
    a handler, and takes it back at the end (``main`` also runs inside tests)."""

    def __enter__(self) -> "_ProgressLog":
        self.logger = logging.getLogger("sgblas")
        self.saved = (self.logger.level, self.logger.propagate)
        self.handler = logging.StreamHandler(sys.stdout)
        self.handler.setFormatter(logging.Formatter("  %(message)s"))
        self.logger.addHandler(self.handler)
        self.logger.setLevel(min(self.logger.getEffectiveLevel(), logging.INFO))
        self.logger.propagate = False
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.saved[0])
        self.logger.propagate = self.saved[1]


def _parse_ccs(text: str) -> list[tuple[int, int]]:
    ccs = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        if not item.isdigit() or len(item) < 2:
            raise argparse.ArgumentTypeError(f"--cc item {item!r} is not like 80, 89 or 90")
        ccs.append((int(item[:-1]), int(item[-1])))
    return ccs


def _line(report) -> str:
    return f"  {report.source:<24} {report.name:<40} {report.seconds:6.2f} s"


#: The report sources that mean this process's workers compiled (or linked) the variant.
_COMPILED = ("compiled", "compiled in a worker", "compiled, not stored", "rebuilt")


class _Reports(list):
    """The compile reports of one compute capability, each printed as it comes."""

    def __call__(self, report) -> None:
        self.append(report)
        print(_line(report), flush=True)

    def summary(self, ready: int) -> str:
        """How the ``ready`` variants came to be: the counts a test of concurrent warm-ups adds up."""
        sources = [report.source for report in self]
        compiled = sum(source in _COMPILED for source in sources)
        linked = sources.count("linked in a worker")
        others = sources.count("built by another process")
        return (f"{ready} variants ready: {compiled} compiled now, {linked} linked from kept PTX, "
                f"{others} built by another process, {ready - compiled - linked - others} were already in the cache")

    def write_timings(self, path: str | None) -> None:
        """The seconds each compile took, as ``sgblas/kernels/compile_seconds.json`` holds them."""
        if path is None:
            return
        import json

        seconds = {report.name: round(report.seconds, 2) for report in self if report.source in _COMPILED}
        record = {"what": f"seconds each variant's compile took in a worker of `python -m sgblas.warmup` on a host "
                          f"of {os.cpu_count()} CPUs, as it printed them; they order a cold cache's compiles, the "
                          f"costliest first",
                  "measured": time.strftime("%Y-%m-%d"), "seconds": dict(sorted(seconds.items()))}
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")


def _warm_device(device: int, rebuild: bool, timings: str | None = None) -> int:
    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime import driver
    from sgblas.runtime.device import compute_capability
    from sgblas.runtime.loader import load_device, load_reports

    cc = compute_capability(device)
    print(f"device {device} (cc {cc[0]}.{cc[1]}):")
    reports = _Reports()
    table = load_device(device, REGISTRY, reports, rebuild=rebuild, announce=logging.INFO)
    reports.write_timings(timings)
    unstored = [r.name for r in load_reports(device) if r.source == "compiled, not stored"]
    for loaded in table.values():
        try:
            regs = driver.kernel_attribute(loaded.function, driver.CU_FUNC_ATTRIBUTE_NUM_REGS, device)
            local = driver.kernel_attribute(loaded.function, driver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, device)
            print(f"  {loaded.name:<40} {regs} registers, {local} bytes of local memory per thread")
        except driver.DriverError as exc:  # informative only
            print(f"  {loaded.name:<40} attributes unavailable: {exc}")
    print(f"  {reports.summary(len(table))}")
    if unstored:
        print(f"  {len(unstored)} compiled variants could not be stored: {', '.join(unstored)}")
        return EXIT_NOWHERE_TO_STORE
    print(f"  {_where()}")
    return 0


def _warm_cc(cc: tuple[int, int], rebuild: bool, timings: str | None = None) -> int:
    """Cache every variant for a compute capability no present device needs to have."""
    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime.build import fill_cache

    print(f"cc {cc[0]}.{cc[1]}:")
    errors: list = []
    reports = _Reports()
    filled = fill_cache(REGISTRY, cc, None, reports, rebuild=rebuild, errors=errors, announce=logging.INFO)
    reports.write_timings(timings)
    for name, (_, source) in filled.items():
        if source == "cache":
            print(f"  {'cache':<24} {name:<40} {0.0:6.2f} s")
    print(f"  {reports.summary(len(filled))}")
    for name, exc in errors:
        print(f"  FAILED {name}: {type(exc).__name__}: {exc}".splitlines()[0], flush=True)
    unstored = [name for name, (entry, _) in filled.items() if entry.path is None]
    if unstored:
        print(f"  {len(unstored)} compiled variants could not be stored: {', '.join(unstored)}")
        return EXIT_NOWHERE_TO_STORE
    print(f"  {_where()}")
    return 1 if errors else 0


def _where() -> str:
    from sgblas.runtime import cache as kernel_cache

    path = ", then ".join(str(location) for location in kernel_cache.search_path())
    try:
        return f"kernel cache: {path}; new entries go to {kernel_cache.writable_location()}"
    except kernel_cache.CacheNotWritableError:
        return f"kernel cache: {path}; none of it can be written"


def _nowhere_to_store(ccs: list[tuple[int, int]], rebuild: bool) -> str | None:
    """The sentence to exit with when a variant of ``ccs`` must be compiled and no location
    of the cache can store it, else None; checked before anything compiles."""
    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime import cache as kernel_cache
    from sgblas.runtime.build import cubin_key, runnable, variant_key

    try:
        kernel_cache.writable_location()
        return None
    except kernel_cache.CacheNotWritableError as exc:
        problems = exc.problems
    missing = [(spec.name, cc) for cc in ccs for spec in runnable(REGISTRY, cc)
               if rebuild or kernel_cache.read(spec.name, cc, cubin_key(variant_key(spec, cc))) is None]
    if not missing:
        return None
    reasons = "; ".join(f"{location}: {reason}" for location, reason in problems)
    return (f"sgblas.warmup has {len(missing)} kernel variants to compile and nowhere to store them: {reasons}. "
            f"Set {kernel_cache.CACHE_DIR_VARIABLE} to a directory this user can write, or fix one of these, "
            f"and run it again.")


def _work(cc: tuple[int, int]) -> int:
    """A compile worker: for each variant named on standard input (``NAME`` or ``NAME rebuild``),
    bring its cubin for ``cc`` into the cache and answer ``done NAME SOURCE SECONDS`` or
    ``failed NAME REASON`` on one line. Ends at the end of its input."""
    import gc

    from sgblas.kernels.spec import by_name
    from sgblas.runtime.build import compile_job

    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        # Numba's front end allocates millions of short-lived objects and keeps little: the
        # cyclic collector's passes over them cost 5-10% of a compile, and one collection
        # between jobs bounds the worker's memory as well.
        gc.disable()
        try:
            report = compile_job(by_name(words[0]), cc, rebuild="rebuild" in words[1:])
        except Exception as exc:  # the parent compiles it in-process and reports the error
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
            print(f"failed {words[0]} {reason}", flush=True)
        else:
            print(f"done {report.name} {report.source} {report.seconds:.2f}", flush=True)
        # After the reply, so that the parent does not wait for it at the end of the work.
        gc.enable()
        gc.collect()
    # Every entry is in the cache and every reply flushed; tearing down the interpreter (a few
    # hundred milliseconds with Numba's state in memory) would only delay the parent.
    sys.stdout.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sgblas.warmup", description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=None, help="device ordinal (default: the current device)")
    parser.add_argument("--cc", type=_parse_ccs, default=[], help="other compute capabilities, e.g. 80,89,90")
    parser.add_argument("--rebuild", action="store_true", help="compile every variant again")
    parser.add_argument("--variant", default=None, help="compile only this variant")
    parser.add_argument("--worker", action="store_true",
                        help="compile the variants named on standard input, one a line (what parallel workers run)")
    parser.add_argument("--list", action="store_true", help="print the registry of variants and exit")
    parser.add_argument("--timings", default=None, metavar="FILE",
                        help="write the seconds each variant compiled now took, as the JSON of "
                             "sgblas/kernels/compile_seconds.json (which orders a cold cache's compiles)")
    args = parser.parse_args(argv)
    from sgblas.runtime.device import compute_capability, current_device

    if args.list:
        from sgblas.kernels.spec import REGISTRY

        print(f"{'variant':<40} {'role':<6} {'pair':<4} {'align':>5} {'tile':>10} {'block':>5} {'bounds':>9} min_cc")
        for spec in REGISTRY:
            pair = "".join(spec.pair) if spec.pair else "-"
            bounds = "x".join(map(str, spec.launch_bounds)) if spec.launch_bounds else "-"
            print(f"{spec.name:<40} {spec.role:<6} {pair:<4} {spec.align:>5} {'x'.join(map(str, spec.tile)):>10} "
                  f"{spec.block[0] * spec.block[1] * spec.block[2]:>5} {bounds:>9} sm_{spec.min_cc[0]}{spec.min_cc[1]}")
        print(f"{len(REGISTRY)} variants")
        return 0
    if args.worker:
        if not args.cc:
            print("a worker needs --cc: it never asks a device", file=sys.stderr)
            return 2
        return _work(args.cc[0])
    if args.variant is not None:  # one variant, one compute capability, into the cache
        from sgblas.kernels.spec import by_name
        from sgblas.runtime import cache as kernel_cache
        from sgblas.runtime.build import compile_job

        spec = by_name(args.variant)
        cc = args.cc[0] if args.cc else compute_capability(current_device() if args.device is None else args.device)
        try:
            kernel_cache.writable_location()  # before spending seconds on a compile nobody can keep
            report = compile_job(spec, cc, rebuild=args.rebuild)
        except kernel_cache.CacheNotWritableError as exc:
            print(f"sgblas.warmup cannot store {spec.name} for sm_{cc[0]}{cc[1]}: {exc}", file=sys.stderr)
            return EXIT_NOWHERE_TO_STORE
        print(f"{report.source} {report.name} {report.seconds:.2f} s")
        return 0
    with _ProgressLog():
        return _warm(args)


def _warm(args: argparse.Namespace) -> int:
    from sgblas.runtime.device import BACKEND, compute_capability, current_device, device_count

    t0 = time.perf_counter()
    if BACKEND.simulated:
        print("the CUDA simulator compiles nothing; there is nothing to warm up")
        return 0
    device = present = None
    if device_count() > 0:
        device = current_device() if args.device is None else args.device
        present = compute_capability(device)
    elif not args.cc:
        print("no CUDA device is present; give --cc to cache kernels for other compute capabilities")
        return 2
    others = [cc for cc in args.cc if cc != present]
    refusal = _nowhere_to_store(([present] if present else []) + others, args.rebuild)
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return EXIT_NOWHERE_TO_STORE
    statuses = []
    if device is not None:
        statuses.append(_warm_device(device, args.rebuild, args.timings))
    else:
        print("no CUDA device is present: caching for the --cc compute capabilities only")
    # --timings records one compute capability's compiles: the device's, else the first --cc's.
    statuses += [_warm_cc(cc, args.rebuild, args.timings if device is None and i == 0 else None)
                 for i, cc in enumerate(others)]
    print(f"done in {time.perf_counter() - t0:.2f} s")
    return max(statuses, default=0)


if __name__ == "__main__":
    sys.exit(main())
