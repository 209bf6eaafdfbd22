"""Throughput of ``sgblas.sgemm`` against cuBLAS strict FP32, in one process, on one stream.

Usage (from the repository root; both forms work)::

    python -m perf.bench                 # every shape and transpose pair (about 3-4 min on an H200)
    python -m perf.bench --quick         # a few shapes, short timings (under a minute)
    python perf/bench.py --shape 4096x4096x4096 --pairs NN,TT
    python -m perf.bench --list          # print the cases and exit (no GPU needed)

What is measured, and how:

- cuBLAS runs through CuPy's ``cupy.cuda.cublas.gemmEx`` with ``CUBLAS_COMPUTE_32F_PEDANTIC``
  (FP32 inputs, FP32 arithmetic, no TF32), its own handle in host pointer mode, alpha and beta
  as float32 host values. ``NVIDIA_TF32_OVERRIDE=0`` is set before CuPy loads cuBLAS; if the
  variable is already set to anything else the script refuses to run cuBLAS.
- sgblas runs through ``sgblas.sgemm`` on a handle bound to the same CuPy stream.
- Operands are column-major flat float32 buffers that end exactly at each matrix's last
  element (``(cols - 1) * ld + rows`` elements past its first), filled with fresh
  standard-normal values (never zeros). Leading dimensions are tight unless ``--pad P`` adds P
  to each; ``--offset O`` (or ``OA,OB,OC``) starts each matrix O elements into its allocation,
  so its pointer is only 4-byte aligned when O is not a multiple of 4. When a case's working
  set is below ``--l2-multiple`` times the L2 size, several buffer sets are allocated and the
  timed calls rotate among them, so no call finds its operands in L2 from the previous one.
- Timing: CUDA events between consecutive calls of a block. Each block starts behind a short
  sleeping kernel that holds the GPU while the host enqueues the block, so the event
  intervals are GPU time, not host launch latency (``spin_covered`` records whether that
  held). Warm-up calls precede the timed ones. The number of timed calls is set by time
  (``--target-s`` of timed work per case and library, at least ``--min-reps``, at most
  ``--max-reps``, and fewer than ``--min-reps`` only for calls so slow that they would pass
  ``--max-case-s``). sgblas and cuBLAS blocks alternate, so clock drift affects both alike.
  The median is the headline; min, max, quartiles, IQR and every sample are stored.
- Each case records the kernel sgblas chose (``sgblas.explain(...).kernel``) and checks
  sgblas against cuBLAS PEDANTIC on the same inputs: relative Frobenius error
  ``||C_sgblas - C_cublas||_F / ||C_cublas||_F`` must be below ``--tolerance`` (1e-5) or the
  case is marked failed. Both are also compared with a float64 product computed by CuPy.
- Without CuPy (or with ``--backend numba``), sgblas is timed alone on Numba device arrays and
  checked against a float64 host projection ``C x`` vs ``op(A) (op(B) x)``; ratios are absent.
- Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the script runs with host timing at
  whatever tiny shapes it is given: a dry run of the machinery, its numbers meaningless.

Writes ``perf/results/bench_<UTC date-time>_<device>.json`` (see ``perf/README.md``) and prints
a Markdown table. Exit status: 0 if every case passed, 1 if any failed or errored, 2 on a
usage or setup error.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python perf/bench.py`: make `perf` and `sgblas` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perf import environment, results_io  # noqa: E402  (after the path fix above)

__all__ = [
    "SQUARE_SIZES",
    "RECT_SHAPES",
    "PAIRS",
    "Case",
    "parse_shape",
    "parse_pairs",
    "parse_offsets",
    "build_cases",
    "buffer_sets",
    "plan_reps",
    "plan_batch",
    "prepare_tf32_override",
    "parse_args",
    "main",
]

SQUARE_SIZES: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384)
RECT_SHAPES: tuple[tuple[int, int, int], ...] = (
    (8192, 128, 8192),
    (128, 8192, 8192),
    (5000, 3000, 1000),
    (4096, 4096, 64),
    (1000, 1000, 100000),
)
PAIRS: tuple[str, ...] = ("NN", "NT", "TN", "TT")

QUICK_SQUARE_SIZES: tuple[int, ...] = (1024, 4096)
QUICK_RECT_SHAPES: tuple[tuple[int, int, int], ...] = ((5000, 3000, 1000), (4096, 4096, 64))

#: L2 size assumed when the device does not report one (the H200 has 60 MB).
DEFAULT_L2_BYTES = 60 * 1024 * 1024
FLOAT32_BYTES = 4
#: Largest number of calls between two host synchronisations, and GPU time per block.
MAX_BATCH = 100
MAX_BLOCK_GPU_S = 0.05
#: Upper bound on the sleeping kernel that heads a block, and retries when it was too short.
MAX_SPIN_S = 0.5
SPIN_RETRIES = 3


# --------------------------------------------------------------------------------------------
# Cases


@dataclass(frozen=True)
class Case:
    """One column-major product C(m,n) = op(A) op(B).

    Leading dimensions are the tight ones plus ``pad``; each operand starts ``offsets``
    (A, B, C) float32 elements past the start of its allocation, as a padded array or a
    sliced view hands them to cuBLAS.
    """

    m: int
    n: int
    k: int
    transa: str
    transb: str
    shape_set: str  # "square", "rect" or "custom"
    pad: int = 0
    offsets: tuple[int, int, int] = (0, 0, 0)

    @property
    def pair(self) -> str:
        return self.transa + self.transb

    @property
    def flop(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def a_dims(self) -> tuple[int, int]:
        """(rows, cols) of A as stored: m x k for 'N', k x m for 'T'."""
        return (self.m, self.k) if self.transa == "N" else (self.k, self.m)

    @property
    def b_dims(self) -> tuple[int, int]:
        """(rows, cols) of B as stored: k x n for 'N', n x k for 'T'."""
        return (self.k, self.n) if self.transb == "N" else (self.n, self.k)

    @property
    def lda(self) -> int:
        return self.a_dims[0] + self.pad

    @property
    def ldb(self) -> int:
        return self.b_dims[0] + self.pad

    @property
    def ldc(self) -> int:
        return self.m + self.pad

    @property
    def elements(self) -> tuple[int, int, int]:
        """Extent of A, B and C from their first elements: (cols - 1) * ld + rows each.

        The last column stops at the last row, not at ld, so a buffer of exactly this size
        ends at the matrix's last element, and a kernel that reads past it is caught.
        """
        (a_rows, a_cols), (b_rows, b_cols) = self.a_dims, self.b_dims
        return ((a_cols - 1) * self.lda + a_rows, (b_cols - 1) * self.ldb + b_rows,
                (self.n - 1) * self.ldc + self.m)

    @property
    def allocated(self) -> tuple[int, int, int]:
        """Elements allocated for A, B and C: the offset ahead of each matrix plus its extent."""
        return tuple(o + e for o, e in zip(self.offsets, self.elements))  # type: ignore[return-value]

    @property
    def working_set_bytes(self) -> int:
        return FLOAT32_BYTES * sum(self.allocated)

    @property
    def label(self) -> str:
        return results_io.shape_label(self.m, self.n, self.k, self.pad, self.offsets)


def parse_shape(text: str) -> tuple[int, int, int]:
    """'MxNxK' (or 'M,N,K') -> (m, n, k), each a positive integer."""
    parts = text.lower().replace(",", "x").split("x")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 3 or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(
            f"shape {text!r} is not MxNxK with three positive integers (e.g. 4096x4096x4096)")
    return values  # type: ignore[return-value]


def parse_pairs(text: str) -> tuple[str, ...]:
    """'NN,TT' -> ('NN', 'TT'); 'all' -> every pair. Order kept, duplicates dropped."""
    if text.strip().lower() == "all":
        return PAIRS
    pairs: list[str] = []
    for item in text.split(","):
        pair = item.strip().upper()
        if pair not in PAIRS:
            raise argparse.ArgumentTypeError(
                f"transpose pair {item.strip()!r} is not one of {', '.join(PAIRS)}")
        if pair not in pairs:
            pairs.append(pair)
    if not pairs:
        raise argparse.ArgumentTypeError("no transpose pair given")
    return tuple(pairs)


def parse_offsets(text: str) -> tuple[int, int, int]:
    """'O' -> (O, O, O); 'OA,OB,OC' -> (OA, OB, OC); each a non-negative integer."""
    try:
        values = tuple(int(p) for p in text.split(","))
    except ValueError:
        values = ()
    if len(values) == 1:
        values = values * 3
    if len(values) != 3:
        raise argparse.ArgumentTypeError(
            f"offset {text!r} is not one integer or three comma-separated integers (e.g. 1 or 1,2,3)")
    negative = [v for v in values if v < 0]
    if negative:
        raise argparse.ArgumentTypeError(
            f"offset {text!r} has the negative value {negative[0]}; offsets count float32 elements "
            f"after the start of each allocation, so they must be 0 or more")
    return values  # type: ignore[return-value]


def build_cases(shapes: Sequence[tuple[int, int, int, str]], pairs: Sequence[str], pad: int = 0,
                offsets: Sequence[int] = (0, 0, 0)) -> list[Case]:
    """Every (shape, pair), cheapest first, so a time budget that runs out drops the largest.

    ``pad`` and ``offsets`` apply to every case alike.
    """
    seen: set[tuple[int, int, int, str]] = set()
    cases = []
    for m, n, k, shape_set in shapes:
        for pair in pairs:
            key = (m, n, k, pair)
            if key in seen:
                continue
            seen.add(key)
            cases.append(Case(m, n, k, pair[0], pair[1], shape_set, pad, tuple(offsets)))
    order = {p: i for i, p in enumerate(PAIRS)}
    cases.sort(key=lambda c: (c.flop, c.m, c.n, c.k, order[c.pair]))
    return cases


def selected_shapes(args: argparse.Namespace) -> list[tuple[int, int, int, str]]:
    if args.shape:
        return [(m, n, k, "custom") for m, n, k in args.shape]
    square = QUICK_SQUARE_SIZES if args.quick else SQUARE_SIZES
    rect = QUICK_RECT_SHAPES if args.quick else RECT_SHAPES
    shapes: list[tuple[int, int, int, str]] = []
    if args.shapes in ("square", "all"):
        shapes += [(s, s, s, "square") for s in square]
    if args.shapes in ("rect", "all"):
        shapes += [(m, n, k, "rect") for m, n, k in rect]
    if args.max_dim:
        shapes = [s for s in shapes if max(s[:3]) <= args.max_dim]
    return shapes


def buffer_sets(working_set_bytes: int, l2_bytes: int, l2_multiple: float = 4.0,
                max_sets: int = 32) -> int:
    """Buffer sets to rotate among so that consecutive calls never share cached operands.

    One set when a case's operands already exceed ``l2_multiple`` times the L2 size; otherwise
    enough sets that together they do, at most ``max_sets``.
    """
    if working_set_bytes <= 0:
        return 1
    target = l2_multiple * max(l2_bytes, 1)
    if working_set_bytes >= target:
        return 1
    return max(1, min(max_sets, math.ceil(target / working_set_bytes)))


def plan_reps(t_call: float, target_s: float, min_reps: int, max_reps: int,
              max_case_s: float, floor_reps: int = 3) -> tuple[int, bool]:
    """(timed calls, whether the count was cut below ``min_reps`` by ``max_case_s``).

    ``target_s / t_call`` calls, clamped to [min_reps, max_reps]; a call so slow that
    ``min_reps`` of them would take longer than ``max_case_s`` gets
    ``max(floor_reps, max_case_s // t_call)`` instead.
    """
    if not t_call > 0:
        return max(min_reps, 1), False
    reps = min(max_reps, max(min_reps, math.ceil(target_s / t_call)))
    if reps * t_call > max_case_s:
        cut = max(floor_reps, int(max_case_s // t_call))
        if cut < reps:
            return max(1, cut), cut < min_reps
    return reps, False


def plan_batch(t_call: float, host_s_per_call: float, reps: int,
               max_block_gpu_s: float = MAX_BLOCK_GPU_S, max_batch: int = MAX_BATCH
               ) -> tuple[int, float]:
    """(calls per event block, seconds of sleeping kernel ahead of the block).

    A block holds up to ``max_block_gpu_s`` of GPU work; the sleeping kernel lasts 1.5 times
    the host time to enqueue the block plus 0.2 ms, so the GPU is still busy when the host has
    enqueued the last call.
    """
    batch = max(1, min(max_batch, reps, int(max_block_gpu_s // t_call) if t_call > 0 else 1))
    spin = min(MAX_SPIN_S, 1.5 * max(host_s_per_call, 0.0) * batch + 2e-4)
    return batch, spin


def prepare_tf32_override(environ: dict[str, str] | Any = os.environ) -> tuple[bool, str]:
    """Make ``NVIDIA_TF32_OVERRIDE=0`` hold before cuBLAS loads; (ok, what was done).

    Unset: set it to 0. Already 0: leave it. Set to anything else: not ok (cuBLAS must not run,
    since the variable applies to every NVIDIA library the process loads).
    """
    value = environ.get("NVIDIA_TF32_OVERRIDE")
    if value is None:
        environ["NVIDIA_TF32_OVERRIDE"] = "0"
        return True, "set to 0 by perf.bench before CuPy/cuBLAS were imported"
    if value.strip() == "0":
        return True, "already 0 in the environment"
    return False, (
        f"NVIDIA_TF32_OVERRIDE={value!r} is set in the environment; the strict FP32 comparison "
        f"needs it unset or 0 (unset it, or pass --no-cublas to time sgblas alone)"
    )


# --------------------------------------------------------------------------------------------
# Backends: where the arrays live and how the GPU is timed


class SgemmStatusError(RuntimeError):
    """sgblas.sgemm returned a status other than SUCCESS."""


def _numba_spin_kernel():
    """A one-thread kernel that sleeps ``iterations`` x ~1 us: holds the GPU while blocks queue."""
    from numba import cuda

    @cuda.jit
    def spin_sleep_1us(iterations):
        for _ in range(iterations):
            cuda.nanosleep(1000)

    return spin_sleep_1us


class Backend:
    """Arrays, stream, events and the sleeping kernel for one array library."""

    name = "abstract"
    events = True

    def __init__(self) -> None:
        self._spin_kernel = None
        self.spin_s_per_iteration: float | None = None

    # arrays -------------------------------------------------------------------------------
    def random_arrays(self, sizes: Sequence[int], seed: int) -> list[Any]:
        """Flat float32 arrays of standard-normal values, one per size, from one seeded stream."""
        raise NotImplementedError

    def nan_filled(self, n: int) -> Any:
        raise NotImplementedError

    def to_host(self, array: Any) -> Any:
        raise NotImplementedError

    def release(self) -> None:
        """Return cached device memory after a case."""

    # stream and events --------------------------------------------------------------------
    @contextlib.contextmanager
    def activated(self) -> Iterator[None]:
        yield

    def synchronize(self) -> None:
        raise NotImplementedError

    def event(self) -> Any:
        raise NotImplementedError

    def record(self, event: Any) -> None:
        raise NotImplementedError

    def done(self, event: Any) -> bool:
        raise NotImplementedError

    def wait(self, event: Any) -> None:
        raise NotImplementedError

    def elapsed_s(self, start: Any, end: Any) -> float:
        raise NotImplementedError

    # the sleeping kernel ------------------------------------------------------------------
    def _spin_stream(self) -> Any:
        raise NotImplementedError

    def spin(self, seconds: float) -> None:
        if seconds <= 0 or self.spin_s_per_iteration is None:
            return
        import numpy as np

        iterations = max(1, int(math.ceil(seconds / self.spin_s_per_iteration)))
        self._spin_kernel[1, 1, self._spin_stream()](np.int64(iterations))

    def calibrate_spin(self) -> dict[str, Any]:
        """Compile the sleeping kernel and measure its seconds per iteration with events."""
        import numpy as np

        self._spin_kernel = _numba_spin_kernel()
        stream = self._spin_stream()
        self._spin_kernel[1, 1, stream](np.int64(1))  # compile outside the measurement
        self.synchronize()
        short, long_ = 200, 2200
        e0, e1, e2 = self.event(), self.event(), self.event()
        self.record(e0)
        self._spin_kernel[1, 1, stream](np.int64(short))
        self.record(e1)
        self._spin_kernel[1, 1, stream](np.int64(long_))
        self.record(e2)
        self.wait(e2)
        per_iteration = (self.elapsed_s(e1, e2) - self.elapsed_s(e0, e1)) / (long_ - short)
        if not per_iteration > 1e-8:  # nanosleep may return early; never trust a silly number
            per_iteration = 1e-6
        self.spin_s_per_iteration = per_iteration
        return {"kernel": "nanosleep(1000 ns) loop, one thread",
                "seconds_per_iteration": per_iteration}


class CupyBackend(Backend):
    """CuPy arrays on a non-blocking CuPy stream; the stream cuBLAS and sgblas both use."""

    name = "cupy"

    def __init__(self, device: int = 0) -> None:
        super().__init__()
        import cupy

        self.cp = cupy
        self.device = cupy.cuda.Device(device)
        self.device.use()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._numba_stream = None

    def random_arrays(self, sizes: Sequence[int], seed: int) -> list[Any]:
        cp = self.cp
        try:
            state = cp.random.RandomState(seed)
            return [state.standard_normal(n, dtype=cp.float32) for n in sizes]
        except Exception:  # no cuRAND: draw on the host instead (slower, same distribution)
            import numpy as np

            rng = np.random.default_rng(seed)
            return [cp.asarray(rng.standard_normal(n, dtype=np.float32)) for n in sizes]

    def nan_filled(self, n: int) -> Any:
        return self.cp.full(n, self.cp.nan, dtype=self.cp.float32)

    def to_host(self, array: Any) -> Any:
        return self.cp.asnumpy(array, stream=self.stream)

    def release(self) -> None:
        self.synchronize()
        self.cp.get_default_memory_pool().free_all_blocks()

    @contextlib.contextmanager
    def activated(self) -> Iterator[None]:
        with self.device, self.stream:
            yield

    def synchronize(self) -> None:
        self.stream.synchronize()

    def event(self) -> Any:
        return self.cp.cuda.Event()

    def record(self, event: Any) -> None:
        event.record(self.stream)

    def done(self, event: Any) -> bool:
        return bool(event.done)

    def wait(self, event: Any) -> None:
        event.synchronize()

    def elapsed_s(self, start: Any, end: Any) -> float:
        return self.cp.cuda.get_elapsed_time(start, end) * 1e-3

    def _spin_stream(self) -> Any:
        if self._numba_stream is None:
            from numba import cuda

            self._numba_stream = cuda.external_stream(self.stream.ptr)
        return self._numba_stream

    def pointer(self, array: Any) -> int:
        return int(array.data.ptr)


class NumbaBackend(Backend):
    """Numba device arrays on a Numba stream (no CuPy, so no cuBLAS)."""

    name = "numba"

    def __init__(self, device: int = 0) -> None:
        super().__init__()
        from numba import cuda

        self.cuda = cuda
        if not environment.simulator_enabled():
            cuda.select_device(device)
        self.stream = cuda.stream()

    def random_arrays(self, sizes: Sequence[int], seed: int) -> list[Any]:
        import numpy as np

        rng = np.random.default_rng(seed)
        arrays = []
        for n in sizes:
            host = rng.standard_normal(n, dtype=np.float32)
            arrays.append(self.cuda.to_device(host, stream=self.stream))
            self.stream.synchronize()  # the host buffer is about to go away
        return arrays

    def nan_filled(self, n: int) -> Any:
        import numpy as np

        array = self.cuda.to_device(np.full(n, np.nan, dtype=np.float32), stream=self.stream)
        self.stream.synchronize()
        return array

    def to_host(self, array: Any) -> Any:
        host = array.copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return host

    def synchronize(self) -> None:
        self.stream.synchronize()

    def event(self) -> Any:
        return self.cuda.event(timing=True)

    def record(self, event: Any) -> None:
        event.record(self.stream)

    def done(self, event: Any) -> bool:
        return bool(event.query())

    def wait(self, event: Any) -> None:
        event.synchronize()

    def elapsed_s(self, start: Any, end: Any) -> float:
        return self.cuda.event_elapsed_time(start, end) * 1e-3

    def _spin_stream(self) -> Any:
        return self.stream


class SimulatorBackend(NumbaBackend):
    """The CUDA simulator: Numba arrays, host clock (simulated events carry no time)."""

    name = "numba-simulator"
    events = False

    def calibrate_spin(self) -> dict[str, Any]:
        return {"kernel": None, "seconds_per_iteration": None}


# --------------------------------------------------------------------------------------------
# Timing


@dataclass
class BlockResult:
    samples: list[float]
    covered: bool | None
    host_s: float


class EventTiming:
    """Event-timed blocks of calls, each behind the backend's sleeping kernel."""

    name = "cuda-events"

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._events: list[Any] = []

    def _pool(self, count: int) -> list[Any]:
        while len(self._events) < count:
            self._events.append(self.backend.event())
        return self._events[:count]

    def block(self, launch: Callable[[int], None], start: int, count: int,
              spin_s: float) -> BlockResult:
        be = self.backend
        events = self._pool(count + 1)
        be.spin(spin_s)
        be.record(events[0])
        t0 = time.perf_counter()
        for j in range(count):
            launch(start + j)
            be.record(events[j + 1])
        host = time.perf_counter() - t0
        # Still asleep once everything is queued => no interval can contain a host-side gap.
        covered = (not be.done(events[0])) if spin_s > 0 else None
        be.wait(events[count])
        samples = [be.elapsed_s(events[j], events[j + 1]) for j in range(count)]
        return BlockResult(samples, covered, host)


class HostTiming:
    """Host clock around each call plus a synchronisation (the simulator's only option)."""

    name = "host-clock"

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def block(self, launch: Callable[[int], None], start: int, count: int,
              spin_s: float) -> BlockResult:
        samples = []
        t_start = time.perf_counter()
        for j in range(count):
            t0 = time.perf_counter()
            launch(start + j)
            self.backend.synchronize()
            samples.append(time.perf_counter() - t0)
        return BlockResult(samples, None, time.perf_counter() - t_start)


@dataclass
class LibraryRun:
    """The measurement state of one library on one case."""

    name: str
    launch: Callable[[int], None]
    first_call_s: float = 0.0
    t_call: float = 0.0
    host_s_per_call: float = 0.0
    reps: int = 0
    reps_limited: bool = False
    batch: int = 1
    spin_s: float = 0.0
    warmup: int = 0
    next_index: int = 0
    blocks: int = 0
    blocks_not_covered: int = 0
    spin_retries: int = 0
    spin_hopeless: bool = False

    def __post_init__(self) -> None:
        self.samples: list[float] = []

    @property
    def needs(self) -> int:
        return self.reps - len(self.samples)


def warm_up(timing: EventTiming | HostTiming, run: LibraryRun, warmup: int,
            slow_s: float = 0.25) -> None:
    """``warmup`` calls whose times are not kept; they give t_call and the host cost per call.

    A call slower than ``slow_s`` needs no more warming (and would waste seconds), so after
    such a first call the rest are dropped.
    """
    results = [timing.block(run.launch, run.next_index, 1, spin_s=0.0)]
    run.next_index += 1
    if warmup > 1 and results[0].samples[0] < slow_s:
        results.append(timing.block(run.launch, run.next_index, warmup - 1, spin_s=0.0))
        run.next_index += warmup - 1
    samples = [t for r in results for t in r.samples]
    run.warmup = len(samples)
    run.t_call = results_io.summarize(samples)["median"]
    run.host_s_per_call = sum(r.host_s for r in results) / len(samples)


def measure_interleaved(timing: EventTiming | HostTiming, runs: Sequence[LibraryRun]) -> None:
    """Alternate one block of each library until every library has its timed calls.

    A block whose sleeping kernel ended before the host had queued every call is redone with
    twice the sleep, at most :data:`SPIN_RETRIES` times; if that never suffices (a host-bound
    or synchronising call), later blocks of that library are kept as they come and counted in
    ``blocks_not_covered``.
    """
    while any(run.needs > 0 for run in runs):
        for run in runs:
            if run.needs <= 0:
                continue
            count = min(run.batch, run.needs)
            spin = run.spin_s if isinstance(timing, EventTiming) else 0.0
            retries = 0 if run.spin_hopeless else SPIN_RETRIES
            for attempt in range(retries + 1):
                result = timing.block(run.launch, run.next_index, count, spin)
                run.next_index += count
                if result.covered is not False or attempt == retries:
                    break
                run.spin_retries += 1
                spin = min(MAX_SPIN_S, spin * 2)
            if result.covered is False and not run.spin_hopeless:
                run.spin_hopeless = True
                spin = run.spin_s  # back to the planned sleep: a longer one did not help
            run.spin_s = spin
            run.blocks += 1
            if result.covered is False:
                run.blocks_not_covered += 1
            run.samples.extend(result.samples)


def library_record(run: LibraryRun, case: Case, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    stats = results_io.summarize(run.samples)
    record: dict[str, Any] = {
        "times_s": stats,
        "tflops": {
            "median": results_io.tflops(case.m, case.n, case.k, stats.get("median")),
            # the fastest call gives the highest rate and vice versa
            "max": results_io.tflops(case.m, case.n, case.k, stats.get("min")),
            "min": results_io.tflops(case.m, case.n, case.k, stats.get("max")),
        },
        "reps": len(run.samples),
        "reps_limited": run.reps_limited,
        "warmup": run.warmup,
        "first_call_s": run.first_call_s,
        "host_us_per_call": run.host_s_per_call * 1e6,
        "batch": run.batch,
        "spin_s": run.spin_s,
        "blocks": run.blocks,
        "blocks_not_covered": run.blocks_not_covered,
        "spin_retries": run.spin_retries,
        "samples_us": [round(s * 1e6, 3) for s in run.samples],
    }
    if extra:
        record.update(extra)
    return record


# --------------------------------------------------------------------------------------------
# cuBLAS and sgblas calls


class CublasPedantic:
    """cuBLAS gemmEx through CuPy: FP32 in, out and compute (PEDANTIC), host pointer mode."""

    def __init__(self, backend: CupyBackend) -> None:
        import numpy as np
        from cupy.cuda import cublas

        self.cublas = cublas
        self.handle = cublas.create()
        cublas.setPointerMode(self.handle, cublas.CUBLAS_POINTER_MODE_HOST)
        cublas.setStream(self.handle, backend.stream.ptr)
        self.compute_type = getattr(cublas, "CUBLAS_COMPUTE_32F_PEDANTIC", 69)
        self.algo = getattr(cublas, "CUBLAS_GEMM_DEFAULT", -1)
        self.r_32f = backend.cp.cuda.runtime.CUDA_R_32F
        self.ops = {"N": cublas.CUBLAS_OP_N, "T": cublas.CUBLAS_OP_T}
        # Host scalars must outlive every enqueued call: keep them on the object.
        self.alpha = np.ones(1, dtype=np.float32)
        self.beta = np.zeros(1, dtype=np.float32)
        try:
            self.version = int(cublas.getVersion(self.handle))
        except Exception:
            self.version = None

    def describe(self) -> dict[str, Any]:
        return {"function": "cublasGemmEx (cupy.cuda.cublas.gemmEx)",
                "compute_type": "CUBLAS_COMPUTE_32F_PEDANTIC", "compute_type_value": self.compute_type,
                "algo": "CUBLAS_GEMM_DEFAULT", "pointer_mode": "host",
                "types": "CUDA_R_32F for A, B and C", "cublas_version": self.version}

    def __call__(self, case: Case, a_ptr: int, b_ptr: int, c_ptr: int) -> None:
        # gemmEx re-binds the handle to CuPy's current stream, the benchmark's stream.
        self.cublas.gemmEx(
            self.handle, self.ops[case.transa], self.ops[case.transb], case.m, case.n, case.k,
            self.alpha.ctypes.data, a_ptr, self.r_32f, case.lda,
            b_ptr, self.r_32f, case.ldb,
            self.beta.ctypes.data, c_ptr, self.r_32f, case.ldc,
            self.compute_type, self.algo,
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.cublas.destroy(self.handle)


def sgblas_call(sgblas: Any, handle: Any, case: Case, a: Any, b: Any, c: Any) -> None:
    status = sgblas.sgemm(handle, case.transa, case.transb, case.m, case.n, case.k,
                          1.0, a, case.lda, b, case.ldb, 0.0, c, case.ldc)
    if status is None or int(status) != 0:
        name = getattr(status, "name", repr(status))
        raise SgemmStatusError(f"sgblas.sgemm returned {name} ({int(status) if status is not None else None})")


def explain_kernel(sgblas: Any, handle: Any, case: Case, a: Any, b: Any, c: Any) -> tuple[str, str]:
    """(kernel name, readable explanation) from ``sgblas.explain``; never raises."""
    try:
        explanation = sgblas.explain(handle, case.transa, case.transb, case.m, case.n, case.k,
                                     a, case.lda, b, case.ldb, c, case.ldc)
    except Exception as exc:
        return "unknown", f"sgblas.explain failed: {type(exc).__name__}: {exc}"
    kernel = getattr(explanation, "kernel", "unknown")
    return (str(kernel) if kernel else "none"), str(explanation)


# --------------------------------------------------------------------------------------------
# Correctness cross-checks


def _fview(buffer: Any, rows: int, cols: int, ld: int | None = None, xp: Any = None) -> Any:
    """The column-major rows x cols matrix with leading dimension ``ld`` (default ``rows``) that
    starts at ``buffer[0]``, as a 2-D view; ``xp`` is the array module (NumPy by default).

    The buffer may end at the matrix's last element: with ld > rows its size is
    ``(cols - 1) * ld + rows``, less than ``ld * cols``, so no reshape of it can work.
    """
    ld = rows if ld is None else ld
    if ld < rows:
        raise ValueError(f"leading dimension {ld} is below the {rows} rows of the matrix")
    extent = (cols - 1) * ld + rows if rows and cols else 0
    if buffer.size < extent:
        raise ValueError(f"a buffer of {buffer.size} elements cannot hold a {rows}x{cols} matrix "
                         f"with leading dimension {ld} ({extent} elements)")
    if ld == rows:
        return buffer[:extent].reshape((cols, rows)).T
    # Import the submodule by name: an array module need not load its ``lib`` on import.
    module = "numpy" if xp is None else xp.__name__
    tricks = importlib.import_module(f"{module}.lib.stride_tricks")
    step = buffer.strides[0]
    return tricks.as_strided(buffer, shape=(rows, cols), strides=(step, step * ld))


def check_against_cublas(backend: CupyBackend, case: Case, c_sgblas: Any, c_cublas: Any,
                         a: Any, b: Any, tolerance: float, fp64: bool) -> dict[str, Any]:
    """Relative Frobenius error of sgblas against cuBLAS PEDANTIC, plus both against float64."""
    cp = backend.cp
    # astype copies out of the strided views: the ld padding (NaN in C) is left behind.
    sg = _fview(c_sgblas, case.m, case.n, case.ldc, cp).astype(cp.float64)
    cb = _fview(c_cublas, case.m, case.n, case.ldc, cp).astype(cp.float64)
    ref_norm = float(cp.linalg.norm(cb))
    rel = float(cp.linalg.norm(sg - cb)) / ref_norm if ref_norm > 0 else float("nan")
    check: dict[str, Any] = {
        "reference": "cublas_pedantic",
        "metric": "||C_sgblas - C_cublas||_F / ||C_cublas||_F",
        "rel_error": rel,
        "tolerance": tolerance,
        "passed": bool(rel < tolerance),
        "nonfinite_sgblas": int((~cp.isfinite(sg)).sum()),
    }
    if fp64:
        a64 = _fview(a, *case.a_dims, case.lda, cp).astype(cp.float64)
        b64 = _fview(b, *case.b_dims, case.ldb, cp).astype(cp.float64)
        op_a = a64.T if case.transa == "T" else a64
        op_b = b64.T if case.transb == "T" else b64
        exact = op_a @ op_b
        exact_norm = float(cp.linalg.norm(exact))
        check["fp64"] = {
            "metric": "||C - C_fp64||_F / ||C_fp64||_F, C_fp64 = op(A) op(B) in float64 (CuPy)",
            "sgblas": float(cp.linalg.norm(sg - exact)) / exact_norm if exact_norm else None,
            "cublas": float(cp.linalg.norm(cb - exact)) / exact_norm if exact_norm else None,
            "exact_norm": exact_norm,
        }
        del a64, b64, op_a, op_b, exact
    del sg, cb
    return check


def check_by_projection(backend: Backend, case: Case, c_sgblas: Any, a: Any, b: Any,
                        tolerance: float, seed: int) -> dict[str, Any]:
    """Without cuBLAS: ||C x - op(A)(op(B) x)|| / ||op(A)(op(B) x)|| in float64 on the host."""
    import numpy as np

    x = np.random.default_rng(seed).standard_normal(case.n)
    c = _fview(backend.to_host(c_sgblas), case.m, case.n, case.ldc, np)
    a_host = _fview(backend.to_host(a), *case.a_dims, case.lda, np)
    b_host = _fview(backend.to_host(b), *case.b_dims, case.ldb, np)
    op_a = a_host.T if case.transa == "T" else a_host
    op_b = b_host.T if case.transb == "T" else b_host
    exact = op_a.astype(np.float64) @ (op_b.astype(np.float64) @ x)
    got = c.astype(np.float64) @ x
    norm = float(np.linalg.norm(exact))
    rel = float(np.linalg.norm(got - exact)) / norm if norm > 0 else float("nan")
    return {
        "reference": "host_fp64_projection",
        "metric": "||C x - op(A) (op(B) x)||_2 / ||op(A) (op(B) x)||_2, x standard normal, float64",
        "rel_error": rel,
        "tolerance": tolerance,
        "passed": bool(rel < tolerance),
        "nonfinite_sgblas": int((~np.isfinite(c)).sum()),
    }


# --------------------------------------------------------------------------------------------
# One case


def _seed(base: int, *parts: int) -> int:
    import numpy as np

    return int(np.random.SeedSequence([base, *parts]).generate_state(1)[0])


def run_case(index: int, case: Case, *, sgblas: Any, handle: Any, backend: Backend,
             timing: EventTiming | HostTiming, cublas: CublasPedantic | None,
             args: argparse.Namespace, l2_bytes: int) -> dict[str, Any]:
    """Allocate, explain, check and time one case; returns its JSON record."""
    record = _base_record(case)
    record.update(status="error", reason=None, explanation=None)
    nsets = buffer_sets(case.working_set_bytes, l2_bytes, args.l2_multiple, args.max_sets)
    record["buffer_sets"] = nsets
    t_setup = time.perf_counter()
    oa, ob, oc = case.offsets
    drawn = backend.random_arrays(list(case.allocated) * nsets, _seed(args.seed, index))
    # Every user of a buffer (sgblas, cuBLAS's pointers, explain, the checks) gets the view
    # that starts at the offset, so the pointers carry the misalignment being timed.
    sets = [(drawn[3 * s][oa:], drawn[3 * s + 1][ob:], drawn[3 * s + 2][oc:]) for s in range(nsets)]
    del drawn
    backend.synchronize()
    record["setup_s"] = time.perf_counter() - t_setup

    a0, b0, c0 = sets[0]
    record["kernel"], record["explanation"] = explain_kernel(sgblas, handle, case, a0, b0, c0)

    # Correctness first: it is also every library's first call on this shape.
    t_check = time.perf_counter()
    c_sgblas = backend.nan_filled(case.allocated[2])[oc:]  # a NaN left in C fails the check
    backend.synchronize()
    first_call_s = {}
    t0 = time.perf_counter()
    sgblas_call(sgblas, handle, case, a0, b0, c_sgblas)
    backend.synchronize()
    first_call_s["sgblas"] = time.perf_counter() - t0
    if cublas is not None:
        c_cublas = backend.nan_filled(case.allocated[2])[oc:]
        backend.synchronize()
        t0 = time.perf_counter()
        cublas(case, backend.pointer(a0), backend.pointer(b0), backend.pointer(c_cublas))
        backend.synchronize()
        first_call_s["cublas"] = time.perf_counter() - t0
        check = check_against_cublas(backend, case, c_sgblas, c_cublas, a0, b0,
                                     args.tolerance, not args.no_fp64_check)
        del c_cublas
    else:
        check = check_by_projection(backend, case, c_sgblas, a0, b0, args.tolerance,
                                    _seed(args.seed, index, 99))
    del c_sgblas
    check["seconds"] = time.perf_counter() - t_check
    record["check"] = check

    runs = [LibraryRun("sgblas", lambda i: sgblas_call(sgblas, handle, case, *sets[i % nsets]))]
    if cublas is not None:
        pointers = [tuple(backend.pointer(x) for x in s) for s in sets]
        # Start half a rotation away, so the first call of a cuBLAS block does not reuse the
        # buffer set the sgblas block just left in L2 (and vice versa).
        runs.append(LibraryRun("cublas", lambda i: cublas(case, *pointers[i % nsets]),
                               next_index=nsets // 2))
    for run in runs:
        run.first_call_s = first_call_s[run.name]
        warm_up(timing, run, args.warmup)
        run.reps, run.reps_limited = plan_reps(run.t_call, args.target_s, args.min_reps,
                                               args.max_reps, args.max_case_s)
        run.batch, run.spin_s = plan_batch(run.t_call, run.host_s_per_call, run.reps)
    measure_interleaved(timing, runs)

    record["sgblas"] = library_record(runs[0], case, {"call": "sgblas.sgemm"})
    if cublas is not None:
        record["cublas"] = library_record(runs[1], case, cublas.describe())
        sg_t = record["sgblas"]["times_s"].get("median")
        cb_t = record["cublas"]["times_s"].get("median")
        record["ratio"] = cb_t / sg_t if sg_t and cb_t else None
    notes = []
    for run in runs:
        if run.reps_limited:
            notes.append(f"{run.name}: {len(run.samples)} timed calls only, each took "
                         f"{run.t_call:.3f} s (--max-case-s {args.max_case_s})")
        if run.blocks_not_covered:
            notes.append(f"{run.name}: in {run.blocks_not_covered} of {run.blocks} blocks the GPU "
                         f"went idle before the host had queued every call (host-bound or a "
                         f"hidden synchronisation); those intervals may include host time")
    record["notes"] = notes
    record["status"] = "ok" if check["passed"] else "failed"
    if not check["passed"]:
        record["reason"] = (f"relative error {check['rel_error']:.3g} is not below "
                            f"{args.tolerance:g} ({check['reference']})")
    return record


# --------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m perf.bench",
        description="Time sgblas.sgemm against cuBLAS strict FP32 (gemmEx, "
                    "CUBLAS_COMPUTE_32F_PEDANTIC) on one stream, and check it against cuBLAS.",
    )
    group = parser.add_argument_group("cases")
    group.add_argument("--shapes", choices=("square", "rect", "all"), default="all",
                       help="which built-in shape list to run (default: all)")
    group.add_argument("--shape", action="append", type=parse_shape, metavar="MxNxK",
                       help="an explicit shape (repeatable); replaces --shapes")
    group.add_argument("--pairs", type=parse_pairs, default=PAIRS, metavar="NN,NT,TN,TT",
                       help="transpose pairs, comma-separated, or 'all' (default: all)")
    group.add_argument("--max-dim", type=int, default=None, metavar="N",
                       help="drop built-in shapes with a dimension above N")
    group.add_argument("--quick", action="store_true",
                       help="square 1024 and 4096 plus two rectangular shapes, short timings")
    group.add_argument("--pad", type=int, default=0, metavar="P",
                       help="add P to every leading dimension: lda = rows of A as stored + P, "
                            "ldb likewise, ldc = m + P (default: 0)")
    group.add_argument("--offset", type=parse_offsets, default=(0, 0, 0), metavar="O|OA,OB,OC",
                       help="start A, B and C O (or OA, OB, OC) float32 elements past the start of "
                            "their allocations; not a multiple of 4 leaves a pointer only 4-byte "
                            "aligned (default: 0)")
    group.add_argument("--list", action="store_true", help="print the cases and exit")

    group = parser.add_argument_group("timing")
    group.add_argument("--reps", type=int, default=None, metavar="N",
                       help="exactly N timed calls per case and library (overrides the time budget)")
    group.add_argument("--warmup", type=int, default=3, metavar="N",
                       help="untimed calls after the first call, per case and library (default: 3)")
    group.add_argument("--target-s", type=float, default=None, metavar="S",
                       help="seconds of timed work per case and library (default: 0.3, quick: 0.05)")
    group.add_argument("--min-reps", type=int, default=5, metavar="N", help="default: 5")
    group.add_argument("--max-reps", type=int, default=400, metavar="N", help="default: 400")
    group.add_argument("--max-case-s", type=float, default=6.0, metavar="S",
                       help="cut the timed calls of a very slow case below --min-reps (not below 3) "
                            "so that they take about S seconds (default: 6)")
    group.add_argument("--budget-s", type=float, default=None, metavar="S",
                       help="skip the remaining (largest) cases once the case loop has run S "
                            "seconds; import and kernel compilation do not count (default: 230, "
                            "quick: 90)")
    group.add_argument("--l2-multiple", type=float, default=4.0, metavar="X",
                       help="rotate buffer sets until they span X times the L2 size (default: 4)")
    group.add_argument("--max-sets", type=int, default=32, metavar="N", help="default: 32")

    group = parser.add_argument_group("libraries and checks")
    group.add_argument("--backend", choices=("auto", "cupy", "numba"), default="auto",
                       help="array library: cupy (with cuBLAS) or numba (sgblas alone); "
                            "auto picks cupy when importable (default)")
    group.add_argument("--no-cublas", action="store_true", help="do not time cuBLAS")
    group.add_argument("--tolerance", type=float, default=1e-5,
                       help="largest relative Frobenius error a passing case may have (default: 1e-5)")
    group.add_argument("--no-fp64-check", action="store_true",
                       help="skip the float64 reference product (CuPy backend)")
    group.add_argument("--seed", type=int, default=20261129)
    group.add_argument("--device", type=int, default=0)
    group.add_argument("--out", type=Path, default=results_io.RESULTS_DIR, metavar="DIR",
                       help="where the JSON goes (default: perf/results)")
    args = parser.parse_args(argv)

    if args.target_s is None:
        args.target_s = 0.05 if args.quick else 0.3
    if args.budget_s is None:
        args.budget_s = 90.0 if args.quick else 230.0
    if args.reps is not None:
        if args.reps < 1:
            parser.error("--reps must be at least 1")
        args.min_reps = args.max_reps = args.reps
        args.max_case_s = float("inf")
    for name in ("min_reps", "max_reps", "warmup", "max_sets"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            parser.error(f"--{name.replace('_', '-')} is too small")
    if args.min_reps > args.max_reps:
        parser.error("--min-reps is above --max-reps")
    if args.target_s <= 0 or args.max_case_s <= 0 or args.budget_s <= 0:
        parser.error("--target-s, --max-case-s and --budget-s must be positive")
    if args.pad < 0:
        parser.error(f"--pad {args.pad} is negative; it is added to each leading dimension, "
                     f"so it must be 0 or more")
    return args


def _gpu_present() -> bool:
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:
        return False


def _pick_backend(args: argparse.Namespace) -> tuple[Backend, str]:
    if environment.simulator_enabled():
        return SimulatorBackend(args.device), "the CUDA simulator is enabled (timings meaningless)"
    if args.backend in ("auto", "cupy"):
        try:
            import cupy  # noqa: F401
        except ImportError as exc:
            if args.backend == "cupy":
                raise SystemExit(f"--backend cupy: CuPy is not importable ({exc})") from exc
            return NumbaBackend(args.device), f"CuPy is not importable ({exc})"
        return CupyBackend(args.device), "CuPy arrays"
    return NumbaBackend(args.device), "--backend numba"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cases = build_cases(selected_shapes(args), args.pairs, args.pad, args.offset)
    width = max([20, *(len(case.label) for case in cases)])
    if args.list:
        for case in cases:
            print(f"{case.label:>{width}} {case.pair}  {case.flop / 1e9:12.1f} GFLOP  "
                  f"{case.working_set_bytes / 2**20:10.1f} MiB")
        print(f"{len(cases)} cases")
        return 0
    if not cases:
        print("no case selected", file=sys.stderr)
        return 2

    started = time.perf_counter()
    created = results_io.utc_now()
    want_cublas = not args.no_cublas
    tf32_note = None
    if want_cublas:
        ok, tf32_note = prepare_tf32_override()
        if not ok:
            print(f"perf.bench: refusing to run cuBLAS: {tf32_note}", file=sys.stderr)
            return 2
    cublas_preloaded = "cupy_backends.cuda.libs.cublas" in sys.modules

    if not environment.simulator_enabled() and not _gpu_present():
        print("perf.bench: no CUDA GPU is usable here; run on a GPU machine, or set "
              "NUMBA_ENABLE_CUDASIM=1 for a dry run of the machinery at tiny sizes", file=sys.stderr)
        return 2
    backend, backend_reason = _pick_backend(args)
    use_cublas = want_cublas and isinstance(backend, CupyBackend)
    if want_cublas and not use_cublas:
        print(f"perf.bench: timing sgblas alone on Numba device arrays: {backend_reason}")

    t0 = time.perf_counter()
    import sgblas  # touches no GPU: the Handle below does the set-up (loading, or compiling with a cold cache)

    sgblas_import_s = time.perf_counter() - t0
    device = environment.device_info(args.device)
    l2_bytes = device.get("l2_bytes") or DEFAULT_L2_BYTES
    timing: EventTiming | HostTiming = EventTiming(backend) if backend.events else HostTiming(backend)
    records: list[dict[str, Any]] = []
    cublas = None
    with backend.activated():
        spin_info = backend.calibrate_spin()
        t0 = time.perf_counter()
        handle = sgblas.Handle(device=None if device.get("simulator") else args.device,
                               stream=backend.stream)
        handle_s = time.perf_counter() - t0
        if use_cublas:
            cublas = CublasPedantic(backend)
        print(f"perf.bench: {len(cases)} cases on {device.get('name')} "
              f"(cc {device.get('compute_capability')}), arrays: {backend.name}, "
              f"cuBLAS: {'gemmEx PEDANTIC' if cublas else 'not timed'}, "
              f"timer: {timing.name}; import sgblas took {sgblas_import_s:.1f} s, "
              f"sgblas.Handle {handle_s:.2f} s", flush=True)
        loop_started = time.perf_counter()  # the budget covers the cases, not the compiles
        try:
            for index, case in enumerate(cases):
                elapsed = time.perf_counter() - loop_started
                prefix = f"[{index + 1:>2}/{len(cases)}] {case.label:>{width - 2}} {case.pair}"
                if elapsed > args.budget_s:
                    records.append(_skipped(case, f"time budget of {args.budget_s:g} s used up "
                                                  f"after {elapsed:.0f} s"))
                    print(f"{prefix}  skipped (time budget)", flush=True)
                    continue
                try:
                    record = run_case(index, case, sgblas=sgblas, handle=handle, backend=backend,
                                      timing=timing, cublas=cublas, args=args, l2_bytes=l2_bytes)
                except Exception as exc:  # keep going: one broken case must not lose the run
                    record = _errored(case, exc)
                finally:
                    with contextlib.suppress(Exception):
                        backend.release()
                records.append(record)
                print(f"{prefix}  {_progress(record)}", flush=True)
        finally:
            if cublas is not None:
                cublas.close()
            with contextlib.suppress(Exception):
                handle.close()

    peak, peak_source = results_io.fp32_peak(device)
    env_info = environment.environment_info()
    doc: dict[str, Any] = {
        "schema": results_io.BENCH_SCHEMA,
        "kind": "bench",
        "created": created.isoformat(),
        "host": env_info["host"],
        "command": ["python", "-m", "perf.bench",
                    *environment.public_argv(list(sys.argv[1:] if argv is None else argv))],
        "environment": env_info,
        "device": device,
        "peak_fp32_tflops": {"value": peak, "source": peak_source},
        "settings": {
            "backend": backend.name,
            "backend_reason": backend_reason,
            "timer": timing.name,
            "spin": spin_info,
            "cublas": cublas.describe() if cublas else None,
            "tf32_override": tf32_note,
            "cublas_loaded_before_override": cublas_preloaded,
            "alpha": 1.0,
            "beta": 0.0,
            "layout": "column-major, " + (
                f"leading dimensions padded by {args.pad} (lda = rows of A as stored + {args.pad})"
                if args.pad else "tight leading dimensions (lda = rows of A as stored)") + (
                f", A, B and C starting {tuple(args.offset)} float32 elements into their allocations"
                if any(args.offset) else ""),
            "inputs": "standard normal float32, fresh per buffer set",
            "l2_bytes_assumed": l2_bytes,
            "sgblas_import_s": sgblas_import_s,
            "handle_creation_s": handle_s,
            "args": {key: value for key, value in vars(args).items() if key not in ("out", "list")},
        },
        "cases": records,
        "summary": {
            "cases": len(records),
            **{status: sum(r["status"] == status for r in records)
               for status in ("ok", "failed", "error", "skipped")},
            "elapsed_s": time.perf_counter() - started,
            "cases_elapsed_s": time.perf_counter() - loop_started,
        },
    }
    path = results_io.save_results(doc, args.out)
    print()
    print(results_io.bench_markdown(doc))
    print()
    print(f"peak FP32: {peak if peak is None else f'{peak:.1f}'} TFLOP/s ({peak_source})")
    print(f"wrote {path} in {doc['summary']['elapsed_s']:.0f} s")
    bad = doc["summary"]["failed"] + doc["summary"]["error"]
    return 1 if bad else 0


def _base_record(case: Case) -> dict[str, Any]:
    return {
        "m": case.m, "n": case.n, "k": case.k, "transa": case.transa, "transb": case.transb,
        "pair": case.pair, "shape_set": case.shape_set, "flop": case.flop,
        "lda": case.lda, "ldb": case.ldb, "ldc": case.ldc,
        "pad": case.pad, "offsets": list(case.offsets),
        "working_set_bytes": case.working_set_bytes,
        "kernel": None, "sgblas": None, "cublas": None, "ratio": None, "check": None,
    }


def _skipped(case: Case, reason: str) -> dict[str, Any]:
    return {**_base_record(case), "status": "skipped", "reason": reason}


def _errored(case: Case, exc: BaseException) -> dict[str, Any]:
    return {**_base_record(case), "status": "error",
            "reason": environment.scrub_paths(f"{type(exc).__name__}: {exc}"),
            "traceback": environment.scrub_paths(traceback.format_exc(limit=8))[-4000:]}


def _progress(record: dict[str, Any]) -> str:
    if record["status"] in ("error", "skipped"):
        return f"{record['status']}: {record.get('reason')}"
    sg = (record["sgblas"] or {}).get("tflops", {}).get("median")
    cb = (record["cublas"] or {}).get("tflops", {}).get("median")
    check = record["check"] or {}
    parts = [f"sgblas {sg:6.2f} TFLOP/s" if sg is not None else "sgblas -"]
    if cb is not None:
        parts.append(f"cuBLAS {cb:6.2f}")
        parts.append(f"ratio {record['ratio']:.2f}" if record["ratio"] else "ratio -")
    rel = check.get("rel_error")
    parts.append(f"err {rel:.1e} {'ok' if check.get('passed') else 'FAILED'}"
                 if rel is not None else "err -")
    parts.append(f"[{record['kernel']}]")
    return "  ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
