"""The BLAS-style entry points: :func:`sgemm` and :func:`explain`.

``sgemm`` validates its arguments in the order documented in ``docs/api.md`` and hands the
validated call to :func:`run`, which takes the shape class's plan (:mod:`sgblas.dispatch.plan`)
and enqueues it on the handle's stream. It never raises and never synchronises; on any status
other than ``SUCCESS`` it has not touched C.

There is one call path. Most calls are *plain* (an open FP32 handle, 'N'/'T' strings,
positive int sizes, leading dimensions that fit, normal float scalars, contiguous float32
arrays of a known library on the handle's device, no overlap with C); :func:`launch_plain`
checks exactly those conditions without building intermediate objects and returns None at the
first one that does not hold, before anything is launched, so that the documented validation
decides and explains. ``sgemm`` reaches it through ``_sgemm_plain``, ``gemm`` directly with the
arrays it has read. Both end in :func:`run` with the same arguments, hence the same plan and launch
(``tests/test_plain_path.py`` checks it over random calls).
"""

from __future__ import annotations

import math
import numbers
import struct
import threading
from typing import Any, NamedTuple

from sgblas.dispatch.model import calibration_for
from sgblas.dispatch.plan import choose, execute, plan_for, plan_named
from sgblas.enums import MathMode, Status
from sgblas.handle import Handle
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.spec import SCALE_KERNEL
from sgblas.operands import Operand, read_device_span, read_operand
from sgblas.runtime.device import BACKEND

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


class _Call(NamedTuple):
    """A validated call. ``c`` is None when nothing is launched (m or n is 0); ``a`` and ``b``
    are None when A and B are not read (k or alpha is 0: C = beta * C)."""

    ta: str
    tb: str
    m: int
    n: int
    k: int
    alpha: float
    a: Operand | None
    lda: int
    b: Operand | None
    ldb: int
    beta: float
    c: Operand | None
    ldc: int


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
        return _Failure(Status.INVALID_VALUE, f"{name}={_show(value)} is not an integer")
    value = int(value)
    if not 0 <= value <= INT32_MAX:
        return _Failure(Status.INVALID_VALUE, f"{name}={_show(value)} is outside [0, 2**31 - 1]")
    return value


def _leading_dimension(value: Any, name: str, rows: int, what: str) -> int | _Failure:
    ld = _count(value, name)
    if type(ld) is _Failure:
        return ld
    if ld < max(1, rows):
        return _Failure(Status.INVALID_VALUE, f"{name}={ld} is below max(1, {what}) = {max(1, rows)}")
    return ld


def _scalar(value: Any, name: str) -> float | _Failure:
    """The float32 value the kernels will use: the zero tests of the contract apply to it,
    so an alpha that rounds to zero in float32 is zero (A and B are not read)."""
    if type(value) is not float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return _Failure(Status.INVALID_VALUE, f"{name}={_show(value)} is not a real number")
        try:
            value = float(value)
        except (OverflowError, ValueError, TypeError):
            return _Failure(Status.INVALID_VALUE, f"{name}={_show(value)} does not convert to a float")
    try:  # round to nearest float32, as the hardware conversion does
        return _F32.unpack(_F32.pack(value))[0]
    except OverflowError:  # beyond float32's range after rounding: +-Inf
        return math.copysign(math.inf, value)


def _matrix(x: Any, name: str, rows: int, cols: int, ld: int, device: int, writable: bool,
            pre_read: Operand | None, stream: int) -> Operand | _Failure:
    op = pre_read if pre_read is not None else read_operand(x, name, stream=stream)
    if isinstance(op, str):
        return _Failure(Status.INVALID_VALUE, op)
    needed = (cols - 1) * ld + rows
    if op.extent < needed:
        return _Failure(Status.INVALID_VALUE,
                     f"{name} spans {op.extent} float32 elements but a {rows}x{cols} matrix with "
                     f"ld={ld} needs (cols - 1) * ld + rows = {needed}")
    if op.device != device:
        return _Failure(Status.INVALID_VALUE, f"{name} is in memory of device {op.device}, not of the handle's device {device}")
    if writable and op.readonly:
        return _Failure(Status.INVALID_VALUE, f"{name} is read-only")
    return op


def _overlaps(x: Operand, x_needed: int, c: Operand, c_needed: int) -> bool:
    return x.ptr < c.ptr + 4 * c_needed and c.ptr < x.ptr + 4 * x_needed


def validate(handle: Any, transa: Any, transb: Any, m: Any, n: Any, k: Any, alpha: Any,
             A: Any, lda: Any, B: Any, ldb: Any, beta: Any, C: Any, ldc: Any,
             operands: tuple = (None, None, None), names: tuple = ("A", "B", "C")) -> _Call | _Failure:
    """Check a call in the documented order.

    ``operands`` lets a caller that has already read A, B, C (as :class:`Operand`) pass them in,
    so each interface is read once; ``names`` are the argument names used in messages.
    """
    if not isinstance(handle, Handle) or handle.closed:
        return _Failure(Status.NOT_INITIALIZED, f"handle {handle!r} is not an open sgblas.Handle")
    if handle.math_mode is not MathMode.FP32:
        return _Failure(Status.NOT_SUPPORTED, f"math mode {handle.math_mode.name} is not implemented; only FP32 is")
    ta = _TRANS.get(transa) if isinstance(transa, str) else None
    if ta is None:
        return _Failure(Status.INVALID_VALUE, f"transa={_show(transa)} is not one of 'N', 'n', 'T', 't'")
    tb = _TRANS.get(transb) if isinstance(transb, str) else None
    if tb is None:
        return _Failure(Status.INVALID_VALUE, f"transb={_show(transb)} is not one of 'N', 'n', 'T', 't'")
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
    if m == 0 or n == 0:  # the contract: succeed, launch nothing
        return _Call(ta, tb, m, n, k, alpha, None, lda, None, ldb, beta, None, ldc)

    device = handle.device
    stream = handle.stream_handle  # what a DLPack exporter orders its pending work before
    c = _matrix(C, names[2], m, n, ldc, device, True, operands[2], stream)
    if type(c) is _Failure:
        return c
    if k == 0 or alpha == 0.0:  # A and B are not read: their arguments are not examined
        return _Call(ta, tb, m, n, k, alpha, None, lda, None, ldb, beta, c, ldc)
    a = _matrix(A, names[0], a_rows, a_cols, lda, device, False, operands[0], stream)
    if type(a) is _Failure:
        return a
    b = _matrix(B, names[1], b_rows, b_cols, ldb, device, False, operands[1], stream)
    if type(b) is _Failure:
        return b
    c_needed = (n - 1) * ldc + m
    if _overlaps(a, (a_cols - 1) * lda + a_rows, c, c_needed):
        return _Failure(Status.INVALID_VALUE, f"{names[0]}'s storage overlaps {names[2]}'s")
    if _overlaps(b, (b_cols - 1) * ldb + b_rows, c, c_needed):
        return _Failure(Status.INVALID_VALUE, f"{names[1]}'s storage overlaps {names[2]}'s")
    return _Call(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)


def run(handle: Handle, ta: str, tb: str, m: int, n: int, k: int, alpha: float, a_ptr: int, a_extent: int,
        lda: int, b_ptr: int, b_extent: int, ldb: int, beta: float, c_ptr: int, c_extent: int,
        ldc: int, candidate: str | None = None) -> Status:
    """Plan and enqueue a validated call with m, n >= 1 (A and B unread when k or alpha is 0,
    their pointers then 0); ``candidate``: run that candidate plan instead of the chosen one
    (when A and B are read). A failure is a status, never an escaping exception."""
    try:
        if candidate is not None and k != 0 and alpha != 0.0:
            plan = plan_named(handle, candidate, ta, tb, m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc)
            if isinstance(plan, str):
                _last_error.message = plan
                return Status.INVALID_VALUE
        else:
            plan = plan_for(handle, ta, tb, m, n, k, k != 0 and alpha != 0.0, a_ptr, lda, b_ptr, ldb, c_ptr, ldc)
    except Exception as exc:  # a guard or the chooser failing is a status, not an exception
        _last_error.message = f"choosing a kernel failed: {type(exc).__name__}: {exc}"
        return Status.INTERNAL_ERROR
    if plan is None:
        choice = choose(GemmProblem(handle.cc, handle.math_mode, ta, tb, m, n, k, a_ptr, lda, b_ptr, ldb,
                                    c_ptr, ldc), handle.properties, handle.workspace_bytes)
        _last_error.message = "no kernel accepted the problem: " + "; ".join(
            f"{name}: {reason}" for name, reason in choice.refused + choice.passed_over)
        return Status.INTERNAL_ERROR
    try:
        execute(handle, plan, m, n, k, alpha, a_ptr, a_extent, lda, b_ptr, b_extent, ldb,
                beta, c_ptr, c_extent, ldc)
    except Exception as exc:
        handle._plans.clear()  # whatever was memoised is chosen again next time
        _last_error.message = f"the kernel launch failed: {type(exc).__name__}: {exc}"
        return Status.EXECUTION_FAILED
    return Status.SUCCESS


def run_call(handle: Handle, call: _Call, candidate: str | None = None) -> Status:
    """:func:`run` for a call that :func:`validate` accepted."""
    c = call.c
    if c is None:
        return Status.SUCCESS
    a, b = call.a, call.b
    if a is None:  # C = beta * C
        return run(handle, call.ta, call.tb, call.m, call.n, call.k, call.alpha, 0, 0, call.lda, 0, 0, call.ldb,
                   call.beta, c.ptr, c.extent, call.ldc)
    return run(handle, call.ta, call.tb, call.m, call.n, call.k, call.alpha, a.ptr, a.extent, call.lda,
               b.ptr, b.extent, call.ldb, call.beta, c.ptr, c.extent, call.ldc, candidate)


def _finish(result: _Call | _Failure, handle: Handle, candidate: str | None = None) -> Status:
    if type(result) is _Failure:
        _last_error.message = result.message
        return result.status
    return run_call(handle, result, candidate)


def sgemm(handle: Handle, transa: str, transb: str, m: int, n: int, k: int, alpha: float,
          A: Any, lda: int, B: Any, ldb: int, beta: float, C: Any, ldc: int, *,
          candidate: str | None = None) -> Status:
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

    ``candidate`` runs one named candidate plan instead of the one sgblas chooses (as
    ``cublasGemmEx``'s algo argument does): a name from :func:`explain`'s ``candidates``, of the
    form ``VARIANT``, ``VARIANT/sS`` (K in S slices), ``VARIANT/cS`` (K in S slices added into C
    in turn) or ``VARIANT/tail``. A name that cannot
    run these arguments returns INVALID_VALUE, and :func:`last_error_message` says why. It
    applies when A and B are read (k and alpha nonzero); C = beta * C has one plan.
    """
    if candidate is None:
        status = _sgemm_plain(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
        if status is not None:
            return status
    elif not isinstance(candidate, str):
        _last_error.message = f"candidate={_show(candidate)} is not a candidate name (a str)"
        return Status.INVALID_VALUE
    return _finish(validate(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc), handle,
                   candidate)


# --- the plain call: the same checks as validate's, without building objects -----------------

_PLAIN_TRANS = {"N": "N", "n": "N", "T": "T", "t": "T"}
_FLT_MIN_NORMAL = 2.0 ** -126


#: The simulator's arrays are read by the documented path only.
_SIMULATED = BACKEND.simulated
_FP32 = MathMode.FP32


def _sgemm_plain(handle: Any, transa: Any, transb: Any, m: Any, n: Any, k: Any, alpha: Any,
                 A: Any, lda: Any, B: Any, ldb: Any, beta: Any, C: Any, ldc: Any) -> Status | None:
    c = read_device_span(C)
    if c is None:
        return None
    a = read_device_span(A)
    if a is None:
        return None
    b = read_device_span(B)
    if b is None:
        return None
    return launch_plain(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)


def launch_plain(handle: Any, transa: Any, transb: Any, m: Any, n: Any, k: Any, alpha: Any, a: tuple,
                  lda: Any, b: tuple, ldb: Any, beta: Any, c: tuple, ldc: Any) -> Status | None:
    """The launch of a call whose arrays are read as ``(ptr, extent, device, ...)`` (by
    :func:`read_device_span`: sgemm's and gemm's plain calls), when every argument is plain;
    None, before anything is launched, when a condition of the contract is not plainly met
    (see above). One function, as every call into Python costs."""
    if type(handle) is not Handle or handle._closed or handle.math_mode is not _FP32 or _SIMULATED:
        return None
    if type(transa) is not str or type(transb) is not str:
        return None
    ta = _PLAIN_TRANS.get(transa)
    tb = _PLAIN_TRANS.get(transb)
    if ta is None or tb is None:
        return None
    if not (type(m) is int and type(n) is int and type(k) is int
            and type(lda) is int and type(ldb) is int and type(ldc) is int):
        return None
    if not (0 < m <= INT32_MAX and 0 < n <= INT32_MAX and 0 < k <= INT32_MAX
            and lda <= INT32_MAX and ldb <= INT32_MAX and m <= ldc <= INT32_MAX):
        return None
    # Rows and columns of A and B as stored; the elements each spans from its pointer.
    a_rows, a_cols = (m, k) if ta == "N" else (k, m)
    b_rows, b_cols = (k, n) if tb == "N" else (n, k)
    if lda < a_rows or ldb < b_rows:
        return None
    a_needed = (a_cols - 1) * lda + a_rows
    b_needed = (b_cols - 1) * ldb + b_rows
    if not (type(alpha) is float and _FLT_MIN_NORMAL <= abs(alpha) <= _FLT_MAX):
        return None
    if type(beta) is not float or not (beta == 0.0 or _FLT_MIN_NORMAL <= abs(beta) <= _FLT_MAX):
        return None
    device = handle.device
    a_ptr, a_extent, a_device = a[0], a[1], a[2]
    b_ptr, b_extent, b_device = b[0], b[1], b[2]
    c_ptr, c_extent, c_device = c[0], c[1], c[2]
    c_needed = (n - 1) * ldc + m
    c_end = c_ptr + 4 * c_needed
    if (a_extent < a_needed or b_extent < b_needed or c_extent < c_needed
            or a_device != device or b_device != device or c_device != device
            or (a_ptr < c_end and c_ptr < a_ptr + 4 * a_needed)
            or (b_ptr < c_end and c_ptr < b_ptr + 4 * b_needed)):
        return None
    return run(handle, ta, tb, m, n, k, alpha, a_ptr, a_extent, lda, b_ptr, b_extent, ldb,
               beta, c_ptr, c_extent, ldc)


class Explanation(NamedTuple):
    """Which kernel a call would run, and why every other variant would not.

    ``kernel`` is the variant name, or None when nothing would be launched or the call is
    invalid (then ``status`` and ``message`` say why); ``alignment`` its alignment class in
    bytes. ``refusals`` are the variants that cannot run the problem, ``passed_over`` those
    that could but that the cost model predicts slower or that a twin of a wider alignment
    class stands in for, each as ``(name, reason)``. ``tail``: when
    ``kernel`` runs only the whole waves of its CTAs (a tail plan), each rectangle of C left
    as ``(row0, col0, rows, cols, kernel)``; ``message`` says how each is split.

    ``candidate`` is the chosen candidate plan's name (what ``sgemm(..., candidate=)`` takes),
    ``predicted_s`` its predicted time in seconds, and ``candidates`` every legal candidate
    with its predicted time, fastest first (:mod:`sgblas.dispatch.model`; a variant whose twin
    of a wider alignment class can run the problem is listed but not chosen). ``calibrated``:
    whether the predictions use rates measured on this kind of device.
    """

    kernel: str | None
    refusals: tuple[tuple[str, str], ...]
    status: Status
    message: str
    passed_over: tuple[tuple[str, str], ...] = ()
    alignment: int | None = None
    tail: tuple[tuple[int, int, int, int, str], ...] = ()
    candidate: str | None = None
    predicted_s: float | None = None
    candidates: tuple[tuple[str, float], ...] = ()
    calibrated: bool = False

    def __str__(self) -> str:
        head = f"kernel: {self.kernel or '(none)'}"
        if self.alignment is not None:
            head += f" (alignment class {self.alignment} bytes)"
        lines = [head + (f" ({self.message})" if self.message else "")]
        lines += [f"  then C[{r0}:{r0 + rows}, {c0}:{c0 + cols}] by {name}" for r0, c0, rows, cols, name in self.tail]
        if self.candidates:
            rates = "calibrated" if self.calibrated else "default, uncalibrated"
            lines.append(f"  predicted ({rates} rates): " + ", ".join(
                f"{name} {seconds * 1e6:.1f} us" for name, seconds in self.candidates[:5])
                + (f" and {len(self.candidates) - 5} more" if len(self.candidates) > 5 else ""))
        lines += [f"  cannot run {name}: {reason}" for name, reason in self.refusals]
        lines += [f"  not chosen {name}: {reason}" for name, reason in self.passed_over]
        return "\n".join(lines)


def explain(handle: Handle, transa: str, transb: str, m: int, n: int, k: int,
            A: Any, lda: int, B: Any, ldb: int, C: Any, ldc: int) -> Explanation:
    """Say which kernel :func:`sgemm` would run for these arguments (alpha taken as nonzero)."""
    result = validate(handle, transa, transb, m, n, k, 1.0, A, lda, B, ldb, 1.0, C, ldc)
    if type(result) is _Failure:
        return Explanation(None, (), result.status, result.message)
    if result.c is None:
        return Explanation(None, (), Status.SUCCESS, "m or n is 0: nothing is launched")
    if result.a is None:
        return Explanation(SCALE_KERNEL.name, (), Status.SUCCESS, "k is 0: C = beta * C",
                           alignment=SCALE_KERNEL.align)
    r = result
    problem = GemmProblem(handle.cc, handle.math_mode, r.ta, r.tb, r.m, r.n, r.k, r.a.ptr, r.lda, r.b.ptr, r.ldb,
                          r.c.ptr, r.ldc)
    choice = choose(problem, handle.properties, handle.workspace_bytes)
    if choice.spec is None:
        return Explanation(None, choice.refused, Status.INTERNAL_ERROR, "no kernel accepted the problem",
                           choice.passed_over)
    # A packed variant reads the caller's arrays with 4-byte accesses (its 16-byte ones are of its copies).
    alignment = getattr(choice.spec.config, "c_align", 0) or choice.spec.align
    tail = tuple((*rect, sub.spec.name) for rect, sub in choice.tail)
    calibrated = calibration_for(handle.cc, handle.properties, warn=False).calibrated
    return Explanation(choice.spec.name, choice.refused, Status.SUCCESS, choice.note, choice.passed_over,
                       alignment, tail, choice.candidate, choice.predicted_s, choice.ranking, calibrated)
