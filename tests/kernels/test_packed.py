"""The packed variants (:mod:`sgblas.kernels.packed`) and their copy kernel (:mod:`sgblas.kernels.pack`).

* The copy, launched directly: D holds S's ``rows x cols`` bits with leading dimension
  ``packed_rows(rows)``, the rows between (``rows % 4`` of 0 to 3) exactly +0.0, every element of
  D written (it starts as NaN); S is read through an offset view that ends at its last element,
  and D is allocated at exactly ``cols * ldd``, so a read or write past either raises under the
  simulator. A grid with fewer columns than the matrix walks the rest by its grid stride.
* The registry row: its name, role, three launches, the workspace its two copies take (32 MiB at
  2048^3, whatever lda), and legality: any alignment of A, B and C, TN only, FP32 only, sm_80+,
  every dimension >= 1.
* Dispatch on an H200's properties: the packed row is a candidate, weighed by the cost model,
  wherever the workspace holds the copies, and passed over with the workspace's sentence where
  it does not; the other pairs refuse it; ``explain``'s note of a packed plan names the copies.
* The plan: three launches (A's copy, B's copy right after it in the workspace, the GEMM from
  the copies) with the arguments the copy and GEMM ABIs take; a pinned packed plan; and through
  ``sgblas.sgemm`` under the simulator, run by name (``candidate=``), against float64.
"""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest
from numba import cuda

from helpers import plan_handle
import sgblas
import sgblas.handle
from sgblas import Status
from sgblas.dispatch.plan import choose, plan_for, plan_named
from sgblas.enums import MathMode
from sgblas.kernels import abi, pack, packed
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.spec import GEMM_KERNELS, REGISTRY, by_name
from sgblas.runtime.device import DeviceProperties
from sgblas.runtime.loader import dispatcher
from sgblas.testing import as_matrix, column_major, matrix_mask
from tests.reference import C_PAD_BITS, assert_gemm_close, make_operands, reference_gemm

H200 = DeviceProperties(132, 2048, 32, 65536, 233472)
#: One SM: a small GPU for the other pairs' refusals.
ONE_SM = DeviceProperties(1, 2048, 32, 65536, 233472)
MIB = 1024 * 1024
WORKSPACE = 32 * MIB
BASE = 0x7F0000000000
PACKED = [s for s in GEMM_KERNELS if s.role == "packed"]
PACKED_TN = by_name("sgemm_packed_tn_128x128x16cs_2s_a16c4")
COPY = by_name(pack.NAME)


def _seed(*parts: object) -> int:
    return zlib.crc32(repr(parts).encode())


def _ceil4(x: int) -> int:
    return -(-x // 4) * 4


# --------------------------------------------------------------------------------------------
# the copy kernel, launched directly
# --------------------------------------------------------------------------------------------

def _run_copy(rows: int, cols: int, lds: int, offset: int, seed: int,
              grid: tuple[int, int, int] | None = None) -> None:
    rng = np.random.default_rng(seed)
    S = column_major(rng, rows, cols, lds)  # (cols - 1) * lds + rows elements, NaN padding
    S[0] = -0.0
    if S.size > 1:
        S[1] = np.float32(1e-40)  # subnormal: the copy moves bits, flushes nothing
    flat = np.concatenate([np.full(offset, np.nan, np.float32), S])
    ldd = pack.packed_rows(rows)
    d_s = cuda.to_device(flat)
    d_d = cuda.to_device(np.full(cols * ldd, np.nan, np.float32))
    dispatcher(COPY)[grid or pack.grid(rows, cols), pack.BLOCK](
        np.int32(rows), np.int32(cols), d_s[offset:], np.int32(lds), d_d, np.int32(ldd))
    got = d_d.copy_to_host()
    tag = f"seed={seed} rows={rows} cols={cols} lds={lds} ldd={ldd} offset={offset} grid={grid}"
    assert got.size == cols * ldd
    assert not np.isnan(got).any(), f"{tag}: {int(np.isnan(got).sum())} elements of D were not written"
    np.testing.assert_array_equal(as_matrix(got, rows, cols, ldd).view(np.uint32),
                                  as_matrix(S, rows, cols, lds).view(np.uint32), err_msg=tag)
    pad = got.reshape(cols, ldd)[:, rows:]
    assert (pad.view(np.uint32) == 0).all(), f"{tag}: padding rows are not +0.0: {pad}"
    np.testing.assert_array_equal(d_s.copy_to_host()[offset:].view(np.uint32), S.view(np.uint32),
                                  err_msg=f"{tag}: the source changed")


def test_the_copy_kernel_row():
    assert COPY in REGISTRY and COPY not in GEMM_KERNELS and COPY.role == "pack"
    assert COPY.abi is abi.PACK and [n for n, _ in abi.PACK.params] == ["rows", "cols", "S", "lds", "D", "ldd"]
    assert COPY.name == pack.NAME == "pack_cm_ld16_256x8_1s_a4" == packed.PACK_NAME
    assert COPY.block == pack.BLOCK == (pack.THREADS, 1, 1) and pack.BLOCK[0] % 32 == 0
    assert pack.ROWS_PER_CTA == pack.THREADS * pack.PER_THREAD
    assert COPY.grid(1027, 5, 0) == pack.grid(1027, 5)
    assert dispatcher(COPY) is dispatcher(COPY)


def test_packed_rows_round_up_to_4():
    assert [pack.packed_rows(r) for r in (0, 1, 2, 3, 4, 5, 7, 8, 2049, 2**31 - 4)] == \
        [0, 4, 4, 4, 4, 8, 8, 8, 2052, 2**31 - 4]


def test_grid_covers_the_padded_rows_and_caps_y_at_65535():
    per = pack.ROWS_PER_CTA
    assert pack.grid(1, 1) == (1, 1, 1)
    assert pack.grid(per, 3) == (1, 3, 1)
    assert pack.grid(per - 3, 3) == (1, 3, 1)   # per padded rows: one CTA
    assert pack.grid(per + 1, 3) == (2, 3, 1)   # per + 4 padded rows: two
    assert pack.grid(7, 65535) == (1, 65535, 1)
    assert pack.grid(7, 65536) == (1, 65535, 1)  # the grid-stride loop covers the rest
    assert pack.grid(2 * per + 1, 2**31 - 1) == (3, 65535, 1)
    gx, _, _ = pack.grid(2**31 - 4, 1)
    assert gx * pack.ROWS_PER_CTA >= 2**31 - 4 and gx < 2**31


@pytest.mark.parametrize("lds_pad", [0, 5])
@pytest.mark.parametrize("rows", [1, 6, 7, 8])  # rows % 4 == 1, 2, 3, 0
def test_copy_pads_each_column_to_a_multiple_of_4(rows, lds_pad):
    seed = _seed("copy", rows, lds_pad)
    _run_copy(rows, 3, rows + lds_pad, offset=1 + seed % 3, seed=seed)


def test_copy_of_rows_past_one_cta():
    # ROWS_PER_CTA + 3 rows: two CTAs along x, the second with 4 rows (3 of S, 1 of padding).
    rows = pack.ROWS_PER_CTA + 3
    _run_copy(rows, 2, rows + 3, offset=3, seed=_seed("copy", rows))


@pytest.mark.parametrize("grid", [(1, 1, 1), (1, 2, 1)])
def test_copy_column_grid_stride(grid):
    # Fewer CTAs along y than columns, as when cols exceeds 65535: each walks every gy-th column.
    _run_copy(9, 5, 10, offset=2, seed=_seed("stride", grid), grid=grid)


# --------------------------------------------------------------------------------------------
# the registry row
# --------------------------------------------------------------------------------------------

def problem(m, n, k, pair="TN", cc=(9, 0), lda=None, ldb=None, ldc=None, offset=0, mode=MathMode.FP32):
    ta, tb = pair
    lda = lda if lda is not None else (m if ta == "N" else k)
    ldb = ldb if ldb is not None else (k if tb == "N" else n)
    ldc = ldc if ldc is not None else m
    return GemmProblem(cc, mode, ta, tb, m, n, k, BASE + 4 * offset, lda, BASE + 2**34 + 4 * offset, ldb,
                       BASE + 2**35 + 4 * offset, ldc)


def test_the_packed_rows():
    assert PACKED == [PACKED_TN]
    assert PACKED_TN.config.c_stage and PACKED_TN.config.c_align == 4 and PACKED_TN.config.align == 16
    spec = PACKED_TN
    assert re.fullmatch(r"sgemm_packed_(nn|nt|tn|tt)_\d+x\d+x\d+cs_\ds_a16c4", spec.name), spec.name
    assert spec.role == "packed" and spec.launches == 3 and spec.pair == ("T", "N")
    assert spec.tile == (128, 128, 16) and spec.align == 16 and spec.config.c_align == 4
    assert spec.config.align == 16 and not spec.config.split_k and spec.abi is abi.GEMM
    assert spec.min_cc == (8, 0) and spec in REGISTRY
    # The 16-byte TN row it runs, but for C's accesses.
    simt = by_name("sgemm_simt_tn_128x128x16_2s_a16")
    assert spec.grid(300, 200, 100) == simt.grid(300, 200, 100)
    assert spec.blocks_per_sm == simt.blocks_per_sm and spec.block == simt.block
    # Before the general kernels, which stay last: the backstop.
    assert GEMM_KERNELS.index(spec) < len(GEMM_KERNELS) - 4
    assert all(s.name.startswith("sgemm_general_") for s in GEMM_KERNELS[-4:])


@pytest.mark.parametrize("m, n, k", [(2048, 2048, 2048), (130, 67, 33), (1, 1, 1), (5, 3, 4), (1000, 7, 2050),
                                     (4096, 512, 2049)])
def test_workspace_is_both_copies(m, n, k):
    want = 4 * (_ceil4(k) * m + _ceil4(k) * n)
    assert PACKED_TN.workspace(m, n, k) == want == packed.workspace_bytes(("T", "N"), m, n, k)
    (ra, ca, la), (rb, cb, lb) = packed.copies(("T", "N"), m, n, k)
    assert (ra, ca, la, rb, cb, lb) == (k, m, _ceil4(k), k, n, _ceil4(k))


def test_workspace_at_2048_cubed_is_the_default_32_mib():
    assert PACKED_TN.workspace(2048, 2048, 2048) == WORKSPACE
    assert PACKED_TN.workspace(2048, 2048, 2049) > WORKSPACE
    assert sgblas.handle.DEFAULT_WORKSPACE_BYTES == WORKSPACE
    # Stored shapes of the other pairs' operands (no packed row yet: the layout rule itself).
    assert packed.copies(("N", "T"), 130, 67, 33) == ((130, 33, 132), (67, 33, 68))


def test_can_implement_accepts_any_alignment():
    spec = PACKED_TN
    assert spec.can_implement(problem(2048, 2048, 2048)) is None
    assert spec.can_implement(problem(2048, 2048, 2048, lda=2049, ldb=2049, ldc=2049)) is None
    for offset in (1, 2, 3):
        assert spec.can_implement(problem(2048, 2048, 2048, lda=2051, ldb=2053, ldc=2055, offset=offset)) is None
    assert spec.can_implement(problem(130, 67, 33, lda=33, ldb=33, ldc=133, offset=1, cc=(0, 0))) is None
    assert spec.can_implement(problem(1, 1, 1, offset=1)) is None


def test_can_implement_refusals_name_the_value():
    spec = PACKED_TN
    for pair in ("NN", "NT", "TT"):
        reason = spec.can_implement(problem(2048, 2048, 2048, pair, offset=1))
        assert reason and f"transpose pair {pair}" in reason, reason
    reason = spec.can_implement(problem(2048, 2048, 2048, mode=MathMode.TF32))
    assert reason and "TF32" in reason, reason
    reason = spec.can_implement(problem(2048, 2048, 2048, cc=(7, 5)))
    assert reason and "sm_75" in reason, reason
    reason = spec.can_implement(problem(2048, 2048, 0))
    assert reason and "k=0" in reason, reason
    reason = spec.can_implement(problem(0, 2048, 16))
    assert reason and "m=0" in reason, reason
    # A copy's leading dimension would pass int32: k rows rounded up to 4.
    reason = spec.can_implement(problem(1, 1, 2**31 - 1, lda=2**31 - 1, ldb=2**31 - 1, ldc=1))
    assert reason and "A's copy" in reason and str(2**31) in reason, reason


# --------------------------------------------------------------------------------------------
# dispatch: a candidate where the workspace holds the copies
# --------------------------------------------------------------------------------------------

def chosen(p, props=H200, workspace=WORKSPACE):
    return choose(p, props, workspace)


@pytest.mark.parametrize("m, n, k, ld", [(2048, 2048, 2048, 2049), (2047, 2047, 2047, 2047), (3000, 3000, 3000, 3003),
                                         (130, 67, 33, 33)])
def test_the_packed_row_is_a_candidate_where_the_workspace_holds_its_copies(m, n, k, ld):
    p = problem(m, n, k, lda=ld, ldb=ld, ldc=m + 1, offset=1)
    need = PACKED_TN.workspace(m, n, k)
    for workspace in (need, 1 << 34):
        c = chosen(p, workspace=workspace)
        assert PACKED_TN.name in dict(c.ranking), [name for name, _ in c.ranking]
        assert c.ranking[0] == (c.candidate, c.predicted_s)  # the least predicted runs
        assert (c.spec is PACKED_TN) == (c.candidate == PACKED_TN.name)
    c = chosen(p, workspace=need - 4)
    assert c.spec is not PACKED_TN and PACKED_TN.name not in dict(c.ranking)
    assert dict(c.passed_over)[PACKED_TN.name] == f"it needs {need} bytes of workspace and the handle has {need - 4}"
    assert dict(chosen(p, workspace=0).passed_over)[PACKED_TN.name].endswith("the handle has 0")
    quick = choose(p, H200, need, quick=True)
    full = chosen(p, workspace=need)
    assert (quick.spec, quick.split, quick.candidate) == (full.spec, full.split, full.candidate)


def test_explains_note_of_a_packed_plan_names_the_copies():
    p = problem(2048, 2048, 2048, lda=2049, ldb=2049, ldc=2049)
    note = packed.describe(PACKED_TN, p)
    assert pack.NAME in note and f"{WORKSPACE} bytes" in note, note
    assert "lda=2049" in note and "lda=2048" in note, note  # the caller's and the copy's


@pytest.mark.parametrize("pair", ["NN", "NT", "TT"])
def test_other_pairs_never_pack(pair):
    for m, n, k, pad, offset in ((2048, 2048, 2048, 1, 0), (2048, 2048, 2048, 0, 1), (4096, 4096, 4096, 1, 1),
                                 (130, 67, 33, 0, 1)):
        ta, tb = pair
        p = problem(m, n, k, pair, lda=(m if ta == "N" else k) + pad, ldb=(k if tb == "N" else n) + pad,
                    ldc=m + pad, offset=offset)
        for props in (H200, ONE_SM):
            c = chosen(p, props)
            assert c.spec.role != "packed" and c.spec.pair == (ta, tb), c.spec.name
            assert f"transpose pair {pair}" in dict(c.refused)[PACKED_TN.name]


# --------------------------------------------------------------------------------------------
# the plan
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("programmatic", [False, True])
def test_the_plan_copies_a_then_b_then_multiplies_from_the_workspace(programmatic, monkeypatch):
    from sgblas.dispatch import plan as plans

    props = H200._replace(programmatic_launch=programmatic)
    kernels = {s.name: f"loaded {s.name}" for s in REGISTRY}
    ws = BASE + 2**36
    h = plan_handle(properties=props, _kernels=kernels, _stream=(None, 0, None), _context=0, workspace_ptr=ws)
    launched = []
    monkeypatch.setattr(plans, "launch", lambda kernel, grid, stream, args, after=False:
                        launched.append((kernel, grid, args, after)))
    m, n, k, lda, ldb, ldc = 130, 67, 33, 35, 37, 133
    a, b, c = BASE + 4, BASE + 2**34 + 4, BASE + 2**35 + 4
    plan = plans.make_plan(h, PACKED_TN, None, m, n, k, c, ldc)
    assert plan.role == "packed" and plan.spec is PACKED_TN and plan.kernel == f"loaded {PACKED_TN.name}"
    assert plan.pack == f"loaded {pack.NAME}" and plan.splits == 1 and plan.after is programmatic
    assert plan.grid == PACKED_TN.grid(m, n, k)
    assert plan.copies == ((33, 130, 36, pack.grid(33, 130)), (33, 67, 36, pack.grid(33, 67)))
    a_ext, b_ext, c_ext = (m - 1) * lda + k, (n - 1) * ldb + k, (n - 1) * ldc + m
    plans.execute(h, plan, m, n, k, -1.25, a, a_ext, lda, b, b_ext, ldb, 0.75, c, c_ext, ldc)
    wb = ws + 4 * 36 * 130
    assert launched == [
        (f"loaded {pack.NAME}", pack.grid(33, 130), (33, 130, a, a_ext, 35, ws, 36 * 130, 36), programmatic),
        (f"loaded {pack.NAME}", pack.grid(33, 67), (33, 67, b, b_ext, 37, wb, 36 * 67, 36), programmatic),
        (f"loaded {PACKED_TN.name}", PACKED_TN.grid(m, n, k),
         (m, n, k, -1.25, ws, 36 * 130, 36, wb, 36 * 67, 36, 0.75, c, c_ext, ldc), programmatic),
    ]
    # B's copy is 16-byte aligned and both end within the workspace the row asks for.
    assert (wb - ws) % 16 == 0 and wb + 4 * 36 * 67 - ws == PACKED_TN.workspace(m, n, k)


def test_a_pinned_packed_plan_on_the_simulators_device():
    """Pinning the packed row gives the handle the packed plan for that shape class, whatever
    the cost model would choose; later calls of the class run it."""
    rng = np.random.default_rng(_seed("pin"))
    m, n, k = 130, 67, 33
    ops = make_operands(rng, "T", "N", m, n, k, (0, 0, 3))
    dA, dB, dC = (cuda.to_device(x) for x in (ops.A, ops.B, ops.C))
    with sgblas.Handle() as h:
        explanation = sgblas.explain(h, "T", "N", m, n, k, dA, ops.lda, dB, ops.ldb, dC, ops.ldc)
        assert PACKED_TN.name in dict(explanation.candidates), str(explanation)
        ptrs = [x._ary.ctypes.data for x in (dA, dB, dC)]
        args = ("T", "N", m, n, k, True, ptrs[0], ops.lda, ptrs[1], ops.ldb, ptrs[2], ops.ldc)
        plan = plan_for(h, *args, pin=PACKED_TN)
        assert plan.spec is PACKED_TN and plan.pack is h._kernels[pack.NAME]
        assert plan_for(h, *args) is plan


# --------------------------------------------------------------------------------------------
# through sgblas.sgemm under the simulator
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("beta", [0.0, 0.75])
@pytest.mark.parametrize("m, n", [
    (67, 13),
    pytest.param(130, 67, marks=pytest.mark.slow),
], ids=["one-tile", "two-tiles"])
def test_sgemm_runs_the_packed_row_by_name(m, n, beta):
    """TN m x n x 33 (three K steps: the main loop runs), lda = ldb = 33 (one past a power of
    two), ldc = m + 3, every pointer one element into a buffer that ends at its matrix's last
    element, the packed row run by name (one tile; two in the slow set). C's padding, and the
    element before C, keep their bits; beta == 0 never reads C's NaNs."""
    k, alpha = 33, -1.25
    seed = _seed("sgemm", beta) if (m, n) == (130, 67) else _seed("sgemm", m, n, beta)
    ops = make_operands(np.random.default_rng(seed), "T", "N", m, n, k, (0, 0, 3), nan_c=(beta == 0.0))
    assert (ops.lda, ops.ldb, ops.ldc) == (33, 33, m + 3)
    lead = np.array([np.float32(7.5)], np.float32)
    dA, dB, dC = (cuda.to_device(np.concatenate([lead, x])) for x in (ops.A, ops.B, ops.C))
    A, B, C = dA[1:], dB[1:], dC[1:]
    assert all(x._ary.ctypes.data % 16 for x in (A, B, C)), "an operand ended up 16-byte aligned"
    label = f"TN m={m} n={n} k={k} lda={ops.lda} ldb={ops.ldb} ldc={ops.ldc} alpha={alpha} beta={beta}"
    with sgblas.Handle() as h:
        explanation = sgblas.explain(h, "T", "N", m, n, k, A, ops.lda, B, ops.ldb, C, ops.ldc)
        assert PACKED_TN.name in dict(explanation.candidates), str(explanation)
        assert explanation.alignment == 4, "the caller's arrays allow only 4-byte accesses"
        ref = reference_gemm("T", "N", m, n, k, alpha, ops.A, ops.lda, ops.B, ops.ldb, beta, ops.C, ops.ldc)
        assert sgblas.sgemm(h, "T", "N", m, n, k, alpha, A, ops.lda, B, ops.ldb, beta, C, ops.ldc,
                            candidate=PACKED_TN.name) == Status.SUCCESS, sgblas.last_error_message()
        ran = plan_named(h, PACKED_TN.name, "T", "N", m, n, k, A._ary.ctypes.data, ops.lda, B._ary.ctypes.data,
                         ops.ldb, C._ary.ctypes.data, ops.ldc)
        assert ran.spec is PACKED_TN and ran.pack is h._kernels[pack.NAME], ran.spec.name
    got = dC.copy_to_host()
    assert got[0] == lead[0], f"seed={seed} {label}: the element before C was written"
    assert (got[1:].view(np.uint32)[~matrix_mask(got.size - 1, m, n, ops.ldc)] == C_PAD_BITS).all()
    assert_gemm_close(got[1:], ref, seed=seed, label=label)
    for buf, x in ((dA, ops.A), (dB, ops.B)):  # the caller's A and B are only read
        np.testing.assert_array_equal(buf.copy_to_host()[1:].view(np.uint32), x.view(np.uint32))



# --------------------------------------------------------------------------------------
# On a GPU: the real sizes, through sgblas.sgemm
# --------------------------------------------------------------------------------------

def _offset_device(buf: np.ndarray, offset: int):
    """``buf`` on the device, as a view ``offset`` elements into an allocation (NaN before it)
    that ends at its last element."""
    lead = np.full(offset, np.nan, np.float32)
    return cuda.to_device(np.concatenate([lead, buf]))[offset:]


def _pointer(d) -> int:
    return d.device_ctypes_pointer.value


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(256, 384, 128), (257, 383, 129), (255, 385, 127),  # tiles, +-1
                                     (1, 257, 300), (257, 1, 300), (300, 200, 1),  # ones
                                     (1001, 999, 333), (517, 263, 2049)])  # odd, long K
def test_packed_row_real_sizes(m, n, k):
    """The packed row pinned for each shape class (leading dimensions padded by 1-3, pointers
    offset by 1-3 elements), alpha/beta with C poisoned for beta == 0: right against float64, C's
    padding untouched."""
    for i, (alpha, beta) in enumerate(((1.0, 0.0), (-1.25, 0.75))):
        pads, offsets = ((1, 2, 3), (1, 2, 3)) if i == 0 else ((3, 1, 2), (2, 3, 1))
        seed = _seed("gpu", m, n, k, alpha, beta)
        ops = make_operands(np.random.default_rng(seed), "T", "N", m, n, k, pads, beta == 0.0)
        dA, dB, dC = (_offset_device(x, o) for x, o in zip((ops.A, ops.B, ops.C), offsets))
        label = f"TN m={m} n={n} k={k} lda={ops.lda} ldb={ops.ldb} ldc={ops.ldc} offsets={offsets} beta={beta}"
        with sgblas.Handle() as h:
            plan = plan_for(h, "T", "N", m, n, k, True, _pointer(dA), ops.lda, _pointer(dB), ops.ldb,
                            _pointer(dC), ops.ldc, pin=PACKED_TN)
            assert plan is not None and plan.spec is PACKED_TN, label
            assert sgblas.sgemm(h, "T", "N", m, n, k, alpha, dA, ops.lda, dB, ops.ldb, beta, dC, ops.ldc) \
                == Status.SUCCESS, sgblas.last_error_message()
            cuda.synchronize()
        ref = reference_gemm("T", "N", m, n, k, alpha, ops.A, ops.lda, ops.B, ops.ldb, beta, ops.C, ops.ldc)
        assert_gemm_close(dC.copy_to_host(), ref, seed=seed, label=label)


@pytest.mark.gpu
def test_2048_cubed_padded_by_one_packs_and_too_little_workspace_does_not():
    """2048^3 TN with every leading dimension 2049 on the device itself: the packed row, run by
    name, fits the default 32 MiB workspace, is right and repeats to the same bits; with 16
    bytes less dispatch passes it over, says why, runs a 4-byte row, and is right too."""
    m = n = k = 2048
    seed = _seed("gpu 2048")
    ops = make_operands(np.random.default_rng(seed), "T", "N", m, n, k, (1, 1, 1), True)
    dA, dB = cuda.to_device(ops.A), cuda.to_device(ops.B)
    ref = reference_gemm("T", "N", m, n, k, 1.0, ops.A, ops.lda, ops.B, ops.ldb, 0.0, ops.C, ops.ldc)
    results = {}
    for workspace in (WORKSPACE, WORKSPACE - 16):
        with sgblas.Handle(workspace_bytes=workspace) as h:
            dC = cuda.to_device(ops.C)
            explanation = sgblas.explain(h, "T", "N", m, n, k, dA, ops.lda, dB, ops.ldb, dC, ops.ldc)
            name = PACKED_TN.name if workspace == WORKSPACE else None
            for _ in range(2):
                assert sgblas.sgemm(h, "T", "N", m, n, k, 1.0, dA, ops.lda, dB, ops.ldb, 0.0, dC, ops.ldc,
                                    candidate=name) == Status.SUCCESS, sgblas.last_error_message()
                got = dC.copy_to_host()
                assert_gemm_close(got, ref, seed=seed, label=f"2048^3 TN ld 2049 workspace {workspace}")
                results.setdefault(workspace, []).append(got.view(np.uint32))
        if workspace == WORKSPACE:
            assert PACKED_TN.name in dict(explanation.candidates), str(explanation)
        else:
            assert explanation.kernel != PACKED_TN.name and explanation.alignment == 4, str(explanation)
            assert f"it needs {WORKSPACE} bytes of workspace and the handle has {workspace}" \
                == dict(explanation.passed_over)[PACKED_TN.name]
    np.testing.assert_array_equal(*results[WORKSPACE], err_msg="two runs of the packed call differ")
