"""The tests' name for the buffers, reference and tolerance of :mod:`sgblas.testing`, the one
testing toolkit.

Typical use::

    rng = np.random.default_rng(seed)
    ops = make_operands(rng, "T", "N", m, n, k, pad=(3, 0, 5), nan_c=(beta == 0))
    ref = reference_gemm("T", "N", m, n, k, alpha, ops.A, ops.lda, ops.B, ops.ldb, beta, ops.C, ops.ldc)
    ... run the kernel on copies of ops.A, ops.B, ops.C, read C back as `got` ...
    assert_gemm_close(got, ref, seed=seed)
"""

from __future__ import annotations

from sgblas.testing import (C_PAD_BITS, GemmOperands, GemmReference, assert_gemm_close, make_operands,
                            reference_gemm)

__all__ = ["C_PAD_BITS", "GemmOperands", "GemmReference", "make_operands", "reference_gemm",
           "assert_gemm_close"]
