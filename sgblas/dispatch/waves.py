"""Which output tiles of a tile kernel's grid fall in its last, partly filled wave.

A tile kernel's CTAs run in waves of the GPU's resident slots. When the tiles are a few more
than whole waves (5000^3 on 128x128 tiles: 1600 CTAs on 264 slots, 6 whole waves and 16 CTAs),
the last wave takes as long as a full one with most of the GPU idle. A *tail plan* launches
the tile kernel over the CTAs of the whole waves only and computes the rest of C, at most two
rectangles, as sub-problems that split K (:mod:`sgblas.dispatch.plan`), so the GPU is full to
the end.

The tile kernels walk their tiles in a grouped raster (``TileConfig.group_m`` tile rows a
group, the group's tiles column by column): CTA ``pid`` computes the tile
:func:`tile_of` gives. A prefix of pids is therefore every group above one, plus that group's
first columns; the rest of C is that group's remaining columns and every row below the group.
The cut is moved down to a column boundary of its group so that the rest is rectangles.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Tail", "tile_of", "tail_of", "offsets"]


class Tail(NamedTuple):
    """``ctas``: the prefix of the tile kernel's grid to launch. ``rects``: the rest of C, as
    ``(row0, col0, rows, cols)`` rectangles (one or two), disjoint from each other and from the
    prefix's tiles, together covering every tile the prefix leaves out."""

    ctas: int
    rects: tuple[tuple[int, int, int, int], ...]


def tile_of(pid: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    """(tile row, tile column) of CTA ``pid`` in the grouped raster the generator emits
    (``group_m`` 0: plain column-major order)."""
    if not group_m:
        return pid % tiles_m, pid // tiles_m
    width = group_m * tiles_n
    first = (pid // width) * group_m
    size = min(tiles_m - first, group_m)
    within = pid % width
    return first + within % size, within // size


def tail_of(m: int, n: int, bm: int, bn: int, group_m: int, slots: int) -> Tail | None:
    """The tail plan's split of an ``m`` x ``n`` C into ``bm`` x ``bn`` tiles on ``slots``
    resident CTAs, or None when the tiles are fewer than one wave or exactly whole waves, or
    no column of a group ends within the whole waves (slots fewer than a group's rows)."""
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    total = tiles_m * tiles_n
    waves = total // slots
    if waves == 0 or total == waves * slots:
        return None
    group = group_m or tiles_m
    cut = waves * slots
    width = group * tiles_n
    start = (cut // width) * width  # the first pid of the group holding the cut
    first = (cut // width) * group
    size = min(tiles_m - first, group)
    col = (cut - start) // size
    row0 = first * bm
    if col == 0:  # the cut is at a group boundary: one rectangle, every row from the group on
        return Tail(start, ((row0, 0, m - row0, n),)) if start else None
    rects = [(row0, col * bn, min(size * bm, m - row0), n - col * bn)]
    below = (first + size) * bm
    if below < m:
        rects.append((below, 0, m - below, n))
    return Tail(start + col * size, tuple(rects))


def offsets(transa: str, transb: str, lda: int, ldb: int, ldc: int, row0: int, col0: int) -> tuple[int, int, int]:
    """Elements from the first of A, B and C to the first that the sub-problem of C's
    rectangle at (``row0``, ``col0``) reads or writes: A's row ``row0`` of op(A), B's column
    ``col0`` of op(B), C's element (``row0``, ``col0``); column-major, K whole."""
    a = row0 if transa == "N" else row0 * lda
    b = col0 * ldb if transb == "N" else col0
    return a, b, row0 + col0 * ldc
