"""The general FP32 SGEMM kernel: the semantic backstop for every validated FP32 request.

Computes, in one pass over C::

    C(m, n) = alpha * op(A)(m, k) @ op(B)(k, n) + beta * C(m, n)

for all four transpose pairs (each a separately compiled variant built by :func:`kernel`),
every m, n >= 1, k >= 0 and every leading dimension the contract allows. It assumes
nothing about alignment: every global access is a scalar 4-byte load or store. Offsets of
the form ``col * ld`` are formed in 64 bits, so matrices past 2**31 elements are fine;
everything inside a tile is 32-bit unsigned arithmetic (``uint32``), which keeps NVVM from
widening it to 64 bits or adding negative-index fix-ups.

Hierarchy (module constants; the derived ones are computed and asserted below):

* CTA tile ``BM x BN`` of C, stepping through K in slices of ``BK``. Each K slice of
  op(A) (``BM x BK``) and op(B) (``BK x BN``) is copied once into shared memory, with the
  global reads coalesced for the transpose at hand: adjacent lanes read adjacent
  addresses, i.e. along m for A in N, along k for A in T, along k for B in N and along n
  for B in T. Shared tiles are stored k-major (``As[p][i]``, ``Bs[p][j]``) so that the
  compute loop reads contiguous rows; each row is padded by ``PAD`` floats, which keeps
  the transposed stores (lanes walking k, i.e. walking rows of the shared tile) to a
  2-way bank conflict (16-way unpadded) while leaving rows 16-byte aligned.
* Tails: rows of op(A) past m and columns of op(B) past n are read clamped to the last
  real one (in bounds, no predicate; they only feed accumulators that are never stored);
  K positions past k read as 0, a test made only on the slice that holds the K tail.
* Shared tiles are double-buffered, and the next K slice is fetched from global memory
  into registers before the current slice is multiplied, so one barrier per K slice
  suffices and the global latency hides behind the FMAs.
* 8 warps arranged ``WARPS_M x WARPS_N``; the lanes of a warp ``LANES_M x LANES_N``.
* Each thread accumulates a ``TM x TN`` register tile built from ``VEC``-wide groups:
  rows ``g * TM_GROUP_STRIDE + VEC * tm + r`` and columns
  ``h * TN_GROUP_STRIDE + VEC * tn + c``. Keeping each group contiguous and 16-byte
  aligned in shared memory lets NVVM turn the fragment reads into 128-bit shared loads
  (it does so on its own once the shared arrays are declared 16-byte aligned). The
  K slice is unrolled in Python (:func:`_unrolled`): NVVM leaves a ``range(BK)`` loop
  around the outer product rolled.
* Epilogue in the same pass: ``alpha * acc`` plus, only when ``beta != 0``, ``beta * C``,
  staged through shared memory so that each warp reads and writes 32 consecutive elements
  of a column of C. With ``beta == 0`` C is only written, never read, so NaNs already in
  C do not leak; the padding rows between columns of C are never touched.

Grid: ``blockIdx.x`` walks the M tiles (up to 2**31 - 1 blocks, so any int32 m fits).
The N tiles are numbered ``blockIdx.z * gridDim.y + blockIdx.y``: :func:`grid` uses
``min(ceil(n / BN), 65535)`` blocks in y and as many z layers as that needs, so n up to
2**31 - 1 (33.6 M tiles, 513 layers) never exceeds the 65535 limit of ``gridDim.y`` or
``gridDim.z``; the spare blocks of the last layer return at once. (A grid-stride loop
over N tiles would do too, but it lets LLVM hoist the A addressing out of that loop and
keep it live across the whole K loop, which costs a register spill in the T variants.)

Strict FP32: no ``fastmath`` (it would flush denormals); FMA contraction is allowed.
Compiled with ``launch_bounds=LAUNCH_BOUNDS`` (2 CTAs of 256 threads per SM: at most 128
registers per thread).
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32, uint32, uint64

from sgblas.dispatch.problem import GemmProblem
from sgblas.enums import MathMode
from sgblas.kernels.abi import SIMULATOR

__all__ = [
    "NAME",
    "TRANSPOSE_PAIRS",
    "BM",
    "BN",
    "BK",
    "TM",
    "TN",
    "BLOCK",
    "LAUNCH_BOUNDS",
    "kernel",
    "grid",
    "can_implement",
]

# --------------------------------------------------------------------------------------
# Tile parameters
# --------------------------------------------------------------------------------------

BM: int = 128  #: CTA tile rows (M)
BN: int = 64  #: CTA tile columns (N)
BK: int = 16  #: K slice held in shared memory per stage
TM: int = 8  #: accumulator rows per thread
TN: int = 4  #: accumulator columns per thread
VEC: int = 4  #: floats per contiguous fragment group (one 128-bit shared load)
WARPS_M: int = 2  #: warps along M in the CTA
LANES_M: int = 8  #: lanes along M in a warp
PAD: int = 4  #: floats appended to each shared row (bank spread, keeps 16-byte rows)
STAGES: int = 2  #: shared-memory buffers (double buffering)
MIN_BLOCKS_PER_SM: int = 2  #: launch bound: caps registers at 65536 / (2 * 256) = 128

NAME: str = f"sgemm_general_{BM}x{BN}x{BK}"

TRANSPOSE_PAIRS: tuple[tuple[str, str], ...] = (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T"))

# Derived quantities.
WARP: int = 32
THREADS_M: int = BM // TM
THREADS_N: int = BN // TN
THREADS: int = THREADS_M * THREADS_N
WARPS_N: int = THREADS // WARP // WARPS_M
LANES_N: int = WARP // LANES_M
TM_GROUPS: int = TM // VEC  # vector groups per thread along M
TN_GROUPS: int = TN // VEC
TM_GROUP_STRIDE: int = BM // TM_GROUPS  # rows between a thread's M groups
TN_GROUP_STRIDE: int = BN // TN_GROUPS
AS_LD: int = BM + PAD  # shared row length of As (one row per k)
BS_LD: int = BN + PAD
AS_STAGE: int = BK * AS_LD  # floats per As buffer
BS_STAGE: int = BK * BS_LD
ACC_SIZE: int = TM * TN  # accumulator registers per thread
AS_SIZE: int = STAGES * AS_STAGE  # shared floats of As, all buffers
BS_SIZE: int = STAGES * BS_STAGE
A_LOADS: int = BM * BK // THREADS  # global elements of A each thread copies per K slice
B_LOADS: int = BK * BN // THREADS
# Global-to-shared copy layouts: the fast (lane) dimension and the step between a
# thread's successive elements along the slow dimension.
A_N_STEP: int = THREADS // BM  # A in N: lanes along m, step in k
A_T_STEP: int = THREADS // BK  # A in T: lanes along k, step in m
B_N_STEP: int = THREADS // BK  # B in N: lanes along k, step in n
B_T_STEP: int = THREADS // BN  # B in T: lanes along n, step in k

# Epilogue staging: one M group of the C tile (CS_ROWS x BN) at a time, in As.
CS_ROWS: int = TM_GROUP_STRIDE
CS_COL_STEP: int = THREADS // CS_ROWS  # columns between a thread's successive outputs
CS_COLS_PER_THREAD: int = BN // CS_COL_STEP

BLOCK: tuple[int, int, int] = (THREADS, 1, 1)
#: ``cuda.jit(launch_bounds=...)``: at most 128 registers, so 2 CTAs (16 warps) fit on an
#: SM. The variants need 93-96 under it, with no spills (sm_90 SASS); a bound of 3 CTAs
#: (80 registers) makes the TN variant spill.
LAUNCH_BOUNDS: tuple[int, int] = (THREADS, MIN_BLOCKS_PER_SM)

#: gridDim.y (and z) limit; N tiles beyond it go to further z layers.
MAX_GRID_Y: int = 65535

assert BM % TM == 0 and BN % TN == 0, "the CTA tile must split into whole thread tiles"
assert THREADS == 256, "the tile shape is tuned for 256 threads (8 warps) per CTA"
assert TM % VEC == 0 and TN % VEC == 0, "thread tiles must be whole 128-bit fragment groups"
assert THREADS_M == WARPS_M * LANES_M and THREADS_N == WARPS_N * LANES_N, (
    "the warp and lane arrangement must cover the thread grid exactly"
)
assert TM_GROUP_STRIDE == VEC * THREADS_M and TN_GROUP_STRIDE == VEC * THREADS_N, (
    "a thread's fragment groups must interleave with its neighbours' to tile BM x BN"
)
assert AS_LD % VEC == 0 and BS_LD % VEC == 0, "padded shared rows must stay 16-byte aligned"
assert THREADS % BM == 0 and THREADS % BK == 0 and THREADS % BN == 0, (
    "every global-to-shared copy layout must use all threads in whole rows"
)
assert BK % A_N_STEP == 0 and BM % A_T_STEP == 0, "A copies must tile the BM x BK slice"
assert BN % B_N_STEP == 0 and BK % B_T_STEP == 0, "B copies must tile the BK x BN slice"
assert BM * BK % THREADS == 0 and BK * BN % THREADS == 0, "each thread copies whole elements"
assert CS_ROWS * BN <= AS_SIZE, "the epilogue's C staging tile must fit in As"
assert THREADS % CS_ROWS == 0 and BN % CS_COL_STEP == 0, "the staged C tile splits evenly"
assert CS_ROWS % WARP == 0, "a warp must write 32 consecutive rows of one column of C"

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


@_inline
def _outer_product(As, Bs, a_base, b_base, p, acc, a_frag, b_frag):
    """acc += As[p, thread rows] (x) Bs[p, thread cols]: TM * TN FMAs for one k."""
    for g in range(TM_GROUPS):
        for r in range(VEC):
            a_frag[g * VEC + r] = As[a_base + uint32(p * AS_LD + g * TM_GROUP_STRIDE + r)]
    for h in range(TN_GROUPS):
        for c in range(VEC):
            b_frag[h * VEC + c] = Bs[b_base + uint32(p * BS_LD + h * TN_GROUP_STRIDE + c)]
    for j in range(TN):
        for i in range(TM):
            acc[j * TM + i] += a_frag[i] * b_frag[j]


def _unrolled(step, count: int):
    """An inline helper calling ``step`` at k offsets p = 0, 1, ..., count - 1.

    NVVM keeps a ``range(BK)`` loop around the outer product rolled, so the K slice is
    unrolled here, in Python: the helper's source is the ``count`` calls written out.
    """
    args = "As, Bs, a_base, b_base, acc, a_frag, b_frag"
    source = f"def k_slice({args}):\n" + "".join(
        f"    step(As, Bs, a_base, b_base, {p}, acc, a_frag, b_frag)\n" for p in range(count)
    )
    namespace = {"step": step}
    exec(compile(source, f"<{NAME} unrolled K slice>", "exec"), namespace)
    return _inline(namespace["k_slice"])


_k_slice = _unrolled(_outer_product, BK)


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


def _build(a_trans: bool, b_trans: bool):
    """Return the Python kernel function for one transpose pair (compile-time constants)."""

    def sgemm_general(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):
        """C = alpha * op(A) @ op(B) + beta * C on column-major flat arrays; see module."""
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


@lru_cache(maxsize=None)
def kernel(transa: str, transb: str):
    """Return the (lazily compiled, cached) dispatcher for ``(transa, transb)`` in N/T."""
    if (transa, transb) not in TRANSPOSE_PAIRS:
        raise ValueError(f"transpose pair ({transa!r}, {transb!r}) is not one of N/T x N/T")
    options = {} if SIMULATOR else {"cache": True, "launch_bounds": LAUNCH_BOUNDS}
    return cuda.jit(**options)(_build(transa == "T", transb == "T"))


def grid(m: int, n: int) -> tuple[int, int, int]:
    """Blocks for an m x n C (m, n >= 1): M tiles on x, N tiles over (y, z), y <= 65535."""
    n_tiles = (n + BN - 1) // BN
    grid_y = min(n_tiles, MAX_GRID_Y)
    return ((m + BM - 1) // BM, grid_y, (n_tiles + grid_y - 1) // grid_y)


def can_implement(p: GemmProblem) -> str | None:
    """The backstop runs every validated FP32 problem; it refuses only other math modes."""
    if p.math_mode is not MathMode.FP32:
        return (
            f"math mode {p.math_mode.name} is not FP32, and the general kernel computes "
            "only strict FP32 products"
        )
    return None
