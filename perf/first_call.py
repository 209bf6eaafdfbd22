"""``python -m perf.first_call``: does a call, or the loading of a kernel, wait for other streams?

Each scenario runs in a fresh process (a warm process hides first-call costs). A spin kernel
keeps a non-blocking "busy" stream occupied for ``--spin`` seconds; then the scenario times the
host side of what it probes and checks whether its own stream finished while the busy one was
still running. One JSON line per measurement is printed (and written with ``--out``).

Scenarios:

* ``sgemm_first``: a Handle on its own non-blocking stream is created before the busy work
  starts; then the first ``sgemm`` of each kernel variant (and a second call of each).
* ``get_function``: with the busy stream running, ``cuKernelGetFunction`` and ``cuFuncLoad``
  of each sgblas kernel in the current context (what lazy loading does at a first launch).
* ``gemm_first_after_context`` / ``gemm_first_before_context``: the first ``gemm`` of a
  process on CuPy arrays behind the busy stream, with ``import sgblas`` after CuPy made the
  context (the kernels become resident at import) or before it (then gemm's first handle
  must load them into the context).
* ``gemm_new_stream``: after a warm-up gemm, the first ``gemm`` on each of several new CuPy
  streams (each makes gemm create a handle for that stream) behind the busy stream, and the
  parts of that first call timed alone: ``Handle`` creation with and without a workspace,
  ``cuMemAlloc`` of the default workspace, and choosing a plan on a handle that has none.
* ``gemm_stream``: ``gemm`` inside ``with cupy.cuda.Stream(non_blocking=True)`` and
  ``with torch.cuda.stream(...)``, its operands written behind a long kernel on that stream.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

SCENARIOS = ("sgemm_first", "get_function", "gemm_stream", "gemm_first_after_context", "gemm_first_before_context",
             "gemm_new_stream")


def _emit(record: dict, out: list) -> None:
    out.append(record)
    print(json.dumps(record), flush=True)


def _cu():
    from cuda.bindings import driver

    return driver


def _stream() -> int:
    driver = _cu()
    err, stream = driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
    assert err == driver.CUresult.CUDA_SUCCESS, err
    return int(stream)


def _busy_now(stream: int) -> bool:
    driver = _cu()
    (err,) = driver.cuStreamQuery(stream)
    return err == driver.CUresult.CUDA_ERROR_NOT_READY


def _spinner():
    """A compiled one-thread kernel that sleeps about 1 ms per iteration (compiled now, so no
    JIT happens once the busy stream runs)."""
    from numba import cuda

    @cuda.jit("void(int32)")
    def spin(iterations):
        for _ in range(iterations):
            cuda.nanosleep(1_000_000)

    return spin


def _spin(spin, stream: int, seconds: float) -> None:
    from numba import cuda

    spin[1, 1, cuda.external_stream(stream)](int(seconds * 1000))


def _variant_shapes() -> list[tuple[str, tuple]]:
    """(expected kernel, (ta, tb, m, n, k, alpha)) covering every GEMM variant and scale."""
    return [
        ("nn large", ("N", "N", 2048, 2048, 2048, 1.0)),
        ("nn small", ("N", "N", 512, 512, 512, 1.0)),
        ("nt", ("N", "T", 512, 512, 512, 1.0)),
        ("tn", ("T", "N", 512, 512, 512, 1.0)),
        ("tt", ("T", "T", 512, 512, 512, 1.0)),
        ("odd nn", ("N", "N", 511, 257, 129, 1.0)),
        ("scale", ("N", "N", 512, 512, 512, 0.0)),
    ]


def scenario_sgemm_first(spin_s: float, out: list) -> None:
    import numpy as np
    from numba import cuda

    import sgblas

    spin = _spinner()
    busy, mine = _stream(), _stream()
    n = 2048
    rng = np.random.default_rng(1)
    a = cuda.to_device(rng.standard_normal(n * n).astype(np.float32))
    b = cuda.to_device(rng.standard_normal(n * n).astype(np.float32))
    c = cuda.to_device(rng.standard_normal(n * n).astype(np.float32))
    t0 = time.perf_counter()
    handle = sgblas.Handle(stream=mine)
    _emit({"scenario": "sgemm_first", "what": "Handle()", "host_ms": 1e3 * (time.perf_counter() - t0)}, out)
    cuda.synchronize()
    for attempt in ("first", "second"):
        for label, (ta, tb, m, nn, k, alpha) in _variant_shapes():
            kernel = sgblas.explain(handle, ta, tb, m, nn, k if alpha else 0, a, max(m, k), b, max(k, nn), c, m).kernel
            _spin(spin, busy, spin_s)
            t0 = time.perf_counter()
            status = sgblas.sgemm(handle, ta, tb, m, nn, k, alpha, a, m if ta == "N" else k,
                                  b, k if tb == "N" else nn, 0.5, c, m)
            host = time.perf_counter() - t0
            while _busy_now(mine):
                pass
            mine_done = time.perf_counter() - t0
            other_busy = _busy_now(busy)
            _emit({"scenario": "sgemm_first", "call": attempt, "case": label, "kernel": kernel,
                   "status": status.name, "host_ms": 1e3 * host, "own_stream_done_ms": 1e3 * mine_done,
                   "finished_before_busy_stream": other_busy}, out)
            cuda.synchronize()


def scenario_get_function(spin_s: float, out: list) -> None:
    from numba import cuda

    import sgblas  # noqa: F401 - loads the cubins as libraries (lazily)
    from sgblas.runtime import driver

    lib = driver._lib()
    for name, args in (("cuKernelGetFunction", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]),
                       ("cuFuncLoad", [ctypes.c_void_p]),
                       ("cuFuncIsLoaded", [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p]),
                       ("cuModuleGetLoadingMode", [ctypes.POINTER(ctypes.c_int)])):
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = ctypes.c_int
    mode = ctypes.c_int(-1)
    lib.cuModuleGetLoadingMode(ctypes.byref(mode))
    _emit({"scenario": "get_function", "CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING"),
           "cuModuleGetLoadingMode": {1: "EAGER", 2: "LAZY"}.get(mode.value, mode.value)}, out)
    spin = _spinner()
    cuda.synchronize()  # the context is current (Numba made it)
    busy = _stream()
    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime.loader import loaded_kernels

    for key, loaded in loaded_kernels(0, REGISTRY).items():
        _spin(spin, busy, spin_s)
        func = ctypes.c_void_p()
        state = ctypes.c_int(-1)
        t0 = time.perf_counter()
        rc1 = lib.cuKernelGetFunction(ctypes.byref(func), ctypes.c_void_p(loaded.function))
        t1 = time.perf_counter()
        rc2 = lib.cuFuncIsLoaded(ctypes.byref(state), func)
        t2 = time.perf_counter()
        rc3 = lib.cuFuncLoad(func)
        t3 = time.perf_counter()
        _emit({"scenario": "get_function", "kernel": loaded.name, "rc": [rc1, rc2, rc3],
               "loaded_after_get_function": state.value,
               "get_function_ms": 1e3 * (t1 - t0), "is_loaded_ms": 1e3 * (t2 - t1),
               "func_load_ms": 1e3 * (t3 - t2), "busy_still_running": _busy_now(busy)}, out)
        cuda.synchronize()


def _gemm_first(spin_s: float, out: list, import_first: bool) -> None:
    if import_first:
        import sgblas
    import cupy as cp

    n = 1024
    a = cp.ones((n, n), cp.float32, order="F")
    b = cp.ones((n, n), cp.float32, order="F")
    c = cp.empty((n, n), cp.float32, order="F")
    cp.cuda.Device().synchronize()
    if not import_first:
        import sgblas
    spin = _spinner()
    busy = _stream()
    mine = cp.cuda.Stream(non_blocking=True)
    for attempt in ("first", "second"):
        _spin(spin, busy, spin_s)
        with mine:
            t0 = time.perf_counter()
            sgblas.gemm(a, b, c)
            host = time.perf_counter() - t0
        mine.synchronize()
        done = time.perf_counter() - t0
        _emit({"scenario": "gemm_first_" + ("before" if import_first else "after") + "_context",
               "call": attempt, "host_ms": 1e3 * host, "own_stream_done_ms": 1e3 * done,
               "finished_before_busy_stream": _busy_now(busy), "ok": float(c[5, 7].get()) == n}, out)
        cp.cuda.Device().synchronize()


def scenario_gemm_first_after_context(spin_s: float, out: list) -> None:
    _gemm_first(spin_s, out, import_first=False)


def scenario_gemm_first_before_context(spin_s: float, out: list) -> None:
    _gemm_first(spin_s, out, import_first=True)


def scenario_gemm_stream(spin_s: float, out: list) -> None:
    import numpy as np

    import sgblas

    n = 1024
    for lib in ("cupy", "torch"):
        try:
            module = __import__(lib)
        except ImportError:
            continue
        for attempt in range(3):
            if lib == "cupy":
                cp = module
                a = cp.zeros((n, n), cp.float32, order="F")
                b = cp.zeros((n, n), cp.float32, order="F")
                c = cp.full((n, n), np.nan, cp.float32, order="F")
                cp.cuda.Device().synchronize()
                s = cp.cuda.Stream(non_blocking=True)
                with s:
                    _spin(_spinner(), s.ptr, spin_s / 4)
                    a.fill(2.0)
                    b.fill(3.0)
                    t0 = time.perf_counter()
                    sgblas.gemm(a, b, c, beta=0.0)
                    host = time.perf_counter() - t0
                s.synchronize()
                got = float(c[0, 0].get()), float(c[-1, -1].get())
            else:
                torch = module
                a = torch.zeros((n, n), dtype=torch.float32, device="cuda")
                b = torch.zeros((n, n), dtype=torch.float32, device="cuda")
                c = torch.full((n, n), float("nan"), dtype=torch.float32, device="cuda")
                torch.cuda.synchronize()
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    _spin(_spinner(), s.cuda_stream, spin_s / 4)
                    a.fill_(2.0)
                    b.fill_(3.0)
                    t0 = time.perf_counter()
                    sgblas.gemm(a, b, c, beta=0.0)
                    host = time.perf_counter() - t0
                s.synchronize()
                got = float(c[0, 0]), float(c[-1, -1])
            _emit({"scenario": "gemm_stream", "library": lib, "call": attempt, "host_ms": 1e3 * host,
                   "expected": 6.0 * n, "got": got, "ok": got == (6.0 * n, 6.0 * n)}, out)


def scenario_gemm_new_stream(spin_s: float, out: list) -> None:
    import cupy as cp

    import sgblas
    from sgblas.dispatch import plan as plan_module
    from sgblas.handle import DEFAULT_WORKSPACE_BYTES
    from sgblas.runtime import driver

    n = 1024
    a = cp.ones((n, n), cp.float32, order="F")
    b = cp.ones((n, n), cp.float32, order="F")
    c = cp.empty((n, n), cp.float32, order="F")
    sgblas.gemm(a, b, c)  # the process's first gemm: imports, the first handle, the first plan
    cp.cuda.Device().synchronize()
    spin = _spinner()
    busy = _stream()

    def timed(what, fn, repeat=5):
        for i in range(repeat):
            _spin(spin, busy, spin_s / 10)
            t0 = time.perf_counter()
            fn()
            host = time.perf_counter() - t0
            _emit({"scenario": "gemm_new_stream", "what": what, "i": i, "host_ms": 1e3 * host,
                   "busy_still_running": _busy_now(busy)}, out)
            cp.cuda.Device().synchronize()

    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(15)]  # 5 calls x 3 uses
    pool = iter(streams)

    def first_gemm():
        with next(pool):
            sgblas.gemm(a, b, c)

    timed("first gemm on a new stream", first_gemm)
    # Kept alive: closing a handle frees its workspace with cuMemFree, which waits for the
    # device (the busy stream), as cublasDestroy may; creation is what is timed here.
    handles = []
    timed("Handle(stream=new)", lambda: handles.append(sgblas.Handle(stream=next(pool))))
    timed("Handle(stream=new, workspace_bytes=0)",
          lambda: handles.append(sgblas.Handle(stream=next(pool), workspace_bytes=0)))
    ptrs = []
    timed("cuMemAlloc(default workspace)", lambda: ptrs.append(driver.mem_alloc(DEFAULT_WORKSPACE_BYTES)))
    handle = sgblas.Handle(workspace_bytes=12345)  # a memo of its own, empty

    def new_plan():
        handle._plans.clear()
        plan_module.plan_for(handle, "N", "N", n, n, n, True, a.data.ptr, n, b.data.ptr, n, c.data.ptr, n)

    timed("choosing a plan", new_plan)
    cp.cuda.Device().synchronize()
    for ptr in ptrs:
        driver.mem_free(ptr)
    for h in handles:
        h.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.first_call", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=SCENARIOS, default=None, help="run one scenario in this process")
    parser.add_argument("--spin", type=float, default=0.5, help="seconds of busy-stream work (default 0.5)")
    parser.add_argument("--out", default=None, help="write every record as JSON lines here")
    args = parser.parse_args(argv)
    out: list = []
    if args.scenario is not None:
        globals()[f"scenario_{args.scenario}"](args.spin, out)
        return 0
    for scenario in SCENARIOS:
        result = subprocess.run([sys.executable, "-m", "perf.first_call", "--scenario", scenario,
                                 "--spin", str(args.spin)], capture_output=True, text=True)
        for line in result.stdout.splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
                print(line, flush=True)
        if result.returncode:
            print(f"scenario {scenario} failed ({result.returncode}):\n{result.stderr[-3000:]}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
