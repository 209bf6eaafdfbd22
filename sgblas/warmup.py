"""``python -m sgblas.warmup``: compile and cache every kernel variant, the install-time step.

For the current device (or ``--device N``) every variant the dispatcher can choose is compiled
with its explicit signature and written to the on-disk cache (or found there), one line per
kernel with its time; variants missing from the cache compile in parallel worker processes
first. A second run finds everything cached. ``--cc 80,89,90`` additionally
compiles each variant's PTX for those compute capabilities, which needs no device and proves
the kernels build there; numba-cuda keys its disk cache by the *present* device, so entries for
an absent compute capability cannot be written ahead and are reported as "checked, not cached".
The cache directory is ``SGBLAS_CACHE_DIR`` when set (see :mod:`sgblas.kernel_cache`).
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


def _warm_device(device: int) -> int:
    from sgblas.device import compute_capability
    from sgblas.dispatch.compiled import load_device
    from sgblas.kernel_cache import cache_path

    cc = compute_capability(device)
    print(f"device {device} (cc {cc[0]}.{cc[1]}):")
    compiled = []

    def progress(report):
        if report.source.startswith("compiled"):
            compiled.append(report.name)
        print(f"  {report.source:<22} {report.name:<40} {report.seconds:6.2f} s", flush=True)

    table = load_device(device, progress)
    paths = sorted({p for p in (cache_path(k.dispatcher) for k in table.values()) if p})
    print(f"  {len(table)} variants ready: {len(set(compiled))} compiled now, "
          f"{len(table) - len(set(compiled))} were already in the cache")
    for path in paths:
        print(f"  cached in {path}")
    return 0


def _check_cc(cc: tuple[int, int]) -> int:
    from numba import cuda

    from sgblas.dispatch.compiled import variants
    from sgblas.kernels.abi import GEMM_SIGNATURE, SCALE_SIGNATURE

    print(f"cc {cc[0]}.{cc[1]} (no device needed):")
    failures = 0
    for name, module, pair in variants():
        dispatcher = module.kernel(*pair) if pair is not None else module.kernel()
        signature = GEMM_SIGNATURE if pair is not None else SCALE_SIGNATURE
        t0 = time.perf_counter()
        try:
            cuda.compile_ptx(dispatcher.py_func, signature.args, cc=cc,
                             launch_bounds=getattr(module, "LAUNCH_BOUNDS", None))
            verdict = "checked, not cached"
        except Exception as exc:
            verdict = f"FAILED: {type(exc).__name__}: {exc}".splitlines()[0]
            failures += 1
        print(f"  {verdict:<20} {name:<40} {time.perf_counter() - t0:6.2f} s", flush=True)
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sgblas.warmup", description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=None, help="device ordinal (default: the current device)")
    parser.add_argument("--cc", type=_parse_ccs, default=[], help="other compute capabilities, e.g. 80,89,90")
    parser.add_argument("--variant", default=None, help="compile only this variant (what parallel workers run)")
    args = parser.parse_args(argv)
    if args.variant is not None:
        from sgblas.device import current_device
        from sgblas.dispatch.compiled import compile_variant

        report = compile_variant(current_device() if args.device is None else args.device, args.variant)
        print(f"{report.source} {report.name} {report.seconds:.2f} s")
        return 0
    t0 = time.perf_counter()
    from sgblas.device import SIMULATOR, current_device, device_count

    if SIMULATOR:
        print("the CUDA simulator compiles nothing; there is nothing to warm up")
        return 0
    status = 0
    if device_count() > 0:
        status |= _warm_device(current_device() if args.device is None else args.device)
    elif not args.cc:
        print("no CUDA device is present; give --cc to check other compute capabilities")
        return 2
    else:
        print("no CUDA device is present: only --cc checks run")
    for cc in args.cc:
        status |= 1 if _check_cc(cc) else 0
    print(f"done in {time.perf_counter() - t0:.2f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
