"""The calling conventions of sgblas's kernels, each written once.

Every GEMM kernel takes :data:`GEMM`::

    (m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)

``A``, ``B`` and ``C`` are flat, contiguous float32 views that start at the matrix's first
element and hold at least ``(cols - 1) * ld + rows`` elements; the kernel reads them as
column-major with the given leading dimension. Transposes are compile-time properties of a
kernel variant, never runtime arguments: the API layer resolves memory order and
transposition before dispatch, so a kernel only ever sees pointer + leading dimension.

:data:`GEMM_SPLIT` is a split-K slice kernel's: :data:`GEMM`'s parameters, ``k_chunk`` and
``sem``. ``blockIdx.y`` is the split index ``s``; the kernel multiplies over k in
``[s * k_chunk, min(k, (s + 1) * k_chunk))``. With ``sem`` empty it writes ``alpha`` times that
partial product (never reading C, ignoring beta) to the column-major m x n matrix at
``C + s * ldc * n``. With ``sem`` holding one int32 per CTA along x (all zero before the launch),
the slices add into C itself one after another (a serial split): slice s of a tile waits until
its semaphore reads s, stores ``alpha * partial + C`` (``+ beta * C`` for slice 0), and sets it
to s + 1, the last slice back to 0 (:mod:`sgblas.kernels.sgemm_simt`, ``TileConfig.split_k``).

:data:`SCALE` is the ``C = beta * C`` kernel's: ``(m, n, beta, C, ldc)``, C unread when
beta == 0.

The signature, the packed layout and the packer of each are derived from the parameter list
(:class:`sgblas.runtime.abi.Abi`); nothing else in the package spells them out.
"""

from __future__ import annotations

from sgblas.runtime.abi import ARRAY, FLOAT32, INT32, INT32_ARRAY, Abi

__all__ = ["GEMM", "GEMM_SPLIT", "SCALE"]

GEMM = Abi("gemm", (("m", INT32), ("n", INT32), ("k", INT32), ("alpha", FLOAT32),
                    ("A", ARRAY), ("lda", INT32), ("B", ARRAY), ("ldb", INT32),
                    ("beta", FLOAT32), ("C", ARRAY), ("ldc", INT32)))

GEMM_SPLIT = Abi("gemm_split", GEMM.params + (("k_chunk", INT32), ("sem", INT32_ARRAY)))

SCALE = Abi("scale", (("m", INT32), ("n", INT32), ("beta", FLOAT32), ("C", ARRAY), ("ldc", INT32)))

#: The fixed-order split-K reduction's (:mod:`sgblas.kernels.reduce`):
#: ``C = W_0 + W_1 + ... + W_{splits-1} + beta * C`` over the m x n partials at ``W + s * ldw * n``
#: (leading dimension ``ldw``); C unread when beta == 0; ``c_vec`` nonzero when C may be
#: accessed with 16-byte vectors (16-byte aligned, ldc a multiple of 4).
REDUCE = Abi("reduce", (("m", INT32), ("n", INT32), ("splits", INT32), ("W", ARRAY), ("ldw", INT32),
                        ("beta", FLOAT32), ("C", ARRAY), ("ldc", INT32), ("c_vec", INT32)))
__all__ += ["REDUCE"]

#: The packing copy's (:mod:`sgblas.kernels.pack`): the ``rows x cols`` column-major ``S`` into
#: ``D`` with leading dimension ``ldd`` (rows rounded up to 4), zeros in the rows between.
PACK = Abi("pack", (("rows", INT32), ("cols", INT32), ("S", ARRAY), ("lds", INT32), ("D", ARRAY), ("ldd", INT32)))
__all__ += ["PACK"]
