"""The Numba code of the C = beta * C kernel (:mod:`sgblas.kernels.scale`).

Split from :mod:`sgblas.kernels.scale` so that the kernel's dispatch contract (block, grid)
imports without Numba: only the registry's builder (:mod:`sgblas.kernels.spec`) imports this
module, when the kernel is first built. sgblas's cubin cache keys every kernel by the text of
all of :mod:`sgblas.kernels`, so editing ``BLOCK_M`` in ``scale.py`` recompiles it.
"""

from __future__ import annotations

from numba import cuda, float32, uint32, uint64

from sgblas.kernels.memory import grid_dependency_wait
from sgblas.kernels.scale import BLOCK_M, BLOCK_N

__all__: list[str] = []  # private: built through sgblas.kernels.spec


def build(after_grid: bool = False):
    """The kernel function; ``after_grid``: the sm_90+ build, whose first act is
    ``griddepcontrol.wait`` (:data:`sgblas.runtime.device.GRID_WAIT_MIN_CC`; a closure constant,
    pruned when False)."""

    def _scale_c(m, n, beta, C, ldc):
        """C[i + j * ldc] = beta * C[i + j * ldc] for i < m, j < n; C unread when beta == 0."""
        if after_grid:
            grid_dependency_wait()
        um = uint32(m)
        un = uint32(n)
        row = uint32(uint32(cuda.blockIdx.x) * uint32(BLOCK_M) + uint32(cuda.threadIdx.x))
        if row < um:
            uldc = uint64(uint32(ldc))
            col = uint32(uint32(cuda.blockIdx.y) * uint32(BLOCK_N) + uint32(cuda.threadIdx.y))
            # No overflow: col < n < 2**31 and the stride is at most 65535 * BLOCK_N.
            col_step = uint32(uint32(cuda.gridDim.y) * uint32(BLOCK_N))
            zero = beta == float32(0)
            while col < un:
                idx = uint64(col) * uldc + row
                if zero:
                    C[idx] = float32(0)
                else:
                    C[idx] = beta * C[idx]
                col = uint32(col + col_step)

    return _scale_c
