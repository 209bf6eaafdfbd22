"""Which kernel each case gets, and why the kernels before it refused."""

from __future__ import annotations

import pytest

from sgblas.kernels.problem import GemmProblem
from sgblas.dispatch.table import DISPATCH_TABLE, select, variant_name
from sgblas.enums import MathMode
from sgblas.kernels import general, sgemm_nn_128x64x16, sgemm_nn_128x128x16

H200 = (9, 0)
A100 = (8, 0)
TURING = (7, 5)
ALIGNED = 0x7F0000000000  # 16-byte aligned device-like addresses


def problem(cc=H200, ta="N", tb="N", m=4096, n=4096, k=4096, lda=None, ldb=None, ldc=None,
            a=ALIGNED, b=ALIGNED + 2**32, c=ALIGNED + 2**33, mode=MathMode.FP32):
    lda = lda if lda is not None else (m if ta == "N" else k)
    ldb = ldb if ldb is not None else (k if tb == "N" else n)
    ldc = ldc if ldc is not None else m
    return GemmProblem(cc, mode, ta, tb, m, n, k, a, lda, b, ldb, c, ldc)


def chosen(p):
    s = select(p)
    return variant_name(s.module, p.transa, p.transb), dict(s.refusals)


def test_general_is_last_and_accepts_everything_fp32():
    assert DISPATCH_TABLE[-1] is general
    for ta in "NT":
        for tb in "NT":
            assert general.can_implement(problem(ta=ta, tb=tb, m=1, n=1, k=1, a=4, b=8, c=12)) is None


# (case, expected kernel, {refusing kernel: words its reason must contain})
CASES = [
    ("large aligned NN on sm_90", problem(), "sgemm_nn_128x128x16", {}),
    ("2048^3 NN fills the GPU with 128x128 tiles", problem(m=2048, n=2048, k=2048), "sgemm_nn_128x128x16", {}),
    ("1024^3 NN is too few 128x128 tiles", problem(m=1024, n=1024, k=1024), "sgemm_nn_128x64x16",
     {"sgemm_nn_128x128x16": "fewer than"}),
    ("m, n, k not multiples of 4 with aligned lds", problem(m=1000, n=999, k=77, lda=1000, ldb=80, ldc=1000),
     "sgemm_nn_128x64x16", {"sgemm_nn_128x128x16": "tiles"}),
    ("m not a multiple of 4: A's last vector would pass the buffer", problem(m=1001, n=999, k=77, lda=1004,
     ldb=80, ldc=1004), "sgemm_general_128x64x16_nn",
     {"sgemm_nn_128x128x16": "m=1001 is not a multiple of 4", "sgemm_nn_128x64x16": "m=1001"}),
    ("NN on sm_80", problem(cc=A100), "sgemm_nn_128x128x16", {}),
    ("NN on sm_75 has no cp.async", problem(cc=TURING), "sgemm_general_128x64x16_nn",
     {"sgemm_nn_128x128x16": "sm_75", "sgemm_nn_128x64x16": "sm_75"}),
    ("TN", problem(ta="T"), "sgemm_general_128x64x16_tn",
     {"sgemm_nn_128x128x16": "TN is not NN", "sgemm_nn_128x64x16": "TN is not NN"}),
    ("NT", problem(tb="T"), "sgemm_general_128x64x16_nt", {"sgemm_nn_128x128x16": "NT is not NN"}),
    ("TT", problem(ta="T", tb="T"), "sgemm_general_128x64x16_tt", {"sgemm_nn_128x64x16": "TT is not NN"}),
    ("lda not a multiple of 4", problem(lda=4097), "sgemm_general_128x64x16_nn",
     {"sgemm_nn_128x128x16": "lda=4097", "sgemm_nn_128x64x16": "lda=4097"}),
    ("ldc not a multiple of 4", problem(ldc=4099), "sgemm_general_128x64x16_nn", {"sgemm_nn_128x64x16": "ldc=4099"}),
    ("B misaligned by one float", problem(b=ALIGNED + 4), "sgemm_general_128x64x16_nn",
     {"sgemm_nn_128x128x16": "B's address", "sgemm_nn_128x64x16": "16-byte aligned"}),
]


@pytest.mark.parametrize("label, p, kernel, reasons", CASES, ids=[c[0] for c in CASES])
def test_case(label, p, kernel, reasons):
    name, refusals = chosen(p)
    assert name == kernel, f"{label}: got {name}, refusals {refusals}"
    for refuser, words in reasons.items():
        assert words in refusals[refuser], f"{label}: {refuser} said {refusals[refuser]!r}"


def test_tf32_problem_is_refused_by_every_kernel():
    s = select(problem(mode=MathMode.TF32))
    assert s.module is None and len(s.refusals) == len(DISPATCH_TABLE)
    assert all("TF32" in reason for _, reason in s.refusals)


def test_simulator_skips_the_shape_bucket():
    name, _ = chosen(problem(cc=(0, 0), m=8, n=8, k=8))
    assert name == "sgemm_nn_128x128x16"


def test_every_module_carries_its_guard_and_names():
    for module in DISPATCH_TABLE:
        assert callable(module.can_implement) and module.NAME and module.TRANSPOSE_PAIRS
    assert sgemm_nn_128x128x16.TRANSPOSE_PAIRS == sgemm_nn_128x64x16.TRANSPOSE_PAIRS == (("N", "N"),)
