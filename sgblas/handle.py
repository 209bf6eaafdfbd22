"""The handle: a device, a stream, a math mode and a workspace that every call on it uses; and
:func:`initialize`, the set-up a handle does, done ahead of time for a device.

Nothing here touches CUDA when it is imported: the driver is first called by a handle's
creation, by :func:`initialize`, or by a call's reading of its operands.
"""

from __future__ import annotations

import threading
from typing import Any

from sgblas.dispatch.model import calibration_for
from sgblas.dispatch.plan import WorkspaceOrder, memo_for
from sgblas.enums import MathMode, Status
from sgblas.errors import InvalidValueError, SgblasError
from sgblas.kernels.spec import REGISTRY
from sgblas.runtime import driver
from sgblas.runtime.device import (BACKEND, compute_capability, current_device, device_count, device_properties,
                                   primary_context_handle)
from sgblas.runtime.driver import CUDA_ERROR_NO_BINARY_FOR_GPU, DriverError, stream_context

__all__ = ["Handle", "initialize", "stream_handle", "DEFAULT_WORKSPACE_BYTES"]

#: The workspace a handle allocates unless told otherwise (as cuBLAS recommends for Hopper).
DEFAULT_WORKSPACE_BYTES: int = 32 * 1024 * 1024

#: Per device, ``(pointer, allocation id)`` of a workspace of :data:`DEFAULT_WORKSPACE_BYTES`
#: that :func:`initialize` allocated in the device's primary context (:func:`reserve_workspace`).
#: The first handle of that device that asks for the default size takes it over, so that
#: gemm's first call, which creates gemm's handle, does not pay for ``cuMemAlloc``
#: (docs/api.md). The id guards against a reset of the context in between (Numba's
#: ``cuda.close()`` resets it), which frees the allocation behind sgblas's back.
_RESERVED: dict[int, tuple[int, int]] = {}
#: The devices a workspace was ever reserved for: a second :func:`initialize` must not reserve
#: another one after a handle took the first, since nothing might ever take it.
_EVER_RESERVED: set[int] = set()
_reserve_lock = threading.Lock()


def reserve_workspace(device: int) -> None:
    """Allocate :data:`_RESERVED`'s workspace for ``device`` (a set-up step; once per device and
    process, however often it is asked)."""
    if BACKEND.simulated:
        return
    with _reserve_lock:
        if device in _EVER_RESERVED:
            return
        with driver.made_current(primary_context_handle(device)):
            ptr = driver.mem_alloc(DEFAULT_WORKSPACE_BYTES)
        _EVER_RESERVED.add(device)
        buffer_id = driver.pointer_buffer_id(ptr)
        if buffer_id is None:  # cannot be checked later, so not kept
            with driver.made_current(primary_context_handle(device)):
                driver.mem_free(ptr)
            return
        _RESERVED[device] = (ptr, buffer_id)


def _take_reserved(device: int) -> int:
    """The reserved workspace of ``device`` when it is still the allocation reserved (0 otherwise;
    either way, nobody else gets it)."""
    reserved = _RESERVED.pop(device, None)  # one handle gets it, whichever thread asks
    if reserved is None or driver.pointer_buffer_id(reserved[0]) != reserved[1]:
        return 0
    return reserved[0]


def _device_ordinal(device: Any) -> int:
    """``device`` checked (None: the calling thread's current device), or the error a handle
    raises for it."""
    count = device_count()
    if count == 0:
        raise SgblasError(Status.NOT_INITIALIZED, "no CUDA device is present, so sgblas cannot be set up")
    if device is None:
        device = current_device()
    if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < count:
        raise InvalidValueError(f"device={device!r} is not a device ordinal in [0, {count})")
    return device


def _resident_kernels(device: int) -> dict:
    """Every kernel variant of ``device``, loaded (compiled first when the cache lacks it) and
    resident in its primary context, which is retained (and so created when nothing has yet).
    The one place sgblas may wait for a context's running work: putting code into a context
    waits for its streams, and doing it here is what keeps every call from doing it."""
    cc = compute_capability(device)
    try:
        # The loader (and the compiler's machinery behind it) is set-up code: not imported
        # with the package, whose import stays cheap.
        from sgblas.runtime import loader

        kernels = loader.loaded_kernels(device, REGISTRY)
        loader.make_resident(device)
        # The cost model's rates for the device (its calibration read, the defaults and any
        # rates carried over from a sibling device's entry worked out) are set-up too: a first
        # call only looks them up.
        calibration_for(cc, device_properties(device), warn=False)
    except Exception as exc:
        # Numba's compiler cannot target the device (numba.cuda.cudadrv.error), or the
        # driver finds no code for it in a cubin.
        if type(exc).__name__ == "CCSupportError" or getattr(exc, "code", None) == CUDA_ERROR_NO_BINARY_FOR_GPU:
            raise SgblasError(Status.ARCH_MISMATCH,
                              f"device {device} has compute capability {cc[0]}.{cc[1]}, "
                              f"which sgblas's kernels cannot be built or loaded for: {exc}") from exc
        raise SgblasError(Status.INTERNAL_ERROR,
                          f"loading sgblas's kernels for device {device} failed: {exc}") from exc
    return kernels


def initialize(device: int | None = None) -> None:
    """Set sgblas up on ``device`` now (default: the calling thread's current device, the device
    of its current context, else device 0), so that no later call waits, gemm's first included.

    ``import sgblas`` initialises no CUDA; without this, a :class:`Handle`'s creation or gemm's
    first call on a device does this set-up. It retains the device's primary context (the one
    Numba, CuPy and PyTorch use; created if nothing has created it yet), loads every kernel
    variant for the device's compute capability from sgblas's kernel cache (compiling what the
    cache lacks: ``python -m sgblas.warmup`` is the install step that avoids that), makes them
    resident in the context, and allocates a workspace of the default size, which the device's
    first handle asking for that size (typically gemm's first) takes over; once per device and
    process. Making the kernels resident waits once for the work already running in that
    context. A second call for the same device does nothing.

    Raises :class:`SgblasError` with ``Status.NOT_INITIALIZED`` when no CUDA device is present,
    ``Status.ARCH_MISMATCH`` when the kernels cannot be built or loaded for the device,
    ``Status.INTERNAL_ERROR`` when loading them fails otherwise and ``Status.ALLOC_FAILED`` when
    the workspace cannot be allocated; :class:`InvalidValueError` for a bad device ordinal.
    """
    device = _device_ordinal(device)
    _resident_kernels(device)
    try:
        reserve_workspace(device)
    except DriverError as exc:
        raise SgblasError(Status.ALLOC_FAILED, f"allocating gemm's default workspace of {DEFAULT_WORKSPACE_BYTES} "
                                               f"bytes on device {device} failed: {exc}") from exc


#: The legacy (0 and 1) and per-thread (2) default-stream handles: they run in whichever
#: context is current, so a call on them makes the handle's context current first.
_DEFAULT_STREAMS = (0, 1, 2)


def stream_handle(stream: Any) -> int:
    """The raw ``CUstream`` of ``stream`` as an int.

    Accepts None (the legacy default stream, 0), a raw handle (int), any object implementing
    the ``__cuda_stream__`` protocol (Numba and cuda.core streams), a PyTorch stream
    (``.cuda_stream``) or a CuPy stream (``.ptr``). Raises :class:`InvalidValueError` otherwise.
    """
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise InvalidValueError(f"stream={stream!r} is a bool, not a CUDA stream")
    if isinstance(stream, int):
        if stream < 0:
            raise InvalidValueError(f"stream={stream} is negative; a raw CUstream handle is >= 0")
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        _version, handle = protocol() if callable(protocol) else protocol
        return int(handle)
    for attribute in ("cuda_stream", "ptr"):  # PyTorch, then CuPy
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int):
            return handle
    if BACKEND.simulated and type(stream).__module__.startswith("numba.cuda.simulator"):
        return 0  # the simulator's streams run synchronously and have no handle
    raise InvalidValueError(f"stream of type {type(stream).__name__} is not a CUDA stream sgblas recognises")


class Handle:
    """A binding of sgblas calls to one device, one stream, one math mode and one workspace.

    ``Handle(device=None, stream=None, math_mode=MathMode.FP32, workspace_bytes=None)``:
    ``device`` defaults to the calling thread's current device; ``stream`` to the legacy
    default stream; ``workspace_bytes`` to :data:`DEFAULT_WORKSPACE_BYTES`.

    Creating a handle is a set-up step, like ``cublasCreate``: it retains the device's primary
    context (creating it if nothing has yet), loads every kernel variant for the device from
    sgblas's kernel cache (compiling what the cache lacks; see :mod:`sgblas.warmup`), makes them
    resident in the context, and allocates the workspace. The first handle of a device (unless
    :func:`initialize` or gemm set the device up before) may therefore wait once for the
    context's running work; calls on it never wait and never compile. Raises :class:`SgblasError` with
    ``Status.NOT_INITIALIZED`` when no CUDA device is present, ``ARCH_MISMATCH`` or
    ``INTERNAL_ERROR`` when the kernels cannot be loaded, ``ALLOC_FAILED`` when the workspace
    cannot be allocated, and :class:`InvalidValueError` for a bad device ordinal, stream or
    workspace size.

    A handle may be shared between threads: a call reads the handle's stream once, and
    :meth:`set_stream` replaces it atomically; calls issued concurrently on one stream are
    ordered by that stream, and calls that use the workspace are ordered across streams too
    (:func:`sgblas.dispatch.plan.execute`). Closing a handle while another thread calls on it is the caller's
    race to avoid (the call returns NOT_INITIALIZED or completes).
    """

    __slots__ = ("device", "math_mode", "cc", "properties", "_stream", "_context", "_kernels", "_plans",
                 "_workspace", "_closed", "_ws_order", "__weakref__")

    def __init__(self, device: int | None = None, stream: Any = None,
                 math_mode: MathMode = MathMode.FP32, workspace_bytes: int | None = None) -> None:
        self._closed = True
        self._workspace = (0, 0, None)
        self._ws_order = WorkspaceOrder()
        device = _device_ordinal(device)
        if not isinstance(math_mode, MathMode):
            raise InvalidValueError(f"math_mode={math_mode!r} is not a sgblas.MathMode")
        if workspace_bytes is not None and (isinstance(workspace_bytes, bool) or not isinstance(workspace_bytes, int)
                                            or workspace_bytes < 0):
            raise InvalidValueError(f"workspace_bytes={workspace_bytes!r} is not a non-negative int")
        self.device = device
        self.math_mode = math_mode
        self.cc = compute_capability(device)
        #: SM count, per-SM limits and clocks: what the dispatcher reads.
        self.properties = device_properties(device)
        self._context = primary_context_handle(device)
        self._plans: dict = {}
        self._kernels = _resident_kernels(device)
        self._stream = None
        self.set_stream(stream)
        self.set_workspace(DEFAULT_WORKSPACE_BYTES if workspace_bytes is None else workspace_bytes)
        self._closed = False

    def set_workspace(self, nbytes: int) -> None:
        """Give the handle a workspace of ``nbytes`` bytes (0 for none), as ``cublasSetWorkspace``
        does; the previous one is freed. Kernels that split a problem (split-K) keep their
        partial results there; a call whose best kernel would need more than the handle has
        takes a kernel that needs none (``sgblas.explain`` says so). Allocating and freeing are
        set-up steps: never done inside a call, so calls can be captured in CUDA graphs.
        Freeing waits for the device's work (``cuMemFree``)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise InvalidValueError(f"workspace_bytes={nbytes!r} is not a non-negative int")
        old_ptr, _, old_keep = self._workspace
        ptr, keep = 0, None
        if nbytes:
            if BACKEND.simulated:
                import numpy as np

                keep = np.empty(nbytes, np.uint8)  # host memory stands for device memory there
                ptr = keep.ctypes.data
            else:
                if nbytes == DEFAULT_WORKSPACE_BYTES and _RESERVED:
                    ptr = _take_reserved(self.device)
                try:
                    if not ptr:
                        with driver.made_current(self._context):
                            ptr = driver.mem_alloc(nbytes)
                except DriverError as exc:
                    raise SgblasError(Status.ALLOC_FAILED, f"allocating a workspace of {nbytes} bytes on "
                                                           f"device {self.device} failed: {exc}") from exc
        self._workspace = (ptr, nbytes, keep)
        self._plans = memo_for(self.device, self.math_mode, nbytes)  # which kernels fit depends on it
        if old_ptr and old_keep is None:
            self._free(old_ptr)

    def _free(self, ptr: int) -> None:
        with driver.made_current(self._context):
            driver.mem_free(ptr)

    @property
    def workspace_bytes(self) -> int:
        """Bytes of workspace the handle owns."""
        return self._workspace[1]

    @property
    def workspace_ptr(self) -> int:
        """The workspace's device address (0 when there is none)."""
        return self._workspace[0]

    def set_stream(self, stream: Any) -> None:
        """Bind later calls to ``stream`` (see :func:`stream_handle` for what is accepted)."""
        raw = stream_handle(stream)
        launch_stream = BACKEND.launch_stream(stream, raw)  # the ready argument of the launch
        if not BACKEND.simulated and raw not in _DEFAULT_STREAMS:
            # A kernel launched on a stream runs in the stream's context, so a stream of another
            # device (or context) would run sgblas's kernels away from the memory this handle
            # checks operands against.
            try:
                owner = stream_context(raw)
            except DriverError as exc:
                raise InvalidValueError(f"stream {raw:#x} is not a stream the driver knows: {exc}") from exc
            if owner != self._context:
                raise InvalidValueError(f"stream {raw:#x} belongs to another context than device "
                                        f"{self.device}'s primary context, which this handle uses")
        # One tuple assignment, so a concurrent call sees either the old or the new stream.
        self._stream = (stream, raw, launch_stream)

    @property
    def stream(self) -> Any:
        """The stream object given to the handle (None for the default stream)."""
        return self._stream[0]

    @property
    def stream_handle(self) -> int:
        """The raw ``CUstream`` handle calls are enqueued on."""
        return self._stream[1]

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called (calls then return ``NOT_INITIALIZED``)."""
        return self._closed

    def close(self) -> None:
        """Release the handle and free its workspace (which waits for the device's work, as
        ``cublasDestroy`` may); later calls on it return ``Status.NOT_INITIALIZED``."""
        if self._closed:
            return
        self._closed = True
        self._stream = (None, 0, None)
        ptr, _, keep = self._workspace
        self._workspace = (0, 0, None)
        if ptr and keep is None:
            self._free(ptr)
        event, self._ws_order.event = self._ws_order.event, 0
        if event:
            with driver.made_current(self._context):
                driver.event_destroy(event)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown, or a context already gone: nothing to free
            pass

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"stream={self._stream[1]:#x}"
        return f"Handle(device={self.device}, cc={self.cc}, math_mode={self.math_mode.name}, {state})"
