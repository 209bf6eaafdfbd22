"""The packing copy: a column-major matrix into the handle's workspace with 16-byte columns.

A packed variant (:mod:`sgblas.kernels.packed`) multiplies copies of A and B instead of the
caller's arrays, when those are too unaligned for the 16-byte kernels (an odd leading
dimension, a pointer offset by 1-3 elements) and the 4-byte kernels run the problem slowly.
This kernel makes each copy: the ``rows x cols`` column-major matrix ``S`` (leading dimension
``lds``, any alignment) becomes ``D`` with leading dimension ``ldd`` = rows rounded up to 4
(:func:`packed_rows`), so that every column of ``D`` starts 16-byte aligned when ``D`` does.
The ``ldd - rows`` rows between columns are written as zeros, so that no byte of the copy is
left uninitialised.

Mapping: a CTA of :data:`THREADS` threads copies :data:`ROWS_PER_CTA` rows of one column, each
thread :data:`PER_THREAD` rows ``THREADS`` apart, so that every warp reads and writes 128
contiguous bytes per access; ``blockIdx.y`` walks the columns with a grid stride (``gridDim.y``
is capped at 65535). The copy is bound by memory bandwidth: it reads and writes each element
once. The argument list is :data:`sgblas.kernels.abi.PACK`; the Numba code lives in
:mod:`sgblas.kernels.pack_jit`, so this module imports without Numba.
"""

from __future__ import annotations

__all__ = ["NAME", "THREADS", "PER_THREAD", "ROWS_PER_CTA", "BLOCK", "LAUNCH_BOUNDS", "packed_rows", "grid"]

#: Threads per CTA, along the rows of one column.
THREADS: int = 256
#: Rows each thread copies.
PER_THREAD: int = 8
ROWS_PER_CTA: int = THREADS * PER_THREAD
BLOCK: tuple[int, int, int] = (THREADS, 1, 1)
#: No launch bound: a few registers per thread.
LAUNCH_BOUNDS: None = None
#: gridDim.y limit; the columns beyond it are covered by the grid-stride loop.
MAX_GRID_Y: int = 65535

NAME: str = f"pack_cm_ld16_{THREADS}x{PER_THREAD}_1s_a4"


def packed_rows(rows: int) -> int:
    """The copy's leading dimension: ``rows`` rounded up to a multiple of 4."""
    return -(-rows // 4) * 4


def grid(rows: int, cols: int) -> tuple[int, int, int]:
    """CTAs for a copy of ``rows x cols``: the padded rows of a column on x, columns on y."""
    return (max(1, -(-packed_rows(rows) // ROWS_PER_CTA)), max(1, min(cols, MAX_GRID_Y)), 1)
