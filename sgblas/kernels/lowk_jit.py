"""Building the low-K kernels (:mod:`sgblas.kernels.lowk`): the generated text, compiled with
the names it uses. Imports Numba; only the registry's builder imports this module."""

from __future__ import annotations

import linecache

from sgblas.kernels import lowk
from sgblas.kernels.lowk import LowKConfig
from sgblas.runtime.device import SIMULATOR

__all__ = ["build_pyfunc"]


def _namespace() -> dict:
    from numba import cuda, float32, uint32, uint64

    from sgblas.kernels import memory

    return {"__name__": lowk.__name__, "cuda": cuda, "float32": float32, "uint32": uint32, "uint64": uint64,
            "lds4": memory.lds4, "grid_dependency_wait": memory.grid_dependency_wait}


def build_pyfunc(cfg: LowKConfig, fname: str, after_grid: bool = False):
    """The plain Python kernel function (not yet ``cuda.jit``-wrapped); ``after_grid``: the
    sm_90+ build, which waits for the grid ahead of it first."""
    src = lowk.generate_source(cfg, fname, after_grid, simulator=SIMULATOR)
    if SIMULATOR:
        filename = f"<generated {fname}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    else:
        # Numba's cache keys a function by its file: the generator's, so editing it invalidates
        # what was cached (the sizes are literals in the generated text).
        filename = lowk.__file__
    ns = _namespace()
    exec(compile(src, filename, "exec"), ns)  # noqa: S102 - source generated above
    return ns[fname]
