"""The three CUDA driver calls on sgemm's hot path, bound directly with ctypes.

``cuda.bindings`` wraps every argument and result in Python objects: on the H200's host one
``cuPointerGetAttributes`` through it took 2.8 us and a launch 9.4 us with a packed buffer
(16 us through ``cuda.core.launch``; ``perf/launch_paths.py``). Here the same calls go straight
into ``libcuda`` through ctypes with preallocated buffers. Everything else (contexts, streams,
modules) still goes through Numba and ``cuda.core``. Thread safety: the output and parameter
buffers are per thread.

On a two-GPU H200 machine, the earlier query through ``cuda.bindings``' ``cuPointerGetAttributes``
gave device 0 for memory allocated on device 1 (the cause was not isolated); this one gives
device 1 (tests/test_multigpu.py).
"""

from __future__ import annotations

import ctypes
import struct
import threading

__all__ = ["current_context", "pointer_attributes", "launch", "ParamLayout", "DriverError"]

# CUpointer_attribute and CUmemorytype values from cuda.h (stable ABI).
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_MEMORYTYPE_DEVICE = 2
CU_MEMORYTYPE_UNIFIED = 4


class DriverError(RuntimeError):
    """A driver call returned an error code (``.code`` holds the ``CUresult``)."""

    def __init__(self, call: str, code: int) -> None:
        name = ctypes.c_char_p()
        try:
            _lib().cuGetErrorName(code, ctypes.byref(name))
        except Exception:  # naming the error must not hide it
            pass
        label = name.value.decode() if name.value else "unknown error"
        super().__init__(f"{call} returned {code} ({label})")
        self.code = code


_libcuda = None


def _lib():
    global _libcuda
    if _libcuda is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuCtxGetCurrent.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.cuPointerGetAttributes.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_int),
                                               ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64]
        lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        _libcuda = lib
    return _libcuda


_tls = threading.local()


def current_context() -> int:
    """The calling thread's current ``CUcontext`` (0 when none)."""
    out = getattr(_tls, "ctx", None)
    if out is None:
        out = _tls.ctx = ctypes.c_void_p()
    if _lib().cuCtxGetCurrent(ctypes.byref(out)) != 0:
        return 0
    return out.value or 0


_ATTRIBUTES = (ctypes.c_int * 2)(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)


def pointer_attributes(ptr: int) -> tuple[int, int] | None:
    """``(memory type, device ordinal)`` of the allocation holding ``ptr``, None on error.

    Memory CUDA does not know (pageable host memory) has memory type 0.
    """
    bufs = getattr(_tls, "ptr_bufs", None)
    if bufs is None:
        mem_type, ordinal = ctypes.c_uint(), ctypes.c_int()
        data = (ctypes.c_void_p * 2)(ctypes.addressof(mem_type), ctypes.addressof(ordinal))
        bufs = _tls.ptr_bufs = (mem_type, ordinal, data)
    mem_type, ordinal, data = bufs
    mem_type.value, ordinal.value = 0, -1
    if _lib().cuPointerGetAttributes(2, _ATTRIBUTES, data, ptr) != 0:
        return None
    return mem_type.value, ordinal.value


class ParamLayout:
    """A kernel's parameters packed at fixed offsets of one buffer, with the ``void**`` array
    ``cuLaunchKernel`` reads them through; one buffer per thread, reused by every launch."""

    def __init__(self, fmt: str, offsets: tuple[int, ...]) -> None:
        self._struct = struct.Struct(fmt)
        self._offsets = offsets
        self._key = object()

    def buffers(self):
        """This thread's (packing buffer, address of its void* array)."""
        cache = getattr(_tls, "layouts", None)
        if cache is None:
            cache = _tls.layouts = {}
        bufs = cache.get(self._key)
        if bufs is None:
            storage = (ctypes.c_char * self._struct.size)()
            base = ctypes.addressof(storage)
            pointers = (ctypes.c_void_p * len(self._offsets))(*(base + o for o in self._offsets))
            bufs = cache[self._key] = (storage, pointers, ctypes.addressof(pointers))
        return bufs

    def pack(self, *values) -> int:
        """Pack ``values`` into this thread's buffer; returns the ``void**`` to launch with."""
        storage, _pointers, address = self.buffers()
        self._struct.pack_into(storage, 0, *values)
        return address


def launch(function: int, grid: tuple, block: tuple, stream: int, params: int) -> None:
    """``cuLaunchKernel`` on ``stream`` (raises :class:`DriverError` on failure).

    ``function`` may be a ``CUfunction`` or a ``CUkernel`` (accepted since CUDA 12.0; it then
    runs in the calling thread's current context).
    """
    code = _lib().cuLaunchKernel(function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                 0, stream, params, None)
    if code != 0:
        raise DriverError("cuLaunchKernel", code)
