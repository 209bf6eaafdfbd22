"""Every legal candidate plan of each shape, timed by name, beside sgblas's own choice.

Usage (from the repository root; both forms work)::

    python -m perf.sweep                                   # perf.bench's shapes, all pairs, tight lds
    python -m perf.sweep --shapes 4096x4096x64,random --random 40 --ld-class all
    python -m perf.sweep --shapes 1000x1000x100000 --pairs TN --candidates-limit 8
    python perf/sweep.py --list                            # print the cases and exit (no GPU needed)

A *candidate* is one way sgblas can run a problem (``sgblas.dispatch.candidates``): ``VARIANT``,
``VARIANT/sS`` (K in S slices), ``VARIANT/cS`` (K in S slices added into C in turn) or
``VARIANT/tail``. For each case (shape, transpose pair and
leading-dimension class) the sweep asks ``sgblas.explain`` for every legal candidate with its
predicted time and for sgblas's choice, then times each candidate through
``sgblas.sgemm(..., candidate=NAME)`` and the plain call (no ``candidate``) on the same operands.
The cost model is fitted to these rows (``python -m perf.calibrate``) and judged by them
(``python -m perf.regret``).

Leading-dimension classes (``--ld-class``): ``tight`` (each ld the rows of its matrix as
stored), ``odd`` (the least odd ld above the rows: only 4-byte kernels can take it), ``padded``
(the least multiple of 32 floats above the rows: 128-byte columns) and ``offset`` (tight, with
A, B and C starting 1, 2 and 3 floats into their allocations: 4-, 8- and 4-byte aligned).

Measurement, as ``perf.bench`` does it (its machinery is imported, not copied): fresh
standard-normal operands per case; enough buffer sets that consecutive calls never find their
operands in L2, every call of a case taking the next set whichever candidate it is; CUDA events
between consecutive calls of a block headed by a sleeping kernel; warm-up calls outside the
timing; the number of timed calls set by time (``--target-s`` per candidate, within
``--min-reps``/``--max-reps``); blocks of all candidates of a case interleaved, so clock drift
touches all alike; the median is the row's time. Each candidate's first call writes a C of its
own, compared with the plain call's (relative Frobenius difference; above ``--tolerance`` the
row is marked failed). ``--confirm N`` times the chosen candidate, the N fastest and the plain
call once more, interleaved, and pools the samples (against a fastest that is fast by luck).
``--cublas`` times cuBLAS ``gemmEx`` PEDANTIC beside them (``perf.bench``'s runner), as a
reference.

Writes ``perf/results/sweep_<UTC date-time>_<device>.json``: ``cases`` (one per case: sgblas's
choice, the plain call's time, the fastest candidate) and ``rows`` (one per timed call: the
case's shape, pair, ld class, lds, offsets and pointer low bits, the candidate, its median
seconds and sample count, whether sgblas chose it, and ``explain``'s predicted seconds), with
``sgblas_device`` (compute capability, the properties sgblas reads, workspace) so that a row
can be rebuilt as the ``GemmProblem`` it timed. Exit status: 0 if every case ran and every
check passed, 1 otherwise (the JSON is written anyway), 2 on a usage or setup error.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python perf/sweep.py`: make `perf` and `sgblas` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perf import bench, environment, results_io  # noqa: E402  (after the path fix above)

__all__ = [
    "SWEEP_SCHEMA",
    "LD_CLASSES",
    "OFFSETS",
    "MAX_DIM",
    "MAX_FLOP",
    "SweepCase",
    "leading_dimension",
    "make_case",
    "bench_shapes",
    "random_shapes",
    "random_cases",
    "skinny_cases",
    "rotated_cases",
    "cross_cases",
    "parse_shapes",
    "parse_ld_classes",
    "parse_shard",
    "add_timing_args",
    "check_timing_args",
    "run_cases",
    "save_doc",
    "load_docs",
    "merged_doc",
    "list_cases",
    "parse_args",
    "main",
]

SWEEP_SCHEMA = "sgblas-sweep/1"
LD_CLASSES: tuple[str, ...] = ("tight", "odd", "padded", "offset")
#: Where A, B and C start in their allocations (float32 elements) in the ``offset`` class.
OFFSETS: tuple[int, int, int] = (1, 2, 3)
#: Random shapes: each of m, n, k log-uniform over 1..MAX_DIM, at most MAX_FLOP (2mnk) each.
MAX_DIM = 20000
MAX_FLOP = 2 ** 37
#: The plain call's and cuBLAS's run names (the plain call's plan is sgblas's choice).
PLAIN = "(plain)"
CUBLAS = "(cublas)"
#: C larger than this (elements) is not compared on the host (Numba backend without CuPy).
HOST_CHECK_LIMIT = 1 << 26


# --------------------------------------------------------------------------------------------
# Cases


def leading_dimension(rows: int, ld_class: str) -> int:
    """The leading dimension of a matrix of ``rows`` rows (as stored) in ``ld_class``."""
    if ld_class in ("tight", "offset"):
        return rows
    if ld_class == "odd":
        return rows + 1 if rows % 2 == 0 else rows + 2
    if ld_class == "padded":
        return (rows // 32 + 1) * 32
    raise ValueError(f"ld class {ld_class!r} is not one of {', '.join(LD_CLASSES)}")


@dataclass(frozen=True)
class SweepCase(bench.Case):
    """A :class:`perf.bench.Case` whose leading dimensions and offsets follow ``ld_class``;
    ``index`` numbers the case in its set (what its data seed and shard derive from)."""

    ld_class: str = "tight"
    index: int = 0

    @property
    def lda(self) -> int:
        return leading_dimension(self.a_dims[0], self.ld_class)

    @property
    def ldb(self) -> int:
        return leading_dimension(self.b_dims[0], self.ld_class)

    @property
    def ldc(self) -> int:
        return leading_dimension(self.m, self.ld_class)

    @property
    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k} {self.ld_class}"


def make_case(m: int, n: int, k: int, pair: str, ld_class: str, shape_set: str, index: int) -> SweepCase:
    if ld_class not in LD_CLASSES:
        raise ValueError(f"ld class {ld_class!r} is not one of {', '.join(LD_CLASSES)}")
    offsets = OFFSETS if ld_class == "offset" else (0, 0, 0)
    return SweepCase(m, n, k, pair[0], pair[1], shape_set, 0, offsets, ld_class, index)


def bench_shapes(which: str = "all") -> list[tuple[int, int, int, str]]:
    """``perf.bench``'s default shapes: ``square``, ``rect`` or ``all``."""
    shapes: list[tuple[int, int, int, str]] = []
    if which in ("square", "all"):
        shapes += [(s, s, s, "square") for s in bench.SQUARE_SIZES]
    if which in ("rect", "all"):
        shapes += [(m, n, k, "rect") for m, n, k in bench.RECT_SHAPES]
    return shapes


def random_shapes(count: int, seed: int, max_dim: int = MAX_DIM, max_flop: int = MAX_FLOP,
                  small: int | None = None) -> list[tuple[int, int, int]]:
    """``count`` shapes, each of m, n, k log-uniform over 1..``max_dim`` (the floor of
    ``exp(U(0, log(max_dim + 1)))``), drawn again until ``2mnk <= max_flop``. ``small``: m (in
    even draws) or n (in odd ones) is log-uniform over 1..``small`` instead (skinny shapes)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    top = math.log(max_dim + 1)
    out: list[tuple[int, int, int]] = []
    while len(out) < count:
        dims = [min(max_dim, max(1, int(v))) for v in np.exp(rng.uniform(0.0, top, 3))]
        if small is not None:
            dims[len(out) % 2] = min(small, max(1, int(math.exp(rng.uniform(0.0, math.log(small + 1))))))
        m, n, k = dims
        if 2 * m * n * k <= max_flop:
            out.append((m, n, k))
    return out


def random_cases(count: int, seed: int, pairs: Sequence[str] = bench.PAIRS,
                 ld_classes: Sequence[str] = LD_CLASSES, start: int = 0, max_dim: int = MAX_DIM,
                 max_flop: int = MAX_FLOP, shape_set: str = "random", small: int | None = None) -> list[SweepCase]:
    """:func:`random_shapes`, each with one (pair, ld class): every run of
    ``len(pairs) * len(ld_classes)`` cases takes each combination once, in a shuffled order."""
    import numpy as np

    combos = list(itertools.product(pairs, ld_classes))
    rng = np.random.default_rng([seed, 1])
    cases: list[SweepCase] = []
    order: list[int] = []
    for i, (m, n, k) in enumerate(random_shapes(count, seed, max_dim, max_flop, small)):
        if not order:
            order = [int(j) for j in rng.permutation(len(combos))]
        pair, ld_class = combos[order.pop()]
        cases.append(make_case(m, n, k, pair, ld_class, shape_set, start + i))
    return cases


def skinny_cases(count: int, seed: int, pairs: Sequence[str] = bench.PAIRS,
                 ld_classes: Sequence[str] = ("padded", "tight"), start: int = 0, small: int = 16,
                 max_dim: int = MAX_DIM, max_flop: int = MAX_FLOP) -> list[SweepCase]:
    """``count`` shapes whose m (even draws) or n (odd ones) is log-uniform over 1..``small``,
    the others as :func:`random_shapes` draws them: what the skinny variants run. Each pair
    takes each small side in turn, and each run of ``2 * len(pairs)`` shapes the next ld class
    (by default padded and tight: the 16-byte skinny variants' loads need lds of whole 16 bytes)."""
    cases = []
    for i, (m, n, k) in enumerate(random_shapes(count, seed, max_dim, max_flop, small)):
        pair = pairs[(i // 2) % len(pairs)]
        ld_class = ld_classes[(i // (2 * len(pairs))) % len(ld_classes)]
        cases.append(make_case(m, n, k, pair, ld_class, "skinny", start + i))
    return cases


def rotated_cases(shapes: Sequence[tuple[int, int, int, str]], pairs: Sequence[str],
                  ld_classes: Sequence[str], start: int = 0) -> list[SweepCase]:
    """Every (shape, pair), each in one ld class, turning: shape i with pair j takes class
    ``(i + j) mod len(ld_classes)``, so each shape meets every class over its pairs."""
    cases = []
    for i, (m, n, k, shape_set) in enumerate(shapes):
        for j, pair in enumerate(pairs):
            cases.append(make_case(m, n, k, pair, ld_classes[(i + j) % len(ld_classes)], shape_set,
                                   start + len(cases)))
    return cases


def cross_cases(shapes: Sequence[tuple[int, int, int, str]], pairs: Sequence[str],
                ld_classes: Sequence[str], start: int = 0) -> list[SweepCase]:
    """Every (shape, pair, ld class)."""
    cases = []
    for m, n, k, shape_set in shapes:
        for pair in pairs:
            for ld_class in ld_classes:
                cases.append(make_case(m, n, k, pair, ld_class, shape_set, start + len(cases)))
    return cases


def parse_shapes(text: str) -> tuple[str, ...]:
    """Comma-separated items, each ``MxNxK``, ``square``, ``rect``, ``bench`` (both) or
    ``random`` (``--random`` shapes from ``--seed``)."""
    items = []
    for item in text.split(","):
        item = item.strip().lower()
        if item in ("square", "rect", "bench", "random"):
            items.append(item)
        elif item:
            m, n, k = bench.parse_shape(item)
            items.append(f"{m}x{n}x{k}")
    if not items:
        raise argparse.ArgumentTypeError("no shape given")
    return tuple(items)


def parse_ld_classes(text: str) -> tuple[str, ...]:
    """``tight,odd`` -> ('tight', 'odd'); ``all`` -> every class."""
    if text.strip().lower() == "all":
        return LD_CLASSES
    out: list[str] = []
    for item in text.split(","):
        item = item.strip().lower()
        if item not in LD_CLASSES:
            raise argparse.ArgumentTypeError(f"ld class {item!r} is not one of {', '.join(LD_CLASSES)}")
        if item not in out:
            out.append(item)
    if not out:
        raise argparse.ArgumentTypeError("no ld class given")
    return tuple(out)


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` -> (I, N): the I-th of N interleaved parts of the cases (1 <= I <= N)."""
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        i = n = 0
    if not 1 <= i <= n:
        raise argparse.ArgumentTypeError(f"shard {text!r} is not I/N with 1 <= I <= N (e.g. 2/3)")
    return i, n


def shard(cases: Sequence[SweepCase], which: tuple[int, int] | None) -> list[SweepCase]:
    """The cases of shard ``(I, N)``: every N-th case from the I-th (None: all)."""
    if which is None:
        return list(cases)
    i, n = which
    return [c for j, c in enumerate(cases) if j % n == i - 1]


def selected_cases(args: argparse.Namespace) -> list[SweepCase]:
    shapes: list[tuple[int, int, int, str]] = []
    random = False
    for item in args.shapes:
        if item in ("square", "rect"):
            shapes += bench_shapes(item)
        elif item == "bench":
            shapes += bench_shapes("all")
        elif item == "random":
            random = True
        else:
            m, n, k = bench.parse_shape(item)
            shapes.append((m, n, k, "custom"))
    cases = cross_cases(shapes, args.pairs, args.ld_class)
    if random:
        cases += random_cases(args.random, args.seed, args.pairs, args.ld_class, start=len(cases))
    return shard(cases, args.shard)


def list_cases(cases: Sequence[SweepCase]) -> None:
    width = max([20, *(len(c.label) for c in cases)])
    for c in cases:
        print(f"{c.index:>5} {c.label:>{width}} {c.pair}  ld {c.lda},{c.ldb},{c.ldc}  "
              f"off {','.join(map(str, c.offsets))}  {c.flop / 1e9:12.3f} GFLOP  "
              f"{c.working_set_bytes / 2**20:10.1f} MiB")
    print(f"{len(cases)} cases, {sum(c.flop for c in cases) / 1e12:.2f} TFLOP per timed call of each")


# --------------------------------------------------------------------------------------------
# Options shared by the three tools


def add_timing_args(parser: argparse.ArgumentParser, *, confirm: int = 0) -> None:
    group = parser.add_argument_group("timing")
    group.add_argument("--reps", type=int, default=None, metavar="N",
                       help="exactly N timed calls per candidate (overrides the time budget)")
    group.add_argument("--warmup", type=int, default=2, metavar="N",
                       help="untimed calls after the first (checked) call, per candidate (default: 2)")
    group.add_argument("--target-s", type=float, default=0.02, metavar="S",
                       help="seconds of timed work per candidate (default: 0.02)")
    group.add_argument("--min-reps", type=int, default=5, metavar="N", help="default: 5")
    group.add_argument("--max-reps", type=int, default=100, metavar="N", help="default: 100")
    group.add_argument("--max-case-s", type=float, default=1.0, metavar="S",
                       help="cut a very slow candidate's timed calls below --min-reps (not below 3) "
                            "so that they take about S seconds (default: 1)")
    group.add_argument("--confirm", type=int, default=confirm, metavar="N",
                       help="time the chosen candidate, the N fastest and the plain call once more, "
                            f"interleaved, and pool the samples (default: {confirm}; 0: no second round)")
    group.add_argument("--budget-s", type=float, default=None, metavar="S",
                       help="skip the remaining cases once the case loop has run S seconds "
                            "(default: no limit)")
    group.add_argument("--l2-multiple", type=float, default=4.0, metavar="X",
                       help="rotate buffer sets until they span X times the L2 size (default: 4)")
    group.add_argument("--max-sets", type=int, default=32, metavar="N", help="default: 32")
    group = parser.add_argument_group("candidates and checks")
    group.add_argument("--candidates-limit", type=int, default=0, metavar="N",
                       help="time only the N candidates of least predicted time, and the chosen "
                            "one (default: 0, every legal candidate)")
    group.add_argument("--plain-only", action="store_true",
                       help="time no candidate by name: only the plain call (and cuBLAS with --cublas)")
    group.add_argument("--only", default=None, metavar="TEXT[,TEXT]",
                       help="time only the candidates whose names contain one of these strings "
                            "(and the chosen one)")
    group.add_argument("--workspace-mib", type=float, default=None, metavar="MIB",
                       help="the handle's workspace (default: sgblas's default)")
    group.add_argument("--no-check", action="store_true",
                       help="do not compare each candidate's C with the plain call's")
    group.add_argument("--tolerance", type=float, default=1e-4,
                       help="largest relative Frobenius difference from the plain call's C a "
                            "candidate may have (default: 1e-4)")
    group.add_argument("--backend", choices=("auto", "cupy", "numba"), default="auto",
                       help="array library (auto: CuPy when importable)")
    group.add_argument("--cublas", action="store_true",
                       help="also time cuBLAS gemmEx PEDANTIC on each case (a reference; needs CuPy)")
    group.add_argument("--shard", type=parse_shard, default=None, metavar="I/N",
                       help="run only every N-th case from the I-th (split a long run over several "
                            "commands; the results of the shards combine with --from)")
    group.add_argument("--device", type=int, default=0)
    group.add_argument("--out", type=Path, default=results_io.RESULTS_DIR, metavar="DIR",
                       help="where the JSON goes (default: perf/results)")


def check_timing_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.reps is not None:
        if args.reps < 1:
            parser.error("--reps must be at least 1")
        args.min_reps = args.max_reps = args.reps
        args.max_case_s = float("inf")
    for name in ("min_reps", "max_reps", "warmup", "max_sets", "confirm", "candidates_limit"):
        if getattr(args, name) < (1 if name in ("min_reps", "max_reps", "max_sets") else 0):
            parser.error(f"--{name.replace('_', '-')} is too small")
    if args.min_reps > args.max_reps:
        parser.error("--min-reps is above --max-reps")
    if args.target_s <= 0 or args.max_case_s <= 0 or (args.budget_s is not None and args.budget_s <= 0):
        parser.error("--target-s, --max-case-s and --budget-s must be positive")


# --------------------------------------------------------------------------------------------
# One case


class CandidateError(RuntimeError):
    """``sgblas.sgemm(..., candidate=NAME)`` returned a status other than SUCCESS."""


def _candidate_call(sgblas: Any, handle: Any, case: SweepCase, name: str, a: Any, b: Any, c: Any) -> None:
    status = sgblas.sgemm(handle, case.transa, case.transb, case.m, case.n, case.k, 1.0, a, case.lda,
                          b, case.ldb, 0.0, c, case.ldc, candidate=name)
    if status is None or int(status) != 0:
        raise CandidateError(f"{getattr(status, 'name', status)}: {sgblas.last_error_message()}")


def _pointer(x: Any) -> int:
    from sgblas.operands import read_operand

    operand = read_operand(x, "operand")
    return int(operand.ptr) if not isinstance(operand, str) else 0


def _rel_difference(backend: bench.Backend, case: SweepCase, c: Any, ref: Any) -> float | None:
    """||C - C_ref||_F / ||C_ref||_F over the m x n matrices (None when too large to bring to
    the host without CuPy)."""
    if isinstance(backend, bench.CupyBackend):
        cp = backend.cp
        x = bench._fview(c, case.m, case.n, case.ldc, cp).astype(cp.float64)
        y = bench._fview(ref, case.m, case.n, case.ldc, cp).astype(cp.float64)
        norm = float(cp.linalg.norm(y))
        diff = float(cp.linalg.norm(x - y))
    else:
        import numpy as np

        if case.m * case.n > HOST_CHECK_LIMIT:
            return None
        x = bench._fview(backend.to_host(c), case.m, case.n, case.ldc).astype(np.float64)
        y = bench._fview(backend.to_host(ref), case.m, case.n, case.ldc).astype(np.float64)
        norm, diff = float(np.linalg.norm(y)), float(np.linalg.norm(x - y))
    if not math.isfinite(diff):
        return float("inf")
    return diff / norm if norm > 0 else diff


def _case_fields(case: SweepCase) -> dict[str, Any]:
    return {"case": case.index, "shape_set": case.shape_set, "m": case.m, "n": case.n, "k": case.k,
            "transa": case.transa, "transb": case.transb, "pair": case.pair, "ld_class": case.ld_class,
            "lda": case.lda, "ldb": case.ldb, "ldc": case.ldc, "offsets": list(case.offsets)}


def _stats(samples: Sequence[float]) -> dict[str, Any]:
    stats = results_io.summarize(samples)
    return {"seconds": stats.get("median"), "samples": stats["n"], "times_s": stats}


def _select(ranking: Sequence[tuple[str, float]], chosen: str | None, args: argparse.Namespace) -> list[str]:
    if getattr(args, "plain_only", False):
        return []
    names = [name for name, _ in ranking]
    if args.only:
        keep = [s.strip() for s in args.only.split(",") if s.strip()]
        names = [n for n in names if any(s in n for s in keep)]
    if args.candidates_limit:
        names = names[:args.candidates_limit]
    if chosen and chosen not in names:
        names.append(chosen)
    return names


def time_case(case: SweepCase, *, sgblas: Any, handle: Any, backend: bench.Backend,
              timing: bench.EventTiming | bench.HostTiming, args: argparse.Namespace, l2_bytes: int,
              seed: int, cublas: bench.CublasPedantic | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Explain, check and time every candidate of one case and the plain call (and cuBLAS when
    given): (case record, rows)."""
    started = time.perf_counter()
    record: dict[str, Any] = {**_case_fields(case), "flop": case.flop, "status": "error", "reason": None}
    nsets = bench.buffer_sets(case.working_set_bytes, l2_bytes, args.l2_multiple, args.max_sets)
    record["buffer_sets"] = nsets
    oa, ob, oc = case.offsets
    drawn = backend.random_arrays(list(case.allocated) * nsets, bench._seed(seed, case.index))
    sets = [(drawn[3 * s][oa:], drawn[3 * s + 1][ob:], drawn[3 * s + 2][oc:]) for s in range(nsets)]
    del drawn
    backend.synchronize()
    a0, b0, c0 = sets[0]
    ptr_low = [_pointer(x) % 4096 for x in (a0, b0, c0)]
    record["ptr_low"] = ptr_low
    ex = sgblas.explain(handle, case.transa, case.transb, case.m, case.n, case.k, a0, case.lda, b0, case.ldb,
                        c0, case.ldc)
    record.update(kernel=ex.kernel, chosen=ex.candidate, chosen_predicted_s=ex.predicted_s,
                  calibrated=bool(ex.calibrated), legal_candidates=len(ex.candidates))
    if ex.kernel is None:
        record["reason"] = f"sgblas.explain chose no kernel: {ex.message}"
        return record, []
    predicted = dict(ex.candidates)
    names = _select(ex.candidates, ex.candidate, args)
    fields = {**_case_fields(case), "ptr_low": ptr_low}

    counter = itertools.count()  # every call takes the next buffer set, whichever candidate it is

    def launcher(name: str):
        if name == PLAIN:
            return lambda _i: bench.sgblas_call(sgblas, handle, case, *sets[next(counter) % nsets])
        return lambda _i: _candidate_call(sgblas, handle, case, name, *sets[next(counter) % nsets])

    # The plain call first: its C is the reference, and it is the plain call's first call.
    c_ref = backend.nan_filled(case.allocated[2])[oc:]
    backend.synchronize()
    t0 = time.perf_counter()
    bench.sgblas_call(sgblas, handle, case, a0, b0, c_ref)
    backend.synchronize()
    runs = [bench.LibraryRun(PLAIN, launcher(PLAIN), first_call_s=time.perf_counter() - t0)]
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        row = {**fields, "call": "candidate", "candidate": name, "chosen": name == ex.candidate,
               "predicted_s": predicted.get(name), "seconds": None, "samples": 0, "status": "error",
               "reason": None, "rel_diff": None}
        rows[name] = row
        c_chk = backend.nan_filled(case.allocated[2])[oc:]
        backend.synchronize()
        try:
            t0 = time.perf_counter()
            _candidate_call(sgblas, handle, case, name, a0, b0, c_chk)
            backend.synchronize()
            row["first_call_s"] = time.perf_counter() - t0
        except CandidateError as exc:
            row.update(status="refused", reason=str(exc))
            continue
        if not args.no_check:
            row["rel_diff"] = _rel_difference(backend, case, c_chk, c_ref)
        del c_chk
        row["status"] = "ok"
        if row["rel_diff"] is not None and not row["rel_diff"] <= args.tolerance:
            row.update(status="failed", reason=f"C differs from the plain call's by {row['rel_diff']:.3g} "
                                               f"(relative Frobenius; --tolerance {args.tolerance:g})")
        runs.append(bench.LibraryRun(name, launcher(name), first_call_s=row["first_call_s"]))
    if cublas is not None:
        pointers = [tuple(_pointer(x) for x in abc) for abc in sets]
        c_cb = backend.nan_filled(case.allocated[2])[oc:]
        backend.synchronize()
        t0 = time.perf_counter()
        cublas(case, pointers[0][0], pointers[0][1], _pointer(c_cb))
        backend.synchronize()
        runs.append(bench.LibraryRun(CUBLAS, lambda _i: cublas(case, *pointers[next(counter) % nsets]),
                                     first_call_s=time.perf_counter() - t0))
        rows[CUBLAS] = {**fields, "call": "cublas", "candidate": None, "chosen": False, "predicted_s": None,
                        "status": "ok", "reason": None, "first_call_s": runs[-1].first_call_s,
                        "rel_diff": None if args.no_check else _rel_difference(backend, case, c_cb, c_ref)}
        del c_cb
    del c_ref
    for run in runs:
        bench.warm_up(timing, run, args.warmup)
        run.reps, run.reps_limited = bench.plan_reps(run.t_call, args.target_s, args.min_reps, args.max_reps,
                                                     args.max_case_s)
        run.batch, run.spin_s = bench.plan_batch(run.t_call, run.host_s_per_call, run.reps)
    bench.measure_interleaved(timing, runs)
    by_name = {run.name: run for run in runs}
    first_round = {run.name: results_io.summarize(run.samples).get("median") for run in runs}
    if args.confirm:
        timed = sorted((first_round[r.name], r.name) for r in runs[1:]
                       if r.name != CUBLAS and rows[r.name]["status"] == "ok")
        again = [PLAIN] + [n for _, n in timed[:args.confirm]]
        if ex.candidate in by_name and ex.candidate not in again:
            again.append(ex.candidate)
        extra = []
        for name in again:
            old = by_name[name]
            run = bench.LibraryRun(name, old.launch, t_call=old.t_call, host_s_per_call=old.host_s_per_call,
                                   reps=old.reps, batch=old.batch, spin_s=old.spin_s)
            extra.append(run)
        bench.measure_interleaved(timing, extra)
        for run in extra:
            by_name[run.name].samples.extend(run.samples)
    out_rows = []
    plain = by_name[PLAIN]
    plain_row = {**fields, "call": "plain", "candidate": ex.candidate, "chosen": True,
                 "predicted_s": ex.predicted_s, "status": "ok", "reason": None, "rel_diff": None,
                 "first_call_s": plain.first_call_s, **_stats(plain.samples),
                 "first_round_s": first_round[PLAIN], "reps_limited": plain.reps_limited,
                 "blocks_not_covered": plain.blocks_not_covered}
    for name in names + ([CUBLAS] if CUBLAS in rows else []):
        row = rows[name]
        run = by_name.get(name)
        if run is not None:
            row.update(_stats(run.samples), first_round_s=first_round[name], reps_limited=run.reps_limited,
                       blocks_not_covered=run.blocks_not_covered)
        out_rows.append(row)
    out_rows.append(plain_row)
    ok = [r for r in out_rows if r["call"] == "candidate" and r["status"] == "ok" and r["seconds"]]
    fastest = min(ok, key=lambda r: r["seconds"]) if ok else None
    record.update(
        status="ok", timed=len(names), plain={k: plain_row[k] for k in ("seconds", "samples", "times_s")},
        fastest=fastest["candidate"] if fastest else None, fastest_s=fastest["seconds"] if fastest else None,
        chosen_s=rows[ex.candidate]["seconds"] if ex.candidate in rows else None,
        cublas_s=rows[CUBLAS]["seconds"] if CUBLAS in rows else None,
        elapsed_s=time.perf_counter() - started)
    # A candidate whose C is not the plain call's fails the case (cuBLAS's too: a check of the check).
    bad = [r for r in out_rows if r["status"] not in ("ok", "refused")
           or r["call"] == "cublas" and r["rel_diff"] is not None and not r["rel_diff"] <= args.tolerance]
    if bad:
        record["status"] = "failed"
        record["reason"] = "; ".join(f"{r['candidate'] or 'cuBLAS'}: {r['reason'] or 'C differs from the plain call'}"
                                     for r in bad[:3])
    refused = [r for r in out_rows if r["status"] == "refused"]
    record["notes"] = [f"{r['candidate']} listed by explain but refused by name: {r['reason']}" for r in refused]
    return record, out_rows


def _errored(case: SweepCase, exc: BaseException) -> dict[str, Any]:
    return {**_case_fields(case), "flop": case.flop, "status": "error",
            "reason": environment.scrub_paths(f"{type(exc).__name__}: {exc}"),
            "traceback": environment.scrub_paths(traceback.format_exc(limit=8))[-4000:]}


def _progress(record: dict[str, Any]) -> str:
    if record["status"] in ("error", "skipped"):
        return f"{record['status']}: {record.get('reason')}"
    plain = (record.get("plain") or {}).get("seconds")
    text = (f"{record.get('timed', 0):>3} timed  chosen {record.get('chosen')} "
            f"{_us(record.get('chosen_s'))}  fastest {record.get('fastest')} {_us(record.get('fastest_s'))}  "
            f"plain {_us(plain)}")
    if record.get("chosen_s") and record.get("fastest_s"):
        text += f"  regret {record['chosen_s'] / record['fastest_s']:.3f}"
    if record.get("cublas_s"):
        text += f"  cuBLAS {_us(record['cublas_s'])}"
    if record.get("notes"):
        text += f"  ({len(record['notes'])} listed by explain but refused by name)"
    if record["status"] != "ok":
        text += f"  {record['status'].upper()}: {record.get('reason')}"
    return text


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f} us"


# --------------------------------------------------------------------------------------------
# The run


def device_record(handle: Any) -> dict[str, Any]:
    """What a result file records of the device as sgblas sees it through ``handle``: enough to
    rebuild each row as the ``GemmProblem`` it timed (compute capability, the properties sgblas
    reads, workspace) and whether its calibration chose."""
    from sgblas.dispatch import model

    cal = model.calibration_for(handle.cc, handle.properties, warn=False)
    return {"cc": list(handle.cc), "key": model.device_key(handle.cc, handle.properties),
            "properties": dict(handle.properties._asdict()), "workspace_bytes": int(handle.workspace_bytes),
            "math_mode": handle.math_mode.name, "calibrated": bool(cal.calibrated), "calibration_source": cal.source}


def run_cases(cases: Sequence[SweepCase], args: argparse.Namespace, *, tool: str, seed: int,
              argv: Sequence[str] | None) -> tuple[dict[str, Any] | None, int]:
    """Time ``cases`` (sorted as given) on the GPU; (document, exit status). The document has
    ``cases``, ``rows``, ``sgblas_device`` and the environment; None when nothing could run
    (the status is then 2)."""
    started = time.perf_counter()
    created = results_io.utc_now()
    if not cases:
        print(f"perf.{tool}: no case selected", file=sys.stderr)
        return None, 2
    if not environment.simulator_enabled() and not bench._gpu_present():
        print(f"perf.{tool}: no CUDA GPU is usable here; run on a GPU machine, or set NUMBA_ENABLE_CUDASIM=1 "
              f"for a dry run of the machinery at tiny sizes", file=sys.stderr)
        return None, 2
    tf32_note = None
    if args.cublas:
        ok, tf32_note = bench.prepare_tf32_override()  # before CuPy loads cuBLAS
        if not ok:
            print(f"perf.{tool}: refusing to run cuBLAS: {tf32_note}", file=sys.stderr)
            return None, 2
    backend, backend_reason = bench._pick_backend(args)
    if args.cublas and not isinstance(backend, bench.CupyBackend):
        print(f"perf.{tool}: --cublas needs CuPy arrays ({backend_reason})", file=sys.stderr)
        return None, 2
    import sgblas

    device = environment.device_info(args.device)
    l2_bytes = device.get("l2_bytes") or bench.DEFAULT_L2_BYTES
    timing: bench.EventTiming | bench.HostTiming = (bench.EventTiming(backend) if backend.events
                                                    else bench.HostTiming(backend))
    cases_out: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    with backend.activated():
        spin_info = backend.calibrate_spin()
        kwargs = {}
        if args.workspace_mib is not None:
            kwargs["workspace_bytes"] = int(args.workspace_mib * 2**20)
        handle = sgblas.Handle(device=None if device.get("simulator") else args.device, stream=backend.stream,
                               **kwargs)
        cublas = bench.CublasPedantic(backend) if args.cublas else None
        sgblas_device = device_record(handle)
        print(f"perf.{tool}: {len(cases)} cases on {device.get('name')} ({sgblas_device['key']}, "
              f"{'calibrated' if sgblas_device['calibrated'] else 'uncalibrated: default rates'}), "
              f"arrays: {backend.name}, timer: {timing.name}", flush=True)
        width = max(20, *(len(c.label) for c in cases))
        loop_started = time.perf_counter()
        try:
            for number, case in enumerate(cases):
                elapsed = time.perf_counter() - loop_started
                prefix = f"[{number + 1:>3}/{len(cases)}] {case.label:>{width}} {case.pair}"
                if args.budget_s is not None and elapsed > args.budget_s:
                    cases_out.append({**_case_fields(case), "flop": case.flop, "status": "skipped",
                                      "reason": f"time budget of {args.budget_s:g} s used up after {elapsed:.0f} s"})
                    print(f"{prefix}  skipped (time budget)", flush=True)
                    continue
                try:
                    record, case_rows = time_case(case, sgblas=sgblas, handle=handle, backend=backend,
                                                  timing=timing, args=args, l2_bytes=l2_bytes, seed=seed,
                                                  cublas=cublas)
                except Exception as exc:  # one broken case must not lose the run
                    record, case_rows = _errored(case, exc), []
                finally:
                    with contextlib.suppress(Exception):
                        backend.release()
                cases_out.append(record)
                rows += case_rows
                print(f"{prefix}  {_progress(record)}", flush=True)
        finally:
            if cublas is not None:
                cublas.close()
            with contextlib.suppress(Exception):
                handle.close()
    env_info = environment.environment_info()
    doc: dict[str, Any] = {
        "schema": SWEEP_SCHEMA,
        "kind": tool,
        "created": created.isoformat(),
        "host": env_info["host"],
        "command": ["python", "-m", f"perf.{tool}",
                    *environment.public_argv(list(sys.argv[1:] if argv is None else argv),
                                             ("--out", "--from", "--write"))],
        "environment": env_info,
        "device": device,
        "sgblas_device": sgblas_device,
        "settings": {
            "backend": backend.name, "backend_reason": backend_reason, "timer": timing.name, "spin": spin_info,
            "cublas": cublas.describe() if cublas is not None else None, "tf32_override": tf32_note,
            "alpha": 1.0, "beta": 0.0, "seed": seed, "l2_bytes_assumed": l2_bytes,
            "inputs": "standard normal float32, fresh per buffer set",
            "ld_classes": {"tight": "ld = rows as stored", "odd": "the least odd ld above the rows",
                           "padded": "the least multiple of 32 above the rows",
                           "offset": f"tight, A, B and C {OFFSETS} float32 elements into their allocations"},
            "args": {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()
                     if key not in ("out", "list", "from_", "write")},
        },
        "cases": cases_out,
        "rows": rows,
        "summary": {
            "cases": len(cases_out),
            **{status: sum(r["status"] == status for r in cases_out)
               for status in ("ok", "failed", "error", "skipped")},
            "rows": len(rows),
            "elapsed_s": time.perf_counter() - started,
        },
    }
    bad = doc["summary"]["failed"] + doc["summary"]["error"]
    return doc, 1 if bad else 0


def save_doc(doc: dict[str, Any], out_dir: str | Path | None) -> Path:
    """Write ``doc`` as ``out_dir/<kind>_<UTC date-time>_<device>.json`` (never over a file)."""
    from datetime import datetime

    out = Path(out_dir) if out_dir is not None else results_io.RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    created = datetime.fromisoformat(doc["created"])
    device = results_io._slug(doc["device"].get("name") or "unknown")
    stem = f"{doc['kind']}_{created.strftime('%Y%m%d-%H%M%S')}_{device}"
    path = out / f"{stem}.json"
    counter = 2
    while path.exists():
        path = out / f"{stem}-{counter}.json"
        counter += 1
    text = json.dumps(results_io._finite(doc), indent=1, default=results_io._json_default, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def load_docs(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Sweep-style documents (``perf.sweep``, ``perf.calibrate``, ``perf.regret``): each must
    have ``rows`` and ``sgblas_device``; raises :class:`perf.results_io.ResultsError`."""
    docs = []
    for path in paths:
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise results_io.ResultsError(f"{path}: cannot be read as JSON ({exc})") from exc
        if not isinstance(doc, dict) or doc.get("schema") != SWEEP_SCHEMA:
            raise results_io.ResultsError(f"{path}: not a {SWEEP_SCHEMA} document (written by perf.sweep, "
                                          f"perf.calibrate or perf.regret)")
        for key in ("rows", "cases", "sgblas_device"):
            if key not in doc:
                raise results_io.ResultsError(f"{path}: missing key {key!r}")
        doc["_path"] = str(path)
        docs.append(doc)
    return docs


def merged_doc(docs: Sequence[dict[str, Any]], kind: str, argv: Sequence[str] | None) -> dict[str, Any]:
    """One document of ``kind`` from documents read with ``--from``: the first's device and
    settings, everyone's cases and rows, this process's environment and command."""
    first = docs[0]
    env_info = environment.environment_info()
    doc = {key: first.get(key) for key in ("schema", "device", "sgblas_device", "settings")}
    doc.update(
        kind=kind, created=results_io.utc_now().isoformat(), host=env_info["host"], environment=env_info,
        command=["python", "-m", f"perf.{kind}",
                 *environment.public_argv(list(sys.argv[1:] if argv is None else argv),
                                          ("--out", "--from", "--write"))],
        measured={"files": [Path(d.get("_path", "")).name for d in docs],
                  "commits": sorted({(d.get("environment", {}).get("git") or {}).get("commit") or ""
                                     for d in docs} - {""}),
                  "created": [d.get("created") for d in docs]},
        cases=[c for d in docs for c in d["cases"]], rows=[r for d in docs for r in d["rows"]])
    doc["summary"] = {"cases": len(doc["cases"]), "rows": len(doc["rows"]),
                      **{status: sum(c.get("status") == status for c in doc["cases"])
                         for status in ("ok", "failed", "error", "skipped")}}
    return doc


# --------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m perf.sweep",
        description="Time every legal candidate plan of each shape by name, and sgblas's own choice.")
    group = parser.add_argument_group("cases")
    group.add_argument("--shapes", type=parse_shapes, default=("bench",), metavar="LIST",
                       help="comma-separated MxNxK shapes and sets: square, rect, bench (both: "
                            "perf.bench's default shapes), random (default: bench)")
    group.add_argument("--random", type=int, default=20, metavar="N",
                       help="how many random shapes 'random' draws (m, n, k log-uniform over "
                            f"1..{MAX_DIM}, at most 2**37 FLOPs; default: 20)")
    group.add_argument("--seed", type=int, default=20261204,
                       help="seed of the random shapes and of the operands (default: 20261204)")
    group.add_argument("--pairs", type=bench.parse_pairs, default=bench.PAIRS, metavar="NN,NT,TN,TT",
                       help="transpose pairs, comma-separated, or 'all' (default: all)")
    group.add_argument("--ld-class", type=parse_ld_classes, default=("tight",), metavar="CLASSES",
                       help=f"leading-dimension classes, comma-separated ({', '.join(LD_CLASSES)}) "
                            f"or 'all' (default: tight)")
    group.add_argument("--list", action="store_true", help="print the cases and exit (no GPU needed)")
    add_timing_args(parser)
    args = parser.parse_args(argv)
    check_timing_args(parser, args)
    if args.random < 0:
        parser.error("--random must be 0 or more")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cases = selected_cases(args)
    if args.list:
        print(f"seed {args.seed}")
        list_cases(cases)
        return 0
    doc, status = run_cases(cases, args, tool="sweep", seed=args.seed, argv=argv)
    if doc is None:
        return status
    path = save_doc(doc, args.out)
    print(f"wrote {path} ({doc['summary']['rows']} rows) in {doc['summary']['elapsed_s']:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
