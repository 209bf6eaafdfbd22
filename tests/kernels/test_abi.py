"""Each calling convention is written once; what it derives matches what Numba compiles.

For every ABI of :mod:`sgblas.kernels.abi` a probe kernel with that signature is compiled to
PTX for sm_90 (no GPU needed; a subprocess, since the test session may run under the
simulator), and its entry's parameter list is compared with the ABI's packed layout: the same
number of parameters, in the same order, of the same sizes. The packer is checked to put each
value where the layout says.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import child_env
from sgblas.kernels import abi
from sgblas.runtime.abi import ARRAY, INT32_ARRAY, Abi

ARRAYS = (ARRAY, INT32_ARRAY)

REPO = str(Path(__file__).resolve().parents[2])
ABIS = {name: value for name, value in vars(abi).items() if isinstance(value, Abi)}

_SCRIPT = r"""
import json, re, sys
from numba import cuda
from sgblas.kernels import abi
out = {}
for name in sys.argv[1:]:
    a = getattr(abi, name)
    params = ", ".join(p for p, _ in a.params)
    namespace = {}
    exec(f"def probe({params}):\n    pass\n", namespace)
    ptx, _ = cuda.compile_ptx(namespace["probe"], a.signature().args, cc=(9, 0))
    entry = re.search(r"\.entry\s+\w+\s*\((.*?)\)", ptx, re.S).group(1)
    out[name] = re.findall(r"\.param\s+\.(\w+)", entry)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def ptx_params() -> dict[str, list[str]]:
    env = child_env(NUMBA_ENABLE_CUDASIM="0")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, *ABIS], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(ABIS))
def test_layout_matches_the_ptx_parameter_list(ptx_params, name):
    a = ABIS[name]
    sizes = [int(re.sub(r"\D", "", t)) // 8 for t in ptx_params[name]]
    layout = struct.Struct(a.struct_format)
    slot_sizes = []
    for _, kind in a.params:
        slot_sizes += [8] * 7 if kind in ARRAYS else [4]
    assert sizes == slot_sizes, (name, ptx_params[name])
    assert len(a.offsets) == len(sizes)
    assert all(off % size == 0 for off, size in zip(a.offsets, sizes))  # natural alignment
    assert layout.size >= a.offsets[-1] + sizes[-1]


@pytest.mark.parametrize("name", sorted(ABIS))
def test_the_packer_puts_each_value_at_its_offset(name):
    import ctypes

    a = ABIS[name]
    values, expected = [], []
    for i, (_, kind) in enumerate(a.params):
        if kind in ARRAYS:
            ptr, extent = 0x7F0000000000 + 16 * i, 1000 + i
            values += [ptr, extent]
            expected += [0, 0, extent, 4, ptr, extent, 4]
        else:
            v = 3 + i if kind == "i32" else 0.5 + i
            values.append(v)
            expected.append(v)
    address = a.pack(*values)
    storage = a.layout.buffers()[0]
    pointers = ctypes.cast(address, ctypes.POINTER(ctypes.c_void_p))
    for slot, (offset, want) in enumerate(zip(a.offsets, expected)):
        assert pointers[slot] == ctypes.addressof(storage) + offset
        fmt = "<q" if isinstance(want, int) and (want > 2**31 or slot_is_array(a, slot)) else (
            "<f" if isinstance(want, float) else "<i")
        got = struct.unpack_from(fmt, storage, offset)[0]
        assert got == want, (name, slot, got, want)


def slot_is_array(a: Abi, slot: int) -> bool:
    i = 0
    for _, kind in a.params:
        width = 7 if kind in ARRAYS else 1
        if slot < i + width:
            return kind in ARRAYS
        i += width
    raise IndexError(slot)


@pytest.mark.parametrize("name", sorted(ABIS))
def test_a_repeated_pack_keeps_the_bytes_and_any_change_repacks(name):
    """The packer skips packing arguments it packed last; whatever differs, down to a float's
    sign bit (0.0 == -0.0), is packed again."""
    a = ABIS[name]
    storage = a.layout.buffers()[0]

    def args(shift: int, zero: float) -> list:
        values = []
        for i, (_, kind) in enumerate(a.params):
            if kind in ARRAYS:
                values += [0x7F0000000000 + 16 * (i + shift), 1000 + i + shift]
            else:
                values.append(3 + i + shift if kind == "i32" else zero)
        return values

    def packed(values: list) -> bytes:
        a.pack(*values)
        return bytes(storage)

    first = packed(args(0, 0.0))
    assert packed(args(0, 0.0)) == first
    if any(kind == "f32" for _, kind in a.params):
        negative = packed(args(0, -0.0))
        assert negative != first  # the sign bit of every float parameter differs
        assert packed(args(0, 0.0)) == first
    other = packed(args(1, 0.0))
    assert other != first
    assert packed(args(0, 0.0)) == first
    fresh = Abi(a.name, a.params)  # a packer of its own: packs from scratch
    fresh.pack(*args(1, 0.0))
    assert bytes(fresh.layout.buffers()[0]) == other
