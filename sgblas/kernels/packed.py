"""The registry rows of issue 14's packed variants: a 16-byte GEMM on aligned copies of A and B.

TN's 4-byte class reads both operands along k with 4-byte loads. With k-major leading
dimensions that are multiples of 32 or within one of a power of two (``lda = 2049``: 2048^3 padded
by one) it runs well below the 16-byte class on the same problem
(docs/history/tuning-ladder-5-runs-m-to-p.md, rung 36, and
docs/history/tuning-ladder-6-runs-q-to-v.md, rung 43, have the figures). A packed variant
(role ``"packed"``) copies A and B into the handle's workspace first, with
:mod:`sgblas.kernels.pack` (leading dimension = the stored rows rounded up to 4, so every
column starts 16-byte aligned), then runs the SIMT generator's 16-byte kernel on the copies:
three launches on the handle's stream. C is the caller's, so the kernel's epilogue accesses
it element by element (``TileConfig.c_align = 4``, the ``c4`` of the name): ``a16c4`` means A
and B read with 16-byte accesses, C with 4-byte ones.

The copies take ``4 * (ldd_A * cols_A + ldd_B * cols_B)`` bytes of workspace
(:func:`workspace_bytes`): 32 MiB, the default, at 2048^3. A handle with less passes the row over
with that sentence, and the 4-byte row runs the problem. When to pack is the cost model's
choice (:mod:`sgblas.dispatch.model`: the copies' launches and the kernel's, against the
4-byte rows at the caller's leading dimensions); legality asks only what the copies and the
kernel need, whatever the caller's alignment.

``sgblas/kernels/spec.py`` appends these rows and the copy's at its end (:func:`rows`), as
it does :mod:`sgblas.kernels.splitk`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from sgblas.kernels import abi, pack, sgemm_simt
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.sources import SIMT_CALLS, module_code
from sgblas.kernels.sgemm_simt import TileConfig

__all__ = ["packed_manifest", "PACKED_PAIRS", "stored", "copies", "workspace_bytes", "rows", "describe", "PACK_NAME"]

PACK_NAME: str = pack.NAME

#: The pairs with a packed row: TN only, whose 4-byte class reads both operands along k through
#: registers (NN, NT and TT copy at least one operand by ``cp.async``, and their 4-byte classes
#: kept up with cuBLAS where TN's did not: docs/history/tuning-ladder-6-runs-q-to-v.md,
#: rung 43).
PACKED_PAIRS: tuple[tuple[str, str], ...] = (("T", "N"),)

#: Elements a copy's leading dimension and column count may reach: int32 arguments.
_INT32_MAX = 2**31 - 1


def packed_manifest(simt_manifest: tuple[TileConfig, ...]) -> tuple[TileConfig, ...]:
    """The packed kernels: the SIMT manifest's 16-byte 128x128 8 x 8 row of each packed pair,
    with C's accesses narrowed to 4 bytes and staged through shared memory
    (``TileConfig.c_stage``), so that a warp's stores of C still cover whole columns' runs at
    C's odd leading dimension (docs/history/tuning-ladder-6-runs-q-to-v.md, rung 48). That
    epilogue changes the register allocation, under which the 16-byte row's FMA order
    conflicts on register banks; the FMA order and tile-origin views are the ones with the
    fewest conflicts (rung 49). The large tile only: the packing costs a pass over A and B,
    which pays where the problem is large enough to fill the GPU with that tile."""
    return tuple(dataclasses.replace(cfg, c_align=4, c_stage=True, fma="snake_t", origin_view="ab")
                 for cfg in simt_manifest
                 if cfg.pair in PACKED_PAIRS and cfg.align == 16 and (cfg.BM, cfg.BN, cfg.TM, cfg.TN) == (128, 128, 8, 8)
                 and not cfg.split_k)


def stored(trans: str, rows: int, cols: int) -> tuple[int, int]:
    """The stored shape of ``op(X)`` (``rows x cols``): X itself, or its transpose's."""
    return (rows, cols) if trans == "N" else (cols, rows)


def copies(pair: tuple[str, str], m: int, n: int, k: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """``((rows, cols, ldd) of A's copy, (rows, cols, ldd) of B's)``."""
    ra, ca = stored(pair[0], m, k)
    rb, cb = stored(pair[1], k, n)
    return (ra, ca, pack.packed_rows(ra)), (rb, cb, pack.packed_rows(rb))


def workspace_bytes(pair: tuple[str, str], m: int, n: int, k: int) -> int:
    """Bytes of workspace the two copies take (A's first, B's right after: both 16-byte aligned)."""
    (_, ca, la), (_, cb, lb) = copies(pair, m, n, k)
    return 4 * (la * ca + lb * cb)


def _packed_spec(base: type, cfg: TileConfig):
    name = f"sgemm_packed_{cfg.transa}{cfg.transb}".lower() + f"_{cfg.name()}_{cfg.STAGES}s_a{cfg.align}c{cfg.c_align}"
    pair = cfg.pair

    def guard(p: GemmProblem) -> str | None:
        reason = sgemm_simt.guard(p)
        if reason:
            return reason
        for what, (rows, cols, ldd) in zip("AB", copies(pair, p.m, p.n, p.k)):
            if ldd > _INT32_MAX:
                return (f"{what}'s copy would have leading dimension {ldd} ({rows} rows rounded up to 4), "
                        f"above the kernels' 32-bit limit")
        return None

    # It reads copies of A and B that it makes itself, and C element by element: no alignment
    # of the caller's arrays is needed.
    return base(
        name=name, role="packed", abi=abi.GEMM, pair=pair, align=cfg.align,
        tile=(cfg.BM, cfg.BN, cfg.BK), stages=cfg.STAGES, block=(cfg.THREADS, 1, 1),
        launch_bounds=cfg.launch_bounds, min_cc=(8, 0),
        grid=lambda m, n, k: sgemm_simt.grid_for(cfg, m, n),
        builder=lambda after_grid: sgemm_simt.build_pyfunc(cfg, name, after_grid),
        sources=lambda after_grid: (sgemm_simt.generate_source(cfg, name, after_grid),) + SIMT_CALLS,
        guard=guard, workspace=lambda m, n, k: workspace_bytes(pair, m, n, k),
        launches=3, blocks_per_sm=cfg.min_blocks, config=cfg, vector_operands=())


def _pack_spec(base: type):
    def builder(after_grid: bool) -> Callable:
        from sgblas.kernels import pack_jit

        return pack_jit.build(after_grid)

    return base(
        name=pack.NAME, role="pack", abi=abi.PACK, pair=None, align=4, tile=(pack.ROWS_PER_CTA, 1, 1),
        stages=1, block=pack.BLOCK, launch_bounds=pack.LAUNCH_BOUNDS, min_cc=(5, 0),
        grid=lambda m, n, k: pack.grid(m, n), builder=builder,
        sources=lambda after_grid: (module_code("pack_jit"), module_code("pack"),
                                    module_code("memory")))


def rows(base: type, simt_manifest: tuple[TileConfig, ...]) -> tuple[tuple, tuple]:
    """``(GEMM variants, support kernels)`` of this module, built as ``base`` (the registry's
    ``KernelSpec``): the packed rows, and the copy kernel they launch."""
    return tuple(_packed_spec(base, cfg) for cfg in packed_manifest(simt_manifest)), (_pack_spec(base),)


def describe(spec: Any, p: GemmProblem) -> str:
    """What a packed plan does, for ``explain``'s note."""
    (ra, ca, la), (rb, cb, lb) = copies(spec.pair, p.m, p.n, p.k)
    return (f"A ({ra} x {ca}, lda={p.lda}) and B ({rb} x {cb}, ldb={p.ldb}) copied by {pack.NAME} into the handle's "
            f"workspace with 16-byte aligned columns (lda={la}, ldb={lb}: {workspace_bytes(spec.pair, p.m, p.n, p.k)} "
            f"bytes), then multiplied from there; C accessed element by element")
