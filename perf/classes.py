"""sgblas against cuBLAS strict FP32 per shape class: random shapes drawn within each class.

Usage (from the repository root; both forms work)::

    python -m perf.classes                                 # every class, 30 shapes each, seed 20261205
    python -m perf.classes --classes small,skinny --count 40 --seed 7
    python -m perf.classes --classes longk                 # the accuracy class alone
    python perf/classes.py --list                          # print the cases and exit (no GPU needed)

The classes (``CLASSES``; sides log-uniform within their ranges unless said otherwise):

- ``small``: m, n and k in 32..600;
- ``narrow``: m in 17..127, n and k in 1000..20000, at most ``MAX_FLOP`` (2mnk); the narrow
  side is m in even draws and n in odd ones;
- ``lowk``: k in 1..16, m and n in 1000..20000;
- ``tallthin``: n and k in 17..64 (in a quarter of the draws, 1..64), m in 100000..2000000,
  operands of at most ``TALLTHIN_MAX_BYTES``;
- ``skinny``: m in 1..16, n and k in 1000..20000; the small side m or n as in ``narrow``;
- ``midprime``: m, n and k the least prime at or above a uniform draw from 700..5987 (the
  largest prime below 6000);
- ``longk``: k in 16384..100000, m and n in 1..2000, at most ``MAX_FLOP``: accuracy only.

Each class draws ``--count`` shapes from its own generator, seeded by ``--seed`` (printed) and
the class's name, so that choosing other classes leaves a class's shapes as they were. The
transpose pair and the leading-dimension class (``perf.sweep``'s tight, odd, padded, offset)
turn over the draws: every 16 draws of a class take each (pair, ld class) once, and the small
side of ``narrow`` and ``skinny`` alternates, flipping its phase every 16 draws, so that each
pair meets both.

Measurement. The timed classes run through ``perf.sweep.run_cases`` (imported, not copied):
fresh standard-normal operands, buffer sets rotated until they span ``--l2-multiple`` times the
L2 (operands larger than that are L2-cold by size), CUDA events between the calls of blocks
headed by a sleeping kernel, warm-up calls, the median of each call's samples, the blocks of
the calls of a case interleaved. A case times sgblas's plain call and cuBLAS ``gemmEx``
PEDANTIC (``perf.bench.CublasPedantic``) on the same operands in one process, and, because the
sweep always adds it, the candidate sgblas chose timed by name; ``--only`` or
``--candidates-limit`` time more candidates. The ratio is cuBLAS's time over the plain call's
(above 1: sgblas is faster). For the bandwidth classes (``lowk``, ``tallthin``, ``skinny``) the
bytes a product must move, 4 (mk + kn + mn) with beta = 0, over the plain call's time are
compared with a device-to-device copy measured once in the run (``cupy.copyto`` of a buffer of
``COPY_L2_MULTIPLE`` times the L2, at least ``COPY_MIN_BYTES``, timed by the same machinery; its
rate counts the bytes read and written). ``longk`` computes C per shape and distribution
(standard normal, and uniform [0, 1), where all terms have one sign), by sgblas and by cuBLAS
PEDANTIC on the same operands, and compares each with the float64 product of the same float32
inputs (``perf.bench.check_against_cublas``): ``||C - C64||_F / ||C64||_F``, pooled over fresh
draws of the operands until about ``ACCURACY_ELEMENTS`` elements of C are compared (a 6 x 1
product's error is otherwise a coin toss; :func:`accuracy_draws`). ``--no-cublas``
times and checks sgblas alone (no ratios). Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``,
with ``--no-cublas``) the run is a dry run of the machinery with host timing and a 1 MiB copy,
its numbers meaningless.

The bars (``ShapeClass.bars``), each on the shapes that ran: at least ``MIN_SHAPES`` shapes;
``small`` and ``narrow``: geomean ratio >= 1.0 and min >= 0.85; ``midprime``: geomean >= 1.0,
min >= 0.9; ``lowk`` and ``tallthin``: geomean >= 1.0 and the geomean of the copy shares >= 0.8;
``skinny``: geomean >= 1.0 and copy share geomean >= 0.7; ``longk``: sgblas's error at most
cuBLAS's on every row (``worse``, the rows where sgblas's error is the larger, is 0; the error
ratio sgblas / cuBLAS is reported beside it).

Writes ``perf/results/classes_<UTC date-time>_<device>.json``: the sweep's document (schema
``sgblas-sweep/1``: ``cases``, ``rows``, ``sgblas_device``, environment, device, settings) with
``classes``: the seed, the class definitions, the copy measurement, ``rows`` (one per timed
shape: class, shape, pair, ld class, the two times, the ratio, the chosen candidate, the bytes
and copy shares), ``accuracy`` (one per long-K shape and distribution) and ``summary`` (per
class: count, geomean, min, max, the copy shares, each bar and whether it is met). Prints a
table per class and a summary. Exit status: 0 if every case ran (a bar not met is reported, not
an error), 1 if a case failed or errored (the JSON is written anyway), 2 on a usage or setup
error.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

if __package__ in (None, ""):  # run as `python perf/classes.py`: make `perf` and `sgblas` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from perf import bench, environment, results_io, sweep  # noqa: E402  (after the path fix above)

__all__ = [
    "CLASSES_SCHEMA",
    "DEFAULT_SEED",
    "DEFAULT_COUNT",
    "MIN_SHAPES",
    "DISTRIBUTIONS",
    "Bar",
    "ShapeClass",
    "CLASSES",
    "CLASS_NAMES",
    "log_uniform",
    "next_prime",
    "rotation",
    "class_cases",
    "moved_bytes",
    "class_rows",
    "accuracy_draws",
    "summarize_class",
    "summarize_accuracy",
    "parse_classes",
    "parse_args",
    "main",
]

CLASSES_SCHEMA = "sgblas-classes/1"
TOOL = "classes"
DEFAULT_SEED = 20261205
DEFAULT_COUNT = 30
#: The acceptance asks for a sweep of at least this many shapes per class.
MIN_SHAPES = 30
MAX_FLOP = sweep.MAX_FLOP
TALLTHIN_MAX_BYTES = 1 << 30
#: Case numbers: class i numbers its draws from i * CLASS_STRIDE, so a case's operands (seeded
#: by its number) do not depend on which other classes run.
CLASS_STRIDE = 10000
DISTRIBUTIONS: tuple[str, ...] = ("normal", "uniform")
COPY_L2_MULTIPLE = 8
#: The long-K class compares errors over about this many elements of C, drawing the operands
#: again for a product with fewer (:func:`accuracy_draws`), at most :data:`MAX_DRAWS` times.
ACCURACY_ELEMENTS = 1024
MAX_DRAWS = 256
COPY_MIN_BYTES = 256 << 20
SIMULATOR_COPY_BYTES = 1 << 20


# --------------------------------------------------------------------------------------------
# The classes


class Bar(NamedTuple):
    """A bar a class's summary statistic ``stat`` must meet: ``value op bar``."""

    stat: str
    op: str  # ">=" or "<="
    value: float

    @property
    def label(self) -> str:
        return f"{self.stat} {self.op} {self.value:g}"

    def met(self, value: float | None) -> bool | None:
        """None when the statistic could not be measured (no shape, no copy rate)."""
        if value is None:
            return None
        return bool(value >= self.value) if self.op == ">=" else bool(value <= self.value)


class ShapeClass(NamedTuple):
    name: str
    ranges: str
    #: (rng) -> (m, n, k); a class with ``swap_sides`` draws its small side as m.
    sampler: Callable[[np.random.Generator], tuple[int, int, int]]
    bars: tuple[Bar, ...]
    kind: str = "speed"  # "speed", "bandwidth" (speed and copy share) or "accuracy"
    swap_sides: bool = False


def log_uniform(rng: np.random.Generator, lo: int, hi: int) -> int:
    """An integer in lo..hi: the floor of exp(U(log lo, log(hi + 1))), as ``perf.sweep`` draws."""
    return min(hi, max(lo, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))))


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    return all(n % d for d in range(2, math.isqrt(n) + 1))


def next_prime(n: int) -> int:
    """The least prime at or above ``n``."""
    while not _is_prime(n):
        n += 1
    return n


def _capped(draw: Callable[[], tuple[int, int, int]], fits: Callable[[int, int, int], bool]) -> tuple[int, int, int]:
    while True:
        m, n, k = draw()
        if fits(m, n, k):
            return m, n, k


def _flop_fits(m: int, n: int, k: int) -> bool:
    return 2 * m * n * k <= MAX_FLOP


def _small(rng: np.random.Generator) -> tuple[int, int, int]:
    return log_uniform(rng, 32, 600), log_uniform(rng, 32, 600), log_uniform(rng, 32, 600)


def _narrow(rng: np.random.Generator) -> tuple[int, int, int]:
    return _capped(lambda: (log_uniform(rng, 17, 127), log_uniform(rng, 1000, 20000), log_uniform(rng, 1000, 20000)),
                   _flop_fits)


def _lowk(rng: np.random.Generator) -> tuple[int, int, int]:
    return log_uniform(rng, 1000, 20000), log_uniform(rng, 1000, 20000), log_uniform(rng, 1, 16)


def _tallthin(rng: np.random.Generator) -> tuple[int, int, int]:
    def draw() -> tuple[int, int, int]:
        # Mostly 17..64, where the tile kernels' narrow variants take over; a quarter reach
        # down to 1, the skinny variants' ground, so that the class is not only one regime.
        lo = 1 if rng.uniform() < 0.25 else 17
        return log_uniform(rng, 100000, 2000000), log_uniform(rng, lo, 64), log_uniform(rng, lo, 64)

    return _capped(draw, lambda m, n, k: moved_bytes(m, n, k) <= TALLTHIN_MAX_BYTES)


def _skinny(rng: np.random.Generator) -> tuple[int, int, int]:
    return log_uniform(rng, 1, 16), log_uniform(rng, 1000, 20000), log_uniform(rng, 1000, 20000)


def _midprime(rng: np.random.Generator) -> tuple[int, int, int]:
    m, n, k = (next_prime(int(v)) for v in rng.integers(700, 5987, size=3, endpoint=True))
    return m, n, k


def _longk(rng: np.random.Generator) -> tuple[int, int, int]:
    return _capped(lambda: (log_uniform(rng, 1, 2000), log_uniform(rng, 1, 2000), log_uniform(rng, 16384, 100000)),
                   _flop_fits)


_SHAPES = Bar("shapes", ">=", MIN_SHAPES)
CLASSES: tuple[ShapeClass, ...] = (
    ShapeClass("small", "m, n, k in 32..600", _small,
               (_SHAPES, Bar("geomean", ">=", 1.0), Bar("min", ">=", 0.85))),
    ShapeClass("narrow", "m or n in 17..127, the others 1000..20000, 2mnk <= 2**37", _narrow,
               (_SHAPES, Bar("geomean", ">=", 1.0), Bar("min", ">=", 0.85)), swap_sides=True),
    ShapeClass("lowk", "k in 1..16, m, n in 1000..20000", _lowk,
               (_SHAPES, Bar("geomean", ">=", 1.0), Bar("share_geomean", ">=", 0.8)), kind="bandwidth"),
    ShapeClass("tallthin", "n, k in 17..64 (a quarter 1..64), m in 100000..2000000, at most 1 GiB", _tallthin,
               (_SHAPES, Bar("geomean", ">=", 1.0), Bar("share_geomean", ">=", 0.8)), kind="bandwidth"),
    ShapeClass("skinny", "m or n in 1..16, the others 1000..20000", _skinny,
               (_SHAPES, Bar("geomean", ">=", 1.0), Bar("share_geomean", ">=", 0.7)), kind="bandwidth",
               swap_sides=True),
    ShapeClass("midprime", "m, n, k primes in 700..6000", _midprime,
               (_SHAPES, Bar("geomean", ">=", 1.0), Bar("min", ">=", 0.9))),
    ShapeClass("longk", "k in 16384..100000, m, n in 1..2000, 2mnk <= 2**37", _longk,
               (_SHAPES, Bar("worse", "<=", 0)), kind="accuracy"),
)
CLASS_NAMES: tuple[str, ...] = tuple(c.name for c in CLASSES)
_BY_NAME = {c.name: c for c in CLASSES}


def rotation(i: int) -> tuple[str, str, int]:
    """(pair, ld class, side) of a class's draw ``i``: every 16 draws take each (pair, ld
    class) once; the side (1: swap m and n) alternates, and flips every 16 draws so that each
    pair meets both sides."""
    c = i % 16
    return bench.PAIRS[c % 4], sweep.LD_CLASSES[c // 4], (i + i // 16) % 2


def class_cases(cls: ShapeClass, count: int, seed: int, max_dim: int | None = None) -> list[sweep.SweepCase]:
    """``count`` cases of ``cls`` from ``seed``. ``max_dim`` (a dry run's) clamps every side
    after the draw, so the draws stay those of the seed."""
    rng = np.random.default_rng([seed, zlib.crc32(cls.name.encode())])
    start = CLASS_NAMES.index(cls.name) * CLASS_STRIDE
    cases = []
    for i in range(count):
        m, n, k = cls.sampler(rng)
        pair, ld_class, side = rotation(i)
        if cls.swap_sides and side:
            m, n = n, m
        if max_dim:
            m, n, k = min(m, max_dim), min(n, max_dim), min(k, max_dim)
        cases.append(sweep.make_case(m, n, k, pair, ld_class, cls.name, start + i))
    return cases


def parse_classes(text: str) -> tuple[str, ...]:
    """``small,skinny`` -> ('small', 'skinny') in the classes' order; ``all`` -> every class."""
    if text.strip().lower() == "all":
        return CLASS_NAMES
    names = {t.strip().lower() for t in text.split(",") if t.strip()}
    unknown = sorted(names - set(CLASS_NAMES))
    if unknown:
        raise argparse.ArgumentTypeError(f"class {unknown[0]!r} is not one of {', '.join(CLASS_NAMES)}")
    if not names:
        raise argparse.ArgumentTypeError("no class given")
    return tuple(c for c in CLASS_NAMES if c in names)


# --------------------------------------------------------------------------------------------
# Rows and summaries


def moved_bytes(m: int, n: int, k: int) -> int:
    """What a product with beta = 0 must move: A and B read once, C written once."""
    return 4 * (m * k + k * n + m * n)


def _share(nbytes: int, seconds: float | None, copy_rate: float | None) -> float | None:
    if not seconds or not copy_rate:
        return None
    return nbytes / seconds / copy_rate


def class_rows(cases: Sequence[dict[str, Any]], copy_rate: float | None) -> list[dict[str, Any]]:
    """One row per case record of the sweep (``doc["cases"]``) of a timed class: the plain
    call's and cuBLAS's median seconds, their ratio, the chosen candidate and, for a bandwidth
    class, the bytes moved and both libraries' shares of ``copy_rate`` (bytes per second)."""
    rows = []
    for c in cases:
        cls = _BY_NAME.get(c.get("shape_set"))
        if cls is None or cls.kind == "accuracy":
            continue
        sg = (c.get("plain") or {}).get("seconds")
        cb = c.get("cublas_s")
        row = {"class": cls.name, "case": c.get("case"), "m": c["m"], "n": c["n"], "k": c["k"], "pair": c["pair"],
               "ld_class": c.get("ld_class"), "status": c.get("status"), "reason": c.get("reason"),
               "chosen": c.get("chosen"), "sgblas_s": sg, "cublas_s": cb,
               "ratio": cb / sg if sg and cb else None}
        if cls.kind == "bandwidth":
            nbytes = moved_bytes(c["m"], c["n"], c["k"])
            row.update(bytes=nbytes, share=_share(nbytes, sg, copy_rate), cublas_share=_share(nbytes, cb, copy_rate))
        rows.append(row)
    return rows


def _geomean(values: Sequence[float]) -> float | None:
    return float(math.exp(np.mean(np.log(values)))) if len(values) else None


def _bars(cls: ShapeClass, stats: dict[str, Any]) -> dict[str, Any]:
    bars = [{"label": b.label, "stat": b.stat, "op": b.op, "bar": b.value, "value": stats.get(b.stat),
             "met": b.met(stats.get(b.stat))} for b in cls.bars]
    return {"bars": bars, "met": all(b["met"] is True for b in bars)}


def summarize_class(cls: ShapeClass, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Over the rows of ``cls`` that ran and passed their checks (``shapes``): count,
    geomean, min and max of the ratios where cuBLAS ran (``compared``), by pair and by ld class;
    for a bandwidth class the copy shares too; each bar."""
    mine = [r for r in rows if r["class"] == cls.name]
    ok = [r for r in mine if r["status"] == "ok" and r.get("sgblas_s")]
    compared = [r for r in ok if r.get("ratio")]
    ratios = [r["ratio"] for r in compared]
    stats: dict[str, Any] = {"shapes": len(ok), "left_out": len(mine) - len(ok), "compared": len(compared),
                             "geomean": _geomean(ratios), "min": min(ratios, default=None),
                             "max": max(ratios, default=None)}
    for key, field in (("by_pair", "pair"), ("by_ld_class", "ld_class")):
        groups: dict[str, list[float]] = {}
        for r in compared:
            groups.setdefault(str(r[field]), []).append(r["ratio"])
        stats[key] = {name: {"shapes": len(v), "geomean": _geomean(v), "min": min(v)}
                      for name, v in sorted(groups.items())}
    if cls.kind == "bandwidth":
        for prefix, field in (("share", "share"), ("cublas_share", "cublas_share")):
            shares = [r[field] for r in ok if r.get(field)]
            stats.update({f"{prefix}_geomean": _geomean(shares), f"{prefix}_min": min(shares, default=None),
                          f"{prefix}_max": max(shares, default=None)})
    return {"class": cls.name, "kind": cls.kind, **stats, **_bars(cls, stats)}


def summarize_accuracy(cls: ShapeClass, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Over the rows of ``cls`` that ran (``shapes`` counts their shapes) and have cuBLAS's error
    too (``compared``): the error ratio sgblas / cuBLAS (geomean, max) and the rows where sgblas's
    error is the larger (``worse``), in all and per distribution; each bar."""
    mine = [r for r in rows if r["class"] == cls.name]
    ok = [r for r in mine if r["status"] == "ok" and r.get("sgblas_error") is not None]
    compared = [r for r in ok if r.get("cublas_error") is not None]

    def figures(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
        ratios = [max(r["error_ratio"], 1e-300) for r in group if r["error_ratio"] is not None]
        return {"compared": len(group), "error_ratio_geomean": _geomean(ratios),
                "error_ratio_max": max(ratios, default=None),
                "worse": sum(r["sgblas_error"] > r["cublas_error"] for r in group) if group else None}

    stats: dict[str, Any] = {"shapes": len({r["case"] for r in ok}), "rows": len(ok), "left_out": len(mine) - len(ok),
                             **figures(compared),
                             "by_dist": {d: figures([r for r in compared if r["dist"] == d]) for d in DISTRIBUTIONS}}
    return {"class": cls.name, "kind": cls.kind, **stats, **_bars(cls, stats)}


# --------------------------------------------------------------------------------------------
# The copy rate and the long-K accuracy (on the GPU)


def _time_run(timing: bench.EventTiming | bench.HostTiming, run: bench.LibraryRun, args: argparse.Namespace) -> None:
    bench.warm_up(timing, run, args.warmup)
    run.reps, run.reps_limited = bench.plan_reps(run.t_call, args.target_s, args.min_reps, args.max_reps,
                                                 args.max_case_s)
    run.batch, run.spin_s = bench.plan_batch(run.t_call, run.host_s_per_call, run.reps)
    bench.measure_interleaved(timing, [run])


def copy_bytes(l2_bytes: int, simulator: bool = False) -> int:
    if simulator:  # a dry run: the rate means nothing, and the simulator's arrays live on the host
        return SIMULATOR_COPY_BYTES
    # Several times the L2 so that every copy streams from DRAM, as the GEMMs' rotated operands do.
    return max(COPY_L2_MULTIPLE * l2_bytes, COPY_MIN_BYTES) // 4 * 4


def measure_copy(backend: bench.Backend, timing: bench.EventTiming | bench.HostTiming, nbytes: int,
                 args: argparse.Namespace) -> dict[str, Any]:
    """A device-to-device copy of ``nbytes``: its median seconds and rate (bytes read + written)."""
    src, dst = backend.nan_filled(nbytes // 4), backend.nan_filled(nbytes // 4)
    if isinstance(backend, bench.CupyBackend):
        cp = backend.cp
        method = "cupy.copyto (cudaMemcpyAsync device to device)"
        run = bench.LibraryRun("copy", lambda _i: cp.copyto(dst, src))
    else:
        method = "numba DeviceNDArray.copy_to_device (cuMemcpyDtoDAsync)"
        run = bench.LibraryRun("copy", lambda _i: dst.copy_to_device(src, stream=backend.stream))
    _time_run(timing, run, args)
    stats = results_io.summarize(run.samples)
    del src, dst
    backend.release()
    median = stats.get("median")
    return {"method": method, "bytes_each_way": nbytes, "seconds": median, "samples": stats["n"], "times_s": stats,
            "bytes_per_s": 2 * nbytes / median if median else None,
            "rate": "bytes read + bytes written over the median time"}


def _draw(backend: bench.Backend, sizes: Sequence[int], dist: str, seed: int) -> list[Any]:
    if dist == "normal":
        return backend.random_arrays(sizes, seed)
    if isinstance(backend, bench.CupyBackend):
        state = backend.cp.random.RandomState(seed)
        return [state.random_sample(n, dtype=backend.cp.float32) for n in sizes]
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        out.append(backend.cuda.to_device(rng.random(n, dtype=np.float32), stream=backend.stream))
        backend.synchronize()  # the host buffer is about to go away
    return out


def _host_error(backend: bench.Backend, case: sweep.SweepCase, c: Any, a: Any, b: Any) -> tuple[float, float, int]:
    """Without cuBLAS (no CuPy): sgblas's error against a float64 product on the host, the
    product's norm, and the non-finite elements of C."""
    got = bench._fview(backend.to_host(c), case.m, case.n, case.ldc).astype(np.float64)
    a64 = bench._fview(backend.to_host(a), *case.a_dims, case.lda).astype(np.float64)
    b64 = bench._fview(backend.to_host(b), *case.b_dims, case.ldb).astype(np.float64)
    exact = (a64.T if case.transa == "T" else a64) @ (b64.T if case.transb == "T" else b64)
    norm = float(np.linalg.norm(exact))
    diff = float(np.linalg.norm(got - exact))
    return (diff / norm if norm > 0 else diff), norm, int((~np.isfinite(got)).sum())


def accuracy_draws(m: int, n: int) -> int:
    """How many independent operand draws the error of an m x n product pools: enough that
    about :data:`ACCURACY_ELEMENTS` elements of C are compared, at most :data:`MAX_DRAWS`."""
    return max(1, min(MAX_DRAWS, -(-ACCURACY_ELEMENTS // max(1, m * n))))


def _pooled(errors: Sequence[tuple[float, float]]) -> float | None:
    """The relative Frobenius error of the draws stacked into one matrix, from each draw's
    ``(error, norm of the exact product)``, the error relative where that norm is nonzero and
    absolute where it is zero (as :func:`_host_error` gives it); absolute when every norm is."""
    if not errors:
        return None
    num = sum((e * norm if norm > 0 else e) ** 2 for e, norm in errors)
    den = sum(norm**2 for _, norm in errors)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def accuracy_row(case: sweep.SweepCase, dist: str, *, sgblas: Any, handle: Any, backend: bench.Backend,
                 cublas: bench.CublasPedantic | None, seed: int) -> dict[str, Any]:
    """sgblas's and cuBLAS's relative Frobenius errors against float64 on operands drawn from
    ``dist``, pooled over :func:`accuracy_draws` independent draws (the error of C's few
    elements alone is mostly chance: one draw of a 6 x 1 product can put either library 2x
    ahead); ``worse_draws`` counts the draws where sgblas's error alone was the larger."""
    row: dict[str, Any] = {"class": case.shape_set, **sweep._case_fields(case), "dist": dist, "status": "error",
                           "reason": None, "chosen": None, "kernel": None, "sgblas_error": None,
                           "cublas_error": None, "error_ratio": None, "sgblas_vs_cublas": None,
                           "draws": accuracy_draws(case.m, case.n), "worse_draws": None}
    oa, ob, oc = case.offsets
    sg_errors: list[tuple[float, float]] = []
    cb_errors: list[tuple[float, float]] = []
    nonfinite = 0
    vs_cublas = 0.0
    for draw in range(row["draws"]):
        parts = (case.index, DISTRIBUTIONS.index(dist)) + ((draw,) if draw else ())
        drawn = _draw(backend, case.allocated[:2], dist, bench._seed(seed, *parts))
        a, b = drawn[0][oa:], drawn[1][ob:]
        c = backend.nan_filled(case.allocated[2])[oc:]  # a NaN left in C shows as non-finite
        backend.synchronize()
        if draw == 0:
            ex = sgblas.explain(handle, case.transa, case.transb, case.m, case.n, case.k, a, case.lda, b,
                                case.ldb, c, case.ldc)
            row.update(chosen=ex.candidate, kernel=ex.kernel)
        bench.sgblas_call(sgblas, handle, case, a, b, c)
        backend.synchronize()
        if cublas is not None:
            c_cb = backend.nan_filled(case.allocated[2])[oc:]
            backend.synchronize()
            cublas(case, sweep._pointer(a), sweep._pointer(b), sweep._pointer(c_cb))
            check = bench.check_against_cublas(backend, case, c, c_cb, a, b, math.inf, fp64=True)
            fp64 = check["fp64"]
            if fp64["sgblas"] is not None:
                sg_errors.append((fp64["sgblas"], fp64["exact_norm"]))
                cb_errors.append((fp64["cublas"], fp64["exact_norm"]))
            vs_cublas = max(vs_cublas, check["rel_error"])
            nonfinite += check["nonfinite_sgblas"]
        else:
            err, norm, bad = _host_error(backend, case, c, a, b)
            sg_errors.append((err, norm))
            nonfinite += bad
        del drawn, a, b, c
    row["sgblas_error"] = _pooled(sg_errors)
    if cublas is not None:
        row.update(cublas_error=_pooled(cb_errors), sgblas_vs_cublas=vs_cublas,
                   worse_draws=sum(s > c for (s, _), (c, _) in zip(sg_errors, cb_errors)))
    sg, cb = row["sgblas_error"], row["cublas_error"]
    if sg is not None and cb is not None:
        row["error_ratio"] = sg / cb if cb > 0 else (1.0 if sg == 0 else None)
    row["status"] = "ok"
    if nonfinite:
        row.update(status="failed", reason=f"{nonfinite} non-finite elements in sgblas's C")
    return row


def measure_extras(doc: dict[str, Any], args: argparse.Namespace, *, want_copy: bool,
                   accuracy_cases: Sequence[sweep.SweepCase],
                   deadline: float | None) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The copy rate (when ``want_copy``) and the accuracy rows of ``accuracy_cases``, on a
    backend of their own; (copy record, rows). Cases past ``deadline`` (perf_counter) are skipped."""
    if not want_copy and not accuracy_cases:
        return None, []
    backend, _reason = bench._pick_backend(args)
    timing = bench.EventTiming(backend) if backend.events else bench.HostTiming(backend)
    l2_bytes = doc["device"].get("l2_bytes") or bench.DEFAULT_L2_BYTES
    copy = None
    rows: list[dict[str, Any]] = []
    with backend.activated():
        backend.calibrate_spin()
        if want_copy:
            nbytes = copy_bytes(l2_bytes, bool(doc["device"].get("simulator")))
            try:
                copy = measure_copy(backend, timing, nbytes, args)
            except Exception as exc:  # the timed rows stand without their shares
                copy = {"bytes_each_way": nbytes, "bytes_per_s": None,
                        "reason": environment.scrub_paths(f"{type(exc).__name__}: {exc}")}
            print(f"perf.{TOOL}: device-to-device copy {_gbs(copy['bytes_per_s'])} (read + write, "
                  f"{nbytes / 2**20:.0f} MiB each way){' ' + copy['reason'] if copy.get('reason') else ''}",
                  flush=True)
        if not accuracy_cases:
            return copy, rows
        import sgblas

        kwargs = {} if args.workspace_mib is None else {"workspace_bytes": int(args.workspace_mib * 2**20)}
        handle = sgblas.Handle(device=None if doc["device"].get("simulator") else args.device, stream=backend.stream,
                               **kwargs)
        cublas = bench.CublasPedantic(backend) if args.cublas else None
        if doc.get("sgblas_device") is None:
            doc["sgblas_device"] = sweep.device_record(handle)
        try:
            for number, case in enumerate(accuracy_cases):
                for dist in DISTRIBUTIONS:
                    prefix = f"[{number + 1:>3}/{len(accuracy_cases)}] {case.label} {case.pair} {dist:>7}"
                    if deadline is not None and time.perf_counter() > deadline:
                        rows.append({"class": case.shape_set, **sweep._case_fields(case), "dist": dist,
                                     "status": "skipped", "reason": f"time budget of {args.budget_s:g} s used up"})
                        print(f"{prefix}  skipped (time budget)", flush=True)
                        continue
                    try:
                        row = accuracy_row(case, dist, sgblas=sgblas, handle=handle, backend=backend, cublas=cublas,
                                           seed=args.seed)
                    except Exception as exc:  # one broken case must not lose the run
                        row = {"class": case.shape_set, **sweep._case_fields(case), "dist": dist, "status": "error",
                               "reason": environment.scrub_paths(f"{type(exc).__name__}: {exc}"),
                               "traceback": environment.scrub_paths(traceback.format_exc(limit=8))[-4000:]}
                    finally:
                        with contextlib.suppress(Exception):
                            backend.release()
                    rows.append(row)
                    print(f"{prefix}  {_accuracy_progress(row)}", flush=True)
        finally:
            if cublas is not None:
                cublas.close()
            with contextlib.suppress(Exception):
                handle.close()
    return copy, rows


def _accuracy_progress(row: dict[str, Any]) -> str:
    if row["status"] in ("error", "skipped"):
        return f"{row['status']}: {row.get('reason')}"
    text = f"sgblas {_err(row['sgblas_error'])}  cuBLAS {_err(row['cublas_error'])}  [{row['chosen']}]"
    if row.get("draws", 1) > 1:
        text += f"  ({row['draws']} draws, sgblas's error the larger in {row['worse_draws']})"
    if row["status"] != "ok":
        text += f"  {row['status'].upper()}: {row['reason']}"
    return text


# --------------------------------------------------------------------------------------------
# Tables


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _err(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def _gbs(bytes_per_s: float | None) -> str:
    return "-" if bytes_per_s is None else f"{bytes_per_s / 1e9:.0f} GB/s"


def class_table(cls: ShapeClass, rows: Sequence[dict[str, Any]]) -> str:
    """One line per shape of ``cls``."""
    mine = [r for r in rows if r["class"] == cls.name]
    if cls.kind == "accuracy":
        body = [[f"{r['m']}x{r['n']}x{r['k']}", r["pair"], r["ld_class"], r["dist"], _err(r.get("sgblas_error")),
                 _err(r.get("cublas_error")), _f(r.get("error_ratio")), r.get("chosen") or "-",
                 r["status"] if r["status"] == "ok" else f"{r['status'].upper()}: {r.get('reason')}"] for r in mine]
        return results_io.markdown_table(["shape", "pair", "ld", "data", "sgblas error", "cuBLAS error",
                                          "sgblas / cuBLAS", "chosen", "status"], body, "lllrrrrll")
    headers = ["shape", "pair", "ld", "sgblas us", "cuBLAS us", "ratio", "chosen"]
    align = "lllrrrl"
    if cls.kind == "bandwidth":
        headers += ["sgblas GB/s", "copy share", "cuBLAS share"]
        align += "rrr"
    body = []
    for r in mine:
        line = [f"{r['m']}x{r['n']}x{r['k']}", r["pair"], r["ld_class"], _us(r["sgblas_s"]), _us(r["cublas_s"]),
                _f(r["ratio"]), r.get("chosen") or "-"]
        if r["status"] != "ok":
            line[-1] += f" ({r['status'].upper()}: {r.get('reason')})"
        if cls.kind == "bandwidth":
            rate = r["bytes"] / r["sgblas_s"] if r.get("sgblas_s") else None
            line += [_gbs(rate).replace(" GB/s", ""), _pct(r.get("share")), _pct(r.get("cublas_share"))]
        body.append(line)
    return results_io.markdown_table(headers, body, align)


def summary_table(summaries: Sequence[dict[str, Any]]) -> str:
    body = []
    for s in summaries:
        if s["kind"] == "accuracy":
            figures = (f"error ratio geomean {_f(s['error_ratio_geomean'])}, max {_f(s['error_ratio_max'])}, "
                       f"worse in {'-' if s['worse'] is None else s['worse']} of {s['compared']} rows")
            center = ["-", "-", "-", str(s["left_out"])]
        else:
            figures = ""
            if s["kind"] == "bandwidth":
                figures = (f"copy share geomean {_pct(s['share_geomean'])}, min {_pct(s['share_min'])} "
                           f"(cuBLAS {_pct(s['cublas_share_geomean'])})")
            center = [_f(s["geomean"]), _f(s["min"]), _f(s["max"]), str(s["left_out"])]
        bars = ", ".join(f"{b['label']} {'met' if b['met'] else 'not measured' if b['met'] is None else 'NOT MET'}"
                         for b in s["bars"])
        body.append([s["class"], str(s["shapes"]), *center, figures, bars, "met" if s["met"] else "NOT MET"])
    return results_io.markdown_table(["class", "shapes", "geomean", "min", "max", "left out", "figures", "bars",
                                      "verdict"], body, "lrrrrrlll")


# --------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m perf.classes",
        description="Time sgblas against cuBLAS PEDANTIC on random shapes of each shape class, and check "
                    "the long-K class's accuracy against float64.")
    group = parser.add_argument_group("cases")
    group.add_argument("--classes", type=parse_classes, default=CLASS_NAMES, metavar="LIST",
                       help=f"comma-separated classes ({', '.join(CLASS_NAMES)}) or 'all' (default: all)")
    group.add_argument("--count", type=int, default=DEFAULT_COUNT, metavar="N",
                       help=f"shapes per class (default: {DEFAULT_COUNT})")
    group.add_argument("--seed", type=int, default=DEFAULT_SEED,
                       help=f"seed of the shapes and of the operands (default: {DEFAULT_SEED})")
    group.add_argument("--list", action="store_true", help="print the cases and exit (no GPU needed)")
    group.add_argument("--no-cublas", dest="cublas", action="store_false",
                       help="time and check sgblas alone (no ratios; what runs without CuPy)")
    # A dry run's (tests/perf/test_classes.py): every side clamped to N after the draw.
    group.add_argument("--max-dim", type=int, default=None, help=argparse.SUPPRESS)
    sweep.add_timing_args(parser)
    parser.set_defaults(cublas=True)
    args = parser.parse_args(argv)
    sweep.check_timing_args(parser, args)
    if not 1 <= args.count <= CLASS_STRIDE:
        parser.error(f"--count must be in 1..{CLASS_STRIDE}")
    if args.max_dim is not None and args.max_dim < 1:
        parser.error("--max-dim must be at least 1")
    return args


def selected_cases(args: argparse.Namespace) -> dict[str, list[sweep.SweepCase]]:
    """The cases of each selected class (``--shard`` keeps every N-th of each)."""
    return {name: sweep.shard(class_cases(_BY_NAME[name], args.count, args.seed, args.max_dim), args.shard)
            for name in args.classes}


def _setup_error(args: argparse.Namespace) -> str | None:
    """What stops a run before anything loads cuBLAS (the sweep checks the same for its cases;
    the accuracy class needs them too)."""
    if args.cublas:
        ok, note = bench.prepare_tf32_override()
        if not ok:
            return f"refusing to run cuBLAS: {note}"
    if not environment.simulator_enabled() and not bench._gpu_present():
        return ("no CUDA GPU is usable here; run on a GPU machine, or set NUMBA_ENABLE_CUDASIM=1 for a dry run "
                "of the machinery at tiny sizes (with --no-cublas)")
    if args.cublas and (environment.simulator_enabled() or args.backend == "numba"
                        or importlib.util.find_spec("cupy") is None):
        return "--cublas needs CuPy arrays (pass --no-cublas to time sgblas alone)"
    return None


def _bare_doc(args: argparse.Namespace, argv: Sequence[str] | None) -> dict[str, Any]:
    """The document's frame when no timed class runs (the sweep writes it otherwise)."""
    env_info = environment.environment_info()
    device = environment.device_info(args.device)
    return {
        "schema": sweep.SWEEP_SCHEMA, "kind": TOOL, "created": results_io.utc_now().isoformat(),
        "host": env_info["host"],
        "command": ["python", "-m", f"perf.{TOOL}",
                    *environment.public_argv(list(sys.argv[1:] if argv is None else argv), ("--out",))],
        "environment": env_info, "device": device, "sgblas_device": None,
        "settings": {"alpha": 1.0, "beta": 0.0, "seed": args.seed,
                     "l2_bytes_assumed": device.get("l2_bytes") or bench.DEFAULT_L2_BYTES,
                     "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                              if k not in ("out", "list")}},
        "cases": [], "rows": [],
        "summary": {"cases": 0, "ok": 0, "failed": 0, "error": 0, "skipped": 0, "rows": 0},
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    by_class = selected_cases(args)
    timed = [c for name in args.classes if _BY_NAME[name].kind != "accuracy" for c in by_class[name]]
    accuracy_cases = [c for name in args.classes if _BY_NAME[name].kind == "accuracy" for c in by_class[name]]
    print(f"seed {args.seed}")
    if args.list:
        for name in args.classes:
            cls = _BY_NAME[name]
            print(f"{name} ({cls.kind}: {cls.ranges})")
            sweep.list_cases(by_class[name])
        print(f"{len(timed) + len(accuracy_cases)} cases in {len(args.classes)} classes")
        return 0
    problem = _setup_error(args)
    if problem:
        print(f"perf.{TOOL}: {problem}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    print(f"perf.{TOOL}: seed {args.seed}, {args.count} shapes per class: {', '.join(args.classes)}", flush=True)
    if not args.only and not args.candidates_limit:
        args.plain_only = True  # the plain call and cuBLAS: what a user's call gets
    if timed:
        doc, status = sweep.run_cases(timed, args, tool=TOOL, seed=args.seed, argv=argv)
        if doc is None:
            return status
    else:
        doc, status = _bare_doc(args, argv), 0
    want_copy = any(_BY_NAME[name].kind == "bandwidth" for name in args.classes)
    deadline = None if args.budget_s is None else started + args.budget_s
    copy, accuracy = measure_extras(doc, args, want_copy=want_copy, accuracy_cases=accuracy_cases, deadline=deadline)
    copy_rate = (copy or {}).get("bytes_per_s")
    rows = class_rows(doc["cases"], copy_rate)
    summaries = [summarize_accuracy(_BY_NAME[name], accuracy) if _BY_NAME[name].kind == "accuracy"
                 else summarize_class(_BY_NAME[name], rows) for name in args.classes]
    doc["classes_schema"] = CLASSES_SCHEMA
    doc["classes"] = {
        "seed": args.seed, "count": args.count,
        "definitions": {name: {"ranges": _BY_NAME[name].ranges, "kind": _BY_NAME[name].kind,
                               "bars": [b.label for b in _BY_NAME[name].bars]} for name in args.classes},
        "ratio": "cuBLAS PEDANTIC median seconds / sgblas plain call's median seconds (above 1: sgblas faster)",
        "bytes": "4 (mk + kn + mn): A and B read, C written (beta = 0)",
        "copy": copy, "rows": rows, "accuracy": accuracy, "summary": {s["class"]: s for s in summaries},
        "met": all(s["met"] for s in summaries),
    }
    doc["settings"]["cublas_timed"] = bool(args.cublas)
    doc["summary"].update(accuracy_rows=len(accuracy),
                          **{f"accuracy_{s}": sum(r["status"] == s for r in accuracy)
                             for s in ("ok", "failed", "error", "skipped")},
                          elapsed_s=time.perf_counter() - started)
    if doc["summary"]["accuracy_failed"] + doc["summary"]["accuracy_error"]:
        status = 1
    path = sweep.save_doc(doc, args.out)
    print()
    for name in args.classes:
        cls = _BY_NAME[name]
        print(f"### {name} ({cls.ranges})\n")
        print(class_table(cls, accuracy if cls.kind == "accuracy" else rows))
        print()
    if copy_rate:
        print(f"device-to-device copy: {_gbs(copy_rate)} (read + write)\n")
    print(summary_table(summaries))
    print()
    print(f"acceptance: {'every bar met' if doc['classes']['met'] else 'NOT MET'}")
    print(f"wrote {path} in {doc['summary']['elapsed_s']:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
