"""Static checks of the SIMT SGEMM kernels' PTX and SASS, with no GPU (CI).

One representative registry variant per copy strategy of the SIMT generator
(:mod:`sgblas.kernels.sgemm_simt`) is compiled for sm_90 (and the main one for sm_80 too) with
``compile_ptx`` by the session's background compile (``tests/helpers.py``: the test session
may run under the CUDA simulator, which cannot compile); each costs 20-30 s of Numba front
end, so CI compiles no more than these (``helpers.SIMT_TARGETS``):

* ``sgemm_simt_nn_128x128x16_2s_a16``: A by 16-byte ``cp.async`` along m, B by 16-byte loads
  along k stored transposed (the main kernel; also for sm_80);
* ``sgemm_simt_tn_128x128x16_2s_a8``: both operands k-major, 8-byte loads along k, the two
  register-staged copies at the start and the middle of a K step;
* ``sgemm_simt_tt_128x64x16_2s_a4``: A by 4-byte loads along k, B by 4-byte ``cp.async``
  along n.

Each is checked for what the docs claim:

* no local-memory traffic (``ld.local``/``st.local``): accumulators and fragments stay in
  registers;
* no tensor-core or TF32 instruction (``mma``, ``wmma``, ``wgmma``, ``.tf32``) and no
  flush-to-zero: the product is strict FP32 FMA; no 64-bit division and no call;
* global accesses of the alignment class's width: 16-byte ``cp.async`` / ``ld.global.v4`` /
  ``st.global.v4`` in the a16 variant, nothing wider than 8 bytes in the a8 one, nothing wider
  than 4 bytes in the a4 one; ``ld.shared.v4.f32`` fragments everywhere; the k loop unrolled
  (enough FMAs and fragment loads for three copies of the K step: full steps, the one that
  copies the last slice, the last).

When a ``ptxas`` that reads this PTX is installed (the nvidia-cuda-nvcc wheel has one), the
sm_90 SASS is checked too: no spills, registers within the launch bound's cap, no LDL/STL,
no 16-byte global access below a16, and an FFMA share of at least 85% in the K loop.
The memory intrinsics (8- and 4-byte forms too) are checked on a small probe kernel.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from helpers import PTX_NEEDS, assert_waits_for_the_grid_first, child_env, find_ptxas, ptxas_report
from helpers import ptx as ptx_of

CCS = ((9, 0), (8, 0))
TARGETS = {cc: tuple(n for n, c in PTX_NEEDS["test_ptx_static"]() if c == cc) for cc in CCS}

_PROBE_SCRIPT = r"""
import sys
import numpy as np
from numba import cuda, uint32, float32
from sgblas.kernels import memory as mem
from sgblas.kernels.abi import GEMM
wait1 = mem.cp_async_wait_group(1)
def probe(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):
    s = cuda.shared.array(256, float32, alignment=16)
    t = uint32(cuda.threadIdx.x) * uint32(4)
    a0, a1, a2, a3 = mem.ldg4(A, t)
    mem.sts4(s, t, a0, a1, a2, a3)
    mem.cp_async16(s, t + uint32(128), B, np.int64(t), uint32(8))
    mem.cp_async4(s, t + uint32(64), B, np.int64(t), uint32(4))
    mem.cp_async8(s, t + uint32(192), B, np.int64(t), uint32(8))
    mem.cp_async_commit()
    wait1()
    mem.cp_async_wait_all()
    cuda.syncthreads()
    mem.sts1(s, t, mem.ldg1(B, t))
    b0, b1, b2, b3 = mem.lds4(s, t ^ uint32(4))
    mem.stg4(C, t, b0 * alpha, b1, b2, b3)
    c0, c1 = mem.ldg2(C, t + uint32(512))
    mem.stg2(C, t + uint32(1024), c0, c1 * beta)
    mem.stg1(C, t + uint32(2048), c0)
    # the helpers for Numba's front end: their FMAs in registers, a zero-filling copy, a select
    fa = cuda.local.array(4, float32)
    fb = cuda.local.array(16, float32)
    acc = cuda.local.array(16, float32)
    for i in range(16):
        acc[i] = float32(0)
    mem.lds4_into(fa, 0, s, t)
    for h in range(4):
        mem.lds4_into(fb, 4 * h, s, t + uint32(4 * h))
    fma(acc, fa, 0, fb, 0)
    dot(acc, 4, fa, fb)
    axpy(acc, 8, fa, fb, 4)
    mem.cp_async4_if(s, t + uint32(32), B, np.int64(t), t < uint32(k))
    x = mem.select(t < uint32(m), acc[0] + acc[5], acc[15])
    mem.stg1(C, t + uint32(4096), x + acc[10])
    # the guarded loads of a last slice, and a 16-byte vector copied as four 4-byte copies
    kv = uint32(k)
    ok = t < uint32(n)
    v0, v1, v2, v3 = mem.ldg4_tail(B, ok, kv, t, np.int64(t), 4, np.int64(ldb), 1)
    w0, w1 = mem.ldg2_tail(B, ok, kv, t, np.int64(t), 0, 0, 0)
    y = mem.ldg1_tail(B, ok, kv, t, np.int64(t), 8, np.int64(ldb), 2)
    mem.stg4(C, t + uint32(8192), v0 + w0, v1 + w1, v2 + y, v3)
    mem.cp_async4x4(s, np.int64(t) + 16, B, np.int64(t) + 3)
    # the copy blocks: guarded elements of a vector, a last slice's partial vectors, a swizzle
    mem.cp_async4x4_if(t < uint32(m), np.int64(t), np.int64(k), s, 32, np.int64(t), B, np.int64(t), 5)
    e = mem.select(t < uint32(m), uint32(4), uint32(0))
    mem.cp_async4x4_tail(s, np.int64(t), 48, B, np.int64(t), 2, np.int64(ldb), t, 1, kv, e, e, e, e)
    mem.cp_async4x2_tail(s, np.int64(t), 64, B, np.int64(t), 1, np.int64(ldb), t, 3, kv, e, e)
    mem.cp_async4x1_tail(s, np.int64(t), 80, B, np.int64(t), 0, np.int64(ldb), t, 0, kv, e)
    swz(s, t, B, np.int64(t), np.int64(ldb))
fma = mem.fma_block(4, 4, "j", snake=True)
dot = mem.dot_block(4, 4)
axpy = mem.axpy_block(4, 2)
swz = mem.cp_async4_swizzled(4, 2, 8)
ptx, _ = cuda.compile_ptx(probe, GEMM.signature(), cc=(8, 0))
print(ptx)
"""


def _env() -> dict:
    return child_env(NUMBA_ENABLE_CUDASIM="0")


@pytest.fixture(scope="module")
def ptx_by_cc() -> dict:
    """{(variant, cc): (ptx text, info)}, from the session's background compile."""
    from sgblas.kernels.spec import by_name

    result = {}
    for name, cc in PTX_NEEDS["test_ptx_static"]():
        spec = by_name(name)
        cfg = spec.config
        assert spec.launch_bounds == (cfg.THREADS, cfg.min_blocks), spec.launch_bounds
        info = dict(BK=cfg.BK, threads=cfg.THREADS, min_blocks=cfg.min_blocks, align=cfg.align, fmas=cfg.TM * cfg.TN,
                    fragments=(cfg.TM + cfg.TN) // 4)
        result[(name, cc)] = (ptx_of(name, cc), info)
    return result


_CP_ASYNC = re.compile(r"cp\.async\.(\w+)\.shared\.global \[[^\]]+\], \[[^\]]+\], (\d+)")
_GLOBAL_VEC = re.compile(r"\b(ld|st)\.global(?:\.\w+)*\.v([24])\.f32")


@pytest.mark.ptx
@pytest.mark.parametrize("name,cc", [(name, cc) for cc in CCS for name in TARGETS[cc]],
                         ids=lambda x: x if isinstance(x, str) else f"sm_{x[0]}{x[1]}")
def test_ptx_is_strict_fp32_simt_with_vector_memory(ptx_by_cc, name, cc):
    ptx, info = ptx_by_cc[(name, cc)]
    label = f"{name} sm_{cc[0]}{cc[1]}"
    assert f".target sm_{cc[0]}{cc[1]}" in ptx, label
    # Local memory would mean the accumulators or fragments left the registers.
    assert "ld.local" not in ptx and "st.local" not in ptx, label
    # No tensor cores and no TF32 anywhere: the product is plain FP32 FMA.
    assert not re.search(r"\bw?mma\b|\bwgmma|\.tf32", ptx), label
    assert ".ftz" not in ptx, label  # denormals survive (no fastmath)
    # No 64-bit integer division and no calls: ptxas expands div/rem.s64 into calls to a
    # runtime routine, which the separately linked cubin sgblas ships (nvJitLink) keeps as
    # an ABI call with a stack frame in local memory (72 bytes in the 128x64 tile once).
    assert not re.search(r"\b(div|rem)\.[su]64\b", ptx), label
    assert not re.search(r"^\s*call", ptx, re.MULTILINE), label
    # Global accesses as wide as the alignment class allows, and no wider.
    align = info["align"]
    copies = {int(size) for _, size in _CP_ASYNC.findall(ptx)}
    vectors = {(op, 4 * int(width)) for op, width in _GLOBAL_VEC.findall(ptx)}
    assert all(size <= align for size in copies), (label, copies)
    assert all(size <= align for _, size in vectors), (label, vectors)
    if align == 16:
        assert 16 in copies and ("ld", 16) in vectors and ("st", 16) in vectors, (label, copies, vectors)
        assert "cp.async.cg.shared.global" in ptx, label  # 16-byte copies bypass L1
    elif align == 8:
        assert ("ld", 8) in vectors and ("st", 8) in vectors, (label, vectors)
    else:
        assert copies <= {4} and not vectors, (label, copies, vectors)
    for op in ("ld.shared.v4.f32", "st.shared.f32"):
        assert op in ptx, (label, op)
    assert_waits_for_the_grid_first(ptx, cc, label)
    if copies:
        assert "cp.async.wait_all" in ptx and "cp.async.commit_group" in ptx, label
    # Three copies of the K step (full, the one copying the last slice, last), each BK k
    # steps of TM x TN FMAs and (TM + TN) / 4 fragment loads (64 and 4 for an 8 x 8 thread
    # tile): the unrolling NVVM alone would not do.
    bk = info["BK"]
    assert len(re.findall(r"\bfma\.rn\.f32", ptx)) >= 3 * bk * info["fmas"], label
    assert len(re.findall(r"ld\.shared\.v4\.f32", ptx)) >= 3 * bk * info["fragments"], label


def test_memory_intrinsics_emit_their_instructions():
    proc = subprocess.run([sys.executable, "-c", _PROBE_SCRIPT], env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ptx = proc.stdout
    for op in ("ld.global.v4.f32", "st.shared.v4.f32", "ld.shared.v4.f32", "st.global.v4.f32",
               "cp.async.cg.shared.global [%r", "], 16, %r", "cp.async.ca.shared.global [%r",
               "], 4, %r", "cp.async.commit_group;", "cp.async.wait_group 1;",
               "cp.async.wait_all;", "ld.global.f32", "st.shared.f32", "], 8, %r",
               "ld.global.v2.f32", "st.global.v2.f32", "st.global.f32", "fma.rn.f32", "selp."):
        assert op in ptx, op
    assert "ld.local" not in ptx and "st.local" not in ptx
    # the tail loads: a vector when whole, else element by element under predicates (4 + 2 + 1
    # single loads besides the probe's own), and the 4-byte copies: the probe's own two, four
    # of cp_async4x4, and 4 + 4 + 2 + 1 + 4 of the copy blocks, every one a copy of its own
    assert len(re.findall(r"ld\.global\.v4\.f32", ptx)) >= 2, ptx
    assert len(re.findall(r"ld\.global\.v2\.f32", ptx)) >= 2, ptx
    assert len(re.findall(r"ld\.global\.f32", ptx)) >= 8, ptx
    assert len(re.findall(r"cp\.async\.ca\.shared\.global \[[^\]]+\], \[[^\]]+\], 4, %r", ptx)) >= 21, ptx



def _sass_counts(sass: str) -> tuple[Counter, Counter]:
    """(whole-kernel opcode counts, counts in the loop with the most FFMAs: the K loop)."""
    ins = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), re.sub(r"^@!?U?P\w+\s+", "", m.group(2).strip())))
    whole = Counter(t.split()[0] for _, t in ins)
    best: Counter = Counter()
    for addr, txt in ins:
        m = re.search(r"BRA (?:0x([0-9a-f]+))", txt)
        if m and int(m.group(1), 16) < addr:
            start = int(m.group(1), 16)
            body = Counter(t.split()[0].split(".")[0] for a, t in ins if start <= a <= addr)
            if body["FFMA"] > best["FFMA"]:
                best = body
    return whole, best


@pytest.mark.ptx
@pytest.mark.parametrize("name", TARGETS[(9, 0)])
def test_sm90_sass_no_spills_and_ffma_bound_loop(ptx_by_cc, name, tmp_path):
    ptx, info = ptx_by_cc[(name, (9, 0))]
    src = tmp_path / f"{name}.ptx"
    report = ptxas_report(ptx, src)
    cubin = src.with_suffix(".cubin")
    cuobjdump = str(Path(find_ptxas()).with_name("cuobjdump"))
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in report, report
    regs = int(re.search(r"Used (\d+) registers", report).group(1))
    assert regs <= 65536 // (info["threads"] * info["min_blocks"]), (name, regs)
    if not Path(cuobjdump).exists():
        pytest.skip("no cuobjdump beside ptxas")
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    whole, loop = _sass_counts(sass)
    assert whole["LDS.128"] > 0, whole
    assert not any(op.startswith(("LDL", "STL")) for op in whole), whole
    wide = {op for op in whole if op.startswith(("LDG", "STG", "LDGSTS")) and ".128" in op}
    if info["align"] == 16:
        assert wide and whole["STG.E.128"] > 0, whole
    else:
        assert not wide, (name, wide)
    assert loop["FFMA"] == info["fmas"] * info["BK"], loop  # one K step per loop trip, fully unrolled
    assert loop["FFMA"] / sum(loop.values()) >= 0.85, loop
