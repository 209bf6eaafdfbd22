"""The calling convention shared by every SGEMM kernel, and the simulator switch.

Every GEMM kernel in :mod:`sgblas.kernels` is a ``@cuda.jit`` function with the argument
list :data:`sgblas.kernels.signatures.GEMM_SIGNATURE`::

    (m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)

``A``, ``B`` and ``C`` are flat, contiguous float32 views that start at the matrix's first
element and hold at least ``(cols - 1) * ld + rows`` elements; the kernel reads them as
column-major with the given leading dimension. Transposes are compile-time properties of a
kernel variant, never runtime arguments: the API layer resolves memory order and
transposition before dispatch, so a kernel only ever sees pointer + leading dimension.

The Numba types of that argument list live in :mod:`sgblas.kernels.signatures`; this module
imports nothing from Numba, so the dispatch guards that read :data:`SIMULATOR` stay
importable (and cheap to import) without it.
"""

from __future__ import annotations

import os

__all__ = ["SIMULATOR"]

#: True when Numba's CUDA simulator is active: intrinsics, alignment and caching are
#: unavailable there, so kernels fall back to their plain-Python helpers.
SIMULATOR: bool = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
