"""Shared test helpers: column-major device operands with padding, and result checks."""

from __future__ import annotations

import numpy as np
from numba import cuda

from sgblas.reference import as_matrix, compare, reference_gemm


def stored_shape(trans: str, rows: int, cols: int) -> tuple[int, int]:
    """The stored shape of a matrix whose op() is rows x cols."""
    return (rows, cols) if trans.upper() == "N" else (cols, rows)


def column_major(rng, rows: int, cols: int, ld: int, padding=np.nan) -> np.ndarray:
    """A flat buffer holding a random rows x cols matrix with leading dimension ld."""
    buf = np.full(max(1, (cols - 1) * ld + rows) if rows and cols else 1, padding, np.float32)
    for j in range(cols):
        buf[j * ld: j * ld + rows] = rng.standard_normal(rows).astype(np.float32)
    return buf


class Case:
    """Random operands of one sgemm call, on the host and on the device."""

    def __init__(self, seed, ta, tb, m, n, k, pad=0, c_padding=-7.0):
        self.seed = seed
        rng = np.random.default_rng(seed)
        self.ta, self.tb, self.m, self.n, self.k = ta, tb, m, n, k
        a_rows, a_cols = stored_shape(ta, m, k)
        b_rows, b_cols = stored_shape(tb, k, n)
        self.lda, self.ldb, self.ldc = max(1, a_rows + pad), max(1, b_rows + pad), max(1, m + pad)
        self.A = column_major(rng, a_rows, a_cols, self.lda)
        self.B = column_major(rng, b_rows, b_cols, self.ldb)
        self.C = column_major(rng, m, n, self.ldc, padding=c_padding)
        self.dA, self.dB, self.dC = cuda.to_device(self.A), cuda.to_device(self.B), cuda.to_device(self.C)

    def args(self, alpha, beta):
        return (self.ta, self.tb, self.m, self.n, self.k, alpha, self.dA, self.lda,
                self.dB, self.ldb, beta, self.dC, self.ldc)

    def check(self, alpha, beta, C_before=None):
        """Assert the device C equals the float64 reference and its padding is untouched."""
        C0 = self.C if C_before is None else C_before
        got = self.dC.copy_to_host()
        ref, scale = reference_gemm(self.ta, self.tb, self.m, self.n, self.k, alpha,
                                    self.A, self.lda, self.B, self.ldb, beta, C0, self.ldc)
        ok, ratio, where = compare(as_matrix(got, self.m, self.n, self.ldc), ref, scale, self.k)
        assert ok, (f"seed={self.seed} {self.ta}{self.tb} m={self.m} n={self.n} k={self.k} "
                    f"alpha={alpha} beta={beta}: error {ratio:.3g}x tolerance at {where}")
        inside = np.zeros(got.size, bool)
        for j in range(self.n):
            inside[j * self.ldc: j * self.ldc + self.m] = True
        np.testing.assert_array_equal(got[~inside], C0[~inside],
                                      err_msg=f"seed={self.seed}: C's padding between columns was written")
