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
    tag = pair.lower()
    assert chosen(2048, 2048, 2048, pair).spec.name == f"sgemm_simt_{tag}_128x128x16_2s_a16"
    for shape in ((4096, 4096, 4096), (5000, 3000, 1000), (4096, 4096, 64), (8192, 8192, 8192)):
        c = chosen(*shape, pair)
        assert c.spec.role == "gemm" and c.split is None, (shape, c.spec.name)


FEW_TILE_SHAPES = [
    # (shape, splits and slice on 132 SMs for the 128x128 slice kernel, 2 CTAs per SM)
    ((1024, 1024, 1024), 4, 256),     # 64 tiles: one wave of 256 CTAs for 264 slots
    ((128, 8192, 8192), 4, 2048),
    ((8192, 128, 8192), 4, 2048),
    ((1536, 1536, 1536), 3, 512),     # 144 tiles: three partials are what 32 MiB holds
    # From k = 16384 on, as many splits as the workspace and MAX_SPLITS allow, for accuracy:
    ((1000, 1000, 100000), 8, 12512),   # 8 partials of 4 MB
    ((512, 512, 65536), 32, 2048),      # 32 partials of 1 MiB
    ((256, 256, 16384), 128, 128),      # 128 partials of 256 KiB, slices down to 128
    ((256, 256, 32768), 128, 256),
    ((256, 256, 262144), 128, 2048),
]


@pytest.mark.parametrize("pair", ["NN", "NT"])
@pytest.mark.parametrize("shape, splits, k_chunk", FEW_TILE_SHAPES)
def test_few_output_tiles_split_k(pair, shape, splits, k_chunk):
    c = chosen(*shape, pair)
    assert c.spec.name == f"sgemm_splitk_{pair.lower()}_128x128x16_2s_a16", c.spec.name
    assert c.spec.blocks_per_sm == 2
    assert c.split == heuristic.Split(splits, k_chunk)
    reasons = dict(c.passed_over)
    tile = reasons[f"sgemm_simt_{pair.lower()}_128x64x16_2s_a16"]
    assert "splits K instead" in tile and "CTAs fill" in tile, tile
    assert reasons[f"sgemm_splitk_{pair.lower()}_128x64x16_2s_a16"].endswith("splits K already")
    assert str(splits) in c.note and "workspace" in c.note


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("shape", [s for s, _, _ in FEW_TILE_SHAPES])
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
    assert c.spec.name == "sgemm_splitk_nn_128x128x16_2s_a16" and c.split == heuristic.Split(2, 8192)
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
    ((3, 8192, 8192), "sgemm_skinny_dot_nn_16x64x128_2s_a16", 3),
    ((8192, 3, 8192), "sgemm_skinny_axpy_nn_512x16x32_2s_a16", 24),
    ((16, 16384, 4096), "sgemm_skinny_dot_nn_16x64x128_2s_a16", 3),
    ((1, 16384, 16384), "sgemm_skinny_dot_nn_16x64x128_2s_a16", 3),
])
def test_skinny_shapes_take_the_skinny_kernels(shape, name, splits):
    c = chosen(*shape)
    assert c.spec.name == name and c.split.splits == splits, (c.spec.name, c.split)
    reasons = dict(c.passed_over)
    assert "bound by memory bandwidth" in reasons["sgemm_general_nn_128x64x16_2s_a4"]


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
    reason = dict(c.passed_over)["sgemm_skinny_dot_nn_16x64x128_2s_a16"]
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
