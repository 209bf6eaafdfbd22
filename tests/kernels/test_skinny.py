"""The skinny kernels (:mod:`sgblas.kernels.skinny`): m or n at most 16.

* Each of the eight variants (transpose pair x small side; the dot loop where the large
  operand is contiguous along k, the axpy loop where it is contiguous along the large output
  dimension) launched directly under the simulator (or on a GPU): small sides 1, 3, 9 and 16
  (a row block past P skipped, a partial one, two reduction rounds), tails along Q and k,
  several shared pieces of S, one split (writing C with alpha and beta; beta == 0 on a NaN C)
  and several (partials into a workspace, added here in the reduction kernel's order).
* Through ``sgblas.sgemm``: the 16-byte variant of each pair and small side run by name
  (``candidate="NAME/sS"``), in one launch and split, and the result is right; ``explain``
  lists it among the candidates; a tight ``lda = 3`` of a 3 x k A does not stop it.
* The guard: small side above 16, a misaligned large operand, its leading dimension.
* Static: the PTX for sm_90 of a dot and an axpy variant has no local memory, 16-byte global
  and shared loads, ``cp.async`` and no flush-to-zero or tensor-core instruction, and the dot
  variant reads tid again after its prologue (compiled by the session's background compile,
  ``tests/helpers.py``: the simulator cannot compile).

Every case checks all of C against a float64 reference with a K-aware tolerance, and C's
padding bit for bit.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from numba import cuda

from helpers import PTX_NEEDS
from helpers import ptx as ptx_of
import sgblas
from sgblas import Status
from sgblas.enums import MathMode
from sgblas.kernels import reduce, skinny
from sgblas.kernels.problem import GemmProblem
from sgblas.kernels.spec import GEMM_KERNELS, by_name
from sgblas.runtime.loader import dispatcher
from sgblas.testing import GemmCase
from tests.reference import assert_gemm_close, make_operands, reference_gemm

#: The 16-byte rows by (transa, transb, small side), and every row by (..., alignment class).
CONFIGS = {(cfg.transa, cfg.transb, cfg.small): cfg for cfg in skinny.MANIFEST if cfg.align == 16}
ALL_CONFIGS = {(cfg.transa, cfg.transb, cfg.small, cfg.align): cfg for cfg in skinny.MANIFEST}


def _seed(*parts: object) -> int:
    return zlib.crc32(repr(parts).encode())


def _run(cfg, m, n, k, alpha, beta, splits, ops) -> np.ndarray:
    """Launch ``cfg``'s kernel: one split writes C, several write partials that are then added
    here in the reduction kernel's order (``reduce.order``) with beta * C."""
    granule = 4
    chunk = -(-(-(-k // splits)) // granule) * granule
    grid = skinny.grid_for(cfg, m, n, splits)
    kern = _kernel(cfg)[grid, (cfg.THREADS, 1, 1)]
    d_a, d_b = cuda.to_device(ops.A), cuda.to_device(ops.B)
    if cfg.align == 4:  # the large operand starts 4 bytes past a 16-byte boundary
        moved = cuda.to_device(np.concatenate([np.float32([np.nan]), ops.B if cfg.large == "B" else ops.A]))[1:]
        d_a, d_b = (d_a, moved) if cfg.large == "B" else (moved, d_b)
    no_sem = cuda.to_device(np.empty(0, np.int32))  # the ABI's semaphores: unused by skinny kernels
    if splits == 1:
        d_c = cuda.to_device(ops.C)
        kern(np.int32(m), np.int32(n), np.int32(k), np.float32(alpha), d_a, np.int32(ops.lda), d_b,
             np.int32(ops.ldb), np.float32(beta), d_c, np.int32(ops.ldc), np.int32(chunk), no_sem)
        return d_c.copy_to_host()
    ldw = reduce.padded_rows(m)
    d_w = cuda.to_device(np.full(splits * ldw * n, np.nan, np.float32))
    kern(np.int32(m), np.int32(n), np.int32(k), np.float32(alpha), d_a, np.int32(ops.lda), d_b,
         np.int32(ops.ldb), np.float32(0.0), d_w, np.int32(ldw), np.int32(chunk), no_sem)
    w = d_w.copy_to_host().reshape(splits, n, ldw)[:, :, :m]
    total = reduce.fixed_order_sum(list(w))
    got = ops.C.copy()
    for j in range(n):
        col = got[j * ops.ldc: j * ops.ldc + m]
        got[j * ops.ldc: j * ops.ldc + m] = total[j] + np.float32(beta) * col if beta else total[j]
    return got


def _kernel(cfg):
    """The registry's variant of ``cfg``."""
    return dispatcher(by_name(cfg.name()))


def _shape(cfg, p: int, k: int) -> tuple[int, int, int]:
    """m, n, k with the small side p and a large side that leaves a tail past whole CTAs."""
    q = cfg.QC + 5
    return (p, q, k) if cfg.small == "m" else (q, p, k)


#: (small side, k, splits, alpha, beta): see the module docstring.
CASES = [
    (3, 37, 1, 1.0, 0.0),
    (16, 150, 1, -1.5, 0.5),
    (9, 290, 3, 0.5, 2.0),
    (1, 70, 2, 2.0, 0.0),
]


def _variant_cases() -> list:
    """Every variant with the two cheap cases; the two long ones (several K tiles, a split of
    three) on one variant of each kind (dot, axpy) in each alignment class, since the
    simulator's time grows with k and CI has two cores. The ``gpu`` tests take every variant
    through every case. The 4-byte rows run at leading dimensions one past a multiple of 4 (the
    16-byte ones at multiples of 4); all but one of each loop in the ``slow`` set."""
    first_of_kind: dict[tuple[str, int], tuple] = {}
    for key in sorted(ALL_CONFIGS):
        first_of_kind.setdefault((ALL_CONFIGS[key].mode, key[3]), key)
    out = []
    for key in sorted(ALL_CONFIGS):
        for i, case in enumerate(CASES):
            if i in (0, 3) or key in first_of_kind.values():
                # A 4-byte row differs from its 16-byte row only in L's copies: one row of each
                # loop in the default run reaches them, the rest run in the slow set.
                slow = key[3] == 4 and key not in first_of_kind.values()
                out.append(pytest.param(key, *case, id=f"{ALL_CONFIGS[key].name()}-{i}",
                                        marks=pytest.mark.slow if slow else ()))
    return out


@pytest.mark.parametrize("key, small, k, splits, alpha, beta", _variant_cases())
def test_each_variant(key, small, k, splits, alpha, beta):
    _check_case(ALL_CONFIGS[key], small, k, splits, alpha, beta)


def _check_case(cfg, small, k, splits, alpha, beta):
    """``cfg``'s kernel at small side ``small`` against float64, C's padding untouched."""
    m, n, k = _shape(cfg, small, k)
    seed = _seed(cfg.name(), m, n, k, splits)
    rng = np.random.default_rng(seed)
    if cfg.align == 16:
        ops = make_operands(rng, cfg.transa, cfg.transb, m, n, k, (1, 2, 3), nan_c=(beta == 0.0), ld_multiple=4)
    else:  # leading dimensions one past a multiple of 4, and (in _run) L one float into its buffer
        rows = (m if cfg.transa == "N" else k, k if cfg.transb == "N" else n, m)
        pads = tuple((1 - r) % 4 or 4 for r in rows)
        ops = make_operands(rng, cfg.transa, cfg.transb, m, n, k, pads, nan_c=(beta == 0.0))
        assert (ops.ldb if cfg.large == "B" else ops.lda) % 4 == 1
    ref = reference_gemm(cfg.transa, cfg.transb, m, n, k, alpha, ops.A, ops.lda, ops.B, ops.ldb, beta,
                         ops.C, ops.ldc)
    got = _run(cfg, m, n, k, alpha, beta, splits, ops)
    assert_gemm_close(got, ref, seed=seed, label=f"{cfg.name()} m={m} n={n} k={k} splits={splits}")


def _explain(h, case):
    return sgblas.explain(h, case.ta, case.tb, case.m, case.n, case.k, case.dA, case.lda, case.dB, case.ldb,
                          case.dC, case.ldc)


def _by_name_cases() -> list:
    """Every pair with each small side; the default run takes m small in NN and TT and n small in
    NT and TN (each loop, dot and axpy, both splitting K and writing C in one launch), the slow set
    the rest."""
    out = []
    for ta, tb in [("N", "N"), ("N", "T"), ("T", "N"), ("T", "T")]:
        for small in ("m", "n"):
            slow = (small == "m") != (ta == tb)
            out.append(pytest.param(ta, tb, small, id=f"{small}-{ta}{tb}", marks=pytest.mark.slow if slow else ()))
    return out


@pytest.mark.parametrize("ta, tb, small", _by_name_cases())
def test_sgemm_runs_each_skinny_variant_by_name(ta, tb, small):
    """NN and TT split K in two (partials, then the reduction), NT and TN write C in one launch:
    each loop (dot, axpy) and each small side both ways."""
    m, n, k = (3, 200, 300) if small == "m" else (200, 3, 300)
    splits = 2 if ta == tb else 1
    name = f"{CONFIGS[(ta, tb, small)].name()}/s{splits}"
    case = GemmCase(_seed("api", ta, tb, small), ta, tb, m, n, k, ld_multiple=4)
    with sgblas.Handle() as h:
        assert name in dict(_explain(h, case).candidates)
        before = case.reset_c(nan=True)
        assert sgblas.sgemm(h, *case.args(1.25, 0.0), candidate=name) == Status.SUCCESS, sgblas.last_error_message()
        case.check(1.25, 0.0, C_before=before)


def test_a_tight_lda_of_three_is_fine():
    """3 x k A with lda = 3 (not a multiple of 4): only B, the large operand, is read by vectors."""
    m, n, k = 3, 70, 92
    name = f"{CONFIGS[('N', 'N', 'm')].name()}/s1"
    with sgblas.Handle() as h:
        case = GemmCase(_seed("lda3"), "N", "N", m, n, k)
        assert case.lda == 3 and case.ldb % 4 == 0
        explanation = _explain(h, case)
        assert name in dict(explanation.candidates), str(explanation)
        before = case.reset_c()
        assert sgblas.sgemm(h, *case.args(1.0, 1.0), candidate=name) == Status.SUCCESS, sgblas.last_error_message()
        case.check(1.0, 1.0, C_before=before)


BASE = 0x7F0000000000


def _problem(ta="N", tb="N", m=3, n=8192, k=8192, a=BASE, lda=None, b=BASE + 2**32, ldb=None):
    lda = lda if lda is not None else (m if ta == "N" else k)
    ldb = ldb if ldb is not None else (k if tb == "N" else n)
    return GemmProblem((9, 0), MathMode.FP32, ta, tb, m, n, k, a, lda, b, ldb, BASE + 2**33 + 4, m)


def test_guard_sentences_name_the_value():
    spec = by_name(CONFIGS[("N", "N", "m")].name())
    assert spec.can_implement(_problem()) is None  # lda = 3, C misaligned: neither is read by vectors
    assert "m=17 is above 16" in spec.can_implement(_problem(m=17))
    assert "B's address 0x7f0100000004 is not 16-byte aligned" in spec.can_implement(_problem(b=BASE + 2**32 + 4))
    assert "ldb=8193 is not a multiple of 4" in spec.can_implement(_problem(ldb=8193))
    narrow = by_name(ALL_CONFIGS[("N", "N", "m", 4)].name())
    assert narrow.can_implement(_problem(b=BASE + 2**32 + 4, ldb=8193)) is None  # any address and ld
    assert "m=17 is above 16" in narrow.can_implement(_problem(m=17))
    spec_n = by_name(CONFIGS[("T", "N", "n")].name())
    assert "A's address" in spec_n.can_implement(_problem("T", "N", m=8192, n=3, a=BASE + 8))
    assert spec_n.can_implement(_problem("T", "N", m=8192, n=3, b=BASE + 2**32 + 4, ldb=8195)) is None


def test_every_variant_is_registered_with_its_loop():
    names = {s.name for s in GEMM_KERNELS if s.role == "skinny"}
    assert names == {cfg.name() for cfg in skinny.MANIFEST} and len(names) == 16
    assert {by_name(cfg.name()).align for cfg in skinny.MANIFEST} == {16, 4}
    modes = {(cfg.transa, cfg.transb, cfg.small): cfg.mode for cfg in skinny.MANIFEST}
    assert modes[("N", "N", "m")] == "dot" and modes[("N", "N", "n")] == "axpy"
    assert modes[("N", "T", "m")] == "axpy" and modes[("T", "N", "n")] == "dot"


@pytest.mark.ptx
def test_ptx_for_sm90_streams_with_16_byte_loads_and_no_local_memory():
    targets = PTX_NEEDS["test_skinny"]()
    names = [name for name, _ in targets]
    assert names == [CONFIGS[("N", "N", "m")].name(), CONFIGS[("N", "N", "n")].name(), reduce.NAME]
    ptxs = {name: ptx_of(name, cc) for name, cc in targets}
    for name, ptx in ptxs.items():
        assert "ld.local" not in ptx and "st.local" not in ptx, f"{name} uses local memory"
        assert ".ftz" not in ptx, f"{name} flushes denormals"
        for bad in ("mma.sync", "wgmma", ".tf32"):
            assert bad not in ptx, f"{name} has {bad}"
    # dot and axpy stream L into their shared rings with 16-byte cp.async; the reduction loads
    # 16 bytes into registers.
    for name in names[:2]:
        assert "cp.async.cg.shared.global" in ptxs[name] and ", 16, " in ptxs[name], \
            f"{name} has no 16-byte cp.async"
    assert "ld.global.v4.f32" in ptxs[reduce.NAME], f"{reduce.NAME} has no 16-byte global load"
    for name in names[:2]:
        assert "ld.shared.v4.f32" in ptxs[name] and "cp.async.ca.shared.global" in ptxs[name]
        assert ptxs[name].count("fma.rn.f32") >= 256
    # The dot loop rebuilds its S-copy addresses and its epilogue's position from fresh reads of
    # tid (memory.tid_x_again), which the compiler may not fold into the first: held across the
    # K loop, those values spilled at the launch bound's 128 registers
    # (docs/history/tuning-ladder-5-runs-m-to-p.md, rung 39).
    assert ptxs[names[0]].count("%tid.x") >= 3, f"{names[0]} reads tid only once"


@pytest.mark.parametrize("cfg", [c for c in skinny.MANIFEST if c.align == 4], ids=lambda c: c.name())
def test_the_4_byte_rows_copy_l_four_bytes_at_a_time(cfg):
    """The generated text of a 4-byte row is its 16-byte row's with each copy of L split in four
    (one call of ``cp_async4x4``): no wider copy, as many copies of L as the 16-byte row's, and
    as many lines."""
    wide = next(c for c in skinny.MANIFEST if c.align == 16 and (c.transa, c.transb, c.small) ==
                (cfg.transa, cfg.transb, cfg.small))
    src, src16 = skinny.generate_source(cfg, cfg.name()), skinny.generate_source(wide, wide.name())
    assert "cp_async16(" not in src and "cp_async8(" not in src and "cp_async4(Lring" not in src
    assert src.count("cp_async4x4(Lring") == src16.count("cp_async16(Lring") > 0
    assert src.replace(cfg.name(), "K").count("\n") == src16.replace(wide.name(), "K").count("\n")
