"""The handle: a device, a stream and a math mode that every call on it uses."""

from __future__ import annotations

import threading
from typing import Any

from sgblas.runtime.driver import CUDA_ERROR_NO_BINARY_FOR_GPU, DriverError, as_pointer, stream_context
from sgblas.runtime.device import SIMULATOR, compute_capability, current_device, device_count, primary_context_handle
from sgblas.enums import MathMode, Status
from sgblas.errors import InvalidValueError, SgblasError

__all__ = ["Handle", "stream_handle"]

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
    if SIMULATOR and type(stream).__module__.startswith("numba.cuda.simulator"):
        return 0  # the simulator's streams run synchronously and have no handle
    raise InvalidValueError(f"stream of type {type(stream).__name__} is not a CUDA stream sgblas recognises")


class Handle:
    """A binding of sgblas calls to one device, one stream and one math mode.

    ``Handle(device=None, stream=None, math_mode=MathMode.FP32)``: ``device`` defaults to the
    calling thread's current device; ``stream`` to the legacy default stream. Creating a handle
    compiles or loads every kernel variant for its device (see :mod:`sgblas.warmup`), so no
    call ever compiles. Raises :class:`SgblasError` with ``Status.NOT_INITIALIZED`` when no CUDA
    device is present, and :class:`InvalidValueError` for a bad device ordinal or stream.

    A handle may be shared between threads: a call reads the handle's stream once, and
    :meth:`set_stream` replaces it atomically; calls issued concurrently on one stream are
    ordered by that stream. Closing a handle while another thread calls on it is the caller's
    race to avoid (the call returns NOT_INITIALIZED or completes).
    """

    __slots__ = ("device", "math_mode", "cc", "_stream", "_context", "_kernels",
                 "_closed", "__weakref__")

    def __init__(self, device: int | None = None, stream: Any = None,
                 math_mode: MathMode = MathMode.FP32) -> None:
        self._closed = True
        count = device_count()
        if count == 0:
            raise SgblasError(Status.NOT_INITIALIZED, "no CUDA device is present, so no handle can be created")
        if device is None:
            device = current_device()
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < count:
            raise InvalidValueError(f"device={device!r} is not a device ordinal in [0, {count})")
        if not isinstance(math_mode, MathMode):
            raise InvalidValueError(f"math_mode={math_mode!r} is not a sgblas.MathMode")
        from sgblas.dispatch.compiled import loaded_kernels

        self.device = device
        self.math_mode = math_mode
        self.cc = compute_capability(device)
        self._context = 0 if SIMULATOR else primary_context_handle(device)
        try:
            self._kernels = loaded_kernels(device)
        except Exception as exc:
            # Numba's compiler cannot target the device (numba.cuda.cudadrv.error), or the
            # driver finds no code for it in a cubin.
            if type(exc).__name__ == "CCSupportError" or getattr(exc, "code", None) == CUDA_ERROR_NO_BINARY_FOR_GPU:
                raise SgblasError(Status.ARCH_MISMATCH,
                                  f"device {device} has compute capability {self.cc[0]}.{self.cc[1]}, "
                                  f"which sgblas's kernels cannot be built or loaded for: {exc}") from exc
            raise SgblasError(Status.INTERNAL_ERROR,
                              f"loading sgblas's kernels for device {device} failed: {exc}") from exc
        self._stream = None
        self._closed = False
        self.set_stream(stream)

    def set_stream(self, stream: Any) -> None:
        """Bind later calls to ``stream`` (see :func:`stream_handle` for what is accepted)."""
        raw = stream_handle(stream)
        if SIMULATOR:  # the simulated launch takes the stream object itself
            launch_stream = stream if stream is not None and not isinstance(stream, int) else 0
        else:
            launch_stream = as_pointer(raw)  # the ready argument of driver.launch
            if raw not in _DEFAULT_STREAMS:
                # A kernel launched on a stream runs in the stream's context, so a stream of
                # another device (or context) would run sgblas's kernels away from the memory
                # this handle checks operands against.
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
        return self._closed

    def close(self) -> None:
        """Release the handle; later calls on it return ``Status.NOT_INITIALIZED``."""
        self._closed = True
        self._stream = (None, 0, None)

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"stream={self._stream[1]:#x}"
        return f"Handle(device={self.device}, cc={self.cc}, math_mode={self.math_mode.name}, {state})"
