"""The testing toolkit: column-major buffers, a float64 reference GEMM, and the tolerance that
judges a result.

``python -m sgblas.selftest`` and sgblas's test suite both use this module, and so can anyone
checking sgblas on their own data. A matrix lives in a flat float32 NumPy buffer with a leading
dimension, exactly as :func:`sgblas.sgemm` reads it.

* Buffers. :func:`column_major` (random values) and :func:`to_column_major` (given values) hold
  exactly ``(cols - 1) * ld + rows`` elements, so the buffer ends at the matrix's last element:
  under Compute Sanitizer an access past the matrix is an access past the allocation. The
  padding rows between columns hold a poison: NaN in A and B (reading it shows in the result),
  the bit pattern :data:`C_PAD_BITS` in C (writing it changes the bits). :func:`make_operands`
  builds the A, B and C of one call; :func:`poison` fills a matrix with NaN, as C before a
  ``beta == 0`` call, which must not read it.
* The reference. :func:`reference_gemm` computes ``alpha * op(A) @ op(B) + beta * C`` in float64
  with the contract's rules (alpha and beta rounded to float32; A and B not read when
  ``k == 0`` or ``alpha == 0``; C not read when ``beta == 0``) and the magnitude each element's
  rounding error scales with. Operands holding NaN or Inf are summed term by term, so their
  propagation follows IEEE whatever BLAS NumPy uses (some skip zero terms, dropping ``NaN * 0``).
* The judgement. :func:`tolerance` scales with ``sqrt(k)`` and that magnitude; :func:`compare`,
  :func:`judge_gemm`, :func:`gemm_error` and :func:`assert_gemm_close` apply it, and
  :func:`padding_error` checks that C's padding kept its bits. Messages name the seed.
* :class:`GemmCase`: the operands of one :func:`sgblas.sgemm` call on the host and as Numba
  device arrays, with its check.

Importing this module imports NumPy (``import sgblas`` does not); :class:`GemmCase` imports
``numba.cuda`` when it is created.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "EPS32",
    "C_PAD_BITS",
    "stored_shape",
    "padded_ld",
    "extent",
    "column_major",
    "to_column_major",
    "as_matrix",
    "matrix_mask",
    "poison",
    "GemmOperands",
    "make_operands",
    "reference_matmul",
    "reference_values",
    "GemmReference",
    "reference_gemm",
    "tolerance",
    "compare",
    "judge_gemm",
    "gemm_error",
    "padding_error",
    "assert_gemm_close",
    "GemmCase",
]

#: float32 machine epsilon, 2**-23.
EPS32: float = float(np.finfo(np.float32).eps)

#: The bits written into C's padding: a quiet NaN with a recognisable payload, so that a kernel
#: writing there changes the bits whatever value it writes.
C_PAD_BITS: np.uint32 = np.uint32(0x7FC0DEAD)

_TINY32 = float(np.finfo(np.float32).tiny)
#: Rows of the term-by-term product computed at once: bounds its temporary to
#: ``_ROWS_PER_STEP * k * n`` float64 values.
_ROWS_PER_STEP = 64


# ---------------------------------------------------------------------------------------------
# buffers
# ---------------------------------------------------------------------------------------------

def _trans(trans: str) -> str:
    value = trans.upper() if isinstance(trans, str) else trans
    if value not in ("N", "T"):
        raise ValueError(f"trans={trans!r} is not one of 'N', 'n', 'T', 't'")
    return value


def stored_shape(trans: str, rows: int, cols: int) -> tuple[int, int]:
    """The stored shape of a matrix whose ``op()`` is ``rows x cols``: itself for ``'N'``, the
    transpose for ``'T'``."""
    return (rows, cols) if _trans(trans) == "N" else (cols, rows)


def padded_ld(rows: int, pad: int = 0, multiple: int = 1) -> int:
    """``rows + pad`` rounded up to a multiple of ``multiple``, and at least 1: the leading
    dimension of a stored ``rows``-row matrix with ``pad`` or more padding rows."""
    if pad < 0:
        raise ValueError(f"pad={pad} is negative; padding rows are counted from 0")
    if multiple < 1:
        raise ValueError(f"multiple={multiple} is below 1")
    ld = max(1, rows + pad)
    return -(-ld // multiple) * multiple


def extent(rows: int, cols: int, ld: int) -> int:
    """Elements from a matrix's first element to its last inclusive, ``(cols - 1) * ld + rows``
    (0 for an empty matrix)."""
    return (cols - 1) * ld + rows if rows and cols else 0


def _strided(buf: np.ndarray, rows: int, cols: int, ld: int, writeable: bool = True) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(buf, shape=(rows, cols), strides=(buf.itemsize, ld * buf.itemsize),
                                           writeable=writeable)


def _blank(rows: int, cols: int, ld: int, padding: float, pad_bits: np.uint32 | int | None) -> np.ndarray:
    if ld < max(1, rows):
        raise ValueError(f"ld={ld} is below max(1, rows={rows})")
    # An empty matrix is never read; one poison element stands in, since a zero-size device
    # allocation has no usable pointer.
    buf = np.empty(max(1, extent(rows, cols, ld)), np.float32)
    if pad_bits is not None:
        buf.view(np.uint32)[:] = np.uint32(pad_bits)
    else:
        buf[:] = padding
    return buf


def column_major(rng: np.random.Generator, rows: int, cols: int, ld: int, padding: float = np.nan, *,
                 pad_bits: np.uint32 | int | None = None) -> np.ndarray:
    """A flat float32 buffer holding a random standard-normal ``rows x cols`` matrix with leading
    dimension ``ld``, ending at its last element; the padding holds ``padding``, or the bit
    pattern ``pad_bits`` when given."""
    buf = _blank(rows, cols, ld, padding, pad_bits)
    if rows and cols:
        _strided(buf, rows, cols, ld)[...] = rng.standard_normal((rows, cols), dtype=np.float32)
    return buf


def to_column_major(x: np.ndarray, ld: int | None = None, padding: float = np.nan, *,
                    pad_bits: np.uint32 | int | None = None) -> np.ndarray:
    """The 2-D array ``x`` as a flat float32 column-major buffer with leading dimension ``ld``
    (default: its row count), ending at its last element; padding as in :func:`column_major`."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"x has {x.ndim} dimensions; a matrix has 2")
    rows, cols = x.shape
    ld = max(1, rows) if ld is None else ld
    buf = _blank(rows, cols, ld, padding, pad_bits)
    if rows and cols:
        _strided(buf, rows, cols, ld)[...] = x
    return buf


def as_matrix(buf: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    """The ``rows x cols`` matrix with leading dimension ``ld`` held in the flat ``buf``, as a
    read-only view."""
    if rows == 0 or cols == 0:
        return np.zeros((rows, cols), dtype=buf.dtype)
    if buf.size < extent(rows, cols, ld):
        raise ValueError(f"a buffer of {buf.size} elements cannot hold a {rows} x {cols} matrix with "
                         f"ld={ld}, which spans {extent(rows, cols, ld)}")
    return _strided(buf, rows, cols, ld, writeable=False)


def matrix_mask(size: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """A boolean mask over a flat buffer of ``size`` elements: True at the matrix's elements,
    False in the padding between its columns (and past its end)."""
    inside = np.zeros(size, dtype=bool)
    if rows and cols:
        _strided(inside, rows, cols, ld)[...] = True
    return inside


def poison(buf: np.ndarray, rows: int, cols: int, ld: int, value: float = np.nan) -> np.ndarray:
    """Fill the matrix's elements of ``buf`` with ``value`` in place (padding untouched); returns
    ``buf``. NaN in C shows whether a ``beta == 0`` call read it."""
    if rows and cols:
        _strided(buf, rows, cols, ld)[...] = value
    return buf


class GemmOperands(NamedTuple):
    """The flat column-major float32 buffers of one call and their leading dimensions."""

    A: np.ndarray
    lda: int
    B: np.ndarray
    ldb: int
    C: np.ndarray
    ldc: int


def make_operands(rng: np.random.Generator, transa: str, transb: str, m: int, n: int, k: int,
                  pad: tuple[int, int, int] = (0, 0, 0), nan_c: bool = False, *, ld_multiple: int = 1,
                  c_padding: float | None = None) -> GemmOperands:
    """Random operands of ``C(m,n) = op(A)(m,k) op(B)(k,n)``, drawn from ``rng`` in the order A,
    B, C.

    A is stored ``m x k`` for ``transa == 'N'`` and ``k x m`` for ``'T'`` (B likewise), with
    ``ld = padded_ld(rows, pad[i], ld_multiple)``. A's and B's padding is NaN; C's is
    :data:`C_PAD_BITS`, or the value ``c_padding`` when given. ``nan_c`` fills C's ``m x n``
    elements with NaN (for ``beta == 0`` calls, which must not read them).
    """
    a_rows, a_cols = stored_shape(transa, m, k)
    b_rows, b_cols = stored_shape(transb, k, n)
    lda = padded_ld(a_rows, pad[0], ld_multiple)
    ldb = padded_ld(b_rows, pad[1], ld_multiple)
    ldc = padded_ld(m, pad[2], ld_multiple)
    A = column_major(rng, a_rows, a_cols, lda)
    B = column_major(rng, b_rows, b_cols, ldb)
    if c_padding is None:
        C = column_major(rng, m, n, ldc, pad_bits=C_PAD_BITS)
    else:
        C = column_major(rng, m, n, ldc, c_padding)
    if nan_c:
        poison(C, m, n, ldc)
    return GemmOperands(A, lda, B, ldb, C, ldc)


# ---------------------------------------------------------------------------------------------
# the reference
# ---------------------------------------------------------------------------------------------

def _product64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in float64; term by term when an operand holds NaN or Inf, so that every
    ``NaN * 0`` and ``Inf * 0`` enters the sum as IEEE says."""
    if np.isfinite(a).all() and np.isfinite(b).all():
        return a @ b
    m, n = a.shape[0], b.shape[1]
    out = np.empty((m, n))
    with np.errstate(invalid="ignore", over="ignore"):
        for i0 in range(0, m, _ROWS_PER_STEP):
            out[i0:i0 + _ROWS_PER_STEP] = (a[i0:i0 + _ROWS_PER_STEP, :, None] * b[None, :, :]).sum(axis=1)
    return out


def reference_matmul(alpha: float, a: np.ndarray | None, b: np.ndarray | None, beta: float,
                     c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(value, scale)`` of ``alpha * a @ b + beta * c`` for 2-D matrices (``a`` is op(A), ``b``
    op(B); None for ``k == 0``).

    ``value`` is the float64 result, ``scale = |alpha| |a| @ |b| + |beta| |c|`` the magnitude its
    rounding error is proportional to. alpha and beta are rounded to float32 first; with
    ``alpha == 0`` or ``k == 0`` a and b are not read, with ``beta == 0`` c is not (even NaN there).
    """
    m, n = c.shape
    alpha = float(np.float32(alpha))
    beta = float(np.float32(beta))
    value = np.zeros((m, n))
    scale = np.zeros((m, n))
    if a is not None and b is not None and a.shape[1] and alpha != 0.0:
        a64 = np.asarray(a, dtype=np.float64)
        b64 = np.asarray(b, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            value = alpha * _product64(a64, b64)
            scale = abs(alpha) * _product64(np.abs(a64), np.abs(b64))
    if beta != 0.0:
        c64 = np.asarray(c, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            value = value + beta * c64
            scale = scale + abs(beta) * np.abs(c64)
    return value, scale


def _op(buf: np.ndarray, trans: str, rows: int, cols: int, ld: int) -> np.ndarray:
    # op(X) is rows x cols; X itself is stored rows x cols ('N') or cols x rows ('T').
    if _trans(trans) == "N":
        return as_matrix(buf, rows, cols, ld)
    return as_matrix(buf, cols, rows, ld).T


def reference_values(transa: str, transb: str, m: int, n: int, k: int, alpha: float,
                     A: np.ndarray | None, lda: int, B: np.ndarray | None, ldb: int, beta: float,
                     C: np.ndarray, ldc: int) -> tuple[np.ndarray, np.ndarray]:
    """``(value, scale)`` (see :func:`reference_matmul`) of an sgemm call on flat column-major
    buffers, read as :func:`sgblas.sgemm` reads them."""
    reads_ab = k > 0 and float(np.float32(alpha)) != 0.0
    a = _op(A, transa, m, k, lda) if reads_ab else None
    b = _op(B, transb, k, n, ldb) if reads_ab else None
    c = as_matrix(C, m, n, ldc) if float(np.float32(beta)) != 0.0 else np.zeros((m, n), np.float32)
    return reference_matmul(alpha, a, b, beta, c)


class GemmReference(NamedTuple):
    """What a correct call leaves in C's buffer.

    ``value`` (m x n, float64) is the float64 result, ``scale`` the magnitude
    ``|alpha| |op(A)| |op(B)| + |beta| |C|`` its rounding error is proportional to, ``c_before``
    a copy of the C buffer before the call (its padding must keep its bits).
    """

    value: np.ndarray
    scale: np.ndarray
    c_before: np.ndarray
    m: int
    n: int
    k: int
    ldc: int


def reference_gemm(transa: str, transb: str, m: int, n: int, k: int, alpha: float,
                   A: np.ndarray | None, lda: int, B: np.ndarray | None, ldb: int, beta: float,
                   C: np.ndarray, ldc: int) -> GemmReference:
    """The :class:`GemmReference` of ``C = alpha op(A) op(B) + beta C`` on flat column-major
    buffers, C being the buffer before the call."""
    value, scale = reference_values(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
    return GemmReference(value, scale, np.array(C, dtype=np.float32, copy=True), m, n, k, ldc)


# ---------------------------------------------------------------------------------------------
# the judgement
# ---------------------------------------------------------------------------------------------

def tolerance(k: int, scale: np.ndarray | float, factor: float = 8.0) -> np.ndarray:
    """The allowed ``|error|`` of each element: ``factor * sqrt(k + 2) * eps32 * scale`` plus the
    smallest normal float32.

    Rounding errors of random-sign terms add up like a random walk, so ``sqrt(k)`` is generous
    for every summation order yet catches a dropped or repeated term; the ``+ 2`` covers the
    rounding of alpha's product and of beta's term, the last addend the result's own rounding
    near zero.
    """
    return factor * np.sqrt(k + 2.0) * EPS32 * np.asarray(scale, dtype=np.float64) + _TINY32


def compare(got: np.ndarray, ref: np.ndarray, scale: np.ndarray, k: int) -> tuple[bool, float, tuple[int, ...]]:
    """``(ok, worst ratio of error to tolerance, index of the worst element)`` of ``got``
    against the float64 ``ref``.

    NaN in ``got`` passes only where ``ref`` is NaN; infinities must be equal; finite elements
    must be within :func:`tolerance`. A failing special value counts as an infinite ratio.
    """
    got = np.asarray(got, dtype=np.float64)
    nan_ok = np.isnan(got) == np.isnan(ref)
    inf_ok = (np.isinf(got) == np.isinf(ref)) & np.where(np.isinf(ref), got == ref, True)
    finite = np.isfinite(ref) & np.isfinite(got)
    with np.errstate(invalid="ignore"):
        ratio = np.where(finite, np.abs(got - ref) / tolerance(k, np.where(finite, scale, 0.0)), 0.0)
    ratio = np.where(nan_ok & inf_ok, ratio, np.inf)
    if ratio.size == 0:
        return True, 0.0, ()
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    value = float(ratio[worst])
    return value <= 1.0, value, tuple(int(i) for i in worst)


def padding_error(got: np.ndarray, before: np.ndarray, rows: int, cols: int, ld: int) -> str | None:
    """None when every element of the flat buffer ``got`` outside the ``rows x cols`` matrix has
    the bits it had in ``before``; else a sentence saying how many changed and where the first
    one is."""
    got = np.asarray(got, dtype=np.float32)
    changed = (got.view(np.uint32) != np.asarray(before, dtype=np.float32).view(np.uint32))
    changed &= ~matrix_mask(got.size, rows, cols, ld)
    if not changed.any():
        return None
    first = int(np.flatnonzero(changed)[0])
    return (f"{int(changed.sum())} padding elements of C were written; the first at flat index {first} "
            f"(row {first % ld} of column {first // ld}, ld={ld}, rows={rows})")


def judge_gemm(got: np.ndarray, ref: GemmReference) -> tuple[float, str | None]:
    """``(worst, error)`` for the flat C buffer ``got``: the worst ratio of an element's error
    to its :func:`tolerance`, and None when every element is within it and C's padding kept its
    bits, else a sentence naming the failing elements (their count and the worst one) or the
    padding written."""
    m, n, ldc = ref.m, ref.n, ref.ldc
    got = np.asarray(got)
    if got.shape != ref.c_before.shape or got.dtype != np.float32:
        return np.inf, (f"the C buffer has shape {got.shape} and dtype {got.dtype}, not "
                        f"{ref.c_before.shape} and float32")
    worst = 0.0
    if m and n:
        mat = as_matrix(got, m, n, ldc).astype(np.float64)
        ok, worst, (i, j) = compare(mat, ref.value, ref.scale, ref.k)
        if not ok:
            failing = _failing(mat, ref)
            tol = float(tolerance(ref.k, ref.scale[i, j]))
            return worst, (f"{failing} of {m * n} elements of C are out of tolerance; the worst, C[{i}, {j}], "
                           f"is {float(mat[i, j])!r} where {float(ref.value[i, j])!r} is expected (error "
                           f"{worst:.3g} x the tolerance {tol:.3g}; m={m} n={n} k={ref.k} ldc={ldc})")
    return worst, padding_error(got, ref.c_before, m, n, ldc)


def gemm_error(got: np.ndarray, ref: GemmReference) -> str | None:
    """None when the flat C buffer ``got`` holds ``ref``'s result within :func:`tolerance` and
    its padding kept its bits; else the sentence of :func:`judge_gemm`."""
    return judge_gemm(got, ref)[1]


def _failing(mat: np.ndarray, ref: GemmReference) -> int:
    # The count for the message, by compare()'s rule.
    value = ref.value
    with np.errstate(invalid="ignore"):
        close = np.abs(mat - value) <= tolerance(ref.k, ref.scale)
    same_special = (np.isnan(mat) & np.isnan(value)) | (np.isinf(value) & (mat == value))
    return int((~np.where(np.isfinite(value) & np.isfinite(mat), close, same_special)).sum())


def assert_gemm_close(got: np.ndarray, ref: GemmReference, *, seed: object = None, label: str = "") -> None:
    """Raise AssertionError, naming ``seed`` and ``label``, unless :func:`gemm_error` finds
    nothing wrong with the flat C buffer ``got``."""
    error = gemm_error(got, ref)
    if error is not None:
        raise AssertionError(f"seed={seed!r}" + (f" {label}" if label else "") + f": {error}")


# ---------------------------------------------------------------------------------------------
# one sgemm call on the device
# ---------------------------------------------------------------------------------------------

class GemmCase:
    """Random operands of one :func:`sgblas.sgemm` call, on the host (:attr:`A`, :attr:`B`,
    :attr:`C`) and as Numba device arrays (:attr:`dA`, :attr:`dB`, :attr:`dC`).

    ``GemmCase(seed, ta, tb, m, n, k, pad=0, c_padding=None, *, ld_multiple=1)`` draws them
    with :func:`make_operands` from ``numpy.random.default_rng(seed)``, every leading dimension
    ``padded_ld(rows, pad, ld_multiple)``. :meth:`args` gives sgemm's arguments after the handle;
    :meth:`error` and :meth:`check` judge what the device C holds, naming the seed.
    """

    def __init__(self, seed: int, ta: str, tb: str, m: int, n: int, k: int, pad: int = 0,
                 c_padding: float | None = None, *, ld_multiple: int = 1) -> None:
        from numba import cuda

        self.seed = seed
        self.ta, self.tb, self.m, self.n, self.k = _trans(ta), _trans(tb), m, n, k
        ops = make_operands(np.random.default_rng(seed), ta, tb, m, n, k, (pad, pad, pad),
                            ld_multiple=ld_multiple, c_padding=c_padding)
        self.A, self.lda, self.B, self.ldb, self.C, self.ldc = ops
        self.dA = cuda.to_device(self.A)
        self.dB = cuda.to_device(self.B)
        self.dC = cuda.to_device(self.C)

    @property
    def label(self) -> str:
        """The case in a few words: seed, pair, sizes and leading dimensions."""
        return (f"seed={self.seed} {self.ta}{self.tb} m={self.m} n={self.n} k={self.k} "
                f"lda={self.lda} ldb={self.ldb} ldc={self.ldc}")

    def args(self, alpha: float, beta: float) -> tuple[Any, ...]:
        """sgemm's arguments after the handle, on the device arrays."""
        return (self.ta, self.tb, self.m, self.n, self.k, alpha, self.dA, self.lda,
                self.dB, self.ldb, beta, self.dC, self.ldc)

    def reset_c(self, nan: bool = False) -> np.ndarray:
        """Copy C to the device again, its matrix elements NaN when ``nan`` (padding kept);
        returns the host buffer the device now holds."""
        from numba import cuda

        before = poison(self.C.copy(), self.m, self.n, self.ldc) if nan else self.C
        self.dC = cuda.to_device(before)
        return before

    def reference(self, alpha: float, beta: float, C_before: np.ndarray | None = None) -> GemmReference:
        """What the call with ``alpha`` and ``beta`` must leave in C, from ``C_before`` (default
        :attr:`C`)."""
        C0 = self.C if C_before is None else C_before
        return reference_gemm(self.ta, self.tb, self.m, self.n, self.k, alpha, self.A, self.lda,
                              self.B, self.ldb, beta, C0, self.ldc)

    def error(self, alpha: float, beta: float, C_before: np.ndarray | None = None) -> str | None:
        """None when the device C holds the call's result and its padding is intact; else the
        sentence of :func:`gemm_error`."""
        return gemm_error(self.dC.copy_to_host(), self.reference(alpha, beta, C_before))

    def check(self, alpha: float, beta: float, C_before: np.ndarray | None = None) -> None:
        """Assert what :meth:`error` checks; the message names the case and its seed."""
        error = self.error(alpha, beta, C_before)
        assert error is None, f"{self.label} alpha={alpha} beta={beta}: {error}"
