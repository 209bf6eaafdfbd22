"""Device affinity: a handle is bound to one device, refuses memory of any other, and makes its
context current only for the launch, restoring the caller's afterwards (docs/api.md, "Devices").

CPU (and one GPU): the device checks with ``sgblas.operands.pointer_device`` monkeypatched to
report another device, and the context switching (``sgblas.runtime.device.push_context`` / ``pop_context``) with the
driver calls replaced by recorders. (tests/test_api.py already covers A on another device and a
host pointer; these cover the rest.)

``multigpu`` (two or more GPUs): a handle on device 1 used while device 0 is current, arrays of
the wrong device (with and without peer access), ``gemm``'s sentence, and two handles on two
devices driven from two threads at once.
"""

from __future__ import annotations

import threading
import traceback
from contextlib import contextmanager

import numpy as np
import pytest
from numba import cuda

import sgblas
import sgblas.dispatch.plan as plan_module
import sgblas.runtime.device as device_module
import sgblas.operands as operands_module
from sgblas import InvalidValueError, Status
from sgblas.runtime.device import SIMULATOR
from sgblas.runtime.driver import DriverError

from helpers import Case

SEED = 777


@pytest.fixture(scope="module")
def handle():
    with sgblas.Handle() as h:
        yield h


def _ptr(x) -> int:
    return operands_module.read_operand(x, "x").ptr


def _report_device(monkeypatch, devices: dict[int, int]):
    """Make the pointer query say ``devices[ptr]`` for the given pointers (others: as before)."""
    real = operands_module.pointer_device
    monkeypatch.setattr(operands_module, "pointer_device", lambda p: devices.get(p, real(p)))
    operands_module.forget_devices()  # the patched query must be asked, not a remembered answer


# --------------------------------------------------------------------------------------------
# the device checks (pointer_device monkeypatched)
# --------------------------------------------------------------------------------------------

def test_b_on_another_device_is_invalid(handle, monkeypatch):
    case = Case(SEED, "N", "T", 5, 4, 3, pad=1)
    _report_device(monkeypatch, {_ptr(case.dB): 1})
    assert sgblas.sgemm(handle, *case.args(1.0, 0.5)) == Status.INVALID_VALUE
    message = sgblas.last_error_message()
    assert message.startswith("B ") and "device 1" in message and f"device {handle.device}" in message
    np.testing.assert_array_equal(case.dC.copy_to_host(), case.C)


def test_c_on_another_device_is_invalid_and_untouched(handle, monkeypatch):
    case = Case(SEED + 1, "T", "N", 5, 4, 3, pad=1)
    _report_device(monkeypatch, {_ptr(case.dC): 1})
    assert sgblas.sgemm(handle, *case.args(1.0, 0.5)) == Status.INVALID_VALUE
    assert sgblas.last_error_message().startswith("C ") and "device 1" in sgblas.last_error_message()
    np.testing.assert_array_equal(case.dC.copy_to_host(), case.C)


def test_c_on_another_device_is_refused_even_when_k_is_zero(handle, monkeypatch):
    case = Case(SEED + 2, "N", "N", 5, 4, 3)
    _report_device(monkeypatch, {_ptr(case.dC): 1})
    args = list(case.args(1.0, 2.0))
    args[4] = 0
    assert sgblas.sgemm(handle, *args) == Status.INVALID_VALUE
    np.testing.assert_array_equal(case.dC.copy_to_host(), case.C)


def test_a_and_b_of_another_device_are_not_examined_when_k_is_zero(handle, monkeypatch):
    case = Case(SEED + 3, "N", "N", 5, 4, 3)
    _report_device(monkeypatch, {_ptr(case.dA): 1, _ptr(case.dB): 1})
    args = list(case.args(1.0, 2.0))
    args[4] = 0
    assert sgblas.sgemm(handle, *args) == Status.SUCCESS, sgblas.last_error_message()
    np.testing.assert_array_equal(case.dC.copy_to_host(), np.float32(2.0) * case.C)


def test_nothing_is_examined_when_m_is_zero(handle, monkeypatch):
    case = Case(SEED + 4, "N", "N", 5, 4, 3)
    _report_device(monkeypatch, {_ptr(case.dA): 1, _ptr(case.dB): 1, _ptr(case.dC): 1})
    args = list(case.args(1.0, 2.0))
    args[2] = 0
    assert sgblas.sgemm(handle, *args) == Status.SUCCESS


def test_the_check_compares_with_the_handles_device_not_device_0(monkeypatch):
    """A handle bound to device 1 refuses device-0 memory (and, simulated, accepts device 1's)."""
    h = sgblas.Handle()
    h.device = 1  # pretend the handle is bound to device 1: refusing needs no launch
    try:
        case = Case(SEED + 5, "N", "N", 6, 5, 4)
        assert sgblas.sgemm(h, *case.args(1.0, 0.0)) == Status.INVALID_VALUE
        assert "not of the handle's device 1" in sgblas.last_error_message()
        np.testing.assert_array_equal(case.dC.copy_to_host(), case.C)
        if SIMULATOR:  # every pointer on device 1: accepted and computed
            monkeypatch.setattr(operands_module, "pointer_device", lambda p: 1)
            operands_module.forget_devices()  # the patched query must be asked, not a remembered answer
            assert sgblas.sgemm(h, *case.args(1.0, 0.0)) == Status.SUCCESS, sgblas.last_error_message()
            case.check(1.0, 0.0)
    finally:
        h.close()


def test_gemm_names_the_device_mismatch(handle, monkeypatch):
    a = cuda.to_device(np.ones((3, 2), np.float32))
    b = cuda.to_device(np.ones((2, 4), np.float32))
    c = cuda.to_device(np.zeros((3, 4), np.float32, order="F"))
    _report_device(monkeypatch, {_ptr(b): 1})
    with pytest.raises(InvalidValueError) as info:
        sgblas.gemm(a, b, c, handle=handle)
    message = str(info.value)
    assert message.startswith("b ") and "device 1" in message and f"handle's device {handle.device}" in message
    np.testing.assert_array_equal(c.copy_to_host(), 0.0)


def test_explain_names_the_device_mismatch(handle, monkeypatch):
    case = Case(SEED + 6, "N", "N", 4, 4, 4)
    _report_device(monkeypatch, {_ptr(case.dA): 1})
    e = sgblas.explain(handle, "N", "N", 4, 4, 4, case.dA, case.lda, case.dB, case.ldb, case.dC, case.ldc)
    assert e.kernel is None and e.status == Status.INVALID_VALUE and "device 1" in e.message


# --------------------------------------------------------------------------------------------
# pointer_device itself, with the driver's answer replaced
# --------------------------------------------------------------------------------------------

@pytest.fixture
def driver_module():
    from cuda.bindings import driver

    return driver


@pytest.mark.parametrize("memtype, ordinal, expected", [
    ("CU_MEMORYTYPE_DEVICE", 1, 1),
    ("CU_MEMORYTYPE_UNIFIED", 2, 2),   # managed memory counts as memory of its device
    ("CU_MEMORYTYPE_HOST", 0, None),
    ("CU_MEMORYTYPE_ARRAY", 0, None),
])
def test_pointer_device_classifies_memory(monkeypatch, driver_module, memtype, ordinal, expected):
    import sgblas.runtime.driver

    d = driver_module
    monkeypatch.setattr(device_module, "BACKEND", device_module._Driver())
    monkeypatch.setattr(sgblas.runtime.driver, "pointer_attributes",
                        lambda ptr: (int(getattr(d.CUmemorytype, memtype)), ordinal))
    assert device_module.pointer_device(0x7F0000001000) == expected


def test_pointer_device_of_an_unknown_pointer_is_none(monkeypatch):
    monkeypatch.setattr(device_module, "BACKEND", device_module._Driver())
    import sgblas.runtime.driver

    monkeypatch.setattr(sgblas.runtime.driver, "pointer_attributes", lambda ptr: None)  # the driver's error
    assert device_module.pointer_device(0x1234) is None
    monkeypatch.setattr(sgblas.runtime.driver, "pointer_attributes", lambda ptr: (0, -1))  # memory CUDA doesn't know
    assert device_module.pointer_device(0x1234) is None
    monkeypatch.setattr(sgblas.runtime.driver, "pointer_attributes", lambda ptr: (2, 1))  # device memory of GPU 1
    assert device_module.pointer_device(0x1234) == 1


# --------------------------------------------------------------------------------------------
# the context switch around a launch (push/pop, with the driver replaced)
# --------------------------------------------------------------------------------------------

class _FakeContexts:
    """A per-call-stack stand-in for the driver's current context."""

    def __init__(self, current: int, push_error: int | None = None):
        self.stack = [current]
        self.push_error = push_error
        self.pushes: list[int] = []
        self.pops = 0

    def current(self) -> int:
        return self.stack[-1]

    def push(self, ctx):
        if self.push_error is not None:
            raise DriverError("cuCtxPushCurrent", self.push_error)
        self.pushes.append(int(ctx))
        self.stack.append(int(ctx))

    def pop(self):
        self.pops += 1
        self.stack.pop()

    @contextmanager
    def installed(self, monkeypatch):
        if SIMULATOR:  # the real pointer query needs a driver; every pointer is on device 0
            monkeypatch.setattr(operands_module, "pointer_device", lambda p: 0)
            operands_module.forget_devices()  # the patched query must be asked, not a remembered answer
        monkeypatch.setattr(device_module, "current_context_handle", self.current)
        monkeypatch.setattr(device_module, "push_context", self.push)
        monkeypatch.setattr(device_module, "pop_context", self.pop)
        yield self


def _scoped_call(handle, monkeypatch, contexts, launch, ctx=0xB0B):
    """sgemm on ``handle`` bound (for the test) to context ``ctx``, with ``launch`` recording."""
    case = Case(SEED + 7, "N", "N", 4, 3, 2)
    monkeypatch.setattr(plan_module, "launch", launch)
    # The fake context is the handle's only for the call: closing the handle frees its workspace
    # in its real context.
    with monkeypatch.context() as scoped:
        scoped.setattr(handle, "_context", ctx)
        with contexts.installed(monkeypatch):
            status = sgblas.sgemm(handle, *case.args(1.0, 0.0))
    return status, case


def test_launch_runs_in_the_handles_context_and_the_callers_is_restored(monkeypatch):
    contexts = _FakeContexts(current=0xA11CE)
    seen = []
    with sgblas.Handle() as h:
        status, _ = _scoped_call(h, monkeypatch, contexts, lambda *a: seen.append(contexts.current()))
    assert status == Status.SUCCESS
    assert seen == [0xB0B] and contexts.pushes == [0xB0B] and contexts.pops == 1
    assert contexts.current() == 0xA11CE


def test_no_context_switch_when_the_handles_context_is_current(monkeypatch):
    contexts = _FakeContexts(current=0xB0B)
    with sgblas.Handle() as h:
        status, _ = _scoped_call(h, monkeypatch, contexts, lambda *a: None)
    assert status == Status.SUCCESS and contexts.pushes == [] and contexts.pops == 0


def test_callers_context_is_restored_when_the_launch_fails(monkeypatch):
    contexts = _FakeContexts(current=0)  # a thread with no current context

    def failing_launch(*args):
        raise RuntimeError("CUDA_ERROR_INVALID_VALUE")

    with sgblas.Handle() as h:
        status, case = _scoped_call(h, monkeypatch, contexts, failing_launch)
    assert status == Status.EXECUTION_FAILED
    assert contexts.pushes == [0xB0B] and contexts.pops == 1 and contexts.current() == 0


def test_failed_context_push_is_execution_failed(monkeypatch):
    contexts = _FakeContexts(current=0xA11CE, push_error=201)  # CUDA_ERROR_INVALID_CONTEXT
    launched = []
    with sgblas.Handle() as h:
        status, case = _scoped_call(h, monkeypatch, contexts, lambda *a: launched.append(1))
    assert status == Status.EXECUTION_FAILED and launched == []
    assert "cuCtxPushCurrent" in sgblas.last_error_message()
    assert contexts.pops == 0 and contexts.current() == 0xA11CE
    np.testing.assert_array_equal(case.dC.copy_to_host(), case.C)


# --------------------------------------------------------------------------------------------
# two or more GPUs
# --------------------------------------------------------------------------------------------

def _current_context() -> int:
    return device_module.current_context_handle()


def _on(device: int, host: np.ndarray):
    with cuda.gpus[device]:
        return cuda.to_device(host)


def _host(device: int, d) -> np.ndarray:
    with cuda.gpus[device]:
        cuda.synchronize()
        return d.copy_to_host()


class _Operands:
    """A column-major problem with its operands on chosen devices."""

    def __init__(self, seed, ta, tb, m, n, k, devices=(1, 1, 1)):
        self.case = Case.__new__(Case)  # reuse Case's host data without its device copies
        rng = np.random.default_rng(seed)
        from helpers import column_major, stored_shape

        c = self.case
        c.seed, c.ta, c.tb, c.m, c.n, c.k = seed, ta, tb, m, n, k
        a_rows, a_cols = stored_shape(ta, m, k)
        b_rows, b_cols = stored_shape(tb, k, n)
        c.lda, c.ldb, c.ldc = a_rows + 1, b_rows + 2, m + 3
        c.A = column_major(rng, a_rows, a_cols, c.lda)
        c.B = column_major(rng, b_rows, b_cols, c.ldb)
        c.C = column_major(rng, m, n, c.ldc, padding=-7.0)
        self.devices = devices
        c.dA, c.dB, c.dC = (_on(dev, x) for dev, x in zip(devices, (c.A, c.B, c.C)))

    def args(self, alpha, beta):
        return self.case.args(alpha, beta)

    def check(self, alpha, beta):
        with cuda.gpus[self.devices[2]]:
            cuda.synchronize()
            self.case.check(alpha, beta)


def _peer_access_enabled(from_device: int, to_device: int) -> bool:
    """Whether ``from_device``'s context may access ``to_device``'s memory now (state restored)."""
    from cuda.bindings import driver

    ctx_from = device_module.primary_context_handle(from_device)
    ctx_to = driver.CUcontext(device_module.primary_context_handle(to_device))
    (err,) = driver.cuCtxPushCurrent(driver.CUcontext(ctx_from))
    assert err == driver.CUresult.CUDA_SUCCESS, err
    try:
        (err,) = driver.cuCtxEnablePeerAccess(ctx_to, 0)
        if err == driver.CUresult.CUDA_SUCCESS:
            driver.cuCtxDisablePeerAccess(ctx_to)  # it was not enabled: leave it so
            return False
        return err == driver.CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
    finally:
        driver.cuCtxPopCurrent()


@pytest.fixture(scope="module")
def device1_handle():
    with sgblas.Handle(device=1) as h:
        yield h


@pytest.mark.multigpu
@pytest.mark.parametrize("ta, tb, k", [("N", "N", 300), ("T", "N", 257), ("N", "T", 0)])
def test_device_1_handle_while_device_0_is_current(device1_handle, ta, tb, k):
    ops = _Operands(SEED + 100, ta, tb, 1000, 600, k)
    with cuda.gpus[0]:
        before = _current_context()
        assert before == device_module.primary_context_handle(0)
        for _ in range(2):
            status = sgblas.sgemm(device1_handle, *ops.args(1.5, 0.5))
            assert status == Status.SUCCESS, sgblas.last_error_message()
            assert _current_context() == before, "the caller's context was not restored"
            assert cuda.get_current_device().id == 0
            ops.check(1.5, 0.5)
            ops.case.C = _host(1, ops.case.dC)  # the next call starts from this result


@pytest.mark.multigpu
def test_device_1_handle_from_a_thread_without_a_context(device1_handle):
    ops = _Operands(SEED + 101, "N", "N", 512, 512, 512)
    seen = {}

    def body():
        try:
            seen["before"] = _current_context()
            seen["status"] = sgblas.sgemm(device1_handle, *ops.args(1.0, 0.0))
            seen["after"] = _current_context()
        except BaseException:
            seen["error"] = traceback.format_exc()

    t = threading.Thread(target=body)
    t.start()
    t.join(300)
    assert "error" not in seen, seen.get("error")
    assert seen["status"] == Status.SUCCESS and seen["before"] == seen["after"] == 0
    ops.check(1.0, 0.0)


@pytest.mark.multigpu
@pytest.mark.parametrize("wrong", ["A", "B", "C"])
def test_device_1_handle_refuses_device_0_memory(device1_handle, wrong):
    devices = tuple(0 if name == wrong else 1 for name in "ABC")
    ops = _Operands(SEED + 110, "N", "N", 256, 128, 64, devices)
    assert not _peer_access_enabled(1, 0), "peer access 1 -> 0 is already enabled; the test needs it off"
    with cuda.gpus[0]:
        before = _current_context()
        assert sgblas.sgemm(device1_handle, *ops.args(1.0, 0.5)) == Status.INVALID_VALUE
        message = sgblas.last_error_message()
        assert message.startswith(f"{wrong} ") and "device 0" in message and "handle's device 1" in message
        assert _current_context() == before
    np.testing.assert_array_equal(_host(devices[2], ops.case.dC), ops.case.C)
    assert not _peer_access_enabled(1, 0), "sgemm enabled peer access"


@pytest.mark.multigpu
def test_device_0_memory_refused_even_with_peer_access(device1_handle):
    from cuda.bindings import driver

    err, can = driver.cuDeviceCanAccessPeer(1, 0)
    if err != driver.CUresult.CUDA_SUCCESS or not can:
        pytest.skip("device 1 cannot access device 0's memory")
    ops = _Operands(SEED + 111, "N", "N", 256, 128, 64, (0, 1, 1))
    ctx0 = driver.CUcontext(device_module.primary_context_handle(0))
    driver.cuCtxPushCurrent(driver.CUcontext(device_module.primary_context_handle(1)))
    (err,) = driver.cuCtxEnablePeerAccess(ctx0, 0)
    driver.cuCtxPopCurrent()
    enabled_here = err == driver.CUresult.CUDA_SUCCESS
    try:
        assert sgblas.sgemm(device1_handle, *ops.args(1.0, 0.5)) == Status.INVALID_VALUE
        assert "device 0" in sgblas.last_error_message()
        np.testing.assert_array_equal(_host(1, ops.case.dC), ops.case.C)
    finally:
        if enabled_here:
            driver.cuCtxPushCurrent(driver.CUcontext(device_module.primary_context_handle(1)))
            driver.cuCtxDisablePeerAccess(ctx0)
            driver.cuCtxPopCurrent()


@pytest.mark.multigpu
def test_gemm_sentence_names_the_devices(device1_handle):
    with cuda.gpus[0]:
        a0 = cuda.to_device(np.ones((64, 32), np.float32))
    with cuda.gpus[1]:
        b1 = cuda.to_device(np.ones((32, 16), np.float32))
        c1 = cuda.to_device(np.zeros((64, 16), np.float32, order="F"))
    with pytest.raises(InvalidValueError) as info:
        sgblas.gemm(a0, b1, c1, handle=device1_handle)
    assert "a is in memory of device 0" in str(info.value) and "handle's device 1" in str(info.value)
    with cuda.gpus[0], pytest.raises(InvalidValueError) as info:
        # b1 is on device 1; without a handle gemm uses the current device's (device 0)
        sgblas.gemm(b1, cuda.to_device(np.ones((16, 8), np.float32)))
    assert "device 1" in str(info.value) and "handle's device 0" in str(info.value)


@pytest.mark.multigpu
def test_two_devices_from_two_threads(device1_handle):
    with cuda.gpus[0]:
        h0 = sgblas.Handle(device=0)
    problems = {
        0: [_Operands(SEED + 120 + i, "N", "T", 800, 700, 600, (0, 0, 0)) for i in range(3)],
        1: [_Operands(SEED + 130 + i, "T", "N", 700, 800, 500, (1, 1, 1)) for i in range(3)],
    }
    handles = {0: h0, 1: device1_handle}
    barrier = threading.Barrier(2)
    errors = []

    def body(dev):
        try:
            barrier.wait()
            for ops in problems[dev]:
                assert sgblas.sgemm(handles[dev], *ops.args(0.75, 0.0)) == Status.SUCCESS, \
                    sgblas.last_error_message()
        except BaseException:
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=body, args=(dev,)) for dev in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, "\n".join(errors)
    for dev in (0, 1):
        for ops in problems[dev]:
            ops.check(0.75, 0.0)
    h0.close()
