"""``python -m sgblas.warmup``: compile and cache every kernel variant, the install-time step.

For the current device (or ``--device N``) every variant the dispatcher can choose is compiled
with its explicit signature and stored as a cubin in sgblas's cache (or found there), one line
per kernel with its time; variants missing from the cache compile in parallel worker processes.
``--cc 80,89,90`` does the same for other compute capabilities, which needs no device when
nvJitLink is installed (it comes with ``numba-cuda[cu13]``); without it an absent
compute capability is compiled to PTX only and reported as "checked, not cached".
``--rebuild`` ignores what the cache holds. A second run finds everything cached.
The cache directory is ``SGBLAS_CACHE_DIR`` when set (see :mod:`sgblas.runtime.cache`).
"""

from __future__ import annotations

import argparse
import sys
import time


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
    from sgblas.runtime.cache import cache_dir
    from sgblas.runtime.device import compute_capability
    from sgblas.runtime.loader import load_device

    cc = compute_capability(device)
    print(f"device {device} (cc {cc[0]}.{cc[1]}):")
    compiled = set()

    def progress(report):
        if report.source.startswith("compiled") or report.source == "rebuilt":
            compiled.add(report.name)
        print(_line(report), flush=True)

    table = load_device(device, REGISTRY, progress, rebuild=rebuild)
    for loaded in table.values():
        try:
            regs = driver.kernel_attribute(loaded.function, driver.CU_FUNC_ATTRIBUTE_NUM_REGS, device)
            local = driver.kernel_attribute(loaded.function, driver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, device)
            print(f"  {loaded.name:<40} {regs} registers, {local} bytes of local memory per thread")
        except driver.DriverError as exc:  # informative only
            print(f"  {loaded.name:<40} attributes unavailable: {exc}")
    print(f"  {len(table)} variants ready: {len(compiled)} compiled now, "
          f"{len(table) - len(compiled)} were already in the cache")
    print(f"  cached in {cache_dir()}")
    return 0


def _warm_cc(cc: tuple[int, int], rebuild: bool) -> int:
    """Cache every variant for a compute capability no present device needs to have."""
    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime import cache as kernel_cache
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
    print(f"  cached in {kernel_cache.cache_dir()}")
    return len(errors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sgblas.warmup", description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=None, help="device ordinal (default: the current device)")
    parser.add_argument("--cc", type=_parse_ccs, default=[], help="other compute capabilities, e.g. 80,89,90")
    parser.add_argument("--rebuild", action="store_true", help="compile every variant again")
    parser.add_argument("--variant", default=None, help="compile only this variant (what parallel workers run)")
    args = parser.parse_args(argv)
    from sgblas.runtime.device import BACKEND, compute_capability, current_device, device_count

    if args.variant is not None:  # a worker: one variant, one compute capability, into the cache
        from sgblas.kernels.spec import by_name
        from sgblas.runtime.build import compile_variant

        cc = args.cc[0] if args.cc else compute_capability(current_device() if args.device is None else args.device)
        report = compile_variant(by_name(args.variant), cc, args.device)
        print(f"{report.source} {report.name} {report.seconds:.2f} s")
        return 0
    t0 = time.perf_counter()
    if BACKEND.simulated:
        print("the CUDA simulator compiles nothing; there is nothing to warm up")
        return 0
    status = 0
    present = None
    if device_count() > 0:
        device = current_device() if args.device is None else args.device
        present = compute_capability(device)
        status |= _warm_device(device, args.rebuild)
    elif not args.cc:
        print("no CUDA device is present; give --cc to cache kernels for other compute capabilities")
        return 2
    else:
        print("no CUDA device is present: caching for the --cc compute capabilities only")
    for cc in args.cc:
        if cc != present:
            status |= 1 if _warm_cc(cc, args.rebuild) else 0
    print(f"done in {time.perf_counter() - t0:.2f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
