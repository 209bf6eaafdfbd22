"""The BLAS-style entry points: :func:`sgemm` and :func:`explain`.

``sgemm`` validates its arguments in the order documented in ``docs/api.md``, chooses a kernel
through the dispatch table and enqueues it on the handle's stream. It never raises and never
synchronises; on any status other than ``SUCCESS`` it has not touched C.
"""

from __future__ import annotations

import numbers
import threading

import numpy as np
from typing import Any, NamedTuple

from sgblas.dispatch.problem import GemmProblem
from sgblas.dispatch.table import select, select_cached, variant_name
from sgblas import device as _device
from sgblas.enums import MathMode, Status
from sgblas.handle import Handle
from sgblas.kernels import scale
from sgblas.launch import launch_gemm, launch_scale
from sgblas.operands import Operand, read_operand

__all__ = ["sgemm", "explain", "Explanation", "last_error_message"]

INT32_MAX = 2**31 - 1
_FLT_MAX = float(np.finfo(np.float32).max)
_float32 = np.float32
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
    if -_FLT_MAX <= value <= _FLT_MAX:
        return float(_float32(value))
    with np.errstate(over="ignore"):  # beyond float32's range (or NaN): rounds to +-Inf (NaN)
        return float(_float32(value))


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
    launch_stream = handle._stream[2]
    problem = plan.problem
    pushed = False
    try:
        # Launch in the handle's context; the caller's current context is restored after.
        if not _device.SIMULATOR and _device.current_context_handle() != handle._context:
            _device.push_context(handle._context)
            pushed = True
        if problem is None:  # k == 0 or alpha == 0: C = beta * C, A and B untouched
            launch_scale(launch_stream, handle._kernels[_SCALE_KEY], scale.grid(plan.m, plan.n),
                         plan.m, plan.n, plan.beta, c.ptr, c.extent, plan.ldc)
            return Status.SUCCESS
        selection = select_cached(problem)
        module = selection.module
        if module is None:
            _last_error.message = "no kernel accepted the problem: " + "; ".join(
                f"{name}: {reason}" for name, reason in selection.refusals)
            return Status.INTERNAL_ERROR
        launch_gemm(launch_stream, handle._kernels[(module.NAME, (problem.transa, problem.transb))],
                    module.grid(problem.m, problem.n), problem.m, problem.n, problem.k, plan.alpha,
                    problem.a_ptr, plan.a.extent, problem.lda,
                    problem.b_ptr, plan.b.extent, problem.ldb,
                    plan.beta, problem.c_ptr, c.extent, problem.ldc)
    except Exception as exc:  # a launch failure is a status, never an escaping exception
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
    return _finish(validate(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc), handle)


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
