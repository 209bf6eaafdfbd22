"""Status codes and math modes: the numbers a caller of :func:`sgblas.sgemm` sees."""

from __future__ import annotations

from enum import Enum, IntEnum

__all__ = ["Status", "MathMode"]


class Status(IntEnum):
    """Return codes of :func:`sgblas.sgemm`, numbered as cuBLAS numbers ``cublasStatus_t``."""

    SUCCESS = 0
    NOT_INITIALIZED = 1
    ALLOC_FAILED = 3
    INVALID_VALUE = 7
    ARCH_MISMATCH = 8
    EXECUTION_FAILED = 13
    INTERNAL_ERROR = 14
    NOT_SUPPORTED = 15


class MathMode(Enum):
    """The arithmetic a handle promises.

    ``FP32`` multiplies and accumulates in IEEE binary32 (FMA allowed, no TF32 rounding of
    the inputs). ``TF32`` is reserved for a future, separately scored Tensor Core product:
    every call on a handle in that mode returns :attr:`Status.NOT_SUPPORTED`.
    """

    FP32 = "fp32"
    TF32 = "tf32"
