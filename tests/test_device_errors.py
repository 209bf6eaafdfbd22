"""Device errors become statuses: a failed launch is EXECUTION_FAILED, never an escaping exception,
C is left alone, and the next call works; no device at all is NOT_INITIALIZED.

CPU: the one launch function (``sgblas.dispatch.plan.launch``) is replaced by one that raises.
GPU: the driver itself rejects a launch (a grid or block beyond the hardware's limits, passed to
the real launch): a real, non-sticky driver error, so the process stays healthy,
which the tests then check. (An invalid or destroyed stream handle would be the other obvious
way, but the driver may dereference a bad handle and crash the process, so it is not used.)

Also here: the compute-sanitizer script (``tests/sanitizer_cases.py``) run on one case under
the simulator, and made to fail, so it is known to work before it is run on a GPU.
"""

from __future__ import annotations


import numpy as np
import pytest
from numba import cuda

import sgblas
import sgblas.dispatch.plan as plan_module
from sgblas import SgblasError, Status
from sgblas.kernels import spec as registry

from helpers import Case

SEED = 9090


@pytest.fixture(scope="module")
def handle():
    with sgblas.Handle() as h:
        yield h


class _DriverError(Exception):
    """Stands in for cuda.core's CUDAError."""


def _raiser(exc, role="gemm"):
    """A launch that raises ``exc`` for kernels of ``role`` and launches the others."""
    real = plan_module.launch

    def launch(kernel, grid, stream, args, after=False):
        if registry.by_name(kernel.name).role == role:
            raise exc
        return real(kernel, grid, stream, args, after)
    return launch


def _launching_with(monkeypatch, role, grid=None, block=None):
    """Launch kernels of ``role`` with another grid or block (what the driver must refuse)."""
    real = plan_module.launch

    def launch(kernel, g, stream, args, after=False):
        if registry.by_name(kernel.name).role == role:
            kernel = kernel._replace(block=block or kernel.block)
            g = grid or g
        return real(kernel, g, stream, args, after)
    monkeypatch.setattr(plan_module, "launch", launch)


def _assert_healthy(handle, seed):
    """A valid call after the failure succeeds with the right result."""
    case = Case(seed, "N", "T", 7, 5, 3, pad=1)
    assert sgblas.sgemm(handle, *case.args(1.5, 0.5)) == Status.SUCCESS, sgblas.last_error_message()
    case.check(1.5, 0.5)


# --------------------------------------------------------------------------------------------
# launch failures (CPU: raising launchers)
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("exc", [
    _DriverError("CUDA_ERROR_INVALID_VALUE: invalid argument"),
    RuntimeError("cuCtxPushCurrent failed"),
    MemoryError("out of host memory"),
    ValueError("odd value"),
    KeyError(("sgemm_x", ("N", "N"))),
])
def test_gemm_launch_failure_is_execution_failed(handle, monkeypatch, exc):
    case = Case(SEED, "N", "N", 6, 5, 4, pad=2)
    monkeypatch.setattr(plan_module, "launch", _raiser(exc))
    status = sgblas.sgemm(handle, *case.args(1.0, 1.0))
    assert status == Status.EXECUTION_FAILED
    message = sgblas.last_error_message()
    assert message.startswith("the kernel launch failed") and type(exc).__name__ in message, message
    np.testing.assert_array_equal(case.dC.copy_to_host(), case.C)


def test_next_call_after_a_launch_failure_succeeds(handle, monkeypatch):
    case = Case(SEED + 5, "T", "T", 5, 6, 2)
    monkeypatch.setattr(plan_module, "launch", _raiser(_DriverError("CUDA_ERROR_INVALID_VALUE")))
    assert sgblas.sgemm(handle, *case.args(1.0, 0.0)) == Status.EXECUTION_FAILED
    monkeypatch.undo()
    _assert_healthy(handle, SEED + 1)


@pytest.mark.parametrize("k, alpha", [(0, 1.0), (3, 0.0)])
def test_scale_launch_failure_is_execution_failed(handle, monkeypatch, k, alpha):
    case = Case(SEED + 2, "T", "N", 5, 4, 3)
    monkeypatch.setattr(plan_module, "launch", _raiser(_DriverError("launch out of resources"), "scale"))
    args = list(case.args(alpha, 2.0))
    args[4] = k
    assert sgblas.sgemm(handle, *args) == Status.EXECUTION_FAILED
    assert "launch out of resources" in sgblas.last_error_message()
    np.testing.assert_array_equal(case.dC.copy_to_host(), case.C)


def test_gemm_raises_sgblas_error_with_execution_failed(handle, monkeypatch):
    a = cuda.to_device(np.ones((3, 2), np.float32))
    b = cuda.to_device(np.ones((2, 4), np.float32))
    monkeypatch.setattr(plan_module, "launch", _raiser(_DriverError("CUDA_ERROR_LAUNCH_FAILED")))
    with pytest.raises(SgblasError) as info:
        sgblas.gemm(a, b, handle=handle)
    assert info.value.status == Status.EXECUTION_FAILED
    assert not isinstance(info.value, ValueError)
    assert "CUDA_ERROR_LAUNCH_FAILED" in str(info.value)


def test_keyboard_interrupt_is_not_swallowed(handle, monkeypatch):
    """Only errors become statuses: an interrupt during the launch still interrupts."""
    case = Case(SEED + 3, "N", "N", 3, 3, 3)
    monkeypatch.setattr(plan_module, "launch", _raiser(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        sgblas.sgemm(handle, *case.args(1.0, 0.0))


def test_no_kernel_accepting_is_internal_error(handle, monkeypatch):
    """docs/api.md: INTERNAL_ERROR when no kernel accepts a validated problem.

    With no variant in the registry's GEMM list, planning finds none, which ``sgblas.api.run``
    must report as INTERNAL_ERROR, not as an AttributeError turned EXECUTION_FAILED.
    """
    case = Case(SEED + 4, "N", "N", 4, 4, 4)
    monkeypatch.setattr(registry, "GEMM_KERNELS", ())
    handle._plans.clear()
    status = sgblas.sgemm(handle, *case.args(1.0, 0.0))
    handle._plans.clear()
    assert status == Status.INTERNAL_ERROR, (Status(status).name, sgblas.last_error_message())
    np.testing.assert_array_equal(case.dC.copy_to_host(), case.C)


# --------------------------------------------------------------------------------------------
# no device
# --------------------------------------------------------------------------------------------

def test_no_device_gemm_raises_not_initialized(monkeypatch):
    import sgblas.gemm_arrays
    import sgblas.handle

    monkeypatch.setattr(sgblas.handle, "device_count", lambda: 0)
    monkeypatch.setattr(sgblas.gemm_arrays, "_default_handles", {})  # no cached default handle
    a = cuda.to_device(np.ones((2, 2), np.float32))
    with pytest.raises(SgblasError) as info:
        sgblas.gemm(a, a)
    assert info.value.status == Status.NOT_INITIALIZED
    assert "no CUDA device" in str(info.value)


def test_no_device_explicit_device_raises_not_initialized(monkeypatch):
    import sgblas.handle

    monkeypatch.setattr(sgblas.handle, "device_count", lambda: 0)
    with pytest.raises(SgblasError) as info:
        sgblas.Handle(device=0)
    assert info.value.status == Status.NOT_INITIALIZED and not isinstance(info.value, ValueError)


@pytest.mark.parametrize("broken", ["cuInit fails", "cuDeviceGetCount fails", "libcuda missing"])
def test_device_count_survives_a_broken_driver(monkeypatch, broken):
    """A driver that fails while being probed counts as no device, not as a crash."""
    from sgblas.runtime import device, driver

    if device.SIMULATOR:
        pytest.skip("the simulator always reports one device")

    class _Broken:
        def cuInit(self, flags):
            return 999 if broken == "cuInit fails" else 0

        def cuDeviceGetCount(self, out):
            return 101 if broken == "cuDeviceGetCount fails" else 0

    def lib():
        if broken == "libcuda missing":
            raise OSError("libcuda.so.1: cannot open shared object file")
        return _Broken()

    device.device_count.cache_clear()
    try:
        monkeypatch.setattr(driver, "_lib", lib)
        monkeypatch.setattr(driver, "_init_code", None)
        assert device.device_count() == 0
    finally:
        monkeypatch.undo()
        device.device_count.cache_clear()
        assert device.device_count() >= 1


# --------------------------------------------------------------------------------------------
# GPU: a real driver error
# --------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_driver_rejects_grid_is_execution_failed_gpu(handle, monkeypatch, record_property):
    case = Case(SEED + 10, "N", "N", 256, 192, 64, pad=4)
    _launching_with(monkeypatch, "gemm", grid=(1, 70_000, 1))  # gridDim.y limit is 65535
    status = sgblas.sgemm(handle, *case.args(1.0, 0.5))
    message = sgblas.last_error_message()
    record_property("driver_message", message)
    print(f"{Status(status).name}: {message}")
    assert status == Status.EXECUTION_FAILED, message
    cuda.synchronize()
    np.testing.assert_array_equal(case.dC.copy_to_host(), case.C)
    monkeypatch.undo()
    assert sgblas.sgemm(handle, *case.args(1.0, 0.5)) == Status.SUCCESS
    case.check(1.0, 0.5)
    cuda.synchronize()  # the context is not in an error state
    _assert_healthy(handle, SEED + 11)


@pytest.mark.gpu
def test_driver_rejects_block_is_execution_failed_gpu(handle, monkeypatch, record_property):
    case = Case(SEED + 12, "T", "N", 100, 90, 80)
    _launching_with(monkeypatch, "gemm", block=(2048, 1, 1))  # above 1024
    status = sgblas.sgemm(handle, *case.args(1.0, 0.5))
    message = sgblas.last_error_message()
    record_property("driver_message", message)
    print(f"{Status(status).name}: {message}")
    assert status == Status.EXECUTION_FAILED, message
    cuda.synchronize()
    np.testing.assert_array_equal(case.dC.copy_to_host(), case.C)
    monkeypatch.undo()
    _assert_healthy(handle, SEED + 13)


@pytest.mark.gpu
def test_driver_rejects_scale_grid_is_execution_failed_gpu(handle, monkeypatch):
    case = Case(SEED + 14, "N", "N", 64, 40, 5)
    _launching_with(monkeypatch, "scale", grid=(1, 1, 70_000))  # gridDim.z limit is 65535
    args = list(case.args(1.0, 3.0))
    args[4] = 0
    assert sgblas.sgemm(handle, *args) == Status.EXECUTION_FAILED
    cuda.synchronize()
    np.testing.assert_array_equal(case.dC.copy_to_host(), case.C)
    monkeypatch.undo()
    assert sgblas.sgemm(handle, *args) == Status.SUCCESS
    np.testing.assert_array_equal(case.dC.copy_to_host(), np.float32(3.0) * case.C)


# --------------------------------------------------------------------------------------------
# the compute-sanitizer script, checked on the simulator (and on a GPU, unsanitised)
# --------------------------------------------------------------------------------------------

def test_sanitizer_script_runs_a_case_and_passes(capsys):
    import sanitizer_cases

    assert sanitizer_cases.main(["--variant", "general_tn", "--kinds", "short_k", "--betas", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "1 cases, 0 failed" in out and "ok   TN short_k" in out


def test_sanitizer_script_fails_on_a_wrong_result(monkeypatch, capsys):
    import sanitizer_cases

    monkeypatch.setattr(plan_module, "launch", lambda *args: None)  # C left as it was: wrong
    assert sanitizer_cases.main(["--variant", "general_nt", "--kinds", "tile", "--betas", "0.5"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_sanitizer_script_reports_unreached_variants(monkeypatch, capsys):
    import sanitizer_cases

    monkeypatch.setattr(sanitizer_cases, "LADDER", ())  # no candidate shape at all
    assert sanitizer_cases.main(["--variant", "general_tt", "--no-scale"]) == 2
    assert "MISS" in capsys.readouterr().out


def test_sanitizer_script_scale_cases(monkeypatch, capsys):
    import sanitizer_cases

    assert sanitizer_cases.main(["--variant", "scale", "--kinds", "tile", "--betas", "0"]) == 0
    assert "2 cases, 0 failed" in capsys.readouterr().out
