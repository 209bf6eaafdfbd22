"""Low-K products: k at most :attr:`LowKConfig.KMAX` (64). Such a product does ``2k`` flops
per element of C and reads each element of A once per column tile, so it is bound by writing C
(and reading it when beta != 0) at small k, and by streaming A at large m; a tile kernel built
for a long K loop spends it in prologue and epilogue instead (``docs/design.md``, "Low-K
products").

Mapping: a CTA of ``THREADS`` threads owns ``BM = THREADS * R`` rows and ``BN`` columns of C.
Thread ``t`` owns rows ``m0 + t + r * THREADS`` (r < R): the lanes of a warp hold 32
consecutive rows, so every load of A in N and every load and store of C is a warp's 128
contiguous bytes, whatever the alignment. The CTA copies op(B)[0:k, n0:+BN] into shared memory
once (zeros past k, rounded up to 4, and past n); then each thread walks k four at a time,
holding its R rows' next four elements of op(A) in registers one group ahead, and adds
``op(A)[row, p] * op(B)[p, j]`` into ``R x BN`` accumulators, op(B)'s row a broadcast 16-byte
shared load. The epilogue writes ``alpha * acc + beta * C`` column by column, reading C (in
groups of 8 columns, loads ahead of stores) only when beta != 0.

Tiles are numbered with the N tile fastest (one 1-D grid), so the CTAs that re-read a slab of A
for the next columns run together and find it in L2. Rows past m read the last row (in bounds)
and store nothing; columns past n multiply zeros and store nothing. Every global access is a
scalar 4-byte one, so one row per pair serves every alignment class (``a4``).

``LowKConfig.walk`` (no registry row yet; the lab's question is whether it writes C nearer the
device's store rate): a grid of at most ``128 * walk`` CTAs, each walking a run of consecutive
tiles (N fastest) with its rows of op(A) held in registers (k <= KMAX = 16) and the next tile's
slice of op(B) loaded into registers while this tile's products are made and its C stored, so
that a CTA's loads and stores overlap instead of taking turns with its neighbours'.

The kernel text is generated from :class:`LowKConfig` (every register a named scalar) and
compiled by :mod:`sgblas.kernels.lowk_jit`; the registry (:mod:`sgblas.kernels.spec`) makes a row
of each config of :data:`LOWK_MANIFEST`. This module imports without Numba.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sgblas.kernels.problem import GemmProblem

__all__ = ["LowKConfig", "LOWK_MANIFEST", "generate_source", "grid_for", "guard"]

_MAX_GRID_X = 2**31 - 1


@dataclass(frozen=True)
class LowKConfig:
    """One low-K variant: its threads, rows per thread, columns, K limit and transpose pair."""

    THREADS: int = 128  # threads per CTA, one row of C each per R
    R: int = 2          # rows of C per thread, THREADS apart
    BN: int = 32        # columns of C per CTA (a multiple of 8)
    KMAX: int = 64      # the longest K held in shared memory (a multiple of 4)
    min_blocks: int = 4  # launch bound: resident CTAs per SM (caps the registers)
    ahead: int = 1      # steps of op(A) in flight in registers beyond the one being multiplied
    group_m: int = 0    # 0: N tiles fastest; G: G M tiles fastest, then the next N tile (CTAs
    #                     next to each other in M run together, so the sectors of C they share
    #                     at an unaligned boundary meet in L2)
    #: 0: one tile a CTA. W > 0: at most W * 128 CTAs (:func:`grid_for`), each walking its
    #: share of the tiles in order (N fastest) with its rows of op(A) held in registers
    #: (KMAX <= 16) and the next tile's slice of op(B) loaded while this tile's C is stored.
    walk: int = 0
    transa: str = "N"
    transb: str = "N"

    STAGES = 1  # op(B)'s slice is copied once; A is read straight into registers
    KSTEP = 4   # k values per step of the loop (and the K rounding of op(B)'s copy)
    align = 4   # every global access is a scalar: any address and leading dimension

    @property
    def BM(self) -> int:
        return self.THREADS * self.R

    @property
    def pair(self) -> tuple[str, str]:
        return (self.transa, self.transb)

    @property
    def tile(self) -> tuple[int, int, int]:
        """``(BM, BN, KSTEP)``: the cost model charges whole steps of 4, not KMAX."""
        return (self.BM, self.BN, self.KSTEP)

    @property
    def launch_bounds(self) -> tuple[int, int]:
        return (self.THREADS, self.min_blocks)

    def name(self) -> str:
        """``sgemm_lowk_<pair>_<BM>x<BN>x<KSTEP>[p<ahead>][g<group_m>]_1s_a4``: the tile, then the
        parameters that differ from the default (steps of A in flight, the M-tile groups)."""
        extra = (f"p{self.ahead}" if self.ahead != 1 else "") + (f"g{self.group_m}" if self.group_m else "") \
            + (f"w{self.walk}" if self.walk else "")
        return (f"sgemm_lowk_{self.transa}{self.transb}".lower()
                + f"_{self.BM}x{self.BN}x{self.KSTEP}{extra}_{self.STAGES}s_a{self.align}")

    def check(self) -> None:
        assert self.THREADS % 32 == 0 and self.R >= 1, "whole warps, at least one row a thread"
        assert self.BN % 8 == 0 and self.KMAX % self.KSTEP == 0, "whole column groups and K steps"
        assert self.transa in "NT" and self.transb in "NT"
        if self.walk:
            assert self.KMAX <= 16 and not self.group_m, "a walking CTA holds its rows' op(A) in registers"
            assert (self.KMAX * self.BN) % self.THREADS == 0 and self.THREADS % self.BN == 0 \
                and self.THREADS % self.KMAX == 0, "each thread copies whole elements of op(B)'s slice"


def _pairs(**kw: Any) -> tuple[LowKConfig, ...]:
    return tuple(LowKConfig(**kw, transa=a, transb=b) for a in "NT" for b in "NT")


#: One row per transpose pair: 128 threads of 2 rows and 32 columns (64 accumulators, 4 CTAs
#: a SM at 128 registers).
LOWK_MANIFEST: tuple[LowKConfig, ...] = _pairs()


def grid_for(cfg: LowKConfig, m: int, n: int) -> tuple[int, int, int]:
    """One CTA per BM x BN tile of C, as a 1-D grid (the kernel numbers the tiles: N fastest, or
    in groups of ``group_m`` M tiles)."""
    tiles = -(-m // cfg.BM) * -(-n // cfg.BN)
    return (min(tiles, 128 * cfg.walk) if cfg.walk else tiles, 1, 1)


def guard(cfg: LowKConfig, p: GemmProblem) -> str | None:
    """What the low-K kernels need beyond the registry's common keys."""
    if p.m < 1 or p.n < 1 or p.k < 1:
        return f"m={p.m}, n={p.n}, k={p.k}: every dimension must be >= 1"
    if p.k > cfg.KMAX:
        return f"k={p.k} is more than {cfg.KMAX}, the most of op(B) that {cfg.name()} holds in shared memory"
    if grid_for(cfg, p.m, p.n)[0] > _MAX_GRID_X:
        return f"{p.m} x {p.n} needs more than {_MAX_GRID_X} CTAs of {cfg.BM} x {cfg.BN}"
    return None


def _u(x: Any) -> str:
    return f"uint32({x})"


def generate_source(cfg: LowKConfig, fname: str, after_grid: bool, simulator: bool = False) -> str:
    """The kernel's Python text (ABI :data:`sgblas.kernels.abi.GEMM`)."""
    cfg.check()
    if cfg.walk:
        return _generate_walk(cfg, fname, after_grid, simulator)
    T, R, BN = cfg.THREADS, cfg.R, cfg.BN
    a_t, b_t = cfg.transa == "T", cfg.transb == "T"
    out: list[str] = []
    w = out.append
    _prologue(w, fname, after_grid, cfg.KMAX * BN, simulator)
    w(f"    n_tiles = uint32((un + uint32({BN - 1})) // uint32({BN}))")
    w("    bid = uint32(cuda.blockIdx.x)")
    if cfg.group_m:
        G = cfg.group_m
        w(f"    m_tiles = uint32((um + uint32({cfg.BM - 1})) // uint32({cfg.BM}))")
        w(f"    per = uint32(n_tiles * uint32({G}))")
        w("    grp = uint32(bid // per)")
        w(f"    rows = uint32(m_tiles - grp * uint32({G}))")
        w(f"    rows = rows if rows < uint32({G}) else uint32({G})")
        w("    local = uint32(bid - grp * per)")
        w("    nt = uint32(local // rows)")
        w(f"    mt = uint32(grp * uint32({G}) + (local - nt * rows))")
        w(f"    n0 = uint32(nt * uint32({BN}))")
    else:
        w("    mt = uint32(bid // n_tiles)")
        w(f"    n0 = uint32((bid - mt * n_tiles) * uint32({BN}))")
    w(f"    m0 = uint32(mt * uint32({cfg.BM}))")
    w("    last = uint32(um - uint32(1))")
    for r in range(R):
        w(f"    row{r} = uint32(m0 + tid + uint32({r * T}))")
        w(f"    x{r} = uint64(row{r} if row{r} < um else last)")
        if a_t:
            w(f"    ab{r} = x{r} * ulda")
    w("    kq = uint32((uk + uint32(3)) & uint32(4294967292))")

    def load_group(dst: str, p0: str, pad: str = "    ") -> None:
        for q in range(4):
            w(f"{pad}pq = uint32({p0} + uint32({q}))")
            if not a_t:
                w(f"{pad}pc = uint64(pq) * ulda")
            for r in range(R):
                idx = f"ab{r} + uint64(pq)" if a_t else f"pc + x{r}"
                w(f"{pad}{dst}{r}_{q} = A[{idx}] if pq < uk else float32(0)")

    # A's first step is in flight while op(B)'s slice is copied.
    for s in range(cfg.ahead):
        load_group("a" if s == 0 else f"f{s}_", f"uint32({4 * s})")
    w("    e = tid")
    w(f"    total = uint32(kq * uint32({BN}))")
    w("    while e < total:")
    if b_t:  # op(B)[p, j] = B[j + p * ldb]: lanes along j
        w(f"        p = uint32(e // uint32({BN}))\n        j = uint32(e - p * uint32({BN}))")
    else:    # op(B)[p, j] = B[p + j * ldb]: lanes along p
        w("        j = uint32(e // kq)\n        p = uint32(e - j * kq)")
    w("        col = uint32(n0 + j)\n        v = float32(0)\n        if p < uk and col < un:")
    w(f"            v = B[{'uint64(p) * uldb + uint64(col)' if b_t else 'uint64(col) * uldb + uint64(p)'}]")
    w(f"        Bs[p * uint32({BN}) + j] = v")
    w(f"        e = uint32(e + uint32({T}))")
    w("    cuda.syncthreads()")
    for r in range(R):
        w("    " + " = ".join(f"c{r}_{j}" for j in range(BN)) + " = float32(0)")
    w("    steps = uint32(kq >> uint32(2))\n    g = uint32(0)")
    w("    while g < steps:")
    # the next step's loads first: their latency hides behind this step's multiply-adds
    last = f"f{cfg.ahead}_" if cfg.ahead > 1 else "f"
    load_group(last, f"uint32((g + uint32({cfg.ahead})) << uint32(2))", "        ")
    w(f"        bb = uint32(g * uint32({4 * BN}))")
    _step(w, R, BN, "bb", lambda r, q: f"a{r}_{q}", "        ")
    ring = ["a"] + [f"f{s}_" for s in range(1, cfg.ahead)] + [last]
    for dst, src in zip(ring, ring[1:]):
        for r in range(R):
            for q in range(4):
                w(f"        {dst}{r}_{q} = {src}{r}_{q}")
    w("        g = uint32(g + uint32(1))")
    # Epilogue: column by column, C read in groups of 8 columns, loads ahead of stores.
    _epilogue(w, R, BN, "    ")
    return "\n".join(out) + "\n"


def _prologue(w: Any, fname: str, after_grid: bool, shared_floats: int, simulator: bool) -> None:
    """The signature, the wait for the grid ahead (sm_90 builds), op(B)'s shared array and the
    arguments as the unsigned integers the index arithmetic uses."""
    w(f"def {fname}(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):")
    if after_grid:
        w("    grid_dependency_wait()")
    w(f"    Bs = cuda.shared.array({shared_floats}, float32{'' if simulator else ', alignment=16'})")
    w("    um = uint32(m)\n    un = uint32(n)\n    uk = uint32(k)")
    w("    ulda = uint64(uint32(lda))\n    uldb = uint64(uint32(ldb))\n    uldc = uint64(uint32(ldc))")
    w("    tid = uint32(cuda.threadIdx.x)")


def _step(w: Any, R: int, BN: int, row0: str, a: Any, pad: str) -> None:
    """One step of 4 k values: for each k, op(B)'s row (from shared element ``row0``) in
    16-byte broadcast reads, each feeding its 4 columns' multiply-adds of the R rows (``a(r, q)``
    names row r's value of the step's k number q)."""
    for q in range(4):
        for jv in range(BN // 4):
            w(f"{pad}b0, b1, b2, b3 = lds4(Bs, {row0} + uint32({q * BN + 4 * jv}))")
            for r in range(R):
                for c in range(4):
                    w(f"{pad}c{r}_{4 * jv + c} = c{r}_{4 * jv + c} + {a(r, q)} * b{c}")


def _epilogue(w: Any, R: int, BN: int, pad: str) -> None:
    """The stores of a thread's R x BN accumulators, column by column (``alpha * acc + beta *
    C``, C read in groups of 8 columns with its loads ahead of the stores, only when beta != 0),
    at indent ``pad``: ``n0`` the tile's first column, ``row{r}`` the thread's rows."""
    w(f"{pad}ncols = uint32(un - n0)")
    w(f"{pad}read_c = beta != float32(0)")
    for r in range(R):
        w(f"{pad}if row{r} < um:")
        w(f"{pad}    ci = uint64(n0) * uldc + uint64(row{r})")
        w(f"{pad}    if read_c:")
        for j0 in range(0, BN, 8):
            w(f"{pad}        cj = ci")
            for j in range(j0, j0 + 8):
                w(f"{pad}        t{j - j0} = C[cj] if uint32({j}) < ncols else float32(0)")
                w(f"{pad}        cj = cj + uldc")
            for j in range(j0, j0 + 8):
                w(f"{pad}        if uint32({j}) < ncols:")
                w(f"{pad}            C[ci] = alpha * c{r}_{j} + beta * t{j - j0}")
                w(f"{pad}        ci = ci + uldc")
        w(f"{pad}    else:")
        for j in range(BN):
            w(f"{pad}        if uint32({j}) < ncols:")
            w(f"{pad}            C[ci] = alpha * c{r}_{j}")
            w(f"{pad}        ci = ci + uldc")


def _generate_walk(cfg: LowKConfig, fname: str, after_grid: bool, simulator: bool) -> str:
    """:func:`generate_source` of a walking config: CTA ``b`` takes tiles ``b * per`` to
    ``(b + 1) * per - 1`` (``per`` from the grid's size), N fastest, so its rows change only
    where its share crosses into the next M tile. Its R rows' op(A)[row, 0:KMAX] stay in
    registers (reloaded at such a crossing); op(B)'s slice of a tile passes through registers
    into one of two shared buffers, and the next tile's slice is loaded into registers right
    after the barrier, so that its latency passes while this tile's products are made and its
    C stored. One barrier a tile: a buffer is rewritten only after every warp has passed the
    barrier of the tile that read it last."""
    T, R, BN, KM = cfg.THREADS, cfg.R, cfg.BN, cfg.KMAX
    a_t, b_t = cfg.transa == "T", cfg.transb == "T"
    NB = KM * BN // T  # elements of op(B)'s slice each thread copies
    out: list[str] = []
    w = out.append
    _prologue(w, fname, after_grid, 2 * KM * BN, simulator)
    w(f"    n_tiles = uint32((un + uint32({BN - 1})) // uint32({BN}))")
    w(f"    tiles = uint32(n_tiles * ((um + uint32({cfg.BM - 1})) // uint32({cfg.BM})))")
    w("    ctas = uint32(cuda.gridDim.x)")
    w("    per = uint32((tiles + ctas - uint32(1)) // ctas)")
    w("    t = uint32(uint32(cuda.blockIdx.x) * per)")
    w("    t_end = uint32(t + per)")
    w("    t_end = t_end if t_end < tiles else tiles")
    w("    last = uint32(um - uint32(1))")
    w("    kq = uint32((uk + uint32(3)) & uint32(4294967292))")
    # The element of op(B)'s slice each copy i of a thread moves: (p, j), lanes along B's
    # contiguous dimension (j in T, p in N).
    for i in range(NB):
        if b_t:
            w(f"    bp{i} = uint32((tid + uint32({i * T})) // uint32({BN}))")
            w(f"    bj{i} = uint32(tid + uint32({i * T}) - bp{i} * uint32({BN}))")
        else:
            w(f"    bj{i} = uint32((tid + uint32({i * T})) // uint32({KM}))")
            w(f"    bp{i} = uint32(tid + uint32({i * T}) - bj{i} * uint32({KM}))")

    def load_b(n0: str, pad: str) -> None:
        for i in range(NB):
            w(f"{pad}col = uint32({n0} + bj{i})")
            idx = f"uint64(bp{i}) * uldb + uint64(col)" if b_t else f"uint64(col) * uldb + uint64(bp{i})"
            w(f"{pad}v{i} = B[{idx}] if bp{i} < uk and col < un else float32(0)")

    w("    mt = uint32(t // n_tiles)")
    w(f"    n0 = uint32((t - mt * n_tiles) * uint32({BN}))")
    w("    if t < t_end:")
    load_b("n0", "        ")
    w("    else:")
    w("        " + " = ".join(f"v{i}" for i in range(NB)) + " = float32(0)")
    w("    held = uint32(4294967295)")  # the M tile whose rows of op(A) are in registers
    w("    " + " = ".join(f"a{r}_{p}" for r in range(R) for p in range(KM)) + " = float32(0)")
    w("    buf = uint32(0)")
    w("    while t < t_end:")
    w("        mt = uint32(t // n_tiles)")
    w(f"        n0 = uint32((t - mt * n_tiles) * uint32({BN}))")
    w(f"        m0 = uint32(mt * uint32({cfg.BM}))")
    for r in range(R):
        w(f"        row{r} = uint32(m0 + tid + uint32({r * T}))")
    w(f"        base = uint32(buf * uint32({KM * BN}))")
    for i in range(NB):
        w(f"        Bs[base + bp{i} * uint32({BN}) + bj{i}] = v{i}")
    w("        if mt != held:")
    w("            held = mt")
    for r in range(R):
        w(f"            x{r} = uint64(row{r} if row{r} < um else last)")
        for p in range(KM):
            idx = f"x{r} * ulda + uint64({p})" if a_t else f"uint64({p}) * ulda + x{r}"
            w(f"            a{r}_{p} = A[{idx}] if uint32({p}) < uk else float32(0)")
    w("        cuda.syncthreads()")
    w("        tn = uint32(t + uint32(1))")
    w("        if tn < t_end:")
    w("            mn = uint32(tn // n_tiles)")
    w(f"            nn = uint32((tn - mn * n_tiles) * uint32({BN}))")
    load_b("nn", "            ")
    for r in range(R):
        w("        " + " = ".join(f"c{r}_{j}" for j in range(BN)) + " = float32(0)")
    for g in range(KM // 4):
        w(f"        if kq > uint32({4 * g}):")
        _step(w, R, BN, f"base + uint32({4 * g * BN})", lambda r, q, g=g: f"a{r}_{4 * g + q}", "            ")
    _epilogue(w, R, BN, "        ")
    w("        buf = uint32(buf ^ uint32(1))")
    w("        t = tn")
    return "\n".join(out) + "\n"
