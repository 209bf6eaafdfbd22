"""Where the host time of one ``sgblas.sgemm`` call goes: cProfile over 2000 calls at 64^3.

Usage: ``python -m perf.profile_call`` (needs a GPU). Prints the per-call time without the
profiler, then the profile's top entries by own time.
"""

from __future__ import annotations

import cProfile
import pstats
import time

import numpy as np


def main() -> None:
    from numba import cuda

    import sgblas

    n = 64
    h = sgblas.Handle()
    a, b = (cuda.to_device(np.random.rand(n, n).astype(np.float32)) for _ in range(2))
    c = cuda.device_array((n, n), np.float32)

    def loop():
        for _ in range(2000):
            sgblas.sgemm(h, "N", "N", n, n, n, 1.0, a, n, b, n, 0.0, c, n)

    loop()
    cuda.synchronize()
    t0 = time.perf_counter()
    loop()
    t1 = time.perf_counter()
    cuda.synchronize()
    print(f"sgemm, Numba arrays, 64^3: {(t1 - t0) / 2000 * 1e6:.2f} us per call (no profiler)")
    profile = cProfile.Profile()
    profile.runcall(loop)
    cuda.synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
