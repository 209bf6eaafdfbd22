"""Reading a caller's array: data pointer, how many float32 elements it spans, its device.

The array may be a Numba device array, any object exporting ``__cuda_array_interface__``
(CuPy arrays, PyTorch tensors, ...), or one exporting only ``__dlpack__`` and
``__dlpack_device__`` over CUDA memory. Its description is read exactly once per call.

Nothing here synchronises the host. The ``stream`` entry of a ``__cuda_array_interface__`` is
deliberately ignored, as cuBLAS ignores the producer of a raw pointer. DLPack has a handshake
instead: the producer is told the consumer's stream and orders its pending work before that
stream on the device, so an array handed over by DLPack is safe to read without the caller's
help.

Whatever an exporter does (a malformed description, a property that raises, a capsule that is
not one, sizes beyond what the kernels' 64-bit parameters hold), :func:`read_operand` answers
with a sentence naming the bad value and never raises: sgemm turns it into INVALID_VALUE.
"""

from __future__ import annotations

import ctypes
import operator
import sys
import weakref
from typing import Any, Callable, NamedTuple

from sgblas.runtime.device import SIMULATOR, pointer_device

__all__ = ["Operand", "read_operand", "read_device_span", "forget_devices", "matrix_view"]

_FLOAT32_TYPESTRS = frozenset(("<f4", "=f4", "f4"))

# The kernels take every pointer, size and stride as a signed 64-bit integer, and a device
# pointer is an unsigned 64-bit address. What does not fit is refused here, with a sentence,
# rather than failing later where the launch packs its parameters.
_INT64_MAX = 2**63 - 1
_ADDRESS_END = 2**64
_MAX_EXTENT = _INT64_MAX // 4  # float32 elements whose byte count is still an int64


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


# --- messages ---------------------------------------------------------------------------------

def _show(value: Any) -> str:
    """``repr(value)`` for a message, shortened; never raises, whatever ``value`` is."""
    try:
        text = repr(value)
    except Exception:  # an int past sys.get_int_max_str_digits(), or a __repr__ that raises
        try:
            if isinstance(value, int):
                return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
            return f"<a {type(value).__name__} that cannot be shown>"
        except Exception:
            return "<a value that cannot be shown>"
    return text if len(text) <= 80 else text[:77] + "..."


def _hex(value: int) -> str:
    text = f"{value:#x}"  # hexadecimal has no digit limit, unlike decimal
    return text if len(text) <= 40 else f"<an address of {value.bit_length()} bits>"


def _exception(exc: BaseException) -> str:
    """``Type: message`` of an exception an exporter raised; never raises itself."""
    try:
        kind = type(exc).__name__
        text = str(exc)
    except Exception:
        return "an exception that cannot be shown"
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{kind}: {text}" if text else kind


def _index(value: Any) -> int | None:
    """``value`` as a Python int when it is an integer (NumPy's included, bool not), else None."""
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except Exception:
        return None


def _numpy_bool(value: Any) -> bool:
    kind = type(value)
    return kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")


# --- the general path: __cuda_array_interface__ and DLPack ------------------------------------

def read_operand(x: Any, name: str, *, stream: int = 0) -> Operand | str:
    """The :class:`Operand` for ``x``, or a sentence saying why ``x`` cannot be one.

    ``stream`` is the raw ``CUstream`` the work reading ``x`` will be enqueued on (0 for the
    legacy default stream); a DLPack exporter is asked to order its pending work before it.
    Never raises.
    """
    if x is None:
        return f"{name} is None; a float32 device array is required"
    try:
        known = _read_known(x)
        if known is not None:
            return known
        return _read_general(x, name, stream)
    except Exception as exc:  # what the checks below did not foresee is still an invalid argument
        return f"{name} could not be read as a device array: {_exception(exc)}"


_ABSENT = object()


def _read_general(x: Any, name: str, stream: int) -> Operand | str:
    if SIMULATOR:
        # The simulator's device arrays wrap a host ndarray and export no CUDA interface;
        # its ``_ary`` is that ndarray (numba-cuda simulator/cudadrv/devicearray.py).
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        if isinstance(x, FakeCUDAArray):
            return _read_interface(x._ary.__array_interface__, x, name)
    if type(x).__module__ == "torch" and _torch_negative(x):
        # torch's __cuda_array_interface__ describes the memory, not the negation the bit
        # stands for; reading it would compute with the wrong sign.
        return (f"{name} is a PyTorch tensor with the negative bit set (a lazily negated view); "
                f"call {name}.resolve_neg() first")
    try:
        cai = x.__cuda_array_interface__
    except AttributeError:  # no interface (PyTorch raises this for host tensors too)
        cai = _ABSENT
    except Exception as exc:
        return f"{name}'s __cuda_array_interface__ raised {_exception(exc)}"
    if cai is not _ABSENT:
        return _read_interface(cai, x, name)
    dlpack = _read_dlpack(x, name, stream)
    if dlpack is not None:
        return dlpack
    return (f"{name} of type {type(x).__name__} is not a device array (it exports neither "
            f"__cuda_array_interface__ nor __dlpack__ with __dlpack_device__)")


def _torch_negative(x: Any) -> bool:
    is_neg = getattr(x, "is_neg", None)
    return bool(is_neg()) if callable(is_neg) else False


def _read_interface(cai: Any, x: Any, name: str) -> Operand | str:
    """The Operand a ``__cuda_array_interface__`` dict describes, or why it describes none."""
    if not isinstance(cai, dict):
        return f"{name}'s __cuda_array_interface__ is {_show(cai)}, not a dict"
    where = f"{name}'s __cuda_array_interface__"
    if "version" in cai and _index(cai["version"]) is None:
        return f"{where} has version {_show(cai['version'])}, which is not an integer"
    mask = cai.get("mask")
    if mask is not None:
        # The interface's own rule: a consumer that does not support masks must refuse them.
        return f"{where} has a mask ({_show(mask)}); sgblas does not support masked arrays"
    for key in ("typestr", "shape", "data"):
        if key not in cai:
            return f"{where} has no {key!r} entry"
    typestr = cai["typestr"]
    if type(typestr) is not str:
        return f"{where} has typestr {_show(typestr)}, which is not a string"
    if typestr not in _FLOAT32_TYPESTRS:
        return f"{name} has dtype {_show(typestr)}; sgemm needs float32 ('<f4')"
    shape = cai["shape"]
    if type(shape) is not tuple or len(shape) != 2 or type(shape[0]) is not int \
            or type(shape[1]) is not int:  # only matrices of plain ints skip the rebuild
        shape = _dimensions(shape, where, "shape")
        if type(shape) is str:
            return shape
    data = cai["data"]
    if type(data) not in (tuple, list) or len(data) != 2:
        return f"{where} has data {_show(data)}, which is not a (pointer, read-only flag) pair"
    raw_ptr, readonly = data
    ptr = 0 if raw_ptr is None else _index(raw_ptr)
    if ptr is None:
        return f"{name}'s data pointer {_show(raw_ptr)} is not an integer"
    if type(readonly) is not bool and _index(readonly) not in (0, 1) and not _numpy_bool(readonly):
        return f"{where} has read-only flag {_show(readonly)}, which is not a bool"
    strides = cai.get("strides")
    if strides is not None:
        strides = _dimensions(strides, where, "strides")
        if type(strides) is str:
            return strides
        if len(strides) != len(shape):
            return (f"{where} has strides {_show(strides)} for shape {_show(shape)}: "
                    f"{len(strides)} strides for {len(shape)} dimensions")
    return _operand(x, name, ptr, shape, strides, 4, bool(readonly))


def _dimensions(values: Any, where: str, what: str) -> tuple | str:
    """A shape or strides entry as a tuple of int64 values, or a sentence naming the bad one."""
    if type(values) not in (tuple, list):
        return f"{where} has {what} {_show(values)}, which is not a tuple of integers"
    out = []
    for value in values:
        v = _index(value)
        if v is None:
            return f"{where} has {what} {_show(values)} with entry {_show(value)}, which is not an integer"
        if not -_INT64_MAX - 1 <= v <= _INT64_MAX:
            return f"{where} has {what} {_show(values)} with entry {_show(v)}, which does not fit int64"
        out.append(v)
    return tuple(out)


def _operand(x: Any, name: str, ptr: int, shape: tuple, strides: tuple | None, unit: int,
             readonly: bool) -> Operand | str:
    """The Operand of a validated description: ``strides`` (None for C-contiguous) count units
    of ``unit`` bytes (4 for the interface's bytes, 1 for DLPack's elements, which are 4 bytes)."""
    size = 1
    for s in shape:
        if s < 0:
            return f"{name} has a negative shape {_show(shape)}"
        size *= s  # may grow past int64 here; the extent test below refuses that
    if size == 0:
        extent, elem_strides = 0, None
    elif strides is None:
        extent, elem_strides = size, None
    else:
        elem = []
        extent = 1
        for s, st in zip(shape, strides):
            if unit == 4:
                if st % 4:
                    return f"{name} has strides {_show(strides)} that are not multiples of 4 bytes"
                st //= 4
            elem.append(st)
            if s > 1:
                if st < 0:
                    return (f"{name} has negative strides {_show(strides)}; sgemm reads upwards "
                            f"from the data pointer")
                extent += (s - 1) * st
        elem_strides = tuple(elem)
    if extent > _MAX_EXTENT:
        layout = "contiguous" if strides is None else f"with strides {_show(strides)}"
        return (f"{name} of shape {_show(shape)}, {layout}, spans more than 2**63 - 1 bytes, "
                f"which the kernels' signed 64-bit sizes cannot hold")
    if not 0 <= ptr < _ADDRESS_END:
        return f"{name}'s data pointer {_show(ptr)} is not a 64-bit address (it must lie in [0, 2**64))"
    if extent:
        if ptr == 0:
            return f"{name} has a null data pointer but spans {extent} float32 elements"
        if ptr + 4 * extent > _ADDRESS_END:
            return (f"{name} at {_hex(ptr)} spans {4 * extent} bytes, which wraps past the end of "
                    f"the 64-bit address space")
        if ptr > _INT64_MAX:
            return (f"{name}'s data pointer {_hex(ptr)} is at or beyond 2**63, which the kernels' "
                    f"signed 64-bit pointer parameter cannot hold")
    if ptr % 4:
        return f"{name}'s data pointer {_hex(ptr)} is not 4-byte aligned"
    device = pointer_device(ptr) if extent else None
    if extent and device is None:
        return f"{name} at {_hex(ptr)} is not in device memory"
    return Operand(ptr, extent, shape, elem_strides, device, readonly, x)


# --- DLPack -----------------------------------------------------------------------------------
#
# The structures of dlpack.h (DLPack 1.x; the unversioned DLManagedTensor of 0.x shares its
# DLTensor). A capsule is read in place and dropped: its destructor then runs the producer's
# deleter, which is how the producer learns the exchange is over. Its name is never changed to
# "used_dltensor", since that would leave calling the deleter to us.

_KDL_CUDA, _KDL_CUDA_MANAGED = 2, 13
_KDL_FLOAT = 2
_DEVICE_TYPES = {1: "kDLCPU", 2: "kDLCUDA", 3: "kDLCUDAHost", 4: "kDLOpenCL", 7: "kDLVulkan",
                 8: "kDLMetal", 9: "kDLVPI", 10: "kDLROCM", 11: "kDLROCMHost", 12: "kDLExtDev",
                 13: "kDLCUDAManaged", 14: "kDLOneAPI", 15: "kDLWebGPU", 16: "kDLHexagon", 17: "kDLMAIA"}
_HOST_DEVICE_TYPES = frozenset((1, 3, 11))
_FLAG_READ_ONLY, _FLAG_IS_COPIED = 1, 2
_MAX_DIMS = 64  # more than any exporter makes (NumPy's limit); beyond it the shape is not read
_VERSIONED, _UNVERSIONED = b"dltensor_versioned", b"dltensor"


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_capsule_api: tuple[Callable[..., int], Callable[..., int]] | None = None


def _capsule_functions() -> tuple[Callable[..., int], Callable[..., int]]:
    """``(PyCapsule_IsValid, PyCapsule_GetPointer)`` with prototypes of our own: setting
    argtypes on ``ctypes.pythonapi``'s shared function objects would change them for every
    other user in the process."""
    global _capsule_api
    if _capsule_api is None:
        is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_IsValid", ctypes.pythonapi))
        get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_GetPointer", ctypes.pythonapi))
        _capsule_api = (is_valid, get_pointer)
    return _capsule_api


def _device_kind(kind: int) -> str:
    label = _DEVICE_TYPES.get(kind)
    if label is None:
        return f"a device of a type DLPack does not name ({kind})"
    return f"a {label} device (DLPack device type {kind})"


def _read_dlpack(x: Any, name: str, stream: int) -> Operand | str | None:
    """The Operand of a DLPack exporter of CUDA memory, a sentence, or None when ``x`` does
    not export DLPack at all."""
    try:
        device_of = x.__dlpack_device__
        export = x.__dlpack__
    except AttributeError:
        return None
    except Exception as exc:
        return f"{name}'s DLPack methods raised {_exception(exc)} when looked up"
    try:
        where = device_of()
    except Exception as exc:
        return f"{name}'s __dlpack_device__() raised {_exception(exc)}"
    kind = _index(where[0]) if type(where) in (tuple, list) and len(where) == 2 else None
    if kind is None or _index(where[1]) is None:
        return f"{name}'s __dlpack_device__() returned {_show(where)}, not a (device type, device id) pair of integers"
    if kind in _HOST_DEVICE_TYPES:
        return (f"{name} of type {type(x).__name__} is not a device array: its memory is on the host "
                f"(__dlpack_device__ is {_DEVICE_TYPES[kind]}); copy it to the device first, with "
                f"numba.cuda.to_device, cupy.asarray or tensor.cuda()")
    if kind not in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        return f"{name} is on {_device_kind(kind)}, not a CUDA device"
    # The array API standard numbers the legacy default stream 1 for CUDA and forbids 0.
    consumer = stream if stream else 1
    capsule = None
    # The refusal is kept as text: the exception's traceback holds this frame, and with it the
    # capsule, which would then outlive the call until the garbage collector breaks the cycle.
    refusal = ""
    # Newest request first: a versioned capsule, exported in place (copy=False, since a copy
    # would die with the capsule, before the kernel runs). An exporter that predates an
    # argument refuses it with TypeError, and the next request leaves it out.
    for request in ({"stream": consumer, "max_version": (1, 0), "copy": False},
                    {"stream": consumer, "max_version": (1, 0)},
                    {"stream": consumer}):
        try:
            capsule = export(**request)
            break
        except TypeError as exc:
            refusal = _exception(exc)
        except Exception as exc:
            return f"{name}'s __dlpack__(stream={consumer}) raised {_exception(exc)}"
    else:
        return (f"{name}'s __dlpack__ refused a stream argument ({refusal}), so its "
                f"pending work cannot be ordered before the stream sgemm runs on")
    return _read_capsule(capsule, x, name)


def _read_capsule(capsule: Any, x: Any, name: str) -> Operand | str:
    """The Operand a DLPack capsule describes; the capsule is only read, never kept."""
    is_valid, get_pointer = _capsule_functions()
    where = f"{name}'s DLPack tensor"
    if is_valid(capsule, _VERSIONED):
        managed = _DLManagedTensorVersioned.from_address(get_pointer(capsule, _VERSIONED))
        major, minor = managed.version.major, managed.version.minor
        if major != 1:  # another major version may lay the structure out differently
            return f"{name}'s DLPack capsule is version {major}.{minor}; sgblas reads version 1"
        flags = managed.flags
        if flags & _FLAG_IS_COPIED:
            return (f"{name}'s exporter copied the array for DLPack (flags {flags:#x}); the copy would be "
                    f"freed with the capsule, before the kernel runs, so sgemm needs the array itself")
        readonly = bool(flags & _FLAG_READ_ONLY)
        tensor = managed.dl_tensor
    elif is_valid(capsule, _UNVERSIONED):
        tensor = _DLManagedTensor.from_address(get_pointer(capsule, _UNVERSIONED)).dl_tensor
        readonly = False  # the unversioned structure has no flag for it
    else:
        return (f"{name}'s __dlpack__ returned {_show(capsule)}, not an unconsumed DLPack capsule "
                f"('dltensor_versioned' or 'dltensor')")
    device_type = tensor.device.device_type
    if device_type not in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        return f"{where} is on {_device_kind(device_type)}, not a CUDA device"
    dtype = tensor.dtype
    if (dtype.code, dtype.bits, dtype.lanes) != (_KDL_FLOAT, 32, 1):
        return (f"{name} has DLPack dtype code {dtype.code} with {dtype.bits} bits and {dtype.lanes} lanes; "
                f"sgemm needs float32 (code kDLFloat = 2, 32 bits, 1 lane)")
    ndim = tensor.ndim
    if not 0 <= ndim <= _MAX_DIMS:
        return f"{where} has {ndim} dimensions; sgblas reads at most {_MAX_DIMS}"
    if ndim and not tensor.shape:
        return f"{where} has {ndim} dimensions but a null shape pointer"
    shape = tuple(tensor.shape[i] for i in range(ndim))
    strides = tuple(tensor.strides[i] for i in range(ndim)) if ndim and tensor.strides else None
    ptr = (tensor.data or 0) + tensor.byte_offset
    return _operand(x, name, ptr, shape, strides, 1, readonly)


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


def _contiguous(shape: tuple, strides: tuple, unit: int) -> tuple[int, tuple, bool | None] | None:
    """``(extent, element strides, transposed)`` of a 1-D or 2-D array whose ``strides`` (in
    units of ``unit`` bytes) make it contiguous; None for any other layout, or an empty array.
    ``transposed`` is :func:`matrix_view`'s answer for a matrix (None for 1-D): False when the
    buffer read column-major is the array, True when it is the array's transpose (C order)."""
    if len(shape) == 1:
        size, stride = shape[0], strides[0] * unit
        if size > 0 and (stride == 4 or size == 1 and not stride & 3):
            return size, (stride >> 2,), None
        return None
    if len(shape) == 2:
        rows, cols = shape
        if rows <= 0 or cols <= 0:
            return None
        s0, s1 = strides[0] * unit, strides[1] * unit
        if (s0 | s1) & 3:  # the general path words this refusal
            return None
        if (s0 == 4 or rows == 1) and (s1 == 4 * rows or cols == 1):  # column-major
            return rows * cols, (s0 >> 2, s1 >> 2), False
        if (s1 == 4 or cols == 1) and (s0 == 4 * cols or rows == 1):  # row-major, more than a row
            return rows * cols, (s0 >> 2, s1 >> 2), True
    return None


# A span function answers read_device_span for one array type: it reads the raw facts
# ``(ptr, shape, strides)`` of a float32 array that its library does not mark otherwise, returns
# the remembered answer when they are those it was made from, and otherwise hands them to
# :func:`_remember`. One function per type, with the reads inline, as every call into Python
# and every attribute read counts here (three arrays a call).

def _span_numba(x: Any) -> tuple | None:
    entry = _REMEMBERED.get(id(x))
    if entry is not None and entry[0]() is x:
        return entry[3]  # a DeviceNDArray's facts are fixed at construction
    if x.dtype is not _NUMPY_FLOAT32:
        return None
    return _remember(x, x.device_ctypes_pointer.value or 0, x.shape, x.strides, 1, None, True)


def _span_cupy(x: Any) -> tuple | None:
    if x.dtype is not _NUMPY_FLOAT32:
        return None
    ptr, shape, strides = x.data.ptr, x.shape, x.strides
    entry = _REMEMBERED.get(id(x))
    if entry is not None and entry[1] == ptr and entry[4] == shape and entry[5] == strides \
            and entry[0]() is x:
        return entry[3]
    return _remember(x, ptr, shape, strides, 1, entry, False)


def _span_torch(x: Any) -> tuple | None:
    # What torch's own interface refuses (autograd) or marks lazily (the negative bit) goes to
    # the general path, which gives the verdict. The conjugate bit needs no test: the conjugate
    # of a real number is itself. A host tensor needs no test of its own: its pointer is not
    # device memory. A sparse one raises on stride() (the caller then takes the general path
    # too).
    if x.dtype is not _TORCH_FLOAT32 or x.requires_grad or x.is_neg():
        return None
    ptr, shape, strides = x.data_ptr(), x.shape, x.stride()
    entry = _REMEMBERED.get(id(x))
    if entry is not None and entry[1] == ptr and entry[4] == shape and entry[5] == strides \
            and entry[0]() is x:
        return entry[3]
    return _remember(x, ptr, shape, strides, 4, entry, False)


def _span_none(x: Any) -> None:
    return None


_SPANS: dict[type, Callable[[Any], tuple | None]] = {}


def _span_for(kind: type) -> Callable[[Any], tuple | None]:
    global _NUMPY_FLOAT32, _TORCH_FLOAT32
    module, name = kind.__module__, kind.__name__
    span = _span_none
    if module == "numba.cuda.cudadrv.devicearray" and name == "DeviceNDArray" and not SIMULATOR:
        span = _span_numba
    elif module == "cupy" and name == "ndarray":
        span = _span_cupy
    elif module == "torch" and name == "Tensor":
        span = _span_torch
    if span is _span_torch:
        _TORCH_FLOAT32 = sys.modules["torch"].float32
    elif span is not _span_none and _NUMPY_FLOAT32 is None:
        import numpy

        _NUMPY_FLOAT32 = numpy.dtype(numpy.float32)
    _SPANS[kind] = span
    return span


def _read_known(x: Any) -> Operand | None:
    """The Operand of a plain array of a known type (see :func:`read_device_span`), else None."""
    span = read_device_span(x)
    if span is None or span[2] is None:
        return None  # the general path reads it, or words the refusal
    ptr, extent, device, shape, strides, _ = span
    return Operand(ptr, extent, shape, strides, device, False, x)


# What is remembered per array object. The device of an array's memory: a pointer query
# costs about 2 us of driver time on the H200's host (perf/launch_paths.py), three per call,
# and an array object keeps its memory alive and on one device, so the answer holds while the
# object lives and its pointer is unchanged (a PyTorch tensor can be given new storage in
# place: a new pointer is a new question). The whole answer is kept with the raw facts it was
# made from, and holds while the object reads the same facts again (CuPy and PyTorch arrays
# can be reshaped in place); a Numba DeviceNDArray's pointer, shape, strides and dtype are
# fixed at construction, so its answer is returned without reading it again. Entries leave
# with their object (weak reference);
# ``key -> (ref, ptr, device, answer, shape, strides, fixed)``.
_REMEMBERED: dict[int, tuple] = {}


def _forget(key: int, ref: Any) -> None:
    entry = _REMEMBERED.get(key)
    if entry is not None and entry[0] is ref:
        del _REMEMBERED[key]


def forget_devices() -> None:
    """Drop every remembered array device (tests that fake the pointer query use this)."""
    _REMEMBERED.clear()


def _remember(x: Any, ptr: int, shape: tuple, strides: tuple, unit: int, entry: tuple | None,
              fixed: bool) -> tuple | None:
    """The answer for raw facts not remembered (``entry``: what was remembered for ``x``, if
    anything), remembered for next time."""
    layout = _contiguous(shape, strides, unit)
    if layout is None or ptr & 3 or not ptr:
        return None
    if entry is not None and entry[1] == ptr and entry[0]() is x:
        device = entry[2]
    else:
        device = pointer_device(ptr)
    answer = (ptr, layout[0], device, shape, layout[1], layout[2])
    key = id(x)
    try:
        ref = weakref.ref(x, lambda r, key=key: _forget(key, r))
    except TypeError:  # a type without weak references is asked every time
        return answer
    _REMEMBERED[key] = (ref, ptr, device, answer, shape, strides, fixed)
    return answer


def read_device_span(x: Any) -> tuple | None:
    """``(ptr, extent, device, shape, element strides, transposed)`` of a plain float32 array
    of a known type (1-D or 2-D, contiguous in either order), else None. ``transposed`` is None
    for a 1-D array and for a matrix what :func:`matrix_view` answers: whether the buffer read
    column-major (leading dimension: its rows) is the matrix's transpose.

    None means "ask :func:`read_operand`", never "invalid": the caller falls back to the
    general path for every array this does not recognise.
    """
    span = _SPANS.get(type(x))
    if span is None:
        try:
            span = _span_for(type(x))
        except Exception:  # a type that cannot even be named is read by the general path
            return None
    try:
        return span(x)
    except Exception:  # an array its own library cannot describe this way: the general path
        return None


def matrix_view(shape: tuple, strides: tuple | None, name: str) -> tuple[int, int, bool] | str:
    """How a 2-D array reads as a column-major buffer: ``(rows, ld, transposed)``, from its shape
    and element strides (None for C-contiguous). ``transposed`` is False when the buffer read
    column-major with ``ld`` is the array and True when it is the array's transpose (a C-ordered
    array). A sentence when the array is not 2-D or has no unit stride, which no leading
    dimension describes. Never raises: a shape or strides it cannot read is a sentence too."""
    try:
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
    except Exception as exc:  # a shape or strides that are not integers: say so, never raise
        return f"{name} with shape {_show(shape)} and strides {_show(strides)} is not a matrix: {_exception(exc)}"
