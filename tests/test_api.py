"""sgemm's status rules, in the order docs/api.md documents, and its results."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numba import cuda

import sgblas
from sgblas import MathMode, Status
from helpers import Case, column_major

SEED = 20261129


@pytest.fixture(scope="module")
def handle():
    with sgblas.Handle() as h:
        yield h


def _call(handle, case, alpha=1.0, beta=0.0, **override):
    args = dict(zip(("transa", "transb", "m", "n", "k", "alpha", "A", "lda", "B", "ldb", "beta", "C", "ldc"),
                    case.args(alpha, beta)))
    args.update(override)
    return sgblas.sgemm(handle, *args.values())


@pytest.fixture
def case():
    return Case(SEED, "N", "N", 5, 4, 3, pad=2)


def _assert_untouched(case):
    np.testing.assert_array_equal(case.dC.copy_to_host(), case.C)


# --- NOT_INITIALIZED / NOT_SUPPORTED -------------------------------------------------------

def test_none_handle_is_not_initialized(case):
    assert _call(None, case) == Status.NOT_INITIALIZED
    _assert_untouched(case)


def test_closed_handle_is_not_initialized(case):
    h = sgblas.Handle()
    h.close()
    assert _call(h, case) == Status.NOT_INITIALIZED
    assert "not an open" in sgblas.last_error_message()
    _assert_untouched(case)


def test_tf32_handle_is_not_supported(case):
    with sgblas.Handle(math_mode=MathMode.TF32) as h:
        assert _call(h, case) == Status.NOT_SUPPORTED
    _assert_untouched(case)


# --- INVALID_VALUE ------------------------------------------------------------------------

@pytest.mark.parametrize("override, words", [
    (dict(transa="X"), "transa='X'"),
    (dict(transb="C"), "transb='C'"),
    (dict(transa=None), "transa=None"),
    (dict(transa="NN"), "transa='NN'"),
    (dict(m=-1), "m=-1"),
    (dict(n=-2), "n=-2"),
    (dict(k=-3), "k=-3"),
    (dict(m=2**31), "m=2147483648"),
    (dict(k=1.5), "k=1.5"),
    (dict(m=True), "m=True"),
    (dict(lda=4), "lda=4"),
    (dict(ldb=0), "ldb=0"),
    (dict(ldc=4), "ldc=4"),
    (dict(alpha="1"), "alpha='1'"),
    (dict(beta=None), "beta=None"),
    (dict(alpha=1j), "alpha=1j"),
    (dict(beta=False), "beta=False"),
])
def test_invalid_scalars(handle, case, override, words):
    assert _call(handle, case, **override) == Status.INVALID_VALUE
    assert words in sgblas.last_error_message()
    _assert_untouched(case)


def test_host_array_is_invalid(handle, case):
    assert _call(handle, case, A=case.A) == Status.INVALID_VALUE
    assert "not a device array" in sgblas.last_error_message()
    _assert_untouched(case)


def test_wrong_dtype_is_invalid(handle, case):
    assert _call(handle, case, B=cuda.to_device(case.B.astype(np.float64))) == Status.INVALID_VALUE
    assert "float32" in sgblas.last_error_message()
    _assert_untouched(case)


def test_too_small_buffer_is_invalid(handle, case):
    short = cuda.to_device(case.A[:-1].copy())
    assert _call(handle, case, A=short) == Status.INVALID_VALUE
    assert "needs (cols - 1) * ld + rows" in sgblas.last_error_message()
    _assert_untouched(case)


def test_too_small_c_is_invalid_and_untouched(handle, case):
    short = cuda.to_device(case.C[:-1].copy())
    assert _call(handle, case, C=short) == Status.INVALID_VALUE
    np.testing.assert_array_equal(short.copy_to_host(), case.C[:-1])


def test_a_overlapping_c_is_invalid(handle):
    buf = cuda.to_device(np.arange(64, dtype=np.float32))
    before = buf.copy_to_host()
    status = sgblas.sgemm(handle, "N", "N", 4, 4, 4, 1.0, buf[:16], 4, cuda.to_device(np.ones(16, np.float32)), 4,
                          0.0, buf[8:24], 4)
    assert status == Status.INVALID_VALUE
    assert "overlaps" in sgblas.last_error_message()
    np.testing.assert_array_equal(buf.copy_to_host(), before)


def test_readonly_c_is_invalid(handle, case):
    class ReadOnly:
        def __init__(self, arr):
            cai = dict(arr.__array_interface__)
            cai["data"] = (cai["data"][0], True)
            self.__cuda_array_interface__ = cai

    if not sgblas.runtime.device.SIMULATOR:
        pytest.skip("a host-pointer interface is only a device array under the simulator")
    host = case.C.copy()
    assert _call(handle, case, C=ReadOnly(host)) == Status.INVALID_VALUE
    assert "read-only" in sgblas.last_error_message()


def test_memory_of_another_device_is_invalid(handle, case, monkeypatch):
    # One GPU cannot show a foreign pointer, so make the pointer query report device 1 for A.
    import sgblas.operands

    a_ptr = sgblas.operands.read_operand(case.dA, "A").ptr
    real = sgblas.operands.pointer_device
    monkeypatch.setattr(sgblas.operands, "pointer_device", lambda p: 1 if p == a_ptr else real(p))
    sgblas.operands.forget_devices()  # the patched query must be asked, not a remembered answer
    assert _call(handle, case) == Status.INVALID_VALUE
    assert "device 1" in sgblas.last_error_message()
    _assert_untouched(case)


def test_host_memory_pointer_is_invalid(handle, case, monkeypatch):
    import sgblas.operands

    monkeypatch.setattr(sgblas.operands, "pointer_device", lambda p: None)
    sgblas.operands.forget_devices()  # the patched query must be asked, not a remembered answer
    assert _call(handle, case) == Status.INVALID_VALUE
    assert "not in device memory" in sgblas.last_error_message()
    _assert_untouched(case)


# --- the contract's quick returns -----------------------------------------------------------

@pytest.mark.parametrize("m, n", [(0, 4), (5, 0), (0, 0)])
def test_empty_output_succeeds_without_touching_anything(handle, case, m, n):
    assert sgblas.sgemm(handle, "N", "N", m, n, 3, 1.0, None, 5, None, 3, 0.0, None, 5) == Status.SUCCESS


@pytest.mark.parametrize("zero", ["k", "alpha"])
@pytest.mark.parametrize("beta", [0.0, 1.0, 0.5])
def test_k_or_alpha_zero_is_beta_c_without_reading_a_or_b(handle, zero, beta):
    case = Case(SEED + 1, "N", "N", 6, 5, 4, pad=1)
    nan = cuda.to_device(np.full(64, np.nan, np.float32))
    k = 0 if zero == "k" else case.k
    alpha = 0.0 if zero == "alpha" else 2.0
    status = sgblas.sgemm(handle, "N", "N", case.m, case.n, k, alpha, nan, case.lda, nan, max(1, k), beta,
                          case.dC, case.ldc)
    assert status == Status.SUCCESS
    got = case.dC.copy_to_host().reshape(-1)
    for j in range(case.n):
        col = slice(j * case.ldc, j * case.ldc + case.m)
        np.testing.assert_array_equal(got[col], (np.float32(beta) * case.C[col]) if beta else 0.0)
    np.testing.assert_array_equal(got[case.m::case.ldc], case.C[case.m::case.ldc])  # padding


def test_k_zero_accepts_missing_a_and_b(handle, case):
    assert _call(handle, case, k=0, A=None, B=None, lda=5, ldb=1, beta=1.0) == Status.SUCCESS


def test_beta_zero_never_reads_c(handle):
    case = Case(SEED + 2, "T", "N", 7, 6, 5, pad=2, c_padding=-1.0)
    C = case.C.copy()
    for j in range(case.n):
        C[j * case.ldc: j * case.ldc + case.m] = np.nan
    case.dC = cuda.to_device(C)
    assert sgblas.sgemm(handle, *case.args(1.5, 0.0)) == Status.SUCCESS
    case.check(1.5, 0.0, C_before=C)


# --- results ------------------------------------------------------------------------------

@pytest.mark.parametrize("ta, tb", list(itertools.product("NT", "NT")))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (-1.5, 0.5), (1.0, 1.0)])
def test_small_results_every_pair(handle, ta, tb, alpha, beta):
    case = Case(SEED + 3, ta, tb, 9, 7, 5, pad=1)
    assert sgblas.sgemm(handle, *case.args(alpha, beta)) == Status.SUCCESS
    case.check(alpha, beta)


def test_lowercase_trans_is_accepted(handle):
    case = Case(SEED + 4, "T", "T", 3, 2, 4)
    args = list(case.args(1.0, 0.0))
    args[0], args[1] = "t", "t"
    assert sgblas.sgemm(handle, *args) == Status.SUCCESS
    case.check(1.0, 0.0)


# --- explain ------------------------------------------------------------------------------

def test_explain_names_the_kernel_and_the_refusals(handle, case):
    e = sgblas.explain(handle, "N", "N", case.m, case.n, case.k, case.dA, case.lda, case.dB, case.ldb,
                       case.dC, case.ldc)
    assert e.status == Status.SUCCESS and e.kernel is not None
    assert e.kernel in str(e)
    for name, reason in e.refusals:
        assert name in str(e) and reason in str(e)


def test_explain_reports_invalid_calls(handle, case):
    e = sgblas.explain(handle, "N", "Q", 1, 1, 1, case.dA, 1, case.dB, 1, case.dC, 1)
    assert e.kernel is None and e.status == Status.INVALID_VALUE and "transb='Q'" in e.message


def test_explain_k_zero_is_the_scale_kernel(handle, case):
    e = sgblas.explain(handle, "N", "N", case.m, case.n, 0, None, case.lda, None, 1, case.dC, case.ldc)
    assert e.kernel == sgblas.kernels.scale.NAME


# --- a candidate by name --------------------------------------------------------------------

def test_the_chosen_candidate_run_by_name_gives_the_plain_calls_bits(handle):
    case = Case(SEED + 5, "N", "T", 9, 7, 40, pad=1)
    e = sgblas.explain(handle, *case.args(1.0, 0.0)[:5], case.dA, case.lda, case.dB, case.ldb, case.dC, case.ldc)
    names = [name for name, _ in e.candidates]
    assert e.candidate in names and all(seconds > 0 for _, seconds in e.candidates)
    assert e.candidate in str(e) or len(names) > 5
    assert sgblas.sgemm(handle, *case.args(1.0, 0.0)) == Status.SUCCESS
    plain = case.dC.copy_to_host()
    case.reset_c(nan=True)
    assert sgblas.sgemm(handle, *case.args(1.0, 0.0), candidate=e.candidate) == Status.SUCCESS
    np.testing.assert_array_equal(case.dC.copy_to_host(), plain)


def test_a_split_candidate_by_name_computes_c(handle, monkeypatch):
    """A 4-byte slice kernel in two slices (the simulator affords a K of 32 a slice)."""
    from sgblas.dispatch import candidates
    from sgblas.kernels.spec import GEMM_KERNELS

    monkeypatch.setattr(candidates, "MIN_SPLIT_CHUNK", 16)
    spec = next(s for s in GEMM_KERNELS if s.role == "splitk" and s.pair == ("T", "N") and s.align == 4)
    case = Case(SEED + 6, "T", "N", 6, 5, 64, pad=1)
    case.reset_c(nan=False)
    assert sgblas.sgemm(handle, *case.args(-1.5, 0.5), candidate=f"{spec.name}/s2") == Status.SUCCESS
    case.check(-1.5, 0.5)


@pytest.mark.parametrize("name, words", [
    ("sgemm_simt_nn_128x128x16_2s_a16", "cannot run this problem"),   # a 16-byte row, odd ld
    ("sgemm_general_nn_128x64x16_2s_a4/s2", "does not split K"),
    ("sgemm_general_nn_128x64x16_2s_a4/s", "is neither"),
    (42, "is not a candidate name"),
])
def test_a_candidate_that_cannot_run_is_invalid_and_c_untouched(handle, case, name, words):
    assert sgblas.sgemm(handle, *case.args(1.0, 0.0), candidate=name) == Status.INVALID_VALUE
    assert words in sgblas.last_error_message() and str(name) in sgblas.last_error_message()
    _assert_untouched(case)
