"""The Pythonic form: ``gemm(a, b, c=None, ...)`` over 2-D device arrays of either memory order."""

from __future__ import annotations

from typing import Any

from sgblas.api import _Failure, execute, last_error_message, sgemm_operands_plain, validate
from sgblas.enums import Status
from sgblas.errors import InvalidValueError, SgblasError, status_error
from sgblas.handle import Handle
from sgblas.operands import Operand, matrix_view, read_device_span, read_operand

__all__ = ["gemm", "default_handle"]

_default_handles: dict[int, Handle] = {}


def default_handle() -> Handle:
    """A handle on the current device and its default stream, created once per device."""
    from sgblas.runtime.device import current_device

    device = current_device()
    handle = _default_handles.get(device)
    if handle is None or handle.closed:
        handle = _default_handles[device] = Handle(device)
    return handle


def _allocate_like(a: Any, rows: int, cols: int, handle: Handle) -> Any:
    """A new column-major float32 array of the same library as ``a`` (Numba otherwise)."""
    module = type(a).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        with cupy.cuda.Device(handle.device), cupy.cuda.ExternalStream(handle.stream_handle):
            return cupy.empty((rows, cols), dtype=cupy.float32, order="F")
    if module == "torch":
        import torch

        # torch has no Fortran order: the transpose of a C-ordered (cols, rows) tensor is one.
        return torch.empty((cols, rows), dtype=torch.float32, device=f"cuda:{handle.device}").t()
    from numba import cuda
    import numpy as np

    if type(a).__module__.startswith("numba.cuda.simulator"):
        return cuda.device_array((rows, cols), dtype=np.float32, order="F")
    with cuda.gpus[handle.device]:
        return cuda.device_array((rows, cols), dtype=np.float32, order="F",
                                 stream=cuda.external_stream(handle.stream_handle) if handle.stream_handle else 0)


def _operand(x: Any, name: str) -> tuple[tuple, tuple[int, int, bool]]:
    """``x`` read once, as a tuple in :class:`Operand`'s field order, and its column-major view."""
    span = read_device_span(x)  # the three common libraries, without building an Operand
    if span is not None and span[2] is not None:
        ptr, extent, device, shape, strides = span
        read = (ptr, extent, shape, strides, device, False, x)
    else:
        read = read_operand(x, name)
        if isinstance(read, str):
            raise InvalidValueError(read)
    view = matrix_view(read[2], read[3], name)
    if isinstance(view, str):
        raise InvalidValueError(view)
    return read, view


def gemm(a: Any, b: Any, c: Any = None, *, alpha: float = 1.0, beta: float = 0.0,
         trans_a: bool = False, trans_b: bool = False, handle: Handle | None = None) -> Any:
    """``c = alpha * op(a) @ op(b) + beta * c`` with NumPy semantics; returns ``c``.

    ``a``, ``b`` and ``c`` are 2-D float32 device arrays (Numba, CuPy, PyTorch, ...) in either
    memory order; ``op(x)`` is ``x.T`` when ``trans_x`` is true. C-ordered operands are read
    through the identity ``C^T = B^T A^T`` without copies. When ``c`` is None a column-major
    result of ``a``'s array library is allocated and ``beta`` is ignored. ``handle`` defaults to
    one on the current device's default stream.

    Raises :class:`InvalidValueError` (a ``ValueError``) naming the bad value for invalid
    arguments, and :class:`SgblasError` carrying the status for other failures.
    """
    if handle is None:
        handle = default_handle()
    a_op, (a_rows, lda, a_t) = _operand(a, "a")
    b_op, (b_rows, ldb, b_t) = _operand(b, "b")
    m, k = a_op[2][::-1] if trans_a else a_op[2]
    k_b, n = b_op[2][::-1] if trans_b else b_op[2]
    if k != k_b:
        raise InvalidValueError(f"op(a) is {m}x{k} but op(b) is {k_b}x{n}: inner dimensions {k} and {k_b} differ")
    if c is None:
        c = _allocate_like(a, m, n, handle)
        beta = 0.0
    c_op, (c_rows, ldc, c_t) = _operand(c, "c")
    if tuple(c_op[2]) != (m, n):
        raise InvalidValueError(f"c has shape {tuple(c_op[2])} but op(a) @ op(b) is {m}x{n}")
    # A buffer read column-major is x when not transposed and x^T when it is (C order), so
    # op(x) needs a BLAS transpose exactly when trans_x differs from the buffer's transposition.
    ta = "T" if bool(trans_a) != a_t else "N"
    tb = "T" if bool(trans_b) != b_t else "N"
    if not c_t:
        args = (ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        operands, names = (a_op, b_op, c_op), ("a", "b", "c")
    else:
        # C is stored as C^T (n x m, column-major): C^T = op(b)^T op(a)^T.
        flip = {"N": "T", "T": "N"}
        args = (flip[tb], flip[ta], n, m, k, alpha, b, ldb, a, lda, beta, c, ldc)
        operands, names = (b_op, a_op, c_op), ("b", "a", "c")
    status = sgemm_operands_plain(handle, *args[:6], operands[0], args[7], operands[1], args[9], args[10],
                                  operands[2], args[12])
    if status is not None:  # a plain call, launched (or its launch failed)
        if status is not Status.SUCCESS:
            raise SgblasError(status, last_error_message() or f"sgemm returned {status.name}")
        return c
    operands = tuple(op if type(op) is Operand else Operand(*op) for op in operands)
    result = validate(handle, *args, operands=operands, names=names)
    if isinstance(result, _Failure):
        raise status_error(result.status, result.message)
    status = execute(handle, result)
    if status != Status.SUCCESS:
        raise SgblasError(status, last_error_message() or f"sgemm returned {status.name}")
    return c
