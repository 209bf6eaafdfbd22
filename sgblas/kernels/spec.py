"""The registry of kernel variants: one :class:`KernelSpec` per compiled kernel.

A variant is a row here. Everything that builds, loads, chooses, explains, tests or documents
kernels iterates :data:`REGISTRY`; nothing else in the package keeps a list of kernels.
Adding a variant of an existing generator is one row of its manifest (a config), and nothing
else: ``docs/design.md`` gives the recipe.

Legality and choice are apart. :meth:`KernelSpec.can_implement` says whether a variant *can*
run a problem (compute capability, math mode, transpose pair, alignment class, and what its
generator needs), as a sentence when it cannot. Which legal variant *should* run is the
dispatcher's business (:mod:`sgblas.dispatch.plan`: the candidates' predicted times,
from the device's properties and calibration).

Names carry algorithm, transpose pair, CTA tile, stages and alignment class:
``sgemm_simt_nn_128x128x16_2s_a16`` is the SIMT generator's NN kernel with a 128 x 128 x 16
CTA tile, 2 shared-memory stages, 16-byte alignment of A, B and C (pointers and leading
dimensions). Importing this module does not import Numba; :meth:`KernelSpec.build` does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sgblas.enums import MathMode
from sgblas.kernels import abi, general, lowk, scale, sgemm_simt
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.sgemm_simt import TileConfig
from sgblas.kernels.sources import LOWK_CALLS, SIMT_CALLS, module_code
from sgblas.runtime.abi import Abi
from sgblas.runtime.device import GRID_WAIT_MIN_CC

__all__ = ["KernelSpec", "REGISTRY", "GEMM_KERNELS", "SCALE_KERNEL", "by_name", "SIMT_MANIFEST"]

_SIMULATED_CC = (0, 0)
#: An operand's (address, leading dimension) in a problem.
_OPERANDS: dict[str, Callable[[GemmProblem], tuple[int, int]]] = {
    "A": lambda p: (p.a_ptr, p.lda), "B": lambda p: (p.b_ptr, p.ldb), "C": lambda p: (p.c_ptr, p.ldc)}


@dataclass(frozen=True, eq=False)
class KernelSpec:
    """One compiled kernel variant: what it computes, how it is built and launched, and when
    it may run.

    ``role`` is what the executor does with it: ``"gemm"`` (one launch computes C) or
    ``"scale"`` (C = beta * C, for k == 0 or alpha == 0). ``align`` is the alignment class in
    bytes: A, B and C must start on a multiple of it and their leading dimensions must be
    multiples of ``align // 4`` elements. ``workspace(m, n, k)`` is the handle workspace the
    variant needs, in bytes; ``launches`` how many kernels one call of it enqueues.
    """

    name: str
    role: str
    abi: Abi
    pair: tuple[str, str] | None
    align: int
    tile: tuple[int, int, int]
    stages: int
    block: tuple[int, int, int]
    launch_bounds: tuple[int, int] | None
    min_cc: tuple[int, int]
    #: ``(m, n, k) -> grid``
    grid: Callable[[int, int, int], tuple[int, int, int]]
    #: ``(after_grid) -> the plain Python kernel function`` (compiled by Numba for a cubin, or
    #: run by the simulator); ``after_grid``: the function begins with ``griddepcontrol.wait``
    #: (:data:`GRID_WAIT_MIN_CC`)
    builder: Callable[[bool], Callable]
    #: ``(after_grid) -> pieces`` of the code that makes the kernel's binary: generated text
    #: (str), the modules it is or calls (:func:`sgblas.kernels.sources.module_code`). The
    #: cache keys the binary by them (:func:`sgblas.runtime.build.variant_key`), so a piece
    #: left out would let a changed kernel load a stale binary; a row must name them.
    sources: Callable[[bool], tuple] | None = None
    #: What the generator needs beyond the common keys: ``problem -> reason | None``.
    guard: Callable[[GemmProblem], str | None] = field(default=lambda p: None)
    workspace: Callable[[int, int, int], int] = field(default=lambda m, n, k: 0)
    launches: int = 1
    #: CTAs of this kernel one SM can hold, as far as its launch bounds say (the dispatcher
    #: also checks the device's own limits: :func:`sgblas.dispatch.candidates.occupancy`).
    blocks_per_sm: int = 1
    #: The generator's config, for tests and docs (None for hand-written kernels).
    config: Any = None
    #: A backstop runs only what no specialised variant may run (the general kernel).
    backstop: bool = False
    #: The operands the alignment class applies to: those the kernel accesses with vectors of
    #: ``align`` bytes (a slice kernel never touches C; a packed one reads copies it makes).
    vector_operands: tuple[str, ...] = ("A", "B", "C")

    def can_implement(self, p: GemmProblem) -> str | None:
        """None when this variant computes ``p`` correctly, else the sentence saying why not."""
        return self.key_refusal(p) or self.guard(p)

    def key_refusal(self, p: GemmProblem) -> str | None:
        """:meth:`can_implement`'s sentence from the keys every variant is checked on (math mode,
        transpose pair, compute capability, alignment class), its generator's guard aside.
        Whether there is one follows from those keys of ``p`` alone (the alignment classes divide
        16 bytes: addresses mod 16, leading dimensions mod 4), so a caller may keep it per class."""
        if p.math_mode is not MathMode.FP32:
            return f"math mode {p.math_mode.name} is not FP32; {self.name} computes strict FP32 only"
        if self.pair is not None and (p.transa, p.transb) != self.pair:
            return (f"transpose pair {p.transa}{p.transb} is not {self.pair[0]}{self.pair[1]}, "
                    f"the only pair {self.name} implements")
        if p.cc != _SIMULATED_CC and tuple(p.cc) < self.min_cc:
            return (f"compute capability sm_{p.cc[0]}{p.cc[1]} is below sm_{self.min_cc[0]}{self.min_cc[1]}, "
                    f"which {self.name} needs")
        if self.misaligned(p):
            return self._misalignment(p)
        return None

    def misaligned(self, p: GemmProblem) -> bool:
        """Whether an operand of ``p`` that this variant accesses with vectors is outside its
        alignment class (address or leading dimension): :meth:`can_implement`'s test, without
        the sentence, which a call planning a new shape does not need."""
        ops, a = self.vector_operands, self.align
        if a <= 4 or not ops:
            return False
        step = a >> 2
        return bool(("A" in ops and (p.a_ptr % a or p.lda % step)) or ("B" in ops and (p.b_ptr % a or p.ldb % step))
                    or ("C" in ops and (p.c_ptr % a or p.ldc % step)))

    def _misalignment(self, p: GemmProblem) -> str | None:
        operands = [(what, *_OPERANDS[what](p)) for what in self.vector_operands]
        for what, ptr, _ in operands:
            if ptr % self.align:
                return (f"{what}'s address {ptr:#x} is not {self.align}-byte aligned, "
                        f"which {self.name}'s {self.align}-byte accesses need")
        step = self.align // 4
        for what, _, ld in operands:
            if ld % step:
                return (f"ld{what.lower()}={ld} is not a multiple of {step}, so {self.name}'s {self.align}-byte "
                        f"accesses of {what} would be misaligned")
        return None

    def build(self, cc: tuple[int, int] | None = None) -> Callable:
        """The plain Python kernel function for ``cc`` (None: the simulator's), waiting for the
        grid ahead of it first from :data:`GRID_WAIT_MIN_CC` on (imports Numba)."""
        return self.builder(cc is not None and tuple(cc) >= GRID_WAIT_MIN_CC)

    @property
    def compile_seconds(self) -> float | None:
        """How long this variant's compile took when last measured (``compile_seconds.json``,
        written by ``python -m sgblas.warmup --timings``), None for a row measured never: the
        order in which a cold cache is filled, the costliest first, so that no long compile
        starts last."""
        return _compile_seconds().get(self.name)

    def code(self, cc: tuple[int, int]) -> tuple:
        """What :meth:`build` for ``cc`` compiles, as the cache's key reads it (no Numba)."""
        if self.sources is None:
            raise ValueError(f"{self.name} names no sources, so the kernel cache cannot key its binary")
        after_grid = tuple(cc) >= GRID_WAIT_MIN_CC
        return (f"after_grid={after_grid}",) + tuple(self.sources(after_grid))


@functools.cache
def _compile_seconds() -> dict[str, float]:
    import json

    try:
        return dict(json.loads(Path(__file__).with_name("compile_seconds.json").read_text())["seconds"])
    except (OSError, ValueError, KeyError):  # no measurements: the compiles go in registry order
        return {}


def _simt_spec(cfg: TileConfig) -> KernelSpec:
    """The variant of one manifest row: its transpose pair, tile and alignment class are the
    config's (a split-K config is not a GEMM variant: its ABI is GEMM_SPLIT)."""
    assert not cfg.split_k, "a split-K slice kernel is not a GEMM variant"
    cfg.check()
    pair = cfg.pair
    name = f"sgemm_simt_{cfg.transa}{cfg.transb}".lower() + f"_{cfg.name()}_{cfg.STAGES}s_a{cfg.align}"
    return KernelSpec(
        name=name, role="gemm", abi=abi.GEMM, pair=pair, align=cfg.align,
        tile=(cfg.BM, cfg.BN, cfg.BK), stages=cfg.STAGES, block=(cfg.THREADS, 1, 1),
        # cp.async (sm_80+) in every layout but TN; all of them were tuned and tested on sm_90
        # only, and the register-staged copies were never tried below sm_80.
        launch_bounds=cfg.launch_bounds, min_cc=(8, 0),
        grid=lambda m, n, k: sgemm_simt.grid_for(cfg, m, n),
        builder=lambda after_grid: sgemm_simt.build_pyfunc(cfg, name, after_grid),
        sources=lambda after_grid: (sgemm_simt.generate_source(cfg, name, after_grid),) + SIMT_CALLS,
        guard=sgemm_simt.guard,
        blocks_per_sm=cfg.min_blocks, config=cfg)


def _general_spec(pair: tuple[str, str]) -> KernelSpec:
    def builder(after_grid: bool) -> Callable:
        from sgblas.kernels import general_jit

        return general_jit.build(pair[0] == "T", pair[1] == "T", after_grid)

    tag = f"{pair[0]}{pair[1]}".lower()
    return KernelSpec(
        name=f"sgemm_general_{tag}_{general.BM}x{general.BN}x{general.BK}_{general.STAGES}s_a4",
        role="gemm", abi=abi.GEMM, pair=pair, align=4,
        tile=(general.BM, general.BN, general.BK), stages=general.STAGES, block=general.BLOCK,
        launch_bounds=general.LAUNCH_BOUNDS, min_cc=(5, 0),
        grid=lambda m, n, k: general.grid(m, n), builder=builder,
        sources=lambda after_grid: (module_code("general_jit"), module_code("general"), module_code("memory")),
        blocks_per_sm=general.MIN_BLOCKS_PER_SM, backstop=True)


def _scale_builder(after_grid: bool) -> Callable:
    from sgblas.kernels import scale_jit

    return scale_jit.build(after_grid)


#: The SIMT generator's two shipped tiles. 128x128x16: 8 warps of 64 x 32, 2 CTAs per SM, the
#: large-problem tile. 128x64x16: 4 warps of 32 x 64, 4 CTAs per SM, twice the CTAs for
#: problems with fewer tiles.
_T128 = dict(BM=128, BN=128, BK=16, WARPS_M=2, WARPS_N=4, LANES_M=8, group_m=8, min_blocks=2)
_T64 = dict(BM=128, BN=64, BK=16, WARPS_M=4, WARPS_N=1, LANES_M=4, group_m=8, min_blocks=4)
#: The same with A stored transposed (TN, TT): A's slice passes through registers (16 floats a
#: thread in this tile, 8 in the large one), which spills under 4 CTAs' 128-register cap, so
#: these run 3 CTAs per SM (168 registers).
_T64_KA = dict(_T64, min_blocks=3)
#: 64x64x16 with 2 warps of 32 x 64 (8 x 8 thread tiles, 64 threads): four times the CTAs of
#: the 128x128 tile for small and narrow products (issue 43), whose few large tiles leave most
#: SMs idle or most of a tile empty; with split-K its CTAs fill the device from sides of a few
#: hundred. Each thread stages twice the slice of a k-major operand that a 128x64 tile's does,
#: so at 8 CTAs per SM (128 registers) NT's row and the NN and NT slice kernels spilled: 6 CTAs
#: (170 registers) in every pair; TN's 4-byte row kept a 456-byte stack frame with 4 lanes a
#: k-major column and none with 8 (``kq=8``).
_T6464 = dict(BM=64, BN=64, BK=16, WARPS_M=2, WARPS_N=1, LANES_M=4, group_m=8, min_blocks=6)

#: Three tiles with 4 x 4 thread tiles (issue 43): a K step costs a thread 256 FMAs instead of
#: 1024, so a CTA with little K per tile finishes sooner, and the tiles fit narrow sides. 32x32x16
#: (64 threads, 8 CTAs per SM) for small products, where one CTA's latency is most of the
#: time; 32x64x16 and 64x32x16 (128 threads, 6 CTAs per SM) for one side of 17-32 beside a large
#: one. 4-byte class only, so that every leading dimension and offset runs them, each with its
#: slice kernel; 79-110 registers and no spills under ptxas 13.0. The measurements that chose
#: them are in docs/design.md, "The SIMT kernels", with why the 64x64 one (256 threads) left.
_S3232 = dict(BM=32, BN=32, BK=16, WARPS_M=1, WARPS_N=2, LANES_M=8, TM=4, TN=4, group_m=8, min_blocks=8)
_S3264 = dict(BM=32, BN=64, BK=16, WARPS_M=1, WARPS_N=4, LANES_M=8, TM=4, TN=4, group_m=8, min_blocks=6)
_S6432 = dict(BM=64, BN=32, BK=16, WARPS_M=2, WARPS_N=2, LANES_M=8, TM=4, TN=4, group_m=8, min_blocks=6)

#: The SIMT generator's manifest: one row per compiled variant (tile, transpose pair, alignment
#: class in bytes). A row is the whole recipe: name, guard, grid, builder and tests follow from it.
#: Every pair has both tiles in the 16- and 4-byte classes and the large tile in the 8-byte class;
#: each row costs 20-30 s of single-threaded compile at warm-up, and an 8-byte problem too small for
#: the large tile runs the small tile's 4-byte variant. ``fma="snake"`` marks the rows whose FMA
#: block runs in the snaking order: each was faster with it under one of the two nvJitLink versions
#: measured, no slower under the other, and spills under neither (rungs 25 and 26 in
#: docs/history/tuning-ladder-4-runs-j-to-l.md). The other rows keep the row order: the snaking one
#: slowed NN's 16 x 8 row (since removed) and 8-byte row under 13.5 and TT's 4-byte row under 13.0,
#: made TN's 4- and 8-byte rows and NN's 128x64 rows spill under one toolchain, and was not timed
#: under both on the rest (the other 128x64 rows). NT's 8 x 8 16-byte row spilled in it too until
#: B's tile origin went into a view of B (``origin_view``,
#: docs/history/tuning-ladder-5-runs-m-to-p.md, rung 29); NN's takes the same pair (rung 30).
#: ``fma="snake_t"`` swaps the snaking loops: with the tile origins of both operands in views (TN's
#: 4-byte row) or of A (its 8-byte row), neither spills under either toolchain and their K loops
#: count a quarter of the row order's bank conflicts (rung 30). TN's 4-byte class has a second row
#: whose k-major copies give a column 8 lanes (``kq=8``) instead of 4: it ran the leading dimensions
#: that are multiples of 32 or within one of a power of two faster, the others slower (rung 36); the
#: cost model weighs the two.
SIMT_MANIFEST: tuple[TileConfig, ...] = (
    TileConfig(**_T128, transa="N", transb="N", align=16, fma="snake", origin_view="b"),
    TileConfig(**_T128, transa="N", transb="T", align=16, fma="snake", origin_view="b"),
    TileConfig(**_T128, transa="T", transb="N", align=16, fma="snake"),
    TileConfig(**_T128, transa="T", transb="T", align=16, fma="snake"),
    TileConfig(**_T128, transa="N", transb="N", align=8),
    TileConfig(**_T128, transa="N", transb="T", align=8, fma="snake"),
    TileConfig(**_T128, transa="T", transb="N", align=8, fma="snake_t", origin_view="a"),
    TileConfig(**_T128, transa="T", transb="T", align=8, fma="snake"),
    TileConfig(**_T128, transa="N", transb="N", align=4, fma="snake"),
    TileConfig(**_T128, transa="N", transb="T", align=4, fma="snake"),
    TileConfig(**_T128, transa="T", transb="N", align=4, fma="snake_t", origin_view="ab"),
    TileConfig(**_T128, transa="T", transb="N", align=4, fma="snake_t", origin_view="ab", kq=8),
    TileConfig(**_T128, transa="T", transb="T", align=4),
    TileConfig(**_T64, transa="N", transb="N", align=16),
    TileConfig(**_T64, transa="N", transb="T", align=16),
    TileConfig(**_T64_KA, transa="T", transb="N", align=16),
    TileConfig(**_T64_KA, transa="T", transb="T", align=16),
    TileConfig(**_T64, transa="N", transb="N", align=4),
    TileConfig(**_T64, transa="N", transb="T", align=4),
    TileConfig(**_T64_KA, transa="T", transb="N", align=4),
    TileConfig(**_T64_KA, transa="T", transb="T", align=4),
    TileConfig(**_T6464, transa="N", transb="N", align=16),
    TileConfig(**_T6464, transa="N", transb="T", align=16),
    TileConfig(**_T6464, transa="T", transb="N", align=16),
    TileConfig(**_T6464, transa="T", transb="T", align=16),
    TileConfig(**_T6464, transa="N", transb="N", align=4),
    TileConfig(**_T6464, transa="N", transb="T", align=4),
    TileConfig(**_T6464, transa="T", transb="N", align=4, kq=8),
    TileConfig(**_T6464, transa="T", transb="T", align=4),
    *(TileConfig(**tile, transa=a, transb=b, align=4)
      for tile in (_S3232, _S3264, _S6432) for a in "NT" for b in "NT"),
)

_PAIRS = (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T"))

#: Every GEMM variant. The general kernels come last: they accept every FP32 problem.
GEMM_KERNELS: tuple[KernelSpec, ...] = (
    tuple(_simt_spec(cfg) for cfg in SIMT_MANIFEST)
    + tuple(_general_spec(pair) for pair in _PAIRS)
)

#: C = beta * C, for k == 0 or alpha == 0.
SCALE_KERNEL = KernelSpec(
    name=scale.NAME, role="scale", abi=abi.SCALE, pair=None, align=4, tile=(scale.BLOCK_M, scale.BLOCK_N, 1),
    stages=1, block=scale.BLOCK, launch_bounds=scale.LAUNCH_BOUNDS, min_cc=(5, 0),
    grid=lambda m, n, k: scale.grid(m, n), builder=_scale_builder,
    sources=lambda after_grid: (module_code("scale_jit"), module_code("scale"), module_code("memory")))

#: Every kernel sgblas compiles, loads and may launch.
REGISTRY: tuple[KernelSpec, ...] = GEMM_KERNELS + (SCALE_KERNEL,)

_BY_NAME = {spec.name: spec for spec in REGISTRY}
assert len(_BY_NAME) == len(REGISTRY), "every variant needs a distinct name"


def by_name(name: str) -> KernelSpec:
    """The variant called ``name``; raises KeyError with the known names otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no kernel variant is named {name!r}; the registry has {sorted(_BY_NAME)}") from None


def _append(gemm_rows: tuple[KernelSpec, ...], support: tuple[KernelSpec, ...]) -> None:
    """Add a module's GEMM variants before the general kernels (the backstop stays last) and
    its support kernels (launched by those variants' plans, never chosen) to the registry."""
    global GEMM_KERNELS, REGISTRY
    for spec in gemm_rows + support:
        if spec.name in _BY_NAME:
            raise ValueError(f"variant name {spec.name} is registered twice")
        _BY_NAME[spec.name] = spec
    general = tuple(s for s in GEMM_KERNELS if s.name.startswith("sgemm_general_"))
    rest = tuple(s for s in GEMM_KERNELS if not s.name.startswith("sgemm_general_"))
    others = tuple(s for s in REGISTRY if s not in GEMM_KERNELS)
    GEMM_KERNELS = rest + gemm_rows + general
    REGISTRY = GEMM_KERNELS + others + support


# Issue 13: the split-K, skinny and reduction rows (sgblas/kernels/splitk.py), appended here.
from sgblas.kernels import splitk as _splitk  # noqa: E402 - its rows are built from this module's
_append(*_splitk.rows(KernelSpec, SIMT_MANIFEST))

# Issue 14: the packed rows and the copy kernel they launch (sgblas/kernels/packed.py).
from sgblas.kernels import packed as _packed  # noqa: E402 - as the split rows above
_append(*_packed.rows(KernelSpec, SIMT_MANIFEST))


def _lowk_spec(cfg: lowk.LowKConfig) -> KernelSpec:
    """The row of one low-K config (sgblas/kernels/lowk.py, issue 43)."""
    cfg.check()
    name = cfg.name()

    def builder(after_grid: bool) -> Callable:
        from sgblas.kernels import lowk_jit

        return lowk_jit.build_pyfunc(cfg, name, after_grid)

    return KernelSpec(
        name=name, role="gemm", abi=abi.GEMM, pair=cfg.pair, align=cfg.align, tile=cfg.tile,
        stages=cfg.STAGES, block=(cfg.THREADS, 1, 1), launch_bounds=cfg.launch_bounds,
        # nothing in it needs sm_80, but it was built and measured on sm_90 only; below sm_80 the
        # general kernel runs low-K products, as before
        min_cc=(8, 0), grid=lambda m, n, k: lowk.grid_for(cfg, m, n), builder=builder,
        sources=lambda after_grid: (lowk.generate_source(cfg, name, after_grid),) + LOWK_CALLS,
        guard=lambda p: lowk.guard(cfg, p), blocks_per_sm=cfg.min_blocks, config=cfg)


_append(tuple(_lowk_spec(cfg) for cfg in lowk.LOWK_MANIFEST), ())
