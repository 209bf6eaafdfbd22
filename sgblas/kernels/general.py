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
  K slice is unrolled in Python (``_unrolled`` in :mod:`sgblas.kernels.general_jit`): NVVM
  leaves a ``range(BK)`` loop around the outer product rolled.
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

Layout: this module holds the tile constants and :func:`grid` and imports without Numba; the
kernel body and its inline device helpers live in :mod:`sgblas.kernels.general_jit`, which
the registry (:mod:`sgblas.kernels.spec`) imports when a variant is first built. The general
kernel accepts every validated FP32 problem: it is the backstop, and the registry gives it no
guard beyond the keys every variant is checked on.
"""

from __future__ import annotations


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
    "grid",
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


def grid(m: int, n: int) -> tuple[int, int, int]:
    """Blocks for an m x n C (m, n >= 1): M tiles on x, N tiles over (y, z), y <= 65535."""
    n_tiles = (n + BN - 1) // BN
    grid_y = min(n_tiles, MAX_GRID_Y)
    return ((m + BM - 1) // BM, grid_y, (n_tiles + grid_y - 1) // grid_y)
