"""IEEE binary32 semantics through the public API: NaN and Inf propagation, denormals kept,
signed zeros, and the contract's rules for special alpha and beta (docs/api.md, "The contract's
special values").

Only what IEEE 754 (or the contract) fixes whatever the summation order is asserted:

* NaN or Inf entering a sum make the result NaN or that Inf in every order (a NaN, or Infs of
  both signs, give NaN; Infs of one sign with finite terms give that Inf);
* a sum of +0 products is +0 in every order, so ``alpha = -1`` then gives -0, and
  ``-0 + -0 = -0``, ``-0 + +0 = +0`` under round-to-nearest;
* sums whose partial sums are all exactly representable are exact in every order (used for
  denormal inputs, which then must come out bit for bit).

The reference is :func:`sgblas.testing.reference_matmul`: float64, term by term wherever NaN or
Inf is present (no BLAS that might skip zero terms), honouring the contract: ``alpha == 0`` or
``k == 0`` never reads A and B, ``beta == 0`` never reads C, alpha and beta are rounded to
float32 first.

CPU: tiny sizes under the simulator. The ``gpu`` variants repeat the propagation checks at
sizes where the dispatcher picks the optimised NN kernel for NN (recorded with ``explain``).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numba import cuda

import sgblas
from sgblas import Status
from sgblas.testing import C_PAD_BITS, as_matrix, compare, padded_ld, padding_error, reference_matmul, to_column_major

# NaN, Inf and overflow are the point here: the simulator's NumPy arithmetic warns about them.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

PAIRS = list(itertools.product("NT", "NT"))
TINY32 = float(np.finfo(np.float32).tiny)  # smallest normal float32, 2**-126
DENORM_STEP = 2.0**-149  # spacing of float32 denormals


@pytest.fixture(scope="module")
def handle():
    with sgblas.Handle() as h:
        yield h


# --------------------------------------------------------------------------------------------
# operands and the reference
# --------------------------------------------------------------------------------------------

def _stored(op: np.ndarray, trans: str, pad: int, poison=np.nan) -> tuple[np.ndarray, int]:
    """Flat column-major buffer of the matrix whose op() is ``op``; ld = rows + pad rounded up
    to a multiple of 4 (so the 16-byte kernels' guards accept it); padding holds ``poison``."""
    x = op if trans == "N" else op.T
    ld = padded_ld(x.shape[0], pad, 4)
    return to_column_major(x, ld, poison), ld


def ieee_reference(alpha, a: np.ndarray | None, b: np.ndarray | None, beta, c: np.ndarray) -> np.ndarray:
    """float64 ``alpha * a @ b + beta * c`` with IEEE propagation and the contract's rules for
    zero alpha, k and beta."""
    return reference_matmul(alpha, a, b, beta, c)[0]


def run(handle, ta: str, tb: str, alpha, a: np.ndarray | None, b: np.ndarray | None, beta,
        c: np.ndarray, m: int | None = None, n: int | None = None, k: int | None = None,
        pad: int = 1) -> np.ndarray:
    """Call sgemm on device copies of op(A) = ``a`` (m x k), op(B) = ``b`` (k x n), C = ``c``;
    return the m x n result, after checking C's padding was left alone."""
    m, n = c.shape if m is None else (m, n)
    k = (a.shape[1] if a is not None else 0) if k is None else k
    if a is not None:
        a_buf, lda = _stored(a, ta, pad)
        b_buf, ldb = _stored(b, tb, pad)
        dA, dB = cuda.to_device(a_buf), cuda.to_device(b_buf)
    else:
        dA = dB = None
        lda, ldb = max(1, m if ta == "N" else k), max(1, k if tb == "N" else n)
    ldc = padded_ld(m, pad, 4)
    c_buf = to_column_major(c, ldc, pad_bits=C_PAD_BITS)
    dC = cuda.to_device(c_buf)
    status = sgblas.sgemm(handle, ta, tb, m, n, k, alpha, dA, lda, dB, ldb, beta, dC, ldc)
    assert status == Status.SUCCESS, sgblas.last_error_message()
    got_buf = dC.copy_to_host()
    error = padding_error(got_buf, c_buf, m, n, ldc)
    assert error is None, error
    return np.array(as_matrix(got_buf, m, n, ldc))


def assert_matches(got, ref, k, label=""):
    """Values within the tolerance; NaN exactly where the reference is NaN; Infs equal."""
    scale = np.where(np.isfinite(ref), np.abs(ref), 0.0) + 1.0
    ok, ratio, where = compare(got, ref, scale, k)
    assert ok, f"{label}: worst element {where}: got {got[where]!r}, reference {ref[where]!r}"


def _ints(rng, shape, lo=-3, hi=3):
    """Small integers: every partial sum is exact in float32, in any order."""
    return rng.integers(lo, hi + 1, size=shape).astype(np.float32)


# --------------------------------------------------------------------------------------------
# NaN and Inf in A or B
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ta, tb", PAIRS)
def test_nan_in_a_and_b_propagates_along_its_row_and_column(handle, ta, tb):
    rng = np.random.default_rng(1)
    m, n, k = 6, 5, 4
    a, b, c = _ints(rng, (m, k)), _ints(rng, (k, n)), _ints(rng, (m, n))
    a[2, 1] = np.nan
    b[1, :] = 0.0  # NaN * 0 is NaN: the NaN row must still be all NaN
    b[3, 4] = np.nan
    got = run(handle, ta, tb, 1.5, a, b, 0.5, c)
    ref = ieee_reference(1.5, a, b, 0.5, c)
    assert np.isnan(got[2]).all() and np.isnan(got[:, 4]).all()
    assert np.isfinite(np.delete(np.delete(got, 2, 0), 4, 1)).all()
    assert_matches(got, ref, k, f"{ta}{tb}")


@pytest.mark.parametrize("ta, tb", [("N", "N"), ("T", "N")])
def test_inf_in_a_gives_signed_inf_or_nan_per_element(handle, ta, tb):
    rng = np.random.default_rng(2)
    m, n, k = 5, 6, 3
    a, b = _ints(rng, (m, k)), _ints(rng, (k, n))
    c = np.zeros((m, n), np.float32)
    a[1, 0] = np.inf
    b[0, :] = [2, -1, 0, 3, -2, 0]       # Inf * 2 = Inf, Inf * -1 = -Inf, Inf * 0 = NaN
    a[3, 0], a[3, 2] = np.inf, -np.inf   # b[0, j] and b[2, j] of one sign: Inf - Inf = NaN
    b[2, :] = [1, -1, 1, 2, -1, 0]
    got = run(handle, ta, tb, 1.0, a, b, 0.0, c)
    ref = ieee_reference(1.0, a, b, 0.0, c)
    np.testing.assert_array_equal(got[1], np.float32([np.inf, -np.inf, np.nan, np.inf, -np.inf, np.nan]))
    assert np.isnan(got[3]).all()
    assert_matches(got, ref, k, f"{ta}{tb}")


def test_overflow_gives_inf(handle):
    # One product of 2e38 (finite in float32) times alpha = 2 is beyond FLT_MAX: +Inf.
    a = np.full((2, 1), 1e19, np.float32)
    b = np.full((1, 3), 2e19, np.float32)
    got = run(handle, "N", "N", 2.0, a, b, 0.0, np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(got, np.inf)


# --------------------------------------------------------------------------------------------
# denormals: neither inputs nor results flushed
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ta, tb", PAIRS)
def test_denormal_results_are_not_flushed(handle, ta, tb):
    m, n, k = 3, 4, 5
    a = np.full((m, k), 1e-20, np.float32)
    b = np.full((k, n), 1e-20, np.float32)
    got = run(handle, ta, tb, 1.0, a, b, 0.0, np.full((m, n), np.nan, np.float32))
    ref = ieee_reference(1.0, a, b, 0.0, np.zeros((m, n), np.float32))  # about 5e-40, denormal
    assert (0 < ref).all() and (ref < TINY32).all()
    assert (got != 0).all(), f"denormal results were flushed to zero: {got}"
    # Each of the k multiply-adds rounds once to the denormal grid (2**-149).
    assert np.abs(got - ref).max() <= k * DENORM_STEP, f"{got} vs {ref}"


def test_denormal_inputs_are_not_flushed(handle):
    # 2**-140 is a float32 denormal; its products with small integers and their sums are
    # exact on the denormal grid, so the result is exact in any order.
    rng = np.random.default_rng(3)
    m, n, k = 5, 4, 6
    a = np.full((m, k), 2.0**-140, np.float32) * rng.integers(1, 4, (m, k)).astype(np.float32)
    b = _ints(rng, (k, n), 0, 3)
    assert (np.abs(a) < TINY32).all() and (a != 0).all()
    for ta, tb in (("N", "N"), ("T", "T")):
        got = run(handle, ta, tb, 1.0, a, b, 0.0, np.zeros((m, n), np.float32))
        ref = ieee_reference(1.0, a, b, 0.0, np.zeros((m, n), np.float32))
        np.testing.assert_array_equal(got, ref.astype(np.float32), err_msg=f"{ta}{tb}")


def test_denormal_alpha_is_not_flushed(handle):
    alpha = 2.0**-140  # a float32 denormal, not zero
    a = np.ones((3, 2), np.float32)
    b = np.ones((2, 4), np.float32)
    got = run(handle, "N", "N", alpha, a, b, 0.0, np.zeros((3, 4), np.float32))
    np.testing.assert_array_equal(got, np.float32(2 * alpha))


@pytest.mark.parametrize("k", [0, 2])
def test_denormal_beta_times_c_is_not_flushed(handle, k):
    # beta * C = 0.5 * 2**-148 = 2**-149, the smallest denormal, exactly; A = 0 adds +0.
    m, n = 4, 3
    c = np.full((m, n), 2.0**-148, np.float32)
    a = np.zeros((m, k), np.float32) if k else None
    b = np.zeros((k, n), np.float32) if k else None
    got = run(handle, "N", "N", 1.0, a, b, 0.5, c, m, n, k)
    np.testing.assert_array_equal(got, np.float32(2.0**-149))


# --------------------------------------------------------------------------------------------
# signed zeros
# --------------------------------------------------------------------------------------------

def test_minus_alpha_times_zero_products_is_minus_zero(handle):
    # A @ B is a sum of +0 products, +0 in every order; alpha = -1 makes it -0 and beta == 0
    # adds nothing (C, poisoned with NaN, is not read).
    m, n, k = 4, 3, 5
    a = np.zeros((m, k), np.float32)
    b = np.abs(np.random.default_rng(4).standard_normal((k, n))).astype(np.float32)
    got = run(handle, "N", "N", -1.0, a, b, 0.0, np.full((m, n), np.nan, np.float32))
    assert (got == 0).all() and np.signbit(got).all(), got


@pytest.mark.parametrize("c_value, expect_negative", [(-0.0, True), (0.0, False)])
def test_signed_zero_sums_with_beta(handle, c_value, expect_negative):
    # alpha * (+0) = -0 for alpha = -1; -0 + 1 * (-0) = -0 and -0 + 1 * (+0) = +0.
    m, n, k = 3, 3, 2
    a = np.zeros((m, k), np.float32)
    b = np.ones((k, n), np.float32)
    got = run(handle, "T", "N", -1.0, a, b, 1.0, np.full((m, n), c_value, np.float32))
    assert (got == 0).all() and (np.signbit(got) == expect_negative).all(), got


@pytest.mark.parametrize("c_value, expect_negative", [(0.0, True), (-0.0, False)])
def test_scale_kernel_signed_zeros(handle, c_value, expect_negative):
    # k == 0: C = beta * C, beta = -1: -1 * +0 = -0, -1 * -0 = +0.
    got = run(handle, "N", "N", 1.0, None, None, -1.0, np.full((3, 2), c_value, np.float32), 3, 2, 0)
    assert (got == 0).all() and (np.signbit(got) == expect_negative).all(), got


# --------------------------------------------------------------------------------------------
# special alpha and beta (the contract's rules)
# --------------------------------------------------------------------------------------------

def _poisoned_ab(m, n, k, value=np.nan):
    a = np.full((m, k), value, np.float32)
    b = np.full((k, n), value, np.float32)
    return a, b


@pytest.mark.parametrize("alpha", [0.0, -0.0])
@pytest.mark.parametrize("poison", [np.nan, np.inf])
def test_alpha_zero_never_reads_a_or_b(handle, alpha, poison):
    m, n, k = 4, 3, 2
    a, b = _poisoned_ab(m, n, k, poison)
    c = np.arange(m * n, dtype=np.float32).reshape(m, n) - 5
    got = run(handle, "N", "T", alpha, a, b, 2.0, c)
    np.testing.assert_array_equal(got, 2.0 * c)


def test_alpha_rounding_to_zero_never_reads_a_or_b(handle):
    """alpha = 1e-46 is 0 in float32, the value used ("rounded to float32 before use"), so A and
    B (NaN here) are not read: C = beta * C."""
    m, n, k = 4, 3, 2
    a, b = _poisoned_ab(m, n, k)
    c = np.ones((m, n), np.float32)
    got = run(handle, "N", "N", 1e-46, a, b, 3.0, c)
    np.testing.assert_array_equal(got, 3.0)


@pytest.mark.parametrize("poison", [np.nan, np.inf, -np.inf])
def test_beta_zero_never_reads_c(handle, poison):
    rng = np.random.default_rng(5)
    m, n, k = 5, 4, 3
    a, b = _ints(rng, (m, k)), _ints(rng, (k, n))
    got = run(handle, "N", "N", 1.0, a, b, 0.0, np.full((m, n), poison, np.float32))
    np.testing.assert_array_equal(got, (a.astype(np.float64) @ b).astype(np.float32))


@pytest.mark.parametrize("poison", [np.nan, np.inf])
def test_k_zero_and_beta_zero_writes_zeros(handle, poison):
    got = run(handle, "N", "N", 1.0, None, None, 0.0, np.full((3, 4), poison, np.float32), 3, 4, 0)
    np.testing.assert_array_equal(got, 0.0)


def test_beta_rounding_to_zero_never_reads_c(handle):
    """beta = 1e-46 is 0 in float32: C (NaN here) is not read, in the GEMM and the scale kernel."""
    rng = np.random.default_rng(6)
    m, n, k = 4, 3, 2
    a, b = _ints(rng, (m, k)), _ints(rng, (k, n))
    nan_c = np.full((m, n), np.nan, np.float32)
    got = run(handle, "N", "N", 1.0, a, b, 1e-46, nan_c)
    np.testing.assert_array_equal(got, (a.astype(np.float64) @ b).astype(np.float32))
    got = run(handle, "N", "N", 1.0, None, None, 1e-46, nan_c, m, n, 0)
    np.testing.assert_array_equal(got, 0.0)


def test_alpha_nan_makes_every_element_nan(handle):
    m, n, k = 4, 3, 2
    a = np.zeros((m, k), np.float32)  # NaN * 0 is still NaN
    b = np.ones((k, n), np.float32)
    got = run(handle, "N", "N", float("nan"), a, b, 1.0, np.ones((m, n), np.float32))
    assert np.isnan(got).all()


def test_alpha_nan_with_k_zero_is_not_used(handle):
    # k == 0: C = beta * C; alpha takes no part (its product with nothing is not formed).
    got = run(handle, "N", "N", float("nan"), None, None, 2.0, np.ones((3, 2), np.float32), 3, 2, 0)
    np.testing.assert_array_equal(got, 2.0)


def test_alpha_inf_gives_inf_minus_inf_or_nan_per_element(handle):
    a = np.array([[1, 1], [1, -1], [-2, 1], [0, 0]], np.float32)
    b = np.array([[1, 2], [1, 1]], np.float32)
    # a @ b = [[2, 3], [0, 1], [-1, -3], [0, 0]]: Inf * 0 = NaN
    got = run(handle, "N", "N", float("inf"), a, b, 0.0, np.zeros((4, 2), np.float32))
    expected = np.float32([[np.inf, np.inf], [np.nan, np.inf], [-np.inf, -np.inf], [np.nan, np.nan]])
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("k", [0, 3])
def test_beta_nan_makes_every_element_nan(handle, k):
    m, n = 4, 3
    a = np.ones((m, k), np.float32) if k else None
    b = np.ones((k, n), np.float32) if k else None
    got = run(handle, "N", "N", 1.0, a, b, float("nan"), np.zeros((m, n), np.float32), m, n, k)
    assert np.isnan(got).all()


def test_beta_inf_per_element(handle):
    m, n, k = 3, 2, 2
    a = np.ones((m, k), np.float32)
    b = np.ones((k, n), np.float32)
    c = np.float32([[1, -1], [0, 2], [-3, 0]])
    got = run(handle, "N", "N", 1.0, a, b, float("inf"), c)
    np.testing.assert_array_equal(got, np.float32([[np.inf, -np.inf], [np.nan, np.inf], [-np.inf, np.nan]]))


# --------------------------------------------------------------------------------------------
# GPU: the same propagation rules where the optimised kernels run
# --------------------------------------------------------------------------------------------

GPU_M, GPU_N, GPU_K = 2048, 1536, 72  # 192 tiles of 128 x 128: the NN kernels' shape bucket


def _kernel_for(handle, ta, tb, m, n, k, a, b, c, pad=1):
    a_buf, lda = _stored(a, ta, pad)
    b_buf, ldb = _stored(b, tb, pad)
    c_buf, ldc = _stored(c, "N", pad)
    e = sgblas.explain(handle, ta, tb, m, n, k, cuda.to_device(a_buf), lda, cuda.to_device(b_buf), ldb,
                       cuda.to_device(c_buf), ldc)
    assert e.status == Status.SUCCESS, e.message
    return e.kernel


def special_values_scenario(handle, ta, tb, m, n, k, seed=7):
    """Random data with NaN, +-Inf and denormal products planted where IEEE fixes the outcome;
    runs sgemm and checks every planted outcome, then everything against the reference.

    NaN in A (row ``r_nan``); +Inf in B (column ``c_inf``) against a column of A that is all
    positive; +Inf and -Inf meeting at (``r_inf2``, ``c_infinf``); denormal results where the
    last rows of A meet the last columns of B (C is zero there, so the result is alpha times a
    sum of denormal products). Returns the kernel ``explain`` names.
    """
    assert m >= 40 and n >= 24 and k >= 3, "the planted positions need room"
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    r_nan, r_inf2 = 5, m // 2 + 3
    c_inf, c_infinf = n // 3, n // 2
    d_rows, d_cols = slice(m - m // 8, m), slice(n - n // 8, n)
    p_pos = k - 1
    a[r_nan, k // 2] = np.nan
    a[:, p_pos] = np.abs(a[:, p_pos]) + 0.5
    b[p_pos, c_inf] = np.inf
    a[r_inf2, 0], a[r_inf2, 1] = np.inf, np.inf
    b[0, c_infinf], b[1, c_infinf] = 1.0, -1.0
    a[d_rows] = 1e-20
    b[:, d_cols] = 1e-20
    c[d_rows, d_cols] = 0.0
    kernel = _kernel_for(handle, ta, tb, m, n, k, a, b, c)
    alpha = 1.25
    got = run(handle, ta, tb, alpha, a, b, -0.5, c)
    ref = ieee_reference(alpha, a, b, -0.5, c)
    label = f"{ta}{tb} {kernel}"
    assert np.isnan(got[r_nan]).all(), f"{label}: the NaN row"
    assert np.isnan(got[r_inf2, c_infinf]), f"{label}: Inf - Inf"
    column = np.delete(got[:, c_inf], [r_nan, r_inf2])
    assert np.isposinf(column).all(), f"{label}: column {c_inf} should be +Inf"
    corner, corner_ref = got[d_rows, d_cols], ref[d_rows, d_cols]
    assert (corner_ref < TINY32).all(), "the scenario's corner is not denormal"
    assert (corner != 0).all() and (np.abs(corner) < TINY32).all(), f"{label}: denormal results flushed"
    assert np.abs(corner - corner_ref).max() <= (alpha * k + 1) * DENORM_STEP, f"{label}: denormal sums"
    assert_matches(got, ref, k, label)
    return kernel


def test_special_values_scenario_small(handle):
    """The scenario the GPU runs at scale, at a size the simulator can afford."""
    special_values_scenario(handle, "N", "N", 40, 24, 6)


@pytest.mark.gpu
@pytest.mark.parametrize("ta, tb", PAIRS)
def test_special_values_propagate_at_scale_gpu(handle, ta, tb, record_property):
    kernel = special_values_scenario(handle, ta, tb, GPU_M, GPU_N, GPU_K)
    record_property("kernel", kernel)
    print(f"{ta}{tb}: {kernel}")


@pytest.mark.gpu
@pytest.mark.parametrize("poison", [np.nan, np.inf])
def test_beta_zero_never_reads_c_at_scale_gpu(handle, poison):
    rng = np.random.default_rng(8)
    m, n, k = GPU_M, GPU_N, GPU_K
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    for ta, tb in PAIRS:
        got = run(handle, ta, tb, 1.0, a, b, 0.0, np.full((m, n), poison, np.float32))
        ref = a.astype(np.float64) @ b.astype(np.float64)
        ok, ratio, where = compare(got, ref, np.abs(a) @ np.abs(b), k)
        assert ok, f"{ta}{tb}: {ratio:.3g}x tolerance at {where}"
