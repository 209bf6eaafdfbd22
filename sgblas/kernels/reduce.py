"""The fixed-order reduction of split-K partial products: ``C = sum_s W_s + beta * C``.

A split-K plan (:mod:`sgblas.kernels.splitk`) writes ``splits`` partial products of the m x n
result into the handle's workspace ``W``: partial ``s`` is the column-major m x n matrix with
leading dimension ``ldw`` starting at element ``s * ldw * n`` (``alpha`` is already applied).
This kernel sums them **in a fixed order**, each element by one thread with plain float32
additions (no atomics), in three levels (:func:`order`): the partials in groups of
:data:`GROUP` (s = 0..7, 8..15, ...), each group left to right; the group sums in runs of
:data:`RUN` groups (partials 0..31, 32..63, ...), left to right; then the runs' sums left to
right; and then it stores ``sum + beta * C``; with ``beta == 0`` it stores the sum without
reading C, so NaNs there do not leak. The order, and so the bits, depend only on ``splits``:
the result is the same run to run and stream to stream. Levels rather than one chain because
the error of a float32 chain grows with its length and with the size of the sums it carries:
with many partials of one sign, one chain's error exceeds cuBLAS's, and chains of eight bring
it well below (docs/history/tuning-ladder-2-splitk-and-pairs.md, "Run E"); the third level
keeps the chain of large group sums short when a split has 33 to 128 partials
(docs/design.md, "Accuracy").

Mapping: each thread owns a group of 4 consecutive rows of one column (16 bytes of every
partial: ``ldw`` is a multiple of 4 and the workspace 16-byte aligned, so those are aligned
16-byte loads), groups numbered column by column so a warp reads 512 contiguous bytes of a
partial; a grid-stride loop covers any number of groups. The loads of four partials are
issued before they are added, so each thread keeps several 16-byte loads in flight: the
kernel is bound by memory bandwidth. The group that holds row m (when m is not a multiple of
4) is done element by element, so no byte of the workspace past row m is read. C is read and
written with 16-byte accesses when the caller says it may (``c_vec``: C 16-byte aligned and
ldc a multiple of 4, known per shape class), else element by element.

The argument list is :data:`sgblas.kernels.abi.REDUCE`. Group indices are 32-bit: the
registry refuses a split whose partial (``ldw * n`` elements) has 2**33 elements or more.
The Numba code lives in :mod:`sgblas.kernels.reduce_jit`; this module imports without Numba.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

__all__ = ["NAME", "THREADS", "BLOCK", "LAUNCH_BOUNDS", "MAX_GROUPS", "GROUP", "RUN", "padded_rows", "grid", "order",
           "fixed_order_sum"]

#: Partials summed in one chain (a group) before the group sums are added (see the module doc).
GROUP: int = 8
#: Group sums added in one chain before the runs' sums are added.
RUN: int = 4

#: Threads per CTA (one dimension).
THREADS: int = 256
BLOCK: tuple[int, int, int] = (THREADS, 1, 1)
#: No launch bound: a few registers per thread, so the compiler's default is fine.
LAUNCH_BOUNDS: None = None
#: Groups of 4 rows the kernel indexes with 32-bit arithmetic (``ldw * n / 4`` must be below).
MAX_GROUPS: int = 2**31
#: CTAs launched at most; a grid-stride loop covers the rest.
MAX_CTAS: int = 65535 * 16

NAME: str = f"reduce_splitk_fixed_order_cm_{THREADS}x4_1s_a4"


def padded_rows(m: int) -> int:
    """``ldw``: m rounded up to a multiple of 4, so every partial's column starts 16-byte
    aligned."""
    return -(-m // 4) * 4


def groups(m: int, n: int) -> int:
    """Groups of 4 rows of C: one thread's share each."""
    return -(-m // 4) * n


def grid(m: int, n: int) -> tuple[int, int, int]:
    """One thread per group of 4 rows, at most :data:`MAX_CTAS` CTAs (grid-stride beyond)."""
    return (max(1, min(-(-groups(m, n) // THREADS), MAX_CTAS)), 1, 1)


def order(splits: int) -> list[list[range]]:
    """The reduction's chains: runs of up to :data:`RUN` groups, each group a range of up to
    :data:`GROUP` partials (``[[range(0, 8), ..., range(24, 32)], [range(32, 40), ...]]``).
    Each group is summed left to right, then each run's group sums, then the runs' sums."""
    span = GROUP * RUN
    return [[range(g, min(g + GROUP, splits)) for g in range(r, min(r + span, splits), GROUP)]
            for r in range(0, splits, span)]


def fixed_order_sum(partials: Sequence[Any]) -> Any:
    """The host's model of the kernel's sum: ``partials`` (float32 arrays, one per split, or
    float32 scalars) added in :func:`order`, each addition rounded as the kernel's is, so a
    correct kernel matches it bit for bit."""

    def chain(items: Iterable[Any]) -> Any:
        it = iter(items)
        acc = next(it)
        for x in it:
            acc = acc + x
        return acc

    return chain(chain(chain(partials[s] for s in group) for group in run) for run in order(len(partials)))
