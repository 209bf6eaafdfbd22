"""What only a GPU can show about streams: sgemm enqueues and returns, and never synchronises."""

from __future__ import annotations

import time

import numpy as np
import pytest

import sgblas
from sgblas import Status

pytestmark = pytest.mark.gpu

SPIN_SECONDS = 1.0


@pytest.fixture(scope="module")
def driver():
    from cuda.bindings import driver
    from numba import cuda

    # cuStreamCreate needs a current context; run alone (the first test of a process), nothing
    # else would have made the primary context current on this thread.
    cuda.current_context()
    return driver


def _stream(driver, non_blocking=True):
    flags = driver.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking else driver.CUstream_flags.CU_STREAM_DEFAULT
    err, stream = driver.cuStreamCreate(flags)
    assert err == driver.CUresult.CUDA_SUCCESS
    return int(stream)


def _spin(stream_handle, seconds):
    """Queue a kernel that keeps one thread busy for about ``seconds`` on ``stream_handle``."""
    from numba import cuda

    @cuda.jit
    def spin(iterations):
        for _ in range(iterations):
            cuda.nanosleep(1_000_000)  # at most ~1 ms each

    spin[1, 1, cuda.external_stream(stream_handle)](int(seconds * 1000))


def _query(driver, stream):
    (err,) = driver.cuStreamQuery(stream)
    return err


def _operands(n):
    from numba import cuda

    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.standard_normal(n * n).astype(np.float32))
    b = cuda.to_device(rng.standard_normal(n * n).astype(np.float32))
    c = cuda.to_device(np.zeros(n * n, np.float32))
    cuda.synchronize()
    return a, b, c


def test_call_on_a_nonblocking_stream_ignores_a_busy_other_stream(driver):
    busy, mine = _stream(driver), _stream(driver)
    n = 1024
    a, b, c = _operands(n)
    with sgblas.Handle(stream=mine) as h:
        sgblas.sgemm(h, "N", "N", n, n, n, 1.0, a, n, b, n, 0.0, c, n)  # first call outside the timing
        driver.cuStreamSynchronize(mine)
        _spin(busy, SPIN_SECONDS)
        t0 = time.perf_counter()
        assert sgblas.sgemm(h, "N", "N", n, n, n, 1.0, a, n, b, n, 0.0, c, n) == Status.SUCCESS
        returned = time.perf_counter() - t0
        driver.cuStreamSynchronize(mine)
        finished = time.perf_counter() - t0
        other_still_busy = _query(driver, busy) == driver.CUresult.CUDA_ERROR_NOT_READY
    driver.cuStreamSynchronize(busy)
    assert returned < 0.1, f"sgemm took {returned:.3f} s to return: it waited for something"
    assert finished < 0.5 * SPIN_SECONDS, f"its stream finished only after {finished:.3f} s"
    assert other_still_busy, "the busy stream finished first: the test proves nothing"


def test_call_behind_a_long_kernel_on_its_own_stream_returns_at_once(driver):
    mine = _stream(driver)
    n = 512
    a, b, c = _operands(n)
    with sgblas.Handle(stream=mine) as h:
        sgblas.sgemm(h, "N", "N", n, n, n, 1.0, a, n, b, n, 0.0, c, n)
        driver.cuStreamSynchronize(mine)
        _spin(mine, SPIN_SECONDS)
        t0 = time.perf_counter()
        assert sgblas.sgemm(h, "N", "N", n, n, n, 1.0, a, n, b, n, 0.0, c, n) == Status.SUCCESS
        returned = time.perf_counter() - t0
        still_queued = _query(driver, mine) == driver.CUresult.CUDA_ERROR_NOT_READY
        driver.cuStreamSynchronize(mine)
    assert returned < 0.1, f"sgemm took {returned:.3f} s to return behind a busy stream: it synchronised"
    assert still_queued
