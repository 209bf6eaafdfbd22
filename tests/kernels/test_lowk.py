"""Tests of the low-K kernels (:mod:`sgblas.kernels.lowk`), launched directly.

* Under the simulator: every pair at a shape with M, N and K tails (k not a multiple of 4),
  the alpha/beta corners, 1 x 1 x 1, k at the limit, and tiles that end exactly at m and n.
* ``@pytest.mark.gpu``: the same classes at real sizes (low K with m, n in the thousands, and
  tall-thin shapes) and offsets past 2**31 elements.
* Static: the NT and TN rows' PTX for sm_90 (local memory, TF32, flush-to-zero, the 128-bit
  broadcast reads of op(B)), and no spills under the launch bound when a ptxas is installed.

Every case checks all of C against a float64 reference (and the padding rows bit for bit);
calls with beta == 0 start from a C full of NaN.
"""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest
from numba import cuda

from helpers import PTX_NEEDS, problem, ptxas_report, run_gemm
from helpers import ptx as ptx_of
from sgblas.kernels import lowk
from sgblas.kernels.spec import GEMM_KERNELS, by_name
from sgblas.runtime.loader import dispatcher
from tests.reference import assert_gemm_close, make_operands, reference_gemm

SPECS = {s.pair: s for s in GEMM_KERNELS if s.name.startswith("sgemm_lowk_")}
PAIRS = tuple(sorted(SPECS))
CFG = lowk.LOWK_MANIFEST[0]


def _check(transa: str, transb: str, m: int, n: int, k: int, alpha: float, beta: float,
           pad: tuple[int, int, int] = (0, 0, 0)) -> None:
    seed = zlib.crc32(repr(("lowk", transa, transb, m, n, k, alpha, beta, pad)).encode())
    rng = np.random.default_rng(seed)
    ops = make_operands(rng, transa, transb, m, n, k, pad, nan_c=(beta == 0.0))
    ref = reference_gemm(transa, transb, m, n, k, alpha, ops.A, ops.lda, ops.B, ops.ldb, beta, ops.C, ops.ldc)
    spec = SPECS[(transa, transb)]
    got = run_gemm(dispatcher(spec)[spec.grid(m, n, k), spec.block], m, n, k, alpha, ops, beta)
    assert_gemm_close(got, ref, seed=seed,
                      label=f"{transa}{transb} m={m} n={n} k={k} alpha={alpha} beta={beta} pad={pad}")


def test_registry_rows():
    assert set(PAIRS) == {("N", "N"), ("N", "T"), ("T", "N"), ("T", "T")}
    for (ta, tb), spec in SPECS.items():
        cfg = spec.config
        assert spec.name == f"sgemm_lowk_{ta}{tb}".lower() + f"_{cfg.BM}x{cfg.BN}x4_1s_a4"
        assert spec.role == "gemm" and spec.align == 4 and spec.tile == (cfg.BM, cfg.BN, 4)
        assert spec.block == (cfg.THREADS, 1, 1) and spec.launch_bounds == (cfg.THREADS, cfg.min_blocks)


def test_can_implement_takes_any_alignment_and_refuses_long_k():
    spec = SPECS[("T", "N")]
    assert spec.can_implement(problem(ta="T", m=7, n=5, k=3, lda=3, ldb=1001, ldc=7, a=4, b=8, c=12)) is None
    assert spec.can_implement(problem(ta="T", m=7, n=5, k=CFG.KMAX)) is None
    reason = spec.can_implement(problem(ta="T", m=7, n=5, k=CFG.KMAX + 1))
    assert reason is not None and f"k={CFG.KMAX + 1}" in reason and str(CFG.KMAX) in reason


def test_grid_numbers_every_tile_once():
    assert lowk.grid_for(CFG, 1, 1) == (1, 1, 1)
    assert lowk.grid_for(CFG, CFG.BM + 1, 2 * CFG.BN + 1) == (6, 1, 1)


def test_names_carry_the_parameters_that_differ_from_the_default():
    import dataclasses

    assert CFG.name() == "sgemm_lowk_nn_256x32x4_1s_a4"
    assert dataclasses.replace(CFG, ahead=3, group_m=8).name() == "sgemm_lowk_nn_256x32x4p3g8_1s_a4"
    assert dataclasses.replace(CFG, R=1, transa="T").name() == "sgemm_lowk_tn_128x32x4_1s_a4"


def test_generated_text_reads_c_only_when_beta_is_nonzero():
    src = lowk.generate_source(CFG, CFG.name(), after_grid=False, simulator=True)
    assert "if read_c:" in src and "grid_dependency_wait" not in src
    assert "grid_dependency_wait()" in lowk.generate_source(CFG, CFG.name(), after_grid=True)


# Simulator-sized cases (also run on a GPU, where they are cheap)

@pytest.mark.parametrize("pair,alpha,beta", [
    (("N", "N"), 1.0, 0.0), (("N", "T"), -1.5, 0.5), (("T", "N"), 1.0, 1.0), (("T", "T"), -1.5, 0.0),
], ids=lambda v: "".join(v) if isinstance(v, tuple) else str(v))
def test_every_pair_with_tails(pair, alpha, beta):
    # Rows past the first THREADS (the second row of a thread), a partial N tile, k = 4q + 2.
    _check(*pair, CFG.THREADS + 3, CFG.BN + 5, 6, alpha, beta, pad=(1, 2, 3))


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "".join(p))
def test_one_by_one(pair):
    _check(*pair, 1, 1, 1, -1.5, 0.5)


@pytest.mark.parametrize("case", [
    ("T", "N", CFG.BM, 2 * CFG.BN, CFG.KMAX, -1.5, 0.5, (0, 0, 0)),  # whole tiles, k at the limit
    ("N", "T", 5, 3, 9, 1.0, 0.0, (9, 17, 30)),  # odd sizes, wide padding
    ("T", "T", 2, 70, 13, 0.5, 1.0, (0, 1, 0)),  # three N tiles, the last partial
], ids=["whole-tiles-kmax", "odd-padded", "n-tiles"])
def test_shape_classes(case):
    _check(*case)


@pytest.mark.parametrize("kw", [dict(ahead=2, min_blocks=3), dict(R=1, ahead=3, min_blocks=5), dict(R=1, BN=64),
                                dict(R=1, group_m=2)], ids=["ahead2", "r1-ahead3", "r1-bn64", "r1-group2"])
def test_generator_parameters_beyond_the_manifest(kw):
    """Deeper prefetch of A (the ring of steps in registers), one row a thread, 64 columns, and
    M tiles walked in groups (3 M tiles in groups of 2: the last group short): right at M, N and
    K tails and at k past the ring's depth, so a row added with them is too."""
    import dataclasses

    from sgblas.kernels import lowk_jit

    for pair, (m, n, k) in ((("N", "N"), (2 * CFG.THREADS + 3, 37, 14)), (("T", "T"), (70, 70, 3))):
        cfg = dataclasses.replace(CFG, transa=pair[0], transb=pair[1], **kw)
        seed = zlib.crc32(repr(("lowk-gen", kw, pair)).encode())
        ops = make_operands(np.random.default_rng(seed), *pair, m, n, k, (1, 0, 2), nan_c=False)
        ref = reference_gemm(*pair, m, n, k, -1.5, ops.A, ops.lda, ops.B, ops.ldb, 0.5, ops.C, ops.ldc)
        kernel = cuda.jit(lowk_jit.build_pyfunc(cfg, cfg.name(), False))
        got = run_gemm(kernel[lowk.grid_for(cfg, m, n), (cfg.THREADS, 1, 1)], m, n, k, -1.5, ops, 0.5)
        assert_gemm_close(got, ref, seed=seed, label=f"{kw} {pair} m={m} n={n} k={k}")


# Real sizes (GPU only)

GPU_SHAPES = [
    # (m, n, k, pad)
    (4096, 3000, 1, (0, 0, 0)),
    (3001, 2049, 7, (1, 3, 5)),
    (1000, 1000, 16, (0, 0, 0)),
    (200003, 33, 64, (0, 0, 0)),
    (100000, 64, 17, (3, 1, 2)),
    (5, 20001, 2, (0, 0, 0)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "".join(p))
@pytest.mark.parametrize("shape_index", range(len(GPU_SHAPES)))
def test_gpu_sizes(pair, shape_index):
    m, n, k, pad = GPU_SHAPES[shape_index]
    alpha, beta = ((1.0, 0.0), (-1.5, 0.5), (1.0, 1.0))[(shape_index + PAIRS.index(pair)) % 3]
    _check(*pair, m, n, k, alpha, beta, pad)


# Static checks of the generated code (no GPU needed)

@pytest.fixture(scope="module")
def sm90_ptx() -> dict[str, str]:
    return {"".join(by_name(name).pair): ptx_of(name, cc) for name, cc in PTX_NEEDS["test_lowk"]()}


@pytest.mark.ptx
def test_ptx_is_strict_fp32_without_local_memory(sm90_ptx):
    assert set(sm90_ptx) == {"NT", "TN"}
    for pair, ptx in sm90_ptx.items():
        assert "ld.local" not in ptx and "st.local" not in ptx, pair
        assert not re.search(r"\bw?mma\b|\bwgmma|\.tf32|cvt\.rna\.tf32", ptx), pair
        assert ".ftz" not in ptx, pair
        # op(B)'s row: one 128-bit shared read feeds 4 x R multiply-adds
        assert ptx.count("ld.shared.v4.f32") == 4 * CFG.BN // 4, pair
        assert ptx.count("fma.rn.f32") >= 4 * CFG.BN * CFG.R, pair


@pytest.mark.ptx
def test_sass_has_no_spills_under_the_launch_bound(sm90_ptx, tmp_path):
    max_regs = 65536 // (CFG.THREADS * CFG.min_blocks)
    for pair, ptx in sm90_ptx.items():
        report = ptxas_report(ptx, tmp_path / f"{pair}.ptx")
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in report, (pair, report)
        assert int(re.search(r"Used (\d+) registers", report).group(1)) <= max_regs, pair
