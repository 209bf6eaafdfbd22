"""Every kernel variant sgblas can launch, through the public API, for NVIDIA Compute Sanitizer.

Run it under each tool (docs/reliability.md has the exact commands)::

    compute-sanitizer --tool memcheck --error-exitcode 99 --report-api-errors no python tests/sanitizer_cases.py
    compute-sanitizer --tool racecheck --error-exitcode 99 --report-api-errors no python tests/sanitizer_cases.py
    compute-sanitizer --tool initcheck --error-exitcode 99 --report-api-errors no python tests/sanitizer_cases.py --uninitialised-c
    compute-sanitizer --tool synccheck --error-exitcode 99 --report-api-errors no python tests/sanitizer_cases.py

For every GEMM variant of the registry (``sgblas.kernels.spec.GEMM_KERNELS``) the script finds
the smallest shapes of each kind that the variant can run (its legality), pins the variant for
each one's shape class (``sgblas.dispatch.plan.plan_for(..., pin=)``: whatever the cost model
would choose) and runs them through :func:`sgblas.sgemm`, confirming that the call ran the
pinned plan:

* ``tile``: m, n, k whole multiples of the variant's CTA tile (k four K slices);
* ``tail``: m, n, k each past a multiple of the tile (partial tiles everywhere, k several slices);
* ``short_k``: k below one K slice, with m and n tails;
* ``serial`` (split-K slice kernels only): the tail shape's m and n, k = :data:`SERIAL_K` in
  :data:`SERIAL_SLICES` slices that add into C in turn, run by name (``VARIANT/cS``);

each with beta = 0 (C poisoned with NaN, or left uninitialised with ``--uninitialised-c`` so
that initcheck proves C is never read) and beta = 0.75; plus the C = beta * C kernel for
k == 0 and for alpha == 0, at a tile-multiple and a tail shape. Every buffer is allocated at
exactly the size the matrix needs (``(cols - 1) * ld + rows`` elements), so an access past
the matrix is an access past the allocation, which memcheck reports. A and B padding rows hold
NaN and C's a fixed bit pattern, so reading or writing them shows in the results.

Each case is compared with a float64 reference (:mod:`sgblas.testing`). Exit status: 0 when
every case is right and every variant was reached; 1 when a result is wrong or a call fails;
2 when some variant could not be reached with the candidate shapes (nothing wrong was seen,
but the run did not cover it). Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) it runs
the same cases, slowly; ``--kinds``/``--variant``/``--betas`` select a subset.

This file is a script, not collected by pytest (its name does not start with ``test_``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any, Iterable, Iterator, NamedTuple

import numpy as np

KINDS = ("tile", "tail", "short_k", "serial")
#: The serial kind's k and slices: three slices of whole K steps (144, 144, 133), the last with
#: a partial step, none shorter than the least serial slice.
SERIAL_K, SERIAL_SLICES = 421, 3
#: (tile multiples along m, along n), smallest first; the search stops at the first accepted.
LADDER = ((1, 1), (2, 1), (2, 2), (4, 2), (4, 4), (8, 4), (8, 8), (16, 8), (16, 16))
LD_MODES = ("aligned", "odd", "minimal")
FAKE_PTR = 1 << 20  # 16-byte aligned pointer stand-ins for the shape search


class Shape(NamedTuple):
    kind: str
    m: int
    n: int
    k: int
    ld_mode: str


class Outcome(NamedTuple):
    ok: bool
    line: str




def leading_dimension(rows: int, mode: str) -> int:
    """``aligned``: a multiple of 4 above rows (padding present); ``odd``: an odd number above
    rows (16-byte vector guards refuse it); ``minimal``: rows itself."""
    if mode == "aligned":
        return -(-(rows + 1) // 4) * 4
    if mode == "odd":
        return rows + 1 if (rows + 1) % 2 else rows + 2
    return max(1, rows)


def _stored(trans: str, rows: int, cols: int) -> tuple[int, int]:
    return (rows, cols) if trans == "N" else (cols, rows)


def candidate_shapes(spec: Any, kind: str) -> Iterable[tuple[int, int, int]]:
    bm, bn, bk = spec.tile
    # A skinny variant's small dimension stays within its bound (its tile's side there):
    # the whole side for tile shapes, an odd part of it otherwise.
    small = spec.config.small if spec.role == "skinny" else None
    for a, b in LADDER:
        if kind == "tile":
            m, n, k = bm * a, bn * b, 4 * bk
        elif kind == "serial":
            m, n, k = bm * a + 3, bn * b + 3, SERIAL_K
        elif kind == "tail":
            # m, n and k past a tile, m odd: the 16-byte classes copy A's last partial vector
            # element by element (the predicated tail), which is what memcheck must see
            m, n, k = bm * a + 3, bn * b + 3, 4 * bk + 3
        else:
            m, n, k = bm * a + 4, bn * b + 1, max(1, bk // 2 - 1)
        if small == "m":
            m = bm if kind == "tile" else bm - 3
        elif small == "n":
            n = bn if kind == "tile" else bn - 3
        yield m, n, k


def legal_shape(handle, spec: Any, kind: str, m: int, n: int, k: int) -> Shape | None:
    """``m x n x k`` with the first leading-dimension mode that ``spec`` can run, or None."""
    from sgblas.kernels.problem import GemmProblem

    ta, tb = spec.pair
    # A packed variant, and a skinny row of a narrower class than 16 bytes, exists for arrays the
    # 16-byte kernels refuse: odd leading dimensions first.
    odd_first = spec.role == "packed" or (spec.role == "skinny" and spec.align < 16)
    modes = ("odd",) + tuple(m for m in LD_MODES if m != "odd") if odd_first else LD_MODES
    for mode in modes:
        lda = leading_dimension(_stored(ta, m, k)[0], mode)
        ldb = leading_dimension(_stored(tb, k, n)[0], mode)
        ldc = leading_dimension(m, mode)
        problem = GemmProblem(handle.cc, handle.math_mode, ta, tb, m, n, k,
                              FAKE_PTR, lda, 2 * FAKE_PTR, ldb, 3 * FAKE_PTR, ldc)
        if spec.can_implement(problem) is None:
            return Shape(kind, m, n, k, mode)
    return None


def find_shape(handle, spec: Any, kind: str) -> Shape | None:
    """The smallest candidate that ``spec`` can run (its legality; the run pins the variant)."""
    for m, n, k in candidate_shapes(spec, kind):
        shape = legal_shape(handle, spec, kind, m, n, k)
        if shape is not None:
            return shape
    return None


def run_gemm_case(handle, expected_kernel: str | None, ta: str, tb: str, shape: Shape, alpha: float,
                  beta: float, seed: int, uninitialised_c: bool, want_tail: bool = False,
                  candidate: str | None = None) -> Outcome:
    """One call through sgemm, checked against the float64 reference (:mod:`sgblas.testing`).

    ``expected_kernel`` is pinned for the call's shape class (``plan_for(..., pin=)``), so the
    call takes the ordinary path with that variant, whatever the cost model would choose;
    ``candidate`` instead runs that candidate plan by name (``sgemm(..., candidate=)``).

    Every buffer ends at its matrix's last element, so an access past the matrix is an access
    past the allocation; A's and B's padding is NaN, C's the bits ``C_PAD_BITS``.
    """
    from numba import cuda

    import sgblas
    from sgblas.testing import (C_PAD_BITS, as_matrix, column_major, compare, judge_gemm, poison, reference_gemm,
                                stored_shape)

    rng = np.random.default_rng(seed)
    m, n, k = shape.m, shape.n, shape.k
    a_rows, a_cols = stored_shape(ta, m, k)
    b_rows, b_cols = stored_shape(tb, k, n)
    lda = leading_dimension(a_rows, shape.ld_mode)
    ldb = leading_dimension(b_rows, shape.ld_mode)
    ldc = leading_dimension(m, shape.ld_mode)
    A = column_major(rng, a_rows, a_cols, lda)  # (k == 0: a one-element stand-in)
    B = column_major(rng, b_rows, b_cols, ldb)
    C = column_major(rng, m, n, ldc, pad_bits=C_PAD_BITS)
    blank_c = uninitialised_c and beta == 0.0 and alpha != 0.0 and k > 0
    if beta == 0.0:
        poison(C, m, n, ldc)  # must not be read
    dA, dB = cuda.to_device(A), cuda.to_device(B)
    dC = cuda.device_array(C.size, np.float32) if blank_c else cuda.to_device(C)
    label = (f"{ta}{tb} {shape.kind:<7} m={m} n={n} k={k} lda={lda} ldb={ldb} ldc={ldc} "
             f"alpha={alpha} beta={beta} seed={seed}")
    from sgblas.dispatch.plan import plan_for, plan_named
    from sgblas.kernels.spec import by_name

    def plan(pin: bool):
        ptrs = [x.device_ctypes_pointer.value if hasattr(x, "device_ctypes_pointer") else x._ary.ctypes.data
                for x in (dA, dB, dC)]
        reads = k != 0 and alpha != 0.0
        if candidate is not None and reads:
            return plan_named(handle, candidate, ta, tb, m, n, k, ptrs[0], lda, ptrs[1], ldb, ptrs[2], ldc)
        return plan_for(handle, ta, tb, m, n, k, reads, ptrs[0] if reads else 0, lda, ptrs[1] if reads else 0, ldb,
                        ptrs[2], ldc, pin=by_name(expected_kernel) if pin and expected_kernel and reads else None)

    planned = plan(True)
    if isinstance(planned, str):  # a candidate that cannot run the shape: the sentence says why
        return Outcome(False, f"FAIL {label}: {planned}")
    ran = planned.spec.name
    if expected_kernel is not None and ran != expected_kernel:
        return Outcome(False, f"FAIL {label}: the plan runs {ran}, not {expected_kernel}")
    if want_tail:
        if not planned.tail:
            return Outcome(False, f"FAIL {label}: {ran} runs it without a tail plan")
        ran += " + " + " + ".join(f"{sub.spec.name} x{sub.splits}" for sub, *_ in planned.tail)
        label += f" ({planned.grid[0]} CTAs, then {len(planned.tail)} rectangles)"
    t0 = time.perf_counter()
    status = sgblas.sgemm(handle, ta, tb, m, n, k, alpha, dA, lda, dB, ldb, beta, dC, ldc, candidate=candidate)
    if plan(False) is not planned:
        return Outcome(False, f"FAIL {label}: the call ran another plan than {ran}")
    if status != sgblas.Status.SUCCESS:
        return Outcome(False, f"FAIL {label}: status {status.name}: {sgblas.last_error_message()}")
    if blank_c:  # read only what the kernel wrote: the m x n elements, column by column
        got = np.empty(C.size, np.float32)
        for j in range(n):
            got[j * ldc: j * ldc + m] = dC[j * ldc: j * ldc + m].copy_to_host()
    else:
        got = dC.copy_to_host()
    seconds = time.perf_counter() - t0
    ref = reference_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
    if blank_c:  # the padding was never initialised, so only the matrix is judged
        ok, ratio, where = compare(as_matrix(got, m, n, ldc), ref.value, ref.scale, k)
        error = None if ok else f"error {ratio:.3g}x tolerance at {where}"
    else:
        ratio, error = judge_gemm(got, ref)
    if error is not None:
        return Outcome(False, f"FAIL {label} [{ran}]: {error}")
    return Outcome(True, f"ok   {label} [{ran}] worst {ratio:.3f} of tolerance, {seconds:.3f} s")


#: Tail plans at small sizes: (m, n, SMs of the notional device that makes them tail plans).
#: 300 x 300 on 3 SMs: 9 tiles of 128 x 128 on 6 slots, the whole wave 6 CTAs and one
#: rectangle of 3 tiles left; 1100 x 300 on 9 SMs: 27 tiles on 18 slots, the whole wave 16 CTAs
#: and two rectangles (the rest of the first group's columns, and the rows below the group).
TAIL_PLANS = ((300, 300, 3), (1100, 300, 9))
#: The tail plans' k: long enough for the rectangles to split in several slices of the least
#: slice (:data:`sgblas.dispatch.candidates.MIN_SPLIT_CHUNK`), with room to spare.
TAIL_PLAN_K = 600


def tail_variant(pair: str, mode: str) -> str:
    """The tile variant a tail plan of ``pair`` runs by name: the 128 x 128 row with 8 x 8
    thread tiles of the 16-byte class for "aligned" leading dimensions, of the 4-byte class
    (4 lanes a k-major column) for "odd" ones."""
    return f"sgemm_simt_{pair.lower()}_128x128x16_2s_a{16 if mode == 'aligned' else 4}"


@contextlib.contextmanager
def split_rectangles() -> Iterator[None]:
    """While it lasts, a tail plan's rectangles run their pair's 128 x 128 slice kernel (8 x 8
    thread tiles) of the widest alignment class the rectangle allows, K split as when that
    variant is pinned (:func:`sgblas.dispatch.plan.pinned_split`), whatever the cost model would
    choose for them: so that the tail plans reach the split rectangles (partials in the
    workspace, the reduction into C's rectangle) and only the kernels :func:`_load_only` loads."""
    from sgblas.dispatch import plan as planning
    from sgblas.kernels.spec import GEMM_KERNELS

    real = planning.choose

    def choose(p, props, workspace_bytes, quick=False, rectangle=False):
        choice = real(p, props, workspace_bytes, quick, rectangle)
        if not rectangle:
            return choice
        slices = sorted((s for s in GEMM_KERNELS if s.role == "splitk" and s.pair == (p.transa, p.transb)
                         and s.tile[:2] == (128, 128) and (s.config.TM, s.config.TN) == (8, 8)),
                        key=lambda s: -s.align)
        for spec in slices:
            if spec.can_implement(p) is None:
                split = planning.pinned_split(spec, p, props, workspace_bytes)
                if split is not None:
                    return choice._replace(spec=spec, split=split, candidate=f"{spec.name}/s{split.splits}")
        return choice

    planning.choose = choose
    try:
        yield
    finally:
        planning.choose = real


def run_tail_plans(pairs: Iterable[str], shapes: Iterable[tuple[int, int, int]], betas: Iterable[float],
                   seed: int, uninitialised_c: bool, k: int | None = None) -> tuple[int, int, list[str]]:
    """Tail plans of every pair in ``pairs`` and both alignment classes ("aligned" and "odd"
    leading dimensions), run by name (:func:`tail_variant`, ``candidate=".../tail"``) through
    ``sgemm`` on a handle that sees a device with few SMs, so that small shapes have them, each
    rectangle with its K split (:func:`split_rectangles`); k (default :data:`TAIL_PLAN_K`) is
    the same for every case. Returns (cases, failures, lines)."""
    import sgblas
    from sgblas.dispatch import plan as planning

    k = TAIL_PLAN_K if k is None else k
    cases = failures = 0
    lines = []
    handle = sgblas.Handle()
    real = handle.properties
    try:
        with split_rectangles():
            for m, n, sms in shapes:
                planning.forget_plans()  # the memo is shared by device, not by the properties set here
                handle.properties = real._replace(sm_count=sms)
                for pair in pairs:
                    for mode in ("aligned", "odd"):
                        for beta in betas:
                            seed += 1
                            out = run_gemm_case(handle, None, pair[0], pair[1], Shape("plan", m, n, k, mode),
                                                -1.25, beta, seed, uninitialised_c, want_tail=True,
                                                candidate=tail_variant(pair, mode) + "/tail")
                            cases += 1
                            failures += not out.ok
                            lines.append(f"{'tail plan':<36} {out.line}")
    finally:
        handle.properties = real
        planning.forget_plans()
        handle.close()
    return cases, failures, lines


def gemm_variants() -> list[Any]:
    """Every GEMM variant of the registry (KernelSpec)."""
    from sgblas.kernels.spec import GEMM_KERNELS

    return list(GEMM_KERNELS)


def _fill_the_bindings_table_first() -> None:
    """Let ``cuda.bindings`` look up its driver entry points before anything calls ``cuInit``.

    Numba drives the GPU through ``cuda.bindings``, which asks ``cuGetProcAddress_v2`` for every
    symbol of its release; those newer than the driver fail, harmlessly. Asked after ``cuInit``
    (sgblas's set-up calls it), the sanitizer sees and counts each failure; asked before, it
    does not (docs/reliability.md, "Why memcheck counts failed cuGetProcAddress_v2 calls").
    ``cuDriverGetVersion`` needs no ``cuInit`` and fills the table. Then memcheck can run with
    API-error reporting at its default, which also checks sgblas's own driver calls.
    """
    import os

    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return
    try:
        from cuda.bindings import driver
    except ImportError:  # older numba-cuda stacks without cuda.bindings make no such lookups
        return
    driver.cuDriverGetVersion()


def _load_only(*words: str) -> None:
    """Load only the variants whose name holds one of ``words``, and the scale, reduction and packing
    kernels that their plans may launch, before the handle is made (it then finds them loaded).
    Under racecheck, initcheck and synccheck each module takes seconds to load, and loading all
    of the registry took longer than a tool's whole run was given (docs/reliability.md)."""
    from sgblas.kernels import pack, reduce
    from sgblas.kernels.spec import REGISTRY, SCALE_KERNEL
    from sgblas.runtime import loader
    from sgblas.runtime.device import current_device

    keep = {SCALE_KERNEL.name, reduce.NAME, pack.NAME}
    loader.load_device(current_device(), [s for s in REGISTRY if any(w in s.name for w in words) or s.name in keep])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of " + ", ".join(KINDS))
    parser.add_argument("--betas", default="0,0.75", help="comma-separated beta values (default 0,0.75)")
    parser.add_argument("--variant", default="",
                        help="only variants whose name contains this (or one of these, comma-separated)")
    parser.add_argument("--no-scale", action="store_true", help="skip the C = beta * C kernel cases")
    parser.add_argument("--uninitialised-c", action="store_true",
                        help="with beta == 0, leave C uninitialised (for initcheck: proves C is not read)")
    parser.add_argument("--list", action="store_true", help="print the chosen shapes and exit")
    parser.add_argument("--tail-plans", default="", metavar="PAIRS",
                        help="also run tail plans of these pairs (comma-separated, e.g. NN,TN) on a handle that "
                             "sees a device with few SMs; with --variant none, only those")
    parser.add_argument("--tail-shapes", type=int, default=len(TAIL_PLANS), metavar="N",
                        help=f"the first N of the tail plans' shapes (default all {len(TAIL_PLANS)})")
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    betas = [float(b) for b in args.betas.split(",") if b]
    if not set(kinds) <= set(KINDS):
        parser.error(f"--kinds must be a subset of {KINDS}")

    _fill_the_bindings_table_first()
    import sgblas
    from sgblas.runtime.device import SIMULATOR

    tail_pairs = [p.strip().upper() for p in args.tail_plans.split(",") if p.strip()]
    words = [w for w in args.variant.split(",") if w] or [""]
    if args.variant and not SIMULATOR:
        # A tail plan runs each pair's 128x128 tile kernel and slice kernel, 16- and 4-byte.
        _load_only(*words, *(f"_{p.lower()}_128x128x16_2s_a" for p in tail_pairs))
    handle = sgblas.Handle()
    print(f"sgblas {sgblas.__version__}, device {handle.device} cc {handle.cc}"
          f"{' (CUDA simulator)' if SIMULATOR else ''}", flush=True)
    failures = 0
    unreached: list[str] = []
    cases = 0
    seed = 0
    for spec in gemm_variants():
        name, pair = spec.name, spec.pair
        if not any(w in name for w in words):
            continue
        for kind in kinds:
            if kind == "serial" and spec.role != "splitk":
                continue  # only the slice kernels add their slices into C in turn
            shape = find_shape(handle, spec, kind)
            if shape is None:
                unreached.append(f"{name} ({kind})")
                print(f"MISS {name}: no candidate {kind} shape is dispatched to it", flush=True)
                continue
            expected = name
            if args.list:
                print(f"{name:<36} {shape}")
                continue
            named = f"{name}/c{SERIAL_SLICES}" if kind == "serial" else None
            for beta in betas:
                seed += 1
                out = run_gemm_case(handle, expected, *pair, shape, -1.25, beta, seed, args.uninitialised_c,
                                    candidate=named)
                cases += 1
                failures += not out.ok
                print(f"{name:<36} {out.line}", flush=True)

    from sgblas.kernels.spec import SCALE_KERNEL

    if not args.no_scale and not args.list and any(w in SCALE_KERNEL.name for w in words):
        bm, bn, _ = SCALE_KERNEL.tile
        for kind, (m, n) in (("tile", (4 * bm, 4 * bn)), ("tail", (4 * bm + 5, 3 * bn + 3))):
            if kind not in kinds:
                continue
            for beta in betas:
                for k, alpha in ((0, -1.25), (7, 0.0)):  # k == 0, then alpha == 0
                    seed += 1
                    shape = Shape(kind, m, n, k, "aligned")
                    out = run_gemm_case(handle, SCALE_KERNEL.name, "N", "T", shape, alpha, beta, seed,
                                        args.uninitialised_c)
                    cases += 1
                    failures += not out.ok
                    print(f"{SCALE_KERNEL.name:<36} {out.line}", flush=True)

    if args.tail_plans and not args.list:
        n_cases, n_failed, lines = run_tail_plans(tail_pairs, TAIL_PLANS[:args.tail_shapes], betas,
                                                  seed, args.uninitialised_c)
        cases += n_cases
        failures += n_failed
        print("\n".join(lines), flush=True)
    if args.list:
        return 2 if unreached else 0
    print(f"{cases} cases, {failures} failed, {len(unreached)} variant/shape kinds not reached"
          + (f": {', '.join(unreached)}" if unreached else ""), flush=True)
    if failures:
        return 1
    return 2 if unreached else 0


if __name__ == "__main__":
    import importlib.util

    if importlib.util.find_spec("sgblas") is None:  # a checkout, not installed: use its root
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
