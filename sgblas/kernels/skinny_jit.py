"""Building the skinny kernels (:mod:`sgblas.kernels.skinny`): the generated text, compiled
with the names it uses. Imports Numba; only the registry's builder imports this module."""

from __future__ import annotations

import linecache

from sgblas.kernels import skinny
from sgblas.kernels.skinny import SkinnyConfig
from sgblas.runtime.device import SIMULATOR

__all__ = ["build_pyfunc"]


def _namespace(cfg: SkinnyConfig) -> dict:
    from numba import cuda, float32, int64, uint32

    from sgblas.kernels import memory

    ns = {
        "__name__": skinny.__name__,
        "cuda": cuda, "float32": float32, "int64": int64, "uint32": uint32,
        "lds4": memory.lds4, "sts4": memory.sts4, "cp_async4": memory.cp_async4, "cp_async8": memory.cp_async8,
        "cp_async16": memory.cp_async16,
        "cp_async4_if": memory.cp_async4_if, "cp_async4x4": memory.cp_async4x4,
        "cp_async4x4_if": memory.cp_async4x4_if, "lds4_into": memory.lds4_into,
        # a step's multiply-adds: dot, NC columns of 4 k values; axpy, 4 rows of VQ elements
        "dot_block": memory.dot_block(cfg.NC, 4), "axpy_block": memory.axpy_block(4, cfg.VQ),
        # S's swizzled piece (_stage_dot): KC x MP floats, threads // MP k columns a pass
        "cp_async4_swizzled": memory.cp_async4_swizzled(
            skinny.MP * cfg.KC // cfg.THREADS, cfg.THREADS // skinny.MP // 4, cfg.THREADS // skinny.MP),
        "cp_async_commit": memory.cp_async_commit, "cp_async_wait_all": memory.cp_async_wait_all,
        "grid_dependency_wait": memory.grid_dependency_wait,
    }
    if not SIMULATOR:  # the simulator's kernels read cuda.threadIdx.x instead (the generator's choice)
        ns["tid_x_again"] = memory.tid_x_again
    # The count of a wait_group must be a constant (all but L's ring - 1 newest steps): the
    # factory makes that intrinsic.
    ns[f"cp_async_wait{cfg.ring - 1}"] = memory.cp_async_wait_group(cfg.ring - 1)
    return ns


def build_pyfunc(cfg: SkinnyConfig, fname: str, after_grid: bool = False):
    """The plain Python kernel function (not yet ``cuda.jit``-wrapped); ``after_grid``: the
    sm_90+ build, which waits for the grid ahead of it first."""
    src = skinny.generate_source(cfg, fname, after_grid)
    if SIMULATOR:
        filename = f"<generated {fname}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    else:
        # Numba's cache keys a function by its file: the generator's file, so editing it
        # invalidates what was cached (the sizes are literals in the generated text).
        filename = skinny.__file__
    ns = _namespace(cfg)
    exec(compile(src, filename, "exec"), ns)  # noqa: S102 - source generated above
    return ns[fname]
