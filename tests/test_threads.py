"""Host threads: concurrent sgemm calls, each thread with its own handle and stream, or all on one
shared handle (docs/api.md: "a handle may be shared between threads").

Under the simulator the kernel *bodies* are serialised by a lock around the two launchers: the
simulator swaps one fake ``cuda`` module (its shared arrays included) into a kernel's globals
while the kernel runs, so two simulated launches of one kernel at once would share shared
memory. Everything sgblas does on the host (validation, dispatch, reading the handle's state,
the per-thread ``last_error_message``) still runs concurrently. The ``gpu`` variants launch
real kernels from several threads on non-blocking streams, nothing serialised.
"""

from __future__ import annotations

import itertools
import sys
import threading
import traceback
from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest
from numba import cuda

import sgblas
import sgblas.dispatch.plan as plan_module
from sgblas import Status
from sgblas.runtime.device import SIMULATOR

from helpers import Case

SEED = 4242
PAIRS = list(itertools.product("NT", "NT"))


def run_threads(target, count: int, timeout: float = 600.0) -> None:
    """Run ``target(index, barrier)`` in ``count`` threads started together; re-raise failures."""
    barrier = threading.Barrier(count)
    errors: list[str] = []

    def body(index):
        try:
            target(index, barrier)
        except BaseException:  # report every thread's failure, not only the first
            errors.append(f"thread {index}:\n{traceback.format_exc()}")

    threads = [threading.Thread(target=body, args=(i,), name=f"sgemm-{i}") for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread is still running (deadlock?)"
    assert not errors, "\n".join(errors)


@contextmanager
def frequent_thread_switches(interval: float = 1e-5):
    """Make the interpreter switch threads far more often, so host-side races show up."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


@contextmanager
def serialised_simulated_kernels():
    """Under the simulator, let one simulated kernel run at a time (see the module docstring)."""
    if not SIMULATOR:
        yield
        return
    lock = threading.Lock()

    def locked(launch):
        def call(*args, **kwargs):
            with lock:
                return launch(*args, **kwargs)
        return call

    with mock.patch.object(plan_module, "launch", locked(plan_module.launch)):
        yield


# --------------------------------------------------------------------------------------------
# simulator and GPU: correctness with real kernels
# --------------------------------------------------------------------------------------------

def test_threads_with_their_own_handles_and_streams():
    threads = 3
    cases = [Case(SEED + i, *PAIRS[i % 4], 9 + i, 7, 5 + i, pad=i % 2) for i in range(threads)]
    scaled = [Case(SEED + 10 + i, "N", "N", 6, 5, 1) for i in range(threads)]

    def work(i, barrier):
        with sgblas.Handle(stream=cuda.stream()) as h:
            barrier.wait()
            assert sgblas.sgemm(h, *cases[i].args(-1.5, 0.5)) == Status.SUCCESS, sgblas.last_error_message()
            args = list(scaled[i].args(2.0, 0.25))
            args[4] = 0  # k == 0: the C = beta * C kernel
            assert sgblas.sgemm(h, *args) == Status.SUCCESS, sgblas.last_error_message()
            h.stream.synchronize()

    with serialised_simulated_kernels():
        run_threads(work, threads)
    for i in range(threads):
        cases[i].check(-1.5, 0.5)
        got = scaled[i].dC.copy_to_host()
        np.testing.assert_array_equal(got, np.float32(0.25) * scaled[i].C)


def test_one_handle_shared_by_threads():
    threads = 3
    cases = [Case(SEED + 20 + i, *PAIRS[(i + 1) % 4], 8, 6 + i, 4, pad=1) for i in range(threads)]
    with sgblas.Handle() as shared:
        def work(i, barrier):
            barrier.wait()
            assert sgblas.sgemm(shared, *cases[i].args(1.0, 0.0)) == Status.SUCCESS, sgblas.last_error_message()

        with serialised_simulated_kernels():
            run_threads(work, threads)
    for case in cases:
        case.check(1.0, 0.0)


# --------------------------------------------------------------------------------------------
# host-side races (launches recorded, not run: many iterations are cheap)
# --------------------------------------------------------------------------------------------

class _Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.streams: list = []

    def launch(self, kernel, grid, stream, args, after=False):
        with self.lock:
            self.streams.append(stream)

    @contextmanager
    def installed(self):
        with mock.patch.object(plan_module, "launch", self.launch):
            yield self


def test_last_error_message_belongs_to_each_thread():
    """Each thread's failures are explained to that thread, whatever the others do."""
    case = Case(SEED + 30, "N", "N", 4, 3, 2)
    iterations = 300
    with sgblas.Handle() as shared, _Recorder().installed():
        mine = list(case.args(1.0, 0.0))
        mine[0] = "Z"
        assert sgblas.sgemm(shared, *mine) == Status.INVALID_VALUE  # the main thread's own failure
        def work(i, barrier):
            barrier.wait()
            for it in range(iterations):
                if i == 0:  # always valid
                    assert sgblas.sgemm(shared, *case.args(1.0, 0.0)) == Status.SUCCESS
                else:  # thread i passes m = -i: its message must name its own value
                    args = list(case.args(1.0, 0.0))
                    args[2] = -i
                    assert sgblas.sgemm(shared, *args) == Status.INVALID_VALUE
                    message = sgblas.last_error_message()
                    assert message is not None and f"m={-i} " in message, (it, message)

        with frequent_thread_switches():
            run_threads(work, 4)
    assert "transa='Z'" in sgblas.last_error_message(), sgblas.last_error_message()


def test_set_stream_while_other_threads_call():
    """A call sees either the old or the new stream, never a torn state; none fails."""
    case = Case(SEED + 31, "T", "N", 4, 3, 2)
    streams = [cuda.stream(), cuda.stream()]
    stop = threading.Event()
    with sgblas.Handle(stream=streams[0]) as shared, _Recorder().installed() as rec:
        valid = set()
        for s in streams:
            shared.set_stream(s)
            valid.add(_stream_key(shared._stream[2]))
        assert len(valid) == 2

        callers = 2
        done = threading.Semaphore(0)

        def work(i, barrier):
            barrier.wait()
            if i == 0:
                it = 0
                while not stop.is_set():
                    shared.set_stream(streams[it % 2])
                    it += 1
                return
            for _ in range(500):
                assert sgblas.sgemm(shared, *case.args(1.0, 0.0)) == Status.SUCCESS, sgblas.last_error_message()
            done.release()
            if i == 1:
                for _ in range(callers):
                    done.acquire()
                stop.set()

        with frequent_thread_switches():
            run_threads(work, 1 + callers)
    assert rec.streams, "no call was made while the stream changed"
    for s in rec.streams:
        assert _stream_key(s) in valid, f"a launch used {s!r}"


def _stream_key(launch_stream):
    """What identifies a launch stream: the simulated stream object, or the raw CUstream."""
    if SIMULATOR:
        return id(launch_stream)
    return getattr(launch_stream, "value", launch_stream) or 0  # a ctypes.c_void_p on a device


# --------------------------------------------------------------------------------------------
# GPU: real kernels from several threads on non-blocking streams
# --------------------------------------------------------------------------------------------

def _nonblocking_stream() -> int:
    from cuda.bindings import driver

    err, stream = driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
    assert err == driver.CUresult.CUDA_SUCCESS, err
    return int(stream)


def _sync_and_destroy(stream: int) -> None:
    from cuda.bindings import driver

    (err,) = driver.cuStreamSynchronize(stream)
    assert err == driver.CUresult.CUDA_SUCCESS, err
    driver.cuStreamDestroy(stream)


@pytest.mark.gpu
def test_threads_with_own_handles_on_nonblocking_streams_gpu():
    threads, calls = 4, 3
    shapes = [(1024, 1024, 1024), (1000, 777, 513), (2048, 512, 256)]
    cases = [[Case(SEED + 100 + 10 * t + c, *PAIRS[(t + c) % 4], *shapes[c], pad=(t + c) % 3)
              for c in range(calls)] for t in range(threads)]
    streams = [_nonblocking_stream() for _ in range(threads)]
    cuda.synchronize()  # the operands' uploads are done before any thread starts

    def work(t, barrier):
        with sgblas.Handle(stream=streams[t]) as h:
            barrier.wait()
            for c in range(calls):
                status = sgblas.sgemm(h, *cases[t][c].args(1.25, 0.5))
                assert status == Status.SUCCESS, sgblas.last_error_message()

    run_threads(work, threads)
    for s in streams:
        _sync_and_destroy(s)
    for row in cases:
        for case in row:
            case.check(1.25, 0.5)


@pytest.mark.gpu
def test_one_handle_shared_by_threads_gpu():
    threads, calls = 8, 2
    cases = [[Case(SEED + 200 + 10 * t + c, *PAIRS[(t + c) % 4], 768, 640, 384 + t, pad=t % 2)
              for c in range(calls)] for t in range(threads)]
    stream = _nonblocking_stream()
    cuda.synchronize()
    with sgblas.Handle(stream=stream) as shared:
        def work(t, barrier):
            barrier.wait()
            for c in range(calls):
                status = sgblas.sgemm(shared, *cases[t][c].args(-0.5, 0.0))
                assert status == Status.SUCCESS, sgblas.last_error_message()

        run_threads(work, threads)
    _sync_and_destroy(stream)
    for row in cases:
        for case in row:
            case.check(-0.5, 0.0)


@pytest.mark.gpu
def test_set_stream_race_launches_only_on_given_streams_gpu():
    """Real launches while another thread flips the stream: every product still lands."""
    streams = [_nonblocking_stream(), _nonblocking_stream()]
    cases = [Case(SEED + 300 + i, "N", "N", 512, 512, 256) for i in range(6)]
    cuda.synchronize()
    stop = threading.Event()
    with sgblas.Handle(stream=streams[0]) as shared:
        def work(t, barrier):
            barrier.wait()
            if t == 0:
                for it in range(20000):
                    shared.set_stream(streams[it % 2])
                    if stop.is_set():
                        break
                return
            for case in cases[(t - 1) * 3: t * 3]:
                assert sgblas.sgemm(shared, *case.args(1.0, 0.0)) == Status.SUCCESS
            if t == 2:
                stop.set()

        run_threads(work, 3)
    for s in streams:
        _sync_and_destroy(s)
    for case in cases:
        case.check(1.0, 0.0)
