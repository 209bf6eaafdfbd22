"""``python -m sgblas.warmup``: compile and cache every kernel variant, the install-time step.

For the current device (or ``--device N``) every variant the dispatcher can choose is compiled
with its explicit signature and stored as a cubin in sgblas's cache (or found there), one line
per kernel with its time; variants missing from the cache compile in parallel worker processes.
``--cc 80,89,90`` does the same for other compute capabilities, which needs no device when
nvJitLink is installed (it comes with ``numba-cuda[cu13]``); without it an absent
compute capability is compiled to PTX only and reported as "checked, not cached".
``--rebuild`` ignores what the cache holds. A second run finds everything cached.
Entries are looked up in ``$SGBLAS_CACHE_DIR`` (when set), then in the per-user cache, and
written to the first of them that is trusted and writable (:mod:`sgblas.runtime.cache`).

Exit status: 0 every variant is in the cache; 1 a variant for a ``--cc`` compute capability
failed to compile; 2 no device is present and no ``--cc`` was given; 3 something had to be
compiled and no location of the cache can store it (the reason is printed for each location,
and nothing is compiled).
"""

from __future__ import annotations

import argparse
import sys
import time

#: The exit status when something must be compiled and no location of the cache can store it.
EXIT_NOWHERE_TO_STORE = 3


def _parse_ccs(text: str) -> list[tuple[int, int]]:
    ccs = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        if not item.isdigit() or len(item) < 2:
            raise argparse.ArgumentTypeError(f"--cc item {item!r} is not like 80, 89 or 90")
        ccs.append((int(item[:-1]), int(item[-1])))
    return ccs


def _line(report) -> str:
    return f"  {report.source:<22} {report.name:<40} {report.seconds:6.2f} s"


def _warm_device(device: int, rebuild: bool) -> int:
    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime import driver
    from sgblas.runtime.device import compute_capability
    from sgblas.runtime.loader import load_device, load_reports

    cc = compute_capability(device)
    print(f"device {device} (cc {cc[0]}.{cc[1]}):")
    compiled = set()

    def progress(report):
        if report.source.startswith("compiled") or report.source == "rebuilt":
            compiled.add(report.name)
        print(_line(report), flush=True)

    table = load_device(device, REGISTRY, progress, rebuild=rebuild)
    unstored = [r.name for r in load_reports(device) if r.source == "compiled, not stored"]
    for loaded in table.values():
        try:
            regs = driver.kernel_attribute(loaded.function, driver.CU_FUNC_ATTRIBUTE_NUM_REGS, device)
            local = driver.kernel_attribute(loaded.function, driver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, device)
            print(f"  {loaded.name:<40} {regs} registers, {local} bytes of local memory per thread")
        except driver.DriverError as exc:  # informative only
            print(f"  {loaded.name:<40} attributes unavailable: {exc}")
    print(f"  {len(table)} variants ready: {len(compiled)} compiled now, "
          f"{len(table) - len(compiled)} were already in the cache")
    if unstored:
        print(f"  {len(unstored)} compiled variants could not be stored: {', '.join(unstored)}")
        return EXIT_NOWHERE_TO_STORE
    print(f"  {_where()}")
    return 0


def _warm_cc(cc: tuple[int, int], rebuild: bool) -> int:
    """Cache every variant for a compute capability no present device needs to have."""
    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime.build import fill_cache

    print(f"cc {cc[0]}.{cc[1]}:")
    errors: list = []
    filled = fill_cache(REGISTRY, cc, None, lambda report: print(_line(report), flush=True), rebuild=rebuild,
                        errors=errors)
    for name, (_, source) in filled.items():
        if source == "cache":
            print(f"  {'cache':<22} {name:<40} {0.0:6.2f} s")
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
    from sgblas.runtime.build import runnable

    try:
        kernel_cache.writable_location()
        return None
    except kernel_cache.CacheNotWritableError as exc:
        problems = exc.problems
    missing = [(spec.name, cc) for cc in ccs for spec in runnable(REGISTRY, cc)
               if rebuild or kernel_cache.read(spec.name, cc) is None]
    if not missing:
        return None
    reasons = "; ".join(f"{location}: {reason}" for location, reason in problems)
    return (f"sgblas.warmup has {len(missing)} kernel variants to compile and nowhere to store them: {reasons}. "
            f"Set {kernel_cache.CACHE_DIR_VARIABLE} to a directory this user can write, or fix one of these, "
            f"and run it again.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sgblas.warmup", description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=None, help="device ordinal (default: the current device)")
    parser.add_argument("--cc", type=_parse_ccs, default=[], help="other compute capabilities, e.g. 80,89,90")
    parser.add_argument("--rebuild", action="store_true", help="compile every variant again")
    parser.add_argument("--variant", default=None, help="compile only this variant (what parallel workers run)")
    parser.add_argument("--list", action="store_true", help="print the registry of variants and exit")
    args = parser.parse_args(argv)
    from sgblas.runtime.device import BACKEND, compute_capability, current_device, device_count

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
    if args.variant is not None:  # a worker: one variant, one compute capability, into the cache
        from sgblas.kernels.spec import by_name
        from sgblas.runtime import cache as kernel_cache
        from sgblas.runtime.build import compile_variant

        spec = by_name(args.variant)
        cc = args.cc[0] if args.cc else compute_capability(current_device() if args.device is None else args.device)
        try:
            kernel_cache.writable_location()  # before spending seconds on a compile nobody can keep
            report = compile_variant(spec, cc, args.device)
        except kernel_cache.CacheNotWritableError as exc:
            print(f"sgblas.warmup cannot store {spec.name} for sm_{cc[0]}{cc[1]}: {exc}", file=sys.stderr)
            return EXIT_NOWHERE_TO_STORE
        print(f"{report.source} {report.name} {report.seconds:.2f} s")
        return 0
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
        statuses.append(_warm_device(device, args.rebuild))
    else:
        print("no CUDA device is present: caching for the --cc compute capabilities only")
    statuses += [_warm_cc(cc, args.rebuild) for cc in others]
    print(f"done in {time.perf_counter() - t0:.2f} s")
    return max(statuses, default=0)


if __name__ == "__main__":
    sys.exit(main())
