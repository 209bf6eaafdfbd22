"""Host-side logic of ``perf.classes``: the shape classes and their draws, the rotation of pairs
and ld classes, ``--list`` without a GPU, the summaries and bars on made-up rows, the document
a run writes (the measurement replaced by made-up records), and one dry run under the CUDA
simulator (its numbers mean nothing).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from perf import bench, classes, environment, sweep

REPO_ROOT = Path(__file__).resolve().parents[2]
SIMULATOR = environment.simulator_enabled()
SEED = classes.DEFAULT_SEED


def _in(value: int, lo: int, hi: int) -> bool:
    return lo <= value <= hi


def _within(name: str, m: int, n: int, k: int) -> bool:
    """The class's ranges, written out again from the issue's text."""
    small, large = sorted((m, n))
    if name == "small":
        return all(_in(v, 32, 600) for v in (m, n, k))
    if name == "narrow":
        return _in(small, 17, 127) and _in(large, 1000, 20000) and _in(k, 1000, 20000) and 2 * m * n * k <= 2 ** 37
    if name == "lowk":
        return _in(k, 1, 16) and _in(m, 1000, 20000) and _in(n, 1000, 20000)
    if name == "tallthin":
        return (_in(n, 1, 64) and _in(k, 1, 64) and _in(m, 100000, 2000000)
                and 4 * (m * k + k * n + m * n) <= 2 ** 30)
    if name == "skinny":
        return _in(small, 1, 16) and _in(large, 1000, 20000) and _in(k, 1000, 20000)
    if name == "midprime":
        return all(_in(v, 700, 6000) and all(v % d for d in range(2, math.isqrt(v) + 1)) for v in (m, n, k))
    if name == "longk":
        return _in(k, 16384, 100000) and _in(m, 1, 2000) and _in(n, 1, 2000) and 2 * m * n * k <= 2 ** 37
    raise AssertionError(name)


# --------------------------------------------------------------------------------------------
# The classes and their draws


def test_every_class_is_defined_with_bars():
    assert classes.CLASS_NAMES == ("small", "narrow", "lowk", "tallthin", "skinny", "midprime", "longk")
    for cls in classes.CLASSES:
        assert cls.bars[0] == classes.Bar("shapes", ">=", 30)
        assert cls.kind in ("speed", "bandwidth", "accuracy")
    kinds = {c.name: c.kind for c in classes.CLASSES}
    assert [n for n, k in kinds.items() if k == "bandwidth"] == ["lowk", "tallthin", "skinny"]
    assert kinds["longk"] == "accuracy"


@pytest.mark.parametrize("cls", classes.CLASSES, ids=classes.CLASS_NAMES)
def test_draws_stay_in_their_class_and_follow_the_seed(cls):
    cases = classes.class_cases(cls, 96, SEED)
    shapes = [(c.m, c.n, c.k) for c in cases]
    assert shapes == [(c.m, c.n, c.k) for c in classes.class_cases(cls, 96, SEED)]
    assert shapes != [(c.m, c.n, c.k) for c in classes.class_cases(cls, 96, SEED + 1)]
    bad = [s for s in shapes if not _within(cls.name, *s)]
    assert not bad, f"{cls.name}: {bad[:3]} outside the class"
    assert len(set(shapes)) > 80, "drawn, not repeated"
    # the sampler alone: the small side (when there is one) is m
    rng = np.random.default_rng(1)
    for _ in range(200):
        m, n, k = cls.sampler(rng)
        assert _within(cls.name, m, n, k)
        if cls.swap_sides:
            assert m < n


def test_draws_spread_over_their_ranges():
    tall = [(c.n, c.k) for c in classes.class_cases(classes._BY_NAME["tallthin"], 200, SEED)]
    below = sum(min(n, k) < 17 for n, k in tall)
    assert 0.05 * len(tall) < below < 0.35 * len(tall), "mostly 17..64, some below"
    lowk = Counter(c.k for c in classes.class_cases(classes._BY_NAME["lowk"], 200, SEED))
    assert lowk[1] > 0 and lowk[16] > 0 and len(lowk) >= 12
    primes = {c.m for c in classes.class_cases(classes._BY_NAME["midprime"], 200, SEED)}
    assert min(primes) < 1500 and max(primes) > 5000


def test_next_prime():
    assert [classes.next_prime(v) for v in (700, 701, 702, 5987, 2, 1)] == [701, 701, 709, 5987, 2, 2]


def test_each_class_covers_every_pair_and_ld_class():
    by_class = classes.selected_cases(classes.parse_args([]))
    assert list(by_class) == list(classes.CLASS_NAMES)
    indices = [c.index for cases in by_class.values() for c in cases]
    assert len(indices) == len(set(indices)) == 7 * classes.DEFAULT_COUNT
    for name, cases in by_class.items():
        assert len(cases) == classes.DEFAULT_COUNT >= 30
        assert {c.shape_set for c in cases} == {name}
        assert {c.pair for c in cases} == set(bench.PAIRS)
        assert {c.ld_class for c in cases} == set(sweep.LD_CLASSES)
        # every (pair, ld class) in each run of 16 draws
        assert {(c.pair, c.ld_class) for c in cases[:16]} == {(p, ld) for p in bench.PAIRS for ld in sweep.LD_CLASSES}
        for c in cases:
            assert (c.lda, c.ldb, c.ldc) == tuple(sweep.leading_dimension(r, c.ld_class)
                                                  for r in (c.a_dims[0], c.b_dims[0], c.m))
            assert c.offsets == (sweep.OFFSETS if c.ld_class == "offset" else (0, 0, 0))
        if classes._BY_NAME[name].swap_sides:
            sides = {(c.pair, c.m < c.n) for c in cases}
            assert sides == {(p, s) for p in bench.PAIRS for s in (True, False)}, "each pair meets both sides"


def test_a_class_draws_alike_whichever_classes_run():
    alone = classes.selected_cases(classes.parse_args(["--classes", "skinny", "--count", "12"]))
    everything = classes.selected_cases(classes.parse_args(["--count", "12"]))
    assert list(alone) == ["skinny"] and alone["skinny"] == everything["skinny"]
    assert classes.parse_args(["--classes", "longk,small"]).classes == ("small", "longk")


def test_max_dim_clamps_after_the_draw():
    cls = classes._BY_NAME["narrow"]
    full = classes.class_cases(cls, 8, SEED)
    tiny = classes.class_cases(cls, 8, SEED, max_dim=6)
    assert [(c.m, c.n, c.k) for c in tiny] == [(min(c.m, 6), min(c.n, 6), min(c.k, 6)) for c in full]
    assert [(c.pair, c.ld_class, c.index) for c in tiny] == [(c.pair, c.ld_class, c.index) for c in full]


# --------------------------------------------------------------------------------------------
# Command lines without a GPU


def test_list_needs_no_gpu(capsys):
    assert classes.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"seed {SEED}\n")
    assert out.rstrip().splitlines()[-1] == "210 cases in 7 classes"
    assert "skinny (bandwidth: m or n in 1..16" in out
    assert classes.main(["--list", "--classes", "midprime", "--count", "4", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("seed 3\n") and out.rstrip().splitlines()[-1] == "4 cases in 1 classes"


def test_script_lists_by_path():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "perf/classes.py", "--list", "--count", "2"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("14 cases in 7 classes")


@pytest.mark.parametrize("argv", [["--classes", "wide"], ["--classes", ","], ["--count", "0"],
                                  ["--min-reps", "9", "--max-reps", "3"], ["--max-dim", "0"]])
def test_bad_arguments_exit(argv):
    with pytest.raises(SystemExit) as info:
        classes.parse_args(argv)
    assert info.value.code == 2


@pytest.mark.skipif(not SIMULATOR, reason="the simulator has no CuPy arrays; on a GPU cuBLAS runs")
def test_cublas_needs_cupy(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    assert classes.main(["--count", "1", "--out", str(tmp_path)]) == 2
    assert "--cublas needs CuPy arrays" in capsys.readouterr().err
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")
    assert classes.main(["--classes", "longk", "--count", "1", "--out", str(tmp_path)]) == 2
    assert "refusing to run cuBLAS" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# --------------------------------------------------------------------------------------------
# Summaries on made-up rows


def _record(case: int, shape_set: str, m: int, n: int, k: int, sgblas_s: float | None, cublas_s: float | None,
            pair: str = "NN", ld_class: str = "tight", status: str = "ok") -> dict:
    """A case record as ``perf.sweep.run_cases`` writes it."""
    return {"case": case, "shape_set": shape_set, "m": m, "n": n, "k": k, "pair": pair, "ld_class": ld_class,
            "status": status, "reason": None if status == "ok" else "made up", "chosen": "variant_x",
            "plain": {"seconds": sgblas_s} if sgblas_s else None, "cublas_s": cublas_s}


def test_speed_summary_and_bars():
    cls = classes._BY_NAME["small"]
    ratios = [1.2] * 28 + [0.9, 1.5]
    records = [_record(i, "small", 64, 64, 64, 1e-5, 1e-5 * r, pair=bench.PAIRS[i % 4]) for i, r in enumerate(ratios)]
    records += [_record(99, "small", 64, 64, 64, 1e-5, 1e-6, status="failed"),  # left out of the figures
                _record(98, "midprime", 701, 701, 701, 1e-4, 1e-4)]
    rows = classes.class_rows(records, copy_rate=3e12)
    assert [r["class"] for r in rows].count("small") == 31 and "share" not in rows[0]
    assert rows[0]["ratio"] == pytest.approx(1.2) and rows[0]["chosen"] == "variant_x"
    s = classes.summarize_class(cls, rows)
    assert s["shapes"] == s["compared"] == 30 and s["left_out"] == 1
    assert s["geomean"] == pytest.approx(math.exp(np.mean(np.log(ratios))))
    assert s["min"] == pytest.approx(0.9) and s["max"] == pytest.approx(1.5)
    assert set(s["by_pair"]) == set(bench.PAIRS) and s["by_ld_class"]["tight"]["shapes"] == 30
    bars = {b["label"]: b for b in s["bars"]}
    assert bars["shapes >= 30"]["met"] and bars["geomean >= 1"]["met"] and bars["min >= 0.85"]["met"]
    assert s["met"] is True
    worse = classes.summarize_class(cls, classes.class_rows(records[:29] + [_record(29, "small", 64, 64, 64, 1e-5,
                                                                                     8e-6)], None))
    assert worse["min"] == pytest.approx(0.8)
    assert {b["label"]: b["met"] for b in worse["bars"]}["min >= 0.85"] is False and worse["met"] is False
    empty = classes.summarize_class(cls, [])
    assert empty["shapes"] == 0 and empty["geomean"] is None and empty["met"] is False
    assert [b["met"] for b in empty["bars"]] == [False, None, None]


def test_bandwidth_summary_copy_share():
    cls = classes._BY_NAME["lowk"]
    m, n, k = 4000, 5000, 8
    nbytes = 4 * (m * k + k * n + m * n)
    assert classes.moved_bytes(m, n, k) == nbytes
    copy_rate = 2.5e12
    # shares 0.9 and 0.6 (geomean sqrt(0.54), below 0.8); cuBLAS half as fast
    records = [_record(i, "lowk", m, n, k, nbytes / (share * copy_rate), 2 * nbytes / (share * copy_rate))
               for i, share in enumerate([0.9, 0.6])]
    rows = classes.class_rows(records, copy_rate)
    assert [r["share"] for r in rows] == [pytest.approx(0.9), pytest.approx(0.6)]
    assert [r["cublas_share"] for r in rows] == [pytest.approx(0.45), pytest.approx(0.3)]
    assert all(r["bytes"] == nbytes and r["ratio"] == pytest.approx(2.0) for r in rows)
    s = classes.summarize_class(cls, rows)
    assert s["share_geomean"] == pytest.approx(math.sqrt(0.54)) and s["share_min"] == pytest.approx(0.6)
    assert s["cublas_share_geomean"] == pytest.approx(math.sqrt(0.54) / 2)
    bars = {b["stat"]: b["met"] for b in s["bars"]}
    assert bars == {"shapes": False, "geomean": True, "share_geomean": False}
    # without a copy rate the share is not measured; without cuBLAS no ratio, the shapes still count
    alone = classes.summarize_class(cls, classes.class_rows([_record(0, "lowk", m, n, k, 1e-4, None)], None))
    assert alone["shapes"] == 1 and alone["compared"] == 0 and alone["share_geomean"] is None
    assert {b["stat"]: b["met"] for b in alone["bars"]} == {"shapes": False, "geomean": None, "share_geomean": None}
    assert "copy share" in classes.class_table(cls, rows) and "90%" in classes.class_table(cls, rows)


def test_small_products_pool_their_errors_over_draws():
    assert classes.accuracy_draws(2000, 2000) == 1
    assert classes.accuracy_draws(32, 32) == 1
    assert classes.accuracy_draws(6, 1) == -(-classes.ACCURACY_ELEMENTS // 6)
    assert classes.accuracy_draws(1, 1) == classes.MAX_DRAWS
    # The pooled error is the stacked matrices' relative Frobenius norm.
    pooled = classes._pooled([(0.1, 3.0), (0.2, 4.0)])
    assert pooled == pytest.approx(math.hypot(0.3, 0.8) / 5.0)
    assert classes._pooled([(0.5, 2.0)]) == pytest.approx(0.5)
    assert classes._pooled([(0.25, 0.0)]) == pytest.approx(0.25)  # a zero product: the absolute error
    assert classes._pooled([]) is None


def test_accuracy_summary():
    cls = classes._BY_NAME["longk"]

    def row(case, dist, sg, cb, status="ok"):
        return {"class": "longk", "case": case, "dist": dist, "status": status, "sgblas_error": sg, "cublas_error": cb,
                "error_ratio": sg / cb if cb else None, "m": 8, "n": 8, "k": 20000, "pair": "NN",
                "ld_class": "tight", "chosen": "x"}

    rows = [row(i, d, 1e-6, 2e-6) for i in range(30) for d in classes.DISTRIBUTIONS]
    s = classes.summarize_accuracy(cls, rows)
    assert s["shapes"] == 30 and s["compared"] == 60 and s["worse"] == 0
    assert s["error_ratio_geomean"] == pytest.approx(0.5) and s["met"] is True
    rows[-1] = row(29, "uniform", 3e-6, 2e-6)
    rows.append(row(30, "normal", None, None, status="error"))
    s = classes.summarize_accuracy(cls, rows)
    assert s["worse"] == 1 and s["error_ratio_max"] == pytest.approx(1.5) and s["left_out"] == 1
    assert s["by_dist"]["uniform"]["worse"] == 1 and s["by_dist"]["normal"]["worse"] == 0
    assert {b["stat"]: b["met"] for b in s["bars"]} == {"shapes": True, "worse": False} and s["met"] is False
    alone = classes.summarize_accuracy(cls, [row(0, "normal", 1e-6, None)])
    assert alone["shapes"] == 1 and alone["worse"] is None and alone["met"] is False


# --------------------------------------------------------------------------------------------
# A run, its measurement made up


def test_a_run_writes_its_document(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake_run_cases(cases, args, *, tool, seed, argv):
        seen.update(cases=cases, plain_only=args.plain_only, tool=tool, seed=seed)
        records = [_record(c.index, c.shape_set, c.m, c.n, c.k, 1e-4, 1.1e-4, c.pair, c.ld_class,
                           status="failed" if c.index == 10001 else "ok") for c in cases]
        doc = {"schema": sweep.SWEEP_SCHEMA, "kind": tool, "created": "2026-12-05T00:00:00+00:00",
               "device": {"name": "made up"}, "settings": {"seed": seed}, "cases": records, "rows": [],
               "summary": {"cases": len(records), "ok": len(records) - 1, "failed": 1, "error": 0, "skipped": 0}}
        return doc, 1

    def fake_extras(doc, args, *, want_copy, accuracy_cases, deadline):
        seen.update(want_copy=want_copy, accuracy=accuracy_cases)
        rows = [{"class": "longk", **sweep._case_fields(c), "dist": d, "status": "ok", "chosen": "x",
                 "sgblas_error": 1e-6, "cublas_error": 2e-6, "error_ratio": 0.5} for c in accuracy_cases
                for d in classes.DISTRIBUTIONS]
        return {"bytes_per_s": 2e12}, rows

    monkeypatch.setattr(classes, "_setup_error", lambda args: None)
    monkeypatch.setattr(sweep, "run_cases", fake_run_cases)
    monkeypatch.setattr(classes, "measure_extras", fake_extras)
    rc = classes.main(["--classes", "narrow,skinny,longk", "--count", "3", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1, out  # a failed case
    assert seen["tool"] == "classes" and seen["seed"] == SEED and seen["plain_only"]
    assert [c.shape_set for c in seen["cases"]] == ["narrow"] * 3 + ["skinny"] * 3
    assert seen["want_copy"] and [c.shape_set for c in seen["accuracy"]] == ["longk"] * 3
    (path,) = tmp_path.glob("classes_20261205-000000_made-up.json")
    doc = json.loads(path.read_text())
    assert doc["classes_schema"] == classes.CLASSES_SCHEMA and doc["classes"]["seed"] == SEED
    summary = doc["classes"]["summary"]
    assert list(summary) == ["narrow", "skinny", "longk"]
    assert summary["narrow"]["shapes"] == 2 and summary["narrow"]["left_out"] == 1
    assert summary["skinny"]["geomean"] == pytest.approx(1.1) and summary["skinny"]["share_geomean"] is not None
    assert summary["longk"]["worse"] == 0 and doc["summary"]["accuracy_rows"] == 6
    assert len(doc["classes"]["rows"]) == 6 and doc["classes"]["met"] is False  # 3 shapes, not 30
    assert "### skinny" in out and "FAILED" in out and "| longk |" in out and "NOT MET" in out


# --------------------------------------------------------------------------------------------
# A dry run under the simulator


@pytest.mark.skipif(not SIMULATOR, reason="a dry run is for the CUDA simulator; on a GPU run "
                                          "python -m perf.classes --count 2 instead")
@pytest.mark.slow
def test_dry_run_under_simulator(tmp_path, capsys):
    rc = classes.main(["--count", "1", "--max-dim", "8", "--no-cublas", "--reps", "1", "--warmup", "0",
                       "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    (path,) = tmp_path.glob("classes_*_CUDA-simulator.json")
    doc = sweep.load_docs([path])[0]
    assert doc["kind"] == "classes" and doc["device"]["simulator"]
    assert {c["shape_set"] for c in doc["cases"]} == set(classes.CLASS_NAMES) - {"longk"}
    assert all(c["status"] == "ok" and c["timed"] == 0 for c in doc["cases"])
    copy = doc["classes"]["copy"]
    assert copy["bytes_each_way"] == classes.SIMULATOR_COPY_BYTES and copy["bytes_per_s"] > 0
    rows = doc["classes"]["rows"]
    assert len(rows) == 6 and all(r["sgblas_s"] > 0 and r["ratio"] is None for r in rows)
    assert all(r["share"] > 0 for r in rows if r["class"] in ("lowk", "tallthin", "skinny"))
    accuracy = doc["classes"]["accuracy"]
    assert [r["dist"] for r in accuracy] == list(classes.DISTRIBUTIONS)
    for r in accuracy:  # each row named on failure: a wrong element here once showed only as all() failing
        assert r["status"] == "ok" and r["sgblas_error"] < 1e-5 and r["cublas_error"] is None, r
    assert doc["classes"]["summary"]["skinny"]["shapes"] == 1
