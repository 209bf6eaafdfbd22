"""Split-K on the CPU (the CUDA simulator runs the real kernels; on a GPU these run there too).

* The fixed-order reduction, launched directly: C is bit for bit the float32 sum of the
  partials in the order ``reduce.order`` gives (chains of 8 in split order, then the chains'
  sums in order; partials of very different magnitudes, so another order would give other
  bits), for split counts that exercise its four-at-a-time loop, its remainder and several
  chains, rows in whole 16-byte groups and the partial group at row m, C
  accessed by vectors or element by element; beta == 0 never reads C (NaN there stays out);
  C's padding rows are never written.
* Split-K calls through ``sgblas.sgemm`` for every transpose pair, each pair's 128 x 128 slice
  kernel run by name (``candidate="NAME/sS"``) with the candidates' least slice lowered so that
  tiny problems split (the simulator runs a 128 x 128 tile in seconds): the result against
  float64, beta == 0 on a NaN C, alpha and beta nontrivial, ``explain`` listing the candidate.
* The workspace's limits: a handle with too little workspace runs a kernel that needs none, and
  ``explain`` says how many bytes the split variant needed; a workspace for exactly three
  partials offers no more, and a pinned split stays within it; ``set_workspace`` forgets the
  plans; k == 0 and alpha == 0 still take the scale kernel.
* Every other slice kernel, pinned at one tile per slice, and a tail plan run by name on a
  one-SM device, its rectangle split; the ``slow`` set runs them at the sanitizer script's
  larger shapes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import operator
import re
import zlib

import numpy as np
import pytest
from numba import cuda

import sgblas
from sgblas import Status
from sgblas.dispatch import candidates
from sgblas.dispatch.plan import plan_for, plan_named
from sgblas.kernels import reduce, splitk
from sgblas.kernels.spec import GEMM_KERNELS, REGISTRY, SCALE_KERNEL, SIMT_MANIFEST, by_name
from sgblas.runtime.loader import dispatcher
from sgblas.testing import GemmCase

PAIRS = (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T"))
#: Each pair's slice kernel that the calls through sgemm run by name: the largest tile, with the
#: 8 x 8 thread tile, of the widest alignment class.
SPLIT_SPECS = {}
for _spec in sorted((s for s in GEMM_KERNELS if s.role == "splitk"),
                    key=lambda s: (-s.tile[0] * s.tile[1], (s.config.TM, s.config.TN) != (8, 8), -s.align)):
    SPLIT_SPECS.setdefault(_spec.pair, _spec)


def _seed(*parts: object) -> int:
    return zlib.crc32(repr(parts).encode())


# --------------------------------------------------------------------------------------------
# the reduction, launched directly
# --------------------------------------------------------------------------------------------

def _partials(rng, splits: int, m: int, n: int, ldw: int) -> np.ndarray:
    """Partials whose magnitudes span eight decades, NaN in the rows past m."""
    w = np.full((splits, n, ldw), np.nan, np.float32)
    mags = (10.0 ** rng.uniform(-4, 4, size=(splits, n, m))).astype(np.float32)
    w[:, :, :m] = rng.standard_normal((splits, n, m)).astype(np.float32) * mags
    return w


def _in_order(w: np.ndarray, m: int, order) -> np.ndarray:
    """The float32 sum of the partials in ``order``, one addition at a time: (n, m)."""
    order = list(order)
    acc = w[order[0], :, :m].copy()
    for s in order[1:]:
        acc = acc + w[s, :, :m]  # float32 + float32 rounds to float32, as the kernel's FADD
    return acc


def _in_fixed_order(w: np.ndarray, m: int) -> np.ndarray:
    """The reduction's sum, as the host's model of it adds the partials."""
    return reduce.fixed_order_sum([w[s, :, :m] for s in range(w.shape[0])])


def test_the_order_is_chains_of_eight_in_runs_of_four():
    assert reduce.order(1) == [[range(0, 1)]]
    assert reduce.order(8) == [[range(0, 8)]]
    assert reduce.order(20) == [[range(0, 8), range(8, 16), range(16, 20)]]
    assert reduce.order(70) == [[range(0, 8), range(8, 16), range(16, 24), range(24, 32)],
                                [range(32, 40), range(40, 48), range(48, 56), range(56, 64)],
                                [range(64, 70)]]
    # Every partial once, in ascending order.
    for splits in (1, 7, 33, 128):
        assert [s for run in reduce.order(splits) for g in run for s in g] == list(range(splits))


def test_the_host_model_adds_in_that_order():
    # Scalars chosen so that each bracketing rounds differently: 1 + 2**-24 is lost alone.
    tiny, one = np.float32(2.0**-24), np.float32(1.0)
    assert reduce.fixed_order_sum([one] + [tiny] * 7) == one  # one chain: each tiny is lost
    # The second group adds its small terms first: 8 + 2**-19, where one chain keeps 8.
    got = reduce.fixed_order_sum([one] * 8 + [np.float32(2.0**-22)] * 8)
    assert got == np.float32(8.0 + 2.0**-19) and np.float32(8.0) + np.float32(2.0**-22) == np.float32(8.0)
    partials = [np.float32(v) for v in np.random.default_rng(7).standard_normal(45)]
    chain = functools.partial(functools.reduce, operator.add)  # left to right
    want = ((chain(partials[0:8]) + chain(partials[8:16]) + chain(partials[16:24]) + chain(partials[24:32]))
            + (chain(partials[32:40]) + chain(partials[40:45])))
    assert reduce.fixed_order_sum(partials) == want


def _run_reduce(m: int, n: int, w: np.ndarray, ldw: int, beta: float, c: np.ndarray, ldc: int,
                c_vec: int) -> np.ndarray:
    spec = by_name(reduce.NAME)
    d_w, d_c = cuda.to_device(w.reshape(-1)), cuda.to_device(c)
    dispatcher(spec)[reduce.grid(m, n), reduce.BLOCK](
        np.int32(m), np.int32(n), np.int32(w.shape[0]), d_w, np.int32(ldw), np.float32(beta), d_c,
        np.int32(ldc), np.int32(c_vec))
    return d_c.copy_to_host()


@pytest.mark.parametrize("splits", [1, 2, 5, 9, 17, 22, 41])
@pytest.mark.parametrize("m, c_vec", [(8, 1), (7, 0), (13, 1), (1, 0)])
def test_reduction_sums_in_split_order_bit_for_bit(splits, m, c_vec):
    n, seed = 5, _seed("order", splits, m, c_vec)
    rng = np.random.default_rng(seed)
    ldw = reduce.padded_rows(m)
    ldc = ldw + 4 if c_vec else m + 3
    w = _partials(rng, splits, m, n, ldw)
    c = np.full(ldc * n, np.nan, np.float32)  # beta == 0: C's NaNs must not leak
    got = _run_reduce(m, n, w, ldw, 0.0, c, ldc, c_vec).reshape(n, ldc)
    want = _in_fixed_order(w, m)
    np.testing.assert_array_equal(got[:, :m].view(np.uint32), want.view(np.uint32),
                                  err_msg=f"seed={seed}: not the sum in the fixed order")
    assert np.isnan(got[:, m:]).all(), f"seed={seed}: the reduction wrote C's padding rows"
    if splits >= 3:
        # The data make the order visible: summing backwards gives other bits somewhere.
        backwards = _in_order(w, m, reversed(range(splits)))
        assert (backwards.view(np.uint32) != want.view(np.uint32)).any()
    if splits > reduce.GROUP + 1:  # (with 9, the second chain's one partial ends the first's)
        # ... and so does one chain over all partials.
        chain = _in_order(w, m, range(splits))
        assert (chain.view(np.uint32) != want.view(np.uint32)).any()
    if splits > reduce.GROUP * reduce.RUN + 1:
        # ... and two levels, without the runs.
        sums = [_in_order(w, m, g) for run in reduce.order(splits) for g in run]
        two = _in_order(np.stack(sums), m, range(len(sums)))
        assert (two.view(np.uint32) != want.view(np.uint32)).any()


@pytest.mark.parametrize("c_vec", [0, 1])
def test_reduction_applies_beta_to_c(c_vec):
    m, n, splits, beta = 10, 3, 6, -0.75
    seed = _seed("beta", c_vec)
    rng = np.random.default_rng(seed)
    ldw = reduce.padded_rows(m)
    ldc = 16
    w = _partials(rng, splits, m, n, ldw)
    c = rng.standard_normal(ldc * n).astype(np.float32)
    got = _run_reduce(m, n, w, ldw, beta, c.copy(), ldc, c_vec).reshape(n, ldc)
    cm = c.reshape(n, ldc)
    want = _in_fixed_order(w, m) + np.float32(beta) * cm[:, :m]
    # The device may fuse beta * C into the last addition (one rounding fewer).
    np.testing.assert_allclose(got[:, :m], want, rtol=2e-7, atol=0, err_msg=f"seed={seed}")
    np.testing.assert_array_equal(got[:, m:], cm[:, m:], err_msg=f"seed={seed}: padding rows written")


def test_reduction_grid_covers_every_group_and_strides_past_its_cap():
    assert reduce.grid(1, 1) == (1, 1, 1)
    assert reduce.grid(1024, 1) == (1, 1, 1)
    assert reduce.grid(1025, 1) == (2, 1, 1)
    assert reduce.grid(4096, 2**20)[0] == reduce.MAX_CTAS  # the grid-stride loop covers the rest


# --------------------------------------------------------------------------------------------
# split-K through sgemm
# --------------------------------------------------------------------------------------------

@pytest.fixture
def tiny_splits(monkeypatch):
    """Let tiny problems have split candidates: the simulator cannot afford slices of the
    least slice a real call keeps."""
    monkeypatch.setattr(candidates, "MIN_SPLIT_CHUNK", 16)


def _explain(h, case):
    return sgblas.explain(h, case.ta, case.tb, case.m, case.n, case.k, case.dA, case.lda, case.dB, case.ldb,
                          case.dC, case.ldc)


#: (pair, m, n, k, splits): M and N tails, K with a partial last step and slices of unequal
#: length (100 in 48, 48 and 4; 80 in 48 and 32; 72 in 32, 32 and 8; 49 in 32 and 17).
SPLIT_CASES = [
    (("N", "N"), 20, 24, 100, 3),
    (("N", "T"), 36, 70, 80, 2),
    (("T", "N"), 132, 20, 72, 3),
    (("T", "T"), 17, 65, 49, 2),
]

#: alpha = 1.5, beta = 0 (a NaN C, which slice 0 of a serial split must not read) and
#: alpha = -1, beta = 0.5.
ALPHA_BETAS = ((1.5, 0.0), (-1.0, 0.5))

#: Each case with each alpha/beta: the default run takes one of the two per case, alternating
#: along the cases (so each runs on two pairs), the slow set the other.
SPLIT_PARAMS = [pytest.param(*case, ab, marks=() if ab == i % 2 else (pytest.mark.slow,),
                             id="{}-{}-{}-{}-{}-ab{}".format("".join(case[0]), *case[1:], ab))
                for i, case in enumerate(SPLIT_CASES) for ab in range(len(ALPHA_BETAS))]


def _call_and_check(h, case, name: str, ab: int) -> None:
    """``sgemm`` of ``case`` by candidate ``name`` with ``ALPHA_BETAS[ab]``, checked against
    float64 (C poisoned with NaN when beta == 0)."""
    alpha, beta = ALPHA_BETAS[ab]
    before = case.reset_c(nan=beta == 0.0)
    assert sgblas.sgemm(h, *case.args(alpha, beta), candidate=name) == Status.SUCCESS, sgblas.last_error_message()
    case.check(alpha, beta, C_before=before)


@pytest.mark.parametrize("pair, m, n, k, splits, ab", SPLIT_PARAMS)
def test_split_k_calls_every_pair(tiny_splits, pair, m, n, k, splits, ab):
    case = GemmCase(_seed("split", pair, m, n, k), pair[0], pair[1], m, n, k, pad=1, ld_multiple=4)
    spec = SPLIT_SPECS[pair]
    name = f"{spec.name}/s{splits}"
    with sgblas.Handle() as h:
        explanation = _explain(h, case)
        assert name in dict(explanation.candidates), str(explanation)
        plan = plan_named(h, name, *_plan_args(case))
        assert plan.spec is spec and plan.splits == splits and plan.reduce is not None
        assert plan.k_chunk % spec.tile[2] == 0 and (splits - 1) * plan.k_chunk < k <= splits * plan.k_chunk
        _call_and_check(h, case, name, ab)


@pytest.fixture
def tiny_serial(monkeypatch):
    """Serial splits of tiny problems: slices shorter than the least serial slice a real call keeps."""
    monkeypatch.setattr(candidates, "ACCURACY_MIN_CHUNK", 16)


@pytest.mark.parametrize("pair, m, n, k, splits, ab", SPLIT_PARAMS)
def test_serial_split_calls_every_pair(tiny_serial, pair, m, n, k, splits, ab):
    """The slices add into C in turn (``/cS``): right against float64 (with beta == 0 on a NaN
    C: slice 0 reads no C); no reduction launched; the semaphores at the workspace's start are
    zero again after the call, whatever a parallel split left there."""
    case = GemmCase(_seed("serial", pair, m, n, k), pair[0], pair[1], m, n, k, pad=1, ld_multiple=4)
    spec = SPLIT_SPECS[pair]
    name = f"{spec.name}/c{splits}"
    with sgblas.Handle() as h:
        plan = plan_named(h, name, *_plan_args(case))
        assert not isinstance(plan, str), plan
        assert plan.spec is spec and plan.serial and plan.splits == splits and plan.reduce is None
        assert plan.workspace  # its semaphores live there
        tiles = plan.grid[0]
        sem = np.ctypeslib.as_array(ctypes.cast(h.workspace_ptr, ctypes.POINTER(ctypes.c_int32)), shape=(tiles,))
        sem[:] = 7  # as a parallel split's partials may leave it
        _call_and_check(h, case, name, ab)
        assert not sem.any(), sem


def _plan_args(case):
    """``(ta, tb, m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc)`` of ``case``, as the planner takes them."""
    from sgblas.operands import read_operand

    def ptr(x):
        return read_operand(x, "X").ptr

    return (case.ta, case.tb, case.m, case.n, case.k, ptr(case.dA), case.lda, ptr(case.dB), case.ldb,
            ptr(case.dC), case.ldc)


def test_too_little_workspace_takes_a_kernel_that_needs_none(tiny_splits):
    case = GemmCase(_seed("workspace"), "N", "N", 20, 24, 100, ld_multiple=4)
    spec = SPLIT_SPECS[("N", "N")]
    need = splitk.workspace_bytes(case.m, case.n, splitk.MIN_PARTIALS)
    ta, tb, m, n, k, a, lda, b, ldb, c, ldc = _plan_args(case)
    with sgblas.Handle(workspace_bytes=need - 4) as h:
        explanation = _explain(h, case)
        assert not explanation.kernel.startswith("sgemm_splitk_"), str(explanation)
        assert not any(name.startswith("sgemm_splitk_") for name, _ in explanation.candidates)
        reasons = dict(explanation.passed_over)
        assert reasons[spec.name] == (
            f"it needs {need} bytes of workspace for two partials and the handle has {need - 4}"), str(explanation)
        assert plan_for(h, ta, tb, m, n, k, True, a, lda, b, ldb, c, ldc, pin=spec) is None  # nor when pinned
        before = case.reset_c(nan=True)
        assert sgblas.sgemm(h, *case.args(1.0, 0.0)) == Status.SUCCESS
        case.check(1.0, 0.0, C_before=before)

        # Exactly three partials' worth: no candidate of more, and the split pinned within it.
        h.set_workspace(splitk.workspace_bytes(case.m, case.n, 3))
        offered = {name for name, _ in _explain(h, case).candidates if name.startswith(spec.name + "/")}
        assert offered == {f"{spec.name}/s2", f"{spec.name}/s3"}, offered
        why = plan_named(h, f"{spec.name}/s4", ta, tb, m, n, k, a, lda, b, ldb, c, ldc)
        assert isinstance(why, str) and "bytes of workspace" in why, why
        pinned = plan_for(h, ta, tb, m, n, k, True, a, lda, b, ldb, c, ldc, pin=spec)
        assert pinned.spec is spec and 2 <= pinned.splits <= 3
        before = case.reset_c(nan=True)
        assert sgblas.sgemm(h, *case.args(1.0, 0.0)) == Status.SUCCESS
        assert plan_for(h, ta, tb, m, n, k, True, a, lda, b, ldb, c, ldc) is pinned  # the call ran it
        case.check(1.0, 0.0, C_before=before)
        # A workspace set later forgets the old plans, the pinned one too.
        h.set_workspace(0)
        assert not plan_for(h, ta, tb, m, n, k, True, a, lda, b, ldb, c, ldc).spec.name.startswith("sgemm_splitk_")


def test_k_zero_and_alpha_zero_still_take_the_scale_kernel(tiny_splits):
    case = GemmCase(_seed("scale"), "N", "N", 20, 24, 100, ld_multiple=4)
    with sgblas.Handle() as h:
        args = [case.ta, case.tb, case.m, case.n, 0, case.dA, case.lda, case.dB, case.ldb, case.dC, case.ldc]
        assert sgblas.explain(h, *args).kernel == SCALE_KERNEL.name
        before = case.reset_c()
        assert sgblas.sgemm(h, *case.args(0.0, 2.0)) == Status.SUCCESS
        got = case.dC.copy_to_host()
        inside = np.zeros(got.size, bool)
        for j in range(case.n):
            inside[j * case.ldc: j * case.ldc + case.m] = True
        np.testing.assert_array_equal(got[inside], np.float32(2.0) * before[inside])


def test_the_registry_rows():
    assert sorted(SPLIT_SPECS) == sorted(PAIRS)
    rows = [s for s in GEMM_KERNELS if s.role == "splitk"]
    for spec in rows:
        assert spec.launches == 2 and spec.align in (16, 4) and spec.config.split_k
        assert spec.workspace(100, 30, 5000) == 2 * 100 * 30 * 4
        assert spec.abi.name == "gemm_split"
    names = {s.name for s in rows}
    want = {f"sgemm_splitk_{a}{b}_{tile}x16_2s_a16".lower() for a, b in PAIRS for tile in ("128x128", "128x64", "64x64")}
    # The 4-byte class: each pair's 128x128 8 x 8 row, for the tail plans' rectangles, and its
    # 128x64 and 64x64 ones, for narrow products at odd leading dimensions (TN's 64x64 is kq8).
    want |= {f"sgemm_splitk_{a}{b}_{tile}x16_2s_a4".lower() for a, b in PAIRS for tile in ("128x128", "128x64")}
    want |= {f"sgemm_splitk_{a}{b}_64x64x16{'kq8' if a + b == 'TN' else ''}_2s_a4".lower() for a, b in PAIRS}
    # And every 4 x 4 thread-tile row (4-byte class only), for narrow products with a long K.
    want |= {f"sgemm_splitk_{a}{b}_{tile}x16t4x4_2s_a4".lower() for a, b in PAIRS
             for tile in ("32x32", "32x64", "64x32")}
    assert names == want  # one per 16-byte row of the SIMT manifest, and 24 4-byte ones
    slices = splitk.split_manifest(SIMT_MANIFEST)
    assert len(slices) == 36
    # Each change names a slice kernel (a 16-byte one, or a 4 x 4 thread tile's), which takes
    # it; the others are their rows but for split_k.
    keys = {splitk._slice_key(c): c for c in slices}
    assert len(keys) == len(slices) and set(splitk.SLICE_CHANGES) <= set(keys)
    for key, cfg in keys.items():
        row = next(r for r in SIMT_MANIFEST if splitk._slice_key(r) == key and r.kq == cfg.kq)
        assert cfg == dataclasses.replace(row, split_k=True, **splitk.SLICE_CHANGES.get(key, {}))
    red = by_name(reduce.NAME)
    assert red in REGISTRY and red not in GEMM_KERNELS and red.role == "reduce"
    # The general kernels stay last: the backstop.
    assert all(s.name.startswith("sgemm_general_") for s in GEMM_KERNELS[-4:])


def test_a_split_variant_needs_only_a_and_b_aligned():
    """C is never touched by the slice kernel, so C's alignment does not refuse it."""
    from sgblas.enums import MathMode
    from sgblas.kernels.problem import GemmProblem

    base = 0x7F0000000000
    p = GemmProblem((9, 0), MathMode.FP32, "N", "N", 101, 64, 4096, base, 104, base + 2**32, 4096,
                    base + 2**33 + 4, 101)
    assert SPLIT_SPECS[("N", "N")].can_implement(p) is None
    reason = SPLIT_SPECS[("N", "N")].can_implement(p._replace(ldb=4097))
    assert "ldb=4097" in reason


#: The slice kernels besides those that the calls through sgemm run, by name.
OTHER_SLICE_KERNELS = sorted(s.name for s in GEMM_KERNELS if s.role == "splitk" and s not in SPLIT_SPECS.values())


def _one_pair_per_family(names: list[str]) -> list[str]:
    """One kernel of each family (a name less its transpose pair: tile, thread tile, stages,
    alignment), the pairs taken in turn across the families, so that every family and every pair
    runs (a covering array of the two factors, not their product: a family's pairs differ only
    in the operand loads, which the one-tile test runs for every kernel)."""
    families: dict[str, dict[str, str]] = {}
    for name in names:
        pair = re.search(r"_(nn|nt|tn|tt)_", name).group(1)
        families.setdefault(name.replace(f"_{pair}_", "_", 1), {})[pair] = name
    out = []
    for i, family in enumerate(sorted(families)):
        of = families[family]
        want = ("nn", "nt", "tn", "tt")[i % 4]
        out.append(of.get(want) or of[sorted(of)[0]])
    return out


#: The families' kernels that the default run takes at one tile and the slow set at the
#: sanitizer's tail shape; the slow set takes the rest at one tile.
COVERING_SLICE_KERNELS = _one_pair_per_family(OTHER_SLICE_KERNELS)


@pytest.mark.parametrize("name", [name if name in COVERING_SLICE_KERNELS else pytest.param(name, marks=pytest.mark.slow)
                                  for name in OTHER_SLICE_KERNELS])
def test_the_other_slice_kernels_compute_right(name):
    """Each other slice kernel, pinned (as ``tests/sanitizer_cases.py`` pins it) at one CTA
    tile per slice: m and n inside the tile and off the vector width, k the
    sanitizer's tail k (4 steps and 3), cut in two slices of 3 steps (the main loop runs) and
    2 partial ones. The result against float64, beta applied, padding untouched. The grids of
    several tiles are the slow set's (the next test) and the generator's
    (tests/kernels/test_sgemm_simt.py)."""
    import sanitizer_cases

    spec = by_name(name)
    bm, bn, bk = spec.tile
    with sgblas.Handle() as h:
        shape = sanitizer_cases.legal_shape(h, spec, "edge", bm - 5, bn - 3, 4 * bk + 3)
        assert shape is not None, f"{name} refuses every leading-dimension mode at {bm - 5}x{bn - 3}"
        out = sanitizer_cases.run_gemm_case(h, name, *spec.pair, shape, -1.25, 0.75, _seed("edge", name), False)
    assert out.ok, out.line


@pytest.mark.slow
@pytest.mark.parametrize("name", COVERING_SLICE_KERNELS)
def test_the_other_slice_kernels_at_the_sanitizers_tail_shape(name, capsys):
    """The same kernels through the sanitizer script at its tail shape (m, n and k off the
    tile, a grid of several tiles): the result against float64, beta applied, padding untouched.
    One kernel per family (:func:`_one_pair_per_family`); the GPU runs every one of them at this
    shape under each sanitizer tool."""
    import sanitizer_cases

    assert sanitizer_cases.main(["--variant", name, "--kinds", "tail", "--betas", "0.75", "--no-scale"]) == 0
    assert "1 cases, 0 failed" in capsys.readouterr().out


#: A tail plan of few CTAs: 67 x 300 on 1 SM is 3 tiles of 128 x 128 on 2 slots, the whole
#: wave 2 CTAs and one rectangle of 67 x 44 left; k = 40, too short for two slices of the least
#: slice, splits it as a pinned slice kernel does: in two slices (2 steps, and a partial one).
SMALL_TAIL_PLAN, SMALL_TAIL_K = (67, 300, 1), 40


def _tail_plans(shapes, k):
    import sanitizer_cases

    cases, failures, lines = sanitizer_cases.run_tail_plans(["TN"], shapes, [0.75], 0, False, k=k)
    out = "\n".join(lines)
    assert (cases, failures) == (2, 0), out
    assert "sgemm_splitk_tn_128x128x16_2s_a4" in out and "sgemm_splitk_tn_128x128x16_2s_a16" in out, out


def test_a_tail_plan_computes_c_whole():
    """A tail plan under the simulator, run by name: the tile kernel over its whole wave, then
    the rectangle left with its K split, on a handle that sees a device of 1 SM; TN with odd
    leading dimensions (the 4-byte slice kernel) and aligned ones (the 16-byte one), beta
    applied, C's padding untouched (``tests/sanitizer_cases.py``, which the H200 runs under
    every sanitizer tool with both of its shapes and pairs)."""
    _tail_plans([SMALL_TAIL_PLAN], SMALL_TAIL_K)


@pytest.mark.slow
def test_the_sanitizers_first_tail_plan_computes_c_whole():
    """The sanitizer script's first tail plan (300 x 300 on 3 SMs) the same way, with a k that
    the rectangle's pinned split cuts in two slices long enough for the main loop (the script's
    k, which the GPU runs, cuts more slices of the same kernel and took the simulator a minute
    more; three partials are the split-K tests')."""
    import sanitizer_cases
    from sgblas.dispatch.candidates import MIN_SPLIT_CHUNK

    _tail_plans(sanitizer_cases.TAIL_PLANS[:1], 2 * MIN_SPLIT_CHUNK + 9)
