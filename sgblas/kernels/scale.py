"""The C = beta * C kernel, run when k == 0 or alpha == 0 (A and B are then not read).

Computes ``C(i, j) = beta * C(i, j)`` for the m x n column-major matrix with leading
dimension ``ldc``; when ``beta == 0`` it writes zeros without reading C, so NaNs there do
not survive. The ``ldc - m`` padding rows between columns are never touched.

Mapping: a block of ``BLOCK_M x BLOCK_N`` threads; ``threadIdx.x`` walks rows, so each
warp reads and writes 32 consecutive floats of one column (coalesced). ``blockIdx.x``
covers the rows (any int32 m fits the 2**31 - 1 limit of ``gridDim.x``); ``blockIdx.y``
covers the columns with a grid stride, the launch capping ``gridDim.y`` at 65535, so n up
to 2**31 - 1 is fine. ``col * ldc`` is formed in 64 bits; rows and columns stay 32-bit
unsigned.

The argument list is :data:`sgblas.kernels.abi.SCALE`: ``(m, n, beta, C, ldc)``. The kernel
body lives in :mod:`sgblas.kernels.scale_jit`, which the registry imports on the first build,
so this module imports without Numba.
"""

from __future__ import annotations


__all__ = ["NAME", "BLOCK_M", "BLOCK_N", "BLOCK", "LAUNCH_BOUNDS", "grid"]

BLOCK_M: int = 32  #: threads along m: one warp per column segment
BLOCK_N: int = 8  #: threads along n
#: gridDim.y limit; the column tiles beyond it are covered by the grid-stride loop.
MAX_GRID_Y: int = 65535

NAME: str = f"scale_c_{BLOCK_M}x{BLOCK_N}"
BLOCK: tuple[int, int, int] = (BLOCK_M, BLOCK_N, 1)
#: No ``launch_bounds``: the kernel is compiled without one.
LAUNCH_BOUNDS: None = None

assert BLOCK_M % 32 == 0, "a warp must cover whole 32-float runs of one column to coalesce"


def grid(m: int, n: int) -> tuple[int, int, int]:
    """Blocks for an m x n C: rows on x, columns on y capped at 65535 (grid-stride)."""
    return ((m + BLOCK_M - 1) // BLOCK_M, min((n + BLOCK_N - 1) // BLOCK_N, MAX_GRID_Y), 1)
