"""Tail plans (rule 6): which tiles the whole waves run, which rectangles are left, and the
choice that splits those rectangles' K. Host logic only; the tail plans run under the
simulator in ``tests/kernels/test_splitk.py`` and at real sizes in ``tests/test_tail_gpu.py``."""

from __future__ import annotations

import random

import numpy as np
import pytest

from sgblas.dispatch import heuristic, waves
from sgblas.dispatch.plan import choose
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
# Rule 6


def _tile(pair, align, tile=(128, 128)):
    return next(s for s in GEMM_KERNELS if s.role == "gemm" and s.pair == tuple(pair) and s.align == align
                and s.tile[:2] == tile and heuristic.thread_tile(s) == (8, 8) and getattr(s.config, "kq", 0) != 8)


@pytest.mark.parametrize("pair", ["NN", "NT", "TN", "TT"])
def test_tail_pays_where_the_whole_waves_are_emptiest(pair):
    p = problem(ta=pair[0], tb=pair[1], m=5000, n=5000, k=5000)
    assert heuristic.tail_pays(_tile(pair, 16), p, H200_PROPS) == waves.Tail(1584, ((4096, 4864, 904, 136),))
    for m in (7000, 4096, 8192, 1000):  # whole waves 95%, 97%, 97% full; less than one wave
        q = problem(ta=pair[0], tb=pair[1], m=m, n=m, k=m)
        assert heuristic.tail_pays(_tile(pair, 16), q, H200_PROPS) is None, m


def test_tail_pays_only_for_one_launch_tile_kernels():
    p = problem(ta="T", tb="N", m=5000, n=5000, k=5000)
    for spec in GEMM_KERNELS:
        if spec.role != "gemm" or heuristic.is_backstop(spec):
            assert heuristic.tail_pays(spec, p, H200_PROPS) is None, spec.name


@pytest.mark.parametrize("pair", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("offset, pad, align", [(0, 0, 16), (4, 3, 4)], ids=["a16", "a4"])
def test_a_tail_plan_splits_every_rectangle_in_the_callers_alignment_class(pair, offset, pad, align):
    m = n = k = 5000
    p = problem(ta=pair[0], tb=pair[1], m=m, n=n, k=k, a=ALIGNED + offset, b=ALIGNED + 2**32 + 2 * offset,
                c=ALIGNED + 2**33 + 3 * offset, lda=(m if pair[0] == "N" else k) + pad,
                ldb=(k if pair[1] == "N" else n) + pad, ldc=m + pad)
    choice = choose(p, H200_PROPS, WORKSPACE)
    assert choice.spec.role == "gemm" and choice.spec.align == align
    assert choice.tail_ctas == 1584 and [rect for rect, _ in choice.tail] == [(4096, 4864, 904, 136)]
    (_, sub), = choice.tail
    assert sub.spec.role == "splitk" and sub.spec.pair == tuple(pair) and sub.spec.align == align
    assert sub.split.splits == 16 and sub.tail == ()
    alone = choose(p._replace(m=904, n=136, a_ptr=p.a_ptr + 4 * (4096 if pair[0] == "N" else 4096 * p.lda)), H200_PROPS,
                   WORKSPACE)
    assert (alone.spec.role == "splitk") == (align == 16), alone.spec.name  # 4-byte slices: rectangles only
    assert "runs the first 1584" in choice.note and sub.spec.name in choice.note and "16 ways" in choice.note
    quick = choose(p, H200_PROPS, WORKSPACE, quick=True)  # how a call plans
    assert (quick.spec, quick.tail_ctas, [(r, c.spec, c.split) for r, c in quick.tail]) == \
        (choice.spec, choice.tail_ctas, [(r, c.spec, c.split) for r, c in choice.tail])


def test_no_tail_plan_when_a_rectangle_cannot_split():
    """Without workspace for partials, or with a K too short to split, the rectangles would run
    on the tile kernel at full K: no faster than the last wave, so one launch stays."""
    p = problem(ta="N", tb="N", m=5000, n=5000, k=5000)
    assert choose(p, H200_PROPS, 0).tail == ()
    short = problem(ta="N", tb="N", m=5000, n=5000, k=300)
    assert choose(short, H200_PROPS, WORKSPACE).tail == ()
    assert choose(p, H200_PROPS, WORKSPACE).tail != ()


def test_a_pinned_variant_runs_without_a_tail():
    """``plan_for(..., pin=)`` runs exactly the pinned variant: the sanitizer and the tests reach
    every variant so, and a tail plan is a choice, not a variant."""
    from sgblas.dispatch.plan import plan_for

    spec = _tile("NN", 16)

    class Handle:  # what plan_for reads of a handle
        device, math_mode, workspace_bytes, cc, properties = 0, MathMode.FP32, WORKSPACE, (9, 0), H200_PROPS
        _plans: dict = {}
        _kernels = {s.name: s.name for s in REGISTRY}

    pinned = plan_for(Handle(), "N", "N", 5000, 5000, 5000, True, ALIGNED, 5000, ALIGNED, 5000, ALIGNED, 5000,
                      pin=spec)
    assert pinned.tail == () and pinned.grid == spec.grid(5000, 5000, 5000)
    chosen = plan_for(Handle(), "N", "N", 5000, 5001, 5000, True, ALIGNED, 5000, ALIGNED, 5000, ALIGNED, 5000)
    assert chosen.spec is spec and chosen.grid == (1584, 1, 1)
    (sub, rows, cols, a_off, b_off, row0, col0), = chosen.tail
    assert sub.role == "splitk" and sub.splits == 16 and (rows, cols) == (904, 137)
    assert (a_off, b_off, row0, col0) == (4096, 4864 * 5000, 4096, 4864)


def test_a_memoised_tail_plan_places_the_rectangle_by_each_calls_ldc(monkeypatch):
    """The memo keys ldc mod 32 only (what the chooser reads of it): two calls with ldc 5000 and
    5032 share a plan, and each launch of the rectangle must reach C's element (4096, 4864) by
    its own call's ldc."""
    from sgblas.dispatch import plan as planning

    launched = []
    monkeypatch.setattr(planning, "launch", lambda kernel, grid, stream, args, after=False:
                        launched.append((kernel, grid, args)))

    class Handle:
        device, math_mode, workspace_bytes, cc, properties = 0, MathMode.FP32, WORKSPACE, (9, 0), H200_PROPS
        _plans: dict = {}
        _kernels = {s.name: s.name for s in REGISTRY}
        _stream = (None, 7, "stream")
        _context = None
        workspace_ptr = ALIGNED + 2**36

    h, c = Handle(), ALIGNED + 2**34
    plans = [planning.plan_for(h, "N", "N", 5000, 5000, 5000, True, ALIGNED, 5000, ALIGNED, 5000, c, ldc)
             for ldc in (5000, 5032)]
    assert plans[0] is plans[1] and plans[0].tail
    for ldc in (5000, 5032):
        launched.clear()
        planning.execute(h, plans[0], 5000, 5000, 5000, 1.0, ALIGNED, 5000 * 5000, 5000, ALIGNED, 5000 * 5000,
                         5000, 0.5, c, 4999 * ldc + 5000, ldc)
        main, partials, reduction = launched
        assert main[1] == (1584, 1, 1) and main[2][11] == c
        want = c + 4 * (4096 + 4864 * ldc)
        assert reduction[2][7] == want and reduction[2][8] == 4999 * ldc + 5000 - (4096 + 4864 * ldc)
        assert reduction[2][9] == ldc
