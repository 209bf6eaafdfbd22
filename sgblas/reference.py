"""A float64 host reference for SGEMM and the tolerance results are judged by.

Used by ``python -m sgblas.selftest`` and the tests. Matrices are flat column-major numpy
buffers with a leading dimension, exactly as :func:`sgblas.sgemm` reads them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["as_matrix", "reference_gemm", "tolerance", "compare"]

EPS32 = float(np.finfo(np.float32).eps)


def as_matrix(buf: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    """The rows x cols column-major matrix with leading dimension ``ld`` held in flat ``buf``."""
    if rows == 0 or cols == 0:
        return np.zeros((rows, cols), dtype=buf.dtype)
    return np.lib.stride_tricks.as_strided(buf, shape=(rows, cols),
                                           strides=(buf.itemsize, ld * buf.itemsize), writeable=False)


def _op(buf, trans, rows, cols, ld):
    # op(X) is rows x cols; X itself is stored rows x cols ('N') or cols x rows ('T').
    if trans.upper() == "N":
        return as_matrix(buf, rows, cols, ld).astype(np.float64)
    return as_matrix(buf, cols, rows, ld).astype(np.float64).T


def reference_gemm(transa: str, transb: str, m: int, n: int, k: int, alpha: float,
                   A: np.ndarray, lda: int, B: np.ndarray, ldb: int, beta: float,
                   C: np.ndarray, ldc: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ref, scale)``: the float64 m x n result and the elementwise magnitude it is built from.

    ``scale = |alpha| |op(A)| |op(B)| + |beta| |C|`` bounds the size of the rounding error; where
    beta == 0, C is ignored as the contract requires (even NaNs there).
    """
    alpha = float(np.float32(alpha))
    beta = float(np.float32(beta))
    if k == 0 or alpha == 0.0:
        product = np.zeros((m, n))
        magnitude = np.zeros((m, n))
    else:
        a = _op(A, transa, m, k, lda)
        b = _op(B, transb, k, n, ldb)
        product = alpha * (a @ b)
        with np.errstate(invalid="ignore", over="ignore"):
            magnitude = abs(alpha) * (np.abs(a) @ np.abs(b))
    if beta == 0.0:
        return product, magnitude
    c = as_matrix(C, m, n, ldc).astype(np.float64)
    return product + beta * c, magnitude + abs(beta) * np.abs(c)


def tolerance(k: int, scale: np.ndarray, factor: float = 8.0) -> np.ndarray:
    """Allowed |error| per element: ``factor * sqrt(k + 2) * eps32 * scale`` plus the float32
    rounding of the result itself. Random-sign data accumulates rounding like a random walk,
    so sqrt(k) is generous for any summation order yet catches a dropped or repeated term."""
    return factor * np.sqrt(k + 2.0) * EPS32 * scale + np.finfo(np.float32).tiny


def compare(got: np.ndarray, ref: np.ndarray, scale: np.ndarray, k: int) -> tuple[bool, float, tuple]:
    """``(ok, worst ratio of error to tolerance, index of the worst element)``.

    NaN in ``got`` passes only where ``ref`` is NaN at the same place; infinities must match.
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
