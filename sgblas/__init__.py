"""sgblas: strict-FP32, column-major SGEMM for Python, written as Numba CUDA kernels.

``C = alpha * op(A) @ op(B) + beta * C`` in IEEE binary32 (FMA allowed, never TF32), on the
caller's stream. The kernels are compiled ahead of time into sgblas's cubin cache
(``python -m sgblas.warmup``, the install step) and handed straight to the driver, so no call
ever compiles; the import needs neither Numba nor NumPy.

``import sgblas`` initialises no CUDA, whatever the process has done before: it loads no driver
library, creates and retains no context, allocates nothing and loads no kernel. So a process
may import it and then fork, start work on other devices, or only look. Set-up happens on a
device when a :class:`Handle` is created, at :func:`gemm`'s first call there, or when
:func:`initialize` is called, for programs whose first ``gemm`` must not wait either; that
step may wait once for the device's running work, and no call after it does.

Entry points: :func:`sgemm` (BLAS-style, returns a :class:`Status`), :func:`gemm` (NumPy-style,
raises :class:`SgblasError`), :func:`explain` (which kernel would run, and why), :class:`Handle`,
:func:`initialize` and :func:`is_available`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sgblas.enums import MathMode, Status
from sgblas.errors import InvalidValueError, SgblasError

if TYPE_CHECKING:
    from sgblas.api import Explanation, explain, last_error_message, sgemm
    from sgblas.gemm_arrays import gemm
    from sgblas.handle import Handle, initialize

__version__ = "0.1.0"

#: The public names imported at the first use of any of them (PEP 562), and their modules: the
#: API brings in the registry, the dispatcher and the kernels' generators, most of the package's
#: import time, which a process that only imports sgblas (to ask is_available(), or as a
#: dependency of something else) need not pay. All of them come in together, so that the names
#: a program uses first (Handle, initialize) leave no import to its first call; after that each
#: is an ordinary attribute of the package.
_LAZY = {
    "Explanation": "sgblas.api",
    "explain": "sgblas.api",
    "last_error_message": "sgblas.api",
    "sgemm": "sgblas.api",
    "gemm": "sgblas.gemm_arrays",
    "Handle": "sgblas.handle",
    "initialize": "sgblas.handle",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'sgblas' has no attribute {name!r}")
    import importlib

    for lazy, module in _LAZY.items():
        globals()[lazy] = getattr(importlib.import_module(module), lazy)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

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
    "initialize",
    "is_available",
    "__version__",
]


def is_available() -> bool:
    """Whether sgblas can run on the current device: the CUDA driver initialises, a device is
    present, and the current device (the device of the calling thread's current context, else
    device 0: the one ``Handle()`` binds) has a compute capability at least the lowest that
    sgblas's kernels support.

    What it touches: it loads the driver library (``libcuda.so.1``, through ctypes) and calls
    ``cuInit(0)``, ``cuDeviceGetCount``, ``cuCtxGetCurrent`` (and ``cuCtxGetDevice`` when the
    thread has a current context), ``cuDeviceGet`` and ``cuDeviceGetAttribute`` for the compute
    capability's two numbers. It creates, retains and makes current no context, allocates
    nothing, loads no kernel and reads not sgblas's kernel cache, so True does not promise that
    the cache holds the kernels (:func:`initialize` loads them, and says why when it cannot).
    ``cuInit`` does initialise the driver in this process, and CUDA does not support its use
    in a child forked after that: a program that forks and uses CUDA in its children should
    ask there, not before forking.

    False without a CUDA driver or device, for a device older than every kernel, on any error,
    and under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), which runs the kernels' Python
    code on the CPU for tests and is not a CUDA device, although handles and calls work under it.
    Never raises.
    """
    try:
        from sgblas.kernels.spec import REGISTRY
        from sgblas.runtime.device import BACKEND, compute_capability, current_device, device_count

        if BACKEND.simulated or device_count() == 0:
            return False
        return compute_capability(current_device()) >= min(spec.min_cc for spec in REGISTRY)
    except Exception:  # whatever stops the answer from being True means "not available"
        return False
