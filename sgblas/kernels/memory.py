"""Vector loads and stores and asynchronous copies for SGEMM kernels.

Numba has no public 16-byte load or store, and no ``cp.async``. This module gives each
operation twice:

* a plain-Python function (``*_py``) that the CUDA simulator runs and that defines the
  semantics, and
* when not simulating, a Numba ``@intrinsic`` of the same name that emits the instruction.

The public names (``ldg4``, ``lds4``, ...) are bound to the intrinsic on a real target and to
the Python function under the simulator, so a kernel calls one name in both worlds. One
intrinsic has no simulator twin: ``tid_x_again`` (a read of ``%tid.x`` the compiler may not
hoist), which a generator writes only for a real target; ``ctaid_x_again`` likewise for
``%ctaid.x``. The semaphore wait of a serial split, ``ld_acquire_i32`` (an acquire load of an
int32, never cached in L1), reads plainly in the simulator, whose blocks run one at a time.
Under the simulator, importing this module also makes Numba's simulated ``cuda.shared.array``
safe for a block's threads to call at once (:func:`_serialise_simulated_shared_arrays`).
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

The rest are here for Numba's front end rather than for an instruction: ``cp_async4_if`` and
``select`` (what a conditional expression lowers to), ``lds4_into`` (``lds4`` into four elements
of a local array), the multiply-add blocks ``fma_block``, ``dot_block`` and ``axpy_block`` (a
register tile's FMAs for one k), ``cp_async4x4`` (four 4-byte copies of one 16-byte vector),
``ldg4_tail``/``ldg2_tail``/``ldg1_tail`` (a register-staged load of the last K slice: the
vector when it lies inside k, else element by element with zeros past k, which the text wrote as
nested ``if`` statements), and the copy blocks that stand for runs of ``cp_async4`` statements:
``cp_async4x4_if`` (a vector's four guarded elements), ``cp_async4x4_tail`` and its 2- and
1-float forms (a partial vector of the last K slice, element by element) and
``cp_async4_swizzled`` (a column of copies into a swizzled shared layout). Numba's front end
spends time with the product of a function's basic blocks and its variables, and with that of
its statements and the variables assigned more than once (every conditional expression makes
blocks and one such variable); written out in a generated kernel's text, an unrolled K loop's
FMA blocks and fragment loads were two thirds of its statements and most of its blocks. As
intrinsics they are one call each, and each emits the LLVM IR that Numba made of the text it
replaces (the FMA blocks the same constant-trip loops, which NVVM unrolls, around the same
statements; the tail loads the same blocks in the same order, the same stack slots for the
variables the text assigned, and the index arithmetic recomputed in each block as the text had
it: NVVM's PTX changed when the index was computed once ahead of the branches; the copy blocks
each element's condition and sums in its turn, through Numba's own operators where the operands'
types vary), so that the PTX is the same: its instructions, their order and their registers (the
order of a tile's FMAs is ptxas's input for the register allocation of the K loop,
docs/history/tuning-ladder-4-runs-j-to-l.md, rung 25). An unrolled FMA block in place of the
loops gave the same instructions with the fragments' registers numbered in another order.
"""

from __future__ import annotations

from sgblas.runtime.device import SIMULATOR

__all__ = [
    "ldg4", "lds4", "sts4", "stg4", "ldg2", "stg2", "ldg1", "sts1", "stg1",
    "ldg4_cg", "ldg2_cg", "ldg1_cg", "ld_acquire_i32",
    "cp_async16", "cp_async8", "cp_async4", "cp_async_commit", "cp_async_wait_all",
    "cp_async_wait_group", "grid_dependency_wait",
    "cp_async4_if", "select", "lds4_into", "fma_block", "dot_block", "axpy_block",
    "ldg4_tail", "ldg2_tail", "ldg1_tail", "cp_async4x4", "cp_async4x4_if",
    "cp_async4x4_tail", "cp_async4x2_tail", "cp_async4x1_tail", "cp_async4_swizzled",
    "ldg4_py", "lds4_py", "sts4_py", "stg4_py", "ldg2_py", "stg2_py", "ldg1_py", "sts1_py",
    "ldg4_cg_py", "ldg2_cg_py", "ldg1_cg_py", "ld_acquire_i32_py",
    "stg1_py", "cp_async16_py", "cp_async8_py", "cp_async4_py", "cp_async_commit_py",
    "cp_async_wait_all_py", "cp_async_wait_group_py", "grid_dependency_wait_py",
    "cp_async4_if_py", "select_py", "lds4_into_py", "fma_block_py", "dot_block_py", "axpy_block_py",
    "ldg4_tail_py", "ldg2_tail_py", "ldg1_tail_py", "cp_async4x4_py", "cp_async4x4_if_py",
    "cp_async4x4_tail_py", "cp_async4x2_tail_py", "cp_async4x1_tail_py", "cp_async4_swizzled_py",
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


#: The loads of C that a serial split's slices read after another CTA wrote it (``ld.global.cg``:
#: from L2, never from this SM's L1, which may hold the lines as an earlier slice on this SM
#: read them); in plain Python they are the ordinary loads.
ldg4_cg_py, ldg2_cg_py, ldg1_cg_py = ldg4_py, ldg2_py, ldg1_py


def ld_acquire_i32_py(arr, i):
    """Return the int32 ``arr[i]``, read with acquire semantics at GPU scope (a semaphore)."""
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


# --- for Numba's front end: plain-Python semantics ------------------------------------------

def cp_async4_if_py(dst, di, src, si, ok):
    """``cp_async4(dst, di, src, si if ok else 0, 4 if ok else 0)``: ``src[si]`` when ``ok``,
    else a zero with no source byte, named at ``src[0]`` whatever ``si`` is (past the matrix,
    say)."""
    dst[di] = src[si] if ok else 0.0


def select_py(cond, a, b):
    """``a if cond else b``, both already computed."""
    return a if cond else b


def lds4_into_py(dst, j, arr, i):
    """``dst[j:j+4] = arr[i:i+4]``: a 16-byte read of shared ``arr`` into a local array."""
    dst[j], dst[j + 1], dst[j + 2], dst[j + 3] = arr[i], arr[i + 1], arr[i + 2], arr[i + 3]


def _ldg_tail_py(width: int, arr, ok, kv, q, g, kq, cs, c):
    at = g + kq + c * cs
    if width > 1 and ok and q + kq + width <= kv:
        return tuple(arr[at + e] for e in range(width))
    return tuple(arr[at + e] if ok and q + kq + e < kv else 0.0 for e in range(width))


def ldg4_tail_py(arr, ok, kv, q, g, kq, cs, c):
    """A k-major load of 4 floats into registers in the slice that holds column ``kv - 1``
    (where k ends): ``arr[at:at + 4]`` with ``at = g + kq + c * cs``, element ``e`` zero
    unless ``ok`` and ``q + kq + e < kv``; one 16-byte load when all four are in. ``kq`` (the
    load's k offset, added to the index and to ``q``) and ``c`` (its column pass, ``cs``
    apart) are constants."""
    return _ldg_tail_py(4, arr, ok, kv, q, g, kq, cs, c)


def ldg2_tail_py(arr, ok, kv, q, g, kq, cs, c):
    """:func:`ldg4_tail_py` of 2 floats (one 8-byte load when both are in)."""
    return _ldg_tail_py(2, arr, ok, kv, q, g, kq, cs, c)


def ldg1_tail_py(arr, ok, kv, q, g, kq, cs, c):
    """:func:`ldg4_tail_py` of one float, returned alone."""
    return _ldg_tail_py(1, arr, ok, kv, q, g, kq, cs, c)[0]


def cp_async4x4_py(dst, di, src, si):
    """``cp_async4(dst, di + e, src, si + e, 4)`` for ``e < 4``: a 16-byte vector copied as
    four 4-byte copies, for a source aligned to 4 bytes only."""
    for e in range(4):
        cp_async4_py(dst, di + e, src, si + e, 4)


def cp_async4x4_if_py(a, x, y, dst, d0, d1, src, s0, s1):
    """``cp_async4_if(dst, d0 + d1 + e, src, s0 + s1 + e, a & (x + e < y))`` for ``e < 4``: a
    16-byte vector copied element by element, each element a zero with no source byte unless
    ``a`` holds and ``x + e < y`` (the element lies before an end ``y``, ``x`` being the
    vector's first position along that dimension)."""
    for e in range(4):
        cp_async4_if_py(dst, d0 + d1 + e, src, s0 + s1 + e, a and x + e < y)


def _cp_async4_tail_py(dst, w, wo, src, g, gn, ld, col, co, kv, *es):
    for e, nbytes in enumerate(es):
        cp_async4_py(dst, w + wo + e, src, g + gn * ld + e, nbytes if col + co < kv else 0)


def cp_async4x4_tail_py(dst, w, wo, src, g, gn, ld, col, co, kv, e0, e1, e2, e3):
    """``cp_async4(dst, w + wo + e, src, g + gn * ld + e, e_e if col + co < kv else 0)`` for
    ``e < 4``: a vector of the slice that holds column ``kv - 1`` (where k ends) in column
    ``col + co``, copied element by element with element ``e``'s own byte count (0 or 4: past
    the matrix's edge, a zero)."""
    _cp_async4_tail_py(dst, w, wo, src, g, gn, ld, col, co, kv, e0, e1, e2, e3)


def cp_async4x2_tail_py(dst, w, wo, src, g, gn, ld, col, co, kv, e0, e1):
    """:func:`cp_async4x4_tail_py` of a 2-float vector."""
    _cp_async4_tail_py(dst, w, wo, src, g, gn, ld, col, co, kv, e0, e1)


def cp_async4x1_tail_py(dst, w, wo, src, g, gn, ld, col, co, kv, e0):
    """:func:`cp_async4x4_tail_py` of one float."""
    _cp_async4_tail_py(dst, w, wo, src, g, gn, ld, col, co, kv, e0)


def cp_async4_swizzled_py(n: int, vp: int, step: int):
    """The block ``copy(dst, b, src, g, ld)``: for ``t < n``, ``cp_async4(dst, int64(b ^
    uint32(4 * (vp * t & 7))) + 4 * (vp * t & ~7), src, g + step * t * ld, 4)``, a column of
    copies whose shared index is a base XORed by a constant in bits 2-4 plus a constant
    (:mod:`sgblas.kernels.skinny`'s swizzled copy of S, ``_stage_dot``)."""
    _sizes("cp_async4_swizzled", n, vp, step)

    def copy(dst, b, src, g, ld):
        for t in range(n):
            cp_async4_py(dst, (int(b) ^ (4 * (vp * t & 7))) + 4 * (vp * t & ~7), src,
                         g + step * t * ld, 4)
    return copy


def _sizes(what: str, *sizes) -> None:
    if not all(isinstance(x, int) and x > 0 for x in sizes):
        raise ValueError(f"{what} needs positive sizes, got {sizes!r}")


def _fma_loops(tm: int, tn: int, outer: str) -> tuple[int, int]:
    """Check ``fma_block``'s arguments; return its outer and inner trip counts."""
    _sizes("fma_block", tm, tn)
    if outer not in ("i", "j"):
        raise ValueError(f"fma_block's outer loop runs over 'i' or 'j', got {outer!r}")
    return (tm, tn) if outer == "i" else (tn, tm)


def fma_block_py(tm: int, tn: int, outer: str = "i", snake: bool = False, col_major: bool = False):
    """A function ``block(acc, fa, ia, fb, ib)`` doing ``acc[i * tn + j] += fa[ia + i] *
    fb[ib + j]`` (``acc[j * tm + i]`` when ``col_major``) for every ``i < tm`` and ``j < tn``:
    the outer loop over ``outer`` ("i" or "j"), the inner one over the other index, backwards
    on odd outer iterations when ``snake``. An outer product, a GEMM's register tile for one k.

    A factory, like ``cp_async_wait_group``: the sizes and the order are constants of the
    code, so a generator calls it once per kernel and the kernel calls what it returns."""
    n_out, n_in = _fma_loops(tm, tn, outer)

    def block(acc, fa, ia, fb, ib):
        for o in range(n_out):
            for s in range(n_in):
                x = s + o % 2 * (n_in - 1 - 2 * s) if snake else s
                i, j = (o, x) if outer == "i" else (x, o)
                acc[j * tm + i if col_major else i * tn + j] += fa[ia + i] * fb[ib + j]
    return block


def dot_block_py(n: int, k: int):
    """A function ``block(acc, ia, fa, fb)`` doing ``acc[ia + c] += fa[e] * fb[c * k + e]`` for
    ``c < n`` in order and, within each, ``e < k`` in order: n dot products of length k, each
    added term by term into its accumulator. A factory, as :func:`fma_block_py`."""
    _sizes("dot_block", n, k)

    def block(acc, ia, fa, fb):
        for c in range(n):
            for e in range(k):
                acc[ia + c] += fa[e] * fb[c * k + e]
    return block


def axpy_block_py(m: int, n: int):
    """A function ``block(acc, ia, fa, fb, ib)`` doing ``acc[ia + i * n + j] += fa[i] *
    fb[ib + j]`` for ``j < n`` in order and, within each, ``i < m`` in order: m rows of
    accumulators each adding a multiple of one vector. A factory, as :func:`fma_block_py`."""
    _sizes("axpy_block", m, n)

    def block(acc, ia, fa, fb, ib):
        for j in range(n):
            for i in range(m):
                acc[ia + i * n + j] += fa[i] * fb[ib + j]
    return block


def _serialise_simulated_shared_arrays() -> None:
    """Make the simulator's ``cuda.shared.array`` allocate each array once per block.

    Numba's simulator (numba-cuda 0.30) runs a block's threads as Python threads, and its
    ``FakeCUDAShared.array`` looks the array up by call site and creates it when missing, with
    nothing between the look-up and the store. A thread switched out between the two makes its
    own array, so part of the block writes into a copy the rest never reads: wrong products, at
    random, more often the more the machine is loaded. The replacement does the same look-up
    under a lock; the call site is the caller's file and line, as Numba's own."""
    import sys
    import threading

    import numpy as np
    from numba.cuda import types
    from numba.cuda.np import numpy_support
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared
    if getattr(shared.array, "_sgblas_serialised", False):
        return
    original = shared.array
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:  # dynamic shared memory, or Numba's own error
            return original(self, shape, dtype, alignment)
        frame = sys._getframe(1)
        site = (frame.f_code.co_filename, frame.f_lineno)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        with lock:
            res = self._allocations.get(site)
            if res is None:
                res = self._allocations[site] = np.empty(shape, dtype)
        return res

    array._sgblas_serialised = True
    shared.array = array


# --- intrinsics (real targets) ---------------------------------------------------------------

if SIMULATOR:
    _serialise_simulated_shared_arrays()
    ldg4, lds4, sts4, stg4 = ldg4_py, lds4_py, sts4_py, stg4_py
    ldg2, stg2 = ldg2_py, stg2_py
    ldg1, sts1, stg1 = ldg1_py, sts1_py, stg1_py
    ldg4_cg, ldg2_cg, ldg1_cg = ldg4_cg_py, ldg2_cg_py, ldg1_cg_py
    ld_acquire_i32 = ld_acquire_i32_py
    cp_async16, cp_async8, cp_async4 = cp_async16_py, cp_async8_py, cp_async4_py
    cp_async_commit, cp_async_wait_all = cp_async_commit_py, cp_async_wait_all_py
    cp_async_wait_group = cp_async_wait_group_py
    grid_dependency_wait = grid_dependency_wait_py
    cp_async4_if, select, lds4_into = cp_async4_if_py, select_py, lds4_into_py
    fma_block, dot_block, axpy_block = fma_block_py, dot_block_py, axpy_block_py
    ldg4_tail, ldg2_tail, ldg1_tail = ldg4_tail_py, ldg2_tail_py, ldg1_tail_py
    cp_async4x4, cp_async4x4_if = cp_async4x4_py, cp_async4x4_if_py
    cp_async4x4_tail, cp_async4x2_tail = cp_async4x4_tail_py, cp_async4x2_tail_py
    cp_async4x1_tail = cp_async4x1_tail_py
    cp_async4_swizzled = cp_async4_swizzled_py
else:
    import functools
    import operator

    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    _GLOBAL, _SHARED = 1, 3

    def _check(name: str, arr, index, dtype=types.float32) -> None:
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == dtype):
            raise TypeError(f"{name} needs a 1-D {dtype} array, got {arr}")
        if not isinstance(index, types.Integer):
            raise TypeError(f"{name} needs an integer element index, got {index}")

    def _data(context, builder, sig, args, *positions):
        """The data pointers of the array arguments at ``positions``, in that order."""
        return tuple(context.make_array(sig.args[n])(context, builder, value=args[n]).data for n in positions)

    def _madd(builder, acc_p, at, fa_p, fa_at, fb_p, fb_at) -> None:
        """``acc[at] += fa[fa_at()] * fb[fb_at()]``, the index arithmetic emitted where the
        statements the intrinsics replace emitted it (so the IR, and the PTX, are the same)."""
        cp = builder.gep(acc_p, [at])
        c = builder.load(cp)
        a = builder.load(builder.gep(fa_p, [fa_at()]))
        b = builder.load(builder.gep(fb_p, [fb_at()]))
        builder.store(builder.fadd(c, builder.fmul(a, b)), cp)

    def _elem_ptr(context, builder, arrty, arr, idxty, idx, addrspace: int, elem=None):
        """Typed ``float addrspace(n)*`` (or ``elem``'s) to ``arr[idx]``, 64-bit address arithmetic."""
        data = context.make_array(arrty)(context, builder, value=arr).data
        i64 = ir.IntType(64)
        if idxty.bitwidth == 64:
            wide = idx
        elif idxty.signed:
            wide = builder.sext(idx, i64)
        else:
            wide = builder.zext(idx, i64)
        ptr = builder.gep(data, [wide], inbounds=True)
        return builder.addrspacecast(ptr, ir.PointerType(elem or ir.FloatType(), addrspace))

    def _cp_async_call(builder, sptr, gptr, nbytes, size: int = 4, cache: str = "ca") -> None:
        """``cp.async.{cache}`` of a ``size``-byte copy from the global ``gptr`` to the shared
        ``sptr`` (typed pointers, as :func:`_elem_ptr` makes them), ``nbytes`` (an i32: ``size``
        or 0) of it read: every cp.async here is this call."""
        i32, i64 = ir.IntType(32), ir.IntType(64)
        op = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i32, i64, i32]),
                          f"cp.async.{cache}.shared.global [$0], [$1], {size}, $2;", "r,l,r,~{memory}",
                          side_effect=True)
        builder.call(op, [builder.ptrtoint(sptr, i32), builder.ptrtoint(gptr, i64), nbytes])

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

    def _load_cg(width: int, name: str):
        """``ld.global.cg`` of ``width`` floats at ``arr[index]`` (a vector for 2 and 4: the
        caller guarantees its alignment), returned as a float32 or a tuple of them."""
        f32, i64 = ir.FloatType(), ir.IntType(64)
        ret = types.float32 if width == 1 else types.UniTuple(types.float32, width)
        regs = ", ".join(f"${e}" for e in range(width))
        text = ("ld.global.cg.f32 $0, [$1];" if width == 1
                else f"ld.global.cg.v{width}.f32 {{{regs}}}, [${width}];")
        out = f32 if width == 1 else ir.LiteralStructType([f32] * width)

        def impl(typingctx, arr, index):
            _check(name, arr, index)

            def codegen(context, builder, sig, args):
                fptr = _elem_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1], _GLOBAL)
                # The memory clobber keeps the load after the semaphore's wait and fence, which
                # the compiler does not otherwise see it depend on.
                op = ir.InlineAsm(ir.FunctionType(out, [i64]), text, ",".join(["=f"] * width + ["l", "~{memory}"]),
                                  side_effect=True)
                got = builder.call(op, [builder.ptrtoint(fptr, i64)])
                if width == 1:
                    return got
                return context.make_tuple(builder, ret, [builder.extract_value(got, e) for e in range(width)])

            return ret(arr, index), codegen

        impl.__name__ = name
        return intrinsic(impl)

    @intrinsic
    def ld_acquire_i32(typingctx, arr, index):
        """``ld.acquire.gpu.global.b32`` of the int32 ``arr[index]``: what a serial split's
        CTA polls its tile's semaphore with. A plain load, not an atomic, so that the CTAs
        waiting on one semaphore do not queue behind each other at L2's atomic unit; acquire,
        so that what the releasing CTA wrote before its release is visible after it."""
        _check("ld_acquire_i32", arr, index, types.int32)

        def codegen(context, builder, sig, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            ptr = _elem_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1], _GLOBAL, i32)
            op = ir.InlineAsm(ir.FunctionType(i32, [i64]), "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l,~{memory}",
                              side_effect=True)
            return builder.call(op, [builder.ptrtoint(ptr, i64)])

        return types.int32(arr, index), codegen

    ldg4_cg = _load_cg(4, "ldg4_cg")
    ldg2_cg = _load_cg(2, "ldg2_cg")
    ldg1_cg = _load_cg(1, "ldg1_cg")
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
        def impl(typingctx, dst, di, src, si, src_bytes):
            _check(name, dst, di)
            _check(name, src, si)

            def codegen(context, builder, sig, args):
                sptr = _elem_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1],
                                 _SHARED)
                gptr = _elem_ptr(context, builder, sig.args[2], args[2], sig.args[3], args[3],
                                 _GLOBAL)
                nbytes = context.cast(builder, args[4], sig.args[4], types.uint32)
                _cp_async_call(builder, sptr, gptr, nbytes, size, cache)
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

    @intrinsic
    def ctaid_x_again(typingctx):
        """``blockIdx.x`` read afresh where it is called, for the reason of :func:`tid_x_again`:
        a serial split's epilogue needs it after the K loop, where keeping it from the start
        would hold a register through the loop. Real targets only."""
        def codegen(context, builder, sig, args):
            op = ir.InlineAsm(ir.FunctionType(ir.IntType(32), []), "mov.u32 $0, %ctaid.x;", "=r",
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

    # --- for Numba's front end (see the module's docstring)

    @intrinsic
    def cp_async4_if(typingctx, dst, di, src, si, ok):
        """``cp_async4`` of ``src[si]`` when ``ok``, else of zero bytes named at ``src[0]``:
        the selects that ``si if ok else 0`` and ``4 if ok else 0`` lower to, without the
        branches Numba's front end makes of them."""
        _check("cp_async4_if", dst, di)
        _check("cp_async4_if", src, si)
        if not isinstance(ok, types.Boolean):
            raise TypeError(f"cp_async4_if needs a boolean condition, got {ok}")

        def codegen(context, builder, sig, args):
            i32 = ir.IntType(32)
            keep = context.cast(builder, args[4], sig.args[4], types.boolean)
            index = builder.select(keep, args[3], ir.Constant(args[3].type, 0))
            sptr = _elem_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1], _SHARED)
            gptr = _elem_ptr(context, builder, sig.args[2], args[2], sig.args[3], index, _GLOBAL)
            _cp_async_call(builder, sptr, gptr, builder.select(keep, ir.Constant(i32, 4), ir.Constant(i32, 0)))
            return context.get_dummy_value()

        return types.void(dst, di, src, si, ok), codegen

    @intrinsic
    def select(typingctx, cond, a, b):
        """``a if cond else b`` as one LLVM ``select`` of two computed values: what Numba's
        branches and phi for the conditional expression become, without the blocks and the
        variable its SSA pass rewrites. Both values are computed, so neither may read memory
        that ``cond`` guards."""
        if not isinstance(cond, types.Boolean):
            raise TypeError(f"select needs a boolean condition, got {cond}")
        ty = typingctx.unify_pairs(a, b)
        if not isinstance(ty, (types.Integer, types.Float)):
            raise TypeError(f"select picks between numbers, got {a} and {b}")

        def codegen(context, builder, sig, args):
            keep = context.cast(builder, args[0], sig.args[0], types.boolean)
            x = context.cast(builder, args[1], sig.args[1], ty)
            y = context.cast(builder, args[2], sig.args[2], ty)
            return builder.select(keep, x, y)

        return ty(cond, a, b), codegen

    @intrinsic
    def lds4_into(typingctx, dst, j, arr, i):
        """``dst[j:j+4] = arr[i:i+4]``: one 16-byte load of shared ``arr`` stored into local
        ``dst``, as Numba lowers ``dst[j], ..., dst[j + 3] = lds4(arr, i)``."""
        _check("lds4_into", arr, i)
        _check("lds4_into", dst, j)

        def codegen(context, builder, sig, args):
            fptr = _elem_ptr(context, builder, sig.args[2], args[2], sig.args[3], args[3], _SHARED)
            vec = builder.load(_vec_ptr(builder, fptr, _SHARED), align=16)
            data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
            base = context.cast(builder, args[1], sig.args[1], types.int64)
            for e in range(4):
                val = builder.extract_element(vec, ir.Constant(ir.IntType(32), e))
                builder.store(val, builder.gep(data, [builder.add(base, ir.Constant(base.type, e))]))
            return context.get_dummy_value()

        return types.void(dst, j, arr, i), codegen

    def fma_block(tm: int, tn: int, outer: str = "i", snake: bool = False, col_major: bool = False):
        """The intrinsic ``block(acc, fa, ia, fb, ib)`` of :func:`fma_block_py`: the loop nest
        Numba lowers the same two ``range`` loops to (the snaking index as ``s + o % 2 *
        (n_in - 1 - 2 * s)``), which NVVM unrolls as it unrolls those."""
        n_out, n_in = _fma_loops(tm, tn, outer)
        return _fma_block(tm, tn, outer, bool(snake), bool(col_major), n_out, n_in)

    @functools.cache
    def _fma_block(tm, tn, outer, snake, col_major, n_out, n_in):
        def impl(typingctx, acc, fa, ia, fb, ib):
            for arr, idx in ((acc, ia), (fa, ia), (fb, ib)):
                _check("fma_block", arr, idx)

            def codegen(context, builder, sig, args):
                i64 = ir.IntType(64)
                acc_p, fa_p, fb_p = _data(context, builder, sig, args, 0, 1, 3)
                ia_v = context.cast(builder, args[2], sig.args[2], types.int64)
                ib_v = context.cast(builder, args[4], sig.args[4], types.int64)
                with cgutils.for_range(builder, i64(n_out)) as lo:
                    o = lo.index
                    with cgutils.for_range(builder, i64(n_in)) as li:
                        x = li.index
                        if snake:
                            back = builder.sub(i64(n_in - 1), builder.mul(x, i64(2)))
                            x = builder.add(x, builder.mul(builder.and_(o, i64(1)), back))
                        i, j = (o, x) if outer == "i" else (x, o)
                        at = builder.add(builder.mul(j, i64(tm)), i) if col_major else \
                            builder.add(builder.mul(i, i64(tn)), j)
                        _madd(builder, acc_p, at, fa_p, lambda: builder.add(ia_v, i),
                              fb_p, lambda: builder.add(ib_v, j))
                return context.get_dummy_value()

            return types.void(acc, fa, ia, fb, ib), codegen

        impl.__name__ = f"fma_block_{tm}x{tn}_{outer}{'_snake' if snake else ''}{'_cm' if col_major else ''}"
        return intrinsic(impl)

    def dot_block(n: int, k: int):
        """The intrinsic ``block(acc, ia, fa, fb)`` of :func:`dot_block_py`, its n x k
        multiply-adds written out (as the statements it replaces were)."""
        dot_block_py(n, k)  # checks the sizes
        return _dot_block(n, k)

    @functools.cache
    def _dot_block(n, k):
        def impl(typingctx, acc, ia, fa, fb):
            _check("dot_block", acc, ia)
            _check("dot_block", fa, ia)
            _check("dot_block", fb, ia)

            def codegen(context, builder, sig, args):
                i64 = ir.IntType(64)
                acc_p, fa_p, fb_p = _data(context, builder, sig, args, 0, 2, 3)
                base = context.cast(builder, args[1], sig.args[1], types.int64)
                for c in range(n):
                    for e in range(k):
                        _madd(builder, acc_p, builder.add(base, i64(c)), fa_p, lambda: i64(e),
                              fb_p, lambda: i64(c * k + e))
                return context.get_dummy_value()

            return types.void(acc, ia, fa, fb), codegen

        impl.__name__ = f"dot_block_{n}x{k}"
        return intrinsic(impl)

    def axpy_block(m: int, n: int):
        """The intrinsic ``block(acc, ia, fa, fb, ib)`` of :func:`axpy_block_py`: the loop over
        j (a constant-trip loop, which NVVM unrolls) around the m multiply-adds written out,
        as in the text it replaces."""
        axpy_block_py(m, n)  # checks the sizes
        return _axpy_block(m, n)

    @functools.cache
    def _axpy_block(m, n):
        def impl(typingctx, acc, ia, fa, fb, ib):
            _check("axpy_block", acc, ia)
            _check("axpy_block", fa, ia)
            _check("axpy_block", fb, ib)

            def codegen(context, builder, sig, args):
                i64 = ir.IntType(64)
                acc_p, fa_p, fb_p = _data(context, builder, sig, args, 0, 2, 3)
                ia_v = context.cast(builder, args[1], sig.args[1], types.int64)
                ib_v = context.cast(builder, args[4], sig.args[4], types.int64)
                with cgutils.for_range(builder, i64(n)) as lj:
                    j = lj.index
                    for i in range(m):
                        _madd(builder, acc_p, builder.add(builder.add(ia_v, i64(i * n)), j), fa_p,
                              lambda: i64(i), fb_p, lambda: builder.add(ib_v, j))
                return context.get_dummy_value()

            return types.void(acc, ia, fa, fb, ib), codegen

        impl.__name__ = f"axpy_block_{m}x{n}"
        return intrinsic(impl)

    def _ldg_tail(width: int, name: str):
        """The intrinsic of :func:`ldg4_tail_py` for ``width`` floats: the blocks, slots and
        stores Numba made of the text it replaces (the generator's ``issue_reg``, tail), the
        index and the k tests recomputed in each block as that text did, so that NVVM, which
        keeps them where they are, makes the same PTX of it."""
        res = types.UniTuple(types.float32, width) if width > 1 else types.float32

        def impl(typingctx, arr, ok, kv, q, g, kq, cs, c):
            _check(name, arr, g)
            if not isinstance(ok, types.Boolean):
                raise TypeError(f"{name} needs a boolean ok, got {ok}")
            for what, ty in (("q", q), ("kv", kv)):
                if not (isinstance(ty, types.Integer) and not ty.signed and ty.bitwidth in (32, 64)):
                    raise TypeError(f"{name} needs an unsigned 32- or 64-bit {what}, got {ty}")
            if not (isinstance(g, types.Integer) and g.signed and g.bitwidth == 64):
                raise TypeError(f"{name} needs an int64 index, got {g}")
            if not (isinstance(cs, types.Integer) and cs.signed and cs.bitwidth == 64):
                raise TypeError(f"{name} needs an int64 column stride, got {cs}")
            if not (isinstance(kq, types.IntegerLiteral) and isinstance(c, types.IntegerLiteral)):
                return None  # Numba types the call again, its constants as literals
            kq_v, c_v = kq.literal_value, c.literal_value
            if kq_v < 0 or c_v < 0:
                raise TypeError(f"{name} needs a k offset and a column pass >= 0, got {kq_v}, {c_v}")

            def codegen(context, builder, sig, args):
                i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
                arrv, okv, kvv, qv, gv, _, csv, _ = args
                fn = builder.function
                after = [fn.blocks.index(builder.block) + 1]

                def block(tag):  # the blocks in the text's order, after the caller's
                    blk = fn.insert_basic_block(after[0], name=f"{name}.{tag}")
                    after[0] += 1
                    return blk

                def wide(x):
                    return builder.zext(x, i64) if x.type == i32 else x

                def test(e, op):
                    """``q + uint32(kq) + uint32(e) op kv`` in Numba's unsigned arithmetic
                    (64 bits, or 32 for two 32-bit operands of a comparison); ``q [+
                    uint32(kq)] < kv`` when ``e`` is None."""
                    x = builder.add(wide(qv), i64(kq_v)) if kq_v else qv
                    if e is not None:
                        x = builder.add(wide(x), i64(e))
                    if x.type == i32 and kvv.type == i32:
                        return builder.icmp_unsigned(op, x, kvv)
                    return builder.icmp_unsigned(op, wide(x), wide(kvv))

                def at(e=None):
                    """The address of ``g [+ kq] [+ c * cs] [+ e]``."""
                    x = gv
                    if kq_v:
                        x = builder.add(x, i64(kq_v), flags=["nsw"])
                    if c_v:
                        x = builder.add(x, builder.mul(i64(c_v), csv, flags=["nsw"]), flags=["nsw"])
                    if e is not None:
                        x = builder.add(x, i64(e), flags=["nsw"])
                    return _elem_ptr(context, builder, sig.args[0], arrv, types.int64, x, _GLOBAL)

                def slot():
                    return cgutils.alloca_once(builder, f32)

                zero = ir.Constant(f32, 0.0)
                if width == 1:
                    b_k, b_ld, b_z, b_end = block("k"), block("ld"), block("zero"), block("end")
                    builder.cbranch(okv, b_k, b_z)
                    builder.position_at_end(b_k)
                    builder.cbranch(test(None, "<"), b_ld, b_z)
                    builder.position_at_end(b_ld)
                    x = builder.load(at(), align=4)
                    out = slot()
                    builder.store(x, out)
                    builder.branch(b_end)
                    builder.position_at_end(b_z)
                    builder.store(zero, out)
                    builder.branch(b_end)
                    builder.position_at_end(b_end)
                    return builder.load(out)

                b_k, b_vec = block("k"), block("vec")
                elems = [(block(f"ok{e}"), block(f"k{e}"), block(f"ld{e}"), block(f"zero{e}"))
                         for e in range(width)]
                b_end = block("end")
                builder.cbranch(okv, b_k, elems[0][0])
                builder.position_at_end(b_k)
                builder.cbranch(test(width, "<="), b_vec, elems[0][0])
                builder.position_at_end(b_vec)
                vec = builder.load(_vec_ptr(builder, at(), _GLOBAL, width), align=4 * width)
                vals = [builder.extract_element(vec, i32(e)) for e in range(width)]
                # Numba's slots: the results (first stored here), then each element's own but
                # the last's, copied into the results where the elements' branches end.
                outs = [slot() for _ in range(width)]
                for v, out in zip(vals, outs):
                    builder.store(v, out)
                builder.branch(b_end)
                own = []
                for e, (b_ok, b_ke, b_ld, b_z) in enumerate(elems):
                    last = e == width - 1
                    nxt = b_end if last else elems[e + 1][0]
                    builder.position_at_end(b_ok)
                    builder.cbranch(okv, b_ke, b_z)
                    builder.position_at_end(b_ke)
                    builder.cbranch(test(e, "<"), b_ld, b_z)
                    for blk in (b_ld, b_z):
                        builder.position_at_end(blk)
                        if last:
                            for mine, out in zip(own, outs):
                                builder.store(builder.load(mine), out)
                        if blk is b_ld:
                            x = builder.load(at(e), align=4)
                            if not last:
                                own.append(slot())
                        else:
                            x = zero
                        builder.store(x, outs[e] if last else own[e])
                        builder.branch(nxt)
                builder.position_at_end(b_end)
                return context.make_tuple(builder, res, [builder.load(out) for out in outs])

            return res(arr, ok, kv, q, g, kq, cs, c), codegen

        impl.__name__ = name
        return intrinsic(impl)

    ldg4_tail = _ldg_tail(4, "ldg4_tail")
    ldg2_tail = _ldg_tail(2, "ldg2_tail")
    ldg1_tail = _ldg_tail(1, "ldg1_tail")

    @intrinsic
    def cp_async4x4(typingctx, dst, di, src, si):
        """The four ``cp_async4(dst, di + e, src, si + e, uint32(4))`` of
        :func:`cp_async4x4_py` as Numba lowers them written out (``di + e`` and ``si + e``
        for e > 0 in 64-bit signed arithmetic), in one call."""
        _check("cp_async4x4", dst, di)
        _check("cp_async4x4", src, si)
        for idx in (di, si):
            if not (idx.signed and idx.bitwidth == 64):
                raise TypeError(f"cp_async4x4 needs int64 element indices, got {di} and {si}")

        def codegen(context, builder, sig, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            for e in range(4):
                d, g = (args[1], args[3]) if e == 0 else \
                    (builder.add(args[1], i64(e), flags=["nsw"]), builder.add(args[3], i64(e), flags=["nsw"]))
                sptr = _elem_ptr(context, builder, sig.args[0], args[0], types.int64, d, _SHARED)
                gptr = _elem_ptr(context, builder, sig.args[2], args[2], types.int64, g, _GLOBAL)
                _cp_async_call(builder, sptr, gptr, i32(4))
            return context.get_dummy_value()

        return types.void(dst, di, src, si), codegen

    @intrinsic
    def cp_async4x4_if(typingctx, a, x, y, dst, d0, d1, src, s0, s1):
        """The four ``v = a & (x + e < y)`` and ``cp_async4_if(dst, d0 + d1 + e, src, s0 + s1 +
        e, v)`` of :func:`cp_async4x4_if_py` as Numba lowers them written out, one element after
        another, the sums recomputed for each as the text did (NVVM's PTX changed when they
        were computed once ahead), in one call and with no name assigned four times."""
        _check("cp_async4x4_if", dst, d1)
        _check("cp_async4x4_if", src, s1)
        if not isinstance(a, types.Boolean):
            raise TypeError(f"cp_async4x4_if needs a boolean condition, got {a}")
        for v in (x, y, d0, d1, s0, s1):
            if not (isinstance(v, types.Integer) and v.signed and v.bitwidth == 64):
                raise TypeError(f"cp_async4x4_if needs int64 indices and bounds, got {v}")

        def codegen(context, builder, sig, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            av, xv, yv, dstv, d0v, d1v, srcv, s0v, s1v = args

            def add(p, q):
                return builder.add(p, q, flags=["nsw"])

            for e in range(4):
                keep = builder.and_(av, builder.icmp_signed("<", add(xv, i64(e)), yv))
                d = add(add(d0v, d1v), i64(e))
                g = add(add(s0v, s1v), i64(e))
                index = builder.select(keep, g, ir.Constant(i64, 0))
                sptr = _elem_ptr(context, builder, sig.args[3], dstv, types.int64, d, _SHARED)
                gptr = _elem_ptr(context, builder, sig.args[6], srcv, types.int64, index, _GLOBAL)
                nbytes = builder.select(keep, i32(4), i32(0))
                _cp_async_call(builder, sptr, gptr, nbytes)
            return context.get_dummy_value()

        return types.void(a, x, y, dst, d0, d1, src, s0, s1), codegen

    def _cp_async4_tail(width: int, name: str):
        """The intrinsic of :func:`cp_async4x4_tail_py` for ``width`` floats: the ``width``
        statements ``cp_async4(dst, w + wo + e, src, g + gn * ld + e, select(col + uint32(co) <
        kv, e_e, uint32(0)))`` it replaces as Numba lowers them, each element's sums, test and
        select recomputed in its turn as the text had them (the test through Numba's own ``+``
        and ``<`` for the column's and the bound's types)."""
        def impl(typingctx, dst, w, wo, src, g, gn, ld, col, co, kv, *es):
            _check(name, dst, w)
            _check(name, src, g)
            for v in (w, g, ld):
                if not (isinstance(v, types.Integer) and v.signed and v.bitwidth == 64):
                    raise TypeError(f"{name} needs int64 indices and a leading dimension, got {v}")
            for v in (col, kv):
                if not (isinstance(v, types.Integer) and not v.signed):
                    raise TypeError(f"{name} needs an unsigned column and bound, got {v}")
            for v in es:
                if v != types.uint32:
                    raise TypeError(f"{name} needs uint32 byte counts, got {v}")
            if not all(isinstance(v, types.IntegerLiteral) for v in (wo, gn, co)):
                return None  # Numba types the call again, its constants as literals
            wo_v, gn_v, co_v = wo.literal_value, gn.literal_value, co.literal_value
            add = typingctx.resolve_function_type(operator.add, (col, types.uint32), {})
            less = typingctx.resolve_function_type(operator.lt, (add.return_type, kv), {})

            def codegen(context, builder, sig, args):
                i32, i64 = ir.IntType(32), ir.IntType(64)
                dstv, wv, _, srcv, gv, _, ldv, colv, _, kvv = args[:10]

                def call(fn, fsig, vals, tys):
                    vals = [context.cast(builder, v, t, f) for v, t, f in zip(vals, tys, fsig.args)]
                    return context.get_function(fn, fsig)(builder, vals)

                def plus(p, q):
                    return builder.add(p, q, flags=["nsw"])

                for e, nbytes in enumerate(args[10:]):
                    d = plus(plus(wv, i64(wo_v)), i64(e))
                    at = plus(plus(gv, builder.mul(i64(gn_v), ldv, flags=["nsw"])), i64(e))
                    c = call(operator.add, add, (colv, i32(co_v)), (col, types.uint32))
                    keep = call(operator.lt, less, (c, kvv), (add.return_type, kv))
                    nb = builder.select(keep, nbytes, i32(0))
                    sptr = _elem_ptr(context, builder, sig.args[0], dstv, types.int64, d, _SHARED)
                    gptr = _elem_ptr(context, builder, sig.args[3], srcv, types.int64, at, _GLOBAL)
                    _cp_async_call(builder, sptr, gptr, nb)
                return context.get_dummy_value()

            return types.void(dst, w, wo, src, g, gn, ld, col, co, kv, *es), codegen

        if width == 4:
            def typer(typingctx, dst, w, wo, src, g, gn, ld, col, co, kv, e0, e1, e2, e3):
                return impl(typingctx, dst, w, wo, src, g, gn, ld, col, co, kv, e0, e1, e2, e3)
        elif width == 2:
            def typer(typingctx, dst, w, wo, src, g, gn, ld, col, co, kv, e0, e1):
                return impl(typingctx, dst, w, wo, src, g, gn, ld, col, co, kv, e0, e1)
        else:
            def typer(typingctx, dst, w, wo, src, g, gn, ld, col, co, kv, e0):
                return impl(typingctx, dst, w, wo, src, g, gn, ld, col, co, kv, e0)
        typer.__name__ = name
        return intrinsic(typer)

    cp_async4x4_tail = _cp_async4_tail(4, "cp_async4x4_tail")
    cp_async4x2_tail = _cp_async4_tail(2, "cp_async4x2_tail")
    cp_async4x1_tail = _cp_async4_tail(1, "cp_async4x1_tail")

    def cp_async4_swizzled(n: int, vp: int, step: int):
        """The intrinsic ``copy(dst, b, src, g, ld)`` of :func:`cp_async4_swizzled_py`: its
        ``n`` ``cp_async4`` statements as Numba lowers them written out, in one call."""
        cp_async4_swizzled_py(n, vp, step)  # checks the sizes
        return _cp_async4_swizzled(n, vp, step)

    @functools.cache
    def _cp_async4_swizzled(n, vp, step):
        def impl(typingctx, dst, b, src, g, ld):
            _check("cp_async4_swizzled", dst, b)
            _check("cp_async4_swizzled", src, g)
            if not (isinstance(b, types.Integer) and not b.signed):
                raise TypeError(f"cp_async4_swizzled needs an unsigned shared base, got {b}")
            for v in (g, ld):
                if not (isinstance(v, types.Integer) and v.signed and v.bitwidth == 64):
                    raise TypeError(f"cp_async4_swizzled needs an int64 index and stride, got {v}")
            xor = typingctx.resolve_function_type(operator.xor, (b, types.uint32), {})

            def codegen(context, builder, sig, args):
                i32, i64 = ir.IntType(32), ir.IntType(64)
                dstv, bv, srcv, gv, ldv = args
                for t in range(n):
                    # int64(b ^ uint32(x)) through Numba's own ^ and cast for b's type
                    x = [context.cast(builder, v, ty, f) for v, ty, f in
                         zip((bv, i32(4 * (vp * t & 7))), (b, types.uint32), xor.args)]
                    x = context.get_function(operator.xor, xor)(builder, x)
                    d = context.cast(builder, x, xor.return_type, types.int64)
                    d = builder.add(d, i64(4 * (vp * t & ~7)), flags=["nsw"])
                    at = builder.add(gv, builder.mul(i64(step * t), ldv, flags=["nsw"]), flags=["nsw"])
                    sptr = _elem_ptr(context, builder, sig.args[0], dstv, types.int64, d, _SHARED)
                    gptr = _elem_ptr(context, builder, sig.args[2], srcv, types.int64, at, _GLOBAL)
                    _cp_async_call(builder, sptr, gptr, i32(4))
                return context.get_dummy_value()

            return types.void(dst, b, src, g, ld), codegen

        impl.__name__ = f"cp_async4_swizzled_{n}x{vp}x{step}"
        return intrinsic(impl)
