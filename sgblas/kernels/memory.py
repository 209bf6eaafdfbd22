"""Vector loads and stores and asynchronous copies for SGEMM kernels.

Numba has no public 16-byte load or store, and no ``cp.async``. This module gives each
operation twice:

* a plain-Python function (``*_py``) that the CUDA simulator runs and that defines the
  semantics, and
* when not simulating, a Numba ``@intrinsic`` of the same name that emits the instruction.

The public names (``ldg4``, ``lds4``, ...) are bound to the intrinsic on a real target and to
the Python function under the simulator, so a kernel calls one name in both worlds. One
intrinsic has no simulator twin: ``tid_x_again`` (a read of ``%tid.x`` the compiler may not
hoist), which a generator writes only for a real target.
Intrinsics, unlike ``@cuda.jit(device=True)`` functions or ``@overload`` s, compile inside
the caller's compilation for the caller's compute capability, so ``compile_ptx(cc=...)`` works
on a machine without a GPU (the static PTX checks in CI rely on this).

Rules the caller must keep, since nothing here checks them on the device:

* Every 16-byte access (``*4`` helpers, ``cp_async16``) addresses an element whose byte
  address is a multiple of 16: global arrays through the dispatch guard (16-byte aligned base
  pointer, leading dimension a multiple of 4, vector index a multiple of 4), shared arrays
  through ``cuda.shared.array(..., alignment=16)`` and a multiple-of-4 index. Every 8-byte
  access (``*2`` helpers, ``cp_async8``) likewise addresses a multiple of 8 bytes.
* Indices are element indices into the flat 1-D array; signed indices are sign-extended,
  unsigned ones zero-extended, to 64 bits before the address is formed (no wrap-around, no
  bounds check).
* ``cp_async16``/``cp_async8``/``cp_async4`` copy ``src_bytes`` bytes (0 <= src_bytes <= size) and fill
  the rest of the destination with zeros; with ``src_bytes == 0`` the source is not read,
  so a predicated-off copy may name any address. Their results are visible to the issuing
  thread after ``cp_async_wait_all()`` (or ``cp_async_wait_group(n)`` leaves at most n
  groups in flight), and to the block after a following ``cuda.syncthreads()``.
"""

from __future__ import annotations

from sgblas.runtime.device import SIMULATOR

__all__ = [
    "ldg4", "lds4", "sts4", "stg4", "ldg2", "stg2", "ldg1", "sts1", "stg1",
    "cp_async16", "cp_async8", "cp_async4", "cp_async_commit", "cp_async_wait_all",
    "cp_async_wait_group", "grid_dependency_wait",
    "ldg4_py", "lds4_py", "sts4_py", "stg4_py", "ldg2_py", "stg2_py", "ldg1_py", "sts1_py",
    "stg1_py", "cp_async16_py", "cp_async8_py", "cp_async4_py", "cp_async_commit_py",
    "cp_async_wait_all_py", "cp_async_wait_group_py", "grid_dependency_wait_py",
]


# --- plain-Python semantics (run by the simulator) -------------------------------------------

def ldg4_py(arr, i):
    """Return ``(arr[i], arr[i+1], arr[i+2], arr[i+3])`` read from global memory."""
    return arr[i], arr[i + 1], arr[i + 2], arr[i + 3]


def lds4_py(arr, i):
    """Return ``(arr[i], arr[i+1], arr[i+2], arr[i+3])`` read from shared memory."""
    return arr[i], arr[i + 1], arr[i + 2], arr[i + 3]


def sts4_py(arr, i, v0, v1, v2, v3):
    """Store ``v0..v3`` to shared ``arr[i:i+4]``."""
    arr[i] = v0
    arr[i + 1] = v1
    arr[i + 2] = v2
    arr[i + 3] = v3


def stg4_py(arr, i, v0, v1, v2, v3):
    """Store ``v0..v3`` to global ``arr[i:i+4]``."""
    arr[i] = v0
    arr[i + 1] = v1
    arr[i + 2] = v2
    arr[i + 3] = v3


def ldg2_py(arr, i):
    """Return ``(arr[i], arr[i+1])`` read from global memory."""
    return arr[i], arr[i + 1]


def stg2_py(arr, i, v0, v1):
    """Store ``v0, v1`` to global ``arr[i:i+2]``."""
    arr[i] = v0
    arr[i + 1] = v1


def stg1_py(arr, i, v):
    """Store ``v`` to global ``arr[i]`` (no negative-index wrap-around)."""
    arr[i] = v


def ldg1_py(arr, i):
    """Return ``arr[i]`` read from global memory (no negative-index wrap-around)."""
    return arr[i]


def sts1_py(arr, i, v):
    """Store ``v`` to shared ``arr[i]`` (no negative-index wrap-around)."""
    arr[i] = v


def cp_async16_py(dst, di, src, si, src_bytes):
    """Copy ``src_bytes // 4`` floats from ``src[si:]`` to ``dst[di:]``; zero the rest of 4."""
    n = src_bytes // 4
    for e in range(4):
        dst[di + e] = src[si + e] if e < n else 0.0


def cp_async8_py(dst, di, src, si, src_bytes):
    """Copy ``src_bytes // 4`` floats from ``src[si:]`` to ``dst[di:]``; zero the rest of 2."""
    n = src_bytes // 4
    for e in range(2):
        dst[di + e] = src[si + e] if e < n else 0.0


def cp_async4_py(dst, di, src, si, src_bytes):
    """Copy ``src[si]`` to ``dst[di]`` when ``src_bytes == 4``, else store zero."""
    dst[di] = src[si] if src_bytes >= 4 else 0.0


def cp_async_commit_py():
    """The simulator copies synchronously, so there is no group to close."""


def cp_async_wait_all_py():
    """The simulator copies synchronously, so there is nothing to wait for."""


def cp_async_wait_group_py(n: int):
    """Return a no-op: the simulator copies synchronously, so there is nothing to wait for.

    On a real target ``cp_async_wait_group(n)`` is a factory too: call it once at module
    level and call the returned intrinsic in the kernel (the count must be a constant).
    """
    def wait():
        return None
    return wait


def grid_dependency_wait_py():
    """The simulator runs one launch after another, so no earlier grid is still running."""


# --- intrinsics (real targets) ---------------------------------------------------------------

if SIMULATOR:
    ldg4, lds4, sts4, stg4 = ldg4_py, lds4_py, sts4_py, stg4_py
    ldg2, stg2 = ldg2_py, stg2_py
    ldg1, sts1, stg1 = ldg1_py, sts1_py, stg1_py
    cp_async16, cp_async8, cp_async4 = cp_async16_py, cp_async8_py, cp_async4_py
    cp_async_commit, cp_async_wait_all = cp_async_commit_py, cp_async_wait_all_py
    cp_async_wait_group = cp_async_wait_group_py
    grid_dependency_wait = grid_dependency_wait_py
else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    _GLOBAL, _SHARED = 1, 3

    def _check(name: str, arr, index) -> None:
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.float32):
            raise TypeError(f"{name} needs a 1-D float32 array, got {arr}")
        if not isinstance(index, types.Integer):
            raise TypeError(f"{name} needs an integer element index, got {index}")

    def _elem_ptr(context, builder, arrty, arr, idxty, idx, addrspace: int):
        """Typed ``float addrspace(n)*`` to ``arr[idx]``, 64-bit address arithmetic."""
        data = context.make_array(arrty)(context, builder, value=arr).data
        i64 = ir.IntType(64)
        if idxty.bitwidth == 64:
            wide = idx
        elif idxty.signed:
            wide = builder.sext(idx, i64)
        else:
            wide = builder.zext(idx, i64)
        ptr = builder.gep(data, [wide], inbounds=True)
        return builder.addrspacecast(ptr, ir.PointerType(ir.FloatType(), addrspace))

    def _vec_ptr(builder, fptr, addrspace: int, width: int = 4):
        return builder.bitcast(fptr, ir.PointerType(ir.VectorType(ir.FloatType(), width), addrspace))

    def _load4(addrspace: int, name: str, width: int = 4):
        tup = types.UniTuple(types.float32, width)

        def impl(typingctx, arr, index):
            _check(name, arr, index)

            def codegen(context, builder, sig, args):
                fptr = _elem_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1],
                                 addrspace)
                vec = builder.load(_vec_ptr(builder, fptr, addrspace, width), align=4 * width)
                elems = [builder.extract_element(vec, ir.Constant(ir.IntType(32), e))
                         for e in range(width)]
                return context.make_tuple(builder, tup, elems)

            return tup(arr, index), codegen

        impl.__name__ = name
        return intrinsic(impl)

    def _store4(addrspace: int, name: str, width: int = 4):
        def typed(arr, index, *vals):
            _check(name, arr, index)

            def codegen(context, builder, sig, args):
                fptr = _elem_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1],
                                 addrspace)
                vec = ir.Constant(ir.VectorType(ir.FloatType(), width), ir.Undefined)
                for e in range(width):
                    val = context.cast(builder, args[2 + e], sig.args[2 + e], types.float32)
                    vec = builder.insert_element(vec, val, ir.Constant(ir.IntType(32), e))
                builder.store(vec, _vec_ptr(builder, fptr, addrspace, width), align=4 * width)
                return context.get_dummy_value()

            return types.void(arr, index, *vals), codegen

        if width == 4:
            def impl(typingctx, arr, index, v0, v1, v2, v3):
                return typed(arr, index, v0, v1, v2, v3)
        else:
            def impl(typingctx, arr, index, v0, v1):
                return typed(arr, index, v0, v1)

        impl.__name__ = name
        return intrinsic(impl)

    def _load1(addrspace: int, name: str):
        def impl(typingctx, arr, index):
            _check(name, arr, index)

            def codegen(context, builder, sig, args):
                fptr = _elem_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1],
                                 addrspace)
                return builder.load(fptr, align=4)

            return types.float32(arr, index), codegen

        impl.__name__ = name
        return intrinsic(impl)

    def _store1(addrspace: int, name: str):
        def impl(typingctx, arr, index, v):
            _check(name, arr, index)

            def codegen(context, builder, sig, args):
                fptr = _elem_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1],
                                 addrspace)
                builder.store(context.cast(builder, args[2], sig.args[2], types.float32), fptr,
                              align=4)
                return context.get_dummy_value()

            return types.void(arr, index, v), codegen

        impl.__name__ = name
        return intrinsic(impl)

    ldg1 = _load1(_GLOBAL, "ldg1")
    sts1 = _store1(_SHARED, "sts1")
    stg1 = _store1(_GLOBAL, "stg1")
    ldg2 = _load4(_GLOBAL, "ldg2", 2)
    stg2 = _store4(_GLOBAL, "stg2", 2)
    ldg4 = _load4(_GLOBAL, "ldg4")
    lds4 = _load4(_SHARED, "lds4")
    sts4 = _store4(_SHARED, "sts4")
    stg4 = _store4(_GLOBAL, "stg4")

    def _cp_async(size: int, cache: str, name: str):
        asm = f"cp.async.{cache}.shared.global [$0], [$1], {size}, $2;"

        def impl(typingctx, dst, di, src, si, src_bytes):
            _check(name, dst, di)
            _check(name, src, si)

            def codegen(context, builder, sig, args):
                i32, i64 = ir.IntType(32), ir.IntType(64)
                sptr = _elem_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1],
                                 _SHARED)
                gptr = _elem_ptr(context, builder, sig.args[2], args[2], sig.args[3], args[3],
                                 _GLOBAL)
                nbytes = context.cast(builder, args[4], sig.args[4], types.uint32)
                fnty = ir.FunctionType(ir.VoidType(), [i32, i64, i32])
                op = ir.InlineAsm(fnty, asm, "r,l,r,~{memory}", side_effect=True)
                builder.call(op, [builder.ptrtoint(sptr, i32), builder.ptrtoint(gptr, i64),
                                  nbytes])
                return context.get_dummy_value()

            return types.void(dst, di, src, si, src_bytes), codegen

        impl.__name__ = name
        return intrinsic(impl)

    # .cg (bypass L1) exists only for 16-byte copies; 8- and 4-byte copies must use .ca.
    cp_async16 = _cp_async(16, "cg", "cp_async16")
    cp_async8 = _cp_async(8, "ca", "cp_async8")
    cp_async4 = _cp_async(4, "ca", "cp_async4")

    def _asm_void(text: str):
        def codegen(context, builder, sig, args):
            op = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}",
                              side_effect=True)
            builder.call(op, [])
            return context.get_dummy_value()
        return codegen

    @intrinsic
    def cp_async_commit(typingctx):
        return types.void(), _asm_void("cp.async.commit_group;")

    @intrinsic
    def cp_async_wait_all(typingctx):
        return types.void(), _asm_void("cp.async.wait_all;")

    @intrinsic
    def grid_dependency_wait(typingctx):
        """``griddepcontrol.wait`` (sm_90+, PTX 7.8): wait until the grids this one depends on
        have completed and their memory is visible. A kernel launched with programmatic stream
        serialization may start before the kernel ahead of it in the stream has finished; it
        must pass this before it reads what that kernel wrote. In a kernel launched without it,
        the wait returns at once. Only a kernel built for sm_90 or later may call it."""
        return types.void(), _asm_void("griddepcontrol.wait;")

    @intrinsic
    def tid_x_again(typingctx):
        """``threadIdx.x`` read afresh where it is called. ``cuda.threadIdx.x`` is a pure read,
        so the compiler computes what derives from it once, before a loop, and keeps it in
        registers across the loop; at a launch bound's register cap that can spill. A value
        derived from this read is recomputed where it is used. Real targets only: the
        simulator has no inline assembly, and its kernels read ``cuda.threadIdx.x``."""
        def codegen(context, builder, sig, args):
            op = ir.InlineAsm(ir.FunctionType(ir.IntType(32), []), "mov.u32 $0, %tid.x;", "=r",
                              side_effect=True)
            return builder.call(op, [])
        return types.uint32(), codegen

    def cp_async_wait_group(n: int):
        """An intrinsic that waits until at most ``n`` committed groups are in flight."""
        if not (isinstance(n, int) and 0 <= n <= 7):
            raise ValueError(f"cp_async_wait_group needs a group count in 0..7, got {n!r}")

        def impl(typingctx):
            return types.void(), _asm_void(f"cp.async.wait_group {n};")

        impl.__name__ = f"cp_async_wait_group{n}"
        return intrinsic(impl)
