"""Where the host time of one call goes: cProfile over 2000 calls at 64^3.

Usage: ``python -m perf.profile_call [--top N]`` (needs a GPU). For ``sgemm`` on Numba arrays
and ``gemm`` on CuPy arrays and PyTorch tensors (when installed), each on a handle of its
library's stream and, for gemm, also without a handle (the library's current stream), prints
the per-call time without the profiler, then the profile's top entries by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from typing import Callable

import numpy as np

CALLS = 2000


def _measure(label: str, call: Callable[[], object], sync: Callable[[], None], top: int) -> None:
    def loop():
        for _ in range(CALLS):
            call()

    loop()
    sync()
    t0 = time.perf_counter()
    loop()
    t1 = time.perf_counter()
    sync()
    print(f"{label}: {(t1 - t0) / CALLS * 1e6:.2f} us per call (no profiler)", flush=True)
    if top:
        profile = cProfile.Profile()
        profile.runcall(loop)
        sync()
        pstats.Stats(profile).sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m perf.profile_call", description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=14, help="profile entries to print (0: timings only)")
    args = parser.parse_args()
    from numba import cuda

    import sgblas

    n = 64
    h = sgblas.Handle(stream=cuda.stream())
    a, b = (cuda.to_device(np.random.rand(n, n).astype(np.float32)) for _ in range(2))
    c = cuda.device_array((n, n), np.float32)
    _measure("sgemm, Numba arrays", lambda: sgblas.sgemm(h, "N", "N", n, n, n, 1.0, a, n, b, n, 0.0, c, n),
             cuda.synchronize, args.top)
    try:
        import cupy as cp
    except ImportError:
        cp = None
    if cp is not None:
        s = cp.cuda.Stream(non_blocking=True)
        hc = sgblas.Handle(stream=s)
        x, y = (cp.asarray(np.random.rand(n, n), dtype=cp.float32, order="F") for _ in range(2))
        z = cp.empty((n, n), cp.float32, order="F")
        _measure("gemm, CuPy arrays, handle", lambda: sgblas.gemm(x, y, z, handle=hc), s.synchronize, args.top)
        with s:
            _measure("gemm, CuPy arrays, current stream", lambda: sgblas.gemm(x, y, z), s.synchronize, args.top)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        ts = torch.cuda.Stream()
        ht = sgblas.Handle(stream=ts)
        x, y = (torch.rand(n, n, device="cuda") for _ in range(2))
        z = torch.empty(n, n, device="cuda")
        _measure("gemm, PyTorch tensors, handle", lambda: sgblas.gemm(x, y, z, handle=ht), ts.synchronize, args.top)
        with torch.cuda.stream(ts):
            _measure("gemm, PyTorch tensors, current stream", lambda: sgblas.gemm(x, y, z), ts.synchronize,
                     args.top)


if __name__ == "__main__":
    main()
