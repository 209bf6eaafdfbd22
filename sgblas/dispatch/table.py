"""The ordered dispatch table: the first kernel whose guard accepts a problem runs it.

Each entry is a kernel module from :mod:`sgblas.kernels` carrying its own guard
``can_implement(problem) -> reason | None`` beside the kernel it protects. The general kernel
comes last and accepts every validated FP32 problem, so selection always ends in a kernel;
nothing else in the library falls back silently.
"""

from __future__ import annotations

from types import ModuleType
from typing import NamedTuple

from sgblas.kernels.problem import GemmProblem
from sgblas.kernels import general, sgemm_nn_128x64x16, sgemm_nn_128x128x16

__all__ = ["DISPATCH_TABLE", "Selection", "select", "select_cached", "variant_name"]

#: Most specialised first; the general kernel is the backstop and must stay last. The 128x128
#: NN tile needs enough tiles to fill the GPU; below that the 128x64 NN tile (twice the CTAs)
#: is faster; everything the NN guards refuse (other pairs, misaligned operands) is general.
DISPATCH_TABLE: tuple[ModuleType, ...] = (sgemm_nn_128x128x16, sgemm_nn_128x64x16, general)


class Selection(NamedTuple):
    """The chosen kernel module and, for each entry passed over, ``(name, reason)``."""

    module: ModuleType | None
    refusals: tuple[tuple[str, str], ...]


def select(problem: GemmProblem, table: tuple[ModuleType, ...] = DISPATCH_TABLE) -> Selection:
    """Walk ``table`` in order and return the first module whose guard accepts ``problem``."""
    refusals = []
    for module in table:
        reason = module.can_implement(problem)
        if reason is None:
            return Selection(module, tuple(refusals))
        refusals.append((module.NAME, reason))
    return Selection(None, tuple(refusals))


_selections: dict = {}
_SELECTION_CACHE_SIZE = 4096


def select_cached(problem: GemmProblem) -> Selection:
    """:func:`select` memoised on what guards may look at: compute capability, math mode,
    transpose pair, m, n, k, and the alignment classes (pointers mod 16, lds mod 4).

    Guards must be pure functions of these; the cache is cleared when it grows past
    ``_SELECTION_CACHE_SIZE`` shapes, so a stream of distinct shapes costs one walk each.
    """
    p = problem
    key = (p.cc, p.math_mode, p.transa, p.transb, p.m, p.n, p.k,
           p.a_ptr & 15, p.b_ptr & 15, p.c_ptr & 15, p.lda & 3, p.ldb & 3, p.ldc & 3)
    selection = _selections.get(key)
    if selection is None:
        if len(_selections) >= _SELECTION_CACHE_SIZE:
            _selections.clear()
        selection = _selections[key] = select(problem)
    return selection


def variant_name(module: ModuleType, transa: str, transb: str) -> str:
    """The name of ``module``'s kernel for one transpose pair, e.g. ``sgemm_general_128x64x16_tn``.

    A module that implements a single pair already names it in ``NAME``.
    """
    if len(module.TRANSPOSE_PAIRS) == 1:
        return module.NAME
    return f"{module.NAME}_{transa.lower()}{transb.lower()}"
