"""``python -m sgblas.selftest``: a correctness sweep of :func:`sgblas.sgemm` on this machine's GPU.

Every transpose pair x shapes with tails x tight and padded leading dimensions x alpha in
{0, 1, -1.5} x beta in {0, 1, 0.5}, against a float64 host reference. Prints the device, one
row per (shape, pair, ld) with the kernel that ran and the worst error relative to the
tolerance, and exits 1 on any failure. Under ``NUMBA_ENABLE_CUDASIM=1`` it runs a reduced sweep.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import numpy as np

from sgblas.reference import as_matrix, compare, reference_gemm

PAIRS = (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T"))
ALPHAS = (0.0, 1.0, -1.5)
BETAS = (0.0, 1.0, 0.5)
GPU_SHAPES = ((1, 1, 1), (7, 5, 3), (64, 64, 64), (127, 129, 65), (128, 128, 128), (129, 127, 257),
              (255, 513, 300), (1000, 1000, 1000), (1024, 512, 2049), (2048, 2048, 512))
SIMULATOR_SHAPES = ((1, 1, 1), (5, 7, 3), (33, 18, 9))


def _stored(trans: str, rows: int, cols: int) -> tuple[int, int]:
    return (rows, cols) if trans == "N" else (cols, rows)


def _buffer(rng, rows, cols, ld, poison=np.nan):
    """A flat column-major buffer with random values in the matrix and ``poison`` in the padding."""
    buf = np.full(max(1, (cols - 1) * ld + rows) if rows and cols else 1, poison, dtype=np.float32)
    for j in range(cols):
        buf[j * ld: j * ld + rows] = rng.standard_normal(rows).astype(np.float32)
    return buf


def run_case(handle, rng, ta, tb, m, n, k, pad, alphas=ALPHAS, betas=BETAS):
    """Run one (shape, pair, padding) over every alpha x beta; returns (kernel, worst, failures)."""
    import sgblas
    from numba import cuda

    a_rows, a_cols = _stored(ta, m, k)
    b_rows, b_cols = _stored(tb, k, n)
    lda, ldb, ldc = a_rows + pad, b_rows + pad, m + pad
    A = _buffer(rng, a_rows, a_cols, lda)
    B = _buffer(rng, b_rows, b_cols, ldb)
    C0 = _buffer(rng, m, n, ldc)
    dA, dB = cuda.to_device(A), cuda.to_device(B)
    kernel = sgblas.explain(handle, ta, tb, m, n, k, dA, lda, dB, ldb, cuda.to_device(C0), ldc).kernel
    worst, failures = 0.0, []
    for alpha, beta in itertools.product(alphas, betas):
        C = C0.copy()
        if beta == 0.0:
            C[:] = np.nan  # beta == 0 must never read C
        dC = cuda.to_device(C)
        status = sgblas.sgemm(handle, ta, tb, m, n, k, alpha, dA, lda, dB, ldb, beta, dC, ldc)
        got = dC.copy_to_host()
        if status != sgblas.Status.SUCCESS:
            failures.append(f"alpha={alpha} beta={beta}: status {status.name}: {sgblas.last_error_message()}")
            continue
        ref, scale = reference_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
        ok, ratio, where = compare(as_matrix(got, m, n, ldc), ref, scale, k)
        padding = np.ones(got.size, bool)
        for j in range(n):
            padding[j * ldc: j * ldc + m] = False
        pad_ok = np.array_equal(np.isnan(got[padding]), np.isnan(C[padding])) and np.array_equal(
            got[padding][~np.isnan(C[padding])], C[padding][~np.isnan(C[padding])])
        worst = max(worst, ratio)
        if not ok:
            failures.append(f"alpha={alpha} beta={beta}: error {ratio:.2f}x tolerance at {where}")
        if not pad_ok:
            failures.append(f"alpha={alpha} beta={beta}: C's padding between columns was written")
    return kernel, worst, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sgblas.selftest", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time-based, printed)")
    parser.add_argument("--quick", action="store_true", help="the reduced sweep, as under the simulator")
    args = parser.parse_args(argv)

    import sgblas
    from sgblas.runtime.device import SIMULATOR, device_count

    if device_count() == 0:
        print("sgblas selftest: no CUDA device is present")
        return 2
    seed = args.seed if args.seed is not None else int(time.time()) % 2**31
    rng = np.random.default_rng(seed)
    handle = sgblas.Handle()
    if SIMULATOR:
        device_name = "CUDA simulator"
    else:
        from numba import cuda

        device_name = cuda.get_current_device().name
        device_name = device_name.decode() if isinstance(device_name, bytes) else device_name
    quick = SIMULATOR or args.quick
    shapes = SIMULATOR_SHAPES if quick else GPU_SHAPES
    pads = (0, 3) if not quick else (0,)
    print(f"sgblas {sgblas.__version__} selftest on {device_name} (cc {handle.cc[0]}.{handle.cc[1]}), seed {seed}")
    print(f"{'m':>5} {'n':>5} {'k':>5} pair pad  {'kernel':<34} worst/tol  result")
    failed = 0
    t0 = time.perf_counter()
    for (m, n, k), (ta, tb), pad in itertools.product(shapes, PAIRS, pads):
        kernel, worst, failures = run_case(handle, rng, ta, tb, m, n, k, pad)
        verdict = "ok" if not failures else "FAIL"
        print(f"{m:>5} {n:>5} {k:>5} {ta}{tb}   {pad:>3}  {kernel or '-':<34} {worst:9.3f}  {verdict}")
        for line in failures:
            print(f"      {line}")
        failed += bool(failures)
    total = len(shapes) * len(PAIRS) * len(pads)
    print(f"{total - failed} passed, {failed} failed ({total} cases x {len(ALPHAS) * len(BETAS)} alpha/beta, "
          f"{time.perf_counter() - t0:.1f} s, seed {seed})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
