"""The Numba signatures of the kernel calling convention described in :mod:`sgblas.kernels.abi`.

Kept apart from :mod:`sgblas.kernels.abi` because building them imports ``numba.types``: only
code that compiles or loads a kernel needs them, and the dispatch guards must stay importable
without Numba.
"""

from __future__ import annotations

from numba import types

__all__ = ["GEMM_SIGNATURE", "SCALE_SIGNATURE"]

_vec = types.Array(types.float32, 1, "C")

#: (m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
GEMM_SIGNATURE = types.void(
    types.int32, types.int32, types.int32, types.float32,
    _vec, types.int32, _vec, types.int32,
    types.float32, _vec, types.int32,
)

#: (m, n, beta, C, ldc): C = beta * C, writing zeros without reading C when beta == 0.
SCALE_SIGNATURE = types.void(types.int32, types.int32, types.float32, _vec, types.int32)
