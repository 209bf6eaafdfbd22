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
        extra = (f"p{self.ahead}" if self.ahead != 1 else "") + (f"g{self.group_m}" if self.group_m else "")
        return (f"sgemm_lowk_{self.transa}{self.transb}".lower()
                + f"_{self.BM}x{self.BN}x{self.KSTEP}{extra}_{self.STAGES}s_a{self.align}")

    def check(self) -> None:
        assert self.THREADS % 32 == 0 and self.R >= 1, "whole warps, at least one row a thread"
        assert self.BN % 8 == 0 and self.KMAX % self.KSTEP == 0, "whole column groups and K steps"
        assert self.transa in "NT" and self.transb in "NT"


def _pairs(**kw: Any) -> tuple[LowKConfig, ...]:
    return tuple(LowKConfig(**kw, transa=a, transb=b) for a in "NT" for b in "NT")


#: One row per transpose pair: 128 threads of 2 rows and 32 columns (64 accumulators, 4 CTAs
#: a SM at 128 registers).
LOWK_MANIFEST: tuple[LowKConfig, ...] = _pairs()


def grid_for(cfg: LowKConfig, m: int, n: int) -> tuple[int, int, int]:
    """One CTA per BM x BN tile of C, as a 1-D grid (the kernel numbers the tiles: N fastest, or
    in groups of ``group_m`` M tiles)."""
    return (-(-m // cfg.BM) * -(-n // cfg.BN), 1, 1)


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
    T, R, BN = cfg.THREADS, cfg.R, cfg.BN
    a_t, b_t = cfg.transa == "T", cfg.transb == "T"
    align = "" if simulator else ", alignment=16"
    out: list[str] = []
    w = out.append
    w(f"def {fname}(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):")
    if after_grid:
        w("    grid_dependency_wait()")
    w(f"    Bs = cuda.shared.array({cfg.KMAX * BN}, float32{align})")
    w("    um = uint32(m)\n    un = uint32(n)\n    uk = uint32(k)")
    w("    ulda = uint64(uint32(lda))\n    uldb = uint64(uint32(ldb))\n    uldc = uint64(uint32(ldc))")
    w("    tid = uint32(cuda.threadIdx.x)")
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
    for q in range(4):
        for jv in range(BN // 4):
            w(f"        b0, b1, b2, b3 = lds4(Bs, bb + uint32({q * BN + 4 * jv}))")
            for r in range(R):
                for c in range(4):
                    j = 4 * jv + c
                    w(f"        c{r}_{j} = c{r}_{j} + a{r}_{q} * b{c}")
    ring = ["a"] + [f"f{s}_" for s in range(1, cfg.ahead)] + [last]
    for dst, src in zip(ring, ring[1:]):
        for r in range(R):
            for q in range(4):
                w(f"        {dst}{r}_{q} = {src}{r}_{q}")
    w("        g = uint32(g + uint32(1))")
    # Epilogue: column by column, C read in groups of 8 columns, loads ahead of stores.
    w("    ncols = uint32(un - n0)")
    w("    read_c = beta != float32(0)")
    for r in range(R):
        w(f"    if row{r} < um:")
        w(f"        ci = uint64(n0) * uldc + uint64(row{r})")
        w("        if read_c:")
        for j0 in range(0, BN, 8):
            w("            cj = ci")
            for j in range(j0, j0 + 8):
                w(f"            t{j - j0} = C[cj] if uint32({j}) < ncols else float32(0)")
                w("            cj = cj + uldc")
            for j in range(j0, j0 + 8):
                w(f"            if uint32({j}) < ncols:")
                w(f"                C[ci] = alpha * c{r}_{j} + beta * t{j - j0}")
                w("            ci = ci + uldc")
        w("        else:")
        for j in range(BN):
            w(f"            if uint32({j}) < ncols:")
            w(f"                C[ci] = alpha * c{r}_{j}")
            w("            ci = ci + uldc")
    return "\n".join(out) + "\n"
