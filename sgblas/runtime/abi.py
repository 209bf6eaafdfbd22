"""A kernel's calling convention, written once: its parameter list gives the Numba signature,
the packed parameter buffer ``cuLaunchKernel`` reads, the packer and the simulated call.

A parameter is an ``int32``, a ``float32``, or an array of 4-byte elements (``float32``, or
``int32`` for a serial split's semaphores). An array is passed in Numba's
ABI for a 1-D contiguous array, seven pointer-sized words: meminfo, parent, nitems, itemsize,
data, shape[0], strides[0] (bytes). A caller names an array by two numbers, its device
pointer and its extent in elements, so a launch packs ``(0, 0, extent, 4, ptr, extent, 4)``.

The packer is generated from the parameter list (one ``struct.pack_into`` with every value in
place), because per-call host cost is a measured goal and a loop that expands arrays costs
several microseconds more than the straight call. It skips even that when its thread's buffer
already holds the same arguments (the previous launch of this ABI on this thread was the same
call). ``tests/kernels/test_abi.py`` compiles every
ABI's kernels and checks the PTX parameter list against :meth:`Abi.layout`.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

from sgblas.runtime import driver

__all__ = ["Abi", "ARRAY", "INT32_ARRAY", "INT32", "FLOAT32"]

INT32, FLOAT32, ARRAY, INT32_ARRAY = "i32", "f32", "f32[]", "i32[]"
_ARRAYS = (ARRAY, INT32_ARRAY)
_ARRAY_WORDS = 7


class Abi:
    """The parameter list ``params`` = ``((name, kind), ...)`` of a family of kernels."""

    def __init__(self, name: str, params: tuple[tuple[str, str], ...]) -> None:
        for pname, kind in params:
            if kind not in (INT32, FLOAT32, *_ARRAYS):
                raise ValueError(f"parameter {pname} of ABI {name} has kind {kind!r}, not i32, f32, f32[] or i32[]")
        self.name = name
        self.params = params
        fmt, offsets, offset = ["<"], [], 0
        for _, kind in params:
            if kind in _ARRAYS:
                pad = -offset % 8
                fmt.append(f"{pad}x" if pad else "")
                offset += pad
                fmt.append(f"{_ARRAY_WORDS}q")
                offsets.extend(offset + 8 * i for i in range(_ARRAY_WORDS))
                offset += 8 * _ARRAY_WORDS
            else:
                fmt.append("i" if kind == INT32 else "f")
                offsets.append(offset)
                offset += 4
        self.struct_format = "".join(fmt)
        self.offsets = tuple(offsets)
        #: The per-thread packed buffer (see :class:`sgblas.runtime.driver.ParamLayout`).
        self.layout = driver.ParamLayout(self.struct_format, self.offsets)
        #: ``pack(*call_args) -> void**`` with each array given as ``ptr, extent``.
        self.pack: Callable[..., ctypes.c_void_p] = self._generate_packer()

    def call_arguments(self) -> list[str]:
        """The names a caller passes, arrays as ``<name>_ptr, <name>_extent``."""
        names = []
        for pname, kind in self.params:
            names += [f"{pname}_ptr", f"{pname}_extent"] if kind in _ARRAYS else [pname]
        return names

    def _generate_packer(self) -> Callable[..., ctypes.c_void_p]:
        packed, ints, floats = [], [], []
        for pname, kind in self.params:
            if kind in _ARRAYS:
                packed += ["0", "0", f"{pname}_extent", "4", f"{pname}_ptr", f"{pname}_extent", "4"]
                ints += [f"{pname}_ptr", f"{pname}_extent"]
            else:
                packed.append(pname)
                (floats if kind == FLOAT32 else ints).append(pname)
        # This thread's buffers; then, unless they already hold these very arguments, one
        # pack_into. Packing is most of a launch's host cost (about 30 values), and a caller
        # that repeats a call with the same arrays (a loop over preallocated buffers) packs the
        # same bytes again: the buffer is reused only by this thread and cuLaunchKernel copies
        # it at the launch, so equal arguments need no new pack. Integers are compared by value
        # (equal ints pack to equal bytes); floats by identity, since 0.0 == -0.0 but their bytes
        # differ.
        key = f"({', '.join(ints)},)"
        same = " and ".join(["last[0] == key"] + [f"last[{i + 1}] is {f}" for i, f in enumerate(floats)])
        remember = "; ".join(["last[0] = key"] + [f"last[{i + 1}] = {f}" for i, f in enumerate(floats)])
        source = (f"def pack({', '.join(self.call_arguments())}):\n"
                  f"    bufs = _getattr(_tls, _attribute, None) or _buffers()\n"
                  f"    last = bufs[3]\n"
                  f"    key = {key}\n"
                  f"    if {same}:\n"
                  f"        return bufs[2]\n"
                  f"    _pack_into(bufs[0], 0, {', '.join(packed)})\n"
                  f"    {remember}\n"
                  f"    return bufs[2]\n")
        pack_into, tls, attribute, buffers = self.layout.packer_parts(1 + len(floats))
        namespace = {"_pack_into": pack_into, "_tls": tls, "_attribute": attribute, "_buffers": buffers,
                     "_getattr": getattr}
        exec(compile(source, f"<abi {self.name} packer>", "exec"), namespace)  # noqa: S102 - generated above
        return namespace["pack"]

    def signature(self) -> Any:
        """The Numba signature (imports Numba: only for compiling)."""
        from numba import types

        kinds = {INT32: types.int32, FLOAT32: types.float32, ARRAY: types.Array(types.float32, 1, "C"),
                 INT32_ARRAY: types.Array(types.int32, 1, "C")}
        return types.void(*(kinds[kind] for _, kind in self.params))

    def simulate(self, dispatcher: Any, grid: tuple, block: tuple, stream: Any, args: tuple) -> None:
        """Run ``dispatcher`` (a simulated kernel) with ``args`` as :meth:`pack` takes them:
        each array becomes a view of the host memory at its pointer."""
        values, i = [], 0
        for _, kind in self.params:
            if kind in _ARRAYS:
                values.append(_host_view(args[i], args[i + 1], kind))
                i += 2
            else:
                values.append(args[i])
                i += 1
        dispatcher[grid, block, stream or 0](*values)

    def __repr__(self) -> str:
        return f"Abi({self.name!r}, {', '.join(f'{n}: {k}' for n, k in self.params)})"


def _host_view(ptr: int, extent: int, kind: str = ARRAY) -> Any:
    """A simulator device array over ``extent`` elements (float32, or int32 for ``INT32_ARRAY``)
    of host memory at ``ptr``."""
    import numpy as np
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    dtype, ctype = (np.int32, ctypes.c_int32) if kind == INT32_ARRAY else (np.float32, ctypes.c_float)
    if extent == 0:
        return FakeCUDAArray(np.empty(0, dtype))
    view = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctype)), shape=(extent,))
    return FakeCUDAArray(view)
