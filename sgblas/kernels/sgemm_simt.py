"""Factory for register-tiled, strict-FP32 SGEMM kernels on CUDA cores (SIMT FFMA).

Computes ``C = alpha * op(A) @ op(B) + beta * C`` for column-major ``A``, ``B`` and ``C``,
every transpose pair (``TileConfig.transa``/``transb``), all FP32 with FP32 FMA accumulation
(no tensor cores, no TF32, no flush-to-zero).

Hierarchy (all sizes are :class:`TileConfig` fields; derived sizes are asserted there):

* CTA tile ``BM x BN``, marching over K in steps of ``BK``; the op(A) and op(B) slices of a
  step sit in shared memory, ``As[stage][k][m]`` and ``Bs[stage][k][n]``, two stages deep, so
  the next step's copy overlaps the current step's arithmetic (one barrier per step).
* ``WARPS_M x WARPS_N`` warps, each owning a ``WM x WN`` warp tile, its 32 lanes laid out
  ``LANES_M x LANES_N``.
* Each thread owns a ``TM x TN`` accumulator tile (8 x 8; 16 x 8 in the wide rows of NN and NT) made of
  ``TM / 4 x TN / 4`` sub-tiles of 4 x 4, spaced ``WM / (TM / 4)`` (``WN / (TN / 4)``) apart,
  so that at every k its TM A values and TN B values come from shared memory as 16-byte loads,
  and a warp's 16-byte loads fall in distinct banks or broadcast. A larger thread tile spends
  fewer instructions on fragment loads per FMA (16 x 8: 3 loads per 64 FMAs, 8 x 8: 4) and
  needs fewer threads per CTA tile, so more registers each
  (docs/history/tuning-ladder-3-runs-g-to-i.md, "Run G").

The compute core and the epilogue are the same for every layout; only the copy phases differ,
one strategy per operand layout:

* An operand contiguous along m or n (A in N, B in T: "mn-major") goes straight into shared
  memory with ``cp.async`` vectors along m (n) of the alignment class's width (16, 8 or 4
  bytes), unpadded rows. The last, partial vector at row m (column n) is one copy with fewer
  source bytes (zero fill) in every column but the last, where it ends inside the column's
  padding rows (the leading dimension is a multiple of the vector and >= m); in the slice
  holding the last column it is copied element by element with 4-byte ``cp.async`` and zero
  fill, so no copy names a byte past the matrix (compute-sanitizer's memcheck reports a
  16-byte copy with fewer source bytes as a read past the allocation when the buffer ends at
  the matrix's last element).
* An operand contiguous along k (A in T, B in N: "k-major") is read with vector loads along k
  into registers (LDG.128 / LDG.64 / LDG.32) and stored transposed into shared memory after
  the arithmetic. ``KQB`` lanes share a column (2 x 16 B, 4 x 8 B or 4 x 4 B: whole 16- or
  32-byte runs), and the rows are padded by ``KPAD`` floats (4, 4, 8) so that the 32 lanes'
  scalar stores fall in 32 distinct banks (CUTLASS's SIMT iterators for row-major A pad the
  same way, ``simt_transpose_padding``). K tails are read element by element with zero fill.
  The register-staged copies go in chunks of at most 8 floats a thread, spread over the K step
  (issued at one k step, stored at the next chunk's), so one chunk is held in registers at a
  time: with both operands k-major (TN) the first is issued at the start of a K step and
  stored halfway, the second issued halfway and stored at the end.

Columns past k are zero-filled; rows/columns past m/n are zero-filled or left stale (they only
feed C elements that are never stored); so the kernel is exact for every m, n, k >= 1 whose
pointers and leading dimensions are in the alignment class (``align`` bytes: A, B, C start
on a multiple of it and lda, ldb, ldc are multiples of ``align // 4``; C's may be narrower,
``c_align``, for the variants that read packed copies of A and B).

Split-K slices (``split_k``): the kernel takes :data:`sgblas.kernels.abi.GEMM_SPLIT` (GEMM's
parameters, ``k_chunk`` and ``sem``); ``blockIdx.y`` is the split index ``s``, the CTA multiplies
over k in ``[s * k_chunk, min(k, (s + 1) * k_chunk))``. With ``sem`` empty (a parallel split) it
stores ``alpha`` times that partial product, never reading C, into the column-major m x n matrix
at ``C + s * ldc * n``; a split whose range is empty stores zeros. With ``sem`` (a serial split,
one int32 per CTA along x, zero at the launch) the slices of a tile add into C in turn: thread 0
spins on the tile's semaphore until it reads s, the CTA stores ``alpha * partial + C`` (slice 0:
``+ beta * C``, C unread when beta == 0), reading C with ``ld.global.cg``, fences, and sets the
semaphore to s + 1 (the last slice to 0, so the array is zero again for the next launch). Slice
s - 1 of a tile has the lower block index, so it was placed on an SM before slice s and never
waits on a CTA that is not resident (CUTLASS's serial split-K makes the same assumption).
:func:`grid_for` takes the number of splits.

Unrolling: NVVM keeps a constant loop over the BK k steps rolled (its body is TM x TN FMAs),
which would leave the register fragments indexed at run time, so the k steps are unrolled by
generating the kernel's source from the config: per k step, the 16-byte fragment loads for
the next step (register double buffering) and the TM x TN FMA block, two constant-trip loops
over ``cuda.local.array`` accumulators that NVVM does unroll, so every index is a constant and
nothing reaches local memory. The text writes each as one call of an intrinsic of
:mod:`sgblas.kernels.memory` (``lds4_into``, and ``fma_block``, which emits those loops), whose
IR is what Numba made of the same loads and loops written in the text, so the PTX is the same:
written in the text, the 48 FMA blocks and 192 fragment loads were two thirds of the kernel's
statements and most of its basic blocks, and Numba's front end, whose passes grow with their
products, took three to four times as long. (Writing the 64 FMAs out as scalar statements
gives the same SASS main loop but makes the front end 4-6x slower still; the epilogue's row
loops likewise.) For the same reason the register-staged loads of the last slice, a vector or
element by element with zeros past k, are one call each (``ldg4_tail`` and its 2- and 1-float
forms, whose blocks are those of the nested ``if`` statements they were written as), and so
are the element-by-element copies of a partial vector in that slice (``cp_async4x4_tail``
and its 2- and 1-float forms, the ``cp_async4`` statements they were written as), a
conditional expression of two computed values is a ``select`` call and one that loads is an
``if`` statement: each conditional expression costs
Numba basic blocks and a variable that its SSA pass rewrites across the whole function. The K
loop itself is peeled three ways so its steady state has no K predicates: full steps, the step
that copies the last slice (the one that ends A's or B's buffer: K tail, partial vectors
element by element), and the last step. The text is compiled with ``exec`` under this file's
name, so Numba's on-disk cache can key it.

Importing this module does not import Numba: the generator and the guard are plain Python,
and Numba and :mod:`sgblas.kernels.memory` are imported by :func:`build_pyfunc` when a kernel
is first built. The tile configurations that ship are rows of the registry's manifest
(:mod:`sgblas.kernels.spec`).

Index arithmetic: 64-bit for anything multiplied by a leading dimension; 32-bit unsigned for
lane arithmetic; shared-memory offsets are 64-bit base + constant, which NVVM folds into the
immediate offsets of the shared loads. ``beta == 0`` means C is never read.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass
from typing import NamedTuple

from sgblas.kernels.problem import GemmProblem
from sgblas.runtime.device import SIMULATOR

__all__ = ["TileConfig", "generate_source", "build_pyfunc", "fma_loops", "grid_for", "guard", "TID_AGAIN",
           "CTAID_AGAIN"]


@dataclass(frozen=True)
class TileConfig:
    """Tile sizes, operand layouts and alignment class of one generated kernel."""

    BM: int = 128            # CTA tile rows (m)
    BN: int = 128            # CTA tile columns (n)
    BK: int = 16             # K step held in shared memory per stage
    WARPS_M: int = 2         # warps along m
    WARPS_N: int = 4         # warps along n
    LANES_M: int = 8         # lanes of a warp along m (LANES_M * LANES_N == 32)
    group_m: int = 8         # grouped raster: CTAs walk group_m tile rows, then step along n
    #                          (0: plain column-by-column order)
    min_blocks: int = 2      # launch bound: resident CTAs per SM, which caps the registers
    #                          at 65536 / (THREADS * min_blocks)
    transa: str = "N"        # op(A) = A ("N", m x k stored) or A^T ("T", k x m stored)
    transb: str = "N"        # op(B) = B ("N", k x n stored) or B^T ("T", n x k stored)
    align: int = 16          # alignment class in bytes (16, 8, 4): the global vector width
    split_k: bool = False    # a split-K slice kernel (ABI GEMM_SPLIT), see the module doc
    TM: int = 8              # thread tile rows: TM // 4 sub-tiles of 4, WM / (TM // 4) apart
    TN: int = 8              # thread tile columns: TN // 4 sub-tiles of 4, WN / (TN // 4) apart
    fma: str = "rows"        # the FMA block's order: "rows" (i outer, j inner), "snake" (outer
    #                          over the shorter side, inner snaking:
    #                          docs/history/tuning-ladder-4-runs-j-to-l.md, rung 25)
    #                          or "snake_t" (the same with the two loops swapped,
    #                          docs/history/tuning-ladder-5-runs-m-to-p.md, rung 30)
    k_view: str = ""         # split_k only: the operands ("a", "b") whose slice offset in k
    #                          enters once, as a view of the array that starts at the slice,
    #                          instead of in each thread's address
    #                          (docs/history/tuning-ladder-5-runs-m-to-p.md, rung 28)
    origin_view: str = ""    # the operands ("a", "b") whose CTA tile origin (row0 / col0)
    #                          enters the same way
    #                          (docs/history/tuning-ladder-5-runs-m-to-p.md, rung 29)
    kq: int = 0              # lanes that share a k-major column in a register-staged copy;
    #                          0 takes the alignment class's
    #                          (KQB; docs/history/tuning-ladder-5-runs-m-to-p.md, rung 36)
    c_align: int = 0         # C's alignment class in bytes when it is narrower than A's and
    #                          B's (a packed variant: sgblas/kernels/packed.py); 0: ``align``
    c_stage: bool = False    # C through shared memory in the epilogue, so that a warp's
    #                          4-byte accesses of C cover 32 consecutive rows of one column
    #                          (whole sectors) instead of 4 rows in each of 8 x 4 places

    STAGES = 2  # shared-memory stages (double buffering)

    @property
    def LANES_N(self) -> int:
        return 32 // self.LANES_M

    @property
    def THREADS(self) -> int:
        return 32 * self.WARPS_M * self.WARPS_N

    @property
    def WM(self) -> int:
        return self.BM // self.WARPS_M

    @property
    def WN(self) -> int:
        return self.BN // self.WARPS_N

    @property
    def VEC(self) -> int:
        """Floats per global vector access: 4, 2 or 1."""
        return self.align // 4

    @property
    def VEC_C(self) -> int:
        """Floats per vector access of C in the epilogue."""
        return (self.c_align or self.align) // 4

    @property
    def pair(self) -> tuple[str, str]:
        return (self.transa, self.transb)

    @property
    def a_kmajor(self) -> bool:
        """A is contiguous along k (stored k x m): register-staged, transposed into As."""
        return self.transa == "T"

    @property
    def b_kmajor(self) -> bool:
        """B is contiguous along k (stored k x n): register-staged, transposed into Bs."""
        return self.transb == "N"

    @property
    def KQB(self) -> int:
        """Lanes that share one column in a k-major copy: 2 x 16 B or 4 x 8 B (a 32-byte
        sector a column), 4 x 4 B (half a sector: fewer column passes per thread, so fewer
        address registers, which the 4-byte class needs most); ``kq`` overrides it."""
        return self.kq or {4: 2, 2: 4, 1: 4}[self.VEC]

    @property
    def KPAD(self) -> int:
        """Row padding of a k-major operand's shared tile, in floats: a warp's transposed
        stores then hit 32 distinct banks (KQB k-groups of VEC rows, 32 / KQB columns)."""
        return 32 // (self.KQB * self.VEC)

    @property
    def SA(self) -> int:
        """Row stride of As[k][m]: padded when A is stored transposed into it (k-major A)."""
        return self.BM + self.KPAD if self.a_kmajor else self.BM

    @property
    def SB(self) -> int:
        """Row stride of Bs[k][n]: padded when B is stored transposed into it (k-major B)."""
        return self.BN + self.KPAD if self.b_kmajor else self.BN

    @property
    def LDS_C(self) -> int:
        """Column stride of a warp's staged block of C: WM, padded by 4 when a quarter-warp's
        16-byte stores span two columns (LANES_M < 8), which then fall in different banks."""
        return self.WM + (0 if self.LANES_M >= 8 else 4)

    @property
    def stage_floats(self) -> int:
        """Floats of one warp's staged block of C: WM rows x the 4 * LANES_N columns of one
        column sub-tile of its lanes."""
        return 4 * self.LANES_N * self.LDS_C

    @property
    def launch_bounds(self) -> tuple[int, int]:
        """``cuda.jit(launch_bounds=...)``: THREADS per CTA, ``min_blocks`` CTAs per SM."""
        return (self.THREADS, self.min_blocks)

    @property
    def shared_bytes(self) -> int:
        return 4 * self.STAGES * self.BK * (self.SA + self.SB)

    def name(self) -> str:
        """The CTA tile, and the thread tile when it is not 8 x 8."""
        t = "" if (self.TM, self.TN) == (8, 8) else f"t{self.TM}x{self.TN}"
        q = f"kq{self.kq}" if self.kq else ""
        cs = "cs" if self.c_stage else ""
        return f"{self.BM}x{self.BN}x{self.BK}{t}{q}{cs}"

    def check(self) -> None:
        """Assert the relationships the generated code relies on."""
        assert self.transa in ("N", "T") and self.transb in ("N", "T"), \
            f"transpose pair {self.transa!r}{self.transb!r} is not one of NN, NT, TN, TT"
        assert self.align in (4, 8, 16), f"alignment class {self.align} is not 16, 8 or 4 bytes"
        assert self.c_align in (0, 4, 8, 16) and self.c_align <= self.align, \
            f"C's alignment class {self.c_align} is not 0 (align's), 4, 8 or 16 bytes up to align"
        assert self.fma in ("rows", "snake", "snake_t"), \
            f"FMA order {self.fma!r} is not 'rows', 'snake' or 'snake_t'"
        assert set(self.k_view) <= {"a", "b"} and (self.split_k or not self.k_view), \
            f"k_view={self.k_view!r}: only a split-K slice kernel takes views of 'a' and/or 'b'"
        assert set(self.origin_view) <= {"a", "b"}, \
            f"origin_view={self.origin_view!r}: the views are of 'a' and/or 'b'"
        assert 32 % self.LANES_M == 0, "LANES_M must divide the 32 lanes of a warp"
        assert self.TM % 4 == 0 and self.TN % 4 == 0, "a thread tile is made of 4 x 4 sub-tiles"
        assert self.WM == self.TM * self.LANES_M and self.BM == self.WM * self.WARPS_M, \
            "a warp tile along m must be TM // 4 sub-tiles of 4 rows per lane: WM == TM * LANES_M"
        assert self.WN == self.TN * self.LANES_N and self.BN == self.WN * self.WARPS_N, \
            "a warp tile along n must be TN // 4 sub-tiles of 4 columns per lane: WN == TN * LANES_N"
        assert self.BK % 8 == 0, "k-major copies cover 8 floats of a column per pass: BK % 8 == 0"
        if self.c_stage:
            assert self.VEC_C == 1 and not self.split_k, \
                "C is staged through shared memory only for 4-byte C accesses, outside split-K slices"
            assert self.WM % 32 == 0, "a staged column is read by the warp 32 rows at a time: WM % 32 == 0"
            half = self.THREADS // 64
            assert half * self.stage_floats <= self.STAGES * self.BK * min(self.SA, self.SB), \
                "each half of the warps stages its blocks of C in one of the two shared arrays"
        T, V = self.THREADS, self.VEC
        assert self.kq in (0, 2, 4, 8) and (self.BK // V) % self.KQB == 0, \
            f"kq={self.kq}: the lanes of a k-major column must be 2, 4 or 8 and divide a column's BK // VEC vectors"
        for kmajor, br, what in ((self.a_kmajor, self.BM, "A"), (self.b_kmajor, self.BN, "B")):
            if kmajor:
                qb = self.KQB
                assert T % qb == 0 and br % (T // qb) == 0 and (self.BK * br // V) % T == 0, \
                    f"the {what} slice (BK x {br} as {V}-float vectors along k) must split evenly over the threads"
            else:
                tpc = br // V
                assert T % tpc == 0 and self.BK % (T // tpc) == 0, \
                    f"the {what} slice ({br} x BK as {V}-float vectors along m/n) must split evenly over the threads"


class _Operand(NamedTuple):
    """How one operand is named and laid out in the generated text."""

    p: str        # prefix of its variables: "a" / "b"
    arr: str      # the global array: "A" / "B"
    sh: str       # the shared array: "As" / "Bs"
    kmajor: bool  # contiguous along k: register-staged and transposed
    BR: int       # tile extent along m / n
    S: int        # shared row stride
    ext: str      # "m" / "n"
    org: str      # "row0" / "col0"
    ld: str       # "lda64" / "ldb64"


def _src_lines(cfg: TileConfig, fname: str, after_grid: bool = False) -> list[str]:  # noqa: C901 - a code generator
    """The kernel's source text, one line per element of the list; ``after_grid``: it begins
    with ``griddepcontrol.wait`` (the sm_90+ build, :data:`sgblas.runtime.device.GRID_WAIT_MIN_CC`)."""
    cfg.check()
    BM, BN, BK, SA, SB = cfg.BM, cfg.BN, cfg.BK, cfg.SA, cfg.SB
    T, V = cfg.THREADS, cfg.VEC
    WM, WN = cfg.WM, cfg.WN
    STAGE = {"a": BK * SA, "b": BK * SB}
    split = cfg.split_k
    K = "kn" if split else "k"
    ops = (_Operand("a", "A", "As", cfg.a_kmajor, BM, SA, "m", "row0", "lda64"),
           _Operand("b", "B", "Bs", cfg.b_kmajor, BN, SB, "n", "col0", "ldb64"))
    cp_ops = [o for o in ops if not o.kmajor]
    reg_ops = [o for o in ops if o.kmajor]

    L: list[str] = []
    w = L.append
    TM, TN = cfg.TM, cfg.TN
    outer, snake = fma_loops(cfg)
    # The intrinsic is made by the text, so that the FMA order is part of the text (which the
    # kernel cache keys; of this module it keys only _namespace).
    w(f"fma_block = fma_block_of({TM}, {TN}, {outer!r}, {snake})  # acc += fa x fb for one k")
    w(f"def {fname}(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc{', k_chunk, sem' if split else ''}):")
    if after_grid:
        w("    grid_dependency_wait()  # before any access to memory the kernel ahead may write")
    al = "" if SIMULATOR else ", alignment=16"
    w(f"    As = cuda.shared.array({2 * STAGE['a']}, float32{al})")
    w(f"    Bs = cuda.shared.array({2 * STAGE['b']}, float32{al})")
    w("")
    w("    # ---- tile mapping: the C tile of this CTA (grouped raster keeps A/B panels in L2)")
    # Unsigned 32-bit throughout (m, n < 2**31, so no sum here wraps): Numba's signed int64
    # division would be a call to a 64-bit division routine, which a separately linked cubin
    # (nvJitLink) keeps as an ABI call with a stack frame.
    w(f"    tiles_m = (uint32(m) + uint32({BM - 1})) // uint32({BM})")
    w("    pid = uint32(cuda.blockIdx.x)")
    if cfg.group_m:
        w(f"    tiles_n = (uint32(n) + uint32({BN - 1})) // uint32({BN})")
        w(f"    width = uint32({cfg.group_m}) * tiles_n")
        w(f"    first_m = (pid // width) * uint32({cfg.group_m})")
        w(f"    gsize = min(uint32(tiles_m - first_m), uint32({cfg.group_m}))")
        w("    in_group = pid % width")
        w("    bm = first_m + in_group % gsize")
        w("    bn = in_group // gsize")
    else:
        w("    bm = pid % tiles_m")
        w("    bn = pid // tiles_m")
    w(f"    row0 = int64(bm) * {BM}")
    w(f"    col0 = int64(bn) * {BN}")
    if split:
        w("    # ---- split-K: this CTA's k range [kbeg, kbeg + kn)")
        w("    s_k = uint32(cuda.blockIdx.y)")
        w("    kbeg = int64(s_k) * int64(k_chunk)")
        w("    kn = max(min(int64(k) - kbeg, int64(k_chunk)), int64(0))")
    w("    tid = uint32(cuda.threadIdx.x)")
    w("    warp = tid >> uint32(5)")
    w("    lane = tid & uint32(31)")
    w(f"    am0 = (warp % uint32({cfg.WARPS_M})) * uint32({WM}) + "
      f"(lane % uint32({cfg.LANES_M})) * uint32(4)")
    w(f"    bn0 = (warp // uint32({cfg.WARPS_M})) * uint32({WN}) + "
      f"(lane // uint32({cfg.LANES_M})) * uint32(4)")
    w("    lda64 = int64(lda)")
    w("    ldb64 = int64(ldb)")
    for o in ops:
        if o.p in cfg.origin_view:
            # The tile's origin in the array's base, uniform per CTA, like the slice's offset
            # below (docs/history/tuning-ladder-5-runs-m-to-p.md, rung 29); row0 < m and
            # col0 < n keep it inside the array.
            w(f"    {o.arr} = {o.arr}[{o.org}{f' * {o.ld}' if o.kmajor else ''}:]")
    for o in ops:
        if o.p in cfg.k_view:
            # The same addresses, with the slice's offset in the array's base (uniform per
            # CTA) rather than in every thread's index: under nvJitLink 13.5 this changes the
            # K loop's register allocation (docs/history/tuning-ladder-5-runs-m-to-p.md,
            # rung 28). A non-empty slice starts inside the array; an empty one (kn == 0: its
            # start is clamped to the end) reads nothing.
            w(f"    {o.arr} = {o.arr}[kbeg{'' if o.kmajor else f' * {o.ld}'}:]")
    w("")

    # Per-operand copy geometry.
    geo: dict[str, dict] = {}
    for o in ops:
        p = o.p
        if not o.kmajor:
            tpc = o.BR // V                  # threads per k column (vectors along m/n)
            cpp = T // tpc                   # k columns per pass
            geo[p] = dict(n=o.BR * BK // V // T, cpp=cpp)
            w(f"    # ---- {o.arr}: {V}-float cp.async vectors along {o.ext} into {o.sh}[k][{o.ext}]")
            w(f"    {p}_r = (tid % uint32({tpc})) * uint32({V})")
            w(f"    {p}_c = tid // uint32({tpc})")
            w(f"    {p}_left = int64({o.ext}) - ({o.org} + int64({p}_r))   # rows of my vector in the matrix")
            if V > 1:
                w(f"    {p}_full = {p}_left >= {V}")
                w(f"    {p}_bytes = uint32(max(min({p}_left, int64({V})), int64(0))) * uint32(4)")
                for e in range(V):
                    w(f"    {p}_e{e} = select({p}_left > {e}, uint32(4), uint32(0))")
            else:
                w(f"    {p}_e0 = select({p}_left > 0, uint32(4), uint32(0))")
            kb = f" + kbeg * {o.ld}" if split and p not in cfg.k_view else ""
            org = "" if p in cfg.origin_view else f"{o.org} + "
            w(f"    {p}_g = {org}int64({p}_r) + int64({p}_c) * {o.ld}{kb}   # 64-bit: scaled by ld")
            w(f"    {p}_w = int64({p}_c * uint32({o.S}) + {p}_r)   # my store slot, stage 0")
            w(f"    {p}_wflip = int64({STAGE[p]}) + 2 * {p}_w   # x -> flip - x swaps stage 0 <-> 1")
            w(f"    {p}_step = {BK} * {o.ld}")
        else:
            qb = cfg.KQB                     # lanes per column
            rq = (BK // V) // qb             # k-groups of a column one thread covers
            cpp = T // qb                    # columns per pass
            nl = BK * o.BR // V // T
            geo[p] = dict(n=nl, rq=rq, cpp=cpp, qb=qb)
            w(f"    # ---- {o.arr}: {V}-float loads along k into registers, stored transposed "
              f"into {o.sh}[k][{o.ext}]")
            w(f"    {p}_q = (tid % uint32({qb})) * uint32({V})")
            w(f"    {p}_j = tid // uint32({qb})")
            kb = " + kbeg" if split and p not in cfg.k_view else ""
            # One global base per thread; the k group and the column pass of each load are a
            # constant offset and a multiple of {p}_cs, the shared slot a constant offset.
            org = "" if p in cfg.origin_view else f"{o.org} + "
            w(f"    {p}_g = int64({p}_q){kb} + ({org}int64({p}_j)) * {o.ld}")
            if nl > rq:
                w(f"    {p}_cs = {o.ld} * {cpp}   # the next column pass")
            for c in range(nl // rq):
                j = f"{p}_j + uint32({cpp * c})" if c else f"{p}_j"
                w(f"    {p}_ok{c} = {o.org} + int64({j}) < int64({o.ext})")
            for r in range(nl):
                w(f"    {' = '.join(f'x{p}{r}_{e}' for e in range(V))} = float32(0)")
            w(f"    {p}_w = int64({p}_q * uint32({o.S}) + {p}_j)")
            w(f"    {p}_ws = int64(0)                                  # store stage offset")
    w("    a_r = int64(am0)                                 # my As fragment base, stage 0")
    w("    b_r = int64(bn0)                                 # my Bs fragment base, stage 0")
    w(f"    a_rflip = int64({STAGE['a']}) + 2 * a_r")
    w(f"    b_rflip = int64({STAGE['b']}) + 2 * b_r")
    w(f"    acc = cuda.local.array({TM * TN}, float32)    # {TM} x {TN} accumulators, acc[i * {TN} + j]")
    w(f"    fa = cuda.local.array({2 * TM}, float32)     # A fragments, two buffers of {TM}")
    w(f"    fb = cuda.local.array({2 * TN}, float32)     # B fragments, two buffers of {TN}")
    w(f"    for i in range({TM * TN}):")
    w("        acc[i] = float32(0)")
    w("")

    # The register-staged copies in chunks of at most CHUNK floats per thread, spread over the
    # K step: chunk i is issued at k step starts[i] and stored to shared memory at starts[i + 1]
    # (the last one at the end of the step), so no more than one chunk is held in registers.
    CHUNK = 8
    chunks = [(o, list(range(r0, min(r0 + CHUNK // V, geo[o.p]["n"]))))
              for o in reg_ops for r0 in range(0, geo[o.p]["n"], CHUNK // V)]
    starts = [i * BK // len(chunks) for i in range(len(chunks))]

    def issue_cp(o: _Operand, p: str, tail: bool) -> None:
        """cp.async the slice at {p}_g into the stage at {p}_w; with tail, zero past column kv."""
        g = geo[o.p]
        x = o.p
        for r in range(g["n"]):
            col = f"{x}_c + uint32({g['cpp'] * r})" if r else f"{x}_c"
            goff = f"{x}_g + {g['cpp'] * r} * {o.ld}" if r else f"{x}_g"
            soff = f"{x}_w + {g['cpp'] * r * o.S}" if r else f"{x}_w"
            kpred = f"{col} < kv"
            tail_args = (f"{o.sh}, {x}_w, {g['cpp'] * r * o.S}, {o.arr}, {x}_g, {g['cpp'] * r}, {o.ld}, "
                         f"{x}_c, {g['cpp'] * r}, kv, " + ", ".join(f"{x}_e{e}" for e in range(V)))
            if V == 1:
                if tail:  # cp_async4(.., soff, .., goff, select(kpred, e0, uint32(0)))
                    w(f"{p}cp_async4x1_tail({tail_args})")
                else:
                    w(f"{p}cp_async4({o.sh}, {soff}, {o.arr}, {goff}, {x}_e0)")
                continue
            if not tail:
                # Not the last slice: the partial vector at row m (column n) ends inside the
                # column's padding rows (ld is a multiple of V and >= m), so one copy with
                # fewer source bytes (zero fill) stays inside the buffer.
                w(f"{p}cp_async{4 * V}({o.sh}, {soff}, {o.arr}, {goff}, {x}_bytes)")
                continue
            # The slice holding the last column: a whole vector in one copy, the partial one
            # at row m (column n) element by element, so no byte past the matrix is named.
            w(f"{p}if {x}_full and {kpred}:")
            w(f"{p}    cp_async{4 * V}({o.sh}, {soff}, {o.arr}, {goff}, uint32({4 * V}))")
            w(f"{p}else:")
            w(f"{p}    cp_async4x{V}_tail({tail_args})")

    def reg_slot(o: _Operand, r: int) -> tuple[int, int]:
        """(k offset, column pass) of a register-staged operand's load r."""
        g = geo[o.p]
        return V * g["qb"] * (r % g["rq"]), r // g["rq"]

    def issue_reg(chunk, p: str, tail: bool) -> None:
        """Load a chunk of the slice at {p}_g into registers; with tail, zero from k column kv on."""
        o, loads = chunk
        x = o.p
        load = {4: "ldg4", 2: "ldg2", 1: "ldg1"}[V]
        for r in loads:
            kq, c = reg_slot(o, r)
            at = f"{x}_g" + (f" + {kq}" if kq else "") + (f" + {c} * {x}_cs" if c else "")
            ok = f"{x}_ok{c}"
            dst = ", ".join(f"x{x}{r}_{e}" for e in range(V))
            if not tail:
                w(f"{p}if {ok}:")
                w(f"{p}    {dst} = {load}({o.arr}, {at})")
            else:
                # The whole vector if it is inside k, else element by element, zero past
                # it: one call, the intrinsic making the blocks of the `if` statements this
                # was written as (and the index in each, as they had it)
                w(f"{p}{dst} = ldg{V}_tail({o.arr}, {ok}, kv, {x}_q, {x}_g, {kq}, "
                  f"{f'{x}_cs' if c else '0'}, {c})")

    def store_reg(chunk, p: str) -> None:
        o, loads = chunk
        x = o.p
        for r in loads:
            kq, c = reg_slot(o, r)
            for e in range(V):
                w(f"{p}sts1({o.sh}, {x}_ws + {x}_w + {(kq + e) * o.S + geo[x]['cpp'] * c}, x{x}{r}_{e})")

    def issue_start(p: str, tail: bool) -> None:
        """The copies that start with a K step: every cp.async and the first register one."""
        for o in cp_ops:
            issue_cp(o, p, tail)
        if chunks:
            issue_reg(chunks[0], p, tail)
        if cp_ops:
            w(f"{p}cp_async_commit()")

    def finish_stage(p: str) -> None:
        """The last register-staged chunk -> shared, then make the stage visible to the block."""
        if chunks:
            store_reg(chunks[-1], p)
        if cp_ops:
            w(f"{p}cp_async_wait_all()")
        w(f"{p}cuda.syncthreads()")

    def advance(p: str) -> None:
        for o in ops:
            x = o.p
            if o.kmajor:
                w(f"{p}{x}_g += {BK}")
                w(f"{p}{x}_ws = int64({STAGE[x]}) - {x}_ws")
            else:
                w(f"{p}{x}_g += {x}_step")
                w(f"{p}{x}_w = {x}_wflip - {x}_w")

    def load_frag(p: str, kk: int, buf: int) -> None:
        for arr, sh, base, stride, t, gap in (("fa", "As", "a_r", SA, TM, WM // (TM // 4)),
                                              ("fb", "Bs", "b_r", SB, TN, WN // (TN // 4))):
            for h in range(t // 4):
                w(f"{p}lds4_into({arr}, {t * buf + 4 * h}, {sh}, {base} + {kk * stride + h * gap})")

    def fma(p: str, buf: int) -> None:
        # The TM x TN FMAs of one k, in fma_loops(cfg)'s order.
        w(f"{p}fma_block(acc, fa, {TM * buf}, fb, {TN * buf})")

    def k_step_body(p: str, has_next: bool, tail: bool = False) -> None:
        """The BK unrolled k steps on the read stage; with has_next, hand over to the next."""
        for kk in range(BK):
            buf = kk % 2
            if has_next and kk in starts[1:]:
                # The previous chunk's registers go to shared memory (the other stage, free
                # since the last barrier), and the next chunk's copy starts.
                i = starts.index(kk)
                store_reg(chunks[i - 1], p)
                issue_reg(chunks[i], p, tail)
            if kk < BK - 1:
                load_frag(p, kk + 1, 1 - buf)
            elif has_next:
                finish_stage(p)
                w(f"{p}a_r = a_rflip - a_r")
                w(f"{p}b_r = b_rflip - b_r")
                advance(p)
                load_frag(p, 0, 1 - buf)
            fma(p, buf)

    w("    # ---- prologue: stage 0 <- the first K step (zero-filled past k)")
    w(f"    kv = uint32({K})")
    issue_start("    ", tail=True)
    for i in range(1, len(chunks)):  # one chunk in registers at a time
        store_reg(chunks[i - 1], "    ")
        issue_reg(chunks[i], "    ", tail=True)
    finish_stage("    ")
    advance("    ")
    load_frag("    ", 0, 0)
    w("")
    w("    # ---- main loop: copy the full step t+1 into the other stage while computing step t;")
    w("    #      every slice but the last (which holds the last column of A or B, the end of")
    w("    #      its buffer), so these copies need no k predicate and may end in padding rows")
    w(f"    for _t in range(({K} + {BK - 1}) // {BK} - 2):")
    issue_start("        ", tail=False)
    k_step_body("        ", has_next=True)
    w("    # ---- the step before the last: copy the last slice, zero-filled past k, partial")
    w("    #      vectors at row m / column n element by element")
    w(f"    if {K} > {BK}:")
    w(f"        kv = uint32(({K} - 1) % {BK} + 1)")
    issue_start("        ", tail=True)
    k_step_body("        ", has_next=True, tail=True)
    w("    # ---- last K step: nothing left to copy")
    k_step_body("    ", has_next=False)
    w("")
    _epilogue(cfg, w)
    return L


#: The text of ``threadIdx.x`` and ``blockIdx.x`` read where it is written
#: (:func:`sgblas.kernels.memory.tid_x_again`), not kept through a loop (the generators' texts
#: bind those names); the simulator, which has no inline assembly, reads them plainly.
TID_AGAIN = "uint32(cuda.threadIdx.x)" if SIMULATOR else "tid_x_again()"
CTAID_AGAIN = "uint32(cuda.blockIdx.x)" if SIMULATOR else "ctaid_x_again()"


def _epilogue(cfg: TileConfig, w) -> None:
    """C = alpha * acc + beta * C with vector accesses of C's alignment class where whole,
    element by element at the M tail; C unread when beta == 0. A parallel split's slice stores
    alpha * acc as its partial and never reads C; a serial split's adds into C (``keep`` = beta
    for slice 0, 1 after it) once the slice before it has."""
    if cfg.c_stage:
        _epilogue_staged(cfg, w)
        return
    V, WM, WN, TM, TN = cfg.VEC_C, cfg.WM, cfg.WN, cfg.TM, cfg.TN
    split = cfg.split_k
    if split:
        w("    # ---- epilogue: a parallel split's partial product, alpha * acc, at C + s * ldc * n;")
        w("    #      a serial split's slice s adds alpha * acc into C once slice s - 1 of the tile has")
        w("    #      (its semaphore reads s), slice 0 adding beta * C")
        w("    alpha = alpha if kn > 0 else float32(0)   # an empty k range stores zeros (adds none)")
        w("    serial = sem.size > 0")
        w("    if serial:")
        w("        c_base = int64(0)")
        w(f"        if {TID_AGAIN} == uint32(0):")
        w(f"            while ld_acquire_i32(sem, {CTAID_AGAIN}) != int32(s_k):")
        w("                pass")
        w("            cuda.threadfence()")
        w("        cuda.syncthreads()")
        w("        keep = beta if s_k == uint32(0) else float32(1)")
        w("    else:")
        w("        c_base = int64(s_k) * int64(ldc) * int64(n)")
        w("        keep = float32(0)")
        w("    for_beta = keep != float32(0)")
    else:
        w("    # ---- epilogue: C = alpha * acc + beta * C, C unread if beta == 0")
        w("    for_beta = beta != float32(0)")
        w("    keep = beta")
    w("    ldc64 = int64(ldc)")
    # A serial split reads C that another CTA (maybe one on another SM) has just written: from
    # L2 (.cg), not from this SM's L1, which may still hold what an earlier slice here read.
    load = {4: "ldg4_cg", 2: "ldg2_cg"}.get(V) if split else {4: "ldg4", 2: "ldg2"}.get(V)
    load1 = "ldg1_cg" if split else "ldg1"
    store = {4: "stg4", 2: "stg2"}.get(V)
    # The TN columns are unrolled in the text; the row groups and the tail rows are loops
    # with constant trip counts, which NVVM unrolls, so acc keeps constant indices. (Writing
    # every store out gives the same K loop and a third more text: 29 s of front end instead
    # of 19 s for the 128x128 NN kernel, docs/history/tuning-ladder-2-splitk-and-pairs.md,
    # rung 13. A loop over the 4 columns of a sub-tile would cut the front end's time by
    # another quarter, but NVVM's code for it differs, and with it ptxas's registers in the
    # K loop.)
    w("    r_base = row0 + int64(am0)")
    for sn in range(TN // 4):
        for e in range(4):
            j = sn * 4 + e
            w(f"    cj = col0 + int64(bn0 + uint32({sn * (WN // (TN // 4)) + e}))")
            w("    if cj < int64(n):")
            w(f"        for sm in range({TM // 4}):")
            w(f"            r = r_base + sm * {WM // (TM // 4)}")
            w(f"            off = {'c_base + ' if split else ''}cj * ldc64 + r")
            p = "            "
            for g in range(4 // V if V > 1 else 1):
                at = f"off + {g * V}" if g else "off"
                if V > 1:
                    rows = range(g * V, (g + 1) * V)
                    vals = {i: f"acc[sm * {4 * TN} + {i * TN + j}]" for i in rows}
                    w(f"{p}if r + {V * (g + 1)} <= int64(m):")
                    w(f"{p}    if for_beta:")
                    w(f"{p}        " + ", ".join(f"d{i}" for i in rows) + f" = {load}(C, {at})")
                    w(f"{p}        {store}(C, {at}, " + ", ".join(
                        f"alpha * {vals[i]} + keep * d{i}" for i in rows) + ")")
                    w(f"{p}    else:")
                    w(f"{p}        {store}(C, {at}, " + ", ".join(f"alpha * {vals[i]}" for i in rows) + ")")
                    w(f"{p}else:")
                    q = p + "    "
                else:
                    q = p
                w(f"{q}for i in range({g * V}, {(g + 1) * V if V > 1 else 4}):")
                w(f"{q}    if r + i < int64(m):")
                w(f"{q}        v = alpha * acc[sm * {4 * TN} + i * {TN} + {j}]")
                w(f"{q}        if for_beta:")
                w(f"{q}            v += keep * {load1}(C, off + i)")
                w(f"{q}        stg1(C, off + i, v)")
    if split:
        w("    if serial:   # every thread's stores are out before the next slice may read them")
        w("        cuda.threadfence()")
        w("        cuda.syncthreads()")
        w(f"        if {TID_AGAIN} == uint32(0):")
        w(f"            cuda.atomic.exch(sem, {CTAID_AGAIN}, int32(0) if s_k + uint32(1) == uint32(cuda.gridDim.y) "
          "else int32(s_k + uint32(1)))")


def _epilogue_staged(cfg: TileConfig, w) -> None:
    """C = alpha * acc + beta * C, 4-byte accesses of C, through shared memory: for each of
    its TN // 4 column sub-tiles, a warp writes alpha * acc of its WM rows x 4 * LANES_N
    columns into its own block of As (the first half of the warps) or Bs (the second), as
    16-byte stores down each column, then reads the block back a column of 32 rows at a time,
    lane = row, so that each 4-byte access of C by the warp is 128 consecutive bytes of one
    column. The blocks are private to a warp: one barrier before the first (every warp is done
    with the K loop's shared stages), then a warp barrier between writing and reading and
    between reading and the next sub-tile's writing."""
    WM, WN, TM, TN, LDS = cfg.WM, cfg.WN, cfg.TM, cfg.TN, cfg.LDS_C
    half, cols = cfg.THREADS // 64, 4 * cfg.LANES_N
    sync_warp = "cuda.syncthreads()" if SIMULATOR else "cuda.syncwarp()"  # the simulator has no syncwarp
    w("    # ---- epilogue: C = alpha * acc + beta * C through shared memory, C unread if beta == 0")
    w("    for_beta = beta != float32(0)")
    w("    ldc64 = int64(ldc)")
    w("    cuda.syncthreads()   # every warp is done reading the K loop's stages")
    w(f"    s_base = int64((warp % uint32({half})) * uint32({cfg.stage_floats}))")
    w(f"    s_w = s_base + int64((lane // uint32({cfg.LANES_M})) * uint32({4 * LDS}) + (lane % uint32({cfg.LANES_M})) * uint32(4))")
    w(f"    s_r = s_base + int64(lane)")
    w(f"    r_warp = row0 + int64((warp % uint32({cfg.WARPS_M})) * uint32({WM})) + int64(lane)")
    w(f"    c_warp = col0 + int64((warp // uint32({cfg.WARPS_M})) * uint32({WN}))")
    w(f"    in_a = warp < uint32({half})")
    for sn in range(TN // 4):
        if sn:
            w(f"    {sync_warp}   # the block's reads are done before it is written again")
        for e in range(4):
            for sm in range(TM // 4):
                vals = ", ".join(f"alpha * acc[{sm * 4 * TN + i * TN + sn * 4 + e}]" for i in range(4))
                at = f"s_w + {e * LDS + sm * (WM // (TM // 4))}"
                w("    if in_a:")
                w(f"        sts4(As, {at}, {vals})")
                w("    else:")
                w(f"        sts4(Bs, {at}, {vals})")
        w(f"    {sync_warp}")
        w(f"    for c in range({cols}):")
        w(f"        cj = c_warp + {sn * (WN // (TN // 4))} + c")
        w(f"        for rc in range({WM // 32}):")
        w("            r = r_warp + rc * 32")
        w("            if cj < int64(n) and r < int64(m):")
        w(f"                si = s_r + c * {LDS} + rc * 32")
        w("                v = As[si] if in_a else Bs[si]")
        w("                off = cj * ldc64 + r")
        w("                stg1(C, off, v + beta * ldg1(C, off) if for_beta else v)")


def fma_loops(cfg: TileConfig) -> tuple[str, bool]:
    """The order of the FMA block of one k, as :func:`sgblas.kernels.memory.fma_block` takes it:
    the index ("i" for rows, "j" for columns) of its outer loop, and whether the inner loop
    snakes (runs backwards on odd outer iterations).

    The order of these independent FMAs is the input of ptxas's register allocation. "snake":
    the outer loop runs over the shorter side and the inner one snakes (forward, then
    backward), so each FMA shares a source with the one before, across rows too; in TN and TT
    it halved the FFMAs whose uncached sources share a register bank, under nvJitLink 13.0 and
    13.5 alike, and cut their dispatch stalls (docs/history/tuning-ladder-4-runs-j-to-l.md,
    rung 25). "snake_t" swaps the two loops: the same sharing, a different input to ptxas's
    allocator, which for TN's 4- and 8-byte rows and its slice kernel was the difference
    between a stack or four times the conflicts and neither
    (docs/history/tuning-ladder-5-runs-m-to-p.md, rung 30). "rows": i outer, j inner. Each
    accumulator adds its products in k order either way, so the bits do not depend on the
    order."""
    if cfg.fma == "rows":
        return "i", False
    outer = "i" if cfg.TM <= cfg.TN else "j"
    if cfg.fma == "snake_t":
        outer = "j" if outer == "i" else "i"
    return outer, True


def generate_source(cfg: TileConfig, fname: str, after_grid: bool = False) -> str:
    """The Python source of the kernel function ``fname`` for ``cfg`` (``after_grid``: see
    :func:`_src_lines`)."""
    return "\n".join(_src_lines(cfg, fname, after_grid)) + "\n"


def _namespace() -> dict:
    """The globals the generated source runs with (imports Numba: only called to build)."""
    from numba import cuda, float32, int32, int64, uint32

    from sgblas.kernels import memory

    return {
        "__name__": __name__,
        "fma_block_of": memory.fma_block, "lds4_into": memory.lds4_into, "select": memory.select,
        "cuda": cuda, "float32": float32, "int64": int64, "uint32": uint32,
        "ldg4": memory.ldg4, "lds4": memory.lds4, "sts4": memory.sts4, "stg4": memory.stg4,
        "ldg2": memory.ldg2, "stg2": memory.stg2,
        "ldg1": memory.ldg1, "sts1": memory.sts1, "stg1": memory.stg1,
        "ldg4_cg": memory.ldg4_cg, "ldg2_cg": memory.ldg2_cg, "ldg1_cg": memory.ldg1_cg, "int32": int32,
        "ld_acquire_i32": memory.ld_acquire_i32,
        "ldg4_tail": memory.ldg4_tail, "ldg2_tail": memory.ldg2_tail, "ldg1_tail": memory.ldg1_tail,
        "cp_async16": memory.cp_async16, "cp_async8": memory.cp_async8,
        "cp_async4": memory.cp_async4,
        "cp_async4x4_tail": memory.cp_async4x4_tail, "cp_async4x2_tail": memory.cp_async4x2_tail,
        "cp_async4x1_tail": memory.cp_async4x1_tail,
        "cp_async_commit": memory.cp_async_commit, "cp_async_wait_all": memory.cp_async_wait_all,
        "grid_dependency_wait": memory.grid_dependency_wait,
        **({} if SIMULATOR else {"tid_x_again": memory.tid_x_again, "ctaid_x_again": memory.ctaid_x_again}),
    }


def build_pyfunc(cfg: TileConfig, fname: str, after_grid: bool = False):
    """The plain Python kernel function (not yet ``cuda.jit``-wrapped)."""
    src = generate_source(cfg, fname, after_grid)
    if SIMULATOR:
        # Tracebacks under the simulator point into the generated text.
        filename = f"<generated {fname}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    else:
        # Numba's cache locates a function by its file; the generator lives here, so this
        # file's stamp invalidates the cache when the generator changes (the numeric tile
        # sizes are literals in the generated text, so its bytecode hash covers them).
        filename = __file__
    ns = _namespace()
    exec(compile(src, filename, "exec"), ns)  # noqa: S102 - source generated above
    return ns[fname]


def grid_for(cfg: TileConfig, m: int, n: int, splits: int = 1) -> tuple[int, int, int]:
    """One CTA per BM x BN tile of C, as a 1-D grid along x (the kernel unflattens it);
    for a split-K config, ``splits`` CTAs per tile along y (blockIdx.y is the split index)."""
    if splits != 1 and not cfg.split_k:
        raise ValueError(f"a grid of {splits} splits needs a split_k config")
    if not 1 <= splits <= 65535:
        raise ValueError(f"splits={splits} is not in 1..65535 (gridDim.y)")
    return (-(-m // cfg.BM) * -(-n // cfg.BN), splits, 1)


def guard(p: GemmProblem) -> str | None:
    """What this generator's kernels need beyond the keys every variant is checked on (math
    mode, transpose pair, compute capability, alignment class: :mod:`sgblas.kernels.spec`).
    The same for every config, so that its variants share one function: a shape's planning
    asks it once for them all.

    Nothing about m, n or k beyond >= 1: tails of every size are predicated, and no copy
    reads past the matrix (a partial vector is copied element by element)."""
    if p.m < 1 or p.n < 1 or p.k < 1:
        return f"m={p.m}, n={p.n}, k={p.k}: every dimension must be >= 1"
    return None
