"""Skinny products: m or n at most :data:`MP` (16). Such a product is bound by memory
bandwidth, not arithmetic: it must read the large operand once (``k x n`` or ``m x k``
floats) and does only ``2 * P`` flops per element of it, where P is the small dimension.
These kernels stream the large operand exactly once with 16-byte loads and keep the small
operand in shared memory.

Notation: ``P`` is the small output dimension (m or n), ``Q`` the large one. The large operand
``L`` is op(B) when m is small and op(A) when n is small; the small operand ``S`` is the other
one. Two layouts of L need two loops:

* **dot** (L contiguous along k: B in N, or A in T). Eight lanes read 128 contiguous bytes of
  one column of L (a 16-byte vector each, k steps of 32), a warp covers 4 columns per load
  and each lane ``NC`` = 4 columns, so a warp owns 16 columns of Q and a CTA ``QC``. Each lane
  multiplies its 4 k values by the 4 matching values of each of the P rows of S (16-byte
  shared loads) into ``P x NC`` accumulators. At the end of its k range the 8 lanes of a
  column group add their partial sums through shared memory, lane 0 first, in a fixed order.
* **axpy** (L contiguous along Q: A in N, or B in T). Each lane reads 4 consecutive elements
  of Q of one k row of L (a 16-byte vector), a CTA owns ``4 * THREADS`` elements of Q, and
  each k contributes ``S(p, k) * L(q, k)`` to the lane's ``P x 4`` accumulators, S's k row
  being a broadcast 16-byte shared load. No lane shares an output with another.

Both stage S through shared memory in pieces of ``KC`` k values, double-buffered with 4-byte
``cp.async`` copies (sm_80+) so the next piece's copy overlaps this piece's arithmetic; a
warp's copy reads consecutive addresses of S whichever way S is contiguous (the dot loop stores
an S contiguous along P with its vectors swizzled, ``_stage_dot``). L:
both loops copy each lane's k steps with 16-byte ``cp.async`` into a ring of ``ring`` (4) steps
in shared memory, so three steps are in flight while one is multiplied (dot at 128 registers, 4
CTAs a SM; axpy at 168, 3 CTAs a SM; the ring replaced loading the next step into registers,
docs/history/tuning-ladder-3-runs-g-to-i.md, rung 18). Each has a copy of its loop with no
bounds tests, taken for the pieces that lie wholly inside the matrix. Rows of S past P are
not copied, or, in the dot loop's copy of an S contiguous along k, copied as zeros with no
source byte (their values reach only accumulators that are never stored; past the end of K
the copies zero-fill, since L's zeros times a stale NaN would not be zero); the multiply-adds
of a row block of 4 are skipped when the whole block is past P (a branch the CTA takes
uniformly), so m = 3 does a quarter of m = 16's arithmetic. The axpy loop's outputs leave
through the ring, so that a warp's stores cover whole runs of C (``_axpy_body``).

K split: ``blockIdx.y`` is a split index s; the CTA covers k in
``[s * k_chunk, min(k, (s + 1) * k_chunk))`` and stores ``alpha * partial + beta * C`` into
the m x n column-major matrix at ``C + s * ldc * n``. One split (``gridDim.y == 1``) writes
the result itself; several write partials into the handle's workspace (the plan passes the
workspace as C, ``ldc = ldw`` and ``beta = 0``, so nothing is read there) and the fixed-order
reduction (:mod:`sgblas.kernels.reduce`) adds them and applies beta. The ABI is
:data:`sgblas.kernels.abi.GEMM_SPLIT`. ``k_chunk`` must be a multiple of 4 (16-byte alignment
of the dot loads; the plan rounds it to a multiple of ``KC``).

Alignment: only L is read with vector accesses, and only L's copies into the ring depend on
its alignment class (``SkinnyConfig.align``, ``a16`` or ``a4`` in the names): the 16-byte
class copies each 16-byte vector of L in one ``cp.async``, which needs L's address 16-byte
aligned and its leading dimension a multiple of 4; the 4-byte class in four, for any address
and leading dimension (odd sizes, padded or offset operands). S and C are read and written
element by element, so a tight ``lda = 3`` for a 3 x k A is fine. Tails along k (dot) and Q (axpy) are read element by element, so no load
reaches past the matrix.

The kernel text is generated from :class:`SkinnyConfig` (like :mod:`sgblas.kernels.sgemm_simt`,
so every register index is a constant) and compiled by :mod:`sgblas.kernels.skinny_jit`; this
module imports without Numba. The text writes the multiply-adds of a step, the 16-byte shared
reads that feed them and the element-by-element copies of the tails as calls of intrinsics of
:mod:`sgblas.kernels.memory` (``dot_block``, ``axpy_block``, ``lds4_into``, ``cp_async4_if``,
``cp_async4x4``, ``cp_async4x4_if``, ``cp_async4_swizzled``),
which emit the IR Numba made of the statements and conditional expressions they replace: the
same PTX, for about a seventh of the front end's time, which grows with the text's basic
blocks, statements and reassigned names (:mod:`sgblas.kernels.sgemm_simt`, "Unrolling"). The
rest of the text stays as it was where a cheaper form changed the code NVVM makes of the fast
loop (``_copy_to_ring``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.sgemm_simt import TID_AGAIN
from sgblas.runtime.device import SIMULATOR

__all__ = ["SkinnyConfig", "MP", "MANIFEST", "generate_source", "grid_for", "guard"]

#: The largest small dimension (m or n) these kernels take.
MP: int = 16


@dataclass(frozen=True)
class SkinnyConfig:
    """One skinny kernel: the transpose pair and which output dimension is small."""

    transa: str
    transb: str
    small: str  # "m" or "n": the dimension that is at most MP
    THREADS: int = 128
    #: Launch bound, CTAs of 128 threads per SM; None takes the mode's. axpy: 3 (at most 168
    #: registers: its 64 accumulators spill 16 bytes under the 128 of 4 CTAs, ptxas 13.5, and 3
    #: CTAs' rings already hold 9 steps of L in flight per SM). dot: 4 (at most 128 registers,
    #: and 4 x 48 KB of shared memory fit in an SM): more CTAs put more of L in flight.
    min_blocks: int | None = None
    #: k steps of L in a shared ring of 16-byte ``cp.async`` copies, ring - 1 of them in flight.
    ring: int = 4
    #: Alignment class of the large operand, in bytes: each 16-byte vector of L in the ring is
    #: copied from global memory in ``16 // align`` copies of ``align`` bytes, so L's address
    #: and leading dimension need only that alignment (the rest of the kernel is the same).
    align: int = 16

    # dot: lanes per column along k, columns per lane, k per shared piece
    LK = 8
    NC = 4
    KC_DOT = 128
    # axpy: elements of Q per lane (one 16-byte vector), k per shared piece, k per step
    VQ = 4
    KC_AXPY = 32
    KU = 4
    S_STAGES = 2  # shared stages of S

    def __post_init__(self) -> None:
        if self.min_blocks is None:
            object.__setattr__(self, "min_blocks", 4 if self.mode == "dot" else 3)
        # Worded once: a guard's refusal names the kernel, and a shape's planning asks often.
        t = self.tile
        object.__setattr__(self, "_name", f"sgemm_skinny_{self.mode}_{self.transa}{self.transb}".lower()
                           + f"_{t[0]}x{t[1]}x{t[2]}_{self.STAGES}s_a{self.align}")

    @property
    def pair(self) -> tuple[str, str]:
        return (self.transa, self.transb)

    @property
    def LVEC(self) -> int:
        """Floats per global copy of L: 4, 2 or 1."""
        return self.align // 4

    @property
    def large(self) -> str:
        """The large operand's array: B when m is small, A when n is small."""
        return "B" if self.small == "m" else "A"

    @property
    def mode(self) -> str:
        """"dot" when the large operand is contiguous along k, else "axpy"."""
        kmajor = self.transb == "N" if self.large == "B" else self.transa == "T"
        return "dot" if kmajor else "axpy"

    @property
    def KC(self) -> int:
        return self.KC_DOT if self.mode == "dot" else self.KC_AXPY

    @property
    def SK(self) -> int:
        """k per step of L: dot 4 k values for each of LK lanes, axpy KU rows."""
        return 4 * self.LK if self.mode == "dot" else self.KU

    @property
    def STEPS(self) -> int:
        """Steps of L per shared piece of S."""
        return self.KC // self.SK

    @property
    def STAGES(self) -> int:
        """The stage count in the name: L's ring depth, which sets how much is in flight."""
        return self.ring

    @property
    def QC(self) -> int:
        """Elements of Q (the large output dimension) one CTA owns."""
        if self.mode == "dot":
            return (self.THREADS // 32) * (32 // self.LK) * self.NC
        return self.THREADS * self.VQ

    @property
    def tile(self) -> tuple[int, int, int]:
        """(rows of C, columns of C, k per piece) one CTA covers per piece."""
        return (MP, self.QC, self.KC) if self.small == "m" else (self.QC, MP, self.KC)

    @property
    def launch_bounds(self) -> tuple[int, int]:
        return (self.THREADS, self.min_blocks)

    def shared_bytes(self) -> int:
        """Static shared memory per CTA: S's stages, and L's ring."""
        floats = self.S_STAGES * MP * self.KC
        per_step = self.NC if self.mode == "dot" else self.KU  # 16-byte vectors a thread copies
        floats += self.ring * per_step * self.THREADS * 4
        return 4 * floats

    def name(self) -> str:
        return self._name

    def check(self) -> None:
        assert self.transa in ("N", "T") and self.transb in ("N", "T") and self.small in ("m", "n")
        assert self.align in (4, 8, 16), f"alignment class {self.align} is not 16, 8 or 4 bytes"
        assert self.THREADS % 32 == 0 and MP % 8 == 0
        if self.mode == "dot":
            assert self.KC_DOT == self.THREADS, "each thread stages one k column of S per piece"
            assert self.NC == 4 and self.LK == 8, "the end-of-range reduction assumes 8 lanes x 4 columns"
            assert 8 * self.NC * self.THREADS <= self.S_STAGES * MP * self.KC_DOT, \
                "the reduction's 8-row rounds must fit in S's shared buffer"
            assert self.THREADS % (4 * MP) == 0, "a pass of S copied along P covers whole 16-byte vectors of k"
            vp = self.THREADS // MP // 4
            assert vp & (vp - 1) == 0, "the swizzled copy's index splits only when a pass copies a power of two of vectors"
        else:
            assert (self.KC_AXPY * MP) % self.THREADS == 0 and self.KC_AXPY % self.KU == 0
            assert MP * self.QC <= self.ring * self.KU * self.THREADS * 4 and MP * self.QC % self.THREADS == 0, \
                "the epilogue stages the CTA's MP x QC outputs in L's ring"
        # A ring slot must be a constant per unrolled step, and S's next piece, which rides in
        # the group of the first step a piece issues, must land by the piece's last wait.
        assert 2 <= self.ring <= self.STEPS and self.STEPS % self.ring == 0, \
            "the ring must divide the steps of a piece"
        assert self.ring - 1 <= 7, "cp.async.wait_group takes 0..7"
        assert self.shared_bytes() <= 48 * 1024, "static shared memory is limited to 48 KB per CTA"


#: One kernel per transpose pair, small side and alignment class of the large operand: the dot
#: or axpy loop, reading L 16 bytes at a time, or 4 (odd leading dimensions, offset pointers;
#: an 8-byte L runs the 4-byte row).
MANIFEST: tuple[SkinnyConfig, ...] = tuple(
    SkinnyConfig(ta, tb, small, align=align) for align in (16, 4) for small in ("m", "n")
    for ta in "NT" for tb in "NT")


def k_granule(cfg: SkinnyConfig) -> int:
    """``k_chunk`` must be a multiple of this (one shared piece)."""
    return cfg.KC


def grid_for(cfg: SkinnyConfig, m: int, n: int, splits: int = 1) -> tuple[int, int, int]:
    """CTAs along x over the large output dimension, ``splits`` along y."""
    q = n if cfg.small == "m" else m
    if not 1 <= splits <= 65535:
        raise ValueError(f"splits={splits} is not in 1..65535 (gridDim.y)")
    return (max(1, -(-q // cfg.QC)), splits, 1)


def guard(cfg: SkinnyConfig, p: GemmProblem) -> str | None:
    """What a skinny kernel needs beyond math mode, pair and compute capability: the small
    dimension at most :data:`MP`, and the large operand in its alignment class."""
    if p.m < 1 or p.n < 1 or p.k < 1:
        return f"m={p.m}, n={p.n}, k={p.k}: every dimension must be >= 1"
    small = p.m if cfg.small == "m" else p.n
    if small > MP:
        return (f"{cfg.small}={small} is above {MP}, the largest small dimension of "
                f"{cfg.name()} (the product is not bandwidth-bound there)")
    ptr, ld, what = (p.b_ptr, p.ldb, "B") if cfg.large == "B" else (p.a_ptr, p.lda, "A")
    if ptr % cfg.align:
        return (f"{what}'s address {ptr:#x} is not {cfg.align}-byte aligned, which {cfg.name()}'s "
                f"{cfg.align}-byte loads of the large operand need")
    if ld % cfg.LVEC:
        return (f"ld{what.lower()}={ld} is not a multiple of {cfg.LVEC}, so {cfg.name()}'s {cfg.align}-byte loads "
                f"of {what} would be misaligned")
    return None


# ------------------------------------------------------------------------------------------
# Source generation


def _roles(cfg: SkinnyConfig) -> dict:
    """The names and strides the generated text uses for L, S and C."""
    if cfg.small == "m":
        # P = m (rows i), Q = n (columns j); L = op(B), S = op(A).
        s_p, s_k = ("1", "lda") if cfg.transa == "N" else ("lda", "1")
        return dict(L="B", ldl="ldb", S="A", P="m", Q="n", s_p=s_p, s_k=s_k, c_p="1", c_q="ldc")
    # P = n (columns j), Q = m (rows i); L = op(A), S = op(B) with S(j, kk) = op(B)(kk, j).
    s_p, s_k = ("ldb", "1") if cfg.transb == "N" else ("1", "ldb")
    return dict(L="A", ldl="lda", S="B", P="n", Q="m", s_p=s_p, s_k=s_k, c_p="ldc", c_q="1")


def _src_lines(cfg: SkinnyConfig, fname: str, after_grid: bool = False) -> list[str]:
    cfg.check()
    r = _roles(cfg)
    L: list[str] = []
    w = L.append
    al = "" if SIMULATOR else ", alignment=16"
    KC = cfg.KC
    SBUF = MP * KC  # floats per stage of S
    w(f"def {fname}(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, k_chunk, sem):  # sem: unused here")
    if after_grid:  # the sm_90+ build (sgblas.runtime.device.GRID_WAIT_MIN_CC)
        w("    grid_dependency_wait()  # before any access to memory the kernel ahead may write")
    w(f"    Ss = cuda.shared.array({cfg.S_STAGES * SBUF}, float32{al})")
    if SIMULATOR:
        # Rows of S past P are never copied (their products are never stored); the simulator's
        # shared memory starts as arbitrary bits, whose products would only raise overflow
        # warnings there.
        w(f"    for i in range(int(cuda.threadIdx.x), {cfg.S_STAGES * SBUF}, {cfg.THREADS}):")
        w("        Ss[i] = float32(0)")
        w("    cuda.syncthreads()")
    w("    tid = uint32(cuda.threadIdx.x)")
    w("    warp = tid >> uint32(5)")
    w("    lane = tid & uint32(31)")
    w(f"    P = int64({r['P']})")
    w(f"    Q = int64({r['Q']})")
    w(f"    pl = uint32({r['P']})  # live rows of S: row blocks of 4 at or past it are skipped")
    w("    kb = int64(cuda.blockIdx.y) * int64(k_chunk)")
    w("    ke = min(int64(k), kb + int64(k_chunk))")
    w(f"    ldl = int64({r['ldl']})")
    w(f"    s_p = int64({r['s_p']})")
    w(f"    s_k = int64({r['s_k']})")
    w(f"    c_p = int64({r['c_p']})")
    w(f"    c_q = int64({r['c_q']})")
    w("    c_s = int64(cuda.blockIdx.y) * int64(ldc) * int64(n)  # this split's output matrix")
    w(f"    npieces = (ke - kb + {KC - 1}) // {KC} if ke > kb else int64(0)")
    w("    for_beta = beta != float32(0)")
    if cfg.mode == "dot":
        _dot_body(cfg, r, w, SBUF)
    else:
        _axpy_body(cfg, r, w, SBUF)
    return L


def _swizzled(r: dict) -> bool:
    """Whether the dot loop's S is contiguous along P (A in N, or B in T): then its piece is
    copied along P and stored with vector index ``v ^ (p & 7)`` in row p (see ``_stage_dot``)."""
    return r["s_p"] == "1"


def _stage_dot(w, ind: str, r: dict, SBUF: int, piece: str, buf: str, threads: int) -> None:
    """Issue the cp.async copies of S's piece ``piece`` into stage ``buf``, row p of the stage
    holding the piece's KC k values of S's row p (zero past ke; rows past P not copied). Commits
    no group: the caller decides which group they join.

    S contiguous along k: this thread copies k column ``tid`` of the piece, every row, so a
    warp's copy reads 32 consecutive k. S contiguous along P: copied the other way, element
    ``e = tid + threads * t`` being row ``e % MP`` of k column ``e // MP``, so a warp's copy reads
    two whole columns of S (the k-column order would make each copy touch 32 sectors for 128
    bytes); those stores would put the 16 rows of one column in one bank, so row p keeps its
    16-byte vector v at ``v ^ (p & 7)``: two lanes a bank, and the multiply's reads of one row
    still fall in distinct banks (the swizzle permutes vectors within each aligned group of 8)."""
    KC = SBUF // MP
    if not _swizzled(r):
        w(f"{ind}sk = kb + {piece} * {KC} + int64(tid)")
        w(f"{ind}skv = sk < ke")
        w(f"{ind}sg = sk * s_k if skv else int64(0)")
        w(f"{ind}sd = {buf} * {SBUF} + int64(tid)")
        # Past ke the copy zero-fills, since L's zeros there times a stale NaN would not be 0.
        # Rows past P are zero-filled too, with no source byte: a branch per row would make the
        # compiler, at the launch bound's 128 registers, rebuild the shared address of every copy.
        w(f"{ind}for t in range({MP}):")
        w(f"{ind}    tv = t < P")
        w(f"{ind}    cp_async4(Ss, sd + t * {KC}, {r['S']}, sg + t * s_p if tv else int64(0), "
          f"uint32(4) if skv and tv else uint32(0))")
        return
    # Pass t copies k columns VP * 4 * t .. of the piece (threads // MP of them): mine is
    # sc + VP * 4 * t (sc = tid // MP), element sc & 3 of 16-byte vector sv + VP * t (sv = sc //
    # 4) of my row sp = tid % MP, stored at vector (sv + VP * t) ^ (sp & 7). With VP a power of
    # two and sv < VP, that vector is (V ^ (VP * t & 7)) + (VP * t & ~7) for V = sv ^ (sp & 7),
    # so the copy's index is a per-thread base (row, element and 4 V, whose bits do not
    # overlap) XORed by a constant in bits 3-4, plus a constant: one LOP3 and an immediate,
    # where the general form costs four. The base is rebuilt each piece from a fresh read of
    # tid: held across the K loop, it and S's column offset spilled at 128 registers (ptxas
    # 13.0; docs/history/tuning-ladder-5-runs-m-to-p.md, rung 39).
    VP = threads // MP // 4
    w(f"{ind}tn = {TID_AGAIN}")
    w(f"{ind}sp = tn % uint32({MP})")
    w(f"{ind}sc = tn // uint32({MP})")
    w(f"{ind}if sp < pl:  # rows past P: not copied, as above")
    w(f"{ind}    swb = uint32({buf} * {SBUF}) | (sp * uint32({KC})) | (sc & uint32(3)) | "
      f"(((sc >> uint32(2)) ^ (sp & uint32(7))) << uint32(2))")

    # A piece wholly before ke (all but the last of a split) copies with no test, its source
    # stepping by 8 columns of S a pass; the 64-bit compare, the selects and the rebuilt
    # address of the tested copy cost about nine instructions each
    # (docs/history/tuning-ladder-5-runs-m-to-p.md, rung 39).
    w(f"{ind}    sk = kb + {piece} * {KC} + int64(sc)")
    w(f"{ind}    if kb + ({piece} + 1) * {KC} <= ke:")
    w(f"{ind}        sg = int64(sp) + sk * s_k")
    # Pass t: cp_async4(Ss, int64(swb ^ uint32(4 * (VP * t & 7))) + 4 * (VP * t & ~7), S,
    # sg + t * (threads // MP) * s_k, uint32(4)), the statements written out once, one call
    # (the intrinsic is made for this config's sizes: skinny_jit).
    w(f"{ind}        cp_async4_swizzled(Ss, swb, {r['S']}, sg, s_k)")
    w(f"{ind}    else:")
    w(f"{ind}        for t in range({SBUF // threads}):")
    w(f"{ind}            skt = sk + t * {threads // MP}")
    w(f"{ind}            skv = skt < ke")
    w(f"{ind}            cp_async4_if(Ss, int64(swb ^ uint32((t * {4 * VP}) & 7 * 4)) + ((t * {VP}) & ~7) * 4, "
      f"{r['S']}, int64(sp) + skt * s_k, skv)")


def _dot_position(w, cfg: SkinnyConfig, ind: str) -> None:
    """lr, slot, qb and qn of the dot loop from tid, warp and lane."""
    LK, NC = cfg.LK, cfg.NC
    w(f"{ind}lr = lane % uint32({LK})   # 4 * lr: my k offset in a step")
    w(f"{ind}slot = lane // uint32({LK})")
    w(f"{ind}qb = int64(cuda.blockIdx.x) * {cfg.QC} + int64(warp * uint32({(32 // LK) * NC}) + slot)")
    # Column c is q_c = qb + 4 c; it exists when qn > 4 c (one register, not four q_c).
    w(f"{ind}qn = uint32(min(max(Q - qb, int64(0)), int64({NC * (32 // LK)})))")


def _dot_body(cfg: SkinnyConfig, r: dict, w, SBUF: int) -> None:
    KC, NC, LK, R, T, SK = cfg.KC, cfg.NC, cfg.LK, cfg.ring, cfg.THREADS, cfg.SK
    SLOT = NC * T * 4  # floats per ring slot: one step of every thread's NC vectors
    Lr = r["L"]
    al = "" if SIMULATOR else ", alignment=16"
    # Ring slot j holds step g of L when g % R == j: vector c of thread t at
    # ((j * NC + c) * T + t) * 4, so a warp's 16-byte copies and reads are consecutive.
    w(f"    Lring = cuda.shared.array({R * SLOT}, float32{al})")
    _dot_position(w, cfg, "    ")
    for c in range(NC):
        w(f"    lc{c} = (qb + {c * (32 // LK)} if qn > uint32({c * (32 // LK)}) else int64(0)) * ldl")
    w(f"    all_ok = qn > uint32({(NC - 1) * (32 // LK)})")
    w("    rt = int64(tid) * 4  # my vectors' offset in a ring slot's column block")
    w("    k4 = int64(lr * uint32(4))")
    w(f"    acc = cuda.local.array({MP * NC}, float32)   # acc[i * {NC} + c]: row i, column q_c")
    w(f"    for i in range({MP * NC}):")
    w("        acc[i] = float32(0)")
    w("    fa = cuda.local.array(4, float32)   # a row's 4 k values of S")
    w(f"    fb = cuda.local.array({4 * NC}, float32)   # fb[4 c + e]: the step's 4 k values of column q_c")

    def copy_l(ind: str, kstep: str, j: int, fast: bool) -> None:
        """Copy my vectors of the step starting at k = kstep into ring slot j; ``fast``: every
        vector is known to be whole and before ke. Otherwise a step starting at or past ke is
        not copied (it is not multiplied either) and a vector reaching past ke or in a column
        past Q is copied element by element, zeros past ke: L's zeros meet S's zeros there,
        where stale ring values could be Inf or NaN."""
        p = ind
        if not fast:
            w(f"{ind}if {kstep} < ke:")
            p = ind + "    "
        w(f"{p}kn = {kstep} + k4")
        for c in range(NC):
            d = (f"{(j * NC + c) * T * 4}", "rt")
            has = f"qn > uint32({c * (32 // LK)})"
            _copy_to_ring(w, p, d, Lr, (f"lc{c}", "kn"), None if fast else f"{has} and kn + 4 <= ke",
                          (has, "kn", "ke"), cfg.LVEC)

    def compute(ind: str, st: str, j: int) -> None:
        """Multiply the step st of this piece, read from ring slot j, into the accumulators."""
        for c in range(NC):
            w(f"{ind}lds4_into(fb, {4 * c}, Lring, {(j * NC + c) * T * 4} + rt)")
        swz = _swizzled(r)
        if swz:
            # The swizzle moves only bits 2-4 of the index (the vector within an aligned group
            # of 8), where the piece's, step's and row's offsets (multiples of 32) are zero, so
            # it is one XOR of a 32-bit base by a constant and the rest an immediate offset.
            w(f"{ind}sbw = uint32(boff) | lr4")
        else:
            w(f"{ind}so = boff + {st} * {SK} + k4")
        for rb in range(MP // 4):
            p = ind
            if rb:
                w(f"{ind}if pl > uint32({4 * rb}):")
                p = ind + "    "
            w(f"{p}for rr in range(4):")
            if swz:  # row 4 rb + rr keeps my vector lr at lr ^ (row & 7)
                w(f"{p}    lds4_into(fa, 0, Ss, int64(sbw ^ uint32({16 * (rb & 1)} + 4 * rr)) + "
                  f"{st} * {SK} + ({4 * rb} + rr) * {KC})")
            else:
                w(f"{p}    lds4_into(fa, 0, Ss, so + ({4 * rb} + rr) * {KC})")
            # acc[row * NC + c] += fa[e] * fb[4 c + e] for each c, then e, in order
            w(f"{p}    dot_block(acc, ({4 * rb} + rr) * {NC}, fa, fb)")

    # cp.async groups, one FIFO per thread: the prologue commits S's piece 0 as a group of its
    # own, then one group per step of L, always (empty past the end), so a group's place in the
    # FIFO is fixed. S's piece pc + 1 joins the group of the first step piece pc issues (step
    # pc * STEPS + R - 1, which is at most the piece's last step since R <= STEPS).
    # * Step g: after committing step g + R - 1, the R - 1 newest groups are steps g + 1 ..
    #   g + R - 1, so wait_group(R - 1) completes step g and all before it, including S's piece
    #   pc + 1 by the piece's last step.
    # * Piece pc's start: the R - 1 newest groups are steps pc * STEPS .. pc * STEPS + R - 2,
    #   so wait_group(R - 1) completes S's piece pc (piece 0: the group before step 0; later
    #   ones: already complete at the last step's wait). The barrier after it publishes the
    #   piece to every thread and tells this thread that everyone is done with the stage that
    #   piece pc + 1 is then copied into, so one barrier a piece is enough.
    # * L needs no barrier: a thread reads only the slots it copied into, and it refills slot
    #   (g - 1) % R only after it multiplied the values it read from there.
    if _swizzled(r):
        w("    lr4 = lr * uint32(4)")
    _ring_loop(w, cfg, lambda ind, piece, buf: _stage_dot(w, ind, r, SBUF, piece, buf, T), copy_l, compute,
               fast_if="all_ok")

    w("    # ---- the 8 lanes of a column group add their sums in lane order, through shared memory")
    # The thread's position again from a fresh read of tid: derived once before the loop, it
    # stayed in registers across it and spilled at 128 registers
    # (docs/history/tuning-ladder-5-runs-m-to-p.md, rung 39).
    w(f"    tid = {TID_AGAIN}")
    w("    warp = tid >> uint32(5)")
    w("    lane = tid & uint32(31)")
    _dot_position(w, cfg, "    ")
    w("    gb = int64(warp * uint32(32) + slot * uint32(8))")
    for rnd in range(MP // 8):
        p = "    "
        if rnd:
            w(f"    if pl > uint32({8 * rnd}):")
            p = "        "
        w(f"{p}cuda.syncthreads()")
        w(f"{p}for v in range({8 * NC}):")
        w(f"{p}    Ss[v * {cfg.THREADS} + int64(tid)] = acc[{rnd * 8 * NC} + v]")
        w(f"{p}cuda.syncthreads()")
        w(f"{p}i = int64({8 * rnd}) + int64(lr)  # my row; my values are v = lr * {NC} + c")
        for c in range(NC):
            w(f"{p}rb{c} = int64(lr * uint32({NC}) + uint32({c})) * {cfg.THREADS} + gb")
            w(f"{p}t{c} = Ss[rb{c}]")
            w(f"{p}for l in range(1, 8):")
            w(f"{p}    t{c} += Ss[rb{c} + l]")
        w(f"{p}if i < P:")
        for c in range(NC):
            w(f"{p}    if qn > uint32({c * (32 // LK)}):")
            w(f"{p}        off = c_s + i * c_p + (qb + {c * (32 // LK)}) * c_q")
            w(f"{p}        C[off] = alpha * t{c} + beta * C[off] if for_beta else alpha * t{c}")


def _axpy_body(cfg: SkinnyConfig, r: dict, w, SBUF: int) -> None:
    KC, KU, VQ, R, T = cfg.KC, cfg.KU, cfg.VQ, cfg.ring, cfg.THREADS
    Lr = r["L"]
    PER = KC * MP // T  # S elements each thread stages per piece
    al = "" if SIMULATOR else ", alignment=16"
    w(f"    q = int64(cuda.blockIdx.x) * {cfg.QC} + int64(tid) * {VQ}")
    w("    qfull = q + 4 <= Q")
    w("    qok = q < Q")
    w("    lq = q if qok else int64(0)")
    w(f"    acc = cuda.local.array({MP * VQ}, float32)   # acc[p * 4 + e]: row p, element q + e")
    w(f"    for i in range({MP * VQ}):")
    w("        acc[i] = float32(0)")
    w(f"    fb = cuda.local.array({KU * 4}, float32)  # L vectors of one step from the ring: fb[u*4 + e]")
    w("    fs = cuda.local.array(4, float32)  # 4 rows of S at one k")
    w(f"    for i in range({KU * 4}):")
    w("        fb[i] = float32(0)")

    def stage(ind: str, piece: str, buf: str) -> None:
        # Element e = tid + T * t of the piece is S(p = e % MP, kk = e // MP), stored at Ss[kk][p].
        w(f"{ind}sd = {buf} * {SBUF}")
        for t in range(PER):
            w(f"{ind}e = int64(tid) + {t * T}")
            w(f"{ind}sp = e % {MP}")
            w(f"{ind}sk = kb + {piece} * {KC} + e // {MP}")
            w(f"{ind}if sp < P:  # rows past P: see the dot kernel's staging")
            w(f"{ind}    ok = sk < ke")
            w(f"{ind}    cp_async4_if(Ss, sd + e, {r['S']}, sp * s_p + sk * s_k, ok)")

    # Ring slot j holds step g when g % R == j: vector u of thread t at ((j * KU + u) * T + t) * 4,
    # so a warp's 16-byte copies and reads are consecutive. The dot loop's scheme and cp.async
    # group accounting (``_dot_body``): each step's KU vectors of a lane go into its slot R - 1
    # steps ahead and are read back into fb just before they are multiplied.
    w(f"    Lring = cuda.shared.array({R * KU * T * 4}, float32{al})")
    w("    rt = int64(tid) * 4")

    def copy_l(ind: str, kstep: str, j: int, fast: bool) -> None:
        """Copy my vectors of the step starting at row kstep into ring slot j. ``fast``: every
        vector is whole and before ke. Otherwise a step starting at or past ke is not copied
        (nor multiplied), and within one that starts before ke a row at or past ke, or a vector
        reaching past Q, is copied element by element with zeros there (they meet S's zeros,
        where stale ring values could be Inf or NaN)."""
        p = ind
        if not fast:
            w(f"{ind}if {kstep} < ke:")
            p = ind + "    "
        for u in range(KU):
            d = (f"{(j * KU + u) * T * 4}", "rt")
            w(f"{p}lg = lq + ({kstep} + {u}) * ldl")
            _copy_to_ring(w, p, d, Lr, ("lg", None), None if fast else f"qfull and {kstep} + {u} < ke",
                          (f"{kstep} + {u} < ke", "q", "Q"), cfg.LVEC)

    def multiply(ind: str, st: str, j: int) -> None:
        """Multiply step st of this piece, read from ring slot j, into the accumulators."""
        for u in range(KU):
            w(f"{ind}lds4_into(fb, {4 * u}, Lring, {(j * KU + u) * T * 4} + rt)")
        w(f"{ind}so = boff + {st} * {KU * MP}")
        for rb in range(MP // 4):
            p = ind
            if rb:
                w(f"{ind}if pl > uint32({4 * rb}):")
                p = ind + "    "
            w(f"{p}for u in range({KU}):")
            w(f"{p}    lds4_into(fs, 0, Ss, so + u * {MP} + {4 * rb})")
            # acc[(4 rb + jj) * 4 + e] += fs[jj] * fb[u * 4 + e] for each e, then jj
            w(f"{p}    axpy_block(acc, {4 * rb * VQ}, fs, fb, u * {VQ})")

    _ring_loop(w, cfg, stage, copy_l, multiply, fast_if="qfull")
    # The CTA's outputs go out through the ring, laid out as C holds them (P contiguous along
    # m when m is small, Q when n is small), so a warp's stores cover whole runs of C. Stored
    # straight from the accumulators, each of a lane's 64 stores touches its own sector (lanes
    # 4 columns apart), and every CTA does that at once at the end: run O's probe measured it
    # at a third of the axpy loop's time (docs/history/tuning-ladder-5-runs-m-to-p.md, rung 34).
    QC = cfg.QC

    def store(ind: str, row: str, src: str) -> None:
        """C's element of column q0 + ql and row ``row`` of the block := alpha * Lring[src]
        (+ beta * C), for a column inside Q."""
        w(f"{ind}qq = q0 + int64(ql)")
        w(f"{ind}if qq < Q:")
        w(f"{ind}    off = c_s + {row} + qq" + (" * c_q" if r["c_p"] == "1" else ""))
        w(f"{ind}    v = alpha * Lring[{src}]")
        w(f"{ind}    C[off] = v + beta * C[off] if for_beta else v")

    w("    cuda.syncthreads()  # every thread is done with the ring")
    w(f"    q0 = int64(cuda.blockIdx.x) * {QC}")
    if r["c_p"] == "1":  # m small: column ql of the CTA's block at ql * MP, rows contiguous
        for e in range(VQ):
            for pb in range(0, MP, 4):
                w(f"    sts4(Lring, rt * {MP} + {e * MP + pb}, "
                  + ", ".join(f"acc[{(pb + i) * 4 + e}]" for i in range(4)) + ")")
        w("    cuda.syncthreads()")
        # Element x of the block's P x QC outputs is row x % P of column x // P: consecutive
        # lanes store consecutive rows. With P == MP that is a constant mapping; below it, a
        # division by P, but only P * QC / T stores a thread instead of MP * QC / T.
        w(f"    if pl == uint32({MP}):")
        w(f"        for i in range({MP * QC // T}):")
        w(f"            x = tid + uint32(i * {T})")
        w(f"            ql = x // uint32({MP})")
        store("            ", f"int64(x % uint32({MP}))", "x")
        w("    else:")
        w(f"        for x in range(tid, pl * uint32({QC}), uint32({T})):")
        w("            ql = x // pl")
        w("            pe = x - ql * pl")
        store("            ", "int64(pe)", f"ql * uint32({MP}) + pe")
    else:  # n small: row p of the block at p * QC, columns contiguous
        for pp in range(MP):
            w(f"    sts4(Lring, {pp * QC} + rt, " + ", ".join(f"acc[{pp * 4 + e}]" for e in range(4)) + ")")
        w("    cuda.syncthreads()")
        w(f"    for pp in range({MP}):")
        w("        if pp < P:")
        w(f"            for i in range({QC // T}):")
        w(f"                ql = tid + uint32(i * {T})")
        store("                ", "pp * c_p", f"uint32(pp * {QC}) + ql")


def _copy_to_ring(w, p: str, d: tuple, Lr: str, src: tuple, whole: str | None, has: tuple,
                  vec: int = 4) -> None:
    """One 16-byte vector of L at ``src`` into the ring at ``d`` (each the texts of two
    summands; ``src``'s second may be None): in ``4 // vec`` copies of ``vec`` floats when
    ``whole`` holds (None: known to), else element by element, element e copied when ``a &
    (x + e < y)`` holds for ``has = (a, x, y)`` and zero-filled otherwise, so no copy names a
    byte past the matrix."""
    (d0, d1), (s0, s1) = d, src
    d, src = f"{d0} + {d1}", s0 if s1 is None else f"{s0} + {s1}"

    def copies(ind: str) -> None:
        if vec == 1:  # one call, which Numba's front end types and lowers for a fraction of four
            w(f"{ind}cp_async4x4(Lring, {d}, {Lr}, {src})")
            return
        for e in range(0, 4, vec):
            at = f" + {e}" if e else ""
            w(f"{ind}cp_async{4 * vec}(Lring, {d}{at}, {Lr}, {src}{at}, uint32({4 * vec}))")

    if whole is None:
        copies(p)
        return
    w(f"{p}if {whole}:")
    copies(p + "    ")
    w(f"{p}else:")
    # One call that emits what the four ``v = a & (x + e < y)`` and ``cp_async4_if`` statements
    # it stands for were lowered to, each element's condition and sums in their turn: a loop
    # of them, or the condition inside the call, made NVVM rebuild the swizzled shared
    # addresses in the dot kernel's fast loop (32 to 40 more SASS instructions), and so did
    # the sums computed once ahead of the four.
    w(f"{p}    cp_async4x4_if({has[0]}, {has[1]}, {has[2]}, Lring, {d0}, {d1}, {Lr}, {s0}, {s1 or 0})")


def _ring_loop(w, cfg: SkinnyConfig, stage, copy_l, multiply, *, fast_if: str) -> None:
    """The K loop of a kernel that copies L through a shared ring of ``cfg.ring`` steps (the
    group accounting is stated in ``_dot_body``): ``stage(ind, piece, buf)`` issues S's piece
    without committing, ``copy_l(ind, kstep, slot, fast)`` one step of L, ``multiply(ind,
    st, slot)`` step st of the piece from its slot. The fast copy, under ``fast_if`` and every
    step this piece copies (up to ring - 1 steps into the next) before ke, tests nothing."""
    KC, R, STEPS, SK = cfg.KC, cfg.ring, cfg.STEPS, cfg.SK
    SBUF = MP * KC
    wait = f"cp_async_wait{R - 1}()"
    w("    # ---- prologue: S's piece 0, then my first R - 1 steps of L")
    w("    if npieces > 0:")
    stage("        ", "int64(0)", "int64(0)")
    w("        cp_async_commit()")
    for j in range(R - 1):
        copy_l("        ", f"kb + {j * SK}", j, fast=False)
        w("        cp_async_commit()")
    w("        for pc in range(npieces):")
    w(f"            kp = kb + pc * {KC}")
    w(f"            boff = (pc & 1) * {SBUF}")
    w(f"            {wait}")
    w("            cuda.syncthreads()")
    w("            if pc + 1 < npieces:")
    stage("                ", "(pc + 1)", "((pc + 1) & 1)")
    w(f"            if {fast_if} and kp + {KC + (R - 1) * SK} <= ke:")
    ind = "                "
    for fast in (True, False):
        if not fast:
            w("            else:")
        w(f"{ind}for sp in range({STEPS // R}):")
        for j in range(R):
            w(f"{ind}    st = sp * {R} + {j}")
            w(f"{ind}    # step st: copy step st + {R - 1} into slot {(j + R - 1) % R}, multiply slot {j}")
            copy_l(ind + "    ", f"kp + (st + {R - 1}) * {SK}", (j + R - 1) % R, fast)
            w(f"{ind}    cp_async_commit()")
            w(f"{ind}    {wait}")
            if fast:
                multiply(ind + "    ", "st", j)
            else:
                w(f"{ind}    if kp + st * {SK} < ke:")
                multiply(ind + "        ", "st", j)
    w("        cp_async_wait_all()  # only empty groups are left; nothing lands after the kernel")


def generate_source(cfg: SkinnyConfig, fname: str, after_grid: bool = False) -> str:
    """The Python source of the kernel function ``fname`` for ``cfg``; ``after_grid``: it begins
    with ``griddepcontrol.wait``."""
    return "\n".join(_src_lines(cfg, fname, after_grid)) + "\n"
