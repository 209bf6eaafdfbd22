"""The cost model's acceptance benchmark: how much slower sgblas's choice runs than the fastest
legal candidate, over random shapes.

Usage (from the repository root; both forms work)::

    python -m perf.regret                      # 320 random shapes from seed 4242 (GPU)
    python -m perf.regret --list               # print the shapes and exit (no GPU needed)
    python -m perf.regret --shard 1/2          # half the shapes (a long run over two commands) ...
    python -m perf.regret --from regret_A.json --from regret_B.json   # ... summarised together

The shapes: ``--count`` (320) of them from ``--seed`` (4242, printed; not the calibration's
seed), each of m, n, k log-uniform over 1..20000 with at most 2**37 FLOPs, in all four
transpose pairs and the four leading-dimension classes of ``perf.sweep`` (tight, odd, padded,
offset) in equal shares. Each is swept as ``python -m perf.sweep`` does it: every legal
candidate timed by name, and the plain call, L2-cold, CUDA events, the median; then the chosen
candidate, the three fastest and the plain call once more, their samples pooled
(``--confirm``), so that a fastest candidate that was fast by luck is timed again.

Per shape, **regret** = the time of sgblas's choice (the candidate ``explain`` names, timed by
name) / the time of the fastest legal candidate. Printed and stored (``regret`` in the result
file): the geometric mean, 95th percentile and maximum regret, the share of shapes where the
choice was the fastest, the plain call's geometric mean over the fastest, the geometric mean by
pair and by ld class, the 10 worst shapes with the chosen and the fastest candidate, and whether
the device was calibrated (``explain().calibrated``: without a calibration the default rates
predict). The acceptance bars of the cost model: geomean <= 1.03, p95 <= 1.10, max <= 1.25.
Also the host cost of a plan-cache miss (:func:`plan_miss_us`: choosing for each shape from
nothing, on this machine's CPU; bar: a median of 100 us).

Writes ``perf/results/regret_<UTC date-time>_<device>.json`` (the sweep's cases and rows, and
the summary). Exit status: 0 when every bar is met and every case ran, 1 otherwise (the JSON is
written anyway), 2 on a usage or setup error.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python perf/regret.py`: make `perf` and `sgblas` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from perf import results_io, sweep  # noqa: E402

__all__ = ["DEFAULT_COUNT", "DEFAULT_SEED", "ACCEPTANCE", "HOST_BAR_US", "regret_cases", "case_table", "summarize",
           "plan_miss_us", "report", "parse_args", "main"]

DEFAULT_COUNT = 320
DEFAULT_SEED = 4242
#: The acceptance bars: (statistic, the most it may be).
ACCEPTANCE: tuple[tuple[str, float], ...] = (("geomean", 1.03), ("p95", 1.10), ("max", 1.25))
#: The host-cost bar of a plan-cache miss (a new shape's first call): the choice, in microseconds.
HOST_BAR_US = 100.0
#: Where the host-cost problems' operands start (pointer offsets as the case's).
_BASE = 0x7F0000000000


def plan_miss_us(cases: Sequence[sweep.SweepCase], cc: tuple[int, int], props: Any, workspace_bytes: int,
                 repeats: int = 5) -> dict[str, float]:
    """Host microseconds of planning each case's shape class from nothing, as a call's first
    sight of it does (``sgblas.dispatch.plan.choose(..., quick=True)``; the plan memo is not
    consulted): the best of ``repeats`` per case, then the median, p90 and max over the cases.
    Pure host work: it needs the device's properties, not the device."""
    import time

    from sgblas.dispatch.plan import choose
    from sgblas.enums import MathMode
    from sgblas.kernels.problem import GemmProblem

    times = []
    for case in cases:
        oa, ob, oc = case.offsets
        p = GemmProblem(tuple(cc), MathMode.FP32, case.transa, case.transb, case.m, case.n, case.k,
                        _BASE + 4 * oa, case.lda, _BASE + 2**32 + 4 * ob, case.ldb, _BASE + 2**33 + 4 * oc, case.ldc)
        best = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            choose(p, props, workspace_bytes, quick=True)
            best = min(best, time.perf_counter() - t0)
        times.append(best * 1e6)
    arr = np.array(times)
    return {"shapes": len(times), "median": float(np.median(arr)), "p90": float(np.percentile(arr, 90)),
            "max": float(arr.max()), "bar": HOST_BAR_US, "met": bool(np.median(arr) <= HOST_BAR_US)}


def regret_cases(count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED) -> list[sweep.SweepCase]:
    """The benchmark's shapes (:func:`perf.sweep.random_cases`)."""
    return sweep.random_cases(count, seed)


def case_table(docs: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """One entry per case that ran (``label``, ``pair``, ``ld_class``, ``chosen``, ``choice_s``,
    ``fastest``, ``fastest_s``, ``plain_s``, ``regret``, ``plain_ratio``, ``calibrated``), and
    notes on the cases left out or measured around."""
    table: list[dict[str, Any]] = []
    notes: list[str] = []
    for number, doc in enumerate(docs):
        rows: dict[int, list[dict[str, Any]]] = {}
        for r in doc["rows"]:
            rows.setdefault(r["case"], []).append(r)
        for case in doc["cases"]:
            label = f"{case['m']}x{case['n']}x{case['k']} {case['pair']} {case.get('ld_class', '')}".rstrip()
            if case.get("status") not in ("ok", "failed"):
                notes.append(f"{label}: {case.get('status')} ({case.get('reason')})")
                continue
            timed = {r["candidate"]: r for r in rows.get(case["case"], []) if r.get("call") == "candidate"}
            ok = {name: r["seconds"] for name, r in timed.items() if r.get("status") == "ok" and r.get("seconds")}
            plain = (case.get("plain") or {}).get("seconds")
            if not ok:
                notes.append(f"{label}: no candidate was timed")
                continue
            fastest = min(ok, key=ok.get)
            chosen = case.get("chosen")
            choice_s = ok.get(chosen)
            if choice_s is None:
                notes.append(f"{label}: the chosen {chosen} was not timed by name "
                             f"({(timed.get(chosen) or {}).get('reason', 'not listed')}); the plain call stands in")
                choice_s = plain
            if choice_s is None:
                continue
            table.append({
                "file": number, "case": case["case"], "label": label, "m": case["m"], "n": case["n"], "k": case["k"],
                "pair": case["pair"], "ld_class": case.get("ld_class"), "chosen": chosen, "choice_s": choice_s,
                "fastest": fastest, "fastest_s": ok[fastest], "plain_s": plain,
                "regret": choice_s / ok[fastest], "plain_ratio": plain / ok[fastest] if plain else None,
                "calibrated": case.get("calibrated"), "candidates": len(ok),
                "cublas_ratio": case["cublas_s"] / ok[fastest] if case.get("cublas_s") else None,
            })
    return table, notes


def _geomean(values: Sequence[float]) -> float | None:
    return float(math.exp(np.mean(np.log(values)))) if len(values) else None


def summarize(table: Sequence[dict[str, Any]], worst: int = 10) -> dict[str, Any]:
    """The figures of the benchmark over ``table`` (:func:`case_table`) and the bars."""
    regrets = np.array([t["regret"] for t in table], dtype=float)
    plain = [t["plain_ratio"] for t in table if t.get("plain_ratio")]
    out: dict[str, Any] = {
        "shapes": len(table),
        "geomean": _geomean(regrets),
        "p95": float(np.percentile(regrets, 95)) if len(regrets) else None,
        "max": float(regrets.max()) if len(regrets) else None,
        "share_fastest": float(np.mean([t["chosen"] == t["fastest"] or t["choice_s"] <= t["fastest_s"]
                                        for t in table])) if table else None,
        "plain_geomean": _geomean(plain),
        "cublas_geomean": _geomean([t["cublas_ratio"] for t in table if t.get("cublas_ratio")]),
    }
    for key, field in (("by_pair", "pair"), ("by_ld_class", "ld_class")):
        groups: dict[str, list[float]] = {}
        for t in table:
            groups.setdefault(str(t[field]), []).append(t["regret"])
        out[key] = {name: {"shapes": len(v), "geomean": _geomean(v), "max": max(v)}
                    for name, v in sorted(groups.items())}
    calibrated = {t.get("calibrated") for t in table}
    out["calibrated"] = calibrated.pop() if len(calibrated) == 1 else ("mixed" if calibrated else None)
    out["bars"] = {name: {"value": out[name], "bar": bar, "met": out[name] is not None and out[name] <= bar}
                   for name, bar in ACCEPTANCE}
    out["met"] = bool(table) and all(b["met"] for b in out["bars"].values())
    out["worst"] = sorted(table, key=lambda t: -t["regret"])[:worst]
    return out


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report(summary: dict[str, Any]) -> str:
    """The summary as text: the figures beside their bars, the groups and the worst shapes."""
    cal = summary.get("calibrated")
    state = {True: "calibrated", False: "not calibrated: default rates"}.get(cal, cal)
    lines = [f"regret over {summary['shapes']} shapes (device {state})"]
    for name, bar in summary["bars"].items():
        lines.append(f"  {name:>8} {_fmt(bar['value'])}   bar <= {bar['bar']:.2f}   "
                     f"{'met' if bar['met'] else 'NOT MET'}")
    share = summary.get("share_fastest")
    lines.append(f"  choice was the fastest in {'-' if share is None else f'{share:.1%}'} of shapes; "
                 f"the plain call's geomean over the fastest {_fmt(summary.get('plain_geomean'))}")
    if summary.get("cublas_geomean"):
        lines.append(f"  cuBLAS PEDANTIC's geomean over the fastest candidate {_fmt(summary['cublas_geomean'])}")
    lines.append("  acceptance: " + ("every bar met" if summary["met"] else "NOT MET"))
    host = summary.get("plan_miss_us")
    if host:
        lines.append(f"  host cost of a plan-cache miss over {host['shapes']} shapes: median {host['median']:.1f} us, "
                     f"p90 {host['p90']:.1f} us, max {host['max']:.1f} us (bar: median <= {host['bar']:.0f} us, "
                     f"{'met' if host['met'] else 'NOT MET'})")
    for key, title in (("by_pair", "pair"), ("by_ld_class", "ld class")):
        groups = summary.get(key) or {}
        lines.append(f"  by {title}: " + ", ".join(f"{name} {_fmt(g['geomean'])} (max {_fmt(g['max'])}, {g['shapes']})"
                                                 for name, g in groups.items()))
    if summary.get("worst"):
        lines.append("")
        rows = [[t["label"], t["chosen"], f"{t['choice_s'] * 1e6:.1f}", t["fastest"], f"{t['fastest_s'] * 1e6:.1f}",
                 f"{t['regret']:.3f}", _fmt(t.get("plain_ratio"))] for t in summary["worst"]]
        lines.append(results_io.markdown_table(
            ["shape", "chosen", "chosen us", "fastest", "fastest us", "regret", "plain / fastest"], rows, "llrlrrr"))
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m perf.regret",
        description="Time every legal candidate of random shapes and sgblas's choice; report the regret "
                    "(choice / fastest) against the cost model's acceptance bars.")
    group = parser.add_argument_group("cases")
    group.add_argument("--count", type=int, default=DEFAULT_COUNT, metavar="N",
                       help=f"random shapes (default: {DEFAULT_COUNT})")
    group.add_argument("--seed", type=int, default=DEFAULT_SEED,
                       help=f"seed of the shapes and of the operands (default: {DEFAULT_SEED})")
    group.add_argument("--list", action="store_true", help="print the shapes and exit (no GPU needed)")
    group.add_argument("--from", dest="from_", action="append", type=Path, default=None, metavar="FILE",
                       help="summarise earlier perf.regret (or perf.sweep) results instead of measuring "
                            "(repeatable: the shards of one run)")
    group.add_argument("--worst", type=int, default=10, metavar="N", help="worst shapes to list (default: 10)")
    sweep.add_timing_args(parser, confirm=3)
    args = parser.parse_args(argv)
    sweep.check_timing_args(parser, args)
    if args.count < 1:
        parser.error("--count must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cases = sweep.shard(regret_cases(args.count, args.seed), args.shard)
    if args.list:
        print(f"seed {args.seed}")
        sweep.list_cases(cases)
        return 0
    status = 0
    if args.from_:
        try:
            docs = sweep.load_docs(args.from_)
        except results_io.ResultsError as exc:
            print(f"perf.regret: {exc}", file=sys.stderr)
            return 2
        doc = sweep.merged_doc(docs, "regret", argv)
        status = 1 if doc["summary"]["failed"] + doc["summary"]["error"] else 0
    else:
        print(f"perf.regret: seed {args.seed}, {len(cases)} shapes", flush=True)
        doc, status = sweep.run_cases(cases, args, tool="regret", seed=args.seed, argv=argv)
        if doc is None:
            return status
        docs = [doc]
    table, notes = case_table(docs)  # per document: the case numbers of two runs may coincide
    summary = summarize(table, args.worst)
    summary["notes"] = notes
    if not args.from_:
        from sgblas.handle import Handle

        with Handle() as h:
            summary["plan_miss_us"] = plan_miss_us(cases, h.cc, h.properties, h.workspace_bytes)
    summary["table"] = table
    doc["regret"] = summary
    path = sweep.save_doc(doc, args.out)
    print()
    for note in notes:
        print(f"note: {note}")
    print(report(summary))
    print()
    print(f"wrote {path}")
    return status if summary["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
