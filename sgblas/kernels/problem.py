"""The validated request that dispatch guards look at."""

from __future__ import annotations

from typing import NamedTuple

from sgblas.enums import MathMode

__all__ = ["GemmProblem"]


class GemmProblem(NamedTuple):
    """A validated column-major SGEMM request, after memory order has been resolved.

    ``transa``/``transb`` are ``'N'`` or ``'T'``; pointers are device addresses in bytes;
    ``cc`` is the compute capability of the handle's device, ``(0, 0)`` under the simulator.
    """

    cc: tuple[int, int]
    math_mode: MathMode
    transa: str
    transb: str
    m: int
    n: int
    k: int
    a_ptr: int
    lda: int
    b_ptr: int
    ldb: int
    c_ptr: int
    ldc: int
