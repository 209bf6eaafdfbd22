"""Fit the cost model's rates (``sgblas.dispatch.model``) to measured times of every candidate.

Usage (from the repository root; both forms work)::

    python -m perf.calibrate                   # measure the calibration set on this GPU, fit, write
    python -m perf.calibrate --list            # print the calibration set and exit (no GPU needed)
    python -m perf.calibrate --from sweep_A.json --from sweep_B.json   # fit earlier rows (no GPU)
    python -m perf.calibrate --shard 1/3 --no-write                    # measure a third, fit nothing yet
    python -m perf.calibrate --from regret.json --holdout --slow-ratio 0  # judge fit settings (no GPU)
    python -m perf.calibrate --only NAME --no-write    # time new rows (and each case's choice) by name
    python -m perf.calibrate --from that.json --extend # add their rates to the entry, the rest held
    python -m perf.calibrate --from that.json --extend --refit lowk  # and fit the low-K rows anew

The calibration set: ``perf.bench``'s default shapes (square 1024 to 16384 and its five
rectangles), each in all four transpose pairs with the leading-dimension class turning over
the pairs, then ``--random`` (200) random shapes from ``--seed`` (20261204, printed): m, n, k
log-uniform over 1..20000 with at most 2**37 FLOPs, every pair and ld class (tight, odd,
padded, offset) in equal shares; then ``--skinny`` (128) shapes drawn alike from ``--seed`` + 1
but with m or n log-uniform over 1..16, each pair and small side in turn and each ld class in
turn (the skinny variants need a small side, which the shapes before give them few of; the
16-byte rows take the padded and tight lds, the 4-byte rows every class; ``--skinny 0`` leaves
them out); then ``--small`` (64) shapes from ``--seed`` + 2 with every side log-uniform over
1..600 (the 64x64 tiles and their short splits, which the shapes before give few rows of:
issue 43); then ``--tallthin`` (24) shapes drawn as ``perf.classes``'s tall-thin class draws
them, from ``--seed`` + 3. Each case is swept as ``python -m perf.sweep``
does it (every legal candidate timed by name, L2-cold, CUDA events, the median).

The fit: every row of a candidate that ran and passed its check is rebuilt as the
``GemmProblem`` it timed (the device's compute capability and properties from the sweep, the
pointers' low bits from the row) and the ``Candidate`` sgblas finds for its name, and is
predicted by ``sgblas.dispatch.model.predict`` with a ``Calibration`` built here. A row
depends on its variant's eight rates, on the reduction kernel's when it splits K in two or more
slices, on the pack kernel's when its variant is packed, and on the device's ``launch_s``.
Tail plans (``VARIANT/tail``) are left out: their rectangles are the dispatcher's choice, so
their times say little about one variant's rates. The loss is the sum over rows of the squared
log ratio of predicted to measured time, plus a weak prior (``--prior``) pulling each rate's
logarithm toward ``default_rates``, which decides the rates few rows constrain. It is minimised
by block-coordinate descent: ``launch_s`` alone, then one variant's nine rates at a time with
the rest fixed (most rows first; in the first pass each rate is first scanned over its bounds,
:func:`coordinate_scan`), by a Nelder-Mead search on the logarithms of the rates
within bounds (every rate positive; ``lone`` in (0, 1]; ``slow_ld`` and ``c_unaligned`` in
[0.5, 4]), for ``--passes`` (6) passes, each but the first followed by a pattern move of all
parameters along the pass's step (blocks that share rows, such as a split-K variant and the
reduction, otherwise zig-zag). With ``--slow-ratio X`` (2 unless given; 0: none), a row whose
candidate ran X times its case's fastest or slower counts only when it is predicted faster than
it ran: such a candidate decides no choice unless the model takes it for a fast one, and fitting
its slowness would pull the rates away from the candidates that do. ``launch_s`` and a
variant's ``start_s`` add alike to each of its launches; only candidates of several launches
tell them apart, so their split leans on the prior more than the predictions do. The tool prints
each variant's row count and median absolute log error before (default rates) and after. On
about 2000 rows made from perturbed default rates with 3% noise, the fit takes about 30 s and
lands at the noise; 4000 rows, about a minute.

The model's fill exponent (``--fill``, :data:`DEFAULT_FILL` unless given; 0: the hard minimum)
is the same for every variant and is not fitted; ``--extend`` keeps the entry's.

Writes the entry ``{"launch_s", "fill" (when not 0), "rates": {variant: [9 floats in RATE_FIELDS
order]}, "source": {date, commit, device, rows, seed, median_abs_error}}`` under the device's key (``sm_90/132/6016b`` on an H200)
into ``{"format": 1, "devices": {...}}`` at ``--write`` (default: the package's
``sgblas/dispatch/calibration.json``), keeping the file's other devices; and
``perf/results/calibrate_<UTC date-time>_<device>.json`` with the sweep's rows and the fit's
report. Exit status: 0 when the fit was written (or ``--no-write``), 1 when a case failed or
errored (the fit is still written from the rows that ran), 2 on a usage or setup error or when
no row could be fitted.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

if __package__ in (None, ""):  # run as `python perf/calibrate.py`: make `perf` and `sgblas` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from perf import bench, environment, results_io, sweep  # noqa: E402
from sgblas.dispatch import model  # noqa: E402 - imports no GPU and no Numba

__all__ = [
    "DEFAULT_SEED",
    "DEFAULT_RANDOM",
    "DEFAULT_SKINNY",
    "DEFAULT_SMALL",
    "DEFAULT_TALLTHIN",
    "DEFAULT_LAUNCH_S",
    "FitRow",
    "FitResult",
    "calibration_cases",
    "dependencies",
    "rebuild_rows",
    "nelder_mead",
    "fit",
    "median_abs_log_error",
    "calibration_entry",
    "extended_entry",
    "write_calibration",
    "parse_args",
    "main",
]

DEFAULT_SEED = 20261204
DEFAULT_RANDOM = 200
#: Extra shapes with m or n at most 16 (``perf.sweep.skinny_cases``): the log-uniform shapes
#: give the eight skinny variants few rows each (they need a small side and 16-byte lds), and a
#: fit to made-up rates missed some skinny shapes by up to 37% without these, 16% with them.
DEFAULT_SKINNY = 128
DEFAULT_SMALL = 64
#: Tall-thin shapes (``perf.classes``'s tallthin draw: m of 100000-2000000, n and k at most 64):
#: the shapes before stop at sides of 20000, so the tile kernels' rates were fitted without a
#: product of thousands of few-step tiles, and the H100 entry put the 128x64 tile at 92.9 us on
#: 717593 x 19 x 36 where it ran 162.1 (docs/history/shape-classes.md).
DEFAULT_TALLTHIN = 24
#: See the module's docstring; docs/design.md has the cross-validation that chose it.
DEFAULT_SLOW_RATIO = 2.0
#: The largest side of the ``--small`` shapes.
SMALL_MAX_DIM = 600
#: The launch gap the model assumes on a device without a calibration: where the fit of
#: ``launch_s`` starts.
DEFAULT_LAUNCH_S = model.DEFAULT_LAUNCH_S
#: Where the rebuilt problems' operands start (the rows keep each pointer mod 4096).
_BASES = (0x7F0000000000, 0x7F0000000000 + 2**32, 0x7F0000000000 + 2**33)

#: Per rate (RATE_FIELDS order): bounds as (low, high) factors of the default rate, or
#: absolute ("abs") bounds; the prior's width in natural-log units; the first simplex step.
_RATE_BOUNDS: tuple[tuple[str, float, float], ...] = (
    ("rel", 1e-3, 1e2),     # flops
    ("abs", 1e-3, 1.0),     # lone
    ("abs", 1e-9, 1e-3),    # cta_s
    ("rel", 1e-3, 1e2),     # bandwidth
    ("abs", 0.5, 4.0),      # slow_ld
    ("rel", 1e-3, 1e2),     # c_bandwidth
    ("abs", 0.5, 4.0),      # c_unaligned
    ("abs", 1e-9, 1e-3),    # start_s
    ("rel", 1e-3, 1e2),     # cta_bandwidth
)
_PRIOR_WIDTH = np.array([1.0, 1.0, 3.0, 1.0, 0.5, 1.0, 0.5, 3.0, 1.0])
_STEP = np.array([0.5, 0.4, 1.0, 0.5, 0.2, 0.5, 0.2, 1.0, 0.5])
#: A default of 0 s (a support kernel's ``cta_s``) is centred here instead.
_TIME_FLOOR = 1e-7
_LAUNCH_BOUNDS = (1e-8, 1e-3)
#: Rates per variant.
_N = len(_RATE_BOUNDS)
#: The model's fill exponent of a fresh fit (``--fill``): each of two H100 regret runs (seeds
#: 3131 and 5959) fitted alone and judged on the other chose better with it than with the hard
#: minimum (docs/design.md, "The cost model").
DEFAULT_FILL = 2.0


# --------------------------------------------------------------------------------------------
# The calibration set


def calibration_cases(seed: int = DEFAULT_SEED, count: int = DEFAULT_RANDOM, skinny: int = DEFAULT_SKINNY,
                      pairs: Sequence[str] = bench.PAIRS, ld_classes: Sequence[str] = sweep.LD_CLASSES,
                      max_dim: int | None = None, small: int = DEFAULT_SMALL,
                      tallthin: int = DEFAULT_TALLTHIN) -> list[sweep.SweepCase]:
    """``perf.bench``'s default shapes in every pair (the ld class turning over the pairs),
    then ``count`` random shapes from ``seed`` (:func:`perf.sweep.random_cases`), then
    ``skinny`` shapes with m or n at most 16 from ``seed + 1`` (:func:`perf.sweep.skinny_cases`,
    every ld class), then ``small`` shapes with every side at most :data:`SMALL_MAX_DIM` from
    ``seed + 2``, then ``tallthin`` shapes of ``perf.classes``'s tall-thin class from ``seed + 3``
    (each pair and ld class in turn); ``max_dim`` drops the bench shapes with a larger dimension."""
    shapes = [s for s in sweep.bench_shapes("all") if max_dim is None or max(s[:3]) <= max_dim]
    cases = sweep.rotated_cases(shapes, pairs, ld_classes)
    cases += sweep.random_cases(count, seed, pairs, ld_classes, start=len(cases))
    cases += sweep.skinny_cases(skinny, seed + 1, pairs, ld_classes, start=len(cases))
    cases += sweep.random_cases(small, seed + 2, pairs, ld_classes, start=len(cases),
                                max_dim=SMALL_MAX_DIM, shape_set="small")
    return cases + _tallthin_cases(tallthin, seed + 3, pairs, ld_classes, start=len(cases))


def _tallthin_cases(count: int, seed: int, pairs: Sequence[str], ld_classes: Sequence[str],
                    start: int) -> list[sweep.SweepCase]:
    """``count`` shapes of ``perf.classes``'s tall-thin draw, numbered from ``start``, each pair
    and then each ld class in turn."""
    from perf import classes

    tall = next(c for c in classes.CLASSES if c.name == "tallthin")
    turns = [(p, ld) for ld in ld_classes for p in pairs]
    return [sweep.make_case(c.m, c.n, c.k, *turns[i % len(turns)], "tallthin", start + i)
            for i, c in enumerate(classes.class_cases(tall, count, seed))]


# --------------------------------------------------------------------------------------------
# Rows


class FitRow(NamedTuple):
    """One timed candidate, rebuilt: what ``model.predict`` takes, and its measured time."""

    problem: Any          # sgblas.kernels.problem.GemmProblem
    candidate: Any        # sgblas.dispatch.candidates.Candidate
    props: Any            # sgblas.runtime.device.DeviceProperties
    log_seconds: float
    variants: tuple[str, ...]
    name: str
    #: log of this time over the fastest candidate's of its case (0 for the fastest)
    behind: float = 0.0
    #: (the document's index among those given, its case number)
    case: tuple[int, int] = (0, 0)


def dependencies(candidate: Any) -> tuple[str, ...]:
    """The variants whose rates ``model.predict`` reads for ``candidate`` (``launch_s`` aside):
    its own; the reduction's when it splits K in two or more partials; the pack kernel's when
    packed."""
    from sgblas.kernels import pack, reduce

    out = [candidate.spec.name]
    if candidate.split is not None and candidate.split.splits > 1 and not candidate.split.serial:
        out.append(reduce.NAME)
    if candidate.spec.role == "packed":
        out.append(pack.NAME)
    return tuple(out)


def _device_of(doc: dict[str, Any]) -> tuple[tuple[int, int], Any, int, str]:
    from sgblas.runtime.device import DeviceProperties

    dev = doc["sgblas_device"]
    fields = {k: v for k, v in dev["properties"].items() if k in DeviceProperties._fields}
    return tuple(dev["cc"]), DeviceProperties(**fields), int(dev["workspace_bytes"]), dev.get("math_mode", "FP32")


def rebuild_rows(docs: Sequence[dict[str, Any]]) -> tuple[list[FitRow], dict[str, Any]]:
    """The fit's rows from sweep documents of one kind of device: ``(rows, info)``, ``info``
    with ``key``, ``cc``, ``props`` and ``left_out`` (a count per reason). Raises ValueError when
    the documents are of different devices."""
    from sgblas.dispatch import model, plan
    from sgblas.enums import MathMode
    from sgblas.kernels.problem import GemmProblem

    rows: list[FitRow] = []
    left_out: dict[str, int] = {}
    key = cc0 = props0 = None
    for index, doc in enumerate(docs):
        cc, props, workspace, mode = _device_of(doc)
        this = model.device_key(cc, props)
        if key is None:
            key, cc0, props0 = this, cc, props
        elif this != key:
            raise ValueError(f"{doc.get('_path', 'a document')} measured {this}, the first measured {key}: "
                             f"one calibration is of one kind of device")
        math_mode = MathMode[mode]
        fastest: dict[Any, float] = {}
        for r in doc["rows"]:
            if r.get("call") == "candidate" and r.get("status") == "ok" and r.get("seconds"):
                fastest[r["case"]] = min(fastest.get(r["case"], math.inf), r["seconds"])
        for r in doc["rows"]:
            reason = None
            if r.get("call") != "candidate":
                reason = "the plain call (its candidate's row is fitted)"
            elif r.get("status") != "ok" or not r.get("seconds") or r["seconds"] <= 0:
                reason = f"not timed ({r.get('status')})"
            elif r["candidate"].endswith("/tail"):
                reason = "a tail plan (its rectangles are the dispatcher's choice)"
            if reason is None:
                ptrs = [base + low for base, low in zip(_BASES, r.get("ptr_low") or (0, 0, 0))]
                p = GemmProblem(cc, math_mode, r["transa"], r["transb"], r["m"], r["n"], r["k"], ptrs[0],
                                r["lda"], ptrs[1], r["ldb"], ptrs[2], r["ldc"])
                found = plan.find_candidate(p, props, workspace, r["candidate"])
                if isinstance(found, str):
                    reason = "not a candidate of this sgblas any more"
                else:
                    rows.append(FitRow(p, found, props, math.log(r["seconds"]), dependencies(found),
                                       r["candidate"], math.log(r["seconds"] / fastest[r["case"]]),
                                       (index, r["case"])))
            if reason is not None:
                left_out[reason] = left_out.get(reason, 0) + 1
    return rows, {"key": key, "cc": cc0, "props": props0, "left_out": left_out}


# --------------------------------------------------------------------------------------------
# Nelder-Mead


def nelder_mead(f: Callable[[np.ndarray], float], x0: Sequence[float], step: Sequence[float] | float,
                lo: Sequence[float] | None = None, hi: Sequence[float] | None = None, max_evals: int = 400,
                xatol: float = 1e-3, fatol: float = 1e-9) -> tuple[np.ndarray, float, int]:
    """Minimise ``f`` from ``x0``: ``(x, f(x), evaluations)``. The adaptive Nelder-Mead simplex
    (Gao and Han's coefficients for two or more dimensions), every point kept within
    ``[lo, hi]`` by projection; stops when the simplex is within ``xatol`` of its best point
    and its values within ``fatol``, or after ``max_evals`` evaluations."""
    x0 = np.asarray(x0, dtype=float)
    dim = x0.size
    lo_a = np.full(dim, -np.inf) if lo is None else np.asarray(lo, dtype=float)
    hi_a = np.full(dim, np.inf) if hi is None else np.asarray(hi, dtype=float)
    step_a = np.broadcast_to(np.asarray(step, dtype=float), (dim,))
    if dim >= 2:
        alpha, gamma, rho, sigma = 1.0, 1.0 + 2.0 / dim, 0.75 - 0.5 / dim, 1.0 - 1.0 / dim
    else:
        alpha, gamma, rho, sigma = 1.0, 2.0, 0.5, 0.5

    def clip(x: np.ndarray) -> np.ndarray:
        return np.minimum(np.maximum(x, lo_a), hi_a)

    x0 = clip(x0)
    simplex = [x0]
    for i in range(dim):
        x = x0.copy()
        x[i] += step_a[i] if x0[i] + step_a[i] <= hi_a[i] else -step_a[i]
        simplex.append(clip(x))
    pts = np.array(simplex)
    vals = np.array([f(x) for x in pts])
    evals = len(vals)
    while evals < max_evals:
        order = np.argsort(vals, kind="stable")
        pts, vals = pts[order], vals[order]
        if np.max(np.abs(pts[1:] - pts[0])) <= xatol and vals[-1] - vals[0] <= fatol:
            break
        centroid = pts[:-1].mean(axis=0)
        xr = clip(centroid + alpha * (centroid - pts[-1]))
        fr = f(xr)
        evals += 1
        if fr < vals[0]:
            xe = clip(centroid + gamma * (xr - centroid))
            fe = f(xe)
            evals += 1
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
            continue
        if fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
            continue
        if fr < vals[-1]:  # outside contraction
            xc = clip(centroid + rho * (xr - centroid))
            fc = f(xc)
            evals += 1
            if fc <= fr:
                pts[-1], vals[-1] = xc, fc
                continue
        else:  # inside contraction
            xc = clip(centroid - rho * (centroid - pts[-1]))
            fc = f(xc)
            evals += 1
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
                continue
        pts[1:] = pts[0] + sigma * (pts[1:] - pts[0])  # shrink toward the best
        for i in range(1, dim + 1):
            vals[i] = f(pts[i])
        evals += dim
    best = int(np.argmin(vals))
    return pts[best], float(vals[best]), evals


def coordinate_scan(f: Callable[[np.ndarray], float], x0: Sequence[float], lo: Sequence[float],
                    hi: Sequence[float], points: int = 13) -> tuple[np.ndarray, float, int]:
    """Each coordinate in turn over ``points`` evenly spaced values of ``[lo, hi]`` (and its
    current one), the others held: ``(x, f(x), evaluations)``. The model's terms meet at
    maxima, so a rate whose term is below another's at the start has no slope there, and a
    simplex never leaves such a plateau (a skinny CTA's ``cta_bandwidth`` stayed at its default
    whatever the rows said); a scan finds the basin the simplex then refines."""
    x = np.asarray(x0, dtype=float).copy()
    best = f(x)
    evals = 1
    for i in range(x.size):
        if not (np.isfinite(lo[i]) and np.isfinite(hi[i])):
            continue
        keep = x[i]
        for value in np.linspace(lo[i], hi[i], points):
            x[i] = value
            v = f(x)
            evals += 1
            if v < best:
                best, keep = v, value
        x[i] = keep
    return x, best, evals


# --------------------------------------------------------------------------------------------
# The fit


class FitResult(NamedTuple):
    launch_s: float
    rates: dict[str, Any]          # variant name -> model.Rates (every registry variant)
    fitted: tuple[str, ...]        # the variants some row depends on
    report: list[dict[str, Any]]   # per variant: rows, median |log error| before and after, rates
    before: float                  # median |log error| over all rows, default rates
    after: float
    passes: list[dict[str, Any]]   # per pass: median |log error|, seconds, evaluations
    fill: float = 0.0              # the model's fill exponent the rates were fitted with


def median_abs_log_error(rows: Sequence[FitRow], cal: Any) -> float:
    """Median over ``rows`` of ``|log(predicted / measured)|`` under the Calibration ``cal``."""
    if not rows:
        return float("nan")
    return float(np.median(np.abs(_errors(rows, cal))))


def _errors(rows: Sequence[FitRow], cal: Any) -> np.ndarray:
    from sgblas.dispatch import model

    return np.array([math.log(model.predict(r.candidate, r.problem, r.props, cal)) - r.log_seconds for r in rows])


def _bounds(default: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, high, prior centre) of a variant's log-rates."""
    lo, hi, centre = [], [], []
    for value, (kind, a, b) in zip(default, _RATE_BOUNDS):
        if kind == "rel":
            base = value if value > 0 else 1.0
            lo.append(math.log(base * a))
            hi.append(math.log(base * b))
        else:
            lo.append(math.log(a))
            hi.append(math.log(b))
        centre.append(math.log(min(max(value if value > 0 else _TIME_FLOOR, math.exp(lo[-1])), math.exp(hi[-1]))))
    return np.array(lo), np.array(hi), np.array(centre)


def _rates_of(entry: dict[str, Any] | None, cc: tuple[int, int], props: Any,
              fill: float | None = None) -> tuple[dict, dict]:
    """Every registry variant's default rates, and ``entry``'s rates for those it has, all with
    the model's ``fill`` exponent (by default the entry's)."""
    from sgblas.dispatch import model
    from sgblas.kernels import spec as registry

    if fill is None:
        fill = model.entry_fill(entry)
    defaults = {s.name: model.default_rates(s, cc, props)._replace(fill=fill) for s in registry.REGISTRY}
    return defaults, {n: model.Rates(*v, fill=fill) for n, v in (entry or {}).get("rates", {}).items() if n in defaults}


def fit(rows: Sequence[FitRow], key: str, cc: tuple[int, int], props: Any, *, passes: int = 6,
        max_evals: int = 400, prior: float = 0.01, max_block_rows: int = 2000, seed: int = 0,
        slow_ratio: float | None = None, log: Callable[[str], None] | None = print,
        hold: dict[str, Any] | None = None, fill: float = DEFAULT_FILL) -> FitResult:
    """Block-coordinate descent over ``launch_s`` and each variant's rates (module docstring).

    ``hold``: a calibration entry (``{"launch_s", "rates"}``) whose ``launch_s`` and rates stay
    as they are; only the variants it has no rates for are fitted (``--extend``), in the
    entry's form of the model (its ``fill``). ``fill``: the model's fill exponent otherwise
    (:mod:`sgblas.dispatch.model`; 0: the hard minimum).

    Each pass fits ``launch_s`` (a one-dimensional search over every row), then each variant's
    eight rates over the rows that depend on it, most rows first. From the second pass on, a
    pattern move (Hooke and Jeeves) follows: all parameters go on along the pass's whole step,
    1, 2, 4 or 8 times it, as far as the total loss keeps falling. Blocks that share rows (a
    split-K variant and the reduction; every variant and ``launch_s``, which adds to each
    launch as ``start_s`` does) otherwise zig-zag slowly along the valleys they form together.
    """
    from sgblas.dispatch import model

    say = log or (lambda _text: None)
    if hold is not None:
        fill = model.entry_fill(hold)
    defaults, held = _rates_of(hold, cc, props, fill)
    rates = {**defaults, **held}
    by_variant: dict[str, list[FitRow]] = {}
    for r in rows:
        for v in r.variants:
            if v not in defaults:
                raise ValueError(f"{r.name}: variant {v} is not in this sgblas's registry")
            by_variant.setdefault(v, []).append(r)
    order = sorted((v for v in by_variant if v not in held), key=lambda v: (-len(by_variant[v]), v))
    if hold is not None:
        # Only the rows that a fitted variant's time enters can move the loss.
        rows = [r for r in rows if any(v not in held for v in r.variants)]
    box = {v: _bounds(defaults[v]) for v in order}
    lo_all = np.concatenate([[math.log(_LAUNCH_BOUNDS[0])]] + [box[v][0] for v in order])
    hi_all = np.concatenate([[math.log(_LAUNCH_BOUNDS[1])]] + [box[v][1] for v in order])
    launch_start = float(hold["launch_s"]) if hold is not None else DEFAULT_LAUNCH_S
    now = {"cal": model.Calibration(key, launch_start, rates, True, {})}
    before_rows = {v: median_abs_log_error(by_variant[v], now["cal"]) for v in order}
    before = median_abs_log_error(rows, now["cal"])
    rng = np.random.default_rng(seed)

    def sample(block: list[FitRow]) -> list[FitRow]:
        if len(block) <= max_block_rows:
            return block
        keep = rng.choice(len(block), max_block_rows, replace=False)
        return [block[i] for i in sorted(keep)]

    # A candidate measured far behind its case's fastest decides no choice as long as it is not
    # predicted faster than it ran: its rows count only when under-predicted.
    slow_behind = math.log(slow_ratio) if slow_ratio else math.inf

    def sse(block: Sequence[FitRow], c: Any) -> float:
        total = 0.0
        for r in block:
            e = math.log(model.predict(r.candidate, r.problem, r.props, c)) - r.log_seconds
            if e > 0.0 and r.behind >= slow_behind:
                continue
            total += e * e
        return total

    def penalty(v: str, x: np.ndarray) -> float:
        return prior * float(np.sum(((x - box[v][2]) / _PRIOR_WIDTH) ** 2))

    def state() -> np.ndarray:
        return np.concatenate([[math.log(now["cal"].launch_s)]]
                              + [np.log(np.maximum(np.array(rates[v][:_N], dtype=float), 1e-300)) for v in order])

    def set_state(x: np.ndarray) -> None:
        now["cal"] = now["cal"]._replace(launch_s=math.exp(float(x[0])))
        for i, v in enumerate(order):
            rates[v] = model.Rates(*np.exp(x[1 + _N * i:1 + _N * (i + 1)]).tolist(), fill=fill)

    def total(x: np.ndarray) -> float:
        set_state(x)
        return sse(rows, now["cal"]) + sum(penalty(v, x[1 + _N * i:1 + _N * (i + 1)]) for i, v in enumerate(order))

    history: list[dict[str, Any]] = []
    x_last = None
    say(f"fit: {len(rows)} rows, {len(order)} variants and launch_s; median |log error| {before:.4f} with "
        f"the default rates")
    for number in range(1, passes + 1):
        t0 = time.perf_counter()
        evals = 0
        block = sample(list(rows))

        def loss_launch(x: np.ndarray) -> float:
            return sse(block, now["cal"]._replace(launch_s=math.exp(float(x[0]))))

        if hold is None:
            x, _, n = nelder_mead(loss_launch, [math.log(now["cal"].launch_s)], 0.5, lo_all[:1], hi_all[:1],
                                  max_evals=max(30, max_evals // 8))
            evals += n
            now["cal"] = now["cal"]._replace(launch_s=math.exp(float(x[0])))
        for v in order:
            block_v = sample(by_variant[v])

            def loss(x: np.ndarray, v: str = v, block_v: list[FitRow] = block_v) -> float:
                rates[v] = model.Rates(*np.exp(x).tolist(), fill=fill)
                return sse(block_v, now["cal"]) + penalty(v, x)

            start = np.log(np.maximum(np.array(rates[v][:_N], dtype=float), 1e-300))  # a default of 0: the bound
            if number == 1:
                start, _, n = coordinate_scan(loss, start, box[v][0], box[v][1])
                evals += n
            x, _, n = nelder_mead(loss, start, _STEP, box[v][0], box[v][1], max_evals=max_evals)
            evals += n
            rates[v] = model.Rates(*np.exp(x).tolist(), fill=fill)
        x_now = state()
        moved = 0.0
        if x_last is not None:
            best = total(x_now)
            for factor in (1.0, 2.0, 4.0, 8.0):
                value = total(np.minimum(np.maximum(x_now + factor * (x_now - x_last), lo_all), hi_all))
                evals += 1
                if not value < best:
                    break
                best, moved = value, factor
            set_state(np.minimum(np.maximum(x_now + moved * (x_now - x_last), lo_all), hi_all))
        x_last = state()
        err = median_abs_log_error(rows, now["cal"])
        history.append({"pass": number, "median_abs_error": err, "seconds": time.perf_counter() - t0,
                        "evaluations": evals, "launch_s": now["cal"].launch_s, "pattern_move": moved})
        say(f"fit: pass {number}/{passes}: median |log error| {err:.4f}, launch_s {now['cal'].launch_s * 1e6:.2f} us"
            f"{f', pattern move x{moved:g}' if moved else ''} ({evals} evaluations, {time.perf_counter() - t0:.1f} s)")
    cal = now["cal"]
    report = []
    for v in order:
        report.append({"variant": v, "rows": len(by_variant[v]), "before": before_rows[v],
                       "after": median_abs_log_error(by_variant[v], cal), "rates": list(rates[v][:_N]),
                       "default": list(defaults[v][:_N])})
    return FitResult(cal.launch_s, rates, tuple(order), report, before, median_abs_log_error(rows, cal), history,
                     fill)


# --------------------------------------------------------------------------------------------
# The calibration file


def calibration_entry(result: FitResult, *, rows: int, device: str | None, commit: str | None,
                      seed: Any, date: str | None = None) -> dict[str, Any]:
    """The file's entry for one device: ``launch_s``, the fitted variants' rates (RATE_FIELDS
    order) and where they come from."""
    def short(x: float) -> float:  # seven significant digits: a readable file, the same choices
        return float(f"{x:.7g}")

    return {
        "launch_s": short(result.launch_s),
        **({"fill": result.fill} if result.fill else {}),
        "rates": {v: [short(x) for x in result.rates[v][:_N]] for v in sorted(result.fitted)},
        "source": {"date": date or results_io.utc_now().isoformat(), "commit": commit, "device": device,
                   "rows": rows, "seed": seed, "median_abs_error": float(result.after)},
    }


def extended_entry(held: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
    """``held`` (an entry kept as it was) with the rates of ``added`` (a fit of the variants it
    lacked) put in, and the added fit's source listed under ``source["extended"]``."""
    clash = sorted(set(held["rates"]) & set(added["rates"]))
    if clash:
        raise ValueError(f"the extension refits variants the entry already has: {', '.join(clash)}")
    source = dict(held.get("source", {}))
    source["extended"] = list(source.get("extended", [])) + [dict(added["source"], variants=sorted(added["rates"]))]
    return {"launch_s": held["launch_s"], **({"fill": held["fill"]} if "fill" in held else {}),
            "rates": dict(sorted({**held["rates"], **added["rates"]}.items())), "source": source}


def write_calibration(path: str | Path, key: str, entry: dict[str, Any]) -> None:
    """Put ``entry`` under ``key`` in the calibration file at ``path`` (``{"format": 1,
    "devices": {...}}``), keeping its other devices; creates the file when there is none."""
    path = Path(path)
    data: dict[str, Any] = {"format": 1, "devices": {}}
    if path.exists():
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != 1:
            raise ValueError(f"{path.name} has format {data.get('format')!r}; this tool writes format 1")
        data.setdefault("devices", {})
    data["devices"][key] = entry
    data["devices"] = dict(sorted(data["devices"].items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    # One line per variant's rates: the file is read by people too.
    text = re.sub(r"\[\s+([^\[\]{}]*?)\s+\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]",
                  json.dumps(data, indent=1))
    path.write_text(text + "\n", encoding="utf-8")


def _public_path(path: Path) -> str:
    """``path`` relative to the checkout when inside it, else its name (no machine folders)."""
    try:
        return str(Path(path).resolve().relative_to(environment.REPO_ROOT))
    except ValueError:
        return Path(path).name


# --------------------------------------------------------------------------------------------
# Command line


def _timed_cases(docs: Sequence[dict[str, Any]], rows: Sequence[FitRow]) -> tuple[dict, dict, list]:
    """Every candidate's measured time by case (tail plans too: a choice may be one), each
    case's problem (the rows'), and each document's workspace."""
    times: dict[tuple[int, int], dict[str, float]] = {}
    for index, doc in enumerate(docs):
        for r in doc["rows"]:
            if r.get("call") == "candidate" and r.get("status") == "ok" and r.get("seconds"):
                times.setdefault((index, r["case"]), {})[r["candidate"]] = r["seconds"]
    return times, {r.case: r.problem for r in rows}, [_device_of(doc)[2] for doc in docs]


def _regrets(cases: Sequence[tuple[int, int]], cal: Any, info: dict[str, Any], times: dict, problems: dict,
             workspace: list) -> tuple[list[tuple[float, str, str, str]], int]:
    from sgblas.dispatch import plan

    regrets: list[tuple[float, str, str, str]] = []
    not_timed = 0
    for case in cases:
        p = problems[case]
        chosen = plan.choose(p, info["props"], workspace[case[0]], quick=True, cal=cal).candidate
        t = times[case].get(chosen)
        if t is None:
            not_timed += 1
            continue
        best = min(times[case], key=times[case].get)
        shape = f"{p.m}x{p.n}x{p.k} {p.transa}{p.transb} ld {p.lda},{p.ldb},{p.ldc}"
        regrets.append((t / times[case][best], shape, chosen, best))
    return regrets, not_timed


def _summary(regrets: list[tuple[float, str, str, str]], not_timed: int) -> dict[str, Any]:
    if not regrets:
        raise ValueError("no shape's choice has a measured time")
    values = np.array([r[0] for r in regrets])
    return {"shapes": len(values), "not_timed": not_timed, "geomean": float(np.exp(np.log(values).mean())),
            "p95": float(np.percentile(values, 95)), "max": float(values.max()),
            "fastest": float(np.mean(values <= 1.0)), "worst": sorted(regrets, reverse=True)[:8]}


def holdout(docs: Sequence[dict[str, Any]], rows: Sequence[FitRow], info: dict[str, Any],
            **fit_args: Any) -> dict[str, Any]:
    """Two-fold cross-validation of the fit by the choices it makes: the cases (each with every
    legal candidate timed, as ``perf.regret`` and ``perf.calibrate`` time them) are cut in two
    halves by turns; each half's rows are fitted (``fit_args`` go to :func:`fit`; with ``hold``,
    only the variants the entry lacks, as ``--extend`` fits them), and the other half's shapes
    are planned with those rates. A shape's regret is its choice's measured time over its
    fastest candidate's. Returns ``{"shapes", "not_timed", "geomean", "p95", "max", "fastest",
    "worst"}``; ``not_timed`` counts choices the documents have no time for."""
    from sgblas.dispatch import model

    times, problems, workspace = _timed_cases(docs, rows)
    half = {case: i % 2 for i, case in enumerate(sorted(problems))}
    regrets: list[tuple[float, str, str, str]] = []
    not_timed = 0
    for h in (0, 1):
        result = fit([r for r in rows if half.get(r.case) != h], info["key"], info["cc"], info["props"], **fit_args)
        cal = model.Calibration(info["key"], result.launch_s, dict(result.rates), True, {})
        found, missed = _regrets([case for case, h_case in half.items() if h_case == h], cal, info, times, problems,
                                 workspace)
        regrets += found
        not_timed += missed
    return _summary(regrets, not_timed)


def lookup_regret(docs: Sequence[dict[str, Any]], rows: Sequence[FitRow], info: dict[str, Any],
                  cal: Any) -> dict[str, Any]:
    """:func:`holdout`'s figures for the choices that rates ``cal`` make on every case."""
    times, problems, workspace = _timed_cases(docs, rows)
    return _summary(*_regrets(sorted(problems), cal, info, times, problems, workspace))


def entry_calibration(path: str | Path, info: dict[str, Any]) -> Any:
    """The calibration file's entry for ``info``'s device, the default rates standing in for the
    variants it lacks (as :func:`fit` starts them)."""
    from sgblas.dispatch import model

    entry = json.loads(Path(path).read_text(encoding="utf-8"))["devices"][info["key"]]
    defaults, rates = _rates_of(entry, info["cc"], info["props"])
    return model.Calibration(info["key"], float(entry["launch_s"]), {**defaults, **rates}, True, {})


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from sgblas.dispatch import model

    parser = argparse.ArgumentParser(
        prog="python -m perf.calibrate",
        description="Measure every candidate on a calibration set of shapes (or read earlier sweeps) "
                    "and fit the cost model's rates for this kind of device.")
    group = parser.add_argument_group("cases")
    group.add_argument("--random", type=int, default=DEFAULT_RANDOM, metavar="N",
                       help=f"random shapes after perf.bench's shapes (default: {DEFAULT_RANDOM})")
    group.add_argument("--skinny", type=int, default=DEFAULT_SKINNY, metavar="N",
                       help=f"then shapes with m or n at most 16, every pair, small side and ld class in "
                            f"turn, from seed + 1 (default: {DEFAULT_SKINNY}; 0: none)")
    group.add_argument("--small", type=int, default=DEFAULT_SMALL, metavar="N",
                       help=f"then shapes with every side at most {SMALL_MAX_DIM}, from seed + 2 "
                            f"(default: {DEFAULT_SMALL}; 0: none)")
    group.add_argument("--tallthin", type=int, default=DEFAULT_TALLTHIN, metavar="N",
                       help=f"then tall-thin shapes (perf.classes's draw), from seed + 3 "
                            f"(default: {DEFAULT_TALLTHIN}; 0: none)")
    group.add_argument("--seed", type=int, default=DEFAULT_SEED,
                       help=f"seed of the random shapes and of the operands (default: {DEFAULT_SEED})")
    group.add_argument("--pairs", type=bench.parse_pairs, default=bench.PAIRS, metavar="NN,NT,TN,TT",
                       help="transpose pairs (default: all)")
    group.add_argument("--max-dim", type=int, default=None, metavar="N",
                       help="drop perf.bench's shapes with a dimension above N")
    group.add_argument("--list", action="store_true", help="print the calibration set and exit (no GPU needed)")
    group = parser.add_argument_group("fit")
    group.add_argument("--from", dest="from_", action="append", type=Path, default=None, metavar="FILE",
                       help="fit the rows of an earlier perf.sweep, perf.calibrate or perf.regret result "
                            "instead of measuring (repeatable; all of one kind of device); the fit's document "
                            "goes beside the first FILE unless --out says where")
    group.add_argument("--write", type=Path, default=model.CALIBRATION_FILE, metavar="PATH",
                       help="the calibration file to put this device's entry in (default: the package's "
                            "sgblas/dispatch/calibration.json)")
    group.add_argument("--no-write", action="store_true", help="fit and report, but write no calibration file")
    group.add_argument("--extend", action="store_true",
                       help="keep the device's entry in the --write file as it is (launch_s and every variant's "
                            "rates) and fit only the variants it has no rates for (rows added to the registry since "
                            "it was fitted), adding them to it")
    group.add_argument("--refit", type=lambda text: tuple(w for w in text.split(",") if w), default=(),
                       metavar="TEXT[,TEXT]",
                       help="with --extend: also fit the entry's variants whose name holds one of these texts "
                            "anew from these rows (their old rates dropped), the rest held as they are")
    group.add_argument("--holdout", action="store_true",
                       help="with --from: judge these fit settings by two-fold cross-validation of the choices "
                            "they make (fit one half of the cases, plan the other with it; regret = the choice's "
                            "measured time over the fastest), print it and write nothing")
    group.add_argument("--fill", type=float, default=None, metavar="Q",
                       help="the model's soft-minimum exponent for a partial round of CTAs (0: the hard minimum; "
                            f"default: {DEFAULT_FILL:g}; with --extend, the entry's own)")
    group.add_argument("--passes", type=int, default=6, metavar="N",
                       help="passes of block-coordinate descent (default: 6)")
    group.add_argument("--max-evals", type=int, default=400, metavar="N",
                       help="Nelder-Mead evaluations per variant and pass (default: 400)")
    group.add_argument("--prior", type=float, default=0.01, metavar="W",
                       help="weight of the prior toward the default rates, per rate, on squared log "
                            "ratios (default: 0.01)")
    group.add_argument("--max-block-rows", type=int, default=2000, metavar="N",
                       help="rows a variant's search evaluates at most (a seeded sample; the report "
                            "uses every row; default: 2000)")
    group.add_argument("--slow-ratio", type=float, default=DEFAULT_SLOW_RATIO, metavar="X",
                       help="a row whose candidate ran at least X times its case's fastest counts only when "
                            f"predicted faster than it ran (default: {DEFAULT_SLOW_RATIO:g}; 0: every row counts "
                            "both ways)")
    sweep.add_timing_args(parser)
    parser.set_defaults(out=None)
    args = parser.parse_args(argv)
    sweep.check_timing_args(parser, args)
    if args.out is None:
        # A refit's rows are the files it read: its document goes beside the first of them, not
        # among the results the docs cite.
        args.out = args.from_[0].parent if args.from_ else results_io.RESULTS_DIR
    if args.holdout and not args.from_:
        parser.error("--holdout judges the fit of earlier rows: give them with --from")
    if args.refit and not args.extend:
        parser.error("--refit replaces some of an entry's variants and holds the rest: give it with --extend")
    if args.random < 0 or args.skinny < 0 or args.small < 0 or args.tallthin < 0 or args.passes < 1 or args.max_evals < 10 or args.prior < 0 or args.max_block_rows < 1 \
            or args.slow_ratio < 0 or 0 < args.slow_ratio <= 1 or (args.fill is not None and args.fill < 0):
        parser.error("--random, --skinny, --small, --tallthin, --passes, --max-evals, --prior, --max-block-rows, --slow-ratio or --fill is out of range")
    return args


def _report_table(result: FitResult) -> str:
    rows = [[r["variant"], r["rows"], f"{r['before']:.3f}", f"{r['after']:.3f}"] for r in result.report]
    rows.append(["(all rows)", "", f"{result.before:.3f}", f"{result.after:.3f}"])
    return results_io.markdown_table(["variant", "rows", "median abs log error before", "after"], rows, "lrrr")


def main(argv: Sequence[str] | None = None) -> int:
    from sgblas.dispatch import model

    args = parse_args(argv)
    cases = sweep.shard(calibration_cases(args.seed, args.random, args.skinny, args.pairs, max_dim=args.max_dim,
                                             small=args.small, tallthin=args.tallthin),
                        args.shard)
    if args.list:
        print(f"seed {args.seed}")
        sweep.list_cases(cases)
        return 0
    status = 0
    package_file = Path(args.write).resolve() == model.CALIBRATION_FILE.resolve()
    if not args.from_ and environment.simulator_enabled() and package_file and not args.no_write:
        print("perf.calibrate: under the CUDA simulator the fit is not written into the package's calibration "
              "file (pass --write PATH or --no-write)", file=sys.stderr)
        return 2
    if args.from_:
        try:
            docs = sweep.load_docs(args.from_)
        except results_io.ResultsError as exc:
            print(f"perf.calibrate: {exc}", file=sys.stderr)
            return 2
        seeds = sorted({d.get("settings", {}).get("seed") for d in docs} - {None})
        seed: Any = seeds[0] if len(seeds) == 1 else seeds
        print(f"perf.calibrate: fitting the rows of {len(docs)} file(s)")
    else:
        print(f"perf.calibrate: seed {args.seed}, {len(cases)} cases", flush=True)
        measured, status = sweep.run_cases(cases, args, tool="calibrate", seed=args.seed, argv=argv)
        if measured is None:
            return status
        docs, seed = [measured], args.seed
    doc = sweep.merged_doc(docs, "calibrate", argv) if args.from_ else docs[0]
    doc["fit"] = None

    def finish(code: int) -> int:
        """Keep the rows (and the fit, when there is one) whatever happened to the fit."""
        path = sweep.save_doc(doc, args.out)
        print(f"wrote {path}")
        return code

    # The simulator's rows (or made-up ones) must never reach the package's file: sgblas would
    # then take its notional device for a calibrated one, and the tests' choices would change.
    made_up = [d for d in docs if d.get("synthetic") or (d.get("device") or {}).get("simulator")]
    if made_up and not args.no_write and package_file:
        print("perf.calibrate: these rows come from the CUDA simulator or are made up; they are not written into "
              "the package's calibration file (pass --write PATH or --no-write)", file=sys.stderr)
        return finish(2) if not args.from_ else 2
    try:
        rows, info = rebuild_rows(docs)
    except ValueError as exc:
        print(f"perf.calibrate: {exc}", file=sys.stderr)
        return 2
    for reason, count in sorted(info["left_out"].items()):
        print(f"perf.calibrate: {count} rows left out: {reason}")
    if not rows:
        print("perf.calibrate: no row to fit", file=sys.stderr)
        return finish(2) if not args.from_ else 2
    hold = None
    if args.extend:
        try:
            hold = json.loads(Path(args.write).read_text(encoding="utf-8"))["devices"][info["key"]]
        except (OSError, ValueError, KeyError):
            print(f"perf.calibrate: --extend needs an entry for {info['key']} in {_public_path(args.write)}, and it has "
                  f"none", file=sys.stderr)
            return finish(2) if not args.from_ else 2
        if args.refit:
            dropped = sorted(n for n in hold["rates"] if any(w in n for w in args.refit))
            if not dropped:
                print(f"perf.calibrate: --refit {','.join(args.refit)}: no variant of the {info['key']} entry holds "
                      f"those texts", file=sys.stderr)
                return finish(2) if not args.from_ else 2
            hold = dict(hold, rates={n: v for n, v in hold["rates"].items() if n not in dropped})
    # fit() takes an extension's form from the entry it holds; a --fill that differs is refused.
    fill = DEFAULT_FILL if hold is None else model.entry_fill(hold)
    if args.fill is not None:
        if hold is not None and args.fill != fill:
            print(f"perf.calibrate: --fill {args.fill:g}: the {info['key']} entry's rates are fitted with fill "
                  f"{fill:g}, and --extend keeps its form", file=sys.stderr)
            return finish(2) if not args.from_ else 2
        fill = args.fill
    if args.holdout:
        try:
            cv = holdout(docs, rows, info, passes=args.passes, max_evals=args.max_evals, prior=args.prior,
                         max_block_rows=args.max_block_rows, seed=args.seed, slow_ratio=args.slow_ratio or None,
                         log=None, hold=hold, fill=fill)
            # An extension is judged beside the entry as it is, on the same shapes (the entry was
            # not fitted to them when they are a fresh run's).
            kept = None if hold is None else lookup_regret(docs, rows, info, entry_calibration(args.write, info))
        except ValueError as exc:
            print(f"perf.calibrate: {exc}", file=sys.stderr)
            return 2
        for what, cv_ in (("held out", cv), ("the entry as it is", kept)):
            if cv_ is None:
                continue
            print(f"{what}: {cv_['shapes']} shapes ({cv_['not_timed']} choices not timed), regret geomean "
                  f"{cv_['geomean']:.3f}, p95 {cv_['p95']:.3f}, max {cv_['max']:.3f}; the choice was the fastest "
                  f"in {cv_['fastest']:.1%}")
            for regret, shape, chosen, best in cv_["worst"]:
                print(f"  {regret:.3f}  {shape}: {chosen}, fastest {best}")
        return 0
    fitted_rows = len(rows) if hold is None else sum(any(v not in hold["rates"] for v in r.variants) for r in rows)
    if not fitted_rows:
        print(f"perf.calibrate: --extend: every variant of these rows has rates in the {info['key']} entry; "
              f"nothing to fit", file=sys.stderr)
        return finish(2) if not args.from_ else 2
    t0 = time.perf_counter()
    result = fit(rows, info["key"], info["cc"], info["props"], passes=args.passes, max_evals=args.max_evals,
                 prior=args.prior, max_block_rows=args.max_block_rows, seed=args.seed,
                 slow_ratio=args.slow_ratio or None, hold=hold, fill=fill)
    fit_s = time.perf_counter() - t0
    print()
    print(_report_table(result))
    print()
    commits = sorted({(d.get("environment", {}).get("git") or {}).get("commit") or "" for d in docs} - {""})
    entry = calibration_entry(result, rows=fitted_rows, device=docs[0].get("device", {}).get("name"),
                              commit=",".join(commits) if commits else None, seed=seed)
    if hold is not None:
        if args.refit:  # the record says which variants had rates before and were fitted anew
            entry["source"]["refitted"] = sorted(entry["rates"])
        entry = extended_entry(hold, entry)
    doc["fit"] = {"key": info["key"], "method": "block-coordinate descent, Nelder-Mead on log-rates, "
                                                "least squares on log time with a prior toward the default rates",
                  "passes": args.passes, "max_evals": args.max_evals, "prior": args.prior, "slow_ratio": args.slow_ratio or None,
                  "fill": fill,
                  "rows": len(rows), "left_out": info["left_out"], "before": result.before, "after": result.after,
                  "history": result.passes, "report": result.report, "entry": entry, "written_to": None,
                  "seconds": fit_s}
    if not args.no_write:
        try:
            write_calibration(args.write, info["key"], entry)
        except (OSError, ValueError) as exc:
            print(f"perf.calibrate: cannot write the calibration: {exc}", file=sys.stderr)
            return finish(2)
        doc["fit"]["written_to"] = _public_path(args.write)
        print(f"wrote the {info['key']} entry ({len(result.fitted)} variants{' added' if hold is not None else ''}, launch_s "
              f"{result.launch_s * 1e6:.2f} us) into {doc['fit']['written_to']}")
    return finish(status)


if __name__ == "__main__":
    sys.exit(main())
