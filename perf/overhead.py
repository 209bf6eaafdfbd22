"""Host cost of a call: pipelined tiny products, ``import sgblas``, and the first call.

Usage (from the repository root; both forms work)::

    python -m perf.overhead              # about a minute on an H200 once the kernel cache is warm
    python perf/overhead.py --calls 500 --repeats 3 --no-startup

Part 1, host time per call. For each method and each size (64^3 and 256^3 by default) the
script enqueues ``--calls`` calls back to back with no synchronisation inside the loop, reads
the host clock around the loop, then synchronises; it reports the loop time divided by the
number of calls (``host_us_per_call``) and, for reference, the time until the stream drained
(``drained_us_per_call``). Each measurement is repeated ``--repeats`` times, the methods
interleaved within a repeat; the median is the headline. Methods, all in the same process:

- ``sgemm_numba``: ``sgblas.sgemm`` on Numba device arrays, handle on a Numba stream;
- ``sgemm_cupy``: ``sgblas.sgemm`` on CuPy arrays, handle on a CuPy stream;
- ``gemm_cupy``: ``sgblas.gemm`` on 2-D CuPy arrays (Fortran order), same handle;
- ``gemm_torch``: ``sgblas.gemm`` on PyTorch tensors, handle on a PyTorch stream (if torch
  is importable);
- ``cublas_cupy``: cuBLAS ``gemmEx`` (FP32 PEDANTIC, host pointer mode) through CuPy, the
  baseline that the ratios divide by;
- ``numba_launch``: a Numba kernel with the GEMM argument list that returns at once, launched
  on Numba device arrays: the floor that numba-cuda's launch path sets.

Part 2, start-up (``--no-startup`` skips it). Fresh interpreters (``sys.executable -c ...``)
measure inside themselves with ``time.perf_counter``: ``import sgblas`` alone; and, in
another child, importing numba.cuda, then ``import sgblas``, ``sgblas.Handle``, the first and
the second ``sgemm`` (each until the stream is synchronised), counting the compile events
numba-cuda broadcasts meanwhile (``numba-cuda:compile``, ``numba-cuda:run_pass``,
``numba-cuda:compiler_lock`` through ``numba.cuda.core.event`` recorders); their sum of
import, handle and first call is the start-up figure. A third child imports sgblas and creates
its handle before anything else touches CUDA (the handle then creates the context), and times
the first call on Numba arrays made after. One priming child runs first so that the kernel
cache is warm; its numbers are stored apart.

Writes ``perf/results/overhead_<UTC date-time>_<device>.json`` and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python perf/overhead.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perf import environment, results_io  # noqa: E402

__all__ = [
    "METHODS",
    "SIZES",
    "COMPILE_EVENT_KINDS",
    "time_pipelined",
    "child_import_code",
    "child_first_call_code",
    "child_sgblas_first_code",
    "parse_child_output",
    "summarize_startup",
    "parse_args",
    "main",
]

SIZES: tuple[int, ...] = (64, 256)

#: method key -> label, in table order (the baseline, cuBLAS, after the sgblas forms).
METHODS: dict[str, str] = {
    "sgemm_numba": "sgblas.sgemm, Numba device arrays",
    "sgemm_cupy": "sgblas.sgemm, CuPy arrays",
    "gemm_cupy": "sgblas.gemm, CuPy arrays",
    "gemm_torch": "sgblas.gemm, PyTorch tensors",
    "cublas_cupy": "cuBLAS gemmEx through CuPy (PEDANTIC, host pointer mode)",
    "numba_launch": "bare Numba kernel launch, GEMM argument list (floor)",
}

COMPILE_EVENT_KINDS: tuple[str, ...] = (
    "numba-cuda:compile",
    "numba-cuda:run_pass",
    "numba-cuda:compiler_lock",
)

#: Marks the line a child prints its JSON on, so stray output cannot be mistaken for it.
CHILD_MARK = "SGBLAS_PERF_CHILD "


# --------------------------------------------------------------------------------------------
# Part 1: pipelined calls


def time_pipelined(call: Callable[[], Any], synchronize: Callable[[], None],
                   calls: int) -> tuple[float, float]:
    """(host seconds per call for the enqueue loop, seconds per call until drained)."""
    synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    t1 = time.perf_counter()
    synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / calls, (t2 - t0) / calls


class _Method:
    """One way of calling a size-n product: a zero-argument call and its stream's sync."""

    def __init__(self, key: str, size: int, call: Callable[[], Any],
                 synchronize: Callable[[], None], check: Callable[[], str | None] | None = None):
        self.key = key
        self.size = size
        self.call = call
        self.synchronize = synchronize
        self.check = check
        self.host: list[float] = []
        self.drained: list[float] = []


def _noop_gemm_kernel():
    from numba import cuda

    @cuda.jit
    def noop_gemm_args(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):
        return

    return noop_gemm_args


def build_methods(size: int, wanted: Sequence[str], sgblas: Any, state: dict[str, Any]
                  ) -> tuple[list[_Method], list[dict[str, Any]]]:
    """Set up every wanted method at ``size``; (ready methods, records of those skipped)."""
    import numpy as np

    ready: list[_Method] = []
    skipped: list[dict[str, Any]] = []
    rng = np.random.default_rng(size)
    host = {name: rng.standard_normal(size * size, dtype=np.float32) for name in "ABC"}
    n = size

    def skip(key: str, status: str, reason: str) -> None:
        skipped.append({"method": key, "label": METHODS[key], "size": size,
                        "status": status, "reason": reason})

    for key in wanted:
        try:
            if key in ("sgemm_numba", "numba_launch"):
                from numba import cuda

                if "numba_stream" not in state:
                    state["numba_stream"] = cuda.stream()
                    state["numba_handle"] = sgblas.Handle(stream=state["numba_stream"])
                stream = state["numba_stream"]
                A, B, C = (cuda.to_device(host[x], stream=stream) for x in "ABC")
                stream.synchronize()
                if key == "sgemm_numba":
                    h = state["numba_handle"]
                    call = _sgemm_call(sgblas, h, n, A, B, C)
                else:
                    kernel = state.setdefault("noop", _noop_gemm_kernel())
                    args = (np.int32(n), np.int32(n), np.int32(n), np.float32(1.0), A,
                            np.int32(n), B, np.int32(n), np.float32(0.0), C, np.int32(n))
                    grid = ((n + 127) // 128, (n + 63) // 64, 1)
                    kernel[grid, (256, 1, 1), stream](*args)  # compile outside the timing
                    stream.synchronize()

                    def call(kernel=kernel, grid=grid, stream=stream, args=args):
                        kernel[grid, (256, 1, 1), stream](*args)
                ready.append(_Method(key, size, call, stream.synchronize,
                                     _status_check(call) if key == "sgemm_numba" else None))
            elif key in ("sgemm_cupy", "gemm_cupy", "cublas_cupy", "gemm_torch") and \
                    environment.simulator_enabled():
                skip(key, "skipped", "the CUDA simulator is enabled (Numba arrays only)")
            elif key in ("sgemm_cupy", "gemm_cupy", "cublas_cupy"):
                backend = state.get("cupy_backend")
                if backend is None:
                    if state.get("cupy_error"):
                        skip(key, "skipped", state["cupy_error"])
                        continue
                    try:
                        from perf.bench import CupyBackend

                        backend = state["cupy_backend"] = CupyBackend()
                    except ImportError as exc:
                        state["cupy_error"] = f"CuPy is not importable ({exc})"
                        skip(key, "skipped", state["cupy_error"])
                        continue
                cp = backend.cp
                with backend.activated():
                    A, B, C = (cp.asarray(host[x]) for x in "ABC")
                    backend.synchronize()
                if key == "cublas_cupy":
                    from perf.bench import Case, CublasPedantic

                    cublas = state.get("cublas")
                    if cublas is None:
                        cublas = state["cublas"] = CublasPedantic(backend)
                    case = Case(n, n, n, "N", "N", "custom")
                    ptrs = (int(A.data.ptr), int(B.data.ptr), int(C.data.ptr))

                    def call(cublas=cublas, case=case, ptrs=ptrs, keep=(A, B, C)):
                        cublas(case, *ptrs)
                    ready.append(_Method(key, size, call, backend.synchronize))
                    continue
                if "cupy_handle" not in state:
                    state["cupy_handle"] = sgblas.Handle(stream=backend.stream)
                h = state["cupy_handle"]
                if key == "sgemm_cupy":
                    call = _sgemm_call(sgblas, h, n, A, B, C)
                    ready.append(_Method(key, size, call, backend.synchronize,
                                         _status_check(call)))
                else:
                    a2, b2, c2 = (x.reshape((n, n)).T for x in (A, B, C))  # Fortran-order views

                    def call(a2=a2, b2=b2, c2=c2, h=h):
                        sgblas.gemm(a2, b2, c2, handle=h)
                    ready.append(_Method(key, size, call, backend.synchronize))
            elif key == "gemm_torch":
                try:
                    import torch
                except ImportError as exc:
                    skip(key, "skipped", f"PyTorch is not importable ({exc})")
                    continue
                if not torch.cuda.is_available():
                    skip(key, "skipped", "torch.cuda.is_available() is False")
                    continue
                if "torch_stream" not in state:
                    state["torch_stream"] = torch.cuda.Stream()
                    state["torch_handle"] = sgblas.Handle(stream=state["torch_stream"])
                ts, h = state["torch_stream"], state["torch_handle"]
                a, b, c = (torch.from_numpy(host[x].reshape(n, n)).cuda() for x in "ABC")
                torch.cuda.synchronize()

                def call(a=a, b=b, c=c, h=h):
                    sgblas.gemm(a, b, c, handle=h)
                ready.append(_Method(key, size, call, ts.synchronize))
            else:
                raise ValueError(f"unknown method {key!r}")
        except Exception as exc:
            skip(key, "error", environment.scrub_paths(f"{type(exc).__name__}: {exc}"))
    return ready, skipped


def _sgemm_call(sgblas: Any, h: Any, n: int, A: Any, B: Any, C: Any) -> Callable[[], Any]:
    sgemm = sgblas.sgemm

    def call() -> Any:
        return sgemm(h, "N", "N", n, n, n, 1.0, A, n, B, n, 0.0, C, n)
    return call


def _status_check(call: Callable[[], Any]) -> Callable[[], str | None]:
    def check() -> str | None:
        status = call()
        if status is None or int(status) != 0:
            return f"sgblas.sgemm returned {getattr(status, 'name', status)!r}"
        return None
    return check


def run_pipelined(args: argparse.Namespace, sgblas: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    state: dict[str, Any] = {}
    records: list[dict[str, Any]] = []
    for size in args.sizes:
        methods, skipped = build_methods(size, args.methods, sgblas, state)
        records += skipped
        backend = state.get("cupy_backend")
        # CuPy's stream is made current for every method: gemmEx re-binds its handle to the
        # current stream on each call; Numba and PyTorch calls use their own handle's stream.
        scope = backend.activated() if backend is not None else contextlib.nullcontext()
        with scope:
            live: list[_Method] = []
            for method in methods:
                try:
                    if method.check is not None and (problem := method.check()):
                        raise RuntimeError(problem)
                    time_pipelined(method.call, method.synchronize, args.warmup_calls)
                    live.append(method)
                except Exception as exc:
                    records.append({"method": method.key, "label": METHODS[method.key],
                                    "size": size, "status": "error",
                                    "reason": environment.scrub_paths(f"{type(exc).__name__}: {exc}")})
            for _ in range(args.repeats):
                for method in list(live):
                    try:
                        host, drained = time_pipelined(method.call, method.synchronize, args.calls)
                    except Exception as exc:  # drop the method, keep the others' numbers
                        live.remove(method)
                        records.append({"method": method.key, "label": METHODS[method.key],
                                        "size": size, "status": "error",
                                        "reason": environment.scrub_paths(
                                            f"{type(exc).__name__}: {exc}")})
                        continue
                    method.host.append(host)
                    method.drained.append(drained)
            for method in live:
                records.append({
                    "method": method.key, "label": METHODS[method.key], "size": size,
                    "status": "ok", "reason": None, "calls": args.calls,
                    "repeats": args.repeats,
                    "host_us_per_call": results_io.summarize([t * 1e6 for t in method.host]),
                    "drained_us_per_call": results_io.summarize([t * 1e6 for t in method.drained]),
                    "samples_host_us": [round(t * 1e6, 3) for t in method.host],
                    "samples_drained_us": [round(t * 1e6, 3) for t in method.drained],
                })
    order = {key: i for i, key in enumerate(METHODS)}
    records.sort(key=lambda r: (r["size"], order.get(r["method"], 99)))
    info = {"cublas": state["cublas"].describe() if state.get("cublas") else None}
    if state.get("cublas"):
        state["cublas"].close()
    return records, info


# --------------------------------------------------------------------------------------------
# Part 2: start-up in fresh processes


def child_import_code() -> str:
    """Source of a child that times ``import sgblas`` and nothing else."""
    return (
        "import time\n"
        "t0 = time.perf_counter()\n"
        "import sgblas\n"
        "t1 = time.perf_counter()\n"
        "import json\n"
        f"print({CHILD_MARK!r} + json.dumps({{'import_s': t1 - t0}}))\n"
    )


def child_first_call_code(size: int) -> str:
    """Source of a child that times import, handle and the first two calls, counting compiles."""
    kinds = repr(COMPILE_EVENT_KINDS)
    return f"""\
import json, time
t0 = time.perf_counter()
import numba.cuda
from numba.cuda.core import event as _event
t1 = time.perf_counter()
_recorders = {{}}
for _kind in {kinds}:
    _recorders[_kind] = _event.RecordingListener()
    _event.register(_kind, _recorders[_kind])

def counts():
    return {{k.split(":", 1)[1]: sum(1 for _, e in r.buffer if e.is_start)
            for k, r in _recorders.items()}}

t2 = time.perf_counter()
import sgblas
t3 = time.perf_counter()
c_import = counts()
import numpy as np
from numba import cuda
n = {int(size)}
stream = cuda.stream()
t4 = time.perf_counter()
handle = sgblas.Handle(stream=stream)
t5 = time.perf_counter()
c_handle = counts()
rng = np.random.default_rng(0)
A = cuda.to_device(rng.standard_normal(n * n, dtype=np.float32), stream=stream)
B = cuda.to_device(rng.standard_normal(n * n, dtype=np.float32), stream=stream)
C = cuda.device_array(n * n, dtype=np.float32, stream=stream)
stream.synchronize()
t6 = time.perf_counter()
s1 = sgblas.sgemm(handle, "N", "N", n, n, n, 1.0, A, n, B, n, 0.0, C, n)
stream.synchronize()
t7 = time.perf_counter()
c_first = counts()
s2 = sgblas.sgemm(handle, "N", "N", n, n, n, 1.0, A, n, B, n, 0.0, C, n)
stream.synchronize()
t8 = time.perf_counter()
c_second = counts()
print({CHILD_MARK!r} + json.dumps({{
    "numba_import_s": t1 - t0, "import_after_numba_s": t3 - t2, "handle_s": t5 - t4,
    "first_call_s": t7 - t6, "second_call_s": t8 - t7,
    "status_first": int(s1), "status_second": int(s2),
    "kernel": str(getattr(sgblas.explain(handle, "N", "N", n, n, n, A, n, B, n, C, n), "kernel", "")),
    "counts": {{"import": c_import, "handle": c_handle, "first_call": c_first, "second_call": c_second}},
}}))
"""


def child_sgblas_first_code(size: int) -> str:
    """Source of a child that imports sgblas and creates its handle before anything else
    touches CUDA (so the handle creates the primary context), then makes Numba arrays
    (untimed) and times the first call."""
    kinds = repr(COMPILE_EVENT_KINDS)
    return f"""\
import json, sys, time
t0 = time.perf_counter()
import sgblas
t1 = time.perf_counter()
handle = sgblas.Handle()
t2 = time.perf_counter()
numba_before_call = "numba" in sys.modules
import numpy as np
from numba import cuda
from numba.cuda.core import event as _event
_recorders = {{k: _event.RecordingListener() for k in {kinds}}}
for _kind, _r in _recorders.items():
    _event.register(_kind, _r)
n = {int(size)}
rng = np.random.default_rng(0)
A = cuda.to_device(rng.standard_normal(n * n, dtype=np.float32))
B = cuda.to_device(rng.standard_normal(n * n, dtype=np.float32))
C = cuda.device_array(n * n, dtype=np.float32)
cuda.synchronize()
t3 = time.perf_counter()
s1 = sgblas.sgemm(handle, "N", "N", n, n, n, 1.0, A, n, B, n, 0.0, C, n)
cuda.synchronize()
t4 = time.perf_counter()
print({CHILD_MARK!r} + json.dumps({{
    "import_s": t1 - t0, "handle_s": t2 - t1, "first_call_s": t4 - t3, "status_first": int(s1),
    "numba_imported_by_sgblas": numba_before_call,
    "first_call_events": {{k.split(":", 1)[1]: sum(1 for _, e in r.buffer if e.is_start)
                          for k, r in _recorders.items()}},
}}))
"""


def parse_child_output(stdout: str) -> dict[str, Any]:
    """The JSON a child printed after :data:`CHILD_MARK` (the last such line)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(CHILD_MARK):
            return json.loads(line[len(CHILD_MARK):])
    raise ValueError("the child printed no result line")


def _phase_counts(cumulative: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Per-phase compile-event counts from the child's cumulative snapshots."""
    phases = ("import", "handle", "first_call", "second_call")
    out: dict[str, dict[str, int]] = {}
    previous: dict[str, int] = {}
    for phase in phases:
        now = cumulative.get(phase) or {}
        out[phase] = {kind: int(now.get(kind, 0)) - int(previous.get(kind, 0)) for kind in now}
        previous = now
    return out


def summarize_startup(import_runs: Sequence[dict[str, Any]],
                      first_call_runs: Sequence[dict[str, Any]],
                      sgblas_first_runs: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Statistics over the children: times in seconds, compile events per phase (medians).

    ``import_handle_first_call_s`` is the issue's start-up figure: ``import sgblas``, the
    handle and the first call (until synchronised) in a process where numba.cuda and the
    arrays were ready; ``sgblas_first_*`` the same steps when sgblas comes first and its
    handle creates the CUDA context.
    """
    summary: dict[str, Any] = {"import_s": results_io.summarize([r["import_s"] for r in import_runs])}
    for key in ("numba_import_s", "import_after_numba_s", "handle_s", "first_call_s", "second_call_s"):
        summary[key] = results_io.summarize([r[key] for r in first_call_runs])
    summary["import_handle_first_call_s"] = results_io.summarize(
        [r["import_after_numba_s"] + r["handle_s"] + r["first_call_s"] for r in first_call_runs])
    if sgblas_first_runs:
        for key in ("import_s", "handle_s", "first_call_s"):
            summary[f"sgblas_first_{key}"] = results_io.summarize([r[key] for r in sgblas_first_runs])
        summary["sgblas_first_total_s"] = results_io.summarize(
            [r["import_s"] + r["handle_s"] + r["first_call_s"] for r in sgblas_first_runs])
        summary["sgblas_first_numba_imported_by_sgblas"] = any(
            r.get("numba_imported_by_sgblas") for r in sgblas_first_runs)
        summary["sgblas_first_first_call_events"] = [r.get("first_call_events") for r in sgblas_first_runs]
    per_child = [_phase_counts(r.get("counts") or {}) for r in first_call_runs]
    events: dict[str, dict[str, float]] = {}
    for phase in ("import", "handle", "first_call", "second_call"):
        kinds = sorted({kind for child in per_child for kind in child.get(phase, {})})
        events[phase] = {
            kind: results_io.summarize([child[phase].get(kind, 0) for child in per_child])["median"]
            for kind in kinds
        }
    summary["compile_events"] = events
    summary["compile_events_per_child"] = per_child
    return summary


def _run_child(code: str, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    root = str(environment.REPO_ROOT)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-2000:]
        raise RuntimeError(f"child exited with {proc.returncode}: {environment.scrub_paths(tail)}")
    result = parse_child_output(proc.stdout)
    result["process_wall_s"] = wall
    return result


def measure_startup(args: argparse.Namespace) -> dict[str, Any]:
    try:
        priming = _run_child(child_first_call_code(args.startup_size), timeout=args.child_timeout)
        imports = [_run_child(child_import_code(), args.child_timeout)
                   for _ in range(args.startup_repeats)]
        first_calls = [_run_child(child_first_call_code(args.startup_size), args.child_timeout)
                       for _ in range(args.startup_repeats)]
        sgblas_first = [_run_child(child_sgblas_first_code(args.startup_size), args.child_timeout)
                        for _ in range(args.startup_repeats)]
    except Exception as exc:
        return {"status": "error",
                "reason": environment.scrub_paths(f"{type(exc).__name__}: {exc}")}
    bad = [r for r in first_calls if r.get("status_first") != 0 or r.get("status_second") != 0]
    bad += [r for r in sgblas_first if r.get("status_first") != 0]
    summary = summarize_startup(imports, first_calls, sgblas_first)
    summary.update(
        status="ok" if not bad else "error",
        reason=None if not bad else f"{len(bad)} child(ren) got a non-SUCCESS status from sgemm",
        size=args.startup_size,
        kernel=first_calls[0].get("kernel") if first_calls else None,
        priming=priming,
        children={"import": imports, "first_call": first_calls, "sgblas_first": sgblas_first},
        method="fresh `python -c` processes, perf_counter inside the child; a priming child "
               "ran first so the kernel cache is warm",
    )
    return summary


# --------------------------------------------------------------------------------------------
# Command line


def _parse_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        sizes = ()
    if not sizes or any(s <= 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes {text!r} are not positive integers like 64,256")
    return sizes


def _parse_methods(text: str) -> tuple[str, ...]:
    if text.strip().lower() == "all":
        return tuple(METHODS)
    methods = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(METHODS)}")
    return methods


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m perf.overhead",
        description="Host time per sgblas call against cuBLAS through CuPy, import time and "
                    "first-call time.",
    )
    parser.add_argument("--sizes", type=_parse_sizes, default=SIZES, metavar="64,256")
    parser.add_argument("--methods", type=_parse_methods, default=tuple(METHODS),
                        metavar=",".join(METHODS))
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop (default 2000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed loops per method (default 5)")
    parser.add_argument("--warmup-calls", type=int, default=100)
    parser.add_argument("--no-startup", action="store_true", help="skip the fresh-process part")
    parser.add_argument("--startup-repeats", type=int, default=3)
    parser.add_argument("--startup-size", type=int, default=256)
    parser.add_argument("--child-timeout", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=results_io.RESULTS_DIR, metavar="DIR")
    args = parser.parse_args(argv)
    for name in ("calls", "repeats", "warmup_calls", "startup_repeats", "startup_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    created = results_io.utc_now()
    tf32_ok, tf32_note = True, None
    if "cublas_cupy" in args.methods:
        from perf.bench import prepare_tf32_override

        tf32_ok, tf32_note = prepare_tf32_override()
        if not tf32_ok:
            print(f"perf.overhead: refusing to run cuBLAS: {tf32_note}", file=sys.stderr)
            return 2

    from perf.bench import _gpu_present

    if not environment.simulator_enabled() and not _gpu_present():
        print("perf.overhead: no CUDA GPU is usable here; run on a GPU machine, or set "
              "NUMBA_ENABLE_CUDASIM=1 for a dry run of the machinery at tiny sizes", file=sys.stderr)
        return 2
    import sgblas

    device = environment.device_info()
    try:
        records, info = run_pipelined(args, sgblas)
    except Exception as exc:
        records, info = [], {"error": environment.scrub_paths(f"{type(exc).__name__}: {exc}"),
                             "traceback": environment.scrub_paths(traceback.format_exc(limit=8))}
    startup = {"status": "skipped", "reason": "--no-startup"} if args.no_startup else measure_startup(args)

    env_info = environment.environment_info()
    doc: dict[str, Any] = {
        "schema": results_io.OVERHEAD_SCHEMA,
        "kind": "overhead",
        "created": created.isoformat(),
        "host": env_info["host"],
        "command": ["python", "-m", "perf.overhead",
                    *environment.public_argv(list(sys.argv[1:] if argv is None else argv))],
        "environment": env_info,
        "device": device,
        "settings": {
            "args": {k: v for k, v in vars(args).items() if k != "out"},
            "timing": "host perf_counter around a loop of calls with no synchronisation, then "
                      "synchronise; per call = loop time / calls; median over repeats",
            "tf32_override": tf32_note,
            **info,
        },
        "methods": records,
        "startup": startup,
        "elapsed_s": time.perf_counter() - started,
    }
    path = results_io.save_results(doc, args.out)
    print(results_io.overhead_markdown(doc))
    print()
    print(results_io.startup_markdown(doc))
    print()
    print(f"wrote {path} in {doc['elapsed_s']:.0f} s")
    bad = [r for r in records if r["status"] == "error"] or startup.get("status") == "error"
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
