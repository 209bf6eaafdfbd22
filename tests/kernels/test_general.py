"""Tests of the general SGEMM kernel (:mod:`sgblas.kernels.general`), launched directly.

* Without a GPU the kernels run under Numba's CUDA simulator, so shapes stay tiny (a
  single 128 x 64 block costs about half a second per K slice there): every transpose
  pair at a shape with M, N and K tails, then one pair per other shape class, the six
  alpha/beta combinations on the cheapest shape, and N tiles spread over y and z.
* ``@pytest.mark.gpu`` repeats the classes at real sizes, adds n past the 65535-block
  limit of gridDim.y and leading dimensions whose ``col * ld`` passes 2**31.
* A static check reads the NT and TN variants' PTX for sm_90 (between them every copy path;
  no GPU needed, but not under the simulator, hence the background compile of
  ``tests/helpers.py``) and looks for local memory, tensor-core instructions and
  flush-to-zero; when a ptxas is installed the SASS resource report is checked too.

Every case checks all of C: the m x n result against a float64 reference with a K- and
magnitude-aware tolerance, and the padding rows between columns bit for bit. Calls with
beta == 0 start from a C full of NaN.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from helpers import PTX_NEEDS, ptxas_report, run_gemm
from helpers import ptx as ptx_of
from sgblas.enums import MathMode
from sgblas.kernels import general
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.spec import GEMM_KERNELS, by_name
from sgblas.runtime.loader import dispatcher
from tests.reference import assert_gemm_close, make_operands, reference_gemm

#: The general kernel's variants, one per transpose pair, from the registry.
SPECS = {s.pair: s for s in GEMM_KERNELS if s.name.startswith("sgemm_general_")}
PAIRS = tuple(sorted(SPECS))
ALPHAS = (1.0, -1.5)
BETAS = (0.0, 1.0, 0.5)


def _seed(*parts: object) -> int:
    """A stable seed per case (printed by the assertion on failure)."""
    return zlib.crc32(repr(parts).encode())


def _run(transa: str, transb: str, m: int, n: int, k: int, alpha: float, beta: float,
         ops, grid: tuple[int, int, int] | None = None) -> np.ndarray:
    """Launch the general kernel on device copies of ``ops``; return C's buffer."""
    launch = dispatcher(SPECS[(transa, transb)])[grid or general.grid(m, n), general.BLOCK]
    return run_gemm(launch, m, n, k, alpha, ops, beta)


def _check(transa: str, transb: str, m: int, n: int, k: int, alpha: float, beta: float,
           pad: tuple[int, int, int] = (0, 0, 0),
           grid: tuple[int, int, int] | None = None) -> None:
    seed = _seed(transa, transb, m, n, k, alpha, beta, pad, grid)
    rng = np.random.default_rng(seed)
    ops = make_operands(rng, transa, transb, m, n, k, pad, nan_c=(beta == 0.0))
    ref = reference_gemm(transa, transb, m, n, k, alpha, ops.A, ops.lda, ops.B, ops.ldb,
                         beta, ops.C, ops.ldc)
    got = _run(transa, transb, m, n, k, alpha, beta, ops, grid)
    assert_gemm_close(got, ref, seed=seed,
                      label=f"{transa}{transb} m={m} n={n} k={k} alpha={alpha} beta={beta} pad={pad}")


# --------------------------------------------------------------------------------------
# Module API
# --------------------------------------------------------------------------------------

def _problem(math_mode: MathMode = MathMode.FP32, **kw) -> GemmProblem:
    fields = dict(cc=(9, 0), math_mode=math_mode, transa="T", transb="N", m=7, n=5, k=3,
                  a_ptr=4, lda=3, b_ptr=8, ldb=1001, c_ptr=12, ldc=7)
    fields.update(kw)
    return GemmProblem(**fields)


def test_registry_rows():
    assert set(PAIRS) == {("N", "N"), ("N", "T"), ("T", "N"), ("T", "T")}
    for (ta, tb), spec in SPECS.items():
        assert spec.name == f"sgemm_general_{ta.lower()}{tb.lower()}_{general.BM}x{general.BN}x{general.BK}_2s_a4"
        assert spec.block == general.BLOCK == (general.THREADS, 1, 1)
        assert spec.launch_bounds == general.LAUNCH_BOUNDS
    assert dispatcher(SPECS[("T", "N")]) is dispatcher(SPECS[("T", "N")])
    assert dispatcher(SPECS[("N", "T")]) is not dispatcher(SPECS[("T", "N")])


def test_can_implement_accepts_every_fp32_problem():
    # Misaligned pointers, odd leading dimensions, tiny and huge shapes: all accepted.
    for kw in ({}, dict(a_ptr=6, lda=1, m=1, n=1, k=1), dict(m=2**31 - 1, n=1, k=1, ldc=2**31 - 1),
               dict(n=2**31 - 1, m=1, ldc=1), dict(transa="N", transb="T", cc=(8, 0))):
        p = _problem(**kw)
        assert SPECS[(p.transa, p.transb)].can_implement(p) is None, kw


def test_can_implement_refuses_tf32_with_a_reason():
    reason = SPECS[("T", "N")].can_implement(_problem(MathMode.TF32))
    assert isinstance(reason, str) and "TF32" in reason and "FP32" in reason


def test_grid_keeps_y_and_z_under_65535_and_covers_every_tile():
    assert general.grid(1, 1) == (1, 1, 1)
    assert general.grid(general.BM + 1, general.BN + 1) == (2, 2, 1)
    for n in (65535 * general.BN, 65535 * general.BN + 1, 2**31 - 1):
        n_tiles = -(-n // general.BN)
        gx, gy, gz = general.grid(3, n)
        assert gx == 1 and gy <= 65535 and gz <= 65535, n
        assert gy * gz >= n_tiles and gy * (gz - 1) < n_tiles, n  # no fully idle layer
    gx, gy, gz = general.grid(2**31 - 1, 1)
    assert gx == -(-(2**31 - 1) // general.BM) and gx < 2**31 and (gy, gz) == (1, 1)


# --------------------------------------------------------------------------------------
# Simulator-sized cases (also run on a GPU, where they are cheap)
# --------------------------------------------------------------------------------------

# Every pair at one shape with M, N and K tails (3 K slices, the last partial), padded
# leading dimensions, and the four alpha/beta corners spread over the pairs.
@pytest.mark.parametrize("pair,alpha,beta", [
    (("N", "N"), 1.0, 0.0), (("N", "T"), -1.5, 0.5), (("T", "N"), 1.0, 1.0), (("T", "T"), -1.5, 0.0),
], ids=lambda v: "".join(v) if isinstance(v, tuple) else str(v))
def test_every_pair_with_tails(pair, alpha, beta):
    _check(*pair, 67, 33, 37, alpha, beta, pad=(1, 2, 3))


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("beta", BETAS)
def test_alpha_beta(alpha, beta):
    _check("T", "N", 5, 3, 7, alpha, beta, pad=(2, 1, 3))


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "".join(p))
def test_one_by_one(pair):
    _check(*pair, 1, 1, 1, -1.5, 0.5)


@pytest.mark.parametrize("case", [
    # (transa, transb, m, n, k, alpha, beta, pad)
    ("N", "N", general.BM, general.BN, 2 * general.BK, -1.5, 0.5, (0, 0, 0)),  # whole tiles
    ("N", "T", general.BM + 1, general.BN + 1, general.BK + 1, 1.0, 0.0, (0, 0, 0)),  # tile + 1
    ("T", "T", general.BM - 1, general.BN - 1, general.BK - 1, -1.5, 1.0, (0, 0, 0)),  # tile - 1
    ("T", "N", 7, 5, 33, 1.0, 0.5, (9, 17, 30)),  # odd sizes, wide padding
    ("N", "T", 3, 2, 0, -1.5, 0.5, (0, 0, 1)),  # k == 0: C = beta * C, A and B unread
], ids=["whole-tiles", "tile+1", "tile-1", "odd-padded", "k0"])
def test_shape_classes(case):
    _check(*case)


@pytest.mark.parametrize("grid_yz", [(1, 3), (2, 2)], ids=["1x3", "2x2-one-spare"])
def test_n_tiles_over_y_and_z(grid_yz):
    # 3 N tiles numbered across y and z, as grid() does past 65535 * BN columns; with a
    # 2 x 2 layout the fourth block has no tile and must leave C alone.
    _check("N", "T", 3, 2 * general.BN + 2, 5, -1.5, 0.5, pad=(0, 1, 2), grid=(1, *grid_yz))


# --------------------------------------------------------------------------------------
# Real sizes (GPU only)
# --------------------------------------------------------------------------------------

GPU_SHAPES = [
    # (m, n, k, pad)
    (1024, 512, 256, (0, 0, 0)),
    (1025, 513, 257, (0, 0, 0)),
    (1023, 511, 255, (3, 1, 2)),
    (777, 333, 1999, (5, 3, 7)),
    (1, 3001, 129, (0, 0, 0)),
    (2049, 1, 1025, (1, 0, 0)),
    (3000, 2000, 700, (11, 13, 17)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "".join(p))
@pytest.mark.parametrize("shape_index", range(len(GPU_SHAPES)))
def test_gpu_sizes(pair, shape_index):
    m, n, k, pad = GPU_SHAPES[shape_index]
    combos = [(a, b) for a in ALPHAS for b in BETAS]
    alpha, beta = combos[(shape_index + PAIRS.index(pair)) % len(combos)]
    _check(*pair, m, n, k, alpha, beta, pad)


@pytest.mark.gpu
@pytest.mark.parametrize("pair", [("N", "N"), ("T", "T")], ids=lambda p: "".join(p))
def test_gpu_n_beyond_grid_y_limit(pair):
    # More N tiles than gridDim.y may hold: they spill into a second z layer.
    n = general.MAX_GRID_Y * general.BN + 77
    _check(*pair, 2, n, 3, -1.5, 0.5)


@pytest.mark.gpu
@pytest.mark.parametrize("pair", [("N", "T"), ("T", "N")], ids=lambda p: "".join(p))
def test_gpu_offsets_past_2_31(pair):
    """Leading dimensions near 2**30 with 3 columns: the last column starts past 2**31."""
    transa, transb = pair
    m = n = k = 3
    ld = 2**30 + 3
    extent = 2 * ld + 3  # (cols - 1) * ld + rows for every operand
    free, _ = cuda.current_context().get_memory_info()
    if free < 3 * 4 * extent + (1 << 30):
        pytest.skip(f"needs {3 * 4 * extent / 2**30:.0f} GiB of free device memory")
    seed = _seed("offsets", pair)
    rng = np.random.default_rng(seed)
    small = make_operands(rng, transa, transb, m, n, k, nan_c=False)  # dense, ld = rows
    buffers = []
    for flat, rows in ((small.A, small.lda), (small.B, small.ldb), (small.C, small.ldc)):
        dev = cuda.device_array(extent, dtype=np.float32)
        for col in range(3):
            column = np.ascontiguousarray(flat[col * rows:(col + 1) * rows])
            dev[col * ld:col * ld + rows].copy_to_device(column)
        buffers.append(dev)
    d_a, d_b, d_c = buffers
    alpha, beta = -1.5, 0.5
    dispatcher(SPECS[(transa, transb)])[general.grid(m, n), general.BLOCK](
        np.int32(m), np.int32(n), np.int32(k), np.float32(alpha), d_a, np.int32(ld),
        d_b, np.int32(ld), np.float32(beta), d_c, np.int32(ld))
    got = np.concatenate([d_c[col * ld:col * ld + m].copy_to_host() for col in range(n)])
    ref = reference_gemm(transa, transb, m, n, k, alpha, small.A, small.lda, small.B, small.ldb,
                         beta, small.C, small.ldc)
    assert_gemm_close(got, ref, seed=seed, label=f"{transa}{transb} ld={ld}")


# --------------------------------------------------------------------------------------
# Static checks of the generated code (no GPU needed)
# --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sm90_ptx() -> dict[str, str]:
    """PTX text of the NT and TN variants for sm_90 (between them every copy path: A along m
    and along k, B along k and along n), compiled outside the simulator."""
    return {"".join(by_name(name).pair): ptx_of(name, cc) for name, cc in PTX_NEEDS["test_general"]()}


@pytest.mark.ptx
def test_ptx_is_strict_fp32_simt_without_local_memory(sm90_ptx):
    assert set(sm90_ptx) == {"NT", "TN"}
    for pair, ptx in sm90_ptx.items():
        # Local memory would mean the accumulators or fragments left the registers.
        assert "ld.local" not in ptx and "st.local" not in ptx, pair
        # No tensor cores and no TF32 anywhere: the product is plain FP32 FMA.
        assert not re.search(r"\bw?mma\b|\bwgmma|\.tf32|cvt\.rna\.tf32", ptx), pair
        assert "fma.rn.f32" in ptx, pair
        # No flush-to-zero (what fastmath would add): denormals must survive.
        assert ".ftz" not in ptx, pair
        # The fragment reads are the 128-bit shared loads the layout was built for.
        assert "ld.shared.v4.f32" in ptx, pair
        # No 64-bit division and no calls, which a separately linked cubin would keep as
        # ABI calls with a stack frame (see test_ptx_static.py).
        assert not re.search(r"\b(div|rem)\.[su]64\b", ptx), pair
        assert not re.search(r"^\s*call", ptx, re.MULTILINE), pair



@pytest.mark.ptx
def test_sass_has_no_spills_and_fits_two_blocks_per_sm(sm90_ptx, tmp_path):
    max_regs = 65536 // (general.LAUNCH_BOUNDS[0] * general.LAUNCH_BOUNDS[1])
    for pair, ptx in sm90_ptx.items():
        report = ptxas_report(ptx, tmp_path / f"{pair}.ptx")
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in report, (pair, report)
        regs = int(re.search(r"Used (\d+) registers", report).group(1))
        assert regs <= max_regs, (pair, regs)
