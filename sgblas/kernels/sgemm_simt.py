"""Factory for register-tiled, strict-FP32 NN SGEMM kernels on CUDA cores (SIMT FFMA).

Computes ``C = alpha * A @ B + beta * C`` for column-major ``A`` (m x k), ``B`` (k x n) and
``C`` (m x n), all FP32 with FP32 FMA accumulation (no tensor cores, no TF32, no
flush-to-zero).

Hierarchy (all sizes are :class:`TileConfig` fields; derived sizes are asserted there):

* CTA tile ``BM x BN``, marching over K in steps of ``BK``; the A and B slices of a step sit
  in shared memory, ``As[stage][k][m]`` and ``Bs[stage][k][n]``, two stages deep, so the
  next step's copy overlaps the current step's arithmetic (one barrier per step).
* ``WARPS_M x WARPS_N`` warps, each owning a ``WM x WN`` warp tile, its 32 lanes laid out
  ``LANES_M x LANES_N``.
* Each thread owns an 8 x 8 accumulator tile made of 2 x 2 sub-tiles of 4 x 4, spaced half a
  warp tile apart, so that at every k its 8 A values and 8 B values come from shared memory
  as two 16-byte loads each, and a warp's 16-byte loads fall in distinct banks or broadcast.

Global to shared: A's slice is copied as 16-byte vectors along m (contiguous in column-major
A) straight into ``As[k][m]``; B's slice is read as 16-byte vectors along k (contiguous in
column-major B) and stored transposed into ``Bs[k][n]``, whose rows are padded by 4 floats so
the transposed stores of a warp hit 32 distinct banks. Depending on ``a_copy``/``b_copy``
this goes through ``cp.async`` (sm_80+) or through registers (LDG, then STS after the
arithmetic). Tails: vectors that run past m (A) or past k (B) are copied partially with zero
fill; columns past k/n are zero-filled; so the kernel is exact for every m, n, k >= 1 under the
alignment rules below.

Unrolling: NVVM keeps a constant loop over the BK k steps rolled (its body is 64 FMAs), which
would leave the register fragments indexed at run time, so the k steps are unrolled by
generating the kernel's source from the config: per k step, four 16-byte fragment loads for
the next step (register double buffering) and the 8 x 8 FMA block, written as two
constant-trip loops over ``cuda.local.array`` accumulators that NVVM does unroll, so every
index is a constant and nothing reaches local memory. (Writing the 64 FMAs out as scalar
statements gives the same SASS main loop but makes Numba's front end 4-6x slower.) The K loop
itself is peeled three ways so its steady state has no K predicates: full steps, the step
that copies a partial last slice, and the last step. The text is compiled with ``exec``
under this file's name, so Numba's on-disk cache can key it, and wrapped with ``cuda.jit``.

Importing this module does not import Numba: the generator and the guard are plain Python,
and Numba and :mod:`sgblas.kernels.memory` are imported by :func:`build_pyfunc` when a kernel
is first built. The tile configurations that ship are rows of the registry's manifest
(:mod:`sgblas.kernels.spec`).

Alignment the caller (the dispatch guard) must prove: A, B, C base addresses 16-byte aligned
and lda, ldb, ldc multiples of 4, so every 16-byte vector the kernel touches is aligned.
Index arithmetic: 64-bit for anything multiplied by a leading dimension; 32-bit unsigned for
lane arithmetic; shared-memory offsets are 64-bit base + constant, which NVVM folds into the
immediate offsets of the shared loads. ``beta == 0`` means C is never read.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass

from sgblas.kernels.problem import GemmProblem
from sgblas.runtime.device import SIMULATOR

__all__ = ["TileConfig", "generate_source", "build_pyfunc", "grid_for", "guard"]


@dataclass(frozen=True)
class TileConfig:
    """Tile sizes and copy strategy of one generated NN kernel."""

    BM: int = 128            # CTA tile rows (m)
    BN: int = 128            # CTA tile columns (n)
    BK: int = 8              # K step held in shared memory per stage
    WARPS_M: int = 4         # warps along m
    WARPS_N: int = 2         # warps along n
    LANES_M: int = 4         # lanes of a warp along m (LANES_M * LANES_N == 32)
    a_copy: str = "cp16"     # "cp16": cp.async 16 B into As; "ldg": LDG.128 -> regs -> STS.128
    b_copy: str = "ldg"      # "ldg": LDG.128 -> regs -> 4 STS.32; "cp4": 4 cp.async of 4 B
    group_m: int = 8         # grouped raster: CTAs walk group_m tile rows, then step along n
    #                          (0: plain column-by-column order)
    min_blocks: int = 2      # launch bound: resident CTAs per SM, which caps the registers
    #                          at 65536 / (THREADS * min_blocks)

    # Fixed thread tile: 2 x 2 sub-tiles of 4 x 4.
    TM = 8
    TN = 8

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
    def SA(self) -> int:
        """Row stride of As[k][m]: 16-byte stores along m are conflict-free unpadded."""
        return self.BM

    @property
    def SB(self) -> int:
        """Row stride of Bs[k][n]: padded by 4 so two k rows 4 apart land 16 banks apart."""
        return self.BN + 4

    @property
    def launch_bounds(self) -> tuple[int, int]:
        """``cuda.jit(launch_bounds=...)``: THREADS per CTA, ``min_blocks`` CTAs per SM."""
        return (self.THREADS, self.min_blocks)

    @property
    def uses_cp_async(self) -> bool:
        return self.a_copy.startswith("cp") or self.b_copy.startswith("cp")

    STAGES = 2  # shared-memory stages (double buffering)

    def name(self) -> str:
        return f"{self.BM}x{self.BN}x{self.BK}"

    def check(self) -> None:
        """Assert the relationships the generated code relies on."""
        assert self.a_copy in ("cp16", "ldg") and self.b_copy in ("cp4", "ldg"), \
            f"unknown copy strategy {self.a_copy!r}/{self.b_copy!r}"
        assert 32 % self.LANES_M == 0, "LANES_M must divide the 32 lanes of a warp"
        assert self.WM == 2 * 4 * self.LANES_M and self.BM == self.WM * self.WARPS_M, \
            "a warp tile along m must be 2 sub-tiles of 4 rows per lane: WM == 8 * LANES_M"
        assert self.WN == 2 * 4 * self.LANES_N and self.BN == self.WN * self.WARPS_N, \
            "a warp tile along n must be 2 sub-tiles of 4 columns per lane: WN == 8 * LANES_N"
        assert self.BK % 4 == 0, "B is read as 16-byte vectors along k, so BK is a multiple of 4"
        assert self.THREADS % (self.BM // 4) == 0 and \
            (self.BM * self.BK // 4) % self.THREADS == 0, \
            "the A slice (BM x BK as float4 along m) must split evenly over the threads"
        assert (self.BK * self.BN // 4) % self.THREADS == 0 and \
            self.THREADS % self.QB == 0 and (self.BK // 4) % self.QB == 0 and \
            self.BN % (self.THREADS // self.QB) == 0, \
            "the B slice (BK x BN as float4 along k) must split evenly over the threads"
        assert self.SB % 8 == 4, "Bs row stride must be 4 mod 8 floats for conflict-free STS"

    @property
    def QB(self) -> int:
        """Lanes that share one B column in a copy: 2 lanes x 16 B fill a 32-byte sector."""
        return min(2, self.BK // 4)


def _src_lines(cfg: TileConfig, fname: str) -> list[str]:  # noqa: C901 - a code generator
    """The kernel's source text, one line per element of the list."""
    cfg.check()
    BM, BN, BK, SA, SB = cfg.BM, cfg.BN, cfg.BK, cfg.SA, cfg.SB
    T = cfg.THREADS
    WM, WN = cfg.WM, cfg.WN
    A_TPC = BM // 4                      # threads per A column (float4 along m)
    LA = BM * BK // 4 // T               # A float4 copies per thread per stage
    A_COLS_PER_PASS = T // A_TPC
    QB = cfg.QB
    LB = BK * BN // 4 // T               # B float4 copies per thread per stage
    RQ = (BK // 4) // QB                 # k-groups of 4 a thread covers in one column
    B_COLS_PER_PASS = T // QB
    STAGE_A, STAGE_B = BK * SA, BK * SB
    a_cp, b_cp = cfg.a_copy == "cp16", cfg.b_copy == "cp4"

    L: list[str] = []
    w = L.append
    w(f"def {fname}(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):")
    al = "" if SIMULATOR else ", alignment=16"
    w(f"    As = cuda.shared.array({2 * STAGE_A}, float32{al})")
    w(f"    Bs = cuda.shared.array({2 * STAGE_B}, float32{al})")
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
    w("    tid = uint32(cuda.threadIdx.x)")
    w("    warp = tid >> uint32(5)")
    w("    lane = tid & uint32(31)")
    w(f"    am0 = (warp % uint32({cfg.WARPS_M})) * uint32({WM}) + "
      f"(lane % uint32({cfg.LANES_M})) * uint32(4)")
    w(f"    bn0 = (warp // uint32({cfg.WARPS_M})) * uint32({WN}) + "
      f"(lane // uint32({cfg.LANES_M})) * uint32(4)")
    w("    lda64 = int64(lda)")
    w("    ldb64 = int64(ldb)")
    w("")
    w("    # ---- global -> shared mapping: A as float4 along m, B as float4 along k")
    w(f"    ra = (tid % uint32({A_TPC})) * uint32(4)")
    w(f"    pa = tid // uint32({A_TPC})")
    w(f"    qb = (tid % uint32({QB})) * uint32(4)")
    w(f"    jb = tid // uint32({QB})")
    w("    rows_left = int64(m) - (row0 + int64(ra))")
    w("    a_rows = uint32(max(min(rows_left, int64(4)), int64(0)))  # valid rows in my float4")
    w("    a_bytes = a_rows * uint32(4)")
    w("    a_g = row0 + int64(ra) + int64(pa) * lda64      # 64-bit: scaled by lda")
    w(f"    a_w = int64(pa * uint32({SA}) + ra)               # my As store slot, stage 0")
    for r in range(LB):
        q = f"qb + uint32({4 * QB * (r % RQ)})" if r % RQ else "qb"
        j = f"jb + uint32({B_COLS_PER_PASS * (r // RQ)})" if r // RQ else "jb"
        w(f"    qb{r} = {q}")
        w(f"    jb{r} = {j}")
        w(f"    b_ok{r} = col0 + int64(jb{r}) < int64(n)")
        w(f"    b_bytes{r} = uint32(4) if b_ok{r} else uint32(0)")
        w(f"    b_g{r} = int64(qb{r}) + (col0 + int64(jb{r})) * ldb64")
        w(f"    b_w{r} = int64(qb{r} * uint32({SB}) + jb{r})")
    w("    a_r = int64(am0)                                 # my As fragment base, stage 0")
    w("    b_r = int64(bn0)                                 # my Bs fragment base, stage 0")
    w(f"    a_flip = int64({STAGE_A}) + 2 * a_w   # x -> a_flip - x swaps stage 0 <-> 1")
    w(f"    b_flip = int64({STAGE_B})")
    w(f"    a_rflip = int64({STAGE_A}) + 2 * a_r")
    w(f"    b_rflip = int64({STAGE_B}) + 2 * b_r")
    w("    b_ws = int64(0)                                  # B store stage offset")
    if not a_cp:
        for r in range(LA):
            w(f"    xa{r}_0 = xa{r}_1 = xa{r}_2 = xa{r}_3 = float32(0)")
    if not b_cp:
        for r in range(LB):
            w(f"    xb{r}_0 = xb{r}_1 = xb{r}_2 = xb{r}_3 = float32(0)")
    w("    acc = cuda.local.array(64, float32)    # 8 x 8 accumulators, acc[i * 8 + j]")
    w("    fa = cuda.local.array(16, float32)     # A fragments, two buffers of 8")
    w("    fb = cuda.local.array(16, float32)     # B fragments, two buffers of 8")
    w("    for i in range(64):")
    w("        acc[i] = float32(0)")
    w("")

    def load_stage(p: str, tail: bool) -> None:
        """Issue the copy of the K step at a_g/b_g; with tail, zero-fill from k column kv."""
        copy_a(p, tail)
        copy_b(p, tail)
        if a_cp or b_cp:
            w(f"{p}cp_async_commit()")

    def copy_a(p: str, tail: bool) -> None:
        # Rows past m (a_rows < 4) only feed C rows that are never stored, so a skipped
        # register-staged copy may leave stale values; the partial float4 at row m is
        # copied element by element so no byte past the matrix is read.
        for r in range(LA):
            col = f"pa + uint32({A_COLS_PER_PASS * r})" if r else "pa"
            goff = f"a_g + {A_COLS_PER_PASS * r} * lda64" if r else "a_g"
            soff = f"a_w + {A_COLS_PER_PASS * r * SA}" if r else "a_w"
            if a_cp:
                nbytes = f"a_bytes if {col} < kv else uint32(0)" if tail else "a_bytes"
                w(f"{p}cp_async16(As, {soff}, A, {goff}, {nbytes})")
                continue
            q = p
            if tail:
                w(f"{p}if {col} < kv:")
                q = p + "    "
            w(f"{q}if a_rows == uint32(4):")
            w(f"{q}    xa{r}_0, xa{r}_1, xa{r}_2, xa{r}_3 = ldg4(A, {goff})")
            w(f"{q}else:")
            for e in range(4):
                w(f"{q}    xa{r}_{e} = ldg1(A, {goff} + {e}) if a_rows > uint32({e}) "
                  f"else float32(0)")
            if tail:
                w(f"{p}else:")
                w(f"{p}    xa{r}_0 = xa{r}_1 = xa{r}_2 = xa{r}_3 = float32(0)")

    def copy_b(p: str, tail: bool) -> None:
        for r in range(LB):
            if b_cp:
                for e in range(4):
                    nbytes = (f"b_bytes{r} if qb{r} + uint32({e}) < kv else uint32(0)"
                              if tail else f"b_bytes{r}")
                    w(f"{p}cp_async4(Bs, b_ws + b_w{r} + {e * SB}, B, b_g{r} + {e}, {nbytes})")
            elif not tail:
                w(f"{p}if b_ok{r}:")
                w(f"{p}    xb{r}_0, xb{r}_1, xb{r}_2, xb{r}_3 = ldg4(B, b_g{r})")
            else:
                w(f"{p}if b_ok{r} and qb{r} + uint32(4) <= kv:")
                w(f"{p}    xb{r}_0, xb{r}_1, xb{r}_2, xb{r}_3 = ldg4(B, b_g{r})")
                w(f"{p}else:")
                for e in range(4):
                    w(f"{p}    xb{r}_{e} = ldg1(B, b_g{r} + {e}) if b_ok{r} and "
                      f"qb{r} + uint32({e}) < kv else float32(0)")

    def store_stage(ind: str) -> None:
        """Registers -> shared for the register-staged copies, then make the stage visible."""
        p = ind
        if not a_cp:
            for r in range(LA):
                soff = f"a_w + {A_COLS_PER_PASS * r * SA}" if r else "a_w"
                w(f"{p}sts4(As, {soff}, xa{r}_0, xa{r}_1, xa{r}_2, xa{r}_3)")
        if not b_cp:
            for r in range(LB):
                for e in range(4):
                    w(f"{p}sts1(Bs, b_ws + b_w{r} + {e * SB}, xb{r}_{e})")
        if a_cp or b_cp:
            w(f"{p}cp_async_wait_all()")
        w(f"{p}cuda.syncthreads()")

    def advance(ind: str) -> None:
        p = ind
        w(f"{p}a_g += a_step")
        for r in range(LB):
            w(f"{p}b_g{r} += {BK}")
        w(f"{p}a_w = a_flip - a_w")
        w(f"{p}b_ws = b_flip - b_ws")

    def load_frag(ind: str, kk: int, buf: int) -> None:
        p = ind
        o = 8 * buf
        for arr, sh, base, stride, half in (("fa", "As", "a_r", SA, WM // 2),
                                            ("fb", "Bs", "b_r", SB, WN // 2)):
            for h in range(2):
                dst = ", ".join(f"{arr}[{o + 4 * h + e}]" for e in range(4))
                w(f"{p}{dst} = lds4({sh}, {base} + {kk * stride + h * half})")

    def fma(ind: str, buf: int) -> None:
        # Constant trip counts: NVVM unrolls both loops, so every index is a constant and
        # acc/fa/fb live in registers.
        w(f"{ind}for i in range(8):")
        w(f"{ind}    for j in range(8):")
        w(f"{ind}        acc[i * 8 + j] += fa[{8 * buf} + i] * fb[{8 * buf} + j]")

    def k_step_body(ind: str, has_next: bool) -> None:
        """The BK unrolled k steps on the read stage; with has_next, hand over to the next."""
        for kk in range(BK):
            buf = kk % 2
            if kk < BK - 1:
                load_frag(ind, kk + 1, 1 - buf)
            elif has_next:
                store_stage(ind)
                w(f"{ind}a_r = a_rflip - a_r")
                w(f"{ind}b_r = b_rflip - b_r")
                advance(ind)
                load_frag(ind, 0, 1 - buf)
            fma(ind, buf)

    w("    # ---- prologue: stage 0 <- the first K step (zero-filled past k)")
    w(f"    a_step = {BK} * lda64")
    w("    kv = uint32(k)")
    load_stage("    ", tail=True)
    store_stage("    ")
    advance("    ")
    load_frag("    ", 0, 0)
    w("")
    w("    # ---- main loop: copy the full step t+1 into the other stage while computing step t")
    w(f"    for _t in range(k // {BK} - 1):")
    load_stage("        ", tail=False)
    k_step_body("        ", has_next=True)
    w("    # ---- the step before a partial last step: copy that one with zero fill")
    w(f"    if k % {BK} != 0 and k > {BK}:")
    w(f"        kv = uint32(k % {BK})")
    load_stage("        ", tail=True)
    k_step_body("        ", has_next=True)
    w("    # ---- last K step: nothing left to copy")
    k_step_body("    ", has_next=False)
    w("")
    w("    # ---- epilogue: C = alpha * acc + beta * C, 16-byte stores along m, C unread if beta == 0")
    w("    ldc64 = int64(ldc)")
    for sm in range(2):
        w(f"    r{sm} = row0 + int64(am0 + uint32({sm * WM // 2}))")
        w(f"    full{sm} = r{sm} + 4 <= int64(m)")
    w("    for_beta = beta != float32(0)")
    for sn in range(2):
        for e in range(4):
            j = sn * 4 + e
            w(f"    cj = col0 + int64(bn0 + uint32({sn * WN // 2 + e}))")
            w("    if cj < int64(n):")
            for sm in range(2):
                vals = [f"acc[{(sm * 4 + i) * 8 + j}]" for i in range(4)]
                w(f"        off = cj * ldc64 + r{sm}")
                w(f"        if full{sm}:")
                w("            if for_beta:")
                w("                d0, d1, d2, d3 = ldg4(C, off)")
                w("                stg4(C, off, " + ", ".join(
                    f"alpha * {v} + beta * d{i}" for i, v in enumerate(vals)) + ")")
                w("            else:")
                w("                stg4(C, off, " + ", ".join(f"alpha * {v}" for v in vals) + ")")
                w("        else:")
                for i, v in enumerate(vals):
                    w(f"            if r{sm} + {i} < int64(m):")
                    w(f"                C[off + {i}] = alpha * {v} + beta * C[off + {i}] "
                      f"if for_beta else alpha * {v}")
    return L


def generate_source(cfg: TileConfig, fname: str) -> str:
    """The Python source of the kernel function ``fname`` for ``cfg``."""
    return "\n".join(_src_lines(cfg, fname)) + "\n"


def _namespace() -> dict:
    """The globals the generated source runs with (imports Numba: only called to build)."""
    from numba import cuda, float32, int64, uint32

    from sgblas.kernels import memory

    return {
        "__name__": __name__,
        "cuda": cuda, "float32": float32, "int64": int64, "uint32": uint32,
        "ldg4": memory.ldg4, "lds4": memory.lds4, "sts4": memory.sts4, "stg4": memory.stg4,
        "ldg1": memory.ldg1, "sts1": memory.sts1,
        "cp_async16": memory.cp_async16, "cp_async4": memory.cp_async4,
        "cp_async_commit": memory.cp_async_commit, "cp_async_wait_all": memory.cp_async_wait_all,
    }


def build_pyfunc(cfg: TileConfig, fname: str):
    """The plain Python kernel function (not yet ``cuda.jit``-wrapped)."""
    src = generate_source(cfg, fname)
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


def grid_for(cfg: TileConfig, m: int, n: int) -> tuple[int, int, int]:
    """One CTA per BM x BN tile of C, as a 1-D grid (the kernel unflattens it)."""
    return (-(-m // cfg.BM) * -(-n // cfg.BN), 1, 1)


def guard(cfg: TileConfig, p: GemmProblem) -> str | None:
    """What this generator's kernels need beyond the keys every variant is checked on (math
    mode, transpose pair, compute capability, alignment class: :mod:`sgblas.kernels.spec`)."""
    if p.m < 1 or p.n < 1 or p.k < 1:
        return f"m={p.m}, n={p.n}, k={p.k}: every dimension must be >= 1"
    if cfg.a_copy == "cp16" and p.m % 4:
        # A's last column ends the buffer: its partial 16-byte vector at row m would be a
        # cp.async of 16 bytes with fewer source bytes, which compute-sanitizer's memcheck
        # reports as a read past the allocation. Whole vectors keep every access in bounds.
        return (f"m={p.m} is not a multiple of 4, so the last 16-byte vector of A's last column "
                f"would reach past the matrix in the cp.async copy")
    return None
