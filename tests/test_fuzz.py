"""Fuzzing ``sgemm`` and ``gemm`` with hypothesis, against an oracle written from docs/api.md.

``sgemm`` gets random argument tuples: wrong types, None, bools, negative and huge integers,
NumPy scalars, wrong dtypes, host arrays, too-small buffers, overlapping and non-contiguous
views, misaligned pointers, read-only and broken ``__cuda_array_interface__`` exporters. The
oracle (:func:`expected_sgemm`) derives the status from docs/api.md's check order alone, from
what the test itself built (never from sgblas's own readings), and names the argument the
first failing check is about. Every call must then

* return, never raise, exactly the oracle's status, with ``last_error_message()`` naming that
  argument when it is not SUCCESS;
* launch exactly when the oracle says so (one GEMM launch, one C = beta*C launch, or none),
  with the pointers, extents, sizes and leading dimensions the oracle expects;
* leave every buffer bit for bit as it was unless it returns SUCCESS, and when it does, leave
  exactly C's m x n elements changed, to the float64 reference's values.

``gemm`` gets random 2-D operands of both memory orders, windows, strided views, wrong
shapes, wrong dtypes, host arrays and bad scalars; it must raise :class:`sgblas.SgblasError`
(an ``InvalidValueError`` for invalid values) with a sentence naming the offending argument,
or return the right product.

The simulator is slow (about a second per launched kernel), so the tests that check statuses
replace the two launchers with recorders (nothing runs; the recorded launch is checked
instead), and the tests that launch for real draw few, tiny examples. On a GPU the ``gpu``
variants draw many more examples at larger sizes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
import re
from fractions import Fraction
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, note, settings
from hypothesis import strategies as st
from numba import cuda

import sgblas
import sgblas.dispatch.plan as plan_module
from sgblas.kernels.spec import SCALE_KERNEL, by_name
from sgblas import InvalidValueError, MathMode, SgblasError, Status
from sgblas.runtime.device import SIMULATOR
from sgblas.kernels.problem import GemmProblem
from sgblas.testing import as_matrix, compare, reference_values as reference_gemm

INT32_MAX = 2**31 - 1

# --------------------------------------------------------------------------------------------
# hypothesis settings (profiles registered here, not in conftest: they concern this file only)
# --------------------------------------------------------------------------------------------

_COMMON = dict(
    deadline=None,
    print_blob=True,
    # No "explain" phase: it reruns a failing example hundreds of times, minutes when it launches.
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much, HealthCheck.large_base_example],
)
#: CI on a CPU: derandomized, so the run time and the examples are the same on every run.
settings.register_profile("sgblas-fuzz-ci", derandomize=True, **_COMMON)
#: A GPU: random (and stored in the example database), many more examples.
settings.register_profile("sgblas-fuzz-gpu", derandomize=False, **_COMMON)
_BASE = settings.get_profile("sgblas-fuzz-ci" if SIMULATOR else "sgblas-fuzz-gpu")

#: Recorded launches: nothing runs, so these are cheap everywhere.
STATUS_SETTINGS = settings(_BASE, max_examples=600 if SIMULATOR else 3000)
GEMM_STATUS_SETTINGS = settings(_BASE, max_examples=400 if SIMULATOR else 2000)
#: Real launches: each launched example costs about a second under the simulator.
LAUNCH_SETTINGS = settings(_BASE, max_examples=36 if SIMULATOR else 200)
GEMM_LAUNCH_SETTINGS = settings(_BASE, max_examples=10 if SIMULATOR else 100)
#: gpu-marked variants: larger sizes, more examples.
GPU_LAUNCH_SETTINGS = settings(settings.get_profile("sgblas-fuzz-gpu"), max_examples=400)

# --------------------------------------------------------------------------------------------
# handles shared by every example
# --------------------------------------------------------------------------------------------

_HANDLES: dict[str, Any] = {}


def _handle(kind: str):
    """The handle argument of one example: an open handle or one of the invalid things."""
    if not _HANDLES:
        _HANDLES["open"] = sgblas.Handle()
        closed = sgblas.Handle()
        closed.close()
        _HANDLES["closed"] = closed
        _HANDLES["tf32"] = sgblas.Handle(math_mode=MathMode.TF32)
    return {"none": None, "object": object(), "string": "handle", "int": 0}.get(kind, _HANDLES.get(kind))


# --------------------------------------------------------------------------------------------
# the oracle's primitives: what docs/api.md says, written independently of sgblas
# --------------------------------------------------------------------------------------------

_TRANS_OK = frozenset(("N", "n", "T", "t"))


def _is_trans(v) -> bool:
    return isinstance(v, str) and v in _TRANS_OK


def _as_count(v) -> int | None:
    """The value of an integer (not bool) in [0, 2**31 - 1], else None (check 4)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        return None
    v = int(v)
    return v if 0 <= v <= INT32_MAX else None


def _as_real(v) -> float | None:
    """The value of a real number (not bool, complex, str, None), else None (check 6).

    A real too large for a double (``10**400``) cannot be "rounded to float32 before use"
    without a rule the docs do not give; the only thing the contract certainly requires is
    that sgemm does not raise, so the oracle expects INVALID_VALUE for it.
    """
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        return None
    try:
        return float(v)
    except (OverflowError, ValueError, TypeError):
        return None


def _f32(x: float) -> np.float32:
    with np.errstate(over="ignore"):
        return np.float32(x)


def _is_zero_scalar(x: float) -> bool:
    """docs/api.md: "alpha and beta are host numbers rounded to float32 before use", and
    "alpha == 0 (exactly; -0.0 counts as zero)": the value used is the rounded one, so an
    alpha that rounds to zero in float32 (say 1e-46) is zero."""
    return _f32(x) == 0


# --------------------------------------------------------------------------------------------
# operands: built by the test, described to the oracle by what the test built
# --------------------------------------------------------------------------------------------

#: kinds of operand: the first few are valid device arrays, the rest are invalid in some way
VALID_KINDS = ("contig", "strided", "rows2d", "window", "fortran")
INVALID_KINDS = ("none", "host", "f64", "i32", "misaligned", "negstride", "oddstride", "bigendian",
                 "half", "broken", "malformed", "negshape", "int", "readonly")


@dataclasses.dataclass
class OperandSpec:
    """How the test builds one matrix argument.

    ``delta`` is the extent minus the elements the matrix needs (negative: too small);
    ``in_arena`` puts it in the buffer shared by all operands (so it may overlap another);
    ``offset`` picks its place there (a fraction of the free room).
    """

    kind: str
    delta: int
    in_arena: bool
    offset: float


@dataclasses.dataclass
class Facts:
    """What the oracle knows about a built operand (computed by the test, not by sgblas)."""

    invalid: bool
    base: int | None = None      # index into the list of base buffers
    offset: int = 0              # element offset of the data pointer in that base
    extent: int = 0              # elements spanned upwards from the data pointer
    readonly: bool = False
    ptr: int = 0


class _Exporter:
    """An object exporting a hand-written ``__cuda_array_interface__`` over a base buffer."""

    def __init__(self, owner, cai):
        self._owner = owner  # keeps the memory alive
        self.__cuda_array_interface__ = cai

    def __repr__(self) -> str:
        cai = self.__cuda_array_interface__
        return f"_Exporter(shape={cai.get('shape')}, strides={cai.get('strides')}, typestr={cai.get('typestr')!r})"


class _Broken:
    """An exporter whose interface raises when read."""

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("this exporter is broken on purpose")


class _Malformed:
    """An exporter whose interface lacks required keys."""

    __cuda_array_interface__ = {"version": 3, "shape": (4,)}


def base_pointer(d) -> int:
    """The address of element 0 of a (simulated or real) device array."""
    if SIMULATOR:
        return int(d._ary.__array_interface__["data"][0])
    return int(d.__cuda_array_interface__["data"][0])


def _cai(ptr: int, shape, strides, typestr="<f4", readonly=False) -> dict:
    return {"version": 3, "shape": tuple(shape), "strides": strides, "typestr": typestr,
            "data": (ptr, readonly), "descr": [("", typestr)]}


class World:
    """The device buffers of one example and the arguments built over them."""

    def __init__(self, rng: np.random.Generator, arena_len: int):
        self.rng = rng
        self.bases: list = []
        self.arena = self._new_base(arena_len)

    def _new_base(self, length: int, dtype=np.float32) -> int:
        host = self.rng.standard_normal(max(1, length)).astype(dtype)
        self.bases.append(cuda.to_device(host))
        return len(self.bases) - 1

    def snapshot(self) -> list[np.ndarray]:
        """Each base's elements in memory order (flat), as offsets into it count them."""
        return [b.copy_to_host().ravel(order="K") for b in self.bases]

    def build(self, spec: OperandSpec, needed: int, cap: int) -> tuple[Any, Facts]:
        """The argument for ``spec`` whose span is about ``needed + delta`` elements."""
        target = min(max(0, needed + spec.delta), cap)
        kind = spec.kind
        if kind == "none":
            return None, Facts(True)
        if kind == "int":
            return 12345, Facts(True)
        if kind == "host":
            return np.zeros(max(1, target), np.float32), Facts(True)
        if kind == "broken":
            return _Broken(), Facts(True)
        if kind == "malformed":
            return _Malformed(), Facts(True)
        if kind in ("f64", "i32"):
            b = self._new_base(max(1, target), np.float64 if kind == "f64" else np.int32)
            return self.bases[b], Facts(True)
        if kind == "fortran":
            # A real F-ordered 2-D device array of its own: rows x cols covering the target.
            rows = max(1, min(target, 3))
            cols = max(1, -(-target // rows))
            host = np.asfortranarray(self.rng.standard_normal((rows, cols)).astype(np.float32))
            self.bases.append(cuda.to_device(host))
            b = len(self.bases) - 1
            return self.bases[b], Facts(False, b, 0, rows * cols, False, base_pointer(self.bases[b]))

        # Everything else lives in a float32 base: the arena or a buffer of its own.
        # ``span`` is the memory the argument describes (upwards; |strides| for the invalid ones).
        if kind == "strided":
            length = max(1, (target + 2) // 2)
            span = 2 * length - 1
        elif kind == "window":
            # rows x cols inside a larger column-major matrix (ld = ldx > rows), spanning
            # exactly the target: (cols - 1) * ldx + rows.
            if target <= 2:
                rows, cols, ldx = target, 1, max(1, target)
            else:
                rows, cols = (target - 1) // 2, 2
                ldx = target - rows
            span = (cols - 1) * ldx + rows
        elif kind in ("negstride", "oddstride"):
            length = max(2, target)
            span = 2 * length  # room below and above the pointer for the negative stride
        elif kind == "misaligned":
            span = target + 1
        else:  # contig, rows2d, readonly, bigendian, half, negshape
            span = target
        if spec.in_arena:
            arena_len = len(self.bases[self.arena])
            if span > arena_len:
                b = self._new_base(span)
                off = 0
            else:
                b = self.arena
                off = int(spec.offset * (arena_len - span))
        else:
            b = self._new_base(span)
            off = 0
        base = self.bases[b]
        ptr = base_pointer(base) + 4 * off

        if kind == "contig":
            x = base[off: off + target]
            return x, Facts(False, b, off, target, False, ptr)
        if kind == "strided":
            x = base[off: off + span: 2]
            return x, Facts(False, b, off, span if length > 1 else 1, False, ptr)
        if kind == "rows2d":
            shape = (2, target // 2) if target % 2 == 0 and target else (target, 1)
            x = base[off: off + target].reshape(shape)
            return x, Facts(False, b, off, target, False, ptr)
        if kind == "window":
            x = _Exporter(base, _cai(ptr, (rows, cols), (4, 4 * ldx)))
            return x, Facts(False, b, off, span if rows else 0, False, ptr)
        if kind == "readonly":
            x = _Exporter(base, _cai(ptr, (target,), None, readonly=True))
            return x, Facts(False, b, off, target, True, ptr)
        if kind == "misaligned":
            x = _Exporter(base, _cai(ptr + 2, (target,), None))
            return x, Facts(True)
        if kind == "negstride":
            x = _Exporter(base, _cai(ptr + 4 * length, (length,), (-4,)))
            return x, Facts(True)
        if kind == "oddstride":
            x = _Exporter(base, _cai(ptr, (length,), (6,)))
            return x, Facts(True)
        if kind == "bigendian":
            return _Exporter(base, _cai(ptr, (target,), None, typestr=">f4")), Facts(True)
        if kind == "half":
            return _Exporter(base, _cai(ptr, (target,), None, typestr="<f2")), Facts(True)
        if kind == "negshape":
            return _Exporter(base, _cai(ptr, (-1,), None)), Facts(True)
        raise AssertionError(f"unknown operand kind {kind}")


# --------------------------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------------------------

def _weighted(pairs):
    """sampled_from with integer weights; the first value is where shrinking goes."""
    return st.sampled_from([v for w, v in pairs for _ in range(w)])


def _dims(max_dim: int, rough: bool):
    valid = st.integers(1, max_dim)
    if not rough:
        return _weighted([(12, "valid"), (1, "zero")]).flatmap(
            lambda w: valid if w == "valid" else st.just(0))
    invalid = st.sampled_from([-1, -2**31, 2**31, 2**63, 10**30, 10**5000, True, False, 1.0, 2.5, None,
                               "3", np.int64(-1), np.uint64(2**40), 3 + 0j])
    valid_np = st.integers(0, max_dim).map(lambda v: np.int32(v))
    return _weighted([(40, "valid"), (3, "zero"), (3, "np"), (3, "invalid"), (1, "huge")]).flatmap(
        lambda w: {"valid": valid, "zero": st.just(0), "np": valid_np, "invalid": invalid,
                   "huge": st.just(INT32_MAX)}[w])


def _trans(rough: bool):
    ok = st.sampled_from(["N", "T", "n", "t"])
    if not rough:
        return ok
    bad = st.sampled_from(["X", "", "NN", "C", None, 0, b"N", True, 1.5, np.str_("Q")])
    return _weighted([(36, "ok"), (1, "str_"), (2, "bad")]).flatmap(
        lambda w: ok if w == "ok" else (st.just(np.str_("T")) if w == "str_" else bad))


#: how a leading dimension is drawn, relative to the rows it must cover
LD_MODES_VALID = ("min", "pad1", "pad3", "align4", "np")
LD_MODES_INVALID = ("below", "zero", "neg", "too_big", "too_long", "bool", "float", "none", "str")


def _ld_value(mode: str, rows: int):
    lo = max(1, rows)
    return {
        "min": lo, "pad1": rows + 1, "pad3": rows + 3, "align4": -(-lo // 4) * 4, "np": np.int64(lo + 2),
        "huge": INT32_MAX, "below": rows - 1, "zero": 0, "neg": -1, "too_big": 2**31, "too_long": -10**5000,
        "bool": True,
        "float": float(lo), "none": None, "str": str(lo),
    }[mode]


def _ld_mode(rough: bool):
    if not rough:
        return st.sampled_from(LD_MODES_VALID[:4])
    return _weighted([(36, "valid"), (1, "huge"), (2, "invalid")]).flatmap(
        lambda w: st.sampled_from(LD_MODES_VALID) if w == "valid"
        else (st.just("huge") if w == "huge" else st.sampled_from(LD_MODES_INVALID)))


_NICE_SCALARS = (1.0, -1.5, 0.5, 2.0, 0.0, -0.0, 1, np.float32(0.75), np.float64(-2.0))


def _scalar(rough: bool):
    nice = st.sampled_from(_NICE_SCALARS)
    if not rough:
        return nice
    floats = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
    odd_valid = st.sampled_from([1e-46, -1e-46, 5e-324, 1e-40, 1e39, -1e39, np.float16(1.5), np.int8(-3),
                                 np.uint64(2**64 - 1), Fraction(1, 3), np.longdouble(0.25), 2**70])
    invalid = st.sampled_from([None, "1", True, False, 1j, np.complex64(1), [1.0], np.bool_(True),
                               10**400, -10**400, Fraction(10**400, 3), 10**5000])
    return _weighted([(30, "nice"), (4, "floats"), (3, "odd"), (2, "invalid")]).flatmap(
        lambda w: {"nice": nice, "floats": floats, "odd": odd_valid, "invalid": invalid}[w])


def _operand(rough: bool):
    if rough:
        kind = _weighted([(12, "valid"), (1, "invalid")]).flatmap(
            lambda w: st.sampled_from(VALID_KINDS if w == "valid" else INVALID_KINDS))
        delta = _weighted([(10, 0), (2, 1), (1, 4), (1, -1)])
    else:
        kind = _weighted([(16, "contig"), (2, "strided"), (2, "rows2d"), (2, "window"), (1, "fortran"),
                          (1, "none"), (1, "f64"), (1, "host"), (1, "readonly")])
        delta = _weighted([(8, 0), (2, 3), (1, -1)])
    return st.builds(OperandSpec, kind, delta, st.booleans(), st.floats(0, 1))


@dataclasses.dataclass
class SgemmCall:
    handle: str
    transa: Any
    transb: Any
    m: Any
    n: Any
    k: Any
    lda_mode: str
    ldb_mode: str
    ldc_mode: str
    alpha: Any
    beta: Any
    a: OperandSpec
    b: OperandSpec
    c: OperandSpec
    seed: int


def sgemm_calls(max_dim: int, rough: bool):
    """Random sgemm calls: ``rough`` ones break every rule; the others are mostly valid."""
    handle = (_weighted([(60, "open"), (1, "none"), (1, "closed"), (1, "tf32"), (1, "object"), (1, "string")])
              if rough else _weighted([(30, "open"), (1, "closed")]))
    return st.builds(SgemmCall, handle, _trans(rough), _trans(rough), _dims(max_dim, rough),
                     _dims(max_dim, rough), _dims(max_dim, rough), _ld_mode(rough), _ld_mode(rough),
                     _ld_mode(rough), _scalar(rough), _scalar(rough), _operand(rough), _operand(rough),
                     _operand(rough), st.integers(0, 2**32 - 1))


# --------------------------------------------------------------------------------------------
# building a call, and the oracle
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Expectation:
    status: Status
    culprits: tuple[str, ...] = ()   # names the message must contain
    launch: str | None = None        # "gemm", "scale" or None
    m: int = 0
    n: int = 0
    k: int = 0
    lda: int = 0
    ldb: int = 0
    ldc: int = 0
    alpha: float = 0.0
    beta: float = 0.0
    ta: str = "N"
    tb: str = "N"


def _nominal_count(v, fallback: int, cap: int) -> int:
    c = _as_count(v)
    return c if c is not None and c <= cap else fallback


def build_sgemm(call: SgemmCall, max_dim: int = 64):
    """``(args, world, facts)``: sgemm's arguments for ``call`` over fresh device buffers.

    Sizes up to ``max_dim`` are built as drawn; larger (valid but huge) ones are given buffers
    sized for 2, which are then too small, as they would be for any real huge size.
    """
    rng = np.random.default_rng(call.seed)
    cap = 4 * (max_dim + 4) ** 2  # elements of the largest buffer
    m = _nominal_count(call.m, 2, max_dim)
    n = _nominal_count(call.n, 2, max_dim)
    k = _nominal_count(call.k, 2, max_dim)
    ta = call.transa.upper() if _is_trans(call.transa) else "N"
    tb = call.transb.upper() if _is_trans(call.transb) else "N"
    a_rows, a_cols = (m, k) if ta == "N" else (k, m)
    b_rows, b_cols = (k, n) if tb == "N" else (n, k)
    lda = _ld_value(call.lda_mode, a_rows)
    ldb = _ld_value(call.ldb_mode, b_rows)
    ldc = _ld_value(call.ldc_mode, m)

    def needed(rows, cols, ld):
        ld_ok = _as_count(ld)
        ld_n = ld_ok if ld_ok is not None else max(1, rows)
        return (max(cols, 1) - 1) * ld_n + rows

    sizes = [needed(a_rows, a_cols, lda), needed(b_rows, b_cols, ldb), needed(m, n, ldc)]
    arena_len = min(cap, max(8, sum(min(s, cap) for s in sizes) // 2 + 8))
    world = World(rng, arena_len)
    (A, fa), (B, fb), (C, fc) = (world.build(spec, size, cap)
                                 for spec, size in zip((call.a, call.b, call.c), sizes))
    args = (_handle(call.handle), call.transa, call.transb, call.m, call.n, call.k, call.alpha, A, lda,
            B, ldb, call.beta, C, ldc)
    return args, world, (fa, fb, fc)


def expected_sgemm(call: SgemmCall, args, facts) -> Expectation:
    """The status docs/api.md prescribes, following its numbered checks in order."""
    handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc = args
    fa, fb, fc = facts
    # 1, 2: the handle
    if call.handle not in ("open", "tf32"):
        return Expectation(Status.NOT_INITIALIZED, ("handle",))
    if call.handle == "tf32":
        return Expectation(Status.NOT_SUPPORTED, ("TF32",))
    # 3: transposes
    if not _is_trans(transa):
        return Expectation(Status.INVALID_VALUE, ("transa",))
    if not _is_trans(transb):
        return Expectation(Status.INVALID_VALUE, ("transb",))
    ta, tb = transa.upper(), transb.upper()
    # 4: sizes
    dims = {}
    for name, v in (("m", m), ("n", n), ("k", k)):
        dims[name] = _as_count(v)
        if dims[name] is None:
            return Expectation(Status.INVALID_VALUE, (name,))
    m, n, k = dims["m"], dims["n"], dims["k"]
    # 5: leading dimensions
    a_rows, a_cols = (m, k) if ta == "N" else (k, m)
    b_rows, b_cols = (k, n) if tb == "N" else (n, k)
    lds = {}
    for name, v, rows in (("lda", lda, a_rows), ("ldb", ldb, b_rows), ("ldc", ldc, m)):
        lds[name] = _as_count(v)
        if lds[name] is None or lds[name] < max(1, rows):
            return Expectation(Status.INVALID_VALUE, (name,))
    lda, ldb, ldc = lds["lda"], lds["ldb"], lds["ldc"]
    # 6: scalars
    a_val, b_val = _as_real(alpha), _as_real(beta)
    if a_val is None:
        return Expectation(Status.INVALID_VALUE, ("alpha",))
    if b_val is None:
        return Expectation(Status.INVALID_VALUE, ("beta",))
    done = dict(m=m, n=n, k=k, lda=lda, ldb=ldb, ldc=ldc, alpha=a_val, beta=b_val, ta=ta, tb=tb)
    # 7: empty output
    if m == 0 or n == 0:
        return Expectation(Status.SUCCESS, **done)
    # 8: C
    c_needed = (n - 1) * ldc + m
    if fc.invalid or fc.extent < c_needed or fc.readonly:
        return Expectation(Status.INVALID_VALUE, ("C",))
    # 9: nothing to read in A and B
    if k == 0 or _is_zero_scalar(a_val):
        return Expectation(Status.SUCCESS, launch="scale", **done)
    # 10: A, then B
    a_needed = (a_cols - 1) * lda + a_rows
    b_needed = (b_cols - 1) * ldb + b_rows
    if fa.invalid or fa.extent < a_needed:
        return Expectation(Status.INVALID_VALUE, ("A",))
    if fb.invalid or fb.extent < b_needed:
        return Expectation(Status.INVALID_VALUE, ("B",))

    # 11: overlap with C (same base buffer and intersecting element intervals)
    def overlaps(f, f_needed):
        return (f.base == fc.base and f.offset < fc.offset + c_needed and fc.offset < f.offset + f_needed)

    if overlaps(fa, a_needed):
        return Expectation(Status.INVALID_VALUE, ("A", "C"))
    if overlaps(fb, b_needed):
        return Expectation(Status.INVALID_VALUE, ("B", "C"))
    return Expectation(Status.SUCCESS, launch="gemm", **done)


def _names(message: str | None, names: tuple[str, ...]) -> bool:
    return message is not None and all(
        re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) for name in names)


# --------------------------------------------------------------------------------------------
# recording launchers
# --------------------------------------------------------------------------------------------

class Recorder:
    """Stands in for the one launch function (``sgblas.dispatch.plan.launch``): records each
    launch as ``(role, (kernel, grid, *args))``, runs nothing."""

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []

    def launch(self, kernel, grid, stream, args, after=False):
        self.calls.append((by_name(kernel.name).role, (kernel, grid) + tuple(args)))

    @contextlib.contextmanager
    def installed(self):
        with mock.patch.object(plan_module, "launch", self.launch):
            yield self


def _same_scalar(got: float, want: float) -> bool:
    g, w = _f32(got), _f32(want)
    return (np.isnan(g) and np.isnan(w)) or (g == w and np.signbit(g) == np.signbit(w))


def check_recorded_launch(rec: Recorder, exp: Expectation, facts, handle) -> None:
    """The launch the API made is the one the oracle expects."""
    if exp.status != Status.SUCCESS or exp.launch is None:
        assert rec.calls == [], f"launched {rec.calls[0][0] if rec.calls else ''} although expecting {exp}"
        return
    assert len(rec.calls) == 1, f"expected one {exp.launch} launch, got {[c[0] for c in rec.calls]}"
    what, args = rec.calls[0]
    assert what == exp.launch
    fa, fb, fc = facts
    c_needed = (exp.n - 1) * exp.ldc + exp.m
    if what == "scale":
        loaded, grid, m, n, beta, c_ptr, c_extent, ldc = args
        assert (m, n, ldc) == (exp.m, exp.n, exp.ldc)
        assert _same_scalar(beta, exp.beta), (beta, exp.beta)
        assert c_ptr == fc.ptr and c_needed <= c_extent == fc.extent
        assert loaded.name == SCALE_KERNEL.name and grid == SCALE_KERNEL.grid(m, n, 0)
        return
    (loaded, grid, m, n, k, alpha, a_ptr, a_extent, lda, b_ptr, b_extent, ldb,
     beta, c_ptr, c_extent, ldc) = args
    assert (m, n, k, lda, ldb, ldc) == (exp.m, exp.n, exp.k, exp.lda, exp.ldb, exp.ldc)
    assert _same_scalar(alpha, exp.alpha) and _same_scalar(beta, exp.beta), (alpha, beta, exp)
    assert (a_ptr, a_extent) == (fa.ptr, fa.extent)
    assert (b_ptr, b_extent) == (fb.ptr, fb.extent)
    assert (c_ptr, c_extent) == (fc.ptr, fc.extent)
    # The variant implements the requested pair and its guard accepts the problem.
    spec = by_name(loaded.name)
    assert spec.pair == (exp.ta, exp.tb), (loaded.name, exp.ta, exp.tb)
    problem = GemmProblem(handle.cc, handle.math_mode, exp.ta, exp.tb, m, n, k, a_ptr, lda, b_ptr, ldb,
                          c_ptr, ldc)
    assert spec.can_implement(problem) is None, loaded.name
    assert grid == spec.grid(m, n, k)


# --------------------------------------------------------------------------------------------
# checking a real result
# --------------------------------------------------------------------------------------------

def check_buffers(exp: Expectation, world: World, before: list[np.ndarray], facts, label: str) -> None:
    """Unless SUCCESS with work to do, nothing changed; else exactly C's elements, correctly."""
    after = world.snapshot()
    fa, fb, fc = facts
    changed_ok = [np.zeros(b.shape, bool) for b in before]
    if exp.status == Status.SUCCESS and exp.m and exp.n:
        cb = before[fc.base]
        c_buf = cb[fc.offset:]
        a_buf = before[fa.base][fa.offset:] if exp.launch == "gemm" else None
        b_buf = before[fb.base][fb.offset:] if exp.launch == "gemm" else None
        k = exp.k if exp.launch == "gemm" else 0
        ref, scale = reference_gemm(exp.ta, exp.tb, exp.m, exp.n, k, exp.alpha,
                                    a_buf, exp.lda, b_buf, exp.ldb, exp.beta, c_buf, exp.ldc)
        got = as_matrix(after[fc.base][fc.offset:], exp.m, exp.n, exp.ldc)
        # C holds float32: where the float64 value is beyond float32's range the right
        # stored result is +-Inf, so compare with the reference rounded the same way.
        with np.errstate(over="ignore", invalid="ignore"):
            ref = ref.astype(np.float32).astype(np.float64)
        ok, ratio, where = compare(got, ref, scale, k)
        assert ok, f"{label}: C is wrong, error {ratio:.3g}x tolerance at {where}"
        mask = np.zeros(len(c_buf), bool)
        for j in range(exp.n):
            mask[j * exp.ldc: j * exp.ldc + exp.m] = True
        changed_ok[fc.base][fc.offset:] = mask
    for i, (b0, b1) in enumerate(zip(before, after)):
        same = (b0.view(np.uint8).reshape(b0.size, -1) == b1.view(np.uint8).reshape(b1.size, -1)).all(axis=1)
        # (byte rows: NaN payloads compare too, and any dtype works)
        bad = ~same & ~changed_ok[i]
        assert not bad.any(), (f"{label}: buffer {i} changed at elements {np.flatnonzero(bad)[:8]} "
                               f"although {'the call failed' if exp.status else 'they are not in C'}")


# --------------------------------------------------------------------------------------------
# sgemm: statuses with recorded launches (many examples, cheap)
# --------------------------------------------------------------------------------------------

def _run_status_example(call: SgemmCall, max_dim: int) -> None:
    args, world, facts = build_sgemm(call, max_dim)
    exp = expected_sgemm(call, args, facts)
    note(f"expected {exp}")
    event(f"{exp.status.name} {exp.culprits or exp.launch or ''}")
    rec = Recorder()
    before = world.snapshot()
    with rec.installed():
        try:
            status = sgblas.sgemm(*args)
        except BaseException as exc:  # the property under test: sgemm never raises
            raise AssertionError(f"sgemm raised {type(exc).__name__}: {exc}") from exc
    message = sgblas.last_error_message()
    assert isinstance(status, Status), f"sgemm returned {status!r}, not a Status"
    assert status == exp.status, f"status {status.name}, expected {exp.status.name} ({message!r})"
    if status != Status.SUCCESS:
        assert message and _names(message, exp.culprits), (
            f"last_error_message() {message!r} does not name {exp.culprits}")
    check_recorded_launch(rec, exp, facts, args[0])
    check_buffers(Expectation(Status.INVALID_VALUE), world, before, facts, "recorded launch")


@STATUS_SETTINGS
@given(call=sgemm_calls(max_dim=12, rough=True))
def test_sgemm_statuses_follow_the_documented_check_order(call):
    _run_status_example(call, 12)


# --------------------------------------------------------------------------------------------
# sgemm: real launches (few, tiny examples under the simulator)
# --------------------------------------------------------------------------------------------

def _run_launch_example(call: SgemmCall, max_dim: int, poison_c: bool = True) -> None:
    args, world, facts = build_sgemm(call, max_dim)
    exp = expected_sgemm(call, args, facts)
    note(f"expected {exp}")
    event(f"{exp.status.name} {exp.culprits or exp.launch or ''}")
    fc = facts[2]
    if poison_c and exp.status == Status.SUCCESS and exp.m and exp.n and _is_zero_scalar(exp.beta):
        # beta == 0: C is never read, so NaN in it must not reach the result.
        host = world.bases[fc.base].copy_to_host()
        flat = host.ravel(order="K")  # memory order, as offsets count (a view: bases are contiguous)
        assert np.shares_memory(flat, host)
        for j in range(exp.n):
            flat[fc.offset + j * exp.ldc: fc.offset + j * exp.ldc + exp.m] = np.nan
        world.bases[fc.base].copy_to_device(host)
    before = world.snapshot()
    try:
        status = sgblas.sgemm(*args)
    except BaseException as exc:
        raise AssertionError(f"sgemm raised {type(exc).__name__}: {exc}") from exc
    message = sgblas.last_error_message()
    assert status == exp.status, f"status {Status(status).name}, expected {exp.status.name} ({message!r})"
    if status != Status.SUCCESS:
        assert _names(message, exp.culprits), f"{message!r} does not name {exp.culprits}"
    check_buffers(exp, world, before, facts, f"seed={call.seed}")


@LAUNCH_SETTINGS
@given(call=sgemm_calls(max_dim=5, rough=False))
def test_sgemm_launches_write_only_c_and_only_on_success(call):
    _run_launch_example(call, 5)


@pytest.mark.gpu
@GPU_LAUNCH_SETTINGS
@given(call=sgemm_calls(max_dim=300, rough=False))
def test_sgemm_launches_gpu(call):
    _run_launch_example(call, 300)


@pytest.mark.gpu
@settings(GPU_LAUNCH_SETTINGS, max_examples=2000)
@given(call=sgemm_calls(max_dim=64, rough=True))
def test_sgemm_rough_calls_launch_for_real_gpu(call):
    """On a GPU every rough call launches for real: statuses, names and buffers together."""
    _run_launch_example(call, 64, poison_c=False)


# --------------------------------------------------------------------------------------------
# gemm
# --------------------------------------------------------------------------------------------

GEMM_VALID = ("F", "C", "Fwin", "Cwin")
GEMM_INVALID = ("none", "host", "f64", "1d", "3d", "bothstrided", "int")
GEMM_INVALID_C = tuple(kind for kind in GEMM_INVALID if kind != "none")  # c=None is "absent"


@dataclasses.dataclass
class GemmCall:
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    a: str
    b: str
    c: str            # also "absent" (c=None) and "is_a" (c is the array a)
    k_b_delta: int    # op(b) has k + k_b_delta rows
    c_shape_delta: tuple[int, int]
    alpha: Any
    beta: Any
    seed: int


def gemm_calls(max_dim: int, rough: bool):
    dim = (_weighted([(8, "valid"), (1, "zero")]).flatmap(
        lambda w: st.integers(1, max_dim) if w == "valid" else st.just(0))
        if rough else st.integers(1, max_dim))
    kinds = (_weighted([(8, "valid"), (3, "invalid")]).flatmap(
        lambda w: st.sampled_from(GEMM_VALID if w == "valid" else GEMM_INVALID))
        if rough else st.sampled_from(GEMM_VALID))
    c_kinds = (_weighted([(6, "valid"), (2, "absent"), (1, "is_a"), (2, "invalid")]).flatmap(
        lambda w: st.sampled_from(GEMM_VALID) if w == "valid" else (
            st.just(w) if w in ("absent", "is_a") else st.sampled_from(GEMM_INVALID_C)))
        if rough else _weighted([(4, "valid"), (1, "absent")]).flatmap(
            lambda w: st.sampled_from(GEMM_VALID) if w == "valid" else st.just("absent")))
    k_delta = _weighted([(8, 0), (1, 1), (1, -1)]) if rough else st.just(0)
    c_delta = _weighted([(8, (0, 0)), (1, (1, 0)), (1, (0, -1)), (1, (1, 1))]) if rough else st.just((0, 0))
    return st.builds(GemmCall, dim, dim, dim, st.booleans(), st.booleans(), kinds, kinds, c_kinds, k_delta,
                     c_delta, _scalar(rough), _scalar(rough), st.integers(0, 2**32 - 1))


def _gemm_array(rng, kind: str, shape: tuple[int, int]):
    """``(device argument, host copy or None)`` of a 2-D operand of logical ``shape``."""
    rows, cols = shape
    if kind == "none":
        return None, None
    if kind == "int":
        return 7, None
    if kind == "host":
        return np.zeros(shape, np.float32), None
    if kind == "f64":
        return cuda.to_device(np.zeros(shape)), None
    if kind == "1d":
        return cuda.to_device(np.zeros(max(1, rows * cols), np.float32)), None
    if kind == "3d":
        return cuda.to_device(np.zeros((1, rows, cols), np.float32)), None
    if kind == "bothstrided":
        # Strided in both dimensions, so no leading dimension describes it (a 1-row or
        # 1-column view would have one after all: those shapes get a 1-D array instead).
        if rows < 2 or cols < 2:
            return cuda.to_device(np.zeros(max(1, rows * cols), np.float32)), None
        big = cuda.to_device(np.zeros((2 * rows, 2 * cols), np.float32))
        return big[::2, ::2], None
    host = rng.standard_normal(shape).astype(np.float32)
    if kind in ("F", "C"):
        host = np.asfortranarray(host) if kind == "F" else np.ascontiguousarray(host)
        return cuda.to_device(host), host
    # A window (rows x cols) inside a larger array of the same order: one unit stride, ld > extent.
    order = "F" if kind == "Fwin" else "C"
    big = np.asarray(rng.standard_normal((rows + 3, cols + 2)), dtype=np.float32, order=order)
    big[1:1 + rows, 2:2 + cols] = host
    return cuda.to_device(big)[1:1 + rows, 2:2 + cols], host


def expected_gemm(call: GemmCall):
    """``(error names or None, m, n, k, beta used)`` for gemm, from docs/api.md."""
    m, n, k = call.m, call.n, call.k
    if call.a not in GEMM_VALID:
        return ("a",)
    if call.b not in GEMM_VALID:
        return ("b",)
    if call.k_b_delta:
        return ("a", "b")  # inner dimensions differ: both named
    if call.c in ("absent", "is_a"):
        pass
    elif call.c not in GEMM_VALID:
        return ("c",)
    elif call.c_shape_delta != (0, 0):
        return ("c",)
    if _as_real(call.alpha) is None:
        return ("alpha",)
    if call.c != "absent" and _as_real(call.beta) is None:
        return ("beta",)
    if m == 0 or n == 0:
        return None
    if call.c == "is_a" and k and not _is_zero_scalar(_as_real(call.alpha)):
        return ("a", "c")  # a's storage overlaps c's
    return None


def build_gemm(call: GemmCall):
    rng = np.random.default_rng(call.seed)
    m, n, k = call.m, call.n, call.k
    if call.c == "is_a":  # c is a itself: a must then be m x n as op(a) is m x k
        n = k = call.k
        call = dataclasses.replace(call, n=n, trans_a=False, k_b_delta=0, c_shape_delta=(0, 0))
    a_shape = (k, m) if call.trans_a else (m, k)
    kb = max(0, k + call.k_b_delta)
    if call.k_b_delta and kb == k:
        call = dataclasses.replace(call, k_b_delta=0)
    b_shape = (n, kb) if call.trans_b else (kb, n)
    a, a_host = _gemm_array(rng, call.a, a_shape)
    b, b_host = _gemm_array(rng, call.b, b_shape)
    if call.c == "absent":
        c, c_host = None, None
    elif call.c == "is_a":
        c, c_host = a, a_host
    else:
        dm, dn = call.c_shape_delta
        c_shape = (m + dm, n + dn) if min(m + dm, n + dn) >= 0 else (m + 1, n)  # still not m x n
        c, c_host = _gemm_array(rng, call.c, c_shape)
    return call, (a, b, c), (a_host, b_host, c_host)


def _run_gemm_example(call: GemmCall, recorded: bool) -> None:
    call, (a, b, c), (a_host, b_host, c_host) = build_gemm(call)
    expected = expected_gemm(call)
    note(f"expected error naming {expected}")
    event(f"error naming {expected}" if expected else f"success{' (empty)' if not (call.m and call.n) else ''}")
    rec = Recorder()
    ctx = rec.installed() if recorded else contextlib.nullcontext()
    with ctx:
        try:
            out = sgblas.gemm(a, b, c, alpha=call.alpha, beta=call.beta, trans_a=call.trans_a,
                              trans_b=call.trans_b)
            error = None
        except SgblasError as exc:
            error = exc
        except BaseException as exc:
            raise AssertionError(f"gemm raised {type(exc).__name__} (not SgblasError): {exc}") from exc
    if expected is None:
        assert error is None, f"gemm raised {error!r}, expected success"
        assert c is None or out is c
        if recorded:
            assert len(rec.calls) == (1 if call.m and call.n else 0)
            return
        m, n, k = call.m, call.n, call.k
        if m == 0 or n == 0:
            return
        alpha = float(_as_real(call.alpha))
        beta = 0.0 if call.c == "absent" else float(_as_real(call.beta))
        got = out.copy_to_host()
        opa = (a_host.T if call.trans_a else a_host).astype(np.float64)
        opb = (b_host.T if call.trans_b else b_host).astype(np.float64)
        a32, b32 = float(_f32(alpha)), float(_f32(beta))
        if _is_zero_scalar(alpha) or k == 0:
            ref = np.zeros((m, n))
            scale = np.zeros((m, n))
        else:
            ref = a32 * (opa @ opb)
            scale = abs(a32) * (np.abs(opa) @ np.abs(opb))
        if b32 != 0:
            ref = ref + b32 * c_host.astype(np.float64)
            scale = scale + abs(b32) * np.abs(c_host.astype(np.float64))
        ok, ratio, where = compare(got, ref, scale, k)
        assert ok, f"seed={call.seed}: gemm result error {ratio:.3g}x tolerance at {where}"
        return
    assert error is not None, f"gemm succeeded, expected an error naming {expected}"
    message = str(error)
    assert message.strip(), "the error has no sentence"
    assert _names(message, expected), f"{message!r} does not name {expected}"
    assert isinstance(error, InvalidValueError) and error.status == Status.INVALID_VALUE, repr(error)
    if recorded:
        assert rec.calls == [], "gemm launched although it raised"


@GEMM_STATUS_SETTINGS
@given(call=gemm_calls(max_dim=6, rough=True))
def test_gemm_raises_naming_the_argument(call):
    _run_gemm_example(call, recorded=True)


@GEMM_LAUNCH_SETTINGS
@given(call=gemm_calls(max_dim=5, rough=False))
def test_gemm_results_for_random_layouts(call):
    _run_gemm_example(call, recorded=False)


@pytest.mark.gpu
@settings(GPU_LAUNCH_SETTINGS, max_examples=300)
@given(call=gemm_calls(max_dim=200, rough=False))
def test_gemm_results_for_random_layouts_gpu(call):
    _run_gemm_example(call, recorded=False)


# --------------------------------------------------------------------------------------------
# the oracle's own checks, and what the fuzzing found, pinned as plain tests
# --------------------------------------------------------------------------------------------

def test_oracle_follows_the_documented_order():
    """A few hand-checked verdicts, so a wrong oracle cannot pass everything by agreeing."""
    ok = OperandSpec("contig", 0, False, 0.0)
    base = SgemmCall("open", "N", "N", 3, 2, 4, "min", "min", "min", 1.0, 0.0, ok, ok, ok, 1)
    cases = [
        (dict(), Status.SUCCESS, ()),
        (dict(handle="none", m=-1), Status.NOT_INITIALIZED, ("handle",)),
        (dict(handle="tf32", transa="X"), Status.NOT_SUPPORTED, ("TF32",)),
        (dict(transb="", m=-1), Status.INVALID_VALUE, ("transb",)),
        (dict(m=True), Status.INVALID_VALUE, ("m",)),
        (dict(k=2**31, lda_mode="zero"), Status.INVALID_VALUE, ("k",)),
        (dict(ldb_mode="below", alpha=None), Status.INVALID_VALUE, ("ldb",)),
        (dict(beta="0"), Status.INVALID_VALUE, ("beta",)),
        (dict(n=0, c=OperandSpec("none", 0, False, 0.0)), Status.SUCCESS, ()),
        (dict(c=OperandSpec("contig", -1, False, 0.0), a=OperandSpec("none", 0, False, 0.0)),
         Status.INVALID_VALUE, ("C",)),
        (dict(k=0, a=OperandSpec("none", 0, False, 0.0)), Status.SUCCESS, ()),
        (dict(alpha=1e-46, a=OperandSpec("host", 0, False, 0.0)), Status.SUCCESS, ()),
        (dict(b=OperandSpec("f64", 0, False, 0.0)), Status.INVALID_VALUE, ("B",)),
        (dict(c=OperandSpec("readonly", 0, False, 0.0)), Status.INVALID_VALUE, ("C",)),
        (dict(a=OperandSpec("readonly", 0, False, 0.0)), Status.SUCCESS, ()),
        (dict(alpha=10**400), Status.INVALID_VALUE, ("alpha",)),
    ]
    for override, status, names in cases:
        call = dataclasses.replace(base, **override)
        args, world, facts = build_sgemm(call)
        exp = expected_sgemm(call, args, facts)
        assert (exp.status, exp.culprits) == (status, names), (override, exp)
    # Overlap: A and C at the same place of the arena.
    same = OperandSpec("contig", 0, True, 0.0)
    call = dataclasses.replace(base, a=same, c=same)
    args, world, facts = build_sgemm(call)
    assert expected_sgemm(call, args, facts).culprits == ("A", "C")


def test_huge_integer_scalar_is_a_status_not_an_exception():
    """docs/api.md: sgemm never raises. ``float(10**400)`` raises OverflowError inside
    ``sgblas.api._scalar``; it must become INVALID_VALUE (or any status), not escape."""
    with sgblas.Handle() as h:
        a = cuda.to_device(np.ones(4, np.float32))
        c = cuda.to_device(np.zeros(4, np.float32))
        for alpha, beta in ((10**400, 0.0), (1.0, -10**400), (Fraction(10**400, 3), 0.0)):
            try:
                status = sgblas.sgemm(h, "N", "N", 2, 2, 2, alpha, a, 2, a, 2, beta, c, 2)
            except OverflowError as exc:
                pytest.fail(f"sgemm raised OverflowError for alpha={str(alpha)[:12]}..., "
                            f"beta={str(beta)[:12]}...: {exc}")
            assert status == Status.INVALID_VALUE
            np.testing.assert_array_equal(c.copy_to_host(), 0.0)


@pytest.mark.parametrize("argument", ["m", "lda", "alpha"])
def test_integers_too_long_to_print_are_a_status(argument):
    """Python refuses to turn an int of more than 4300 digits into text (ValueError), so a
    message built with ``f"{value}"`` raises inside sgemm; it must return INVALID_VALUE."""
    values = dict(m=2, lda=2, alpha=1.0)
    values[argument] = 10**5000
    with sgblas.Handle() as h:
        a = cuda.to_device(np.ones(4, np.float32))
        c = cuda.to_device(np.zeros(4, np.float32))
        try:
            status = sgblas.sgemm(h, "N", "N", values["m"], 2, 2, values["alpha"], a, values["lda"], a, 2,
                                  0.0, c, 2)
        except ValueError as exc:
            pytest.fail(f"sgemm raised ValueError for {argument}=10**5000: {exc}")
        assert status == Status.INVALID_VALUE
        assert _names(sgblas.last_error_message(), (argument,))
        np.testing.assert_array_equal(c.copy_to_host(), 0.0)


def test_alpha_that_rounds_to_zero_does_not_examine_a_and_b():
    """alpha = 1e-46 is 0 once rounded to float32 (the value used), so A and B are not read and
    their arguments not examined (docs/api.md check 9): None for A must be SUCCESS."""
    with sgblas.Handle() as h:
        c = cuda.to_device(np.full(4, 3.0, np.float32))
        status = sgblas.sgemm(h, "N", "N", 2, 2, 2, 1e-46, None, 2, None, 2, 0.5, c, 2)
        assert status == Status.SUCCESS, sgblas.last_error_message()
        np.testing.assert_array_equal(c.copy_to_host(), 1.5)
