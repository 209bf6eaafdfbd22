"""Reading a caller's array: data pointer, how many float32 elements it spans, its device.

The array may be a Numba device array or any object exporting ``__cuda_array_interface__``
(CuPy arrays, PyTorch tensors, ...). Its interface is read exactly once per call. Nothing
here synchronises: the interface's ``stream`` entry is deliberately ignored, as cuBLAS
ignores the producer of a raw pointer; ordering work is the caller's business.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sgblas.device import SIMULATOR, pointer_device

__all__ = ["Operand", "read_operand", "column_major_view"]

_FLOAT32_TYPESTRS = frozenset(("<f4", "=f4", "f4"))


class Operand(NamedTuple):
    """A device array as a BLAS call sees it.

    ``extent`` counts the float32 elements reachable from ``ptr`` upwards that the array's
    own shape and strides cover, so ``(cols - 1) * ld + rows <= extent`` proves the matrix lies
    inside memory the caller owns. ``strides`` are in elements (None for C-contiguous).
    """

    ptr: int
    extent: int
    shape: tuple
    strides: tuple | None
    device: int | None
    readonly: bool
    owner: Any


def _interface(x: Any) -> dict | None:
    if SIMULATOR:
        # The simulator's device arrays wrap a host ndarray and export no CUDA interface;
        # its ``_ary`` is that ndarray (numba-cuda simulator/cudadrv/devicearray.py).
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        if isinstance(x, FakeCUDAArray):
            return x._ary.__array_interface__
    try:
        return x.__cuda_array_interface__
    except AttributeError:
        return None
    except Exception:  # a broken exporter is an invalid argument, not a crash
        return None


def _span(shape: tuple, strides: Any, name: str) -> tuple[int, tuple | None] | str:
    """``(extent, element strides)`` of an array, or a sentence saying why it is unusable.

    Plain loops rather than any()/sum() over generators: this runs three times per call.
    """
    size = 1
    for s in shape:
        if s < 0:
            return f"{name} has a negative shape {shape}"
        size *= s
    if size == 0:
        return 0, None
    if strides is None:
        return size, None
    elem_strides = []
    extent = 1
    for s, st in zip(shape, strides):
        if st % 4:
            return f"{name} has strides {tuple(strides)} that are not multiples of 4 bytes"
        st //= 4
        elem_strides.append(st)
        if s > 1:
            if st < 0:
                return f"{name} has negative strides {tuple(strides)}; sgemm reads upwards from the data pointer"
            extent += (s - 1) * st
    return extent, tuple(elem_strides)


def read_operand(x: Any, name: str) -> Operand | str:
    """The :class:`Operand` for ``x``, or a sentence saying why ``x`` cannot be one."""
    if x is None:
        return f"{name} is None; a float32 device array is required"
    cai = _interface(x)
    if cai is None:
        return (f"{name} of type {type(x).__name__} is not a device array "
                f"(it exports no __cuda_array_interface__)")
    try:
        typestr = cai["typestr"]
        shape = cai["shape"]
        ptr, readonly = cai["data"]
        strides = cai.get("strides")
        if type(shape) is not tuple or len(shape) != 2 or type(shape[0]) is not int \
                or type(shape[1]) is not int:  # only matrices of plain ints skip the rebuild
            shape = tuple(int(s) for s in shape)
    except (KeyError, TypeError, ValueError):
        return f"{name} has a malformed __cuda_array_interface__"
    if typestr not in _FLOAT32_TYPESTRS:
        return f"{name} has dtype {typestr!r}; sgemm needs float32 ('<f4')"
    ptr = int(ptr or 0)
    span = _span(shape, strides, name)
    if type(span) is str:
        return span
    extent, elem_strides = span
    if ptr % 4:
        return f"{name}'s data pointer {ptr:#x} is not 4-byte aligned"
    device = pointer_device(ptr) if extent else None
    if extent and device is None:
        return f"{name} at {ptr:#x} is not in device memory"
    return Operand(ptr, extent, shape, elem_strides, device, bool(readonly), x)


def column_major_view(op: Operand, name: str) -> tuple[int, int, bool] | str:
    """How a 2-D operand reads as a column-major buffer: ``(rows, ld, transposed)``.

    ``transposed`` is False when the buffer read column-major with ``ld`` *is* the array and
    True when it is the array's transpose (a C-ordered array). Returns a sentence when the
    array is not 2-D or is strided in both dimensions, which no leading dimension describes.
    """
    if len(op.shape) != 2:
        return f"{name} has {len(op.shape)} dimensions; gemm needs 2-D arrays"
    rows, cols = op.shape
    if rows == 0 or cols == 0:  # nothing is read or written: any valid ld describes it
        return rows, max(1, rows), False
    s0, s1 = op.strides if op.strides is not None else (cols, 1)
    if rows <= 1 or s0 == 1:
        ld = s1 if cols > 1 else max(1, rows)
        if ld >= max(1, rows):
            return rows, ld, False
    if cols <= 1 or s1 == 1:
        ld = s0 if rows > 1 else max(1, cols)
        if ld >= max(1, cols):
            return cols, ld, True
    return (f"{name} with shape {op.shape} and element strides ({s0}, {s1}) has no unit stride, "
            f"so no leading dimension describes it; pass a contiguous array or a view of one")
