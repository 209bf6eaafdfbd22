"""The Numba code of the general SGEMM kernel: its inline device helpers and ``_build``.

Split from :mod:`sgblas.kernels.general` so that the kernel's tile constants and ``grid``
import without Numba: only the registry's builder (:mod:`sgblas.kernels.spec`) imports this
module, when a variant is first built. The design and the tile constants (imported here by
name) are described there. sgblas's cubin cache keys every kernel by the text of all of
:mod:`sgblas.kernels`, so editing a constant in ``general.py`` recompiles.
"""

from __future__ import annotations

from numba import cuda, float32, uint32, uint64

from sgblas.runtime.device import SIMULATOR
from sgblas.kernels import memory
from sgblas.kernels.memory import grid_dependency_wait
from sgblas.kernels.general import (
    ACC_SIZE,
    AS_LD,
    AS_SIZE,
    AS_STAGE,
    A_LOADS,
    A_N_STEP,
    A_T_STEP,
    BK,
    BM,
    BN,
    BS_LD,
    BS_SIZE,
    BS_STAGE,
    B_LOADS,
    B_N_STEP,
    B_T_STEP,
    CS_COL_STEP,
    CS_COLS_PER_THREAD,
    CS_ROWS,
    LANES_M,
    LANES_N,
    NAME,
    STAGES,
    TM,
    TM_GROUP_STRIDE,
    TM_GROUPS,
    TN,
    TN_GROUP_STRIDE,
    TN_GROUPS,
    VEC,
    WARP,
    WARPS_M,
)

__all__ = ["build"]

# The simulator rejects an alignment argument; on the device 16 bytes is what lets NVVM
# merge the four scalar fragment reads of a group into one 128-bit shared load.
_SMEM_ALIGN = None if SIMULATOR else 16

# Helpers are inlined at Numba IR level: no separate device function is compiled (that
# would need the current device's compute capability, so PTX could not be produced
# without a GPU), and after inlining every fragment index is a constant.
_inline = cuda.jit(device=True, inline="always")


@_inline
def _clamped_lines(first, step, last, lines):
    """lines[s] = min(first + s * step, last) for s < len(lines) (uint32).

    The rows of op(A) (columns of op(B)) a thread copies. Clamping to the last real row
    keeps every read in bounds without a predicate: the copies of row ``last`` that land
    in shared rows past m only feed accumulators the epilogue never stores.
    """
    for s in range(lines.shape[0]):
        line = uint32(first + uint32(s * step))
        lines[s] = line if line < uint32(last) else uint32(last)


@_inline
def _load_a_slice(A, ulda, uk, k0, a_rows, a_fast, a_slow, a_trans, check_k, a_next):
    """Global -> registers: this thread's A_LOADS elements of op(A)[m0:+BM, k0:+BK].

    Lanes walk the contiguous direction of A in memory (k for A^T, m otherwise). Rows
    come clamped from ``a_rows`` (A^T: one per element; A: ``a_rows[0]`` for all). With
    ``check_k`` (a compile-time constant) columns past k read as 0, so the K tail adds
    nothing; slices known to be whole skip that test.
    """
    for s in range(A_LOADS):
        if a_trans:
            kk = uint32(k0 + a_fast)
            idx = uint64(a_rows[s]) * ulda + kk
        else:
            kk = uint32(k0 + a_slow + uint32(s * A_N_STEP))
            idx = uint64(kk) * ulda + a_rows[0]
        if check_k and kk >= uk:
            a_next[s] = float32(0)
        else:
            a_next[s] = A[idx]


@_inline
def _load_b_slice(B, uldb, uk, k0, b_cols, b_fast, b_slow, b_trans, check_k, b_next):
    """Global -> registers: this thread's B_LOADS elements of op(B)[k0:+BK, n0:+BN].

    As :func:`_load_a_slice`, with columns of op(B) clamped in ``b_cols`` (B: one per
    element; B^T: ``b_cols[0]`` for all).
    """
    for s in range(B_LOADS):
        if b_trans:
            kk = uint32(k0 + b_slow + uint32(s * B_T_STEP))
            idx = uint64(kk) * uldb + b_cols[0]
        else:
            kk = uint32(k0 + b_fast)
            idx = uint64(b_cols[s]) * uldb + kk
        if check_k and kk >= uk:
            b_next[s] = float32(0)
        else:
            b_next[s] = B[idx]


@_inline
def _store_a_slice(As, dst, a_fast, a_slow, a_trans, a_next):
    """Registers -> shared: As[dst + p * AS_LD + i] = op(A)[m0 + i, k0 + p]."""
    for s in range(A_LOADS):
        if a_trans:
            As[dst + a_fast * uint32(AS_LD) + a_slow + uint32(s * A_T_STEP)] = a_next[s]
        else:
            As[dst + (a_slow + uint32(s * A_N_STEP)) * uint32(AS_LD) + a_fast] = a_next[s]


@_inline
def _store_b_slice(Bs, dst, b_fast, b_slow, b_trans, b_next):
    """Registers -> shared: Bs[dst + p * BS_LD + j] = op(B)[k0 + p, n0 + j]."""
    for s in range(B_LOADS):
        if b_trans:
            Bs[dst + (b_slow + uint32(s * B_T_STEP)) * uint32(BS_LD) + b_fast] = b_next[s]
        else:
            Bs[dst + b_fast * uint32(BS_LD) + b_slow + uint32(s * B_N_STEP)] = b_next[s]


#: acc += As[p, thread rows] (x) Bs[p, thread cols]: TM * TN FMAs for the k offset p of a slice
#: (``fma_block``: for j < TN, for i < TM, acc[j * TM + i] += a_frag[i] * b_frag[j]).
_OUTER_PRODUCT = """\
    for g in range(TM_GROUPS):
        for r in range(VEC):
            a_frag[g * VEC + r] = As[a_base + uint32({p} * AS_LD + g * TM_GROUP_STRIDE + r)]
    for h in range(TN_GROUPS):
        for c in range(VEC):
            b_frag[h * VEC + c] = Bs[b_base + uint32({p} * BS_LD + h * TN_GROUP_STRIDE + c)]
    fma_block(acc, a_frag, 0, b_frag, 0)
"""


def _unrolled(count: int):
    """An inline helper doing the outer products of the k offsets p = 0, 1, ..., count - 1.

    NVVM keeps a ``range(BK)`` loop around the outer product rolled, so the K slice is
    unrolled here, in Python: the helper's source is the ``count`` outer products written out.
    Not ``count`` calls of an inline helper: Numba's front end runs once more on the helper
    for each call it inlines (5.6 of the 9 s a variant took). The FMAs are
    :func:`sgblas.kernels.memory.fma_block`, which emits the IR of the same two loops written
    here, for a tenth of the statements and none of the basic blocks.
    """
    args = "As, Bs, a_base, b_base, acc, a_frag, b_frag"
    source = f"def k_slice({args}):\n" + "".join(_OUTER_PRODUCT.format(p=p) for p in range(count))
    namespace = {
        "uint32": uint32, "fma_block": memory.fma_block(TM, TN, "j", col_major=True),
        "TM_GROUPS": TM_GROUPS, "TN_GROUPS": TN_GROUPS, "VEC": VEC, "AS_LD": AS_LD, "BS_LD": BS_LD,
        "TM_GROUP_STRIDE": TM_GROUP_STRIDE, "TN_GROUP_STRIDE": TN_GROUP_STRIDE,
    }
    exec(compile(source, f"<{NAME} unrolled K slice>", "exec"), namespace)
    return _inline(namespace["k_slice"])


_k_slice = _unrolled(BK)


@_inline
def _epilogue(C, uldc, um, un, m0, n0, tid, tm, tn, alpha, beta, acc, Cs):
    """C[tile] = alpha * acc + beta * C[tile], staged through shared memory ``Cs``.

    The accumulators are scattered (each thread owns VEC-row groups), so writing them
    straight to C would touch four times the sectors needed. Instead, one M group of
    the tile at a time (CS_ROWS x BN) is written to shared memory and read back with
    lanes along m, so every warp reads and writes 32 consecutive elements of a column.
    C is not read at all when beta == 0. ``Cs`` aliases As: the caller has passed a
    barrier after the last read of As.
    """
    read_c = beta != float32(0)
    out_row = tid % uint32(CS_ROWS)
    out_col = tid // uint32(CS_ROWS)
    for g in range(TM_GROUPS):
        if g > 0:
            cuda.syncthreads()  # every read of the previous group is done
        # Registers -> Cs (column-major, CS_ROWS rows): VEC consecutive rows per store,
        # which NVVM merges into one 128-bit store; each 8-lane phase of a warp then
        # covers 128 contiguous bytes, free of bank conflicts.
        for h in range(TN_GROUPS):
            for c in range(VEC):
                col = uint32(uint32(VEC) * tn + uint32(h * TN_GROUP_STRIDE + c))
                dst = uint32(col * uint32(CS_ROWS) + uint32(VEC) * tm)
                for r in range(VEC):
                    Cs[dst + uint32(r)] = acc[(h * VEC + c) * TM + g * VEC + r]
        cuda.syncthreads()
        # Cs -> C with lanes along m (coalesced).
        row = uint32(m0 + uint32(g * TM_GROUP_STRIDE) + out_row)
        if row < um:
            for q in range(CS_COLS_PER_THREAD):
                col = uint32(out_col + uint32(q * CS_COL_STEP))
                if uint32(n0 + col) < un:
                    idx = uint64(uint32(n0 + col)) * uldc + row
                    v = alpha * Cs[col * uint32(CS_ROWS) + out_row]
                    if read_c:
                        v += beta * C[idx]
                    C[idx] = v


def build(a_trans: bool, b_trans: bool, after_grid: bool = False):
    """Return the Python kernel function for one transpose pair (compile-time constants);
    ``after_grid``: the sm_90+ build, whose first act is ``griddepcontrol.wait``
    (:data:`sgblas.runtime.device.GRID_WAIT_MIN_CC`; a closure constant, pruned when False)."""

    def sgemm_general(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):
        """C = alpha * op(A) @ op(B) + beta * C on column-major flat arrays; see module."""
        if after_grid:
            grid_dependency_wait()
        As = cuda.shared.array(AS_SIZE, float32, alignment=_SMEM_ALIGN)
        Bs = cuda.shared.array(BS_SIZE, float32, alignment=_SMEM_ALIGN)
        acc = cuda.local.array(ACC_SIZE, float32)
        a_frag = cuda.local.array(TM, float32)
        b_frag = cuda.local.array(TN, float32)
        a_next = cuda.local.array(A_LOADS, float32)
        b_next = cuda.local.array(B_LOADS, float32)
        a_rows = cuda.local.array(A_LOADS, uint32)
        b_cols = cuda.local.array(B_LOADS, uint32)

        # ---- tile mapping ---------------------------------------------------------
        um = uint32(m)
        un = uint32(n)
        uk = uint32(k)
        ulda = uint64(uint32(lda))
        uldb = uint64(uint32(ldb))
        uldc = uint64(uint32(ldc))
        tid = uint32(cuda.threadIdx.x)
        lane = tid % uint32(WARP)
        warp = tid // uint32(WARP)
        # A warp covers LANES_M x LANES_N thread tiles, so its 128-bit fragment reads
        # touch few distinct shared words (one wavefront each for A and B).
        tm = uint32((warp % uint32(WARPS_M)) * uint32(LANES_M) + lane % uint32(LANES_M))
        tn = uint32((warp // uint32(WARPS_M)) * uint32(LANES_N) + lane // uint32(LANES_M))
        m0 = uint32(uint32(cuda.blockIdx.x) * uint32(BM))
        k_tiles = uint32((uk + uint32(BK - 1)) // uint32(BK))
        whole_k_tiles = uint32(uk // uint32(BK))  # slices with no K tail
        n_tiles = uint32((un + uint32(BN - 1)) // uint32(BN))
        last_row = uint32(um - uint32(1))  # m, n >= 1: the caller launches nothing else
        last_col = uint32(un - uint32(1))
        # Global-to-shared copy coordinates: "fast" is the lane direction, which is
        # the contiguous direction of the operand in memory.
        if a_trans:
            a_fast = uint32(tid % uint32(BK))  # k
            a_slow = uint32(tid // uint32(BK))  # m
        else:
            a_fast = uint32(tid % uint32(BM))  # m
            a_slow = uint32(tid // uint32(BM))  # k
        if b_trans:
            b_fast = uint32(tid % uint32(BN))  # n
            b_slow = uint32(tid // uint32(BN))  # k
        else:
            b_fast = uint32(tid % uint32(BK))  # k
            b_slow = uint32(tid // uint32(BK))  # n

        # N tiles are numbered across (y, z): gridDim.y is capped at 65535.
        nt = uint32(uint32(cuda.blockIdx.z) * uint32(cuda.gridDim.y) + uint32(cuda.blockIdx.y))
        if nt >= n_tiles:
            return  # the spare blocks of the last z layer (before any barrier)
        n0 = uint32(nt * uint32(BN))
        for i in range(ACC_SIZE):
            acc[i] = float32(0)
        if a_trans:
            _clamped_lines(m0 + a_slow, A_T_STEP, last_row, a_rows)
        else:
            _clamped_lines(m0 + a_fast, 0, last_row, a_rows)
        if b_trans:
            _clamped_lines(n0 + b_fast, 0, last_col, b_cols)
        else:
            _clamped_lines(n0 + b_slow, B_N_STEP, last_col, b_cols)

        # ---- K slice 0: global -> registers -> shared buffer 0 ------------------
        _load_a_slice(A, ulda, uk, uint32(0), a_rows, a_fast, a_slow, a_trans, True, a_next)
        _load_b_slice(B, uldb, uk, uint32(0), b_cols, b_fast, b_slow, b_trans, True, b_next)
        _store_a_slice(As, uint32(0), a_fast, a_slow, a_trans, a_next)
        _store_b_slice(Bs, uint32(0), b_fast, b_slow, b_trans, b_next)
        cuda.syncthreads()

        kt = uint32(0)
        while kt < k_tiles:
            stage = kt % uint32(STAGES)

            # ---- prefetch slice kt + 1 into registers (latency hidden below) ------
            # Done on every iteration on purpose: past the last slice every element
            # reads as 0. A copy skipped on the last iteration lets LLVM sink the
            # global loads below the FMAs into the (equally conditional) shared
            # store, exposing their whole latency.
            k0 = uint32((kt + uint32(1)) * uint32(BK))
            if uint32(kt + uint32(1)) < whole_k_tiles:
                _load_a_slice(A, ulda, uk, k0, a_rows, a_fast, a_slow, a_trans, False, a_next)
                _load_b_slice(B, uldb, uk, k0, b_cols, b_fast, b_slow, b_trans, False, b_next)
            else:
                _load_a_slice(A, ulda, uk, k0, a_rows, a_fast, a_slow, a_trans, True, a_next)
                _load_b_slice(B, uldb, uk, k0, b_cols, b_fast, b_slow, b_trans, True, b_next)

            # ---- shared -> registers -> accumulators over slice kt ----------------
            a_base = uint32(stage * uint32(AS_STAGE) + uint32(VEC) * tm)
            b_base = uint32(stage * uint32(BS_STAGE) + uint32(VEC) * tn)
            _k_slice(As, Bs, a_base, b_base, acc, a_frag, b_frag)

            # ---- registers -> the other shared buffer ----------------------------
            # (After the last slice this writes zeros nobody reads: harmless, since
            # every read of that buffer was retired by the previous barrier.)
            other = stage ^ uint32(1)
            _store_a_slice(As, uint32(other * uint32(AS_STAGE)), a_fast, a_slow, a_trans, a_next)
            _store_b_slice(Bs, uint32(other * uint32(BS_STAGE)), b_fast, b_slow, b_trans, b_next)
            # One barrier per slice: it publishes the buffer just written and retires
            # every read of the buffer that the next iteration overwrites.
            cuda.syncthreads()
            kt = uint32(kt + uint32(1))

        # ---- epilogue ------------------------------------------------------------
        _epilogue(C, uldc, um, un, m0, n0, tid, tm, tn, alpha, beta, acc, As)

    # Distinct names per variant, for profilers and the on-disk cache's file names.
    sgemm_general.__name__ = f"sgemm_general_{'t' if a_trans else 'n'}{'t' if b_trans else 'n'}"
    sgemm_general.__qualname__ = sgemm_general.__name__
    return sgemm_general
