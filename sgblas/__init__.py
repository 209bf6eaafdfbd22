"""sgblas: strict-FP32, column-major SGEMM for Python, written as Numba CUDA kernels.

``C = alpha * op(A) @ op(B) + beta * C`` in IEEE binary32 (FMA allowed, never TF32), on the
caller's stream. Importing the package on a machine with a GPU loads every kernel variant for
the current device from sgblas's cubin cache (compiling with Numba only what is missing), so
no call ever compiles; the import itself needs neither Numba nor NumPy.

Entry points: :func:`sgemm` (BLAS-style, returns a :class:`Status`), :func:`gemm` (NumPy-style,
raises :class:`SgblasError`), :func:`explain` (which kernel would run, and why), :class:`Handle`.
"""

from __future__ import annotations

import os as _os
import sys as _sys

from sgblas.api import Explanation, explain, last_error_message, sgemm
from sgblas.enums import MathMode, Status
from sgblas.errors import InvalidValueError, SgblasError
from sgblas.gemm_arrays import gemm
from sgblas.handle import Handle

__version__ = "0.1.0"

__all__ = [
    "Status",
    "MathMode",
    "Handle",
    "sgemm",
    "gemm",
    "explain",
    "Explanation",
    "SgblasError",
    "InvalidValueError",
    "last_error_message",
    "warmup_error",
    "is_available",
    "__version__",
]

#: Why loading the kernels at import failed, or None. A handle created later retries and raises.
_warmup_error: Exception | None = None


def warmup_error() -> Exception | None:
    """The exception raised while loading kernels at import, None if it succeeded or was skipped."""
    return _warmup_error


def is_available() -> bool:
    """Whether sgblas can run here: a CUDA device is present and sgblas's kernels for the current
    device (the device of the thread's current context, else device 0) are loaded.

    False without a CUDA driver or device, when loading the kernels at import failed
    (:func:`warmup_error` says why), when they cannot be loaded for that device now, and under
    Numba's CUDA simulator: the simulator runs the kernels' Python code on the CPU for tests, it
    is not a CUDA device. Never raises. When the import did not load the kernels
    (``SGBLAS_NO_WARMUP``), this loads them, compiling what the cache lacks.
    """
    from sgblas.runtime.device import BACKEND, current_device, device_count

    if BACKEND.simulated or _warmup_error is not None:
        return False
    try:
        if device_count() == 0:
            return False
        from sgblas.kernels.spec import REGISTRY
        from sgblas.runtime import loader

        loader.loaded_kernels(current_device(), REGISTRY)
    except Exception:  # whatever stops the kernels from loading means "not available"
        return False
    return True


def _warm_up_at_import() -> None:
    """Compile or load every kernel variant for the current device, when there is one."""
    global _warmup_error
    if _os.environ.get("SGBLAS_NO_WARMUP", "0") not in ("", "0"):
        return
    argv = getattr(_sys, "orig_argv", [])
    if "-m" in argv and argv[argv.index("-m") + 1:][:1] == ["sgblas.warmup"]:
        return  # the warm-up command loads the kernels itself, reporting each one
    from sgblas.runtime.device import BACKEND, current_device, device_count

    if BACKEND.simulated or device_count() == 0:
        return
    try:
        from sgblas.kernels.spec import REGISTRY
        from sgblas.runtime import loader

        device = current_device()
        loader.load_device(device, REGISTRY)
        # Retain the device's primary context (the one Numba, CuPy and PyTorch use; created
        # here if nothing has yet) and put every kernel into it now: loading code into a
        # context waits for its streams, so doing it at import is what lets every later call,
        # gemm's first one included, never wait (docs/api.md, "Streams and synchronisation").
        loader.make_resident(device)
    except Exception as exc:  # import must work; the first Handle reports the failure
        _warmup_error = exc
        return
    try:
        from sgblas.handle import reserve_workspace

        reserve_workspace(device)  # the first handle's workspace, allocated outside any call
    except Exception:  # no memory to spare now: that handle allocates its own, or says why
        pass


_warm_up_at_import()
