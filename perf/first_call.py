"""``python -m perf.first_call``: what a process pays before its first call, and does a call, or
the loading of a kernel, wait for other streams?

Each scenario runs in a fresh process (a warm process hides first-call costs), ``--repeat`` times.
Run ``python -m sgblas.warmup`` first: the figures are meant with the kernel cache warm, and the
scenarios that set a device up record where each kernel came from (``kernel_sources``: "cache"
for every one when it was warm). One JSON line per measurement is printed (and written with
``--out``); ``--scenarios`` picks some.

Start-up (issue 41: ``import sgblas`` initialises no CUDA, and a device is set up by
``sgblas.initialize()``, a ``Handle``'s creation or gemm's first call on it):

* ``import_time``: ``import sgblas`` alone, timed in the process, and what it left behind:
  whether it opened libcuda, imported Numba or NumPy, and each device's primary context state
  read through ``cuda.bindings`` afterwards.
* ``handle_first_sgemm``: ``import sgblas``, then ``Handle()`` (the set-up: ``cuInit``, the
  primary context, loading the kernels, making them resident, the workspace), then Numba arrays
  (not counted), then the first ``sgemm`` and a second; ``import_handle_sgemm_ms`` is the sum of
  the import, the handle and the first call's host time.
* ``gemm_first_call``: arrays of CuPy when it is importable (else Numba's) made first, so the
  context exists; then ``import sgblas`` and the first ``gemm`` (the device's set-up included)
  and a second; ``import_gemm_ms`` is the import plus the first call's host time.

Waiting (a spin kernel keeps a non-blocking "busy" stream occupied for ``--spin`` seconds; the
scenario times the host side of what it probes and checks whether its own stream finished while
the busy one was still running):

* ``sgemm_first``: a Handle on its own non-blocking stream is created before the busy work
  starts; then the first ``sgemm`` of each kernel variant (and a second call of each).
* ``get_function``: the kernels loaded as libraries (no context), then, with the busy stream
  running, ``cuKernelGetFunction`` and ``cuFuncLoad`` of each in the current context: what lazy
  loading does at a first launch, and what a device's set-up does ahead of the calls.
  ``get_function_resident``: the same after ``sgblas.initialize()`` made them resident.
* ``gemm_first_busy``: CuPy arrays, ``import sgblas``, then the first ``gemm`` of the process
  behind the busy stream with nothing set up (the call is the set-up: it may wait), and a second.
* ``gemm_first_initialized``: the same after ``sgblas.initialize()`` (called before the busy work
  starts): neither call may wait.
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

SCENARIOS = ("import_time", "handle_first_sgemm", "gemm_first_call", "sgemm_first", "get_function",
             "get_function_resident", "gemm_stream", "gemm_first_busy", "gemm_first_initialized", "gemm_new_stream")


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


def _libcuda_mapped() -> bool | None:
    try:
        with open("/proc/self/maps") as maps:
            return "libcuda" in maps.read()
    except OSError:
        return None


def _primary_contexts() -> list[dict]:
    """Each device's primary context state, through ``cuda.bindings`` (which calls ``cuInit``)."""
    driver = _cu()
    (err,) = driver.cuInit(0)
    assert err == driver.CUresult.CUDA_SUCCESS, err
    err, count = driver.cuDeviceGetCount()
    states = []
    for ordinal in range(count):
        err, device = driver.cuDeviceGet(ordinal)
        err, flags, active = driver.cuDevicePrimaryCtxGetState(device)
        states.append({"device": ordinal, "active": bool(active), "flags": int(flags)})
    return states


def _kernel_sources() -> dict[str, int]:
    """How the current device's kernels were loaded: "cache" for each when the cache was warm."""
    from sgblas.runtime.device import current_device
    from sgblas.runtime.loader import load_reports

    counts: dict[str, int] = {}
    for report in load_reports(current_device()):
        counts[report.source] = counts.get(report.source, 0) + 1
    return counts


def scenario_import_time(spin_s: float, out: list) -> None:
    t0 = time.perf_counter()
    import sgblas  # noqa: F401 - what is timed
    seconds = time.perf_counter() - t0
    from sgblas.runtime import driver as sgblas_driver

    left = {"sgblas_opened_libcuda": sgblas_driver._libcuda is not None, "libcuda_mapped": _libcuda_mapped(),
            "modules": sorted(m for m in ("numba", "numpy", "cupy", "torch", "cuda.bindings") if m in sys.modules)}
    _emit({"scenario": "import_time", "import_ms": 1e3 * seconds, **left,
           "primary_contexts_after_import": _primary_contexts()}, out)


def scenario_handle_first_sgemm(spin_s: float, out: list) -> None:
    t0 = time.perf_counter()
    import sgblas
    t1 = time.perf_counter()
    handle = sgblas.Handle()
    t2 = time.perf_counter()
    import numpy as np
    from numba import cuda

    n = 1024
    a = cuda.to_device(np.ones(n * n, np.float32))
    b = cuda.to_device(np.ones(n * n, np.float32))
    c = cuda.to_device(np.zeros(n * n, np.float32))
    cuda.synchronize()
    calls = []
    for _ in range(2):
        t3 = time.perf_counter()
        status = sgblas.sgemm(handle, "N", "N", n, n, n, 1.0, a, n, b, n, 0.0, c, n)
        calls.append(time.perf_counter() - t3)
        cuda.synchronize()
    ok = status == sgblas.Status.SUCCESS and float(c.copy_to_host()[0]) == n
    _emit({"scenario": "handle_first_sgemm", "import_ms": 1e3 * (t1 - t0), "handle_ms": 1e3 * (t2 - t1),
           "first_sgemm_ms": 1e3 * calls[0], "second_sgemm_ms": 1e3 * calls[1],
           "import_handle_sgemm_ms": 1e3 * ((t2 - t0) + calls[0]), "ok": ok,
           "kernel_sources": _kernel_sources()}, out)


def scenario_gemm_first_call(spin_s: float, out: list) -> None:
    n = 1024
    try:
        import cupy as cp

        library = "cupy"
        a = cp.ones((n, n), cp.float32, order="F")
        b = cp.ones((n, n), cp.float32, order="F")
        c = cp.empty((n, n), cp.float32, order="F")
        synchronize = cp.cuda.Device().synchronize
        first = lambda: float(c[0, 0].get())  # noqa: E731
    except ImportError:
        import numpy as np
        from numba import cuda

        library = "numba"
        a = cuda.to_device(np.ones((n, n), np.float32, order="F"))
        b = cuda.to_device(np.ones((n, n), np.float32, order="F"))
        c = cuda.device_array((n, n), np.float32, order="F")
        synchronize = cuda.synchronize
        first = lambda: float(c.copy_to_host()[0, 0])  # noqa: E731
    synchronize()
    t0 = time.perf_counter()
    import sgblas
    t1 = time.perf_counter()
    calls = []
    for _ in range(2):
        t2 = time.perf_counter()
        sgblas.gemm(a, b, c)
        calls.append(time.perf_counter() - t2)
        synchronize()
    _emit({"scenario": "gemm_first_call", "library": library, "import_ms": 1e3 * (t1 - t0),
           "first_gemm_ms": 1e3 * calls[0], "second_gemm_ms": 1e3 * calls[1],
           "import_gemm_ms": 1e3 * ((t1 - t0) + calls[0]), "ok": first() == n,
           "kernel_sources": _kernel_sources()}, out)


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


def _get_function(spin_s: float, out: list, resident: bool) -> None:
    from numba import cuda

    import sgblas
    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime import driver
    from sgblas.runtime.loader import loaded_kernels

    label = "get_function_resident" if resident else "get_function"
    if resident:
        sgblas.initialize(0)  # the set-up: every kernel resident in the primary context (Numba's)
    table = loaded_kernels(0, REGISTRY)  # else the cubins as context-independent libraries only

    lib = driver._lib()
    for name, args in (("cuKernelGetFunction", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]),
                       ("cuFuncLoad", [ctypes.c_void_p]),
                       ("cuFuncIsLoaded", [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p]),
                       ("cuModuleGetLoadingMode", [ctypes.POINTER(ctypes.c_int)])):
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = ctypes.c_int
    mode = ctypes.c_int(-1)
    lib.cuModuleGetLoadingMode(ctypes.byref(mode))
    _emit({"scenario": label, "CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING"),
           "cuModuleGetLoadingMode": {1: "EAGER", 2: "LAZY"}.get(mode.value, mode.value)}, out)
    spin = _spinner()
    cuda.synchronize()  # the context is current (Numba made it)
    busy = _stream()
    for key, loaded in table.items():
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
        _emit({"scenario": label, "kernel": loaded.name, "rc": [rc1, rc2, rc3],
               "loaded_after_get_function": state.value,
               "get_function_ms": 1e3 * (t1 - t0), "is_loaded_ms": 1e3 * (t2 - t1),
               "func_load_ms": 1e3 * (t3 - t2), "busy_still_running": _busy_now(busy)}, out)
        cuda.synchronize()


def scenario_get_function(spin_s: float, out: list) -> None:
    _get_function(spin_s, out, resident=False)


def scenario_get_function_resident(spin_s: float, out: list) -> None:
    _get_function(spin_s, out, resident=True)


def _gemm_first(spin_s: float, out: list, initialize: bool) -> None:
    import cupy as cp

    n = 1024
    a = cp.ones((n, n), cp.float32, order="F")
    b = cp.ones((n, n), cp.float32, order="F")
    c = cp.empty((n, n), cp.float32, order="F")
    cp.cuda.Device().synchronize()
    import sgblas

    if initialize:
        t0 = time.perf_counter()
        sgblas.initialize()
        _emit({"scenario": "gemm_first_initialized", "what": "initialize()",
               "host_ms": 1e3 * (time.perf_counter() - t0)}, out)
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
        _emit({"scenario": "gemm_first_" + ("initialized" if initialize else "busy"),
               "call": attempt, "host_ms": 1e3 * host, "own_stream_done_ms": 1e3 * done,
               "finished_before_busy_stream": _busy_now(busy), "ok": float(c[5, 7].get()) == n}, out)
        cp.cuda.Device().synchronize()


def scenario_gemm_first_busy(spin_s: float, out: list) -> None:
    _gemm_first(spin_s, out, initialize=False)


def scenario_gemm_first_initialized(spin_s: float, out: list) -> None:
    _gemm_first(spin_s, out, initialize=True)


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
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help="comma-separated scenarios to run, each in fresh processes (default: all)")
    parser.add_argument("--repeat", type=int, default=1, help="fresh processes per scenario (default 1)")
    parser.add_argument("--spin", type=float, default=0.5, help="seconds of busy-stream work (default 0.5)")
    parser.add_argument("--out", default=None, help="write every record as JSON lines here")
    args = parser.parse_args(argv)
    out: list = []
    if args.scenario is not None:
        globals()[f"scenario_{args.scenario}"](args.spin, out)
        return 0
    chosen = [name for name in args.scenarios.split(",") if name]
    unknown = [name for name in chosen if name not in SCENARIOS]
    if unknown:
        parser.error(f"--scenarios names {', '.join(unknown)}, which are not among {', '.join(SCENARIOS)}")
    failed = 0
    for scenario in chosen:
        for run in range(args.repeat):
            result = subprocess.run([sys.executable, "-m", "perf.first_call", "--scenario", scenario,
                                     "--spin", str(args.spin)], capture_output=True, text=True)
            for line in result.stdout.splitlines():
                if line.startswith("{"):
                    record = dict(json.loads(line), process=run)
                    out.append(record)
                    print(json.dumps(record), flush=True)
            if result.returncode:
                failed += 1
                print(f"scenario {scenario} failed ({result.returncode}):\n{result.stderr[-3000:]}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
