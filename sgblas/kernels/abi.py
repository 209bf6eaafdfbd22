"""The calling convention shared by every SGEMM kernel, and the simulator switch.

Every GEMM kernel in :mod:`sgblas.kernels` is a ``@cuda.jit`` function with the argument
list :data:`GEMM_SIGNATURE`::

    (m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)

``A``, ``B`` and ``C`` are flat, contiguous float32 views that start at the matrix's first
element and hold at least ``(cols - 1) * ld + rows`` elements; the kernel reads them as
column-major with the given leading dimension. Transposes are compile-time properties of a
kernel variant, never runtime arguments: the API layer resolves memory order and
transposition before dispatch, so a kernel only ever sees pointer + leading dimension.
"""

from __future__ import annotations

import os

from numba import types

__all__ = ["GEMM_SIGNATURE", "SCALE_SIGNATURE", "SIMULATOR"]

#: True when Numba's CUDA simulator is active: intrinsics, alignment and caching are
#: unavailable there, so kernels fall back to their plain-Python helpers.
SIMULATOR: bool = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")

_vec = types.Array(types.float32, 1, "C")

#: (m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
GEMM_SIGNATURE = types.void(
    types.int32, types.int32, types.int32, types.float32,
    _vec, types.int32, _vec, types.int32,
    types.float32, _vec, types.int32,
)

#: (m, n, beta, C, ldc): C = beta * C, writing zeros without reading C when beta == 0.
SCALE_SIGNATURE = types.void(types.int32, types.int32, types.float32, _vec, types.int32)
