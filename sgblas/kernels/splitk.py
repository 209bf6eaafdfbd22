"""The registry rows of issue 13: split-K GEMM, skinny GEMM and the fixed-order reduction.

* **Split-K** (role ``"splitk"``): the SIMT generator's slice kernels (``TileConfig.split_k``,
  ABI :data:`~sgblas.kernels.abi.GEMM_SPLIT`), one per row of :data:`SPLIT_MANIFEST`. A call
  enqueues two kernels on the handle's stream: the slice kernel over a grid of output tiles x
  ``splits``, each CTA writing ``alpha`` times its K slice's product into the handle's
  workspace, then :data:`REDUCE_KERNEL`, which adds the ``splits`` partials in the order
  the fixed order of :func:`sgblas.kernels.reduce.order` and applies ``beta * C``. The workspace holds ``splits`` m x n partials with
  leading dimension ``ldw`` = m rounded up to 4 (:func:`workspace_bytes`).
* **Skinny** (role ``"skinny"``): :mod:`sgblas.kernels.skinny`, one per transpose pair and
  small side. One launch when it does not split K; otherwise the same workspace and reduction.
* **Reduction** (role ``"reduce"``): :mod:`sgblas.kernels.reduce`; in :data:`REGISTRY`, never
  chosen for a problem by itself.

How many splits a call uses is the dispatcher's choice (:mod:`sgblas.dispatch.candidates`,
from the device's SM count and the handle's workspace); the spec's ``workspace(m, n, k)`` is
the least a split variant needs (two partials), so a handle with less passes it over with
that sentence.

Alignment class of these rows: the operands they read with 16-byte accesses. The slice kernels
read A and B so (C is never touched: their output is the workspace, and the reduction reads C
with 16-byte accesses only when C allows it); a skinny kernel reads only its large operand so.
:attr:`KernelSpec.vector_operands <sgblas.kernels.spec.KernelSpec.vector_operands>` names
exactly those, so ``lda = 3`` for a 3 x k A does not stop a skinny kernel.

``sgblas/kernels/spec.py`` appends these rows at its end (:func:`rows`), handing over its
``KernelSpec`` class and SIMT manifest: this module does not import :mod:`sgblas.kernels.spec`,
which imports it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from sgblas.kernels import abi, reduce, sgemm_simt, skinny
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.sources import SIMT_CALLS, SKINNY_CALLS, module_code
from sgblas.kernels.skinny import SkinnyConfig
from sgblas.kernels.sgemm_simt import TileConfig

__all__ = ["split_manifest", "SLICE_CHANGES", "SKINNY_MANIFEST", "workspace_bytes", "partial_bytes", "rows",
           "semaphore_bytes", "REDUCE_NAME", "MIN_PARTIALS"]

#: The least number of partials a split variant works with, so the least workspace it needs.
MIN_PARTIALS: int = 2

REDUCE_NAME: str = reduce.NAME

SKINNY_MANIFEST: tuple[SkinnyConfig, ...] = skinny.MANIFEST


def split_manifest(simt_manifest: tuple[TileConfig, ...]) -> tuple[TileConfig, ...]:
    """The slice kernels: every 16-byte row of the SIMT manifest with its epilogue writing a
    partial (each tile and thread tile, in its row's FMA order but where :data:`SLICE_CHANGES`
    says otherwise), and the 4-byte rows :func:`_narrow_slice` picks.

    The 128x128 tile uses each loaded element twice as often, and ran the long-K shapes and
    1024^3 faster than the 128x64 tile at the same split
    (docs/history/tuning-ladder-2-splitk-and-pairs.md, "Run E"). TN's 128x128 one spilled in
    the row order and does not in the snaking order its row has taken since rung 25
    (docs/history/tuning-ladder-4-runs-j-to-l.md, rung 27), nor in the swapped one with both
    tile origins in views that it takes since rung 30
    (docs/history/tuning-ladder-5-runs-m-to-p.md). Few-tile problems whose A or B is less
    aligned are rare, but a tail plan's rectangles have the alignment of the caller's arrays.
    """
    return tuple(dataclasses.replace(cfg, split_k=True, **SLICE_CHANGES.get(_slice_key(cfg), {}))
                 for cfg in simt_manifest if cfg.align == 16 or _narrow_slice(cfg))


def _narrow_slice(cfg: TileConfig) -> bool:
    """The 4-byte rows that get a slice kernel: each pair's 128x128 tile with the 8 x 8 thread
    tile (TN's default one, with 4 lanes a k-major column). A tail plan
    (:mod:`sgblas.dispatch.waves`) splits the K of the tiles a large problem's last wave would
    leave idle, and the problems whose arrays allow only 4-byte accesses (odd sizes, padded
    leading dimensions, offset pointers) are the tail plans' most common case. They keep their
    row's FMA order and tile origins, which do not spill (rungs 25-30:
    docs/history/tuning-ladder-4-runs-j-to-l.md and
    docs/history/tuning-ladder-5-runs-m-to-p.md); the 8-byte class runs on them too. Each pair's
    128x64 and 64x64 tiles with the 8 x 8 thread tile: without them a narrow product (a side of
    17-127) at an odd leading dimension splits its long K on the 4 x 4 tiles, which load twice as
    many shared-memory operands per FMA (docs/design.md, "Shape classes"). And every row with
    the 4 x 4 thread tile: those tiles exist only in the 4-byte class, and narrow products with a
    long K need their splits."""
    if cfg.align != 4:
        return False
    if (cfg.TM, cfg.TN) == (4, 4) or ((cfg.BM, cfg.BN) == (64, 64) and (cfg.TM, cfg.TN) == (8, 8)):
        return True  # TN's 64x64 row is its kq=8 one: the one it has
    return (cfg.BM, cfg.BN) in ((128, 128), (128, 64)) and (cfg.TM, cfg.TN) == (8, 8) and not cfg.kq


def _slice_key(cfg: TileConfig) -> tuple[str, int, int, int, int, int]:
    return (cfg.transa + cfg.transb, cfg.BM, cfg.BN, cfg.TM, cfg.TN, cfg.align)


#: What a slice kernel changes from its row, by pair, CTA tile, thread tile and alignment class
#: (the 4-byte 8 x 8 slices not named here keep their rows' text): where the
#: slice's k offset enters (``TileConfig.k_view``), the FMA order, and where the tile's origin
#: enters (NT's and NN's rows take B's through a view since rungs 29 and 30; their slice
#: kernels, measured in rung 28, do not; TN's takes both, in the swapped snaking order). Each
#: was chosen by the static count of rung 25 (docs/history/tuning-ladder-4-runs-j-to-l.md)
#: under both nvJitLinks and timed (docs/history/tuning-ladder-5-runs-m-to-p.md, rungs 28-30);
#: the others spill or count higher under one of them.
SLICE_CHANGES: dict[tuple[str, int, int, int, int, int], dict[str, Any]] = {
    ("NN", 128, 128, 8, 8, 16): {"k_view": "a", "fma": "snake", "origin_view": ""},
    ("TN", 128, 128, 8, 8, 16): {"fma": "snake_t", "origin_view": "ab"},
    ("TT", 128, 128, 8, 8, 16): {"k_view": "b"},
    ("NT", 128, 128, 8, 8, 16): {"k_view": "b", "origin_view": ""},
    # 4-byte class: NN's and TN's 32x64 slice kernels kept an 8-byte stack under the 80
    # registers of 6 CTAs per SM (ptxas 13.0); their rows do not, and 5 CTAs give them 96.
    ("NN", 32, 64, 4, 4, 4): {"min_blocks": 5},
    ("TN", 32, 64, 4, 4, 4): {"min_blocks": 5},
    # TT's 64x64 one, in its row's text, spilled 4 bytes under the 168 registers of 6 CTAs per
    # SM (ptxas 13.0; at 5 CTAs too); with B's slice in a view, as TT's 128x128 one takes it, 162
    # and none.
    ("TT", 64, 64, 8, 8, 4): {"k_view": "b"},
}


def partial_bytes(m: int, n: int) -> int:
    """Bytes of one partial m x n product in the workspace (leading dimension ``ldw``)."""
    return reduce.padded_rows(m) * n * 4


def workspace_bytes(m: int, n: int, splits: int) -> int:
    """Bytes of workspace ``splits`` partials need (0 for one: it writes C itself)."""
    return 0 if splits <= 1 else splits * partial_bytes(m, n)


def semaphore_bytes(spec: Any, m: int, n: int) -> int:
    """Bytes of workspace a serial split of slice-kernel ``spec`` needs: one int32 per CTA along
    x (an output tile), zeroed before the launch (:data:`sgblas.kernels.abi.GEMM_SPLIT`)."""
    return 4 * spec.grid(m, n, 0)[0]


def _partial_guard(p: GemmProblem) -> str | None:
    """What writing partials needs: their 32-bit group index in the reduction."""
    if reduce.padded_rows(p.m) * p.n >= 4 * reduce.MAX_GROUPS:
        return (f"m={p.m} x n={p.n} is too large for a partial product in the workspace "
                f"(the reduction indexes 4-row groups with 32 bits)")
    return None


def _slice_guard(p: GemmProblem) -> str | None:
    """A slice kernel's guard, the same for every config (one function: see
    :func:`sgblas.kernels.sgemm_simt.guard`)."""
    return sgemm_simt.guard(p) or _partial_guard(p)


def _vector_operands(cfg: Any) -> tuple[str, ...]:
    if isinstance(cfg, SkinnyConfig):
        return (cfg.large,)
    return ("A", "B")  # a slice kernel writes the workspace, never C


def _split_spec(base: type, cfg: TileConfig):
    name = f"sgemm_splitk_{cfg.transa}{cfg.transb}".lower() + f"_{cfg.name()}_{cfg.STAGES}s_a{cfg.align}"

    return base(
        name=name, role="splitk", abi=abi.GEMM_SPLIT, pair=cfg.pair, align=cfg.align,
        tile=(cfg.BM, cfg.BN, cfg.BK), stages=cfg.STAGES, block=(cfg.THREADS, 1, 1),
        launch_bounds=cfg.launch_bounds, min_cc=(8, 0),
        grid=lambda m, n, k: sgemm_simt.grid_for(cfg, m, n, MIN_PARTIALS),
        builder=lambda after_grid: sgemm_simt.build_pyfunc(cfg, name, after_grid),
        sources=lambda after_grid: (sgemm_simt.generate_source(cfg, name, after_grid),) + SIMT_CALLS,
        guard=_slice_guard,
        workspace=lambda m, n, k: workspace_bytes(m, n, MIN_PARTIALS),
        launches=2, blocks_per_sm=cfg.min_blocks, config=cfg, vector_operands=_vector_operands(cfg))


def _skinny_spec(base: type, cfg: SkinnyConfig):
    name = cfg.name()

    def builder(after_grid: bool) -> Callable:
        from sgblas.kernels import skinny_jit

        return skinny_jit.build_pyfunc(cfg, name, after_grid)

    def guard(p: GemmProblem) -> str | None:
        return skinny.guard(cfg, p) or _partial_guard(p)

    return base(
        name=name, role="skinny", abi=abi.GEMM_SPLIT, pair=cfg.pair, align=cfg.align, tile=cfg.tile,
        stages=cfg.STAGES, block=(cfg.THREADS, 1, 1), launch_bounds=cfg.launch_bounds, min_cc=(8, 0),
        grid=lambda m, n, k: skinny.grid_for(cfg, m, n, 1), builder=builder,
        sources=lambda after_grid: (skinny.generate_source(cfg, name, after_grid),) + SKINNY_CALLS,
        guard=guard,
        blocks_per_sm=cfg.min_blocks, config=cfg, vector_operands=_vector_operands(cfg))


def _reduce_spec(base: type):
    def builder(after_grid: bool) -> Callable:
        from sgblas.kernels import reduce_jit

        return reduce_jit.build(after_grid)

    return base(
        name=reduce.NAME, role="reduce", abi=abi.REDUCE, pair=None, align=4, tile=(4, reduce.THREADS, 1),
        stages=1, block=reduce.BLOCK, launch_bounds=reduce.LAUNCH_BOUNDS, min_cc=(5, 0),
        grid=lambda m, n, k: reduce.grid(m, n), builder=builder,
        sources=lambda after_grid: (module_code("reduce_jit"), module_code("reduce"),
                                    module_code("memory")))


def rows(base: type, simt_manifest: tuple[TileConfig, ...]) -> tuple[tuple, tuple]:
    """``(GEMM variants, support kernels)`` of this module, built as ``base`` (the registry's
    ``KernelSpec``): the skinny and split rows, and the reduction they launch."""
    return (tuple(_skinny_spec(base, cfg) for cfg in SKINNY_MANIFEST)
            + tuple(_split_spec(base, cfg) for cfg in split_manifest(simt_manifest)), (_reduce_spec(base),))
