"""Tail plans: which tiles the whole waves run, which rectangles are left, which variants offer
one, and the plan that runs one by name (its rectangles each a problem of its own, in the
caller's alignment class). Host logic only; the tail plans run under the simulator in
``tests/kernels/test_splitk.py`` and at real sizes in ``tests/test_tail_gpu.py``."""

from __future__ import annotations

import random

import numpy as np
import pytest

from sgblas.dispatch import candidates as cand
from sgblas.dispatch import waves
from sgblas.dispatch.plan import WorkspaceOrder, choose
from sgblas.enums import MathMode
from sgblas.kernels import sgemm_simt
from sgblas.kernels.spec import GEMM_KERNELS, REGISTRY

from helpers import ALIGNED, H200_PROPS, WORKSPACE, problem


def _covered(m, n, bm, bn, group_m, tail):
    """How many times each element of C is computed by the prefix's tiles and the rectangles,
    over the grid of cells cut by every tile and rectangle edge (within a cell every element
    is computed equally often, so a count per cell is a count per element, on a grid of tens
    of cells a side where C has millions of elements)."""
    tiles_m = -(-m // bm)
    tiles_n = -(-n // bn)
    tiles = np.array([waves.tile_of(pid, tiles_m, tiles_n, group_m) for pid in range(tail.ctas)],
                     dtype=np.int64).reshape(-1, 2)
    assert ((tiles >= 0) & (tiles < (tiles_m, tiles_n))).all()
    for row0, col0, rows, cols in tail.rects:
        assert rows > 0 and cols > 0 and row0 + rows <= m and col0 + cols <= n
    rects = np.array(tail.rects, dtype=np.int64).reshape(-1, 4)
    # (first row, end row, first column, end column) of every tile and rectangle
    top = np.concatenate([tiles[:, 0] * bm, rects[:, 0]])
    bottom = np.concatenate([np.minimum(tiles[:, 0] * bm + bm, m), rects[:, 0] + rects[:, 2]])
    left = np.concatenate([tiles[:, 1] * bn, rects[:, 1]])
    right = np.concatenate([np.minimum(tiles[:, 1] * bn + bn, n), rects[:, 1] + rects[:, 3]])
    row_cuts = np.unique(np.concatenate([[0, m], top, bottom]))
    col_cuts = np.unique(np.concatenate([[0, n], left, right]))
    r0, r1 = np.searchsorted(row_cuts, top), np.searchsorted(row_cuts, bottom)
    c0, c1 = np.searchsorted(col_cuts, left), np.searchsorted(col_cuts, right)
    # each box adds 1 over [r0, r1) x [c0, c1): four corners of a 2-D difference array
    diff = np.zeros((len(row_cuts), len(col_cuts)), dtype=np.int64)
    for rows, cols, sign in ((r0, c0, 1), (r0, c1, -1), (r1, c0, -1), (r1, c1, 1)):
        np.add.at(diff, (rows, cols), sign)
    return diff.cumsum(0).cumsum(1)[:-1, :-1]


def test_the_prefix_and_the_rectangles_compute_every_element_once():
    rng = random.Random(20261203)
    seen = 0
    for _ in range(3000):
        bm, bn = rng.choice([(128, 128), (128, 64), (4, 4), (8, 2)])
        m, n = rng.randint(1, 30 * bm), rng.randint(1, 30 * bn)
        group_m, slots = rng.choice([0, 1, 3, 8]), rng.randint(1, 300)
        tail = waves.tail_of(m, n, bm, bn, group_m, slots)
        total = -(-m // bm) * -(-n // bn)
        if tail is None:
            continue
        seen += 1
        whole = (total // slots) * slots
        assert 0 < tail.ctas <= whole and whole - tail.ctas < min(group_m or total, -(-m // bm))
        assert (_covered(m, n, bm, bn, group_m, tail) == 1).all(), (m, n, bm, bn, group_m, slots, tail)
    assert seen > 1000


def test_no_tail_below_one_wave_or_at_whole_waves():
    assert waves.tail_of(1000, 1000, 128, 128, 8, 264) is None  # 64 tiles, less than a wave
    assert waves.tail_of(128 * 24, 128 * 11, 128, 128, 8, 264) is None  # 264 tiles, one whole wave
    assert waves.tail_of(300, 100, 128, 128, 8, 2) is None  # the whole wave ends inside the first column


def _generated_mapping(cfg):
    """The generated kernel's tile mapping (its lines from ``tiles_m`` to ``bn``), run in
    Python: ``pid -> (bm, bn)`` for given m and n."""
    lines = sgemm_simt.generate_source(cfg, "probe").splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("tiles_m ="))
    last = next(i for i, line in enumerate(lines) if line.strip().startswith("row0 ="))
    body = "\n".join(line.strip() for line in lines[first:last] if line.strip())

    def mapping(pid, m, n):
        scope = {"uint32": int, "min": min, "m": m, "n": n,
                 "cuda": type("cuda", (), {"blockIdx": type("b", (), {"x": pid})})}
        exec(body, scope)  # noqa: S102 - the generator's own text
        return scope["bm"], scope["bn"]

    return mapping


def test_the_grouped_raster_is_the_generators():
    """``tile_of`` is the mapping the generated kernels compute from blockIdx.x."""
    cfg = _tile("NN", 16).config
    mapping = _generated_mapping(cfg)
    for m, n in ((5000, 5000), (2100, 700), (300, 4000)):
        tiles_m, tiles_n = -(-m // cfg.BM), -(-n // cfg.BN)
        for pid in range(tiles_m * tiles_n):
            assert mapping(pid, m, n) == waves.tile_of(pid, tiles_m, tiles_n, cfg.group_m), (m, n, pid)
    assert [waves.tile_of(p, 10, 3, 8) for p in (0, 7, 8, 23, 24, 25, 29)] == \
        [(0, 0), (7, 0), (0, 1), (7, 2), (8, 0), (9, 0), (9, 2)]


def test_5000_cubed_keeps_six_waves_and_splits_sixteen_tiles():
    tail = waves.tail_of(5000, 5000, 128, 128, 8, 264)
    assert tail == waves.Tail(1584, ((4096, 4864, 904, 136),))


def test_2100_cubed_leaves_two_rectangles():
    tail = waves.tail_of(2100, 2100, 128, 128, 8, 264)
    assert tail == waves.Tail(264, ((1024, 2048, 1024, 52), (2048, 0, 52, 2100)))


@pytest.mark.parametrize("pair", ["NN", "NT", "TN", "TT"])
def test_offsets_point_at_the_rectangles_first_element(pair):
    ta, tb = pair
    a, b, c = waves.offsets(ta, tb, 11, 13, 17, 5, 3)
    assert a == (5 if ta == "N" else 5 * 11)
    assert b == (3 * 13 if tb == "N" else 3)
    assert c == 5 + 3 * 17


# --------------------------------------------------------------------------------------------
# Tail candidates and their plans


def _tile(pair, align, tile=(128, 128)):
    return next(s for s in GEMM_KERNELS if s.role == "gemm" and s.pair == tuple(pair) and s.align == align
                and s.tile[:2] == tile and (s.config.TM, s.config.TN) == (8, 8) and getattr(s.config, "kq", 0) != 8)


class _Handle:  # what plan_for and plan_named read of a handle
    device, math_mode, workspace_bytes, cc, properties = 0, MathMode.FP32, WORKSPACE, (9, 0), H200_PROPS
    _kernels = {s.name: s.name for s in REGISTRY}

    def __init__(self):
        self._plans: dict = {}
        self._ws_order = WorkspaceOrder()


@pytest.mark.parametrize("pair", ["NN", "NT", "TN", "TT"])
def test_only_one_launch_tile_kernels_offer_a_tail_plan(pair):
    p = problem(ta=pair[0], tb=pair[1], m=5000, n=5000, k=5000)
    legal = [s for s in GEMM_KERNELS if s.can_implement(p) is None]
    found, _ = cand.enumerate_candidates(legal, p, H200_PROPS, WORKSPACE)
    tails = {c.spec for c in found if c.tail is not None}
    assert _tile(pair, 16) in tails
    assert all(s.role == "gemm" and not s.backstop and s.config is not None for s in tails)
    for c in found:
        if c.tail is not None:
            assert c.tail == waves.tail_of(5000, 5000, c.spec.tile[0], c.spec.tile[1], c.spec.config.group_m,
                                           cand.slots(c.spec, H200_PROPS))
    for m, n in ((128 * 24, 128 * 11), (128 * 48, 128 * 11), (1000, 1000)):  # one and two whole waves; less than one
        q = problem(ta=pair[0], tb=pair[1], m=m, n=n, k=512)
        found, _ = cand.enumerate_candidates([_tile(pair, 16)], q, H200_PROPS, WORKSPACE)
        assert all(c.tail is None for c in found), (m, n)


@pytest.mark.parametrize("pair", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("offset, pad, align", [(0, 0, 16), (4, 3, 4)], ids=["a16", "a4"])
def test_a_tail_plan_by_name_keeps_the_rectangles_in_the_callers_alignment_class(pair, offset, pad, align):
    """The tile kernel over its whole waves, then the rectangle left as a problem of its own: the
    caller's A, B and C from the rectangle's first element, so the variants that can run it are
    those of the caller's alignment class, and its plan is the choice for it."""
    from sgblas.dispatch.plan import plan_named

    m = n = k = 5000
    lda, ldb, ldc = (m if pair[0] == "N" else k) + pad, (k if pair[1] == "N" else n) + pad, m + pad
    a, b, c = ALIGNED + offset, ALIGNED + 2**32 + 2 * offset, ALIGNED + 2**33 + 3 * offset
    p = problem(ta=pair[0], tb=pair[1], m=m, n=n, k=k, a=a, b=b, c=c, lda=lda, ldb=ldb, ldc=ldc)
    tile = _tile(pair, align)
    plan = plan_named(_Handle(), f"{tile.name}/tail", pair[0], pair[1], m, n, k, a, lda, b, ldb, c, ldc)
    assert plan.spec is tile and plan.grid == (1584, 1, 1)
    (sub, rows, cols, a_off, b_off, row0, col0), = plan.tail
    assert (row0, col0, rows, cols) == (4096, 4864, 904, 136)
    assert (a_off, b_off) == waves.offsets(pair[0], pair[1], lda, ldb, ldc, row0, col0)[:2]
    rect = p._replace(m=rows, n=cols, a_ptr=a + 4 * a_off, b_ptr=b + 4 * b_off,
                      c_ptr=c + 4 * (row0 + col0 * ldc))
    widest = max(s.align for s in GEMM_KERNELS if s.role == "gemm" and s.can_implement(rect) is None)
    assert widest == align
    want = choose(rect, H200_PROPS, WORKSPACE, quick=True, rectangle=True)
    assert (sub.spec, sub.splits) == (want.spec, want.split.splits if want.split else 1)


def test_a_pinned_variant_runs_without_a_tail():
    """``plan_for(..., pin=)`` runs exactly the pinned variant: the sanitizer and the tests reach
    every variant so, and a tail plan is a candidate of its own (``VARIANT/tail``)."""
    from sgblas.dispatch.plan import plan_for, plan_named

    spec = _tile("NN", 16)
    pinned = plan_for(_Handle(), "N", "N", 5000, 5000, 5000, True, ALIGNED, 5000, ALIGNED, 5000, ALIGNED, 5000,
                      pin=spec)
    assert pinned.tail == () and pinned.grid == spec.grid(5000, 5000, 5000)
    named = plan_named(_Handle(), f"{spec.name}/tail", "N", "N", 5000, 5001, 5000, ALIGNED, 5000, ALIGNED, 5000,
                       ALIGNED, 5000)
    assert named.spec is spec and named.grid == (1584, 1, 1)
    (sub, rows, cols, a_off, b_off, row0, col0), = named.tail
    assert (rows, cols) == (904, 137)
    assert (a_off, b_off, row0, col0) == (4096, 4864 * 5000, 4096, 4864)


def test_a_memoised_tail_plan_places_the_rectangle_by_each_calls_ldc(monkeypatch):
    """The memo keys ldc mod 32 only (what the chooser reads of it): two calls with ldc 5000 and
    5032 share a plan, and the rectangle's launch that writes C must reach C's element
    (4096, 4864) by its own call's ldc, whatever runs the rectangle."""
    from sgblas.dispatch import plan as planning
    from sgblas.kernels import reduce

    launched = []
    monkeypatch.setattr(planning, "launch", lambda kernel, grid, stream, args, after=False:
                        launched.append((kernel, grid, args)))

    class Handle(_Handle):
        _stream = (None, 7, "stream")
        _context = None
        workspace_ptr = ALIGNED + 2**36

    h, c = Handle(), ALIGNED + 2**34
    name = f"{_tile('NN', 16).name}/tail"
    plans = [planning.plan_named(h, name, "N", "N", 5000, 5000, 5000, ALIGNED, 5000, ALIGNED, 5000, c, ldc)
             for ldc in (5000, 5032)]
    assert plans[0] is plans[1] and plans[0].tail
    for ldc in (5000, 5032):
        launched.clear()
        planning.execute(h, plans[0], 5000, 5000, 5000, 1.0, ALIGNED, 5000 * 5000, 5000, ALIGNED, 5000 * 5000,
                         5000, 0.5, c, 4999 * ldc + 5000, ldc)
        main, last = launched[0], launched[-1]
        assert main[1] == (1584, 1, 1) and main[2][11] == c
        # C's pointer, extent and ldc: the reduction's arguments 7-9, a GEMM launch's 11-13.
        at = 7 if last[0] == reduce.NAME else 11
        want = c + 4 * (4096 + 4864 * ldc)
        assert last[2][at:at + 3] == (want, 4999 * ldc + 5000 - (4096 + 4864 * ldc), ldc)
