"""Reading a caller's array: data pointer, how many float32 elements it spans, its device.

The array may be a Numba device array or any object exporting ``__cuda_array_interface__``
(CuPy arrays, PyTorch tensors, ...). Its interface is read exactly once per call. Nothing
here synchronises: the interface's ``stream`` entry is deliberately ignored, as cuBLAS
ignores the producer of a raw pointer; ordering work is the caller's business.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Callable, NamedTuple

from sgblas.runtime.device import SIMULATOR, pointer_device

__all__ = ["Operand", "read_operand", "read_device_span", "forget_devices", "column_major_view", "matrix_view"]

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
    known = _read_known(x)
    if known is not None:
        return known
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


# --- direct readers for the common array types ------------------------------------------------
#
# Building a ``__cuda_array_interface__`` dict costs 1-2 us per array (Numba converts its
# stream and checks contiguity; CuPy looks up the current stream), three times per call. For
# exact instances of Numba's DeviceNDArray, CuPy's ndarray and PyTorch's Tensor the same
# facts are read from their public attributes instead. A reader answers only the plain case
# (float32, 1-D contiguous or 2-D contiguous in either order, writable, on a device) as
# ``(ptr, extent)`` and None for anything else, which then takes the general path above, so
# both paths accept and describe exactly the same arrays.

_NUMPY_FLOAT32 = None
_TORCH_FLOAT32 = None


def _contiguous(shape: tuple, strides: tuple, unit: int) -> tuple[int, tuple] | None:
    """``(extent, element strides)`` of a 1-D or 2-D array whose ``strides`` (in units of
    ``unit`` bytes) make it contiguous; None for any other layout, or an empty array."""
    if len(shape) == 1:
        size, stride = shape[0], strides[0] * unit
        if size > 0 and (stride == 4 or size == 1 and not stride & 3):
            return size, (stride >> 2,)
        return None
    if len(shape) == 2:
        rows, cols = shape
        if rows <= 0 or cols <= 0:
            return None
        s0, s1 = strides[0] * unit, strides[1] * unit
        if (s0 | s1) & 3:  # the general path words this refusal
            return None
        if (s0 == 4 or rows == 1) and (s1 == 4 * rows or cols == 1) or \
                (s1 == 4 or cols == 1) and (s0 == 4 * cols or rows == 1):  # either memory order
            return rows * cols, (s0 >> 2, s1 >> 2)
    return None


# A reader returns ``(ptr, extent, shape, element strides)`` or None.

def _read_numba(x: Any) -> tuple | None:
    if x.dtype is not _NUMPY_FLOAT32:
        return None
    shape = x.shape
    layout = _contiguous(shape, x.strides, 1)
    return None if layout is None else (x.device_ctypes_pointer.value or 0, layout[0], shape, layout[1])


def _read_cupy(x: Any) -> tuple | None:
    if x.dtype is not _NUMPY_FLOAT32:
        return None
    shape = x.shape
    layout = _contiguous(shape, x.strides, 1)
    return None if layout is None else (x.data.ptr, layout[0], shape, layout[1])


def _read_torch(x: Any) -> tuple | None:
    # What torch's own interface refuses (autograd) or marks lazily (negative and conjugate
    # bits) goes to the general path, which gives the verdict. A host tensor needs no test
    # of its own: its pointer is not device memory. A sparse one raises on stride() (the
    # caller then takes the general path too). Each attribute read costs about 0.1 us.
    if x.dtype is not _TORCH_FLOAT32 or x.requires_grad or x.is_neg() or x.is_conj():
        return None
    shape = x.shape
    layout = _contiguous(shape, x.stride(), 4)
    return None if layout is None else (x.data_ptr(), layout[0], shape, layout[1])


_READERS: dict[type, Callable[[Any], tuple | None] | None] = {}


def _reader_for(kind: type) -> Callable[[Any], tuple | None] | None:
    global _NUMPY_FLOAT32, _TORCH_FLOAT32
    module, name = kind.__module__, kind.__name__
    reader = None
    if module == "numba.cuda.cudadrv.devicearray" and name == "DeviceNDArray" and not SIMULATOR:
        reader = _read_numba
    elif module == "cupy" and name == "ndarray":
        reader = _read_cupy
    elif module == "torch" and name == "Tensor":
        reader = _read_torch
    if reader is _read_torch:
        _TORCH_FLOAT32 = sys.modules["torch"].float32
    elif reader is not None and _NUMPY_FLOAT32 is None:
        import numpy

        _NUMPY_FLOAT32 = numpy.dtype(numpy.float32)
    _READERS[kind] = reader
    return reader


def _read_known(x: Any) -> Operand | None:
    """The Operand of a plain array of a known type (see :func:`read_device_span`), else None."""
    span = read_device_span(x)
    if span is None or span[2] is None:
        return None  # the general path reads it, or words the refusal
    ptr, extent, device, shape, strides = span
    return Operand(ptr, extent, shape, strides, device, False, x)


# What is remembered per array object. The device of an array's memory: a pointer query
# costs about 2 us of driver time on the H200's host (perf/launch_paths.py), three per call,
# and an array object keeps its memory alive and on one device, so the answer holds while the
# object lives and its pointer is unchanged (a PyTorch tensor can be given new storage in
# place: a new pointer is a new question). For Numba's DeviceNDArray, whose pointer, shape,
# strides and dtype are fixed at construction, the whole answer is kept. Entries leave with
# their object (weak reference); ``key -> (ref, ptr, device, whole answer or None)``.
_REMEMBERED: dict[int, tuple[Any, int, int | None, tuple | None]] = {}


def _forget(key: int, ref: Any) -> None:
    entry = _REMEMBERED.get(key)
    if entry is not None and entry[0] is ref:
        del _REMEMBERED[key]


def forget_devices() -> None:
    """Drop every remembered array device (tests that fake the pointer query use this)."""
    _REMEMBERED.clear()


def read_device_span(x: Any) -> tuple | None:
    """``(ptr, extent, device, shape, element strides)`` of a plain float32 array of a known
    type (1-D or 2-D, contiguous in either order), else None.

    None means "ask :func:`read_operand`", never "invalid": the caller falls back to the
    general path for every array this does not recognise.
    """
    key = id(x)
    entry = _REMEMBERED.get(key)
    if entry is not None and entry[3] is not None and entry[0]() is x:
        return entry[3]
    kind = type(x)
    reader = _READERS.get(kind, False)
    if reader is False:
        reader = _reader_for(kind)
    if reader is None:
        return None
    try:
        read = reader(x)
    except Exception:  # an array its own library cannot describe this way: the general path
        return None
    if read is None:
        return None
    ptr, extent, shape, strides = read
    if ptr & 3 or not ptr:
        return None
    if entry is not None and entry[1] == ptr and entry[0]() is x:
        return ptr, extent, entry[2], shape, strides
    device = pointer_device(ptr)
    answer = (ptr, extent, device, shape, strides)
    try:
        ref = weakref.ref(x, lambda r, key=key: _forget(key, r))
    except TypeError:  # a type without weak references is asked every time
        return answer
    _REMEMBERED[key] = (ref, ptr, device, answer if reader is _read_numba else None)
    return answer


def column_major_view(op: Operand, name: str) -> tuple[int, int, bool] | str:
    """How a 2-D operand reads as a column-major buffer: ``(rows, ld, transposed)``.

    ``transposed`` is False when the buffer read column-major with ``ld`` *is* the array and
    True when it is the array's transpose (a C-ordered array). Returns a sentence when the
    array is not 2-D or is strided in both dimensions, which no leading dimension describes.
    """
    return matrix_view(op.shape, op.strides, name)


def matrix_view(shape: tuple, strides: tuple | None, name: str) -> tuple[int, int, bool] | str:
    """:func:`column_major_view` of an array given by its shape and element strides (None for
    C-contiguous)."""
    if len(shape) != 2:
        return f"{name} has {len(shape)} dimensions; gemm needs 2-D arrays"
    rows, cols = shape
    if rows == 0 or cols == 0:  # nothing is read or written: any valid ld describes it
        return rows, max(1, rows), False
    s0, s1 = strides if strides is not None else (cols, 1)
    if rows <= 1 or s0 == 1:
        ld = s1 if cols > 1 else max(1, rows)
        if ld >= max(1, rows):
            return rows, ld, False
    if cols <= 1 or s1 == 1:
        ld = s0 if rows > 1 else max(1, cols)
        if ld >= max(1, cols):
            return cols, ld, True
    return (f"{name} with shape {tuple(shape)} and element strides ({s0}, {s1}) has no unit stride, "
            f"so no leading dimension describes it; pass a contiguous array or a view of one")
