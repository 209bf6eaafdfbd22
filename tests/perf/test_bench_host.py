"""Host-side logic of the benchmarks: arguments, case lists, planning, files, tables.

The last tests run ``perf.bench`` and ``perf.overhead`` end to end under the CUDA simulator at
tiny sizes (a dry run of the machinery; the numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from perf import bench, environment, overhead, results_io
from perf_synthetic import synthetic_bench, synthetic_overhead, write_synthetic_results

REPO_ROOT = Path(__file__).resolve().parents[2]
SIMULATOR = environment.simulator_enabled()


# --------------------------------------------------------------------------------------------
# Arguments and cases


@pytest.mark.parametrize("text, expected", [
    ("4096x4096x64", (4096, 4096, 64)),
    ("8192X128x8192", (8192, 128, 8192)),
    ("5000,3000,1000", (5000, 3000, 1000)),
])
def test_parse_shape(text, expected):
    assert bench.parse_shape(text) == expected


@pytest.mark.parametrize("text", ["4096x4096", "0x1x1", "-1x2x3", "axbxc", "1x2x3x4", ""])
def test_parse_shape_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_shape(text)


def test_parse_pairs():
    assert bench.parse_pairs("nt, TT,NT") == ("NT", "TT")
    assert bench.parse_pairs("all") == ("NN", "NT", "TN", "TT")
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_pairs("NN,TX")


def test_full_case_list():
    args = bench.parse_args([])
    cases = bench.build_cases(bench.selected_shapes(args), args.pairs)
    assert len(cases) == 40
    shapes = {(c.m, c.n, c.k) for c in cases}
    assert shapes == {(s, s, s) for s in (1024, 2048, 4096, 8192, 16384)} | set(bench.RECT_SHAPES)
    for shape in shapes:
        assert sorted(c.pair for c in cases if (c.m, c.n, c.k) == shape) == ["NN", "NT", "TN", "TT"]
    flops = [c.flop for c in cases]
    assert flops == sorted(flops), "cheapest first, so a spent time budget drops the largest"
    assert {(c.m, c.pair) for c in cases[-4:]} == {(16384, p) for p in bench.PAIRS}


@pytest.mark.parametrize("pair, a_dims, b_dims", [
    ("NN", (5, 7), (7, 3)), ("NT", (5, 7), (3, 7)), ("TN", (7, 5), (7, 3)), ("TT", (7, 5), (3, 7)),
])
def test_case_dimensions(pair, a_dims, b_dims):
    case = bench.Case(5, 3, 7, pair[0], pair[1], "custom")
    assert case.a_dims == a_dims and case.b_dims == b_dims
    assert (case.lda, case.ldb, case.ldc) == (a_dims[0], b_dims[0], 5)
    assert case.elements == (35, 21, 15)
    assert case.working_set_bytes == 4 * (35 + 21 + 15)
    assert case.flop == 2 * 5 * 3 * 7


@pytest.mark.parametrize("pair, lds, extents", [
    # m=5, n=3, k=7, pad 2: A N is 5x7 -> lda 7, extent (7 - 1) * 7 + 5 = 47; C is 5x3 -> ldc 7, 19
    ("NN", (7, 9, 7), (47, 25, 19)), ("NT", (7, 5, 7), (47, 33, 19)),
    ("TN", (9, 9, 7), (43, 25, 19)), ("TT", (9, 5, 7), (43, 33, 19)),
])
def test_case_dimensions_with_pad_and_offsets(pair, lds, extents):
    case = bench.Case(5, 3, 7, pair[0], pair[1], "custom", pad=2, offsets=(1, 2, 3))
    assert (case.lda, case.ldb, case.ldc) == lds
    assert case.elements == extents
    assert case.allocated == (extents[0] + 1, extents[1] + 2, extents[2] + 3)
    assert case.working_set_bytes == 4 * (sum(extents) + 6)
    # the extent ends at the last element: one column of ld per column but the last
    for (rows, cols), ld, extent in zip((case.a_dims, case.b_dims, (5, 3)), lds, extents):
        assert extent == (cols - 1) * ld + rows < ld * cols


def test_case_label_shows_pad_and_offsets():
    assert bench.Case(5, 3, 7, "N", "N", "custom").label == "5x3x7"
    assert bench.Case(5, 3, 7, "N", "N", "custom", pad=3, offsets=(1, 2, 3)).label == \
        "5x3x7 ld+3 off(1,2,3)"
    assert bench.Case(5, 3, 7, "N", "N", "custom", pad=3).label == "5x3x7 ld+3"
    assert bench.Case(5, 3, 7, "N", "N", "custom", offsets=(0, 0, 1)).label == "5x3x7 off(0,0,1)"


@pytest.mark.parametrize("argv, pad, offsets", [
    ([], 0, (0, 0, 0)),
    (["--offset", "3"], 0, (3, 3, 3)),
    (["--offset", "1,2,3", "--pad", "4"], 4, (1, 2, 3)),
    (["--offset", " 0, 5 ,0"], 0, (0, 5, 0)),
])
def test_pad_and_offset_arguments(argv, pad, offsets):
    args = bench.parse_args(["--shape", "5x3x7", *argv])
    assert args.pad == pad and tuple(args.offset) == offsets
    cases = bench.build_cases(bench.selected_shapes(args), args.pairs, args.pad, args.offset)
    assert len(cases) == 4
    assert all(c.pad == pad and c.offsets == offsets for c in cases)
    record = bench._base_record(cases[0])
    assert record["pad"] == pad and record["offsets"] == list(offsets)
    assert record["lda"] == 5 + pad


@pytest.mark.parametrize("argv, named", [
    (["--pad", "-1"], "--pad -1"), (["--offset=-1"], "'-1'"), (["--offset=1,-2,3"], "-2"),
    (["--offset", "1,2"], "'1,2'"), (["--offset", "x"], "'x'"), (["--offset", "1,2,3,4"], "'1,2,3,4'"),
])
def test_bad_pad_and_offset_exit_naming_the_value(argv, named, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert named in capsys.readouterr().err


def test_list_shows_pad_and_offsets(capsys):
    assert bench.main(["--list", "--pad", "3", "--offset", "1,2,3", "--shape", "50x40x30",
                       "--pairs", "NN,TT"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "2 cases"
    assert all("50x40x30 ld+3 off(1,2,3)" in line for line in lines[:2])
    case = bench.Case(50, 40, 30, "N", "N", "custom", 3, (1, 2, 3))
    assert f"{case.working_set_bytes / 2**20:10.1f} MiB" in lines[0]


def test_selected_shapes_options():
    quick = bench.parse_args(["--quick"])
    assert [s[:3] for s in bench.selected_shapes(quick)] == [
        (1024, 1024, 1024), (4096, 4096, 4096), (5000, 3000, 1000), (4096, 4096, 64)]
    assert quick.target_s == 0.05 and quick.budget_s == 90.0
    square = bench.parse_args(["--shapes", "square", "--max-dim", "4096"])
    assert [s[0] for s in bench.selected_shapes(square)] == [1024, 2048, 4096]
    explicit = bench.parse_args(["--shape", "10x20x30", "--shape", "1x2x3"])
    assert bench.selected_shapes(explicit) == [(10, 20, 30, "custom"), (1, 2, 3, "custom")]
    fixed = bench.parse_args(["--reps", "7"])
    assert fixed.min_reps == fixed.max_reps == 7 and math.isinf(fixed.max_case_s)


@pytest.mark.parametrize("argv", [["--reps", "0"], ["--min-reps", "10", "--max-reps", "5"],
                                  ["--target-s", "0"], ["--pairs", "XY"]])
def test_bad_arguments_exit(argv):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)


def test_list_needs_no_gpu(capsys):
    assert bench.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "40 cases" in out and "1000x1000x100000" in out


# --------------------------------------------------------------------------------------------
# Planning


def test_buffer_sets():
    l2 = 60 * 2**20
    assert bench.buffer_sets(10 * 2**30, l2) == 1  # 16384^3: far beyond L2
    ws_1024 = bench.Case(1024, 1024, 1024, "N", "N", "square").working_set_bytes
    sets = bench.buffer_sets(ws_1024, l2)
    assert sets * ws_1024 >= 4 * l2 and (sets - 1) * ws_1024 < 4 * l2
    assert bench.buffer_sets(1, l2) == 32  # capped
    assert bench.buffer_sets(4 * l2, l2) == 1


def test_plan_reps():
    # fast call: the time target asks for more than max_reps
    assert bench.plan_reps(70e-6, 0.3, 5, 400, 6.0) == (400, False)
    # mid-size call: target / t_call
    assert bench.plan_reps(1e-3, 0.3, 5, 400, 6.0) == (300, False)
    # 16384^3 at ~50 TFLOP/s: min_reps dominates
    assert bench.plan_reps(0.18, 0.3, 5, 400, 6.0) == (5, False)
    # a very slow kernel: cut below min_reps, never below 3
    assert bench.plan_reps(2.0, 0.3, 5, 400, 6.0) == (3, True)
    assert bench.plan_reps(10.0, 0.3, 5, 400, 6.0) == (3, True)
    assert bench.plan_reps(0.0, 0.3, 5, 400, 6.0) == (5, False)


def test_plan_batch():
    batch, spin = bench.plan_batch(70e-6, 50e-6, 400)
    assert batch == bench.MAX_BATCH
    assert spin == pytest.approx(1.5 * 50e-6 * batch + 2e-4)
    assert bench.plan_batch(0.18, 50e-6, 5) == (1, pytest.approx(1.5 * 50e-6 + 2e-4))
    assert bench.plan_batch(1e-3, 1.0, 400)[1] == bench.MAX_SPIN_S


def test_full_run_fits_the_time_budget_on_paper():
    """With cuBLAS-like rates, the planned timed work of the full list stays near 1.5 minutes."""
    args = bench.parse_args([])
    total = 0.0
    for case in bench.build_cases(bench.selected_shapes(args), args.pairs):
        t_call = case.flop / 40e12  # 40 TFLOP/s for both libraries
        reps, _ = bench.plan_reps(t_call, args.target_s, args.min_reps, args.max_reps, args.max_case_s)
        total += 2 * (reps + args.warmup + 1) * t_call
    assert total < 120, f"planned GPU work {total:.0f} s leaves no room in a 4-minute run"


def test_tf32_override():
    env: dict[str, str] = {}
    assert bench.prepare_tf32_override(env)[0] and env["NVIDIA_TF32_OVERRIDE"] == "0"
    env = {"NVIDIA_TF32_OVERRIDE": "0"}
    assert bench.prepare_tf32_override(env) == (True, "already 0 in the environment")
    ok, why = bench.prepare_tf32_override({"NVIDIA_TF32_OVERRIDE": "1"})
    assert not ok and "--no-cublas" in why


def test_refuses_cublas_with_tf32_override(monkeypatch, capsys):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")
    assert bench.main(["--shape", "8x8x8"]) == 2
    assert "refusing to run cuBLAS" in capsys.readouterr().err


def test_no_gpu_is_a_clear_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "0")
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    monkeypatch.setattr(bench, "_gpu_present", lambda: False)
    assert bench.main(["--quick"]) == 2
    assert overhead.main(["--no-startup"]) == 2
    assert capsys.readouterr().err.count("no CUDA GPU is usable here") == 2


# --------------------------------------------------------------------------------------------
# Statistics, files, tables


def test_summarize_matches_numpy():
    rng = np.random.default_rng(1)
    samples = rng.exponential(size=101)
    stats = results_io.summarize(samples)
    assert stats["n"] == 101
    for key, q in (("median", 50), ("q1", 25), ("q3", 75)):
        assert stats[key] == pytest.approx(np.percentile(samples, q))
    assert stats["iqr"] == pytest.approx(stats["q3"] - stats["q1"])
    assert stats["std"] == pytest.approx(np.std(samples, ddof=1))
    assert (stats["min"], stats["max"]) == (samples.min(), samples.max())
    assert results_io.summarize([]) == {"n": 0}
    assert results_io.summarize([2.0])["median"] == 2.0


def test_tflops():
    assert results_io.tflops(1024, 1024, 1024, 1e-3) == pytest.approx(2 * 1024**3 / 1e-3 / 1e12)
    assert results_io.tflops(1, 1, 1, 0.0) is None
    assert results_io.tflops(1, 1, 1, None) is None


def test_result_filename():
    when = datetime(2026, 11, 29, 13, 5, 9, tzinfo=timezone.utc)
    assert results_io.result_filename("bench", "NVIDIA H200", when) == \
        "bench_20261129-130509_NVIDIA-H200.json"
    with pytest.raises(ValueError):
        results_io.result_filename("other", "x", when)


def test_save_load_round_trip(tmp_path):
    doc = synthetic_bench()
    doc["cases"][0]["ratio"] = float("nan")  # JSON has no NaN: stored as null
    path = results_io.save_results(doc, tmp_path)
    assert path.name.startswith("bench_20260102-030405_SYNTHETIC-TEST-DEVICE")
    text = path.read_text()
    assert "NaN" not in text
    loaded = results_io.load_results(path)
    assert loaded["cases"][0]["ratio"] is None
    assert len(loaded["cases"]) == 40
    # a second save with the same date does not overwrite the first
    assert results_io.save_results(synthetic_bench(), tmp_path) != path


def test_validation_names_the_problem(tmp_path):
    doc = synthetic_bench()
    del doc["cases"][3]["kernel"]
    with pytest.raises(results_io.ResultsError, match=r"cases\[3\].*kernel"):
        results_io.validate_bench(doc)
    bad = tmp_path / "bench_20260101-000000_x.json"
    bad.write_text("{not json")
    with pytest.raises(results_io.ResultsError, match="cannot be read"):
        results_io.load_results(bad)
    doc = synthetic_overhead()
    doc["schema"] = "sgblas-overhead/0"
    with pytest.raises(results_io.ResultsError, match="schema"):
        results_io.validate_overhead(doc)


def test_newest_results(tmp_path):
    older = synthetic_bench(created="2026-01-01T00:00:00+00:00")
    newer = synthetic_bench(created="2026-03-01T00:00:00+00:00")
    results_io.save_results(newer, tmp_path)
    results_io.save_results(older, tmp_path)
    assert results_io.newest_results("bench", tmp_path)["created"].startswith("2026-03-01")
    assert results_io.newest_results("overhead", tmp_path, required=False) is None
    with pytest.raises(results_io.ResultsError, match="python -m perf.overhead"):
        results_io.newest_results("overhead", tmp_path)


def test_results_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv(results_io.RESULTS_DIR_ENV, str(tmp_path))
    assert results_io.results_dir() == tmp_path.resolve()
    monkeypatch.delenv(results_io.RESULTS_DIR_ENV)
    assert results_io.results_dir() == results_io.RESULTS_DIR


def test_fp32_peak():
    h200 = {"name": "NVIDIA H200", "compute_capability": [9, 0], "multiprocessors": 132,
            "clock_khz": 1980000}
    peak, source = results_io.fp32_peak(h200)
    assert peak == pytest.approx(66.9, abs=0.05)
    assert "computed from the recorded device information" in source
    peak, source = results_io.fp32_peak({"name": "NVIDIA H200", "compute_capability": [9, 0]})
    assert peak == 66.9 and "table" in source
    a100 = {"name": "x", "compute_capability": [8, 0], "multiprocessors": 108, "clock_khz": 1410000}
    assert results_io.fp32_peak(a100)[0] == pytest.approx(19.5, abs=0.05)
    assert results_io.fp32_peak({"name": "mystery"})[0] is None


def test_markdown_tables():
    table = results_io.markdown_table(["a", "b"], [[1, None], ["x", 2.5]], align="lr")
    assert table.splitlines() == ["| a | b |", "|:---|---:|", "| 1 |  |", "| x | 2.5 |"]
    with pytest.raises(ValueError):
        results_io.markdown_table(["a"], [[1, 2]])
    doc = synthetic_bench()
    lines = results_io.bench_markdown(doc).splitlines()
    assert len(lines) == 2 + 40
    assert any("FAILED" in line for line in lines) and any("skipped" in line for line in lines)
    text = results_io.overhead_markdown(synthetic_overhead())
    row = next(line for line in text.splitlines() if line.startswith("| sgblas.sgemm, Numba"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert float(cells[2]) == pytest.approx(float(cells[1]) / 21.4, abs=0.01)  # x cuBLAS at 64^3
    assert "Not measured" in text and "torch missing" in text
    assert "import sgblas" in results_io.startup_markdown(synthetic_overhead())


def test_markdown_shows_pad_and_offsets_and_old_documents_still_load():
    doc = synthetic_bench()
    padded = bench.Case(64, 32, 16, "T", "N", "custom", pad=3, offsets=(1, 2, 3))
    doc["cases"][0].update({k: v for k, v in bench._base_record(padded).items()
                            if k not in ("kernel", "sgblas", "cublas", "ratio", "check")})
    results_io.validate_bench(doc)
    lines = results_io.bench_markdown(doc).splitlines()
    assert lines[2].startswith("| 64x32x16 ld+3 off(1,2,3) | TN |")
    assert lines[3].startswith(f"| {doc['cases'][1]['m']}x") and "ld+" not in lines[3]
    for case in doc["cases"]:  # a document written before the options existed
        case.pop("pad"), case.pop("offsets")
    results_io.validate_bench(doc)
    assert results_io.bench_markdown(doc).splitlines()[2].startswith("| 64x32x16 | TN |")


def test_results_name_no_local_folders():
    root = str(environment.REPO_ROOT)
    text = (f'File "{root}/perf/bench.py", line 3\n'
            f'File "/opt/x/.venv/lib/python3.12/site-packages/cupy/_core.py", line 9')
    scrubbed = environment.scrub_paths(text)
    assert root not in scrubbed and "/opt/x" not in scrubbed
    assert 'File "perf/bench.py"' in scrubbed and 'File "cupy/_core.py"' in scrubbed
    assert environment.public_argv(["--quick", "--out", "/tmp/o", "--results=/x", "--pairs", "NN"]) == \
        ["--quick", "--out", "<DIR>", "--results=<DIR>", "--pairs", "NN"]


def test_results_name_the_compiler_of_the_cached_cubins(tmp_path, monkeypatch):
    """A cubin names the ptxas that assembled it in an ELF note; the environment record counts
    the registry's cached cubins by that version, and the ones the cache does not hold."""
    note = b"\x7fELF...NVIDIA CUDA Toolkit Information\x00Cuda compilation tools, release 13.0, V13.0.88\x00"
    assert environment.cubin_toolchain(note) == "13.0.88"
    assert environment.cubin_toolchain(b"\x7fELF no note") is None
    from sgblas.kernels.spec import REGISTRY
    from sgblas.runtime import cache as kernel_cache

    site = tmp_path / "site"
    site.mkdir(mode=0o700)
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(site))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))  # an empty per-user cache
    from sgblas.runtime.build import cubin_key, variant_key

    first, second = REGISTRY[0], REGISTRY[1]
    kernel_cache.write(first.name, (9, 0), cubin_key(variant_key(first, (9, 0))), "entry", note)
    kernel_cache.write(second.name, (9, 0), cubin_key(variant_key(second, (9, 0))), "entry", b"\x7fELF no note")
    assert environment.cache_toolchains((9, 0)) == {"13.0.88": 1, "unknown": 1, "missing": len(REGISTRY) - 2}


def test_split_lab_sets_time_registry_variants_in_every_case():
    """Each case of every split-lab set times at least one variant, each named by the registry."""
    from perf import split_lab
    from sgblas.kernels.spec import by_name

    for which in ("short", "long", "api", "skinny"):
        for shape, pair, variants in split_lab.cases(which):
            assert variants, (which, shape, pair)
            for name, splits in variants:
                assert by_name(name).pair == (pair[0], pair[1]) and splits >= 1, (which, name)
    long_tn = {v for shape, pair, vs in split_lab.cases("long") if pair == "TN" for v, _ in vs}
    assert long_tn == {"sgemm_splitk_tn_128x64x16_2s_a16", "sgemm_splitk_tn_128x128x16_2s_a16"}


def test_split_lab_pairs_keep_those_pairs_cases(capsys):
    from perf import split_lab

    assert split_lab.main(["--set", "long", "--pairs", "nt,TT", "--list"]) == 0
    listed = [line.split()[1] for line in capsys.readouterr().out.splitlines()]
    assert set(listed) == {"NT", "TT"}
    assert len(listed) == sum(pair in ("NT", "TT") for _, pair, _ in split_lab.cases("long"))
    with pytest.raises(SystemExit):
        split_lab.main(["--set", "long", "--pairs", "NX", "--list"])
    assert "each pair must be one of NN, NT, TN, TT" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# Overhead helpers


def test_pipelined_timing_survives_a_failing_method(monkeypatch):
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] > 3:
            raise RuntimeError("broke")

    def fake_build(size, wanted, sgblas, state):
        return ([overhead._Method("sgemm_numba", size, lambda: None, lambda: None),
                 overhead._Method("numba_launch", size, flaky, lambda: None)],
                [{"method": "gemm_torch", "label": "t", "size": size, "status": "skipped",
                  "reason": "no torch"}])

    monkeypatch.setattr(overhead, "build_methods", fake_build)
    args = overhead.parse_args(["--sizes", "8", "--calls", "2", "--repeats", "3",
                                "--warmup-calls", "1"])
    records, _ = overhead.run_pipelined(args, sgblas=None)
    by_method = {r["method"]: r for r in records}
    assert by_method["sgemm_numba"]["status"] == "ok"
    assert by_method["sgemm_numba"]["host_us_per_call"]["n"] == 3
    assert by_method["numba_launch"]["status"] == "error" and "broke" in by_method["numba_launch"]["reason"]
    assert by_method["gemm_torch"]["status"] == "skipped"


def test_child_sources_compile():
    compile(overhead.child_import_code(), "<import child>", "exec")
    compile(overhead.child_first_call_code(64), "<first-call child>", "exec")


def test_parse_child_output():
    out = "noise\n" + overhead.CHILD_MARK + json.dumps({"import_s": 1.5}) + "\nmore noise\n"
    assert overhead.parse_child_output(out) == {"import_s": 1.5}
    with pytest.raises(ValueError):
        overhead.parse_child_output("nothing here")


def test_phase_counts_and_startup_summary():
    cumulative = {"import": {"run_pass": 30, "compile": 2}, "handle": {"run_pass": 30, "compile": 2},
                  "first_call": {"run_pass": 31, "compile": 3},
                  "second_call": {"run_pass": 31, "compile": 3}}
    phases = overhead._phase_counts(cumulative)
    assert phases == {"import": {"run_pass": 30, "compile": 2}, "handle": {"run_pass": 0, "compile": 0},
                      "first_call": {"run_pass": 1, "compile": 1},
                      "second_call": {"run_pass": 0, "compile": 0}}
    child = {"numba_import_s": 1.0, "import_after_numba_s": 0.5, "handle_s": 0.1,
             "first_call_s": 0.01, "second_call_s": 0.001, "counts": cumulative}
    summary = overhead.summarize_startup([{"import_s": 2.0}, {"import_s": 4.0}], [child, child])
    assert summary["import_s"]["median"] == 3.0
    assert summary["compile_events"]["first_call"] == {"compile": 1, "run_pass": 1}


def test_compile_event_recorders_exist():
    """The child counts compile events through numba.cuda.core.event: check that API is there."""
    from numba.cuda.core import event

    for kind in overhead.COMPILE_EVENT_KINDS:
        recorder = event.RecordingListener()
        event.register(kind, recorder)
        event.unregister(kind, recorder)
    assert hasattr(event.Event, "is_start")


# --------------------------------------------------------------------------------------------
# Dry runs under the simulator


simulator_only = pytest.mark.skipif(not SIMULATOR, reason="dry runs are for the CUDA simulator; "
                                    "on a GPU run python -m perf.bench --quick instead")


@simulator_only
def test_bench_dry_run_under_simulator(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    rc = bench.main(["--shape", "9x7x5", "--pairs", "NN,TN", "--reps", "2", "--warmup", "1",
                     "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    (path,) = tmp_path.glob("bench_*.json")
    doc = results_io.load_results(path)
    assert doc["device"]["simulator"] is True
    assert doc["settings"]["timer"] == "host-clock"
    assert [c["pair"] for c in doc["cases"]] == ["NN", "TN"]
    for case in doc["cases"]:
        assert case["status"] == "ok", case
        assert case["kernel"] and case["kernel"] != "unknown"
        assert case["check"]["reference"] == "host_fp64_projection" and case["check"]["passed"]
        assert case["sgblas"]["reps"] == 2 and len(case["sgblas"]["samples_us"]) == 2
        assert case["cublas"] is None and case["ratio"] is None
    assert "| 9x7x5 | NN |" in out
    assert doc["command"][-2:] == ["--out", "<DIR>"] and str(tmp_path) not in path.read_text()


@simulator_only
def test_bench_dry_run_with_pad_and_offsets_under_simulator(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    rc = bench.main(["--shape", "9x7x5", "--pairs", "TN", "--reps", "2", "--warmup", "1",
                     "--pad", "3", "--offset", "1,2,3", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    (path,) = tmp_path.glob("bench_*.json")
    (case,) = results_io.load_results(path)["cases"]
    assert case["status"] == "ok", case
    assert (case["lda"], case["ldb"], case["ldc"]) == (8, 8, 12)
    assert case["pad"] == 3 and case["offsets"] == [1, 2, 3]
    assert case["check"]["passed"] and case["check"]["nonfinite_sgblas"] == 0
    # Every ld is a multiple of 4 here: only the offset pointers can rule out 16-byte kernels.
    assert "address" in case["explanation"] and "is not 16-byte aligned" in case["explanation"]
    assert "| 9x7x5 ld+3 off(1,2,3) | TN |" in out


@simulator_only
def test_overhead_dry_run_under_simulator(tmp_path, capsys):
    rc = overhead.main(["--sizes", "4", "--calls", "2", "--repeats", "2", "--warmup-calls", "1",
                        "--methods", "sgemm_numba,cublas_cupy,numba_launch", "--no-startup",
                        "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    (path,) = tmp_path.glob("overhead_*.json")
    doc = results_io.load_results(path)
    by_method = {m["method"]: m for m in doc["methods"]}
    assert by_method["sgemm_numba"]["status"] == "ok"
    assert by_method["sgemm_numba"]["host_us_per_call"]["n"] == 2
    assert by_method["cublas_cupy"]["status"] == "skipped"
    assert doc["startup"]["status"] == "skipped"


@simulator_only
def test_startup_children_under_simulator():
    result = overhead._run_child(overhead.child_first_call_code(2), timeout=600)
    assert result["status_first"] == 0 and result["status_second"] == 0
    assert set(result["counts"]) == {"import", "handle", "first_call", "second_call"}
    assert result["import_after_numba_s"] > 0
    assert overhead._run_child(overhead.child_import_code(), timeout=600)["import_s"] > 0


@pytest.mark.parametrize("script", ["perf/bench.py", "perf/overhead.py", "perf/figures.py"])
def test_scripts_run_by_path(script):
    """``python perf/<script>.py --help`` works from the repository root (no package import)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, script, "--help"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage" in proc.stdout


def test_figures_cli_writes_pngs(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the 'notebook' extra)")
    results = tmp_path / "results"
    write_synthetic_results(results)
    out = tmp_path / "img"
    proc = subprocess.run([sys.executable, "-m", "perf.figures", "--results", str(results),
                           "--out", str(out)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.glob("*.png")) == sorted(
        ["sgemm_square_tflops.png", "sgemm_rect_ratio.png", "sgemm_host_overhead.png", "sgemm_accuracy.png"])
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "perf.figures", "--results", str(empty),
                           "--out", str(out)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and "no bench results" in proc.stderr


# --------------------------------------------------------------------------------------------
# The GPU-side helpers, driven by stand-ins (NumPy for CuPy, a clock for CUDA events)


class _NumpyAsCupy:
    """Enough of CuPy's array API for the cross-check: NumPy has the same spelling."""

    cp = np

    def to_host(self, array):
        return array


def _product(case, rng):
    a = rng.standard_normal(case.elements[0]).astype(np.float32)
    b = rng.standard_normal(case.elements[1]).astype(np.float32)
    a2 = bench._fview(a, *case.a_dims).astype(np.float64)
    b2 = bench._fview(b, *case.b_dims).astype(np.float64)
    exact = (a2.T if case.transa == "T" else a2) @ (b2.T if case.transb == "T" else b2)
    flat = np.asfortranarray(exact).ravel(order="F")  # column-major, ldc = m
    return a, b, flat


def _padded(matrix, ld, offset, fill=np.nan):
    """``matrix`` column-major with leading dimension ``ld``, ``offset`` elements into a float32
    buffer that ends at its last element; everything else is ``fill``. Returns (buffer, view)."""
    rows, cols = matrix.shape
    buffer = np.full(offset + (cols - 1) * ld + rows, fill, dtype=np.float32)
    for j in range(cols):
        buffer[offset + j * ld:offset + j * ld + rows] = matrix[:, j]
    return buffer, buffer[offset:]


def _padded_product(case, rng):
    """A, B and the float32 product C of ``case`` in buffers with its pad and offsets, NaN in
    the padding and ahead of the offsets, so that a check that read either would fail."""
    a = rng.standard_normal(case.a_dims)
    b = rng.standard_normal(case.b_dims)
    exact = (a.T if case.transa == "T" else a) @ (b.T if case.transb == "T" else b)
    oa, ob, oc = case.offsets
    return (_padded(a, case.lda, oa)[1], _padded(b, case.ldb, ob)[1],
            _padded(exact, case.ldc, oc)[1])


def test_fview_with_padded_leading_dimension():
    rows, cols, ld, offset = 5, 3, 7, 2
    buffer = np.arange(offset + (cols - 1) * ld + rows, dtype=np.float32)  # ends at the last element
    view = bench._fview(buffer[offset:], rows, cols, ld)
    expected = np.array([[offset + j * ld + i for j in range(cols)] for i in range(rows)])
    assert view.shape == (rows, cols)
    np.testing.assert_array_equal(view, expected)
    assert view[-1, -1] == buffer[-1]
    np.testing.assert_array_equal(view.astype(np.float64), expected)
    np.testing.assert_array_equal(bench._fview(buffer[offset:], rows, cols, ld, np), expected)
    # ld == rows keeps the plain reshape, and a longer buffer is fine
    tight = np.arange(20, dtype=np.float32)
    np.testing.assert_array_equal(bench._fview(tight, 4, 3), tight[:12].reshape(3, 4).T)
    with pytest.raises(ValueError, match="cannot hold"):
        bench._fview(buffer[offset + 1:], rows, cols, ld)  # one element short
    with pytest.raises(ValueError, match="below"):
        bench._fview(buffer, rows, cols, rows - 1)


@pytest.mark.parametrize("pair", bench.PAIRS)
def test_cross_checks_with_pad_and_offsets(pair):
    case = bench.Case(13, 9, 21, pair[0], pair[1], "custom", pad=3, offsets=(1, 2, 3))
    rng = np.random.default_rng(7)
    a, b, c = _padded_product(case, rng)
    assert c.size == case.elements[2] and np.isnan(c).sum() == (case.n - 1) * case.pad
    check = bench.check_by_projection(_NumpyAsCupy(), case, c, a, b, 1e-5, 1)
    assert check["passed"] and check["nonfinite_sgblas"] == 0 and check["rel_error"] < 1e-6
    check = bench.check_against_cublas(_NumpyAsCupy(), case, c, c.copy(), a, b, 1e-5, True)
    assert check["passed"] and check["rel_error"] == 0 and check["fp64"]["sgblas"] < 1e-6
    # a NaN left in C itself fails both checks; the NaN in the ld padding did not
    c_nan = c.copy()
    c_nan[(case.n - 1) * case.ldc + case.m - 1] = np.nan  # the last element of C
    check = bench.check_by_projection(_NumpyAsCupy(), case, c_nan, a, b, 1e-5, 1)
    assert not check["passed"] and check["nonfinite_sgblas"] == 1
    check = bench.check_against_cublas(_NumpyAsCupy(), case, c_nan, c, a, b, 1e-5, False)
    assert not check["passed"] and check["nonfinite_sgblas"] == 1
    # C read with the tight ldc (the bug the pad guards against) is wrong
    tight = bench.Case(13, 9, 21, pair[0], pair[1], "custom")
    assert bench._fview(c, 13, 9, tight.ldc).shape == (13, 9)
    assert not np.allclose(np.nan_to_num(bench._fview(c, 13, 9, tight.ldc)),
                           bench._fview(c, 13, 9, case.ldc))


@pytest.mark.parametrize("pair", bench.PAIRS)
def test_cross_check_against_cublas_math(pair):
    case = bench.Case(13, 9, 21, pair[0], pair[1], "custom")
    rng = np.random.default_rng(5)
    a, b, exact = _product(case, rng)
    c_cublas = exact.astype(np.float32)
    c_sgblas = (exact * (1 + 2e-7 * rng.standard_normal(exact.size))).astype(np.float32)
    check = bench.check_against_cublas(_NumpyAsCupy(), case, c_sgblas, c_cublas, a, b, 1e-5, True)
    assert check["passed"] and check["rel_error"] < 1e-6
    assert check["fp64"]["sgblas"] < 1e-6 and check["fp64"]["cublas"] < 1e-7
    c_bad = c_sgblas.copy()
    c_bad[3] += 1.0
    assert not bench.check_against_cublas(_NumpyAsCupy(), case, c_bad, c_cublas, a, b, 1e-5, False)["passed"]
    c_nan = c_sgblas.copy()
    c_nan[0] = np.nan
    check = bench.check_against_cublas(_NumpyAsCupy(), case, c_nan, c_cublas, a, b, 1e-5, False)
    assert not check["passed"] and check["nonfinite_sgblas"] == 1


@pytest.mark.parametrize("pair", bench.PAIRS)
def test_cross_check_by_projection(pair):
    case = bench.Case(11, 6, 17, pair[0], pair[1], "custom")
    rng = np.random.default_rng(6)
    a, b, exact = _product(case, rng)
    good = exact.astype(np.float32)
    assert bench.check_by_projection(_NumpyAsCupy(), case, good, a, b, 1e-5, 1)["passed"]
    swapped = good[::-1].copy()  # C in the wrong element order
    assert not bench.check_by_projection(_NumpyAsCupy(), case, swapped, a, b, 1e-5, 1)["passed"]


class _ClockEvent:
    def __init__(self, backend):
        self.backend = backend
        self.t = None


class _ClockBackend(bench.Backend):
    """Events read the host clock; ``done`` answers as told, to exercise the spin retries."""

    name = "clock"

    def __init__(self, done_answers=()):
        super().__init__()
        self.answers = list(done_answers)
        self.spins: list[float] = []

    def event(self):
        return _ClockEvent(self)

    def record(self, event):
        import time

        event.t = time.perf_counter()

    def done(self, event):
        return self.answers.pop(0) if self.answers else False

    def wait(self, event):
        pass

    def synchronize(self):
        pass

    def elapsed_s(self, start, end):
        return end.t - start.t

    def spin(self, seconds):
        self.spins.append(seconds)


def test_event_blocks_and_interleaving():
    backend = _ClockBackend()
    timing = bench.EventTiming(backend)
    calls: list[tuple[str, int]] = []
    runs = [bench.LibraryRun("a", lambda i: calls.append(("a", i))),
            bench.LibraryRun("b", lambda i: calls.append(("b", i)))]
    for run in runs:
        bench.warm_up(timing, run, 3)
        assert run.warmup == 3 and run.next_index == 3 and run.t_call >= 0
        run.reps, run.batch, run.spin_s = 5, 2, 1e-3
    calls.clear()
    backend.spins.clear()
    bench.measure_interleaved(timing, runs)
    assert [name for name, _ in calls] == ["a", "a", "b", "b", "a", "a", "b", "b", "a", "b"]
    assert [i for name, i in calls if name == "a"] == [3, 4, 5, 6, 7]  # rotation index advances
    for run in runs:
        assert len(run.samples) == 5 and run.blocks == 3 and run.blocks_not_covered == 0
    assert backend.spins == [1e-3] * 6


def test_spin_retry_then_give_up():
    # The first block is never covered: it is redone with doubled sleeps, then the run stops
    # retrying and keeps later blocks as they come, counting them.
    backend = _ClockBackend(done_answers=[True] * (bench.SPIN_RETRIES + 1) + [True, False])
    timing = bench.EventTiming(backend)
    run = bench.LibraryRun("a", lambda i: None)
    run.reps, run.batch, run.spin_s = 3, 1, 1e-3
    bench.measure_interleaved(timing, [run])
    assert backend.spins[:bench.SPIN_RETRIES + 1] == [1e-3 * 2**j for j in range(bench.SPIN_RETRIES + 1)]
    assert run.spin_hopeless and run.spin_retries == bench.SPIN_RETRIES
    assert backend.spins[bench.SPIN_RETRIES + 1:] == [1e-3, 1e-3]  # back to the planned sleep
    assert len(run.samples) == 3 and run.blocks == 3 and run.blocks_not_covered == 2


def test_warm_up_stops_after_a_slow_call():
    backend = _ClockBackend()
    timing = bench.EventTiming(backend)
    import time

    run = bench.LibraryRun("slow", lambda i: time.sleep(0.03))
    bench.warm_up(timing, run, 5, slow_s=0.01)
    assert run.warmup == 1 and run.next_index == 1 and run.t_call >= 0.03


def test_library_record_statistics():
    case = bench.Case(64, 64, 64, "N", "N", "custom")
    run = bench.LibraryRun("x", lambda i: None)
    run.samples = [1e-3, 2e-3, 4e-3]
    record = bench.library_record(run, case, {"call": "x"})
    assert record["times_s"]["median"] == 2e-3
    assert record["tflops"]["median"] == pytest.approx(2 * 64**3 / 2e-3 / 1e12)
    assert record["tflops"]["max"] == pytest.approx(2 * 64**3 / 1e-3 / 1e12)
    assert record["samples_us"] == [1000.0, 2000.0, 4000.0] and record["call"] == "x"


def test_cublas_call_arguments(monkeypatch):
    """gemmEx gets cuBLAS's argument order, PEDANTIC, float32 host scalars 1 and 0."""
    import ctypes
    import types

    seen = {}
    fake_cublas = types.SimpleNamespace(
        CUBLAS_POINTER_MODE_HOST=0, CUBLAS_OP_N=0, CUBLAS_OP_T=1, CUBLAS_GEMM_DEFAULT=-1,
        CUBLAS_COMPUTE_32F_PEDANTIC=69,
        create=lambda: 1234, setPointerMode=lambda h, m: seen.setdefault("mode", m),
        setStream=lambda h, s: seen.setdefault("stream", s), getVersion=lambda h: 130000,
        destroy=lambda h: seen.setdefault("destroyed", h),
        gemmEx=lambda *args: seen.setdefault("args", args),
    )
    fake_cuda = types.ModuleType("cupy.cuda")
    fake_cuda.cublas = fake_cublas
    fake_cuda.runtime = types.SimpleNamespace(CUDA_R_32F=0)
    fake_cupy = types.ModuleType("cupy")
    fake_cupy.cuda = fake_cuda
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", fake_cuda)
    backend = types.SimpleNamespace(stream=types.SimpleNamespace(ptr=777), cp=fake_cupy)
    gemm = bench.CublasPedantic(backend)
    case = bench.Case(5, 3, 7, "T", "N", "custom")
    gemm(case, 100, 200, 300)
    args = seen["args"]
    assert args[:6] == (1234, 1, 0, 5, 3, 7)
    assert args[7:10] == (100, 0, 7) and args[10:13] == (200, 0, 7) and args[14:17] == (300, 0, 5)
    assert args[17:] == (69, -1)
    assert ctypes.c_float.from_address(args[6]).value == 1.0
    assert ctypes.c_float.from_address(args[13]).value == 0.0
    assert seen["mode"] == 0 and seen["stream"] == 777
    assert gemm.describe()["compute_type"] == "CUBLAS_COMPUTE_32F_PEDANTIC"
    gemm.close()
    assert seen["destroyed"] == 1234
