"""CUDA graph capture: sgemm called on a capturing stream is recorded, not run; the graph replays
with the inputs' current contents; nothing on the call path breaks the capture (no
synchronisation, allocation or other call that capture forbids, in the strictest mode too).

Three ways in: the driver API directly (cuda.bindings, always available with numba-cuda; every
capture mode), CuPy (``Stream.begin_capture``/``end_capture``, ``Graph.launch``) and PyTorch
(``torch.cuda.CUDAGraph`` and ``torch.cuda.graph``, the handle given torch's capturing stream
inside the capture). The CuPy and PyTorch tests skip when those are not installed.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import sgblas
from sgblas import Status

from helpers import Case, column_major

pytestmark = pytest.mark.gpu

SEED = 31337


@pytest.fixture(scope="module")
def driver():
    from cuda.bindings import driver

    return driver


def _ok(driver, result):
    """The values after a driver call's CUresult, asserting it is CUDA_SUCCESS."""
    err, *values = result if isinstance(result, tuple) else (result,)
    assert err == driver.CUresult.CUDA_SUCCESS, err
    return values[0] if len(values) == 1 else values


def _stream(driver) -> int:
    return int(_ok(driver, driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)))


def _refill(case: Case, rng) -> None:
    """New values in the same device buffers (the graph holds their addresses); the NaN
    padding of A and B stays, so a kernel reading it would still show."""
    for name in ("A", "B", "C"):
        host = getattr(case, name)
        fresh = rng.standard_normal(host.size).astype(np.float32)
        fresh[np.isnan(host)] = np.nan
        setattr(case, name, fresh)
        getattr(case, "d" + name).copy_to_device(fresh)


def _problems():
    """(case, alpha, beta, k_override): two GEMMs of different pairs and a C = beta*C call."""
    return [
        (Case(SEED, "N", "N", 512, 384, 256, pad=4), 1.5, 0.5, None),
        (Case(SEED + 1, "T", "N", 300, 257, 129, pad=1), -1.0, 0.0, None),
        (Case(SEED + 2, "N", "T", 200, 100, 7), 1.0, 2.0, 0),
    ]


def _call(handle, case, alpha, beta, k):
    args = list(case.args(alpha, beta))
    if k is not None:
        args[4] = k
    return sgblas.sgemm(handle, *args)


def _check(case, alpha, beta, k, c_before):
    if k == 0:
        np.testing.assert_array_equal(case.dC.copy_to_host(), np.float32(beta) * c_before)
    else:
        case.check(alpha, beta, C_before=c_before)


@pytest.mark.parametrize("mode", ["CU_STREAM_CAPTURE_MODE_GLOBAL", "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL",
                                  "CU_STREAM_CAPTURE_MODE_RELAXED"])
def test_capture_and_replay_with_the_driver_api(driver, mode):
    rng = np.random.default_rng(SEED)
    problems = _problems()
    stream, other = _stream(driver), _stream(driver)
    cuda.synchronize()
    befores = [case.C.copy() for case, *_ in problems]
    # The handle stays open while the graph replays: a captured split-K or packed plan writes the
    # handle's workspace (docs/api.md, the handle's workspace_bytes).
    with sgblas.Handle(stream=stream) as h:
        _ok(driver, driver.cuStreamBeginCapture(stream, getattr(driver.CUstreamCaptureMode, mode)))
        try:
            statuses = [_call(h, case, alpha, beta, k) for case, alpha, beta, k in problems]
            capturing = _ok(driver, driver.cuStreamIsCapturing(stream))
        finally:
            graph = _ok(driver, driver.cuStreamEndCapture(stream))
        assert statuses == [Status.SUCCESS] * 3, sgblas.last_error_message()
        assert capturing == driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
        _ok(driver, driver.cuStreamSynchronize(stream))
        for (case, *_), before in zip(problems, befores):
            np.testing.assert_array_equal(case.dC.copy_to_host(), before, err_msg="capture ran the kernel")
        graph_exec = _ok(driver, driver.cuGraphInstantiate(graph, 0))
        try:
            for replay in range(3):
                if replay:
                    for case, *_ in problems:
                        _refill(case, rng)
                befores = [case.C.copy() for case, *_ in problems]
                on = stream if replay % 2 == 0 else other  # a graph may be replayed on any stream
                _ok(driver, driver.cuGraphLaunch(graph_exec, on))
                _ok(driver, driver.cuStreamSynchronize(on))
                for (case, alpha, beta, k), before in zip(problems, befores):
                    _check(case, alpha, beta, k, before)
        finally:
            driver.cuGraphExecDestroy(graph_exec)
            driver.cuGraphDestroy(graph)
            driver.cuStreamDestroy(stream)
            driver.cuStreamDestroy(other)


def test_captured_calls_keep_their_stream_order(driver):
    """D = A @ B, then E = D @ F in the same capture: the second reads the first's output."""
    rng = np.random.default_rng(SEED + 5)
    m, k, n, p = 256, 192, 160, 128
    a = column_major(rng, m, k, m)
    b = column_major(rng, k, n, k)
    f = column_major(rng, n, p, n)
    dA, dB, dF = cuda.to_device(a), cuda.to_device(b), cuda.to_device(f)
    dD = cuda.to_device(np.zeros(m * n, np.float32))
    dE = cuda.to_device(np.zeros(m * p, np.float32))
    stream = _stream(driver)
    cuda.synchronize()
    with sgblas.Handle(stream=stream) as h:
        _ok(driver, driver.cuStreamBeginCapture(stream, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            s1 = sgblas.sgemm(h, "N", "N", m, n, k, 1.0, dA, m, dB, k, 0.0, dD, m)
            s2 = sgblas.sgemm(h, "N", "N", m, p, n, 1.0, dD, m, dF, n, 0.0, dE, m)
        finally:
            graph = _ok(driver, driver.cuStreamEndCapture(stream))
        assert (s1, s2) == (Status.SUCCESS, Status.SUCCESS)
        graph_exec = _ok(driver, driver.cuGraphInstantiate(graph, 0))
        try:
            _ok(driver, driver.cuGraphLaunch(graph_exec, stream))  # the handle's workspace is still there
            _ok(driver, driver.cuStreamSynchronize(stream))
        finally:
            driver.cuGraphExecDestroy(graph_exec)
            driver.cuGraphDestroy(graph)
            driver.cuStreamDestroy(stream)
    d_ref = a.reshape(k, m).T.astype(np.float64) @ b.reshape(n, k).T.astype(np.float64)
    e_ref = d_ref @ f.reshape(p, n).T.astype(np.float64)
    got = dE.copy_to_host().reshape(p, m).T
    scale = np.abs(a.reshape(k, m).T) @ np.abs(b.reshape(n, k).T) @ np.abs(f.reshape(p, n).T)
    from sgblas.testing import compare

    ok, ratio, where = compare(got, e_ref, scale, k + n)
    assert ok, f"E = (A @ B) @ F wrong by {ratio:.3g}x tolerance at {where}: stream order lost?"


def test_capture_and_replay_with_cupy():
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(SEED + 10)
    m, n, k = 384, 256, 200
    lda, ldb, ldc = m + 4, k + 4, m + 4
    host = [column_major(rng, m, k, lda), column_major(rng, k, n, ldb), column_major(rng, m, n, ldc)]
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        a, b, c = (cp.asarray(x) for x in host)
    stream.synchronize()
    with sgblas.Handle(stream=stream) as h:
        stream.begin_capture()
        try:
            status = sgblas.sgemm(h, "N", "N", m, n, k, 0.5, a, lda, b, ldb, 1.0, c, ldc)
        finally:
            graph = stream.end_capture()
        assert status == Status.SUCCESS, sgblas.last_error_message()
        stream.synchronize()
        np.testing.assert_array_equal(cp.asnumpy(c), host[2], err_msg="capture ran the kernel")
        from sgblas.testing import as_matrix, compare, reference_values as reference_gemm

        for replay in range(3):
            if replay:
                host = [rng.standard_normal(x.size).astype(np.float32) for x in host]
                with stream:
                    for dev, x in zip((a, b, c), host):
                        dev.set(x)
            graph.launch(stream)
            stream.synchronize()
            ref, scale = reference_gemm("N", "N", m, n, k, 0.5, host[0], lda, host[1], ldb, 1.0, host[2], ldc)
            ok, ratio, where = compare(as_matrix(cp.asnumpy(c), m, n, ldc), ref, scale, k)
            assert ok, f"replay {replay}: {ratio:.3g}x tolerance at {where}"


def test_capture_and_replay_with_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    rng = np.random.default_rng(SEED + 20)
    m, n, k = 320, 288, 150
    lda, ldb, ldc = k + 3, n + 1, m + 2  # A is k x m (T), B is n x k (T)
    host = [column_major(rng, k, m, lda), column_major(rng, n, k, ldb), column_major(rng, m, n, ldc)]
    a, b, c = (torch.from_numpy(x.copy()).cuda() for x in host)
    torch.cuda.synchronize()
    h = sgblas.Handle()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # an eager call first, on a side stream, as torch advises
        h.set_stream(torch.cuda.current_stream())
        assert sgblas.sgemm(h, "T", "T", m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc) == Status.SUCCESS
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    c.copy_(torch.from_numpy(host[2]).cuda())
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # capture_error_mode="global", the strictest
        h.set_stream(torch.cuda.current_stream())
        status = sgblas.sgemm(h, "T", "T", m, n, k, -2.0, a, lda, b, ldb, 0.25, c, ldc)
    assert status == Status.SUCCESS, sgblas.last_error_message()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(c.cpu().numpy(), host[2], err_msg="capture ran the kernel")
    from sgblas.testing import as_matrix, compare, reference_values as reference_gemm

    for replay in range(3):
        if replay:
            host = [rng.standard_normal(x.size).astype(np.float32) for x in host]
            for dev, x in zip((a, b, c), host):
                dev.copy_(torch.from_numpy(x))
        graph.replay()
        torch.cuda.synchronize()
        ref, scale = reference_gemm("T", "T", m, n, k, -2.0, host[0], lda, host[1], ldb, 0.25, host[2], ldc)
        ok, ratio, where = compare(as_matrix(c.cpu().numpy(), m, n, ldc), ref, scale, k)
        assert ok, f"replay {replay}: {ratio:.3g}x tolerance at {where}"
    h.close()
