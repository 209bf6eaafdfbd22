"""The CUDA driver calls sgblas makes, bound directly to ``libcuda`` with ctypes.

Going through ``libcuda`` rather than Numba or ``cuda.bindings`` keeps ``import sgblas`` free of
both (``import numba.cuda`` alone costs 0.5-0.8 s) and keeps the per-call path short:
``cuda.bindings`` wraps every argument and result in Python objects (on the H200's host one
``cuPointerGetAttributes`` took 2.8 us through it and a launch 9.4 us with a packed buffer,
16 us through ``cuda.core.launch``; ``perf/launch_paths.py``). Kernels are loaded from cubins
as context-independent ``CUlibrary``/``CUkernel`` handles (CUDA 12.0+), so loading them needs
no context. Thread safety: output and parameter buffers are per thread.

Importing this module loads no library and calls nothing: ``libcuda`` is opened at the first
call that needs it, so that ``import sgblas`` initialises no CUDA (a process may fork after it,
or never use a GPU at all).

On a two-GPU H200 machine the pointer query through ``cuda.bindings`` gave device 0 for memory
allocated on device 1 (the cause was not isolated); this one gives device 1
(tests/test_multigpu.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import struct
import threading
from typing import Any, Callable, Iterator

__all__ = [
    "DriverError",
    "available",
    "device_count",
    "device_cc",
    "device_name",
    "primary_context_retain",
    "current_context",
    "context_device",
    "stream_context",
    "stream_capturing",
    "event_create",
    "event_record",
    "stream_wait_event",
    "event_destroy",
    "push_context",
    "made_current",
    "pop_context",
    "pointer_attributes",
    "library_load",
    "library_kernel",
    "kernel_attribute",
    "kernel_function",
    "function_load",
    "device_attribute",
    "mem_alloc",
    "mem_free",
    "launch",
    "launch_programmatic",
    "driver_version",
    "as_pointer",
    "ParamLayout",
]

# Values from cuda.h (stable ABI).
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_POINTER_ATTRIBUTE_BUFFER_ID = 7
CU_MEMORYTYPE_DEVICE = 2
CU_MEMORYTYPE_UNIFIED = 4
CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36
CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37
CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82
CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR = 106
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_FUNC_ATTRIBUTE_NUM_REGS = 4
CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3
CUDA_ERROR_NO_BINARY_FOR_GPU = 209
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


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
_init_code: int | None = None
_init_lock = threading.Lock()

_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_INT_P = ctypes.POINTER(ctypes.c_int)


def _bind(lib) -> None:
    # ``_v2`` names are what cuda.h maps these calls to; the unsuffixed ones are older ABIs.
    signatures = {
        "cuInit": [ctypes.c_uint],
        "cuDeviceGetCount": [_INT_P],
        "cuDeviceGet": [_INT_P, ctypes.c_int],
        "cuDeviceGetAttribute": [_INT_P, ctypes.c_int, ctypes.c_int],
        "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
        "cuDevicePrimaryCtxRetain": [_PP, ctypes.c_int],
        "cuStreamIsCapturing": [_P, _INT_P],
        "cuCtxGetCurrent": [_PP],
        "cuCtxGetDevice": [_INT_P],
        "cuCtxPushCurrent_v2": [_P],
        "cuCtxPopCurrent_v2": [_PP],
        "cuStreamGetCtx": [_P, _PP],
        "cuPointerGetAttributes": [ctypes.c_uint, _INT_P, _PP, ctypes.c_uint64],
        "cuPointerGetAttribute": [ctypes.POINTER(ctypes.c_uint64), ctypes.c_int, ctypes.c_uint64],
        "cuLibraryLoadData": [_PP, ctypes.c_char_p, _P, _P, ctypes.c_uint, _P, _P, ctypes.c_uint],
        "cuLibraryGetKernel": [_PP, _P, ctypes.c_char_p],
        "cuKernelGetAttribute": [_INT_P, ctypes.c_int, _P, ctypes.c_int],
        "cuKernelGetFunction": [_PP, _P],
        "cuMemAlloc_v2": [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t],
        "cuMemFree_v2": [ctypes.c_uint64],
        "cuMemsetD32Async": [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, _P],
        "cuEventCreate": [_PP, ctypes.c_uint],
        "cuEventRecord": [_P, _P],
        "cuStreamWaitEvent": [_P, _P, ctypes.c_uint],
        "cuEventDestroy_v2": [_P],
        "cuLaunchKernel": [_P] + [ctypes.c_uint] * 7 + [_P] * 3,
        "cuDriverGetVersion": [_INT_P],
        "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        # The driver's JIT linker, used only by perf/linkers.py to compare linkers.
        "cuLinkCreate_v2": [ctypes.c_uint, _P, _P, _PP],
        "cuLinkAddData_v2": [_P, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                             ctypes.c_uint, _P, _P],
        "cuLinkComplete": [_P, _PP, ctypes.POINTER(ctypes.c_size_t)],
        "cuLinkDestroy": [_P],
    }
    for name, argtypes in signatures.items():
        function = getattr(lib, name)
        function.argtypes = argtypes
        function.restype = ctypes.c_int


_query = None  # the same library as a PyDLL: the GIL stays held through short queries
_raw_launch = None  # cuLaunchKernel with no argtypes: arguments arrive as ready ctypes objects
_raw_launch_ex = None  # cuLaunchKernelEx, likewise (None until bound; absent before CUDA 12.0)


def _lib():
    global _libcuda, _query, _raw_launch, _raw_launch_ex
    if _libcuda is None:
        lib = ctypes.CDLL("libcuda.so.1")
        _bind(lib)
        # Per call, ctypes' argtypes conversions cost more than the calls themselves on the
        # H200's host (perf/launch_paths.py: a launch 11.3 us with argtypes, 7.6 us with
        # arguments built beforehand; cuCtxGetCurrent 1.6 us through CDLL, 0.75 us through
        # PyDLL, which skips releasing and retaking the GIL). The hot calls therefore go
        # through separate handles: queries through a PyDLL (they never block), the launch
        # (which may wait for room in a full launch queue) through a CDLL, releasing the GIL.
        query = ctypes.PyDLL("libcuda.so.1")
        _bind(query)
        launcher = ctypes.CDLL("libcuda.so.1")
        raw = launcher.cuLaunchKernel
        raw.restype = ctypes.c_int
        raw_ex = getattr(launcher, "cuLaunchKernelEx", None)
        if raw_ex is not None:
            raw_ex.restype = ctypes.c_int
        _query, _raw_launch, _raw_launch_ex = query, raw, raw_ex
        _libcuda = lib
    return _libcuda


def _check(call: str, code: int) -> None:
    if code != 0:
        raise DriverError(call, code)


def available() -> bool:
    """Whether the driver loads and ``cuInit`` succeeds (False without a driver or a GPU)."""
    global _init_code
    if _init_code is None:
        with _init_lock:
            if _init_code is None:
                try:
                    _init_code = _lib().cuInit(0)
                except (OSError, AttributeError):  # no libcuda, or one too old for these calls
                    _init_code = -1
    return _init_code == 0


def device_count() -> int:
    """Number of devices the driver exposes (0 when it is unavailable)."""
    if not available():
        return 0
    count = ctypes.c_int()
    if _lib().cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def _device(ordinal: int) -> int:
    dev = ctypes.c_int()
    _check("cuDeviceGet", _lib().cuDeviceGet(ctypes.byref(dev), ordinal))
    return dev.value


def device_cc(ordinal: int) -> tuple[int, int]:
    """(major, minor) compute capability of device ``ordinal``; needs no context."""
    dev = _device(ordinal)
    out = []
    for attribute in (CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR):
        value = ctypes.c_int()
        _check("cuDeviceGetAttribute", _lib().cuDeviceGetAttribute(ctypes.byref(value), attribute, dev))
        out.append(value.value)
    return out[0], out[1]


def device_attribute(ordinal: int, attribute: int) -> int:
    """A ``CUdevice_attribute`` of device ``ordinal``; needs no context."""
    value = ctypes.c_int()
    _check("cuDeviceGetAttribute", _lib().cuDeviceGetAttribute(ctypes.byref(value), attribute, _device(ordinal)))
    return value.value


def device_name(ordinal: int) -> str:
    buf = ctypes.create_string_buffer(256)
    _check("cuDeviceGetName", _lib().cuDeviceGetName(buf, 256, _device(ordinal)))
    return buf.value.decode(errors="replace")


def primary_context_retain(ordinal: int) -> int:
    """Retain device ``ordinal``'s primary context (the one Numba, CuPy and PyTorch use)."""
    ctx = ctypes.c_void_p()
    _check("cuDevicePrimaryCtxRetain", _lib().cuDevicePrimaryCtxRetain(ctypes.byref(ctx), _device(ordinal)))
    return ctx.value or 0


_tls = threading.local()


def current_context() -> int:
    """The calling thread's current ``CUcontext`` (0 when none)."""
    try:
        out, ref = _tls.ctx
    except AttributeError:
        _lib()
        out = ctypes.c_void_p()
        ref = ctypes.byref(out)
        _tls.ctx = (out, ref)
    if _query.cuCtxGetCurrent(ref) != 0:
        return 0
    return out.value or 0


def context_device() -> int | None:
    """The ordinal of the current context's device, None when the thread has no context."""
    if not available() or current_context() == 0:
        return None
    dev = ctypes.c_int()
    if _lib().cuCtxGetDevice(ctypes.byref(dev)) != 0:
        return None
    # A CUdevice is its ordinal in every driver so far; map it back properly all the same.
    for ordinal in range(device_count()):
        if _device(ordinal) == dev.value:
            return ordinal
    return None


def stream_context(stream: int) -> int:
    """The context ``stream`` (a raw ``CUstream`` other than the default-stream handles)
    belongs to."""
    ctx = ctypes.c_void_p()
    _check("cuStreamGetCtx", _lib().cuStreamGetCtx(stream, ctypes.byref(ctx)))
    return ctx.value or 0


def stream_capturing(stream: int) -> bool:
    """Whether ``stream`` (a raw ``CUstream``, 0 for the legacy default stream) is being
    captured into a CUDA graph."""
    status = ctypes.c_int()
    _check("cuStreamIsCapturing", _lib().cuStreamIsCapturing(stream, ctypes.byref(status)))
    return status.value != 0


#: cuEventCreate's CU_EVENT_DISABLE_TIMING: an event that only orders work records faster.
_EVENT_DISABLE_TIMING = 0x2


def event_create() -> int:
    """A ``CUevent`` (no timing) in the current context."""
    ev = ctypes.c_void_p()
    _check("cuEventCreate", _lib().cuEventCreate(ctypes.byref(ev), _EVENT_DISABLE_TIMING))
    return ev.value or 0


def event_record(event: int, stream: int) -> None:
    """``cuEventRecord``: ``event`` completes when the work enqueued on ``stream`` so far does."""
    _check("cuEventRecord", _lib().cuEventRecord(event, stream))


def stream_wait_event(stream: int, event: int) -> None:
    """``cuStreamWaitEvent``: work enqueued on ``stream`` from now on waits for ``event``."""
    _check("cuStreamWaitEvent", _lib().cuStreamWaitEvent(stream, event, 0))


def event_destroy(event: int) -> None:
    _check("cuEventDestroy", _lib().cuEventDestroy_v2(event))


def push_context(context: int) -> None:
    """Make ``context`` current for the calling thread (undo with :func:`pop_context`)."""
    _check("cuCtxPushCurrent", _lib().cuCtxPushCurrent_v2(context))


@contextlib.contextmanager
def made_current(context: int) -> Iterator[None]:
    """Run the block with ``context`` current, pushing it only when another is (set-up paths;
    the launch path does the same inline, where a generator's cost would show)."""
    pushed = current_context() != context
    if pushed:
        push_context(context)
    try:
        yield
    finally:
        if pushed:
            pop_context()


def pop_context() -> None:
    """Restore the context that was current before :func:`push_context`."""
    popped = ctypes.c_void_p()
    _check("cuCtxPopCurrent", _lib().cuCtxPopCurrent_v2(ctypes.byref(popped)))


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
    _lib()
    if _query.cuPointerGetAttributes(2, _ATTRIBUTES, data, ptr) != 0:
        return None
    return mem_type.value, ordinal.value


def pointer_buffer_id(ptr: int) -> int | None:
    """The id of the allocation holding ``ptr``, None when no live allocation holds it.

    The driver never reuses an id in a process, so a pointer kept across a context reset (which
    frees every allocation; another may later take the same address) shows a different id or
    none: how a pointer remembered for later use is checked before that use.
    """
    value = ctypes.c_uint64()
    if _lib().cuPointerGetAttribute(ctypes.byref(value), CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr) != 0:
        return None
    return value.value


def library_load(image: bytes) -> int:
    """Load a cubin as a context-independent ``CUlibrary``; returns its handle.

    The image is copied by the driver; modules are created in each context when first used.
    """
    if not available():
        raise DriverError("cuInit", _init_code if _init_code is not None else -1)
    lib = ctypes.c_void_p()
    _check("cuLibraryLoadData", _lib().cuLibraryLoadData(ctypes.byref(lib), image, None, None, 0, None, None, 0))
    return lib.value or 0


def library_kernel(library: int, name: str) -> int:
    """The ``CUkernel`` named ``name`` (its mangled entry name) in ``library``."""
    kernel = ctypes.c_void_p()
    _check("cuLibraryGetKernel", _lib().cuLibraryGetKernel(ctypes.byref(kernel), library, name.encode()))
    return kernel.value or 0


def kernel_function(kernel: int) -> int:
    """The ``CUfunction`` of ``kernel`` in the calling thread's current context, which loads the
    kernel's module into that context if lazy loading has not done so yet (see
    :func:`sgblas.runtime.loader.make_resident`)."""
    function = ctypes.c_void_p()
    _check("cuKernelGetFunction", _lib().cuKernelGetFunction(ctypes.byref(function), kernel))
    return function.value or 0


def function_load(function: int) -> None:
    """``cuFuncLoad``: make sure ``function`` is loaded in its context (CUDA 12.4+ drivers;
    on older ones :func:`kernel_function` alone loads the module)."""
    lib = _lib()
    load = getattr(lib, "cuFuncLoad", None)
    if load is None:
        return
    load.argtypes = [_P]
    load.restype = ctypes.c_int
    _check("cuFuncLoad", load(function))


def kernel_attribute(kernel: int, attribute: int, ordinal: int) -> int:
    """A ``CUfunction_attribute`` of ``kernel`` as loaded for device ``ordinal``."""
    value = ctypes.c_int()
    _check("cuKernelGetAttribute",
           _lib().cuKernelGetAttribute(ctypes.byref(value), attribute, kernel, _device(ordinal)))
    return value.value


def mem_alloc(nbytes: int) -> int:
    """``cuMemAlloc`` of ``nbytes`` in the current context; returns the device pointer."""
    ptr = ctypes.c_uint64()
    _check("cuMemAlloc", _lib().cuMemAlloc_v2(ctypes.byref(ptr), nbytes))
    return ptr.value


def mem_free(ptr: int) -> None:
    """``cuMemFree`` (it waits for the device's work to finish, as ``cudaFree`` does)."""
    _check("cuMemFree", _lib().cuMemFree_v2(ptr))


def memset_d32_async(ptr: int, value: int, count: int, stream: int) -> None:
    """``cuMemsetD32Async``: ``count`` 32-bit words at ``ptr`` set to ``value``, in order on the
    raw ``stream`` (a memset node when the stream is being captured)."""
    _check("cuMemsetD32Async", _lib().cuMemsetD32Async(ptr, value, count, stream))


_layout_serial = itertools.count()


class ParamLayout:
    """A kernel's parameters packed at fixed offsets of one buffer, with the ``void**`` array
    ``cuLaunchKernel`` reads them through; one buffer per thread, reused by every launch."""

    def __init__(self, fmt: str, offsets: tuple[int, ...]) -> None:
        self._struct = struct.Struct(fmt)
        self._offsets = offsets
        # A serial, not id(self): a layout collected and replaced by one at the same address
        # would otherwise find the old one's thread-local buffers, of another size.
        self._attribute = f"layout_{next(_layout_serial)}"
        self._remembered = 1

    def buffers(self):
        """This thread's (packing buffer, its void* array, that array's address as a c_void_p,
        what a packer last packed there: a list it keeps, empty at first)."""
        bufs = getattr(_tls, self._attribute, None)
        if bufs is None:
            storage = (ctypes.c_char * self._struct.size)()
            base = ctypes.addressof(storage)
            pointers = (ctypes.c_void_p * len(self._offsets))(*(base + o for o in self._offsets))
            bufs = (storage, pointers, ctypes.c_void_p(ctypes.addressof(pointers)), [None] * self._remembered)
            setattr(_tls, self._attribute, bufs)
        return bufs

    def packer_parts(self, remembered: int = 1) -> tuple[Any, Any, str, Callable[[], tuple]]:
        """What a generated packer (:class:`sgblas.runtime.abi.Abi`) packs with, in one call per
        launch: ``(struct's pack_into, the thread-local holder, this layout's attribute in it,
        buffers)``; the packer writes into ``buffers()[0]``, launches with ``buffers()[2]`` and
        keeps ``remembered`` values of what it packed in ``buffers()[3]``."""
        self._remembered = remembered
        return self._struct.pack_into, _tls, self._attribute, self.buffers


def as_pointer(value: int) -> ctypes.c_void_p:
    """A handle (CUkernel, CUstream) as the ready pointer argument :func:`launch` takes."""
    return ctypes.c_void_p(value or None)


def launch(function: ctypes.c_void_p, grid: tuple, block: tuple, stream: ctypes.c_void_p,
           params: ctypes.c_void_p) -> None:
    """``cuLaunchKernel`` (raises :class:`DriverError` on failure).

    ``function``, ``stream`` and ``params`` are ``ctypes.c_void_p`` (see :func:`as_pointer`,
    :attr:`sgblas.runtime.abi.Abi.pack`); ``grid`` and ``block`` ints below 2**31. ``function`` is a
    ``CUkernel`` (accepted since CUDA 12.0): it runs in the context of ``stream``, or in the
    calling thread's current context for a default stream.
    """
    if _raw_launch is None:
        _lib()
    code = _raw_launch(function, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, stream, params, None)
    if code != 0:
        raise DriverError("cuLaunchKernel", code)


def driver_version() -> int:
    """``cuDriverGetVersion``: the CUDA version the driver supports, 1000 * major + 10 * minor."""
    value = ctypes.c_int()
    _check("cuDriverGetVersion", _lib().cuDriverGetVersion(ctypes.byref(value)))
    return value.value


class _LaunchAttribute(ctypes.Structure):
    # CUlaunchAttribute: the id, padded to 8 bytes, then a 64-byte union of values.
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int),
                ("rest", ctypes.c_char * 60)]


class _LaunchConfig(ctypes.Structure):
    # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


def _programmatic_config() -> tuple[_LaunchConfig, ctypes.c_void_p]:
    """This thread's launch configuration asking for programmatic stream serialization, and
    its address as a ready argument."""
    bufs = getattr(_tls, "launch_ex", None)
    if bufs is None:
        attribute = _LaunchAttribute(id=CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
        config = _LaunchConfig(attrs=ctypes.pointer(attribute), numAttrs=1)
        bufs = _tls.launch_ex = (config, ctypes.c_void_p(ctypes.addressof(config)), attribute)
    return bufs[0], bufs[1]


def launch_programmatic(function: ctypes.c_void_p, grid: tuple, block: tuple, stream: ctypes.c_void_p,
                        params: ctypes.c_void_p) -> None:
    """:func:`launch` through ``cuLaunchKernelEx`` with programmatic stream serialization: the
    kernel may begin while the one ahead of it in ``stream`` is still running (its CTAs are
    placed once every CTA of that one has exited or signalled), so it must execute
    ``griddepcontrol.wait`` before it touches what that kernel writes. sm_90+, CUDA 12.3+
    drivers (which also capture it into graphs as a programmatic edge)."""
    if _raw_launch is None:
        _lib()
    if _raw_launch_ex is None:
        raise DriverError("cuLaunchKernelEx", 500)  # CUDA_ERROR_NOT_FOUND: a driver before CUDA 12.0
    config, address = _programmatic_config()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.hStream = stream
    code = _raw_launch_ex(address, function, params, None)
    if code != 0:
        raise DriverError("cuLaunchKernelEx", code)
