"""The BLAS-style entry points: :func:`sgemm` and :func:`explain`.

``sgemm`` validates its arguments in the order documented in ``docs/api.md``, chooses a kernel
through the dispatch table and enqueues it on the handle's stream. It never raises and never
synchronises; on any status other than ``SUCCESS`` it has not touched C.
"""

from __future__ import annotations

import math
import numbers
import struct
import threading
from typing import Any, NamedTuple

from sgblas.kernels.problem import GemmProblem
from sgblas.dispatch.table import select, select_cached, variant_name
from sgblas.runtime import device as _device
from sgblas.enums import MathMode, Status
from sgblas.handle import Handle
from sgblas.kernels import scale
from sgblas.runtime.launch import launch_gemm, launch_scale
from sgblas.operands import Operand, read_device_span, read_operand

__all__ = ["sgemm", "explain", "Explanation", "last_error_message"]

INT32_MAX = 2**31 - 1
_FLT_MAX = 3.4028234663852886e38  # the largest finite float32
_F32 = struct.Struct("<f")
_TRANS = {"N": "N", "n": "N", "T": "T", "t": "T"}
_last_error = threading.local()


def last_error_message() -> str | None:
    """The sentence explaining the calling thread's most recent non-SUCCESS status, if any."""
    return getattr(_last_error, "message", None)


class _Failure(NamedTuple):
    status: Status
    message: str


class _Plan(NamedTuple):
    """A validated call. ``c`` is None when nothing is launched (m or n is 0); ``problem`` is
    None when C = beta*C is all there is to do (k or alpha is 0)."""

    problem: GemmProblem | None
    m: int
    n: int
    ldc: int
    alpha: float
    beta: float
    a: Operand | None
    b: Operand | None
    c: Operand | None


def _fail(status: Status, message: str) -> _Failure:
    return _Failure(status, message)


def _show(value: Any) -> str:
    """``repr(value)`` for a message, shortened; an int too long to print is summarised."""
    try:
        text = repr(value)
    except ValueError:  # ints past sys.get_int_max_str_digits() refuse to become text
        return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
    return text if len(text) <= 80 else text[:77] + "..."


def _count(value: Any, name: str) -> int | _Failure:
    if type(value) is int and 0 <= value <= INT32_MAX:  # the common case, without ABC checks
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return _fail(Status.INVALID_VALUE, f"{name}={_show(value)} is not an integer")
    value = int(value)
    if not 0 <= value <= INT32_MAX:
        return _fail(Status.INVALID_VALUE, f"{name}={_show(value)} is outside [0, 2**31 - 1]")
    return value


def _leading_dimension(value: Any, name: str, rows: int, what: str) -> int | _Failure:
    ld = _count(value, name)
    if type(ld) is _Failure:
        return ld
    if ld < max(1, rows):
        return _fail(Status.INVALID_VALUE, f"{name}={ld} is below max(1, {what}) = {max(1, rows)}")
    return ld


def _scalar(value: Any, name: str) -> float | _Failure:
    """The float32 value the kernels will use: the zero tests of the contract apply to it,
    so an alpha that rounds to zero in float32 is zero (A and B are not read)."""
    if type(value) is not float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return _fail(Status.INVALID_VALUE, f"{name}={_show(value)} is not a real number")
        try:
            value = float(value)
        except (OverflowError, ValueError, TypeError):
            return _fail(Status.INVALID_VALUE, f"{name}={_show(value)} does not convert to a float")
    try:  # round to nearest float32, as the hardware conversion does
        return _F32.unpack(_F32.pack(value))[0]
    except OverflowError:  # beyond float32's range after rounding: +-Inf
        return math.copysign(math.inf, value)


def _matrix(x: Any, name: str, rows: int, cols: int, ld: int, device: int, writable: bool,
            pre_read: Operand | None = None) -> Operand | _Failure:
    op = pre_read if pre_read is not None else read_operand(x, name)
    if isinstance(op, str):
        return _fail(Status.INVALID_VALUE, op)
    needed = (cols - 1) * ld + rows
    if op.extent < needed:
        return _fail(Status.INVALID_VALUE,
                     f"{name} spans {op.extent} float32 elements but a {rows}x{cols} matrix with "
                     f"ld={ld} needs (cols - 1) * ld + rows = {needed}")
    if op.device != device:
        return _fail(Status.INVALID_VALUE, f"{name} is in memory of device {op.device}, not of the handle's device {device}")
    if writable and op.readonly:
        return _fail(Status.INVALID_VALUE, f"{name} is read-only")
    return op


def _overlaps(x: Operand, x_needed: int, c: Operand, c_needed: int) -> bool:
    return x.ptr < c.ptr + 4 * c_needed and c.ptr < x.ptr + 4 * x_needed


def validate(handle: Any, transa: Any, transb: Any, m: Any, n: Any, k: Any, alpha: Any,
             A: Any, lda: Any, B: Any, ldb: Any, beta: Any, C: Any, ldc: Any,
             operands: tuple = (None, None, None), names: tuple = ("A", "B", "C")) -> _Plan | _Failure:
    """Check a call in the documented order.

    ``operands`` lets a caller that has already read A, B, C (as :class:`Operand`) pass them in,
    so each interface is read once; ``names`` are the argument names used in messages.
    """
    if not isinstance(handle, Handle) or handle.closed:
        return _fail(Status.NOT_INITIALIZED, f"handle {handle!r} is not an open sgblas.Handle")
    if handle.math_mode is not MathMode.FP32:
        return _fail(Status.NOT_SUPPORTED, f"math mode {handle.math_mode.name} is not implemented; only FP32 is")
    ta = _TRANS.get(transa) if isinstance(transa, str) else None
    if ta is None:
        return _fail(Status.INVALID_VALUE, f"transa={_show(transa)} is not one of 'N', 'n', 'T', 't'")
    tb = _TRANS.get(transb) if isinstance(transb, str) else None
    if tb is None:
        return _fail(Status.INVALID_VALUE, f"transb={_show(transb)} is not one of 'N', 'n', 'T', 't'")
    if not (type(m) is int and type(n) is int and type(k) is int
            and 0 <= m <= INT32_MAX and 0 <= n <= INT32_MAX and 0 <= k <= INT32_MAX):
        dims = []  # the slow path: numpy integers, or a sentence naming the bad value
        for value, name in ((m, "m"), (n, "n"), (k, "k")):
            v = _count(value, name)
            if type(v) is _Failure:
                return v
            dims.append(v)
        m, n, k = dims
    a_rows, a_cols = (m, k) if ta == "N" else (k, m)
    b_rows, b_cols = (k, n) if tb == "N" else (n, k)
    lda = _leading_dimension(lda, "lda", a_rows, "m" if ta == "N" else "k")
    if type(lda) is _Failure:
        return lda
    ldb = _leading_dimension(ldb, "ldb", b_rows, "k" if tb == "N" else "n")
    if type(ldb) is _Failure:
        return ldb
    ldc = _leading_dimension(ldc, "ldc", m, "m")
    if type(ldc) is _Failure:
        return ldc
    alpha = _scalar(alpha, "alpha")
    if type(alpha) is _Failure:
        return alpha
    beta = _scalar(beta, "beta")
    if type(beta) is _Failure:
        return beta
    if m == 0 or n == 0:
        return _Plan(None, m, n, ldc, alpha, beta, None, None, None)  # the contract: succeed, launch nothing

    device = handle.device
    c = _matrix(C, names[2], m, n, ldc, device, True, operands[2])
    if type(c) is _Failure:
        return c
    if k == 0 or alpha == 0.0:  # A and B are not read: their arguments are not examined
        return _Plan(None, m, n, ldc, alpha, beta, None, None, c)
    a = _matrix(A, names[0], a_rows, a_cols, lda, device, False, operands[0])
    if type(a) is _Failure:
        return a
    b = _matrix(B, names[1], b_rows, b_cols, ldb, device, False, operands[1])
    if type(b) is _Failure:
        return b
    c_needed = (n - 1) * ldc + m
    if _overlaps(a, (a_cols - 1) * lda + a_rows, c, c_needed):
        return _fail(Status.INVALID_VALUE, f"{names[0]}'s storage overlaps {names[2]}'s")
    if _overlaps(b, (b_cols - 1) * ldb + b_rows, c, c_needed):
        return _fail(Status.INVALID_VALUE, f"{names[1]}'s storage overlaps {names[2]}'s")
    problem = GemmProblem(handle.cc, handle.math_mode, ta, tb, m, n, k,
                          a.ptr, lda, b.ptr, ldb, c.ptr, ldc)
    return _Plan(problem, m, n, ldc, alpha, beta, a, b, c)


def execute(handle: Handle, plan: _Plan) -> Status:
    """Enqueue a validated plan on the handle's stream, in the handle's device context."""
    c = plan.c
    if c is None:
        return Status.SUCCESS
    stream = handle._stream[2]
    problem = plan.problem
    check_context = not _device.SIMULATOR
    if problem is None:  # k == 0 or alpha == 0: C = beta * C, A and B untouched
        return _enqueue(handle, check_context, launch_scale, stream, handle._kernels[_SCALE_KEY],
                        scale.grid(plan.m, plan.n), plan.m, plan.n, plan.beta, c.ptr, c.extent, plan.ldc)
    try:
        selection = select_cached(problem)
        module = selection.module
        loaded = None if module is None else handle._kernels[(module.NAME, (problem.transa, problem.transb))]
    except Exception as exc:  # a guard or the kernel table failing is a status, not an exception
        _last_error.message = f"choosing a kernel failed: {type(exc).__name__}: {exc}"
        return Status.INTERNAL_ERROR
    if loaded is None:
        _last_error.message = "no kernel accepted the problem: " + "; ".join(
            f"{name}: {reason}" for name, reason in selection.refusals)
        return Status.INTERNAL_ERROR
    return _enqueue(handle, check_context, launch_gemm, stream, loaded, module.grid(problem.m, problem.n),
                    problem.m, problem.n, problem.k, plan.alpha, problem.a_ptr, plan.a.extent, problem.lda,
                    problem.b_ptr, plan.b.extent, problem.ldb, plan.beta, problem.c_ptr, c.extent, problem.ldc)


def _enqueue(handle: Handle, check_context: bool, launch: Any, *args: Any) -> Status:
    """``launch(*args)`` in the handle's context: when ``check_context`` and the calling
    thread's current context is another, the handle's is pushed for the launch and popped
    after, so the caller's is restored. A failure is a status, never an escaping exception."""
    pushed = False
    try:
        if check_context and _device.current_context_handle() != handle._context:
            _device.push_context(handle._context)
            pushed = True
        launch(*args)
    except Exception as exc:
        _launches.clear()  # whatever was memoised for the plain path is asked again next time
        _last_error.message = f"the kernel launch failed: {type(exc).__name__}: {exc}"
        return Status.EXECUTION_FAILED
    finally:
        if pushed:
            _device.pop_context()
    return Status.SUCCESS


_SCALE_KEY = (scale.NAME, None)


def _finish(result: _Plan | _Failure, handle: Handle) -> Status:
    if type(result) is _Failure:
        _last_error.message = result.message
        return result.status
    return execute(handle, result)


def sgemm(handle: Handle, transa: str, transb: str, m: int, n: int, k: int, alpha: float,
          A: Any, lda: int, B: Any, ldb: int, beta: float, C: Any, ldc: int) -> Status:
    """``C = alpha * op(A) @ op(B) + beta * C`` on column-major float32 device matrices.

    ``op(X)`` is ``X`` for ``'N'``/``'n'`` and ``X^T`` for ``'T'``/``'t'``; op(A) is m x k, op(B)
    is k x n, C is m x n. ``A``, ``B``, ``C`` are Numba device arrays or objects exporting
    ``__cuda_array_interface__`` whose memory, from the data pointer on, holds the matrix with
    leading dimension ``lda``/``ldb``/``ldc``; ``alpha`` and ``beta`` are host scalars, rounded to
    float32. The work is enqueued on the handle's stream; nothing synchronises.

    Rules: m == 0 or n == 0 succeeds without launching; k == 0 or alpha == 0 computes
    ``C = beta * C`` without reading A or B (their arguments are then not examined); beta == 0
    never reads C, so NaNs there do not propagate. Returns a :class:`Status`; never raises. On
    any status but SUCCESS, C is untouched and :func:`last_error_message` says why.
    """
    status = _sgemm_plain(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
    if status is not None:
        return status
    return _finish(validate(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc), handle)


# --- the plain call, checked and launched without building a plan -------------------------------
#
# Most calls are plain: an open FP32 handle, 'N'/'T' strings, positive int sizes, leading
# dimensions that fit, normal float scalars, contiguous float32 arrays of a known library on
# the handle's device, no overlap with C. ``_sgemm_plain`` checks exactly those conditions and
# launches, or returns None at the first one that does not hold, before anything is launched,
# and the documented validation above then decides and explains. So the two paths accept the
# same calls (tests/test_api.py checks that they launch the same kernel with the same
# arguments), and a plain call never builds an Operand, a GemmProblem or a plan.

_PLAIN_TRANS = {"N": "N", "n": "N", "T": "T", "t": "T"}
_FLT_MIN_NORMAL = 2.0 ** -126
_launches: dict = {}
_LAUNCH_CACHE_SIZE = 4096


def _plain_scalar(value: Any) -> bool:
    """Whether ``value`` is a float whose float32 rounding is normal (so neither 0 nor inf)."""
    return type(value) is float and _FLT_MIN_NORMAL <= abs(value) <= _FLT_MAX


def _launch_config(handle: Handle, ta: str, tb: str, m: int, n: int, k: int,
                   a_ptr: int, lda: int, b_ptr: int, ldb: int, c_ptr: int, ldc: int):
    """``(LoadedKernel, grid)`` for a valid problem, memoised on what guards may read."""
    key = (handle.device, ta, tb, m, n, k, a_ptr & 15, b_ptr & 15, c_ptr & 15, lda & 3, ldb & 3, ldc & 3)
    config = _launches.get(key)
    if config is None:
        module = select_cached(GemmProblem(handle.cc, handle.math_mode, ta, tb, m, n, k,
                                           a_ptr, lda, b_ptr, ldb, c_ptr, ldc)).module
        if module is None:
            return None
        if len(_launches) >= _LAUNCH_CACHE_SIZE:
            _launches.clear()
        config = _launches[key] = (handle._kernels[(module.NAME, (ta, tb))], module.grid(m, n))
    return config


def _plain_shape(handle: Any, transa: Any, transb: Any, m: Any, n: Any, k: Any, alpha: Any,
                 lda: Any, ldb: Any, beta: Any, ldc: Any) -> tuple | None:
    """``(ta, tb, a_rows, a_cols, b_rows, b_cols)`` when every non-array argument is plain."""
    if type(handle) is not Handle or handle._closed or handle.math_mode is not MathMode.FP32 or _device.SIMULATOR:
        return None
    ta = _PLAIN_TRANS.get(transa) if type(transa) is str else None
    tb = _PLAIN_TRANS.get(transb) if type(transb) is str else None
    if ta is None or tb is None:
        return None
    if not (type(m) is int and type(n) is int and type(k) is int
            and type(lda) is int and type(ldb) is int and type(ldc) is int):
        return None
    a_rows, a_cols = (m, k) if ta == "N" else (k, m)
    b_rows, b_cols = (k, n) if tb == "N" else (n, k)
    if not (0 < m <= INT32_MAX and 0 < n <= INT32_MAX and 0 < k <= INT32_MAX
            and a_rows <= lda <= INT32_MAX and b_rows <= ldb <= INT32_MAX and m <= ldc <= INT32_MAX):
        return None
    if not _plain_scalar(alpha) or not (beta == 0.0 and type(beta) is float or _plain_scalar(beta)):
        return None
    return ta, tb, a_rows, a_cols, b_rows, b_cols


def _sgemm_plain(handle: Any, transa: Any, transb: Any, m: Any, n: Any, k: Any, alpha: Any,
                 A: Any, lda: Any, B: Any, ldb: Any, beta: Any, C: Any, ldc: Any) -> Status | None:
    shape = _plain_shape(handle, transa, transb, m, n, k, alpha, lda, ldb, beta, ldc)
    if shape is None:
        return None
    c = read_device_span(C)
    if c is None:
        return None
    a = read_device_span(A)
    if a is None:
        return None
    b = read_device_span(B)
    if b is None:
        return None
    ta, tb, a_rows, a_cols, b_rows, b_cols = shape
    return _launch_plain(handle, ta, tb, m, n, k, alpha, a, lda, a_rows, a_cols, b, ldb, b_rows, b_cols,
                         beta, c, ldc)


def sgemm_operands_plain(handle: Any, transa: str, transb: str, m: int, n: int, k: int, alpha: Any,
                         a: tuple, lda: int, b: tuple, ldb: int, beta: Any, c: tuple,
                         ldc: int) -> Status | None:
    """:func:`_sgemm_plain` for arrays already read, as :class:`Operand` or as tuples in its
    field order (what ``gemm`` has)."""
    shape = _plain_shape(handle, transa, transb, m, n, k, alpha, lda, ldb, beta, ldc)
    if shape is None or a[5] or b[5] or c[5] or not (a[0] and b[0] and c[0]):  # read-only or empty
        return None
    ta, tb, a_rows, a_cols, b_rows, b_cols = shape
    return _launch_plain(handle, ta, tb, m, n, k, alpha, (a[0], a[1], a[4]), lda, a_rows, a_cols,
                         (b[0], b[1], b[4]), ldb, b_rows, b_cols, beta, (c[0], c[1], c[4]), ldc)


def _launch_plain(handle: Handle, ta: str, tb: str, m: int, n: int, k: int, alpha: float,
                  a: tuple, lda: int, a_rows: int, a_cols: int, b: tuple, ldb: int, b_rows: int,
                  b_cols: int, beta: float, c: tuple, ldc: int) -> Status | None:
    """The launch of a plain call whose arrays are read as ``(ptr, extent, device, ...)``;
    None when a condition of the contract is not plainly met (see above)."""
    device = handle.device
    a_ptr, a_extent, a_device = a[0], a[1], a[2]
    b_ptr, b_extent, b_device = b[0], b[1], b[2]
    c_ptr, c_extent, c_device = c[0], c[1], c[2]
    a_needed = (a_cols - 1) * lda + a_rows
    b_needed = (b_cols - 1) * ldb + b_rows
    c_needed = (n - 1) * ldc + m
    if (a_extent < a_needed or b_extent < b_needed or c_extent < c_needed
            or a_device != device or b_device != device or c_device != device
            or (a_ptr < c_ptr + 4 * c_needed and c_ptr < a_ptr + 4 * a_needed)
            or (b_ptr < c_ptr + 4 * c_needed and c_ptr < b_ptr + 4 * b_needed)):
        return None
    config = _launch_config(handle, ta, tb, m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc)
    if config is None:
        return None
    loaded, grid = config
    _, raw_stream, stream = handle._stream
    # On its own stream a kernel runs in that stream's context, which Handle.set_stream checked
    # is the handle's; the default streams run in the current context.
    return _enqueue(handle, raw_stream <= 2, launch_gemm, stream, loaded, grid, m, n, k, alpha,
                    a_ptr, a_extent, lda, b_ptr, b_extent, ldb, beta, c_ptr, c_extent, ldc)


class Explanation(NamedTuple):
    """Which kernel a call would run, and why each kernel before it in the table refused.

    ``kernel`` is the variant name, or None when nothing would be launched or the call is
    invalid (then ``status`` and ``message`` say why).
    """

    kernel: str | None
    refusals: tuple[tuple[str, str], ...]
    status: Status
    message: str

    def __str__(self) -> str:
        lines = [f"kernel: {self.kernel or '(none)'}" + (f" ({self.message})" if self.message else "")]
        lines += [f"  passed over {name}: {reason}" for name, reason in self.refusals]
        return "\n".join(lines)


def explain(handle: Handle, transa: str, transb: str, m: int, n: int, k: int,
            A: Any, lda: int, B: Any, ldb: int, C: Any, ldc: int) -> Explanation:
    """Say which kernel :func:`sgemm` would run for these arguments (alpha taken as nonzero)."""
    result = validate(handle, transa, transb, m, n, k, 1.0, A, lda, B, ldb, 1.0, C, ldc)
    if type(result) is _Failure:
        return Explanation(None, (), result.status, result.message)
    if result.c is None:
        return Explanation(None, (), Status.SUCCESS, "m or n is 0: nothing is launched")
    if result.problem is None:
        return Explanation(scale.NAME, (), Status.SUCCESS, "k is 0: C = beta * C")
    selection = select(result.problem)
    p = result.problem
    return Explanation(variant_name(selection.module, p.transa, p.transb), selection.refusals, Status.SUCCESS, "")
