"""Split-K and skinny products on a GPU: the real choice, the real sizes.

* Every transpose pair takes split-K at a few-tile shape whose K (20000) is past the accuracy
  bound: every candidate that keeps the accuracy policy splits K, so whatever the cost model
  predicts, the chosen one does. The result is right.
* Determinism: the same call gives the same bits run to run, on two different streams and
  through two handles; the reduction adds the partials in a fixed order, never with atomics.
* beta == 0 under split-K: a C full of NaN does not leak into the result.
* A split-K call captured in a CUDA graph (driver API) replays to the same bits as the eager
  call, with fresh inputs too.
* Too little workspace: the call takes a kernel that needs none, ``explain`` says why, and the
  result is right; with room for the semaphores alone, a serial split.
* A workspace of fewer partials than the serial cap needs (every pair, odd and aligned leading
  dimensions, tails in m, n and k): the slices add into C in turn (``VARIANT/cS``), right with
  beta == 0 on a NaN C and with beta != 0, and the same bits run to run; from a thread with no
  current context, and replayed from a CUDA graph.
* Skinny shapes (m or n small) for every pair and side, one launch or split, the skinny
  candidate run by name.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from numba import cuda

import sgblas
from sgblas import Status
from sgblas.testing import GemmCase

pytestmark = pytest.mark.gpu

SEED = 1313
PAIRS = (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T"))
#: Few output tiles, long K: past the accuracy bound, so the call splits K (when the workspace
#: holds the partials).
M, N, K = 256, 384, 20000


def _explain(h, case):
    return sgblas.explain(h, case.ta, case.tb, case.m, case.n, case.k, case.dA, case.lda, case.dB, case.ldb,
                          case.dC, case.ldc)


def _skinny_candidate(explanation) -> str:
    """The skinny candidate the dispatcher chose, else the one it predicts fastest."""
    if explanation.candidate.startswith("sgemm_skinny_"):
        return explanation.candidate
    return next(name for name, _ in explanation.candidates if name.startswith("sgemm_skinny_"))


def _run(h, case, alpha=1.0, beta=0.0, nan_c=True, candidate=None) -> np.ndarray:
    before = case.reset_c(nan=nan_c)
    status = sgblas.sgemm(h, *case.args(alpha, beta), candidate=candidate)
    assert status == Status.SUCCESS, sgblas.last_error_message()
    cuda.synchronize()
    return before


@contextlib.contextmanager
def _captured(driver, stream: int, h, args: tuple):
    """``sgemm(h, *args)`` captured from ``stream`` into a graph, instantiated; the executable
    graph is yielded and both are destroyed afterwards."""
    err, = driver.cuStreamBeginCapture(stream, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL)
    assert err == driver.CUresult.CUDA_SUCCESS
    try:
        status = sgblas.sgemm(h, *args)
    finally:
        err, graph = driver.cuStreamEndCapture(stream)
    assert err == driver.CUresult.CUDA_SUCCESS and status == Status.SUCCESS, sgblas.last_error_message()
    err, graph_exec = driver.cuGraphInstantiate(graph, 0)
    assert err == driver.CUresult.CUDA_SUCCESS
    try:
        yield graph_exec
    finally:
        driver.cuGraphExecDestroy(graph_exec)
        driver.cuGraphDestroy(graph)


def _eager_then_restored(driver, stream: int, case, alpha: float, beta: float, call) -> tuple:
    """``call()`` (an ``sgemm`` of ``case`` with ``alpha``, ``beta`` on ``stream``, returning its
    status) run and checked against float64; C is then put back as it was before the call.
    Returns ``(C before, C after)``, the latter for a replay to match bit for bit."""
    before = case.reset_c()
    assert call() == Status.SUCCESS, sgblas.last_error_message()
    driver.cuStreamSynchronize(stream)
    eager = case.dC.copy_to_host()
    case.check(alpha, beta, C_before=before)
    case.dC.copy_to_device(before)
    cuda.synchronize()
    return before, eager


def _stream(driver) -> int:
    err, stream = driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
    assert err == driver.CUresult.CUDA_SUCCESS, err
    return int(stream)


@pytest.fixture(scope="module")
def driver():
    from cuda.bindings import driver

    return driver


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "".join(p))
def test_every_pair_splits_k_and_is_right_and_deterministic(pair):
    case = GemmCase(SEED, pair[0], pair[1], M, N, K, pad=4, ld_multiple=4)
    with sgblas.Handle() as h:
        explanation = _explain(h, case)
        assert explanation.kernel.startswith("sgemm_splitk_"), str(explanation)
        before = _run(h, case, 1.0, 0.0)  # NaN in C, beta == 0
        case.check(1.0, 0.0, C_before=before)
        first = case.dC.copy_to_host()
        _run(h, case, 1.0, 0.0)
        np.testing.assert_array_equal(case.dC.copy_to_host().view(np.uint32), first.view(np.uint32),
                                      err_msg="two runs of the same split-K call differ")
        before = _run(h, case, -0.5, 2.0, nan_c=False)
        case.check(-0.5, 2.0, C_before=before)


def test_same_bits_on_two_streams_and_two_handles(driver):
    case = GemmCase(SEED + 1, "N", "N", M, N, K, ld_multiple=4)
    s1, s2 = _stream(driver), _stream(driver)
    results = []
    try:
        with sgblas.Handle(stream=s1) as h1, sgblas.Handle(stream=s2) as h2:
            assert _explain(h1, case).kernel.startswith("sgemm_splitk_")
            for h, s in ((h1, s1), (h2, s2), (h1, s1)):
                case.reset_c(nan=True)
                assert sgblas.sgemm(h, *case.args(1.0, 0.0)) == Status.SUCCESS
                driver.cuStreamSynchronize(s)
                results.append(case.dC.copy_to_host())
            h1.set_stream(s2)  # the same handle on the other stream
            case.reset_c(nan=True)
            assert sgblas.sgemm(h1, *case.args(1.0, 0.0)) == Status.SUCCESS
            driver.cuStreamSynchronize(s2)
            results.append(case.dC.copy_to_host())
    finally:
        driver.cuStreamDestroy(s1)
        driver.cuStreamDestroy(s2)
    for other in results[1:]:
        np.testing.assert_array_equal(other.view(np.uint32), results[0].view(np.uint32))
    case.check(1.0, 0.0, C_before=case.C)


def test_graph_capture_of_a_split_k_call(driver):
    case = GemmCase(SEED + 2, "T", "N", M, N, K, pad=1, ld_multiple=4)
    stream = _stream(driver)
    try:
        with sgblas.Handle(stream=stream) as h:
            assert _explain(h, case).kernel.startswith("sgemm_splitk_")
            eager_before, eager = _eager_then_restored(driver, stream, case, 1.5, 0.5,
                                                       lambda: sgblas.sgemm(h, *case.args(1.5, 0.5)))
            with _captured(driver, stream, h, case.args(1.5, 0.5)) as graph_exec:
                driver.cuStreamSynchronize(stream)
                np.testing.assert_array_equal(case.dC.copy_to_host(), eager_before, err_msg="capture ran the kernels")
                driver.cuGraphLaunch(graph_exec, stream)
                driver.cuStreamSynchronize(stream)
                np.testing.assert_array_equal(case.dC.copy_to_host().view(np.uint32), eager.view(np.uint32),
                                              err_msg="the replay differs from the eager call")
                rng = np.random.default_rng(SEED + 3)
                fresh_a = rng.standard_normal(case.A.size).astype(np.float32)
                case.A = fresh_a
                case.dA.copy_to_device(fresh_a)  # the graph holds these buffers' addresses:
                before = case.C.copy()           # refill them, never replace them
                case.dC.copy_to_device(before)
                cuda.synchronize()
                driver.cuGraphLaunch(graph_exec, stream)
                driver.cuStreamSynchronize(stream)
                case.check(1.5, 0.5, C_before=before)
    finally:
        driver.cuStreamDestroy(stream)


def test_too_little_workspace_runs_a_kernel_that_needs_none():
    case = GemmCase(SEED + 4, "N", "T", M, N, K, ld_multiple=4)
    with sgblas.Handle(workspace_bytes=16) as h:  # not even a semaphore per output tile
        explanation = _explain(h, case)
        assert not explanation.kernel.startswith("sgemm_splitk_"), str(explanation)
        reasons = dict(explanation.passed_over)
        for tile in ("128x128", "128x64"):
            assert "the handle has 16" in reasons[f"sgemm_splitk_nt_{tile}x16_2s_a16"], str(explanation)
        before = _run(h, case, 1.0, 0.0)
        case.check(1.0, 0.0, C_before=before)
        h.set_workspace(4096)  # semaphores fit, partials do not: a serial split
        explanation = _explain(h, case)
        assert "/c" in explanation.candidate, str(explanation)
        before = _run(h, case, 1.0, 0.5, nan_c=False)
        case.check(1.0, 0.5, C_before=before)
        h.set_workspace(32 * 1024 * 1024)  # partials fit: the accuracy policy splits K
        assert _explain(h, case).kernel.startswith("sgemm_splitk_nt_")


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "".join(p))
@pytest.mark.parametrize("shape", [(3, 8192, 4096), (4096, 5, 4096), (16, 20000, 600)])
def test_skinny_every_pair(pair, shape):
    m, n, k = shape
    case = GemmCase(SEED + 5, pair[0], pair[1], m, n, k, pad=2, ld_multiple=4)
    with sgblas.Handle() as h:
        explanation = _explain(h, case)
        name = _skinny_candidate(explanation)  # by name, whatever the dispatcher chooses
        before = _run(h, case, 1.0, 0.0, candidate=name)
        case.check(1.0, 0.0, C_before=before)
        first = case.dC.copy_to_host()
        _run(h, case, 1.0, 0.0, candidate=name)
        np.testing.assert_array_equal(case.dC.copy_to_host().view(np.uint32), first.view(np.uint32))
        before = _run(h, case, 0.75, -1.0, nan_c=False, candidate=name)
        case.check(0.75, -1.0, C_before=before)


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "".join(p))
@pytest.mark.parametrize("ld_multiple", [4, 1], ids=["aligned", "odd"])
def test_serial_split_where_the_partials_bind(pair, ld_multiple):
    m, n, k = 600, 520, 16400
    case = GemmCase(SEED + 6, pair[0], pair[1], m, n, k, pad=1, ld_multiple=ld_multiple)
    partials = 3 * 4 * ((m + 3) // 4 * 4) * n  # fewer than the cap's ACCURACY_SERIAL_PARTIALS
    with sgblas.Handle(workspace_bytes=partials) as h:
        explanation = _explain(h, case)
        assert "/c" in explanation.candidate, str(explanation)
        before = _run(h, case, 1.0, 0.0)
        case.check(1.0, 0.0, C_before=before)
        first = case.dC.copy_to_host()
        _run(h, case, 1.0, 0.0)
        np.testing.assert_array_equal(case.dC.copy_to_host(), first)  # the slices add in a fixed order
        before = _run(h, case, -0.5, 2.0, nan_c=False)
        case.check(-0.5, 2.0, C_before=before)


def test_serial_split_from_a_thread_without_a_context_and_in_a_graph(driver):
    """A serial split's memset needs its context current: a call from a fresh thread (no current
    context) on the handle's own stream runs; captured into a graph (a memset node, then the
    slice kernel), two replays give the eager call's bits (the semaphores start at zero each time)."""
    import threading

    m, n, k = 600, 520, 16400
    case = GemmCase(SEED + 7, "N", "T", m, n, k, pad=1, ld_multiple=4)
    stream = _stream(driver)
    try:
        with sgblas.Handle(stream=stream, workspace_bytes=4096) as h:  # semaphores only: a serial split
            assert "/c" in _explain(h, case).candidate
            def from_a_fresh_thread():
                got = []
                worker = threading.Thread(target=lambda: got.append(sgblas.sgemm(h, *case.args(1.0, 0.5))))
                worker.start()
                worker.join()
                assert len(got) == 1, "the worker thread raised"
                return got[0]

            before, eager = _eager_then_restored(driver, stream, case, 1.0, 0.5, from_a_fresh_thread)
            with _captured(driver, stream, h, case.args(1.0, 0.5)) as graph_exec:
                for _ in range(2):
                    case.dC.copy_to_device(before)
                    cuda.synchronize()
                    driver.cuGraphLaunch(graph_exec, stream)
                    driver.cuStreamSynchronize(stream)
                    np.testing.assert_array_equal(case.dC.copy_to_host().view(np.uint32), eager.view(np.uint32))
    finally:
        driver.cuStreamDestroy(stream)
