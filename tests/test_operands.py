"""Reading a caller's array when the caller is hostile: malformed ``__cuda_array_interface__``
exporters, masks, pointers and extents beyond the kernels' 64-bit parameters, and DLPack.

Every malformed input must give ``Status.INVALID_VALUE`` from ``sgemm`` (never an exception),
``InvalidValueError`` from ``gemm`` (never a bare ``ValueError`` or ``TypeError``), a message
naming the argument and the bad value, every buffer bit for bit as it was, and a process that
still computes: a valid call right after is checked against the float64 reference.

DLPack exporters here build their capsules by hand with ctypes over the memory of a Numba
device array (host memory under the simulator, device memory on a GPU), so the capsule's
every field can be made wrong, and the tests can see which arguments ``__dlpack__`` received
and whether the producer's capsule was destroyed (its deleter's cue) after the call.
"""

from __future__ import annotations

import ctypes
import re
from typing import Any, Callable

import numpy as np
import pytest
from numba import cuda

import sgblas
from sgblas import InvalidValueError, SgblasError, Status
from sgblas.operands import matrix_view, read_operand
from sgblas.testing import as_matrix, compare, reference_values as reference_gemm
from sgblas.runtime.device import SIMULATOR

SEED = 20261216
M = N = K = 2  # every refusal is tested on a 2 x 2 x 2 call, so each operand spans 4 elements


@pytest.fixture(scope="module")
def handle():
    with sgblas.Handle() as h:
        yield h


def device_pointer(d: Any) -> int:
    """The address of element 0 of a (simulated or real) Numba device array."""
    if SIMULATOR:
        return int(d._ary.__array_interface__["data"][0])
    return int(d.__cuda_array_interface__["data"][0])


def _names(message: str | None, name: str) -> bool:
    pattern = rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])"
    return message is not None and re.search(pattern, message) is not None


class World:
    """Valid operands of a 2 x 2 x 2 call (1-D and 2-D), and a base buffer for hostile exporters."""

    def __init__(self, seed: int = SEED) -> None:
        rng = np.random.default_rng(seed)
        self.host = {name: rng.standard_normal(4).astype(np.float32) for name in "ABC"}
        self.flat = {name: cuda.to_device(value) for name, value in self.host.items()}
        self.square = {name.lower(): cuda.to_device(np.asfortranarray(value.reshape(2, 2, order="F")))
                       for name, value in self.host.items()}
        self.base = cuda.to_device(np.arange(16, dtype=np.float32))

    def snapshot(self) -> list[bytes]:
        arrays = [*self.flat.values(), *self.square.values(), self.base]
        return [a.copy_to_host().tobytes(order="A") for a in arrays]


def _assert_healthy(handle: sgblas.Handle, seed: int, full: bool = not SIMULATOR) -> None:
    """A valid call right after a refusal launches and is right.

    Under the simulator a GEMM launch is slow, so there the call after each refusal is
    ``C = beta * C`` (alpha = 0: a real launch, validated and checked like any other), and
    :func:`test_hostile_inputs_in_a_row_then_a_full_gemm` runs a full GEMM after all of them.
    """
    world = World(seed)
    a, b, c = (world.flat[name] for name in "ABC")
    alpha = 1.5 if full else 0.0
    status = sgblas.sgemm(handle, "N", "T", M, N, K, alpha, a, M, b, N, 0.5, c, M)
    assert status == Status.SUCCESS, sgblas.last_error_message()
    ref, scale = reference_gemm("N", "T", M, N, K, alpha, world.host["A"], M, world.host["B"], N, 0.5,
                                world.host["C"], M)
    ok, ratio, where = compare(as_matrix(c.copy_to_host(), M, N, M), ref, scale, K)
    assert ok, f"the call after the refusal is wrong: error {ratio:.3g}x tolerance at {where}"


def _assert_refused_everywhere(handle: sgblas.Handle, world: World, hostile: Any, words: tuple[str, ...]) -> None:
    """``hostile`` as each of A, B, C of sgemm and as a and c of gemm: refused with a sentence
    naming the argument and ``words``, nothing written."""
    before = world.snapshot()
    for position in "ABC":
        args = dict(world.flat)
        args[position] = hostile
        try:
            status = sgblas.sgemm(handle, "N", "N", M, N, K, 1.0, args["A"], M, args["B"], K, 0.0, args["C"], M)
        except BaseException as exc:  # noqa: BLE001 - the point: nothing may escape
            pytest.fail(f"sgemm raised {type(exc).__name__} for {position}: {exc}")
        message = sgblas.last_error_message()
        assert status == Status.INVALID_VALUE, f"{position}: {Status(status).name} ({message!r})"
        assert _names(message, position), f"{message!r} does not name {position}"
        for word in words:
            assert word in message, f"{message!r} lacks {word!r}"
    for position in "ac":
        args = dict(world.square)
        args[position] = hostile
        with pytest.raises(SgblasError) as info:
            sgblas.gemm(args["a"], args["b"], args["c"], handle=handle)
        assert isinstance(info.value, InvalidValueError) and info.value.status == Status.INVALID_VALUE
        message = str(info.value)
        assert _names(message, position), f"{message!r} does not name {position}"
        for word in words:
            assert word in message, f"{message!r} lacks {word!r}"
    assert world.snapshot() == before, "a refused call changed a buffer"


# --- hostile __cuda_array_interface__ exporters ---------------------------------------------

_DROP = object()


class Exporter:
    """A hand-written ``__cuda_array_interface__`` (any value at all) over ``owner``'s memory."""

    def __init__(self, cai: Any, owner: Any = None) -> None:
        self._cai = cai
        self._owner = owner  # keeps the memory alive

    @property
    def __cuda_array_interface__(self) -> Any:
        return self._cai

    def __repr__(self) -> str:
        return "Exporter(...)"


class Raising:
    """An exporter whose interface property raises ``exc``."""

    def __init__(self, exc: BaseException) -> None:
        self._exc = exc

    @property
    def __cuda_array_interface__(self) -> Any:
        raise self._exc


class _Unprintable:
    """A value that is no integer and cannot even be shown."""

    def __index__(self) -> int:
        raise RuntimeError("no index")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class _ExplodingDict(dict):
    def __contains__(self, key: object) -> bool:
        raise KeyError("explodes on lookup")


def _cai(ptr: int, **changes: Any) -> dict:
    cai = {"version": 3, "shape": (16,), "strides": None, "typestr": "<f4", "data": (ptr, False)}
    for key, value in changes.items():
        if value is _DROP:
            del cai[key]
        else:
            cai[key] = value
    return cai


# (id, builder of the hostile argument from the base buffer's pointer, words the message holds)
CAI_CASES: list[tuple[str, Callable[[int], Any], tuple[str, ...]]] = [
    ("pointer is a string", lambda p: _cai(p, data=(hex(p), False)), ("data pointer '0x", "not an integer")),
    ("pointer is a float", lambda p: _cai(p, data=(float(p), False)), ("data pointer", "not an integer")),
    ("pointer is a bool", lambda p: _cai(p, data=(True, False)), ("data pointer True",)),
    ("pointer is negative", lambda p: _cai(p, data=(-4096, False)), ("-4096", "64-bit address")),
    ("pointer is 2**64", lambda p: _cai(p, data=(2**64, False)), ("18446744073709551616", "64-bit address")),
    ("pointer is 2**63", lambda p: _cai(p, data=(2**63, False)), ("0x8000000000000000", "2**63")),
    ("pointer + extent wraps", lambda p: _cai(p, data=(2**64 - 32, False)), ("0xffffffffffffffe0", "wraps")),
    ("pointer is null", lambda p: _cai(p, data=(0, False)), ("null data pointer",)),
    ("pointer is None", lambda p: _cai(p, data=(None, False)), ("null data pointer",)),
    ("pointer is misaligned", lambda p: _cai(p + 2), ("4-byte aligned",)),
    ("data is an int", lambda p: _cai(p, data=p), ("(pointer, read-only flag) pair",)),
    ("data is a triple", lambda p: _cai(p, data=(p, False, 0)), ("(pointer, read-only flag) pair",)),
    ("data is a 1-tuple", lambda p: _cai(p, data=(p,)), ("(pointer, read-only flag) pair",)),
    ("read-only flag is a string", lambda p: _cai(p, data=(p, "no")), ("read-only flag 'no'",)),
    ("read-only flag is None", lambda p: _cai(p, data=(p, None)), ("read-only flag None",)),
    ("typestr is a list", lambda p: _cai(p, typestr=["<f4"]), ("typestr ['<f4']",)),
    ("typestr is a dict", lambda p: _cai(p, typestr={"<f4": 1}), ("typestr {'<f4': 1}",)),
    ("typestr is float64", lambda p: _cai(p, typestr="<f8"), ("'<f8'", "float32")),
    ("typestr is big-endian", lambda p: _cai(p, typestr=">f4"), ("'>f4'",)),
    ("shape has a float", lambda p: _cai(p, shape=(16.0,)), ("shape (16.0,)", "not an integer")),
    ("shape has a bool", lambda p: _cai(p, shape=(True,)), ("shape (True,)",)),
    ("shape has a NumPy bool", lambda p: _cai(p, shape=(np.True_,)), ("not an integer",)),
    ("shape has None", lambda p: _cai(p, shape=(None,)), ("entry None",)),
    ("shape is negative", lambda p: _cai(p, shape=(-1,)), ("negative shape (-1,)",)),
    ("shape is beyond int64", lambda p: _cai(p, shape=(2**64,)), ("18446744073709551616", "int64")),
    ("shape cannot be printed", lambda p: _cai(p, shape=(10**5000,)), ("digits",)),
    ("shape entry cannot be shown", lambda p: _cai(p, shape=(_Unprintable(),)), ("cannot be shown",)),
    ("shape is an int", lambda p: _cai(p, shape=16), ("shape 16",)),
    ("shape is a string", lambda p: _cai(p, shape="16"), ("shape '16'",)),
    ("shape spans beyond int64 bytes", lambda p: _cai(p, shape=(2**61,)), ("2**63 - 1 bytes",)),
    ("strides span beyond int64 bytes", lambda p: _cai(p, shape=(3,), strides=(2**62,)), ("2**63 - 1 bytes",)),
    ("2-D extent beyond int64 bytes", lambda p: _cai(p, shape=(2**31, 2**31), strides=(4, 2**33)),
     ("2**63 - 1 bytes",)),
    ("strides is an int", lambda p: _cai(p, strides=4), ("strides 4",)),
    ("strides hold None", lambda p: _cai(p, strides=(None,)), ("strides (None,)", "entry None")),
    ("strides hold a float", lambda p: _cai(p, strides=(4.0,)), ("entry 4.0",)),
    ("strides hold a bool", lambda p: _cai(p, strides=(True,)), ("entry True",)),
    ("strides beyond int64", lambda p: _cai(p, strides=(2**63,)), ("int64",)),
    ("more strides than dimensions", lambda p: _cai(p, strides=(4, 4)), ("2 strides for 1 dimensions",)),
    ("fewer strides than dimensions", lambda p: _cai(p, shape=(2, 2), strides=(4,)), ("1 strides for 2 dimensions",)),
    ("strides not multiples of 4", lambda p: _cai(p, strides=(6,)), ("multiples of 4 bytes",)),
    ("negative strides", lambda p: _cai(p + 60, strides=(-4,)), ("negative strides",)),
    ("version is a string", lambda p: _cai(p, version="3"), ("version '3'",)),
    ("version is a float", lambda p: _cai(p, version=3.0), ("version 3.0",)),
    ("version is None", lambda p: _cai(p, version=None), ("version None",)),
    ("a mask", lambda p: _cai(p, mask=(p, False)), ("mask",)),
    ("no typestr", lambda p: _cai(p, typestr=_DROP), ("no 'typestr' entry",)),
    ("no shape", lambda p: _cai(p, shape=_DROP), ("no 'shape' entry",)),
    ("no data", lambda p: _cai(p, data=_DROP), ("no 'data' entry",)),
    ("interface is a list", lambda p: list(_cai(p).items()), ("not a dict",)),
    ("interface is None", lambda p: None, ("None, not a dict",)),
    ("interface lookups raise", lambda p: _ExplodingDict(_cai(p)), ("could not be read", "KeyError")),
]

RAISING_CASES: list[tuple[str, BaseException, tuple[str, ...]]] = [
    ("RuntimeError", RuntimeError("broken on purpose"), ("raised RuntimeError: broken on purpose",)),
    ("ValueError", ValueError("bad"), ("raised ValueError",)),
    ("TypeError", TypeError("bad"), ("raised TypeError",)),
    ("KeyError", KeyError("bad"), ("raised KeyError",)),
    ("AttributeError", AttributeError("none here"), ("not a device array",)),
]


@pytest.mark.parametrize("build, words", [pytest.param(b, w, id=i) for i, b, w in CAI_CASES])
def test_malformed_interface_is_invalid_value(handle, build, words):
    world = World()
    _assert_refused_everywhere(handle, world, Exporter(build(device_pointer(world.base)), world.base), words)
    _assert_healthy(handle, SEED + 1)


@pytest.mark.parametrize("exc, words", [pytest.param(e, w, id=i) for i, e, w in RAISING_CASES])
def test_interface_that_raises_is_invalid_value(handle, exc, words):
    _assert_refused_everywhere(handle, World(), Raising(exc), words)
    _assert_healthy(handle, SEED + 2)


@pytest.mark.parametrize("hostile, words", [
    pytest.param(12345, ("of type int", "not a device array"), id="an int"),
    pytest.param(object(), ("of type object", "not a device array"), id="an object"),
    pytest.param("A", ("of type str", "not a device array"), id="a string"),
])
def test_non_arrays_are_invalid_value(handle, hostile, words):
    _assert_refused_everywhere(handle, World(), hostile, words)


def test_lenient_but_valid_interface_is_read(handle):
    """What the interface allows but rarely sees: NumPy integers, lists, an explicit None mask,
    a NumPy bool flag, explicit contiguous strides, no version."""
    world = World(SEED + 3)
    ptr = device_pointer(world.flat["A"])
    cai = {"shape": [np.int64(4)], "strides": [np.int32(4)], "typestr": "<f4",
           "data": [np.uint64(ptr), np.False_], "mask": None}
    a = Exporter(cai, world.flat["A"])
    b, c = world.flat["B"], world.flat["C"]
    status = sgblas.sgemm(handle, "N", "T", M, N, K, 1.5, a, M, b, N, 0.5, c, M)
    assert status == Status.SUCCESS, sgblas.last_error_message()
    ref, scale = reference_gemm("N", "T", M, N, K, 1.5, world.host["A"], M, world.host["B"], N, 0.5,
                                world.host["C"], M)
    ok, ratio, where = compare(as_matrix(c.copy_to_host(), M, N, M), ref, scale, K)
    assert ok, f"error {ratio:.3g}x tolerance at {where}"


# --- the 64-bit limits, read directly --------------------------------------------------------

def test_extents_at_the_int64_limit_are_accepted_and_beyond_refused():
    base = cuda.to_device(np.zeros(16, np.float32))
    ptr = device_pointer(base)
    limit = (2**63 - 1) // 4  # float32 elements whose byte count fits int64
    at = read_operand(Exporter(_cai(ptr, shape=(limit,)), base), "A")
    assert not isinstance(at, str), at
    assert at.extent == limit
    beyond = read_operand(Exporter(_cai(ptr, shape=(limit + 1,)), base), "A")
    assert isinstance(beyond, str) and "2**63 - 1 bytes" in beyond


@pytest.mark.skipif(not SIMULATOR, reason="only the simulator calls any address device memory")
def test_pointers_at_the_64_bit_limits():
    """Under the simulator every address is device memory, so the limits alone decide."""
    below = read_operand(Exporter(_cai(2**63 - 64)), "A")  # 16 elements end exactly at 2**63
    assert not isinstance(below, str), below
    for ptr, words in ((2**63, "2**63"), (2**64 - 32, "wraps"), (2**64, "64-bit address"), (-4, "64-bit address")):
        refusal = read_operand(Exporter(_cai(ptr)), "A")
        assert isinstance(refusal, str) and words in refusal, (ptr, refusal)


def test_empty_array_needs_no_pointer():
    op = read_operand(Exporter(_cai(0, shape=(0, 4))), "A")
    assert not isinstance(op, str), op
    assert op.extent == 0 and op.device is None


@pytest.mark.parametrize("shape, strides", [
    (None, None), ((2, 2), "ab"), ((2, 2), (1,)), ((_Unprintable(), 2), (1, 2)),
    ((2, 2), (None, 1)), ("ab", None), (object(), None),
])
def test_matrix_view_never_raises(shape, strides):
    assert isinstance(matrix_view(shape, strides, "a"), str)


# --- DLPack, with capsules made by hand -------------------------------------------------------
# The producer's structs are written out from the DLPack header here rather than imported from
# sgblas.operands: a field that sgblas laid out wrong must then fail these tests, not cancel out.

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


# Capsule names must outlive their capsules: these module constants do.
_VERSIONED, _UNVERSIONED, _USED = b"dltensor_versioned", b"dltensor", b"used_dltensor"
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_GetName", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_made: dict[int, "DLPackArray"] = {}  # managed tensor address -> its exporter, until destroyed


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _destroy_capsule(capsule: int) -> None:
    # What a producer's capsule destructor does: a capsule still carrying its original name was
    # not consumed, so the producer runs its deleter (here: counts it).
    name = _capsule_name(capsule)
    exporter = _made.pop(_capsule_pointer(capsule, name), None)
    if exporter is not None:
        exporter.destroyed += 1
        if name in (_VERSIONED, _UNVERSIONED):
            exporter.deleted += 1


_NOTHING = object()
_RAISES = object()  # a __dlpack_device__ that raises


class DLPackArray:
    """A DLPack-only exporter of a Numba device array's memory, each capsule field settable.

    ``strides`` are in elements; by default the array's own, or NULL when it is C-contiguous.
    ``accepts`` lists the keyword arguments ``__dlpack__`` takes (others raise TypeError, as a
    producer written before them does). ``calls`` records each call's arguments; ``made``,
    ``destroyed`` and ``deleted`` count capsules made, destroyed, and destroyed unconsumed (so
    the producer's deleter ran).
    """

    def __init__(self, d: Any, *, shape: tuple | None = None, strides: Any = "array", device: Any = (2, 0),
                 tensor_device: int = 2, dtype: tuple = (2, 32, 1), flags: int = 0, version: tuple = (1, 0),
                 byte_offset: int = 0, data: int | None = None, ndim: int | None = None,
                 null_shape: bool = False, accepts: tuple = ("stream", "max_version", "dl_device", "copy"),
                 name: bytes | None = None, returns: Any = _NOTHING, raises: BaseException | None = None) -> None:
        self._array = d  # keeps the memory alive
        self.shape = tuple(d.shape) if shape is None else shape
        if strides == "array":
            elements = tuple(s // 4 for s in d.strides)
            contiguous = tuple(int(np.prod(self.shape[i + 1:])) for i in range(len(self.shape)))
            strides = None if elements == contiguous else elements
        self.strides = strides
        self.device, self.tensor_device, self.dtype = device, tensor_device, dtype
        self.flags, self.version, self.byte_offset = flags, version, byte_offset
        self.data = device_pointer(d) if data is None else data
        self.ndim = len(self.shape) if ndim is None else ndim
        self.null_shape, self.accepts, self.name = null_shape, accepts, name
        self.returns, self.raises = returns, raises
        self.calls: list[dict] = []
        self.made = self.destroyed = self.deleted = 0
        self._keep: list = []

    def __dlpack_device__(self) -> Any:
        if self.device is _RAISES:
            raise ZeroDivisionError("no device today")
        return self.device

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        for key in kwargs:
            if key not in self.accepts:
                raise TypeError(f"__dlpack__() got an unexpected keyword argument {key!r}")
        if self.raises is not None:
            raise self.raises
        if self.returns is not _NOTHING:
            return self.returns
        max_version = kwargs.get("max_version")
        return self._capsule(max_version is not None and max_version[0] >= 1)

    def _capsule(self, versioned: bool) -> Any:
        managed = _DLManagedTensorVersioned() if versioned else _DLManagedTensor()
        if versioned:
            managed.version.major, managed.version.minor = self.version
            managed.flags = self.flags
        t = managed.dl_tensor
        t.data = self.data
        t.device.device_type, t.device.device_id = self.tensor_device, 0
        t.ndim = self.ndim
        t.dtype.code, t.dtype.bits, t.dtype.lanes = self.dtype
        shape = (ctypes.c_int64 * max(1, len(self.shape)))(*self.shape)
        t.shape = ctypes.cast(None if self.null_shape else shape, ctypes.POINTER(ctypes.c_int64))
        strides = None if self.strides is None else (ctypes.c_int64 * max(1, len(self.strides)))(*self.strides)
        t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = self.byte_offset
        self._keep += [managed, shape, strides]
        name = self.name or (_VERSIONED if versioned else _UNVERSIONED)
        address = ctypes.addressof(managed)
        _made[address] = self
        self.made += 1
        return _capsule_new(address, name, ctypes.cast(_destroy_capsule, ctypes.c_void_p))

    def __repr__(self) -> str:
        return "DLPackArray(...)"


def _dlpack_world(seed: int, **options: Any) -> tuple[World, dict, dict]:
    world = World(seed)
    flat = {name: DLPackArray(d, **options) for name, d in world.flat.items()}
    square = {name: DLPackArray(d, **options) for name, d in world.square.items()}
    return world, flat, square


def _assert_sgemm_right(world: World, c_device: Any) -> None:
    ref, scale = reference_gemm("N", "T", M, N, K, 1.5, world.host["A"], M, world.host["B"], N, 0.5,
                                world.host["C"], M)
    ok, ratio, where = compare(as_matrix(c_device.copy_to_host(), M, N, M), ref, scale, K)
    assert ok, f"error {ratio:.3g}x tolerance at {where}"


def test_dlpack_operands_through_sgemm(handle):
    world, flat, _ = _dlpack_world(SEED + 10)
    status = sgblas.sgemm(handle, "N", "T", M, N, K, 1.5, flat["A"], M, flat["B"], N, 0.5, flat["C"], M)
    assert status == Status.SUCCESS, sgblas.last_error_message()
    _assert_sgemm_right(world, world.flat["C"])
    for name, x in flat.items():
        # The legacy default stream (raw handle 0) is 1 in DLPack's numbering, and the exporter
        # is asked for a versioned capsule of the array itself.
        assert x.calls == [{"stream": 1, "max_version": (1, 0), "copy": False}], (name, x.calls)
        assert x.made == x.deleted == 1, f"{name}: {x.made} capsules made, {x.deleted} destroyed unconsumed"


@pytest.mark.parametrize("accepts, requests, versioned", [
    (("stream", "max_version"), 2, True),
    (("stream",), 3, False),
])
def test_dlpack_exporters_of_older_signatures(handle, accepts, requests, versioned):
    world, flat, _ = _dlpack_world(SEED + 11, accepts=accepts)
    status = sgblas.sgemm(handle, "N", "T", M, N, K, 1.5, flat["A"], M, flat["B"], N, 0.5, flat["C"], M)
    assert status == Status.SUCCESS, sgblas.last_error_message()
    _assert_sgemm_right(world, world.flat["C"])
    for x in flat.values():
        assert len(x.calls) == requests and all(call["stream"] == 1 for call in x.calls), x.calls
        assert ("max_version" in x.calls[-1]) == versioned
        assert x.made == x.deleted == 1


def test_dlpack_byte_offset_and_read_only_input(handle):
    world = World(SEED + 12)
    padded = cuda.to_device(np.concatenate([np.full(3, np.nan, np.float32), world.host["A"]]))
    a = DLPackArray(padded, shape=(4,), byte_offset=12, flags=1)  # read-only: fine for an input
    b, c = DLPackArray(world.flat["B"]), DLPackArray(world.flat["C"])
    status = sgblas.sgemm(handle, "N", "T", M, N, K, 1.5, a, M, b, N, 0.5, c, M)
    assert status == Status.SUCCESS, sgblas.last_error_message()
    _assert_sgemm_right(world, world.flat["C"])


def test_dlpack_read_only_c_is_invalid(handle):
    world = World(SEED + 13)
    c = DLPackArray(world.flat["C"], flags=1)
    before = world.snapshot()
    status = sgblas.sgemm(handle, "N", "T", M, N, K, 1.5, world.flat["A"], M, world.flat["B"], N, 0.5, c, M)
    assert status == Status.INVALID_VALUE
    assert "C is read-only" in sgblas.last_error_message()
    assert world.snapshot() == before
    assert c.made == c.deleted == 1


@pytest.mark.parametrize("orders", ["FCF", "CFC", "FFN", "CCN"])
def test_dlpack_operands_through_gemm(handle, orders):
    """2-D exporters of either memory order (strides given, or NULL for C order); N: no c."""
    rng = np.random.default_rng(SEED + 14)
    host = {name: np.asarray(rng.standard_normal((3, 3)), np.float32, order=order)
            for name, order in zip("abc", orders) if order != "N"}
    arrays = {name: DLPackArray(cuda.to_device(value)) for name, value in host.items()}
    out = sgblas.gemm(arrays["a"], arrays["b"], arrays.get("c"), alpha=1.5, beta=0.5, handle=handle)
    got = out._array.copy_to_host() if isinstance(out, DLPackArray) else out.copy_to_host()
    ref = 1.5 * host["a"].astype(np.float64) @ host["b"].astype(np.float64)
    scale = 1.5 * np.abs(host["a"].astype(np.float64)) @ np.abs(host["b"].astype(np.float64))
    if "c" in host:
        ref += 0.5 * host["c"]
        scale += 0.5 * np.abs(host["c"])
    ok, ratio, where = compare(got, ref, scale, 3)
    assert ok, f"{orders}: error {ratio:.3g}x tolerance at {where}"
    for x in arrays.values():
        assert x.made == x.deleted == 1


@pytest.mark.parametrize("stream, expected", [(0, 1), (1, 1), (2, 2), (0x7F00DEAD0000, 0x7F00DEAD0000)])
def test_dlpack_is_told_the_consumer_stream(stream, expected):
    """The producer orders its work before the stream the call will run on: the handle's raw
    stream, with the legacy default stream numbered 1 as the array API standard asks."""
    x = DLPackArray(cuda.to_device(np.zeros(4, np.float32)))
    op = read_operand(x, "A", stream=stream)
    assert not isinstance(op, str), op
    assert x.calls == [{"stream": expected, "max_version": (1, 0), "copy": False}]
    assert type(x.calls[0]["stream"]) is int
    assert op.owner is x
    assert x.made == x.deleted == 1, "the capsule outlived read_operand"


@pytest.mark.parametrize("hostile", ["numpy", "kDLCPU", "kDLCUDAHost"])
def test_dlpack_host_memory_is_refused_with_directions(handle, hostile):
    if hostile == "numpy":
        x = np.zeros(16, np.float32)  # exports __dlpack__ of kDLCPU memory
    else:
        x = DLPackArray(cuda.to_device(np.zeros(16, np.float32)), device=(1 if hostile == "kDLCPU" else 3, 0))
    words = ("not a device array", "host", "numba.cuda.to_device", "cupy.asarray", "tensor.cuda()")
    _assert_refused_everywhere(handle, World(), x, words)
    if isinstance(x, DLPackArray):
        assert x.calls == [], "host memory was exported: the refusal must come from __dlpack_device__"


# (id, exporter options, words the message holds)
DLPACK_CASES: list[tuple[str, dict, tuple[str, ...]]] = [
    ("dtype int32", dict(dtype=(0, 32, 1)), ("dtype code 0", "float32")),
    ("dtype float64", dict(dtype=(2, 64, 1)), ("64 bits",)),
    ("dtype of 4 lanes", dict(dtype=(2, 32, 4)), ("4 lanes",)),
    ("capsule on the host", dict(tensor_device=1), ("kDLCPU", "not a CUDA device")),
    ("device ROCm", dict(device=(10, 0)), ("kDLROCM", "not a CUDA device")),
    ("device of unknown type", dict(device=(99, 0)), ("does not name (99)",)),
    ("device is a string", dict(device="cuda:0"), ("'cuda:0'", "(device type, device id)")),
    ("device id is a float", dict(device=(2, 0.0)), ("(device type, device id)",)),
    ("__dlpack_device__ raises", dict(device=_RAISES), ("__dlpack_device__() raised ZeroDivisionError",)),
    ("__dlpack__ raises BufferError", dict(raises=BufferError("not exportable")),
     ("raised BufferError: not exportable",)),
    ("__dlpack__ raises RuntimeError", dict(raises=RuntimeError("gone")), ("raised RuntimeError: gone",)),
    ("__dlpack__ takes no stream", dict(accepts=()), ("refused a stream argument",)),
    ("__dlpack__ returns an int", dict(returns=42), ("returned 42", "DLPack capsule")),
    ("__dlpack__ returns None", dict(returns=None), ("returned None",)),
    ("capsule of another name", dict(name=b"not_a_tensor"), ("not an unconsumed DLPack capsule",)),
    ("capsule already consumed", dict(name=_USED), ("not an unconsumed DLPack capsule",)),
    ("DLPack 2.0", dict(version=(2, 0)), ("version 2.0",)),
    ("DLPack 0.8 in a versioned capsule", dict(version=(0, 8)), ("version 0.8",)),
    ("copied for export", dict(flags=2), ("copied",)),
    ("negative ndim", dict(ndim=-1), ("-1 dimensions",)),
    ("ndim beyond reason", dict(ndim=1000), ("1000 dimensions",)),
    ("null shape", dict(null_shape=True), ("null shape pointer",)),
    ("negative shape", dict(shape=(-4,)), ("negative shape (-4,)",)),
    ("negative stride", dict(shape=(4,), strides=(-1,), byte_offset=12), ("negative strides",)),
    ("null data", dict(data=0), ("null data pointer",)),
    ("data + byte_offset beyond 2**64", dict(data=2**64 - 16, byte_offset=64), ("64-bit address",)),
    ("data + extent wraps", dict(data=2**64 - 16), ("wraps",)),
    ("data at 2**63", dict(data=2**63), ("2**63",)),
    ("misaligned data", dict(byte_offset=2), ("4-byte aligned",)),
    ("shape beyond int64 bytes", dict(shape=(2**61,)), ("2**63 - 1 bytes",)),
]


@pytest.mark.parametrize("options, words", [pytest.param(o, w, id=i) for i, o, w in DLPACK_CASES])
def test_malformed_dlpack_is_invalid_value(handle, options, words):
    world = World()
    x = DLPackArray(world.base, **options)
    _assert_refused_everywhere(handle, world, x, words)
    assert x.made == x.destroyed, f"{x.made} capsules made, {x.destroyed} destroyed: one was kept"
    if options.get("name") is None:
        assert x.deleted == x.made, "a capsule was renamed, so its producer's deleter never ran"
    _assert_healthy(handle, SEED + 4)


def test_hostile_inputs_in_a_row_then_a_full_gemm(handle):
    """Every hostile input of the tables above, one call after another, then a GEMM that must
    launch and be right: no refusal leaves state behind that a later call trips on."""
    world = World()
    ptr = device_pointer(world.base)
    hostile = [Exporter(build(ptr), world.base) for _, build, _ in CAI_CASES]
    hostile += [Raising(exc) for _, exc, _ in RAISING_CASES]
    hostile += [DLPackArray(world.base, **options) for _, options, _ in DLPACK_CASES]
    hostile += [np.zeros(16, np.float32), 12345, object()]
    before = world.snapshot()
    for x in hostile:
        for args in ((x, world.flat["B"], world.flat["C"]), (world.flat["A"], world.flat["B"], x)):
            status = sgblas.sgemm(handle, "N", "N", M, N, K, 1.0, args[0], M, args[1], K, 0.0, args[2], M)
            assert status == Status.INVALID_VALUE, (x, sgblas.last_error_message())
    assert world.snapshot() == before
    _assert_healthy(handle, SEED + 5, full=True)
