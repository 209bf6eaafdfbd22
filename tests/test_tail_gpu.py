"""Tail plans on a GPU: the real device, at real sizes.

Shapes whose 128 x 128 tiles take a few CTAs more than whole waves of the device's slots run
the tile kernel over the whole waves and the rest of C, one or two rectangles, each run as the
cost model chooses for it. Each tail plan is run by name (``candidate=".../tail"``), whatever
the cost model would choose for the whole problem, and ``explain`` lists it among the
candidates. For every transpose pair and both alignment classes (16-byte: leading dimensions
multiples of 4; 4-byte: odd ones), with alpha and beta, C poisoned with NaN when beta is 0: the
result against float64, the bits the same run to run, and the plan's rectangles as many as the
shape leaves. The shapes are derived from the device's SM count, so they are tail plans on any
GPU that holds two 128 x 128 CTAs a SM.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import sgblas
from sgblas import Status
from sgblas.dispatch import waves
from sgblas.dispatch.plan import plan_named
from sgblas.testing import GemmCase

pytestmark = pytest.mark.gpu

PAIRS = ("NN", "NT", "TN", "TT")
#: (leading-dimension padding, multiple): 16-byte class, then 4-byte class.
CLASSES = {"a16": (4, 4), "a4": (3, 1)}
#: The shapes taken: the tiles' whole waves less than this full (the last wave mostly idle,
#: where splitting its tiles' K pays: docs/tuning.md, run T).
WAVES_BELOW = 0.94


def _shapes(sm_count: int) -> list[tuple[int, int, int, int]]:
    """(m, n, k, rectangles) of the first square sizes whose tail plan leaves one rectangle and
    two, on ``sm_count`` SMs of two 128 x 128 CTAs each."""
    slots = 2 * sm_count
    found: dict[int, tuple[int, int, int, int]] = {}
    for side in range(16, 80):
        m = side * 128 - 44  # every tile column and row but the last full
        tiles = side * side
        tail = waves.tail_of(m, m, 128, 128, 8, slots)
        if tail is None or tiles / (-(-tiles // slots) * slots) >= WAVES_BELOW:
            continue
        found.setdefault(len(tail.rects), (m, m, 600 + 100 * len(found), len(tail.rects)))
        if len(found) == 2:
            break
    return [found[r] for r in sorted(found)]


def _explain(h, case):
    return sgblas.explain(h, case.ta, case.tb, case.m, case.n, case.k, case.dA, case.lda, case.dB, case.ldb,
                          case.dC, case.ldc)


@pytest.fixture(scope="module")
def handle():
    with sgblas.Handle() as h:
        yield h


@pytest.mark.parametrize("align", CLASSES)
@pytest.mark.parametrize("pair", PAIRS)
def test_tail_plans_are_right_and_deterministic(handle, pair, align):
    shapes = _shapes(handle.properties.sm_count)
    assert shapes, f"no tail-plan shape found for {handle.properties.sm_count} SMs"
    pad, multiple = CLASSES[align]
    for i, (m, n, k, rects) in enumerate(shapes):
        case = GemmCase(2026 + i, pair[0], pair[1], m, n, k, pad=pad, ld_multiple=multiple)
        explanation = _explain(handle, case)
        want = "a16" if align == "a16" else "a4"
        name = f"sgemm_simt_{pair.lower()}_128x128x16_2s_{want}/tail"
        assert name in dict(explanation.candidates), str(explanation)
        ptrs = [x.device_ctypes_pointer.value for x in (case.dA, case.dB, case.dC)]
        plan = plan_named(handle, name, case.ta, case.tb, m, n, k, ptrs[0], case.lda, ptrs[1], case.ldb, ptrs[2],
                          case.ldc)
        assert not isinstance(plan, str), plan
        assert len(plan.tail) == rects, [(rows, cols, sub.spec.name) for sub, rows, cols, *_ in plan.tail]
        for alpha, beta in ((1.5, 0.0), (-1.0, 0.5)):
            before = case.reset_c(nan=beta == 0.0)
            status = sgblas.sgemm(handle, *case.args(alpha, beta), candidate=name)
            assert status == Status.SUCCESS, sgblas.last_error_message()
            cuda.synchronize()
            case.check(alpha, beta, C_before=before)
            first = case.dC.copy_to_host()
            case.reset_c(nan=beta == 0.0)
            assert sgblas.sgemm(handle, *case.args(alpha, beta), candidate=name) == Status.SUCCESS
            cuda.synchronize()
            assert np.array_equal(case.dC.copy_to_host(), first, equal_nan=True), f"{case.label}: bits differ"
