"""The benchmark result files: their schema, statistics, loading, saving and Markdown tables.

Two kinds of JSON document live in ``perf/results/``:

- ``bench_<UTC date-time>_<device>.json`` written by :mod:`perf.bench` (schema
  :data:`BENCH_SCHEMA`): one entry per (shape, transpose pair) with every timing sample,
  their statistics, TFLOP/s, the kernel sgblas chose and a correctness cross-check;
- ``overhead_<UTC date-time>_<device>.json`` written by :mod:`perf.overhead` (schema
  :data:`OVERHEAD_SCHEMA`): host time per call of pipelined tiny products, import time and
  first-call time.

The module is pure Python plus NumPy: it imports no CUDA library, so the notebook and the
tests can use it on a machine without a GPU. ``perf/README.md`` documents the schema fields.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = [
    "BENCH_SCHEMA",
    "OVERHEAD_SCHEMA",
    "RESULTS_DIR",
    "RESULTS_DIR_ENV",
    "ResultsError",
    "results_dir",
    "summarize",
    "tflops",
    "shape_label",
    "result_filename",
    "save_results",
    "load_results",
    "validate_bench",
    "validate_overhead",
    "list_results",
    "newest_results",
    "fp32_peak",
    "markdown_table",
    "bench_markdown",
    "overhead_markdown",
    "startup_markdown",
    "utc_now",
]

#: Schema tags written into (and required of) the two kinds of document.
BENCH_SCHEMA = "sgblas-bench/1"
OVERHEAD_SCHEMA = "sgblas-overhead/1"

#: Where results are written by default and read by the notebook: ``perf/results``.
RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: Environment variable that points the notebook and :mod:`perf.figures` at another folder.
RESULTS_DIR_ENV = "SGBLAS_RESULTS_DIR"

_KINDS = {"bench": BENCH_SCHEMA, "overhead": OVERHEAD_SCHEMA}


class ResultsError(ValueError):
    """A result file is missing, unreadable or does not follow its schema."""


def results_dir() -> Path:
    """The folder results are read from: ``$SGBLAS_RESULTS_DIR`` if set, else ``perf/results``."""
    override = os.environ.get(RESULTS_DIR_ENV)
    return Path(override).expanduser().resolve() if override else RESULTS_DIR


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


# --------------------------------------------------------------------------------------------
# Statistics


def summarize(samples: Sequence[float]) -> dict[str, float | int]:
    """Order statistics of ``samples``: n, median, mean, std, min, max, q1, q3 and iqr.

    Quartiles are linear-interpolated percentiles (NumPy's default). An empty sequence gives
    ``{"n": 0}``, so a case that produced no sample still has a well-formed entry.
    """
    values = sorted(float(s) for s in samples)
    n = len(values)
    if n == 0:
        return {"n": 0}

    def percentile(q: float) -> float:
        position = (n - 1) * q
        lo = math.floor(position)
        hi = min(lo + 1, n - 1)
        return values[lo] + (values[hi] - values[lo]) * (position - lo)

    mean = sum(values) / n
    variance = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    q1, q3 = percentile(0.25), percentile(0.75)
    return {
        "n": n,
        "median": percentile(0.5),
        "mean": mean,
        "std": math.sqrt(variance),
        "min": values[0],
        "max": values[-1],
        "q1": q1,
        "q3": q3,
        "iqr": q3 - q1,
    }


def tflops(m: int, n: int, k: int, seconds: float | None) -> float | None:
    """Throughput 2mnk / t in TFLOP/s (None when the time is missing or not positive)."""
    if seconds is None or not seconds > 0:
        return None
    return 2.0 * m * n * k / seconds / 1e12


def shape_label(m: int, n: int, k: int, pad: int = 0,
                offsets: Sequence[int] | None = None) -> str:
    """``MxNxK``, then `` ld+P`` for padded leading dimensions and `` off(OA,OB,OC)`` for
    operands that start past their allocation, only when those are nonzero."""
    label = f"{m}x{n}x{k}"
    if pad:
        label += f" ld+{pad}"
    if offsets and any(offsets):
        label += f" off({','.join(str(o) for o in offsets)})"
    return label


# --------------------------------------------------------------------------------------------
# Files


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")
    return slug or "unknown"


def result_filename(kind: str, device_name: str, when: datetime | None = None) -> str:
    """``<kind>_<YYYYmmdd-HHMMSS>_<device>.json``, the date in UTC so names sort by time."""
    if kind not in _KINDS:
        raise ValueError(f"kind={kind!r} is not one of {sorted(_KINDS)}")
    when = (when or utc_now()).astimezone(timezone.utc)
    return f"{kind}_{when.strftime('%Y%m%d-%H%M%S')}_{_slug(device_name)}.json"


def _json_default(value: Any) -> Any:
    # NumPy scalars and tuples reach here from the benchmarks; keep the file plain JSON.
    for attribute in ("item", "tolist"):
        method = getattr(value, attribute, None)
        if callable(method):
            return method()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _finite(value: Any) -> Any:
    """Replace NaN and infinities by None: JSON has no spelling for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def save_results(doc: Mapping[str, Any], out_dir: str | os.PathLike | None = None) -> Path:
    """Validate ``doc`` and write it as ``out_dir/<result_filename>``; returns the path.

    The name never overwrites an existing file: a suffix ``-2``, ``-3``... is added instead.
    """
    kind = doc.get("kind")
    validate(doc, source="the document to save")
    out = Path(out_dir) if out_dir is not None else RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    created = datetime.fromisoformat(doc["created"])
    name = result_filename(kind, doc["device"].get("name") or "unknown", created)
    path = out / name
    stem = path.stem
    counter = 2
    while path.exists():
        path = out / f"{stem}-{counter}.json"
        counter += 1
    text = json.dumps(_finite(doc), indent=1, default=_json_default, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def load_results(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate one result file (either kind)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: cannot be read as JSON ({exc})") from exc
    validate(doc, source=str(path))
    doc.setdefault("_path", str(path))
    return doc


def validate(doc: Any, source: str = "document") -> None:
    if not isinstance(doc, Mapping):
        raise ResultsError(f"{source}: the top level is a {type(doc).__name__}, not an object")
    kind = doc.get("kind")
    if kind == "bench":
        validate_bench(doc, source)
    elif kind == "overhead":
        validate_overhead(doc, source)
    else:
        raise ResultsError(f"{source}: 'kind' is {kind!r}, expected 'bench' or 'overhead'")


def _require(mapping: Mapping[str, Any], keys: Iterable[str], where: str) -> None:
    missing = [k for k in keys if k not in mapping]
    if missing:
        raise ResultsError(f"{where}: missing key(s) {', '.join(missing)}")


_TOP_KEYS = ("schema", "kind", "created", "host", "environment", "device", "settings")
_CASE_KEYS = ("m", "n", "k", "transa", "transb", "pair", "shape_set", "status", "kernel",
              "sgblas", "cublas", "ratio", "check")
_LIB_KEYS = ("times_s", "tflops", "reps")
_METHOD_KEYS = ("method", "label", "size", "status")


def validate_bench(doc: Mapping[str, Any], source: str = "bench document") -> None:
    """Raise :class:`ResultsError` unless ``doc`` follows :data:`BENCH_SCHEMA`."""
    _require(doc, _TOP_KEYS + ("cases",), source)
    if doc["schema"] != BENCH_SCHEMA:
        raise ResultsError(f"{source}: schema is {doc['schema']!r}, expected {BENCH_SCHEMA!r}")
    datetime.fromisoformat(doc["created"])  # raises ValueError on a malformed date
    _require(doc["device"], ("name", "compute_capability"), f"{source}: device")
    cases = doc["cases"]
    if not isinstance(cases, list):
        raise ResultsError(f"{source}: 'cases' is not a list")
    for i, case in enumerate(cases):
        where = f"{source}: cases[{i}]"
        _require(case, _CASE_KEYS, where)
        if case["pair"] != case["transa"] + case["transb"]:
            raise ResultsError(f"{where}: pair {case['pair']!r} disagrees with transa/transb")
        for lib in ("sgblas", "cublas"):
            if case[lib] is not None:
                _require(case[lib], _LIB_KEYS, f"{where}.{lib}")


def validate_overhead(doc: Mapping[str, Any], source: str = "overhead document") -> None:
    """Raise :class:`ResultsError` unless ``doc`` follows :data:`OVERHEAD_SCHEMA`."""
    _require(doc, _TOP_KEYS + ("methods", "startup"), source)
    if doc["schema"] != OVERHEAD_SCHEMA:
        raise ResultsError(f"{source}: schema is {doc['schema']!r}, expected {OVERHEAD_SCHEMA!r}")
    datetime.fromisoformat(doc["created"])
    if not isinstance(doc["methods"], list):
        raise ResultsError(f"{source}: 'methods' is not a list")
    for i, entry in enumerate(doc["methods"]):
        _require(entry, _METHOD_KEYS, f"{source}: methods[{i}]")


def list_results(kind: str, directory: str | os.PathLike | None = None) -> list[Path]:
    """Files ``<kind>_*.json`` in ``directory`` (default :func:`results_dir`), oldest first."""
    if kind not in _KINDS:
        raise ValueError(f"kind={kind!r} is not one of {sorted(_KINDS)}")
    folder = Path(directory) if directory is not None else results_dir()
    if not folder.is_dir():
        return []
    return sorted(folder.glob(f"{kind}_*.json"))


def newest_results(kind: str, directory: str | os.PathLike | None = None,
                   required: bool = True) -> dict[str, Any] | None:
    """The result document of ``kind`` with the latest ``created`` date in ``directory``.

    Raises :class:`ResultsError` with a sentence saying how to produce one when there is none
    (or returns None when ``required`` is False).
    """
    folder = Path(directory) if directory is not None else results_dir()
    paths = list_results(kind, folder)
    if not paths:
        if not required:
            return None
        producer = "perf.bench" if kind == "bench" else "perf.overhead"
        raise ResultsError(
            f"no {kind} results: {folder} holds no {kind}_*.json file. Run "
            f"`python -m {producer}` on a machine with a CUDA GPU (it writes into perf/results/), "
            f"or set RUN_BENCHMARK = True in the notebook on such a machine, or point "
            f"${RESULTS_DIR_ENV} at a folder that holds results."
        )
    docs = [load_results(p) for p in paths]
    return max(docs, key=lambda d: (datetime.fromisoformat(d["created"]), d["_path"]))


# --------------------------------------------------------------------------------------------
# Peak FP32 rate

#: FP32 FMA lanes per streaming multiprocessor by compute capability (CUDA programming guide,
#: "arithmetic instructions" throughput table: 64 on 7.x and 8.0, 128 on 8.6 and later).
FP32_LANES_PER_SM: dict[tuple[int, int], int] = {
    (7, 0): 64, (7, 2): 64, (7, 5): 64,
    (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
    (9, 0): 128,
    (10, 0): 128, (10, 3): 128, (11, 0): 128, (12, 0): 128, (12, 1): 128,
}

#: Datasheet-style peaks (TFLOP/s) used only when the device information lacks SMs or clock.
FP32_PEAK_BY_NAME: dict[str, tuple[float, str]] = {
    "NVIDIA H200": (66.9, "132 SMs x 128 FP32 lanes x 2 flop/FMA x 1.98 GHz boost clock"),
    "NVIDIA H100 80GB HBM3": (66.9, "132 SMs x 128 FP32 lanes x 2 flop/FMA x 1.98 GHz boost clock"),
}


def fp32_peak(device: Mapping[str, Any]) -> tuple[float | None, str]:
    """(peak FP32 TFLOP/s, a sentence saying where the number comes from) for ``device``.

    Computed as SMs x FP32 lanes per SM x 2 x clock from the recorded device information when
    it holds the SM count, the clock and a known compute capability; otherwise taken from
    :data:`FP32_PEAK_BY_NAME`; otherwise (None, reason).
    """
    sms = device.get("multiprocessors")
    clock_khz = device.get("clock_khz")
    cc = device.get("compute_capability")
    lanes = FP32_LANES_PER_SM.get(tuple(cc)) if cc else None
    if sms and clock_khz and lanes:
        ghz = clock_khz / 1e6
        peak = sms * lanes * 2 * ghz / 1e3
        return peak, (
            f"computed from the recorded device information: {sms} SMs x {lanes} FP32 lanes/SM "
            f"(compute capability {cc[0]}.{cc[1]}) x 2 flop/FMA x {ghz:.3f} GHz (the clock the "
            f"device reports as its maximum)"
        )
    name = device.get("name") or ""
    if name in FP32_PEAK_BY_NAME:
        peak, how = FP32_PEAK_BY_NAME[name]
        return peak, f"from the table of known devices for {name!r}: {how}"
    return None, f"unknown: the device information lacks SMs/clock and {name!r} is not in the table"


# --------------------------------------------------------------------------------------------
# Markdown


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]],
                   align: str | None = None) -> str:
    """A GitHub Markdown table; ``align`` is one letter per column (l, r or c)."""
    header = [str(h) for h in headers]
    body = [["" if cell is None else str(cell) for cell in row] for row in rows]
    for row in body:
        if len(row) != len(header):
            raise ValueError(f"row {row} has {len(row)} cells, the header has {len(header)}")
    align = align or "l" * len(header)
    marks = {"l": ":---", "r": "---:", "c": ":---:"}
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(marks[a] for a in align) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _check_cell(check: Mapping[str, Any] | None) -> str:
    if not check or check.get("rel_error") is None:
        return "not checked"
    verdict = "ok" if check.get("passed") else "FAILED"
    return f"{verdict} ({check['rel_error']:.1e})"


def bench_markdown(doc: Mapping[str, Any]) -> str:
    """The per-case table of a bench document: shape, pair, kernel, TFLOP/s, ratio, check."""
    rows = []
    for case in doc["cases"]:
        sg = case.get("sgblas") or {}
        cb = case.get("cublas") or {}
        status = case["status"]
        if status not in ("ok",):
            reason = case.get("reason") or ""
            status = f"{status}: {reason}" if reason else status
        rows.append([
            # Documents written before --pad and --offset lack the keys: tight and aligned.
            shape_label(case["m"], case["n"], case["k"], case.get("pad") or 0, case.get("offsets")),
            case["pair"],
            case.get("kernel") or "-",
            _fmt((sg.get("tflops") or {}).get("median")),
            _fmt((cb.get("tflops") or {}).get("median")),
            _fmt(case.get("ratio"), 2),
            _check_cell(case.get("check")),
            status,
        ])
    return markdown_table(
        ["shape (m x n x k)", "pair", "sgblas kernel", "sgblas TFLOP/s", "cuBLAS TFLOP/s",
         "ratio", "check", "status"],
        rows, align="lllrrrll",
    )


def overhead_markdown(doc: Mapping[str, Any]) -> str:
    """Host microseconds per call by method and size, with the ratio to cuBLAS through CuPy.

    Methods that did not run show "-" and are listed under the table with the reason.
    """
    sizes = sorted({e["size"] for e in doc["methods"]})
    by_method: dict[str, dict[int, Mapping[str, Any]]] = {}
    labels: dict[str, str] = {}
    for entry in doc["methods"]:
        by_method.setdefault(entry["method"], {})[entry["size"]] = entry
        labels[entry["method"]] = entry["label"]
    baseline = by_method.get("cublas_cupy", {})

    def per_call(entry: Mapping[str, Any] | None) -> float | None:
        if not entry or entry.get("status") != "ok":
            return None
        return (entry.get("host_us_per_call") or {}).get("median")

    rows = []
    notes: dict[str, set[str]] = {}
    for method, entries in by_method.items():
        row: list[Any] = [labels[method]]
        for size in sizes:
            entry = entries.get(size)
            value = per_call(entry)
            if value is None:
                if entry is not None:
                    notes.setdefault(labels[method], set()).add(
                        f"{entry.get('status')}: {entry.get('reason') or 'no reason recorded'}")
                row += ["-", "-"]
                continue
            base = per_call(baseline.get(size))
            row += [f"{value:.1f}", _fmt(value / base if base else None, 2)]
        rows.append(row)
    headers = ["method"]
    for size in sizes:
        headers += [f"{size}^3: us/call", f"{size}^3: x cuBLAS"]
    table = markdown_table(headers, rows, align="l" + "rr" * len(sizes))
    lines = [f"- {label}: {'; '.join(sorted(reasons))}" for label, reasons in notes.items()]
    return table + ("\n\nNot measured:\n" + "\n".join(lines) if lines else "")


def startup_markdown(doc: Mapping[str, Any]) -> str:
    """Import and first-call times measured in fresh processes (medians over the children)."""
    startup = doc.get("startup") or {}
    if startup.get("status") != "ok":
        return f"startup not measured: {startup.get('reason') or 'no data'}"
    rows = []
    for key, label in (
        ("import_s", "`import sgblas` in a fresh process"),
        ("numba_import_s", "`import numba.cuda` (in the first-call child, before sgblas)"),
        ("import_after_numba_s", "`import sgblas` with numba.cuda already imported"),
        ("handle_s", "`sgblas.Handle(stream=...)`"),
        ("first_call_s", "first `sgemm` call, until the stream is synchronised"),
        ("second_call_s", "second `sgemm` call, until the stream is synchronised"),
        ("import_handle_first_call_s", "**`import sgblas` + handle + first call** (numba.cuda and arrays ready)"),
        ("sgblas_first_import_s", "sgblas first: `import sgblas` before anything touches CUDA"),
        ("sgblas_first_handle_s", "sgblas first: `sgblas.Handle()`, creating the CUDA context"),
        ("sgblas_first_first_call_s", "sgblas first: first `sgemm` call, until synchronised"),
        ("sgblas_first_total_s", "**sgblas first: import + handle (context) + first call**"),
    ):
        stats = startup.get(key) or {}
        if stats.get("n"):
            rows.append([label, f"{stats['median'] * 1e3:.1f}", f"{stats['min'] * 1e3:.1f}",
                         f"{stats['max'] * 1e3:.1f}", stats["n"]])
    table = markdown_table(["step", "median ms", "min ms", "max ms", "processes"], rows,
                           align="lrrrr")
    events = startup.get("compile_events") or {}
    lines = [table, ""]
    for phase, counts in events.items():
        text = ", ".join(f"{kind}: {value:g}" for kind, value in counts.items()) or "none recorded"
        lines.append(f"- compile events during {phase} (median over processes): {text}")
    return "\n".join(lines).rstrip()
