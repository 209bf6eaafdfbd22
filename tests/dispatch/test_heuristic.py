"""The dispatch heuristic's choices from synthetic device properties (no GPU, no kernel run).

An H200 (132 SMs), a GPU with eight times fewer SMs, and the handle's workspace: which tile,
when K is split and into how many slices, when the skinny kernels take over, and what
``choose`` says about every variant it passes over. The many-tile shapes keep the choices they
had before split-K existed.
"""

from __future__ import annotations

import pytest

from sgblas.dispatch import heuristic
from sgblas.dispatch.plan import choose
from sgblas.enums import MathMode
from sgblas.kernels import splitk
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.spec import GEMM_KERNELS
from sgblas.runtime.device import DeviceProperties

H200 = DeviceProperties(132, 2048, 32, 65536, 233472)
SMALL = DeviceProperties(16, 2048, 32, 65536, 102400)
MIB = 1024 * 1024
WORKSPACE = 32 * MIB
BASE = 0x7F0000000000
PAIRS = ("NN", "NT", "TN", "TT")


def problem(m, n, k, pair="NN", cc=(9, 0)):
    ta, tb = pair
    lda = m if ta == "N" else k
    ldb = k if tb == "N" else n
    return GemmProblem(cc, MathMode.FP32, ta, tb, m, n, k, BASE, lda, BASE + 2**34, ldb, BASE + 2**35, m)


def chosen(m, n, k, pair="NN", props=H200, workspace=WORKSPACE):
    return choose(problem(m, n, k, pair), props, workspace)


@pytest.mark.parametrize("pair", PAIRS)
def test_many_tile_shapes_keep_the_tile_kernels(pair):
    c = chosen(2048, 2048, 2048, pair)
    assert c.spec.role == "gemm" and c.spec.tile == (128, 128, 16) and c.spec.align == 16, c.spec.name
    for shape in ((4096, 4096, 4096), (5000, 3000, 1000), (4096, 4096, 64), (8192, 8192, 8192)):
        c = chosen(*shape, pair)
        assert c.spec.role == "gemm" and c.split is None, (shape, c.spec.name)


FEW_TILE_SHAPES = [
    # (shape, splits and slice on 132 SMs for the 128x128 slice kernels, 2 CTAs per SM; the
    # thread tile NN and NT take: 8 x 8 for every split of few tiles, even where the rule of
    # accuracy splits would take 16 x 8, slices of 2048 in one wave or of 4096 and more)
    ((1024, 1024, 1024), 4, 256, "8x8"),      # 64 tiles: one wave of 256 CTAs for 264 slots
    ((128, 8192, 8192), 4, 2048, "8x8"),
    ((8192, 128, 8192), 4, 2048, "8x8"),
    ((1536, 1536, 1536), 3, 512, "8x8"),      # 144 tiles: three partials are what 32 MiB holds
    # From k = 16384 on, as many splits as the workspace and MAX_SPLITS allow, for accuracy:
    ((1000, 1000, 100000), 8, 12512, "8x8"),  # 8 partials of 4 MB
    ((512, 512, 65536), 32, 2048, "8x8"),      # 32 partials of 1 MiB: 512 CTAs, two waves
    ((256, 256, 16384), 128, 128, "8x8"),      # 128 partials of 256 KiB, slices down to 128
    ((256, 256, 32768), 128, 256, "8x8"),
    ((256, 256, 262144), 128, 2048, "8x8"),
]


def _tile_name(kind, pair, thread, align=16):
    t = "" if thread == "8x8" else "t" + thread
    return f"sgemm_{kind}_{pair.lower()}_128x128x16{t}_2s_a{align}"


@pytest.mark.parametrize("pair", ["NN", "NT"])
@pytest.mark.parametrize("shape, splits, k_chunk, thread", FEW_TILE_SHAPES)
def test_few_output_tiles_split_k(pair, shape, splits, k_chunk, thread):
    c = chosen(*shape, pair)
    assert c.spec.name == _tile_name("splitk", pair, thread), c.spec.name
    assert c.spec.blocks_per_sm == 2
    assert c.split == heuristic.Split(splits, k_chunk)
    reasons = dict(c.passed_over)
    tile = reasons[f"sgemm_simt_{pair.lower()}_128x64x16_2s_a16"]
    assert "splits K instead" in tile and "CTAs fill" in tile, tile
    assert reasons[f"sgemm_splitk_{pair.lower()}_128x64x16_2s_a16"].endswith("splits K already")
    other = reasons[_tile_name("splitk", pair, "16x8" if thread == "8x8" else "8x8")]
    assert other == (f"{c.spec.name} splits K already: its {thread.replace('x', ' x ')} thread tile runs "
                     f"slices of {k_chunk} of K in {splits} slices faster"), other
    assert str(splits) in c.note and "workspace" in c.note


@pytest.mark.parametrize("pair", ["NN", "NT"])
@pytest.mark.parametrize("shape", [
    (2048, 2048, 2048),     # 256 CTAs, one wave of 264 slots, K 2048
    (4096, 4096, 4096),     # K 4096, several waves
    (8192, 8192, 8192),
    (3072, 3072, 2048),     # K 2048 in 2.2 waves
    (6144, 6144, 1536),
    (4096, 4096, 64),
])
def test_an_unsplit_problem_takes_the_8x8_thread_tile_at_every_k(pair, shape):
    c = chosen(*shape, pair)
    assert c.spec.name == _tile_name("simt", pair, "8x8") and c.split is None, c.spec.name
    other = dict(c.passed_over)[_tile_name("simt", pair, "16x8")]
    assert other == (f"{c.spec.name}'s 8 x 8 thread tile runs this CTA tile at least as fast at every K when "
                     f"K is not split (the larger thread tile serves accuracy splits of a long K)"), other


@pytest.mark.parametrize("pair", ["TN", "TT"])
def test_the_16x8_thread_tile_is_for_nn_and_nt_only(pair):
    for shape in ((4096, 4096, 4096), (128, 8192, 8192)):
        assert "t16x8" not in chosen(*shape, pair).spec.name
    # A narrower alignment class has no 16 x 8 row: the 8 x 8 one of that class runs.
    c = choose(problem(4096, 4096, 4096, "NN")._replace(lda=4098), H200, WORKSPACE)
    assert c.spec.name == "sgemm_simt_nn_128x128x16_2s_a8", c.spec.name


@pytest.mark.parametrize("lda, ldb, offset, lanes", [
    (4096, 4096, 1, 8),    # pointers offset by one, leading dimensions a multiple of 32
    (4097, 4097, 0, 8),    # one past a power of two
    (4095, 4095, 0, 8),    # one below (rung 47)
    (8191, 8191, 0, 8),
    (2047, 2047, 0, 8),
    (6143, 6143, 0, 4),    # one below a multiple of 32 that is no power of two
    (4094, 4094, 1, 4),    # two below a power of two
    (4224, 4224, 1, 8),
    (4098, 4098, 1, 4),
    (4100, 4100, 1, 4),
    (4129, 4129, 0, 4),    # one past a multiple of 32 that is no power of two
    (6145, 6145, 0, 4),
    (4096, 4100, 1, 4),    # every k-major operand must qualify
])
def test_tn_4_byte_class_lanes_follow_the_leading_dimensions(lda, ldb, offset, lanes):
    p = problem(4096, 4096, 4096, "TN")._replace(lda=lda, ldb=ldb, a_ptr=BASE + 4 * offset,
                                                  b_ptr=BASE + 2**34 + 4 * offset)
    c = choose(p, H200, WORKSPACE)
    want = "sgemm_simt_tn_128x128x16kq8_2s_a4" if lanes == 8 else "sgemm_simt_tn_128x128x16_2s_a4"
    other = ("sgemm_simt_tn_128x128x16_2s_a4" if lanes == 8 else "sgemm_simt_tn_128x128x16kq8_2s_a4")
    assert c.spec.name == want and c.split is None, c.spec.name
    assert heuristic.eight_lanes_pay(p) == (lanes == 8)
    reason = dict(c.passed_over)[other]
    assert reason.startswith(f"{want} copies each k-major column with {lanes} lanes") and f"lda={lda}" in reason, reason


def _offset_tn(m, n, k, pad, offset=1, pair="TN"):
    """``pair`` at m x n x k, every leading dimension padded by ``pad``, pointers offset."""
    p = problem(m, n, k, pair)
    return p._replace(lda=p.lda + pad, ldb=p.ldb + pad, ldc=p.ldc + pad, a_ptr=BASE + 4 * offset,
                      b_ptr=BASE + 2**34 + 4 * offset, c_ptr=BASE + 2**35 + 4 * offset)


@pytest.mark.parametrize("shape, pad, pair, tile", [
    # TN's 4-byte class, rule 3a: the 128x128 tiles' whole waves less than 80% full, the 128x64
    # tiles' at least 94% (2450^3: 400 CTAs on 264 slots, 76%; 780 on 396, 98%).
    ((2450, 2450, 2450), 3, "TN", (128, 64)),
    ((3000, 3000, 3000), 1, "TN", (128, 64)),
    ((2500, 5000, 3000), 3, "TN", (128, 64)),
    # Fuller 128x128 waves keep the larger tile (5000^3: 87%, 4300^3: 88%, where the 128x64 row
    # ran no faster; 4500^3: 98%; 6000^3: 93% against 93%).
    ((5000, 5000, 5000), 3, "TN", (128, 128)),
    ((4300, 4300, 4300), 3, "TN", (128, 128)),
    ((4500, 4500, 4500), 3, "TN", (128, 128)),
    ((6000, 6000, 6000), 3, "TN", (128, 128)),
    # Other pairs, and TN's 16-byte class, keep the larger tile whatever the waves.
    ((3000, 3000, 3000), 3, "NN", (128, 128)),
    ((3000, 3000, 3000), 3, "TT", (128, 128)),
    ((3000, 3000, 3000), 0, "TN", (128, 128)),
])
def test_tn_4_byte_class_takes_the_smaller_tile_when_its_waves_are_much_fuller(shape, pad, pair, tile):
    p = _offset_tn(*shape, pad, offset=1 if pad else 0, pair=pair)
    c = choose(p, H200, WORKSPACE)
    assert c.spec.role == "gemm" and c.spec.tile[:2] == tile and c.split is None, c.spec.name
    if tile == (128, 64):
        assert c.spec.align == 4
        reason = dict(c.passed_over)["sgemm_simt_tn_128x128x16_2s_a4"]
        assert "of their whole waves" in reason and c.spec.name in reason, reason


def test_the_wave_rule_leaves_the_8_lane_leading_dimensions_alone():
    # lda = ldb = 4097 (one past a power of two) at 3000 x 3000 x 4096: rule 3's 8-lane row,
    # or its packed copies when the workspace holds them, however the waves fall.
    p = problem(3000, 3000, 4096, "TN")._replace(lda=4097, ldb=4097, ldc=3003)
    assert heuristic.eight_lanes_pay(p)
    c = choose(p, H200, WORKSPACE)
    assert c.spec.name == "sgemm_simt_tn_128x128x16kq8_2s_a4", c.spec.name
    assert not heuristic.smaller_tile_pays(c.spec, next(s for s in GEMM_KERNELS
                                                        if s.name == "sgemm_simt_tn_128x64x16_2s_a4"), p, H200)


def test_wide_thread_tile_rule():
    pays = heuristic.wide_thread_tile_pays
    assert pays(4096, 10_000, 264) and pays(2048, 264, 264)
    assert not pays(2048, 265, 264) and not pays(2032, 1, 264) and not pays(4080, 265, 264)


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("shape", [s for s, _, _, _ in FEW_TILE_SHAPES])
def test_every_pair_splits_into_full_waves_or_for_accuracy(pair, shape):
    """Below ACCURACY_SPLIT_K the split fills one wave of resident slots, or whole waves at
    least WAVE_TARGET full, within what the workspace holds; from it on, it takes the most
    splits allowed."""
    m, n, k = shape
    c = chosen(m, n, k, pair)
    assert c.spec.role == "splitk" and c.spec.pair == (pair[0], pair[1]), c.spec.name
    split = c.split
    assert split.k_chunk % 16 == 0 and (split.splits - 1) * split.k_chunk < k <= split.splits * split.k_chunk
    n_slots = heuristic.slots(c.spec, H200)
    used = heuristic.ctas(c.spec, problem(m, n, k, pair)) * split.splits
    by_workspace = WORKSPACE // splitk.partial_bytes(m, n)
    if k >= heuristic.ACCURACY_SPLIT_K:
        assert split.splits == min(heuristic.MAX_SPLITS, k // heuristic.ACCURACY_MIN_CHUNK, by_workspace)
    elif split.splits < by_workspace and 2 * heuristic.ctas(c.spec, problem(m, n, k, pair)) <= n_slots:
        assert used <= n_slots and used >= heuristic.WAVE_TARGET * n_slots


def test_splits_follow_the_sm_count():
    # 64 tiles of 128x128: 264 slots on 132 SMs take 4 slices, 32 slots on 16 SMs none
    # (the tile kernels fill them already).
    assert chosen(128, 8192, 8192).split.splits == 4
    small = chosen(128, 8192, 8192, props=SMALL)
    assert small.spec.role == "gemm" and small.split is None
    # 16 tiles of 128x128: 16 slices on 132 SMs, 2 on 16 SMs (32 slots).
    assert chosen(512, 512, 8192).split.splits == 16
    assert chosen(512, 512, 8192, props=SMALL).split.splits == 2


def test_slices_shorter_than_256_only_from_k_16384():
    assert chosen(256, 256, 8192).split == heuristic.Split(32, 256)
    assert chosen(256, 256, 16384).split == heuristic.Split(128, 128)


def test_short_k_is_not_split():
    c = chosen(128, 8192, 496)
    assert c.spec.name == "sgemm_simt_nn_128x64x16_2s_a16"
    reason = dict(c.passed_over)["sgemm_splitk_nn_128x128x16_2s_a16"]
    assert reason == ("k=496 is too short to split: each of 2 slices would keep less than "
                      f"{heuristic.MIN_SPLIT_CHUNK} of it")


def test_the_workspace_caps_the_splits_and_too_little_takes_a_kernel_that_needs_none():
    per = splitk.partial_bytes(512, 512)
    assert chosen(512, 512, 65536, workspace=3 * per).split.splits == 3
    assert chosen(512, 512, 65536, workspace=2 * per).split.splits == 2
    c = chosen(512, 512, 65536, workspace=2 * per - 1)
    assert c.spec.name == "sgemm_simt_nn_128x64x16_2s_a16" and c.split is None
    reason = dict(c.passed_over)["sgemm_splitk_nn_128x64x16_2s_a16"]
    assert reason == f"it needs {2 * per} bytes of workspace and the handle has {2 * per - 1}"
    c = chosen(512, 512, 65536, workspace=0)
    assert dict(c.passed_over)["sgemm_splitk_nn_128x64x16_2s_a16"].endswith("the handle has 0")


def test_long_k_is_split_for_accuracy_when_the_workspace_holds_it():
    c = chosen(2048, 2048, 16384)
    assert c.spec.name == "sgemm_splitk_nn_128x128x16t16x8_2s_a16" and c.split == heuristic.Split(2, 8192)
    # 8 slices of 8192: 8 partials of 16 MiB do not fit in 32 MiB, and fewer would not be
    # short enough, so the tile kernel runs it.
    c = chosen(2048, 2048, 65536)
    assert c.split is None and "for accuracy" in dict(c.passed_over)["sgemm_splitk_nn_128x64x16_2s_a16"]
    assert chosen(2048, 2048, 65536, workspace=128 * MIB).split == heuristic.Split(8, 8192)
    # Below ACCURACY_SPLIT_K, tiles that fill the GPU are not split.
    assert chosen(2048, 2048, 8192).split is None
    # A problem too large for the workspace keeps the tile kernel (no error, no split).
    assert chosen(4096, 4096, 16384).spec.name == "sgemm_simt_nn_128x128x16_2s_a16"


@pytest.mark.parametrize("shape, name, splits", [
    ((3, 8192, 8192), "sgemm_skinny_dot_nn_16x64x128_4s_a16", 4),
    ((8192, 3, 8192), "sgemm_skinny_axpy_nn_512x16x32_4s_a16", 16),
    ((16, 16384, 4096), "sgemm_skinny_dot_nn_16x64x128_4s_a16", 2),
    ((1, 16384, 16384), "sgemm_skinny_dot_nn_16x64x128_4s_a16", 2),
])
def test_skinny_shapes_take_the_skinny_kernels(shape, name, splits):
    c = chosen(*shape)
    assert c.spec.name == name and c.split.splits == splits, (c.spec.name, c.split)
    reasons = dict(c.passed_over)
    assert "bound by memory bandwidth" in reasons["sgemm_general_nn_128x64x16_2s_a4"]


def test_split_of_rounds_each_slice_to_the_kernel_granule():
    axpy = next(s for s in GEMM_KERNELS if s.name == "sgemm_skinny_axpy_nt_16x512x32_4s_a16")
    assert heuristic.split_of(axpy, 4096, 12) == heuristic.Split(12, 352)   # pieces of 32
    assert heuristic.split_of(axpy, 4096, 22) == heuristic.Split(22, 192)
    slice_kernel = next(s for s in GEMM_KERNELS if s.name == "sgemm_splitk_nn_128x128x16_2s_a16")
    assert heuristic.split_of(slice_kernel, 1000, 3) == heuristic.Split(3, 336)  # steps of 16


@pytest.mark.parametrize("shape, pair, splits", [
    ((16, 16384, 4096), "NT", 8),   # 32 CTAs along n: 8 splits, 256 CTAs
    ((16, 16384, 4096), "TT", 8),
    ((3, 8192, 8192), "NT", 16),    # 16 CTAs along n
    ((8192, 3, 8192), "NT", 16),    # 16 CTAs along m
])
def test_the_axpy_loop_splits_to_fill_two_ctas_a_sm(shape, pair, splits):
    # Its launch bound lets 3 reside (396 slots on 132 SMs); the split fills AXPY_CTAS_PER_SM.
    c = chosen(*shape, pair)
    assert c.spec.config.mode == "axpy" and c.split.splits == splits, (c.spec.name, c.split)
    assert heuristic.ctas(c.spec, problem(*shape, pair)) * splits <= H200.sm_count * heuristic.AXPY_CTAS_PER_SM
    _, note = heuristic.split_for(c.spec, problem(*shape, pair), H200, WORKSPACE)
    assert f"({heuristic.AXPY_CTAS_PER_SM} a SM for the axpy loop)" in note, note
    # The dot loop fills the 4 CTAs a SM of its launch bound.
    dot = chosen(16, 16384, 4096, "NN")
    assert dot.spec.config.mode == "dot" and dot.split.splits == 2


def test_skinny_without_workspace_runs_in_one_launch():
    c = chosen(3, 8192, 8192, workspace=0)
    assert c.spec.role == "skinny" and c.split.splits == 1 and c.split.k_chunk >= 8192
    assert c.note == "K is not split: one launch"


@pytest.mark.parametrize("pair", PAIRS)
def test_skinny_covers_every_pair_and_side(pair):
    assert chosen(5, 9000, 3000, pair).spec.role == "skinny"
    assert chosen(9000, 5, 3000, pair).spec.role == "skinny"
    assert chosen(17, 9000, 3000, pair).spec.role != "skinny"


def test_small_skinny_products_stay_on_the_tile_kernels():
    c = chosen(6, 500, 400)  # 800 KB of B: launch latency, not bandwidth
    assert c.spec.role == "gemm"
    reason = dict(c.passed_over)["sgemm_skinny_dot_nn_16x64x128_4s_a16"]
    assert reason.startswith("the large operand has only 800000 bytes"), reason


def test_every_variant_gets_a_sentence():
    for shape in ((128, 8192, 8192), (3, 8192, 8192), (4096, 4096, 4096), (2048, 2048, 16384), (6, 500, 400)):
        c = chosen(*shape)
        named = {name for name, _ in c.refused + c.passed_over}
        assert named == {s.name for s in GEMM_KERNELS} - {c.spec.name}
        assert all(isinstance(r, str) and len(r) > 20 for _, r in c.refused + c.passed_over)


def test_the_choice_is_a_function_of_shape_device_and_workspace():
    a = [chosen(1000, 1000, 100000).split for _ in range(3)]
    assert a[0] == a[1] == a[2]
