"""The Pythonic form: ``gemm(a, b, c=None, ...)`` over 2-D device arrays of either memory order."""

from __future__ import annotations

from typing import Any, Callable

from sgblas import api as _api
from sgblas.api import _Failure, last_error_message, run_call, validate
from sgblas.enums import Status
from sgblas.errors import InvalidValueError, SgblasError, status_error
from sgblas.handle import Handle, stream_handle
from sgblas.operands import Operand, matrix_view, read_device_span, read_operand

__all__ = ["gemm", "default_handle", "current_stream"]

#: gemm's handles, one per (device, raw stream) it has run on, kept for the life of the process
#: (as PyTorch keeps a cuBLAS workspace per stream): creating one allocates its workspace.
_default_handles: dict[tuple[int, int], Handle] = {}
_LIBRARY: dict[type, str | None] = {}
_LIBRARY_NAMES = {"cupy": "a CuPy array", "torch": "a PyTorch tensor", "numba": "a Numba device array"}


def _library(x: Any) -> str | None:
    """"cupy", "torch" or "numba" for arrays of those libraries, None for any other exporter."""
    kind = type(x)
    try:
        return _LIBRARY[kind]
    except KeyError:
        pass
    top = kind.__module__.split(".")[0]
    tag = top if top in ("cupy", "torch") else "numba" if top in ("numba", "numba_cuda") else None
    _LIBRARY[kind] = tag
    return tag


def _stream_getter(library: str | None) -> Callable[[int], int]:
    """``device -> raw current stream`` of ``library`` (see :func:`current_stream`), bound once:
    gemm asks it on every call."""
    if library == "cupy":
        import cupy

        get = cupy.cuda.get_current_stream
        return lambda device: get(device).ptr
    if library == "torch":
        import torch

        # The raw handle without building a torch.cuda.Stream object per call; the binding
        # (torch/csrc/cuda/Module.cpp) is what torch.cuda.current_stream itself reads.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw
        return lambda device: torch.cuda.current_stream(device).cuda_stream
    if library == "numba":
        from numba.core import config

        default = 2 if config.CUDA_PER_THREAD_DEFAULT_STREAM else 0
        return lambda device: default
    return lambda device: 0


_STREAM_GETTERS: dict[str | None, Callable[[int], int]] = {}


def current_stream(library: str | None, device: int) -> int:
    """The raw stream ``gemm`` uses when given neither ``handle`` nor ``stream``: the current
    stream of the operands' library on ``device`` (CuPy's current stream; PyTorch's current
    stream; Numba's default stream, which is the per-thread one when Numba is configured so),
    or the legacy default stream for any other exporter."""
    getter = _STREAM_GETTERS.get(library)
    if getter is None:
        getter = _STREAM_GETTERS[library] = _stream_getter(library)
    return getter(device)


def default_handle(device: int | None = None, stream: Any = None) -> Handle:
    """gemm's handle for ``device`` (default: the current device) and ``stream`` (any stream
    :class:`Handle` accepts; default: the legacy default stream), created on first use.

    The first one of a device is gemm's set-up there, unless :func:`sgblas.initialize` or a
    :class:`Handle` of that device did it already: it loads the kernels and makes them resident
    in the device's primary context, which may wait once for the context's running work (this
    is why gemm's first call on a device may wait, as cuBLAS's handle creation inside a
    library's first matmul does). Later ones wait for nothing: the kernels are resident, and
    the workspace is the one :func:`sgblas.initialize` reserved or a ``cuMemAlloc``, which does
    not wait for running work. On a stream being captured into a CUDA graph, where allocating
    is not allowed, the handle gets no workspace (its calls then run kernels that need none).
    """
    if device is None:
        from sgblas.runtime.device import current_device

        device = current_device()
    raw = stream_handle(stream)
    handle = _default_handles.get((device, raw))
    if handle is None or handle.closed:
        from sgblas.runtime.device import BACKEND

        capturing = not BACKEND.simulated and _capturing(raw)
        handle = _default_handles[(device, raw)] = Handle(device, stream=raw,
                                                         workspace_bytes=0 if capturing else None)
    return handle


def _capturing(raw: int) -> bool:
    from sgblas.runtime import driver

    try:
        return driver.stream_capturing(raw)
    except driver.DriverError:  # a stream the driver refuses: Handle reports it
        return False


def _allocate_like(a: Any, rows: int, cols: int, handle: Handle) -> Any:
    """A new column-major float32 array of the same library as ``a`` (Numba otherwise),
    allocated in stream order on the handle's stream, so that the library's allocator does not
    hand its memory to other work while the kernel may still write it."""
    library = _library(a)
    raw = handle.stream_handle
    if library == "cupy":
        import cupy

        with cupy.cuda.Device(handle.device):
            current = cupy.cuda.get_current_stream()
            if current.ptr == raw:
                return cupy.empty((rows, cols), dtype=cupy.float32, order="F")
            # ``with stream:`` would leave the NULL stream current on exit, not the one the
            # caller had made current with ``use()``: restore that one explicitly.
            cupy.cuda.ExternalStream(raw).use()
            try:
                return cupy.empty((rows, cols), dtype=cupy.float32, order="F")
            finally:
                current.use()
    if library == "torch":
        import torch

        # torch has no Fortran order: the transpose of a C-ordered (cols, rows) tensor is one.
        def empty():
            return torch.empty((cols, rows), dtype=torch.float32, device=f"cuda:{handle.device}").t()

        if torch.cuda.current_stream(handle.device).cuda_stream == raw:
            return empty()
        with torch.cuda.stream(torch.cuda.ExternalStream(raw, device=handle.device)):
            return empty()
    from numba import cuda
    import numpy as np

    if type(a).__module__.startswith("numba.cuda.simulator"):
        return cuda.device_array((rows, cols), dtype=np.float32, order="F")
    with cuda.gpus[handle.device]:
        return cuda.device_array((rows, cols), dtype=np.float32, order="F",
                                 stream=cuda.external_stream(raw) if raw else 0)


def _operand(x: Any, name: str, stream: int) -> tuple[Operand, tuple[int, int, bool]]:
    """``x`` read once, and its column-major view; a DLPack exporter orders its pending work
    before ``stream``."""
    read = read_operand(x, name, stream=stream)
    if isinstance(read, str):
        raise InvalidValueError(read)
    view = matrix_view(read.shape, read.strides, name)
    if isinstance(view, str):
        raise InvalidValueError(view)
    return read, view


def _handle_for(handle: Handle | None, stream: Any, a: Any, b: Any, c: Any, device: int | None) -> Handle:
    """The handle a gemm call runs on (see :func:`gemm`)."""
    if handle is not None:
        if stream is not None and stream_handle(stream) != handle.stream_handle:
            raise InvalidValueError(f"stream={stream!r} (handle {stream_handle(stream):#x}) disagrees with the "
                                    f"handle's stream {handle.stream_handle:#x}; pass one of them")
        return handle
    if device is None:
        from sgblas.runtime.device import current_device

        device = current_device()
    if stream is None:
        library = _library(a)
        other_b = _library(b)
        if other_b != library or (c is not None and _library(c) != library):
            library = _common_library(library, b, c)
        raw = current_stream(library, device)
    else:
        raw = stream_handle(stream)
    handle = _default_handles.get((device, raw))
    if handle is None or handle._closed:
        handle = default_handle(device, raw)
    return handle


def _common_library(library: str | None, b: Any, c: Any) -> str | None:
    """The one library among the operands' (exporters of no known library do not count), or
    InvalidValueError naming two that differ."""
    for name, x in (("b", b), ("c", c)):
        other = _library(x) if x is not None else None
        if other is not None and library is not None and other != library:
            raise InvalidValueError(
                f"a is {_LIBRARY_NAMES[library]} and {name} is {_LIBRARY_NAMES[other]}: gemm follows the "
                f"current stream of the operands' library and cannot choose between two; pass stream= or handle=")
        library = library or other
    return library


def gemm(a: Any, b: Any, c: Any = None, *, alpha: float = 1.0, beta: float = 0.0,
         trans_a: bool = False, trans_b: bool = False, handle: Handle | None = None,
         stream: Any = None) -> Any:
    """``c = alpha * op(a) @ op(b) + beta * c`` with NumPy semantics; returns ``c``.

    ``a``, ``b`` and ``c`` are 2-D float32 device arrays (Numba, CuPy, PyTorch, ...) in either
    memory order; ``op(x)`` is ``x.T`` when ``trans_x`` is true. C-ordered operands are read
    through the identity ``C^T = B^T A^T`` without copies. When ``c`` is None a column-major
    result of ``a``'s array library is allocated and ``beta`` is ignored.

    The stream: ``stream`` (anything :class:`Handle` accepts) or ``handle``'s; with neither,
    the current stream of the operands' library, as NumPy-style GPU libraries do: CuPy's
    current stream, PyTorch's current stream of the tensors' device, Numba's default stream,
    the legacy default stream for other exporters. Operands of two libraries, or a ``stream``
    that disagrees with ``handle``, raise :class:`InvalidValueError`.

    The first call on a device sets sgblas up there (loads the kernels and makes them resident
    in the device's primary context), which may wait once for work already running in that
    context, unless :func:`sgblas.initialize` or a :class:`Handle` of the device did it before;
    no call after it waits.

    Raises :class:`InvalidValueError` (a ``ValueError``) naming the bad value for invalid
    arguments, and :class:`SgblasError` carrying the status for other failures.
    """
    # The stream comes first (a DLPack exporter is told it), so the device is taken from the
    # arrays of the known libraries, which are read without one.
    a_span, b_span = read_device_span(a), read_device_span(b)
    if handle is None or stream is not None:
        device = a_span[2] if a_span is not None else b_span[2] if b_span is not None else None
        handle = _handle_for(handle, stream, a, b, c, device)
    if a_span is not None and b_span is not None and a_span[5] is not None and b_span[5] is not None:
        # Matrices of the known libraries, contiguous in either order: their shapes and memory
        # orders give the BLAS call directly (as _gemm_validated derives it), and sgemm's plain
        # checks take it from there; anything they do not accept goes the documented way.
        a_rows, a_cols = a_span[3]
        b_rows, b_cols = b_span[3]
        m, k = (a_cols, a_rows) if trans_a else (a_rows, a_cols)
        k_b, n = (b_cols, b_rows) if trans_b else (b_rows, b_cols)
        if k == k_b:
            if c is None:
                c = _allocate_like(a, m, n, handle)
                beta = 0.0
            c_span = read_device_span(c)
            if c_span is not None and c_span[5] is not None and c_span[3] == (m, n):
                a_t, b_t = a_span[5], b_span[5]
                ta = "T" if (not trans_a) == a_t else "N"
                tb = "T" if (not trans_b) == b_t else "N"
                lda = a_cols if a_t else a_rows
                ldb = b_cols if b_t else b_rows
                if not c_span[5]:
                    status = _api.launch_plain(handle, ta, tb, m, n, k, alpha, a_span, lda, b_span, ldb,
                                               beta, c_span, m)
                else:
                    status = _api.launch_plain(handle, _FLIP[tb], _FLIP[ta], n, m, k, alpha, b_span, ldb,
                                               a_span, lda, beta, c_span, n)
                if status is not None:  # a plain call, launched (or its launch failed)
                    if status is not Status.SUCCESS:
                        raise SgblasError(status, last_error_message() or f"sgemm returned {status.name}")
                    return c
    return _gemm_validated(handle, a, b, c, alpha, beta, trans_a, trans_b)


_FLIP = {"N": "T", "T": "N"}


def _gemm_validated(handle: Handle, a: Any, b: Any, c: Any, alpha: Any, beta: Any, trans_a: Any,
                    trans_b: Any) -> Any:
    """gemm through sgemm's documented validation: every array an exporter describes, and the
    sentences for what is wrong."""
    raw = handle.stream_handle
    a_op, (a_rows, lda, a_t) = _operand(a, "a", raw)
    b_op, (b_rows, ldb, b_t) = _operand(b, "b", raw)
    m, k = a_op.shape[::-1] if trans_a else a_op.shape
    k_b, n = b_op.shape[::-1] if trans_b else b_op.shape
    if k != k_b:
        raise InvalidValueError(f"op(a) is {m}x{k} but op(b) is {k_b}x{n}: inner dimensions {k} and {k_b} differ")
    if c is None:
        c = _allocate_like(a, m, n, handle)
        beta = 0.0
    c_op, (c_rows, ldc, c_t) = _operand(c, "c", raw)
    if tuple(c_op.shape) != (m, n):
        raise InvalidValueError(f"c has shape {tuple(c_op.shape)} but op(a) @ op(b) is {m}x{n}")
    # A buffer read column-major is x when not transposed and x^T when it is (C order), so
    # op(x) needs a BLAS transpose exactly when trans_x differs from the buffer's transposition.
    ta = "T" if bool(trans_a) != a_t else "N"
    tb = "T" if bool(trans_b) != b_t else "N"
    if not c_t:
        args = (ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        operands, names = (a_op, b_op, c_op), ("a", "b", "c")
    else:
        # C is stored as C^T (n x m, column-major): C^T = op(b)^T op(a)^T.
        args = (_FLIP[tb], _FLIP[ta], n, m, k, alpha, b, ldb, a, lda, beta, c, ldc)
        operands, names = (b_op, a_op, c_op), ("b", "a", "c")
    result = validate(handle, *args, operands=operands, names=names)
    if isinstance(result, _Failure):
        raise status_error(result.status, result.message)
    status = run_call(handle, result)
    if status != Status.SUCCESS:
        raise SgblasError(status, last_error_message() or f"sgemm returned {status.name}")
    return c
