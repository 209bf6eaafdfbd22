"""Where compiled kernels are cached on disk.

numba-cuda's ``cache=True`` stores each compiled kernel (PTX and cubin, keyed by signature,
compute capability, CUDA and numba-cuda versions and the function's bytecode) beside its source
in ``__pycache__``, or under ``NUMBA_CACHE_DIR``. sgblas adds one setting in front of those:
``SGBLAS_CACHE_DIR``, which moves only sgblas's kernels. The order of precedence is
``SGBLAS_CACHE_DIR``, then ``NUMBA_CACHE_DIR``, then the package's ``__pycache__`` when writable,
then Numba's user-wide cache directory.
"""

from __future__ import annotations

import os
from typing import Any

from sgblas.device import SIMULATOR

__all__ = ["CACHE_DIR_VARIABLE", "attach_cache", "cache_path"]

#: The environment variable that chooses sgblas's kernel cache directory.
CACHE_DIR_VARIABLE = "SGBLAS_CACHE_DIR"

_cache_class = None


def _build_cache_class():
    from numba.cuda.core import caching
    from numba.cuda.dispatcher import CUDACache, CUDACacheImpl

    class _SgblasDirLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        """Caches into ``$SGBLAS_CACHE_DIR/<source folder>_<hash>``, as NUMBA_CACHE_DIR does."""

        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            subpath = self.get_suitable_cache_subpath(py_file)
            self._cache_path = os.path.join(os.environ[CACHE_DIR_VARIABLE], subpath)

        def get_cache_path(self):
            return self._cache_path

        @classmethod
        def from_function(cls, py_func, py_file):
            if not os.environ.get(CACHE_DIR_VARIABLE):
                return None
            return super().from_function(py_func, py_file)

    class _SgblasCacheImpl(CUDACacheImpl):
        _locator_classes = [_SgblasDirLocator, *CUDACacheImpl._locator_classes]

    class SgblasCache(CUDACache):
        _impl_class = _SgblasCacheImpl

    return SgblasCache


def attach_cache(dispatcher: Any) -> None:
    """Give a kernel dispatcher sgblas's on-disk cache (idempotent; a no-op in the simulator)."""
    global _cache_class
    if SIMULATOR:
        return
    if _cache_class is None:
        _cache_class = _build_cache_class()
    if not isinstance(dispatcher._cache, _cache_class):
        dispatcher._cache = _cache_class(dispatcher.py_func)


def cache_path(dispatcher: Any) -> str | None:
    """The directory ``dispatcher``'s kernels are cached in, None when it has no disk cache."""
    cache = getattr(dispatcher, "_cache", None)
    return getattr(cache, "_cache_path", None)
