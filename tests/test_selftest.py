"""The self-test command: one tiny case everywhere, the whole sweep on a GPU."""

from __future__ import annotations

import numpy as np
import pytest

import sgblas
from sgblas.selftest import main, run_case


def test_one_case_passes():
    with sgblas.Handle() as h:
        kernel, worst, failures = run_case(h, np.random.default_rng(3), "T", "N", 5, 3, 2, 1,
                                           alphas=(1.0, -1.5), betas=(0.0, 0.5))
    assert failures == [] and worst <= 1.0 and kernel


@pytest.mark.gpu
def test_whole_sweep_passes(capsys):
    assert main(["--seed", "11"]) == 0, capsys.readouterr().out
