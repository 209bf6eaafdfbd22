"""The Numba code of the packing copy (:mod:`sgblas.kernels.pack`).

Split from :mod:`sgblas.kernels.pack` so that the copy's dispatch contract (block, grid,
leading dimension) imports without Numba: only the registry's builder imports this module,
when the kernel is first built.
"""

from __future__ import annotations

from numba import cuda, float32, uint32, uint64

from sgblas.kernels.memory import grid_dependency_wait
from sgblas.kernels.pack import PER_THREAD, ROWS_PER_CTA, THREADS

__all__: list[str] = []  # private: built through sgblas.kernels.spec


def build(after_grid: bool = False):
    """The kernel function; ``after_grid``: the sm_90+ build, whose first act is
    ``griddepcontrol.wait`` (a closure constant, pruned when False)."""

    def _pack_cm(rows, cols, S, lds, D, ldd):
        """D[r + c * ldd] = S[r + c * lds] for r < rows, 0 for rows <= r < ldd; c < cols."""
        if after_grid:
            grid_dependency_wait()
        urows = uint32(rows)
        uldd = uint32(ldd)
        ucols = uint32(cols)
        r0 = uint32(uint32(cuda.blockIdx.x) * uint32(ROWS_PER_CTA) + uint32(cuda.threadIdx.x))
        col = uint32(cuda.blockIdx.y)
        col_step = uint32(cuda.gridDim.y)
        while col < ucols:
            src = uint64(col) * uint64(uint32(lds))
            dst = uint64(col) * uint64(uldd)
            # The loads first, so that a thread has its PER_THREAD reads in flight at once.
            v = cuda.local.array(PER_THREAD, float32)
            for j in range(PER_THREAD):
                r = uint32(r0 + uint32(j * THREADS))
                v[j] = S[src + r] if r < urows else float32(0)
            for j in range(PER_THREAD):
                r = uint32(r0 + uint32(j * THREADS))
                if r < uldd:
                    D[dst + r] = v[j]
            col = uint32(col + col_step)

    return _pack_cm
