"""The candidate plans of a problem, their names and their legality (no GPU, no kernel run).

Expectations come from the registry and the candidates module's own limits, so a new manifest
row changes no test here. Cases: transpose pair x alignment class x shape class x workspace.
"""

from __future__ import annotations

import itertools

import pytest

from sgblas.dispatch import candidates as cand
from sgblas.dispatch.plan import find_candidate
from sgblas.kernels import splitk
from sgblas.kernels.spec import GEMM_KERNELS, SCALE_KERNEL

from helpers import ALIGNED, H200_PROPS, WORKSPACE, problem

PAIRS = [ta + tb for ta, tb in itertools.product("NT", repeat=2)]
#: (m, n, k): large, few tiles with a long K, skinny, a long K past the accuracy bound, tiny.
SHAPES = [(4096, 4096, 4096), (256, 256, 8192), (8, 8192, 4096), (300, 200, 20000), (5, 3, 2), (5000, 5000, 300)]
#: (pointer offset in bytes, leading-dimension pad): 16-byte, 4-byte (offset) and odd (pad 1).
ALIGNMENTS = [(0, 0), (4, 0), (0, 1)]


def _problem(pair, shape, alignment):
    (m, n, k), (offset, pad) = shape, alignment
    ta, tb = pair
    return problem(ta=ta, tb=tb, m=m, n=n, k=k, a=ALIGNED + offset, b=ALIGNED + 2**32 + offset,
                   c=ALIGNED + 2**33 + offset, lda=(m if ta == "N" else k) + pad, ldb=(k if tb == "N" else n) + pad,
                   ldc=m + pad)


def _legal(p):
    return [s for s in GEMM_KERNELS if s.can_implement(p) is None]


CASES = list(itertools.product(PAIRS, SHAPES, ALIGNMENTS, (0, WORKSPACE)))


@pytest.mark.parametrize("pair,shape,alignment,workspace", CASES)
def test_every_candidate_is_legal_named_once_and_found_by_its_name(pair, shape, alignment, workspace):
    p = _problem(pair, shape, alignment)
    found, passed = cand.enumerate_candidates(_legal(p), p, H200_PROPS, workspace)
    assert found, "the general kernel runs every problem"
    names = [c.name for c in found]
    assert len(names) == len(set(names))
    for c in found:
        assert c.spec.can_implement(p) is None
        assert find_candidate(p, H200_PROPS, workspace, c.name) == c
        if c.split is not None:
            lo, shortest, most = cand._limits(c.spec, p, workspace)
            assert lo <= c.split.splits <= cand.MAX_SPLITS
            assert c.split.k_chunk % cand.granule(c.spec) == 0
            assert (c.split.splits - 1) * c.split.k_chunk < p.k <= c.split.splits * c.split.k_chunk
            if c.split.splits > 1:
                assert c.split.k_chunk >= shortest
                assert splitk.workspace_bytes(p.m, p.n, c.split.splits) <= workspace
        else:
            assert c.spec.workspace(p.m, p.n, p.k) <= workspace
    assert all(isinstance(why, str) and len(why) > 20 for _, why in passed)
    offered = {c.spec.name for c in found} | {name for name, _ in passed}
    assert offered == {s.name for s in _legal(p)}


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_from_the_accuracy_bound_no_candidate_sums_more_than_the_accuracy_chunk(pair, alignment):
    p = _problem(pair, (300, 200, 20000), alignment)
    found, passed = cand.enumerate_candidates(_legal(p), p, H200_PROPS, WORKSPACE)
    assert found and all(cand.longest_sum(c, p.k) <= cand.ACCURACY_CHUNK for c in found)
    assert any("no sum may be longer than" in why for _, why in passed)
    # Without a workspace no split is possible: the long sums stay, so the call still runs.
    found, _ = cand.enumerate_candidates(_legal(p), p, H200_PROPS, 0)
    assert found and all(c.split is None or c.split.splits == 1 for c in found)


def test_split_counts_include_the_ladder_and_the_counts_that_fill_whole_waves():
    spec = next(s for s in GEMM_KERNELS if s.role == "splitk" and s.tile[:2] == (128, 128))
    counts = cand.split_counts(spec, 512, 256, H200_PROPS)
    assert set(cand.SPLIT_COUNTS) <= set(counts) and max(counts) <= cand.MAX_SPLITS
    tiles, n_slots = cand.ctas(spec, 512, 256), cand.slots(spec, H200_PROPS)
    assert {n_slots // tiles, 2 * n_slots // tiles, 3 * n_slots // tiles} <= set(counts)


def test_a_tail_candidate_is_offered_only_with_a_part_filled_last_wave():
    tile = next(s for s in GEMM_KERNELS if s.role == "gemm" and not s.backstop and s.pair == ("N", "N")
                and s.tile[:2] == (128, 128) and s.align == 16)
    n_slots = cand.slots(tile, H200_PROPS)
    names = lambda p: {c.name for c in cand.enumerate_candidates([tile], p, H200_PROPS, WORKSPACE)[0]}
    assert f"{tile.name}/tail" in names(problem(m=5000, n=5000, k=512))
    whole = problem(m=128 * n_slots, n=128, k=512)  # exactly one wave
    assert names(whole) == {tile.name}
    assert names(problem(m=5000, n=5000, k=512)) >= {tile.name}
    assert f"{tile.name}/tail" not in {c.name for c in cand.enumerate_candidates(
        [tile], problem(m=5000, n=5000, k=512), H200_PROPS, WORKSPACE, rectangle=True)[0]}


@pytest.mark.parametrize("name,words", [
    ("", "is not a candidate name"),
    ("sgemm_simt_nn_128x128x16_2s_a16/x3", "'x3' is neither"),
    ("sgemm_simt_nn_128x128x16_2s_a16/s0", "'s0' is neither"),
])
def test_a_malformed_name_is_refused_with_a_sentence_naming_it(name, words):
    with pytest.raises(ValueError, match=words):
        cand.parse_name(name)
    assert words in find_candidate(problem(), H200_PROPS, WORKSPACE, name)


def _first(role, pair=("N", "N"), align=16):
    return next(s for s in GEMM_KERNELS if s.role == role and s.pair == pair and s.align == align)


def test_find_candidate_refuses_what_cannot_run_with_the_reason():
    p = problem(m=256, n=256, k=8192)
    tile, split = _first("gemm"), _first("splitk")
    cases = {
        "sgemm_nothing_like_it": "no kernel variant is named",
        SCALE_KERNEL.name: "not a GEMM variant",
        _first("gemm", ("T", "T")).name: "transpose pair NN is not TT",
        split.name: "name the number of slices",
        f"{tile.name}/s2": "does not split K",
        f"{split.name}/s28": "name " + split.name + "/s27",   # 28 slices of 304 leave the last empty
        f"{tile.name}/tail": "leave no last wave",
    }
    for name, words in cases.items():
        why = find_candidate(p, H200_PROPS, WORKSPACE, name)
        assert isinstance(why, str) and words in why, (name, why)
        assert name in why or name == "sgemm_nothing_like_it"
    short_k = problem(m=256, n=256, k=1000)
    assert f"shorter than {cand.MIN_SPLIT_CHUNK}" in find_candidate(short_k, H200_PROPS, WORKSPACE, f"{split.name}/s32")
    why = find_candidate(p, H200_PROPS, 0, f"{split.name}/s2")
    assert "bytes of workspace" in why
    long_k = problem(m=256, n=256, k=20000)
    assert "no sum may be longer than" in find_candidate(long_k, H200_PROPS, WORKSPACE, tile.name)
    assert f"longer than {cand.ACCURACY_CHUNK}" in find_candidate(long_k, H200_PROPS, WORKSPACE, f"{split.name}/s3")
    short = cand.split_of(split, long_k.k, 96).splits  # slices of 224
    assert not isinstance(find_candidate(long_k, H200_PROPS, WORKSPACE, f"{split.name}/s{short}"), str)
    # A workspace for 32 partials: the policy keeps the shortest slices it allows (625), and
    # those within ACCURACY_SLACK of them, and says so.
    few = 32 * 4 * 256 * 256
    assert not isinstance(find_candidate(long_k, H200_PROPS, few, f"{split.name}/s32"), str)
    why = find_candidate(long_k, H200_PROPS, few, f"{split.name}/s24")  # slices of 848
    assert "times the shortest that the workspace" in why, why
    # For 16, the same: a serial split is weighed beside them on its speed.
    assert not isinstance(find_candidate(long_k, H200_PROPS, 16 * 4 * 256 * 256, f"{split.name}/s16"), str)
    # For 3 (fewer than ACCURACY_SERIAL_PARTIALS): slices of 6672 at best, longer than a serial
    # split's; the serial split of the fewest slices no longer than that is legal, and a
    # parallel one is not.
    fewer = (cand.ACCURACY_SERIAL_PARTIALS - 1) * 4 * 256 * 256
    why = find_candidate(long_k, H200_PROPS, fewer, f"{split.name}/s3")
    assert f"longer than {cand.ACCURACY_SERIAL_CHUNK}, the longest slice of a serial split" in why, why
    serial = cand.split_of(split, long_k.k, -(-long_k.k // cand.ACCURACY_SERIAL_CHUNK), True)
    assert serial.k_chunk <= cand.ACCURACY_SERIAL_CHUNK and serial.serial
    assert find_candidate(long_k, H200_PROPS, fewer, f"{split.name}/c{serial.splits}") == cand.Candidate(split, serial)
    assert "longer than" in find_candidate(long_k, H200_PROPS, fewer, f"{split.name}/c{serial.splits - 2}")
    # Serial splits: only the slice kernels, two slices at least, room for the semaphores.
    skinny = _first("skinny")
    assert "cannot add its slices into C in turn" in find_candidate(problem(m=8, n=256, k=20000), H200_PROPS, WORKSPACE,
                                                                   f"{skinny.name}/c30")
    assert "at least 2 slices" in find_candidate(long_k, H200_PROPS, WORKSPACE, f"{split.name}/c1")
    assert "its semaphores need 16 bytes" in find_candidate(long_k, H200_PROPS, 8, f"{split.name}/c30")


def test_a_split_count_off_the_ladder_is_a_candidate_by_name():
    split = _first("splitk")
    p = problem(m=256, n=256, k=8192)
    assert 5 not in cand.SPLIT_COUNTS
    assert find_candidate(p, H200_PROPS, WORKSPACE, f"{split.name}/s5") == cand.Candidate(split, cand.Split(5, 1648))


def test_a_skinny_product_at_an_odd_leading_dimension_has_4_byte_skinny_candidates():
    """The 16-byte skinny rows refuse an odd leading dimension of the large operand; the 4-byte
    rows run it, in one launch or split, and explain weighs them with the rest."""
    from sgblas.dispatch.plan import choose

    p = problem(m=3, n=8192, k=8192, ldb=8193)
    legal = [s for s in GEMM_KERNELS if s.can_implement(p) is None]
    skinny = [s for s in legal if s.role == "skinny"]
    assert skinny and all(s.align == 4 and s.pair == ("N", "N") for s in skinny)
    found, _ = cand.enumerate_candidates(legal, p, H200_PROPS, WORKSPACE)
    assert any(c.spec in skinny and c.split.splits > 1 for c in found)
    assert any(c.spec in skinny and c.split.splits == 1 for c in found)
    c = choose(p, H200_PROPS, WORKSPACE)
    assert {f.name for f in found if f.spec in skinny} <= {name for name, _ in c.ranking}


def test_the_serial_cap_holds_where_the_partials_bind_and_the_tiles_are_few():
    """From k = 16384 every sum is capped at ACCURACY_SERIAL_CHUNK only where a serial split can
    run, the output has fewer 128 x 128 tiles than ACCURACY_SERIAL_WAVES x SMs and the workspace
    holds fewer than ACCURACY_SERIAL_PARTIALS partials; elsewhere the serial splits stand beside
    the parallel ones and the unsplit tiles."""
    split, tile = _first("splitk"), _first("gemm")

    def longest(p):
        found, _ = cand.enumerate_candidates([split, tile], p, H200_PROPS, WORKSPACE)
        assert any(c.split is not None and c.split.serial for c in found)
        return max(cand.longest_sum(c, p.k) for c in found)

    assert longest(problem(m=1536, n=1536, k=16384)) <= cand.ACCURACY_SERIAL_CHUNK  # 3 partials, 144 tiles
    assert longest(problem(m=1024, n=1024, k=16384)) > cand.ACCURACY_SERIAL_CHUNK   # 8 partials
    assert longest(problem(m=4096, n=4096, k=16384)) == 16384                       # 1024 tiles: unsplit stays
    assert cand.serial_splits_of(split, problem(m=1536, n=1536, k=8192), H200_PROPS, WORKSPACE) == []
