"""Shared test helpers: random column-major operands, a float64 reference, a tolerance check.

Every buffer is a flat float32 numpy array holding a column-major matrix with a leading
dimension, exactly what a kernel (or :func:`sgblas.sgemm`) reads. The API is three functions:

* :func:`make_operands` builds A, B and C for one call, with padded leading dimensions
  and poisoned padding (NaN in A and B, so reading it shows up in the result; a fixed bit
  pattern in C, so writing it is caught);
* :func:`reference_gemm` computes the expected result in float64;
* :func:`assert_gemm_close` compares a kernel's C buffer with it, elementwise with a K- and
  magnitude-aware tolerance, and checks that C's padding kept its exact bits. On failure
  it reports the seed and the worst element.

Typical use::

    rng = np.random.default_rng(seed)
    ops = make_operands(rng, "T", "N", m, n, k, pad=(3, 0, 5), nan_c=(beta == 0))
    ref = reference_gemm("T", "N", m, n, k, alpha, ops.A, ops.lda, ops.B, ops.ldb, beta, ops.C, ops.ldc)
    ... run the kernel on copies of ops.A, ops.B, ops.C, read C back as `got` ...
    assert_gemm_close(got, ref, seed=seed)

Import it as ``from tests.reference import ...`` (the repository root must be on
``sys.path``, as it is under ``python -m pytest``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sgblas.reference import as_matrix, compare, tolerance
from sgblas.reference import reference_gemm as _reference_values

__all__ = ["C_PAD_BITS", "GemmOperands", "GemmReference", "make_operands", "reference_gemm",
           "assert_gemm_close"]

#: The bit pattern written into C's padding; a kernel that touches padding changes it.
C_PAD_BITS = np.uint32(0x7FC0DEAD)  # a quiet NaN with a recognisable payload


class GemmOperands(NamedTuple):
    """Flat column-major float32 buffers of one call and their leading dimensions."""

    A: np.ndarray
    lda: int
    B: np.ndarray
    ldb: int
    C: np.ndarray
    ldc: int


class GemmReference(NamedTuple):
    """What a correct call leaves in C.

    ``value`` (m x n float64) is the result computed in float64, ``scale`` (m x n) the magnitude
    ``|alpha| |op(A)| |op(B)| + |beta| |C|`` its rounding error is proportional to,
    ``c_before`` a copy of the C buffer before the call (its padding must survive
    bit for bit).
    """

    value: np.ndarray
    scale: np.ndarray
    c_before: np.ndarray
    m: int
    n: int
    k: int
    ldc: int


def _random_matrix(rng: np.random.Generator, rows: int, cols: int, pad: int,
                   pad_bits: np.uint32 | None) -> tuple[np.ndarray, int]:
    """A rows x cols standard-normal matrix in a minimal buffer with ld = rows + pad.

    The buffer holds exactly ``(cols - 1) * ld + rows`` elements, so any read past the
    last element fails under the simulator (numpy bounds); padding rows hold NaN, or the
    ``pad_bits`` pattern when given.
    """
    ld = max(1, rows + pad)
    size = (cols - 1) * ld + rows if rows and cols else 0
    buf = np.full(size, np.nan, dtype=np.float32)
    if pad_bits is not None:
        buf.view(np.uint32)[:] = pad_bits
    if size:
        full = np.lib.stride_tricks.as_strided(buf, shape=(rows, cols), strides=(4, 4 * ld))
        full[...] = rng.standard_normal((rows, cols), dtype=np.float32)
    return buf, ld


def make_operands(rng: np.random.Generator, transa: str, transb: str, m: int, n: int, k: int,
                  pad: tuple[int, int, int] = (0, 0, 0), nan_c: bool = False) -> GemmOperands:
    """Random operands of ``C(m,n) = op(A)(m,k) op(B)(k,n)``, ``ld = rows + pad[i]``.

    A is stored m x k for ``transa == 'N'`` and k x m for ``'T'`` (likewise B), so the
    leading dimensions are the legal minimum plus the requested padding. A and B padding
    is NaN; C padding is :data:`C_PAD_BITS`. ``nan_c`` fills C's m x n elements with NaN
    too (for beta == 0 calls, which must not read them).
    """
    a_rows, a_cols = (m, k) if transa.upper() == "N" else (k, m)
    b_rows, b_cols = (k, n) if transb.upper() == "N" else (n, k)
    A, lda = _random_matrix(rng, a_rows, a_cols, pad[0], None)
    B, ldb = _random_matrix(rng, b_rows, b_cols, pad[1], None)
    C, ldc = _random_matrix(rng, m, n, pad[2], C_PAD_BITS)
    if nan_c and m and n:
        np.lib.stride_tricks.as_strided(C, shape=(m, n), strides=(4, 4 * ldc))[...] = np.nan
    return GemmOperands(A, lda, B, ldb, C, ldc)


def reference_gemm(transa: str, transb: str, m: int, n: int, k: int, alpha: float,
                   A: np.ndarray, lda: int, B: np.ndarray, ldb: int, beta: float,
                   C: np.ndarray, ldc: int) -> GemmReference:
    """The float64 result of ``C = alpha op(A) op(B) + beta C`` on flat column-major buffers.

    alpha and beta are rounded to float32 first, as the library does; with beta == 0 the
    old C (even NaN) does not enter the result; with k == 0 or alpha == 0, A and B do not.
    """
    value, scale = _reference_values(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
    return GemmReference(value, scale, np.array(C, dtype=np.float32, copy=True), m, n, k, ldc)


def assert_gemm_close(got: np.ndarray, ref: GemmReference, *, seed: object = None,
                      label: str = "") -> None:
    """Assert the flat C buffer ``got`` matches ``ref`` and its padding was not touched.

    Element (i, j) passes by :func:`sgblas.reference.compare`: ``|got - value|`` within
    :func:`sgblas.reference.tolerance` (``8 * sqrt(k + 2) * eps32 * scale``), NaN only
    where the reference is NaN, infinities equal. Every element outside the m x n matrix
    (the ``ldc - m`` rows between columns) must keep its bits. The message names
    ``seed``, ``label``, the number of failing elements and the worst one.
    """
    m, n, ldc = ref.m, ref.n, ref.ldc
    tag = f"seed={seed!r}" + (f" {label}" if label else "")
    got = np.asarray(got)
    assert got.shape == ref.c_before.shape and got.dtype == np.float32, (
        f"{tag}: C buffer shape/dtype {got.shape}/{got.dtype}, expected "
        f"{ref.c_before.shape}/float32"
    )
    if m and n:
        mat = as_matrix(got, m, n, ldc).astype(np.float64)
        ok, worst_ratio, (i, j) = compare(mat, ref.value, ref.scale, ref.k)
        if not ok:
            # The count, for the message only, by the same rule as compare().
            value = ref.value
            with np.errstate(invalid="ignore"):
                close = np.abs(mat - value) <= tolerance(ref.k, ref.scale)
            same_special = (np.isnan(mat) & np.isnan(value)) | (np.isinf(value) & (mat == value))
            n_bad = int((~np.where(np.isfinite(value) & np.isfinite(mat), close, same_special)).sum())
            tol = float(tolerance(ref.k, ref.scale[i, j]))
            raise AssertionError(
                f"{tag}: {n_bad} of {m * n} elements of C out of tolerance; worst "
                f"C[{i}, {j}] = {float(mat[i, j])!r}, expected {float(ref.value[i, j])!r} "
                f"(error {worst_ratio:.3g} x tolerance {tol:.3g}; m={m} n={n} k={ref.k} ldc={ldc})"
            )
    # Padding: everything in the buffer that is not element (i, j) of the matrix.
    inside = np.zeros(got.shape, dtype=bool)
    if m and n:
        as_writable = np.lib.stride_tricks.as_strided(inside, shape=(m, n), strides=(1, ldc))
        as_writable[...] = True
    changed = (got.view(np.uint32) != ref.c_before.view(np.uint32)) & ~inside
    if changed.any():
        idx = int(np.flatnonzero(changed)[0])
        raise AssertionError(
            f"{tag}: {int(changed.sum())} padding elements of C were written; first at flat "
            f"index {idx} (row {idx % ldc}, column {idx // ldc}, ldc={ldc}, m={m})"
        )
