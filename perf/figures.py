"""Figures and printed summaries of the benchmark results (the code behind the notebook).

``python -m perf.figures`` loads the newest results from ``perf/results/`` (or
``$SGBLAS_RESULTS_DIR``) and writes the PNG files into ``docs/img/`` (or
``$SGBLAS_FIGURE_DIR``, or ``--out``). ``perf/sgemm_perf.ipynb`` calls the same functions.

Figures:

- ``sgemm_square_tflops.png``: TFLOP/s against square size, one panel per transpose pair,
  sgblas and cuBLAS strict FP32 side by side, with the FP32 peak as a line;
- ``sgemm_rect_ratio.png``: heatmap of sgblas/cuBLAS throughput over the rectangular shapes
  and the transpose pairs (above 1: sgblas faster);
- ``sgemm_host_overhead.png``: host microseconds per call of tiny products, by method;
- ``sgemm_accuracy.png``: relative error against float64 over K, sgblas and cuBLAS strict FP32,
  one panel per input distribution (``perf/accuracy.py``'s results, when there are any).

Every ``summary_*`` function returns text built only from the numbers in the results, so the
notebook can print the facts its readings rest on.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python perf/figures.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perf import results_io  # noqa: E402
from perf.results_io import shape_label  # noqa: E402

__all__ = [
    "FIGURE_DIR_ENV",
    "DOCS_IMG",
    "FIGURE_FILES",
    "PAIRS",
    "figure_dir",
    "load_results",
    "describe",
    "peak",
    "square_rows",
    "summary_square",
    "plot_square",
    "ratio_grid",
    "summary_ratio",
    "plot_ratio_heatmap",
    "summary_overhead",
    "plot_overhead",
    "load_accuracy",
    "summary_accuracy",
    "plot_accuracy",
    "save",
    "render_all",
    "gpu_available",
    "run_benchmark",
    "main",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
FIGURE_DIR_ENV = "SGBLAS_FIGURE_DIR"
DOCS_IMG = REPO_ROOT / "docs" / "img"
FIGURE_FILES = {
    "square": "sgemm_square_tflops.png",
    "ratio": "sgemm_rect_ratio.png",
    "overhead": "sgemm_host_overhead.png",
    "accuracy": "sgemm_accuracy.png",
}
PAIRS = ("NN", "NT", "TN", "TT")
#: The rectangular shapes in the order perf.bench lists them (kept here so that plotting does
#: not import the benchmark module).
RECT_SHAPES = ((8192, 128, 8192), (128, 8192, 8192), (5000, 3000, 1000), (4096, 4096, 64),
               (1000, 1000, 100000))
SYNTHETIC_BANNER = "SYNTHETIC TEST DATA - NOT A MEASUREMENT"


def figure_dir() -> Path:
    """Where figures are written: ``$SGBLAS_FIGURE_DIR`` if set, else ``docs/img``."""
    override = os.environ.get(FIGURE_DIR_ENV)
    return Path(override).expanduser().resolve() if override else DOCS_IMG


def _pyplot():
    import matplotlib.pyplot as plt

    return plt


# --------------------------------------------------------------------------------------------
# Loading and describing


def load_results(directory: str | os.PathLike | None = None
                 ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(newest bench document, newest overhead document or None) from ``directory``.

    Raises :class:`perf.results_io.ResultsError` with instructions when there is no bench
    result: the figures are never drawn from nothing.
    """
    bench = results_io.newest_results("bench", directory, required=True)
    overhead = results_io.newest_results("overhead", directory, required=False)
    return bench, overhead


def _is_synthetic(doc: Mapping[str, Any] | None) -> bool:
    return bool(doc and doc.get("synthetic"))


def peak(bench: Mapping[str, Any]) -> tuple[float | None, str]:
    """(FP32 peak in TFLOP/s, where it comes from), from the recorded device information."""
    return results_io.fp32_peak(bench.get("device") or {})


def describe(bench: Mapping[str, Any], overhead: Mapping[str, Any] | None = None) -> str:
    """Device, driver, CUDA, versions, date and file of the results, as printable text."""
    lines = []
    for doc in (bench, overhead):
        if doc is None:
            continue
        if _is_synthetic(doc):
            lines.append(f"*** {SYNTHETIC_BANNER} ***")
        device = doc.get("device") or {}
        env = doc.get("environment") or {}
        versions = env.get("versions") or {}
        cc = device.get("compute_capability")
        lines.append(f"{doc['kind']} results: {Path(doc.get('_path', '?')).name}")
        lines.append(f"  measured:  {doc['created']} on host {doc.get('host')}")
        lines.append(f"  device:    {device.get('name')} (compute capability "
                     f"{'.'.join(map(str, cc)) if cc else '?'}, "
                     f"{device.get('multiprocessors') or '?'} SMs, "
                     f"clock {device.get('clock_khz', 0) / 1e6 if device.get('clock_khz') else '?'} GHz, "
                     f"L2 {device.get('l2_bytes', 0) / 2**20 if device.get('l2_bytes') else '?'} MiB)")
        lines.append(f"  driver:    {device.get('driver_version') or '?'} "
                     f"(CUDA {_version(device.get('driver_cuda_version'))}), "
                     f"CUDA runtime {_version(device.get('runtime_version'))}, "
                     f"NVRTC {_version(device.get('nvrtc_version'))}")
        lines.append("  versions:  " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
        git = env.get("git") or {}
        if git.get("commit"):
            lines.append(f"  commit:    {git['commit']}{' (uncommitted changes)' if git.get('dirty') else ''}")
        if device.get("simulator"):
            lines.append("  NOTE: measured under the CUDA simulator: the timings mean nothing.")
        if doc["kind"] == "bench":
            settings = doc.get("settings") or {}
            summary = doc.get("summary") or {}
            lines.append(f"  timing:    {settings.get('timer')}, arrays {settings.get('backend')}, "
                         f"cuBLAS {'gemmEx PEDANTIC' if settings.get('cublas') else 'not timed'}; "
                         f"cases: " + ", ".join(f"{summary.get(s, 0)} {s}"
                                                for s in ("ok", "failed", "error", "skipped")))
            value, source = peak(doc)
            lines.append(f"  FP32 peak: {value:.1f} TFLOP/s, {source}" if value
                         else f"  FP32 peak: {source}")
    return "\n".join(lines)


def _version(pair: Any) -> str:
    return ".".join(map(str, pair)) if pair else "?"


def _tflops(case: Mapping[str, Any], lib: str, stat: str = "median") -> float | None:
    entry = case.get(lib) or {}
    return (entry.get("tflops") or {}).get(stat)


def _usable(case: Mapping[str, Any]) -> bool:
    return case.get("status") in ("ok", "failed") and case.get("sgblas") is not None


# --------------------------------------------------------------------------------------------
# Square sizes


def square_rows(bench: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per square case: size, pair, kernel, TFLOP/s of each library, ratio, status."""
    rows = []
    for case in bench["cases"]:
        if case.get("shape_set") != "square" and not (case["m"] == case["n"] == case["k"]):
            continue
        rows.append({
            "size": case["m"], "pair": case["pair"], "kernel": case.get("kernel"),
            "sgblas": _tflops(case, "sgblas") if _usable(case) else None,
            "cublas": _tflops(case, "cublas") if _usable(case) else None,
            "ratio": case.get("ratio") if _usable(case) else None,
            "status": case["status"],
        })
    rows.sort(key=lambda r: (PAIRS.index(r["pair"]) if r["pair"] in PAIRS else 9, r["size"]))
    return rows


def summary_square(bench: Mapping[str, Any]) -> str:
    """The numbers behind the square-size figure, as a Markdown table plus a few facts."""
    rows = square_rows(bench)
    if not rows:
        return "no square cases in these results"
    value, _ = peak(bench)

    def pct(x: float | None) -> str:
        return f"{100 * x / value:.0f}%" if x is not None and value else "-"

    table = results_io.markdown_table(
        ["pair", "size", "sgblas kernel", "sgblas TFLOP/s", "% of peak", "cuBLAS TFLOP/s",
         "% of peak", "sgblas/cuBLAS", "status"],
        [[r["pair"], r["size"], r["kernel"] or "-", _f(r["sgblas"]), pct(r["sgblas"]),
          _f(r["cublas"]), pct(r["cublas"]), _f(r["ratio"], 2), r["status"]] for r in rows],
        align="lrlrrrrrl",
    )
    facts = []
    measured = [r for r in rows if r["sgblas"] is not None]
    if measured:
        best = max(measured, key=lambda r: r["sgblas"])
        of_peak = f", {pct(best['sgblas'])} of the FP32 peak" if value else ""
        facts.append(f"- highest sgblas rate: {best['sgblas']:.1f} TFLOP/s ({best['pair']}, "
                     f"{best['size']}^3){of_peak}")
    ratios = [r for r in rows if r["ratio"] is not None]
    if ratios:
        lo = min(ratios, key=lambda r: r["ratio"])
        hi = max(ratios, key=lambda r: r["ratio"])
        facts.append(f"- sgblas/cuBLAS over the square cases: from {lo['ratio']:.2f} "
                     f"({lo['pair']}, {lo['size']}^3) to {hi['ratio']:.2f} ({hi['pair']}, {hi['size']}^3)")
        largest = max(r["size"] for r in ratios)
        at_largest = ", ".join(f"{r['pair']} {r['ratio']:.2f}" for r in ratios if r["size"] == largest)
        facts.append(f"- at {largest}^3: {at_largest}")
    missing = [r for r in rows if r["sgblas"] is None]
    if missing:
        facts.append("- not measured: " + ", ".join(f"{r['pair']} {r['size']}^3 ({r['status']})"
                                                    for r in missing))
    return table + "\n\n" + "\n".join(facts)


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _banner(fig: Any, doc: Mapping[str, Any] | None) -> None:
    if _is_synthetic(doc):
        fig.text(0.5, 0.5, SYNTHETIC_BANNER, ha="center", va="center", fontsize=20,
                 color="red", alpha=0.35, rotation=20, transform=fig.transFigure, zorder=10)


def _title(bench: Mapping[str, Any]) -> str:
    device = bench.get("device") or {}
    return f"{device.get('name', '?')}, measured {bench['created'][:10]}"


def plot_square(bench: Mapping[str, Any]) -> Any:
    """TFLOP/s against square size, one panel per pair; bars span the interquartile range."""
    plt = _pyplot()
    rows = square_rows(bench)
    if not rows:
        raise results_io.ResultsError("these results hold no square case to plot")
    pairs = [p for p in PAIRS if any(r["pair"] == p for r in rows)]
    ncols = 2 if len(pairs) > 1 else 1
    nrows = (len(pairs) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols, 4.2 * nrows), sharey=True,
                             squeeze=False, constrained_layout=True)
    value, source = peak(bench)
    by_key = {(c["pair"], c["m"]): c for c in bench["cases"]
              if c.get("shape_set") == "square" or c["m"] == c["n"] == c["k"]}
    for ax, pair in zip(axes.flat, pairs):
        sizes = sorted(r["size"] for r in rows if r["pair"] == pair)
        for lib, label, style in (("sgblas", "sgblas", "-o"),
                                  ("cublas", "cuBLAS FP32 PEDANTIC", "--s")):
            xs, ys, lo, hi = [], [], [], []
            for size in sizes:
                case = by_key.get((pair, size))
                if case is None or not _usable(case) or _tflops(case, lib) is None:
                    continue
                times = case[lib]["times_s"]
                med = _tflops(case, lib)
                xs.append(size)
                ys.append(med)
                flop = case["flop"]
                # q1 time gives the higher rate, q3 the lower one.
                lo.append(med - flop / times["q3"] / 1e12 if times.get("q3") else 0.0)
                hi.append(flop / times["q1"] / 1e12 - med if times.get("q1") else 0.0)
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt=style, capsize=3, label=label)
        failed = [r["size"] for r in rows if r["pair"] == pair and r["status"] == "failed"]
        for size in failed:
            ax.annotate("check failed", (size, 0), xytext=(0, 8), textcoords="offset points",
                        ha="center", color="red", fontsize=8)
        if value:
            ax.axhline(value, color="grey", linestyle=":", linewidth=1.2,
                       label=f"FP32 peak {value:.1f} TFLOP/s")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(s) for s in sizes])
        ax.set_title(f"{pair}  (C = {'A' if pair[0] == 'N' else 'Aᵀ'}·{'B' if pair[1] == 'N' else 'Bᵀ'})")
        ax.set_xlabel("m = n = k")
        ax.set_ylabel("TFLOP/s (median; bars: IQR)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    for ax in list(axes.flat)[len(pairs):]:
        ax.set_visible(False)
    fig.suptitle(f"SGEMM, square, column-major: sgblas vs cuBLAS strict FP32 — {_title(bench)}",
                 fontsize=11)
    if value:
        fig.supxlabel(f"Peak line: {source}", fontsize=7, color="grey")
    _banner(fig, bench)
    return fig


# --------------------------------------------------------------------------------------------
# Rectangular shapes


def ratio_grid(bench: Mapping[str, Any], shape_set: str = "rect"
               ) -> tuple[list[tuple[int, int, int]], list[str], list[list[dict[str, Any] | None]]]:
    """(shapes, pairs, cells): cells[i][j] is the case of shapes[i] x pairs[j] or None."""
    cases = [c for c in bench["cases"] if c.get("shape_set") == shape_set]
    shapes: list[tuple[int, int, int]] = []
    for c in cases:
        key = (c["m"], c["n"], c["k"])
        if key not in shapes:
            shapes.append(key)
    # The benchmark's own list order when it knows the shapes, else the order of appearance.
    known = {shape: i for i, shape in enumerate(RECT_SHAPES)}
    seen = {shape: i for i, shape in enumerate(shapes)}
    shapes.sort(key=lambda s: (known.get(s, len(known)), seen[s]))
    pairs = [p for p in PAIRS if any(c["pair"] == p for c in cases)]
    lookup = {(c["m"], c["n"], c["k"], c["pair"]): c for c in cases}
    cells = [[lookup.get((*s, p)) for p in pairs] for s in shapes]
    return shapes, pairs, cells


def summary_ratio(bench: Mapping[str, Any]) -> str:
    """The numbers behind the heatmap: per cell TFLOP/s of both libraries and the ratio."""
    shapes, pairs, cells = ratio_grid(bench)
    if not shapes:
        return "no rectangular cases in these results"
    rows, ratios = [], []
    for shape, row in zip(shapes, cells):
        for pair, case in zip(pairs, row):
            if case is None:
                continue
            ok = _usable(case)
            ratio = case.get("ratio") if ok else None
            if ratio is not None:
                ratios.append((ratio, shape, pair))
            rows.append([shape_label(*shape), pair, case.get("kernel") or "-",
                         _f(_tflops(case, "sgblas") if ok else None),
                         _f(_tflops(case, "cublas") if ok else None), _f(ratio, 2), case["status"]])
    table = results_io.markdown_table(
        ["shape", "pair", "sgblas kernel", "sgblas TFLOP/s", "cuBLAS TFLOP/s", "sgblas/cuBLAS",
         "status"], rows, align="lllrrrl")
    facts = []
    if ratios:
        ratios.sort()
        lo, hi = ratios[0], ratios[-1]
        median = results_io.summarize([r[0] for r in ratios])["median"]
        facts.append(f"- sgblas/cuBLAS over {len(ratios)} rectangular cells: median {median:.2f}, "
                     f"lowest {lo[0]:.2f} ({shape_label(*lo[1])} {lo[2]}), "
                     f"highest {hi[0]:.2f} ({shape_label(*hi[1])} {hi[2]})")
        below = sum(1 for r in ratios if r[0] < 1)
        facts.append(f"- cells where sgblas is slower than cuBLAS: {below} of {len(ratios)}")
    else:
        facts.append("- no ratio: these results hold no cuBLAS timing for the rectangular shapes")
    return table + "\n\n" + "\n".join(facts)


def plot_ratio_heatmap(bench: Mapping[str, Any]) -> Any:
    """Heatmap of sgblas/cuBLAS over rectangular shapes x pairs, each cell annotated."""
    plt = _pyplot()
    from matplotlib.colors import TwoSlopeNorm

    shapes, pairs, cells = ratio_grid(bench)
    if not shapes:
        raise results_io.ResultsError("these results hold no rectangular case to plot")
    import numpy as np

    values = np.full((len(shapes), len(pairs)), np.nan)
    for i, row in enumerate(cells):
        for j, case in enumerate(row):
            if case is not None and _usable(case) and case.get("ratio") is not None:
                values[i, j] = case["ratio"]
    fig, ax = plt.subplots(figsize=(2.0 + 1.9 * len(pairs), 1.2 + 0.75 * len(shapes)),
                           constrained_layout=True)
    finite = values[np.isfinite(values)]
    spread = 1.0
    if finite.size:
        spread = max(abs(float(finite.max()) - 1.0), abs(1.0 - float(finite.min())), 0.05)
        norm = TwoSlopeNorm(vmin=1.0 - spread, vcenter=1.0, vmax=1.0 + spread)
        image = ax.imshow(np.ma.masked_invalid(values), cmap="RdYlGn", norm=norm, aspect="auto")
        fig.colorbar(image, ax=ax, label="sgblas / cuBLAS throughput (>1: sgblas faster)")
    else:
        ax.imshow(np.zeros_like(values), cmap="Greys", vmin=0, vmax=1, aspect="auto")
    ax.set_facecolor("#dddddd")
    for i, row in enumerate(cells):
        for j, case in enumerate(row):
            if case is None:
                text = "not run"
            elif not np.isfinite(values[i, j]):
                text = case["status"] if not _usable(case) else "no cuBLAS"
                if _usable(case) and _tflops(case, "sgblas") is not None:
                    text += f"\nsgblas {_tflops(case, 'sgblas'):.1f}"
            else:
                text = (f"{values[i, j]:.2f}\n{_tflops(case, 'sgblas'):.1f} / "
                        f"{_tflops(case, 'cublas'):.1f}")
                if case["status"] == "failed":
                    text += "\ncheck FAILED"
            strong = np.isfinite(values[i, j]) and abs(values[i, j] - 1.0) > 0.6 * spread
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="white" if strong else "black")
    ax.set_xticks(range(len(pairs)))
    ax.set_xticklabels(pairs)
    ax.set_yticks(range(len(shapes)))
    ax.set_yticklabels([shape_label(*s) for s in shapes])
    ax.set_xlabel("transpose pair (cells: ratio, then sgblas / cuBLAS TFLOP/s)")
    ax.set_ylabel("m x n x k")
    ax.set_title(f"sgblas / cuBLAS strict FP32, rectangular shapes — {_title(bench)}", fontsize=10)
    _banner(fig, bench)
    return fig


# --------------------------------------------------------------------------------------------
# Host overhead


def _overhead_entries(overhead: Mapping[str, Any]) -> tuple[list[int], list[str], dict]:
    sizes = sorted({e["size"] for e in overhead["methods"]})
    methods: list[str] = []
    table: dict[tuple[str, int], Mapping[str, Any]] = {}
    for entry in overhead["methods"]:
        if entry["method"] not in methods:
            methods.append(entry["method"])
        table[(entry["method"], entry["size"])] = entry
    return sizes, methods, table


def summary_overhead(overhead: Mapping[str, Any] | None) -> str:
    """Host microseconds per call by method and size, the ratio to cuBLAS, and start-up times."""
    if overhead is None:
        return ("no overhead results: run `python -m perf.overhead` on a GPU machine to add "
                "host time per call, import time and first-call time")
    return results_io.overhead_markdown(overhead) + "\n\n" + results_io.startup_markdown(overhead)


def plot_overhead(overhead: Mapping[str, Any]) -> Any:
    """Horizontal bars: host microseconds per call (median over repeats, whiskers min-max)."""
    plt = _pyplot()
    import numpy as np

    sizes, methods, table = _overhead_entries(overhead)
    measured = [m for m in methods if any(
        (table.get((m, s)) or {}).get("status") == "ok" for s in sizes)]
    if not measured:
        raise results_io.ResultsError("the overhead results hold no measured method")
    labels = {e["method"]: e["label"] for e in overhead["methods"]}
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.55 * len(measured) * max(1, len(sizes)) / 1.5),
                           constrained_layout=True)
    height = 0.8 / max(1, len(sizes))
    y = np.arange(len(measured))
    for s_index, size in enumerate(sizes):
        med, lo, hi = [], [], []
        for method in measured:
            entry = table.get((method, size)) or {}
            stats = entry.get("host_us_per_call") or {}
            if entry.get("status") == "ok" and stats.get("median") is not None:
                med.append(stats["median"])
                lo.append(stats["median"] - stats["min"])
                hi.append(stats["max"] - stats["median"])
            else:
                med.append(np.nan)
                lo.append(0.0)
                hi.append(0.0)
        offset = (s_index - (len(sizes) - 1) / 2) * height
        bars = ax.barh(y + offset, med, height=height, xerr=[lo, hi], capsize=2,
                       label=f"{size}^3")
        for bar, value, whisker in zip(bars, med, hi):
            centre = bar.get_y() + bar.get_height() / 2
            if np.isfinite(value):
                ax.text(value + whisker, centre, f"  {value:.1f}", va="center", fontsize=7)
            else:
                ax.text(0, centre, "  not measured", va="center", fontsize=7, color="grey")
    ax.set_yticks(y)
    ax.set_yticklabels([labels[m] for m in measured], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(right=ax.get_xlim()[1] * 1.1)
    ax.set_xlabel("host microseconds per call (median over repeats; whiskers: min to max)")
    device = overhead.get("device") or {}
    calls = next((e.get("calls") for e in overhead["methods"] if e.get("calls")), "?")
    ax.set_title(f"Host time per call ({calls} pipelined calls) — "
                 f"{device.get('name', '?')}, {overhead['created'][:10]}", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(title="size")
    _banner(fig, overhead)
    return fig


# --------------------------------------------------------------------------------------------
# Accuracy against float64 (perf/accuracy.py)


def load_accuracy(directory: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """The newest ``accuracy_*.json`` in ``directory`` (default: the results folder) or one
    folder below it (each device run keeps its files together), or None when there is none."""
    import json

    folder = Path(directory) if directory is not None else results_io.results_dir()
    paths = sorted(folder.glob("accuracy_*.json")) + sorted(folder.glob("*/accuracy_*.json"))
    docs = []
    for path in paths:
        doc = json.loads(path.read_text())
        if doc.get("kind") == "accuracy" and doc.get("accuracy"):
            doc["_path"] = str(path)
            docs.append(doc)
    return max(docs, key=lambda d: (d["created"], d["_path"])) if docs else None


def _accuracy_rows(doc: Mapping[str, Any]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    series: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in doc["accuracy"]:
        series.setdefault((row["pair"], row["dist"]), []).append(row)
    for rows in series.values():
        rows.sort(key=lambda r: r["k"])
    return series


def summary_accuracy(doc: Mapping[str, Any] | None) -> str:
    """The numbers behind the accuracy figure: both errors and their ratio at every K."""
    if doc is None:
        return ("no accuracy results: run `python -m perf.accuracy` on a GPU machine with CuPy to "
                "add them")
    lines = [f"accuracy results: {Path(doc.get('_path', '?')).name}, {doc['created'][:16]}, "
             f"m = n = {(doc.get('settings') or {}).get('m')}"]
    if _is_synthetic(doc):
        lines.insert(0, f"*** {SYNTHETIC_BANNER} ***")
    table = results_io.markdown_table(
        ["pair", "data", "K", "splits", "sgblas error", "cuBLAS error", "sgblas / cuBLAS"],
        [[r["pair"], r["dist"], r["k"], r["splits"], f"{r['sgblas_rel_error']:.2e}",
          f"{r['cublas_rel_error']:.2e}", _f(r.get("ratio"), 2)]
         for rows in _accuracy_rows(doc).values() for r in rows],
        align="llrrrrr")
    facts = []
    for (pair, dist), rows in _accuracy_rows(doc).items():
        ratios = [r["ratio"] for r in rows if r.get("ratio") is not None]
        if ratios:
            facts.append(f"- {pair}, {dist}: sgblas / cuBLAS from {min(ratios):.2f} to {max(ratios):.2f} "
                         f"over K = {rows[0]['k']} to {rows[-1]['k']}")
    return "\n".join(lines) + "\n\n" + table + "\n\n" + "\n".join(facts)


def plot_accuracy(doc: Mapping[str, Any]) -> Any:
    """Relative Frobenius error against float64 over K (log-log), one panel per distribution;
    the number of K splits sgblas used is written at each of its points."""
    plt = _pyplot()
    series = _accuracy_rows(doc)
    if not series:
        raise results_io.ResultsError("these accuracy results hold no row to plot")
    dists = sorted({dist for _, dist in series})
    fig, axes = plt.subplots(1, len(dists), figsize=(6.2 * len(dists), 4.2), squeeze=False,
                             constrained_layout=True)
    for ax, dist in zip(axes.flat, dists):
        for (pair, d), rows in series.items():
            if d != dist:
                continue
            ks = [r["k"] for r in rows]
            ax.plot(ks, [r["sgblas_rel_error"] for r in rows], "-o", label=f"sgblas {pair}")
            ax.plot(ks, [r["cublas_rel_error"] for r in rows], "--s", label=f"cuBLAS PEDANTIC {pair}")
            for r in rows:
                ax.annotate(str(r["splits"]), (r["k"], r["sgblas_rel_error"]), xytext=(0, 6),
                            textcoords="offset points", ha="center", fontsize=7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("K (numbers: sgblas's K splits)")
        ax.set_ylabel("||C - C64||_F / ||C64||_F")
        ax.set_title(f"{dist} inputs" + (" in [0, 1)" if dist == "uniform" else ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    device = doc.get("device") or {}
    m = (doc.get("settings") or {}).get("m")
    fig.suptitle(f"Error against float64, m = n = {m} — {device.get('name', '?')}, {doc['created'][:10]}",
                 fontsize=11)
    _banner(fig, doc)
    return fig


# --------------------------------------------------------------------------------------------
# Output


def save(fig: Any, key_or_name: str, out_dir: str | os.PathLike | None = None) -> Path:
    """Write ``fig`` as PNG into ``out_dir`` (default :func:`figure_dir`); returns the path."""
    name = FIGURE_FILES.get(key_or_name, key_or_name)
    folder = Path(out_dir) if out_dir is not None else figure_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    fig.savefig(path, dpi=120)
    return path


def render_all(bench: Mapping[str, Any], overhead: Mapping[str, Any] | None,
               out_dir: str | os.PathLike | None = None, close: bool = True,
               accuracy: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Draw and save every figure the results allow; returns {figure key: path}."""
    written: dict[str, Path] = {}
    drawings = [("square", plot_square, bench), ("ratio", plot_ratio_heatmap, bench)]
    if overhead is not None:
        drawings.append(("overhead", plot_overhead, overhead))
    if accuracy is not None:
        drawings.append(("accuracy", plot_accuracy, accuracy))
    for key, draw, doc in drawings:
        fig = draw(doc)
        written[key] = save(fig, key, out_dir)
        if close:
            _pyplot().close(fig)
    return written


# --------------------------------------------------------------------------------------------
# Running the benchmarks from the notebook


def gpu_available() -> tuple[bool, str]:
    """(whether a real CUDA GPU is usable here, why not)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return False, "NUMBA_ENABLE_CUDASIM is set (simulator, no real GPU)"
    try:
        from numba import cuda

        if cuda.is_available() and len(cuda.gpus) > 0:
            return True, ""
        return False, "numba.cuda.is_available() is False"
    except Exception as exc:
        return False, f"numba.cuda could not be queried ({type(exc).__name__}: {exc})"


def run_benchmark(quick: bool = False, overhead: bool = True,
                  results: str | os.PathLike | None = None) -> str:
    """Run ``perf.bench`` (and ``perf.overhead``) in fresh processes if a GPU is present.

    Fresh processes, so that ``NVIDIA_TF32_OVERRIDE=0`` is in place before cuBLAS loads
    whatever this process has already imported. Returns a sentence saying what happened.
    """
    ok, why = gpu_available()
    if not ok:
        return f"RUN_BENCHMARK is True but there is no GPU here ({why}): using saved results"
    out = str(Path(results) if results is not None else results_io.results_dir())
    commands = [[sys.executable, "-m", "perf.bench", "--out", out, *(["--quick"] if quick else [])]]
    if overhead:
        commands.append([sys.executable, "-m", "perf.overhead", "--out", out])
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for command in commands:
        proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        print(proc.stdout[-6000:])
        if proc.returncode == 2 or (proc.returncode != 0 and "wrote " not in proc.stdout):
            raise RuntimeError(f"{' '.join(command[1:])} failed with exit status "
                               f"{proc.returncode}:\n{proc.stderr[-3000:]}")
    return f"benchmarks ran; results in {out}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.figures",
                                     description="Draw the benchmark figures as PNG files.")
    parser.add_argument("--results", type=Path, default=None, metavar="DIR",
                        help=f"results folder (default: ${results_io.RESULTS_DIR_ENV} or perf/results)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help=f"figure folder (default: ${FIGURE_DIR_ENV} or docs/img)")
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    try:
        bench, overhead = load_results(args.results)
    except results_io.ResultsError as exc:
        print(f"perf.figures: {exc}", file=sys.stderr)
        return 2
    print(describe(bench, overhead))
    written = render_all(bench, overhead, args.out, accuracy=load_accuracy(args.results))
    for key, path in written.items():
        print(f"wrote {key}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
