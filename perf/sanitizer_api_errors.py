"""``python perf/sanitizer_api_errors.py --order ORDER``: why compute-sanitizer reports failed
``cuGetProcAddress_v2`` calls when Numba initialises after sgblas's set-up, and not the other
way round, nor after a mere ``import sgblas``.

Run each order in its own process under the sanitizer's memcheck with API-error reporting at
its default and compare the ``ERROR SUMMARY`` lines (docs/reliability.md has the commands and
the explanation):

* ``import-first``: ``import sgblas`` (which calls no driver function), then Numba makes its
  context (``cuda.bindings`` fills its table of driver entry points, one
  ``cuGetProcAddress_v2`` per symbol, before its own ``cuInit``), then a ``Handle``.
* ``sgblas-first``: ``import sgblas`` and a ``Handle`` (the set-up initialises the driver
  through ctypes: ``cuInit``), then Numba makes its context (the table is filled after
  ``cuInit``).
* ``numba-first``: Numba, then sgblas (the table is filled before anybody called ``cuInit``).
* ``bindings-first``: ``cuda.bindings`` fills its table (``cuDriverGetVersion``, which needs
  no ``cuInit``), then sgblas, then Numba: the cheap way to keep sgblas-first processes clean.
* ``probe``: neither library; ``cuGetProcAddress_v2`` is asked, through ctypes, for a symbol
  at a CUDA version one minor release newer than the driver (documented to fail with
  ``CUDA_ERROR_INVALID_VALUE``), once before ``cuInit`` and once after.

What each phase did is printed as it happens, with the driver's CUDA version and the
``cuda-bindings`` version: how many lookups fail depends on how many symbols of that
``cuda-bindings`` release are newer than the driver.
"""

from __future__ import annotations

import argparse
import ctypes
import sys

ORDERS = ("import-first", "sgblas-first", "numba-first", "bindings-first", "probe")


def _say(text: str) -> None:
    print(text, flush=True)


def _libcuda() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def _driver_version(lib: ctypes.CDLL) -> int:
    version = ctypes.c_int()
    code = lib.cuDriverGetVersion(ctypes.byref(version))  # needs no cuInit
    if code != 0:
        raise SystemExit(f"cuDriverGetVersion returned {code}; is a CUDA driver installed?")
    return version.value


def _bindings_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("cuda-bindings")
    except metadata.PackageNotFoundError:
        return "absent"


def _import_phase(label: str) -> None:
    _say(f"{label}: import sgblas (no driver call: libcuda is not even opened)")
    import sgblas
    from sgblas.runtime import driver

    _say(f"{label}: done; sgblas opened libcuda: {driver._libcuda is not None}, "
         f"cuda.bindings imported: {'cuda.bindings.driver' in sys.modules}")


def _sgblas_phase(label: str) -> None:
    _say(f"{label}: import sgblas and create a Handle (the set-up: libcuda through ctypes, cuInit, "
         f"no cuGetProcAddress)")
    import sgblas

    handle = sgblas.Handle()
    _say(f"{label}: done; device {handle.device}, cuda.bindings imported: {'cuda.bindings.driver' in sys.modules}")


def _numba_phase(label: str) -> None:
    _say(f"{label}: Numba creates its context (its first cuda.bindings call fills the bindings' table of "
         f"driver entry points, one cuGetProcAddress_v2 each, then calls cuInit)")
    from numba import cuda

    cuda.current_context()
    cuda.device_array(16, dtype="float32").copy_to_host()
    _say(f"{label}: done")


def _bindings_phase(label: str) -> None:
    _say(f"{label}: cuda.bindings.driver.cuDriverGetVersion() (fills the bindings' table; no cuInit)")
    from cuda.bindings import driver

    err, version = driver.cuDriverGetVersion()
    _say(f"{label}: done ({err.name}, {version})")


def _probe(lib: ctypes.CDLL, driver_version: int) -> None:
    lookup = lib.cuGetProcAddress_v2
    lookup.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                       ctypes.POINTER(ctypes.c_int)]
    lookup.restype = ctypes.c_int
    too_new = driver_version + 10  # one minor release newer than the driver

    def ask(label: str) -> None:
        pfn, status = ctypes.c_void_p(), ctypes.c_int()
        code = lookup(b"cuMemAlloc", ctypes.byref(pfn), too_new, 0, ctypes.byref(status))
        _say(f"{label}: cuGetProcAddress_v2('cuMemAlloc', cudaVersion={too_new}) returned {code} "
             f"(1 is CUDA_ERROR_INVALID_VALUE)")

    ask("phase 1, before cuInit")
    lib.cuInit.argtypes = [ctypes.c_uint]
    _say(f"phase 2: cuInit(0) returned {lib.cuInit(0)} (a sanitizer's injection library is loaded here)")
    ask("phase 3, after cuInit")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--order", choices=ORDERS, default="sgblas-first")
    args = parser.parse_args(argv)
    lib = _libcuda()
    driver_version = _driver_version(lib)
    _say(f"order {args.order}: driver CUDA version {driver_version}, cuda-bindings {_bindings_version()}")
    if args.order == "probe":
        _probe(lib, driver_version)
        _say("expected under memcheck: 1 error (the lookup after cuInit), since the one before cuInit "
             "happens before the sanitizer is loaded")
        return 0
    phases = {"import-first": (_import_phase, _numba_phase, _sgblas_phase),
              "sgblas-first": (_sgblas_phase, _numba_phase),
              "numba-first": (_numba_phase, _sgblas_phase),
              "bindings-first": (_bindings_phase, _sgblas_phase, _numba_phase)}[args.order]
    for number, phase in enumerate(phases, 1):
        phase(f"phase {number}")
    if args.order == "sgblas-first":
        _say("expected under memcheck: one CUDA_ERROR_INVALID_VALUE per symbol of cuda-bindings' table whose "
             "CUDA version is newer than the driver's (the lookups run after sgblas's cuInit)")
    else:
        _say("expected under memcheck: 0 errors (the bindings' lookups run before any cuInit)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
