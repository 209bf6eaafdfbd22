"""Made-up result documents for testing the loading, tables, figures and notebook on a CPU.

Every document made here carries ``"synthetic": True`` and the device name
``SYNTHETIC TEST DEVICE``; the figures stamp it with a banner. Write them only into temporary
folders, never into ``perf/results/`` or ``docs/img/``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from perf import bench, overhead, results_io

SYNTHETIC_DEVICE = {
    "index": 0, "simulator": False, "name": "SYNTHETIC TEST DEVICE",
    "compute_capability": [9, 0], "multiprocessors": 132, "clock_khz": 1980000,
    "l2_bytes": 60 * 2**20, "memory_bytes": 141 * 10**9, "driver_version": "0.0",
    "driver_cuda_version": [13, 0], "runtime_version": [13, 0],
}

_ENVIRONMENT = {
    "host": "synthetic", "platform": "synthetic",
    "versions": {"python": "3.12", "sgblas": "0.0", "numba": "0", "numba_cuda": "0", "numpy": "0"},
    "env": {}, "git": {"commit": None, "dirty": None},
}


def _samples(rate_tflops: float, flop: int, n: int, rng: np.random.Generator) -> list[float]:
    base = flop / (rate_tflops * 1e12)
    return list(base * (1.0 + 0.02 * rng.standard_normal(n).clip(-2, 2)))


def synthetic_bench(created: str = "2026-01-02T03:04:05+00:00", with_cublas: bool = True,
                    shapes: str = "all") -> dict[str, Any]:
    """A bench document over the full case list with invented timings (one failed, one skipped)."""
    rng = np.random.default_rng(0)
    args = bench.parse_args(["--shapes", shapes])
    cases = bench.build_cases(bench.selected_shapes(args), bench.PAIRS)
    records = []
    for i, case in enumerate(cases):
        record = bench._base_record(case)
        size_factor = math.log2(max(case.m * case.n * case.k, 2)) / 40
        sg_rate = 30.0 * size_factor + (2.0 if case.pair == "NN" else 0.0)
        cb_rate = 45.0 * size_factor
        sg = bench.LibraryRun("sgblas", lambda i: None)
        sg.samples = _samples(sg_rate, case.flop, 7, rng)
        record["sgblas"] = bench.library_record(sg, case, {"call": "sgblas.sgemm"})
        record["kernel"] = f"synthetic_kernel_{case.pair.lower()}"
        record["explanation"] = "synthetic"
        if with_cublas:
            cb = bench.LibraryRun("cublas", lambda i: None)
            cb.samples = _samples(cb_rate, case.flop, 7, rng)
            record["cublas"] = bench.library_record(cb, case, {"compute_type": "CUBLAS_COMPUTE_32F_PEDANTIC"})
            record["ratio"] = (record["cublas"]["times_s"]["median"]
                               / record["sgblas"]["times_s"]["median"])
        rel = 1e-7 * (1 + i % 5)
        record["check"] = {"reference": "cublas_pedantic" if with_cublas else "host_fp64_projection",
                           "rel_error": rel, "tolerance": 1e-5, "passed": True}
        record["status"] = "ok"
        record["reason"] = None
        records.append(record)
    # One failed check and one case the time budget skipped, to exercise those paths.
    records[1]["check"].update(rel_error=3e-4, passed=False)
    records[1]["status"] = "failed"
    records[1]["reason"] = "synthetic failure"
    records[-1] = bench._skipped(cases[-1], "synthetic: time budget")
    peak, source = results_io.fp32_peak(SYNTHETIC_DEVICE)
    return {
        "schema": results_io.BENCH_SCHEMA, "kind": "bench", "synthetic": True,
        "created": created, "host": "synthetic", "command": ["synthetic"],
        "environment": _ENVIRONMENT, "device": dict(SYNTHETIC_DEVICE),
        "peak_fp32_tflops": {"value": peak, "source": source},
        "settings": {"backend": "cupy" if with_cublas else "numba", "timer": "cuda-events",
                     "cublas": {"compute_type": "CUBLAS_COMPUTE_32F_PEDANTIC"} if with_cublas else None},
        "cases": records,
        "summary": {"cases": len(records),
                    **{s: sum(r["status"] == s for r in records)
                       for s in ("ok", "failed", "error", "skipped")},
                    "elapsed_s": 1.0},
    }


def synthetic_overhead(created: str = "2026-01-02T03:10:00+00:00") -> dict[str, Any]:
    """An overhead document with invented per-call times and start-up numbers."""
    invented = {"sgemm_numba": 40.0, "sgemm_cupy": 55.0, "gemm_cupy": 70.0, "gemm_torch": 75.0,
                "cublas_cupy": 20.0, "numba_launch": 25.0}
    methods = []
    for size in overhead.SIZES:
        for key, label in overhead.METHODS.items():
            if key == "gemm_torch" and size == 256:
                methods.append({"method": key, "label": label, "size": size,
                                "status": "skipped", "reason": "synthetic: torch missing"})
                continue
            host = [invented[key] * (1 + 0.01 * j) + size / 64 for j in range(5)]
            methods.append({"method": key, "label": label, "size": size, "status": "ok",
                            "reason": None, "calls": 2000, "repeats": 5,
                            "host_us_per_call": results_io.summarize(host),
                            "drained_us_per_call": results_io.summarize([h + 1 for h in host])})
    imports = [{"import_s": 1.5 + 0.1 * j} for j in range(3)]
    children = [{"numba_import_s": 0.8, "import_after_numba_s": 0.7, "handle_s": 0.01,
                 "first_call_s": 0.002, "second_call_s": 0.0001,
                 "counts": {"import": {"compile": 0, "run_pass": 0, "compiler_lock": 0},
                            "handle": {"compile": 0, "run_pass": 0, "compiler_lock": 0},
                            "first_call": {"compile": 0, "run_pass": 0, "compiler_lock": 0},
                            "second_call": {"compile": 0, "run_pass": 0, "compiler_lock": 0}}}
                for _ in range(3)]
    startup = overhead.summarize_startup(imports, children)
    startup.update(status="ok", reason=None, size=256)
    return {
        "schema": results_io.OVERHEAD_SCHEMA, "kind": "overhead", "synthetic": True,
        "created": created, "host": "synthetic", "command": ["synthetic"],
        "environment": _ENVIRONMENT, "device": dict(SYNTHETIC_DEVICE),
        "settings": {}, "methods": methods, "startup": startup, "elapsed_s": 1.0,
    }


def synthetic_accuracy() -> dict[str, Any]:
    """An accuracy document in ``perf/accuracy.py``'s format: both distributions, K = 1024 to
    262144, errors growing with K."""
    rows = []
    for dist, base in (("normal", 3e-7), ("uniform", 6e-8)):
        for i in range(9):
            k = 1024 * 2**i
            sgblas_error, cublas_error = base * (1 + 0.1 * i), base * (1 + 0.2 * i)
            rows.append(dict(pair="NN", dist=dist, m=256, n=256, k=k, kernel="synthetic", splits=min(128, 2**i),
                             sgblas_rel_error=sgblas_error, cublas_rel_error=cublas_error,
                             ratio=sgblas_error / cublas_error))
    return {"kind": "accuracy", "schema": 1, "synthetic": True, "created": "2026-01-01T00:00:00+00:00",
            "device": SYNTHETIC_DEVICE, "settings": {"m": 256}, "accuracy": rows}


def write_synthetic_results(directory: Path, overhead_too: bool = True, accuracy_too: bool = True) -> list[Path]:
    """Write a synthetic bench (and overhead, and accuracy) document into ``directory``; returns
    the paths."""
    paths = [results_io.save_results(synthetic_bench(), directory)]
    if overhead_too:
        paths.append(results_io.save_results(synthetic_overhead(), directory))
    if accuracy_too:
        import json

        path = Path(directory) / "accuracy_20260101-000000_SYNTHETIC.json"
        path.write_text(json.dumps(synthetic_accuracy()))
        paths.append(path)
    return paths
