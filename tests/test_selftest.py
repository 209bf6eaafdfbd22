"""The self-test command: its plan, its arguments and its decision of where to run, cheaply.

The reduced sweep itself runs once in CI, as ``python -m sgblas.selftest`` after pytest
(``.ci/run``); here only one small case runs. On a GPU the whole sweep runs too.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sgblas
from sgblas import selftest
from sgblas.runtime import driver
from sgblas.selftest import ALPHAS, BETAS, PAIRS, SweepCase, main, run_case

REPO = Path(__file__).resolve().parents[1]


def test_reduced_sweep_covers_the_contract():
    cases = selftest.reduced_sweep()
    for pair in PAIRS:
        mine = [c for c in cases if (c.ta, c.tb) == pair]
        products = {ab for c in mine for ab in c.alpha_betas}
        assert products == set(itertools.product(ALPHAS, BETAS)), pair
        assert {0.0, 1.0} < set(ALPHAS) and {0.0, 1.0} < set(BETAS)  # and a nontrivial one each
        lds = [(c, c.lds()) for c in mine]
        rows = lambda c: (c.m if c.ta == "N" else c.k, c.k if c.tb == "N" else c.n, c.m)  # noqa: E731
        assert any(all(ld > r for ld, r in zip(ld3, rows(c))) for c, ld3 in lds), f"{pair}: no padded lds"
        assert any(ld3 == rows(c) for c, ld3 in lds), f"{pair}: no tight lds"
        assert any(all(ld % 4 == 0 for ld in ld3) and c.m % 4 == 0 for c, ld3 in lds), f"{pair}: no aligned case"
        # tails: sizes that are no multiple of a vector width, let alone of a tile
        assert any(c.m % 4 and c.n % 4 and c.k % 4 and c.m > 32 for c in mine), f"{pair}: no tails past a warp"
        assert any(c.k > 16 for c in mine), f"{pair}: no K loop of two slices"


def test_reduced_sweep_is_small_enough_for_the_simulator():
    # The simulator runs every thread of a CTA as a Python thread: CI can afford a CTA per
    # launch and a few dozen launches.
    cases = selftest.reduced_sweep()
    assert all(c.m <= 128 and c.n <= 64 for c in cases)
    assert sum(a != 0.0 for c in cases for a, _ in c.alpha_betas) <= 30


def test_full_sweep_is_every_combination():
    cases = selftest.full_sweep()
    assert len(cases) == len(selftest.GPU_SHAPES) * len(PAIRS) * len(selftest.GPU_PADS)
    assert all(set(c.alpha_betas) == set(itertools.product(ALPHAS, BETAS)) for c in cases)


def test_help_says_which_sweep_applies(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"On this machine: {selftest.mode().sentence}." in out


@pytest.mark.parametrize("argv", [["--seed", "x"], ["--bogus"]])
def test_bad_arguments_exit_with_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "usage: python -m sgblas.selftest" in capsys.readouterr().err


def test_list_prints_each_case_and_runs_nothing(capsys):
    assert main(["--list", "--quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(selftest.reduced_sweep())
    assert lines[1].split()[:4] == ["1", "1", "1", "NN"]


def test_without_a_gpu_it_says_so_first_and_reruns_under_the_simulator(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(selftest, "mode", lambda: selftest.Mode("rerun", "no CUDA GPU found, says the probe"))
    monkeypatch.setattr(selftest.subprocess, "call", lambda command, env: calls.append((command, env)) or 0)
    assert main(["--seed", "3"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "sgblas selftest: no CUDA GPU found, says the probe."
    (command, env), = calls
    assert command[:3] == [sys.executable, "-m", "sgblas.selftest"] and command[3:5] == ["--seed", "3"]
    assert env["NUMBA_ENABLE_CUDASIM"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(REPO)


def test_the_rerun_refuses_to_run_off_the_simulator(monkeypatch, capsys):
    # A copy started for the simulator that finds it off must not start another copy.
    command, _ = selftest.simulator_command([])
    monkeypatch.setattr(selftest, "mode", lambda: selftest.Mode("rerun", "no CUDA GPU found"))
    monkeypatch.setattr(selftest.subprocess, "call", lambda *a, **k: pytest.fail("started another copy"))
    assert main(command[3:]) == 1
    assert "simulator is off" in capsys.readouterr().out


def test_the_probe_in_a_fresh_process():
    """``--help`` in a process where nothing switched the simulator on: the driver probe alone
    decides (this machine's answer is the driver's device count)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-m", "sgblas.selftest", "--help"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    gpu = driver.device_count() > 0
    assert ("CUDA GPU found, so the full sweep runs" in text) == gpu, text
    assert ("no CUDA GPU found, so the reduced sweep runs under Numba's CUDA simulator" in text) == (not gpu), text


def test_one_case_passes():
    case = SweepCase(5, 3, 2, "T", "N", 1, 1, ((-1.5, 0.0), (0.0, 0.5)))
    with sgblas.Handle() as h:
        result = run_case(h, case, seed=3)
    assert result.failures == [] and result.worst <= 1.0 and result.kernel


def test_a_wrong_result_is_reported_with_its_seed(monkeypatch):
    # An sgemm that reports success and computes nothing leaves the NaN that beta == 0 put in C.
    monkeypatch.setattr(sgblas, "sgemm", lambda *args: sgblas.Status.SUCCESS)
    with sgblas.Handle() as h:
        result = run_case(h, SweepCase(4, 3, 2, "N", "N", 0, 1, ((1.0, 0.0),)), seed=41)
    (failure,) = result.failures
    assert failure.startswith("seed=41 alpha=1.0 beta=0.0: 12 of 12 elements of C are out of tolerance")


@pytest.mark.gpu
def test_whole_sweep_passes(capsys):
    assert main(["--seed", "11"]) == 0, capsys.readouterr().out
