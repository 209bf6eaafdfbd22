"""No call waits for other streams once a device is set up, and gemm follows the caller's stream.

``import sgblas`` sets nothing up (tests/test_import.py). A device's set-up (loading the kernels
and making them resident in its primary context: under lazy module loading the driver would
otherwise load a kernel into a context at its first launch, and loading waits for every stream
of the context; docs/api.md, "Streams and synchronisation") is done by the first of a
``Handle``'s creation, ``sgblas.initialize()`` and gemm's first call on the device. The rules:

* a handle created ahead of time makes the first ``sgemm`` of every kernel return at once behind
  another stream's long work;
* ``sgblas.initialize()`` ahead of time makes gemm's first call return at once, and every call
  after it;
* without either, gemm's first call on a device may wait (once), and no call after it does;
* gemm follows the current stream of CuPy and PyTorch, and a Numba stream given to it.

Each test runs its scenario in a fresh process, since a warm process has set everything up long
ago. A one-thread spin kernel keeps a busy stream occupied meanwhile.
"""

from __future__ import annotations

import textwrap

import pytest

from helpers import HOST_LIMIT_S, run_fresh

pytestmark = pytest.mark.gpu

#: Seconds of busy-stream work: waiting for it would cost this much, returning at once costs
#: far less than HOST_LIMIT_S.
SPIN = 0.5

_PRELUDE = textwrap.dedent(r"""
    import json, sys, time
    import numpy as np
    from cuda.bindings import driver as cb

    def stream():
        err, s = cb.cuStreamCreate(cb.CUstream_flags.CU_STREAM_NON_BLOCKING)
        assert err == cb.CUresult.CUDA_SUCCESS
        return int(s)

    def busy(s):
        (err,) = cb.cuStreamQuery(s)
        return err == cb.CUresult.CUDA_ERROR_NOT_READY

    def spinner():
        from numba import cuda

        @cuda.jit("void(int32)")
        def spin(iterations):
            for _ in range(iterations):
                cuda.nanosleep(1_000_000)
        return spin

    def spin_on(spin, s, seconds):
        from numba import cuda
        spin[1, 1, cuda.external_stream(s)](int(seconds * 1000))
""")


def _run(body: str) -> list[dict]:
    records, _ = run_fresh(_PRELUDE + textwrap.dedent(body), NUMBA_ENABLE_CUDASIM="0", PYTHONUNBUFFERED="1")
    return records


def test_a_handle_created_ahead_makes_the_first_sgemm_of_each_kernel_return_at_once():
    records = _run(rf"""
        from numba import cuda
        import sgblas
        from sgblas.runtime import driver
        spin = spinner()
        n = 1024
        rng = np.random.default_rng(3)
        a, b, c = (cuda.to_device(rng.standard_normal(5 * n * n).astype(np.float32)) for _ in range(3))
        other, mine = stream(), stream()
        handle = sgblas.Handle(stream=mine)   # the set-up step: kernels become resident here
        print(json.dumps(dict(sms=cuda.get_current_device().MULTIPROCESSOR_COUNT)))
        cuda.synchronize()
        cases = [("N", "N", 1024, 1024, 1024, 1.0, None), ("N", "N", 512, 512, 512, 1.0, None),
                 ("N", "T", 300, 200, 100, 1.0, None), ("T", "N", 300, 200, 100, 1.0, None),
                 ("T", "T", 333, 222, 111, 1.0, None), ("N", "N", 1001, 999, 77, 1.0, None),
                 ("N", "N", 512, 512, 512, 0.0, None), ("N", "N", 64, 8192, 8, 1.0, None),
                 ("N", "N", 2100, 2100, 600, 1.0, None)]
        if cuda.get_current_device().MULTIPROCESSOR_COUNT == 132:
            # 2100 x 2100's 289 tiles of 128 x 128 are one wave of 264 and 25 CTAs: a tail plan (the
            # tile kernel, then the rest as sub-problems), run by name whatever the model chooses
            cases.append(("N", "N", 2100, 2100, 600, 1.0, "sgemm_simt_nn_128x128x16_2s_a16/tail"))
        for attempt in ("first", "second"):
            for ta, tb, m, nn, k, alpha, cand in cases:
                lda, ldb = (m if ta == "N" else k), (k if tb == "N" else nn)
                ex = sgblas.explain(handle, ta, tb, m, nn, k if alpha else 0, a, lda, b, ldb, c, m)
                spin_on(spin, other, {SPIN})
                t0 = time.perf_counter()
                status = sgblas.sgemm(handle, ta, tb, m, nn, k, alpha, a, lda, b, ldb, 0.5, c, m, candidate=cand)
                host = time.perf_counter() - t0
                while busy(mine):
                    pass
                print(json.dumps(dict(call=attempt, kernel=cand or ex.kernel,
                                      tail=int(bool(cand and cand.endswith("/tail")) or len(ex.tail)),
                                      status=status.name, host=host, done=time.perf_counter() - t0,
                                      other_busy=busy(other))))
                cuda.synchronize()
        # Every kernel of the registry is loaded in the context: asking for its function in
        # the context returns at once even behind the busy stream.
        spin_on(spin, other, {SPIN})
        for name, loaded in handle._kernels.items():
            t0 = time.perf_counter()
            driver.kernel_function(loaded.function)
            print(json.dumps(dict(resident=name, host=time.perf_counter() - t0, other_busy=busy(other))))
        cuda.synchronize()
    """)
    calls = [r for r in records if "call" in r]
    assert len({r["kernel"] for r in calls}) >= 5, calls
    if records[0]["sms"] == 132:   # H100/H200 SXM: the named tail plan ran
        assert any(r["tail"] for r in calls), calls
    for r in calls:
        assert r["status"] == "SUCCESS", r
        assert r["host"] < HOST_LIMIT_S, f"{r['call']} call of {r['kernel']} took {r['host'] * 1e3:.1f} ms to return"
        assert r["other_busy"], f"{r['kernel']}: its stream finished only after the busy stream: {r}"
    resident = [r for r in records if "resident" in r]
    assert resident and all(r["host"] < HOST_LIMIT_S and r["other_busy"] for r in resident), resident


#: After the set-up, behind the busy stream: gemm (its first call, when initialize() did the
#: set-up), gemm again, gemm on a stream it has not met (a new handle), a Handle created then and
#: its first sgemm. Each is printed with its host time, whether the busy stream was still busy
#: when the call's own stream finished, and whether the result is right.
_CALLS_BEHIND_A_BUSY_STREAM = textwrap.dedent(r"""
    def behind_busy(label, call):
        spin_on(spin, other, SPIN)
        t0 = time.perf_counter()
        check, own = call()
        host = time.perf_counter() - t0
        own.synchronize()
        print(json.dumps(dict(call=label, host=host, other_busy=busy(other), ok=bool(check()))))
        cp.cuda.Device().synchronize()

    def gemm_on(s):
        def call():
            with s:
                sgblas.gemm(a, b, c)
            return (lambda: (c == 2.0 * n).all()), s
        return call

    def sgemm_on_a_new_handle():
        s = cp.cuda.Stream(non_blocking=True)
        h = sgblas.Handle(stream=s)
        status = sgblas.sgemm(h, "N", "N", n, n, n, 1.0, a, n, b, n, 0.0, c, n)
        handles.append(h)   # closing would free its workspace, which waits for the device
        return (lambda: status == sgblas.Status.SUCCESS and (c == 2.0 * n).all()), s

    handles = []
    mine = cp.cuda.Stream(non_blocking=True)
    for label, call in (("gemm", gemm_on(mine)), ("gemm again", gemm_on(mine)),
                        ("gemm on a new stream", gemm_on(cp.cuda.Stream(non_blocking=True))),
                        ("Handle() and its first sgemm", sgemm_on_a_new_handle)):
        behind_busy(label, call)
""")


@pytest.mark.parametrize("order", ["initialize_then_cupy", "cupy_then_initialize"])
def test_initialize_ahead_makes_gemms_first_call_and_every_later_one_return_at_once(order):
    pytest.importorskip("cupy")
    records = _run(textwrap.dedent(rf"""
        SPIN = {SPIN}
        import sgblas
        if "{order}" == "initialize_then_cupy":
            sgblas.initialize()   # makes the primary context, which CuPy then uses
        import cupy as cp
        n = 1024
        a = cp.ones((n, n), cp.float32, order="F")
        b = cp.full((n, n), 2.0, cp.float32, order="F")
        c = cp.empty((n, n), cp.float32, order="F")
        cp.cuda.Device().synchronize()
        if "{order}" == "cupy_then_initialize":
            sgblas.initialize()
        spin = spinner()
        other = stream()
    """) + _CALLS_BEHIND_A_BUSY_STREAM)
    assert [r["call"] for r in records] == ["gemm", "gemm again", "gemm on a new stream",
                                            "Handle() and its first sgemm"], records
    for r in records:
        assert r["ok"] and r["other_busy"] and r["host"] < HOST_LIMIT_S, r


def test_gemms_first_call_without_initialize_may_wait_once_and_no_later_call_does():
    pytest.importorskip("cupy")
    records = _run(textwrap.dedent(rf"""
        SPIN = {SPIN}
        import cupy as cp
        import sgblas
        n = 1024
        a = cp.ones((n, n), cp.float32, order="F")
        b = cp.full((n, n), 2.0, cp.float32, order="F")
        c = cp.empty((n, n), cp.float32, order="F")
        cp.cuda.Device().synchronize()
        spin = spinner()
        other = stream()
    """) + _CALLS_BEHIND_A_BUSY_STREAM)
    assert [r["call"] for r in records] == ["gemm", "gemm again", "gemm on a new stream",
                                            "Handle() and its first sgemm"], records
    first, *later = records
    assert first["ok"], first  # it is the device's set-up: it may have waited for the busy stream
    for r in later:
        assert r["ok"] and r["other_busy"] and r["host"] < HOST_LIMIT_S, r


#: Three calls of one shape (the first builds its plan, the others reuse it), then a shape that
#: the H200 runs as a tail plan (a tile kernel, then K split over the rest of C and a
#: reduction): every launch of a plan must follow the caller's stream.
_STREAM_SHAPES = [(1024, 1024, 1024)] * 3 + [(2100, 2100, 600)]


@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_gemm_follows_the_current_stream_of_the_operands_library(library):
    if library == "cupy":
        body = r"""
            import cupy as cp
            import sgblas
            spin = spinner()
            for attempt, (m, n, k) in enumerate(SHAPES):
                a = cp.zeros((m, k), cp.float32, order="F")
                b = cp.zeros((k, n), cp.float32, order="F")
                c = cp.full((m, n), np.nan, cp.float32, order="F")
                cp.cuda.Device().synchronize()
                s = cp.cuda.Stream(non_blocking=True)
                with s:
                    spin_on(spin, s.ptr, 0.2)   # A and B are written behind a long kernel
                    a.fill(2.0)
                    b.fill(3.0)
                    sgblas.gemm(a, b, c)
                    fresh = sgblas.gemm(a, b)   # allocated on that stream too
                s.synchronize()
                print(json.dumps(dict(call=attempt, ok=bool((c == 6.0 * k).all()),
                                      fresh=bool((fresh == 6.0 * k).all()))))
        """
    else:
        body = r"""
            import torch
            import sgblas
            spin = spinner()
            for attempt, (m, n, k) in enumerate(SHAPES):
                a = torch.zeros((m, k), dtype=torch.float32, device="cuda")
                b = torch.zeros((k, n), dtype=torch.float32, device="cuda")
                c = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
                torch.cuda.synchronize()
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    spin_on(spin, s.cuda_stream, 0.2)
                    a.fill_(2.0)
                    b.fill_(3.0)
                    sgblas.gemm(a, b, c)
                    fresh = sgblas.gemm(a, b)
                s.synchronize()
                print(json.dumps(dict(call=attempt, ok=bool((c == 6.0 * k).all()),
                                      fresh=bool((fresh == 6.0 * k).all()))))
        """
    pytest.importorskip(library)
    records = _run(f"SHAPES = {_STREAM_SHAPES!r}\n" + textwrap.dedent(body))
    assert len(records) == len(_STREAM_SHAPES) and all(r["ok"] and r["fresh"] for r in records), records


def test_gemm_on_a_numba_stream():
    records = _run(r"""
        from numba import cuda
        import sgblas
        from sgblas.handle import stream_handle
        spin = spinner()
        n = 512
        s = cuda.stream()
        for attempt in range(2):
            a = cuda.device_array((n, n), np.float32, order="F", stream=s)
            b = cuda.device_array((n, n), np.float32, order="F", stream=s)
            spin_on(spin, stream_handle(s), 0.2)
            a.copy_to_device(np.ones((n, n), np.float32, order="F"), stream=s)
            b.copy_to_device(np.full((n, n), 3.0, np.float32, order="F"), stream=s)
            c = sgblas.gemm(a, b, stream=s)
            s.synchronize()
            print(json.dumps(dict(call=attempt, ok=bool((c.copy_to_host() == 3.0 * n).all()))))
    """)
    assert len(records) == 2 and all(r["ok"] for r in records), records
